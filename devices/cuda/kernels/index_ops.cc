// Hand-written CUDA kernels for gathers, scatters and the row ops the
// generated single-op kernels do not cover: embedding and its backward,
// slice_backward, arange, argmax, var and topk, computed as the CPU kernels
// compute them (accumulation types and per-element summation order). var stays
// because the CPU kernel sums its mean in 8 interleaved partials, which this
// kernel reproduces bit for bit and the generated row plan does not;
// layer_norm and mse_loss are generated (devices/cuda/ops.cc).
#include "devices/cuda/kernels/index_ops.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/kernels.h"
#include "devices/cuda/kernels/kernel_helpers.h"
#include "devices/cuda/ops.h"
#include "ir/infer.h"
#include "ir/op_attrs.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;

constexpr char kIndexKernelBody[] = R"(
#define SJ_LOOP(i, n) SJ_GRID_LOOP(i, n)
// topk's order (devices/cpu/sampling.h): by value, NaN the largest, ties by
// the lower index.
template <typename A>
__device__ bool sj_topk_before(A a, long long ia, A b, long long ib, int largest) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return na && nb ? ia < ib : (largest ? na : nb);
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}
#define SJ_INDEX_KERNELS(S, T, ACC)                                            \
  extern "C" __global__ void sj_topk_##S(const T* x, T* values,                \
                                         long long* indices, long long rows,   \
                                         long long n, long long k,             \
                                         int largest) {                        \
    SJ_LOOP(r, rows) {                                                         \
      const T* row = x + r * n;                                                \
      ACC pv = 0;                                                              \
      long long pi = -1;                                                       \
      for (long long j = 0; j < k; ++j) {                                      \
        ACC bv = 0;                                                            \
        long long bi = -1;                                                     \
        for (long long i = 0; i < n; ++i) {                                    \
          const ACC v = sj_ld(row[i]);                                         \
          if (pi >= 0 && !sj_topk_before(pv, pi, v, i, largest)) continue;     \
          if (bi < 0 || sj_topk_before(v, i, bv, bi, largest)) bv = v, bi = i; \
        }                                                                      \
        if (values) values[r * k + j] = row[bi];                               \
        if (indices) indices[r * k + j] = bi;                                  \
        pv = bv;                                                               \
        pi = bi;                                                               \
      }                                                                        \
    }                                                                          \
  }                                                                            \
  extern "C" __global__ void sj_embedding_##S(const T* w, const long long* idx, \
                                              T* out, long long n, long long dim, \
                                              long long rows) {                \
    SJ_GRID_LOOP_ROWS(e, i, j, n * dim, dim) {                                 \
      const long long r = idx[i];                                              \
      if (r >= 0 && r < rows) out[e] = w[r * dim + j];                         \
      else sj_put(&out[e], (ACC)0);                                            \
    }                                                                          \
  }                                                                            \
  /* One thread per weight element: its row's tokens in token order       */ \
  /* (sj_embedding_place), summed in f64 as the CPU sums them.            */ \
  extern "C" __global__ void sj_embedding_backward_##S(                        \
      const T* g, const long long* order, const unsigned long long* offsets,   \
      T* out, long long rows, long long dim, long long chunks) {               \
    SJ_GRID_LOOP_ROWS(e, r, j, rows * dim, dim) {                              \
      const unsigned long long end = offsets[(r + 1) * chunks];                \
      double acc = 0;                                                          \
      for (unsigned long long k = offsets[r * chunks]; k < end; ++k)           \
        acc += sj_ld(g[order[k] * dim + j]);                                   \
      sj_put(&out[e], (ACC)acc);                                               \
    }                                                                          \
  }                                                                            \
  extern "C" __global__ void sj_arange_##S(T* out, long long n, double start,  \
                                           double step) {                      \
    SJ_LOOP(i, n) sj_put(&out[i], (ACC)(start + i * step));                    \
  }                                                                            \
  extern "C" __global__ void sj_argmax_##S(const T* x, long long* out,         \
                                           long long rows, long long n) {      \
    SJ_LOOP(r, rows) {                                                         \
      const T* row = x + r * n;                                                \
      ACC best = sj_ld(row[0]);                                                \
      long long at = 0;                                                        \
      for (long long i = 1; i < n && best == best; ++i) {                      \
        const ACC v = sj_ld(row[i]);                                           \
        if (v > best || v != v) best = v, at = i;                              \
      }                                                                        \
      out[r] = at;                                                             \
    }                                                                          \
  }                                                                            \
  extern "C" __global__ void sj_var_##S(const T* x, T* out, long long rows,   \
                                        long long n, long long correction) {  \
    SJ_LOOP(r, rows) {                                                         \
      const T* row = x + r * n;                                                \
      double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};                               \
      long long i = 0;                                                         \
      for (; i + 8 <= n; i += 8) {                                             \
        for (int j = 0; j < 8; ++j) part[j] += (double)sj_ld(row[i + j]);      \
      }                                                                        \
      for (; i < n; ++i) part[i % 8] += (double)sj_ld(row[i]);                 \
      const double mean = (((part[0] + part[1]) + (part[2] + part[3])) +       \
                           ((part[4] + part[5]) + (part[6] + part[7]))) / n;   \
      double sq[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                 \
      for (long long k = 0; k < n; ++k) {                                      \
        const double d = (double)sj_ld(row[k]) - mean;                         \
        sq[k % 8] += d * d;                                                    \
      }                                                                        \
      const double ss = ((sq[0] + sq[1]) + (sq[2] + sq[3])) +                  \
                        ((sq[4] + sq[5]) + (sq[6] + sq[7]));                   \
      const double denom = (double)(n - correction);                           \
      sj_put(&out[r], (ACC)(denom > 0 ? ss / denom                              \
                                      : __longlong_as_double(0x7ff8000000000000LL))); \
    }                                                                          \
  }
