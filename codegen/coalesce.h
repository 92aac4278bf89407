// Dimension coalescing for fusion-region bodies, before the CPU code
// generator lowers them: F dims of size 1 are dropped and adjacent dims
// every value treats alike are merged, as PyTorch's TensorIterator does.
// An NCHW region over [128, 32, 28, 28] that reduces N, H and W becomes
// [128, 32, 784] reducing dims 0 and 2: rows of 784 elements instead of 28,
// so the per-row work is amortized and the inner loop vectorizes.
#ifndef STEPJIT_CODEGEN_COALESCE_H_
#define STEPJIT_CODEGEN_COALESCE_H_

#include <memory>

#include "ir/graph.h"

namespace stepjit::codegen {

// The same computation over coalesced shapes: every value keeps its
// elements in the same row-major order, so kernels lowered from it read and
// write the original operands unchanged. Null when nothing merges, or when
// the body holds what this does not rewrite (row ops, views, reductions
// whose un-kept result is used inside the body, full with a shape).
std::unique_ptr<ir::Graph> CoalesceDims(const ir::Graph& body);

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_COALESCE_H_
