// Maps a matmul's strided (batched) operands, and an absorbed bias and
// activation or bias gradient, onto one GEMM call's arguments, for any device.
#include "devices/matmul_plan.h"

#include <algorithm>
#include <optional>

#include "devices/cpu/loops.h"
#include "ir/gemm_epilogue.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"

namespace stepjit::runtime {

using cpu::GemmActivation;
using cpu::BroadcastByteStrides;
using cpu::GemmArgs;
using ir::AttrKey;

namespace {

struct Operand {
  Tensor t;        // possibly a copy with a GEMM-friendly layout
  bool trans;      // op(X) = X^T
  int64_t ld;      // row pitch of the stored matrix
  int64_t stride;  // element stride between batch matrices (0 = broadcast)
  int64_t outer_stride = 0;  // between groups of `inner` batch matrices
};

// The element strides of `x` broadcast to [batch..., rows, cols].
Shape ExpandedStrides(const Tensor& x, ShapeRef batch) {
  Shape shape(batch.begin(), batch.end());
  shape.push_back(x.shape()[x.dim() - 2]);
  shape.push_back(x.shape()[x.dim() - 1]);
  Shape strides = BroadcastByteStrides(x, shape);
  for (auto& s : strides) s /= x.element_size();
  return strides;
}

// The one stride that steps through batch dims [from, to) in order (their
// size-1 dims skipped), or nullopt when they do not collapse to one.
std::optional<int64_t> CollapsedStride(ShapeRef strides, ShapeRef batch,
                                       size_t from, size_t to) {
  int64_t stride = 0, expect = -1;
  for (size_t d = to; d-- > from;) {
    if (batch[d] == 1) continue;
    if (expect < 0) {
      stride = strides[d];
    } else if (strides[d] != expect) {
      return std::nullopt;
    }
    expect = strides[d] * batch[d];
  }
  return stride;
}

// Where the batch dims split into outer dims [0, split), one GEMM call
// each, and inner dims [split, end), the products of one call, so that each
// group collapses to one stride for both operands: 0 (one call) when all of
// them collapse or when no split works (an operand that does not collapse
// is then copied).
size_t BatchSplit(ShapeRef sa, ShapeRef sb, ShapeRef batch) {
  auto collapses = [&](size_t from, size_t to) {
    return CollapsedStride(sa, batch, from, to) &&
           CollapsedStride(sb, batch, from, to);
  };
  if (collapses(0, batch.size())) return 0;
  for (size_t split = batch.size() - 1; split >= 1; --split) {
    if (collapses(0, split) && collapses(split, batch.size())) return split;
  }
  return 0;
}

// Finds a layout GEMM can read directly from `x` expanded to `batch`:
// row-major or column-major last two dims, and batch dims [split, end)
// collapsing to one stride (the inner products of a call) and [0, split) to
// another (one call each). Anything else is copied to contiguous first.
Operand Prepare(const Tensor& x, bool trans, ShapeRef batch, size_t split,
                CopyFn copy) {
  Shape shape(batch.begin(), batch.end());
  shape.push_back(x.shape()[x.dim() - 2]);
  shape.push_back(x.shape()[x.dim() - 1]);
  const Shape strides = ExpandedStrides(x, batch);
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  const int64_t rs = strides[strides.size() - 2], cs = strides.back();
  const std::optional<int64_t> inner =
      CollapsedStride(strides, batch, split, batch.size());
  const std::optional<int64_t> outer =
      CollapsedStride(strides, batch, 0, split);
  if (inner && outer) {
    const Tensor view =
        MakeTensor(x.storage(), shape, strides, x.offset(), x.dtype());
    if ((cs == 1 || cols == 1) && rs >= std::max<int64_t>(cols, 1)) {
      return {view, trans, rs, *inner, *outer};
    }
    if ((rs == 1 || rows == 1) && cs >= std::max<int64_t>(rows, 1)) {
      return {view, !trans, cs, *inner, *outer};
    }
  }
  Tensor c = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  copy(c, MakeTensor(x.storage(), shape, strides, x.offset(), x.dtype()));
  int64_t inner_count = 1;
  for (size_t d = split; d < batch.size(); ++d) inner_count *= batch[d];
  return {c, trans, cols, rows * cols, inner_count * rows * cols};
}

// The GEMM library's activation for an absorbed epilogue (typed by
// ir/gemm_epilogue.h; type inference checked it is a kGemmActivation op).
GemmActivation ActivationOf(const ir::GemmEpilogue& epilogue) {
  if (epilogue.kind != ir::GemmEpilogueKind::kBiasAct) return GemmActivation();
  return epilogue.activation;
}

}  // namespace

cpu::GemmArgs MatmulPlan::Call(int64_t i) const {
  cpu::GemmArgs g = gemm;
  const int64_t size = ir::DTypeSize(g.dtype);
  g.a = static_cast<const char*>(g.a) + i * outer_stride_a * size;
  g.b = static_cast<const char*>(g.b) + i * outer_stride_b * size;
  g.c = static_cast<char*>(g.c) + i * outer_stride_c * size;
  return g;
}

MatmulPlan PlanMatmul(const KernelArgs& k, CopyFn copy, bool one_call) {
  const Tensor &a = k.inputs[0], &b = k.inputs[1];
  const bool absorbed = k.inputs.size() == 3;
  const bool bias_grad = !k.more_out.empty();
  // Only compiled graphs (replayed without grad) hold the 3-operand and the
  // 2-result forms, so they have no gradient rule; refuse before autograd
  // would record one (or, for the 2-result form, silently not record it).
  if ((absorbed || bias_grad) && GradMode::is_enabled()) {
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      SJ_REQUIRE(!k.inputs[i].requires_grad(), "matmul with a ",
                 absorbed ? "bias operand" : "bias-gradient result",
                 " (epilogue = \"", k.attrs.GetString(AttrKey::kEpilogue),
                 "\") has no gradient, but input ", i,
                 " requires grad; use matmul, ",
                 absorbed ? "add and the activation" : "and sum",
                 ", or run it under NoGradGuard");
    }
  }
  const bool ta = k.attrs.GetBool(AttrKey::kTransposeA);
  const bool tb = k.attrs.GetBool(AttrKey::kTransposeB);
  Shape batch(k.out.shape().begin(), k.out.shape().end() - 2);
  const size_t split = one_call ? 0
                                : BatchSplit(ExpandedStrides(a, batch),
                                             ExpandedStrides(b, batch), batch);
  Operand pa = Prepare(a, ta, batch, split, copy),
          pb = Prepare(b, tb, batch, split, copy);
  const int64_t m = k.out.shape()[k.out.dim() - 2], n = k.out.shape().back();
  const int64_t kk = ta ? a.shape()[a.dim() - 2] : a.shape().back();
  MatmulPlan plan;
  GemmArgs& g = plan.gemm;
  g.dtype = a.dtype();
  g.trans_a = pa.trans;
  g.trans_b = pb.trans;
  g.m = m;
  g.n = n;
  g.k = kk;
  g.a = pa.t.data_ptr();
  g.lda = std::max<int64_t>(pa.ld, 1);
  g.b = pb.t.data_ptr();
  g.ldb = std::max<int64_t>(pb.ld, 1);
  g.c = k.out.data_ptr();
  g.ldc = std::max<int64_t>(n, 1);
  int64_t inner = 1;
  for (size_t d = split; d < batch.size(); ++d) inner *= batch[d];
  g.batch = inner;
  g.stride_a = pa.stride;
  g.stride_b = pb.stride;
  g.stride_c = m * n;
  plan.outer = inner == 0 ? 0 : ir::NumElements(batch) / inner;
  plan.outer_stride_a = pa.outer_stride;
  plan.outer_stride_b = pb.outer_stride;
  plan.outer_stride_c = inner * m * n;
  if (absorbed) {
    Tensor bias = k.inputs[2];
    if (!bias.is_contiguous()) {
      Tensor c = empty(bias.shape(), {.dtype = bias.dtype(), .device = bias.device()});
      copy(c, bias);
      bias = c;
    }
    plan.keep.push_back(bias);
    g.bias = bias.data_ptr();
    g.activation = ActivationOf(ir::GemmEpilogueOf(k.attrs));
  }
  if (bias_grad) {
    // The second result (ir/ops.def), allocated contiguous by DispatchResults.
    plan.keep.push_back(k.more_out[0]);
    g.bias_grad = k.more_out[0].data_ptr();
  }
  plan.keep.push_back(pa.t);
  plan.keep.push_back(pb.t);
  // A bias gradient sums A even when C is empty (n == 0).
  plan.empty =
      g.batch == 0 || plan.outer == 0 || m == 0 || (n == 0 && !bias_grad);
  // Degenerate pitches (a dim of size 1) must still satisfy GEMM's checks.
  g.lda = std::max(g.lda, pa.trans ? m : kk);
  g.ldb = std::max(g.ldb, pb.trans ? kk : n);
  return plan;
}

}  // namespace stepjit::runtime
