// Guard construction, checks and human-readable descriptions of misses.
#include "frontend/guards.h"

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/dist.h"
#include "runtime/amp/autocast.h"
#include "runtime/autograd/grad_mode.h"

namespace stepjit::frontend {
namespace {
std::string Describe(const TensorSpec& t) {
  return absl::StrCat(ir::DTypeName(t.dtype), ir::ShapeToString(t.shape),
                      t.device.is_cpu() ? "" : absl::StrCat(" on ", t.device.str()),
                      t.requires_grad ? " requires_grad" : "");
}
std::string DescribeTensor(const Tensor& t) {
  return absl::StrCat(ir::DTypeName(t.dtype()), ir::ShapeToString(t.shape()));
}
}  // namespace

Signature MakeSignature(const std::vector<Tensor>& inputs) {
  Signature s;
  for (const Tensor& t : inputs) {
    SJ_REQUIRE(t.defined(), "compiled step: an argument is an undefined tensor");
    s.inputs.push_back({t.dtype(), t.shape(), t.device(), t.requires_grad()});
    int first = static_cast<int>(s.storage_of.size());
    for (size_t j = 0; j < s.storage_of.size(); ++j) {
      if (inputs[j].storage() == t.storage()) {
        first = static_cast<int>(j);
        break;
      }
    }
    s.storage_of.push_back(first);
  }
  s.grad_mode = GradMode::is_enabled();
  s.autocast = amp::IsAutocastEnabled();
  if (s.autocast) s.autocast_dtype = amp::AutocastDType();
  s.world_size = dist::world_size();
  return s;
}

std::string DescribeSignature(const Signature& s) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    parts.push_back(absl::StrCat("x", i, ": ", Describe(s.inputs[i])));
  }
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")",
                      s.grad_mode ? "" : " under no_grad",
                      s.autocast ? absl::StrCat(" under autocast(", ir::DTypeName(s.autocast_dtype), ")")
                                 : "");
}

std::string DescribeSignatureDiff(const Signature& cached, const Signature& now) {
  if (cached.inputs.size() != now.inputs.size()) {
    return absl::StrCat("the step was traced with ", cached.inputs.size(),
                        " tensor arguments, now called with ", now.inputs.size());
  }
  for (size_t i = 0; i < now.inputs.size(); ++i) {
    if (!(cached.inputs[i] == now.inputs[i])) {
      return absl::StrCat("argument x", i, " is ", Describe(now.inputs[i]), ", traced as ",
                          Describe(cached.inputs[i]));
    }
  }
  for (size_t i = 0; i < now.inputs.size(); ++i) {
    if (cached.storage_of[i] != now.storage_of[i]) {
      auto says = [&](int first) {
        return first == static_cast<int>(i) ? std::string("its own tensor")
                                            : absl::StrCat("the same storage as x", first);
      };
      return absl::StrCat("argument x", i, " is ", says(now.storage_of[i]), ", traced as ",
                          says(cached.storage_of[i]));
    }
  }
  if (cached.grad_mode != now.grad_mode) {
    return absl::StrCat("grad mode is ", now.grad_mode ? "on" : "off", ", traced with it ",
                        cached.grad_mode ? "on" : "off");
  }
  if (cached.autocast != now.autocast || cached.autocast_dtype != now.autocast_dtype) {
    auto state = [](const Signature& x) {
      return x.autocast ? absl::StrCat("autocast(", ir::DTypeName(x.autocast_dtype), ")")
                        : std::string("no autocast");
    };
    return absl::StrCat("called under ", state(now), ", traced under ", state(cached));
  }
  if (cached.world_size != now.world_size) {
    return absl::StrCat("the world has ", now.world_size,
                        " ranks now (dist::init), traced with ",
                        cached.world_size);
  }
  return "identical";
}

