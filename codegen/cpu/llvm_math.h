// LlvmMath: the LLVM IR backend for ir/scalar_def.h (each op emits instructions).
#ifndef STEPJIT_CODEGEN_CPU_LLVM_MATH_H_
#define STEPJIT_CODEGEN_CPU_LLVM_MATH_H_

#include "ir/poly_math.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"

namespace stepjit::codegen::cpu {

// Floating-point arithmetic in `type` (float or double), one IEEE operation
// per primitive and no fast-math flags, so nothing is reassociated or fused.
// exp, log, tanh and erf are ir/poly_math.h's straight-line definitions,
// which the loop vectorizer vectorizes (a libm call would stop it); the
// eager HostMath evaluates the same definitions, so generated and eager
// results are the same bits. f64 erf, sin, cos and pow call libm (through
// LLVM intrinsics where there is one), as the eager kernels do.
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
  V Exp(V x) { return ir::PolyExp(*this, x); }
  V Log(V x) { return ir::PolyLog(*this, x); }
  V Sqrt(V x) { return Unary(llvm::Intrinsic::sqrt, x); }
  V Sin(V x) { return Unary(llvm::Intrinsic::sin, x); }
  V Cos(V x) { return Unary(llvm::Intrinsic::cos, x); }
  V Tanh(V x) { return ir::PolyTanh(*this, x); }
  V Erf(V x) {
    return type->isFloatTy() ? ir::PolyErfF32(*this, x) : Libm("erf", x);
  }
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

  // Both values and a select: straight-line code for the vectorizer.
  template <class F, class G>
  V Choose(V c, F then, G otherwise) {
    V x = then();
    V y = otherwise();
    return b.CreateSelect(c, x, y);
  }
  // The integers of ir/poly_math.h, as wide as `type`.
  bool IsDouble() const { return type->isDoubleTy(); }
  V Bits(V x) { return b.CreateBitCast(x, IntType()); }
  V FromBits(V i) { return b.CreateBitCast(i, type); }
  V IConst(int64_t v) {
    return llvm::ConstantInt::get(IntType(), v, /*IsSigned=*/true);
  }
  V IAdd(V i, V j) { return b.CreateAdd(i, j); }
  V ISub(V i, V j) { return b.CreateSub(i, j); }
  V IAnd(V i, V j) { return b.CreateAnd(i, j); }
  V IShl(V i, int k) { return b.CreateShl(i, k); }
  V IShrA(V i, int k) { return b.CreateAShr(i, k); }
  V IToF(V i) { return b.CreateSIToFP(i, type); }

 private:
  llvm::Type* IntType() const {
    return llvm::Type::getIntNTy(type->getContext(),
                                 type->getPrimitiveSizeInBits());
  }
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
