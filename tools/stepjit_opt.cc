// stepjit-opt: reads IR text, verifies it, runs a pass pipeline, prints the IR.
//
//   stepjit-opt [file|-] [--passes=verify,print] [--print-after-all] [-o out]
//   stepjit-opt --list-passes
//
// Exit status: 0 on success; 1 when the input does not parse or verify, a
// pass fails, or a file cannot be read or written; 2 for a bad command line
// (including an unknown pass name).
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace stepjit {
namespace {

// One row per pass: its --passes name, entry point (true = changed the IR)
// and the summary --list-passes shows.
struct PassEntry {
  const char* name;
  absl::StatusOr<bool> (*run)(ir::Graph&);
  const char* summary;
};

absl::StatusOr<bool> RunVerify(ir::Graph& graph) {
  absl::Status status = ir::Verify(graph);
  if (!status.ok()) return status;
  return false;
}

absl::StatusOr<bool> RunPrint(ir::Graph& graph) {
  ir::Print(graph, std::cerr);
  return false;
}

constexpr PassEntry kPasses[] = {
    {"verify", &RunVerify, "check the IR's invariants (ir/verifier.h)"},
    {"print", &RunPrint,
     "print the IR at this point of the pipeline to stderr"},
};

constexpr const char* kUsage =
    "usage: stepjit-opt [file|-] [--passes=p1,p2,...] [--print-after-all] "
    "[-o out]\n"
    "       stepjit-opt --list-passes\n"
    "Reads IR text (stdin when no file or '-'), verifies it, runs the passes\n"
    "in order and prints the resulting IR to stdout (or to `out`).\n";

struct Options {
  std::string input = "-";
  std::string output;  // empty: stdout
  std::vector<const PassEntry*> passes;
  bool print_after_all = false;
};

void ListPasses(std::ostream& os) {
  for (const PassEntry& p : kPasses) {
    os << absl::StrFormat("  %-12s%s\n", p.name, p.summary);
  }
}

const PassEntry* FindPass(absl::string_view name) {
  for (const PassEntry& p : kPasses) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

// Returns -1 to go on, or the exit status to stop with.
int ParseArgs(int argc, char** argv, Options& options) {
  bool have_input = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--list-passes") {
      ListPasses(std::cout);
      return 0;
    } else if (arg == "--print-after-all") {
      options.print_after_all = true;
    } else if (absl::StartsWith(arg, "--passes=")) {
      for (absl::string_view name :
           absl::StrSplit(arg.substr(9), ',', absl::SkipEmpty())) {
        const PassEntry* pass = FindPass(name);
        if (pass == nullptr) {
          std::cerr << "stepjit-opt: error: unknown pass '" << name
                    << "'\nknown passes:\n";
          ListPasses(std::cerr);
          return 2;
        }
        options.passes.push_back(pass);
      }
    } else if (arg == "-o" && i + 1 < argc) {
      options.output = argv[++i];
    } else if ((arg == "-" || arg[0] != '-') && !have_input) {
      options.input = arg;
      have_input = true;
    } else {
      std::cerr << "stepjit-opt: error: unexpected argument '" << arg << "'\n"
                << kUsage;
      return 2;
    }
  }
  return -1;
}

bool ReadInput(const std::string& path, std::string& text) {
  std::stringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    buffer << in.rdbuf();
  }
  text = buffer.str();
  return true;
}

int Main(int argc, char** argv) {
  Options options;
  if (int rc = ParseArgs(argc, argv, options); rc >= 0) return rc;
  const std::string filename = options.input == "-" ? "<stdin>" : options.input;
  std::string text;
  if (!ReadInput(options.input, text)) {
    std::cerr << "stepjit-opt: error: cannot read '" << options.input << "'\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ir::Graph>> graph =
      ir::ParseGraph(text, filename);
  if (!graph.ok()) {
    std::cerr << graph.status().message() << "\n";
    return 1;
  }
  if (absl::Status s = ir::Verify(**graph); !s.ok()) {
    std::cerr << filename << ": error: " << s.message() << "\n";
    return 1;
  }
  for (const PassEntry* pass : options.passes) {
    absl::StatusOr<bool> changed = pass->run(**graph);
    if (!changed.ok()) {
      std::cerr << filename << ": error: pass `" << pass->name
                << "`: " << changed.status().message() << "\n";
      return 1;
    }
    // A pass that changed the IR must leave it valid; catch it here, where
    // the culprit is known.
    if (*changed) {
      if (absl::Status s = ir::Verify(**graph); !s.ok()) {
        std::cerr << filename << ": error: after pass `" << pass->name
                  << "`: " << s.message() << "\n";
        return 1;
      }
    }
    if (options.print_after_all) {
      std::cerr << "// ----- IR after " << pass->name << " -----\n";
      ir::Print(**graph, std::cerr);
    }
  }
  if (options.output.empty()) {
    ir::Print(**graph, std::cout);
    return std::cout.flush() ? 0 : 1;
  }
  std::ofstream out(options.output, std::ios::binary);
  ir::Print(**graph, out);
  out.close();
  if (!out) {
    std::cerr << "stepjit-opt: error: cannot write '" << options.output
              << "'\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace stepjit

int main(int argc, char** argv) { return stepjit::Main(argc, argv); }