std::vector<std::pair<int, int>> DimsOnlyDiff(
    const Signature& cached, const Signature& now,
    const std::vector<std::pair<int, int>>& allowed) {
  std::vector<std::pair<int, int>> dims;
  if (cached.inputs.size() != now.inputs.size() ||
      cached.storage_of != now.storage_of ||
      cached.grad_mode != now.grad_mode || cached.autocast != now.autocast ||
      cached.autocast_dtype != now.autocast_dtype ||
      cached.world_size != now.world_size)
    return dims;
  for (size_t i = 0; i < now.inputs.size(); ++i) {
    const TensorSpec& a = cached.inputs[i];
    const TensorSpec& b = now.inputs[i];
    if (a.dtype != b.dtype || a.device != b.device ||
        a.requires_grad != b.requires_grad || a.shape.size() != b.shape.size())
      return {};
    for (size_t d = 0; d < a.shape.size(); ++d) {
      if (a.shape[d] == b.shape[d]) continue;
      const std::pair<int, int> at(static_cast<int>(i), static_cast<int>(d));
      if (a.shape[d] <= 1 || b.shape[d] <= 1 ||
          (!allowed.empty() && !absl::c_linear_search(allowed, at)))
        return {};
      dims.push_back(at);
    }
  }
  return dims;
}

StateGuards MakeStateGuards(const Trace& trace) {
  StateGuards g;
  for (const Tensor& t : trace.state) {
    g.state.push_back({t.dtype(), t.shape(), t.strides(), t.offset(), t.storage().get()});
  }
  return g;
}

std::string CheckStateGuards(const Trace& trace, const StateGuards& guards) {
  for (size_t i = 0; i < trace.state.size(); ++i) {
    const Tensor& t = trace.state[i];
    const StateGuards::Meta& m = guards.state[i];
    if (t.impl()->replaced) {
      return absl::StrCat(
          "a module parameter was replaced since the step was traced: state "
          "tensor s",
          i, " (", DescribeTensor(t),
          ") is no longer the module's (identity guard)");
    }
    if (t.dtype() != m.dtype || t.shape() != m.shape) {
      return absl::StrCat("state tensor s", i, " is now ", DescribeTensor(t), ", traced as ",
                          ir::DTypeName(m.dtype), ir::ShapeToString(m.shape));
    }
    if (t.storage().get() != m.storage || t.strides() != m.strides || t.offset() != m.offset) {
      return absl::StrCat("state tensor s", i, " (", DescribeTensor(t),
                          ") was given new storage or layout since the step was traced");
    }
  }
  for (const GradTouch& g : trace.grad_touched) {
    if (!g.read_first) continue;
    const AutogradMeta* meta = g.leaf.impl()->autograd.get();
    const TensorImpl* now = meta != nullptr ? meta->grad.get() : nullptr;
    if (now != g.before.get()) {
      return absl::StrCat("the .grad of a ", DescribeTensor(g.leaf),
                          " leaf is ", now ? "a different tensor" : "unset",
                          " now, but the traced step read ",
                          g.before ? "the tensor it had then" : "it unset");
    }
  }
  return "";
}

std::string CheckFlagGuards(const Trace& trace) {
  for (const FlagGuard& g : trace.flag_guards) {
    if (*g.flag != g.value) {
      return absl::StrCat("a ", g.what, " is ", *g.flag ? "on" : "off", " now, traced with it ",
                          g.value ? "on" : "off", g.value ? " (train() was traced, now eval())"
                                                          : " (eval() was traced, now train())");
    }
  }
  return "";
}

std::vector<std::string> UnguardedState(const Trace& trace) {
  std::vector<std::string> out;
  for (size_t i = 0; i < trace.state.size(); ++i) {
    const Tensor& t = trace.state[i];
    if (t.impl()->owned_state) continue;
    bool guarded_grad = false;
    for (const GradTouch& g : trace.grad_touched)
      guarded_grad |= g.read_first && g.before.get() == t.impl();
    if (!guarded_grad) out.push_back(absl::StrCat("s", i, " ", DescribeTensor(t)));
  }
  return out;
}

}  // namespace stepjit::frontend
