// The op table instantiated as data.
#include "ir/op.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace stepjit::ir {
namespace {

constexpr OpInfo kOpInfos[] = {
#define OP(e, text, lo, hi, kind, amp, flags) \
  {text, lo, hi, OpKind::kind, AmpPolicy::amp, static_cast<uint32_t>(flags)},
#include "ir/ops.def"
};
static_assert(sizeof(kOpInfos) / sizeof(kOpInfos[0]) == kNumOps);

}  // namespace

const OpInfo& GetOpInfo(OpId op) { return kOpInfos[static_cast<int>(op)]; }

std::optional<OpId> ParseOpName(absl::string_view name) {
  static const auto* by_name = [] {
    auto* m = new absl::flat_hash_map<absl::string_view, OpId>();
    for (int i = 0; i < kNumOps; ++i) (*m)[kOpInfos[i].name] = static_cast<OpId>(i);
    return m;
  }();
  auto it = by_name->find(name);
  if (it == by_name->end()) return std::nullopt;
  return it->second;
}

}  // namespace stepjit::ir
