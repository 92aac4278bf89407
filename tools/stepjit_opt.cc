// stepjit-opt: reads IR text, verifies it, runs a pass pipeline, prints the IR
// (as text, or with --dot as a Graphviz graph) or the code the back ends
// generate for its fusion regions.
//
//   stepjit-opt [file|-] [--passes=p1,p2] [--print-after-all] [--stats]
//               [--split-input-file] [--emit=ir|llvm|cuda] [--dot] [-o out]
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
// verify, a pass or code generation fails, or a file cannot be read or
// written; 2 for a bad command line (including an unknown pass name).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/dot.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "llvm/Support/CommandLine.h"
#include "passes/pass_manager.h"
#include "tools/cli_flags.h"
#include "tools/emit_code.h"

namespace stepjit::tools {
namespace {

namespace cl = llvm::cl;

constexpr const char* kOverview =
    "Reads IR text (stdin when no file or '-'), verifies it, runs the passes\n"
    "in order and prints the resulting IR to stdout (or to `out`), or with\n"
    "--emit the code generated for its fusion regions.\n";

cl::OptionCategory kFlags("stepjit-opt options");

namespace flags {
// LLVM's flags of these names are for its own IR passes, which stepjit-opt
// does not run from the command line.
const bool kLlvmFlagsRemoved =
    UnregisterLlvmOptions({"print-after-all", "stats"});
cl::opt<std::string> input(cl::Positional, cl::desc("<file|->"), cl::init("-"),
                           cl::cat(kFlags));
cl::opt<std::string> output("o", cl::desc("write the result to <out>"),
                            cl::value_desc("out"), cl::cat(kFlags));
cl::list<std::string> passes(
    "passes",
    cl::desc("the passes to run, in order; given twice, the second list "
             "runs\nafter the first (--list-passes names them)"),
    cl::value_desc("p1,p2,..."), cl::cat(kFlags));
cl::opt<bool> list_passes("list-passes",
                          cl::desc("list the passes with a line on each"),
                          cl::cat(kFlags));
cl::opt<bool> print_after_all(
    "print-after-all", cl::desc("print the IR after every pass to stderr"),
    cl::cat(kFlags));
cl::opt<bool> stats("stats", cl::desc("print per-pass statistics to stderr"),
                    cl::cat(kFlags));
cl::opt<bool> split_input_file(
    "split-input-file",
    cl::desc("process each `// -----` separated chunk on its own"),
    cl::cat(kFlags));
cl::opt<EmitTarget, false, WordParser<EmitTarget>> emit(
    "emit",
    cl::desc("what to print after the passes; for llvm and cuda, each fusion\n"
             "region's code (a graph without fusion nodes is taken as one\n"
             "region body), or a comment saying why a region is not lowered"),
    cl::values(
        clEnumValN(EmitTarget::kIr, "ir", "the IR (default)"),
        clEnumValN(EmitTarget::kLlvm, "llvm",
                   "the LLVM IR of the CPU backend, before optimization"),
        clEnumValN(EmitTarget::kCuda, "cuda",
                   "the CUDA C of the CUDA backend, as NVRTC compiles it")),
    cl::init(EmitTarget::kIr), cl::cat(kFlags));
cl::opt<bool> shape_generic(
    "shape-generic",
    cl::desc("with --emit=llvm: lower each region as a shape-generic kernel,\n"
             "which reads its loop sizes from a run-time table (printed\n"
             "after the region's header) instead of compiling them in"),
    cl::cat(kFlags));
cl::opt<bool> dot(
    "dot",
    cl::desc("print the IR after the passes as Graphviz dot text (render\n"
             "it with `dot -Tsvg`; ir/dot.h says what the shapes mean)"),
    cl::cat(kFlags));
cl::extrahelp environment(
    "\nEnvironment: STEPJIT_DUMP=<dir> writes NNN-<pass>.ir after each pass;\n"
    "STEPJIT_DISABLE=p1,p2 skips those passes.\n"
    "Exit status: 1 when an input does not parse or verify, a pass or code\n"
    "generation fails, or a file cannot be read or written; 2 for a bad\n"
    "command line.\n");
}  // namespace flags

constexpr absl::string_view kSplitMarker = "// -----";

// One line per pass, the summaries aligned two columns after the longest
// name.
void ListPasses(std::ostream& os) {
  const std::vector<passes::PassInfo> all = passes::ListPasses();
  size_t width = 0;
  for (const passes::PassInfo& p : all) width = std::max(width, p.name.size());
  for (const passes::PassInfo& p : all) {
    os << absl::StrFormat("  %-*s  %s\n", static_cast<int>(width), p.name,
                          p.summary)
       << passes::DescribeOptions(p);
  }
}

// The largest input read: IR text of a real step is a few MB; anything
// past this (a device, a runaway pipe) is refused rather than read until
// memory runs out.
constexpr size_t kMaxInputBytes = size_t{256} << 20;

// Reads at most kMaxInputBytes; "" when it succeeded, else why not.
std::string ReadInput(const std::string& path, std::string& text) {
  std::FILE* f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) return std::strerror(errno);
  text.clear();
  char buffer[1 << 16];
  std::string error;
  while (true) {
    const size_t n = std::fread(buffer, 1, sizeof buffer, f);
    if (n == 0) {
      if (std::ferror(f)) error = std::strerror(errno);
      break;
    }
    if (text.size() + n > kMaxInputBytes) {
      error = absl::StrCat("input larger than ", kMaxInputBytes >> 20,
                           " MiB (the most stepjit-opt reads)");
      break;
    }
    text.append(buffer, n);
  }
  if (f != stdin) std::fclose(f);
  return error;
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
                  const std::string& pipeline, std::string& out) {
  absl::StatusOr<std::unique_ptr<ir::Graph>> graph =
      ir::ParseGraph(chunk.text, filename, chunk.first_line);
  if (!graph.ok()) {
    std::cerr << graph.status().message() << "\n";
    return false;
  }
  const std::string where = Location(filename, chunk, flags::split_input_file);
  if (absl::Status s = ir::Verify(**graph); !s.ok()) {
    std::cerr << where << ": error: " << s.message() << "\n";
    return false;
  }
  passes::PipelineOptions pipeline_options = passes::FromEnvironment();
  if (flags::print_after_all) {
    pipeline_options.after_pass = [](absl::string_view pass,
                                     const ir::Graph& g) {
      std::cerr << "// -----// IR after " << pass << " //----- //\n";
      ir::Print(g, std::cerr);
    };
  }
  passes::PipelineStats stats;
  absl::Status status =
      passes::RunPipeline(**graph, pipeline, pipeline_options, &stats);
  if (flags::stats) std::cerr << stats.ToString();
  if (status.ok() && flags::emit != EmitTarget::kIr) {
    status = EmitRegionCode(**graph, flags::emit, out, flags::shape_generic);
  } else if (status.ok() && flags::dot) {
    out += ir::PrintDot(**graph);
  } else if (status.ok()) {
    out += ir::Print(**graph);
  }
  if (!status.ok()) {
    std::cerr << where << ": error: " << status.message() << "\n";
    return false;
  }
  return true;
}

int Main(int argc, char** argv) {
  if (!ParseFlags(argc, argv, kFlags, kOverview)) return 2;
  if (flags::list_passes) {
    ListPasses(std::cout);
    return 0;
  }
  if (flags::dot && flags::emit != EmitTarget::kIr) {
    std::cerr << "stepjit-opt: error: --dot prints the IR graph: expected no "
                 "--emit or --emit=ir, got --emit="
              << (flags::emit == EmitTarget::kLlvm ? "llvm" : "cuda") << "\n";
    return 2;
  }
  if (flags::shape_generic && flags::emit != EmitTarget::kLlvm) {
    std::cerr << "stepjit-opt: error: --shape-generic lowers CPU kernels: "
                 "expected --emit=llvm with it, got --emit="
              << (flags::emit == EmitTarget::kCuda ? "cuda" : "ir") << "\n";
    return 2;
  }
  std::vector<std::string> lists;
  for (const std::string& list : flags::passes) {
    if (!list.empty()) lists.push_back(list);
  }
  const std::string pipeline = absl::StrJoin(lists, ",");
  // Bad pass names are command-line errors: report them before any input.
  if (auto parsed = passes::ParsePipeline(pipeline); !parsed.ok()) {
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
  const std::string& input = flags::input;
  const std::string filename = input == "-" ? "<stdin>" : input;
  std::string text;
  if (const std::string error = ReadInput(input, text); !error.empty()) {
    std::cerr << "stepjit-opt: error: cannot read '" << input << "': " << error
              << "\n";
    return 1;
  }
  std::string result;
  bool ok = true;
  const std::vector<Chunk> chunks = SplitInput(text, flags::split_input_file);
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) absl::StrAppend(&result, kSplitMarker, "\n");
    if (!ProcessChunk(chunks[i], filename, pipeline, result)) {
      ok = false;
      if (!flags::split_input_file) return 1;
    }
  }
  if (flags::output.empty()) {
    std::cout << result;
    return std::cout.flush() && ok ? 0 : 1;
  }
  std::ofstream out(flags::output, std::ios::binary);
  out << result;
  out.close();
  if (!out) {
    std::cerr << "stepjit-opt: error: cannot write '" << flags::output << "'\n";
    return 1;
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace stepjit::tools

int main(int argc, char** argv) { return stepjit::tools::Main(argc, argv); }
