// f16 products where the CPU has no native f16 GEMM widen to f32 and round
// back (devices/cpu/gemm.cc, with F16C rows where the CPU has them). A
// product with the identity keeps every f16 value: all 65536 bit patterns
// must come back bit for bit (NaNs as NaNs), through either backend, with
// rows whose length is not a multiple of the 8 F16C lanes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "devices/cpu/gemm.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"

namespace stepjit::runtime::cpu {
namespace {

TEST(GemmF16Test, TheIdentityKeepsEveryHalfValue) {
  for (GemmBackend backend : {GemmBackend::kOneDnn, GemmBackend::kOpenBlas}) {
    for (int64_t cols : {int64_t{256}, int64_t{13}}) {
      const int64_t rows = (65536 + cols - 1) / cols;
      std::vector<ir::Half> a(rows * cols), id(cols * cols), c(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i)
        a[i].bits = static_cast<uint16_t>(i & 0xffff);
      for (int64_t i = 0; i < cols; ++i) id[i * cols + i] = ir::Half(1.0f);
      const GemmArgs g{.dtype = ir::DType::kF16,
                       .m = rows,
                       .n = cols,
                       .k = cols,
                       .a = a.data(),
                       .lda = cols,
                       .b = id.data(),
                       .ldb = cols,
                       .c = c.data(),
                       .ldc = cols,
                       .backend = backend};
      ASSERT_TRUE(Gemm(g).ok()) << GemmBackendName(backend);
      int64_t wrong = 0;
      // Rows holding an inf or NaN make every other element of their row NaN
      // (0 * inf): count mismatches only in rows with finite values.
      int64_t checked = 0;
      for (int64_t r = 0; r < rows; ++r) {
        bool finite = true;
        for (int64_t j = 0; j < cols; ++j)
          finite &= std::isfinite(float(a[r * cols + j]));
        if (!finite) continue;
        for (int64_t j = 0; j < cols; ++j) {
          const ir::Half want = a[r * cols + j], got = c[r * cols + j];
          ++checked;
          wrong += float(want) == 0 ? float(got) != 0 : got.bits != want.bits;
        }
      }
      EXPECT_EQ(wrong, 0) << GemmBackendName(backend) << " cols " << cols;
      EXPECT_GT(checked, 60000) << cols;
    }
  }
}

}  // namespace
}  // namespace stepjit::runtime::cpu
