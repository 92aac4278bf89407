// Eager CPU kernels for row-wise normalizations, losses, embeddings and dropout.
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "devices/cpu/kernels.h"
#include "devices/cpu/loops.h"
#include "ir/host_math.h"
#include "ir/op_attrs.h"
#include "runtime/generator.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::OpId;

namespace {

// Calls fn(in_row, out_row, n) for each row of `x` along `dim`, where the
// rows are made contiguous first and results land in `out` of x's shape.
template <typename T, typename Fn>
void ForEachRow(const Tensor& x, const Tensor& out, int64_t dim, Fn fn) {
  const int64_t d = ir::WrapDim(dim, x.dim());
  const std::vector<int64_t> perm =
      x.dim() > 0 ? DimLastPermutation(x.dim(), d) : std::vector<int64_t>{};
  Tensor rows = ContiguousCopyIfNeeded(PermutedView(x, perm));
  Tensor out_rows = PermutedView(out, perm);
  const bool direct = out_rows.is_contiguous();
  Tensor dst = direct ? out_rows : empty(rows.shape(), {.dtype = out.dtype()});
  const int64_t n = x.dim() > 0 ? x.shape()[d] : 1;
  const int64_t num_rows = n == 0 ? 0 : x.numel() / n;
  const T* src = rows.data<T>();
  T* o = dst.data<T>();
  ParallelFor(num_rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) fn(src + r * n, o + r * n, n);
              });
  if (!direct) CopyInto(out_rows, dst);
}

// exp and log are HostMath's (ir/poly_math.h), as in the row kernels the
// CPU code generator emits for these ops (codegen/region_expand.cc).
template <typename C>
C Exp(C x) {
  return ir::HostMath<C>::Exp(x);
}
double Log(double x) { return ir::HostMath<double>::Log(x); }

template <bool kLog>
void SoftmaxKernel(const KernelArgs& k) {
  SJ_DISPATCH_FLOAT(k.out.dtype(), "softmax", {
    ForEachRow<T>(k.inputs[0], k.out, k.attrs.GetInt(AttrKey::kDim),
                  [](const T* in, T* out, int64_t n) {
                    Acc mx = -std::numeric_limits<Acc>::infinity();
                    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<Acc>(in[i]));
                    if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf row
                    double s = 0;
                    for (int64_t i = 0; i < n; ++i)
                      s += Exp(static_cast<Acc>(in[i]) - mx);
                    if constexpr (kLog) {
                      const Acc lse = mx + static_cast<Acc>(Log(s));
                      for (int64_t i = 0; i < n; ++i) out[i] = Convert<T>(static_cast<Acc>(in[i]) - lse);
                    } else {
                      const Acc inv = static_cast<Acc>(1.0 / s);
                      for (int64_t i = 0; i < n; ++i) {
                        out[i] =
                            Convert<T>(Exp(static_cast<Acc>(in[i]) - mx) * inv);
                      }
                    }
                  });
  });
}

void LayerNormKernel(const KernelArgs& k) {
  const Tensor x = ContiguousCopyIfNeeded(k.inputs[0]);
  const int64_t nd = ir::AttrInt(k.op, k.attrs, ir::AttrKey::kNormalizedNdim);
  const double eps = ir::AttrFloat(k.op, k.attrs, ir::AttrKey::kEps);
  int64_t n = 1;
  for (int64_t i = x.dim() - nd; i < x.dim(); ++i) n *= x.shape()[i];
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor w = k.inputs.size() > 1 ? ContiguousCopyIfNeeded(k.inputs[1]) : Tensor();
  Tensor b = k.inputs.size() > 2 ? ContiguousCopyIfNeeded(k.inputs[2]) : Tensor();
  SJ_DISPATCH_FLOAT(x.dtype(), "layer_norm", {
    const T* src = x.data<T>();
    T* dst = k.out.data<T>();
    const T* wp = w.defined() ? w.data<T>() : nullptr;
    const T* bp = b.defined() ? b.data<T>() : nullptr;
    ParallelFor(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)),
                [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* in = src + r * n;
        T* out = dst + r * n;
        double mean = 0, ss = 0;
        for (int64_t i = 0; i < n; ++i) mean += static_cast<Acc>(in[i]);
        mean /= n;
        for (int64_t i = 0; i < n; ++i) {
          double d = static_cast<Acc>(in[i]) - mean;
          ss += d * d;
        }
        const double rstd = 1.0 / std::sqrt(ss / n + eps);
        for (int64_t i = 0; i < n; ++i) {
          double y = (static_cast<Acc>(in[i]) - mean) * rstd;
          if (wp) y *= static_cast<Acc>(wp[i]);
          if (bp) y += static_cast<Acc>(bp[i]);
          out[i] = Convert<T>(y);
        }
      }
    });
  });
}

