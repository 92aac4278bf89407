// The op attribute schema (ops.def's OP_ATTR rows) as per-op lists, and the
// check of a node's attributes against it.
#include "ir/op_attrs.h"

#include <array>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "ir/status.h"

namespace stepjit::ir {

namespace {

// Whether a value of the variant's alternative `v` reads as `type` (as
// Attrs' getters read it).
bool Fits(AttrType type, const AttrValue& v) {
  switch (type) {
    case AttrType::kInt:
      return std::holds_alternative<int64_t>(v) ||
             std::holds_alternative<bool>(v);
    case AttrType::kFloat:
      return std::holds_alternative<double>(v) ||
             std::holds_alternative<int64_t>(v);
    case AttrType::kBool:
      return std::holds_alternative<bool>(v) ||
             std::holds_alternative<int64_t>(v);
    case AttrType::kInts:
      return std::holds_alternative<std::vector<int64_t>>(v) ||
             std::holds_alternative<int64_t>(v);
    case AttrType::kDType:
      return std::holds_alternative<DType>(v);
    case AttrType::kString:
      return std::holds_alternative<std::string>(v);
  }
  return false;
}

// AttrType's names, in the order of both AttrType and AttrValue's
// alternatives.
constexpr const char* kTypeNames[] = {"int",   "float", "bool",
                                      "[int]", "dtype", "string"};

const char* ValueTypeName(const AttrValue& v) { return kTypeNames[v.index()]; }

}  // namespace

const char* AttrTypeName(AttrType type) {
  return kTypeNames[static_cast<int>(type)];
}

absl::Span<const OpAttr> OpAttrs(OpId op) {
  // One list per op, from ops.def's OP_ATTR rows in their order.
  static const auto* attrs = [] {
    auto* a = new std::array<std::vector<OpAttr>, kNumOps>{};
#define OP(e, text, lo, hi, kind, amp, flags)
#define OP_ATTR(op, key, type_, default_value)           \
  (*a)[static_cast<int>(OpId::k##op)].push_back(         \
      {AttrKey::k##key, AttrType::k##type_,              \
       absl::string_view(#default_value) == "kRequired", \
       AttrValue(op_attrs_internal::Spec<OpId::k##op,    \
                                         AttrKey::k##key>::Default())});
#include "ir/ops.def"
    return a;
  }();
  return (*attrs)[static_cast<int>(op)];
}

const OpAttr* FindOpAttr(OpId op, AttrKey key) {
  for (const OpAttr& a : OpAttrs(op)) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

absl::Status CheckAttrs(OpId op, const Attrs& attrs) {
  for (const auto& [key, value] : attrs.items()) {
    const OpAttr* a = FindOpAttr(op, key);
    if (a == nullptr) {
      std::vector<std::string> takes;
      for (const OpAttr& t : OpAttrs(op))
        takes.push_back(std::string(AttrKeyName(t.key)));
      return absl::InvalidArgumentError(absl::StrCat(
          OpName(op), " takes no attribute '", AttrKeyName(key), "' (",
          takes.empty() ? "it takes none"
                        : absl::StrCat("it takes ", absl::StrJoin(takes, ", ")),
          ")"));
    }
    if (!Fits(a->type, value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpName(op), ": attribute '", AttrKeyName(key), "' expected ",
          AttrTypeName(a->type), ", got ", ValueTypeName(value)));
    }
  }
  for (const OpAttr& a : OpAttrs(op)) {
    if (a.required && !attrs.Has(a.key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(OpName(op), ": missing required attribute '",
                       AttrKeyName(a.key), "' (", AttrTypeName(a.type), ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

// `key`'s schema entry for `op`, which must be of `type`.
const OpAttr& Expect(OpId op, AttrKey key, AttrType type) {
  const OpAttr* a = FindOpAttr(op, key);
  SJ_CHECK(a != nullptr && a->type == type, OpName(op), " reads attribute '",
           AttrKeyName(key), "' as ", AttrTypeName(type),
           ", which ir/ops.def does not give it");
  return *a;
}

template <AttrType T>
op_attrs_internal::CType<T> ReadOrDefault(OpId op, const Attrs& attrs,
                                          AttrKey key) {
  const OpAttr& a = Expect(op, key, T);
  return op_attrs_internal::Read(
      attrs, key, std::get<op_attrs_internal::CType<T>>(a.default_value));
}

}  // namespace

int64_t AttrInt(OpId op, const Attrs& attrs, AttrKey key) {
  return ReadOrDefault<AttrType::kInt>(op, attrs, key);
}

double AttrFloat(OpId op, const Attrs& attrs, AttrKey key) {
  return ReadOrDefault<AttrType::kFloat>(op, attrs, key);
}

bool AttrBool(OpId op, const Attrs& attrs, AttrKey key) {
  return ReadOrDefault<AttrType::kBool>(op, attrs, key);
}

std::string AttrString(OpId op, const Attrs& attrs, AttrKey key) {
  return ReadOrDefault<AttrType::kString>(op, attrs, key);
}

}  // namespace stepjit::ir
