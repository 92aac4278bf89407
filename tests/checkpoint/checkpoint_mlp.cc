// A small MLP trainer for the PyTorch round-trip test (torch_roundtrip.py):
// trains Linear(20,32)-ReLU-Linear(32,32)-ReLU-Linear(32,5) with AdamW
// (lr 1e-2, weight decay 1e-2) or, with --sgd, SGD (lr 0.05, momentum 0.9,
// dampening 0.1, weight decay 1e-3) on batches read from a safetensors file,
// optionally resuming from and saving a checkpoint, and writes its losses
// and eval logits.
//
//   checkpoint_mlp DATA FIRST LAST OUT [--load CKPT] [--save CKPT]
//                  [--compiled] [--sgd]
//
// DATA holds x: f32[B, N, 20], y: i64[B, N] and eval_x: f32[M, 20]; batches
// FIRST..LAST-1 are trained. OUT receives losses: f32[LAST-FIRST],
// logits_before and logits_after: f32[M, 5] (eval logits after loading and
// after training).
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "tests/util/train_step.h"

namespace {

using namespace stepjit;  // NOLINT: a test program, mirrors libtorch usage

int Fail(const std::string& message) {
  std::cerr << "checkpoint_mlp: " << message << "\n";
  return 1;
}

int Main(int argc, char** argv) {
  if (argc < 5) {
    return Fail(
        "usage: checkpoint_mlp DATA FIRST LAST OUT [--load CKPT] [--save CKPT] "
        "[--compiled]");
  }
  const std::string data_path = argv[1], out_path = argv[4];
  const int first = std::atoi(argv[2]), last = std::atoi(argv[3]);
  std::string load, save;
  bool compiled = false, sgd = false;
  for (int i = 5; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--compiled") {
      compiled = true;
    } else if (arg == "--sgd") {
      sgd = true;
    } else if ((arg == "--load" || arg == "--save") && i + 1 < argc) {
      (arg == "--load" ? load : save) = argv[++i];
    } else {
      return Fail("unexpected argument '" + arg + "'");
    }
  }
  absl::StatusOr<StateDict> data = LoadSafetensors(data_path);
  if (!data.ok()) return Fail(data.status().ToString());
  const Tensor* x = data->find("x");
  const Tensor* y = data->find("y");
  const Tensor* eval_x = data->find("eval_x");
  if (x == nullptr || y == nullptr || eval_x == nullptr)
    return Fail("DATA needs x, y and eval_x");

  manual_seed(0);
  nn::Sequential model(nn::Linear(20, 32), nn::ReLU(), nn::Linear(32, 32),
                       nn::ReLU(), nn::Linear(32, 5));
  std::unique_ptr<optim::Optimizer> optimizer;
  if (sgd) {
    optimizer = std::make_unique<optim::SGD>(
        model.parameters(), optim::SGDOptions{.lr = 0.05,
                                              .momentum = 0.9,
                                              .dampening = 0.1,
                                              .weight_decay = 1e-3});
  } else {
    optimizer = std::make_unique<optim::AdamW>(
        model.parameters(),
        optim::AdamWOptions{.lr = 1e-2, .weight_decay = 1e-2});
  }
  optim::Optimizer& opt = *optimizer;
  const TrainingState state{.model = model.ptr(), .optimizer = &opt};
  if (!load.empty()) {
    if (absl::Status s = LoadCheckpoint(load, state); !s.ok())
      return Fail(s.ToString());
  }
  auto eval = [&] {
    NoGradGuard no_grad;
    return model(*eval_x);
  };
  StateDict out;
  out.tensors.emplace_back("logits_before", eval());
  auto step = test::CrossEntropyStep(model, opt);
  auto run = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
  std::vector<float> losses;
  for (int b = first; b < last; ++b) {
    losses.push_back(static_cast<float>(
        run(x->slice(0, b, b + 1).squeeze(0), y->slice(0, b, b + 1).squeeze(0))
            .item()));
  }
  out.tensors.emplace_back(
      "losses", from_vector(losses, {static_cast<int64_t>(losses.size())}));
  out.tensors.emplace_back("logits_after", eval());
  if (absl::Status s = SaveSafetensors(out_path, out); !s.ok())
    return Fail(s.ToString());
  if (!save.empty()) {
    if (absl::Status s = SaveCheckpoint(save, state); !s.ok())
      return Fail(s.ToString());
  }
  std::cout << "checkpoint_mlp: trained batches " << first << ".." << last - 1
            << (compiled ? " compiled" : " eager") << (sgd ? " SGD" : " AdamW")
            << ", last loss " << losses.back() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const stepjit::Error& e) {
    return Fail(e.what());
  }
}
