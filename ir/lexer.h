// Splits IR text into tokens with line:col positions for the parser's messages.
#ifndef STEPJIT_IR_LEXER_H_
#define STEPJIT_IR_LEXER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace stepjit::ir {

enum class TokenKind {
  kValueName,  // %x, %3 (text: the name without '%')
  kGraphName,  // @fused_0 (text: the name without '@')
  kIdent,      // graph, add, f32, true, inf, transpose_b ...
  kInt,        // -12
  kFloat,      // 0.1, 1e-08, -inf
  kString,     // "..." (text: the decoded contents)
  kPunct,      // one of = , : ( ) { } [ ] #
  kError,      // a malformed token (text: what is wrong); ends the stream
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;
  std::string spelling;  // the source characters, for "found `...`"
  int line;
  int col;

  bool Is(char punct) const {
    return kind == TokenKind::kPunct && text.size() == 1 && text[0] == punct;
  }
  bool IsIdent(absl::string_view word) const {
    return kind == TokenKind::kIdent && text == word;
  }
};

// The tokens of `text`, ending with kEof, or with kError at the first
// malformed token. `//` comments and whitespace are skipped.
std::vector<Token> Tokenize(absl::string_view text);

// How a token reads in a message: "`add`", "%x", "end of input".
std::string DescribeToken(const Token& token);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_LEXER_H_
