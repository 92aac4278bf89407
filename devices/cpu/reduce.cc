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

struct Plan {
  Tensor rows;  // contiguous [K, R] view of the input with reduced dims last
  int64_t k = 1, r = 1;
  bool leading = false;  // input is contiguous [R, K] (reduced dims lead)
};

Plan MakePlan(const Tensor& x, const std::vector<int64_t>& dims, bool allow_leading) {
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
        double ss = 0;
        for (int64_t i = 0; i < r; ++i) {
          const double d = static_cast<double>(static_cast<Acc>(row[i])) - mean;
          ss += d * d;
        }
        const double denom = static_cast<double>(r - correction);
        out[k] = Convert<Out>(denom > 0 ? ss / denom : std::numeric_limits<double>::quiet_NaN());
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
  Plan plan = MakePlan(x, dims, op == OpId::kSum || op == OpId::kMean);
  if (plan.r == 0) {  // empty reduction: sum 0, mean/var NaN
    FillWith(k.out, op == OpId::kSum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    return;
  }
  SJ_DISPATCH_ALL(x.dtype(), ir::OpName(op), {
    if constexpr (op == OpId::kArgmax) {
      ReduceRows<op, T, Acc>(plan, k.out.data<int64_t>(), correction);
    } else if constexpr (op == OpId::kSum) {
      if (k.out.dtype() == ir::DType::kI64) {
        if (plan.leading) ReduceLeading<op, T, Acc>(plan, k.out.data<int64_t>());
        else ReduceRows<op, T, Acc>(plan, k.out.data<int64_t>(), correction);
      } else if (plan.leading) {
        ReduceLeading<op, T, Acc>(plan, k.out.data<T>());
      } else {
        ReduceRows<op, T, Acc>(plan, k.out.data<T>(), correction);
      }
    } else if constexpr (op == OpId::kMean) {
      if (plan.leading) ReduceLeading<op, T, Acc>(plan, k.out.data<T>());
      else ReduceRows<op, T, Acc>(plan, k.out.data<T>(), correction);
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
