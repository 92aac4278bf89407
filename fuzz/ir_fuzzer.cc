// libFuzzer target: IR text through the parser, the verifier and the default
// CPU pass pipeline (with the verifier after every pass).
//
// A crash, a sanitizer report, a hang or an abort is a finding. Beyond not
// crashing, it checks two properties: a graph that verifies prints to text
// that parses back to the same text (the printer and parser agree), and the
// pipeline never turns a verified graph into one that fails verification.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "ir_fuzzer: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64 << 10)) return 0;  // IR of real steps is far smaller
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto graph = stepjit::ir::ParseGraph(text, "fuzz.ir");
  if (!graph.ok()) return 0;
  if (!stepjit::ir::Verify(**graph).ok()) return 0;
  const std::string printed = stepjit::ir::Print(**graph);
  auto again = stepjit::ir::ParseGraph(printed, "printed.ir");
  if (!again.ok())
    Fail("printed IR does not parse",
         printed + "\n" + std::string(again.status().message()));
  if (stepjit::ir::Print(**again) != printed)
    Fail("print-parse-print is not a fixed point", printed);
  stepjit::passes::PipelineOptions
      options;  // verify_each: a pass that breaks the IR fails
  stepjit::passes::PipelineStats stats;
  const absl::Status s = stepjit::passes::RunPipeline(
      **graph,
      "canonicalize,cse,dce,fuse,dce,sink-regions,bucket-plan,memory-plan",
      options, &stats);
  if (!s.ok() && absl::StrContains(s.message(), "after pass")) {
    Fail("a pass broke a verified graph",
         std::string(s.message()) + "\n" + printed);
  }
  return 0;
}
