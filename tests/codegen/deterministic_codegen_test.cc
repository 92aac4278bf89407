// Code generation is a function of the region body alone: separate processes
// lowering the same graph emit byte-identical LLVM IR and CUDA C and compute
// the same kernel cache keys, so a warm start finds every kernel on disk; and
// CPU regions that differ only in name share one kernel.
// Heap addresses and abseil's per-process hash seed differ between
// processes, so anything emitted in the order of a pointer-keyed container
// shows up here as a difference.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/multi_region.h"
#include "gtest/gtest.h"
#include "ir/parser.h"

namespace stepjit::codegen {
namespace {

// The fused regions of an MLP training step as the fuse pass forms them
// (shapes shrunk): bias + ReLU with a broadcast operand, a bias-gradient
// column sum with a momentum epilogue, row reductions with an epilogue, a
// bf16 unscale with a found-inf amax, and three AdamW updates whose scalar
// prologues (step count, bias corrections) feed the loops through scratch
// slots.
constexpr char kStep[] = R"(
graph @train_step(%x: f32[8,16] input, %b: f32[16] input, %g: f32[8,16] input, %m: f32[16] state, %logits: f32[8,4] input, %gh: bf16[16,12] input, %inv: f32[] state, %t: f32[] state, %lr: f32[] state, %beta1: f64[] state, %beta2: f64[] state, %w: f32[16,12] state, %m1: f32[16,12] state, %gw: f32[16,12] input, %v1: f32[16,12] state, %bb: f32[16] state, %mb: f32[16] state, %gb: f32[16] input, %vb: f32[16] state, %w2: f32[4,16] state, %m2: f32[4,16] state, %g2: f32[4,16] input, %v2: f32[4,16] state) {
  %0 = fusion @bias_relu(%x, %b) : (f32[8,16], bool[8,16]) {
    graph @bias_relu(%p0: f32[8,16] input, %p1: f32[16] input) {
      %0 = add %p0, %p1 : f32[8,16]
      %1 = relu %0 : f32[8,16]
      %2 = full {shape = [], value = 0.0, dtype = f32} : f32[]
      %3 = gt %1, %2 : bool[8,16]
      return %1, %3
    }
  }
  %1 = fusion @bgrad(%0#1, %g, %m) : (f32[8,16], f32[16], f32[16]) {
    graph @bgrad(%p0: bool[8,16] input, %p1: f32[8,16] input, %p2: f32[16] input) {
      %0 = full {shape = [], value = 0.0, dtype = f32} : f32[]
      %1 = where %p0, %p1, %0 : f32[8,16]
      %2 = sum %1 {dims = [0], keepdim = true} : f32[1,16]
      %3 = reshape %2 {shape = [16]} : f32[16]
      %4 = full {shape = [], value = 0.09999999999999998, dtype = f32} : f32[]
      %5 = lerp_ %p2, %3, %4 {in_place = true} : f32[16]
      return %1, %3, %5
    }
  }
  %2 = fusion @row_stats(%logits) : (f32[8], f32[8]) {
    graph @row_stats(%p0: f32[8,4] input) {
      %0 = amax %p0 {dims = [1], keepdim = false} : f32[8]
      %1 = exp %p0 : f32[8,4]
      %2 = sum %1 {dims = [1], keepdim = false} : f32[8]
      %3 = log %2 : f32[8]
      %4 = mean %p0 {dims = [1], keepdim = false} : f32[8]
      %5 = sub %3, %4 : f32[8]
      return %0, %5
    }
  }
  %3 = fusion @unscale(%gh, %inv) : (f32[16,12], f32[]) {
    graph @unscale(%p0: bf16[16,12] input, %p1: f32[] input) {
      %0 = cast %p0 {dtype = f32} : f32[16,12]
      %1 = mul %0, %p1 : f32[16,12]
      %2 = abs %1 : f32[16,12]
      %3 = amax %2 {dims = [0, 1], keepdim = false} : f32[]
      return %1, %3
    }
  }
  %4 = fusion @adamw(%t, %lr, %beta1, %beta2, %w, %m1, %gw, %v1) : (f32[], f32[], f64[], f64[], f32[16,12], f32[16,12], f32[16,12]) {
    graph @adamw(%p0: f32[] input, %p1: f32[] input, %p2: f64[] input, %p3: f64[] input, %p4: f32[16,12] input, %p5: f32[16,12] input, %p6: f32[16,12] input, %p7: f32[16,12] input) {
      %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
      %1 = add_ %p0, %0 {alpha = 1.0, in_place = true} : f32[]
      %2 = full {shape = [], value = 0.01, dtype = f32} : f32[]
      %3 = mul %p1, %2 : f32[]
      %4 = sub %0, %3 : f32[]
      %5 = pow %p2, %1 : f64[]
      %6 = full {shape = [], value = 1.0, dtype = f64} : f64[]
      %7 = sub %6, %5 : f64[]
      %8 = div %p1, %7 : f64[]
      %9 = pow %p3, %1 : f64[]
      %10 = sub %6, %9 : f64[]
      %11 = sqrt %10 : f64[]
      %12 = mul_ %p4, %4 {in_place = true} : f32[16,12]
      %13 = full {shape = [], value = 0.09999999999999998, dtype = f32} : f32[]
      %14 = lerp_ %p5, %p6, %13 {in_place = true} : f32[16,12]
      %15 = full {shape = [], value = 0.999, dtype = f32} : f32[]
      %16 = mul_ %p7, %15 {in_place = true} : f32[16,12]
      %17 = addcmul_ %16, %p6, %p6 {value = 0.0010000000000000009, in_place = true} : f32[16,12]
      %18 = sqrt %17 : f32[16,12]
      %19 = div %18, %11 : f32[16,12]
      %20 = full {shape = [], value = 1e-08, dtype = f32} : f32[]
      %21 = add %19, %20 : f32[16,12]
      %22 = div %14, %21 : f32[16,12]
      %23 = mul %22, %8 : f32[16,12]
      %24 = add_ %12, %23 {alpha = -1.0, in_place = true} : f32[16,12]
      return %1, %4, %8, %11, %14, %17, %24
    }
  }
  %5 = fusion @adamw_bias(%bb, %4#1, %vb, %gb, %4#3, %mb, %4#2) : (f32[16], f32[16]) {
    graph @adamw_bias(%p0: f32[16] input, %p1: f32[] input, %p2: f32[16] input, %p3: f32[16] input, %p4: f64[] input, %p5: f32[16] input, %p6: f64[] input) {
      %0 = mul_ %p0, %p1 {in_place = true} : f32[16]
      %1 = full {shape = [], value = 0.999, dtype = f32} : f32[]
      %2 = mul_ %p2, %1 {in_place = true} : f32[16]
      %3 = addcmul_ %2, %p3, %p3 {value = 0.0010000000000000009, in_place = true} : f32[16]
      %4 = sqrt %3 : f32[16]
      %5 = div %4, %p4 : f32[16]
      %6 = full {shape = [], value = 1e-08, dtype = f32} : f32[]
      %7 = add %5, %6 : f32[16]
      %8 = div %p5, %7 : f32[16]
      %9 = mul %8, %p6 : f32[16]
      %10 = add_ %0, %9 {alpha = -1.0, in_place = true} : f32[16]
      return %3, %10
    }
  }
  %6 = fusion @adamw_out(%w2, %4#1, %m2, %g2, %v2, %4#3, %4#2) : (f32[4,16], f32[4,16], f32[4,16]) {
    graph @adamw_out(%p0: f32[4,16] input, %p1: f32[] input, %p2: f32[4,16] input, %p3: f32[4,16] input, %p4: f32[4,16] input, %p5: f64[] input, %p6: f64[] input) {
      %0 = mul_ %p0, %p1 {in_place = true} : f32[4,16]
      %1 = full {shape = [], value = 0.09999999999999998, dtype = f32} : f32[]
      %2 = lerp_ %p2, %p3, %1 {in_place = true} : f32[4,16]
      %3 = full {shape = [], value = 0.999, dtype = f32} : f32[]
      %4 = mul_ %p4, %3 {in_place = true} : f32[4,16]
      %5 = addcmul_ %4, %p3, %p3 {value = 0.0010000000000000009, in_place = true} : f32[4,16]
      %6 = sqrt %5 : f32[4,16]
      %7 = div %6, %p5 : f32[4,16]
      %8 = full {shape = [], value = 1e-08, dtype = f32} : f32[]
      %9 = add %7, %8 : f32[4,16]
      %10 = div %2, %9 : f32[4,16]
      %11 = mul %10, %p6 : f32[4,16]
      %12 = add_ %0, %11 {alpha = -1.0, in_place = true} : f32[4,16]
      return %2, %5, %12
    }
  }
  assign %m, %1#2
  assign %t, %4#0
  assign %w, %4#6
  assign %m1, %4#4
  assign %v1, %4#5
  assign %vb, %5#0
  assign %bb, %5#1
  assign %m2, %6#0
  assign %v2, %6#1
  assign %w2, %6#2
  return %0#0, %1#0, %1#1, %2#0, %2#1, %3#0, %3#1
})";

constexpr char kChildOut[] = "STEPJIT_TEST_DETERMINISM_OUT";

// Everything the code generators emit for kStep, region by region: the CPU
// kernel's cache key and LLVM IR as lowered, and the CUDA C of the region and
// of all regions as one multi-region kernel.
std::string EmitAll() {
  absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(kStep);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return "";
  std::string out;
  std::vector<const ir::Graph*> bodies;
  for (const auto& n : (*g)->nodes()) {
    if (n->kind() != ir::NodeKind::kFusion) continue;
    const ir::Graph& body = *n->body();
    bodies.push_back(&body);
    absl::StatusOr<cpu::RegionKernel> k = cpu::CompileRegion(body);
    EXPECT_TRUE(k.ok()) << body.name() << ": " << k.status();
    absl::StatusOr<cuda::RegionSource> c = cuda::EmitRegion(body);
    EXPECT_TRUE(c.ok()) << body.name() << ": " << c.status();
    if (!k.ok() || !c.ok()) return "";
    absl::StrAppend(&out, "=== cpu ", body.name(), "\nkey ", k->cache_key, "\n",
                    k->llvm_ir_raw, "=== cuda ", body.name(), "\n", c->source);
  }
  absl::StatusOr<cuda::MultiRegionSource> multi =
      cuda::EmitMultiRegion(bodies, {});
  EXPECT_TRUE(multi.ok()) << multi.status();
  if (multi.ok())
    absl::StrAppend(&out, "=== multi-region\n", multi->combined.source);
  return out;
}

// Child half of SameIrAndKeysInEveryProcess: writes EmitAll() to the file
// named by $STEPJIT_TEST_DETERMINISM_OUT.
TEST(DeterministicCodegenChild, Emit) {
  const char* out = std::getenv(kChildOut);
  if (out == nullptr)
    GTEST_SKIP() << "runs only as the child of SameIrAndKeysInEveryProcess";
  const std::string text = EmitAll();
  ASSERT_FALSE(text.empty());
  std::ofstream(out, std::ios::binary) << text;
}

// The "=== " sections of EmitAll's text, in order.
std::vector<std::pair<std::string, std::string>> Sections(
    const std::string& text) {
  std::vector<std::pair<std::string, std::string>> sections;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "=== ")) {
      sections.emplace_back(line, "");
    } else if (!sections.empty()) {
      absl::StrAppend(&sections.back().second, line, "\n");
    }
  }
  return sections;
}

