// oneDNN convolution primitives (see conv_dnnl.h).
//
// Each primitive is created with format "any", so oneDNN picks the layout
// its kernels prefer on this CPU (blocked channels, nChw16c with AVX-512,
// nChw8c with AVX2). The operands arrive in PyTorch's layouts; a cached
// reorder brings each into the primitive's layout, in per-thread buffers,
// and the result back. A reorder is a copy, cheap against the convolution.
#include "devices/cpu/conv_dnnl.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "devices/cpu/dnnl_context.h"
#include "dnnl.hpp"
#include "runtime/thread_pool.h"

namespace stepjit::runtime::cpu {
namespace {

std::atomic<ConvBackend> g_backend{ConvBackend::kAuto};

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

// Everything a primitive is specialized on.
auto KeyOf(ConvPass pass, const ConvShape& s, ir::DType dtype, bool bias) {
  const ir::Window2d& w = s.win;
  return std::make_tuple(pass, dtype, bias, s.n, s.c, s.h, s.w, s.o, s.kh, s.kw,
                         s.oh, s.ow, w.stride, w.padding, w.dilation, w.groups);
}
using Key = decltype(KeyOf(ConvPass{}, ConvShape{}, ir::DType::kF32, false));

// One operand: its descriptor in PyTorch's layout, the primitive's, and the
// reorder between them (to the primitive for inputs, back for the output).
struct Operand {
  int arg = 0;
  dnnl::memory::desc user, inner;
  bool reordered = false;
  dnnl::reorder reorder;
};

struct Entry {
  bool implemented = false;
  dnnl::primitive prim;
  Operand a, b, out;
  dnnl::memory::desc bias_md;  // zero when none
  dnnl::memory::desc scratch_md;
};

struct Cache {
  std::mutex mu;  // guards map (std::mutex: ThreadSanitizer sees it)
  // Entries are never removed, so pointers to them stay valid.
  absl::flat_hash_map<Key, std::unique_ptr<Entry>> map;
};
Cache& TheCache() {
  static Cache* cache = new Cache();
  return *cache;
}

dnnl::memory::data_type DataType(ir::DType t) {
  return t == ir::DType::kBF16 ? dnnl::memory::data_type::bf16 : kF32;
}

void Bind(Operand& op, int arg, const dnnl::memory::desc& user,
          const dnnl::memory::desc& inner, bool is_output) {
  const dnnl::engine& eng = Dnnl().engine;
  op.arg = arg;
  op.user = user;
  op.inner = inner;
  op.reordered = user != inner;
  if (op.reordered) {
    op.reorder = is_output ? dnnl::reorder(dnnl::reorder::primitive_desc(
                                 eng, inner, eng, user))
                           : dnnl::reorder(dnnl::reorder::primitive_desc(
                                 eng, user, eng, inner));
  }
}

void Build(ConvPass pass, const ConvShape& s, ir::DType dtype, bool has_bias,
           Entry& e) {
  const dnnl::memory::data_type dt = DataType(dtype);
  auto Plain = [dt](const dims& d, tag t) {
    return dnnl::memory::desc(d, dt, t);
  };
  auto Any = [dt](const dims& d) {
    return dnnl::memory::desc(d, dt, tag::any);
  };
  const ir::Window2d& w = s.win;
  const int64_t g = w.groups;
  const dims src_d = {s.n, s.c, s.h, s.w}, dst_d = {s.n, s.o, s.oh, s.ow};
  const dims wei_d = g == 1 ? dims{s.o, s.c, s.kh, s.kw}
                            : dims{g, s.o / g, s.c / g, s.kh, s.kw};
  const dims bias_d = {s.o};
  const dims strides = {w.stride[0], w.stride[1]};
  // oneDNN counts dilation from 0 (a dense window has dilation 0).
  const dims dilates = {w.dilation[0] - 1, w.dilation[1] - 1};
  // Right padding equal to the left: oneDNN's output size is floor((in +
  // pl + pr - window) / stride) + 1, PyTorch's with pl = pr.
  const dims pad = {w.padding[0], w.padding[1]};
  const dnnl::memory::desc src = Plain(src_d, tag::nchw),
                           dst = Plain(dst_d, tag::nchw),
                           wei = Plain(wei_d, g == 1 ? tag::oihw : tag::goihw);
  const dnnl::engine& eng = Dnnl().engine;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  constexpr auto algo = dnnl::algorithm::convolution_direct;

  const auto fwd_desc =
      has_bias
          ? dnnl::convolution_forward::desc(
                dnnl::prop_kind::forward_training, algo, Any(src_d), Any(wei_d),
                Plain(bias_d, tag::a), Any(dst_d), strides, dilates, pad, pad)
          : dnnl::convolution_forward::desc(
                dnnl::prop_kind::forward_training, algo, Any(src_d), Any(wei_d),
                Any(dst_d), strides, dilates, pad, pad);
  const dnnl::convolution_forward::primitive_desc fwd(fwd_desc, attr, eng);
  switch (pass) {
    case ConvPass::kForward:
      e.prim = dnnl::convolution_forward(fwd);
      Bind(e.a, DNNL_ARG_SRC, src, fwd.src_desc(), false);
      Bind(e.b, DNNL_ARG_WEIGHTS, wei, fwd.weights_desc(), false);
      Bind(e.out, DNNL_ARG_DST, dst, fwd.dst_desc(), true);
      if (has_bias) e.bias_md = Plain(bias_d, tag::a);
      e.scratch_md = fwd.scratchpad_desc();
      break;
    case ConvPass::kBackwardInput: {
      const dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algo, Any(src_d), Any(wei_d),
                                                Any(dst_d), strides, dilates,
                                                pad, pad),
          attr, eng, fwd);
      e.prim = dnnl::convolution_backward_data(pd);
      Bind(e.a, DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
      Bind(e.b, DNNL_ARG_WEIGHTS, wei, pd.weights_desc(), false);
      Bind(e.out, DNNL_ARG_DIFF_SRC, src, pd.diff_src_desc(), true);
      e.scratch_md = pd.scratchpad_desc();
      break;
    }
    case ConvPass::kBackwardWeight: {
      const dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(algo, Any(src_d), Any(wei_d),
                                                   Any(dst_d), strides, dilates,
                                                   pad, pad),
          attr, eng, fwd);
      e.prim = dnnl::convolution_backward_weights(pd);
      Bind(e.a, DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
      Bind(e.b, DNNL_ARG_SRC, src, pd.src_desc(), false);
      Bind(e.out, DNNL_ARG_DIFF_WEIGHTS, wei, pd.diff_weights_desc(), true);
      e.scratch_md = pd.scratchpad_desc();
      break;
    }
  }
  e.implemented = true;
}

const char* PassName(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward:
      return "conv2d";
    case ConvPass::kBackwardInput:
      return "conv2d_backward_input";
    case ConvPass::kBackwardWeight:
      return "conv2d_backward_weight";
  }
  return "conv2d";
}

