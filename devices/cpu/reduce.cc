// Eager CPU reductions (sum, mean, amax, argmax, var) over any dims, accumulating in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "devices/cpu/kernels.h"
#include "devices/cpu/loops.h"
#include "ir/infer.h"
#include "ir/op_attrs.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::OpId;

namespace {

// Wider type for accumulation: double for floats, int64 for integers/bools.
template <typename Acc>
using Wide = std::conditional_t<std::is_floating_point_v<Acc>, double, int64_t>;

template <typename T, typename Acc>
Wide<Acc> RowSum(const T* row, int64_t n) {
  // Eight independent partial sums: exact order is fixed (deterministic)
  // and the loop has enough parallelism to keep the FPU busy.
  Wide<Acc> part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) part[j] += static_cast<Wide<Acc>>(static_cast<Acc>(row[i + j]));
  }
  for (; i < n; ++i) part[i % 8] += static_cast<Wide<Acc>>(static_cast<Acc>(row[i]));
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// The 8 partial sums of RowSum, carried across the segments of one row:
// element p of the row (counting from the row's start) goes to part[p % 8],
// so a row read in segments sums exactly as RowSum sums it whole.
template <typename Acc>
struct StripedSum {
  Wide<Acc> part[8] = {};
  int64_t pos = 0;
  template <typename T>
  void Add(const T* seg, int64_t n) {
    int64_t i = 0;
    for (; i < n && pos % 8 != 0; ++i, ++pos)
      part[pos % 8] += static_cast<Wide<Acc>>(static_cast<Acc>(seg[i]));
    for (; i + 8 <= n; i += 8, pos += 8) {
      for (int j = 0; j < 8; ++j)
        part[j] += static_cast<Wide<Acc>>(static_cast<Acc>(seg[i + j]));
    }
    for (; i < n; ++i, ++pos)
      part[pos % 8] += static_cast<Wide<Acc>>(static_cast<Acc>(seg[i]));
  }
  // Adds (seg[i] - mean)^2 in double, striped the same way.
  template <typename T>
  void AddSquares(const T* seg, int64_t n, double mean) {
    auto sq = [&](int64_t i) {
      const double d = static_cast<double>(static_cast<Acc>(seg[i])) - mean;
      return d * d;
    };
    int64_t i = 0;
    for (; i < n && pos % 8 != 0; ++i, ++pos) part[pos % 8] += sq(i);
    for (; i + 8 <= n; i += 8, pos += 8) {
      for (int j = 0; j < 8; ++j) part[j] += sq(i + j);
    }
    for (; i < n; ++i, ++pos) part[pos % 8] += sq(i);
  }
  Wide<Acc> Total() const {
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
  }
};

struct Plan {
  Tensor rows;  // contiguous [K, R] view of the input with reduced dims last
  int64_t k = 1, r = 1;
  bool leading = false;  // input is contiguous [R, K] (reduced dims lead)
  // Input is contiguous [outer, K, inner] with outer and inner reduced (the
  // channel statistics of NCHW): row k is `outer` segments of `inner`
  // elements, read in place (no transposing copy). rows is the input.
  bool middle = false;
  int64_t outer = 1, inner = 1;
};

Plan MakePlan(const Tensor& x, const std::vector<int64_t>& dims,
              bool allow_leading, bool allow_middle) {
  Plan plan;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      perm.push_back(d);
      plan.k *= x.shape()[d];
    }
  }
  for (int64_t d : dims) {
    perm.push_back(d);
    plan.r *= x.shape()[d];
  }
  bool leading_dims = true;
  for (size_t i = 0; i < dims.size(); ++i) leading_dims &= dims[i] == static_cast<int64_t>(i);
  if (allow_leading && leading_dims && !dims.empty() && x.is_contiguous() && plan.k > 1) {
    plan.leading = true;
    plan.rows = x;
    return plan;
  }
  // Kept dims [a, b) between reduced dims on both sides.
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t d : dims) reduced[d] = true;
  int64_t a = 0;
  while (a < rank && reduced[a]) ++a;
  int64_t b = a;
  while (b < rank && !reduced[b]) ++b;
  bool middle = allow_middle && a > 0 && b > a && b < rank && x.is_contiguous();
  for (int64_t d = b; d < rank; ++d) middle &= reduced[d];
  if (middle) {
    plan.middle = true;
    plan.rows = x;
    for (int64_t d = 0; d < a; ++d) plan.outer *= x.shape()[d];
    for (int64_t d = b; d < rank; ++d) plan.inner *= x.shape()[d];
    return plan;
  }
  plan.rows = ContiguousCopyIfNeeded(PermutedView(x, perm));
  return plan;
}

