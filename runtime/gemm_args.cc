#include "runtime/gemm_args.h"

namespace stepjit::runtime {

absl::string_view GemmActivationName(GemmActivation a) {
  switch (a) {
    case GemmActivation::kNone:
      return "none";
    case GemmActivation::kRelu:
      return "relu";
    case GemmActivation::kGelu:
      return "gelu";
    case GemmActivation::kGeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

absl::string_view GemmBackendName(GemmBackend b) {
  switch (b) {
    case GemmBackend::kAuto:
      return "auto";
    case GemmBackend::kOpenBlas:
      return "openblas";
    case GemmBackend::kOneDnn:
      return "onednn";
  }
  return "?";
}

}  // namespace stepjit::runtime
