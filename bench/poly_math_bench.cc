// Generated CPU regions that are mostly transcendentals (ir/poly_math.h),
// over 1M f32 elements, against the eager op: exp, log, tanh, erf, GELU,
// GELU with its derivative (a GPT MLP's region: erf twice, exp) and a
// causal softmax over rows of 64 (an attention's region). GB/s counts the
// bytes a kernel must read and write.
//
//   stepjit_benchmarks --benchmark_filter=PolyMath
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "codegen/cpu/region_kernel.h"
#include "ir/parser.h"
#include "program/cpu/cpu_backend.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace stepjit::bench {
namespace {

constexpr int64_t kNumel = 1 << 20;

struct Case {
  const char* name;
  const char* body;  // over f32[{R},64], {R} rows of 64
  int outputs;
};

const Case kCases[] = {
    {"exp", "%0 = exp %p0 : f32[{R},64]\n  return %0", 1},
    {"log", "%0 = log %p0 : f32[{R},64]\n  return %0", 1},
    {"tanh", "%0 = tanh %p0 : f32[{R},64]\n  return %0", 1},
    {"erf", "%0 = erf %p0 : f32[{R},64]\n  return %0", 1},
    {"gelu", "%0 = gelu %p0 : f32[{R},64]\n  return %0", 1},
    {"gelu_fwd_bwd", R"(%0 = gelu %p0 : f32[{R},64]
  %1 = full {shape = [], value = 0.7071067811865476, dtype = f32} : f32[]
  %2 = mul %p0, %1 : f32[{R},64]
  %3 = erf %2 : f32[{R},64]
  %4 = full {shape = [], value = 1.0, dtype = f32} : f32[]
  %5 = add %3, %4 : f32[{R},64]
  %6 = full {shape = [], value = 0.5, dtype = f32} : f32[]
  %7 = mul %5, %6 : f32[{R},64]
  %8 = mul %p0, %p0 : f32[{R},64]
  %9 = full {shape = [], value = -0.5, dtype = f32} : f32[]
  %10 = mul %8, %9 : f32[{R},64]
  %11 = exp %10 : f32[{R},64]
  %12 = full {shape = [], value = 0.3989422804014327, dtype = f32} : f32[]
  %13 = mul %11, %12 : f32[{R},64]
  %14 = mul %p0, %13 : f32[{R},64]
  %15 = add %7, %14 : f32[{R},64]
  return %0, %15)",
     2},
    {"softmax", "%0 = softmax %p0 {dim = -1} : f32[{R},64]\n  return %0", 1},
};

std::string Graph(const Case& c) {
  return absl::StrReplaceAll(
      absl::StrCat("graph @r(%p0: f32[{R},64] input) {\n  ", c.body, "\n}"),
      {{"{R}", absl::StrCat(kNumel / 64)}});
}

void BM_PolyMath(benchmark::State& state, const Case* c, bool generated) {
  Generator gen(1);
  const Tensor x = randn({kNumel / 64, 64}, {}, &gen) * 3.0;
  auto body = ir::ParseGraph(Graph(*c));
  if (!body.ok()) {
    state.SkipWithError(std::string(body.status().message()).c_str());
    return;
  }
  absl::StatusOr<codegen::cpu::RegionKernel> k =
      codegen::cpu::CompileRegion(**body);
  if (!k.ok()) {
    state.SkipWithError(std::string(k.status().message()).c_str());
    return;
  }
  std::vector<Tensor> out;
  std::vector<void*> ptrs = {x.data_ptr()};
  for (int i = 0; i < c->outputs; ++i) {
    out.push_back(empty({kNumel / 64, 64}));
    ptrs.push_back(out.back().data_ptr());
  }
  for (auto _ : state) {
    if (generated) {
      runtime::cpu::RunRegionKernel(*k, ptrs);
    } else {
      // The body op by op through the eager kernels.
      absl::flat_hash_map<const ir::Value*, Tensor> env = {
          {(*body)->params()[0], x}};
      for (const auto& n : (*body)->nodes()) {
        std::vector<Tensor> in;
        for (const ir::Value* v : n->inputs()) in.push_back(env.at(v));
        env[n->output()] = runtime::Dispatch(n->op(), in, n->attrs());
      }
      benchmark::DoNotOptimize(env.at((*body)->returns()[0]).data_ptr());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (1 + c->outputs) * kNumel * 4);
}

int Register() {
  for (const Case& c : kCases) {
    for (bool generated : {true, false}) {
      benchmark::RegisterBenchmark(
          absl::StrCat("PolyMath/", c.name, "_1M/",
                       generated ? "generated" : "eager")
              .c_str(),
          [&c, generated](benchmark::State& s) {
            BM_PolyMath(s, &c, generated);
          })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace stepjit::bench
