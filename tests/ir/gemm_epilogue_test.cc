// The typed GEMM epilogue: the `epilogue` attr's text to and from
// ir::GemmEpilogue, with the activations the op table marks.
#include "ir/gemm_epilogue.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace stepjit::ir {
namespace {

TEST(GemmEpilogueTest, TextRoundTripsForEveryKindAndMarkedActivation) {
  std::vector<GemmEpilogue> all = {GemmEpilogue{}, GemmEpilogue::Bias(),
                                   GemmEpilogue::Bgrad()};
  for (int i = 0; i < kNumOps; ++i) {
    if (IsGemmActivation(static_cast<OpId>(i))) {
      all.push_back(GemmEpilogue::BiasAct(static_cast<OpId>(i)));
    }
  }
  ASSERT_EQ(all.size(), 7u);  // relu, gelu, gelu_tanh, silu
  for (const GemmEpilogue& e : all) {
    const std::string text = GemmEpilogueText(e);
    absl::StatusOr<GemmEpilogue> back = ParseGemmEpilogue(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    EXPECT_TRUE(*back == e) << text;
    EXPECT_EQ(GemmEpilogueText(*back), text);
  }
  EXPECT_EQ(GemmEpilogueText(GemmEpilogue::BiasAct(OpId::kGeluTanh)),
            "bias,gelu_tanh");
  EXPECT_EQ(ParseGemmEpilogue("bias,gelu")->activation, OpId::kGelu);
  EXPECT_TRUE(ParseGemmEpilogue("bias")->has_bias());
  EXPECT_FALSE(ParseGemmEpilogue("bgrad")->has_bias());
  EXPECT_EQ(GemmActivationNames("|"), "relu|gelu|gelu_tanh|silu");
}

TEST(GemmEpilogueTest, UnknownTextNamesTheMarkedActivations) {
  for (const char* bad :
       {"bias,tanh", "relu", "bias,", "bias,gelu,relu", "bias,add"}) {
    absl::StatusOr<GemmEpilogue> e = ParseGemmEpilogue(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(e.status().message(),
              std::string("unknown epilogue '") + bad +
                  "' (expected \"bias\" optionally followed by \",relu\", "
                  "\",gelu\", \",gelu_tanh\" or \",silu\", or \"bgrad\")");
  }
}

}  // namespace
}  // namespace stepjit::ir
