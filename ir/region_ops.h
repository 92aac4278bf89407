// Which nodes may join a fusion region: the one rule the fuse pass groups by
// and the region code generators admit (codegen/region_plan.h).
#ifndef STEPJIT_IR_REGION_OPS_H_
#define STEPJIT_IR_REGION_OPS_H_

#include <cstdint>
#include <optional>

#include "ir/graph.h"

namespace stepjit::ir {

enum class RegionRole : uint8_t {
  kNone,         // stays a node of its own (matmul, argmax, data movement...)
  kElementwise,  // elementwise ops, in-place updates, order-preserving views
  kReduce,       // reductions and the row ops lowered as row reductions
};

// The role of `n` in a fusion region. Row ops (softmax, log_softmax,
// layer_norm, var, cross_entropy, mse_loss) reduce only when they reduce
// trailing dims: softmax and log_softmax over the last dim, var over a
// trailing set of dims; other forms run as their eager kernels.
RegionRole RegionRoleOf(const Node& n);

// The rows a reducing node of a region (RegionRoleOf kReduce) reduces: its
// input seen as `rows` rows of `row_len` elements, the reduced dims
// trailing. nullopt for reductions over leading dims and for mse_loss (a
// total over every element). Reductions of one such extent, and the
// elementwise work between them that reads their results broadcast back
// over the rows, form one row region (codegen/region_plan.h's row plan).
struct RowExtent {
  int64_t rows = 0;
  int64_t row_len = 0;
  bool operator==(const RowExtent&) const = default;
};
std::optional<RowExtent> RowExtentOf(const Node& n);

// A 0-d full, a constant: fuse and region splitting copy it into each
// region that reads it instead of making it a region input. False for null.
bool IsScalarConstant(const Node* n);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_REGION_OPS_H_
