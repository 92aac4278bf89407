#include "runtime/gemm_args.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace stepjit::runtime {

absl::Status ValidateGemmArgs(const GemmArgs& g, const GemmChecks& checks) {
  const absl::string_view who = checks.who;
  if (!ir::IsFloating(g.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": expected dtype f32, f64, f16 or bf16, got ",
                     ir::DTypeName(g.dtype)));
  }
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": expected non-negative sizes, got m=", g.m,
                     " n=", g.n, " k=", g.k, " batch=", g.batch));
  }
  if (g.stride_a < 0 || g.stride_b < 0 || g.stride_c < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": expected non-negative batch strides, got stride_a=", g.stride_a,
        " stride_b=", g.stride_b, " stride_c=", g.stride_c));
  }
  if (g.batch > 1 && g.stride_c == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": expected stride_c > 0 for batch=", g.batch,
                     " (each product needs its own C), got 0"));
  }
  const struct {
    const char* ld_name;
    int64_t ld;
    const char* name;
    int64_t rows, cols;  // as stored, row-major
    bool trans;
    const void* ptr;
  } operands[] = {{"lda", g.lda, "A", g.trans_a ? g.k : g.m,
                   g.trans_a ? g.m : g.k, g.trans_a, g.a},
                  {"ldb", g.ldb, "B", g.trans_b ? g.n : g.k,
                   g.trans_b ? g.k : g.n, g.trans_b, g.b},
                  {"ldc", g.ldc, "C", g.m, g.n, false, g.c}};
  for (const auto& op : operands) {
    const int64_t need = std::max<int64_t>(1, op.cols);
    if (op.ld < need) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": expected ", op.ld_name, " >= ", need, " (",
                       op.name, " is stored ", op.rows, "x", op.cols,
                       checks.says_transposed && op.trans ? ", transposed" : "",
                       "), got ", op.ld));
    }
    if (checks.max_extent.has_value() &&
        (op.ld > *checks.max_extent || op.rows > *checks.max_extent)) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": expected ", op.name, " dimensions and ", op.ld_name,
          " <= ", *checks.max_extent, ", got ", op.rows, "x", op.cols, " with ",
          op.ld_name, "=", op.ld));
    }
    // A and B are only read when the product has terms; C when it has cells.
    const bool read =
        g.batch > 0 && g.m > 0 && g.n > 0 && (op.name[0] == 'C' || g.k > 0);
    if (op.ptr == nullptr && read) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": expected a non-null pointer for ", op.name, " (",
                       op.rows, "x", op.cols, "), got null"));
    }
  }
  if (g.bias_grad != nullptr && g.batch != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        who,
        ": expected batch = 1 with bias_grad (the bias gradient of one "
        "product), got batch=",
        g.batch));
  }
  if (g.bias_grad != nullptr && g.a == nullptr && g.m > 0 && g.k > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": expected a non-null pointer for A (", g.trans_a ? g.k : g.m,
        "x", g.trans_a ? g.m : g.k, ") to sum into bias_grad, got null"));
  }
  return absl::OkStatus();
}

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
