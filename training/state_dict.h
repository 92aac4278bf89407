// StateDict (named tensors plus string metadata, the contents of a
// safetensors file) and LoadPlan (a load whose checks have all passed).
//
// Loads are two-phase so that a failed load changes nothing: each owner
// (module, optimizer, grad scaler) first checks a state dict completely and
// returns a LoadPlan; only when every check of every owner passed are the
// plans applied. Applying copies into the existing tensors in place, so a
// compiled step that bound them by identity stays valid.
#ifndef STEPJIT_TRAINING_STATE_DICT_H_
#define STEPJIT_TRAINING_STATE_DICT_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "runtime/tensor.h"

namespace stepjit {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct StateDict {
  NamedTensors tensors;                         // in file order
  std::map<std::string, std::string> metadata;  // safetensors __metadata__

  // The tensor called `name`, or nullptr.
  const Tensor* find(absl::string_view name) const;
  // The entries (tensors and metadata) whose names start with `prefix`,
  // with the prefix removed: "optimizer.state.0.exp_avg" under
  // "optimizer." is "state.0.exp_avg".
  StateDict sub(absl::string_view prefix) const;
  // Adds `other`'s entries with `prefix` prepended.
  void merge(absl::string_view prefix, const StateDict& other);
};

class LoadPlan {
 public:
  // dst <- src in place: converted to dst's dtype (floating dtypes only) and
  // device first; bumps dst's version (amp weight copies refresh from it).
  void Copy(const Tensor& dst, const Tensor& src);
  void Then(std::function<void()> action) {
    actions_.push_back(std::move(action));
  }
  void Append(LoadPlan other);
  // Runs the copies and actions in order (nothing here can fail a check).
  void Apply();

 private:
  std::vector<std::function<void()>> actions_;
};

// dst <- src in place, as LoadPlan::Copy does it.
void CopyInPlace(const Tensor& dst, const Tensor& src);

// Checks a tensor from a file against the one it will be copied into:
// "<what>: expected f32[4, 3], found f32[3, 4]". Floating dtypes convert
// into each other; any other dtype difference is an error.
absl::Status CheckLoadable(const std::string& what, const Tensor& expected,
                           const Tensor& found);

// A list of names for an error message, at most `limit` of them.
std::string NameList(const std::vector<std::string>& names, size_t limit = 8);

}  // namespace stepjit

#endif  // STEPJIT_TRAINING_STATE_DICT_H_
