// Reductions (sum, mean, amax, var) and argmax, against the float64 references
// of tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// Reductions.

// One reduction: its name, the op, and its float64 reference over the
// inputs of one output element.
struct Reduction {
  const char* name;
  Tensor (*call)(const Tensor& x, const Dims& dims, bool keepdim);
  double (*ref)(const Values& g);
};

void PrintTo(const Reduction& r, std::ostream* os) { *os << r.name; }

double RefSum(const Values& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}

double RefVar(const Values& g, int correction) {
  const double n = static_cast<double>(g.size()), avg = RefSum(g) / n;
  double ss = 0;
  for (double v : g) ss += (v - avg) * (v - avg);
  return ss / (n - correction);
}

const Reduction kSum{
    "sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); },
    RefSum};
const Reduction kMean{
    "mean",
    [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); },
    [](const Values& g) { return RefSum(g) / static_cast<double>(g.size()); }};
const Reduction kAmax{
    "amax",
    [](const Tensor& x, const Dims& d, bool k) { return amax(x, d, k); },
    [](const Values& g) { return *std::max_element(g.begin(), g.end()); }};
const Reduction kVar0{
    "var_correction0",
    [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 0, k); },
    [](const Values& g) { return RefVar(g, 0); }};
const Reduction kVar1{
    "var_correction1",
    [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 1, k); },
    [](const Values& g) { return RefVar(g, 1); }};

Dims NormalizeDims(const Dims& dims, int64_t rank) {
  Dims out;
  for (int64_t d : dims) out.push_back(d < 0 ? d + rank : d);
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Values of `in` (row-major, shape `shape`) grouped per output element, each
// group in row-major order of the reduced dims; also the output shape.
std::vector<Values> Groups(const Values& in, const Dims& shape,
                           const Dims& dims, bool keepdim, Dims* out_shape) {
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims) reduced[d] = true;
  out_shape->clear();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d])
      out_shape->push_back(shape[d]);
    else if (keepdim)
      out_shape->push_back(1);
  }
  std::map<int64_t, Values> groups;
  for (int64_t i = 0; i < Numel(shape); ++i) {
    const Dims idx = Unravel(i, shape);
    int64_t key = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!reduced[d]) key = key * shape[d] + idx[d];
    }
    groups[key].push_back(in[i]);
  }
  std::vector<Values> out;
  for (auto& [k, g] : groups) out.push_back(std::move(g));
  return out;
}

// {0} and {0, 1} of a contiguous input take the leading-dims kernel.
const Dims kDimCases[] = {{0},      {1},    {2}, {-1},      {0, 2},
                          {-3, -1}, {1, 2}, {},  {0, 1, 2}, {0, 1}};

// Three [3, 4, 5] inputs: contiguous, a permuted view and a strided slice.
std::vector<Tensor> ReductionInputs(DType dt, double lo, double hi) {
  return {RandomTensor({3, 4, 5}, dt, lo, hi, 21),
          RandomTensor({5, 4, 3}, dt, lo, hi, 22).permute({2, 1, 0}),
          RandomTensor({3, 8, 5}, dt, lo, hi, 23).slice(1, 1, 8, 2)};
}

class ReductionTest
    : public ::testing::TestWithParam<std::tuple<Reduction, DType>> {};

