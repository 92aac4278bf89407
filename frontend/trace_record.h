// TraceRecord: what a trace recorded, in a form two traces of one step compare
// in.
//
// A compiled step keeps the record of its trace (taken before any pass ran)
// and compares it with a shape-only re-trace of a later call: ops,
// operands, attributes (the constants host values became), result types,
// which tensors were bound as state (by identity), what was returned and
// which .grad bindings were made. Random ops compare without their seed
// and absolute offset: replays draw fresh numbers from the live generator,
// so only which draws are shared matters.
#ifndef STEPJIT_FRONTEND_TRACE_RECORD_H_
#define STEPJIT_FRONTEND_TRACE_RECORD_H_

#include <string>
#include <utility>
#include <vector>

#include "frontend/tracer.h"
#include "ir/attrs.h"
#include "ir/graph.h"

namespace stepjit::frontend {

struct TraceRecord {
  struct Param {
    ir::ParamKind kind;
    ir::TensorType type;
    const TensorImpl* state = nullptr;  // identity of a state param's tensor
  };
  struct Node {
    ir::NodeKind kind;
    ir::OpId op;
    std::vector<int> inputs;  // params first, then node results, in order
    ir::Attrs attrs;
    ir::TensorType type;
  };
  std::vector<Param> params;
  std::vector<Node> nodes;
  std::vector<int> returns;
  int num_outputs = 0;
  std::vector<std::pair<const TensorImpl*, int>> grad_bindings;
};

// The record of `trace`, whose graph no pass has changed yet.
TraceRecord RecordTrace(const Trace& trace);

// "" when `now` records the same step as `traced`, else the first difference,
// worded for a user: which op, which constant or which tensor changed, and
// what to do about it.
std::string DiffTraces(const TraceRecord& traced, const TraceRecord& now);

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_TRACE_RECORD_H_
