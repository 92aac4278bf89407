// Row-wise CUDA kernels written by hand (the region emitter does not lower
// two-pass row ops): softmax and log-softmax, cross-entropy and one_hot, in
// f32, f64, f16 and bf16, computed as the CPU kernels compute them (the same
// accumulation types and order within a row). One thread owns one row,
// which suits the short rows of classifier heads.
#include "runtime/cuda/kernels/row_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cuda/kernels/kernel_helpers.h"
#include "runtime/cuda/ops.h"

namespace stepjit::runtime::cuda {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;

// T is the storage type, ACC the type the CPU kernels compute a row in
// (float for f32, f16 and bf16; double for f64); sj_ld/sj_put
// (kernel_helpers.h) convert as the CPU's Convert does.
constexpr char kRowKernelBody[] = R"(
#define SJ_ROW_KERNELS(S, T, ACC)                                            \
  extern "C" __global__ void sj_softmax_##S(const T* x, T* y, long long rows,  \
                                            long long n, int log_mode) {     \
    SJ_GRID_LOOP(r, rows) {                                                  \
      const T* in = x + r * n;                                               \
      T* out = y + r * n;                                                    \
      ACC mx = -(ACC)__longlong_as_double(0x7ff0000000000000LL);             \
      for (long long i = 0; i < n; ++i) {                                    \
        const ACC v = sj_ld(in[i]);                                          \
        mx = mx < v ? v : mx;                                                \
      }                                                                      \
      if (isinf(mx) && mx < 0) mx = 0;                                       \
      double s = 0;                                                          \
      for (long long i = 0; i < n; ++i) s += sj_exp(sj_ld(in[i]) - mx);      \
      if (log_mode) {                                                        \
        const ACC lse = mx + (ACC)log(s);                                    \
        for (long long i = 0; i < n; ++i) sj_put(&out[i], sj_ld(in[i]) - lse); \
      } else {                                                               \
        const ACC inv = (ACC)(1.0 / s);                                      \
        for (long long i = 0; i < n; ++i) {                                  \
          sj_put(&out[i], sj_exp(sj_ld(in[i]) - mx) * inv);                  \
        }                                                                    \
      }                                                                      \
    }                                                                        \
  }                                                                          \
  extern "C" __global__ void sj_xent_rows_##S(const T* x, const long long* t, \
                                              double* losses, long long rows, \
                                              long long c, double ls) {      \
    SJ_GRID_LOOP(r, rows) {                                                  \
      const T* row = x + r * c;                                              \
      double mx = -__longlong_as_double(0x7ff0000000000000LL), sum_x = 0;    \
      for (long long j = 0; j < c; ++j) {                                    \
        const double v = sj_ld(row[j]);                                      \
        mx = mx < v ? v : mx;                                                \
        sum_x += v;                                                          \
      }                                                                      \
      double s = 0;                                                          \
      for (long long j = 0; j < c; ++j) s += exp((double)sj_ld(row[j]) - mx); \
      const double lse = mx + log(s);                                        \
      const long long k = t[r];                                              \
      if (k < 0 || k >= c) {                                                 \
        losses[r] = __longlong_as_double(0x7ff8000000000000LL);              \
      } else {                                                               \
        const double nll = lse - (double)sj_ld(row[k]);                      \
        losses[r] = (1.0 - ls) * nll + ls * (lse - sum_x / c);               \
      }                                                                      \
    }                                                                        \
  }                                                                          \
  extern "C" __global__ void sj_xent_reduce_##S(const double* losses, T* out, \
                                                long long rows, int mode) {  \
    if (mode == 0) {                                                         \
      SJ_GRID_LOOP(i, rows) sj_put(&out[i], (ACC)losses[i]);                 \
    } else if (blockIdx.x == 0 && threadIdx.x == 0) {                        \
      double total = 0;                                                      \
      for (long long i = 0; i < rows; ++i) total += losses[i];               \
      if (mode == 2) {                                                       \
        total = rows == 0 ? __longlong_as_double(0x7ff8000000000000LL)       \
                          : total / (double)rows;                            \
      }                                                                      \
      sj_put(&out[0], (ACC)total);                                           \
    }                                                                        \
  }                                                                          \
  extern "C" __global__ void sj_one_hot_##S(const long long* idx, T* out,    \
                                            long long n, long long c) {      \
    SJ_GRID_LOOP(i, n) {                                                     \
      const long long k = idx[i];                                            \
      if (k >= 0 && k < c) sj_put(&out[i * c + k], (ACC)1);                  \
    }                                                                        \
  }
SJ_ROW_KERNELS(f32, float, float)
SJ_ROW_KERNELS(f64, double, double)
SJ_ROW_KERNELS(f16, __half, float)
SJ_ROW_KERNELS(bf16, __nv_bfloat16, float)
)";

