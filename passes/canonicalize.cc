// canonicalize: eager-exact constant folding; cast, identity and view rules.
#include "passes/canonicalize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "ir/host_math.h"
#include "ir/op_attrs.h"
#include "ir/rewrite.h"
#include "ir/scalar_def.h"
#include "passes/ir_names.h"

namespace stepjit::passes {
namespace {

// ---- Constant evaluation, replicating runtime/cpu (loops.h Convert,
// elementwise.cc CpuMath, dispatch.cc operand conversion) without its
// undefined behaviour: where eager would hit UB, folding declines.

template <DType D>
using Storage = typename ir::DTypeTraits<D>::T;

template <typename T>
constexpr bool kIs16Bit =
    std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>;

// A double holds every storage value exactly (i64 ones come from doubles).
template <typename T>
T FromDouble(double v) {
  if constexpr (kIs16Bit<T>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
std::optional<double> ToDouble(T v) {
  if constexpr (kIs16Bit<T>) {
    return static_cast<float>(v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    constexpr int64_t kExact = int64_t{1} << 53;
    if (v > kExact || v < -kExact) return std::nullopt;
    return static_cast<double>(v);
  } else {
    return static_cast<double>(v);
  }
}

// devices/cpu/loops.h's Convert; nullopt where a float does not fit an integer.
template <typename To, typename From>
std::optional<To> Convert(From v) {
  if constexpr (kIs16Bit<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (kIs16Bit<From>) {
      return static_cast<float>(v) != 0.0f;
    } else {
      return v != From(0);
    }
  } else if constexpr (kIs16Bit<From>) {
    return Convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> &&
                       std::is_floating_point_v<From>) {
    // Exclusive bound 2^(bits-1) and inclusive -2^(bits-1), both exact.
    constexpr From kLimit =
        static_cast<From>(std::numeric_limits<To>::max()) + 1;
    if (!(v >= -kLimit && v < kLimit)) return std::nullopt;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Calls f(std::integral_constant<DType, d>{}).
template <typename F>
std::optional<double> WithDType(DType d, F&& f) {
  switch (d) {
#define SJ_CASE(e) \
  case DType::e:   \
    return f(std::integral_constant<DType, DType::e>{});
    SJ_CASE(kF32)
    SJ_CASE(kF64)
    SJ_CASE(kF16)
    SJ_CASE(kBF16)
    SJ_CASE(kI64)
    SJ_CASE(kI32)
    SJ_CASE(kBool)
#undef SJ_CASE
  }
  return std::nullopt;
}

// A storage value of dtype `from` converted to `to` as eager's copies do.
std::optional<double> ConvertStorage(double v, DType from, DType to) {
  return WithDType(from, [&](auto f) {
    using F = Storage<decltype(f)::value>;
    return WithDType(to, [&](auto t) -> std::optional<double> {
      using T = Storage<decltype(t)::value>;
      std::optional<T> c = Convert<T>(FromDouble<F>(v));
      if (!c) return std::nullopt;
      return ToDouble(*c);
    });
  });
}

// Eager's HostMath over the arithmetic type C; integer overflow, which
// eager leaves undefined, sets `failed` instead of folding.
template <typename C>
struct FoldMath : ir::HostMath<C> {
  using Base = ir::HostMath<C>;
  static constexpr bool kInt = std::is_integral_v<C> && !std::is_same_v<C, bool>;
  bool failed = false;

  C Add(C a, C b) {
    if constexpr (kInt) {
      C r;
      failed |= __builtin_add_overflow(a, b, &r);
      return r;
    } else {
      return Base::Add(a, b);
    }
  }
  C Sub(C a, C b) {
    if constexpr (kInt) {
      C r;
      failed |= __builtin_sub_overflow(a, b, &r);
      return r;
    } else {
      return Base::Sub(a, b);
    }
  }
  C Mul(C a, C b) {
    if constexpr (kInt) {
      C r;
      failed |= __builtin_mul_overflow(a, b, &r);
      return r;
    } else {
      return Base::Mul(a, b);
    }
  }
  C Div(C a, C b) {
    if constexpr (kInt) {
      if (b == 0 || (b == -1 && a == std::numeric_limits<C>::min())) {
        failed = true;
        return 0;
      }
    }
    return a / b;
  }
  C Neg(C a) {
    if constexpr (kInt) return Sub(C(0), a);
    else return -a;
  }
  C Abs(C a) { return a < C(0) ? Neg(a) : a; }
};

// Evaluates `op` on inputs already converted to dtype D, storing the result
// as eager's kernels do: in D, or as bool for comparisons.
template <DType D>
std::optional<double> Evaluate(OpId op, absl::Span<const double> in) {
  using T = Storage<D>;
  using Acc = typename ir::DTypeTraits<D>::Acc;
  FoldMath<Acc> m;
  auto arg = [&](size_t i) { return static_cast<Acc>(FromDouble<T>(in[i])); };
  auto finish = [&](auto r) -> std::optional<double> {
    using Out = std::conditional_t<std::is_same_v<decltype(r), bool>, bool, T>;
    if (m.failed) return std::nullopt;
    std::optional<Out> c = Convert<Out>(r);
    if (!c) return std::nullopt;
    return ToDouble(*c);
  };
  switch (op) {
#define SJ_UNARY(e, expr) \
  case OpId::k##e:        \
    return finish(ir::ScalarDef<OpId::k##e>::Apply(m, arg(0)));
#define SJ_BINARY(e, expr) \
  case OpId::k##e:         \
    return finish(ir::ScalarDef<OpId::k##e>::Apply(m, arg(0), arg(1)));
    SJ_UNARY_SCALAR_DEFS(SJ_UNARY)
    SJ_BINARY_SCALAR_DEFS(SJ_BINARY)
    SJ_COMPARE_SCALAR_DEFS(SJ_BINARY)
#undef SJ_UNARY
#undef SJ_BINARY
    default:
      return std::nullopt;
  }
}

// A 0-d constant as eager stores it.
struct Scalar {
  DType dtype;
  double value;
};

std::optional<Scalar> AsScalar(const ir::Value* v) {
  const ir::Node* n = v->producer();
  if (n == nullptr || n->kind() != ir::NodeKind::kOp ||
      n->op() != OpId::kFull || !v->type().shape.empty()) {
    return std::nullopt;
  }
  // FullKernel fills with Convert<T>(GetDouble(value)).
  std::optional<double> stored = ConvertStorage(
      n->attrs().GetDouble(AttrKey::kValue), DType::kF64, v->type().dtype);
  if (!stored) return std::nullopt;
  return Scalar{v->type().dtype, *stored};
}

// The dtype operands are converted to and the kernel runs in
// (runtime/dispatch.cc's OperandDType for elementwise ops).
DType ComputeDType(const ir::Node& node) {
  const DType out = node.output()->type().dtype;
  if (out != DType::kBool) return out;
  std::vector<ir::TensorType> types;
  for (const ir::Value* v : node.inputs()) types.push_back(v->type());
  return ir::ResultType(types);
}

std::optional<double> Fold(const ir::Node& node, absl::Span<const Scalar> in) {
  const DType out = node.output()->type().dtype;
  if (node.op() == OpId::kCast) {
    return ConvertStorage(in[0].value, in[0].dtype, out);
  }
  if (node.op() == OpId::kWhere) {
    const Scalar& picked = in[0].value != 0 ? in[1] : in[2];
    return ConvertStorage(picked.value, picked.dtype, out);
  }
  const DType compute = ComputeDType(node);
  std::vector<double> args;
  for (const Scalar& s : in) {
    std::optional<double> v = ConvertStorage(s.value, s.dtype, compute);
    if (!v) return std::nullopt;
    args.push_back(*v);
  }
  return WithDType(compute, [&](auto d) {
    return Evaluate<decltype(d)::value>(node.op(), args);
  });
}

// ---- Rewrite rules.

// Whether every value of `narrow` survives narrow -> wide -> narrow.
bool HoldsEveryValue(DType wide, DType narrow) {
  switch (narrow) {
    case DType::kBool:
      return true;
    case DType::kI32:
      return wide == DType::kI64 || wide == DType::kF64;
    case DType::kF16:
    case DType::kBF16:
      return wide == DType::kF32 || wide == DType::kF64;
    case DType::kF32:
      return wide == DType::kF64;
    case DType::kI64:
    case DType::kF64:
      return false;
  }
  return false;
}

const ir::Node* ProducerOp(const ir::Value* v, OpId op) {
  const ir::Node* n = v->producer();
  const bool match =
      n != nullptr && n->kind() == ir::NodeKind::kOp && n->op() == op;
  return match ? n : nullptr;
}

// Whether `v` is a 0-d constant equal to `target` in the op's compute dtype.
bool IsConstant(const ir::Value* v, double target, DType compute) {
  std::optional<Scalar> s = AsScalar(v);
  if (!s) return false;
  std::optional<double> c = ConvertStorage(s->value, s->dtype, compute);
  return c && *c == target;
}

// x*1, 1*x, x+0, 0+x, x-0, x/1 -> x when the result has x's exact type.
ir::Value* ArithmeticIdentity(const ir::Node& node) {
  const DType compute = ComputeDType(node);
  ir::Value* a = node.inputs()[0];
  ir::Value* b = node.inputs()[1];
  ir::Value* x = nullptr;
  switch (node.op()) {
    case OpId::kMul:
      if (IsConstant(b, 1, compute)) x = a;
      if (IsConstant(a, 1, compute)) x = b;
      break;
    case OpId::kAdd:
      if (IsConstant(b, 0, compute)) x = a;
      if (IsConstant(a, 0, compute)) x = b;
      break;
    case OpId::kSub:
      x = IsConstant(b, 0, compute) ? a : nullptr;
      break;
    case OpId::kDiv:
      x = IsConstant(b, 1, compute) ? a : nullptr;
      break;
    default:
      break;
  }
  return x != nullptr && x->type() == node.output()->type() ? x : nullptr;
}

std::vector<int64_t> PermuteDims(const ir::Node& permute) {
  std::vector<int64_t> dims = permute.attrs().GetInts(AttrKey::kDims);
  const int64_t rank = static_cast<int64_t>(dims.size());
  for (int64_t& d : dims) d = ir::WrapDim(d, rank);
  return dims;
}

bool IsIdentity(absl::Span<const int64_t> dims) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// A slice_backward with step 1: the window [start, start + len) of dim
// `dim` that its gradient fills, in a zero tensor of the input shape.
struct Window {
  const ir::Node* node;
  int64_t dim, start, len;
};
std::optional<Window> UnitStepWindow(const ir::Value* v) {
  const ir::Node* n = ProducerOp(v, OpId::kSliceBackward);
  if (n == nullptr ||
      ir::GetAttr<OpId::kSliceBackward, ir::AttrKey::kStep>(n->attrs()) != 1)
    return std::nullopt;
  const ir::Shape& shape = v->type().shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t dim = n->attrs().GetInt(AttrKey::kDim);
  if (dim < -rank || dim >= rank) return std::nullopt;
  const int64_t d = ir::WrapDim(dim, rank);
  int64_t start = n->attrs().GetInt(AttrKey::kStart);
  if (start < 0) start += shape[d];
  start = std::clamp<int64_t>(start, 0, shape[d]);
  const int64_t len = n->inputs()[0]->type().shape[d];
  if (start + len > shape[d]) return std::nullopt;
  return Window{n, d, start, len};
}

// How many times each value is read by the nodes and returns of `graph`.
absl::flat_hash_map<const ir::Value*, int> CountUses(const ir::Graph& graph) {
  absl::flat_hash_map<const ir::Value*, int> uses;
  for (const auto& n : graph.nodes()) {
    for (const ir::Value* v : n->inputs()) ++uses[v];
  }
  for (const ir::Value* v : graph.returns()) ++uses[v];
  return uses;
}

class Canonicalizer {
 public:
  explicit Canonicalizer(PassStats& stats) : stats_(stats) {}

  // Rewrites `graph` and its fusion bodies; returns whether anything fired.
  bool Run(ir::Graph& graph) {
    ir::ValueReplacer replacer;
    bool changed = false;
    uses_ = CountUses(graph);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      ir::Node& node = *graph.nodes()[i];
      replacer.ApplyTo(node);
      if (node.kind() == ir::NodeKind::kFusion) {
        const auto outer = uses_;
        changed |= Run(*node.body());
        uses_ = outer;
      }
      if (node.kind() != ir::NodeKind::kOp) continue;
      if (ir::Value* folded = FoldConstant(graph, node, i)) {
        replacer.Replace(node.output(), folded);
        ++i;  // the new constant took position i
        changed = true;
        continue;
      }
      if (const size_t added = JoinSliceGradients(graph, node, i)) {
        replacer.Replace(node.output(), graph.nodes()[i + added - 1]->output());
        i += added;  // the new nodes took positions i .. i + added - 1
        changed = true;
        continue;
      }
      changed |= Combine(node);  // may leave an identity for Simplify
      if (ir::Value* simpler = Simplify(node)) {
        replacer.Replace(node.output(), simpler);
        changed = true;
      }
    }
    changed |= replacer.ApplyToReturns(graph);
    return changed;
  }

 private:
  // (a): a new 0-d `full` inserted at `pos`, or nullptr.
  ir::Value* FoldConstant(ir::Graph& graph, const ir::Node& node, size_t pos) {
    if (!ir::IsElementwise(node.op())) return nullptr;
    std::vector<Scalar> in;
    for (const ir::Value* v : node.inputs()) {
      std::optional<Scalar> s = AsScalar(v);
      if (!s) return nullptr;
      in.push_back(*s);
    }
    std::optional<double> value = Fold(node, in);
    if (!value || std::isnan(*value)) return nullptr;
    const ir::TensorType& type = node.output()->type();
    ir::Node* full = graph.AddOp(OpId::kFull, {},
                                 {{AttrKey::kShape, std::vector<int64_t>{}},
                                  {AttrKey::kValue, *value},
                                  {AttrKey::kDTypeAttr, type.dtype}},
                                 type);
    graph.MoveLastNodeTo(pos);
    stats_.Add("constants folded");
    return full->output();
  }

  // (f): a sum of slice_backward gradients whose windows along one dim
  // are adjacent (autograd's sum over the q, k and v slices of one QKV
  // product) becomes one slice_backward of their cat, or the cat alone when
  // the windows tile the dim. Only sums of such terms and at most one other
  // term, each used once: every element then adds at most one non-zero
  // term to the other, so no rounding changes (only a -0.0 gradient may
  // come out as -0.0 instead of +0.0). Returns the number of nodes inserted
  // before `pos` (the last one replaces `node`), or 0.
  size_t JoinSliceGradients(ir::Graph& graph, const ir::Node& node,
                            size_t pos) {
    if (node.op() != OpId::kAdd) return 0;
    const ir::TensorType& type = node.output()->type();
    std::vector<ir::Value*> leaves;
    std::vector<const ir::Value*> stack = {node.inputs()[1], node.inputs()[0]};
    while (!stack.empty()) {
      const ir::Value* v = stack.back();
      stack.pop_back();
      const ir::Node* inner = ProducerOp(v, OpId::kAdd);
      if (inner != nullptr && v->type() == type && uses_[v] == 1) {
        stack.push_back(inner->inputs()[1]);
        stack.push_back(inner->inputs()[0]);
      } else {
        leaves.push_back(const_cast<ir::Value*>(v));
      }
    }
    std::vector<Window> windows;
    ir::Value* other = nullptr;
    for (ir::Value* v : leaves) {
      std::optional<Window> w = UnitStepWindow(v);
      if (w && v->type() == type && uses_[v] == 1 &&
          (windows.empty() || w->dim == windows[0].dim)) {
        windows.push_back(*w);
      } else if (other == nullptr) {
        other = v;
      } else {
        return 0;
      }
    }
    if (windows.size() < 2) return 0;
    std::sort(
        windows.begin(), windows.end(),
        [](const Window& a, const Window& b) { return a.start < b.start; });
    for (size_t k = 1; k < windows.size(); ++k) {
      if (windows[k - 1].start + windows[k - 1].len != windows[k].start)
        return 0;
    }
    const int64_t d = windows[0].dim, start = windows[0].start;
    const int64_t len = windows.back().start + windows.back().len - start;
    std::vector<ir::Value*> grads;
    ir::Shape joined = windows[0].node->inputs()[0]->type().shape;
    for (const Window& w : windows) grads.push_back(w.node->inputs()[0]);
    joined[d] = len;
    size_t added = 0;
    auto insert = [&](OpId op, std::vector<ir::Value*> in, ir::Attrs attrs,
                      ir::TensorType t) {
      ir::Node* n =
          graph.AddOp(op, std::move(in), std::move(attrs), std::move(t));
      graph.MoveLastNodeTo(pos + added++);
      return n->output();
    };
    ir::Value* sum =
        insert(OpId::kCat, grads, {{AttrKey::kDim, d}}, {type.dtype, joined});
    if (len != type.shape[d]) {
      sum =
          insert(OpId::kSliceBackward, {sum},
                 {{AttrKey::kInputShape,
                   std::vector<int64_t>(type.shape.begin(), type.shape.end())},
                  {AttrKey::kDim, d},
                  {AttrKey::kStart, start},
                  {AttrKey::kEnd, start + len},
                  {AttrKey::kStep, int64_t{1}}},
                 type);
    }
    if (other != nullptr) sum = insert(OpId::kAdd, {other, sum}, {}, type);
    stats_.Add("slice gradients joined", static_cast<int64_t>(windows.size()));
    return added;
  }

  // (b)-(e) rules that replace the node by an existing value.
  ir::Value* Simplify(const ir::Node& node) {
    ir::Value* in = node.inputs().empty() ? nullptr : node.inputs()[0];
    const ir::TensorType& type = node.output()->type();
    switch (node.op()) {
      case OpId::kCast: {
        if (in->type().dtype == type.dtype) return Count("casts removed", in);
        const ir::Node* inner = ProducerOp(in, OpId::kCast);
        if (inner == nullptr) return nullptr;
        ir::Value* x = inner->inputs()[0];
        if (x->type().dtype == type.dtype &&
            HoldsEveryValue(in->type().dtype, type.dtype)) {
          return Count("cast pairs removed", x);
        }
        return nullptr;
      }
      case OpId::kMul:
      case OpId::kAdd:
      case OpId::kSub:
      case OpId::kDiv:
        if (ir::Value* x = ArithmeticIdentity(node)) {
          return Count("identities removed", x);
        }
        return nullptr;
      case OpId::kPermute:
        return IsIdentity(PermuteDims(node)) ? Count("permutes removed", in)
                                             : nullptr;
      case OpId::kReshape:
        return in->type() == type ? Count("reshapes removed", in) : nullptr;
      default:
        return nullptr;
    }
  }

  // (e): a view of a view of the same kind reads the inner view's input
  // directly; the node is updated in place (its result type is unchanged).
  bool Combine(ir::Node& node) {
    const OpId op = node.op();
    if (op != OpId::kPermute && op != OpId::kReshape) return false;
    const ir::Node* inner = ProducerOp(node.inputs()[0], node.op());
    if (inner == nullptr) return false;
    if (node.op() == OpId::kPermute) {
      const std::vector<int64_t> p = PermuteDims(*inner), q = PermuteDims(node);
      std::vector<int64_t> combined;
      for (int64_t d : q) combined.push_back(p[d]);
      node.mutable_attrs().Set(AttrKey::kDims, combined);
      stats_.Add("permutes combined");
    } else {
      stats_.Add("reshapes combined");
    }
    node.ReplaceInput(0, inner->inputs()[0]);
    return true;
  }

  ir::Value* Count(absl::string_view rule, ir::Value* v) {
    stats_.Add(rule);
    return v;
  }

  PassStats& stats_;
  absl::flat_hash_map<const ir::Value*, int> uses_;
};

}  // namespace

absl::StatusOr<bool> Canonicalize(ir::Graph& graph, PassStats& stats) {
  return Canonicalizer(stats).Run(graph);
}

}  // namespace stepjit::passes
