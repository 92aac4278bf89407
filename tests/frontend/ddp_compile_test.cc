// compile(step) of a step through nn::DistributedDataParallel in a world of
// one: the trace records the reducer's cat -> all_reduce {async} -> copy_ per
// bucket, and replays give the eager losses, parameters and gradients bit for
// bit (SGD with momentum and AdamW, with and without clip_grad_norm_), with
// the shape-only re-traces agreeing. Several ranks: tests/dist.
#include <sstream>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "training/nn/ddp.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to_vector<float>();
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

struct Run {
  std::vector<std::vector<float>>
      values;  // losses, then each parameter and grad
  std::string ir;
  std::string explain;
  CompileStats stats;
  int64_t buckets = 0;
};

// `steps` steps of a DDP-wrapped MLP (three buckets at 0.004 MiB).
template <typename Opt, typename Options>
Run Train(Mode mode, Options opt_options, bool clip, int steps) {
  dist::InitOptions single;
  single.backend = "single";
  dist::init(single);
  manual_seed(11);
  nn::Sequential model(nn::Linear(20, 32), nn::ReLU(), nn::Linear(32, 32),
                       nn::ReLU(), nn::Linear(32, 5));
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.004});
  Opt opt(ddp->parameters(), opt_options);
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(ddp(x), y);
    loss.backward();
    if (clip) nn::utils::clip_grad_norm_(ddp->parameters(), 0.5);
    opt.step();
    return loss;
  };
  auto fast = compile(step, {.mode = mode, .verify_first = 5});
  Run run;
  Generator gen(4);
  for (int i = 0; i < steps; ++i) {
    const Tensor x = randn({16, 20}, {}, &gen);
    const Tensor y = randint(0, 5, {16}, {.dtype = DType::kI64}, &gen);
    run.values.push_back(Values(fast(x, y)));
  }
  for (const Tensor& p : ddp->parameters()) {
    run.values.push_back(Values(p));
    run.values.push_back(Values(p.grad()));
  }
  std::ostringstream ir;
  fast.dump_ir(ir);
  run.ir = ir.str();
  run.stats = fast.stats();
  run.explain = fast.explain();
  run.buckets = static_cast<int64_t>(ddp->buckets().size());
  return run;
}

template <typename Opt, typename Options>
void ExpectCompiledEqualsEager(Options options, bool clip) {
  const int kSteps = 12;
  const Run eager = Train<Opt>(Mode::kEager, options, clip, kSteps);
  const Run compiled = Train<Opt>(Mode::kCompiled, options, clip, kSteps);
  ASSERT_EQ(compiled.buckets, 3);
  ASSERT_EQ(eager.values.size(), compiled.values.size());
  for (size_t i = 0; i < eager.values.size(); ++i) {
    EXPECT_EQ(eager.values[i], compiled.values[i]) << "entry " << i;
  }
  EXPECT_EQ(compiled.stats.traces, 1) << compiled.ir;
  EXPECT_EQ(compiled.stats.replays, kSteps - 2);  // 1 warmup, 1 trace
  EXPECT_EQ(compiled.stats.fallbacks, 0);
  EXPECT_GE(compiled.stats.verifications, 5);
  EXPECT_EQ(compiled.stats.verify_mismatches, 0);
  // The re-traces were conclusive (an inconclusive one retraces; one that
  // kept a shape-only tensor, such as a reducer holding on to its results,
  // turns verification off).
  EXPECT_EQ(compiled.explain.find("turned off"), std::string::npos)
      << compiled.explain;
  // One asynchronous all_reduce per bucket, fed by a cat of the bucket's
  // gradients, read back into the .grad tensors by copy_.
  EXPECT_EQ(Count(compiled.ir, "= all_reduce "), 3) << compiled.ir;
  EXPECT_EQ(Count(compiled.ir, "async = true"), 3) << compiled.ir;
  EXPECT_GE(Count(compiled.ir, "= cat "), 3) << compiled.ir;
  EXPECT_NE(compiled.ir.find("copy_"), std::string::npos) << compiled.ir;
}

TEST(DdpCompileTest, SgdMomentumReplaysEager) {
  ExpectCompiledEqualsEager<optim::SGD>(
      optim::SGDOptions{.lr = 0.05, .momentum = 0.9},
      /*clip=*/false);
}

TEST(DdpCompileTest, AdamWReplaysEager) {
  ExpectCompiledEqualsEager<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2},
                                          /*clip=*/false);
}

TEST(DdpCompileTest, ClippedAdamWReplaysEager) {
  ExpectCompiledEqualsEager<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2},
                                          /*clip=*/true);
}

}  // namespace
}  // namespace stepjit
