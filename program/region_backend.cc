// The region backend registry and the default run hooks.
#include "program/region_backend.h"

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "program/builtin_backends.h"

namespace stepjit::runtime {

std::vector<Tensor> RegionBackend::Run(absl::Span<const Tensor> inputs,
                                       absl::Span<const Tensor> state,
                                       const ReplayLoop& loop) {
  return loop(inputs, state, RunHooks());
}

std::vector<Tensor> RegionBackend::RunUncaptured(
    absl::Span<const Tensor> inputs, absl::Span<const Tensor> state,
    const ReplayLoop& loop) {
  return loop(inputs, state, RunHooks());
}

namespace {

struct Registry {
  std::mutex mu;
  absl::flat_hash_map<DeviceType, RegionBackendFactory> factories;
  std::vector<RegionSourceDumper> dumpers;
};

Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    RegisterBuiltinRegionBackends(
        [r](DeviceType d, RegionBackendFactory f) {
          r->factories[d] = std::move(f);
        },
        [r](RegionSourceDumper d) { r->dumpers.push_back(std::move(d)); });
    return r;
  }();
  return *registry;
}

}  // namespace

RegionBackendFactory RegisterRegionBackend(DeviceType device,
                                           RegionBackendFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  RegionBackendFactory& slot = r.factories[device];
  std::swap(slot, factory);
  if (!slot) r.factories.erase(device);
  return factory;
}

void RegisterRegionSourceDumper(RegionSourceDumper dumper) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.dumpers.push_back(std::move(dumper));
}

absl::StatusOr<std::unique_ptr<RegionBackend>> MakeRegionBackend(
    const ir::Graph& graph, const ProgramOptions& options) {
  RegionBackendFactory factory;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(options.device.type);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no region backend is registered for device ", options.device.str()));
  }
  return factory(graph, options);
}

void DumpRegionSources(const ir::Graph& graph, const ProgramOptions& options) {
  std::vector<RegionSourceDumper> dumpers;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    dumpers = r.dumpers;
  }
  for (const RegionSourceDumper& dump : dumpers) dump(graph, options);
}

}  // namespace stepjit::runtime
