// The trace profiler on a compiled MLP training step fed by a DataLoader:
// the trace file is read back with llvm::json and checked against what the
// runtime reports (kernels per step, ops per step) and against GEMM FLOPs
// counted by hand; profiling off records nothing; bad paths are refused.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/expect_error.h"
#include "tests/util/profiled_mlp.h"
#include "tests/util/trace_check.h"

namespace stepjit {
namespace {

using test::NestingError;
using test::ParsedTrace;
using test::ReadTrace;
using test::Span;

// The summary measures nothing in tests: the peaks come from here.
class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("STEPJIT_PEAK_GFLOPS", "100", 1);
    setenv("STEPJIT_PEAK_GBS", "10", 1);
    ASSERT_FALSE(Profiler::Active()) << "STEPJIT_PROFILE is set";
  }
  std::string Path(const std::string& name) {
    return absl::StrCat(::testing::TempDir(), "/", name, "_", getpid(),
                        ".json");
  }
};

using Mlp = test::ProfiledMlp;
constexpr double kStepGemmFlops = test::kProfiledMlpStepGemmFlops;

data::Dataset MakeDataset() {
  Generator g(9);
  return data::Dataset(randn({64, 20}, {}, &g),
                       randint(0, 6, {64}, {.dtype = DType::kI64}, &g));
}

std::vector<const Span*> Within(const ParsedTrace& t, const Span& outer,
                                const std::string& cat) {
  std::vector<const Span*> out;
  for (const Span& s : t.spans) {
    if (s.cat == cat && &s != &outer && outer.Contains(s)) out.push_back(&s);
  }
  return out;
}

bool IsGemm(const Span& s) { return s.name.rfind("matmul ", 0) == 0; }

TEST_F(ProfilerTest, CompiledStepsWithADataLoaderMakeANestedTrace) {
  Mlp mlp;
  auto step =
      compile([&](const Tensor& x, const Tensor& y) { return mlp.Step(x, y); });
  data::DataLoader loader(MakeDataset(), {.batch_size = 16});
  const std::string path = Path("profile_mlp");
  std::string summary;
  int steps = 0;
  {
    Profiler profile(path);
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (data::Batch& b : loader) {
        step(b.x, b.y);
        ++steps;
      }
    }
    profile.Stop();
    summary = profile.Summary();
  }
  const CompileStats stats = step.stats();
  ASSERT_EQ(steps, 8);
  ASSERT_EQ(stats.replays, 6);  // call 1 warms up, call 2 traces
  ASSERT_GT(stats.kernels_per_step, 5);

  const ParsedTrace t = ReadTrace(path);
  ASSERT_EQ(t.error, "");
  EXPECT_EQ(NestingError(t.spans), "");
  std::vector<const Span*> compiled, traced, eager, waits;
  for (const Span& s : t.spans) {
    if (s.name == "train_step (compiled)") compiled.push_back(&s);
    if (s.name == "train_step (traced)") traced.push_back(&s);
    if (s.name == "train_step (eager)") eager.push_back(&s);
    if (s.cat == "data") waits.push_back(&s);
    EXPECT_LE(s.begin, s.end) << s.name;
  }
  ASSERT_EQ(compiled.size(), 6u);
  ASSERT_EQ(traced.size(), 1u);
  ASSERT_EQ(eager.size(), 1u);
  // Each epoch: begin() and one advance per batch wait for a batch.
  EXPECT_EQ(waits.size(), 10u);
  for (const Span* w : waits) {
    for (const Span* s : compiled) {
      EXPECT_TRUE(w->end <= s->begin || s->end <= w->begin)
          << "a data wait inside a step";
    }
  }

  // Every kernel the program launches, in every compiled step, and each
  // inside its step; the GEMMs' FLOPs add up to the hand count.
  int kernels = 0;
  for (const Span* s : compiled) {
    const std::vector<const Span*> k = Within(t, *s, "kernel");
    EXPECT_EQ(static_cast<int>(k.size()), stats.kernels_per_step);
    double flops = 0;
    for (const Span* e : k) {
      EXPECT_TRUE(e->counted) << e->name;
      EXPECT_GT(e->bytes, 0) << e->name;
      if (IsGemm(*e)) flops += e->flops;
    }
    EXPECT_EQ(flops, kStepGemmFlops);
    kernels += static_cast<int>(k.size());
  }
  int all_kernels = 0;
  for (const Span& s : t.spans) all_kernels += s.cat == "kernel";
  EXPECT_EQ(all_kernels, kernels) << "kernel spans outside compiled steps";

  // The traced call: every op the tracer saw, inside the trace span, with
  // the same GEMM FLOPs; the eager call ran its ops too.
  const std::vector<const Span*> trace_spans = Within(t, *traced[0], "compile");
  ASSERT_FALSE(trace_spans.empty());
  EXPECT_EQ(trace_spans[0]->name, "trace train_step");
  const std::vector<const Span*> traced_ops = Within(t, *trace_spans[0], "op");
  EXPECT_EQ(static_cast<int>(traced_ops.size()), stats.ops_per_step);
  for (const Span* call : {traced[0], eager[0]}) {
    double flops = 0;
    int gemms = 0;
    for (const Span* e : Within(t, *call, "op")) {
      if (!IsGemm(*e)) continue;
      flops += e->flops;
      ++gemms;
    }
    EXPECT_EQ(gemms, 5) << call->name;
    EXPECT_EQ(flops, kStepGemmFlops) << call->name;
  }
  bool compile_span = false;
  for (const Span& s : t.spans) compile_span |= s.name == "compile train_step";
  EXPECT_TRUE(compile_span);

  EXPECT_NE(summary.find("train_step (compiled)"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("dataloader next batch"), std::string::npos);
  EXPECT_NE(summary.find("peaks: 100.0 GFLOP/s, 10.0 GB/s (FLOP/s: "
                         "STEPJIT_PEAK_GFLOPS; bytes/s: STEPJIT_PEAK_GBS)"),
            std::string::npos)
      << summary;
  std::filesystem::remove(path);
}

