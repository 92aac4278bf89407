// Type rules of the convolution and pooling ops, for ir/infer.cc.
#ifndef STEPJIT_IR_INFER_CONV_H_
#define STEPJIT_IR_INFER_CONV_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/infer.h"

namespace stepjit::ir {

// The result type of a kConvolution op (conv2d, max_pool2d, avg_pool2d and
// their gradients), after checking ranks, dtypes, channels and the window
// (ir/conv.h).
absl::StatusOr<TensorType> InferConvolution(OpId op,
                                            absl::Span<const TensorType> in,
                                            const Attrs& attrs);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_INFER_CONV_H_
