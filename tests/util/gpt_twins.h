// Two alike small GPTs, each with its AdamW, for the tests that run one
// compiled and the other eagerly on sequence lengths that change each call.
#ifndef STEPJIT_TESTS_UTIL_GPT_TWINS_H_
#define STEPJIT_TESTS_UTIL_GPT_TWINS_H_

#include <cstdint>

#include "frontend/stepjit.h"

namespace stepjit::test {

// nn::GPT (vocab 17, d_model 16, 2 heads, 1 layer, `context` positions) made
// after manual_seed(5), twice, and AdamW (lr 1e-2) over each; their steps
// clip the gradients to norm 1.0 when `clip`.
struct GptTwins {
  static constexpr int64_t kVocab = 17;

  nn::GPT a, b;
  optim::AdamW opt_a, opt_b;
  bool clip;

  explicit GptTwins(int64_t context, bool clip_grads = false)
      : a(Make(context)),
        b(Make(context)),
        opt_a(a->parameters(), {.lr = 1e-2}),
        opt_b(b->parameters(), {.lr = 1e-2}),
        clip(clip_grads) {}

  static nn::GPT Make(int64_t context) {
    manual_seed(5);
    return nn::GPT(nn::GPTOptions{.vocab = kVocab,
                                  .context = context,
                                  .d_model = 16,
                                  .heads = 2,
                                  .layers = 1});
  }

  // One next-token step of `a` (or `b`).
  Tensor StepA(const Tensor& tokens, const Tensor& targets) {
    return Step(a, opt_a, tokens, targets);
  }
  Tensor StepB(const Tensor& tokens, const Tensor& targets) {
    return Step(b, opt_b, tokens, targets);
  }

  // A next-token step of `model`: cross-entropy over the vocabulary,
  // backward, the gradients clipped when `clip`, AdamW's step.
  Tensor Step(nn::GPT& model, optim::AdamW& opt, const Tensor& tokens,
              const Tensor& targets) const {
    opt.zero_grad();
    Tensor logits = model(tokens);
    Tensor loss =
        cross_entropy(logits.reshape({-1, kVocab}), targets.reshape({-1}));
    loss.backward();
    if (clip) nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    return loss;
  }
};

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_GPT_TWINS_H_
