// A third region backend installed through the registry
// (program/region_backend.h): a wrapper around the CPU backend that
// counts what Program asks of it, declines a region or groups two, and
// shows that Program compiles, launches, groups, checks and profiles
// regions through it with no executor change.
//
// References: the plain CPU backend's program (the wrapper runs the same
// kernels, so outputs and state must agree bit for bit) and an interpreted
// program (codegen = false, the eager kernels), within DefaultTolerance
// (program/region_check.h) where a region runs interpreted instead.
#include "program/region_backend.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/status.h"
#include "program/cpu/cpu_backend.h"
#include "program/executor.h"
#include "program/region_check.h"
#include "runtime/profiler.h"
#include "tests/program/region_check_step.h"

namespace stepjit::runtime {
namespace {

using test::BuildProgram;
using test::ExpectSame;
using test::kStep;
using test::ParseVerified;
using test::Start;

struct Counts {
  int compiled = 0, declined = 0, finished = 0;
  int launches = 0, group_launches = 0;
  int runs = 0, uncaptured_runs = 0;
};

class CountingRegion final : public CompiledRegion {
 public:
  CountingRegion(std::unique_ptr<CompiledRegion> inner, Counts* counts)
      : inner_(std::move(inner)), counts_(counts) {}
  std::optional<std::vector<Tensor>> Launch(const ir::Graph& body,
                                            std::vector<Tensor>& in) override {
    ++counts_->launches;
    return inner_->Launch(body, in);
  }
  std::string label() const override {
    return absl::StrCat("counted:", inner_->label());
  }
  CompiledRegion& inner() { return *inner_; }

 private:
  std::unique_ptr<CompiledRegion> inner_;
  Counts* counts_;
};

// The CPU backend with counters. `decline`: a region it reports it does not
// lower; `group`: two consecutive regions it launches together (one after
// the other, as one launch).
struct CountingOptions {
  std::string decline;
  std::vector<std::string> group;
};

class CountingBackend final : public RegionBackend {
 public:
  CountingBackend(std::unique_ptr<RegionBackend> inner, Counts* counts,
                  CountingOptions options)
      : inner_(std::move(inner)),
        counts_(counts),
        options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<CompiledRegion>> Compile(
      const RegionToCompile& region) override {
    const std::string& name = region.node->body()->name();
    if (name == options_.decline) {
      ++counts_->declined;
      return absl::UnimplementedError("declined by the counting backend");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<CompiledRegion> r,
                     inner_->Compile(region));
    ++counts_->compiled;
    auto counted = std::make_unique<CountingRegion>(std::move(r), counts_);
    by_name_[name] = {region.node, counted.get()};
    return counted;
  }

  void FinishBuild() override {
    ++counts_->finished;
    inner_->FinishBuild();
    stats_ = inner_->stats();
    for (const std::string& name : options_.group) {
      auto it = by_name_.find(name);
      if (it == by_name_.end()) return;
      group_.push_back(it->second.first);
      members_.push_back(it->second.second);
    }
    if (group_.empty()) return;
    stats_.region_groups = 1;
    stats_.grouped_regions = static_cast<int>(group_.size());
  }

  std::vector<Tensor> Run(absl::Span<const Tensor> inputs,
                          absl::Span<const Tensor> state,
                          const ReplayLoop& loop) override {
    ++counts_->runs;
    return inner_->Run(inputs, state, loop);
  }
  std::vector<Tensor> RunUncaptured(absl::Span<const Tensor> inputs,
                                    absl::Span<const Tensor> state,
                                    const ReplayLoop& loop) override {
    ++counts_->uncaptured_runs;
    return inner_->RunUncaptured(inputs, state, loop);
  }

  absl::Span<const ir::Node* const> GroupStartingAt(
      const ir::Node& first) const override {
    if (group_.empty() || group_.front() != &first) return {};
    return group_;
  }
  std::optional<std::vector<std::vector<Tensor>>> LaunchGroup(
      const ir::Node& first, std::vector<std::vector<Tensor>>& ins) override {
    ++counts_->group_launches;
    std::vector<std::vector<Tensor>> outs;
    for (size_t m = 0; m < group_.size(); ++m) {
      std::optional<std::vector<Tensor>> out =
          members_[m]->inner().Launch(*group_[m]->body(), ins[m]);
      if (!out) return std::nullopt;
      outs.push_back(*std::move(out));
    }
    return outs;
  }

 private:
  std::unique_ptr<RegionBackend> inner_;
  Counts* counts_;
  CountingOptions options_;
  absl::flat_hash_map<std::string, std::pair<const ir::Node*, CountingRegion*>>
      by_name_;
  std::vector<const ir::Node*> group_;
  std::vector<CountingRegion*> members_;
};

// Installs the counting backend for CPU programs while alive.
class ScopedCountingBackend {
 public:
  explicit ScopedCountingBackend(CountingOptions options = {})
      : scope_(DeviceType::kCPU,
               [this, options](const ir::Graph& graph,
                               const ProgramOptions& program_options)
                   -> absl::StatusOr<std::unique_ptr<RegionBackend>> {
                 ASSIGN_OR_RETURN(
                     std::unique_ptr<RegionBackend> cpu,
                     cpu::MakeCpuRegionBackend(graph, program_options));
                 return std::make_unique<CountingBackend>(std::move(cpu),
                                                          &counts, options);
               }) {}
  Counts counts;

