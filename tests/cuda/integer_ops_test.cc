// Integer values on CUDA: casts to and from i32/i64, comparisons and where
// run as generated kernels (no host round trip), bit for bit with the CPU;
// integer arithmetic still makes a host round trip. A step that counts
// correct predictions (argmax, eq) replays as one CUDA graph. Runs on the
// host emulator unless STEPJIT_TEST_CUDA_BACKEND=driver.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cuda/ops.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;

const Device kCuda = Device::cuda(0);
constexpr DType kAll[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                          DType::kI64, DType::kI32, DType::kBool};

void ExpectSame(const Tensor& cuda, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(cuda.device().is_cuda()) << what;
  ASSERT_EQ(cuda.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(cuda.shape(), cpu.shape()) << what;
  EXPECT_EQ(Values(cuda), Values(cpu)) << what;
}

int64_t HostFallbacks() { return runtime::cuda::GetEagerStats().host_fallbacks; }

// Values in range of every dtype, with fractions of both signs (casts to
// integers truncate toward zero) and exact zeros.
Tensor Mixed(DType dt, uint64_t seed = 21) {
  Generator g(seed);
  Tensor x = (rand({6, 50}, {}, &g) * 400.0 - 200.0) * cast(gt(rand({6, 50}, {}, &g), scalar_tensor(0.2)),
                                                              DType::kF32);
  return x.to(dt);
}

TEST_F(CudaTest, CastsBetweenEveryDTypeRunOnTheDeviceBitForBit) {
  const int64_t before = HostFallbacks();
  for (DType from : kAll) {
    const Tensor x = Mixed(from);
    const Tensor d = x.to(kCuda);
    for (DType to : kAll) {
      ExpectSame(cast(d, to), cast(x, to),
                 absl::StrCat("cast ", ir::DTypeName(from), " -> ", ir::DTypeName(to)));
    }
  }
  EXPECT_EQ(HostFallbacks(), before) << runtime::cuda::HostFallbackSummary();
}

TEST_F(CudaTest, IntegerComparisonsAndWhereRunOnTheDevice) {
  const int64_t before = HostFallbacks();
  const Tensor a = Mixed(DType::kI64), b = Mixed(DType::kI64, 22);
  const Tensor c = Mixed(DType::kI32), f = Mixed(DType::kF32, 23);
  const Tensor da = a.to(kCuda), db = b.to(kCuda), dc = c.to(kCuda), df = f.to(kCuda);
  ExpectSame(eq(da, db), eq(a, b), "eq i64");
  ExpectSame(ne(da, dc), ne(a, c), "ne i64 i32");
  ExpectSame(lt(da, df), lt(a, f), "lt i64 f32");
  ExpectSame(le(dc, db), le(c, b), "le i32 i64");
  ExpectSame(gt(df, dc), gt(f, c), "gt f32 i32");
  ExpectSame(ge(da, scalar_tensor(3.0).to(DType::kI64)), ge(a, scalar_tensor(3.0).to(DType::kI64)),
             "ge i64 with a CPU scalar");
  ExpectSame(where(lt(da, db), da, db), where(lt(a, b), a, b), "where i64");
  ExpectSame(where(gt(df, dc), dc, dc), where(gt(f, c), c, c), "where i32");
  // Two values that differ only past float's 24 bits compare exactly.
  const Tensor big = from_vector(std::vector<int64_t>{(1LL << 40) + 1, -(1LL << 53) - 1}, {2});
  const Tensor big2 = from_vector(std::vector<int64_t>{(1LL << 40), -(1LL << 53) - 1}, {2});
  ExpectSame(eq(big.to(kCuda), big2.to(kCuda)), eq(big, big2), "eq past 2^24");
  // A 0-d operand reaches the comparison kernel through a scratch slot: as
  // its bits, since 2^53 + 1 has no double.
  const Tensor odd = from_vector(std::vector<int64_t>{(1LL << 53) + 1}, {});
  const Tensor near = from_vector(std::vector<int64_t>{(1LL << 53), (1LL << 53) + 1, 7}, {3});
  ExpectSame(eq(near.to(kCuda), odd.to(kCuda)), eq(near, odd), "eq with a 0-d i64 past 2^53");
  ExpectSame(lt(near.to(kCuda), cast(odd.to(kCuda), DType::kI32)), lt(near, cast(odd, DType::kI32)),
             "lt with a 0-d i32");
  EXPECT_EQ(HostFallbacks(), before) << runtime::cuda::HostFallbackSummary();
}

TEST_F(CudaTest, IntegerArithmeticStillMatchesThroughTheHost) {
  const int64_t before = HostFallbacks();
  const Tensor a = Mixed(DType::kI64), b = Mixed(DType::kI32);
  ExpectSame(add(a.to(kCuda), b.to(kCuda)), add(a, b), "add i64 i32");
  EXPECT_EQ(HostFallbacks(), before + 1);
  EXPECT_NE(runtime::cuda::HostFallbackSummary().find("add"), std::string::npos)
      << runtime::cuda::HostFallbackSummary();
}

TEST_F(CudaTest, AStepCountingCorrectPredictionsReplaysAsACudaGraph) {
  manual_seed(5);
  nn::Sequential model(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 3));
  model->to(kCuda);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor logits = model(x);
    Tensor loss = cross_entropy(logits, y);
    loss.backward();
    opt.step();
    return std::make_tuple(loss, sum(cast(eq(argmax(logits, 1), y), DType::kF32)));
  };
  auto fast = compile(step);
  Generator g(3);
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({12, 8}, {}, &g).to(kCuda);
    const Tensor y = randint(0, 3, {12}, {.dtype = DType::kI64}, &g).to(kCuda);
    const auto [loss, hits] = fast(x, y);
    EXPECT_TRUE(std::isfinite(loss.item()));
    const double correct = hits.item();
    EXPECT_GE(correct, 0);
    EXPECT_LE(correct, 12);
    EXPECT_EQ(correct, std::round(correct));
  }
  const std::string explain = fast.explain();
  EXPECT_NE(explain.find("replayed as a CUDA graph (3 graph launches, "),
            std::string::npos)
      << explain;
}

}  // namespace
}  // namespace stepjit
