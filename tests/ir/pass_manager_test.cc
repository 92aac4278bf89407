// Tests the pass manager: registry, stats, dumps, disabling, verification.
#include "passes/pass_manager.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "frontend/compile.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/rewrite.h"
#include "passes/grad_scaler.h"
#include "passes/memory_plan.h"

namespace stepjit::passes {
namespace {

// Two identical exps (cse merges one), a dead neg (dce removes it) and a
// state write.
constexpr const char* kGraph = R"(graph @g(%x: f32[4] input, %s: f32[4] state) {
  %0 = exp %x : f32[4]
  %1 = exp %x : f32[4]
  %2 = neg %1 : f32[4]
  %3 = add %0, %1 : f32[4]
  assign %s, %3
  return %3
})";

std::unique_ptr<ir::Graph> Parse(const char* text = kGraph) {
  auto graph = ir::ParseGraph(text);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}

TEST(PassManagerTest, RegistryListsPassesInTableOrder) {
  std::vector<std::string> names;
  for (const PassInfo& p : ListPasses()) {
    names.emplace_back(p.name);
    EXPECT_NE(p.run, nullptr) << p.name;
    EXPECT_FALSE(p.summary.empty()) << p.name;
  }
  ASSERT_GE(names.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 5),
            (std::vector<std::string>{"verify", "print", "canonicalize", "cse",
                                      "dce"}));
  ASSERT_NE(FindPass("cse"), nullptr);
  EXPECT_EQ(FindPass("cse")->name, "cse");
  EXPECT_EQ(FindPass("frob"), nullptr);
  // compile()'s default pipeline names only registered passes.
  EXPECT_TRUE(ParsePipeline(stepjit::CompileOptions{}.pipeline).ok());
}

TEST(PassManagerTest,
     CudaPipelinesComputeBiasGradientsInTheGemmAfterTheLastFuse) {
  EXPECT_EQ(PipelineForTarget("cse,fuse,dce,fuse,memory-plan", Target::kCuda),
            "cse,fuse,dce,fuse,gemm-bgrad,memory-plan");
  EXPECT_EQ(PipelineForTarget("cse,fuse,dce", Target::kCpu), "cse,fuse,dce");
  EXPECT_EQ(PipelineForTarget("cse,dce", Target::kCuda), "cse,dce");
  EXPECT_EQ(PipelineForTarget("fuse,gemm-bgrad,dce", Target::kCuda),
            "fuse,gemm-bgrad,dce");
}

TEST(PassManagerTest, ParsePipelineIgnoresSpacesAndEmptyEntries) {
  auto passes = ParsePipeline(" cse , ,dce,");
  ASSERT_TRUE(passes.ok()) << passes.status();
  ASSERT_EQ(passes->size(), 2u);
  EXPECT_EQ((*passes)[0]->name, "cse");
  EXPECT_EQ((*passes)[1]->name, "dce");
  EXPECT_TRUE(ParsePipeline("")->empty());
}

TEST(PassManagerTest, UnknownPassListsKnownOnesAndRunsNothing) {
  auto graph = Parse();
  const std::string before = ir::Print(*graph);
  absl::Status status =
      RunPipeline(*graph, "cse,frob", PipelineOptions(), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(),
                               "unknown pass 'frob'; known passes: verify, "
                               "print, canonicalize, cse, dce"))
      << status.message();
  EXPECT_EQ(ir::Print(*graph), before);  // cse did not run first
}

TEST(PassManagerTest, StatsCountRunsChangesNodesAndCounters) {
  auto graph = Parse();
  PipelineStats stats;
  ASSERT_TRUE(
      RunPipeline(*graph, "cse,dce,dce", PipelineOptions(), &stats).ok());
  ASSERT_EQ(stats.passes.size(), 2u);
  EXPECT_EQ(stats.passes[0].first, "cse");
  EXPECT_EQ(stats.passes[1].first, "dce");

  const PassStats* cse = stats.Find("cse");
  ASSERT_NE(cse, nullptr);
  EXPECT_EQ(cse->runs, 1);
  EXPECT_EQ(cse->changed, 1);
  EXPECT_EQ(cse->nodes_before, 5);
  EXPECT_EQ(cse->nodes_after, 4);
  EXPECT_EQ(cse->Get("nodes merged"), 1);

  // dce ran twice: the second run found nothing; node counts are summed.
  const PassStats* dce = stats.Find("dce");
  ASSERT_NE(dce, nullptr);
  EXPECT_EQ(dce->runs, 2);
  EXPECT_EQ(dce->changed, 1);
  EXPECT_EQ(dce->nodes_before, 4 + 3);
  EXPECT_EQ(dce->nodes_after, 3 + 3);
  EXPECT_EQ(dce->Get("nodes removed"), 1);
  EXPECT_EQ(dce->Get("no such counter"), 0);

  EXPECT_EQ(stats.ToString(),
            "cse: runs=1 changed=1 nodes=5->4 nodes merged=1\n"
            "dce: runs=2 changed=1 nodes=7->6 nodes removed=1\n");
}

