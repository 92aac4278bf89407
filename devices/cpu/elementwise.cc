// Eager CPU elementwise kernels: ir/scalar_def.h instantiated with C++ arithmetic.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "devices/cpu/kernels.h"
#include "devices/cpu/loops.h"
#include "ir/host_math.h"
#include "ir/scalar_def.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::OpId;

namespace {

// Eager kernels evaluate the scalar definitions with plain C++ arithmetic.
template <typename C>
using MathFor = ir::HostMath<C>;

// A contiguous unary run, inlined into each ISA's copy below.
template <typename T, typename Acc, typename F>
__attribute__((always_inline)) inline void UnaryRun(T* o, const T* a, int64_t n,
                                                    const F& f) {
  for (int64_t i = 0; i < n; ++i) o[i] = Convert<T>(f(static_cast<Acc>(a[i])));
}

#if defined(__x86_64__)
// The same run for AVX2 (8 f32 lanes where the baseline x86-64 ISA has
// SSE2's 4), chosen at run time. No FMA: the same operations, rounded the
// same way, so the results are the baseline's to the bit.
template <typename T, typename Acc, typename F>
__attribute__((flatten, target("avx2"))) void UnaryRunAvx2(T* o, const T* a,
                                                           int64_t n,
                                                           const F& f) {
  UnaryRun<T, Acc>(o, a, n, f);
}
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// `wide`: the op's math vectorizes in the AVX2 copy (bench/eager_ops_bench.cc
// measures it); others, whose two-range math GCC leaves scalar there, keep
// the baseline copy.
template <typename T, typename Acc, bool wide = false, typename F>
void UnaryLoop(const Tensor& out, const Tensor& x, F f) {
  std::array<Shape, 2> st = {BroadcastByteStrides(out, out.shape()),
                             BroadcastByteStrides(x, out.shape())};
  ForEach<2>(
      out.shape(), st,
      {static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr())},
      // flatten: the op's math (exp's polynomial, called from many
      // kernels) is inlined into the loop, which then vectorizes.
      [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n)
          __attribute__((flatten)) {
            T* o = reinterpret_cast<T*>(p[0]);
            const T* a = reinterpret_cast<const T*>(p[1]);
            if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
#if defined(__x86_64__)
              if (wide && HasAvx2()) {
                UnaryRunAvx2<T, Acc>(o, a, n, f);
                return;
              }
#endif
              UnaryRun<T, Acc>(o, a, n, f);
            } else {
              for (int64_t i = 0; i < n; ++i) {
                *reinterpret_cast<T*>(p[0] + i * s[0]) =
                    Convert<T>(f(static_cast<Acc>(
                        *reinterpret_cast<const T*>(p[1] + i * s[1]))));
              }
            }
          });
}

template <typename T, typename Acc, typename Out, typename F>
void BinaryLoop(const Tensor& out, const Tensor& x, const Tensor& y, F f) {
  std::array<Shape, 3> st = {BroadcastByteStrides(out, out.shape()),
                             BroadcastByteStrides(x, out.shape()),
                             BroadcastByteStrides(y, out.shape())};
  ForEach<3>(
      out.shape(), st,
      {static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr()),
       static_cast<char*>(y.data_ptr())},
      [&](std::array<char*, 3> p, std::array<int64_t, 3> s,
          int64_t n) __attribute__((flatten)) {
        Out* o = reinterpret_cast<Out*>(p[0]);
        const T* a = reinterpret_cast<const T*>(p[1]);
        const T* b = reinterpret_cast<const T*>(p[2]);
        if (s[0] == sizeof(Out) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
          for (int64_t i = 0; i < n; ++i) {
            o[i] =
                Convert<Out>(f(static_cast<Acc>(a[i]), static_cast<Acc>(b[i])));
          }
        } else if (s[0] == sizeof(Out) && s[1] == sizeof(T) && s[2] == 0) {
          const Acc bv = static_cast<Acc>(b[0]);
          for (int64_t i = 0; i < n; ++i)
            o[i] = Convert<Out>(f(static_cast<Acc>(a[i]), bv));
        } else if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(T)) {
          const Acc av = static_cast<Acc>(a[0]);
          for (int64_t i = 0; i < n; ++i)
            o[i] = Convert<Out>(f(av, static_cast<Acc>(b[i])));
        } else {
          for (int64_t i = 0; i < n; ++i) {
            *reinterpret_cast<Out*>(p[0] + i * s[0]) = Convert<Out>(f(
                static_cast<Acc>(*reinterpret_cast<const T*>(p[1] + i * s[1])),
                static_cast<Acc>(
                    *reinterpret_cast<const T*>(p[2] + i * s[2]))));
          }
        }
      });
}

