// stepjit-opt: reads IR text, verifies it, runs a pass pipeline, prints the IR.
//
//   stepjit-opt [file|-] [--passes=p1,p2] [--print-after-all] [--stats]
//               [--split-input-file] [-o out]
//   stepjit-opt --list-passes
//
// Passes come from the registry in passes/pass_manager.cc; STEPJIT_DUMP and
// STEPJIT_DISABLE apply as in compile(step). With --split-input-file the input
// is cut at lines `// -----` into chunks processed independently; their
// outputs are printed separated by `// -----` lines, and a failing chunk
// prints its diagnostic (line numbers count from the top of the whole file)
// and processing goes on.
//
// Exit status: 0 on success; 1 when an input (or any chunk) does not parse or
// verify, a pass fails, or a file cannot be read or written; 2 for a bad
// command line (including an unknown pass name).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"

namespace stepjit {
namespace {

constexpr const char* kUsage =
    "usage: stepjit-opt [file|-] [--passes=p1,p2,...] [--print-after-all]\n"
    "                   [--stats] [--split-input-file] [-o out]\n"
    "       stepjit-opt --list-passes\n"
    "Reads IR text (stdin when no file or '-'), verifies it, runs the passes\n"
    "in order and prints the resulting IR to stdout (or to `out`).\n"
    "  --print-after-all   print the IR after every pass to stderr\n"
    "  --stats             print per-pass statistics to stderr\n"
    "  --split-input-file  process each `// -----` separated chunk on its own\n"
    "Environment: STEPJIT_DUMP=<dir> writes NNN-<pass>.ir after each pass;\n"
    "STEPJIT_DISABLE=p1,p2 skips those passes.\n";

constexpr absl::string_view kSplitMarker = "// -----";

struct Options {
  std::string input = "-";
  std::string output;  // empty: stdout
  std::string pipeline;
  bool print_after_all = false;
  bool stats = false;
  bool split_input_file = false;
};

void ListPasses(std::ostream& os) {
  for (const passes::PassInfo& p : passes::ListPasses()) {
    os << absl::StrFormat("  %-14s%s\n", p.name, p.summary);
  }
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
    } else if (arg == "--stats") {
      options.stats = true;
    } else if (arg == "--split-input-file") {
      options.split_input_file = true;
    } else if (absl::StartsWith(arg, "--passes=")) {
      if (!options.pipeline.empty()) options.pipeline += ",";
      options.pipeline += arg.substr(9);
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

// A piece of the input and the 1-based line it starts at.
struct Chunk {
  std::string text;
  int first_line = 1;
};

std::vector<Chunk> SplitInput(const std::string& text, bool split) {
  if (!split) return {Chunk{text, 1}};
  std::vector<Chunk> chunks(1);
  int line_number = 1;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StripAsciiWhitespace(line) == kSplitMarker) {
      chunks.push_back(Chunk{"", line_number + 1});
    } else {
      absl::StrAppend(&chunks.back().text, line, "\n");
    }
    ++line_number;
  }
  return chunks;
}

// Where a diagnostic without its own position points: the file, or in split
// mode the line of the chunk's first statement.
std::string Location(const std::string& filename, const Chunk& chunk,
                     bool split) {
  if (!split) return filename;
  int line = chunk.first_line;
  for (absl::string_view text : absl::StrSplit(chunk.text, '\n')) {
    text = absl::StripAsciiWhitespace(text);
    if (!text.empty() && !absl::StartsWith(text, "//")) break;
    ++line;
  }
  return absl::StrCat(filename, ":", line);
}

// Parses, verifies and transforms one chunk; appends the printed result to
// `out`. Diagnostics go to stderr. Returns false on failure.
bool ProcessChunk(const Chunk& chunk, const std::string& filename,
                  const Options& options, std::string& out) {
  // Leading newlines keep the parser's line numbers those of the whole file.
  const std::string text = std::string(chunk.first_line - 1, '\n') + chunk.text;
  absl::StatusOr<std::unique_ptr<ir::Graph>> graph =
      ir::ParseGraph(text, filename);
  if (!graph.ok()) {
    std::cerr << graph.status().message() << "\n";
    return false;
  }
  const std::string where = Location(filename, chunk, options.split_input_file);
  if (absl::Status s = ir::Verify(**graph); !s.ok()) {
    std::cerr << where << ": error: " << s.message() << "\n";
    return false;
  }
  passes::PipelineOptions pipeline_options = passes::FromEnvironment();
  if (options.print_after_all) {
    pipeline_options.after_pass = [](absl::string_view pass,
                                     const ir::Graph& g) {
      std::cerr << "// -----// IR after " << pass << " //----- //\n";
      ir::Print(g, std::cerr);
    };
  }
  passes::PipelineStats stats;
  absl::Status status =
      passes::RunPipeline(**graph, options.pipeline, pipeline_options, &stats);
  if (options.stats) std::cerr << stats.ToString();
  if (!status.ok()) {
    std::cerr << where << ": error: " << status.message() << "\n";
    return false;
  }
  out += ir::Print(**graph);
  return true;
}

int Main(int argc, char** argv) {
  Options options;
  if (int rc = ParseArgs(argc, argv, options); rc >= 0) return rc;
  // Bad pass names are command-line errors: report them before any input.
  if (auto parsed = passes::ParsePipeline(options.pipeline); !parsed.ok()) {
    std::cerr << "stepjit-opt: error: " << parsed.status().message() << "\n";
    return 2;
  }
  for (const std::string& name : passes::FromEnvironment().disabled) {
    if (auto parsed = passes::ParsePipeline(name); !parsed.ok()) {
      std::cerr << "stepjit-opt: error: STEPJIT_DISABLE: "
                << parsed.status().message() << "\n";
      return 2;
    }
  }
  const std::string filename = options.input == "-" ? "<stdin>" : options.input;
  std::string text;
  if (!ReadInput(options.input, text)) {
    std::cerr << "stepjit-opt: error: cannot read '" << options.input << "'\n";
    return 1;
  }
  std::string result;
  bool ok = true;
  const std::vector<Chunk> chunks = SplitInput(text, options.split_input_file);
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) absl::StrAppend(&result, kSplitMarker, "\n");
    if (!ProcessChunk(chunks[i], filename, options, result)) {
      ok = false;
      if (!options.split_input_file) return 1;
    }
  }
  if (options.output.empty()) {
    std::cout << result;
    return std::cout.flush() && ok ? 0 : 1;
  }
  std::ofstream out(options.output, std::ios::binary);
  out << result;
  out.close();
  if (!out) {
    std::cerr << "stepjit-opt: error: cannot write '" << options.output
              << "'\n";
    return 1;
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace stepjit

int main(int argc, char** argv) { return stepjit::Main(argc, argv); }
