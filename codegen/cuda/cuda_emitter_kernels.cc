// The kernels of a fusion region: the scalar kernel, the main kernel over F
// (a grid-stride loop, vectorized where aligned, or reduction partials) and
// the reduced kernel over R.
#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/region_emitter.h"
#include "codegen/ir_names.h"
#include "ir/status.h"

namespace stepjit::codegen::cuda::detail {

absl::Status Emitter::EmitScalar(RegionSource& out) {
  CudaStatements s;
  Env env;
  Prologue({Domain::kScalar}, env, s);
  LoadParams(Domain::kScalar, env, s, "0");
  RETURN_IF_ERROR(EmitPhase(Domain::kScalar, env, s, "0"));
  std::vector<std::pair<int, const Value*>> slots;
  for (const auto& [v, k] : slots_) slots.push_back({k, v});
  std::sort(slots.begin(), slots.end());
  // Integers travel as their bits, which a double could not hold exactly.
  for (const auto& [k, v] : slots) {
    s.Line(absl::StrCat("scratch[", k, "] = ",
                        ir::IsIntegral(v->type().dtype)
                            ? absl::StrCat("__longlong_as_double((long long)", env.at(v), ")")
                            : absl::StrCat("(double)", env.at(v)),
                        ";"));
  }
  const std::string name = absl::StrCat(out.name, "_scalar");
  absl::StrAppend(&text_, Kernel(name, s));
  out.kernels.push_back({name, 1, 1});
  return absl::OkStatus();
}

// A pure elementwise region reads and writes kVector elements per thread as
// one vector (16 bytes of f32) when every pointer is aligned for it: each
// lane runs the scalar code in its own scope.
absl::Status Emitter::EmitVectorLoop(CudaStatements& s, const Env& env) {
  std::vector<std::string> aligned, loads, stores;
  auto vec = [](DType t) {
    return absl::StrCat("sj_vec<", MemType(t), ", ", kVector, ">");
  };
  auto check = [&](const std::string& ptr, DType t) {
    aligned.push_back(absl::StrCat("(unsigned long long)", ptr, " % ",
                                   kVector * ir::DTypeSize(t)));
  };
  for (size_t k = 0; k < body_.params().size(); ++k) {
    const Value* p = body_.params()[k];
    auto it = plan_.domain.find(p);
    if (it == plan_.domain.end() || it->second != Domain::kFull ||
        !UsedIn(Domain::kFull, p)) {
      continue;
    }
    const DType t = p->type().dtype;
    check(absl::StrCat("p", k), t);
    loads.push_back(absl::StrCat("const ", vec(t), " p", k,
                                 "v = reinterpret_cast<const ", vec(t), "*>(p",
                                 k, ")[j];"));
  }
  std::vector<size_t> full_returns;
  for (size_t k = 0; k < body_.returns().size(); ++k) {
    const DType t = body_.returns()[k]->type().dtype;
    if (plan_.domain.at(body_.returns()[k]) != Domain::kFull) continue;
    check(absl::StrCat("r", k), t);
    loads.push_back(absl::StrCat(vec(t), " r", k, "v;"));
    stores.push_back(absl::StrCat("reinterpret_cast<", vec(t), "*>(r", k,
                                  ")[j] = r", k, "v;"));
  }
  s.Line(absl::StrCat("const bool sj_aligned = (",
                      absl::StrJoin(aligned, " | "), ") == 0;"));
  s.Line("if (sj_aligned) {");
  s.Line(absl::StrCat("  for (sj_index j = (sj_index)", bid_,
                      " * blockDim.x + threadIdx.x; "
                      "j < ",
                      Size(plan_.f_numel / kVector), "; j += (sj_index)", grid_,
                      " * blockDim.x) {"));
  s.indent = "      ";
  for (const std::string& l : loads) s.Line(l);
  for (int lane = 0; lane < kVector; ++lane) {
    s.Line("{");
    s.indent = "        ";
    Env inner = env;
    const std::string at = absl::StrCat(lane);
    LoadParams(Domain::kFull, inner, s, at, "v.v");
    RETURN_IF_ERROR(EmitPhase(Domain::kFull, inner, s, at, "v.v"));
    s.indent = "      ";
    s.Line("}");
  }
  for (const std::string& l : stores) s.Line(l);
  s.indent = "  ";
  s.Line("  }");
  s.Line("}");
  return absl::OkStatus();
}

absl::Status Emitter::EmitMain(RegionSource& out) {
  CudaStatements s;
  Env env;
  Prologue({Domain::kFull}, env, s);
  const std::string name = absl::StrCat(out.name, "_main");
  const int block = options_.block;
  auto init_accs = [&] {
    for (size_t a = 0; a < accs_.size(); ++a) {
      s.Line(absl::StrCat("double a", a, " = ",
                          accs_[a]->op() == OpId::kAmax
                              ? "-__longlong_as_double(0x7ff0000000000000LL)"
                              : "0.0",
                          ";"));
    }
  };
  // The loop body at F's element i, given the d<j> it needs.
  auto element = [&](CudaStatements& b) -> absl::Status {
    Env inner = env;
    LoadParams(Domain::kFull, inner, b, "i");
    return EmitPhase(Domain::kFull, inner, b, "i");
  };
  // Inside a loop over partial results: the reduced element r and chunk c
  // of this partial (from `r_expr` and `c_expr`), its bounds and
  // accumulators, and the loop over its chunk (`q_loop`).
  auto partial = [&](const std::string& r_expr, const std::string& c_expr,
                     const std::string& q_loop) -> absl::Status {
    s.indent = "    ";
    if (layout_.HasKeptDims()) s.Line(absl::StrCat("const sj_index r = ", r_expr, ";"));
    if (layout_.chunks > 1) s.Line(absl::StrCat("const sj_index c = ", c_expr, ";"));
    layout_.Unravel(false, "r", s);
    layout_.ChunkBounds(s);
    init_accs();
    s.Line(absl::StrCat("for (sj_index ", q_loop, ") {"));
    s.indent = "      ";
    layout_.Unravel(true, "q", s);
    s.Line(absl::StrCat("const sj_index i = ", layout_.Offset(0), ";"));
    RETURN_IF_ERROR(element(s));
    s.indent = "    ";
    s.Line("}");
    return absl::OkStatus();
  };
  // A partial's reduced element from its index `index`: the index itself,
  // or `index op size` when each row splits into chunks.
  auto chunked = [&](const char* index, const char* op, int64_t size) {
    return layout_.chunks == 1 ? std::string(index)
                               : absl::StrCat(index, " ", op, " ", Size(size));
  };
  int64_t grid = 0;
  const bool vector = layout_.strategy == ReductionStrategy::kNone &&
                      bcast_.empty() && plan_.f_numel >= kVector;
  if (vector) {
    RETURN_IF_ERROR(EmitVectorLoop(s, env));
    out.helpers |= kHelperVector;
  }
  if (layout_.strategy == ReductionStrategy::kNone) {
    // Without vectors, or when a pointer is not aligned for them, or for the
    // elements after the last whole vector.
    s.Line(absl::StrCat(
        "for (sj_index i = ",
        vector
            ? absl::StrCat("(sj_aligned ? ",
                           Size(plan_.f_numel / kVector * kVector), " : 0) + ")
            : "",
        "(sj_index)", bid_, " * blockDim.x + threadIdx.x; i < ",
        Size(plan_.f_numel), "; i += (sj_index)", grid_, " * blockDim.x) {"));
    s.indent = "    ";
    // Only broadcast operands need the multi-index.
    if (!bcast_.empty())
      layout_.Unravel(false, "i", s, /*broadcast_only=*/true);
    RETURN_IF_ERROR(element(s));
    const int64_t threads = vector ? plan_.f_numel / kVector : plan_.f_numel;
    grid = (threads + block - 1) / block;
  } else if (layout_.strategy == ReductionStrategy::kBlockPerRow) {
    s.Line(absl::StrCat("for (sj_index b = ", bid_, "; b < ",
                        Size(out.partials), "; b += ", grid_, ") {"));
    RETURN_IF_ERROR(
        partial(chunked("b", "/", layout_.chunks),
                absl::StrCat("b % ", Size(layout_.chunks)),
                "q = q_begin + threadIdx.x; q < q_end; q += blockDim.x"));
    for (size_t a = 0; a < accs_.size(); ++a) {
      s.Line(absl::StrCat("a", a, " = sj_block_",
                          accs_[a]->op() == OpId::kAmax ? "amax" : "sum", "(a",
                          a, ");"));
    }
    std::vector<std::string> stores;
    for (size_t a = 0; a < accs_.size(); ++a)
      stores.push_back(absl::StrCat("acc", a, "[b] = a", a, ";"));
    s.Line(absl::StrCat("if (threadIdx.x == 0) { ", absl::StrJoin(stores, " "),
                        " }"));
    grid = out.partials;
  } else {
    s.Line(absl::StrCat("for (sj_index t = (sj_index)", bid_,
                        " * blockDim.x + threadIdx.x; t "
                        "< ",
                        Size(out.partials), "; t += (sj_index)", grid_,
                        " * blockDim.x) {"));
    RETURN_IF_ERROR(partial(chunked("t", "%", plan_.r_numel),
                            absl::StrCat("t / ", Size(plan_.r_numel)),
                            "q = q_begin; q < q_end; ++q"));
    for (size_t a = 0; a < accs_.size(); ++a)
      s.Line(absl::StrCat("acc", a, "[t] = a", a, ";"));
    grid = (out.partials + block - 1) / block;
  }
  s.indent = "  ";
  s.Line("}");
  absl::StrAppend(&text_, Kernel(name, s));
  out.kernels.push_back({name, std::min(grid, kMaxGrid), block});
  return absl::OkStatus();
}

absl::Status Emitter::EmitReduced(RegionSource& out) {
  CudaStatements s;
  Env env;
  Prologue({Domain::kReduced}, env, s);
  s.Line(absl::StrCat("for (sj_index r = (sj_index)", bid_,
                      " * blockDim.x + threadIdx.x; r < ", Size(plan_.r_numel),
                      "; r += (sj_index)", grid_, " * blockDim.x) {"));
  s.indent = "    ";
  for (size_t a = 0; a < accs_.size(); ++a) {
    const Node* node = accs_[a];
    s.Line(absl::StrCat("double a", a, " = acc", a, "[",
                        layout_.AccIndex("r", "0"), "];"));
    if (layout_.chunks == 1) continue;
    const std::string part =
        absl::StrCat("acc", a, "[", layout_.AccIndex("r", "c"), "]");
    s.Line(absl::StrCat(
        "for (sj_index c = 1; c < ", Size(layout_.chunks), "; ++c) ",
        node->op() == OpId::kAmax
            ? absl::StrCat("a", a, " = sj_amax(a", a, ", ", part, ");")
            : absl::StrCat("a", a, " += ", part, ";")));
  }
  LoadParams(Domain::kReduced, env, s, "r");
  RETURN_IF_ERROR(EmitPhase(Domain::kReduced, env, s, "r"));
  s.indent = "  ";
  s.Line("}");
  const std::string name = absl::StrCat(out.name, "_reduced");
  absl::StrAppend(&text_, Kernel(name, s));
  out.kernels.push_back(
      {name,
       std::min((plan_.r_numel + options_.block - 1) / options_.block,
                kMaxGrid),
       options_.block});
  return absl::OkStatus();
}

}  // namespace stepjit::codegen::cuda::detail
