#include "runtime/gemm_args.h"

namespace stepjit::runtime {

absl::string_view GemmActivationName(GemmActivation a) {
  return a.has_value() ? ir::OpName(*a) : "none";
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
