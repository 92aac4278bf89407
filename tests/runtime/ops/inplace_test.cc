// In-place updates, against the float64 references of
// tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// In-place updates.

// Applies `f` to a copy of `self` and checks values against `want` and that
// the version counter moved by exactly one.
template <typename F>
void CheckInplace(const Tensor& self, F f, const Values& want, Tol tol,
                  const std::string& what) {
  const uint64_t v0 = self.version();
  Tensor t = self;
  f(t);
  EXPECT_EQ(self.version(), v0 + 1) << what;
  EXPECT_TRUE(AllClose(Read(self), want, tol)) << what;
}

TEST(InplaceTest, ArithmeticUpdatesWithBroadcasting) {
  for (DType dt : kFloatTypes) {
    // Results may cancel to near zero, so atol scales with the operands (<= 8).
    Tol tol = TolFor(dt);
    tol.atol = 8 * tol.rtol;
    auto fresh = [&] { return RandomTensor({2, 3}, dt, -2, 2, 121); };
    const Values s = Read(fresh());
    // An f64 operand: PyTorch computes in f64 and rounds once; the tolerance
    // also covers rounding the operand to the target dtype first.
    const Tensor o = RandomTensor({3}, DType::kF64, -2, 2, 122);
    const Tensor t1 = RandomTensor({2, 1}, dt, -2, 2, 123);
    const Tensor t2 = RandomTensor({2, 3}, dt, 0.5, 2, 124);
    const Tensor wt = RandomTensor({2, 3}, dt, 0, 1, 125);
    const Values vo = Read(o);
    const Values v1 = Read(t1), v2 = Read(t2), vw = Read(wt);
    auto want = [&](auto fn) {
      Values w(6);
      for (int i = 0; i < 6; ++i) w[i] = fn(i, i % 3, i / 3);
      return w;
    };
    CheckInplace(
        fresh(), [&](Tensor& t) { t.add_(o, -0.5); },
        want([&](int i, int c, int) { return s[i] - 0.5 * vo[c]; }), tol,
        "add_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.sub_(t2); },
        want([&](int i, int, int) { return s[i] - v2[i]; }), tol,
        "sub_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.mul_(t1); },
        want([&](int i, int, int r) { return s[i] * v1[r]; }), tol,
        "mul_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.mul_(2.5); },
        want([&](int i, int, int) { return s[i] * 2.5; }), tol,
        "mul_ scalar " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.addcmul_(t1, t2, 0.5); },
        want([&](int i, int, int r) { return s[i] + 0.5 * v1[r] * v2[i]; }),
        tol, "addcmul_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.addcdiv_(t1, t2, -2); },
        want([&](int i, int, int r) { return s[i] - 2 * v1[r] / v2[i]; }), tol,
        "addcdiv_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.lerp_(t2, wt); },
        want([&](int i, int, int) { return s[i] + vw[i] * (v2[i] - s[i]); }),
        tol, "lerp_ tensor weight " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.lerp_(t1, 0.25); },
        want([&](int i, int, int r) { return s[i] + 0.25 * (v1[r] - s[i]); }),
        tol, "lerp_ scalar weight " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.fill_(-1.25); },
        want([&](int, int, int) { return -1.25; }), {0, 0},
        "fill_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.zero_(); },
        want([&](int, int, int) { return 0.0; }), {0, 0}, "zero_ " + Name(dt));
  }
}