template <OpId op>
void UnaryKernel(const KernelArgs& k) {
  constexpr bool kWide =
      op == OpId::kExp || op == OpId::kSigmoid || op == OpId::kSilu;
  SJ_DISPATCH_ALL(k.out.dtype(), ir::OpName(op), {
    MathFor<Acc> m;
    UnaryLoop<T, Acc, kWide>(k.out, k.inputs[0], [&](Acc x) {
      return ir::ScalarDef<op>::Apply(m, x);
    });
  });
}

template <OpId op>
void BinaryKernel(const KernelArgs& k) {
  SJ_DISPATCH_ALL(k.out.dtype(), ir::OpName(op), {
    MathFor<Acc> m;
    BinaryLoop<T, Acc, T>(k.out, k.inputs[0], k.inputs[1], [&](Acc a, Acc b) {
      return ir::ScalarDef<op>::Apply(m, a, b);
    });
  });
}

template <OpId op>
void CompareKernel(const KernelArgs& k) {
  SJ_DISPATCH_ALL(k.inputs[0].dtype(), ir::OpName(op), {
    MathFor<Acc> m;
    BinaryLoop<T, Acc, bool>(k.out, k.inputs[0], k.inputs[1], [&](Acc a, Acc b) {
      return ir::ScalarDef<op>::Apply(m, a, b);
    });
  });
}

// where moves bits: elements of `W` (an unsigned integer of the element's
// size), with a select the compiler vectorizes on contiguous runs.
template <typename W>
void WhereLoop(const KernelArgs& k) {
  const Tensor &c = k.inputs[0], &x = k.inputs[1], &y = k.inputs[2];
  std::array<Shape, 4> st = {
      BroadcastByteStrides(k.out, k.out.shape()), BroadcastByteStrides(c, k.out.shape()),
      BroadcastByteStrides(x, k.out.shape()), BroadcastByteStrides(y, k.out.shape())};
  constexpr int64_t kSize = sizeof(W);
  ForEach<4>(
      k.out.shape(), st,
      {static_cast<char*>(k.out.data_ptr()), static_cast<char*>(c.data_ptr()),
       static_cast<char*>(x.data_ptr()), static_cast<char*>(y.data_ptr())},
      [&](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) {
        if (s[0] == kSize && s[1] == 1 && s[2] == kSize && s[3] == kSize) {
          W* o = reinterpret_cast<W*>(p[0]);
          // bool is one byte holding 0 or 1.
          const uint8_t* cond = reinterpret_cast<const uint8_t*>(p[1]);
          const W* a = reinterpret_cast<const W*>(p[2]);
          const W* b = reinterpret_cast<const W*>(p[3]);
          // A mask, not a branch per element.
          for (int64_t i = 0; i < n; ++i) {
            const W mask = static_cast<W>(W{0} - static_cast<W>(cond[i]));
            o[i] = static_cast<W>((a[i] & mask) | (b[i] & ~mask));
          }
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          const bool take_x = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
          W v;
          std::memcpy(&v, take_x ? p[2] + i * s[2] : p[3] + i * s[3], kSize);
          std::memcpy(p[0] + i * s[0], &v, kSize);
        }
      });
}

