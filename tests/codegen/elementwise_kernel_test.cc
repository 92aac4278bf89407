// Generated elementwise kernels (LLVM ORC) against the eager kernels, op by op.
#include <cstring>
#include <vector>

#include "codegen/cpu/elementwise_kernel.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace stepjit::codegen::cpu {
namespace {

using ir::OpId;

// Region body `op(p0[, p1])` over n f32 elements; p1 may be 0-d.
std::unique_ptr<ir::Graph> Body(OpId op, int arity, int64_t n, bool scalar_b, ir::DType out) {
  auto g = std::make_unique<ir::Graph>("body");
  std::vector<ir::Value*> in = {g->AddParam("p0", {ir::DType::kF32, {n}}, ir::ParamKind::kInput)};
  if (arity == 2) {
    in.push_back(g->AddParam("p1", {ir::DType::kF32, scalar_b ? ir::Shape{} : ir::Shape{n}},
                             ir::ParamKind::kInput));
  }
  ir::Node* node = g->AddOp(op, in, {}, {out, {n}});
  g->SetReturns({node->output()});
  return g;
}

// The generated kernel must give the eager result bit for bit: both
// evaluate the same scalar definition in f32 with the same libm calls.
TEST(ElementwiseKernelTest, EveryUnaryAndBinaryOpMatchesEager) {
  const std::vector<OpId> unary = {OpId::kNeg, OpId::kAbs, OpId::kSign, OpId::kExp, OpId::kLog,
                                   OpId::kSqrt, OpId::kRsqrt, OpId::kReciprocal, OpId::kTanh,
                                   OpId::kErf, OpId::kSigmoid, OpId::kRelu, OpId::kGelu,
                                   OpId::kGeluTanh, OpId::kSin, OpId::kCos};
  const std::vector<OpId> binary = {OpId::kAdd, OpId::kSub, OpId::kMul, OpId::kDiv,
                                    OpId::kPow, OpId::kMaximum, OpId::kMinimum};
  const std::vector<OpId> compare = {OpId::kEq, OpId::kNe, OpId::kLt,
                                     OpId::kLe, OpId::kGt, OpId::kGe};
  for (int64_t n : {1, 7, 1025}) {
    Generator gen(static_cast<uint64_t>(n));
    Tensor a = randn({n}, {}, &gen) * 2.0, b = rand({n}, {}, &gen) + 0.5;
    Tensor b0 = scalar_tensor(1.25);
    auto check = [&](OpId op, int arity, bool scalar_b, ir::DType out) {
      auto body = Body(op, arity, n, scalar_b, out);
      absl::StatusOr<ElementwiseKernel> k = CompileElementwise(*body);
      if (n == 1) {  // a one-element region is not worth a kernel
        EXPECT_TRUE(absl::IsUnimplemented(k.status())) << k.status();
        return;
      }
      ASSERT_TRUE(k.ok()) << ir::OpName(op) << ": " << k.status();
      const Tensor& rhs = scalar_b ? b0 : b;
      std::vector<Tensor> args = {a};
      if (arity == 2) args.push_back(rhs);
      Tensor expect = runtime::Dispatch(op, args);
      Tensor got = empty({n}, {.dtype = out});
      std::vector<void*> ptrs = {a.data_ptr()};
      if (arity == 2) ptrs.push_back(rhs.data_ptr());
      ptrs.push_back(got.data_ptr());
      k->fn(ptrs.data(), 0, n);
      EXPECT_EQ(std::memcmp(got.data_ptr(), expect.data_ptr(), n * got.element_size()), 0)
          << ir::OpName(op) << " n=" << n << (scalar_b ? " (0-d operand)" : "");
    };
    for (OpId op : unary) check(op, 1, false, ir::DType::kF32);
    for (OpId op : binary) {
      check(op, 2, false, ir::DType::kF32);
      check(op, 2, true, ir::DType::kF32);
    }
    for (OpId op : compare) check(op, 2, false, ir::DType::kBool);
  }
}

TEST(ElementwiseKernelTest, AdamWStyleRegionMatchesTheInterpreter) {
  // An update chain with constants, a 0-d scalar operand and two outputs.
  auto g = ir::ParseGraph(R"(
graph @fused_0(%p0: f32[1000] input, %p1: f32[1000] input, %p2: f32[] input) {
  %0 = full {shape = [], value = 0.999, dtype = f32} : f32[]
  %1 = mul_ %p0, %0 : f32[1000]
  %2 = addcmul_ %1, %p1, %p1 {value = 0.001} : f32[1000]
  %3 = sqrt %2 : f32[1000]
  %4 = div %3, %p2 : f32[1000]
  %5 = full {shape = [], value = 1e-08, dtype = f32} : f32[]
  %6 = add %4, %5 : f32[1000]
  return %2, %6
})");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<ElementwiseKernel> k = CompileElementwise(**g);
  ASSERT_TRUE(k.ok()) << k.status();
  Generator gen(1);
  Tensor v = rand({1000}, {}, &gen), grad = randn({1000}, {}, &gen);
  Tensor bc = scalar_tensor(0.7);
  Tensor expect_v = v.clone();
  expect_v.mul_(0.999).addcmul_(grad, grad, 0.001);
  Tensor expect_d = sqrt(expect_v) / bc + 1e-8;
  Tensor out_v = empty({1000}), out_d = empty({1000});
  void* ptrs[] = {v.data_ptr(), grad.data_ptr(), bc.data_ptr(), out_v.data_ptr(), out_d.data_ptr()};
  k->fn(ptrs, 0, 400);
  k->fn(ptrs, 400, 1000);  // chunks compose
  EXPECT_EQ(std::memcmp(out_v.data_ptr(), expect_v.data_ptr(), 4000), 0);
  EXPECT_EQ(std::memcmp(out_d.data_ptr(), expect_d.data_ptr(), 4000), 0);
  EXPECT_NE(k->llvm_ir.find("define"), std::string::npos);
}

TEST(ElementwiseKernelTest, RegionsWithReductionsAreLeftToTheInterpreter) {
  auto g = ir::ParseGraph(R"(
graph @fused_1(%p0: f32[4,8] input) {
  %0 = relu %p0 : f32[4,8]
  %1 = sum %0 {dims = [1], keepdim = false} : f32[4]
  return %1
})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(absl::IsUnimplemented(CompileElementwise(**g).status()));
}

}  // namespace
}  // namespace stepjit::codegen::cpu
