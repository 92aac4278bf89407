// Tensor comparison under a dtype's tolerance, and the one-line reports of the
// accuracy checker.
#include "program/region_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/printer.h"

namespace stepjit::runtime {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A tensor's values on the host in row-major order: floats as f64 (exact
// for every float dtype), integers and bool as i64 (exact, where f64 would
// round past 2^53).
std::vector<double> FloatValues(const Tensor& t) {
  return t.to(Device::cpu())
      .to(ir::DType::kF64)
      .contiguous()
      .to_vector<double>();
}
std::vector<int64_t> IntValues(const Tensor& t) {
  return t.to(Device::cpu())
      .to(ir::DType::kI64)
      .contiguous()
      .to_vector<int64_t>();
}

// Absolute and relative error of one element, and whether it agrees.
struct ElementError {
  double abs = 0, rel = 0;
  bool agrees = true;
};

ElementError Compare(double got, double want, Tolerance tol) {
  if (std::isnan(got) || std::isnan(want)) {
    const bool both = std::isnan(got) && std::isnan(want);
    return {both ? 0 : kInf, both ? 0 : kInf, both};
  }
  if (std::isinf(got) || std::isinf(want)) {
    const bool same = got == want;
    return {same ? 0 : kInf, same ? 0 : kInf, same};
  }
  const double abs = std::fabs(got - want);
  const double rel = want != 0 ? abs / std::fabs(want) : (abs == 0 ? 0 : kInf);
  return {abs, rel, abs <= tol.atol + tol.rtol * std::fabs(want)};
}

// Folds elements into a TensorDiff; the worst element is the first of the
// largest absolute error (an infinite error: the first disagreeing NaN or inf).
class DiffBuilder {
 public:
  explicit DiffBuilder(int64_t numel) { d_.numel = numel; }
  void Add(int64_t i, double got, double want, const ElementError& e) {
    d_.max_abs_error = std::max(d_.max_abs_error, e.abs);
    d_.max_rel_error = std::max(d_.max_rel_error, e.rel);
    if (e.agrees) return;
    if (d_.mismatched_elements++ == 0 || e.abs > worst_abs_) {
      worst_abs_ = e.abs;
      d_.worst_index = i;
      d_.got_at_worst = got;
      d_.want_at_worst = want;
    }
  }
  TensorDiff Take() { return d_; }

 private:
  TensorDiff d_;
  double worst_abs_ = 0;
};

}  // namespace

Tolerance DefaultTolerance(ir::DType t) {
  switch (t) {
    case ir::DType::kF64:
      return {1e-12, 1e-12};
    case ir::DType::kF32:
      return {1e-5, 1e-6};
    case ir::DType::kF16:
    case ir::DType::kBF16:
      return {1e-2, 1e-3};
    case ir::DType::kI64:
    case ir::DType::kI32:
    case ir::DType::kBool:
      return {0, 0};
  }
  return {};
}

TensorDiff CompareTensors(const Tensor& got, const Tensor& want) {
  const Tolerance a = DefaultTolerance(got.dtype()),
                  b = DefaultTolerance(want.dtype());
  return CompareTensors(got, want,
                        {std::max(a.rtol, b.rtol), std::max(a.atol, b.atol)});
}

TensorDiff CompareTensors(const Tensor& got, const Tensor& want,
                          Tolerance tol) {
  const int64_t n = want.numel();
  DiffBuilder d(n);
  if (got.shape() != want.shape()) {
    TensorDiff diff = d.Take();
    diff.shape_differs = true;
    diff.mismatched_elements = n;
    diff.max_abs_error = diff.max_rel_error = kInf;
    return diff;
  }
  if (ir::IsFloating(got.dtype()) || ir::IsFloating(want.dtype())) {
    const std::vector<double> g = FloatValues(got), w = FloatValues(want);
    for (int64_t i = 0; i < n; ++i)
      d.Add(i, g[i], w[i], Compare(g[i], w[i], tol));
    return d.Take();
  }
  const std::vector<int64_t> g = IntValues(got), w = IntValues(want);
  for (int64_t i = 0; i < n; ++i) {
    // Exact, in i64; the difference as a double only sizes the error.
    const double gd = static_cast<double>(g[i]), wd = static_cast<double>(w[i]);
    ElementError e;
    if (g[i] != w[i])
      e = {std::fabs(gd - wd),
           w[i] != 0 ? std::fabs(gd - wd) / std::fabs(wd) : kInf, false};
    d.Add(i, gd, wd, e);
  }
  return d.Take();
}

std::string ToString(const TensorDiff& diff, ir::ShapeRef shape) {
  if (diff.shape_differs) return "shapes differ";
  std::string out =
      absl::StrCat(diff.mismatched_elements, " of ", diff.numel,
                   " elements differ; max abs error ", diff.max_abs_error,
                   ", max rel error ", diff.max_rel_error);
  if (diff.worst_index < 0) return out;
  std::vector<int64_t> coords(shape.size());
  int64_t rest = diff.worst_index;
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = rest % shape[d];
    rest /= shape[d];
  }
  absl::StrAppend(&out, "; worst at [", absl::StrJoin(coords, ", "), "]: got ",
                  diff.got_at_worst, ", want ", diff.want_at_worst);
  return out;
}

std::string ToString(const RegionMismatch& m) {
  return absl::StrCat(
      m.region, " result ", m.output, " (", m.value, ", from `", m.op_ir,
      "`, node ", m.node_index, ", ", ir::PrintType(m.type),
      "): ", ToString(static_cast<const TensorDiff&>(m), m.type.shape));
}

RegionChecker::RegionChecker(const ir::Graph& graph) : graph_(graph) {}

std::vector<Tensor> RegionChecker::Snapshot(absl::Span<const Tensor> operands) {
  std::vector<Tensor> out;
  out.reserve(operands.size());
  for (const Tensor& t : operands) out.push_back(t.clone());
  return out;
}

void RegionChecker::Compare(const ir::Node& region,
                            absl::Span<const Tensor> generated,
                            absl::Span<const Tensor> interpreted) {
  const ir::Graph& body = *region.body();
  for (size_t i = 0; i < generated.size(); ++i) {
    const TensorDiff diff = CompareTensors(generated[i], interpreted[i]);
    if (diff.ok()) continue;
    if (!names_) {
      names_.emplace(graph_);
      for (size_t pos = 0; pos < graph_.nodes().size(); ++pos) {
        positions_[graph_.nodes()[pos].get()] = static_cast<int>(pos);
      }
    }
    RegionMismatch m;
    static_cast<TensorDiff&>(m) = diff;
    m.region = body.name();
    auto pos = positions_.find(&region);
    m.node_index = pos != positions_.end() ? pos->second : -1;
    m.output = static_cast<int>(i);
    const ir::Value* result = body.returns()[i];
    if (const ir::Node* producer = result->producer()) {
      m.op = std::string(ir::OpName(producer->op()));
      m.op_ir = ir::PrintNodeHeader(*producer, ir::ValueNames(body));
    } else {
      m.op = "parameter";
      m.op_ir = absl::StrCat("%", result->name());
    }
    m.value = names_->Name(region.outputs()[i]);
    m.call_ir = ir::PrintNodeHeader(region, *names_);
    m.type = region.outputs()[i]->type();
    m.region_ir = ir::Print(body);
    mismatches_.push_back(std::move(m));
  }
}

}  // namespace stepjit::runtime
