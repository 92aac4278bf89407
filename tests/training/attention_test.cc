// tril, triu and masked_fill against index loops; scaled_dot_product_attention
// against a float64 loop reference (masked positions get exactly zero
// weight); MultiheadAttention and TransformerBlock: shapes, parameter names,
// causality (a later position never changes an earlier output), train/eval
// dropout, and bad arguments.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "tests/util/expect_error.h"
#include "training/nn/functional.h"
#include "training/nn/transformer.h"

namespace stepjit {
namespace {

using test::ExpectError;
using Values = std::vector<double>;

Values Read(const Tensor& t) {
  return t.contiguous().to(DType::kF64).to_vector<double>();
}

Tensor Randn(ShapeRef shape, uint64_t seed, DType t = DType::kF64) {
  Generator gen(seed);
  return randn(shape, {}, &gen).to(t);
}

TEST(MaskTest, TrilTriuKeepTheirTrianglesForEveryDiagonal) {
  const Tensor x = Randn({2, 3, 5}, 1);
  const Values vx = Read(x);
  for (int64_t diag : {-2, -1, 0, 1, 3}) {
    const Values lo = Read(tril(x, diag)), up = Read(triu(x, diag));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          const int64_t at = (b * 3 + i) * 5 + j;
          EXPECT_EQ(lo[at], j - i <= diag ? vx[at] : 0.0) << diag << " " << at;
          EXPECT_EQ(up[at], j - i >= diag ? vx[at] : 0.0) << diag << " " << at;
        }
  }
  EXPECT_EQ(tril(x.to(DType::kBF16)).dtype(), DType::kBF16);
  ExpectError([] { tril(ones({3})); }, {"tril", "rank >= 2", "[3]"});
  ExpectError([] { triu(ones({})); }, {"triu", "rank >= 2"});
}

TEST(MaskTest, MaskedFillWritesTheValueWhereTheMaskIsTrue) {
  const Tensor x = Randn({2, 3}, 2, DType::kF32);
  const Tensor m =
      gt(from_vector(std::vector<float>{1, 0, 1}, {3}), full({}, 0.5));
  const Values got = Read(masked_fill(x, m, -7.5)), vx = Read(x);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got[i], i % 3 == 1 ? vx[i] : -7.5) << i;
  ExpectError([&] { masked_fill(x, ones({3}), 0.0); },
              {"masked_fill", "bool", "f32"});
  const Tensor wide = gt(ones({4, 2, 3}), full({}, 0.5));
  ExpectError([&] { masked_fill(x, wide, 0.0); },
              {"masked_fill", "[4, 2, 3]", "does not broadcast", "[2, 3]"});
}

// softmax(q k^T * scale + mask) v with float64 loops.
Values ReferenceAttention(const Values& q, const Values& k, const Values& v,
                          int64_t l, int64_t s, int64_t e, int64_t ev,
                          bool causal, double scale) {
  Values out(l * ev, 0.0);
  for (int64_t i = 0; i < l; ++i) {
    Values w(s);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < s; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < e; ++c) dot += q[i * e + c] * k[j * e + c];
      w[j] = causal && j > i ? -std::numeric_limits<double>::infinity()
                             : dot * scale;
      mx = std::max(mx, w[j]);
    }
    double total = 0;
    for (double& x : w) total += (x = std::exp(x - mx));
    for (int64_t j = 0; j < s; ++j)
      for (int64_t c = 0; c < ev; ++c)
        out[i * ev + c] += w[j] / total * v[j * ev + c];
  }
  return out;
}

TEST(AttentionTest, MatchesAFloat64Reference) {
  const int64_t l = 4, s = 6, e = 3, ev = 2;
  const Tensor q = Randn({l, e}, 3), k = Randn({s, e}, 4),
               v = Randn({s, ev}, 5);
  for (bool causal : {false, true}) {
    const Values want = ReferenceAttention(Read(q), Read(k), Read(v), l, s, e,
                                           ev, causal, 1 / std::sqrt(3.0));
    const Values got =
        Read(nn::functional::scaled_dot_product_attention(q, k, v, causal));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-12)
          << "causal " << causal << " [" << i << "]";
  }
}

TEST(AttentionTest, HiddenPositionsGetExactlyZeroWeight) {
  // With v the identity, the output is the attention weights themselves.
  const int64_t t = 5;
  const Tensor q = Randn({2, t, 4}, 6, DType::kF32) * 30.0;  // large logits
  const Tensor k = Randn({2, t, 4}, 7, DType::kF32) * 30.0;
  Values eye(t * t, 0.0);
  for (int64_t i = 0; i < t; ++i) eye[i * t + i] = 1;
  const Tensor v =
      from_vector(eye, {1, t, t}).to(DType::kF32).expand({2, t, t});
  const Values w =
      Read(nn::functional::scaled_dot_product_attention(q, k, v, true));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < t; ++i) {
      double row = 0;
      for (int64_t j = 0; j < t; ++j) {
        const double x = w[(b * t + i) * t + j];
        if (j > i) {
          EXPECT_EQ(x, 0.0) << b << " " << i << " " << j;
        }
        row += x;
      }
      EXPECT_NEAR(row, 1.0, 1e-6);
    }
  // A bool mask hides keys the same way.
  const Tensor keys =
      gt(from_vector(std::vector<float>{1, 0, 1, 1, 0}, {1, t}), full({}, 0.5));
  const Values wm = Read(
      nn::functional::scaled_dot_product_attention(q, k, v, false, 0.0, keys));
  for (int64_t r = 0; r < 2 * t; ++r) {
    EXPECT_EQ(wm[r * t + 1], 0.0);
    EXPECT_EQ(wm[r * t + 4], 0.0);
  }
}

