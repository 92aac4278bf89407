// The token cursor shared by the IR parser, and the grammar of types and
// attributes.
#include "ir/token_stream.h"

#include <charconv>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace stepjit::ir {
namespace {

// All of `text` as a T, or nullopt where it does not parse or fit.
template <typename T>
std::optional<T> FromChars(absl::string_view text) {
  T v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

}  // namespace

TokenStream::TokenStream(absl::string_view filename, std::vector<Token> tokens)
    : filename_(filename), tokens_(std::move(tokens)) {}

absl::Status TokenStream::ErrorAt(const Token& at,
                                  absl::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat(filename_, ":", at.line, ":", at.col, ": error: ", message));
}
absl::Status TokenStream::Unexpected(const Token& found,
                                     absl::string_view expected) const {
  if (found.kind == TokenKind::kError) return ErrorAt(found, found.text);
  return ErrorAt(found, absl::StrCat("expected ", expected, ", found ",
                                     DescribeToken(found)));
}
absl::Status TokenStream::Expect(char punct, absl::string_view context) {
  if (!Peek().Is(punct)) {
    return Unexpected(Peek(),
                      absl::StrCat("`", std::string(1, punct), "` ", context));
  }
  Next();
  return absl::OkStatus();
}

absl::StatusOr<TensorType> TokenStream::ParseType() {
  const Token& dtype_tok = Peek();
  if (dtype_tok.kind != TokenKind::kIdent) {
    return Unexpected(dtype_tok, "a type like f32[2,3]");
  }
  std::optional<DType> dtype = ParseDType(dtype_tok.text);
  if (!dtype) {
    return ErrorAt(dtype_tok, absl::StrCat("unknown dtype `", dtype_tok.text,
                                           "` (expected f32, f64, f16, "
                                           "bf16, i64, i32 or bool)"));
  }
  Next();
  RETURN_IF_ERROR(Expect('[', absl::StrCat("after dtype ", dtype_tok.text)));
  TensorType type{*dtype, {}};
  while (!Peek().Is(']')) {
    if (!type.shape.empty()) {
      RETURN_IF_ERROR(Expect(',', "or `]` in the shape"));
    }
    const Token& dim = Peek();
    if (dim.kind != TokenKind::kInt) {
      return Unexpected(dim, "a dimension size in the shape");
    }
    ASSIGN_OR_RETURN(int64_t size, ParseInt(dim));
    if (size < 0) {
      return ErrorAt(dim, absl::StrCat("dimension sizes must be "
                                       "non-negative, found ",
                                       size));
    }
    Next();
    type.shape.push_back(size);
  }
  if (absl::Status st = ValidateShape(type.shape); !st.ok()) {
    return ErrorAt(dtype_tok, st.message());
  }
  Next();
  return type;
}

absl::StatusOr<Attrs> TokenStream::ParseAttrs() {
  Next();  // '{'
  Attrs attrs;
  while (!Peek().Is('}')) {
    if (!attrs.items().empty()) {
      RETURN_IF_ERROR(Expect(',', "or `}` after an attribute"));
    }
    const Token& key_tok = Peek();
    if (key_tok.kind != TokenKind::kIdent) {
      return Unexpected(key_tok, "an attribute name");
    }
    std::optional<AttrKey> key = ParseAttrKey(key_tok.text);
    if (!key) {
      return ErrorAt(key_tok,
                     absl::StrCat("unknown attribute `", key_tok.text, "`"));
    }
    if (attrs.Has(*key)) {
      return ErrorAt(
          key_tok, absl::StrCat("attribute `", key_tok.text, "` given twice"));
    }
    Next();
    RETURN_IF_ERROR(
        Expect('=', absl::StrCat("after attribute `", key_tok.text, "`")));
    ASSIGN_OR_RETURN(AttrValue value, ParseAttrValue(key_tok.text));
    attrs.Set(*key, std::move(value));
  }
  Next();
  return attrs;
}

absl::StatusOr<AttrValue> TokenStream::ParseAttrValue(const std::string& key) {
  const Token& tok = Peek();
  const std::string what = absl::StrCat(
      "a value for attribute `", key,
      "` (integer, float, true/false, dtype, string or [integers])");
  switch (tok.kind) {
    case TokenKind::kInt: {
      ASSIGN_OR_RETURN(int64_t i, ParseInt(tok));
      Next();
      return AttrValue(i);
    }
    case TokenKind::kFloat: {
      ASSIGN_OR_RETURN(double d, ParseDouble(tok));
      Next();
      return AttrValue(d);
    }
    case TokenKind::kString:
      Next();
      return AttrValue(tok.text);
    case TokenKind::kIdent: {
      AttrValue value;
      if (tok.text == "true" || tok.text == "false") {
        value = tok.text == "true";
      } else if (tok.text == "inf" || tok.text == "nan") {
        value = tok.text == "inf" ? std::numeric_limits<double>::infinity()
                                  : std::numeric_limits<double>::quiet_NaN();
      } else if (std::optional<DType> t = ParseDType(tok.text)) {
        value = *t;
      } else {
        return Unexpected(tok, what);
      }
      Next();
      return value;
    }
    default:
      break;
  }
  if (!tok.Is('[')) return Unexpected(tok, what);
  Next();
  std::vector<int64_t> list;
  while (!Peek().Is(']')) {
    if (!list.empty()) {
      RETURN_IF_ERROR(
          Expect(',', absl::StrCat("or `]` in the list for `", key, "`")));
    }
    if (Peek().kind != TokenKind::kInt) {
      return Unexpected(Peek(),
                        absl::StrCat("an integer in the list for `", key, "`"));
    }
    ASSIGN_OR_RETURN(int64_t i, ParseInt(Peek()));
    Next();
    list.push_back(i);
  }
  Next();
  return AttrValue(std::move(list));
}

absl::StatusOr<int64_t> TokenStream::ParseInt(const Token& tok) const {
  if (std::optional<int64_t> v = FromChars<int64_t>(tok.text)) return *v;
  return ErrorAt(
      tok, absl::StrCat("integer ", tok.text, " does not fit in 64 bits"));
}

absl::StatusOr<double> TokenStream::ParseDouble(const Token& tok) const {
  if (tok.text == "-inf") return -std::numeric_limits<double>::infinity();
  if (std::optional<double> v = FromChars<double>(tok.text)) return *v;
  return ErrorAt(
      tok, absl::StrCat("float ", tok.text, " is out of the range of f64"));
}

}  // namespace stepjit::ir
