// User errors name the shapes involved, against the float64 references of
// tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

// ---------------------------------------------------------------------------
// User errors name the shapes involved.

TEST(ErrorTest, ShapeMismatchesNameBothShapes) {
  ExpectError([] { add(zeros({2, 3}), zeros({2})); }, {"add", "[2, 3]", "[2]"});
  ExpectError(
      [] {
        mul(zeros({4, 3}), zeros({2, 1, 2}));
      },
      {"mul", "[4, 3]", "[2, 1, 2]"});
  ExpectError(
      [] {
        matmul(zeros({2, 3}), zeros({4, 5}));
      },
      {"matmul", "[2, 3]", "[4, 5]", "3 vs 4"});
  ExpectError(
      [] {
        matmul(zeros({2, 3}), zeros({2, 5}), true, true);
      },
      {"matmul", "[2, 3]", "[2, 5]"});
  ExpectError(
      [] {
        matmul(zeros({3}), zeros({3, 5}));
      },
      {"matmul", "[3]", "[3, 5]"});
  ExpectError(
      [] {
        matmul(zeros({2, 3}), zeros({3, 4}, {.dtype = DType::kF64}));
      },
      {"matmul", "f32", "f64"});
  ExpectError(
      [] {
        matmul(zeros({2, 2, 3}), zeros({3, 3, 4}));
      },
      {"matmul", "[2, 2, 3]", "[3, 3, 4]"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, 3}, {2}, DType::kI64));
      },
      {"cross_entropy", "target 3", "3 classes"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, -1}, {2}, DType::kI64));
      },
      {"cross_entropy", "-1"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, 2, 0}, {3}, DType::kI64));
      },
      {"cross_entropy", "[2, 3]", "[3]"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, 2}, {2}, DType::kI32));
      },
      {"cross_entropy", "i64"});
  ExpectError(
      [] {
        layer_norm(zeros({2, 3, 4}), {5});
      },
      {"layer_norm", "[5]", "[2, 3, 4]"});
  ExpectError(
      [] {
        layer_norm(zeros({2, 3, 4}), {4}, zeros({3}));
      },
      {"layer_norm", "[4]", "[3]"});
  ExpectError(
      [] {
        zeros({2, 3}).reshape({4, 2});
      },
      {"reshape", "[2, 3]", "4, 2"});
  ExpectError([] { zeros({2, 3}).view({5}); }, {"[2, 3]", "5"});
  ExpectError([] { softmax(zeros({2, 3}), 2); }, {"softmax", "dim 2"});
  ExpectError(
      [] {
        where(Make({1, 0}, {2}, DType::kBool), zeros({3}), zeros({3}));
      },
      {"where", "[2]", "[3]"});
}

}  // namespace
}  // namespace stepjit::op_test