TEST(PassManagerTest, DisabledPassIsSkippedAndRecorded) {
  auto graph = Parse();
  PipelineOptions options;
  options.disabled = {"cse"};
  std::vector<std::string> ran;
  options.after_pass = [&](absl::string_view pass, const ir::Graph&) {
    ran.emplace_back(pass);
  };
  PipelineStats stats;
  ASSERT_TRUE(RunPipeline(*graph, "cse,dce", options, &stats).ok());
  EXPECT_EQ(ran, std::vector<std::string>{"dce"});
  const PassStats* cse = stats.Find("cse");
  ASSERT_NE(cse, nullptr);
  EXPECT_EQ(cse->runs, 0);
  EXPECT_EQ(cse->skipped, 1);
  EXPECT_EQ(graph->nodes().size(), 5u - 1u);  // only the dead neg went
  EXPECT_EQ(stats.ToString(),
            "cse: runs=0 changed=0 skipped=1\n"
            "dce: runs=1 changed=1 nodes=5->4 nodes removed=1\n");
}

TEST(PassManagerTest, UnknownDisabledPassIsAnError) {
  auto graph = Parse();
  PipelineOptions options;
  options.disabled = {"fsue"};
  absl::Status status = RunPipeline(*graph, "cse", options, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(),
                               "unknown pass 'fsue' in the disabled list"))
      << status.message();
}

TEST(PassManagerTest, DumpWritesOneFilePerPassNumberedByPosition) {
  const std::string dir = ::testing::TempDir() + "/stepjit_pass_manager_dump";
  std::filesystem::remove_all(dir);
  auto graph = Parse();
  PipelineOptions options;
  options.dump_dir = dir;
  options.disabled = {"canonicalize"};
  std::string after_cse;
  options.after_pass = [&](absl::string_view pass, const ir::Graph& g) {
    if (pass == "cse") after_cse = ir::Print(g);
  };
  ASSERT_TRUE(
      RunPipeline(*graph, "canonicalize,cse,dce", options, nullptr).ok());

  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"002-cse.ir", "003-dce.ir"}));
  auto read = [&](const std::string& name) {
    std::ifstream in(dir + "/" + name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  EXPECT_EQ(read("002-cse.ir"), after_cse);
  EXPECT_EQ(read("003-dce.ir"), ir::Print(*graph));
  std::filesystem::remove_all(dir);
}

TEST(PassManagerTest, UnwritableDumpDirectoryIsAnError) {
  const std::string file = ::testing::TempDir() + "/stepjit_pass_manager_file";
  std::ofstream(file) << "not a directory";
  auto graph = Parse();
  PipelineOptions options;
  options.dump_dir = file;
  absl::Status status = RunPipeline(*graph, "dce", options, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("cannot write IR dump"),
            absl::string_view::npos)
      << status.message();
  std::filesystem::remove(file);
}

// Test-only passes: one that breaks the IR, one that fails.
absl::StatusOr<bool> BreakTypes(ir::Graph& graph, PassStats& stats) {
  ir::TensorType wrong;
  wrong.shape = {7};
  graph.AddOp(ir::OpId::kNeg, {graph.params()[0]}, {}, wrong);
  stats.Add("nodes broken");
  return true;
}
absl::StatusOr<bool> Fail(ir::Graph&, PassStats&) {
  return absl::UnimplementedError("no lowering for frob");
}
constexpr PassInfo kTestPasses[] = {
    {"break-types", &BreakTypes, "appends a node with a wrong type"},
    {"fail", &Fail, "always fails"},
};

TEST(PassManagerTest, VerifierAfterEachPassNamesTheCulprit) {
  auto graph = Parse();
  PipelineStats stats;
  absl::Status status = RunPipeline(*graph, "break-types", PipelineOptions(),
                                    &stats, kTestPasses);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StartsWith(status.message(),
                               "after pass `break-types`: %4 = neg %x"))
      << status.message();
  EXPECT_EQ(stats.Find("break-types")->Get("nodes broken"), 1);

  // Without verify_each the broken IR goes through unnoticed.
  PipelineOptions options;
  options.verify_each = false;
  EXPECT_TRUE(
      RunPipeline(*graph, "break-types", options, nullptr, kTestPasses).ok());
}

