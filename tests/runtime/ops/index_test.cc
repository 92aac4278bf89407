// Indexing ops: embedding, one_hot, slice, cat, stack, split, chunk, against
// the float64 references of tests/runtime/ops/op_reference.h (tolerances
// there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// Embedding, one_hot, slice.

TEST(EmbeddingTest, GathersRowsForAnyIndexShape) {
  for (DType wt : {DType::kF32, DType::kBF16, DType::kF64}) {
    for (DType it : {DType::kI64, DType::kI32}) {
      const Tensor w = RandomTensor({5, 3}, wt, -1, 1, 71);
      const Values idx = {4, 0, 4, 2, 1, 4};
      const Tensor out = embedding(w, Make(idx, {2, 3}, it));
      EXPECT_EQ(out.dtype(), wt);
      ASSERT_EQ(ShapeOf(out), (Dims{2, 3, 3}));
      const Values vw = Read(w);
      Values want;
      for (double i : idx) {
        for (int j = 0; j < 3; ++j)
          want.push_back(vw[static_cast<int>(i) * 3 + j]);
      }
      EXPECT_TRUE(AllClose(Read(out), want, {0, 0}));
      // A non-contiguous weight.
      const Tensor wt_view = RandomTensor({3, 5}, wt, -1, 1, 72).t();
      const Values vt = Read(wt_view);
      Values want_t;
      for (double i : idx) {
        for (int j = 0; j < 3; ++j)
          want_t.push_back(vt[static_cast<int>(i) * 3 + j]);
      }
      EXPECT_TRUE(AllClose(Read(embedding(wt_view, Make(idx, {6}, it))), want_t,
                           {0, 0}));
    }
  }
  ExpectError(
      [] {
        embedding(zeros({5, 3}), Make({5}, {1}, DType::kI64));
      },
      {"embedding", "5", "[0, 5)"});
}

TEST(EmbeddingTest, BackwardAccumulatesRepeatedIndices) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    const Values idx = {4, 0, 4, 2, 1, 4};
    const Tensor g = RandomTensor({2, 3, 3}, dt, -1, 1, 73);
    const DType it = dt == DType::kF32 ? DType::kI32 : DType::kI64;
    const Tensor out = embedding_backward(g, Make(idx, {2, 3}, it), 6);
    EXPECT_EQ(out.dtype(), dt);
    ASSERT_EQ(ShapeOf(out), (Dims{6, 3}));
    const Values vg = Read(g);
    Values want(18, 0.0);
    for (size_t i = 0; i < idx.size(); ++i) {
      for (int j = 0; j < 3; ++j)
        want[static_cast<int>(idx[i]) * 3 + j] += vg[i * 3 + j];
    }
    EXPECT_TRUE(AllClose(Read(out), want, TolFor(dt))) << Name(dt);
    EXPECT_TRUE(AllClose(Read(out.slice(0, 3, 4)), {0, 0, 0},
                         {0, 0}));  // row 3: no index
    EXPECT_TRUE(AllClose(Read(out.slice(0, 5, 6)), {0, 0, 0}, {0, 0}));
  }
}

TEST(OneHotTest, EncodesEachIndex) {
  const Values idx = {2, 0, 3, 3, 1, 0};
  for (DType dt : {DType::kF32, DType::kI64, DType::kBF16, DType::kBool}) {
    const Tensor out = one_hot(Make(idx, {2, 3}, DType::kI64), 4, dt);
    EXPECT_EQ(out.dtype(), dt);
    ASSERT_EQ(ShapeOf(out), (Dims{2, 3, 4}));
    Values want(24, 0.0);
    for (size_t i = 0; i < idx.size(); ++i)
      want[i * 4 + static_cast<int>(idx[i])] = 1;
    EXPECT_TRUE(AllClose(Read(out), want, {0, 0})) << Name(dt);
  }
  EXPECT_TRUE(AllClose(Read(one_hot(Make({1, 0}, {2}, DType::kI32), 2)),
                       {0, 1, 1, 0}, {0, 0}));
  ExpectError([] { one_hot(Make({4}, {1}, DType::kI64), 4); },
              {"one_hot", "4", "[0, 4)"});
  ExpectError([] { one_hot(Make({1}, {1}, DType::kF32), 4); },
              {"one_hot", "integer"});
}

