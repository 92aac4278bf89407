// Reads a Chrome trace file written by the profiler (runtime/profiler.h)
// back with llvm::json, and checks how its spans nest.
#ifndef STEPJIT_TESTS_UTIL_TRACE_CHECK_H_
#define STEPJIT_TESTS_UTIL_TRACE_CHECK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "llvm/Support/JSON.h"

namespace stepjit::test {

// One "X" event of the file; times in integer nanoseconds (the file holds
// microseconds with three decimals).
struct Span {
  std::string name, cat, shape;
  int64_t begin = 0, end = 0;
  int64_t tid = 0;
  double flops = 0, bytes = 0;
  bool counted = false;
  bool Contains(const Span& o) const {
    return o.tid == tid && begin <= o.begin && o.end <= end;
  }
};

struct ParsedTrace {
  std::string error;  // empty when the file parsed
  std::vector<Span> spans;
  std::map<int64_t, std::string> track_names;
};

inline ParsedTrace ReadTrace(const std::string& path) {
  ParsedTrace out;
  std::ifstream in(path);
  if (!in) {
    out.error = "cannot open " + path;
    return out;
  }
  std::stringstream text;
  text << in.rdbuf();
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(text.str());
  if (!v) {
    out.error = llvm::toString(v.takeError());
    return out;
  }
  const llvm::json::Object* root = v->getAsObject();
  const llvm::json::Array* events =
      root != nullptr ? root->getArray("traceEvents") : nullptr;
  if (events == nullptr) {
    out.error = "no traceEvents array";
    return out;
  }
  auto ns = [](double us) { return std::llround(us * 1e3); };
  for (const llvm::json::Value& ev : *events) {
    const llvm::json::Object* e = ev.getAsObject();
    if (e == nullptr) {
      out.error = "an event is not an object";
      return out;
    }
    const auto ph = e->getString("ph");
    const auto name = e->getString("name");
    const auto tid = e->getInteger("tid");
    const auto pid = e->getInteger("pid");
    if (!ph || !name || !pid) {
      out.error = "an event lacks ph, name or pid";
      return out;
    }
    if (*ph == "M") {
      if (*name == "thread_name" && tid) {
        const llvm::json::Object* args = e->getObject("args");
        if (args != nullptr && args->getString("name"))
          out.track_names[*tid] = args->getString("name")->str();
      }
      continue;
    }
    const auto ts = e->getNumber("ts");
    const auto dur = e->getNumber("dur");
    const auto cat = e->getString("cat");
    if (*ph != "X" || !ts || !dur || !cat || !tid) {
      out.error = absl::StrCat("event '", name->str(),
                               "' is not a complete X event with ts, dur, cat "
                               "and tid");
      return out;
    }
    Span s;
    s.name = name->str();
    s.cat = cat->str();
    s.tid = *tid;
    s.begin = ns(*ts);
    s.end = s.begin + ns(*dur);
    if (const llvm::json::Object* args = e->getObject("args")) {
      s.flops = args->getNumber("flops").getValueOr(0);
      s.bytes = args->getNumber("bytes").getValueOr(0);
      if (auto shape = args->getString("shape")) s.shape = shape->str();
      s.counted = args->getBoolean("counted").getValueOr(false);
    }
    out.spans.push_back(std::move(s));
  }
  return out;
}

// "" when on every track any two spans are disjoint or one holds the other;
// else the first two that overlap partially. Spans that only touch
// (one ends where the next begins) are disjoint.
inline std::string NestingError(const std::vector<Span>& spans) {
  std::map<int64_t, std::vector<const Span*>> by_track;
  for (const Span& s : spans) by_track[s.tid].push_back(&s);
  for (auto& [tid, list] : by_track) {
    std::stable_sort(
        list.begin(), list.end(), [](const Span* a, const Span* b) {
          return a->begin != b->begin ? a->begin < b->begin : a->end > b->end;
        });
    std::vector<const Span*> open;
    for (const Span* s : list) {
      while (!open.empty() && open.back()->end <= s->begin) open.pop_back();
      if (!open.empty() && s->end > open.back()->end) {
        return absl::StrCat("track ", tid, ": '", s->name, "' [", s->begin,
                            ", ", s->end, "] overlaps '", open.back()->name,
                            "' [", open.back()->begin, ", ", open.back()->end,
                            "] partially");
      }
      open.push_back(s);
    }
  }
  return "";
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_TRACE_CHECK_H_
