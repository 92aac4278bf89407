// The attributes each op takes, from the OP_ATTR rows of ir/ops.def: their
// keys, types and defaults. Readers take a value with its default through
// GetAttr; the verifier and the docs read the schema.
#ifndef STEPJIT_IR_OP_ATTRS_H_
#define STEPJIT_IR_OP_ATTRS_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/op.h"

namespace stepjit::ir {

enum class AttrType : uint8_t { kInt, kFloat, kBool, kInts, kDType, kString };

// "int", "float", "bool", "[int]", "dtype", "string" (as docs/ir.md spells
// them).
const char* AttrTypeName(AttrType type);

// An attribute of an op: its key, type, and the value a node without it
// has (unset for a required one).
struct OpAttr {
  AttrKey key;
  AttrType type;
  bool required;
  AttrValue default_value;
};

// The attributes `op` takes, in ops.def's order (empty: it takes none).
absl::Span<const OpAttr> OpAttrs(OpId op);
// `key`'s entry for `op`, or nullptr when the op does not take it.
const OpAttr* FindOpAttr(OpId op, AttrKey key);

// OK when `attrs` fits `op`'s schema: each attribute one the op takes, of
// its type (an int stands for a float or a bool, a bool for an int, an int
// for a one-element list, as Attrs' getters read them), and every required
// one present; else an InvalidArgument naming the op, the attribute, what
// was expected and what was found.
absl::Status CheckAttrs(OpId op, const Attrs& attrs);

// The attribute's value, or its default from ops.def: the one place that
// knows it. A required attribute that is missing reads as its type's zero
// (the verifier refuses such a node).
namespace op_attrs_internal {
// The C++ type of each AttrType, in AttrType's order (AttrValue's too).
template <AttrType T>
using CType = std::variant_alternative_t<static_cast<size_t>(T), AttrValue>;
static_assert(
    std::is_same_v<CType<AttrType::kInt>, int64_t> &&
        std::is_same_v<CType<AttrType::kFloat>, double> &&
        std::is_same_v<CType<AttrType::kBool>, bool> &&
        std::is_same_v<CType<AttrType::kInts>, std::vector<int64_t>> &&
        std::is_same_v<CType<AttrType::kDType>, DType> &&
        std::is_same_v<CType<AttrType::kString>, std::string>,
    "AttrType names AttrValue's alternatives in order");

// `key`'s value as a T, or `fallback` when `attrs` lacks it.
template <typename T>
T Read(const Attrs& attrs, AttrKey key, const T& fallback) {
  if constexpr (std::is_same_v<T, int64_t>) return attrs.GetInt(key, fallback);
  if constexpr (std::is_same_v<T, double>)
    return attrs.GetDouble(key, fallback);
  if constexpr (std::is_same_v<T, bool>) return attrs.GetBool(key, fallback);
  if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    return attrs.Has(key) ? attrs.GetInts(key) : fallback;
  if constexpr (std::is_same_v<T, DType>) return attrs.GetDType(key, fallback);
  if constexpr (std::is_same_v<T, std::string>)
    return attrs.GetString(key, fallback);
}

// Spec<op, key>: declared for every OP_ATTR row only, so reading an
// attribute an op does not take does not compile.
template <OpId op, AttrKey key>
struct Spec;
// A required attribute's default: its type's zero (only read from a node
// the verifier refuses).
struct Required {
  template <typename T>
  operator T() const {
    return T{};
  }
};
inline constexpr Required kRequired{};

#define OP(e, text, lo, hi, kind, amp, flags)
#define OP_ATTR(op, key, type_, default_value)            \
  template <>                                             \
  struct Spec<OpId::k##op, AttrKey::k##key> {             \
    static constexpr AttrType kType = AttrType::k##type_; \
    using T = CType<kType>;                               \
    static T Default() {                                  \
      T value = default_value;                            \
      return value;                                       \
    }                                                     \
  };
#include "ir/ops.def"

}  // namespace op_attrs_internal

template <OpId op, AttrKey key>
auto GetAttr(const Attrs& attrs) {
  using S = op_attrs_internal::Spec<op, key>;
  return op_attrs_internal::Read(attrs, key, S::Default());
}

// The same where the op is known only at run time (a kernel or a rule shared
// by several ops): the value of `key`, or `op`'s default for it. The op must
// take `key` with that type (an internal error otherwise).
int64_t AttrInt(OpId op, const Attrs& attrs, AttrKey key);
double AttrFloat(OpId op, const Attrs& attrs, AttrKey key);
bool AttrBool(OpId op, const Attrs& attrs, AttrKey key);
std::string AttrString(OpId op, const Attrs& attrs, AttrKey key);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_OP_ATTRS_H_
