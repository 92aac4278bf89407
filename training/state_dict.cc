// StateDict lookups and prefixes; LoadPlan's in-place copies.
#include "training/state_dict.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/autograd/grad_mode.h"

namespace stepjit {

const Tensor* StateDict::find(absl::string_view name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

StateDict StateDict::sub(absl::string_view prefix) const {
  StateDict out;
  for (const auto& [n, t] : tensors) {
    if (absl::StartsWith(n, prefix))
      out.tensors.emplace_back(n.substr(prefix.size()), t);
  }
  for (const auto& [k, v] : metadata) {
    if (absl::StartsWith(k, prefix))
      out.metadata.emplace(k.substr(prefix.size()), v);
  }
  return out;
}

void StateDict::merge(absl::string_view prefix, const StateDict& other) {
  for (const auto& [n, t] : other.tensors)
    tensors.emplace_back(absl::StrCat(prefix, n), t);
  for (const auto& [k, v] : other.metadata)
    metadata[absl::StrCat(prefix, k)] = v;
}

void CopyInPlace(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  Tensor from = src.to(dst.device());
  if (from.dtype() != dst.dtype()) from = from.to(dst.dtype());
  Tensor(dst).copy_(from);
}

void LoadPlan::Copy(const Tensor& dst, const Tensor& src) {
  actions_.push_back([dst, src] { CopyInPlace(dst, src); });
}

void LoadPlan::Append(LoadPlan other) {
  for (auto& a : other.actions_) actions_.push_back(std::move(a));
}

void LoadPlan::Apply() {
  for (const auto& a : actions_) a();
  actions_.clear();
}

absl::Status CheckLoadable(const std::string& what, const Tensor& expected,
                           const Tensor& found) {
  const bool dtype_ok =
      expected.dtype() == found.dtype() ||
      (ir::IsFloating(expected.dtype()) && ir::IsFloating(found.dtype()));
  if (expected.shape() == found.shape() && dtype_ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": expected ", ir::DTypeName(expected.dtype()),
      ir::ShapeToString(expected.shape()), ", found ",
      ir::DTypeName(found.dtype()), ir::ShapeToString(found.shape())));
}

std::string NameList(const std::vector<std::string>& names, size_t limit) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < names.size() && i < limit; ++i)
    shown.push_back("'" + names[i] + "'");
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > limit)
    absl::StrAppend(&out, " and ", names.size() - limit, " more");
  return out;
}

}  // namespace stepjit
