// Dataset row gathering: memcpy of whole rows into fresh storage.
#include "training/data/dataset.h"

#include <cstring>
#include <memory>
#include <utility>

#include "ir/shape.h"
#include "ir/status.h"

namespace stepjit::data {
namespace {

// Bytes in one dim-0 row of a contiguous tensor.
int64_t RowBytes(const Tensor& t) {
  int64_t elems = 1;
  for (int64_t i = 1; i < t.dim(); ++i) elems *= t.size(i);
  return elems * t.element_size();
}

Tensor GatherRows(const Tensor& src, absl::Span<const int64_t> indices) {
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(indices.size());
  const int64_t row_bytes = RowBytes(src);
  // Built directly on Storage: workers call this concurrently, and it must
  // stay invisible to op dispatch (and so to the tracer and autograd).
  auto storage = std::make_shared<Storage>(
      row_bytes * static_cast<int64_t>(indices.size()), Device::cpu());
  const auto* in = static_cast<const uint8_t*>(src.data_ptr());
  auto* out = static_cast<uint8_t*>(storage->data());
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(out + i * row_bytes, in + indices[i] * row_bytes, row_bytes);
  }
  return MakeTensor(std::move(storage), shape, ir::ContiguousStrides(shape), 0,
                    src.dtype());
}

// Rows [0, n) of a contiguous tensor, sharing its storage.
Tensor LeadingRows(const Tensor& t, int64_t n) {
  Shape shape = t.shape();
  shape[0] = n;
  return MakeTensor(t.storage(), shape, t.strides(), t.offset(), t.dtype());
}

}  // namespace

Dataset::Dataset(Tensor inputs, Tensor targets) {
  SJ_REQUIRE(inputs.defined() && targets.defined(),
             "Dataset: inputs and targets must both be defined tensors");
  SJ_REQUIRE(inputs.dim() >= 1 && targets.dim() >= 1,
             "Dataset: inputs and targets need at least one dim (samples), got "
             "inputs of shape ",
             ir::ShapeToString(inputs.shape()), " and targets of shape ",
             ir::ShapeToString(targets.shape()));
  SJ_REQUIRE(inputs.size(0) == targets.size(0),
             "Dataset: inputs and targets must have the same number of samples "
             "along dim 0, got inputs of shape ",
             ir::ShapeToString(inputs.shape()), " and targets of shape ",
             ir::ShapeToString(targets.shape()));
  SJ_REQUIRE(inputs.device().is_cpu() && targets.device().is_cpu(),
             "Dataset: tensors must be on the cpu, got inputs on ",
             inputs.device().str(), " and targets on ", targets.device().str());
  inputs_ = inputs.is_contiguous() ? std::move(inputs) : inputs.contiguous();
  targets_ =
      targets.is_contiguous() ? std::move(targets) : targets.contiguous();
  size_ = inputs_.size(0);
}

Batch Dataset::Get(absl::Span<const int64_t> indices) const {
  for (int64_t i : indices) {
    SJ_REQUIRE(i >= 0 && i < size_, "Dataset::Get: index ", i,
               " is out of range for a dataset of ", size_, " samples");
  }
  return Batch{GatherRows(inputs_, indices), GatherRows(targets_, indices)};
}

Dataset Dataset::Subset(int64_t n) const {
  SJ_REQUIRE(n >= 0 && n <= size_, "Dataset::Subset: n must be in [0, ", size_,
             "], got ", n);
  if (!inputs_.defined()) return *this;
  return Dataset(LeadingRows(inputs_, n), LeadingRows(targets_, n));
}

}  // namespace stepjit::data