TEST(AttentionTest, RefusesBadArguments) {
  const Tensor q = ones({2, 3}), k = ones({4, 3}), v = ones({4, 2});
  using nn::functional::scaled_dot_product_attention;
  ExpectError([&] { scaled_dot_product_attention(ones({3}), k, v); },
              {"scaled_dot_product_attention", "rank >= 2"});
  ExpectError(
      [&] {
        scaled_dot_product_attention(q, ones({4, 2}), v);
      },
      {"scaled_dot_product_attention", "[4, 2]", "[..., S, 3]"});
  ExpectError(
      [&] {
        scaled_dot_product_attention(q, k, ones({5, 2}));
      },
      {"scaled_dot_product_attention", "[5, 2]"});
  ExpectError([&] { scaled_dot_product_attention(q, k, v, false, 1.0); },
              {"dropout_p", "[0, 1)"});
}

TEST(MultiheadAttentionTest, IsCausalAndNamesItsParametersAsPyTorch) {
  manual_seed(8);
  nn::MultiheadAttention mha(8, 2,
                             nn::MultiheadAttentionOptions{.causal = true});
  std::vector<std::string> names;
  for (const auto& [name, p] : mha->named_parameters()) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias",
                                      "out_proj.weight", "out_proj.bias"}));
  const Tensor x = Randn({3, 5, 8}, 9, DType::kF32);
  const Values y = Read(mha(x));
  EXPECT_EQ(mha(x).shape(), (Shape{3, 5, 8}));
  // Changing the last position changes only the last output row.
  Values vx = Read(x);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t c = 0; c < 8; ++c) vx[(b * 5 + 4) * 8 + c] += 1.0;
  const Values y2 = Read(mha(from_vector(vx, {3, 5, 8}).to(DType::kF32)));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t c = 0; c < 8; ++c) {
        const int64_t at = (b * 5 + t) * 8 + c;
        if (t < 4) {
          EXPECT_EQ(y2[at], y[at]) << at;
        }
      }
  // Unbatched input [T, E] works too.
  EXPECT_EQ(mha(Randn({5, 8}, 10, DType::kF32)).shape(), (Shape{5, 8}));
  ExpectError([] { nn::MultiheadAttention(6, 4); },
              {"MultiheadAttention", "6", "4"});
  ExpectError(
      [&] {
        mha(ones({5, 6}));
      },
      {"MultiheadAttention", "[..., T, 8]", "[5, 6]"});
}

TEST(TransformerBlockTest, DropoutOnlyInTraining) {
  manual_seed(11);
  nn::TransformerBlock block(16, 4,
                             nn::TransformerBlockOptions{.dropout = 0.2});
  EXPECT_EQ(block->parameters().size(),
            4u + 4u + 4u);  // 2 LayerNorms, attention, MLP
  const Tensor x = Randn({2, 6, 16}, 12, DType::kF32);
  block->eval();
  const Values a = Read(block(x)), b = Read(block(x));
  EXPECT_EQ(a, b);
  block->train();
  EXPECT_NE(Read(block(x)), a);
  ExpectError(
      [] {
        nn::TransformerBlock(16, 4,
                             nn::TransformerBlockOptions{.mlp_ratio = 0});
      },
      {"TransformerBlock", "mlp_ratio"});
}

TEST(GPTTest, TiesTheHeadToTheEmbeddingAndChecksLengths) {
  manual_seed(13);
  nn::GPT tied(nn::GPTOptions{.vocab = 11,
                              .context = 6,
                              .d_model = 8,
                              .heads = 2,
                              .layers = 1,
                              .tie_weights = true});
  nn::GPT untied(nn::GPTOptions{
      .vocab = 11, .context = 6, .d_model = 8, .heads = 2, .layers = 1});
  EXPECT_TRUE(tied->head->weight.is_same(tied->tok->weight));
  EXPECT_FALSE(tied->head->bias.defined());
  // The tied weight is listed once, and the untied model has the head's
  // weight and bias besides.
  EXPECT_EQ(untied->parameters().size(), tied->parameters().size() + 2);
  const Tensor tokens =
      from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4},
                  {.dtype = DType::kI64});
  const Tensor logits = tied(tokens);
  EXPECT_EQ(logits.shape(), (Shape{2, 4, 11}));
  // Both uses of the tied weight reach its gradient.
  sum(logits * logits).backward();
  const Tensor g = tied->tok->weight.grad();
  ASSERT_TRUE(g.defined());
  const Values gv = Read(g);
  EXPECT_NE(gv[0 * 8], 0.0);  // token 0 never appears: only the head's use
  ExpectError(
      [&] {
        tied(ones({2, 7}, {.dtype = DType::kI64}));
      },
      {"GPT", "T <= context 6", "[2, 7]"});
}

}  // namespace
}  // namespace stepjit
