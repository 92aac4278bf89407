// The CPU region backend (program/region_backend.h): fusion regions
// lowered to LLVM IR and compiled by ORC LLJIT (codegen/cpu/region_kernel.h)
// through the kernel cache, run over the thread pool.
#ifndef STEPJIT_PROGRAM_CPU_CPU_BACKEND_H_
#define STEPJIT_PROGRAM_CPU_CPU_BACKEND_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cpu/region_kernel.h"
#include "ir/graph.h"
#include "program/program_options.h"
#include "program/region_backend.h"

namespace stepjit::runtime::cpu {

// The backend of a CPU program. With options.dump_dir every compiled
// kernel's LLVM IR is written there (<kernel>.ll as lowered, <kernel>.opt.ll
// after -O2).
absl::StatusOr<std::unique_ptr<RegionBackend>> MakeCpuRegionBackend(
    const ir::Graph& graph, const ProgramOptions& options);

// Runs a compiled region over `ptrs` (one pointer per body param, then per
// return): adds scratch slots and accumulators, runs the scalar part once,
// splits the main loop over the thread pool where the kernel allows, then
// runs the reduced loop.
void RunRegionKernel(const codegen::cpu::RegionKernel& k,
                     std::vector<void*> ptrs);

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_PROGRAM_CPU_CPU_BACKEND_H_