 private:
  ScopedRegionBackend scope_;
};

// Within DefaultTolerance.
void ExpectClose(const std::vector<Tensor>& got,
                 const std::vector<Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const TensorDiff d = CompareTensors(got[i], want[i]);
    EXPECT_TRUE(d.ok()) << what << " " << i << ": "
                        << ToString(d, want[i].shape());
  }
}

// Two runs of `p` from `start`: the second run's outputs and the state after.
struct TwoRuns {
  std::vector<Tensor> out, state;
};
TwoRuns RunTwice(const Program& p, const Start& start) {
  TwoRuns r{{}, start.StateCopy()};
  p.Run(start.inputs, r.state);
  r.out = p.Run(start.inputs, r.state);
  return r;
}

TEST(RegionBackendTest, ProgramCompilesAndLaunchesRegionsThroughTheRegistry) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  const Start start(3);
  ScopedCountingBackend counting;
  TwoRuns got;
  int kernels = 0;
  {
    const Program p = BuildProgram(*g);
    EXPECT_EQ(counting.counts.compiled, 3);
    EXPECT_EQ(counting.counts.finished, 1);
    EXPECT_EQ(p.compiled_regions(), 3);
    kernels = p.kernels_per_run();
    got = RunTwice(p, start);
    EXPECT_EQ(counting.counts.runs, 2);
    EXPECT_EQ(counting.counts.launches, 6);  // 3 regions, 2 runs
  }
  // A program without codegen still gets its backend, which compiles
  // nothing: every region runs interpreted.
  const Program interpreted = BuildProgram(*g, /*codegen=*/false);
  EXPECT_EQ(interpreted.compiled_regions(), 0);
  EXPECT_EQ(counting.counts.compiled, 3);
  const TwoRuns eager = RunTwice(interpreted, start);
  ExpectClose(got.out, eager.out, "output against interpreted");
  ExpectClose(got.state, eager.state, "state against interpreted");

  // The same kernels as the CPU backend's own, so the same bits.
  ScopedRegionBackend plain(DeviceType::kCPU, cpu::MakeCpuRegionBackend);
  const Program cpu = BuildProgram(*g);
  EXPECT_EQ(cpu.kernels_per_run(), kernels);
  const TwoRuns want = RunTwice(cpu, start);
  ExpectSame(got.out, want.out, "output");
  ExpectSame(got.state, want.state, "state");
  EXPECT_EQ(counting.counts.launches, 6);  // the plain program did not count
}

TEST(RegionBackendTest, DeclinedRegionRunsInterpretedAndProfilesSayWho) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  const Start start(4);
  ScopedCountingBackend counting({.decline = "post", .group = {}});
  const Program p = BuildProgram(*g);
  EXPECT_EQ(counting.counts.declined, 1);
  EXPECT_EQ(p.compiled_regions(), 2);
  const bool was_profiling = ProfilingEnabled();
  EnableProfiling(true);
  ResetProfile();
  const TwoRuns got = RunTwice(p, start);
  const std::vector<ProfileEntry> profile = ProfileSnapshot();
  EnableProfiling(was_profiling);
  ResetProfile();
  EXPECT_EQ(counting.counts.launches, 4);  // chain and adamw, 2 runs
  int counted = 0, interpreted = 0;
  for (const ProfileEntry& e : profile) {
    if (absl::StartsWith(e.label, "counted:")) counted += e.calls;
    if (absl::StartsWith(e.label, "post(interpreted)")) interpreted += e.calls;
  }
  EXPECT_EQ(counted, 4);
  EXPECT_EQ(interpreted, 2);
  const TwoRuns want = RunTwice(BuildProgram(*g, /*codegen=*/false), start);
  ExpectClose(got.out, want.out, "output");
  ExpectClose(got.state, want.state, "state");
}

TEST(RegionBackendTest, GroupLaunchAndCheckedRunGoThroughTheBackend) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  const Start start(5);
  TwoRuns want;
  int plain_kernels = 0;
  {
    const Program cpu = BuildProgram(*g);
    plain_kernels = cpu.kernels_per_run();
    want = RunTwice(cpu, start);
  }
  // post and adamw are consecutive and independent.
  ScopedCountingBackend counting({.decline = "", .group = {"post", "adamw"}});
  const Program p = BuildProgram(*g);
  EXPECT_EQ(p.cuda_region_groups(), 1);
  EXPECT_EQ(p.cuda_grouped_regions(), 2);
  EXPECT_EQ(p.kernels_per_run(), plain_kernels - 1);
  const TwoRuns got = RunTwice(p, start);
  EXPECT_EQ(counting.counts.group_launches, 2);
  EXPECT_EQ(counting.counts.launches, 2);  // chain alone, 2 runs
  ExpectSame(got.out, want.out, "output");
  ExpectSame(got.state, want.state, "state");

  // RunChecked: the backend's uncaptured run, the group launched once, and
  // each member checked against its interpretation.
  std::vector<Tensor> state = start.StateCopy();
  std::vector<RegionMismatch> mismatches = {RegionMismatch{}};
  p.RunChecked(start.inputs, state, &mismatches);
  EXPECT_TRUE(mismatches.empty()) << ToString(mismatches.front());
  EXPECT_EQ(counting.counts.uncaptured_runs, 1);
  EXPECT_EQ(counting.counts.runs, 2);
  EXPECT_EQ(counting.counts.group_launches, 3);
}

TEST(RegionBackendTest, DeviceWithoutBackendFailsTheBuildWithItsName) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  ScopedRegionBackend none(DeviceType::kCPU, nullptr);
  absl::StatusOr<Program> p = Program::Build(*g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(p.status().message(),
            "no region backend is registered for device cpu");
}

}  // namespace
}  // namespace stepjit::runtime
