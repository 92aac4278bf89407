// Factories, random numbers and dropout, against the float64 references of
// tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// Factories and random numbers.

TEST(FactoryTest, FullZerosOnesForEveryDtype) {
  for (DType dt : kAllTypes) {
    const double value = dt == DType::kBool ? 1 : -3;
    const Tensor f = full({2, 3}, value, {.dtype = dt});
    EXPECT_EQ(f.dtype(), dt);
    EXPECT_EQ(ShapeOf(f), (Dims{2, 3}));
    EXPECT_TRUE(f.is_contiguous());
    EXPECT_TRUE(AllClose(Read(f), Values(6, value), {0, 0})) << Name(dt);
    EXPECT_TRUE(AllClose(Read(zeros({4}, {.dtype = dt})), Values(4, 0), {0, 0}))
        << Name(dt);
    EXPECT_TRUE(AllClose(Read(ones({4}, {.dtype = dt})), Values(4, 1), {0, 0}))
        << Name(dt);
  }
  EXPECT_TRUE(AllClose(Read(full({2}, 0.1, {.dtype = DType::kF16})),
                       {RoundHalf(0.1), RoundHalf(0.1)}, {0, 0}));
  EXPECT_EQ(ShapeOf(scalar_tensor(2.0)), Dims{});
  EXPECT_TRUE(AllClose(Read(scalar_tensor(2.5)), {2.5}, {0, 0}));
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
  ExpectError([] { zeros({2, -1}); }, {"negative"});
}

TEST(FactoryTest, Arange) {
  const Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::kI64);
  EXPECT_TRUE(AllClose(Read(a), {0, 1, 2, 3, 4}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(arange(0, 10, 3)), {0, 3, 6, 9}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(arange(5, 0, -2)), {5, 3, 1}, {0, 0}));
  const Tensor f = arange(1, 2, 0.25, {.dtype = DType::kF32});
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_TRUE(AllClose(Read(f), {1, 1.25, 1.5, 1.75}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(arange(-1, 0.5, 0.5, {.dtype = DType::kF64})),
                       {-1, -0.5, 0}, {0, 0}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  EXPECT_EQ(arange(3, 1).numel(), 0);
  ExpectError([] { arange(0, 1, 0); }, {"arange", "step"});
}

TEST(RandomTest, RandIsUniformOnZeroOne) {
  for (DType dt : kFloatTypes) {
    Generator gen(2024);
    const int64_t n = 100000;
    const Tensor r = rand({n}, {.dtype = dt}, &gen);
    EXPECT_EQ(r.dtype(), dt);
    const Values v = Read(r);
    double s = 0, ss = 0;
    for (double x : v) {
      ASSERT_GE(x, 0.0) << Name(dt);
      ASSERT_LT(x, 1.0) << Name(dt);
      s += x;
      ss += x * x;
    }
    const double mean = s / n, var = ss / n - mean * mean;
    // sd of the sample mean: sqrt(1/12 / n) = 0.00091; 0.005 is 5.5 sd
    // (bf16 rounding shifts values by <= 2e-3 but unbiased on average).
    EXPECT_NEAR(mean, 0.5, 0.005) << Name(dt);
    EXPECT_NEAR(var, 1.0 / 12, 0.003) << Name(dt);
  }
}

TEST(RandomTest, RandnIsStandardNormal) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    Generator gen(7);
    const int64_t n = 100000;
    const Values v = Read(randn({100, 1000}, {.dtype = dt}, &gen));
    double s = 0, ss = 0;
    int64_t within1 = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      s += x;
      ss += x * x;
      within1 += std::fabs(x) < 1;
    }
    const double mean = s / n, sd = std::sqrt(ss / n - mean * mean);
    // sd of the sample mean 1/sqrt(n) = 0.0032 (0.02 is 6.3 sd); of the sample
    // sd about 1/sqrt(2n) = 0.0022 (0.015 is 6.7 sd); of P(|x| < 1) about
    // sqrt(0.68 * 0.32 / n) = 0.0015 (0.01 is 6.8 sd).
    EXPECT_NEAR(mean, 0, 0.02) << Name(dt);
    EXPECT_NEAR(sd, 1, 0.015) << Name(dt);
    EXPECT_NEAR(static_cast<double>(within1) / n, 0.682689, 0.01) << Name(dt);
  }
}

TEST(RandomTest, RandintCoversTheRangeOnly) {
  for (DType dt : {DType::kI64, DType::kI32}) {
    Generator gen(11);
    const Tensor r = randint(-3, 7, {20000}, {.dtype = dt}, &gen);
    EXPECT_EQ(r.dtype(), dt);
    std::map<int64_t, int64_t> counts;
    for (double x : Read(r)) counts[static_cast<int64_t>(x)]++;
    ASSERT_EQ(counts.size(), 10u);
    EXPECT_EQ(counts.begin()->first, -3);
    EXPECT_EQ(counts.rbegin()->first, 6);
    // Each count ~ Binomial(20000, 0.1): mean 2000, sd 42.
    for (auto [value, count] : counts) EXPECT_NEAR(count, 2000, 300) << value;
  }
  ExpectError([] { randint(3, 3, {2}); }, {"randint", "low < high"});
}