template <OpId op, typename T, typename Acc, typename Out>
void ReduceRows(const Plan& plan, Out* out, int64_t correction) {
  const T* base = plan.rows.template data<T>();
  const int64_t r = plan.r;
  ParallelFor(plan.k, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(r, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const T* row = base + k * r;
      if constexpr (op == OpId::kSum || op == OpId::kMean) {
        auto s = RowSum<T, Acc>(row, r);
        if constexpr (op == OpId::kMean) {
          out[k] = Convert<Out>(static_cast<double>(s) / static_cast<double>(r));
        } else {
          out[k] = Convert<Out>(s);
        }
      } else if constexpr (op == OpId::kAmax || op == OpId::kArgmax) {
        Acc best = static_cast<Acc>(row[0]);
        int64_t at = 0;
        for (int64_t i = 1; i < r && best == best; ++i) {
          const Acc v = static_cast<Acc>(row[i]);
          if (v > best || v != v) best = v, at = i;
        }
        if constexpr (op == OpId::kAmax) out[k] = Convert<Out>(best);
        else out[k] = Convert<Out>(at);
      } else {  // var: two passes for accuracy
        const double mean = static_cast<double>(RowSum<T, Acc>(row, r)) / r;
        StripedSum<double> ss;
        ss.AddSquares(row, r, mean);
        const double denom = static_cast<double>(r - correction);
        out[k] =
            Convert<Out>(denom > 0 ? ss.Total() / denom
                                   : std::numeric_limits<double>::quiet_NaN());
      }
    }
  });
}

// Reduced dims lead and the input is contiguous: accumulate whole rows of K
// (vectorizes along K, no transpose copy). Used for sum/mean, e.g. bias grads.
template <OpId op, typename T, typename Acc, typename Out>
void ReduceLeading(const Plan& plan, Out* out) {
  const T* base = plan.rows.template data<T>();
  const int64_t k_total = plan.k, r = plan.r;
  ParallelFor(k_total, std::max<int64_t>(256, kParallelGrain / std::max<int64_t>(r, 1)),
              [&](int64_t b, int64_t e) {
    std::vector<Wide<Acc>> acc(e - b, Wide<Acc>(0));
    for (int64_t i = 0; i < r; ++i) {
      const T* row = base + i * k_total;
      for (int64_t k = b; k < e; ++k) acc[k - b] += static_cast<Wide<Acc>>(static_cast<Acc>(row[k]));
    }
    for (int64_t k = b; k < e; ++k) {
      if constexpr (op == OpId::kMean) {
        out[k] = Convert<Out>(static_cast<double>(acc[k - b]) / static_cast<double>(r));
      } else {
        out[k] = Convert<Out>(acc[k - b]);
      }
    }
  });
}

