// LlvmMath: the LLVM IR backend for ir/scalar_def.h (each op emits instructions).
#ifndef STEPJIT_CODEGEN_CPU_LLVM_MATH_H_
#define STEPJIT_CODEGEN_CPU_LLVM_MATH_H_

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"

namespace stepjit::codegen::cpu {

// Floating-point arithmetic in `type` (float or double). Transcendentals
// without an LLVM intrinsic (tanh, erf) call libm, as the eager kernels do,
// so generated and eager results agree to libm's rounding.
struct LlvmMath {
  using V = llvm::Value*;
  llvm::IRBuilder<>& b;
  llvm::Module& m;
  llvm::Type* type;

  V Const(double v) { return llvm::ConstantFP::get(type, v); }
  V Add(V x, V y) { return b.CreateFAdd(x, y); }
  V Sub(V x, V y) { return b.CreateFSub(x, y); }
  V Mul(V x, V y) { return b.CreateFMul(x, y); }
  V Div(V x, V y) { return b.CreateFDiv(x, y); }
  V Neg(V x) { return b.CreateFNeg(x); }
  V Abs(V x) { return Unary(llvm::Intrinsic::fabs, x); }
  V Exp(V x) { return Unary(llvm::Intrinsic::exp, x); }
  V Log(V x) { return Unary(llvm::Intrinsic::log, x); }
  V Sqrt(V x) { return Unary(llvm::Intrinsic::sqrt, x); }
  V Sin(V x) { return Unary(llvm::Intrinsic::sin, x); }
  V Cos(V x) { return Unary(llvm::Intrinsic::cos, x); }
  V Tanh(V x) { return Libm(type->isFloatTy() ? "tanhf" : "tanh", x); }
  V Erf(V x) { return Libm(type->isFloatTy() ? "erff" : "erf", x); }
  V Pow(V x, V y) {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&m, llvm::Intrinsic::pow, {type}),
                        {x, y});
  }
  // NaN-propagating like the eager HostMath: (x != x || x > y) ? x : y.
  V Max(V x, V y) { return b.CreateSelect(b.CreateOr(b.CreateFCmpUNO(x, x), b.CreateFCmpOGT(x, y)), x, y); }
  V Min(V x, V y) { return b.CreateSelect(b.CreateOr(b.CreateFCmpUNO(x, x), b.CreateFCmpOLT(x, y)), x, y); }
  V Select(V c, V x, V y) { return b.CreateSelect(c, x, y); }
  V Eq(V x, V y) { return b.CreateFCmpOEQ(x, y); }
  V Ne(V x, V y) { return b.CreateFCmpUNE(x, y); }
  V Lt(V x, V y) { return b.CreateFCmpOLT(x, y); }
  V Le(V x, V y) { return b.CreateFCmpOLE(x, y); }
  V Gt(V x, V y) { return b.CreateFCmpOGT(x, y); }
  V Ge(V x, V y) { return b.CreateFCmpOGE(x, y); }

 private:
  V Unary(llvm::Intrinsic::ID id, V x) {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&m, id, {type}), {x});
  }
  V Libm(const char* name, V x) {
    llvm::FunctionCallee f = m.getOrInsertFunction(name, type, type);
    return b.CreateCall(f, {x});
  }
};

}  // namespace stepjit::codegen::cpu

#endif  // STEPJIT_CODEGEN_CPU_LLVM_MATH_H_