void WhereKernel(const KernelArgs& k) {
  switch (k.out.element_size()) {
    case 1:
      return WhereLoop<uint8_t>(k);
    case 2:
      return WhereLoop<uint16_t>(k);
    case 4:
      return WhereLoop<uint32_t>(k);
    case 8:
      return WhereLoop<uint64_t>(k);
    default:
      SJ_CHECK(false, "where: element size ", k.out.element_size());
  }
}

template <OpId op>
void UpdateKernel(const KernelArgs& k) {
  const Tensor& self = k.out;
  // Absent operands read a broadcast zero (all-zero bits are 0 in every dtype).
  static const double kZero[1] = {0.0};
  const Tensor a = k.inputs.size() > 1 ? k.inputs[1] : Tensor();
  const Tensor b = k.inputs.size() > 2 ? k.inputs[2] : Tensor();
  Shape zeros(self.dim(), 0);
  auto strides = [&](const Tensor& t) {
    return t.defined() ? BroadcastByteStrides(t, self.shape()) : zeros;
  };
  auto base = [&](const Tensor& t) {
    return t.defined() ? static_cast<char*>(t.data_ptr())
                       : reinterpret_cast<char*>(const_cast<double*>(kZero));
  };
  std::array<Shape, 3> st = {strides(self), strides(a), strides(b)};
  const double alpha = k.attrs.GetDouble(AttrKey::kAlpha, 1.0);
  const double value = k.attrs.GetDouble(AttrKey::kValue, 0.0);
  SJ_DISPATCH_ALL(self.dtype(), ir::OpName(op), {
    MathFor<Acc> m;
    const Acc alpha_v = static_cast<Acc>(alpha), value_v = static_cast<Acc>(value);
    // Operand values are read as T (dispatch converted them to self's dtype,
    // except copy_, whose source keeps its dtype and is handled separately).
    ForEach<3>(self.shape(), st, {static_cast<char*>(self.data_ptr()), base(a), base(b)},
               [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
                 auto at = [](char* base, int64_t stride, int64_t i) {
                   return static_cast<Acc>(*reinterpret_cast<const T*>(base + i * stride));
                 };
                 if (s[0] == sizeof(T) && (s[1] == sizeof(T) || s[1] == 0) &&
                     (s[2] == sizeof(T) || s[2] == 0)) {
                   T* o = reinterpret_cast<T*>(p[0]);
                   const T* x = reinterpret_cast<const T*>(p[1]);
                   const T* y = reinterpret_cast<const T*>(p[2]);
                   const int64_t ix = s[1] ? 1 : 0, iy = s[2] ? 1 : 0;
                   for (int64_t i = 0; i < n; ++i) {
                     o[i] = Convert<T>(ir::ScalarDef<op>::Apply(
                         m, static_cast<Acc>(o[i]), static_cast<Acc>(x[i * ix]),
                         static_cast<Acc>(y[i * iy]), alpha_v, value_v));
                   }
                   return;
                 }
                 for (int64_t i = 0; i < n; ++i) {
                   T* o = reinterpret_cast<T*>(p[0] + i * s[0]);
                   *o = Convert<T>(ir::ScalarDef<op>::Apply(m, static_cast<Acc>(*o),
                                                            at(p[1], s[1], i), at(p[2], s[2], i),
                                                            alpha_v, value_v));
                 }
               });
  });
}

void CastKernel(const KernelArgs& k) { CopyInto(k.out, k.inputs[0]); }
void CopyKernel(const KernelArgs& k) { CopyInto(k.out, k.inputs[1]); }

}  // namespace

Shape BroadcastByteStrides(const Tensor& t, ShapeRef shape) {
  Shape out(shape.size(), 0);
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.shape()[i] != 1) out[lead + i] = t.strides()[i] * t.element_size();
  }
  return out;
}

