// Fusion region lowering to CUDA C: the body's analysis, expressions, phases
// and kernel signatures (the kernels themselves: cuda_emitter_kernels.cc).
#include "codegen/cuda/cuda_emitter.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "codegen/cuda/cuda_c.h"
#include "codegen/cuda/cuda_layout.h"
#include "codegen/cuda/cuda_math.h"
#include "codegen/cuda/region_emitter.h"
#include "codegen/ir_names.h"
#include "codegen/region_expand.h"
#include "codegen/region_plan.h"
#include "codegen/scalar_op.h"
#include "codegen/sha256.h"
#include "ir/printer.h"
#include "ir/status.h"

namespace stepjit::codegen::cuda {

namespace {

// Bumped whenever the emitted code changes for a given body (it is part of
// the kernel names, hence of every cache key).
constexpr char kLoweringVersion[] = "cuda-lowering-1";
// A shape-generic region's name while it is emitted (EmitRegion then names
// it after its code).
constexpr char kGenericName[] = "sj_generic_region";

}  // namespace

namespace detail {

void Emitter::Analyze(RegionSource& out) {
  for (size_t k = 0; k < body_.params().size(); ++k)
    names_[body_.params()[k]] = absl::StrCat("x", k);
  for (size_t k = 0; k < body_.nodes().size(); ++k)
    names_[body_.nodes()[k]->output()] = absl::StrCat("v", k);
  for (const auto& n : body_.nodes()) {
    absl::flat_hash_set<const Value*>& reads = reads_[n.get()];
    Env probe;
    for (size_t k = 0; k < n->inputs().size(); ++k)
      probe[n->inputs()[k]] = absl::StrCat("sj_operand_", k, "_");
    CudaStatements s;
    absl::StatusOr<std::string> e = IsReduction(n->op())
                                        ? absl::StatusOr<std::string>("")
                                        : Expr(*n, probe, s);
    for (const Value* v : n->inputs()) {
      if (!e.ok() || IsReduction(n->op()) ||
          absl::StrContains(*e + s.text, probe.at(v)))
        reads.insert(v);
    }
  }
  // 0-d values the other kernels read travel through scratch slots; 0-d
  // constants are simply repeated where they are used.
  for (const auto& n : body_.nodes()) {
    if (plan_.domain.at(n->output()) == Domain::kScalar) continue;
    for (const Value* v : n->inputs()) {
      auto it = plan_.domain.find(v);
      if (it == plan_.domain.end() || it->second != Domain::kScalar ||
          slots_.contains(v))
        continue;
      if (v->producer() != nullptr && v->producer()->op() == OpId::kFull)
        continue;
      const int s = static_cast<int>(slots_.size());
      slots_[v] = s;
    }
    if (IsReduction(n->op())) {
      // A row plan's row reductions stay in registers; only its totals
      // fold per-row values through a buffer.
      if (Rows() && plan_.domain.at(n->output()) != Domain::kTotal) continue;
      acc_index_[n.get()] = static_cast<int>(accs_.size());
      accs_.push_back(n.get());
      continue;
    }
    if (plan_.domain.at(n->output()) != Domain::kFull) continue;
    for (const Value* v : n->inputs()) {
      auto it = plan_.domain.find(v);
      if (!body_.IsParam(v) || absl::c_linear_search(bcast_, v)) continue;
      if (it != plan_.domain.end() &&
          (it->second == Domain::kScalar || it->second == Domain::kFull))
        continue;
      bcast_.push_back(v);
    }
  }
  layout_ = PlanLayout(plan_, bcast_, options_.block);
  layout_.sizes = &sizes_;
  out.numel = plan_.f_numel;
  out.reduced_numel = plan_.r_numel;
  out.num_slots = static_cast<int>(slots_.size());
  out.num_accumulators = static_cast<int>(accs_.size());
  out.index64 = layout_.index64;
  out.strategy = layout_.strategy;
  out.chunks = layout_.chunks;
  out.partials = plan_.r_numel * layout_.chunks;
  if (Rows()) {
    row_strategy_ = plan_.row_len <= options_.max_thread_row
                        ? ReductionStrategy::kRowPerThread
                    : plan_.row_len <= kMaxWarpRow
                        ? ReductionStrategy::kRowPerWarp
                        : ReductionStrategy::kRowPerBlock;
    out.strategy = row_strategy_;
    out.chunks = 1;
    out.rows = plan_.rows;
    out.row_len = plan_.row_len;
    out.reduced_numel = plan_.has_totals ? 1 : 0;
    out.partials = accs_.empty() ? 0 : plan_.rows;
  }
}

std::string Emitter::FullValue(const Node& n, DType t) {
  const double v = n.attrs().GetDouble(AttrKey::kValue);
  if (sizes_.generic() && n.attrs().GetString(AttrKey::kRole) == kSizeRole)
    return Convert(sizes_.AsDouble(static_cast<int64_t>(v)), DType::kF64, t);
  return Constant(v, t);
}

void Emitter::Bind(const Node& n, const std::string& e, Env& env,
                   CudaStatements& s) {
  const Value* v = n.output();
  if (IsOrderPreservingView(n.op())) {
    env[v] = e;
    return;
  }
  env[v] = names_.at(v);
  s.Line(absl::StrCat("const ", RegType(v->type().dtype), " ", names_.at(v),
                      " = ", e, ";"));
}

absl::StatusOr<std::string> Emitter::Expr(const Node& n, Env& env,
                                          CudaStatements& s) {
  const OpId op = n.op();
  const DType out = n.output()->type().dtype;
  auto in = [&](size_t k, DType as) {
    const Value* v = n.inputs()[k];
    // Operands the definition ignores (fill_'s self) are never loaded; the
    // name is undefined, so NVRTC would reject any use of it.
    auto it = env.find(v);
    return it == env.end() ? std::string("sj_unread")
                           : Convert(it->second, v->type().dtype, as);
  };
  if (op == OpId::kFull) return FullValue(n, out);
  if (IsOrderPreservingView(op)) return env.at(n.inputs()[0]);
  if (op == OpId::kCast) return in(0, out);
  if (op == OpId::kWhere)
    return absl::StrCat("(", in(0, DType::kBool), " ? ", in(1, out), " : ",
                        in(2, out), ")");
  // Operands are converted to the compute dtype first, as dispatch does.
  const DType compute = ComputeDType(n);
  if (compute == DType::kBool) return Unsupported("bool arithmetic");
  if (ir::IsIntegral(compute) &&
      !(op == OpId::kEq || op == OpId::kNe || op == OpId::kLt ||
        op == OpId::kLe || op == OpId::kGt || op == OpId::kGe)) {
    return Unsupported(absl::StrCat("integer arithmetic (", ir::OpName(op), ")"));
  }
  CudaMath m{s, compute == DType::kF64};
  std::optional<std::string> result =
      ApplyScalarDef(m, n, [&](size_t k) { return in(k, compute); });
  if (!result) return Unsupported(absl::StrCat("op ", ir::OpName(op)));
  return out == DType::kBool ? *result : Round(*result, out);
}

// The nodes of domain `d` (for kFull also the reductions' accumulation),
// then the returns of `d` stored at `index`.
absl::Status Emitter::EmitPhase(Domain d, Env& env, CudaStatements& s,
                                const std::string& index,
                                const std::string& suffix) {
  for (const auto& n : body_.nodes()) {
    const Value* v = n->output();
    if (IsReduction(n->op())) {
      if (d != Domain::kFull && d != Domain::kReduced) continue;
      const std::string a = absl::StrCat("a", acc_index_.at(n.get()));
      if (d == Domain::kFull) {
        const Value* src = n->inputs()[0];
        const std::string x =
            Convert(env.at(src), src->type().dtype, DType::kF64);
        s.Line(n->op() == OpId::kAmax
                   ? absl::StrCat(a, " = sj_amax(", a, ", ", x, ");")
                   : absl::StrCat(a, " += ", x, ";"));
      } else if (d == Domain::kReduced) {
        std::string x = a;
        if (n->op() == OpId::kMean)
          x = absl::StrCat("(", a, " / ", sizes_.AsDouble(layout_.q), ")");
        Bind(*n, Convert(x, DType::kF64, v->type().dtype), env, s);
      }
      continue;
    }
    if (plan_.domain.at(v) != d) continue;
    if (n->op() == OpId::kFull && d == Domain::kScalar && !UsedIn(d, v))
      continue;
    ASSIGN_OR_RETURN(std::string e, Expr(*n, env, s));
    Bind(*n, e, env, s);
  }
  for (size_t k = 0; k < body_.returns().size(); ++k) {
    const Value* r = body_.returns()[k];
    if (plan_.domain.at(r) == d)
      s.Line(Store(r->type().dtype, absl::StrCat("r", k, suffix), index,
                   env.at(r)));
  }
  return absl::OkStatus();
}

// Whether a node of domain `d` reads `v` (the reductions read in kFull), or
// `v` is a return or (for kScalar) a scratch slot stored there.
bool Emitter::UsedIn(Domain d, const Value* v) const {
  if (d == Domain::kScalar && slots_.contains(v)) return true;
  for (const auto& n : body_.nodes()) {
    const Domain nd =
        IsReduction(n->op()) ? Domain::kFull : plan_.domain.at(n->output());
    if (nd == d && reads_.at(n.get()).contains(v)) return true;
  }
  for (const Value* r : body_.returns()) {
    if (r == v && plan_.domain.at(r) == d) return true;
  }
  return false;
}

void Emitter::Prologue(std::initializer_list<Domain> ds, Env& env,
                       CudaStatements& s) {
  if (ds.size() == 1 && *ds.begin() == Domain::kScalar) return;
  auto used = [&](const Value* v) {
    return absl::c_any_of(ds, [&](Domain d) { return UsedIn(d, v); });
  };
  s.Line(absl::StrCat("typedef ", layout_.index64 ? "long long" : "int",
                      " sj_index;"));
  for (const auto& n : body_.nodes()) {
    const Value* v = n->output();
    if (n->op() != OpId::kFull || plan_.domain.at(v) != Domain::kScalar ||
        !used(v))
      continue;
    env[v] = names_.at(v);
    s.Line(absl::StrCat("const ", RegType(v->type().dtype), " ", names_.at(v),
                        " = ", FullValue(*n, v->type().dtype), ";"));
  }
  std::vector<std::pair<int, const Value*>> slots;
  for (const auto& [v, k] : slots_) {
    if (used(v)) slots.push_back({k, v});
  }
  std::sort(slots.begin(), slots.end());
  for (const auto& [k, v] : slots) {
    env[v] = names_.at(v);
    const DType t = v->type().dtype;
    const std::string slot = absl::StrCat("scratch[", k, "]");
    s.Line(absl::StrCat(
        "const ", RegType(t), " ", names_.at(v), " = ",
        t == DType::kBool      ? absl::StrCat(slot, " != 0.0")
        : ir::IsIntegral(t)    ? absl::StrCat("(", RegType(t), ")__double_as_longlong(", slot, ")")
                               : absl::StrCat("(", RegType(t), ")", slot),
        ";"));
  }
}

void Emitter::LoadParams(Domain d, Env& env, CudaStatements& s,
                         const std::string& index, const std::string& suffix) {
  for (size_t k = 0; k < body_.params().size(); ++k) {
    const Value* p = body_.params()[k];
    auto it = plan_.domain.find(p);
    std::string at;
    if (!UsedIn(d, p)) continue;
    if (it != plan_.domain.end() && it->second == d) {
      at = index;
    } else if (d == Domain::kFull && absl::c_linear_search(bcast_, p)) {
      at = layout_.Offset(1 + (absl::c_find(bcast_, p) - bcast_.begin()));
    } else {
      continue;
    }
    env[p] = names_.at(p);
    s.Line(absl::StrCat(
        "const ", RegType(p->type().dtype), " ", names_.at(p), " = ",
        Load(p->type().dtype, absl::StrCat("p", k, suffix), at), ";"));
  }
}

std::vector<std::string> Emitter::Params() const {
  std::vector<std::string> args;
  for (size_t k = 0; k < body_.params().size(); ++k) {
    args.push_back(absl::StrCat(
        "const ", MemType(body_.params()[k]->type().dtype), "* p", k));
  }
  for (size_t k = 0; k < body_.returns().size(); ++k) {
    args.push_back(
        absl::StrCat(MemType(body_.returns()[k]->type().dtype), "* r", k));
  }
  args.push_back("double* scratch");
  for (size_t a = 0; a < accs_.size(); ++a)
    args.push_back(absl::StrCat("double* acc", a));
  if (sizes_.generic()) args.push_back("const sj_dims_t sj_dims");
  return args;
}

std::string Emitter::Signature(const std::string& name) const {
  std::vector<std::string> args = Params();
  if (options_.device_functions) {
    args.push_back("const unsigned sj_bid");
    args.push_back("const unsigned sj_grid");
    return absl::StrCat("__device__ __forceinline__ void ", name, "(",
                        absl::StrJoin(args, ", "), ")");
  }
  return absl::StrCat("extern \"C\" __global__ void ", name, "(",
                      absl::StrJoin(args, ", "), ")");
}

std::string Emitter::Kernel(const std::string& name,
                            const CudaStatements& s) const {
  return absl::StrCat(Signature(name), " {\n", s.text, "}\n");
}

absl::Status Emitter::Run(const std::string& prefix, RegionSource& out) {
  out.name = prefix;
  Analyze(out);
  bool scalar_work = !slots_.empty();
  bool full_work = plan_.r_numel > 0;
  for (const Value* r : body_.returns()) {
    scalar_work |= plan_.domain.at(r) == Domain::kScalar;
    full_work |= plan_.domain.at(r) != Domain::kScalar;
  }
  out.helpers = Rows()          ? static_cast<uint32_t>(kHelperRowReduce)
                : accs_.empty() ? 0u
                                : static_cast<uint32_t>(kHelperReduce);
  for (const Value* p : body_.params()) out.helpers |= DTypeHelpers(p->type().dtype);
  for (const auto& n : body_.nodes()) out.helpers |= DTypeHelpers(n->output()->type().dtype);
  if (scalar_work) RETURN_IF_ERROR(EmitScalar(out));
  if (Rows()) {
    RETURN_IF_ERROR(EmitRowMain(out));
    if (plan_.has_totals) RETURN_IF_ERROR(EmitRowTotals(out));
  } else {
    if (full_work) RETURN_IF_ERROR(EmitMain(out));
    if (plan_.r_numel > 0) RETURN_IF_ERROR(EmitReduced(out));
  }
  out.kernels_text = std::move(text_);
  out.params = Params();
  out.shape_generic = sizes_.generic();
  out.dims = sizes_.values();
  std::vector<std::string> names;
  for (const KernelLaunch& k : out.kernels) names.push_back(k.name);
  if (out.shape_generic) out.helpers |= kHelperDims;
  out.source = absl::StrCat("// stepjit fusion region ", body_.name(), ": ",
                            absl::StrJoin(names, ", "), "\n",
                            Preamble(out.helpers), out.kernels_text);
  return absl::OkStatus();
}

}  // namespace detail

namespace {

// A C identifier from a graph name ([A-Za-z0-9_.]).
std::string Identifier(absl::string_view name) {
  std::string id(name);
  for (char& c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
  }
  return id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))
             ? "r_" + id
             : id;
}

}  // namespace

