// Checkpoints: tensors <-> safetensors bytes, and the combined
// model/optimizer/scaler file with its all-or-nothing load.
#include "training/checkpoint.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/status.h"
#include "runtime/host_memory.h"
#include "training/io/safetensors.h"

namespace stepjit {
namespace {

// safetensors data is little-endian; tensors are copied byte for byte.
static_assert(std::endian::native == std::endian::little,
              "checkpoints assume a little-endian host");

absl::Status WithPath(const std::string& path, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

}  // namespace

absl::Status SaveSafetensors(const std::string& path, const StateDict& state) {
  std::vector<Tensor> host;  // keeps the bytes the views point into alive
  std::vector<io::SafetensorsTensorView> views;
  for (const auto& [name, t] : state.tensors) {
    if (!t.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", name, "' is undefined"));
    }
    if (t.storage()->is_meta()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", name,
                       "' is a shape-only (meta) tensor and has no data"));
    }
    host.push_back(t.to(Device::cpu()).contiguous());
    const Tensor& h = host.back();
    views.push_back(
        {name, h.dtype(),
         std::vector<int64_t>(h.shape().begin(), h.shape().end()),
         absl::string_view(static_cast<const char*>(h.data_ptr()),
                           static_cast<size_t>(h.numel() * h.element_size()))});
  }
  absl::StatusOr<std::string> bytes =
      io::SerializeSafetensors(views, state.metadata);
  if (!bytes.ok()) return WithPath(path, bytes.status());
  return io::WriteFileAtomically(path, *bytes);
}

namespace {
absl::StatusOr<StateDict> LoadSafetensorsOrThrow(const std::string& path) {
  ASSIGN_OR_RETURN(const io::SafetensorsFile file,
                   io::ReadSafetensorsFile(path));
  // Only the header has been read: refuse tensors that cannot fit in memory
  // before allocating any (a sparse file can name a terabyte in a few bytes).
  const double have = PhysicalMemoryBytes();
  if (have > 0 && static_cast<double>(file.data_bytes()) > have) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: its %d tensors hold %d bytes (%.3g GiB); this machine has %.3g "
        "GiB of memory",
        path, file.entries().size(), file.data_bytes(),
        static_cast<double>(file.data_bytes()) / (1 << 30), have / (1 << 30)));
  }
  StateDict out;
  out.metadata = file.metadata();
  for (const io::SafetensorsEntry& e : file.entries()) {
    if (!e.dtype.ir.has_value()) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": tensor '", e.name, "' has dtype ", e.dtype.name,
          ", which stepjit has no dtype for (it has F32, F64, F16, BF16, "
          "I64, I32 and BOOL)"));
    }
    Tensor t = empty(e.shape, {.dtype = *e.dtype.ir});
    RETURN_IF_ERROR(file.Read(e, t.data_ptr()));
    if (t.dtype() == DType::kBool) {
      // Any byte but 0 or 1 would be a bool value C++ does not have.
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (p[i] > 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": tensor '", e.name, "' (BOOL) holds byte ",
              static_cast<int>(p[i]), " at element ", i, "; expected 0 or 1"));
        }
      }
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}
}  // namespace

absl::StatusOr<StateDict> LoadSafetensors(const std::string& path) {
  return StatusOnAllocationFailure(absl::StrCat("loading ", path), [&] {
    return LoadSafetensorsOrThrow(path);
  });
}

StateDict CheckpointStateDict(const TrainingState& state) {
  StateDict sd;
  sd.metadata["format"] = "pt";
  if (state.model != nullptr)
    sd.merge("model.", StateDict{state.model->state_dict(), {}});
  if (state.optimizer != nullptr)
    sd.merge("optimizer.", state.optimizer->state_dict());
  if (state.scaler != nullptr) sd.merge("scaler.", state.scaler->state_dict());
  return sd;
}

absl::Status SaveCheckpoint(const std::string& path,
                            const TrainingState& state) {
  return SaveSafetensors(path, CheckpointStateDict(state));
}

namespace {

// Values PyTorch loads without a word but that training cannot recover
// from: NaN or inf in floating-point tensors, and a negative second moment
// (sqrt of it is NaN). Loaded as PyTorch does, with one warning per tensor.
void WarnOfSuspectValues(const std::string& path, const StateDict& sd) {
  for (const auto& [name, t] : sd.tensors) {
    if (!ir::IsFloating(t.dtype()) || t.numel() == 0) continue;
    const std::vector<double> v =
        t.to(Device::cpu()).to(DType::kF64).contiguous().to_vector<double>();
    int64_t bad = 0, negative = 0;
    for (const double e : v) {
      bad += std::isfinite(e) ? 0 : 1;
      negative += e < 0 ? 1 : 0;
    }
    auto warn = [&](int64_t count, const char* what, const char* why) {
      if (count == 0) return;
      std::cerr << "stepjit: warning: " << path << ": tensor '" << name
                << "' holds " << count << " " << what << (count == 1 ? "" : "s")
                << " (" << why << ")\n";
    };
    warn(bad, "NaN or inf value",
         "loaded, as PyTorch does; training from it will produce NaN");
    if (absl::EndsWith(name, ".exp_avg_sq")) {
      warn(negative, "negative value",
           "a second moment is never negative; its square root will be NaN");
    }
  }
}

}  // namespace

absl::Status LoadCheckpoint(const std::string& path,
                            const TrainingState& state) {
  ASSIGN_OR_RETURN(const StateDict sd, LoadSafetensors(path));
  struct Part {
    const char* prefix;
    const char* what;
    bool given;
  };
  const Part parts[] = {{"model.", "model", state.model != nullptr},
                        {"optimizer.", "optimizer", state.optimizer != nullptr},
                        {"scaler.", "grad scaler", state.scaler != nullptr}};
  std::vector<std::string> stray;
  for (const auto& [name, t] : sd.tensors) {
    bool known = false;
    for (const Part& p : parts) known |= absl::StartsWith(name, p.prefix);
    if (!known) stray.push_back(name);
  }
  if (!stray.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensors ", NameList(stray),
                     " belong to no part of a checkpoint (expected names under "
                     "model., optimizer., scaler.)"));
  }
  for (const Part& p : parts) {
    const StateDict part = sd.sub(p.prefix);
    if (!p.given && !part.tensors.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the file holds ", p.what, " state (",
                       part.tensors.size(), " tensors under '", p.prefix,
                       "') but no ", p.what, " was given to load it into"));
    }
  }
  LoadPlan plan;
  if (state.model != nullptr) {
    absl::StatusOr<LoadPlan> p =
        state.model->PlanLoad(sd.sub("model.").tensors);
    if (!p.ok()) return WithPath(path, p.status());
    plan.Append(*std::move(p));
  }
  if (state.optimizer != nullptr) {
    absl::StatusOr<LoadPlan> p =
        state.optimizer->PlanLoad(sd.sub("optimizer."));
    if (!p.ok()) return WithPath(path, p.status());
    plan.Append(*std::move(p));
  }
  if (state.scaler != nullptr) {
    absl::StatusOr<LoadPlan> p = state.scaler->PlanLoad(sd.sub("scaler."));
    if (!p.ok()) return WithPath(path, p.status());
    plan.Append(*std::move(p));
  }
  plan.Apply();
  WarnOfSuspectValues(path, sd);
  return absl::OkStatus();
}

}  // namespace stepjit
