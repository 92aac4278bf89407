// topk and multinomial on the CPU: topk against a float64 stable sort of
// (value, index) pairs in every dtype and along every dim; multinomial's
// frequencies against the weights (and, without replacement, the second
// draw against its exact distribution), determinism under manual_seed and
// the errors a user can cause.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "tests/util/expect_error.h"

namespace stepjit {
namespace {

using test::ExpectError;
using Values = std::vector<double>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Values Read(const Tensor& t) {
  return t.contiguous().to(DType::kF64).to_vector<double>();
}
std::vector<int64_t> ReadIndices(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kI64);
  return t.contiguous().to_vector<int64_t>();
}

// The reference: row r of a [rows, n] array sorted by (value, index), NaN
// the largest, descending or ascending by value with ties by index.
std::vector<int64_t> ReferenceOrder(const Values& row, bool largest) {
  std::vector<int64_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto key = [&](int64_t i) {
    const double v = row[i];
    if (std::isnan(v))
      return largest ? -std::numeric_limits<double>::infinity()
                     : std::numeric_limits<double>::infinity();
    return largest ? -v : v;
  };
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t a, int64_t b) { return key(a) < key(b); });
  return idx;
}

// topk of `x` ([a, b, c]) along `dim` against the reference, for values and
// indices.
void ExpectTopkMatches(const Tensor& x, int64_t k, int64_t dim, bool largest,
                       const std::string& what) {
  const TopK t = topk(x, k, dim, largest);
  Shape want_shape = x.shape();
  want_shape[dim] = k;
  ASSERT_EQ(t.values.shape(), want_shape) << what;
  ASSERT_EQ(t.indices.shape(), want_shape) << what;
  EXPECT_EQ(t.values.dtype(), x.dtype()) << what;
  // Walk every row along `dim` through strides of a contiguous layout.
  const Values xv = Read(x), vv = Read(t.values);
  const std::vector<int64_t> iv = ReadIndices(t.indices);
  const Shape& s = x.shape();
  const int64_t n = s[dim];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= s[d];
  const int64_t outer = x.numel() / (n * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      Values row;
      for (int64_t j = 0; j < n; ++j)
        row.push_back(xv[(o * n + j) * inner + in]);
      const std::vector<int64_t> order = ReferenceOrder(row, largest);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * inner + in;
        EXPECT_EQ(iv[at], order[j])
            << what << " row " << o << "," << in << " slot " << j;
        const double want = row[order[j]];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(vv[at])) << what;
        } else {
          EXPECT_EQ(vv[at], want)
              << what << " row " << o << "," << in << " slot " << j;
        }
      }
    }
  }
}

TEST(TopkTest, MatchesAStableSortAlongEveryDimInEveryDType) {
  Generator gen(3);
  // Integer-valued draws in [-4, 4]: many ties, exact in every dtype.
  const Tensor base = randint(-4, 5, {3, 6, 5}, {.dtype = DType::kI64}, &gen);
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                   DType::kI64, DType::kI32}) {
    const Tensor x = base.to(dt);
    for (int64_t dim = 0; dim < 3; ++dim) {
      for (bool largest : {true, false}) {
        for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{2}, x.shape()[dim]}) {
          ExpectTopkMatches(x, k, dim, largest,
                            std::string(ir::DTypeName(dt)) + " dim " +
                                std::to_string(dim) +
                                (largest ? " largest" : " smallest") + " k " +
                                std::to_string(k));
        }
      }
    }
  }
  // Continuous values over a long row (the partial sort's deep path).
  const Tensor wide = randn({4, 1000}, {}, &gen);
  ExpectTopkMatches(wide, 17, 1, true, "wide");
  ExpectTopkMatches(wide, 17, 1, false, "wide smallest");
  // A strided operand and a negative dim.
  const TopK t = topk(wide.transpose(0, 1), 3, -2);
  EXPECT_EQ(Read(t.values), Read(topk(wide, 3, 1).values.transpose(0, 1)));
}

TEST(TopkTest, NanIsTheLargestAndTiesKeepTheLowerIndex) {
  const Tensor x =
      from_vector(Values{1.0, kNaN, 3.0, 3.0, -0.0, 0.0, kNaN}, {7});
  const TopK hi = topk(x, 7);
  EXPECT_EQ(ReadIndices(hi.indices),
            (std::vector<int64_t>{1, 6, 2, 3, 0, 4, 5}));
  const TopK lo = topk(x, 7, 0, false);
  EXPECT_EQ(ReadIndices(lo.indices),
            (std::vector<int64_t>{4, 5, 0, 2, 3, 1, 6}));
  const Values v = Read(lo.values);
  EXPECT_TRUE(std::signbit(v[0]));  // -0.0 kept as it was
  EXPECT_TRUE(std::isnan(v[5]) && std::isnan(v[6]));
}

TEST(TopkTest, RefusesBadArguments) {
  const Tensor x = zeros({2, 5});
  ExpectError([&] { topk(x, 6); }, {"topk", "k must be in [0, 5]", "got 6"});
  ExpectError([&] { topk(x, -1); }, {"topk", "k must be in [0, 5]", "got -1"});
  ExpectError([&] { topk(x, 1, 2); },
              {"topk", "dim 2 is out of range for rank 2"});
  ExpectError([&] { topk(scalar_tensor(1.0), 1); }, {"topk", "rank >= 1"});
  ExpectError([&] { topk(zeros({3}, {.dtype = DType::kBool}), 1); },
              {"topk", "bool"});
}

