// Multi-region launches on CUDA (ProgramOptions::cuda_multi_region): the
// optimizer's per-parameter updates of a compiled step launch as one kernel
// per phase, with the same bytes as one set of kernels per region; members
// that share a written buffer launch one by one. Runs on the host emulator
// unless STEPJIT_TEST_CUDA_BACKEND=driver.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/executor.h"
#include "testing/cuda_emulator/emulator_backend.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/adamw_mlp.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;

const Device kCuda = Device::cuda(0);

// A three-layer MLP trained with AdamW: six parameters, six update regions.
struct Mlp : test::AdamWMlp {
  explicit Mlp(Device device) : AdamWMlp({12, 24, 24, 5}, 3, device) {}
};

int64_t Launches() {
  runtime::cuda::Backend* b = runtime::cuda::GetBackend();
  if (!runtime::cuda::IsEmulatorBackend(*b)) return 0;
  EXPECT_TRUE(b->SynchronizeDevice().ok());
  return runtime::cuda::GetEmulatorStats(*b).launches;
}

TEST_F(CudaTest, MultiRegionUpdatesMatchOneLaunchPerRegionBitForBit) {
  Mlp grouped(kCuda), alone(kCuda);
  auto fast_grouped = compile([&](const Tensor& x, const Tensor& y) { return grouped.Step(x, y); },
                              {.cuda_graphs = false, .cuda_multi_region = true});
  auto fast_alone = compile([&](const Tensor& x, const Tensor& y) { return alone.Step(x, y); },
                            {.cuda_graphs = false, .cuda_multi_region = false});
  Generator g(8);
  int64_t launches_grouped = 0, launches_alone = 0;
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({10, 12}, {}, &g).to(kCuda);
    const Tensor y = randint(0, 5, {10}, {.dtype = DType::kI64}, &g).to(kCuda);
    const int64_t l0 = Launches();
    const double a = fast_grouped(x, y).item();
    const int64_t l1 = Launches();
    const double b = fast_alone(x, y).item();
    const int64_t l2 = Launches();
    EXPECT_EQ(a, b) << "step " << i;
    if (i == 5) {  // a replay
      launches_grouped = l1 - l0;
      launches_alone = l2 - l1;
    }
  }
  auto pg = grouped.model.parameters(), pa = alone.model.parameters();
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(Values(pg[i]), Values(pa[i])) << "parameter " << i;
  }
  const std::string explain = fast_grouped.explain();
  // The three bias gradients' momentum updates (sunk next to the first
  // parameter update, which also counts the step the others read) and the
  // five other parameter updates.
  EXPECT_NE(explain.find("9 regions launched as 2 multi-region kernel groups"), std::string::npos)
      << explain;
  EXPECT_NE(fast_alone.explain().find("no multi-region kernels"), std::string::npos);
  EXPECT_LT(fast_grouped.stats().kernels_per_step, fast_alone.stats().kernels_per_step);
  if (runtime::cuda::IsEmulatorBackend(*runtime::cuda::GetBackend())) {
    // Alone, the nine regions take 15 launches (the six parameter updates a
    // scalar and a main kernel each, the momentum updates one); grouped, 4:
    // a scalar and a main phase per group.
    EXPECT_EQ(launches_alone - launches_grouped, 11) << explain;
  }
}

// `reader` reads the state (broadcast over rows) before `writer` adds to
// it in place, as memory planning may allow, the state being dead after the
// writer. Launched together, a reader block could run after a writer block
// and see written values: the executor sees the shared buffer and launches
// the two one by one.
constexpr char kSharedBuffer[] = R"(graph @shared(%x: f32[4096] input, %y: f32[8,4096] input, %s: f32[4096] state) {
  %0 = fusion @reader(%y, %s) : (f32[8,4096]) {
    graph @reader(%p0: f32[8,4096] input, %p1: f32[4096] input) {
      %0 = mul %p0, %p1 : f32[8,4096]
      return %0
    }
  }
  %1 = fusion @writer(%s, %x) : (f32[4096]) {
    graph @writer(%p0: f32[4096] input, %p1: f32[4096] input) {
      %0 = add_ %p0, %p1 {alpha = 1.0, in_place = true} : f32[4096]
      return %0
    }
  }
  assign %s, %1#0
  return %0#0
})";

TEST_F(CudaTest, MembersSharingAWrittenBufferLaunchOneByOne) {
  absl::StatusOr<std::unique_ptr<ir::Graph>> graph = ir::ParseGraph(kSharedBuffer);
  ASSERT_TRUE(graph.ok()) << graph.status();
  runtime::ProgramOptions options;
  options.device = kCuda;
  absl::StatusOr<runtime::Program> program =
      runtime::Program::Build(**graph, options);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->cuda_region_groups(), 1);
  Generator g(4);
  const Tensor x = randn({4096}, {}, &g), y = randn({8, 4096}, {}, &g), s0 = randn({4096}, {}, &g);
  const Tensor s = s0.to(kCuda);
  const int64_t before = Launches();
  std::vector<Tensor> out = program->Run({x.to(kCuda), y.to(kCuda)}, {s});
  const int64_t launches = Launches() - before;
  const std::vector<double> got = Values(out[0]), ys = Values(y), xs = Values(x), old = Values(s0),
                            now = Values(s);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<double>(static_cast<float>(ys[i] * old[i % 4096]))) << i;
  }
  for (size_t i = 0; i < now.size(); ++i) {
    ASSERT_EQ(now[i], static_cast<double>(static_cast<float>(old[i] + xs[i]))) << i;
  }
  // The reader's kernel, then the writer's: two launches, not one.
  if (runtime::cuda::IsEmulatorBackend(*runtime::cuda::GetBackend())) {
    EXPECT_EQ(launches, 2);
  }
}

}  // namespace
}  // namespace stepjit