// Plan::middle: each kept k sums its `outer` segments in row order, as
// ReduceRows sums the transposed copy's row (sum, mean, var).
template <OpId op, typename T, typename Acc, typename Out>
void ReduceMiddle(const Plan& plan, Out* out, int64_t correction) {
  const T* base = plan.rows.template data<T>();
  const int64_t kk = plan.k, inner = plan.inner, outer = plan.outer;
  auto segment = [&](int64_t k, int64_t o) {
    return base + (o * kk + k) * inner;
  };
  ParallelFor(kk, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      StripedSum<Acc> sum;
      for (int64_t o = 0; o < outer; ++o) sum.Add(segment(k, o), inner);
      const double r = static_cast<double>(plan.r);
      if constexpr (op == OpId::kSum) {
        out[k] = Convert<Out>(sum.Total());
      } else if constexpr (op == OpId::kMean) {
        out[k] = Convert<Out>(static_cast<double>(sum.Total()) / r);
      } else {  // var: two passes for accuracy
        const double mean = static_cast<double>(sum.Total()) / r;
        StripedSum<double> ss;
        for (int64_t o = 0; o < outer; ++o)
          ss.AddSquares(segment(k, o), inner, mean);
        const double denom = static_cast<double>(plan.r - correction);
        out[k] =
            Convert<Out>(denom > 0 ? ss.Total() / denom
                                   : std::numeric_limits<double>::quiet_NaN());
      }
    }
  });
}

template <OpId op>
void ReduceKernel(const KernelArgs& k) {
  const Tensor& x = k.inputs[0];
  std::vector<int64_t> dims = op == OpId::kArgmax
                                  ? std::vector<int64_t>{k.attrs.GetInt(AttrKey::kDim)}
                                  : k.attrs.GetInts(AttrKey::kDims);
  dims = ValueOrThrow(ir::NormalizeDims(dims, x.dim()));
  if (k.out.numel() == 0) return;
  const int64_t correction =
      op == OpId::kVar ? ir::GetAttr<OpId::kVar, AttrKey::kCorrection>(k.attrs)
                       : 0;
  Plan plan =
      MakePlan(x, dims, op == OpId::kSum || op == OpId::kMean,
               op == OpId::kSum || op == OpId::kMean || op == OpId::kVar);
  if (plan.r == 0) {  // empty reduction: sum 0, mean/var NaN
    FillWith(k.out, op == OpId::kSum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    return;
  }
  SJ_DISPATCH_ALL(x.dtype(), ir::OpName(op), {
    if constexpr (op == OpId::kSum || op == OpId::kMean || op == OpId::kVar) {
      if (plan.middle) {
        if (op == OpId::kSum && k.out.dtype() == ir::DType::kI64) {
          ReduceMiddle<op, T, Acc>(plan, k.out.data<int64_t>(), correction);
        } else {
          ReduceMiddle<op, T, Acc>(plan, k.out.data<T>(), correction);
        }
        return;
      }
    }
    if constexpr (op == OpId::kArgmax) {
      ReduceRows<op, T, Acc>(plan, k.out.data<int64_t>(), correction);
    } else if constexpr (op == OpId::kSum) {
      if (k.out.dtype() == ir::DType::kI64) {
        if (plan.leading)
          ReduceLeading<op, T, Acc>(plan, k.out.data<int64_t>());
        else
          ReduceRows<op, T, Acc>(plan, k.out.data<int64_t>(), correction);
      } else if (plan.leading) {
        ReduceLeading<op, T, Acc>(plan, k.out.data<T>());
      } else {
        ReduceRows<op, T, Acc>(plan, k.out.data<T>(), correction);
      }
    } else if constexpr (op == OpId::kMean) {
      if (plan.leading)
        ReduceLeading<op, T, Acc>(plan, k.out.data<T>());
      else
        ReduceRows<op, T, Acc>(plan, k.out.data<T>(), correction);
    } else {
      ReduceRows<op, T, Acc>(plan, k.out.data<T>(), correction);
    }
  });
}

}  // namespace

void RegisterReductionKernels(KernelTable& table) {
  table[static_cast<int>(OpId::kSum)] = &ReduceKernel<OpId::kSum>;
  table[static_cast<int>(OpId::kMean)] = &ReduceKernel<OpId::kMean>;
  table[static_cast<int>(OpId::kAmax)] = &ReduceKernel<OpId::kAmax>;
  table[static_cast<int>(OpId::kArgmax)] = &ReduceKernel<OpId::kArgmax>;
  table[static_cast<int>(OpId::kVar)] = &ReduceKernel<OpId::kVar>;
}

}  // namespace stepjit::runtime::cpu
