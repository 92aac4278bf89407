// CudaMath's literals and operand binding.
#include "codegen/cuda/cuda_math.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace stepjit::codegen::cuda {

namespace {

bool IsIdentifier(absl::string_view s) {
  if (s.empty() ||
      !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  }
  return true;
}

// `1.5f`, `(-2.0)`, `1e-05f`: what CudaLiteral prints for finite values.
bool IsPlainLiteral(absl::string_view s) {
  if (s.size() > 2 && s.front() == '(' && s.back() == ')')
    s = s.substr(1, s.size() - 2);
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' ||
          c == '+' || c == '-' || c == 'f')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string CudaLiteral(double v, bool is_double) {
  if (std::isnan(v)) {
    return is_double ? "__longlong_as_double(0x7ff8000000000000LL)"
                     : "__int_as_float(0x7fc00000)";
  }
  if (std::isinf(v)) {
    const char* inf = is_double ? "__longlong_as_double(0x7ff0000000000000LL)"
                                : "__int_as_float(0x7f800000)";
    return v > 0 ? std::string(inf) : absl::StrCat("(-", inf, ")");
  }
  std::string s = is_double ? absl::StrFormat("%.17g", v)
                            : absl::StrFormat("%.9g", static_cast<float>(v));
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  if (!is_double) s += "f";
  return s[0] == '-' ? absl::StrCat("(", s, ")") : s;
}

CudaMath::V CudaMath::Bind(const V& e) {
  if (IsIdentifier(e) || IsPlainLiteral(e)) return e;
  V name = absl::StrCat("t", out.next_temp++);
  out.Line(absl::StrCat("const ", is_double ? "double" : "float", " ", name,
                        " = ", e, ";"));
  return name;
}

}  // namespace stepjit::codegen::cuda
