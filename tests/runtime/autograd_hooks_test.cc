// Post-accumulate-grad hooks and queued backward callbacks
// (runtime/autograd/engine.h): when they run, what they see, grad mode,
// removal, nesting, errors, and shape-only (meta) dispatch.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "tests/util/expect_error.h"

namespace stepjit {
namespace {

using test::ExpectError;
using Values = std::vector<double>;

Tensor Leaf(const Values& v) {
  Tensor t = from_vector(v, {static_cast<int64_t>(v.size())});
  t.set_requires_grad(true);
  return t;
}

Values Read(const Tensor& t) { return t.contiguous().to_vector<double>(); }

TEST(PostAccumulateGradHookTest, SeesTheAccumulatedGradientOncePerBackward) {
  const Tensor x = Leaf({1, -2, 3});
  std::vector<Values> seen;
  std::vector<bool> grad_mode;
  autograd::AddPostAccumulateGradHook(x, [&](const Tensor& leaf) {
    EXPECT_TRUE(leaf.is_same(x));
    seen.push_back(Read(leaf.grad()));
    grad_mode.push_back(GradMode::is_enabled());
  });
  // x reaches the loss by two paths; the engine sums them before the one
  // accumulation, so the hook runs once with d/dx (x^2 + 3x) = 2x + 3.
  sum(x * x + x * 3.0).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (Values{5, -1, 9}));
  // A second backward adds into the existing .grad: the hook sees the sum.
  sum(x * 2.0).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (Values{7, 1, 11}));
  EXPECT_EQ(grad_mode, (std::vector<bool>{false, false}));
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(PostAccumulateGradHookTest, RunsInOrderAndCanBeRemoved) {
  const Tensor x = Leaf({1, 2});
  std::string order;
  const int a = autograd::AddPostAccumulateGradHook(
      x, [&](const Tensor&) { order += "a"; });
  const int b = autograd::AddPostAccumulateGradHook(
      x, [&](const Tensor&) { order += "b"; });
  EXPECT_NE(a, b);
  sum(x).backward();
  EXPECT_EQ(order, "ab");
  EXPECT_TRUE(autograd::RemovePostAccumulateGradHook(x, a));
  EXPECT_FALSE(autograd::RemovePostAccumulateGradHook(x, a));
  sum(x).backward();
  EXPECT_EQ(order, "abb");
  // A hook that removes itself while the hooks run: the others still run.
  int self = 0;
  self = autograd::AddPostAccumulateGradHook(x, [&](const Tensor& leaf) {
    order += "s";
    autograd::RemovePostAccumulateGradHook(leaf, self);
  });
  sum(x).backward();
  sum(x).backward();
  EXPECT_EQ(order, "abbbsb");
}

TEST(PostAccumulateGradHookTest, FiresWhenTheLeafIsTheRootAndUnderNoGrad) {
  const Tensor x = Leaf({4});
  std::vector<Values> seen;
  autograd::AddPostAccumulateGradHook(
      x, [&](const Tensor& leaf) { seen.push_back(Read(leaf.grad())); });
  x.backward();  // x is its own root: d x / d x = 1
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (Values{1}));
  x.set_grad(Tensor());
  const Tensor loss = x * 5.0;
  {
    // backward() under no_grad still differentiates the recorded graph.
    NoGradGuard no_grad;
    loss.backward();
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (Values{5}));
}

TEST(PostAccumulateGradHookTest, HookDispatchingOpsChangesTheGradient) {
  const Tensor x = Leaf({1, 2, 3});
  autograd::AddPostAccumulateGradHook(x, [](const Tensor& leaf) {
    Tensor g = leaf.grad();
    g.mul_(10.0);  // an ordinary in-place op on the fresh .grad
  });
  sum(x * x).backward();
  EXPECT_EQ(Read(x.grad()), (Values{20, 40, 60}));
}

TEST(PostAccumulateGradHookTest, RejectsNonLeavesAndTensorsWithoutGrad) {
  const Tensor x = Leaf({1});
  const Tensor y = x * 2.0;
  ExpectError(
      [&] { autograd::AddPostAccumulateGradHook(y, [](const Tensor&) {}); },
      {"expected a leaf tensor that requires grad", "non-leaf"});
  const Tensor plain = from_vector(Values{1}, {1});
  ExpectError(
      [&] { autograd::AddPostAccumulateGradHook(plain, [](const Tensor&) {}); },
      {"does not require grad"});
  EXPECT_FALSE(autograd::RemovePostAccumulateGradHook(plain, 1));
}

