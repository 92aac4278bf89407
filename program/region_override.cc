// The region-body override hook (test support installs it).
#include "program/region_override.h"

#include <atomic>

namespace stepjit::runtime {
namespace {
std::atomic<RegionBodyOverride> g_override{nullptr};
}  // namespace

void SetRegionBodyOverride(RegionBodyOverride hook) {
  g_override.store(hook, std::memory_order_release);
}

std::unique_ptr<ir::Graph> OverriddenRegionBody(const ir::Graph& graph,
                                                const ir::Node& region) {
  const RegionBodyOverride hook = g_override.load(std::memory_order_acquire);
  return hook != nullptr ? hook(graph, region) : nullptr;
}

}  // namespace stepjit::runtime
