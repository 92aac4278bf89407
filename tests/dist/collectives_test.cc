// The dist collectives on every rank of the job that runs this executable:
// ctest runs it alone (a world of one) and under `mpirun -np 2`. Expected
// values are computed here from the rank-dependent inputs in double.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "dist/dist.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "runtime/pending.h"

namespace stepjit {
namespace {

class Collectives : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dist::init(); }
  int rank() const { return dist::rank(); }
  int world() const { return dist::world_size(); }
};

// x[i] = (rank + 1) * (i + 1) + offset on this rank.
Tensor RankTensor(int rank, int64_t n, DType dtype, double offset = 0) {
  Tensor t = empty({n}, {.dtype = DType::kF64});
  for (int64_t i = 0; i < n; ++i)
    t.data<double>()[i] = (rank + 1) * (i + 1.0) + offset;
  return t.to(dtype);
}

TEST_F(Collectives, WorldFromTheLauncher) {
  const char* env = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(world(), env != nullptr ? std::atoi(env) : 1);
  EXPECT_GE(rank(), 0);
  EXPECT_LT(rank(), world());
  EXPECT_EQ(dist::launcher(), env != nullptr ? "mpi" : "single");
}

TEST_F(Collectives, AllReduceSumAvgMaxAcrossDTypes) {
  const int64_t n = 37;
  const double ranks_sum = world() * (world() + 1) / 2.0;  // sum of (r + 1)
  for (DType dtype :
       {DType::kF32, DType::kF64, DType::kI64, DType::kI32, DType::kBF16}) {
    SCOPED_TRACE(ir::DTypeName(dtype));
    Tensor x = RankTensor(rank(), n, dtype);
    Tensor s = dist::all_reduce(x, dist::ReduceOp::kSum).to(DType::kF64);
    Tensor m = dist::all_reduce(x, dist::ReduceOp::kMax).to(DType::kF64);
    for (int64_t i = 0; i < n; ++i) {
      const double want = ranks_sum * (i + 1.0);
      // bf16 keeps 8 bits: each rank's value and the result round.
      const double tol = dtype == DType::kBF16 ? want * 1.6e-2 : 0;
      EXPECT_NEAR(s.data<double>()[i], want, tol) << i;
      EXPECT_NEAR(m.data<double>()[i], world() * (i + 1.0), tol) << i;
    }
    if (ir::IsFloating(dtype)) {
      Tensor a = dist::all_reduce(x, dist::ReduceOp::kAvg).to(DType::kF64);
      for (int64_t i = 0; i < n; ++i) {
        const double want = ranks_sum * (i + 1.0) / world();
        EXPECT_NEAR(a.data<double>()[i], want,
                    dtype == DType::kBF16 ? want * 1.6e-2 : 1e-5 * want);
      }
    } else {
      EXPECT_THROW(dist::all_reduce(x, dist::ReduceOp::kAvg), Error);
    }
    // The operand is untouched (out of place).
    EXPECT_EQ(x.to(DType::kF64).data<double>()[3], (rank() + 1) * 4.0);
  }
}

TEST_F(Collectives, AllReduceInPlaceOnAStridedView) {
  Tensor base = RankTensor(rank(), 12, DType::kF32).reshape({3, 4});
  Tensor col = base.transpose(0, 1);  // not contiguous
  dist::all_reduce_(col, dist::ReduceOp::kSum);
  const double ranks_sum = world() * (world() + 1) / 2.0;
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(base.data<float>()[i], ranks_sum * (i + 1.0));
}

TEST_F(Collectives, BroadcastFromEachRoot) {
  for (int root = 0; root < world(); ++root) {
    Tensor b = dist::broadcast(RankTensor(rank(), 5, DType::kF32, 0.5), root);
    for (int64_t i = 0; i < 5; ++i)
      EXPECT_EQ(b.data<float>()[i], (root + 1) * (i + 1.0) + 0.5);
  }
  EXPECT_THROW(dist::broadcast(RankTensor(rank(), 5, DType::kF32), world()),
               Error);
}

TEST_F(Collectives, AllGatherInRankOrder) {
  Tensor x = RankTensor(rank(), 6, DType::kF32).reshape({2, 3});
  Tensor g = dist::all_gather(x);
  ASSERT_EQ(g.shape(), Shape({2 * world(), 3}));
  for (int r = 0; r < world(); ++r) {
    for (int64_t i = 0; i < 6; ++i)
      EXPECT_EQ(g.data<float>()[r * 6 + i], (r + 1) * (i + 1.0));
  }
  Tensor scalar = dist::all_gather(scalar_tensor(rank() * 10.0));
  ASSERT_EQ(scalar.shape(), Shape({world()}));
  for (int r = 0; r < world(); ++r)
    EXPECT_EQ(scalar.data<float>()[r], r * 10.0);
}

// A handle keeps its work: after the first reader waited (and cleared the
// result's mark), a failed collective still fails every wait() and result()
// instead of handing out what it never finished writing.
TEST(WorkHandle, AFailedWorkFailsEveryWait) {
  struct Failing : runtime::PendingWork {
    int waits = 0;
    void Wait() override {
      ++waits;
      throw Error("dist: all_reduce (collective #7) failed on rank 0 of 2");
    }
  };
  const Tensor out = zeros({4});
  auto failing = std::make_shared<Failing>();
  runtime::SetPending(*out.storage(), failing);
  const dist::Work work(out);
  // The first reader (an op, here) waits, clears the mark and throws.
  EXPECT_THROW(runtime::WaitPending(out), Error);
  EXPECT_FALSE(out.storage()->has_pending());
  EXPECT_THROW(work.wait(), Error);
  EXPECT_THROW(work.result(), Error);
  EXPECT_EQ(failing->waits, 3);
  // Nothing pending: nothing to wait for.
  const dist::Work done(zeros({2}));
  EXPECT_NO_THROW(done.wait());
  EXPECT_EQ(done.result().numel(), 2);
}

