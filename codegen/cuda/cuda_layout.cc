// Dim merging, reduction strategy and chunking, index arithmetic as C text.
#include "codegen/cuda/cuda_layout.h"

#include <algorithm>
#include <limits>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace stepjit::codegen::cuda {

namespace {

// Partial results aim at about this many threads in flight (H100/H200: 132
// SMs x 2048), and no fewer elements per thread than below.
constexpr int64_t kTargetThreads = 1 << 18;
constexpr int64_t kMinPerThread = 4;
constexpr int64_t kMinChunk = 32;
// Rows shorter than this reduce one per thread rather than one per block.
constexpr int64_t kMinBlockRow = 128;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Layout PlanLayout(const Plan& plan,
                  absl::Span<const ir::Value* const> broadcast, int block) {
  Layout l;
  const ir::Shape& f = plan.f_shape;
  const ir::Shape f_strides = ir::ContiguousStrides(f);
  std::vector<std::vector<int64_t>> op_strides;
  for (const ir::Value* v : broadcast)
    op_strides.push_back(BroadcastStrides(v->type().shape, f));
  for (size_t d = 0; d < f.size(); ++d) {
    if (f[d] == 1) continue;
    Dim dim{f[d], plan.f_reduced[d], {f_strides[d]}};
    for (const auto& s : op_strides) dim.strides.push_back(s[d]);
    if (!l.dims.empty() && l.dims.back().reduced == dim.reduced) {
      Dim& outer = l.dims.back();
      bool mergeable = true;
      for (size_t k = 0; k < dim.strides.size(); ++k)
        mergeable &= outer.strides[k] == dim.strides[k] * dim.extent;
      if (mergeable) {
        outer.extent *= dim.extent;
        outer.strides = dim.strides;
        continue;
      }
    }
    l.dims.push_back(std::move(dim));
  }
  // 32-bit indices need numel plus one grid's worth of threads below 2^31.
  l.index64 =
      plan.f_numel + kMaxGrid * block > std::numeric_limits<int32_t>::max();
  l.r_numel = plan.r_numel;
  if (plan.r_numel == 0) return l;
  l.q = plan.f_numel / plan.r_numel;
  if (!l.dims.empty() && l.dims.back().reduced && l.q >= kMinBlockRow) {
    l.strategy = ReductionStrategy::kBlockPerRow;
    l.chunks =
        std::clamp(CeilDiv(kTargetThreads / block, l.r_numel), int64_t{1},
                   std::max<int64_t>(1, l.q / (block * kMinPerThread)));
  } else {
    l.strategy = ReductionStrategy::kThreadPerOutput;
    l.chunks = std::clamp(CeilDiv(kTargetThreads, l.r_numel), int64_t{1},
                          std::max<int64_t>(1, l.q / kMinChunk));
  }
  l.chunk_len = CeilDiv(l.q, l.chunks);
  l.chunks = CeilDiv(l.q, l.chunk_len);
  return l;
}

std::string SizeText::operator()(int64_t v) {
  if (!generic_) return absl::StrCat(v);
  values_.push_back(v);
  return absl::StrCat("((sj_index)sj_dims.d[", values_.size() - 1, "])");
}

std::string SizeText::AsDouble(int64_t v) {
  if (!generic_) return CudaLiteral(static_cast<double>(v), true);
  values_.push_back(v);
  return absl::StrCat("((double)sj_dims.d[", values_.size() - 1, "])");
}

std::string Layout::Lit(int64_t v) const {
  return sizes != nullptr ? (*sizes)(v) : absl::StrCat(v);
}

bool Layout::HasKeptDims() const {
  return absl::c_any_of(dims, [](const Dim& d) { return !d.reduced; });
}

void Layout::Unravel(bool reduced, const std::string& var, CudaStatements& s,
                     bool broadcast_only) const {
  std::vector<size_t> mine;
  for (size_t j = 0; j < dims.size(); ++j) {
    if (dims[j].reduced == reduced) mine.push_back(j);
  }
  int64_t inner = 1;
  for (size_t k = mine.size(); k-- > 0;) {
    const Dim& dim = dims[mine[k]];
    if (broadcast_only &&
        std::all_of(dim.strides.begin() + 1, dim.strides.end(),
                    [](int64_t st) { return st == 0; })) {
      inner *= dim.extent;
      continue;
    }
    std::string e = inner == 1 ? var : absl::StrCat(var, " / ", Lit(inner));
    if (k > 0)
      e = inner == 1 ? absl::StrCat(var, " % ", Lit(dim.extent))
                     : absl::StrCat("(", e, ") % ", Lit(dim.extent));
    s.Line(absl::StrCat("const sj_index d", mine[k], " = ", e, ";"));
    inner *= dim.extent;
  }
}

std::string Layout::Offset(size_t operand) const {
  std::vector<std::string> terms;
  for (size_t j = 0; j < dims.size(); ++j) {
    const int64_t st = dims[j].strides[operand];
    if (st == 0) continue;
    terms.push_back(st == 1 ? absl::StrCat("d", j)
                            : absl::StrCat("d", j, " * ", Lit(st)));
  }
  return terms.empty() ? "0" : absl::StrJoin(terms, " + ");
}

std::string Layout::AccIndex(const std::string& r, const std::string& c) const {
  if (chunks == 1) return r;
  if (strategy == ReductionStrategy::kBlockPerRow) {
    return c == "0" ? absl::StrCat(r, " * ", Lit(chunks))
                    : absl::StrCat(r, " * ", Lit(chunks), " + ", c);
  }
  return c == "0" ? r : absl::StrCat(c, " * ", Lit(r_numel), " + ", r);
}

void Layout::ChunkBounds(CudaStatements& s) const {
  if (chunks == 1) {
    s.Line(absl::StrCat("const sj_index q_begin = 0, q_end = ", Lit(q), ";"));
    return;
  }
  const std::string len = Lit(chunk_len), end = Lit(q);
  s.Line(absl::StrCat("const sj_index q_begin = c * ", len, ";"));
  s.Line(absl::StrCat("const sj_index q_end = q_begin + ", len, " < ", end,
                      " ? q_begin + ", len, " : ", end, ";"));
}

}  // namespace stepjit::codegen::cuda