TEST(InplaceTest, CopyConvertsDtypesAndBroadcasts) {
  // i64 -> f32.
  CheckInplace(
      zeros({4}),
      [](Tensor& t) {
        t.copy_(Make({1, -2, 3, 1 << 25}, {4}, DType::kI64));
      },
      {1, -2, 3, 1 << 25}, {0, 0}, "copy_ i64 -> f32");
  // f64 [3] broadcast into f32 [2, 3].
  const Values src = {0.1, -0.2, 1.0 / 3};
  Values want;
  for (int r = 0; r < 2; ++r) {
    for (double v : src) want.push_back(static_cast<float>(v));
  }
  CheckInplace(
      zeros({2, 3}), [&](Tensor& t) { t.copy_(Make(src, {3}, DType::kF64)); },
      want, {0, 0}, "copy_ f64 broadcast");
  // f32 -> bf16 rounds to nearest even; f32 -> i32 truncates; bool <- f32.
  const Values fv = {1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8),
                     -2.75};
  CheckInplace(
      zeros({3}, {.dtype = DType::kBF16}),
      [&](Tensor& t) { t.copy_(Make(fv, {3})); },
      {1, 1 + std::ldexp(1.0, -6), -2.75}, {0, 0}, "copy_ f32 -> bf16");
  CheckInplace(
      zeros({3}, {.dtype = DType::kI32}),
      [&](Tensor& t) { t.copy_(Make(fv, {3})); }, {1, 1, -2}, {0, 0},
      "copy_ f32 -> i32");
  CheckInplace(
      zeros({3}, {.dtype = DType::kBool}),
      [&](Tensor& t) {
        t.copy_(Make({0, 0.5, -3}, {3}));
      },
      {0, 1, 1}, {0, 0}, "copy_ f32 -> bool");
  // fill_ on integers.
  CheckInplace(
      zeros({2}, {.dtype = DType::kI64}), [](Tensor& t) { t.fill_(7); }, {7, 7},
      {0, 0}, "fill_ i64");
}

TEST(InplaceTest, WritesThroughViewsAndSharesVersion) {
  const Tensor base = Make(Uniform(12, -1, 1, 131), {3, 4});
  const Values v = Read(base);
  Tensor col = base.slice(1, 1, 4, 2);  // columns 1 and 3, strided
  const uint64_t v0 = base.version();
  col.add_(ones({3, 2}), 10);
  EXPECT_EQ(base.version(), v0 + 1);  // the storage's counter
  EXPECT_EQ(col.version(), v0 + 1);
  Values want = v;
  for (int r = 0; r < 3; ++r) {
    want[r * 4 + 1] += 10;
    want[r * 4 + 3] += 10;
  }
  EXPECT_TRUE(AllClose(Read(base), want, TolFor(DType::kF32)));
  Tensor tr = base.t();
  tr.slice(0, 0, 1).fill_(0);  // row 0 of the transpose = column 0 of base
  for (int r = 0; r < 3; ++r) want[r * 4] = 0;
  EXPECT_TRUE(AllClose(Read(base), want, TolFor(DType::kF32)));
  tr.copy_(Make(Uniform(12, 0, 1, 132), {4, 3}, DType::kF64));
  const Values src = Read(Make(Uniform(12, 0, 1, 132), {4, 3}, DType::kF32));
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) want[r * 4 + c] = src[c * 3 + r];
  }
  EXPECT_TRUE(AllClose(Read(base), want, {0, 0}));
}

TEST(InplaceTest, CopyFromAnOverlappingViewOfItself) {
  const Values v = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor x = Make(v, {3, 3});
  x.copy_(x.t());
  EXPECT_EQ(Read(x), (Values{1, 4, 7, 2, 5, 8, 3, 6, 9}));
  Tensor y = Make({1, 2, 3, 4, 5}, {5});
  y.slice(0, 1, 5).copy_(y.slice(0, 0, 4));  // shift right by one
  EXPECT_EQ(Read(y), (Values{1, 1, 2, 3, 4}));
}

TEST(InplaceTest, Errors) {
  Tensor i = zeros({3}, {.dtype = DType::kI64});
  ExpectError([&] { i.add_(ones({3}, {.dtype = DType::kI64})); },
              {"add_", "floating"});
  Tensor f = zeros({2, 3});
  ExpectError([&] { f.add_(ones({3, 3})); }, {"add_", "[3, 3]", "[2, 3]"});
  ExpectError(
      [&] {
        f.copy_(ones({2, 1, 3}));
      },
      {"copy_", "[2, 1, 3]", "[2, 3]"});
}

}  // namespace
}  // namespace stepjit::op_test
