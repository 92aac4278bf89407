// Strided N-operand loops with broadcasting, dtype dispatch and conversions for CPU kernels.
#ifndef STEPJIT_DEVICES_CPU_LOOPS_H_
#define STEPJIT_DEVICES_CPU_LOOPS_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "ir/dtype.h"
#include "ir/status.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime::cpu {

template <typename To, typename From>
inline To Convert(From v) {
  if constexpr (std::is_same_v<To, ir::Half> || std::is_same_v<To, ir::BFloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, ir::Half> || std::is_same_v<From, ir::BFloat16>) {
      return static_cast<float>(v) != 0.0f;
    } else {
      return v != From(0);  // in the source type: tiny doubles stay true
    }
  } else if constexpr (std::is_same_v<From, ir::Half> ||
                       std::is_same_v<From, ir::BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Runs `body` with `T` (storage type) and `Acc` (arithmetic type) bound to dtype.
#define SJ_DTYPE_CASE(dt, ...)                                   \
  case ::stepjit::ir::DType::dt: {                               \
    using T = typename ::stepjit::ir::DTypeTraits<::stepjit::ir::DType::dt>::T; \
    using Acc = typename ::stepjit::ir::DTypeTraits<::stepjit::ir::DType::dt>::Acc; \
    (void)sizeof(T);                                             \
    (void)sizeof(Acc);                                           \
    __VA_ARGS__;                                                 \
    break;                                                       \
  }
#define SJ_DISPATCH_FLOAT(dtype, name, ...)                            \
  switch (dtype) {                                                     \
    SJ_DTYPE_CASE(kF32, __VA_ARGS__)                                   \
    SJ_DTYPE_CASE(kF64, __VA_ARGS__)                                   \
    SJ_DTYPE_CASE(kF16, __VA_ARGS__)                                   \
    SJ_DTYPE_CASE(kBF16, __VA_ARGS__)                                  \
    default:                                                           \
      throw ::stepjit::Error(::absl::StrCat(name, ": dtype ",          \
                                            ::stepjit::ir::DTypeName(dtype), \
                                            " is not supported (expected a float dtype)")); \
  }
#define SJ_DISPATCH_ALL(dtype, name, ...) \
  switch (dtype) {                        \
    SJ_DTYPE_CASE(kF32, __VA_ARGS__)      \
    SJ_DTYPE_CASE(kF64, __VA_ARGS__)      \
    SJ_DTYPE_CASE(kF16, __VA_ARGS__)      \
    SJ_DTYPE_CASE(kBF16, __VA_ARGS__)     \
    SJ_DTYPE_CASE(kI64, __VA_ARGS__)      \
    SJ_DTYPE_CASE(kI32, __VA_ARGS__)      \
    SJ_DTYPE_CASE(kBool, __VA_ARGS__)     \
  }

// Elements per task below which kernels stay on one thread.
inline constexpr int64_t kParallelGrain = 32768;

// Iterates over `shape` for N operands given byte strides (0 = broadcast).
// body(std::array<char*, N> ptrs, std::array<int64_t, N> inner_byte_strides,
//      int64_t count) handles one run along the innermost dim.
template <int N, typename Body>
void ForEach(ShapeRef shape, const std::array<Shape, N>& byte_strides,
             std::array<char*, N> base, Body&& body) {
  // Drop size-1 dims, then merge dims that are contiguous for every operand.
  Shape dims;
  std::array<Shape, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    dims.push_back(shape[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(byte_strides[k][d]);
  }
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) {
    bool merge = true;
    for (int k = 0; k < N; ++k) merge &= st[k][d] == st[k][d + 1] * dims[d + 1];
    if (!merge) continue;
    dims[d] *= dims[d + 1];
    dims.erase(dims.begin() + d + 1);
    for (int k = 0; k < N; ++k) {
      st[k][d] = st[k][d + 1];
      st[k].erase(st[k].begin() + d + 1);
    }
  }
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  std::array<int64_t, N> inner{};
  const int64_t inner_n = dims.empty() ? 1 : dims.back();
  if (!dims.empty()) {
    for (int k = 0; k < N; ++k) inner[k] = st[k].back();
  }
  const int64_t outer_rank = dims.empty() ? 0 : static_cast<int64_t>(dims.size()) - 1;
  const int64_t total = ir::NumElements(dims);
  ParallelFor(total, kParallelGrain, [&](int64_t begin, int64_t end) {
    // The outer index of the first run, then an odometer: one division per
    // task, not per run (runs are short for permuted operands).
    int64_t col = begin % inner_n;
    Shape idx(static_cast<size_t>(outer_rank), 0);
    std::array<char*, N> row = base;
    for (int64_t d = outer_rank - 1, rem = begin / inner_n; d >= 0; --d) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      for (int k = 0; k < N; ++k) row[k] += idx[d] * st[k][d];
    }
    for (int64_t pos = begin; pos < end;) {
      std::array<char*, N> p = row;
      for (int k = 0; k < N; ++k) p[k] += col * inner[k];
      const int64_t count = std::min(inner_n - col, end - pos);
      body(p, inner, count);
      pos += count;
      col = 0;
      for (int64_t d = outer_rank - 1; d >= 0; --d) {
        for (int k = 0; k < N; ++k) row[k] += st[k][d];
        if (++idx[d] < dims[d]) break;
        for (int k = 0; k < N; ++k) row[k] -= dims[d] * st[k][d];
        idx[d] = 0;
      }
    }
  });
}

// Byte strides of `t` broadcast to `shape` (right-aligned; size-1 dims -> 0).
Shape BroadcastByteStrides(const Tensor& t, ShapeRef shape);

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_LOOPS_H_
