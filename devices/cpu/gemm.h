// CPU matrix multiply for the eager runtime: OpenBLAS or oneDNN, chosen per
// shape.
#ifndef STEPJIT_DEVICES_CPU_GEMM_H_
#define STEPJIT_DEVICES_CPU_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ir/dtype.h"
#include "runtime/gemm_args.h"

namespace stepjit::runtime::cpu {

// The argument types (GemmArgs, GemmActivation, GemmBackend) are device
// neutral: runtime/gemm_args.h.
using runtime::GemmActivation;
using runtime::GemmArgs;
using runtime::GemmBackend;

// Runs the product. Invalid arguments (negative sizes, short leading
// dimensions, null pointers, non-floating dtypes, a bias gradient of a
// batch) give InvalidArgumentError;
// asking for oneDNN with f64 (which oneDNN lacks) gives UnimplementedError.
// f16 and bf16 accumulate in f32 and round the result once.
absl::Status Gemm(const GemmArgs& args);

// The backend kAuto resolves to for these arguments (never kAuto).
GemmBackend ChooseBackend(const GemmArgs& args);

using runtime::GemmActivationName;
using runtime::GemmBackendName;

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_GEMM_H_