TEST(RandomTest, ManualSeedMakesDrawsDeterministic) {
  manual_seed(42);
  const Values a = Read(rand({1000}));
  const Values b = Read(randn({1000}));
  const Values c = Read(randint(0, 100, {1000}));
  manual_seed(42);
  EXPECT_EQ(Read(rand({1000})), a);
  EXPECT_EQ(Read(randn({1000})), b);
  EXPECT_EQ(Read(randint(0, 100, {1000})), c);
  EXPECT_NE(Read(rand({1000})), a);  // the stream moves on
  manual_seed(43);
  EXPECT_NE(Read(rand({1000})), a);
  // Explicit generators are independent of the default one.
  Generator g1(5), g2(5);
  manual_seed(1);
  const Values d = Read(rand({100}, {}, &g1));
  manual_seed(2);
  EXPECT_EQ(Read(rand({100}, {}, &g2)), d);
  ExpectError([] { rand({2}, {.dtype = DType::kI64}); }, {"rand", "floating"});
}

// ---------------------------------------------------------------------------
// Dropout.

TEST(DropoutTest, KeepsAboutOneMinusPAndScalesKeptValues) {
  const int64_t n = 100000;
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    Generator gen(1234);
    const Tensor x = Make(Uniform(n, 0.5, 1.5, 91), {100, 1000});
    const Tensor y = dropout(x, p, true, &gen);
    const Values vx = Read(x), vy = Read(y);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (vy[i] == 0) continue;
      ++kept;
      // f32: the kernel multiplies by 1/(1-p) rounded to float.
      ASSERT_TRUE(Close(vy[i], vx[i] / (1 - p), 1e-6, 0)) << i << " p=" << p;
    }
    // The kept fraction is Binomial(n, 1-p)/n, with standard deviation
    // sqrt(p(1-p)/n) <= 0.00158; 0.01 is more than 6 standard deviations.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.01) << "p=" << p;
  }
}

TEST(DropoutTest, SameSeedAndOffsetGiveTheSameMask) {
  const Tensor x = ones({64, 64}, {.dtype = DType::kF64});
  Generator g1(99), g2(99);
  const Values a = Read(dropout(x, 0.5, true, &g1));
  const Values b = Read(dropout(x, 0.5, true, &g2));
  EXPECT_EQ(a, b);
  const Values c =
      Read(dropout(x, 0.5, true, &g1));  // next offset: a fresh mask
  EXPECT_NE(a, c);
  g1.set_offset(0);  // replay
  EXPECT_EQ(Read(dropout(x, 0.5, true, &g1)), a);
  Generator g3(100);
  EXPECT_NE(Read(dropout(x, 0.5, true, &g3)), a);
  for (double v : a) EXPECT_TRUE(v == 0 || v == 2) << v;
  // The default generator follows manual_seed.
  manual_seed(5);
  const Values d1 = Read(dropout(x, 0.5));
  manual_seed(5);
  EXPECT_EQ(Read(dropout(x, 0.5)), d1);
}

TEST(DropoutTest, IdentityForZeroPAndInEval) {
  const Tensor x = RandomTensor({8, 8}, DType::kF32, -1, 1, 92);
  const Values vx = Read(x);
  EXPECT_EQ(Read(dropout(x, 0.0)), vx);
  EXPECT_EQ(Read(dropout(x, 0.7, /*training=*/false)), vx);
  ExpectError([&] { dropout(x, 1.0); }, {"dropout", "p"});
  ExpectError([&] { dropout(x, -0.1); }, {"dropout", "p"});
}

TEST(DropoutTest, LowPrecisionAndNonContiguousInputs) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Generator gen(3);
    const Tensor x = RandomTensor({40, 50}, dt, 0.5, 1.5, 93).t();
    const Values vx = Read(x), vy = Read(dropout(x, 0.25, true, &gen));
    int64_t kept = 0;
    for (size_t i = 0; i < vx.size(); ++i) {
      if (vy[i] == 0) continue;
      ++kept;
      EXPECT_TRUE(Close(vy[i], vx[i] / 0.75, TolFor(dt).rtol, 0)) << i;
    }
    // sd of the kept fraction: sqrt(0.1875 / 2000) = 0.0097; 0.05 is 5 sd.
    EXPECT_NEAR(kept / 2000.0, 0.75, 0.05);
  }
}

}  // namespace
}  // namespace stepjit::op_test
