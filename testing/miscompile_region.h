// Test support (not in libstepjit.a; the object library stepjit_testing):
// a deliberate miscompile that the accuracy checker (Program::RunChecked)
// must catch and name, installed through the library's region-body override
// hook (program/region_override.h).
#ifndef STEPJIT_TESTING_MISCOMPILE_REGION_H_
#define STEPJIT_TESTING_MISCOMPILE_REGION_H_

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op.h"

namespace stepjit::runtime {

// Test-only. While alive, every Program::Build (CPU and CUDA backends) lowers
// one fusion region with its first `from` op computing `to` instead (the
// first `add` computes `sub`, or `mul` computes `add`). Only the generated
// kernel is wrong: the graph, the region's body and the interpreted path
// stay right, which is what lets RunChecked see the difference. A wrong
// kernel never serves a right region: the CPU backend compiles it outside
// the kernel cache, and the CUDA module cache is keyed by the (different)
// source text.
//
// Process-wide, one at a time; it must outlive the Builds it affects (tests
// build on one thread). Programs built while it is alive keep their wrong
// kernels after it ends.
class ScopedMiscompileRegion {
 public:
  // `region`: the region's callee name ("fused_3"); empty: the first region
  // of the graph (in node order) holding a `from` op that a code generator
  // lowers (codegen::Analyze accepts it). `from` and `to` must
  // be ops of the same arity.
  ScopedMiscompileRegion(std::string region, ir::OpId from, ir::OpId to);
  ~ScopedMiscompileRegion();
  ScopedMiscompileRegion(const ScopedMiscompileRegion&) = delete;
  ScopedMiscompileRegion& operator=(const ScopedMiscompileRegion&) = delete;

  // The names of the regions lowered miscompiled so far, each once.
  std::vector<std::string> miscompiled() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_TESTING_MISCOMPILE_REGION_H_
