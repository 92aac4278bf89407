// Dimension coalescing of region bodies (codegen/coalesce.h): which dims
// merge, what stays as it is, and that the kernel lowered from a coalesced
// body computes what the original body computes op by op through the eager
// kernels (sums in f64 either way: within 4 ulps of the result's scale).
#include "codegen/coalesce.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "gtest/gtest.h"
#include "ir/printer.h"
#include "program/cpu/cpu_backend.h"
#include "tests/util/row_cases.h"

namespace stepjit::codegen {
namespace {

using ir::DType;

std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? *std::move(g) : nullptr;
}

std::vector<ir::Shape> ParamShapes(const ir::Graph& g) {
  std::vector<ir::Shape> out;
  for (const ir::Value* p : g.params()) out.push_back(p->type().shape);
  return out;
}

// Batch norm's backward over NCHW: channel sums over N, H and W (kept and
// not kept), a reshape of one to [C], the running-statistics update of a
// [C] state, and full-size work reading [1, C, 1, 1] and [C, 1, 1] values.
constexpr char kBatchNorm[] = R"(
graph @bn(%g: f32[4,6,5,7] input, %x: f32[4,6,5,7] input, %m: f32[1,6,1,1] input, %s: f32[6,1,1] input, %run: f32[6] input) {
  %0 = full {shape = [], value = 0.0, dtype = f32} : f32[]
  %1 = gt %x, %0 : bool[4,6,5,7]
  %2 = where %1, %g, %0 : f32[4,6,5,7]
  %3 = sum %2 {dims = [0, 2, 3], keepdim = true} : f32[1,6,1,1]
  %4 = sub %x, %m : f32[4,6,5,7]
  %5 = mul %2, %4 : f32[4,6,5,7]
  %6 = sum %5 {dims = [0, 2, 3], keepdim = false} : f32[6]
  %7 = mul %2, %s : f32[4,6,5,7]
  %8 = reshape %3 {shape = [6]} : f32[6]
  %9 = full {shape = [], value = 0.1, dtype = f32} : f32[]
  %10 = lerp_ %run, %8, %9 {in_place = true} : f32[6]
  return %3, %6, %7, %8, %10
})";

TEST(CoalesceTest, MergesTheDimsEveryValueTreatsAlike) {
  auto g = Parse(kBatchNorm);
  ASSERT_NE(g, nullptr);
  std::unique_ptr<ir::Graph> c = CoalesceDims(*g);
  ASSERT_NE(c, nullptr);
  // H and W merge; N and C stay apart (the [1, 6, 1, 1] values differ
  // there); the [6] state keeps its shape.
  EXPECT_EQ(ParamShapes(*c),
            (std::vector<ir::Shape>{
                {4, 6, 35}, {4, 6, 35}, {1, 6, 1}, {1, 6, 1}, {6}}))
      << ir::Print(*c);
  const std::string text = ir::Print(*c);
  EXPECT_NE(text.find("sum %2 {dims = [0, 2], keepdim = true} : f32[1,6,1]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("{dims = [0, 2], keepdim = false} : f32[6]"),
            std::string::npos)
      << text;
}

TEST(CoalesceTest, LeavesBodiesItCannotRewriteAlone) {
  for (const char* text :
       {// a [7] operand broadcast along W only: nothing merges
        R"(graph @a(%p0: f32[3,5,7] input, %p1: f32[5,1] input) {
  %0 = add %p0, %p1 : f32[3,5,7]
  return %0
})",
        // a row op
        R"(graph @b(%p0: f32[4,8,3] input) {
  %0 = softmax %p0 {dim = -1} : f32[4,8,3]
  return %0
})",
        // an un-kept reduced value used inside, in merged dims
        R"(graph @c(%p0: f32[2,3,4,5] input, %p1: f32[2,3] input) {
  %0 = sum %p0 {dims = [2, 3], keepdim = false} : f32[2,3]
  %1 = add %0, %p1 : f32[2,3]
  return %1
})"}) {
    auto g = Parse(text);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(CoalesceDims(*g), nullptr) << text;
  }
}

// The kernels: coalesced bodies (BN backward, an elementwise chain with a
// trailing-dim broadcast, a full reduction, a bf16 body) give what the
// original bodies give op by op.
TEST(CoalesceTest, KernelsOfCoalescedBodiesMatchTheOriginalOpByOp) {
  const std::vector<std::string> bodies = {
      kBatchNorm,
      R"(graph @chain(%p0: f32[3,4,9,2] input, %p1: f32[9,2] input, %p2: f32[3,1,1,1] input) {
  %0 = add %p0, %p1 : f32[3,4,9,2]
  %1 = mul %0, %p2 : f32[3,4,9,2]
  %2 = tanh %1 : f32[3,4,9,2]
  return %2
})",
      R"(graph @total(%p0: f32[5,3,8,8] input) {
  %0 = mul %p0, %p0 : f32[5,3,8,8]
  %1 = sum %0 {dims = [], keepdim = false} : f32[]
  %2 = amax %p0 {dims = [0, 1, 2, 3], keepdim = true} : f32[1,1,1,1]
  return %1, %2
})",
      R"(graph @half(%p0: bf16[2,16,6,6] input, %p1: bf16[1,16,1,1] input) {
  %0 = mul %p0, %p1 : bf16[2,16,6,6]
  %1 = relu %0 : bf16[2,16,6,6]
  %2 = mean %1 {dims = [0, 2, 3], keepdim = true} : bf16[1,16,1,1]
  return %1, %2
})"};
  for (const std::string& text : bodies) {
    auto g = Parse(text);
    ASSERT_NE(g, nullptr);
    ASSERT_NE(CoalesceDims(*g), nullptr) << text;
    absl::StatusOr<cpu::RegionKernel> k =
        cpu::CompileRegion(*g, {.use_cache = false});
    ASSERT_TRUE(k.ok()) << k.status() << "\n" << text;
    std::vector<Tensor> args;
    uint64_t seed = 1;
    for (const ir::Value* p : g->params()) {
      Generator gen(++seed);
      args.push_back(randn(p->type().shape, {}, &gen).to(p->type().dtype));
    }
    // (lerp_ updates its state in place: each run gets its own copy.)
    std::vector<Tensor> args2;
    for (const Tensor& a : args) args2.push_back(a.clone());
    const std::vector<Tensor> got = test::rows::RunCpuKernel(*k, *g, args);
    const std::vector<Tensor> want = test::rows::Interpret(*g, args2);
    ASSERT_EQ(got.size(), want.size());
    for (size_t r = 0; r < got.size(); ++r) {
      const bool half = want[r].dtype() == DType::kBF16;
      test::rows::ExpectClose(got[r], want[r], half ? 1 : 4, 1.0,
                              absl::StrCat(g->name(), " result ", r));
    }
  }
}

}  // namespace
}  // namespace stepjit::codegen
