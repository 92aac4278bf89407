// The arithmetic of topk and multinomial, shared by the CPU kernels and
// spelled the same way in the CUDA kernels (devices/cuda/kernels), so that
// both devices select and draw the same indices.
#ifndef STEPJIT_DEVICES_CPU_SAMPLING_H_
#define STEPJIT_DEVICES_CPU_SAMPLING_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "runtime/generator.h"

namespace stepjit::runtime::cpu {

// Whether element (a, ia) comes before (b, ib) in topk's order: by value
// (descending when `largest`), NaN counted as the largest value, ties by
// the lower index.
template <typename A>
bool TopkBefore(A a, int64_t ia, A b, int64_t ib, bool largest) {
  bool na = false, nb = false;
  if constexpr (std::is_floating_point_v<A>) na = a != a, nb = b != b;
  if (na || nb) return na && nb ? ia < ib : (largest ? na : nb);
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

// Why a row of multinomial weights cannot be drawn from ("" when it can).
inline std::string MultinomialRowProblem(absl::Span<const double> w,
                                         int64_t samples, bool replacement) {
  int64_t positive = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i]) || w[i] < 0) {
      return absl::StrCat("has weight ", w[i], " at category ", i,
                          "; weights must be finite and >= 0");
    }
    positive += w[i] > 0;
  }
  if (positive == 0) return "has no positive weight";
  if (!replacement && positive < samples) {
    return absl::StrCat("has ", positive,
                        " categories with positive weight, fewer than the ",
                        samples, " samples drawn without replacement");
  }
  return "";
}

// With replacement: the category whose cumulative-weight interval holds a
// uniform draw scaled by the row's total (`cum` holds the running sums, in
// order; a category of weight 0 has an empty interval and is never drawn).
inline int64_t MultinomialPick(const double* cum, int64_t n, uint32_t word) {
  const double u = static_cast<double>(UniformFromBits(word)) * cum[n - 1];
  int64_t lo = 0, hi = n - 1;  // the first i with cum[i] > u
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (cum[mid] > u) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Without replacement: category i's arrival time in an exponential race,
// -log(U) / w_i with U in (0, 1]; the `samples` earliest arrivals (ties by
// index) are a draw without replacement in order. Weight 0 never arrives.
inline double MultinomialKey(double w, uint32_t word) {
  if (!(w > 0)) return std::numeric_limits<double>::infinity();
  return -std::log(1.0 - static_cast<double>(UniformFromBits(word))) / w;
}

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_SAMPLING_H_
