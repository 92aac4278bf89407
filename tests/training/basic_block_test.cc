// nn::BasicBlock: torchvision's state_dict names, the shortcut (identity or
// a strided 1x1 conv and batch norm), its output against the same ops
// written out with the block's own parameters, gradients reaching every
// parameter, and clear errors.
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/expect_error.h"

namespace stepjit {
namespace {

std::vector<std::string> Names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(name);
  return out;
}

// PyTorch's training-mode batch norm written with plain ops (biased batch
// variance over N, H, W; eps 1e-5).
Tensor BatchNormByHand(const Tensor& x, const nn::BatchNorm2dImpl& bn) {
  const Tensor mean = stepjit::mean(x, {0, 2, 3}, /*keepdim=*/true);
  const Tensor centered = x - mean;
  const Tensor var =
      stepjit::mean(centered * centered, {0, 2, 3}, /*keepdim=*/true);
  const int64_t c = x.size(1);
  return centered / sqrt(var + 1e-5) * bn.weight.reshape({1, c, 1, 1}) +
         bn.bias.reshape({1, c, 1, 1});
}

TEST(BasicBlockTest, NamesShortcutAndOutputFollowTorchvision) {
  manual_seed(3);
  nn::BasicBlock same(4, 4), down(4, 8, 2);
  EXPECT_EQ(same->downsample.ptr(), nullptr);
  ASSERT_NE(down->downsample.ptr(), nullptr);
  const std::vector<std::string> bn = {"weight", "bias", "running_mean",
                                       "running_var", "num_batches_tracked"};
  std::vector<std::string> want = {"conv1.weight"};
  for (const auto& b : bn) want.push_back("bn1." + b);
  want.push_back("conv2.weight");
  for (const auto& b : bn) want.push_back("bn2." + b);
  EXPECT_EQ(Names(*same), want);
  want.push_back("downsample.0.weight");
  for (const auto& b : bn) want.push_back("downsample.1." + b);
  EXPECT_EQ(Names(*down), want);

  Generator gen(4);
  const Tensor x = randn({3, 4, 9, 7}, {}, &gen);
  for (nn::BasicBlock* b : {&same, &down}) {
    nn::BasicBlockImpl& m = **b;
    const int64_t stride = b == &down ? 2 : 1;
    const Tensor h = relu(
        BatchNormByHand(conv2d(x, m.conv1->weight, Tensor(),
                               {.stride = {stride, stride}, .padding = {1, 1}}),
                        *m.bn1));
    const Tensor r = BatchNormByHand(
        conv2d(h, m.conv2->weight, Tensor(), {.padding = {1, 1}}), *m.bn2);
    Tensor skip = x;
    if (b == &down) {
      const auto conv = m.downsample->at<nn::Conv2dImpl>(0);
      const auto norm = m.downsample->at<nn::BatchNorm2dImpl>(1);
      skip = BatchNormByHand(
          conv2d(x, conv->weight, Tensor(), {.stride = {2, 2}}), *norm);
    }
    const Tensor want_y = relu(r + skip);
    const Tensor y = (*b)(x);
    ASSERT_EQ(y.shape(), want_y.shape());
    const std::vector<float> got = y.contiguous().to_vector<float>(),
                             ref = want_y.contiguous().to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5);
    sum(y * y).backward();
    for (const Tensor& p : m.parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_GT(sum(abs(p.grad())).item(), 0.0);
    }
  }
  EXPECT_EQ(down(x).shape(), (Shape{3, 8, 5, 4}));
}

TEST(BasicBlockTest, BadArgumentsSayWhatWasExpected) {
  test::ExpectError([] { nn::BasicBlock(0, 4); },
                    {"BasicBlock", "channels >= 1", "0 -> 4"});
  test::ExpectError([] { nn::BasicBlock(4, 4, 0); },
                    {"BasicBlock", "stride >= 1", "stride 0"});
}

}  // namespace
}  // namespace stepjit
