// STEPJIT_DUMP's pictures: a graph's dot file and, through Graphviz, its SVG.
#ifndef STEPJIT_FRONTEND_DOT_DUMP_H_
#define STEPJIT_FRONTEND_DOT_DUMP_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace stepjit::frontend {

// How long one `dot` run may take before it is killed: a graph of a few
// thousand nodes lays out in seconds.
inline constexpr std::chrono::milliseconds kDotTimeout{60000};

// Runs `dot -Tsvg -o <svg_path> <dot_path>` (Graphviz, found on PATH), its
// output discarded, killed after `timeout`. NotFound when there is no `dot`
// on PATH; otherwise an error naming the command and how it failed. A
// failed run leaves no SVG behind.
absl::Status RenderSvg(const std::string& dot_path, const std::string& svg_path,
                       std::chrono::milliseconds timeout = kDotTimeout);

// Writes `<dir>/<stem>.dot` (ir::PrintDot) and renders `<dir>/<stem>.svg`
// next to it. A file that cannot be written, or a render that fails, is
// reported on stderr: the first failure of each kind per process, so that a
// machine without Graphviz gets one line, not one per compiled step.
void DumpDot(const ir::Graph& graph, const std::string& dir,
             absl::string_view stem);

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_DOT_DUMP_H_