SJ_INDEX_KERNELS(f32, float, float)
SJ_INDEX_KERNELS(f64, double, double)
SJ_INDEX_KERNELS(f16, __half, float)
SJ_INDEX_KERNELS(bf16, __nv_bfloat16, float)
// Embedding backward's stable counting sort of the tokens by weight row
// (sj_embedding_backward_* then sums each row's tokens in token order, as
// the CPU does). Tokens are taken in chunks of 2^SJ_EMB_CHUNK_LOG2; counts[r
// * chunks + c] is how many tokens of chunk c pick row r (an index outside
// [0, rows) picks none, as on the CPU, which refuses it earlier).
#define SJ_EMB_CHUNK_LOG2 8
extern "C" __global__ void sj_embedding_count(const long long* idx, long long n,
                                              long long rows, long long chunks,
                                              unsigned long long* counts) {
  SJ_LOOP(i, n) {
    const long long r = idx[i];
    if (r >= 0 && r < rows) atomicAdd(&counts[r * chunks + (i >> SJ_EMB_CHUNK_LOG2)], 1ULL);
  }
}
// Exclusive prefix sum of counts[0, m) in place, counts[m] = the total; one
// block: each thread scans a contiguous slice, the slice totals are scanned
// by thread 0 in shared memory.
extern "C" __global__ void sj_embedding_scan(unsigned long long* counts, long long m) {
  __shared__ unsigned long long part[1024];
  const long long t = threadIdx.x, nt = blockDim.x;
  const long long per = (m + nt - 1) / nt;
  const long long lo = t * per < m ? t * per : m, hi = lo + per < m ? lo + per : m;
  unsigned long long sum = 0;
  for (long long i = lo; i < hi; ++i) sum += counts[i];
  part[t] = sum;
  __syncthreads();
  if (t == 0) {
    unsigned long long run = 0;
    for (long long k = 0; k < nt; ++k) {
      const unsigned long long c = part[k];
      part[k] = run;
      run += c;
    }
    counts[m] = run;
  }
  __syncthreads();
  unsigned long long run = part[t];
  for (long long i = lo; i < hi; ++i) {
    const unsigned long long c = counts[i];
    counts[i] = run;
    run += c;
  }
}
// order[offsets[r * chunks + c] + (tokens of row r before i in chunk c)] = i.
extern "C" __global__ void sj_embedding_place(const long long* idx, long long n,
                                              long long rows, long long chunks,
                                              const unsigned long long* offsets,
                                              long long* order) {
  SJ_LOOP(i, n) {
    const long long r = idx[i];
    if (r < 0 || r >= rows) continue;
    const long long c = i >> SJ_EMB_CHUNK_LOG2;
    unsigned long long rank = 0;
    for (long long j = c << SJ_EMB_CHUNK_LOG2; j < i; ++j) rank += idx[j] == r;
    order[offsets[r * chunks + c] + rank] = i;
  }
}
extern "C" __global__ void sj_arange_i64(long long* out, long long n, double start,
                                         double step) {
  SJ_LOOP(i, n) out[i] = (long long)(start + i * step);
}
extern "C" __global__ void sj_arange_i32(int* out, long long n, double start, double step) {
  SJ_LOOP(i, n) out[i] = (int)(start + i * step);
}
)";

