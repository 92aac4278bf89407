// stepjit-opt --emit: the code the back ends generate for a graph's fusion
// regions, as text to read and to FileCheck (tests/ir/emit/).
#ifndef STEPJIT_TOOLS_EMIT_CODE_H_
#define STEPJIT_TOOLS_EMIT_CODE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ir/graph.h"

namespace stepjit::tools {

enum class EmitTarget : uint8_t { kIr, kLlvm, kCuda };

// Appends to `out`, for every fusion region of `graph` in order, or for
// `graph` itself taken as one region body when it holds no fusion node:
//   kLlvm  a "; region @name: kernel <kernel name>" line and the LLVM IR
//          module the CPU backend lowers the body to, before optimization;
//   kCuda  a "// region @name" line and the CUDA C translation unit the
//          CUDA emitter writes.
// With `shape_generic` (kLlvm only), the kernels read their sizes at run
// time (codegen/cpu/region_kernel.h): each region's header line is followed
// by a "; sizes at run time: [...]" line with this body's table.
// A region the back end does not lower is one comment line saying so and
// why. Both back ends name kernels and values after the body's text, so the
// output is the same in every run. Errors: a code generation failure other
// than a region the back end does not lower.
absl::Status EmitRegionCode(const ir::Graph& graph, EmitTarget target,
                            std::string& out, bool shape_generic = false);

}  // namespace stepjit::tools

#endif  // STEPJIT_TOOLS_EMIT_CODE_H_
