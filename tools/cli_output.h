// What stepjit's tools and examples print their results with: one JSON value
// per line of stdout or CSV rows, and the median of timings.
#ifndef STEPJIT_TOOLS_CLI_OUTPUT_H_
#define STEPJIT_TOOLS_CLI_OUTPUT_H_

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace stepjit::tools {

// One JSON value on a line of stdout (through stdio, like table rows).
inline void PrintJsonLine(const llvm::json::Value& v) {
  std::string line;
  llvm::raw_string_ostream os(line);
  os << v << "\n";
  std::fputs(os.str().c_str(), stdout);
}

// One CSV field (RFC 4180): in double quotes, quotes doubled, when it holds
// a comma, a quote or a line break.
inline std::string CsvField(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) {
    return std::string(text);
  }
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// One line of CSV on stdout.
inline void PrintCsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ',';
    line += CsvField(fields[i]);
  }
  line += '\n';
  std::fputs(line.c_str(), stdout);
}

// The CSV row of `object` under `columns`, the same fields --json prints:
// a string as it is, an integer in decimal, a double in its shortest
// round-trip form, a missing key or null as an empty field.
inline void PrintCsvRow(const llvm::json::Object& object,
                        const std::vector<std::string>& columns) {
  std::vector<std::string> fields;
  for (const std::string& column : columns) {
    const llvm::json::Value* v = object.get(column);
    std::string field;
    if (v == nullptr) {
      // stays empty
    } else if (auto s = v->getAsString()) {
      field = s->str();
    } else if (auto i = v->getAsInteger()) {
      field = std::to_string(*i);
    } else if (auto d = v->getAsNumber()) {
      char buf[64];
      field.assign(buf, std::to_chars(buf, buf + sizeof buf, *d).ptr);
    } else if (auto b = v->getAsBoolean()) {
      field = *b ? "true" : "false";
    }
    fields.push_back(std::move(field));
  }
  PrintCsvLine(fields);
}

// The median of `v` (the upper middle value for an even count; 0 when
// empty).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + v.size() / 2;
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace stepjit::tools

#endif  // STEPJIT_TOOLS_CLI_OUTPUT_H_
