// Views: reshape, permute, expand, squeeze, unsqueeze, contiguous, against the
// float64 references of tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// Views.

TEST(ViewTest, ReshapeOfContiguousIsAViewAndWritesShow) {
  const Tensor x = Make(Uniform(12, -1, 1, 141), {3, 4});
  Tensor v = x.reshape({2, 6});
  EXPECT_EQ(v.storage(), x.storage());
  EXPECT_EQ(Read(v), Read(x));
  v.slice(1, 5, 6).fill_(42);  // elements 5 and 11 of the flat order
  const Values vx = Read(x);
  EXPECT_EQ(vx[5], 42);
  EXPECT_EQ(vx[11], 42);
  Tensor w = x.view({4, 3});
  EXPECT_EQ(w.storage(), x.storage());
  x.slice(0, 0, 1).zero_();
  EXPECT_TRUE(AllClose(Read(w.slice(0, 0, 1)), {0, 0, 0}, {0, 0}));
  EXPECT_EQ(ShapeOf(x.reshape({-1})), (Dims{12}));
  EXPECT_EQ(ShapeOf(x.reshape({2, -1, 3})), (Dims{2, 2, 3}));
  EXPECT_EQ(ShapeOf(x.flatten()), (Dims{12}));
}

TEST(ViewTest, ReshapeOfTransposeCopiesAndViewThrows) {
  const Values v = Uniform(12, -1, 1, 142);
  const Tensor x = Make(v, {3, 4});
  const Tensor t = x.t();
  const Tensor r = t.reshape({12});
  EXPECT_NE(r.storage(), x.storage());
  Values want;
  for (int c = 0; c < 4; ++c) {
    for (int rr = 0; rr < 3; ++rr)
      want.push_back(static_cast<float>(v[rr * 4 + c]));
  }
  EXPECT_EQ(Read(r), want);
  ExpectError([&] { t.view({12}); }, {"view", "[4, 3]", "reshape"});
  // Some non-contiguous layouts still reshape without a copy.
  const Tensor s =
      Make(Uniform(24, -1, 1, 143), {4, 6}).slice(0, 0, 4, 2);  // [2, 6]
  const Tensor sv = s.view({2, 2, 3});
  EXPECT_EQ(sv.storage(), s.storage());
  EXPECT_EQ(Read(sv), Read(s));
  const Tensor row = t.slice(0, 1, 2);  // [1, 3] with strides [1, 4]
  EXPECT_EQ(row.view({3}).storage(), x.storage());
  EXPECT_EQ(Read(row.view({3})), Read(row));
  const Tensor u = t.unsqueeze(1);  // [4, 1, 3]
  EXPECT_EQ(Read(u.view({4, 3})), Read(t));
  EXPECT_EQ(u.view({4, 3}).storage(), x.storage());
}

TEST(ViewTest, PermuteExpandSqueezeUnsqueezeShareStorage) {
  const Values v = Uniform(6, -1, 1, 144);
  const Tensor x = Make(v, {2, 1, 3});
  const Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(ShapeOf(p), (Dims{3, 2, 1}));
  Values want_p;
  for (int c = 0; c < 3; ++c) {
    for (int r = 0; r < 2; ++r)
      want_p.push_back(static_cast<float>(v[r * 3 + c]));
  }
  EXPECT_EQ(Read(p), want_p);
  const Tensor e = x.expand({4, 2, 5, 3});
  EXPECT_EQ(ShapeOf(e), (Dims{4, 2, 5, 3}));
  const Values ve = Read(e), vx = Read(x);
  for (int64_t i = 0; i < e.numel(); ++i) {
    const Dims idx = Unravel(i, {4, 2, 5, 3});
    ASSERT_EQ(ve[i], vx[idx[1] * 3 + idx[3]]);
  }
  EXPECT_EQ(ShapeOf(x.expand({2, -1, 3})), (Dims{2, 1, 3}));
  EXPECT_EQ(ShapeOf(x.squeeze()), (Dims{2, 3}));
  EXPECT_EQ(ShapeOf(x.squeeze(1)), (Dims{2, 3}));
  EXPECT_EQ(ShapeOf(x.squeeze(0)), (Dims{2, 1, 3}));  // not size 1: unchanged
  EXPECT_EQ(ShapeOf(x.unsqueeze(0)), (Dims{1, 2, 1, 3}));
  EXPECT_EQ(ShapeOf(x.unsqueeze(-1)), (Dims{2, 1, 3, 1}));
  EXPECT_EQ(ShapeOf(x.unsqueeze(2)), (Dims{2, 1, 1, 3}));
  for (const Tensor& view :
       {p, e, x.squeeze(), x.unsqueeze(0), x.unsqueeze(-1)}) {
    EXPECT_EQ(view.storage(), x.storage());
  }
  EXPECT_EQ(Read(x.squeeze()), vx);
  EXPECT_EQ(Read(x.unsqueeze(-1)), vx);
  // A write through the expanded squeeze shows in the base.
  x.squeeze().slice(1, 2, 3).fill_(5);
  EXPECT_EQ(Read(x)[2], 5);
  EXPECT_EQ(Read(x)[5], 5);
  ExpectError([&] { x.expand({2, 2, 4}); }, {"expand", "3", "4"});
  ExpectError([&] { x.permute({0, 0, 1}); }, {"permute", "not a permutation"});
}