TEST(PassManagerTest, PassErrorKeepsItsCodeAndNamesThePass) {
  auto graph = Parse();
  absl::Status status =
      RunPipeline(*graph, "fail", PipelineOptions(), nullptr, kTestPasses);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(status.message(), "pass `fail`: no lowering for frob");
}

TEST(PassManagerTest, FromEnvironmentReadsDumpAndDisable) {
  setenv("STEPJIT_DUMP", "/tmp/some dir", 1);
  setenv("STEPJIT_DISABLE", " fuse, cse ,", 1);
  PipelineOptions options = FromEnvironment();
  EXPECT_EQ(options.dump_dir, "/tmp/some dir");
  EXPECT_EQ(options.disabled, (std::vector<std::string>{"fuse", "cse"}));
  EXPECT_TRUE(options.verify_each);
  unsetenv("STEPJIT_DUMP");
  unsetenv("STEPJIT_DISABLE");
  options = FromEnvironment();
  EXPECT_TRUE(options.dump_dir.empty());
  EXPECT_TRUE(options.disabled.empty());
}

TEST(PassManagerTest, ValueReplacerFollowsChainsIntoInputsAndReturns) {
  auto graph = Parse();
  const auto& nodes = graph->nodes();
  ir::Value* exp0 = nodes[0]->output();
  ir::Value* exp1 = nodes[1]->output();
  ir::Value* neg = nodes[2]->output();
  ir::ValueReplacer replacer;
  replacer.Replace(neg, exp1);
  replacer.Replace(exp1, exp0);
  EXPECT_EQ(replacer.Resolve(neg), exp0);
  EXPECT_TRUE(replacer.ApplyTo(*nodes[3]));  // add %0, %1 -> add %0, %0
  EXPECT_EQ(nodes[3]->inputs()[1], exp0);
  EXPECT_FALSE(replacer.ApplyTo(*nodes[3]));
  EXPECT_FALSE(replacer.ApplyToReturns(*graph));  // returns %3: unaffected
}

TEST(PassManagerTest, PipelineOptionsParseAndPrintBack) {
  auto pipeline = ParsePipelineText(
      " cse , grad-scaler{ growth_interval=7  init_scale=1024.5 },dce");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_EQ(pipeline->entries.size(), 3u);
  const PassOptions& o = pipeline->entries[1].options;
  EXPECT_EQ(pipeline->entries[1].pass->name, "grad-scaler");
  EXPECT_EQ(o.Int("growth_interval"), 7);
  EXPECT_EQ(o.Double("init_scale"), 1024.5);
  EXPECT_EQ(o.Double("growth_factor"), 2.0);  // the declared defaults
  EXPECT_EQ(o.Double("backoff_factor"), 0.5);
  // Printed in declaration order, only what the text set.
  const std::string printed = pipeline->ToString();
  EXPECT_EQ(printed,
            "cse,grad-scaler{init_scale=1024.5 growth_interval=7},dce");
  auto again = ParsePipelineText(printed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToString(), printed);
  // Empty braces are no options.
  EXPECT_EQ(ParsePipelineText("grad-scaler{},cse{ }")->ToString(),
            "grad-scaler,cse");
}

TEST(PassManagerTest, GradScalerConfigRoundTripsThroughPipelineText) {
  const GradScalerPassConfig config{.init_scale = 0.1,
                                    .growth_factor = 1.0000001,
                                    .backoff_factor = 1.0 / 3.0,
                                    .growth_interval = 123456789};
  const std::string entry = config.PipelineEntry();
  auto pipeline = ParsePipelineText(entry);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const GradScalerPassConfig back =
      GradScalerPassConfig::From(pipeline->entries[0].options);
  EXPECT_EQ(back.init_scale, config.init_scale);  // exact doubles
  EXPECT_EQ(back.growth_factor, config.growth_factor);
  EXPECT_EQ(back.backoff_factor, config.backoff_factor);
  EXPECT_EQ(back.growth_interval, config.growth_interval);
  EXPECT_EQ(pipeline->ToString(), entry);
}

