// CudaMath: the CUDA C backend for ir/scalar_def.h (each op builds an
// expression string).
#ifndef STEPJIT_CODEGEN_CUDA_CUDA_MATH_H_
#define STEPJIT_CODEGEN_CUDA_CUDA_MATH_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stepjit::codegen::cuda {

// Statements of the kernel being written: where CudaMath binds operands it
// needs twice, so that nested definitions never duplicate an expression.
struct CudaStatements {
  std::string text;
  std::string indent = "  ";
  int next_temp = 0;

  void Line(absl::string_view line) {
    absl::StrAppend(&text, indent, line, "\n");
  }
};

// A C literal for `v` in float (`1.5f`) or double; inf and NaN by bit pattern.
std::string CudaLiteral(double v, bool is_double);

// Floating-point arithmetic in float or double. Without --use_fast_math and
// with --fmad=false (codegen/cuda/nvrtc.h) every operator is one IEEE
// operation, as in the CPU code; transcendentals are CUDA's libdevice
// functions (expf, erff, ...), within their documented ulp bounds of libm.
struct CudaMath {
  using V = std::string;
  CudaStatements& out;
  bool is_double;

  V Const(double v) { return CudaLiteral(v, is_double); }
  V Add(V x, V y) { return absl::StrCat("(", x, " + ", y, ")"); }
  V Sub(V x, V y) { return absl::StrCat("(", x, " - ", y, ")"); }
  V Mul(V x, V y) { return absl::StrCat("(", x, " * ", y, ")"); }
  V Div(V x, V y) { return absl::StrCat("(", x, " / ", y, ")"); }
  V Neg(V x) { return absl::StrCat("(-", x, ")"); }
  V Abs(V x) { return Call("fabs", x); }
  V Exp(V x) { return Call("exp", x); }
  V Log(V x) { return Call("log", x); }
  V Sqrt(V x) { return Call("sqrt", x); }
  V Sin(V x) { return Call("sin", x); }
  V Cos(V x) { return Call("cos", x); }
  V Tanh(V x) { return Call("tanh", x); }
  V Erf(V x) { return Call("erf", x); }
  V Pow(V x, V y) { return absl::StrCat(Fn("pow"), "(", x, ", ", y, ")"); }
  // NaN-propagating like HostMath and LlvmMath: (x != x || x > y) ? x : y.
  V Max(V x, V y) { return Pick(">", x, y); }
  V Min(V x, V y) { return Pick("<", x, y); }
  V Select(V c, V x, V y) {
    return absl::StrCat("(", c, " ? ", x, " : ", y, ")");
  }
  V Eq(V x, V y) { return absl::StrCat("(", x, " == ", y, ")"); }
  V Ne(V x, V y) { return absl::StrCat("(", x, " != ", y, ")"); }
  V Lt(V x, V y) { return absl::StrCat("(", x, " < ", y, ")"); }
  V Le(V x, V y) { return absl::StrCat("(", x, " <= ", y, ")"); }
  V Gt(V x, V y) { return absl::StrCat("(", x, " > ", y, ")"); }
  V Ge(V x, V y) { return absl::StrCat("(", x, " >= ", y, ")"); }

 private:
  std::string Fn(absl::string_view name) const {
    return absl::StrCat(name, is_double ? "" : "f");
  }
  V Call(absl::string_view name, const V& x) {
    return absl::StrCat(Fn(name), "(", x, ")");
  }
  V Pick(absl::string_view cmp, V x, V y) {
    x = Bind(x);
    y = Bind(y);
    return absl::StrCat("((", x, " != ", x, " || ", x, " ", cmp, " ", y, ") ? ",
                        x, " : ", y, ")");
  }
  // A name for `e` unless it already is one (or a plain literal).
  V Bind(const V& e);
};

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_CUDA_MATH_H_
