// Tests STEPJIT_DUMP's pictures: a compiled step dumps the dot text of its
// traced and final graphs (and their SVGs when Graphviz is installed), and
// rendering reports a missing, failing or hanging `dot` without stopping.
#include "frontend/dot_dump.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "ir/dot.h"
#include "ir/parser.h"
#include "tests/util/count.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

namespace fs = std::filesystem;

struct Env {
  Env(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    setenv(name, value.c_str(), 1);
  }
  ~Env() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::string Read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using ::stepjit::test::Count;

bool GraphvizInstalled() {
  return std::system("command -v dot >/dev/null 2>&1") == 0;
}

// The last pass's dump: the final graph as text.
std::string LastPassDump(const fs::path& dir) {
  std::string last;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".ir") && name > last) last = name;
  }
  return Read(dir / last);
}

TEST(DotDumpTest, ACompiledStepDumpsTheTracedAndFinalGraphs) {
  const fs::path root = fs::path(::testing::TempDir()) / "stepjit_dot_dump";
  fs::remove_all(root);
  // The step's own folder under STEPJIT_DUMP.
  const fs::path dir = root / "dot_step";
  manual_seed(3);
  nn::Sequential model(nn::Linear(12, 16), nn::ReLU(), nn::Linear(16, 4));
  optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  auto step = test::CrossEntropyStep(model, opt);
  {
    Env dump("STEPJIT_DUMP", root.string());
    auto fast = compile(step, {.name = "dot_step"});
    Generator gen(4);
    const Tensor x = randn({8, 12}, {}, &gen);
    const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
    for (int i = 0; i < 3; ++i) fast(x, y);
    ASSERT_EQ(fast.stats().replays, 1) << fast.stats();
  }
  for (const char* stem : {"000-trace", "final"}) {
    const std::string dot = Read(dir / (std::string(stem) + ".dot"));
    ASSERT_FALSE(dot.empty()) << stem;
    EXPECT_EQ(dot.rfind("digraph ", 0), 0u) << stem;
    // Forward, input-gradient and weight-gradient GEMMs of both layers
    // (the first layer's input gradient is not needed).
    EXPECT_EQ(Count(dot, "shape=box3d"), 5) << stem << "\n" << dot;
    // Written back: the 4 parameters, both AdamW moments of each, and
    // AdamW's step count.
    EXPECT_EQ(Count(dot, "label=\"assign %"), 13) << stem << "\n" << dot;
    const fs::path svg = dir / (std::string(stem) + ".svg");
    if (GraphvizInstalled()) {
      EXPECT_NE(Read(svg).find("<svg"), std::string::npos) << svg;
    } else {
      EXPECT_FALSE(fs::exists(svg)) << svg;
    }
  }
  // The final picture is the final IR: a cluster per fusion, the same
  // number of node statements as the IR's ops drawn.
  const std::string final_ir = LastPassDump(dir);
  auto graph = ir::ParseGraph(final_ir, "final.ir");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::string final_dot = Read(dir / "final.dot");
  EXPECT_EQ(ir::PrintDot(**graph), final_dot);
  const int fusions = Count(final_ir, " = fusion @");
  EXPECT_GT(fusions, 0);
  EXPECT_EQ(Count(final_dot, "subgraph \"cluster_"), fusions);
  EXPECT_EQ(Count(Read(dir / "000-trace.dot"), "subgraph \"cluster_"), 0);
  fs::remove_all(root);
}

TEST(DotDumpTest, NoDotOnPathIsNotFoundAndKeepsTheDotFile) {
  const fs::path dir = fs::path(::testing::TempDir()) / "stepjit_no_dot";
  fs::remove_all(dir);
  fs::create_directories(dir / "empty_bin");
  const Env path("PATH", (dir / "empty_bin").string());
  ir::Graph g("g");
  ir::TensorType t;
  t.shape = {2};
  g.SetReturns({g.AddParam("x", t, ir::ParamKind::kInput)});
  std::ofstream(dir / "g.dot") << ir::PrintDot(g);
  const absl::Status s =
      frontend::RenderSvg((dir / "g.dot").string(), (dir / "g.svg").string());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("no `dot` on PATH"), std::string::npos) << s;
  frontend::DumpDot(g, dir.string(), "h");
  EXPECT_EQ(Read(dir / "h.dot"), ir::PrintDot(g));
  EXPECT_FALSE(fs::exists(dir / "h.svg"));
  fs::remove_all(dir);
}

// A `dot` of our own on PATH: one that fails, one that never finishes.
class FakeDotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
    std::ofstream(dir_ / "in.dot") << "digraph g {}\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  void WriteDot(const std::string& body) {
    const fs::path script = dir_ / "bin" / "dot";
    std::ofstream(script) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(script, fs::perms::owner_all);
  }
  absl::Status Render(std::chrono::milliseconds timeout) {
    const Env path("PATH", (dir_ / "bin").string() + ":/usr/bin:/bin");
    return frontend::RenderSvg((dir_ / "in.dot").string(),
                               (dir_ / "out.svg").string(), timeout);
  }
  // One directory per test and process: ctest runs these tests in parallel.
  const fs::path dir_ =
      fs::path(::testing::TempDir()) /
      ("stepjit_fake_dot_" +
       std::string(
           ::testing::UnitTest::GetInstance()->current_test_info()->name()) +
       "_" + std::to_string(getpid()));
};

TEST_F(FakeDotTest, AFailingRunNamesTheCommandAndLeavesNoSvg) {
  WriteDot("echo partial > \"$3\"; exit 3");
  const absl::Status s = Render(frontend::kDotTimeout);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(
      s.message().find("`dot -Tsvg -o " + (dir_ / "out.svg").string() + " " +
                       (dir_ / "in.dot").string() + "` exited with status 3"),
      std::string::npos)
      << s;
  EXPECT_FALSE(fs::exists(dir_ / "out.svg"));
}

TEST_F(FakeDotTest, AHangingRunIsStoppedAtTheTimeout) {
  WriteDot("exec sleep 600");
  const absl::Status s = Render(std::chrono::milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("ran longer than 200 ms and was stopped"),
            std::string::npos)
      << s;
}

TEST_F(FakeDotTest, ASucceedingRunIsOk) {
  WriteDot("echo '<svg/>' > \"$3\"");
  EXPECT_TRUE(Render(frontend::kDotTimeout).ok());
  EXPECT_EQ(Read(dir_ / "out.svg"), "<svg/>\n");
}

}  // namespace
}  // namespace stepjit
