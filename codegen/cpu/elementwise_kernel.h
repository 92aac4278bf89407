// CPU code generation for elementwise fusion regions: IR body -> LLVM IR -> ORC LLJIT.
#ifndef STEPJIT_CODEGEN_CPU_ELEMENTWISE_KERNEL_H_
#define STEPJIT_CODEGEN_CPU_ELEMENTWISE_KERNEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace stepjit::codegen::cpu {

// A compiled region: ptrs holds one pointer per body parameter (in order)
// then one per body return; elements [begin, end) of every full-size
// operand are processed, 0-d operands are read once.
using ElementwiseFn = void (*)(void* const* ptrs, int64_t begin, int64_t end);

struct ElementwiseKernel {
  ElementwiseFn fn = nullptr;
  int64_t numel = 0;         // elements per full-size operand
  std::string name;          // the kernel's symbol
  std::string llvm_ir_raw;   // LLVM IR as lowered, for dumps
  std::string llvm_ir;       // LLVM IR after the -O2 pipeline, for dumps
};

// Lowers and JIT-compiles `body` when every node is elementwise (or a 0-d
// constant or an order-preserving view) over f32/f64/bool values that are
// either full-size or 0-d. Unimplemented for anything else: the caller
// then interprets the region.
absl::StatusOr<ElementwiseKernel> CompileElementwise(const ir::Graph& body);

}  // namespace stepjit::codegen::cpu

#endif  // STEPJIT_CODEGEN_CPU_ELEMENTWISE_KERNEL_H_