TEST(PassManagerTest, BadPipelineOptionsAreRefusedWithTheirMessages) {
  auto message = [](absl::string_view text) {
    auto pipeline = ParsePipelineText(text);
    EXPECT_FALSE(pipeline.ok()) << text;
    EXPECT_EQ(pipeline.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(pipeline.status().message());
  };
  EXPECT_EQ(
      message("grad-scaler{growth_intervl=7}"),
      "pass `grad-scaler`: unknown option 'growth_intervl'; options: "
      "init_scale, growth_factor, backoff_factor, growth_interval, world_size");
  EXPECT_EQ(message("grad-scaler{growth_interval=7.5}"),
            "pass `grad-scaler`: option 'growth_interval' expects an integer, "
            "got '7.5'");
  EXPECT_EQ(message("grad-scaler{init_scale=big}"),
            "pass `grad-scaler`: option 'init_scale' expects a number, got "
            "'big'");
  EXPECT_EQ(message("grad-scaler{init_scale=inf}"),
            "pass `grad-scaler`: option 'init_scale' expects a number, got "
            "'inf'");
  EXPECT_EQ(message("grad-scaler{growth_interval}"),
            "pass `grad-scaler`: expected name=value, got 'growth_interval'; "
            "options: init_scale, growth_factor, backoff_factor, "
            "growth_interval, world_size");
  EXPECT_EQ(message("grad-scaler{growth_interval=1 growth_interval=2}"),
            "pass `grad-scaler`: option 'growth_interval' given twice");
  EXPECT_EQ(message("cse,grad-scaler{growth_interval=7"),
            "pass `grad-scaler`: unbalanced braces: no '}' closes its '{' in "
            "pipeline 'cse,grad-scaler{growth_interval=7'");
  EXPECT_EQ(message("cse},dce"),
            "unbalanced braces: a '}' after `cse` in pipeline 'cse},dce' "
            "closes no '{'");
  EXPECT_EQ(
      message("grad-scaler{a={b=1}}"),
      "pass `grad-scaler`: nested '{' in pipeline 'grad-scaler{a={b=1}}'; "
      "expected name=value options between one pair of braces");
  EXPECT_EQ(message("grad-scaler{growth_interval=7}x"),
            "unexpected text after '}' in pipeline entry "
            "'grad-scaler{growth_interval=7}x'; expected ',' before the next "
            "pass");
  EXPECT_EQ(message("dce{aggressive=true}"),
            "pass `dce` takes no options, got {aggressive=true}");
  EXPECT_TRUE(absl::StartsWith(message("frob{x=1}"),
                               "unknown pass 'frob'; known passes: verify, "))
      << message("frob{x=1}");
  // Values the scaler refuses fail when the pass runs, naming it.
  auto graph = Parse();
  absl::Status status = RunPipeline(*graph, "grad-scaler{backoff_factor=1}",
                                    PipelineOptions(), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "pass `grad-scaler`: option 'backoff_factor' = 1: expected in "
            "(0, 1)");
}

TEST(PassManagerTest, PassesDeclareTheStateTheyAdd) {
  auto pipeline =
      ParsePipelineText("cse,grad-scaler{init_scale=256},memory-plan");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const std::vector<StateParam> state = PipelineState(*pipeline);
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].name, kAmpScaleParam);
  EXPECT_EQ(state[0].initial, 256.0);
  EXPECT_EQ(state[1].name, kAmpGrowthParam);
  EXPECT_EQ(state[1].initial, 0.0);
  EXPECT_EQ(state[2].name, kAmpSkippedParam);
  for (const StateParam& p : state) {
    EXPECT_EQ(p.type.dtype, ir::DType::kF32) << p.name;
    EXPECT_TRUE(p.type.shape.empty()) << p.name;
  }
  EXPECT_TRUE(PipelineState(*ParsePipelineText("cse,dce")).empty());
  // The options are listed with their types and defaults.
  const std::string described = DescribeOptions(*FindPass("grad-scaler"));
  EXPECT_NE(described.find("growth_interval=<int> (default 2000): "),
            std::string::npos)
      << described;
  EXPECT_TRUE(DescribeOptions(*FindPass("cse")).empty());
}

TEST(PassManagerTest, CudaPipelineKeepsOptionsWhenItAddsGemmBgrad) {
  EXPECT_EQ(PipelineForTarget("grad-scaler{growth_interval=5},fuse,dce",
                              Target::kCuda),
            "grad-scaler{growth_interval=5},fuse,gemm-bgrad,dce");
  EXPECT_EQ(
      PipelineForTarget("grad-scaler{growth_interval=5},fuse", Target::kCpu),
      "grad-scaler{growth_interval=5},fuse");
}

TEST(PassManagerTest, StatisticsAreReadByTheKeysPassesDeclare) {
  auto graph = Parse();
  PipelineStats stats;
  ASSERT_TRUE(
      RunPipeline(*graph, "cse,memory-plan", PipelineOptions(), &stats).ok());
  const int64_t peak = stats.Get(kPlannedPeakBytes);
  EXPECT_GT(peak, 0);
  EXPECT_EQ(peak, stats.Find("memory-plan")->Get("planned peak bytes"));
  EXPECT_EQ(stats.Get(kGradientsUnscaled), 0);  // the pass did not run
  EXPECT_NE(stats.ToString().find("planned peak bytes=" + std::to_string(peak)),
            std::string::npos)
      << stats.ToString();
}
}  // namespace
}  // namespace stepjit::passes
