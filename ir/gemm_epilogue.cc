// GEMM epilogues: the `epilogue` attr's text to and from a typed value.
#include "ir/gemm_epilogue.h"

#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"

namespace stepjit::ir {
namespace {

std::vector<std::string> ActivationNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kNumOps; ++i) {
    if (IsGemmActivation(static_cast<OpId>(i))) {
      names.emplace_back(OpName(static_cast<OpId>(i)));
    }
  }
  return names;
}

// "\",relu\", \",gelu\" or \",gelu_tanh\"".
std::string QuotedAlternatives() {
  std::vector<std::string> quoted;
  for (const std::string& n : ActivationNames()) {
    quoted.push_back(absl::StrCat("\",", n, "\""));
  }
  if (quoted.size() < 2) return absl::StrJoin(quoted, "");
  const std::string last = quoted.back();
  quoted.pop_back();
  return absl::StrCat(absl::StrJoin(quoted, ", "), " or ", last);
}

}  // namespace

std::string GemmActivationNames(absl::string_view separator) {
  return absl::StrJoin(ActivationNames(), separator);
}

std::string GemmEpilogueText(const GemmEpilogue& e) {
  switch (e.kind) {
    case GemmEpilogueKind::kNone:
      return "";
    case GemmEpilogueKind::kBias:
      return "bias";
    case GemmEpilogueKind::kBiasAct:
      return absl::StrCat("bias,", OpName(e.activation));
    case GemmEpilogueKind::kBgrad:
      return "bgrad";
  }
  return "";
}

absl::StatusOr<GemmEpilogue> ParseGemmEpilogue(absl::string_view text) {
  if (text.empty()) return GemmEpilogue{};
  if (text == "bias") return GemmEpilogue::Bias();
  if (text == "bgrad") return GemmEpilogue::Bgrad();
  if (absl::StartsWith(text, "bias,")) {
    const std::optional<OpId> act = ParseOpName(text.substr(5));
    if (act.has_value() && IsGemmActivation(*act)) {
      return GemmEpilogue::BiasAct(*act);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown epilogue '", text,
                   "' (expected \"bias\" optionally followed by ",
                   QuotedAlternatives(), ", or \"bgrad\")"));
}

GemmEpilogue GemmEpilogueOf(const Attrs& attrs) {
  absl::StatusOr<GemmEpilogue> e =
      ParseGemmEpilogue(attrs.GetString(AttrKey::kEpilogue));
  SJ_CHECK(e.ok(), e.status().message());
  return *e;
}

}  // namespace stepjit::ir
