// Eager CPU kernels for selection and sampling: topk and multinomial. Both
// work on rows: the op's dim moved last and made contiguous.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/kernels.h"
#include "devices/cpu/loops.h"
#include "devices/cpu/sampling.h"
#include "ir/op_attrs.h"
#include "runtime/generator.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::OpId;

namespace {

// `x` with dim `d` moved last: the permutation and the contiguous rows.
struct Rows {
  std::vector<int64_t> perm;
  Tensor rows;
  int64_t n;      // elements per row
  int64_t count;  // rows
};
Rows RowsAlong(const Tensor& x, int64_t d) {
  Rows r;
  r.perm = DimLastPermutation(x.dim(), d);
  r.rows = ContiguousCopyIfNeeded(PermutedView(x, r.perm));
  r.n = x.shape()[d];
  r.count = r.n == 0 ? 0 : x.numel() / r.n;
  return r;
}

// `out` with dim d moved last, when that view is contiguous (the kernel
// writes it directly); else a contiguous tensor of that shape, copied into
// `out` afterwards.
Tensor RowsShaped(const Tensor& out, absl::Span<const int64_t> perm) {
  const Tensor view = PermutedView(out, perm);
  return view.is_contiguous() ? view
                              : empty(view.shape(), {.dtype = out.dtype()});
}

void TopkKernel(const KernelArgs& k) {
  const Tensor& x = k.inputs[0];
  const int64_t d =
      ir::WrapDim(ir::AttrInt(k.op, k.attrs, ir::AttrKey::kDim), x.dim());
  const int64_t want = k.attrs.GetInt(AttrKey::kK);
  const bool largest = ir::AttrBool(k.op, k.attrs, ir::AttrKey::kLargest);
  const bool indices = k.attrs.GetBool(AttrKey::kIndices);
  if (k.out.numel() == 0) return;
  const Rows r = RowsAlong(x, d);
  Tensor result = RowsShaped(k.out, r.perm);
  SJ_DISPATCH_ALL(x.dtype(), "topk", {
    const T* src = r.rows.data<T>();
    ParallelFor(r.count, std::max<int64_t>(1, kParallelGrain / r.n),
                [&](int64_t b, int64_t e) {
                  std::vector<int64_t> order(static_cast<size_t>(r.n));
                  for (int64_t row = b; row < e; ++row) {
                    const T* v = src + row * r.n;
                    std::iota(order.begin(), order.end(), int64_t{0});
                    std::partial_sort(order.begin(), order.begin() + want,
                                      order.end(), [&](int64_t i, int64_t j) {
                                        return TopkBefore<Acc>(
                                            Convert<Acc>(v[i]), i,
                                            Convert<Acc>(v[j]), j, largest);
                                      });
                    for (int64_t j = 0; j < want; ++j) {
                      if (indices) {
                        result.data<int64_t>()[row * want + j] = order[j];
                      } else {
                        result.data<T>()[row * want + j] = v[order[j]];
                      }
                    }
                  }
                });
  });
  if (result.storage() != k.out.storage())
    CopyInto(PermutedView(k.out, r.perm), result);
}

void MultinomialKernel(const KernelArgs& k) {
  const Tensor& w = k.inputs[0];
  const int64_t samples = k.attrs.GetInt(AttrKey::kNumSamples);
  const bool replacement = k.attrs.GetBool(AttrKey::kReplacement);
  const auto [seed, offset] = RandomStart(k);
  const Rows r = RowsAlong(w, w.dim() - 1);
  // The weights as doubles, checked before any draw.
  std::vector<double> weights(static_cast<size_t>(r.count * r.n));
  SJ_DISPATCH_FLOAT(w.dtype(), "multinomial", {
    const T* src = r.rows.data<T>();
    for (size_t i = 0; i < weights.size(); ++i)
      weights[i] = Convert<double>(src[i]);
  });
  for (int64_t row = 0; row < r.count; ++row) {
    const std::string why = MultinomialRowProblem(
        absl::MakeConstSpan(weights).subspan(row * r.n, r.n), samples,
        replacement);
    SJ_REQUIRE(why.empty(), "multinomial: row ", row, " of the weights ", why);
  }
  int64_t* out = k.out.data<int64_t>();
  ParallelFor(r.count, std::max<int64_t>(1, kParallelGrain / (r.n * samples)),
              [&](int64_t b, int64_t e) {
                std::vector<double> scratch(static_cast<size_t>(r.n));
                std::vector<int64_t> order(static_cast<size_t>(r.n));
                for (int64_t row = b; row < e; ++row) {
                  const double* p = weights.data() + row * r.n;
                  int64_t* o = out + row * samples;
                  if (replacement) {
                    std::partial_sum(p, p + r.n, scratch.begin());
                    for (int64_t s = 0; s < samples; ++s) {
                      const uint32_t word =
                          PhiloxWord(seed, offset + row * samples + s);
                      o[s] = MultinomialPick(scratch.data(), r.n, word);
                    }
                  } else {
                    for (int64_t i = 0; i < r.n; ++i) {
                      scratch[i] = MultinomialKey(
                          p[i], PhiloxWord(seed, offset + row * r.n + i));
                    }
                    std::iota(order.begin(), order.end(), int64_t{0});
                    std::partial_sort(
                        order.begin(), order.begin() + samples, order.end(),
                        [&](int64_t i, int64_t j) {
                          return scratch[i] < scratch[j] ||
                                 (scratch[i] == scratch[j] && i < j);
                        });
                    std::copy(order.begin(), order.begin() + samples, o);
                  }
                }
              });
}

}  // namespace

void RegisterSamplingKernels(KernelTable& table) {
  table[static_cast<int>(OpId::kTopk)] = &TopkKernel;
  table[static_cast<int>(OpId::kMultinomial)] = &MultinomialKernel;
}

}  // namespace stepjit::runtime::cpu