absl::StatusOr<const Entry*> GetEntry(ConvPass pass, const ConvShape& s,
                                      ir::DType dtype, bool has_bias) {
  const Key key = KeyOf(pass, s, dtype, has_bias);
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto it = cache.map.find(key); it != cache.map.end()) {
    return it->second.get();
  }
  auto e = std::make_unique<Entry>();
  try {
    Build(pass, s, dtype, has_bias, *e);
  } catch (const dnnl::error& err) {
    if (err.status != dnnl_unimplemented) {
      return absl::InternalError(
          absl::StrCat(PassName(pass), ": creating the oneDNN primitive for ",
                       "input [", s.n, ", ", s.c, ", ", s.h, ", ", s.w,
                       "] and ", s.o, " output channels failed: ", err.what()));
    }
    *e = Entry{};  // cached as unimplemented
  }
  const Entry* out = e.get();
  cache.map.emplace(key, std::move(e));
  return out;
}

// Per-thread, 64-byte aligned buffers for the reordered operands.
struct AlignedBuffer {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data;
  size_t size = 0;
  void* Get(size_t bytes) {
    if (bytes > size) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      data.reset(std::aligned_alloc(64, rounded));
      if (data == nullptr) throw std::bad_alloc();
      size = rounded;
    }
    return data.get();
  }
};

}  // namespace

