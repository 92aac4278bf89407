// Splitting a fusion region at its reduction, for a pass that computes the
// reduction elsewhere (gemm-bgrad moves it into a GEMM call).
#ifndef STEPJIT_PASSES_REGION_SPLIT_H_
#define STEPJIT_PASSES_REGION_SPLIT_H_

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "ir/graph.h"

namespace stepjit::passes {

// The nodes of `body` that depend on `node`, `node` included.
absl::flat_hash_set<const ir::Node*> DownstreamOf(const ir::Graph& body,
                                                  const ir::Node* node);

struct RegionSplit {
  // The members that do not depend on the reduction (nullptr: none needed).
  ir::Node* before = nullptr;
  // The members after it, reading the reduction's value from outside
  // (nullptr: none needed).
  ir::Node* after = nullptr;
  // Per result of the old region, the outer value that now stands for it.
  std::vector<ir::Value*> results;
};

// Appends to `g` the regions that replace `region` (a fusion with a flat
// body) once its body node `reduction` is computed outside as `reduced`
// (the same values, in the reduction's shape or another one of as many
// elements). `before` (same body name) holds the members not downstream of
// the reduction that are still needed; `after` (body `<name>_post`) the
// members downstream of it, reading `reduced` as a parameter: reshaped to
// the reduction's type where read as the reduction, directly where a member
// reshapes the reduction to `reduced`'s type. 0-d `full` constants the
// second part reads are copied into it; other values of the first part it
// reads become extra results of the first part. A result that was the
// reduction itself stands for `outer_reduced` (the reduction's type). The
// caller replaces the uses of `region`'s results by `results`, erases it,
// and orders the new nodes (`before` may sit where `region` was, `after`
// must follow `reduced`).
RegionSplit SplitRegionAtReduction(ir::Graph& g, const ir::Node& region,
                                   const ir::Node* reduction,
                                   ir::Value* reduced,
                                   ir::Value* outer_reduced);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_REGION_SPLIT_H_
