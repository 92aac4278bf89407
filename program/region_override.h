// A hook into program building for test support: the body a fusion region's
// kernel is lowered from in place of its own. The library holds no test
// code: the hook is null unless a program that links the test-support
// library installs one (testing/miscompile_region.h: a deliberate
// miscompile the accuracy checker must catch). A lowered override is never
// cached (RegionToCompile::cacheable).
#ifndef STEPJIT_PROGRAM_REGION_OVERRIDE_H_
#define STEPJIT_PROGRAM_REGION_OVERRIDE_H_

#include <memory>

#include "ir/graph.h"

namespace stepjit::runtime {

// Given the top-level graph and one of its fusion nodes, the body to lower
// instead, or null for the node's own.
using RegionBodyOverride = std::unique_ptr<ir::Graph> (*)(
    const ir::Graph& graph, const ir::Node& region);
// Installs `hook` for every later Program::Build (null removes it).
void SetRegionBodyOverride(RegionBodyOverride hook);
// What the installed hook gives for `region`; null without a hook (one
// atomic load).
std::unique_ptr<ir::Graph> OverriddenRegionBody(const ir::Graph& graph,
                                                const ir::Node& region);

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_REGION_OVERRIDE_H_