const FixedModule& Module() {
  static const FixedModule* m = new FixedModule(FloatKernelModule(
      "sj_index", kIndexKernelBody,
      {"embedding", "embedding_backward", "arange", "argmax", "var", "topk"},
      {"sj_embedding_count", "sj_embedding_scan", "sj_embedding_place",
       "sj_arange_i64", "sj_arange_i32"}));
  return *m;
}

void Launch(Backend& b, const std::string& kernel, int64_t threads, std::vector<void*> args) {
  LaunchFixed(b, Module(), kernel, threads, args.data());
}

bool IsFloat(DType t) { return ir::IsFloating(t); }
std::string Suffix(DType t) { return std::string(ir::DTypeName(t)); }

// Indices as the kernels read them: contiguous i64 (i32 ones converted by
// a generated cast kernel, exactly).
bool IndexDType(DType t) { return t == DType::kI64 || t == DType::kI32; }
Tensor I64Indices(const Tensor& idx) {
  if (idx.dtype() == DType::kI64) return ContiguousOnDevice(idx);
  Tensor wide = empty(idx.shape(), {.dtype = DType::kI64, .device = idx.device()});
  CopyInto(wide, idx);
  return wide;
}

bool Embedding(Backend& b, const KernelArgs& k) {
  if (!IsFloat(k.inputs[0].dtype()) || !IndexDType(k.inputs[1].dtype())) return false;
  const Tensor w = ContiguousOnDevice(k.inputs[0]), idx = I64Indices(k.inputs[1]);
  long long n = idx.numel(), dim = w.shape()[1], rows = w.shape()[0];
  const void* wp = w.data_ptr();
  const void* ip = idx.data_ptr();
  void* op = k.out.data_ptr();
  if (n * dim > 0) {
    Launch(b, absl::StrCat("sj_embedding_", Suffix(w.dtype())), n * dim,
           {&wp, &ip, &op, &n, &dim, &rows});
  }
  return true;
}

// The kernels below write their input's dtype.
bool SameDType(const KernelArgs& k) {
  return k.inputs[0].dtype() == k.out.dtype();
}

