// A cursor over IR tokens with line:col diagnostics, and the grammar of the
// leaves of the text form (types and attribute dictionaries) that the graph
// parser builds on.
#ifndef STEPJIT_IR_TOKEN_STREAM_H_
#define STEPJIT_IR_TOKEN_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/infer.h"
#include "ir/lexer.h"

namespace stepjit::ir {

class TokenStream {
 public:
  // `tokens` as Tokenize returns them (ending in kEof or kError).
  TokenStream(absl::string_view filename, std::vector<Token> tokens);

  const Token& Peek() const { return tokens_[pos_]; }
  // Consumes and returns the current token; never moves past the last one.
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }

  // "<filename>:<line>:<col>: error: <message>" as InvalidArgument.
  absl::Status ErrorAt(const Token& at, absl::string_view message) const;
  // "expected <expected>, found <found>"; a malformed token reports its own
  // problem instead.
  absl::Status Unexpected(const Token& found, absl::string_view expected) const;
  // Consumes `punct` or fails with "expected `punct` <context>, found ...".
  absl::Status Expect(char punct, absl::string_view context);

  // `f32[2,3]`, `i64[]`.
  absl::StatusOr<TensorType> ParseType();
  // `{key = value, ...}` starting at the `{`, keys from ir/attrs.def.
  absl::StatusOr<Attrs> ParseAttrs();
  // The integer spelled by a kInt token.
  absl::StatusOr<int64_t> ParseInt(const Token& tok) const;

 private:
  absl::StatusOr<AttrValue> ParseAttrValue(const std::string& key);
  absl::StatusOr<double> ParseDouble(const Token& tok) const;

  std::string filename_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_TOKEN_STREAM_H_
