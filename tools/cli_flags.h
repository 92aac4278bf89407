// Command-line flags for stepjit's tools and examples: llvm::cl options in a
// category of each program's own, parsers whose errors name the flag, the
// value and what is expected, and the one call that parses argv.
//
//   llvm::cl::OptionCategory kFlags("stepjit-bench options");
//   llvm::cl::opt<DeviceKind, false, tools::WordParser<DeviceKind>> device(
//       "device", llvm::cl::values(clEnumValN(...), ...),
//       llvm::cl::cat(kFlags));
//   if (!tools::ParseFlags(argc, argv, kFlags, "what it does")) return 2;
#ifndef STEPJIT_TOOLS_CLI_FLAGS_H_
#define STEPJIT_TOOLS_CLI_FLAGS_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ir/parse_number.h"
#include "llvm/Support/CommandLine.h"

namespace stepjit::tools {

inline absl::string_view View(llvm::StringRef s) {
  return absl::string_view(s.data(), s.size());
}

// Prints "<program>: --flag: <message>" to stderr and returns true: a parse
// error, for a parser's parse(). (llvm::cl's Option::error would write
// "<program>: for the --flag option: <message>".)
bool FlagError(const llvm::cl::Option& option, absl::string_view message);

// "a", "a or b", "a, b or c": the words a WordParser accepts.
std::string OneOf(const llvm::cl::generic_parser_base& parser);

// A flag whose value is one of the words given with llvm::cl::values (which
// --help lists), e.g. --device cpu|cuda. A bad value reads
// "--device: expected cpu or cuda, got 'gpu'".
template <typename T>
class WordParser : public llvm::cl::parser<T> {
 public:
  using llvm::cl::parser<T>::parser;
  bool parse(llvm::cl::Option& option, llvm::StringRef, llvm::StringRef arg,
             T& value) {
    for (unsigned i = 0; i < this->getNumOptions(); ++i) {
      if (this->getOption(i) == arg) {
        value = this->Values[i].V.getValue();
        return false;
      }
    }
    return FlagError(option, absl::StrCat("expected ", OneOf(*this), ", got '",
                                          View(arg), "'"));
  }
};

// The parsers below extend llvm::cl's for `long long`, `unsigned long long`
// and `double` (those for `long` and `unsigned long`, int64_t and uint64_t
// here, are final), so an option's type is one of these.

// An integer flag in [kMin, kMax]: "--workers: expected an integer from 0 to
// 256, got '4294967297'" (ir/parse_number.h: no overflow, no truncation).
template <int64_t kMin, int64_t kMax = std::numeric_limits<int64_t>::max()>
class IntParser : public llvm::cl::parser<long long> {
 public:
  using parser::parser;
  bool parse(llvm::cl::Option& option, llvm::StringRef, llvm::StringRef arg,
             long long& value) {
    const absl::StatusOr<int64_t> v =
        ir::ParseInteger("", View(arg), kMin, kMax);
    if (!v.ok()) return FlagError(option, v.status().message());
    value = *v;
    return false;
  }
  llvm::StringRef getValueName() const override { return "N"; }
};

// A non-negative integer of 64 bits (a seed).
class Uint64Parser : public llvm::cl::parser<unsigned long long> {
 public:
  using parser::parser;
  bool parse(llvm::cl::Option& option, llvm::StringRef, llvm::StringRef arg,
             unsigned long long& value);
  llvm::StringRef getValueName() const override { return "N"; }
};

// A finite number > 0 and <= kMax (a learning rate): inf, nan and
// overflowing text are errors.
template <double kMax = std::numeric_limits<double>::max()>
class PositiveNumberParser : public llvm::cl::parser<double> {
 public:
  using parser::parser;
  bool parse(llvm::cl::Option& option, llvm::StringRef, llvm::StringRef arg,
             double& value) {
    const absl::StatusOr<double> v =
        ir::ParseReal("", View(arg), {.min = 0, .max = kMax});
    if (!v.ok()) return FlagError(option, v.status().message());
    value = *v;
    return false;
  }
  llvm::StringRef getValueName() const override { return "X"; }
};

// Unregisters LLVM's own options of these names (LLVM registers
// --print-after-all and --stats for its IR passes), so that the program can
// register its own. Options register when they are constructed, so this runs
// in a static initializer before the program's options:
//   const bool kUnregistered = tools::UnregisterLlvmOptions({"stats"});
bool UnregisterLlvmOptions(std::initializer_list<const char*> names);

// Parses argv into the program's options. --help (or -h) prints `overview`,
// the options of `category` and llvm::cl::extrahelp texts, leaving LLVM's own
// options out, and exits with status 0. A bad command line prints the error
// and "run with --help for usage" to stderr and returns false; the caller
// exits with status 2.
bool ParseFlags(int argc, const char* const* argv,
                llvm::cl::OptionCategory& category, const char* overview);

}  // namespace stepjit::tools

#endif  // STEPJIT_TOOLS_CLI_FLAGS_H_
