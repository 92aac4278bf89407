// What stepjit's tools and examples print their results with: one JSON value
// per line of stdout, and the median of timings.
#ifndef STEPJIT_TOOLS_CLI_OUTPUT_H_
#define STEPJIT_TOOLS_CLI_OUTPUT_H_

#include <algorithm>
#include <cstdio>
#include <string>
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
