// Multi-region kernels (codegen/cuda/multi_region.h): several independent
// regions' kernels as one launch per phase. The golden regions (scalar
// work, vectorized elementwise code, row and column reductions) run as one
// group on the host emulation of CUDA and must give the bytes each region's
// own kernels give; the module compiles with NVRTC for sm_80 and sm_90; and
// the grouping rules of program/cuda/region_groups.h are checked on IR.
#include "codegen/cuda/multi_region.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/nvrtc.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/cuda/region_groups.h"
#include "runtime/ops.h"
#include "testing/cuda_emulator/host_emulation.h"
#include "tests/codegen/cuda_test_util.h"

namespace stepjit::codegen::cuda {
namespace {

using ir::DType;

constexpr int kBlock = 64;

using test::Bind;
using test::Bound;
using test::Launch;
using test::SameBytes;

// The golden regions, and column reductions over many rows (a thread per
// output) beside their row reductions.
std::vector<std::unique_ptr<ir::Graph>> Bodies() {
  std::vector<std::string> texts = test::GoldenTexts(/*skip_huge=*/true);
  texts.push_back(test::kColumnsRegion);
  std::vector<std::unique_ptr<ir::Graph>> out;
  for (const std::string& t : texts) {
    absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(t);
    EXPECT_TRUE(g.ok()) << g.status() << "\n" << t;
    if (g.ok()) out.push_back(*std::move(g));
  }
  return out;
}

Tensor RandomInput(const ir::TensorType& t, Generator& gen) {
  if (t.dtype == DType::kBool) return gt(randn(t.shape, {}, &gen), scalar_tensor(0.0));
  // 0-d operands are step counts and scales: keep them positive.
  Tensor x = t.shape.empty() ? rand(t.shape, {}, &gen) + 1.5
                                      : randn(t.shape, {}, &gen) * 2.0;
  return x.to(t.dtype);
}

TEST(MultiRegionTest, EmulatedGroupMatchesEachRegionRunAlone) {
  if (HostCompiler().empty()) GTEST_SKIP() << "no host C++ compiler to build the emulation";
  std::vector<std::unique_ptr<ir::Graph>> bodies = Bodies();
  ASSERT_GE(bodies.size(), 5u);
  std::vector<const ir::Graph*> views;
  std::vector<RegionSource> alone;
  std::vector<std::string> alone_kernels;
  for (const auto& b : bodies) {
    views.push_back(b.get());
    absl::StatusOr<RegionSource> r = EmitRegion(*b, {.block = kBlock});
    ASSERT_TRUE(r.ok()) << r.status();
    for (const KernelLaunch& k : r->kernels) alone_kernels.push_back(k.name);
    alone.push_back(*std::move(r));
  }
  absl::StatusOr<MultiRegionSource> multi = EmitMultiRegion(views, {.block = kBlock});
  ASSERT_TRUE(multi.ok()) << multi.status();
  // One kernel per phase, over every member's blocks of that phase.
  const RegionSource& c = multi->combined;
  ASSERT_EQ(c.kernels.size(), 3u);
  const char* phases[] = {"_scalar", "_main", "_reduced"};
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_TRUE(absl::EndsWith(c.kernels[p].name, phases[p])) << c.kernels[p].name;
    int64_t blocks = 0;
    for (const RegionSource& r : alone) {
      for (const KernelLaunch& k : r.kernels) blocks += absl::EndsWith(k.name, phases[p]) ? k.grid : 0;
    }
    EXPECT_EQ(c.kernels[p].grid, blocks) << phases[p];
  }
  std::vector<const RegionSource*> all;
  for (const RegionSource& r : alone) all.push_back(&r);
  absl::StatusOr<HostModule> alone_module = CompileForHost(CombineSources(all), "alone", alone_kernels);
  ASSERT_TRUE(alone_module.ok()) << alone_module.status();
  std::vector<std::string> multi_kernels;
  for (const KernelLaunch& k : c.kernels) multi_kernels.push_back(k.name);
  absl::StatusOr<HostModule> multi_module = CompileForHost(c.source, c.name, multi_kernels);
  ASSERT_TRUE(multi_module.ok()) << multi_module.status() << "\n" << c.source;

