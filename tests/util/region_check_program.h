// The three-region program that the accuracy checker's tests
// (tests/program/region_check_step.h) and its benchmark
// (bench/region_check_bench.cc) run, at the sizes each wants.
#ifndef STEPJIT_TESTS_UTIL_REGION_CHECK_PROGRAM_H_
#define STEPJIT_TESTS_UTIL_REGION_CHECK_PROGRAM_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"

namespace stepjit::test {

// Three regions: an elementwise chain over an x of [rows, cols] with a
// column sum, a region reading the chain's sum (so it runs on whatever the
// chain computed), and an AdamW-like update of a [g_rows, g_cols] weight
// that writes its step count and moments into their state buffers
// (in_place: memory planning donated them).
inline std::string RegionCheckProgram(int64_t rows, int64_t cols,
                                      int64_t g_rows, int64_t g_cols) {
  return absl::Substitute(
      R"(graph @step(%x: f32[$0] input, %b: f32[$1] state, %t: f32[] state, %beta: f64[] state, %g: f32[$2] input, %m: f32[$2] state, %v: f32[$2] state) {
  %0 = fusion @chain(%x, %b) : (f32[$0], f32[$1]) {
    graph @chain(%p0: f32[$0] input, %p1: f32[$1] input) {
      %0 = mul %p0, %p0 : f32[$0]
      %1 = add %0, %p1 : f32[$0]
      %2 = tanh %1 : f32[$0]
      %3 = sum %2 {dims = [0], keepdim = false} : f32[$1]
      return %2, %3
    }
  }
  %1 = fusion @post(%0#1, %b) : (f32[$1]) {
    graph @post(%p0: f32[$1] input, %p1: f32[$1] input) {
      %0 = mul %p0, %p1 : f32[$1]
      %1 = sub %0, %p1 : f32[$1]
      return %1
    }
  }
  %2 = fusion @adamw(%t, %beta, %g, %m, %v) : (f32[], f32[$2], f32[$2]) {
    graph @adamw(%p0: f32[] input, %p1: f64[] input, %p2: f32[$2] input, %p3: f32[$2] input, %p4: f32[$2] input) {
      %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
      %1 = add_ %p0, %0 {alpha = 1.0, in_place = true} : f32[]
      %2 = pow %p1, %1 : f64[]
      %3 = full {shape = [], value = 1.0, dtype = f64} : f64[]
      %4 = sub %3, %2 : f64[]
      %5 = full {shape = [], value = 0.1, dtype = f32} : f32[]
      %6 = lerp_ %p3, %p2, %5 {in_place = true} : f32[$2]
      %7 = div %6, %4 : f32[$2]
      %8 = addcmul_ %p4, %7, %7 {value = -0.001, in_place = true} : f32[$2]
      return %1, %6, %8
    }
  }
  assign %t, %2#0
  assign %m, %2#1
  assign %v, %2#2
  return %0#0, %1#0
})",
      absl::StrCat(rows, ",", cols), cols, absl::StrCat(g_rows, ",", g_cols));
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_REGION_CHECK_PROGRAM_H_