ConvBackend ConvBackendInUse() { return g_backend.load(); }

ConvBackend SetConvBackend(ConvBackend backend) {
  return g_backend.exchange(backend);
}

namespace {

// Runs its scope on all NumThreads() OpenMP threads, whatever the caller's
// team (runtime/thread_pool.h). How oneDNN splits a convolution, and so the
// order in which its weight gradient sums over the batch, depends on the
// thread count: one count for every call makes a compiled replay under a
// narrower team compute the bits eager computes.
class AllThreads {
 public:
  AllThreads() : saved_(omp_get_max_threads()) {
    if (saved_ != NumThreads()) omp_set_num_threads(NumThreads());
  }
  ~AllThreads() {
    if (saved_ != NumThreads()) omp_set_num_threads(saved_);
  }
  AllThreads(const AllThreads&) = delete;
  AllThreads& operator=(const AllThreads&) = delete;

 private:
  int saved_;
};

}  // namespace

absl::Status DnnlConv2d(ConvPass pass, const ConvShape& s, ir::DType dtype,
                        const void* a, const void* b, const void* bias,
                        void* out) {
  if (dtype != ir::DType::kF32 && dtype != ir::DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(PassName(pass),
                     ": oneDNN convolutions take f32 or bf16, "
                     "found ",
                     ir::DTypeName(dtype)));
  }
  const AllThreads threads;
  absl::StatusOr<const Entry*> got = GetEntry(pass, s, dtype, bias != nullptr);
  if (!got.ok()) return got.status();
  const Entry& e = **got;
  if (!e.implemented) {
    return absl::UnimplementedError(absl::StrCat(
        PassName(pass), ": oneDNN has no primitive for this geometry"));
  }
  thread_local AlignedBuffer buffers[3];
  DnnlContext& ctx = Dnnl();
  try {
    std::unordered_map<int, dnnl::memory> args;
    auto input = [&](const Operand& op, const void* data, AlignedBuffer& buf) {
      dnnl::memory user(op.user, ctx.engine, const_cast<void*>(data));
      if (!op.reordered) {
        args.emplace(op.arg, user);
        return;
      }
      dnnl::memory inner(op.inner, ctx.engine, buf.Get(op.inner.get_size()));
      op.reorder.execute(ctx.stream, user, inner);
      args.emplace(op.arg, inner);
    };
    input(e.a, a, buffers[0]);
    input(e.b, b, buffers[1]);
    dnnl::memory user_out(e.out.user, ctx.engine, out);
    dnnl::memory inner_out =
        e.out.reordered ? dnnl::memory(e.out.inner, ctx.engine,
                                       buffers[2].Get(e.out.inner.get_size()))
                        : user_out;
    args.emplace(e.out.arg, inner_out);
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.bias_md, ctx.engine,
                                               const_cast<void*>(bias)));
    }
    if (const size_t bytes = e.scratch_md.get_size(); bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratch_md, ctx.engine,
                                                     DnnlScratchpad(bytes)));
    }
    e.prim.execute(ctx.stream, args);
    if (e.out.reordered) e.out.reorder.execute(ctx.stream, inner_out, user_out);
    ctx.stream.wait();
  } catch (const dnnl::error& err) {
    return absl::InternalError(
        absl::StrCat(PassName(pass), ": oneDNN failed: ", err.what()));
  }
  return absl::OkStatus();
}

}  // namespace stepjit::runtime::cpu
