// Maps a matmul's strided (batched) operands, and an absorbed bias and
// activation or bias gradient, onto one GEMM call's arguments, for any device.
#include "runtime/matmul_plan.h"

#include <algorithm>

#include "ir/gemm_epilogue.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/cpu/loops.h"

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
};

// Expands `x` to batch shape `batch`, then finds a layout GEMM can read
// directly: row-major or column-major last two dims and one uniform batch
// stride. Anything else is copied to contiguous first.
Operand Prepare(const Tensor& x, bool trans, ShapeRef batch, CopyFn copy) {
  Shape shape(batch.begin(), batch.end());
  const int64_t r = x.dim();
  shape.push_back(x.shape()[r - 2]);
  shape.push_back(x.shape()[r - 1]);
  Shape strides = BroadcastByteStrides(x, shape);
  for (auto& s : strides) s /= x.element_size();
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  const int64_t rs = strides[strides.size() - 2], cs = strides.back();
  // A batch stride is uniform when the batch dims collapse to one.
  int64_t bstride = 0;
  bool uniform = true;
  int64_t expect = -1;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    if (batch[d] == 1) continue;
    if (expect < 0) {
      bstride = strides[d];
      expect = strides[d] * batch[d];
    } else {
      uniform &= strides[d] == expect;
      expect = strides[d] * batch[d];
    }
  }
  if (uniform) {
    if ((cs == 1 || cols == 1) && rs >= std::max<int64_t>(cols, 1)) {
      return {MakeTensor(x.storage(), shape, strides, x.offset(), x.dtype()), trans, rs, bstride};
    }
    if ((rs == 1 || rows == 1) && cs >= std::max<int64_t>(rows, 1)) {
      return {MakeTensor(x.storage(), shape, strides, x.offset(), x.dtype()), !trans, cs, bstride};
    }
  }
  Tensor c = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  copy(c, MakeTensor(x.storage(), shape, strides, x.offset(), x.dtype()));
  return {c, trans, cols, rows * cols};
}

// The GEMM library's activation for an absorbed epilogue (typed by
// ir/gemm_epilogue.h; type inference checked it is a kGemmActivation op).
GemmActivation ActivationOf(const ir::GemmEpilogue& epilogue) {
  if (epilogue.kind != ir::GemmEpilogueKind::kBiasAct) return GemmActivation();
  return epilogue.activation;
}

}  // namespace

MatmulPlan PlanMatmul(const KernelArgs& k, CopyFn copy) {
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
  Operand pa = Prepare(a, ta, batch, copy), pb = Prepare(b, tb, batch, copy);
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
  g.batch = ir::NumElements(batch);
  g.stride_a = pa.stride;
  g.stride_b = pb.stride;
  g.stride_c = m * n;
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
  plan.empty = g.batch == 0 || m == 0 || (n == 0 && !bias_grad);
  // Degenerate pitches (a dim of size 1) must still satisfy GEMM's checks.
  g.lda = std::max(g.lda, pa.trans ? m : kk);
  g.ldb = std::max(g.ldb, pb.trans ? kk : n);
  return plan;
}


}  // namespace stepjit::runtime