TEST(SliceTest, ValuesStepsNegativeStartAndClamping) {
  const Tensor x = Make(Uniform(18, -1, 1, 81), {3, 6});
  const Values v = Read(x);
  struct Case {
    int64_t dim, start, end, step;
    Dims cols_or_rows;  // selected indices along `dim`
  };
  const Case cases[] = {{1, 1, 5, 2, {1, 3}},   {1, -4, 6, 1, {2, 3, 4, 5}},
                        {1, 0, 100, 4, {0, 4}}, {0, 1, 3, 1, {1, 2}},
                        {-1, 2, 3, 1, {2}},     {0, -1, 3, 5, {2}}};
  for (const Case& c : cases) {
    const Tensor s = x.slice(c.dim, c.start, c.end, c.step);
    const int64_t d = c.dim < 0 ? c.dim + 2 : c.dim;
    Values want;
    Dims want_shape = {3, 6};
    want_shape[d] = c.cols_or_rows.size();
    for (int64_t i = 0; i < Numel(want_shape); ++i) {
      Dims idx = Unravel(i, want_shape);
      idx[d] = c.cols_or_rows[idx[d]];
      want.push_back(v[idx[0] * 6 + idx[1]]);
    }
    EXPECT_EQ(ShapeOf(s), want_shape);
    EXPECT_TRUE(AllClose(Read(s), want, {0, 0}))
        << c.dim << " " << c.start << ":" << c.end;
    EXPECT_EQ(s.storage(), x.storage());
  }
  EXPECT_EQ(ShapeOf(x.slice(1, 4, 2)), (Dims{3, 0}));  // empty
}

TEST(SliceTest, SliceBackwardScattersIntoZeros) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16}) {
    const Tensor g = RandomTensor({3, 2}, dt, -1, 1, 82);
    const Values vg = Read(g);
    const Tensor out = slice_backward(g, {3, 6}, 1, 1, 5, 2);
    EXPECT_EQ(out.dtype(), dt);
    ASSERT_EQ(ShapeOf(out), (Dims{3, 6}));
    Values want(18, 0.0);
    for (int r = 0; r < 3; ++r) {
      want[r * 6 + 1] = vg[r * 2];
      want[r * 6 + 3] = vg[r * 2 + 1];
    }
    EXPECT_TRUE(AllClose(Read(out), want, {0, 0}));
    // Negative start along dim 0.
    const Tensor g0 = RandomTensor({2, 6}, dt, -1, 1, 83);
    const Values vg0 = Read(g0);
    Values want0(24, 0.0);
    for (int j = 0; j < 12; ++j) want0[12 + j] = vg0[j];
    EXPECT_TRUE(
        AllClose(Read(slice_backward(g0, {4, 6}, 0, -2, 4, 1)), want0, {0, 0}));
  }
}

// ---------------------------------------------------------------------------
// cat, and stack/split/chunk built on it and on slices.

