// memory-plan: buffer aliasing, liveness, in-place decisions and peak estimate.
#include "passes/memory_plan.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "ir/status.h"

namespace stepjit::passes {

using ir::Node;
using ir::NodeKind;
using ir::Value;

namespace {

constexpr int kEnd = std::numeric_limits<int>::max();

int64_t Bytes(const Value* v) {
  return ir::NumElements(v->type().shape) * ir::DTypeSize(v->type().dtype);
}

struct Result {
  bool changed = false;
  int64_t peak = 0;
  // For each return of the graph: the parameter whose buffer it lives in, or -1.
  std::vector<int> return_param;
};

// Plans one graph. `writable[i]` says whether param i's buffer may be written.
Result Plan(ir::Graph& g, const std::vector<bool>& writable, MemoryPlanStats* stats) {
  Result result;
  absl::flat_hash_map<const Value*, int> buffer;  // value -> buffer id
  std::vector<int> buffer_param;                  // buffer id -> param index or -1
  std::vector<int64_t> buffer_bytes;
  auto new_buffer = [&](const Value* v, int param) {
    buffer[v] = static_cast<int>(buffer_param.size());
    buffer_param.push_back(param);
    buffer_bytes.push_back(param >= 0 ? 0 : Bytes(v));
  };
  for (size_t i = 0; i < g.params().size(); ++i) new_buffer(g.params()[i], static_cast<int>(i));

  const auto& nodes = g.nodes();
  // Positions of reads per value (assigns read their value, not their target).
  absl::flat_hash_map<const Value*, std::vector<int>> reads;
  for (size_t pos = 0; pos < nodes.size(); ++pos) {
    const Node* n = nodes[pos].get();
    for (size_t k = 0; k < n->inputs().size(); ++k) {
      if (n->kind() == NodeKind::kAssign && k == 0) continue;
      reads[n->inputs()[k]].push_back(static_cast<int>(pos));
    }
  }
  for (const Value* r : g.returns()) reads[r].push_back(kEnd);
  // Values per buffer, filled as we go (a value joins its buffer when made).
  std::vector<std::vector<const Value*>> residents(buffer_param.size());
  for (const Value* p : g.params()) residents[buffer.at(p)].push_back(p);
  // Buffer read after `pos` by anything living in it now or created into it
  // later? Later residents are created by this scan, so check as we go: a
  // write at `pos` is legal iff no current resident is read after `pos`.
  auto read_after = [&](int b, int pos) {
    for (const Value* v : residents[b]) {
      auto it = reads.find(v);
      if (it == reads.end()) continue;
      for (int r : it->second) {
        if (r > pos) return true;
      }
    }
    return false;
  };
  auto writable_buffer = [&](int b) {
    const int p = buffer_param[b];
    return p < 0 || writable[p];
  };
  auto join = [&](const Value* v, int b) {
    buffer[v] = b;
    residents[b].push_back(v);
  };
  auto fresh = [&](const Value* v) {
    new_buffer(v, -1);
    residents.emplace_back();
    residents.back().push_back(v);
  };

  std::vector<int64_t> transient(nodes.size(), 0);  // region temporaries
  for (size_t pos = 0; pos < nodes.size(); ++pos) {
    Node* n = nodes[pos].get();
    const int ipos = static_cast<int>(pos);
    if (n->kind() == NodeKind::kAssign) continue;
    if (n->kind() == NodeKind::kOp && ir::IsView(n->op())) {
      join(n->output(), buffer.at(n->inputs()[0]));
      continue;
    }
    if (n->kind() == NodeKind::kOp && ir::IsInplace(n->op())) {
      const int b = buffer.at(n->inputs()[0]);
      const bool ok = writable_buffer(b) && !read_after(b, ipos);
      if (n->attrs().Find(ir::AttrKey::kInPlace) == nullptr ||
          n->attrs().GetBool(ir::AttrKey::kInPlace) != ok) {
        n->mutable_attrs().Set(ir::AttrKey::kInPlace, ok);
        result.changed = true;
      }
      if (stats) {
        ok ? ++stats->in_place : ++stats->copies;
        if (ok) stats->bytes_saved += Bytes(n->output());
      }
      ok ? join(n->output(), b) : fresh(n->output());
      continue;
    }
    if (n->kind() == NodeKind::kFusion) {
      std::vector<bool> donate;
      for (const Value* in : n->inputs()) {
        const int b = buffer.at(in);
        donate.push_back(writable_buffer(b) && !read_after(b, ipos));
      }
      // An input passed twice must not be donated (two names, one buffer).
      for (size_t i = 0; i < n->inputs().size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          if (n->inputs()[i] == n->inputs()[j]) donate[i] = donate[j] = false;
        }
      }
      Result inner = Plan(*n->body(), donate, stats);
      result.changed |= inner.changed;
      transient[pos] = inner.peak;
      for (size_t k = 0; k < n->outputs().size(); ++k) {
        const int p = inner.return_param[k];
        p >= 0 ? join(n->outputs()[k], buffer.at(n->inputs()[p])) : fresh(n->outputs()[k]);
      }
      continue;
    }
    for (const Value* out : n->outputs()) fresh(out);
  }
  for (const Value* r : g.returns()) {
    result.return_param.push_back(buffer_param[buffer.at(r)]);
  }
  // Peak: walk the order; a buffer lives from its first write to the last
  // read of any resident.
  const int num_buffers = static_cast<int>(buffer_param.size());
  std::vector<int> born(num_buffers, kEnd), dies(num_buffers, -1);
  absl::flat_hash_map<const Value*, int> made_at;
  for (size_t pos = 0; pos < nodes.size(); ++pos) {
    for (const Value* v : nodes[pos]->outputs()) made_at[v] = static_cast<int>(pos);
  }
  for (int b = 0; b < num_buffers; ++b) {
    for (const Value* v : residents[b]) {
      auto m = made_at.find(v);
      if (m != made_at.end()) born[b] = std::min(born[b], m->second);
      auto it = reads.find(v);
      if (it != reads.end()) {
        for (int r : it->second) dies[b] = std::max(dies[b], r == kEnd ? static_cast<int>(nodes.size()) : r);
      }
    }
  }
  for (size_t pos = 0; pos < nodes.size(); ++pos) {
    int64_t live = transient[pos];
    for (int b = 0; b < num_buffers; ++b) {
      if (buffer_bytes[b] > 0 && born[b] <= static_cast<int>(pos) &&
          std::max(dies[b], born[b]) >= static_cast<int>(pos)) {
        live += buffer_bytes[b];
      }
    }
    result.peak = std::max(result.peak, live);
  }
  return result;
}

}  // namespace

absl::StatusOr<bool> PlanMemory(ir::Graph& graph, MemoryPlanStats* stats) {
  std::vector<bool> writable;
  for (const Value* p : graph.params()) {
    writable.push_back(graph.param_kind(p) == ir::ParamKind::kState);
  }
  Result r = Plan(graph, writable, stats);
  if (stats) stats->planned_peak_bytes = r.peak;
  return r.changed;
}

absl::StatusOr<bool> PlanMemoryPass(ir::Graph& graph, PassStats& stats) {
  MemoryPlanStats m;
  ASSIGN_OR_RETURN(bool changed, PlanMemory(graph, &m));
  stats.Add(kPlannedPeakBytes, m.planned_peak_bytes);
  stats.Add(kInPlaceUpdates, m.in_place);
  stats.Add(kCopiedUpdates, m.copies);
  stats.Add(kBytesSaved, m.bytes_saved);
  return changed;
}

}  // namespace stepjit::passes
