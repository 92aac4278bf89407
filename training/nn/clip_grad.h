// nn::utils::clip_grad_norm_: rescales gradients so their total norm is at
// most max_norm, as torch.nn.utils.clip_grad_norm_, with no host read (the
// norm and the clip factor stay 0-d device tensors), so it traces.
#ifndef STEPJIT_TRAINING_NN_CLIP_GRAD_H_
#define STEPJIT_TRAINING_NN_CLIP_GRAD_H_

#include <vector>

#include "runtime/tensor.h"

namespace stepjit::nn::utils {

// Total norm of the defined grads of `params` (the p-norm of all their
// elements together; norm_type > 0, or infinity for the max-abs norm),
// computed in f32 (f64 for f64 grads). Each grad is multiplied in place by
// min(1, max_norm / (total + 1e-6)). Returns the total norm before
// clipping as a 0-d tensor. error_if_nonfinite reads the norm back to the
// host (a graph break when traced) and throws if it is inf or NaN.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

}  // namespace stepjit::nn::utils

#endif  // STEPJIT_TRAINING_NN_CLIP_GRAD_H_