absl::StatusOr<RegionSource> EmitRegion(const ir::Graph& body,
                                        const EmitOptions& options) {
  if (options.block <= 0 || options.block % 32 != 0 || options.block > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block size ", options.block, " is not a multiple of 32 up to 1024"));
  }
  ASSIGN_OR_RETURN(
      Plan plan, Analyze(body, {.allow_one_element = options.allow_one_element,
                                .allow_integers = true,
                                .allow_row_phases = true}));
  // Names derive from the body's text, so the same region gives the same
  // source (and kernel cache key) in every process.
  const bool thread_rows =
      plan.row_phases > 0 && plan.row_len <= options.max_thread_row;
  EmitOptions used = options;
  used.shape_generic = options.shape_generic && !options.device_functions;
  // A shape-generic region is named after its body with the sizes left out
  // (bodies at other sizes emit the same source).
  const std::string text =
      used.shape_generic ? EraseSizes(ir::Print(body)) : ir::Print(body);
  const std::string hash = ToHex(Sha256Of(absl::StrCat(
      text, kLoweringVersion, ";block=", options.block,
      used.device_functions ? ";device" : "", thread_rows ? ";thread_rows" : "",
      used.shape_generic ? ";generic" : "")));
  RegionSource out;
  // Row ops are lowered from their expansion into primitive steps.
  detail::Emitter emitter(plan.Body(body), plan, used);
  const std::string name =
      absl::StrCat(Identifier(body.name()), "_", hash.substr(0, 12));
  if (!used.shape_generic) {
    RETURN_IF_ERROR(emitter.Run(name, out));
    return out;
  }
  RETURN_IF_ERROR(emitter.Run(kGenericName, out));
  if (out.dims.size() > static_cast<size_t>(kMaxDims)) {
    EmitOptions fixed = options;
    fixed.shape_generic = false;
    return EmitRegion(body, fixed);
  }
  // The layout chosen from the sizes (strategy, chunks) is in the code, not
  // in the erased text: the name covers the code, so that two generic
  // sources never share a name.
  const std::string final_name = absl::StrCat(
      Identifier(body.name()), "_",
      ToHex(Sha256Of(absl::StrCat(hash, out.kernels_text))).substr(0, 12));
  auto rename = [&](std::string& s) {
    s = absl::StrReplaceAll(s, {{kGenericName, final_name}});
  };
  rename(out.name);
  rename(out.source);
  rename(out.kernels_text);
  for (KernelLaunch& k : out.kernels) rename(k.name);
  return out;
}

std::string CombineSources(absl::Span<const RegionSource* const> regions) {
  uint32_t helpers = 0;
  std::vector<const RegionSource*>
      unique;  // one copy of each (same name, same body)
  for (const RegionSource* r : regions) {
    if (absl::c_any_of(
            unique, [&](const RegionSource* u) { return u->name == r->name; }))
      continue;
    helpers |= r->helpers;
    unique.push_back(r);
  }
  std::vector<std::string> names;
  for (const RegionSource* r : unique) names.push_back(r->name);
  std::string s =
      absl::StrCat("// stepjit regions: ", absl::StrJoin(names, ", "), "\n",
                   Preamble(helpers));
  for (const RegionSource* r : unique) absl::StrAppend(&s, r->kernels_text);
  return s;
}

}  // namespace stepjit::codegen::cuda