// The sections of `b` that differ from `a`, each with its first differing
// line; empty when they agree.
std::string Differences(const std::string& a, const std::string& b) {
  const auto sa = Sections(a), sb = Sections(b);
  if (sa.size() != sb.size()) return "a different number of sections";
  std::string out;
  for (size_t s = 0; s < sa.size(); ++s) {
    if (sa[s] == sb[s]) continue;
    std::vector<std::string> la = absl::StrSplit(sa[s].second, '\n');
    std::vector<std::string> lb = absl::StrSplit(sb[s].second, '\n');
    size_t i = 0;
    while (i < la.size() && i < lb.size() && la[i] == lb[i]) ++i;
    absl::StrAppend(&out, "\n[", sa[s].first, "] line ", i + 1, ": ",
                    i < la.size() ? la[i] : "<end>", "  vs  ",
                    i < lb.size() ? lb[i] : "<end>");
  }
  return out;
}

TEST(DeterministicCodegenTest, SameIrAndKeysInEveryProcess) {
  constexpr int kProcesses = 3;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("stepjit_determinism_", getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::string> outputs;
  for (int p = 0; p < kProcesses; ++p) {
    const std::string file = (dir / absl::StrCat("child", p, ".txt")).string();
    // Memory-only cache: every child lowers and compiles from scratch.
    const std::string cmd = absl::StrCat(
        "STEPJIT_CACHE_DIR=off ", kChildOut, "='", file, "' /proc/", getpid(),
        "/exe --gtest_filter=DeterministicCodegenChild.* >/dev/null 2>&1");
    const int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
    std::ifstream in(file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    outputs.push_back(text.str());
  }
  std::filesystem::remove_all(dir);
  ASSERT_NE(outputs[0].find("=== cpu adamw\nkey "), std::string::npos)
      << outputs[0];
  ASSERT_NE(outputs[0].find("=== multi-region"), std::string::npos);
  for (int p = 1; p < kProcesses; ++p) {
    EXPECT_TRUE(outputs[p] == outputs[0])
        << "process " << p << " emitted different code than process 0:"
        << Differences(outputs[0], outputs[p]);
  }
}

// The fuse pass numbers regions; two layers' bias gradients are the same
// body under different numbers, and compile once.
TEST(DeterministicCodegenTest, RegionsDifferingOnlyInNameShareAKernel) {
  constexpr char kBody[] = R"(
graph @NAME(%p0: bool[8,16] input, %p1: f32[8,16] input, %p2: f32[16] input) {
  %0 = full {shape = [], value = 0.0, dtype = f32} : f32[]
  %1 = where %p0, %p1, %0 : f32[8,16]
  %2 = sum %1 {dims = [0], keepdim = true} : f32[1,16]
  %3 = reshape %2 {shape = [16]} : f32[16]
  %4 = full {shape = [], value = 0.25, dtype = f32} : f32[]
  %5 = lerp_ %p2, %3, %4 {in_place = true} : f32[16]
  return %1, %3, %5
})";
  std::vector<cpu::RegionKernel> kernels;
  for (const char* name : {"fused_5", "fused_8"}) {
    std::string text = kBody;
    text.replace(text.find("NAME"), 4, name);
    absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<cpu::RegionKernel> k = cpu::CompileRegion(**g);
    ASSERT_TRUE(k.ok()) << k.status();
    kernels.push_back(*std::move(k));
  }
  EXPECT_EQ(kernels[0].cache_key, kernels[1].cache_key);
  EXPECT_EQ(kernels[0].llvm_ir_raw, kernels[1].llvm_ir_raw);
  EXPECT_TRUE(kernels[1].cache_hit);
  EXPECT_EQ(kernels[0].main, kernels[1].main);
  // Dumps and profiles still tell the regions apart.
  EXPECT_EQ(kernels[0].name.rfind("fused_5_", 0), 0u) << kernels[0].name;
  EXPECT_EQ(kernels[1].name.rfind("fused_8_", 0), 0u) << kernels[1].name;
}

}  // namespace
}  // namespace stepjit::codegen