void CopyInto(const Tensor& dst, const Tensor& src) {
  std::array<Shape, 2> st = {BroadcastByteStrides(dst, dst.shape()),
                             BroadcastByteStrides(src, dst.shape())};
  // A source with holes (attention's q, k or v: a column slice of the QKV
  // product, viewed as heads) is walked in its own memory order (the
  // innermost dim stays innermost): in the destination's order its short
  // runs lie far apart and the reads stall on memory latency, while in its
  // own order they stream and the writes scatter over a few destinations.
  // A dense source (a permuted contiguous tensor) keeps the destination's
  // order, where its runs form a few interleaved sequential streams.
  Shape shape = dst.shape();
  int64_t span = 1;  // elements from the source's first to its last, + 1
  for (size_t d = 0; d < shape.size(); ++d)
    span += (shape[d] - 1) * std::abs(st[1][d]) / src.element_size();
  if (shape.size() > 2 && span > dst.numel()) {
    std::vector<size_t> order(shape.size() - 1);
    for (size_t d = 0; d < order.size(); ++d) order[d] = d;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::abs(st[1][a]) > std::abs(st[1][b]);
    });
    order.push_back(shape.size() - 1);
    Shape permuted_shape;
    std::array<Shape, 2> permuted;
    for (size_t d : order) {
      permuted_shape.push_back(shape[d]);
      for (int k = 0; k < 2; ++k) permuted[k].push_back(st[k][d]);
    }
    shape = std::move(permuted_shape);
    st = std::move(permuted);
  }
  std::array<char*, 2> base = {static_cast<char*>(dst.data_ptr()),
                               static_cast<char*>(src.data_ptr())};
  SJ_DISPATCH_ALL(dst.dtype(), "copy", {
    using D = T;
    SJ_DISPATCH_ALL(src.dtype(), "copy", {
      ForEach<2>(shape, st, base,
                 [&](std::array<char*, 2> p, std::array<int64_t, 2> s,
                     int64_t n) {
                   if (s[0] == sizeof(D) && s[1] == sizeof(T)) {
                     D* o = reinterpret_cast<D*>(p[0]);
                     const T* a = reinterpret_cast<const T*>(p[1]);
                     for (int64_t i = 0; i < n; ++i) o[i] = Convert<D>(a[i]);
                   } else {
                     for (int64_t i = 0; i < n; ++i) {
                       *reinterpret_cast<D*>(p[0] + i * s[0]) =
                           Convert<D>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
                     }
                   }
                 });
    });
  });
}

void RegisterElementwiseKernels(KernelTable& table) {
#define SJ_REG_UNARY(e, expr) table[static_cast<int>(OpId::k##e)] = &UnaryKernel<OpId::k##e>;
#define SJ_REG_BINARY(e, expr) table[static_cast<int>(OpId::k##e)] = &BinaryKernel<OpId::k##e>;
#define SJ_REG_COMPARE(e, expr) table[static_cast<int>(OpId::k##e)] = &CompareKernel<OpId::k##e>;
#define SJ_REG_UPDATE(e, expr) table[static_cast<int>(OpId::k##e)] = &UpdateKernel<OpId::k##e>;
  SJ_UNARY_SCALAR_DEFS(SJ_REG_UNARY)
  SJ_BINARY_SCALAR_DEFS(SJ_REG_BINARY)
  SJ_COMPARE_SCALAR_DEFS(SJ_REG_COMPARE)
  SJ_UPDATE_SCALAR_DEFS(SJ_REG_UPDATE)
#undef SJ_REG_UNARY
#undef SJ_REG_BINARY
#undef SJ_REG_COMPARE
#undef SJ_REG_UPDATE
  table[static_cast<int>(OpId::kCopyInplace)] = &CopyKernel;
  table[static_cast<int>(OpId::kWhere)] = &WhereKernel;
  table[static_cast<int>(OpId::kCast)] = &CastKernel;
}

}  // namespace stepjit::runtime::cpu