// Counts of each category over all rows and samples of `draws`.
std::map<int64_t, int64_t> Counts(const Tensor& draws) {
  std::map<int64_t, int64_t> c;
  for (int64_t i : ReadIndices(draws)) c[i]++;
  return c;
}

TEST(MultinomialTest, DrawsWithReplacementFollowTheWeights) {
  const Values w = {0.2, 0.0, 1.2,
                    0.6};  // sums to 2: probabilities 0.1 0 0.6 0.3
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    Generator gen(17);
    const Tensor p = from_vector(w, {1, 4}).to(dt).expand({4, 4});
    const Tensor d = multinomial(p, 5000, true, &gen);
    ASSERT_EQ(d.shape(), (Shape{4, 5000}));
    const std::map<int64_t, int64_t> c = Counts(d);
    EXPECT_EQ(c.count(1), 0u) << "a zero weight is never drawn";
    const double total = 20000;
    // Binomial(20000, p): sd <= 70; 5 sd.
    for (auto [cat, prob] :
         std::map<int64_t, double>{{0, 0.1}, {2, 0.6}, {3, 0.3}}) {
      EXPECT_NEAR(c.at(cat), total * prob, 350)
          << ir::DTypeName(dt) << " category " << cat;
    }
  }
  // One category with all the weight; a 1-d row; a 3-d batch.
  EXPECT_EQ(
      ReadIndices(multinomial(from_vector(Values{0, 0, 5}, {3}), 4, true)),
      (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(multinomial(ones({2, 3, 4}), 2, true).shape(), (Shape{2, 3, 2}));
}

TEST(MultinomialTest, DrawsWithoutReplacementAreDistinctAndInDrawOrder) {
  const Values w = {1, 2, 3, 4};
  const double sum = 10;
  Generator gen(5);
  const int64_t rows = 20000;
  const Tensor p = from_vector(w, {1, 4}).expand({rows, 4});
  const std::vector<int64_t> d = ReadIndices(multinomial(p, 4, false, &gen));
  std::vector<int64_t> first(4), second(4);
  for (int64_t r = 0; r < rows; ++r) {
    std::set<int64_t> seen(d.begin() + r * 4, d.begin() + r * 4 + 4);
    ASSERT_EQ(seen.size(), 4u) << "row " << r << " repeats a category";
    first[d[r * 4]]++;
    second[d[r * 4 + 1]]++;
  }
  // P(first = j) = w_j / sum; P(second = j) = sum_i!=j p_i p_j / (1 - p_i).
  for (int64_t j = 0; j < 4; ++j) {
    const double pj = w[j] / sum;
    double p2 = 0;
    for (int64_t i = 0; i < 4; ++i) {
      if (i != j) p2 += (w[i] / sum) * pj / (1 - w[i] / sum);
    }
    EXPECT_NEAR(first[j], rows * pj, 350) << "first draw " << j;
    EXPECT_NEAR(second[j], rows * p2, 350) << "second draw " << j;
  }
  // A zero weight is drawn by no row even when all others are taken first.
  const std::vector<int64_t> z = ReadIndices(
      multinomial(from_vector(Values{0, 1, 1}, {1, 3}).expand({50, 3}), 2));
  for (int64_t i : z) EXPECT_NE(i, 0);
}

TEST(MultinomialTest, ManualSeedRepeatsTheDrawsAndTheStreamMovesOn) {
  const Tensor p = rand({8, 30}) + 0.01;
  manual_seed(99);
  const std::vector<int64_t> a = ReadIndices(multinomial(p, 3));
  const std::vector<int64_t> b = ReadIndices(multinomial(p, 3, true));
  manual_seed(99);
  EXPECT_EQ(ReadIndices(multinomial(p, 3)), a);
  EXPECT_EQ(ReadIndices(multinomial(p, 3, true)), b);
  EXPECT_NE(ReadIndices(multinomial(p, 3)), a);
}

TEST(MultinomialTest, RefusesBadWeightsAndArguments) {
  auto row = [](Values v) {
    return from_vector(v, {1, static_cast<int64_t>(v.size())});
  };
  // multinomial(weights, num_samples, replacement) throws an error naming
  // multinomial and holding every one of `parts`.
  auto refused = [](const Tensor& weights, int64_t num_samples,
                    bool replacement, std::vector<std::string> parts) {
    parts.insert(parts.begin(), "multinomial");
    ExpectError([&] { multinomial(weights, num_samples, replacement); }, parts);
  };
  refused(row({1, -1, 2}), 1, false,
          {"row 0", "weight -1 at category 1", "finite and >= 0"});
  refused(row({1, kNaN}), 1, false, {"nan", "category 1"});
  refused(row({std::numeric_limits<double>::infinity(), 1}), 1, false,
          {"inf", "category 0"});
  refused(zeros({2, 3}), 1, true, {"row 0", "no positive weight"});
  EXPECT_NO_THROW(
      multinomial(row({1, 0, 1}), 3, true));  // fine with replacement
  refused(row({1, 0, 1}), 3, false,
          {"2 categories with positive weight", "3 samples"});
  refused(row({1, 2}), 3, false,
          {"num_samples must be >= 1 and <= 2", "got 3"});
  refused(row({1, 2}), 0, true, {"num_samples must be >= 1", "got 0"});
  refused(zeros({2, 3}, {.dtype = DType::kI64}), 1, false,
          {"floating-point weights"});
  refused(zeros({2, 0}), 1, false, {"non-empty last dim"});
  refused(scalar_tensor(1.0), 1, false, {"non-empty last dim"});
}

}  // namespace
}  // namespace stepjit