TEST_F(Collectives, AsyncWorkIsWaitedForThroughItsHandle) {
  // Large enough to still be in flight when the handle is waited for.
  const int64_t n = 1 << 22;
  Tensor x = full({n}, rank() + 1.0);
  const dist::Work work = dist::all_reduce_async(x, dist::ReduceOp::kAvg);
  ASSERT_TRUE(work.defined());
  work.wait();
  // Waited: the result's storage no longer holds the work.
  EXPECT_FALSE(work.result().storage()->has_pending());
  Tensor y = work.result() * 2.0;
  const double want = 2.0 * (world() + 1) / 2.0;
  EXPECT_EQ(y.data<float>()[0], want);
  EXPECT_EQ(y.data<float>()[n - 1], want);
  // Two at once, waited for together by wait_all, then read.
  const dist::Work a = dist::all_reduce_async(x, dist::ReduceOp::kSum);
  const dist::Work b = dist::all_reduce_async(x * 2.0, dist::ReduceOp::kMax);
  dist::wait_all();
  EXPECT_EQ(a.result().data<float>()[n - 1], world() * (world() + 1) / 2.0);
  EXPECT_EQ(b.result().data<float>()[0], 2.0 * world());
}

// The result's storage holds the work (not a registry keyed by address): an
// op that reads it before anyone waited waits for it first.
TEST_F(Collectives, AnAsyncResultIsWaitedForByItsFirstReader) {
  const int64_t n = 1 << 22;
  Tensor x = full({n}, rank() + 1.0);
  auto step = [](const Tensor& in) {
    const dist::Work work = dist::all_reduce_async(in, dist::ReduceOp::kAvg);
    // Work in between overlaps the reduction; the reader waits.
    Tensor other = in * 3.0;
    return work.result() * 2.0 + other;
  };
  auto fast = compile(step);
  for (int call = 0; call < 4; ++call) {
    Tensor y = fast(x * (call + 1.0));
    const double want =
        (call + 1.0) * (2.0 * (world() + 1) / 2.0 + 3.0 * (rank() + 1.0));
    EXPECT_EQ(y.data<float>()[0], want) << call;
    EXPECT_EQ(y.data<float>()[n - 1], want) << call;
    EXPECT_FALSE(y.storage()->has_pending());
  }
  EXPECT_GE(fast.stats().replays, 1);
}

TEST_F(Collectives, BarrierAndStats) {
  const dist::Stats before = dist::stats();
  dist::barrier();
  dist::all_reduce(full({256}, 1.0));
  const dist::Stats after = dist::stats();
  if (world() > 1) {
    EXPECT_EQ(after.collectives - before.collectives, 2);
    EXPECT_EQ(after.bytes - before.bytes, 1024);
  } else {
    EXPECT_EQ(after.collectives, before.collectives);  // a world of one copies
  }
}

// A compiled step records the collectives and replays them with fresh
// inputs every call.
TEST_F(Collectives, CompiledStepReplaysCollectives) {
  Tensor w = full({4}, 1.0);
  auto step = [&](const Tensor& x) {
    Tensor s = dist::all_reduce(x * 2.0, dist::ReduceOp::kSum);
    Tensor g = dist::all_gather(s + w);
    Tensor b = dist::broadcast(g, world() - 1);
    const dist::Work a = dist::all_reduce_async(b * 0.5, dist::ReduceOp::kAvg);
    w.add_(scalar_tensor(1.0));
    return a.result() + 1.0;
  };
  auto fast = compile(step);
  const double ranks_sum = world() * (world() + 1) / 2.0;
  for (int call = 0; call < 6; ++call) {
    Tensor x = full({4}, (rank() + 1.0) * (call + 1));
    Tensor out = fast(x);
    ASSERT_EQ(out.shape(), Shape({4 * world()}));
    // s = 2 (call+1) ranks_sum; b = s + w (w = call + 1 before the update).
    const double want = 0.5 * (2.0 * (call + 1) * ranks_sum + (call + 1)) + 1.0;
    for (int64_t i = 0; i < out.numel(); ++i)
      EXPECT_DOUBLE_EQ(out.data<float>()[i], want) << call;
  }
  EXPECT_GE(fast.stats().replays, 4);
  std::ostringstream ir;
  fast.dump_ir(ir);
  EXPECT_NE(ir.str().find("all_reduce"), std::string::npos) << ir.str();
  EXPECT_NE(ir.str().find("all_gather"), std::string::npos);
  EXPECT_NE(ir.str().find("bucket_plan"), std::string::npos) << ir.str();
}

TEST_F(Collectives, ClearErrors) {
  EXPECT_THROW(dist::ParseReduceOp("mean"), Error);
  try {
    dist::init({.backend = "nccl-please"});
    FAIL() << "no error";
  } catch (const Error& e) {
    // Already initialized with "auto": the message names both.
    EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      dist::all_reduce(full({2}, 1.0).to(DType::kBool), dist::ReduceOp::kSum),
      Error);
}

}  // namespace
}  // namespace stepjit
