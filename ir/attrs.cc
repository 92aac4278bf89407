// Attribute lookup.
#include "ir/attrs.h"

#include <cmath>
#include <limits>

#include "absl/strings/string_view.h"

namespace stepjit::ir {
namespace {
constexpr const char* kAttrNames[] = {
#define ATTR(e, text) text,
#include "ir/attrs.def"
};
}  // namespace

absl::string_view AttrKeyName(AttrKey key) {
  return kAttrNames[static_cast<int>(key)];
}

std::optional<AttrKey> ParseAttrKey(absl::string_view name) {
  for (size_t i = 0; i < std::size(kAttrNames); ++i) {
    if (kAttrNames[i] == name) return static_cast<AttrKey>(i);
  }
  return std::nullopt;
}

Attrs& Attrs::Set(AttrKey key, AttrValue value) {
  for (auto& [k, v] : items_) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(key, std::move(value));
  return *this;
}

const AttrValue* Attrs::Find(AttrKey key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

int64_t Attrs::GetInt(AttrKey key, int64_t fallback) const {
  const AttrValue* v = Find(key);
  if (v == nullptr) return fallback;
  if (auto* i = std::get_if<int64_t>(v)) return *i;
  if (auto* b = std::get_if<bool>(v)) return *b;
  if (auto* d = std::get_if<double>(v)) {
    // Out-of-range doubles saturate (a plain cast is undefined behaviour);
    // the checks of the attribute's user then refuse the value.
    if (std::isnan(*d)) return fallback;
    if (*d >= 0x1p63) return std::numeric_limits<int64_t>::max();
    if (*d < -0x1p63) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(*d);
  }
  return fallback;
}

double Attrs::GetDouble(AttrKey key, double fallback) const {
  const AttrValue* v = Find(key);
  if (v == nullptr) return fallback;
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  if (auto* b = std::get_if<bool>(v)) return *b;
  return fallback;
}

bool Attrs::GetBool(AttrKey key, bool fallback) const {
  const AttrValue* v = Find(key);
  if (v == nullptr) return fallback;
  if (auto* b = std::get_if<bool>(v)) return *b;
  if (auto* i = std::get_if<int64_t>(v)) return *i != 0;
  return fallback;
}

std::vector<int64_t> Attrs::GetInts(AttrKey key) const {
  const AttrValue* v = Find(key);
  if (v == nullptr) return {};
  if (auto* l = std::get_if<std::vector<int64_t>>(v)) return *l;
  if (auto* i = std::get_if<int64_t>(v)) return {*i};
  return {};
}

DType Attrs::GetDType(AttrKey key, DType fallback) const {
  const AttrValue* v = Find(key);
  if (v == nullptr) return fallback;
  if (auto* t = std::get_if<DType>(v)) return *t;
  return fallback;
}

std::string Attrs::GetString(AttrKey key, std::string fallback) const {
  const AttrValue* v = Find(key);
  if (v == nullptr) return fallback;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  return fallback;
}

}  // namespace stepjit::ir