// Parallel over the weight's elements, deterministic and bit-identical to
// the CPU kernel (devices/cpu/nn_kernels.cc), which adds each token's
// gradient row into an f64 accumulator in token order: the tokens are
// sorted by row with a stable counting sort (count per row and chunk of
// 256 tokens, one prefix sum, a rank within the chunk), then each (row,
// column) sums its row's tokens in token order. Atomics on the sums would
// be faster still but make the result depend on the schedule; the sort
// keeps CPU and CUDA equal and costs four small launches.
bool EmbeddingBackward(Backend& b, const KernelArgs& k) {
  if (!IsFloat(k.inputs[0].dtype()) || !IndexDType(k.inputs[1].dtype()) ||
      !SameDType(k))
    return false;
  const Tensor g = ContiguousOnDevice(k.inputs[0]), idx = I64Indices(k.inputs[1]);
  long long n = idx.numel(), rows = k.out.shape()[0], dim = k.out.shape()[1];
  constexpr long long kChunkLog2 = 8;  // SJ_EMB_CHUNK_LOG2
  long long chunks =
      std::max<long long>((n + (1LL << kChunkLog2) - 1) >> kChunkLog2, 1);
  long long m = rows * chunks;
  // Zeroed with a memset: kernels never go through Dispatch (a tracer
  // would see the op).
  Tensor offsets = empty({m + 1}, {.dtype = DType::kI64, .device = g.device()});
  Tensor order = empty({std::max<long long>(n, 1)},
                       {.dtype = DType::kI64, .device = g.device()});
  ThrowIfError(b.Memset(offsets.data_ptr(), 0,
                        offsets.numel() * offsets.element_size(),
                        CurrentStream()));
  const void* gp = g.data_ptr();
  const void* ip = idx.data_ptr();
  void* cp = offsets.data_ptr();
  void* orp = order.data_ptr();
  void* op = k.out.data_ptr();
  if (n > 0 && rows > 0) {
    Launch(b, "sj_embedding_count", n, {&ip, &n, &rows, &chunks, &cp});
  }
  // One block (b.Limits().preferred_block threads, at most 1024).
  Launch(b, "sj_embedding_scan", std::min(b.Limits().preferred_block, 1024),
         {&cp, &m});
  if (n > 0 && rows > 0) {
    Launch(b, "sj_embedding_place", n, {&ip, &n, &rows, &chunks, &cp, &orp});
  }
  long long total = rows * dim;
  if (total > 0) {
    Launch(b, absl::StrCat("sj_embedding_backward_", Suffix(g.dtype())), total,
           {&gp, &orp, &cp, &op, &rows, &dim, &chunks});
  }
  return true;
}

bool SliceBackward(Backend& b, const KernelArgs& k) {
  if (!SameDType(k)) return false;
  // Zeros with the gradient copied into the sliced window.
  ThrowIfError(b.Memset(k.out.data_ptr(), 0,
                        k.out.numel() * k.out.element_size(), CurrentStream()));
  const Tensor window = cpu::SliceBackwardWindow(k.out, k.inputs[0], k.attrs);
  CopyInto(window, k.inputs[0]);
  return true;
}

bool Arange(Backend& b, const KernelArgs& k) {
  const DType t = k.out.dtype();
  std::string suffix;
  if (IsFloat(t)) suffix = Suffix(t);
  else if (t == DType::kI64) suffix = "i64";
  else if (t == DType::kI32) suffix = "i32";
  else return false;
  long long n = k.out.numel();
  double start = k.attrs.GetDouble(AttrKey::kStart),
         step = ir::AttrFloat(k.op, k.attrs, ir::AttrKey::kStep);
  void* op = k.out.data_ptr();
  if (n > 0) Launch(b, "sj_arange_" + suffix, n, {&op, &n, &start, &step});
  return true;
}

bool Argmax(Backend& b, const KernelArgs& k) {
  const Tensor& x = k.inputs[0];
  if (!IsFloat(x.dtype()) || x.dim() == 0 || x.numel() == 0) return false;
  const int64_t d = ir::WrapDim(k.attrs.GetInt(AttrKey::kDim), x.dim());
  const std::vector<int64_t> perm = cpu::DimLastPermutation(x.dim(), d);
  const Tensor rows = ContiguousOnDevice(cpu::PermutedView(x, perm));
  long long n = x.shape()[d], count = x.numel() / n;
  // The output's elements are the rows in order (keepdim only adds a 1).
  const void* xp = rows.data_ptr();
  void* op = k.out.data_ptr();
  Launch(b, absl::StrCat("sj_argmax_", Suffix(x.dtype())), count, {&xp, &op, &count, &n});
  return true;
}

