// Row ops: softmax, log_softmax, layer_norm, and the losses, against the
// float64 references of tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// softmax / log_softmax / layer_norm.

// Rows of `in` (row-major `shape`) along `dim`: the flat indices of each row.
std::vector<std::vector<int64_t>> RowsAlong(const Dims& shape, int64_t dim) {
  std::map<std::vector<int64_t>, std::vector<int64_t>> rows;
  for (int64_t i = 0; i < Numel(shape); ++i) {
    Dims idx = Unravel(i, shape);
    idx[dim] = 0;
    rows[idx].push_back(i);
  }
  std::vector<std::vector<int64_t>> out;
  for (auto& [k, r] : rows) out.push_back(r);
  return out;
}

Values RefSoftmax(const Values& in, const Dims& shape, int64_t dim, bool log) {
  Values out(in.size());
  for (const auto& row : RowsAlong(shape, dim)) {
    double mx = -kInf;
    for (int64_t i : row) mx = std::max(mx, in[i]);
    double s = 0;
    for (int64_t i : row) s += std::exp(in[i] - mx);
    for (int64_t i : row)
      out[i] = log ? in[i] - mx - std::log(s) : std::exp(in[i] - mx) / s;
  }
  return out;
}

class SoftmaxTest : public ::testing::TestWithParam<DType> {};

TEST_P(SoftmaxTest, EveryDimAndLayout) {
  const DType dt = GetParam();
  const Tensor inputs[] = {
      RandomTensor({3, 4, 5}, dt, -3, 3, 31),
      RandomTensor({5, 3, 4}, dt, -3, 3, 32).permute({1, 2, 0})};
  for (const Tensor& x : inputs) {
    const Values in = Read(x);
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      for (bool log : {false, true}) {
        const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(ShapeOf(y), (Dims{3, 4, 5}));
        EXPECT_TRUE(AllClose(Read(y), RefSoftmax(in, {3, 4, 5}, d, log),
                             TolFor(dt, true)))
            << (log ? "log_softmax " : "softmax ") << Name(dt) << " dim " << dim
            << (x.is_contiguous() ? "" : " non-contiguous");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, SoftmaxTest,
                         ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return Name(info.param); });

TEST(SoftmaxValuesTest, LargeAndInfiniteLogitsAreStable) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Values v = {1000, 1001, 1002, -kInf, 0, 1, -1000, -999, -998};
    const Tensor x = Make(v, {3, 3}, dt);
    EXPECT_TRUE(AllClose(Read(softmax(x, 1)), RefSoftmax(v, {3, 3}, 1, false),
                         TolFor(dt, true)));
    EXPECT_TRUE(AllClose(Read(log_softmax(x, 1)),
                         RefSoftmax(v, {3, 3}, 1, true), TolFor(dt, true)));
    EXPECT_TRUE(AllClose(Read(softmax(x, 0)), RefSoftmax(v, {3, 3}, 0, false),
                         TolFor(dt, true)));
  }
}

Values RefLayerNorm(const Values& x, int64_t n, const Values* w,
                    const Values* b, double eps) {
  Values out(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mu += x[r * n + i] / n;
    for (int64_t i = 0; i < n; ++i)
      var += (x[r * n + i] - mu) * (x[r * n + i] - mu) / n;
    for (int64_t i = 0; i < n; ++i) {
      double y = (x[r * n + i] - mu) / std::sqrt(var + eps);
      if (w) y *= (*w)[i];
      if (b) y += (*b)[i];
      out[r * n + i] = y;
    }
  }
  return out;
}

class LayerNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(LayerNormTest, OneAndTwoTrailingDimsWithAndWithoutAffine) {
  const DType dt = GetParam();
  const Tensor inputs[] = {
      RandomTensor({2, 3, 4}, dt, -2, 3, 41),
      RandomTensor({4, 2, 3}, dt, -2, 3, 42).permute({1, 2, 0})};
  for (const Tensor& x : inputs) {
    const Values in = Read(x);
    for (const Dims& norm : {Dims{4}, Dims{3, 4}}) {
      const int64_t n = Numel(norm);
      const Tensor w = RandomTensor(norm, dt, 0.5, 1.5, 43),
                   b = RandomTensor(norm, dt, -1, 1, 44);
      const Values vw = Read(w), vb = Read(b);
      for (int affine = 0; affine < 3; ++affine) {
        for (double eps : {1e-5, 0.1}) {
          const Tensor y = layer_norm(x, norm, affine > 0 ? w : Tensor(),
                                      affine > 1 ? b : Tensor(), eps);
          EXPECT_EQ(y.dtype(), dt);
          EXPECT_EQ(ShapeOf(y), (Dims{2, 3, 4}));
          const Values want = RefLayerNorm(in, n, affine > 0 ? &vw : nullptr,
                                           affine > 1 ? &vb : nullptr, eps);
          EXPECT_TRUE(AllClose(Read(y), want, TolFor(dt, true)))
              << Name(dt) << " normalized " << DimsString(norm) << " affine "
              << affine << " eps " << eps
              << (x.is_contiguous() ? "" : " non-contiguous");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, LayerNormTest,
                         ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return Name(info.param); });

// ---------------------------------------------------------------------------
// Losses.

Values RefCrossEntropyRows(const Values& x, const Values& t, int64_t c,
                           double ls) {
  const int64_t n = t.size();
  Values loss(n);
  for (int64_t i = 0; i < n; ++i) {
    double mx = -kInf, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - mx);
    const double lse = mx + std::log(s);
    // -sum_j q_j log p_j with q = (1 - ls) * onehot(t) + ls / C.
    double l = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double q = (j == t[i] ? 1 - ls : 0) + ls / c;
      l -= q * (x[i * c + j] - lse);
    }
    loss[i] = l;
  }
  return loss;
}

TEST(CrossEntropyTest, ReductionsAndLabelSmoothing) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    const Tensor x = RandomTensor({6, 5}, dt, -3, 3, 101);
    const Values t = {0, 4, 2, 2, 1, 3};
    const Tensor tt = Make(t, {6}, DType::kI64);
    for (double ls : {0.0, 0.1}) {
      const Values rows = RefCrossEntropyRows(Read(x), t, 5, ls);
      double total = 0;
      for (double r : rows) total += r;
      const Tensor none = cross_entropy(x, tt, "none", ls);
      EXPECT_EQ(none.dtype(), dt);
      EXPECT_EQ(ShapeOf(none), (Dims{6}));
      EXPECT_TRUE(AllClose(Read(none), rows, TolFor(dt, true)))
          << Name(dt) << " ls " << ls;
      const Tensor s = cross_entropy(x, tt, "sum", ls),
                   m = cross_entropy(x, tt, "mean", ls);
      EXPECT_EQ(ShapeOf(s), Dims{});
      EXPECT_TRUE(AllClose(Read(s), {total}, TolFor(dt, true)))
          << Name(dt) << " ls " << ls;
      EXPECT_TRUE(AllClose(Read(m), {total / 6}, TolFor(dt, true)))
          << Name(dt) << " ls " << ls;
    }
    // Non-contiguous logits.
    const Tensor xt = RandomTensor({5, 6}, dt, -3, 3, 102).t();
    EXPECT_TRUE(AllClose(Read(cross_entropy(xt, tt, "none")),
                         RefCrossEntropyRows(Read(xt), t, 5, 0),
                         TolFor(dt, true)));
  }
}

TEST(CrossEntropyTest, LargeLogitsAreStable) {
  const Values v = {1000, 0, -1000, 500, 501, 502};
  const Tensor x = Make(v, {2, 3});
  const Values want = RefCrossEntropyRows(v, {0, 1}, 3, 0);
  EXPECT_TRUE(
      AllClose(Read(cross_entropy(x, Make({0, 1}, {2}, DType::kI64), "none")),
               want, TolFor(DType::kF32, true)));
}

