// The CPU region backend: LLVM ORC kernels for fusion regions.
#include "program/cpu/cpu_backend.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>

#include "program/region_operands.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime::cpu {

void RunRegionKernel(const codegen::cpu::RegionKernel& k,
                     std::vector<void*> ptrs) {
  std::vector<uint64_t> scratch(static_cast<size_t>(k.num_slots) + 1);
  ptrs.push_back(scratch.data());
  std::vector<std::vector<double>> accs;
  for (const codegen::cpu::Accumulator& a : k.accumulators) {
    accs.emplace_back(static_cast<size_t>(k.reduced_numel), a.init);
    ptrs.push_back(accs.back().data());
  }
  if (!k.dims.empty()) ptrs.push_back(const_cast<int64_t*>(k.dims.data()));
  if (k.scalar != nullptr) k.scalar(ptrs.data());
  constexpr int64_t kGrain = 16384;  // elements per task
  if (k.parallel) {
    const int64_t units = k.numel / k.split_align;
    ParallelFor(units, std::max<int64_t>(1, kGrain / k.split_align),
                [&](int64_t b, int64_t e) {
                  k.main(ptrs.data(), b * k.split_align, e * k.split_align);
                });
  } else {
    k.main(ptrs.data(), 0, k.numel);
  }
  if (k.reduced != nullptr) {
    ParallelFor(k.reduced_numel, kGrain,
                [&](int64_t b, int64_t e) { k.reduced(ptrs.data(), b, e); });
  }
}

namespace {

class CpuRegion final : public CompiledRegion {
 public:
  CpuRegion(codegen::cpu::RegionKernel kernel, std::vector<int> return_alias)
      : kernel_(std::move(kernel)), return_alias_(std::move(return_alias)) {}

  std::optional<std::vector<Tensor>> Launch(const ir::Graph& body,
                                            std::vector<Tensor>& in) override {
    return RunGenerated(body, return_alias_, Device::cpu(), in,
                        [&](std::vector<void*> ptrs) {
                          RunRegionKernel(kernel_, std::move(ptrs));
                        });
  }
  std::string label() const override { return kernel_.name; }

 private:
  codegen::cpu::RegionKernel kernel_;
  std::vector<int> return_alias_;
};

void DumpKernel(const codegen::cpu::RegionKernel& k, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(std::filesystem::path(dir) / (k.name + ".ll")) << k.llvm_ir_raw;
  std::ofstream(std::filesystem::path(dir) / (k.name + ".opt.ll")) << k.llvm_ir;
}

class CpuRegionBackend final : public RegionBackend {
 public:
  explicit CpuRegionBackend(const ProgramOptions& options)
      : dump_dir_(options.dump_dir),
        use_cache_(options.use_cache),
        shape_generic_(options.shape_generic) {}

  absl::StatusOr<std::unique_ptr<CompiledRegion>> Compile(
      const RegionToCompile& region) override {
    const codegen::cpu::RegionCompileOptions options{
        .want_optimized_ir = !dump_dir_.empty(),
        .use_cache = use_cache_ && region.cacheable,
        .shape_generic = shape_generic_};
    absl::StatusOr<codegen::cpu::RegionKernel> k =
        codegen::cpu::CompileRegion(*region.body, options);
    if (!k.ok()) return k.status();
    if (!dump_dir_.empty()) DumpKernel(*k, dump_dir_);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.codegen_ms += k->compile_ms;
      stats_.cached_regions += k->cache_hit ? 1 : 0;
      stats_.region_times.push_back(
          {k->name, k->compile_ms, k->cache_hit, k->cache_key});
    }
    return std::make_unique<CpuRegion>(*std::move(k),
                                       ReturnAliases(*region.node->body()));
  }

  // Regions lower into their own LLVM contexts and the JIT links under
  // its lock (codegen/cpu/jit.h).
  bool ConcurrentCompile() const override { return true; }

 private:
  std::string dump_dir_;
  bool use_cache_;
  bool shape_generic_;
  std::mutex stats_mu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RegionBackend>> MakeCpuRegionBackend(
    const ir::Graph& graph, const ProgramOptions& options) {
  return std::make_unique<CpuRegionBackend>(options);
}

}  // namespace stepjit::runtime::cpu
