// How a Program is built: code generation, dumps, the device and its
// backend's switches (program/executor.h builds, program/
// region_backend.h reads them).
#ifndef STEPJIT_PROGRAM_PROGRAM_OPTIONS_H_
#define STEPJIT_PROGRAM_PROGRAM_OPTIONS_H_

#include <string>

#include "program/random_layout.h"
#include "runtime/device.h"

namespace stepjit::runtime {

// A program runs each fusion region its device's backend lowers as
// generated code and every other node (and region) through Dispatch with the
// eager kernels, autograd off.
struct ProgramOptions {
  // Compile fusion regions to native code where the device's backend lowers
  // them (LLVM ORC on the CPU, NVRTC on CUDA); other regions are
  // interpreted. Non-contiguous operands are copied to contiguous buffers
  // before a generated kernel runs.
  bool codegen = true;
  // When set, each generated CPU kernel's LLVM IR is written there as
  // <kernel>.ll (as lowered) and <kernel>.opt.ll (after -O2), and a CUDA
  // program's CUDA C as <region>.cu.
  // Kernels come from the process-wide kernel cache unless use_cache=false.
  std::string dump_dir;
  // With dump_dir: also write the CUDA C the CUDA backend emits for each
  // region it lowers (<region>.cu) and, with cuda_ptx_arch ("sm_90"), its
  // PTX from NVRTC (<region>.ptx), whatever the device.
  // STEPJIT_DUMP_CUDA=cu|ptx[:sm_XX] sets these (WithDumps).
  bool dump_cuda = false;
  std::string cuda_ptx_arch;
  bool use_cache = true;
  // Generated kernels read the sizes of their loops (extents, strides, row
  // counts) from a run-time table instead of compiling them in, so the
  // programs of one step at other sizes (the concrete shapes of a step with
  // symbolic dims) share their compiled kernels: a new size lowers each
  // region again (cheap) and finds its code in the kernel cache. Dims of 0
  // and 1 stay in the code. On CUDA each region's CUDA C takes its sizes as
  // a by-value argument, so the same source (one NVRTC module) serves every
  // size; such regions are not grouped into multi-region launches.
  bool shape_generic = false;
  // Where the program runs: the device of the tensors it is bound to, which
  // picks the region backend (program/region_backend.h). On CUDA
  // every fusion region the CUDA emitter lowers becomes one NVRTC kernel
  // (loaded on the backend at Build), other nodes run as eager CUDA ops, and
  // the whole run is queued on the program's own stream.
  Device device = Device::cpu();
  // On CUDA: capture the second run into a CUDA graph and replay it after
  // (inputs copied into the captured buffers, outputs copied out), when
  // every node can be captured (no host round trips).
  bool cuda_graphs = true;
  // On CUDA: launch runs of consecutive independent regions (the optimizer's
  // per-parameter updates, the grad scaler's per-gradient checks) as one
  // multi-region kernel per phase instead of one set of kernels per region
  // (program/cuda/region_groups.h, codegen/cuda/multi_region.h).
  bool cuda_multi_region = true;
  // Where the traced step's random draws lay in the generator's stream
  // (its offsets before and after the step): replays reserve that span and
  // draw at the traced places in it, as the eager step would, even where
  // passes removed a draw. Unset (span 0): taken from the graph's own
  // random nodes.
  RandomLayout random_layout;

  // The defaults with `dump_dir` and STEPJIT_DUMP_CUDA=cu|ptx[:sm_XX]
  // applied (dump_cuda, and cuda_ptx_arch for ptx: sm_90 unless named).
  static ProgramOptions WithDumps(std::string dump_dir);
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_PROGRAM_OPTIONS_H_
