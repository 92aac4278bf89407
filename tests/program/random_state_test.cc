// A program's random ops read the graph's random state (a `random` param,
// ops.def), which the program binds on every run: each run draws what the
// eager ops draw from the generator's state at that run, in whatever order
// the graph runs them, and advances the generator as they do.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/executor.h"
#include "runtime/generator.h"
#include "runtime/ops.h"

namespace stepjit::runtime {
namespace {

std::vector<float> Values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// rand runs before dropout in the graph, after it in the eager step: each
// takes its traced place in the run's span all the same.
constexpr const char* kGraph =
    R"(graph @g(%x: f32[64] input, %rng: i64[2] random) {
  %0 = rand %rng {shape = [8], dtype = f32, seed = 0, offset = 1064} : f32[8]
  %1 = dropout %x, %rng {p = 0.5, seed = 0, offset = 1000} : f32[64]
  return %1, %0
})";

TEST(RandomStateTest, EachRunDrawsWhatTheEagerOpsDrawFromTheGenerator) {
  auto graph = ir::ParseGraph(kGraph);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ProgramOptions options;
  // As traced: the eager step drew 72 words from offset 1000.
  options.random_layout = {.first = 1000, .span = 72};
  absl::StatusOr<Program> program = Program::Build(**graph, options);
  ASSERT_TRUE(program.ok()) << program.status();
  const Tensor x = ones({64});
  std::vector<float> last_mask;
  for (int run = 0; run < 4; ++run) {
    if (run == 2) manual_seed(1234);
    const uint64_t before = default_generator().offset();
    const Tensor eager_mask = dropout(x, 0.5);
    const Tensor eager_rand = rand({8});
    const uint64_t after = default_generator().offset();
    ASSERT_EQ(after - before, 72u);
    default_generator().set_offset(before);
    const std::vector<Tensor> out = program->Run({x}, {});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(Values(out[0]), Values(eager_mask)) << "run " << run;
    EXPECT_EQ(Values(out[1]), Values(eager_rand)) << "run " << run;
    EXPECT_EQ(default_generator().offset(), after) << "run " << run;
    // Fresh draws each run (a mask of 64 repeats with chance 2^-64).
    EXPECT_NE(Values(out[0]), last_mask) << "run " << run;
    last_mask = Values(out[0]);
  }
}

// Without the random param a random op draws what its attributes say, on
// every run, as Dispatch would.
TEST(RandomStateTest, ARandomOpWithoutTheStateDrawsItsAttributes) {
  auto graph = ir::ParseGraph(R"(graph @g() {
  %0 = rand {shape = [4], dtype = f32, seed = 7, offset = 3} : f32[4]
  return %0
})");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<Program> program = Program::Build(**graph);
  ASSERT_TRUE(program.ok()) << program.status();
  const std::vector<float> first = Values(program->Run({}, {})[0]);
  EXPECT_EQ(Values(program->Run({}, {})[0]), first);
  Generator g(7);
  g.set_offset(3);
  EXPECT_EQ(first, Values(rand({4}, {}, &g)));
}

}  // namespace
}  // namespace stepjit::runtime
