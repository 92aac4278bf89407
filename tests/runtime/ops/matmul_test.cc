// Matmul: transposes, batches, broadcast batches, strided operands, against the
// float64 references of tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// Matmul.

// Reference for batched matmul with broadcast batch dims; also returns, per
// output element, sum_k |a_ik * b_kj| (the scale of its rounding error).
Values RefMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb,
                 Values* scale, Dims* out_shape) {
  const Values va = Read(a), vb = Read(b);
  const Dims sa = ShapeOf(a), sb = ShapeOf(b);
  const int64_t ra = sa.size(), rb = sb.size();
  const int64_t m = ta ? sa[ra - 1] : sa[ra - 2],
                k = ta ? sa[ra - 2] : sa[ra - 1];
  const int64_t n = tb ? sb[rb - 2] : sb[rb - 1];
  const Dims ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Dims batch = BroadcastShape(ba, bb);
  *out_shape = batch;
  out_shape->push_back(m);
  out_shape->push_back(n);
  Values out, sc;
  for (int64_t bi = 0; bi < Numel(batch); ++bi) {
    const Dims idx = Unravel(bi, batch);
    const int64_t oa = BroadcastIndex(idx, ba) * sa[ra - 2] * sa[ra - 1];
    const int64_t ob = BroadcastIndex(idx, bb) * sb[rb - 2] * sb[rb - 1];
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, s_abs = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = va[oa + (ta ? p * m + i : i * k + p)];
          const double y = vb[ob + (tb ? j * k + p : p * n + j)];
          s += x * y;
          s_abs += std::fabs(x * y);
        }
        out.push_back(s);
        sc.push_back(s_abs);
      }
    }
  }
  *scale = sc;
  return out;
}

void CheckMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Values scale;
  Dims shape;
  const Values want = RefMatmul(a, b, ta, tb, &scale, &shape);
  const Tensor c = matmul(a, b, ta, tb);
  EXPECT_EQ(c.dtype(), a.dtype());
  ASSERT_EQ(ShapeOf(c), shape);
  const Values got = Read(c);
  const Tol tol = TolFor(a.dtype());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol.rtol * scale[i] + tol.atol &&
        bad++ < 5) {
      ADD_FAILURE() << "matmul " << Name(a.dtype())
                    << ir::ShapeToString(a.shape()) << " x "
                    << ir::ShapeToString(b.shape()) << " ta=" << ta
                    << " tb=" << tb << " [" << i << "] got " << got[i]
                    << " want " << want[i];
    }
  }
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, TwoDimAllTransposeCombinations) {
  const DType dt = GetParam();
  const int64_t m = 3, k = 4, n = 5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a =
          RandomTensor(ta ? Dims{k, m} : Dims{m, k}, dt, -1, 1, 51);
      const Tensor b =
          RandomTensor(tb ? Dims{n, k} : Dims{k, n}, dt, -1, 1, 52);
      CheckMatmul(a, b, ta, tb);
    }
  }
}

TEST_P(MatmulTest, BatchedAndBroadcastBatch) {
  const DType dt = GetParam();
  CheckMatmul(RandomTensor({2, 3, 4, 5}, dt, -1, 1, 53),
              RandomTensor({5, 6}, dt, -1, 1, 54), false, false);
  CheckMatmul(RandomTensor({3, 1, 4, 5}, dt, -1, 1, 55),
              RandomTensor({2, 5, 6}, dt, -1, 1, 56), false, false);
  CheckMatmul(RandomTensor({2, 5, 4}, dt, -1, 1, 57),
              RandomTensor({6, 5}, dt, -1, 1, 58), true, true);
  CheckMatmul(RandomTensor({4, 5}, dt, -1, 1, 59),
              RandomTensor({2, 3, 5, 6}, dt, -1, 1, 60), false, false);
  CheckMatmul(RandomTensor({2, 1, 5, 4}, dt, -1, 1, 61),
              RandomTensor({3, 6, 5}, dt, -1, 1, 62), true, true);
}

TEST_P(MatmulTest, NonContiguousOperands) {
  const DType dt = GetParam();
  const Tensor at =
      RandomTensor({5, 4}, dt, -1, 1, 63).t();  // [4, 5] column-major
  const Tensor bs =
      RandomTensor({10, 6}, dt, -1, 1, 64).slice(0, 0, 10, 2);  // row pitch 12
  const Tensor bc =
      RandomTensor({6, 8}, dt, -1, 1, 65).slice(1, 1, 6);  // [6, 5] pitch 8
  CheckMatmul(at, bs, false, false);
  CheckMatmul(at, bc, false, true);
  CheckMatmul(at.t(), bs, true, false);
  // Batched transposed view and a permuted batch.
  const Tensor ab =
      RandomTensor({2, 5, 4}, dt, -1, 1, 66).transpose(1, 2);  // [2, 4, 5]
  CheckMatmul(ab, bs, false, false);
  const Tensor ap =
      RandomTensor({4, 2, 5}, dt, -1, 1, 67).permute({1, 0, 2});  // [2, 4, 5]
  CheckMatmul(ap, RandomTensor({2, 5, 3}, dt, -1, 1, 68), false, false);
}

