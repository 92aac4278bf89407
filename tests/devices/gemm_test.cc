// Checks devices/cpu/gemm against a float64 triple loop, for every backend.
#include "devices/cpu/gemm.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "tests/util/dtype_elements.h"

namespace stepjit::runtime::cpu {
namespace {

using ir::DType;
using ::testing::HasSubstr;
using Buffer = test::DTypeBuffer;

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  bool accumulate = false;
  int64_t batch = 1;
  bool broadcast_a = false, broadcast_b = false;
};

std::string Describe(const Case& c) {
  return absl::StrCat(c.trans_a ? "T" : "N", c.trans_b ? "T" : "N", " m=", c.m,
                      " n=", c.n, " k=", c.k, " acc=", c.accumulate,
                      " batch=", c.batch, " bcast=", c.broadcast_a,
                      c.broadcast_b);
}

// Runs one case with padded pitches and gaps between batch matrices, then
// checks C against the f64 product of the stored (already rounded) inputs
// and that nothing outside C changed.
void RunCase(DType dtype, GemmBackend backend, const Case& c) {
  SCOPED_TRACE(Describe(c));
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = c.n + 2;
  const int64_t stride_a = c.broadcast_a ? 0 : a_rows * lda + 5;
  const int64_t stride_b = c.broadcast_b ? 0 : b_rows * ldb + 7;
  const int64_t stride_c = c.m * ldc + 4;
  const int64_t na = c.broadcast_a ? 1 : c.batch;
  const int64_t nb = c.broadcast_b ? 1 : c.batch;
  const int64_t size_a = (na - 1) * stride_a + a_rows * lda;
  const int64_t size_b = (nb - 1) * stride_b + b_rows * ldb;
  const int64_t size_c = (c.batch - 1) * stride_c + c.m * ldc;
  Buffer a(dtype, size_a), b(dtype, size_b), cbuf(dtype, size_c);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < size_a; ++i) a.Set(i, dist(rng));
  for (int64_t i = 0; i < size_b; ++i) b.Set(i, dist(rng));
  std::vector<double> c0(size_c);
  for (int64_t i = 0; i < size_c; ++i) {
    cbuf.Set(i, dist(rng));
    c0[i] = cbuf.Get(i);
  }

  GemmArgs args{.dtype = dtype,
                .trans_a = c.trans_a,
                .trans_b = c.trans_b,
                .m = c.m,
                .n = c.n,
                .k = c.k,
                .a = a.data(),
                .lda = lda,
                .b = b.data(),
                .ldb = ldb,
                .c = cbuf.data(),
                .ldc = ldc,
                .accumulate = c.accumulate,
                .batch = c.batch,
                .stride_a = stride_a,
                .stride_b = stride_b,
                .stride_c = stride_c,
                .backend = backend};
  const absl::Status st = Gemm(args);
  ASSERT_TRUE(st.ok()) << st;

  std::vector<bool> in_c(size_c, false);
  for (int64_t bi = 0; bi < c.batch; ++bi) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        const int64_t ci = bi * stride_c + i * ldc + j;
        in_c[ci] = true;
        const test::ProductElement want = test::RefProductElement(
            args, bi, i, j, c.accumulate ? c0[ci] : 0.0);
        ASSERT_NEAR(cbuf.Get(ci), want.value,
                    test::GemmTolerance(dtype) * want.magnitude)
            << "at batch " << bi << " C[" << i << "," << j << "]";
      }
    }
  }
  for (int64_t i = 0; i < size_c; ++i) {
    if (!in_c[i]) {
      ASSERT_EQ(cbuf.Get(i), c0[i]) << "padding " << i << " changed";
    }
  }
}

class GemmNumericsTest
    : public ::testing::TestWithParam<std::tuple<DType, GemmBackend>> {};

TEST_P(GemmNumericsTest, AllTransposesOddSizes) {
  const auto [dtype, backend] = GetParam();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (bool acc : {false, true}) {
        RunCase(dtype, backend, {ta, tb, 7, 13, 5, acc});
        RunCase(dtype, backend, {ta, tb, 1, 1, 1, acc});
        RunCase(dtype, backend, {ta, tb, 33, 17, 70, acc});
      }
    }
  }
}

TEST_P(GemmNumericsTest, BatchedWithBroadcast) {
  const auto [dtype, backend] = GetParam();
  for (bool acc : {false, true}) {
    RunCase(dtype, backend, {false, true, 7, 13, 5, acc, 3, false, false});
    RunCase(dtype, backend, {false, false, 7, 13, 5, acc, 3, true, false});
    RunCase(dtype, backend, {true, false, 7, 13, 5, acc, 4, false, true});
    RunCase(dtype, backend, {true, true, 6, 9, 11, acc, 2, true, true});
  }
}

