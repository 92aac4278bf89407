// Every op of ir/ops.def has a forward test in tests/runtime/ops/ (the
// collectives in tests/dist/collectives_test.cc).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// Every op of the table has forward tests above; a new row must be added here.

TEST(OpCoverageTest, EveryOpInTheTableIsCovered) {
  const std::set<std::string> covered = {
      "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh",
      "erf", "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "sin", "cos",
      "cast", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq",
      "ne", "lt", "le", "gt", "ge", "where", "sum", "mean", "amax", "argmax",
      "var", "softmax", "log_softmax", "layer_norm", "cross_entropy",
      "mse_loss", "matmul", "reshape", "permute", "slice", "expand", "squeeze",
      "unsqueeze", "contiguous", "embedding", "embedding_backward",
      "slice_backward", "one_hot", "cat", "topk", "multinomial", "full",
      "arange", "rand", "randn", "randint", "dropout", "add_", "mul_",
      "addcmul_", "addcdiv_", "lerp_", "copy_", "fill_",
      // tests/runtime/ops/conv_test.cc
      "conv2d", "conv2d_backward_input", "conv2d_backward_weight", "max_pool2d",
      "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
      // tests/dist/collectives_test.cc, on
      // one rank and on two (ctest dist.*)
      "all_reduce", "broadcast", "all_gather", "barrier"};
  const char* table[] = {
#define OP(e, text, lo, hi, kind, amp, flags) text,
#include "ir/ops.def"
  };
  for (const char* op : table)
    EXPECT_TRUE(covered.count(op)) << op << " has no forward test";
  EXPECT_EQ(std::size(table), covered.size());
}

}  // namespace
}  // namespace stepjit::op_test
