// ParallelFor (runtime/thread_pool.h): every index exactly once, the chunks
// disjoint, no nested fan-out, exceptions reach the caller, and a GEMM
// library call inside a chunk still computes the right product.
#include "runtime/thread_pool.h"

#include <omp.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "devices/cpu/gemm.h"
#include "gtest/gtest.h"

namespace stepjit::runtime {
namespace {

TEST(ParallelForTest, CoversEveryIndexOnceInDisjointChunks) {
  for (int64_t n : {1, 2, 7, 1000, 65537}) {
    for (int64_t grain : {1, 3, 1024}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      ParallelFor(n, grain, [&](int64_t b, int64_t e) {
        {
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(b, e);
        }
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1)
            << "n=" << n << " grain=" << grain << " i=" << i;
      EXPECT_LE(static_cast<int>(chunks.size()), NumThreads());
      if (n < 2 * grain) {
        EXPECT_EQ(chunks.size(), 1u) << "n=" << n << " grain=" << grain;
      }
    }
  }
}

TEST(ParallelForTest, NestedCallsRunInlineOnTheirChunksThread) {
  std::atomic<int> inner_chunks{0}, inner_total{0};
  ParallelFor(64, 1, [&](int64_t b, int64_t e) {
    const int outer_thread = omp_get_thread_num();
    ParallelFor(1000, 1, [&](int64_t ib, int64_t ie) {
      EXPECT_EQ(omp_get_thread_num(), outer_thread);
      inner_chunks.fetch_add(1);
      inner_total.fetch_add(static_cast<int>(ie - ib));
    });
  });
  const int outer_chunks = NumThreads() > 1 ? NumThreads() : 1;
  EXPECT_EQ(inner_chunks.load(), outer_chunks);  // one inline call per chunk
  EXPECT_EQ(inner_total.load(), 1000 * outer_chunks);
}

TEST(ParallelForTest, AnExceptionReachesTheCallerAfterEveryChunk) {
  std::atomic<int64_t> done{0};
  EXPECT_THROW(ParallelFor(1 << 16, 1,
                           [&](int64_t b, int64_t e) {
                             done.fetch_add(e - b);
                             if (b == 0) throw std::runtime_error("chunk 0");
                           }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 1 << 16);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  ParallelFor(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
  });
  EXPECT_EQ(sum.load(), 4950);
}

// GEMMs inside chunks (how batched matmul splits its calls), on both
// libraries, against a float64 loop. Two threads running one oneDNN
// primitive at once once shared its scratchpad and got wrong products.
class GemmInChunksTest : public ::testing::TestWithParam<GemmBackend> {};

TEST_P(GemmInChunksTest, MatchAFloat64Loop) {
  constexpr int64_t kBatch = 6, m = 37, n = 29, k = 53;
  std::vector<float> a(kBatch * m * k), b(k * n), c(kBatch * m * n, -1.0f);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>((i * 7919) % 23) / 11.0f - 1.0f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>((i * 104729) % 19) / 9.0f - 1.0f;
  ParallelFor(kBatch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      GemmArgs g;
      g.dtype = ir::DType::kF32;
      g.m = m;
      g.n = n;
      g.k = k;
      g.a = a.data() + i * m * k;
      g.lda = k;
      g.b = b.data();
      g.ldb = n;
      g.c = c.data() + i * m * n;
      g.ldc = n;
      g.backend = GetParam();
      ASSERT_TRUE(cpu::Gemm(g).ok());
    }
  });
  for (int64_t i = 0; i < kBatch; ++i) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t col = 0; col < n; ++col) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p)
          want += static_cast<double>(a[(i * m + r) * k + p]) * b[p * n + col];
        ASSERT_NEAR(c[(i * m + r) * n + col], want, 1e-4 * (1 + std::abs(want)))
            << "batch " << i << " (" << r << "," << col << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmInChunksTest,
                         ::testing::Values(GemmBackend::kOneDnn,
                                           GemmBackend::kOpenBlas),
                         [](const auto& info) {
                           return std::string(GemmBackendName(info.param));
                         });

}  // namespace
}  // namespace stepjit::runtime