// Attention's operands: heads of a [B, T, 3 * H * D] QKV product sliced,
// reshaped and permuted to [B, H, T, D], whose batch dims collapse to two
// strides (one GEMM call per b), in every transpose form; and batch dims
// that collapse to no split (a copy), mixed with a broadcast operand.
TEST_P(MatmulTest, TwoLevelBatchStridesOfPermutedHeads) {
  const DType dt = GetParam();
  const int64_t b = 3, t = 5, h = 2, d = 4;
  const Tensor qkv = RandomTensor({b, t, 3 * h * d}, dt, -1, 1, 69);
  auto head = [&](int64_t i) {
    return qkv.slice(2, i * h * d, (i + 1) * h * d)
        .reshape({b, t, h, d})
        .permute({0, 2, 1, 3});
  };
  const Tensor q = head(0), k = head(1), v = head(2);
  CheckMatmul(q, k, false, true);                   // scores
  CheckMatmul(q, k.transpose(2, 3), false, false);  // the same, k^T as a view
  CheckMatmul(q.transpose(2, 3), k.transpose(2, 3), true,
              false);  // column-major
  const Tensor p = RandomTensor({b, h, t, t}, dt, -1, 1, 70);
  CheckMatmul(p, v, false, false);  // probabilities x values
  CheckMatmul(p, v, true, false);   // dV = P^T dO
  CheckMatmul(q, RandomTensor({h, d, t}, dt, -1, 1, 71), false,
              false);  // broadcast b
  // The scores read q and k where they are: b calls of h products, no copy.
  const Tensor out = empty({b, h, t, t}, {.dtype = dt});
  const std::vector<Tensor> in = {q, k};
  const ir::Attrs attrs = {{ir::AttrKey::kTransposeB, true}};
  const runtime::MatmulPlan plan = runtime::PlanMatmul(
      {ir::OpId::kMatmul, in, attrs, out}, [](const Tensor&, const Tensor&) {
        ADD_FAILURE() << "an operand was copied";
      });
  EXPECT_EQ(plan.outer, b);
  EXPECT_EQ(plan.gemm.batch, h);
  EXPECT_EQ(plan.outer_stride_a, t * 3 * h * d);
  EXPECT_EQ(plan.gemm.stride_a, d);
  // Three batch dims with strides that collapse at no split: copied.
  const Tensor odd =
      RandomTensor({2, 3, 4, 2, 3}, dt, -1, 1, 72).permute({1, 3, 0, 2, 4});
  CheckMatmul(odd, RandomTensor({3, 5}, dt, -1, 1, 73), false, false);
}

TEST_P(MatmulTest, EmptyInnerDimensionGivesZeros) {
  const DType dt = GetParam();
  const Tensor c =
      matmul(empty({2, 0}, {.dtype = dt}), empty({0, 3}, {.dtype = dt}));
  EXPECT_EQ(ShapeOf(c), (Dims{2, 3}));
  EXPECT_EQ(Read(c), Values(6, 0.0));
  const Tensor d = matmul(empty({0, 2}, {.dtype = dt}),
                          empty({3, 0}, {.dtype = dt}), true, true);
  EXPECT_EQ(ShapeOf(d), (Dims{2, 3}));
  EXPECT_EQ(Read(d), Values(6, 0.0));
  EXPECT_EQ(matmul(empty({0, 4}, {.dtype = dt}), empty({4, 3}, {.dtype = dt}))
                .numel(),
            0);
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, MatmulTest,
                         ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return Name(info.param); });

// Large tensors: the threaded kernel paths (> 2 * 32768 elements per op).
TEST(LargeTensorTest, Matmul) {
  // A [300, 400] x [400, 350] product (105k outputs) in f32 and f64.
  for (DType dt : {DType::kF32, DType::kF64}) {
    CheckMatmul(RandomTensor({300, 400}, dt, -1, 1, 175),
                RandomTensor({350, 400}, dt, -1, 1, 176), false, true);
  }
}

}  // namespace
}  // namespace stepjit::op_test