TEST_P(GemmNumericsTest, EmptyReductionZeroesOrKeepsC) {
  const auto [dtype, backend] = GetParam();
  Buffer cbuf(dtype, 6);
  for (int i = 0; i < 6; ++i) cbuf.Set(i, i + 1);
  GemmArgs args{.dtype = dtype,
                .m = 2,
                .n = 3,
                .k = 0,
                .lda = 1,
                .ldb = 3,
                .c = cbuf.data(),
                .ldc = 3,
                .accumulate = true,
                .backend = backend};
  ASSERT_TRUE(Gemm(args).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(cbuf.Get(i), i + 1);
  args.accumulate = false;
  ASSERT_TRUE(Gemm(args).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(cbuf.Get(i), 0.0);
}

std::string ParamName(
    const ::testing::TestParamInfo<std::tuple<DType, GemmBackend>>& info) {
  return absl::StrCat(ir::DTypeName(std::get<0>(info.param)), "_",
                      GemmBackendName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    FloatDTypes, GemmNumericsTest,
    ::testing::Combine(
        ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
        ::testing::Values(GemmBackend::kOpenBlas, GemmBackend::kOneDnn,
                          GemmBackend::kAuto)),
    ParamName);
// oneDNN has no f64 matmul; see F64OnOneDnnIsUnimplemented.
INSTANTIATE_TEST_SUITE_P(
    F64, GemmNumericsTest,
    ::testing::Combine(::testing::Values(DType::kF64),
                       ::testing::Values(GemmBackend::kOpenBlas,
                                         GemmBackend::kAuto)),
    ParamName);

// A valid 2x4 . 4x3 product of `dtype` elements, packed.
GemmArgs Valid(DType dtype, void* a, void* b, void* c) {
  return GemmArgs{.dtype = dtype,
                  .m = 2,
                  .n = 3,
                  .k = 4,
                  .a = a,
                  .lda = 4,
                  .b = b,
                  .ldb = 3,
                  .c = c,
                  .ldc = 3};
}

GemmArgs ValidF32(float* a, float* b, float* c) {
  return Valid(DType::kF32, a, b, c);
}

TEST(GemmErrorTest, ShortLeadingDimensionNamesExpectedAndFound) {
  float a[16] = {}, b[16] = {}, c[16] = {};
  GemmArgs args = ValidF32(a, b, c);
  args.lda = 3;
  absl::Status st = Gemm(args);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(st.message(), HasSubstr("expected lda >= 4"));
  EXPECT_THAT(st.message(), HasSubstr("got 3"));

  args = ValidF32(a, b, c);
  args.trans_b = true;  // B stored 3x4 now, so ldb must be >= 4
  st = Gemm(args);
  EXPECT_THAT(st.message(), HasSubstr("expected ldb >= 4"));
  EXPECT_THAT(st.message(), HasSubstr("transposed"));
}

TEST(GemmErrorTest, UnsupportedDTypeIsNamed) {
  int64_t a[16] = {}, b[16] = {}, c[16] = {};
  GemmArgs args = Valid(DType::kI64, a, b, c);
  absl::Status st = Gemm(args);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(st.message(),
              HasSubstr("expected dtype f32, f64, f16 or bf16, got i64"));
}

TEST(GemmErrorTest, NegativeSizesNullPointersAndAliasedBatches) {
  float a[16] = {}, b[16] = {}, c[16] = {};
  GemmArgs args = ValidF32(a, b, c);
  args.k = -1;
  EXPECT_THAT(Gemm(args).message(), HasSubstr("non-negative sizes"));
  args = ValidF32(a, b, c);
  args.b = nullptr;
  EXPECT_THAT(Gemm(args).message(),
              HasSubstr("non-null pointer for B (4x3), got null"));
  args = ValidF32(a, b, c);
  args.batch = 2;
  EXPECT_THAT(Gemm(args).message(), HasSubstr("expected stride_c > 0"));
}

TEST(GemmErrorTest, F64OnOneDnnIsUnimplemented) {
  double a[16] = {}, b[16] = {}, c[16] = {};
  GemmArgs args = Valid(DType::kF64, a, b, c);
  args.backend = GemmBackend::kOneDnn;
  absl::Status st = Gemm(args);
  EXPECT_TRUE(absl::IsUnimplemented(st));
  EXPECT_THAT(st.message(), HasSubstr("no f64 matmul"));
}

TEST(GemmTest, EmptyOutputNeedsNoPointers) {
  GemmArgs args{.dtype = DType::kF32,
                .m = 0,
                .n = 3,
                .k = 4,
                .lda = 4,
                .ldb = 3,
                .ldc = 3};
  EXPECT_TRUE(Gemm(args).ok());
}

TEST(GemmTest, ChooseBackendIsConcrete) {
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    GemmArgs args{.dtype = t, .m = 128, .n = 512, .k = 784};
    EXPECT_NE(ChooseBackend(args), GemmBackend::kAuto) << ir::DTypeName(t);
  }
  EXPECT_EQ(ChooseBackend({.dtype = DType::kF64, .m = 8, .n = 8, .k = 8}),
            GemmBackend::kOpenBlas);
  // The measured f32 rule: OpenBLAS below 2^17 multiply-adds, else oneDNN.
  EXPECT_EQ(ChooseBackend({.dtype = DType::kF32, .m = 32, .n = 32, .k = 32}),
            GemmBackend::kOpenBlas);
  EXPECT_EQ(ChooseBackend({.dtype = DType::kF32, .m = 128, .n = 10, .k = 512}),
            GemmBackend::kOneDnn);
  EXPECT_EQ(ChooseBackend(
                {.dtype = DType::kF32, .m = 32, .n = 32, .k = 32, .batch = 8}),
            GemmBackend::kOneDnn);
  EXPECT_EQ(GemmBackendName(GemmBackend::kOneDnn), "onednn");
}

// The primitive cache is shared: concurrent first calls on new shapes must
// neither race nor mix up entries.
TEST(GemmTest, ConcurrentOneDnnCallsOnDistinctShapes) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      RunCase(DType::kF32, GemmBackend::kOneDnn, {false, true, 9 + t, 5, 3});
    });
  }
  for (std::thread& th : threads) th.join();
}

}  // namespace
}  // namespace stepjit::runtime::cpu
