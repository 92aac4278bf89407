// Tokenizer for the IR text form.
#include "ir/lexer.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace stepjit::ir {
namespace {

bool IsNameChar(char c) {
  return absl::ascii_isalnum(c) || c == '_' || c == '.';
}
bool IsIdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(absl::string_view text) : text_(text) {}

  std::vector<Token> Run() {
    std::vector<Token> tokens;
    while (true) {
      SkipSpaceAndComments();
      tokens.push_back(Lex());
      const TokenKind kind = tokens.back().kind;
      if (kind == TokenKind::kEof || kind == TokenKind::kError) return tokens;
    }
  }

 private:
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  void Advance() {
    if (text_[pos_++] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
  }

  void SkipSpaceAndComments() {
    while (!AtEnd()) {
      if (absl::ascii_isspace(Peek())) {
        Advance();
      } else if (Peek() == '/' && Peek(1) == '/') {
        while (!AtEnd() && Peek() != '\n') Advance();
      } else {
        return;
      }
    }
  }

  Token Lex() {
    start_ = pos_;
    tok_line_ = line_;
    tok_col_ = col_;
    if (AtEnd()) return Make(TokenKind::kEof, "");
    const char c = Peek();
    if (c == '%' || c == '@') {
      Advance();
      while (!AtEnd() && IsNameChar(Peek())) Advance();
      std::string name(text_.substr(start_ + 1, pos_ - start_ - 1));
      if (name.empty()) {
        return Error(
            absl::StrCat("expected a name after `", std::string(1, c), "`"));
      }
      return Make(c == '%' ? TokenKind::kValueName : TokenKind::kGraphName,
                  std::move(name));
    }
    if (absl::ascii_isalpha(c) || c == '_') {
      while (!AtEnd() && IsIdentChar(Peek())) Advance();
      return Make(TokenKind::kIdent, std::string(Spelling()));
    }
    if (absl::ascii_isdigit(c) || c == '-') return LexNumber();
    if (c == '"') return LexString();
    if (absl::string_view("=,:(){}[]#").find(c) != absl::string_view::npos) {
      Advance();
      return Make(TokenKind::kPunct, std::string(1, c));
    }
    Advance();
    return Error(absl::StrCat("unexpected character `", Spelling(), "`"));
  }

  Token LexNumber() {
    if (Peek() == '-') {
      Advance();
      if (text_.substr(pos_, 3) == "inf" && !IsIdentChar(Peek(3))) {
        for (int i = 0; i < 3; ++i) Advance();
        return Make(TokenKind::kFloat, "-inf");
      }
      if (!absl::ascii_isdigit(Peek())) {
        return Error("expected a digit or `inf` after `-`");
      }
    }
    bool is_float = false;
    while (absl::ascii_isdigit(Peek())) Advance();
    if (Peek() == '.') {
      is_float = true;
      Advance();
      while (absl::ascii_isdigit(Peek())) Advance();
    }
    if (Peek() == 'e' || Peek() == 'E') {
      is_float = true;
      Advance();
      if (Peek() == '+' || Peek() == '-') Advance();
      if (!absl::ascii_isdigit(Peek())) {
        return Error(absl::StrCat("malformed number `", Spelling(), "`"));
      }
      while (absl::ascii_isdigit(Peek())) Advance();
    }
    if (IsNameChar(Peek())) {
      while (IsNameChar(Peek())) Advance();
      return Error(absl::StrCat("malformed number `", Spelling(), "`"));
    }
    return Make(is_float ? TokenKind::kFloat : TokenKind::kInt,
                std::string(Spelling()));
  }

  Token LexString() {
    Advance();  // opening quote
    std::string value;
    while (true) {
      if (AtEnd() || Peek() == '\n') return Error("unterminated string");
      const char c = Peek();
      Advance();
      if (c == '"') break;
      if (c != '\\') {
        value += c;
        continue;
      }
      const char e = Peek();
      if (AtEnd()) return Error("unterminated string");
      Advance();
      switch (e) {
        case '"':
          value += '"';
          break;
        case '\\':
          value += '\\';
          break;
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'x': {
          const int hi = HexDigit(Peek()), lo = HexDigit(Peek(1));
          if (hi < 0 || lo < 0) {
            return Error("expected two hex digits after `\\x` in string");
          }
          Advance();
          Advance();
          value += static_cast<char>(hi * 16 + lo);
          break;
        }
        default:
          return Error(absl::StrCat("unknown escape `\\", std::string(1, e),
                                    "` in string"));
      }
    }
    return Make(TokenKind::kString, std::move(value));
  }

  absl::string_view Spelling() const {
    return text_.substr(start_, pos_ - start_);
  }
  Token Make(TokenKind kind, std::string text) const {
    return Token{kind, std::move(text), std::string(Spelling()), tok_line_,
                 tok_col_};
  }
  Token Error(std::string message) const {
    return Make(TokenKind::kError, std::move(message));
  }

  absl::string_view text_;
  size_t pos_ = 0, start_ = 0;
  int line_ = 1, col_ = 1, tok_line_ = 1, tok_col_ = 1;
};

}  // namespace

std::vector<Token> Tokenize(absl::string_view text) {
  return Lexer(text).Run();
}

std::string DescribeToken(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEof:
      return "end of input";
    case TokenKind::kValueName:
    case TokenKind::kGraphName:
      return token.spelling;
    default:
      return absl::StrCat("`", token.spelling, "`");
  }
}

}  // namespace stepjit::ir