TEST(MseLossTest, Reductions) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16}) {
    const Tensor a = RandomTensor({3, 4}, dt, -2, 2, 111);
    const Tensor b = RandomTensor({4, 3}, dt, -2, 2, 112).t();
    const Values va = Read(a), vb = Read(b);
    Values sq;
    double total = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      sq.push_back((va[i] - vb[i]) * (va[i] - vb[i]));
      total += sq.back();
    }
    const Tensor none = mse_loss(a, b, "none");
    EXPECT_EQ(none.dtype(), dt);
    EXPECT_EQ(ShapeOf(none), (Dims{3, 4}));
    EXPECT_TRUE(AllClose(Read(none), sq, TolFor(dt))) << Name(dt);
    EXPECT_TRUE(AllClose(Read(mse_loss(a, b, "sum")), {total}, TolFor(dt)))
        << Name(dt);
    EXPECT_TRUE(AllClose(Read(mse_loss(a, b)), {total / 12}, TolFor(dt)))
        << Name(dt);
  }
  ExpectError(
      [] {
        mse_loss(zeros({2, 3}), zeros({3, 2}));
      },
      {"mse_loss", "[2, 3]", "[3, 2]"});
  ExpectError([] { mse_loss(zeros({2}), zeros({2}), "avg"); },
              {"mse_loss", "avg"});
}

// Large tensors: the threaded kernel paths (> 2 * 32768 elements per op).
TEST(LargeTensorTest, SoftmaxLayerNormCrossEntropy) {
  const Tensor x = RandomTensor({300, 400}, DType::kF32, -4, 4, 171);
  const Values v = Read(x);
  EXPECT_TRUE(AllClose(Read(softmax(x, 1)), RefSoftmax(v, {300, 400}, 1, false),
                       TolFor(DType::kF32, true)));
  EXPECT_TRUE(AllClose(Read(log_softmax(x, 0)),
                       RefSoftmax(v, {300, 400}, 0, true),
                       TolFor(DType::kF32, true)));
  const Tensor w = RandomTensor({400}, DType::kF32, 0.5, 1.5, 172);
  const Tensor b = RandomTensor({400}, DType::kF32, -1, 1, 173);
  const Values vw = Read(w), vb = Read(b);
  EXPECT_TRUE(AllClose(Read(layer_norm(x, {400}, w, b)),
                       RefLayerNorm(v, 400, &vw, &vb, 1e-5),
                       TolFor(DType::kF32, true)));
  // cross_entropy over 2000 rows of 64 classes.
  const Tensor logits = RandomTensor({2000, 64}, DType::kF32, -4, 4, 174);
  Values t(2000);
  for (int i = 0; i < 2000; ++i) t[i] = (i * 37) % 64;
  const Values rows = RefCrossEntropyRows(Read(logits), t, 64, 0.1);
  EXPECT_TRUE(AllClose(
      Read(cross_entropy(logits, Make(t, {2000}, DType::kI64), "none", 0.1)),
      rows, TolFor(DType::kF32, true)));
  double total = 0;
  for (double r : rows) total += r;
  EXPECT_TRUE(AllClose(
      Read(cross_entropy(logits, Make(t, {2000}, DType::kI64), "mean", 0.1)),
      {total / 2000}, TolFor(DType::kF32, true)));
}

TEST(LargeTensorTest, MseLoss) {
  const Tensor a = RandomTensor({500, 300}, DType::kF32, -1, 1, 182);
  const Tensor b = RandomTensor({500, 300}, DType::kF32, -1, 1, 183);
  const Values va = Read(a), vb = Read(b);
  double s = 0;
  for (size_t i = 0; i < va.size(); ++i) s += (va[i] - vb[i]) * (va[i] - vb[i]);
  EXPECT_TRUE(
      AllClose(Read(mse_loss(a, b)), {s / va.size()}, TolFor(DType::kF32)));
}

}  // namespace
}  // namespace stepjit::op_test
