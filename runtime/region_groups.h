// Runs of consecutive, independent fusion regions that can launch together
// as one multi-region kernel per phase (codegen/cuda/multi_region.h): the
// per-parameter optimizer updates at the end of a training step.
#ifndef STEPJIT_RUNTIME_REGION_GROUPS_H_
#define STEPJIT_RUNTIME_REGION_GROUPS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ir/graph.h"

namespace stepjit::runtime {

// The maximal runs of consecutive top-level nodes of `g` in which every node
// is a region of `arg_bytes` (one the device compiled, with the kernel
// argument bytes it takes), no member reads a value an earlier member of the
// run produces, and the members' bytes add up to at most `max_arg_bytes`. A
// node that breaks a rule ends the run (and starts the next when it is a
// region). Runs of fewer than two regions are left out.
//
// Values are SSA here, so buffers shared through in-place updates or views
// are not visible: the executor checks storage when it runs a group and
// launches the members one by one when one writes a buffer another uses.
std::vector<std::vector<const ir::Node*>> IndependentRegionRuns(
    const ir::Graph& g, const absl::flat_hash_map<const ir::Node*, int64_t>& arg_bytes,
    int64_t max_arg_bytes);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_REGION_GROUPS_H_
