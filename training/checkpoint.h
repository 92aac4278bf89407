// Checkpoints: state dicts to and from safetensors files, and one file
// holding a model, its optimizer and its grad scaler, readable by PyTorch
// (tools/torch_checkpoint.py; the naming scheme is in docs/checkpoints.md).
//
//   SaveCheckpoint("run.safetensors", {.model = model.ptr(), .optimizer = &opt,
//                                      .scaler = &scaler});
//   absl::Status s = LoadCheckpoint("run.safetensors", {...the same...});
//
// A load checks the whole file against the model, optimizer and scaler
// before it changes anything, then copies into the existing tensors in
// place: on an error nothing has changed, and compiled steps stay valid.
#ifndef STEPJIT_TRAINING_CHECKPOINT_H_
#define STEPJIT_TRAINING_CHECKPOINT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "training/amp/grad_scaler.h"
#include "training/nn/module.h"
#include "training/optim/optimizer.h"
#include "training/state_dict.h"

namespace stepjit {

// Writes the tensors (copied to the host, contiguous) and metadata of
// `state` as a safetensors file, atomically (a temporary file renamed).
absl::Status SaveSafetensors(const std::string& path, const StateDict& state);
// Reads and validates a safetensors file (training/io/safetensors.h lists
// the rules) into fresh CPU tensors, in the file's order.
absl::StatusOr<StateDict> LoadSafetensors(const std::string& path);

// What a checkpoint holds; null members are left out.
struct TrainingState {
  std::shared_ptr<nn::Module> model = nullptr;  // a holder's ptr()
  optim::Optimizer* optimizer = nullptr;
  amp::GradScaler* scaler = nullptr;
};

// The combined state dict: "model.<name>" (Module::state_dict),
// "optimizer.<...>" (Optimizer::state_dict), "scaler.<...>"
// (GradScaler::state_dict), tensors and metadata alike, plus metadata
// "format": "pt".
StateDict CheckpointStateDict(const TrainingState& state);
absl::Status SaveCheckpoint(const std::string& path,
                            const TrainingState& state);
// Every tensor of the file must belong to a given member and every given
// member must find its whole state there.
absl::Status LoadCheckpoint(const std::string& path,
                            const TrainingState& state);

}  // namespace stepjit

#endif  // STEPJIT_TRAINING_CHECKPOINT_H_