  Generator gen(11);
  std::vector<std::vector<Tensor>> args;
  for (const auto& b : bodies) {
    args.emplace_back();
    for (const ir::Value* p : b->params()) args.back().push_back(RandomInput(p->type(), gen));
  }
  // Each region alone, three blocks at most so its grid-stride loops wrap.
  std::vector<Bound> expect(bodies.size());
  for (size_t m = 0; m < bodies.size(); ++m) {
    std::vector<void*> ptrs;
    Bind(alone[m], *bodies[m], args[m], expect[m], ptrs);
    Launch(*alone_module, alone[m], ptrs, 3);
  }
  // The group with every virtual block its own block, and with three blocks
  // walking all of them.
  for (const int64_t cap : {int64_t{1} << 30, int64_t{3}}) {
    std::vector<Bound> got(bodies.size());
    std::vector<void*> ptrs;
    for (size_t m = 0; m < bodies.size(); ++m) Bind(multi->members[m], *bodies[m], args[m], got[m], ptrs);
    ASSERT_EQ(ptrs.size(), c.params.size());
    Launch(*multi_module, c, ptrs, cap);
    for (size_t m = 0; m < bodies.size(); ++m) {
      for (size_t r = 0; r < got[m].outs.size(); ++r) {
        EXPECT_TRUE(SameBytes(got[m].outs[r], expect[m].outs[r]))
            << bodies[m]->name() << " return " << r << " with grid cap " << cap;
      }
    }
  }
}

TEST(MultiRegionTest, CompilesWithNvrtcForSm80AndSm90) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC: " << NvrtcUnavailableReason();
  std::vector<std::unique_ptr<ir::Graph>> bodies = Bodies();
  std::vector<const ir::Graph*> views;
  for (const auto& b : bodies) views.push_back(b.get());
  absl::StatusOr<MultiRegionSource> multi = EmitMultiRegion(views);
  ASSERT_TRUE(multi.ok()) << multi.status();
  for (const char* arch : {"sm_80", "sm_90"}) {
    absl::StatusOr<CompiledCuda> c =
        CompileCuda(multi->combined.source, multi->combined.name, {.arch = arch, .use_cache = false});
    ASSERT_TRUE(c.ok()) << arch << ": " << c.status();
    EXPECT_TRUE(absl::StartsWith(c->cubin, "\x7f" "ELF")) << arch;
  }
}

TEST(MultiRegionTest, RefusesOneRegionAndTooManyArguments) {
  std::vector<std::unique_ptr<ir::Graph>> bodies = Bodies();
  const ir::Graph* one[] = {bodies[0].get()};
  absl::StatusOr<MultiRegionSource> single = EmitMultiRegion(one);
  EXPECT_TRUE(absl::IsInvalidArgument(single.status()));
  EXPECT_TRUE(absl::StrContains(single.status().message(), "at least 2 regions, got 1"))
      << single.status();
  // 200 copies of a 3-argument region: 4,800 bytes of pointers.
  std::vector<const ir::Graph*> many(200, bodies.back().get());
  absl::StatusOr<MultiRegionSource> big = EmitMultiRegion(many);
  EXPECT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_TRUE(absl::StrContains(big.status().message(), "takes at most 4000")) << big.status();
}

// A region over one f32[8] operand, by name.
std::string Region(const std::string& out, const std::string& name, const std::string& operand) {
  return absl::StrCat("  ", out, " = fusion @", name, "(", operand, ") : (f32[8]) {\n    graph @",
                      name, "(%p0: f32[8] input) {\n      %0 = neg %p0 : f32[8]\n      return %0\n    }\n  }\n");
}

TEST(RegionGroupsTest, RunsEndAtDependenciesOtherNodesAndTheArgumentLimit) {
  const std::string text = absl::StrCat(
      "graph @step(%a: f32[8] input, %b: f32[8] input) {\n", Region("%0", "r0", "%a"),
      Region("%1", "r1", "%b"),
      Region("%2", "r2", "%0#0"),  // reads r0's result: a new run
      Region("%3", "r3", "%b"),
      "  %4 = neg %a : f32[8]\n",  // not a region: ends the run
      Region("%5", "r4", "%a"), Region("%6", "r5", "%b"),
      Region("%7", "r6", "%a"),  // over the byte limit: alone, so left out
      "  return %1#0, %2#0, %3#0, %4, %5#0, %6#0, %7#0\n}\n");
  absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
  absl::flat_hash_map<const ir::Node*, int64_t> bytes;
  for (const auto& n : (*g)->nodes()) {
    if (n->kind() == ir::NodeKind::kFusion) bytes[n.get()] = 16;
  }
  const std::vector<std::vector<const ir::Node*>> runs =
      runtime::cuda::IndependentRegionRuns(**g, bytes, /*max_arg_bytes=*/40);
  std::vector<std::string> got;
  for (const auto& run : runs) {
    std::string names;
    for (const ir::Node* n : run) absl::StrAppend(&names, names.empty() ? "" : ",", n->body()->name());
    got.push_back(names);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"r0,r1", "r2,r3", "r4,r5"}));
  // Regions the device did not compile are not grouped.
  bytes.erase((*g)->nodes()[1].get());
  got.clear();
  for (const auto& run : runtime::cuda::IndependentRegionRuns(**g, bytes, 40)) got.push_back(run.front()->body()->name());
  EXPECT_EQ(got, (std::vector<std::string>{"r2", "r4"}));
}

}  // namespace
}  // namespace stepjit::codegen::cuda