TEST(ViewTest, ZeroDimTensorsReshapeFlattenUnsqueezeAndExpand) {
  const Tensor s = Make({2.5}, {});
  for (const Dims& shape : {Dims{1}, Dims{1, 1}, Dims{1, 1, 1, 1}}) {
    const Tensor r = s.reshape(shape);
    EXPECT_EQ(ShapeOf(r), shape);
    EXPECT_EQ(r.storage(), s.storage());
    EXPECT_EQ(Read(r), (Values{2.5}));
    EXPECT_EQ(ShapeOf(r.reshape({})), Dims{});
  }
  EXPECT_EQ(ShapeOf(s.view({1, 1})), (Dims{1, 1}));
  EXPECT_EQ(ShapeOf(s.flatten()), (Dims{1}));
  EXPECT_EQ(ShapeOf(s.unsqueeze(0)), (Dims{1}));
  EXPECT_EQ(ShapeOf(s.unsqueeze(-1)), (Dims{1}));
  const Tensor e = s.expand({2, 3});
  EXPECT_EQ(Read(e), Values(6, 2.5));
  ExpectError([&] { s.reshape({2}); }, {"reshape", "[]", "2"});
}

TEST(ViewTest, ContiguousAndCloneCopy) {
  const Values v = Uniform(6, -1, 1, 145);
  const Tensor x = Make(v, {2, 3});
  EXPECT_TRUE(x.contiguous().is_same(x));  // already contiguous: no copy
  const Tensor c = x.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), x.storage());
  EXPECT_EQ(Read(c), Read(x.t()));
  const Tensor k = x.clone();
  EXPECT_NE(k.storage(), x.storage());
  EXPECT_EQ(Read(k), Read(x));
  for (DType dt : {DType::kBF16, DType::kI32, DType::kBool}) {
    const Tensor y = Make({1, 0, 3, 4, 0, 6}, {2, 3}, dt);
    EXPECT_EQ(Read(y.t().contiguous()), Read(y.t())) << Name(dt);
  }
}

// Copies out of permuted, sliced and broadcast views (CopyInto walks them
// in the source's memory order) against index arithmetic: every permutation
// of a 4-d tensor whose values are their own flat index, a slice of each
// (attention's q/k/v out of one QKV product), an expanded dim, and casts to
// bf16 and f64 on the way (the indices are exact in both).
TEST(ViewTest, CopiesOfPermutedSlicedAndExpandedViewsMatchIndexArithmetic) {
  const Shape full = {2, 3, 4, 6};  // 144 elements: exact in bf16
  std::vector<double> iota(144);
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<double>(i);
  const Tensor x = from_vector(iota, full).to(DType::kF32);
  std::vector<int64_t> perm = {0, 1, 2, 3};
  int checked = 0;
  do {
    const Tensor sliced = x.slice(3, 2, 6);  // [2, 3, 4, 4] of [.., 6]
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF64}) {
      const Tensor v = sliced.permute(perm);
      const Tensor c = v.to(dt).contiguous().to(DType::kF64);
      ASSERT_TRUE(c.is_contiguous());
      const std::vector<double> got = c.to_vector<double>();
      const Shape vs = v.shape();
      int64_t flat = 0;
      std::vector<int64_t> idx(4, 0);  // index into v
      for (idx[0] = 0; idx[0] < vs[0]; ++idx[0]) {
        for (idx[1] = 0; idx[1] < vs[1]; ++idx[1]) {
          for (idx[2] = 0; idx[2] < vs[2]; ++idx[2]) {
            for (idx[3] = 0; idx[3] < vs[3]; ++idx[3], ++flat) {
              int64_t src[4];
              for (int d = 0; d < 4; ++d) src[perm[d]] = idx[d];
              const double want = static_cast<double>(
                  ((src[0] * 3 + src[1]) * 4 + src[2]) * 6 + src[3] + 2);
              ASSERT_EQ(got[flat], want)
                  << "perm " << perm[0] << perm[1] << perm[2] << perm[3]
                  << " dtype " << ir::DTypeName(dt) << " at " << flat;
            }
          }
        }
      }
      ++checked;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(checked, 24 * 3);
  // Large enough to split across threads: the k part of a [B, T, 3, H, D]
  // QKV product as [B, H, T, D] heads.
  {
    const int64_t B = 16, T = 64, H = 4, D = 32;
    std::vector<float> qkv(B * T * 3 * H * D);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i);
    const Tensor heads = from_vector(qkv, {B, T, 3, H, D})
                             .slice(2, 1, 2)
                             .reshape({B, T, H, D})
                             .permute({0, 2, 1, 3});
    const std::vector<float> got = heads.contiguous().to_vector<float>();
    for (int64_t b = 0, flat = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d, ++flat)
            ASSERT_EQ(got[flat], static_cast<float>(
                                     (((b * T + t) * 3 + 1) * H + h) * D + d))
                << "b " << b << " h " << h << " t " << t << " d " << d;
  }
  // A broadcast dim (stride 0) between permuted ones.
  const Tensor row = from_vector(std::vector<double>{1, 2, 3}, {3, 1, 1})
                         .expand({3, 7, 2})
                         .permute({1, 0, 2});  // [7, 3, 2]
  const std::vector<double> b = row.contiguous().to_vector<double>();
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k)
        ASSERT_EQ(b[(i * 3 + j) * 2 + k], static_cast<double>(j + 1));
}

}  // namespace
}  // namespace stepjit::op_test