const FixedModule& Module() {
  static const FixedModule* m = new FixedModule(FloatKernelModule(
      "sj_rows", kRowKernelBody, {"softmax", "xent_rows", "xent_reduce", "one_hot"}));
  return *m;
}

void Launch(Backend& b, const std::string& kernel, int64_t threads, void** args) {
  LaunchFixed(b, Module(), kernel, threads, args);
}

std::string Suffix(DType t) { return std::string(ir::DTypeName(t)); }

// Softmax over the last dim of a contiguous tensor, else over `dim` through
// a permuted contiguous copy (as the CPU kernel does).
void Softmax(Backend& b, const KernelArgs& k, bool log_mode) {
  const Tensor& x = k.inputs[0];
  const int64_t d = ir::WrapDim(k.attrs.GetInt(AttrKey::kDim), x.dim());
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i != d) perm.push_back(i);
  }
  if (x.dim() > 0) perm.push_back(d);
  const Tensor rows = ContiguousOnDevice(cpu::PermutedView(x, perm));
  Tensor out_rows = cpu::PermutedView(k.out, perm);
  const bool direct = out_rows.is_contiguous();
  Tensor dst = direct ? out_rows
                      : empty(rows.shape(), {.dtype = rows.dtype(), .device = rows.device()});
  long long n = x.dim() > 0 ? x.shape()[d] : 1;
  long long count = n == 0 ? 0 : x.numel() / n;
  const void* xp = rows.data_ptr();
  void* yp = dst.data_ptr();
  int mode = log_mode ? 1 : 0;
  void* args[] = {&xp, &yp, &count, &n, &mode};
  if (count > 0) Launch(b, absl::StrCat("sj_softmax_", Suffix(x.dtype())), count, args);
  if (!direct) CopyInto(out_rows, dst);
}

void CrossEntropy(Backend& b, const KernelArgs& k) {
  const Tensor x = ContiguousOnDevice(k.inputs[0]), t = ContiguousOnDevice(k.inputs[1]);
  long long rows = x.shape()[0], classes = x.shape()[1];
  double ls = k.attrs.GetDouble(AttrKey::kLabelSmoothing, 0.0);
  const std::string reduction = k.attrs.GetString(AttrKey::kReduction, "mean");
  int mode = reduction == "none" ? 0 : reduction == "sum" ? 1 : 2;
  Tensor losses = empty({std::max<long long>(rows, 1)}, {.dtype = DType::kF64, .device = x.device()});
  const void* xp = x.data_ptr();
  const void* tp = t.data_ptr();
  void* lp = losses.data_ptr();
  void* row_args[] = {&xp, &tp, &lp, &rows, &classes, &ls};
  if (rows > 0) Launch(b, absl::StrCat("sj_xent_rows_", Suffix(x.dtype())), rows, row_args);
  const void* lcp = lp;
  void* op = k.out.data_ptr();
  void* reduce_args[] = {&lcp, &op, &rows, &mode};
  Launch(b, absl::StrCat("sj_xent_reduce_", Suffix(x.dtype())), mode == 0 ? rows : 1,
         reduce_args);
}

void OneHot(Backend& b, const KernelArgs& k) {
  const Tensor idx = ContiguousOnDevice(k.inputs[0]);
  ThrowIfError(b.Memset(k.out.data_ptr(), 0, k.out.numel() * k.out.element_size(),
                        CurrentStream()));
  long long n = idx.numel(), c = k.attrs.GetInt(AttrKey::kNumClasses);
  const void* ip = idx.data_ptr();
  void* op = k.out.data_ptr();
  void* args[] = {&ip, &op, &n, &c};
  if (n > 0) Launch(b, absl::StrCat("sj_one_hot_", Suffix(k.out.dtype())), n, args);
}

bool FloatOut(const KernelArgs& k) { return ir::IsFloating(k.out.dtype()); }

}  // namespace

const char* RowKernelSource() { return Module().source.c_str(); }

bool IsRowOp(ir::OpId op) {
  return op == OpId::kSoftmax || op == OpId::kLogSoftmax || op == OpId::kCrossEntropy ||
         op == OpId::kOneHot;
}

bool RunRowOp(Backend& b, const KernelArgs& k) {
  switch (k.op) {
    case OpId::kSoftmax:
    case OpId::kLogSoftmax:
      if (!FloatOut(k) || k.inputs[0].dtype() != k.out.dtype()) return false;
      Softmax(b, k, k.op == OpId::kLogSoftmax);
      return true;
    case OpId::kCrossEntropy:
      if (!FloatOut(k) || k.inputs[0].dtype() != k.out.dtype() ||
          k.inputs[1].dtype() != DType::kI64 || k.inputs[0].dim() != 2) {
        return false;
      }
      CrossEntropy(b, k);
      return true;
    case OpId::kOneHot:
      if (!FloatOut(k) || k.inputs[0].dtype() != DType::kI64) return false;
      OneHot(b, k);
      return true;
    default:
      return false;
  }
}

}  // namespace stepjit::runtime::cuda