TEST(CatTest, JoinsAlongADimInEveryDType) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI64}) {
    const Tensor a = Make({1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    const Tensor b = Make({7, 8}, {2, 1}, dt);
    const Tensor c = cat({a, b}, 1);
    EXPECT_EQ(c.dtype(), dt);
    EXPECT_EQ(c.shape(), (Shape{2, 4}));
    EXPECT_TRUE(AllClose(Read(c), {1, 2, 3, 7, 4, 5, 6, 8}, {0, 0}))
        << Name(dt);
    const Tensor r = cat({a, a.slice(0, 1, 2)}, -2);  // a strided operand
    EXPECT_EQ(r.shape(), (Shape{3, 3}));
    EXPECT_TRUE(AllClose(Read(r), {1, 2, 3, 4, 5, 6, 4, 5, 6}, {0, 0}))
        << Name(dt);
  }
  // Operands of different dtypes: the widest, as for binary ops.
  const Tensor mixed =
      cat({Make({1.5}, {1}, DType::kBF16), Make({2.25}, {1}, DType::kF32)});
  EXPECT_EQ(mixed.dtype(), DType::kF32);
  EXPECT_TRUE(AllClose(Read(mixed), {1.5, 2.25}, {0, 0}));
  // Empty operands take no room; a single operand is a copy.
  EXPECT_TRUE(AllClose(Read(cat({Make({}, {0, 2}), Make({1, 2}, {1, 2})})),
                       {1, 2}, {0, 0}));
  const Tensor one = Make({3, 4}, {2});
  const Tensor copy = cat({one});
  EXPECT_FALSE(copy.is_same(one));
  EXPECT_TRUE(AllClose(Read(copy), {3, 4}, {0, 0}));
}

TEST(CatTest, RefusesMismatchedOperands) {
  ExpectError([] { cat({}); }, {"cat", "at least one"});
  ExpectError(
      [] {
        cat({Make({1, 2}, {2}), Make({1, 2, 3, 4}, {2, 2})});
      },
      {"cat", "operand 1", "[2, 2]", "[2]"});
  ExpectError(
      [] {
        cat({Make({1, 2}, {1, 2}), Make({1, 2, 3}, {1, 3})}, 0);
      },
      {"cat", "operand 1", "[1, 3]", "outside dim 0"});
  ExpectError([] { cat({Make({1, 2}, {2})}, 1); }, {"cat", "dim 1", "rank 1"});
  ExpectError([] { cat({Make({1}, {})}); }, {"cat", "a dim to join along"});
}

TEST(CatTest, StackSplitAndChunk) {
  const Tensor a = Make({1, 2, 3}, {3}), b = Make({4, 5, 6}, {3});
  const Tensor s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 3}));
  EXPECT_TRUE(AllClose(Read(s0), {1, 2, 3, 4, 5, 6}, {0, 0}));
  const Tensor s1 = stack({a, b}, -1);
  EXPECT_EQ(s1.shape(), (Shape{3, 2}));
  EXPECT_TRUE(AllClose(Read(s1), {1, 4, 2, 5, 3, 6}, {0, 0}));
  ExpectError(
      [&] {
        stack({a, Make({1, 2}, {2})});
      },
      {"stack", "tensor 1", "[2]", "[3]"});
  ExpectError([&] { stack({a}, 2); }, {"stack", "dim 2"});

  const Tensor x = Make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  const std::vector<Tensor> parts = split(x, 2, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{2, 1}));
  EXPECT_TRUE(AllClose(Read(parts[1]), {2, 3, 7, 8}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(parts[2]), {4, 9}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(cat(parts, 1)), Read(x), {0, 0}));
  // PyTorch's chunk sizes: ceil(n / chunks), fewer chunks when n runs out.
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> chunks = {
      {1, {5}},       {2, {3, 2}},          {3, {2, 2, 1}},
      {4, {2, 2, 1}}, {5, {1, 1, 1, 1, 1}}, {7, {1, 1, 1, 1, 1}}};
  for (const auto& [n, sizes] : chunks) {
    const std::vector<Tensor> c = chunk(x, n, -1);
    std::vector<int64_t> got;
    for (const Tensor& t : c) got.push_back(t.shape()[1]);
    EXPECT_EQ(got, sizes) << "chunk(x, " << n << ")";
  }
  ExpectError([&] { split(x, 0, 1); }, {"split", "split_size", "0"});
  ExpectError([&] { chunk(x, 0); }, {"chunk", "chunks", "0"});
  ExpectError([&] { split(x, 1, 2); }, {"split", "dim 2", "rank 2"});
}

// Large tensors: the threaded kernel paths (> 2 * 32768 elements per op).
TEST(LargeTensorTest, Embedding) {
  const Tensor w = RandomTensor({1000, 128}, DType::kF32, -1, 1, 181);
  Values idx(1024);
  for (int i = 0; i < 1024; ++i) idx[i] = (i * 7919) % 1000;
  const Tensor out = embedding(w, Make(idx, {1024}, DType::kI64));
  const Values vw = Read(w), vo = Read(out);
  for (int i = 0; i < 1024; ++i) {
    for (int j = 0; j < 128; ++j)
      ASSERT_EQ(vo[i * 128 + j], vw[idx[i] * 128 + j]);
  }
}

}  // namespace
}  // namespace stepjit::op_test