TEST_P(ReductionTest, AnyDimsKeepdimAndLayout) {
  const auto& [r, dt] = GetParam();
  for (const Tensor& x : ReductionInputs(dt, -2, 2)) {
    ASSERT_EQ(ShapeOf(x), (Dims{3, 4, 5}));
    const Values in = Read(x);
    for (const Dims& dims : kDimCases) {
      for (bool keepdim : {false, true}) {
        Dims want_shape;
        const auto groups =
            Groups(in, {3, 4, 5}, NormalizeDims(dims, 3), keepdim, &want_shape);
        Values want;
        for (const auto& g : groups) want.push_back(r.ref(g));
        const Tensor y = r.call(x, dims, keepdim);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(ShapeOf(y), want_shape);
        EXPECT_TRUE(AllClose(Read(y), want, TolFor(dt)))
            << r.name << " " << Name(dt) << " dims " << DimsString(dims)
            << " keepdim " << keepdim
            << (x.is_contiguous() ? "" : " non-contiguous");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllReductions, ReductionTest,
    ::testing::Combine(::testing::Values(kSum, kMean, kAmax, kVar0, kVar1),
                       ::testing::ValuesIn(kFloatTypes)),
    CaseAndDTypeName());

class ArgmaxTest : public ::testing::TestWithParam<DType> {};

TEST_P(ArgmaxTest, IndexAlongOneDim) {
  const DType dt = GetParam();
  const double range = dt == DType::kI32 ? 1000 : 2;
  for (const Tensor& x : ReductionInputs(dt, -range, range)) {
    const Values in = Read(x);
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      for (bool keepdim : {false, true}) {
        Dims want_shape;
        const auto groups = Groups(in, {3, 4, 5}, NormalizeDims({dim}, 3),
                                   keepdim, &want_shape);
        Values want;
        for (const auto& g : groups) {
          want.push_back(std::max_element(g.begin(), g.end()) -
                         g.begin());  // first max
        }
        const Tensor y = argmax(x, dim, keepdim);
        EXPECT_EQ(y.dtype(), DType::kI64);
        EXPECT_EQ(ShapeOf(y), want_shape);
        EXPECT_TRUE(AllClose(Read(y), want, {0, 0}))
            << Name(dt) << " dim " << dim << " keepdim " << keepdim;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ArgmaxTest,
                         ::testing::Values(DType::kF32, DType::kF64,
                                           DType::kF16, DType::kBF16,
                                           DType::kI32),
                         [](const auto& info) { return Name(info.param); });

TEST(ArgmaxValuesTest, TiesPickTheFirstAndNaNWins) {
  EXPECT_TRUE(AllClose(Read(argmax(Make({1, 3, 3, 2}, {4}), 0)), {1}, {0, 0}));
  EXPECT_TRUE(
      AllClose(Read(argmax(Make({1, kNaN, 3, kNaN}, {4}), 0)), {1}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(amax(Make({1, kNaN, 3}, {3}))), {kNaN}, {0, 0}));
}

TEST(ReductionValuesTest, IntegerAndBoolInputs) {
  const Tensor i = Make({1, -2, 3, 4, 5, -6}, {2, 3}, DType::kI32);
  const Tensor s = sum(i, {1});
  EXPECT_EQ(s.dtype(), DType::kI64);
  EXPECT_TRUE(AllClose(Read(s), {2, 3}, {0, 0}));
  const Tensor b = Make({1, 0, 1, 1, 1, 0}, {2, 3}, DType::kBool);
  EXPECT_EQ(sum(b).dtype(), DType::kI64);
  EXPECT_TRUE(AllClose(Read(sum(b)), {4}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(sum(b, {0})), {2, 1, 1}, {0, 0}));
  EXPECT_EQ(amax(i, {0}).dtype(), DType::kI32);
  EXPECT_TRUE(AllClose(Read(amax(i, {0})), {4, 5, 3}, {0, 0}));
  ExpectError([&] { mean(i); }, {"mean", "floating"});
  ExpectError([&] { var(i); }, {"var", "floating"});
  ExpectError([&] { sum(i, {2}); }, {"sum", "dim 2"});
}

TEST(ReductionValuesTest, EmptyInputs) {
  const Tensor x = zeros({0, 3});
  EXPECT_EQ(ShapeOf(sum(x, {0})), (Dims{3}));
  EXPECT_EQ(Read(sum(x, {0})), Values(3, 0.0));
  EXPECT_TRUE(AllClose(Read(mean(x, {0})), Values(3, kNaN), {0, 0}));
  EXPECT_EQ(ShapeOf(sum(x, {1})), (Dims{0}));
  EXPECT_EQ(Read(sum(x)), (Values{0}));
  ExpectError([&] { amax(x, {0}); }, {"amax", "size 0"});
}

TEST(ReductionValuesTest, ZeroDimInputAndSum0Dim) {
  const Tensor x = Make({2.5}, {}, DType::kF32);
  EXPECT_TRUE(AllClose(Read(sum(x)), {2.5}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(mean(x)), {2.5}, {0, 0}));
  EXPECT_EQ(ShapeOf(sum(x)), Dims{});
  EXPECT_EQ(ShapeOf(sum(Make({1, 2, 3, 4}, {2, 2}))), Dims{});
}

// Large tensors: the threaded kernel paths (> 2 * 32768 elements per op).
TEST(LargeTensorTest, Reductions) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    // [150, 1000] over dim 0 runs the leading-dims kernel on several threads.
    const Tensor x = RandomTensor({400, 300}, dt, -2, 2, 161);
    const Tensor xt = RandomTensor({300, 400}, dt, -2, 2, 162).t();
    const Tensor wide = RandomTensor({150, 1000}, dt, -2, 2, 163);
    for (const Tensor& in : {x, xt, wide}) {
      const Values v = Read(in);
      for (const Dims& dims : {Dims{0}, Dims{1}, Dims{}}) {
        Dims shape;
        const auto groups =
            Groups(v, ShapeOf(in), NormalizeDims(dims, 2), false, &shape);
        for (const Reduction* r : {&kSum, &kMean, &kAmax, &kVar1}) {
          Values want;
          for (const auto& g : groups) want.push_back(r->ref(g));
          EXPECT_TRUE(
              AllClose(Read(r->call(in, dims, false)), want, TolFor(dt)))
              << r->name << " " << Name(dt) << " dims " << DimsString(dims);
        }
        if (dims.size() == 1) {
          Values want;
          for (const auto& g : groups)
            want.push_back(std::max_element(g.begin(), g.end()) - g.begin());
          EXPECT_TRUE(AllClose(Read(argmax(in, dims[0])), want, {0, 0}))
              << "argmax";
        }
      }
    }
  }
}

}  // namespace
}  // namespace stepjit::op_test