void CrossEntropyKernel(const KernelArgs& k) {
  const Tensor x = ContiguousCopyIfNeeded(k.inputs[0]);
  const Tensor t = ContiguousCopyIfNeeded(k.inputs[1]);
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const double ls = ir::AttrFloat(k.op, k.attrs, ir::AttrKey::kLabelSmoothing);
  const std::string reduction =
      ir::AttrString(k.op, k.attrs, ir::AttrKey::kReduction);
  const int64_t* tp = t.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    SJ_REQUIRE(tp[i] >= 0 && tp[i] < c, "cross_entropy: target ", tp[i], " at position ", i,
               " is out of range for ", c, " classes");
  }
  std::vector<double> losses(n);
  SJ_DISPATCH_FLOAT(x.dtype(), "cross_entropy", {
    const T* xp = x.data<T>();
    ParallelFor(n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(c, 1)),
                [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* row = xp + i * c;
        double mx = -std::numeric_limits<double>::infinity(), sum_x = 0;
        for (int64_t j = 0; j < c; ++j) {
          mx = std::max<double>(mx, static_cast<Acc>(row[j]));
          sum_x += static_cast<Acc>(row[j]);
        }
        double s = 0;
        for (int64_t j = 0; j < c; ++j)
          s += Exp(static_cast<double>(row[j]) - mx);
        const double lse = mx + Log(s);
        const double nll = lse - static_cast<Acc>(row[tp[i]]);
        losses[i] = (1.0 - ls) * nll + ls * (lse - sum_x / c);
      }
    });
    if (reduction == "none") {
      T* o = k.out.data<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = Convert<T>(losses[i]);
    } else {
      double total = std::accumulate(losses.begin(), losses.end(), 0.0);
      if (reduction == "mean") total /= static_cast<double>(n);
      *k.out.data<T>() = Convert<T>(n == 0 && reduction == "mean"
                                        ? std::numeric_limits<double>::quiet_NaN()
                                        : total);
    }
  });
}

void MseLossKernel(const KernelArgs& k) {
  const Tensor a = ContiguousCopyIfNeeded(k.inputs[0]);
  const Tensor b = ContiguousCopyIfNeeded(k.inputs[1]);
  const std::string reduction =
      ir::AttrString(k.op, k.attrs, ir::AttrKey::kReduction);
  const int64_t n = a.numel();
  SJ_DISPATCH_FLOAT(a.dtype(), "mse_loss", {
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    if (reduction == "none") {
      T* o = k.out.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        const Acc d = static_cast<Acc>(ap[i]) - static_cast<Acc>(bp[i]);
        o[i] = Convert<T>(d * d);
      }
    } else {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(static_cast<Acc>(ap[i])) - static_cast<Acc>(bp[i]);
        s += d * d;
      }
      if (reduction == "mean") s /= static_cast<double>(n);
      *k.out.data<T>() = Convert<T>(s);
    }
  });
}

std::vector<int64_t> IndicesAsI64(const Tensor& idx, int64_t limit, const char* op) {
  Tensor c = ContiguousCopyIfNeeded(idx);
  std::vector<int64_t> v(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) {
    v[i] = c.dtype() == ir::DType::kI64 ? c.data<int64_t>()[i] : c.data<int32_t>()[i];
    SJ_REQUIRE(v[i] >= 0 && v[i] < limit, op, ": index ", v[i], " at position ", i,
               " is out of range [0, ", limit, ")");
  }
  return v;
}

void EmbeddingKernel(const KernelArgs& k) {
  const Tensor w = ContiguousCopyIfNeeded(k.inputs[0]);
  const int64_t dim = w.shape()[1];
  std::vector<int64_t> idx = IndicesAsI64(k.inputs[1], w.shape()[0], "embedding");
  const int64_t bytes = dim * w.element_size();
  char* out = static_cast<char*>(k.out.data_ptr());
  const char* src = static_cast<const char*>(w.data_ptr());
  for (size_t i = 0; i < idx.size(); ++i) std::memcpy(out + i * bytes, src + idx[i] * bytes, bytes);
}

void EmbeddingBackwardKernel(const KernelArgs& k) {
  const Tensor g = ContiguousCopyIfNeeded(k.inputs[0]);
  const int64_t num = k.out.shape()[0], dim = k.out.shape()[1];
  std::vector<int64_t> idx = IndicesAsI64(k.inputs[1], num, "embedding_backward");
  SJ_DISPATCH_FLOAT(g.dtype(), "embedding_backward", {
    std::vector<double> acc(num * dim, 0.0);
    const T* gp = g.data<T>();
    for (size_t i = 0; i < idx.size(); ++i) {
      for (int64_t j = 0; j < dim; ++j) acc[idx[i] * dim + j] += static_cast<Acc>(gp[i * dim + j]);
    }
    T* o = k.out.data<T>();
    for (int64_t i = 0; i < num * dim; ++i) o[i] = Convert<T>(acc[i]);
  });
}

