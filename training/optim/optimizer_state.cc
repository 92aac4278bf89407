// Optimizer::state_dict / load_state_dict: PyTorch's optimizer state dict
// as safetensors entries (tensors "state.<i>.<slot>", metadata "type" and
// "param_groups").
#include <cmath>
#include <limits>
#include <map>

#include "absl/algorithm/container.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/status.h"
#include "llvm/Support/JSON.h"
#include "training/io/safetensors.h"
#include "training/optim/optimizer.h"

namespace stepjit::optim {
namespace {

namespace json = llvm::json;

// Whether `v` stays finite when rounded to `dtype`.
bool FiniteAs(double v, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return std::abs(v) <= std::numeric_limits<float>::max();
    case DType::kF16:
      return std::abs(v) <= 65504.0;
    case DType::kBF16:
      return std::abs(v) <= 3.3895313892515355e38;
    default:
      return std::isfinite(v);
  }
}

// The largest whole number up to which `dtype` holds every integer.
double MaxExactCount(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 16777216.0;  // 2^24
    case DType::kF16:
      return 2048.0;
    case DType::kBF16:
      return 256.0;
    case DType::kF64:
      return 9007199254740992.0;  // 2^53
    default:
      return 9.2233720368547758e18;
  }
}

std::string JsonText(const json::Value& v) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << v;
  return os.str();
}

// Numbers compare by value (Python writes 0 for an int and 0.0 for a float).
bool SameJson(const json::Value& a, const json::Value& b) {
  if (a.getAsNumber() && b.getAsNumber())
    return *a.getAsNumber() == *b.getAsNumber();
  const json::Array* x = a.getAsArray();
  const json::Array* y = b.getAsArray();
  if (x != nullptr && y != nullptr) {
    if (x->size() != y->size()) return false;
    for (size_t i = 0; i < x->size(); ++i) {
      if (!SameJson((*x)[i], (*y)[i])) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict sd;
  sd.metadata["type"] = name_;
  const std::vector<std::string> slot_names = SlotNames();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Slots slots = SlotsOf(i);
    if (slots.empty() || !slots.front()->defined()) continue;
    if (StepInState())
      sd.tensors.emplace_back(absl::StrCat("state.", i, ".step"),
                              step_.detach());
    for (size_t s = 0; s < slots.size(); ++s) {
      sd.tensors.emplace_back(absl::StrCat("state.", i, ".", slot_names[s]),
                              slots[s]->detach());
    }
  }
  std::vector<std::string> groups;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<std::string> fields = {
        absl::StrFormat("\"lr\":%.17g", lr(g)),
        absl::StrFormat("\"weight_decay\":%.17g", groups_[g].weight_decay)};
    for (const auto& [key, value] : HyperParameters(g)) {
      fields.push_back(absl::StrCat("\"", key, "\":", value));
    }
    std::vector<size_t> indices;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (group_of_[i] == g) indices.push_back(i);
    }
    fields.push_back(
        absl::StrCat("\"params\":[", absl::StrJoin(indices, ","), "]"));
    groups.push_back(absl::StrCat("{", absl::StrJoin(fields, ","), "}"));
  }
  sd.metadata["param_groups"] =
      absl::StrCat("[", absl::StrJoin(groups, ","), "]");
  return sd;
}

absl::Status Optimizer::load_state_dict(const StateDict& state) {
  ASSIGN_OR_RETURN(LoadPlan plan, PlanLoad(state));
  plan.Apply();
  return absl::OkStatus();
}

absl::StatusOr<LoadPlan> Optimizer::PlanLoad(const StateDict& state) {
  LoadPlan plan;
  RETURN_IF_ERROR(PlanParamGroups(state, plan));
  RETURN_IF_ERROR(PlanParameterState(state, plan));
  return plan;
}

