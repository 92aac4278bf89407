// The CUDA layout copy and fill kernels: dims coalesced before the launch,
// index arithmetic in 32 bits where it fits, and copies of permuted,
// sliced, broadcast and size-1 layouts equal to the CPU's, bit for bit.
#include <cstdint>
#include <vector>

#include "devices/cuda/kernels/copy.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"

namespace stepjit {
namespace {

using runtime::cuda::CoalesceCopyLayouts;
using runtime::cuda::CopyIndexBits;
using runtime::cuda::CopyLayout;
using test::CudaTest;
using test::Values;

const Device kCuda = Device::cuda(0);

CopyLayout Layout(std::vector<long long> size, std::vector<long long> stride) {
  CopyLayout l{};
  l.rank = static_cast<int>(size.size());
  for (size_t d = 0; d < size.size(); ++d) {
    l.size[d] = size[d];
    l.stride[d] = stride[d];
  }
  return l;
}

std::vector<long long> Sizes(const CopyLayout& l) {
  return {l.size, l.size + l.rank};
}
std::vector<long long> Strides(const CopyLayout& l) {
  return {l.stride, l.stride + l.rank};
}

TEST(CopyLayoutTest, RunsOfElementsInEveryLayoutBecomeOneDim) {
  // A contiguous [2, 3, 4] copied into a contiguous one: one dim of 24.
  CopyLayout a = Layout({2, 3, 4}, {12, 4, 1}),
             b = Layout({2, 3, 4}, {12, 4, 1});
  CoalesceCopyLayouts({&a, &b});
  EXPECT_EQ(Sizes(a), (std::vector<long long>{24}));
  EXPECT_EQ(Strides(b), (std::vector<long long>{1}));
  // [B, T, H, D] read from a [B, H, T, D] tensor (attention's permute): the
  // permuted dims stay, D merges with nothing it is not contiguous with.
  CopyLayout dst = Layout({2, 5, 3, 4}, {60, 12, 4, 1});
  CopyLayout src = Layout({2, 5, 3, 4}, {60, 4, 20, 1});
  CoalesceCopyLayouts({&dst, &src});
  EXPECT_EQ(Sizes(dst), (std::vector<long long>{2, 5, 3, 4}));
  EXPECT_EQ(Strides(src), (std::vector<long long>{60, 4, 20, 1}));
  // A broadcast row: the broadcast dims merge (stride 0), the row stays.
  dst = Layout({4, 5, 6}, {30, 6, 1});
  src = Layout({4, 5, 6}, {0, 0, 1});
  CoalesceCopyLayouts({&dst, &src});
  EXPECT_EQ(Sizes(dst), (std::vector<long long>{20, 6}));
  EXPECT_EQ(Strides(src), (std::vector<long long>{0, 1}));
  // Size-1 dims go; all of them: one dim of 1.
  dst = Layout({1, 7, 1}, {7, 1, 1});
  CoalesceCopyLayouts({&dst});
  EXPECT_EQ(Sizes(dst), (std::vector<long long>{7}));
  dst = Layout({1, 1}, {1, 1});
  CoalesceCopyLayouts({&dst});
  EXPECT_EQ(Sizes(dst), (std::vector<long long>{1}));
  EXPECT_EQ(Strides(dst), (std::vector<long long>{0}));
}

TEST(CopyLayoutTest, IndexArithmeticIsNarrowOnlyWhereEveryOffsetFits) {
  const CopyLayout small = Layout({1000, 1000}, {1000, 1});
  EXPECT_EQ(CopyIndexBits(1000000, {&small}), 32);
  // 2^31 elements, or an offset reaching 2^31, or a negative stride: 64.
  const CopyLayout big = Layout({int64_t{1} << 31}, {1});
  EXPECT_EQ(CopyIndexBits(int64_t{1} << 31, {&big}), 64);
  const CopyLayout far = Layout({2, 10}, {int64_t{1} << 31, 1});
  EXPECT_EQ(CopyIndexBits(20, {&small, &far}), 64);
  const CopyLayout below = Layout({2, 10}, {(int64_t{1} << 31) - 10, 1});
  EXPECT_EQ(CopyIndexBits(20, {&below}), 32);
  const CopyLayout negative = Layout({10}, {-1});
  EXPECT_EQ(CopyIndexBits(10, {&negative}), 64);
}

TEST_F(CudaTest, LayoutCopiesAndFillsEqualTheCpu) {
  manual_seed(3);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI64}) {
    const Tensor base = (randn({3, 5, 4, 6}) * 10).to(dtype);
    const Tensor dev = base.to(kCuda);
    struct Case {
      const char* what;
      Tensor cpu, cuda;
    };
    const std::vector<Case> cases = {
        {"permute(0, 2, 1, 3)", base.permute({0, 2, 1, 3}),
         dev.permute({0, 2, 1, 3})},
        {"transpose(0, 3)", base.transpose(0, 3), dev.transpose(0, 3)},
        {"slice(2, 1, 3)", base.slice(2, 1, 3), dev.slice(2, 1, 3)},
        {"slice(3, 0, 6, 2)", base.slice(3, 0, 6, 2), dev.slice(3, 0, 6, 2)},
        {"expand of [1, 5, 1, 6]",
         base.slice(0, 0, 1).slice(2, 0, 1).expand({3, 5, 4, 6}),
         dev.slice(0, 0, 1).slice(2, 0, 1).expand({3, 5, 4, 6})},
        {"size-1 dims", base.slice(1, 2, 3).slice(2, 1, 2),
         dev.slice(1, 2, 3).slice(2, 1, 2)},
    };
    for (const Case& c : cases) {
      const Tensor want = c.cpu.contiguous();
      const Tensor got = c.cuda.contiguous();
      EXPECT_EQ(Values(got), Values(want))
          << ir::DTypeName(dtype) << " " << c.what;
      // A fill through the same strided view leaves the rest alone.
      Tensor into = zeros(base.shape(), {.dtype = dtype, .device = kCuda});
      Tensor into_cpu = zeros(base.shape(), {.dtype = dtype});
      into.permute({0, 2, 1, 3}).slice(3, 0, 6, 2).fill_(2.5);
      into_cpu.permute({0, 2, 1, 3}).slice(3, 0, 6, 2).fill_(2.5);
      EXPECT_EQ(Values(into), Values(into_cpu))
          << ir::DTypeName(dtype) << " fill";
    }
  }
}

}  // namespace
}  // namespace stepjit
