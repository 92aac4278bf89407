// Op attributes: a small typed key/value list keyed by ir/attrs.def.
#ifndef STEPJIT_IR_ATTRS_H_
#define STEPJIT_IR_ATTRS_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "ir/dtype.h"

namespace stepjit::ir {

enum class AttrKey : uint8_t {
#define ATTR(e, text) k##e,
#include "ir/attrs.def"
};

absl::string_view AttrKeyName(AttrKey key);
std::optional<AttrKey> ParseAttrKey(absl::string_view name);

using AttrValue =
    std::variant<int64_t, double, bool, std::vector<int64_t>, DType, std::string>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<AttrKey, AttrValue>> init)
      : items_(init.begin(), init.end()) {}

  Attrs& Set(AttrKey key, AttrValue value);
  bool Has(AttrKey key) const { return Find(key) != nullptr; }
  const AttrValue* Find(AttrKey key) const;

  int64_t GetInt(AttrKey key, int64_t fallback = 0) const;
  double GetDouble(AttrKey key, double fallback = 0.0) const;
  bool GetBool(AttrKey key, bool fallback = false) const;
  std::vector<int64_t> GetInts(AttrKey key) const;
  DType GetDType(AttrKey key, DType fallback = DType::kF32) const;
  std::string GetString(AttrKey key, std::string fallback = "") const;

  const auto& items() const { return items_; }
  bool operator==(const Attrs& other) const { return items_ == other.items_; }

 private:
  absl::InlinedVector<std::pair<AttrKey, AttrValue>, 3> items_;
};

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_ATTRS_H_
