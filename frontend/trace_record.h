// TraceRecord: what a step did in one call, as the tracer records it: the form
// two calls of one step compare in, and the source of a traced graph.
//
// The tracer records ops as they dispatch (operands as numbers, attributes
// and result types as given), the tensors read from outside (state, by
// identity), the write-backs, what was returned and which .grad bindings
// were made. A compiled step keeps the record of its trace and compares each
// later call's record with it (frontend/verify.h); the graph the passes
// optimize is built from it (BuildGraph). Random ops compare without their
// seed and absolute offset: replays draw fresh numbers from the live
// generator, so only which draws share a slice matters.
#ifndef STEPJIT_FRONTEND_TRACE_RECORD_H_
#define STEPJIT_FRONTEND_TRACE_RECORD_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/graph.h"
#include "runtime/device.h"

namespace stepjit {
struct TensorImpl;
}

namespace stepjit::frontend {

struct TraceRecord {
  // An operand: param p is -(p + 1), the result of node n is n.
  static int ParamId(size_t p) { return -static_cast<int>(p) - 1; }
  struct Param {
    ir::ParamKind kind;
    ir::TensorType type;
    const TensorImpl* state = nullptr;  // identity of a state param's tensor
    bool operator==(const Param&) const = default;
  };
  struct Node {
    ir::NodeKind kind;  // kOp, or kAssign (inputs: the state param, its value)
    ir::OpId op = ir::OpId{};
    absl::InlinedVector<int, 4> inputs;
    ir::Attrs attrs;      // as dispatched (random ops: this call's draw)
    ir::TensorType type;  // kOp only
    // Random ops: which of the call's distinct draws (offsets) this is.
    int random_draw = -1;
    // A lifted host number (IsLiftable): its value is an argument of the
    // compiled program, given per call, not part of what must match.
    bool lifted = false;
  };
  std::vector<Param> params;
  std::vector<Node> nodes;
  std::vector<int> returns;
  int num_outputs = 0;
  std::vector<std::pair<const TensorImpl*, int>> grad_bindings;
  // Library routines (runtime::RecordedRoutine: an optimizer's step) whose
  // nodes [begin, end) depend only on `key` and on `operands` (the operands
  // their tensors held when they began; `after`: when they ended), in
  // order. A later call that begins one at node `begin` with the same key on
  // the same operands does exactly those nodes again, so a recording call
  // takes them from here instead of dispatching them.
  // `grads_set`: the .grad bindings the routine made, in order: (index
  // into its tensors of the leaf, the operand bound).
  // A routine with a result (a module's forward) also has `result` (one of
  // its nodes, on `result_device`) and whether it required grad; it writes
  // none of its tensors and binds no .grad.
  struct Routine {
    size_t begin = 0, end = 0;
    std::vector<uint64_t> key;
    std::vector<int> operands, after;
    std::vector<std::pair<int, int>> grads_set;
    int result = -1;
    bool result_requires_grad = false;
    Device result_device;
    // The host flags (a module's training flag) its ops read, with the
    // values they had: a later call stands in for it only while they keep
    // them.
    struct Flag {
      std::shared_ptr<const bool> flag;
      bool value = false;
      const char* what = "";
    };
    std::vector<Flag> flags;
    // Its lifted nodes (IsLiftable), whose values a stand-in passes on.
    std::vector<size_t> lifted;
    // Random draws: its random nodes; the draws it made first (their index
    // among the call's draws, in order, and their offset from the default
    // generator's offset when it began); how far it advanced the generator.
    // A stand-in makes the same draws from where the generator is now.
    std::vector<size_t> random_nodes;
    std::vector<std::pair<int, int64_t>> new_draws;
    uint64_t generator_advance = 0;
  };
  std::vector<Routine> routines;
  // The routine that begins at node `begin`, or nullptr.
  const Routine* RoutineAt(size_t begin) const;
  // Sets each routine's `lifted` from its nodes' flags (after they change).
  void IndexLifted();
};

// Whether `n` is a host number entering the graph (a 0-d floating-point
// `full`: a captured double, a loss weight, clip_grad_norm_'s max_norm),
// which a specialization may take as an argument instead of a constant.
bool IsLiftable(const TraceRecord::Node& n);

// When `now` differs from `traced` only in the values of liftable numbers
// (and is otherwise the same step), their node indices; else empty.
std::vector<size_t> ScalarOnlyDiff(const TraceRecord& traced,
                                   const TraceRecord& now);

// Whether `now` records the same step as `traced` except for tensor sizes
// (and the attributes that carry them: view and expand shapes): the same
// params (kinds, dtypes, ranks, state identities), ops, operands, random
// draws, result dtypes and ranks, write-backs, returns and .grad bindings.
// A call with new input sizes that records this runs the same step at other
// sizes: a new concrete shape of the same specialization.
bool SameUpToSizes(const TraceRecord& traced, const TraceRecord& now);

// Whether two recorded nodes are the same op on the same operands with the
// same attributes (random ops: the same draw, whatever its seed and offset)
// and result type.
bool SameNode(const TraceRecord::Node& a, ir::NodeKind kind, ir::OpId op,
              absl::Span<const int> inputs, const ir::Attrs& attrs,
              const ir::TensorType& type, int random_draw);

// "" when `now` records the same step as `traced`, else the first difference,
// worded for a user: which op, which constant or which tensor changed, and
// what to do about it.
std::string DiffTraces(const TraceRecord& traced, const TraceRecord& now);

// The graph `record` describes, named `name`: inputs %x<i>, state %s<j>,
// and with `lift`, each lifted number as one more input %c<k> after the
// step's own (else a constant with its recorded value). `extra_returns`
// (operands) are returned after the record's own returns (without
// `returns`, alone); without `write_back` the assigns are left out.
struct GraphOptions {
  bool lift = true;
  bool write_back = true;
  bool returns = true;
};
std::unique_ptr<ir::Graph> BuildGraph(const TraceRecord& record,
                                      const std::string& name,
                                      absl::Span<const int> extra_returns = {},
                                      GraphOptions options = {});

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_TRACE_RECORD_H_
