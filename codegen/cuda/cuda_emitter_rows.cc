// The row plan's kernels (codegen/region_plan.h; launch shapes in
// cuda_emitter.h): rows owned by a warp or a block, one strided pass over
// the row per phase of row reductions, the final pass storing the full-size
// returns, and the totals folded over rows in row order.
#include <algorithm>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/region_emitter.h"
#include "codegen/ir_names.h"
#include "codegen/region_rows.h"
#include "ir/status.h"

namespace stepjit::codegen::cuda::detail {

namespace {

std::string AccumulatorInit(OpId op) {
  return op == OpId::kAmax ? "-__longlong_as_double(0x7ff0000000000000LL)"
                           : "0.0";
}

std::string Fold(OpId op, const std::string& acc, const std::string& x) {
  return op == OpId::kAmax
             ? absl::StrCat(acc, " = sj_amax(", acc, ", ", x, ");")
             : absl::StrCat(acc, " += ", x, ";");
}

// The name of a row reduction's register accumulator.
std::string RowAcc(const std::string& value_name) {
  return absl::StrCat(value_name, "_acc");
}

// The name of a broadcast param's offset at the row start.
std::string RowOffset(size_t param) { return absl::StrCat("o", param); }

}  // namespace

absl::Status Emitter::EmitRowMain(RegionSource& out) {
  const bool warp = row_strategy_ == ReductionStrategy::kRowPerWarp;
  const bool thread = row_strategy_ == ReductionStrategy::kRowPerThread;
  CudaStatements s;
  Env env;
  Prologue({Domain::kFull, Domain::kReduced}, env, s);
  const int64_t rows_per_block = warp     ? options_.block / 32
                                 : thread ? options_.block
                                          : 1;
  if (thread) {
    s.Line(absl::StrCat("for (sj_index r = (sj_index)", bid_,
                        " * blockDim.x + threadIdx.x; r < ", Size(plan_.rows),
                        "; r += (sj_index)", grid_, " * blockDim.x) {"));
  } else if (warp) {
    s.Line("const sj_index sj_lane = threadIdx.x & 31;");
    s.Line("const sj_index sj_warps = blockDim.x >> 5;");
    s.Line(absl::StrCat("for (sj_index r = (sj_index)", bid_,
                        " * sj_warps + (threadIdx.x >> 5); r < ",
                        Size(plan_.rows), "; r += (sj_index)", grid_,
                        " * sj_warps) {"));
  } else {
    s.Line(absl::StrCat("for (sj_index r = ", bid_, "; r < ", Size(plan_.rows),
                        "; r += ", grid_, ") {"));
  }
  s.indent = "    ";
  s.Line(absl::StrCat("const sj_index row = r * ", Size(plan_.row_len), ";"));
  RowStart(env, s);
  RETURN_IF_ERROR(RowValues(0, env, s));
  for (int phase = 1; phase <= plan_.row_phases; ++phase) {
    RETURN_IF_ERROR(RowPass(phase, env, s));
    RETURN_IF_ERROR(RowValues(phase, env, s));
  }
  if (absl::c_any_of(body_.returns(), [&](const Value* r) {
        return plan_.domain.at(r) == Domain::kFull;
      }))
    RETURN_IF_ERROR(RowPass(plan_.row_phases + 1, env, s));
  // The row's own results, once per row.
  s.Line(thread ? "{"
                : absl::StrCat("if (", warp ? "sj_lane" : "threadIdx.x",
                               " == 0) {"));
  s.indent = "      ";
  StoreRowReturns(Domain::kReduced, env, s, "r");
  for (size_t a = 0; a < accs_.size(); ++a) {
    const Value* src = accs_[a]->inputs()[0];
    if (plan_.domain.at(src) != Domain::kReduced)
      return absl::UnimplementedError("a total of values over all rows");
    s.Line(absl::StrCat(
        "acc", a,
        "[r] = ", Convert(env.at(src), src->type().dtype, DType::kF64), ";"));
  }
  s.indent = "    ";
  s.Line("}");
  s.indent = "  ";
  s.Line("}");
  const std::string name = absl::StrCat(out.name, "_main");
  absl::StrAppend(&text_, Kernel(name, s));
  const int64_t grid = (plan_.rows + rows_per_block - 1) / rows_per_block;
  out.kernels.push_back({name, std::min(grid, kMaxGrid), options_.block});
  return absl::OkStatus();
}

// The broadcast params' offsets at row r (F's kept dims unravelled from r)
// and the row's per-row params.
void Emitter::RowStart(Env& env, CudaStatements& s) {
  const ir::Shape& f = plan_.f_shape;
  const size_t rank = f.size();
  for (size_t k = 0; k < body_.params().size(); ++k) {
    const Value* p = body_.params()[k];
    if (plan_.row_stride.contains(p)) {
      const std::vector<int64_t> strides = BroadcastStrides(p->type().shape, f);
      std::vector<std::string> terms;
      int64_t inner = 1;  // kept elements after dim d
      for (size_t d = rank; d-- > 0;) {
        if (plan_.f_reduced[d]) continue;
        if (strides[d] != 0 && f[d] != 1) {
          std::string idx = inner == 1
                                ? std::string("r")
                                : absl::StrCat("(r / ", Size(inner), ")");
          if (inner * f[d] < plan_.rows)
            idx = absl::StrCat("(", idx, " % ", Size(f[d]), ")");
          terms.push_back(strides[d] == 1
                              ? idx
                              : absl::StrCat(idx, " * ", Size(strides[d])));
        }
        inner *= f[d];
      }
      s.Line(absl::StrCat("const sj_index ", RowOffset(k), " = ",
                          terms.empty() ? "0" : absl::StrJoin(terms, " + "),
                          ";"));
      continue;
    }
    auto it = plan_.domain.find(p);
    if (it == plan_.domain.end() || it->second != Domain::kReduced ||
        !(UsedIn(Domain::kFull, p) || UsedIn(Domain::kReduced, p)))
      continue;
    env[p] = names_.at(p);
    s.Line(absl::StrCat("const ", RegType(p->type().dtype), " ", names_.at(p),
                        " = ", Load(p->type().dtype, absl::StrCat("p", k), "r"),
                        ";"));
  }
}

// The row values of `level` that are not reductions' results.
absl::Status Emitter::RowValues(int level, Env& env, CudaStatements& s) {
  for (const auto& n : body_.nodes()) {
    const Value* v = n->output();
    if (IsReduction(n->op()) || plan_.domain.at(v) != Domain::kReduced ||
        plan_.level.at(v) != level)
      continue;
    ASSIGN_OR_RETURN(std::string e, Expr(*n, env, s));
    Bind(*n, e, env, s);
  }
  return absl::OkStatus();
}

// One strided loop over the row: phase `phase`'s reductions accumulate in
// double and are all-reduced after it; the final pass (phase row_phases + 1)
// stores the full-size returns. Each pass recomputes the full values it
// needs from the region's inputs, as the CPU lowering does.
absl::Status Emitter::RowPass(int phase, Env& env, CudaStatements& s) {
  const bool final = phase > plan_.row_phases;
  const bool warp = row_strategy_ == ReductionStrategy::kRowPerWarp;
  const bool thread = row_strategy_ == ReductionStrategy::kRowPerThread;
  const RowPassWork work = codegen::RowPass(body_, plan_, phase);
  const std::vector<const Node*>& reds = work.reductions;
  const absl::flat_hash_set<const Node*>& nodes = work.nodes;
  const absl::flat_hash_set<const Value*>& read = work.read;
  s.Line(final ? "// final pass: the full-size returns"
               : absl::StrCat("// phase ", phase));
  for (const Node* n : reds) {
    s.Line(absl::StrCat("double ", RowAcc(names_.at(n->output())), " = ",
                        AccumulatorInit(n->op()), ";"));
  }
  s.Line(absl::StrCat("for (sj_index j = ",
                      thread ? "0"
                      : warp ? "sj_lane"
                             : "threadIdx.x",
                      "; j < ", Size(plan_.row_len), "; j += ",
                      thread ? "1"
                      : warp ? "32"
                             : "blockDim.x",
                      ") {"));
  const std::string outer_indent = s.indent;
  s.indent += "  ";
  s.Line("const sj_index i = row + j;");
  Env inner = env;
  for (size_t k = 0; k < body_.params().size(); ++k) {
    const Value* p = body_.params()[k];
    if (!read.contains(p)) continue;
    std::string at;
    if (auto it = plan_.domain.find(p);
        it != plan_.domain.end() && it->second == Domain::kFull) {
      at = "i";
    } else if (auto st = plan_.row_stride.find(p);
               st != plan_.row_stride.end()) {
      at = st->second == 0 ? RowOffset(k) : absl::StrCat(RowOffset(k), " + j");
    } else {
      continue;
    }
    inner[p] = names_.at(p);
    s.Line(absl::StrCat("const ", RegType(p->type().dtype), " ", names_.at(p),
                        " = ", Load(p->type().dtype, absl::StrCat("p", k), at),
                        ";"));
  }
  for (const auto& n : body_.nodes()) {
    if (!nodes.contains(n.get())) continue;
    const Value* v = n->output();
    std::string e;
    if (n->op() == OpId::kArange) {
      e = Convert("(double)j", DType::kF64, v->type().dtype);
    } else {
      ASSIGN_OR_RETURN(e, Expr(*n, inner, s));
    }
    Bind(*n, e, inner, s);
  }
  for (const Node* n : reds) {
    const Value* src = n->inputs()[0];
    s.Line(Fold(n->op(), RowAcc(names_.at(n->output())),
                Convert(inner.at(src), src->type().dtype, DType::kF64)));
  }
  if (final) StoreRowReturns(Domain::kFull, inner, s, "i");
  s.indent = outer_indent;
  s.Line("}");
  for (const Node* n : reds) {
    const Value* v = n->output();
    const std::string acc = RowAcc(names_.at(v));
    if (!thread)
      s.Line(absl::StrCat(acc, " = sj_", warp ? "warp" : "block", "_all",
                          n->op() == OpId::kAmax ? "amax" : "sum", "(", acc,
                          ");"));
    const std::string x =
        n->op() == OpId::kMean
            ? absl::StrCat(acc, " / ", sizes_.AsDouble(plan_.row_len))
            : acc;
    Bind(*n, Convert(x, DType::kF64, v->type().dtype), env, s);
  }
  return absl::OkStatus();
}

void Emitter::StoreRowReturns(Domain d, const Env& env, CudaStatements& s,
                              const std::string& index) {
  for (size_t k = 0; k < body_.returns().size(); ++k) {
    const Value* r = body_.returns()[k];
    if (plan_.domain.at(r) == d)
      s.Line(Store(r->type().dtype, absl::StrCat("r", k), index, env.at(r)));
  }
}

// One thread folds each total's per-row values in row order, then computes
// and stores the 0-d values that follow.
absl::Status Emitter::EmitRowTotals(RegionSource& out) {
  CudaStatements s;
  Env env;
  s.Line("if (threadIdx.x != 0) return;");
  Prologue({Domain::kTotal}, env, s);
  for (size_t a = 0; a < accs_.size(); ++a) {
    const std::string acc = absl::StrCat("a", a);
    s.Line(absl::StrCat("double ", acc, " = ", AccumulatorInit(accs_[a]->op()),
                        ";"));
    s.Line(
        absl::StrCat("for (sj_index r = 0; r < ", Size(plan_.rows), "; ++r) ",
                     Fold(accs_[a]->op(), acc, absl::StrCat("acc", a, "[r]"))));
  }
  for (const auto& n : body_.nodes()) {
    const Value* v = n->output();
    if (plan_.domain.at(v) != Domain::kTotal) continue;
    std::string e;
    if (IsReduction(n->op())) {
      const std::string acc = absl::StrCat("a", acc_index_.at(n.get()));
      e = Convert(n->op() == OpId::kMean
                      ? absl::StrCat(acc, " / ", sizes_.AsDouble(plan_.rows))
                      : acc,
                  DType::kF64, v->type().dtype);
    } else {
      ASSIGN_OR_RETURN(e, Expr(*n, env, s));
    }
    Bind(*n, e, env, s);
  }
  StoreRowReturns(Domain::kTotal, env, s, "0");
  const std::string name = absl::StrCat(out.name, "_reduced");
  absl::StrAppend(&text_, Kernel(name, s));
  out.kernels.push_back({name, 1, options_.block});
  return absl::OkStatus();
}

}  // namespace stepjit::codegen::cuda::detail