TEST_F(ProfilerTest, EagerGemmFlopsAreTwiceMnk) {
  Generator g(1);
  const Tensor a = randn({7, 5}, {}, &g), b = randn({5, 3}, {}, &g);
  const Tensor batched = randn({2, 7, 5}, {}, &g);
  Profiler profile;
  matmul(a, b);
  matmul(batched, b);
  matmul(a.t(), a);  // a permute view, then [5, 7] x [7, 5]
  profile.Stop();
  std::vector<double> flops;
  for (const runtime::TraceEvent& e : profile.Events()) {
    if (e.cat == runtime::kCatOp && e.work.kind == runtime::ProfileKind::kGemm)
      flops.push_back(e.work.flops);
  }
  EXPECT_EQ(flops, (std::vector<double>{2.0 * 7 * 3 * 5, 2.0 * 2 * 7 * 3 * 5,
                                        2.0 * 5 * 5 * 7}));
}

// A convolution and its two gradients count as GEMMs: 2 x outputs of the
// forward x (C / groups) x KH x KW each, counted here by loops.
TEST_F(ProfilerTest, ConvolutionFlopsCountEveryMultiplyAdd) {
  Generator g(3);
  const Tensor x = randn({2, 4, 9, 8}, {}, &g), w = randn({6, 2, 3, 2}, {}, &g);
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 0}, .groups = 2};
  Profiler profile;
  const Tensor y = conv2d(x, w, Tensor(), o);
  conv2d_backward_input(y, w, x.shape(), o);
  conv2d_backward_weight(y, x, w.shape(), o);
  profile.Stop();
  // Multiply-adds of the forward, counted tap by tap.
  double macs = 0;
  for (int64_t oy = 0; oy < y.size(2); ++oy)
    for (int64_t ox = 0; ox < y.size(3); ++ox)
      for (int64_t ky = 0; ky < 3; ++ky)
        for (int64_t kx = 0; kx < 2; ++kx) macs += 1;
  macs *= 2.0 /*N*/ * 6 /*O*/ * 2 /*C per group*/;
  std::vector<double> flops;
  for (const runtime::TraceEvent& e : profile.Events()) {
    if (e.cat == runtime::kCatOp && e.work.kind == runtime::ProfileKind::kGemm)
      flops.push_back(e.work.flops);
  }
  EXPECT_EQ(flops, (std::vector<double>{2 * macs, 2 * macs, 2 * macs}));
}

TEST_F(ProfilerTest, PausedWorkIsLeftOut) {
  Generator g(2);
  const Tensor a = randn({4, 6}, {}, &g), b = randn({6, 2}, {}, &g);
  Profiler profile;
  matmul(a, b);
  profile.Pause();
  EXPECT_FALSE(Profiler::Active());
  relu(a);
  profile.Resume();
  add(a, a);
  profile.Stop();
  std::vector<std::string> names;
  for (const runtime::TraceEvent& e : profile.Events()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"matmul [4, 2]", "add [4, 6]"}));
}

TEST_F(ProfilerTest, OffRecordsNothing) {
  runtime::ResetProfile();
  Mlp mlp;
  auto step =
      compile([&](const Tensor& x, const Tensor& y) { return mlp.Step(x, y); });
  data::DataLoader loader(MakeDataset(), {.batch_size = 16});
  for (data::Batch& b : loader) step(b.x, b.y);
  EXPECT_EQ(step.stats().replays, 2);
  EXPECT_TRUE(runtime::TraceSnapshot().empty());
  EXPECT_TRUE(runtime::ProfileSnapshot().empty());
}

TEST_F(ProfilerTest, BadTracePathsAreClearErrors) {
  const std::string bad = "/nonexistent_dir/trace.json";
  try {
    Profiler profile(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "stepjit::Profiler: cannot write the trace file "
                 "'/nonexistent_dir/trace.json': No such file or directory");
  }
  EXPECT_FALSE(Profiler::Active());

  const absl::StatusOr<runtime::ProfileEnv> env =
      runtime::ParseProfileEnv(bad.c_str());
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().message(),
            "STEPJIT_PROFILE: cannot write the trace file "
            "'/nonexistent_dir/trace.json': No such file or directory");
  const absl::StatusOr<runtime::ProfileEnv> word =
      runtime::ParseProfileEnv("yes");
  ASSERT_FALSE(word.ok());
  EXPECT_EQ(word.status().message(),
            "STEPJIT_PROFILE: expected 0 (off), 1 (a summary at exit) or a "
            "trace file name ending in .json, got 'yes'");
  EXPECT_FALSE(runtime::ParseProfileEnv("0")->on);
  EXPECT_FALSE(runtime::ParseProfileEnv(nullptr)->on);
  const absl::StatusOr<runtime::ProfileEnv> one = runtime::ParseProfileEnv("1");
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->on);
  EXPECT_EQ(one->trace_path, "");
}

TEST_F(ProfilerTest, OneSessionAtATime) {
  Profiler profile;
  test::ExpectError([] { Profiler second; }, {"profiling is already on"});
}

}  // namespace
}  // namespace stepjit