absl::Status Optimizer::PlanParamGroups(const StateDict& state,
                                        LoadPlan& plan) {
  const std::string who = absl::StrCat(name_, " load_state_dict: ");
  const auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(who, parts...));
  };
  if (auto it = state.metadata.find("type");
      it != state.metadata.end() && it->second != name_) {
    return error("the state dict is of a ", it->second,
                 " optimizer, this one is ", name_);
  }
  const auto groups_it = state.metadata.find("param_groups");
  if (groups_it == state.metadata.end()) {
    return error("metadata 'param_groups' is missing");
  }
  if (absl::Status deep =
          io::CheckJsonDepth(groups_it->second, "metadata 'param_groups'");
      !deep.ok())
    return error(deep.message());
  llvm::Expected<json::Value> parsed = json::parse(groups_it->second);
  if (!parsed) {
    return error("metadata 'param_groups' is not JSON: ",
                 llvm::toString(parsed.takeError()));
  }
  const json::Array* groups = parsed->getAsArray();
  if (groups == nullptr || groups->size() != groups_.size()) {
    return error("expected 'param_groups' as a list of ", groups_.size(),
                 " groups, found ", JsonText(*parsed));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const json::Object* group = (*groups)[g].getAsObject();
    if (group == nullptr) return error("param group ", g, " is not an object");
    std::vector<size_t> want;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (group_of_[i] == g) want.push_back(i);
    }
    const json::Value want_params =
        json::Array(std::vector<json::Value>(want.begin(), want.end()));
    const json::Value* params = group->get("params");
    if (params == nullptr || !SameJson(*params, want_params)) {
      return error("param group ", g, ": expected params ",
                   JsonText(want_params), ", found ",
                   params == nullptr ? "none" : JsonText(*params));
    }
    const auto lr = group->getNumber("lr");  // llvm::Optional
    // Validated in the dtype the optimizer computes with: 1e300 is a
    // finite double but inf as f32.
    const DType lr_dtype = groups_[g].lr.dtype();
    if (!lr || !(*lr >= 0.0) || !std::isfinite(*lr) ||
        !FiniteAs(*lr, lr_dtype)) {
      return error("param group ", g,
                   ": expected a learning rate 'lr' >= 0 and finite as ",
                   ir::DTypeName(lr_dtype), ", found ",
                   lr ? absl::StrCat(*lr) : std::string("none"));
    }
    std::vector<std::pair<std::string, std::string>> expected =
        HyperParameters(g);
    expected.emplace_back("weight_decay",
                          absl::StrFormat("%.17g", groups_[g].weight_decay));
    for (const auto& [key, text] : expected) {
      llvm::Expected<json::Value> want_value = json::parse(text);
      SJ_CHECK(static_cast<bool>(want_value), "bad hyperparameter JSON ", text);
      const json::Value* found = group->get(key);
      if (found == nullptr || !SameJson(*found, *want_value)) {
        return error(
            "param group ", g, ": ", key, " is ",
            found ? JsonText(*found) : "missing", " in the state dict but ",
            JsonText(*want_value),
            " in this optimizer (construct it with the saved options)");
      }
    }
    plan.Then([t = groups_[g].lr, v = *lr] { Tensor(t).fill_(v); });
  }
  return absl::OkStatus();
}

absl::Status Optimizer::PlanParameterState(const StateDict& state,
                                           LoadPlan& plan) {
  const std::string who = absl::StrCat(name_, " load_state_dict: ");
  const auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(who, parts...));
  };
  // state.<i>.<slot>, grouped by parameter.
  const std::vector<std::string> slot_names = SlotNames();
  std::vector<std::map<std::string, Tensor>> given(params_.size());
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : state.tensors) {
    const std::vector<std::string> parts = absl::StrSplit(name, '.');
    size_t index = 0;
    const bool known_slot =
        parts.size() == 3 && (absl::c_linear_search(slot_names, parts[2]) ||
                              (StepInState() && parts[2] == "step"));
    if (parts.size() != 3 || parts[0] != "state" ||
        !absl::SimpleAtoi(parts[1], &index) || index >= params_.size() ||
        !known_slot) {
      unexpected.push_back(name);
      continue;
    }
    if (!given[index].emplace(parts[2], t).second)
      return error("'", name, "' is given twice");
  }
  if (!unexpected.empty()) {
    return error("unexpected tensors ", NameList(unexpected),
                 " (expected state.<i>.<slot> with i < ", params_.size(),
                 " and slots ", absl::StrJoin(slot_names, ", "),
                 StepInState() ? ", step" : "", ")");
  }
  std::optional<double> step;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::map<std::string, Tensor>& slots = given[i];
    const Slots current = SlotsOf(i);
    const bool has_state = !current.empty() && current.front()->defined();
    if (slots.empty()) {
      if (has_state) {
        return error("parameter ", i,
                     " has state in this optimizer but none in the state dict ",
                     "(load into a freshly constructed optimizer)");
      }
      continue;
    }
    std::vector<Tensor> sources;
    for (size_t s = 0; s < slot_names.size(); ++s) {
      const auto it = slots.find(slot_names[s]);
      if (it == slots.end())
        return error("'state.", i, ".", slot_names[s], "' is missing");
      RETURN_IF_ERROR(CheckLoadable(
          absl::StrCat(who, "'state.", i, ".", slot_names[s], "'"),
          has_state ? *current[s] : params_[i], it->second));
      sources.push_back(it->second);
    }
    if (StepInState()) {
      const auto it = slots.find("step");
      if (it == slots.end()) return error("'state.", i, ".step' is missing");
      if (it->second.numel() != 1) {
        return error("'state.", i, ".step': expected one element, found shape ",
                     ir::ShapeToString(it->second.shape()));
      }
      const double value = it->second.item();
      // The count is kept as step_'s dtype and advanced by 1 each step: it
      // must be a whole number that dtype still counts up from exactly.
      const double most = MaxExactCount(step_.dtype());
      if (!(value >= 0.0) || value != std::floor(value) || value > most) {
        return error("'state.", i, ".step' is ", value,
                     ", not a step count (a whole number from 0 to ", most,
                     ", the most ", ir::DTypeName(step_.dtype()),
                     " counts exactly)");
      }
      // stepjit keeps one step count: PyTorch's differ only when some
      // parameters skipped steps (had no grad).
      if (step.has_value() && *step != value) {
        return error(
            "'state.", i, ".step' is ", value,
            " but an earlier parameter's is ", *step,
            " (this optimizer keeps one step count for all parameters)");
      }
      step = value;
    }
    plan.Then([this, i, sources] {
      CreateSlots(i);
      const Slots dst = SlotsOf(i);
      for (size_t s = 0; s < dst.size(); ++s) CopyInPlace(*dst[s], sources[s]);
    });
  }
  if (StepInState())
    plan.Then([t = step_, v = step.value_or(0.0)] { Tensor(t).fill_(v); });
  return absl::OkStatus();
}

}  // namespace stepjit::optim