void OneHotKernel(const KernelArgs& k) {
  const int64_t c = k.attrs.GetInt(AttrKey::kNumClasses);
  std::vector<int64_t> idx = IndicesAsI64(k.inputs[0], c, "one_hot");
  FillWith(k.out, 0.0);
  SJ_DISPATCH_ALL(k.out.dtype(), "one_hot", {
    T* o = k.out.data<T>();
    for (size_t i = 0; i < idx.size(); ++i) o[i * c + idx[i]] = Convert<T>(1.0);
  });
}

void SliceBackwardKernel(const KernelArgs& k) {
  FillWith(k.out, 0.0);
  CopyInto(SliceBackwardWindow(k.out, k.inputs[0], k.attrs), k.inputs[0]);
}

void DropoutKernel(const KernelArgs& k) {
  const Tensor x = ContiguousCopyIfNeeded(k.inputs[0]);
  const double p = k.attrs.GetDouble(AttrKey::kP);
  const auto [seed, offset] = RandomStart(k);
  const double scale = 1.0 / (1.0 - p);
  SJ_DISPATCH_FLOAT(x.dtype(), "dropout", {
    const T* xp = x.data<T>();
    T* o = k.out.data<T>();
    ParallelFor(x.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const bool keep = UniformFromBits(PhiloxWord(seed, offset + i)) >= p;
        o[i] = Convert<T>(keep ? static_cast<Acc>(xp[i]) * static_cast<Acc>(scale) : Acc(0));
      }
    });
  });
}

}  // namespace

Tensor SliceBackwardWindow(const Tensor& out, const Tensor& grad, const ir::Attrs& attrs) {
  const int64_t d = ir::WrapDim(attrs.GetInt(AttrKey::kDim), out.dim());
  int64_t start = attrs.GetInt(AttrKey::kStart);
  if (start < 0) start += out.shape()[d];
  start = std::clamp<int64_t>(start, 0, out.shape()[d]);
  Shape strides = out.strides();
  strides[d] *=
      ir::GetAttr<ir::OpId::kSliceBackward, ir::AttrKey::kStep>(attrs);
  return MakeTensor(out.storage(), grad.shape(), strides,
                    out.offset() + start * out.strides()[d], out.dtype());
}

Tensor WindowAlong(const Tensor& t, int64_t d, int64_t start, int64_t len) {
  Shape shape = t.shape();
  shape[d] = len;
  return MakeTensor(t.storage(), shape, t.strides(),
                    t.offset() + start * t.strides()[d], t.dtype());
}

void CopyIntoCatWindows(const KernelArgs& k,
                        void (*copy)(const Tensor& dst, const Tensor& src)) {
  const int64_t d =
      ir::WrapDim(ir::AttrInt(k.op, k.attrs, ir::AttrKey::kDim), k.out.dim());
  int64_t start = 0;
  for (const Tensor& x : k.inputs) {
    const int64_t len = x.shape()[d];
    if (x.numel() > 0) copy(WindowAlong(k.out, d, start, len), x);
    start += len;
  }
}

void CatKernel(const KernelArgs& k) { CopyIntoCatWindows(k, &CopyInto); }

void RegisterNnKernels(KernelTable& table) {
  table[static_cast<int>(OpId::kCat)] = &CatKernel;
  table[static_cast<int>(OpId::kSoftmax)] = &SoftmaxKernel<false>;
  table[static_cast<int>(OpId::kLogSoftmax)] = &SoftmaxKernel<true>;
  table[static_cast<int>(OpId::kLayerNorm)] = &LayerNormKernel;
  table[static_cast<int>(OpId::kCrossEntropy)] = &CrossEntropyKernel;
  table[static_cast<int>(OpId::kMseLoss)] = &MseLossKernel;
  table[static_cast<int>(OpId::kEmbedding)] = &EmbeddingKernel;
  table[static_cast<int>(OpId::kEmbeddingBackward)] = &EmbeddingBackwardKernel;
  table[static_cast<int>(OpId::kOneHot)] = &OneHotKernel;
  table[static_cast<int>(OpId::kSliceBackward)] = &SliceBackwardKernel;
  table[static_cast<int>(OpId::kDropout)] = &DropoutKernel;
}

}  // namespace stepjit::runtime::cpu
