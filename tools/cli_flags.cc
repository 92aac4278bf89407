// Command-line flags for stepjit's tools and examples (see cli_flags.h).
#include "tools/cli_flags.h"

#include <string>

#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace stepjit::tools {
namespace {

// argv[0]'s file name, for messages; set by ParseFlags.
std::string& ProgramName() {
  static std::string* name = new std::string("stepjit");
  return *name;
}

}  // namespace

bool FlagError(const llvm::cl::Option& option, absl::string_view message) {
  llvm::errs() << ProgramName() << ": --" << option.ArgStr << ": "
               << llvm::StringRef(message.data(), message.size()) << "\n";
  return true;
}

std::string OneOf(const llvm::cl::generic_parser_base& parser) {
  std::string words;
  const unsigned n = parser.getNumOptions();
  for (unsigned i = 0; i < n; ++i) {
    if (i > 0) words += i + 1 == n ? " or " : ", ";
    words += parser.getOption(i).str();
  }
  return words;
}

bool Uint64Parser::parse(llvm::cl::Option& option, llvm::StringRef,
                         llvm::StringRef arg, unsigned long long& value) {
  if (absl::SimpleAtoi(View(arg), &value)) return false;
  return FlagError(option, absl::StrCat("expected a non-negative integer, "
                                        "got '",
                                        View(arg), "'"));
}

bool UnregisterLlvmOptions(std::initializer_list<const char*> names) {
  llvm::StringMap<llvm::cl::Option*>& options =
      llvm::cl::getRegisteredOptions();
  for (const char* name : names) {
    if (auto it = options.find(name); it != options.end()) {
      it->second->removeArgument();
    }
  }
  return true;
}

bool ParseFlags(int argc, const char* const* argv,
                llvm::cl::OptionCategory& category, const char* overview) {
  static llvm::cl::alias help_short(
      "h", llvm::cl::desc("Alias for --help"),
      llvm::cl::aliasopt(*llvm::cl::getRegisteredOptions()["help"]));
  ProgramName() = llvm::sys::path::filename(argv[0]).str();
  llvm::cl::HideUnrelatedOptions(category);
  if (llvm::cl::ParseCommandLineOptions(argc, argv, overview, &llvm::errs(),
                                        /*EnvVar=*/nullptr,
                                        /*LongOptionsUseDoubleDash=*/true)) {
    return true;
  }
  llvm::errs() << "run with --help for usage\n";
  return false;
}

}  // namespace stepjit::tools