TEST(QueueCallbackTest, OutsideBackwardThrows) {
  EXPECT_EQ(autograd::CurrentBackwardId(), 0u);
  ExpectError([] { autograd::QueueCallback([] {}); },
              {"QueueCallback", "during backward()", "no backward running"});
}

TEST(QueueCallbackTest, RunsAfterTheWholeGraphInOrderAndMayQueueMore) {
  const Tensor a = Leaf({1, 2});
  const Tensor b = Leaf({3});
  std::string log;
  uint64_t id_in_hook = 0;
  autograd::AddPostAccumulateGradHook(a, [&](const Tensor& leaf) {
    log += "A";
    id_in_hook = autograd::CurrentBackwardId();
    autograd::QueueCallback([&] {
      // Every leaf has its gradient by now.
      log += "1";
      EXPECT_TRUE(a.grad().defined());
      EXPECT_TRUE(b.grad().defined());
      EXPECT_FALSE(GradMode::is_enabled());
      EXPECT_EQ(autograd::CurrentBackwardId(), id_in_hook);
      autograd::QueueCallback([&] {
        log += "3";
        // Callbacks may dispatch ops: double every gradient.
        a.grad().mul_(2.0);
        b.grad().mul_(2.0);
      });
    });
    autograd::QueueCallback([&] { log += "2"; });
  });
  autograd::AddPostAccumulateGradHook(b, [&](const Tensor&) { log += "B"; });
  // a's gradient arrives before b's: b sits deeper in the graph.
  (sum(a) * sum(b * b)).backward();
  EXPECT_EQ(log.substr(log.size() - 3), "123");
  EXPECT_NE(log.find('A'), std::string::npos);
  EXPECT_NE(log.find('B'), std::string::npos);
  EXPECT_LT(log.find('B'), log.find('1'));
  EXPECT_EQ(Read(a.grad()), (Values{18, 18}));  // 2 * b^2
  EXPECT_EQ(Read(b.grad()), (Values{36}));      // 2 * 2b * sum(a)
  EXPECT_NE(id_in_hook, 0u);
  EXPECT_EQ(autograd::CurrentBackwardId(), 0u);
  const uint64_t first = id_in_hook;
  (sum(a) * sum(b * b)).backward();
  EXPECT_NE(id_in_hook, first);  // each backward has its own id
}

TEST(QueueCallbackTest, ABackwardThatThrowsDropsItsCallbacks) {
  const Tensor x = Leaf({1});
  int ran = 0;
  bool fail = true;
  autograd::AddPostAccumulateGradHook(x, [&](const Tensor&) {
    autograd::QueueCallback([&] { ++ran; });
    if (fail) throw Error("hook failed");
  });
  ExpectError([&] { sum(x * 2.0).backward(); }, {"hook failed"});
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(autograd::CurrentBackwardId(), 0u);
  fail = false;
  sum(x * 2.0).backward();
  EXPECT_EQ(ran, 1);
}

// A compiled step re-traces itself with meta dispatch: hooks and callbacks run
// the same way and see shape-only gradients.
TEST(QueueCallbackTest, HooksAndCallbacksRunInMetaMode) {
  const Tensor x = Leaf({1, 2, 3});
  std::vector<bool> hook_saw_meta, callback_saw_meta;
  autograd::AddPostAccumulateGradHook(x, [&](const Tensor& leaf) {
    hook_saw_meta.push_back(leaf.grad().storage()->is_meta());
    autograd::QueueCallback([&] {
      // Ops still dispatch (shape only) and leave real tensors untouched.
      const Tensor doubled = x.grad() * 2.0;
      EXPECT_EQ(doubled.shape(), x.shape());
      callback_saw_meta.push_back(doubled.storage()->is_meta());
    });
  });
  {
    runtime::MetaModeGuard meta;
    sum(x * x).backward();
  }
  EXPECT_EQ(hook_saw_meta, (std::vector<bool>{true}));
  EXPECT_EQ(callback_saw_meta, (std::vector<bool>{true}));
  x.set_grad(Tensor());
  sum(x * x).backward();
  EXPECT_EQ(hook_saw_meta, (std::vector<bool>{true, false}));
  EXPECT_EQ(callback_saw_meta, (std::vector<bool>{true, false}));
  EXPECT_EQ(Read(x.grad()), (Values{2, 4, 6}));
}

}  // namespace
}  // namespace stepjit