// topk along any dim: rows with the dim last, one thread per row picking
// the k elements in order (k scans of the row); written in place when the
// dim is the last, else through a row-shaped buffer.
bool Topk(Backend& b, const KernelArgs& k) {
  const Tensor& x = k.inputs[0];
  if (!IsFloat(x.dtype()) || k.out.numel() == 0) return false;
  const int64_t d =
      ir::WrapDim(ir::AttrInt(k.op, k.attrs, ir::AttrKey::kDim), x.dim());
  const std::vector<int64_t> perm = cpu::DimLastPermutation(x.dim(), d);
  const Tensor rows = ContiguousOnDevice(cpu::PermutedView(x, perm));
  const bool in_place = d == x.dim() - 1 && k.out.is_contiguous();
  Tensor dst = k.out;
  if (!in_place) {
    Shape shape;
    for (int64_t i : perm) shape.push_back(k.out.shape()[i]);
    dst = empty(shape, {.dtype = k.out.dtype(), .device = k.out.device()});
  }
  long long n = x.shape()[d], count = x.numel() / n,
            want = k.attrs.GetInt(AttrKey::kK);
  int largest = ir::AttrBool(k.op, k.attrs, ir::AttrKey::kLargest) ? 1 : 0;
  const bool indices = k.attrs.GetBool(AttrKey::kIndices);
  const void* xp = rows.data_ptr();
  void* vp = indices ? nullptr : dst.data_ptr();
  void* ip = indices ? dst.data_ptr() : nullptr;
  Launch(b, absl::StrCat("sj_topk_", Suffix(x.dtype())), count,
         {&xp, &vp, &ip, &count, &n, &want, &largest});
  if (!in_place) CopyInto(cpu::PermutedView(k.out, perm), dst);
  return true;
}

bool Var(Backend& b, const KernelArgs& k) {
  const Tensor& x = k.inputs[0];
  if (!IsFloat(x.dtype()) || x.dim() == 0 || !SameDType(k)) return false;
  std::vector<int64_t> dims = ValueOrThrow(ir::NormalizeDims(k.attrs.GetInts(AttrKey::kDims), x.dim()));
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  }
  // Reduced dims last, in the order given, as the CPU kernel lays rows out.
  std::vector<int64_t> perm;
  long long n = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  }
  for (int64_t d : dims) {
    perm.push_back(d);
    n *= x.shape()[d];
  }
  if (n == 0 || k.out.numel() == 0) return false;  // the CPU's NaN/empty cases
  const Tensor rows = ContiguousOnDevice(cpu::PermutedView(x, perm));
  long long count = x.numel() / n,
            correction = ir::AttrInt(k.op, k.attrs, ir::AttrKey::kCorrection);
  const void* xp = rows.data_ptr();
  void* op = k.out.data_ptr();
  Launch(b, absl::StrCat("sj_var_", Suffix(x.dtype())), count, {&xp, &op, &count, &n, &correction});
  return true;
}

}  // namespace

const char* IndexKernelSource() { return Module().source.c_str(); }

namespace {

// cat: each operand copied into its window of the result on the device.
bool Cat(Backend&, const KernelArgs& k) {
  cpu::CopyIntoCatWindows(k, &CopyInto);
  return true;
}

}  // namespace

void AddIndexPaths(DevicePaths& paths) {
  paths[static_cast<int>(OpId::kCat)] = &Cat;
  paths[static_cast<int>(OpId::kTopk)] = &Topk;
  paths[static_cast<int>(OpId::kEmbedding)] = &Embedding;
  paths[static_cast<int>(OpId::kEmbeddingBackward)] = &EmbeddingBackward;
  paths[static_cast<int>(OpId::kSliceBackward)] = &SliceBackward;
  paths[static_cast<int>(OpId::kArange)] = &Arange;
  paths[static_cast<int>(OpId::kArgmax)] = &Argmax;
  paths[static_cast<int>(OpId::kVar)] = &Var;
}

}  // namespace stepjit::runtime::cuda
