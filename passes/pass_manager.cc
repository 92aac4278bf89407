// The pass table and the pipeline runner: verify, dump and count per pass.
#include "passes/pass_manager.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <system_error>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "config/env.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "passes/amp_weight_copies.h"
#include "passes/autocast.h"
#include "passes/bucket_plan.h"
#include "passes/canonicalize.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/fuse.h"
#include "passes/gemm_bgrad.h"
#include "passes/grad_scaler.h"
#include "passes/memory_plan.h"
#include "passes/sink_regions.h"

namespace stepjit::passes {
namespace {

absl::StatusOr<bool> RunVerify(ir::Graph& graph, PassStats&) {
  absl::Status status = ir::Verify(graph);
  if (!status.ok()) return status;
  return false;
}

absl::StatusOr<bool> RunPrint(ir::Graph& graph, PassStats&) {
  ir::Print(graph, std::cerr);
  return false;
}

// The one list of passes. Add a pass here: {"name", &Entry, "summary"}.
constexpr PassInfo kPasses[] = {
    {"verify", &RunVerify, "check the IR's invariants (ir/verifier.h)"},
    {"print", &RunPrint,
     "print the IR at this point of the pipeline to stderr"},
    {"canonicalize", &Canonicalize,
     "fold constants, drop no-op casts/views, simplify x*1, x+0"},
    {"cse", &EliminateCommonSubexpressions,
     "merge identical pure op nodes (hash-consing)"},
    {"dce", &EliminateDeadCode,
     "remove nodes whose results are unused (never state writes)"},
    {"fuse", &Fuse,
     "group elementwise chains, reductions and optimizer updates into regions"},
    {"gemm-bgrad", &GemmBiasGradPass,
     "after fuse: a marked weight-gradient matmul also computes its bias "
     "gradient (CUDA steps)"},
    {"sink-regions", &SinkRegions,
     "move regions next to their first user so independent ones sit together"},
    {"bucket-plan", &PlanBuckets,
     "start each gradient bucket's async all_reduce as soon as its gradients "
     "exist, wait as late as possible, record the plan (bucket, bucket_plan)"},
    {"memory-plan", &PlanMemoryPass,
     "decide in-place updates by liveness; report planned peak bytes"},
    {"autocast-bf16", &AutocastBf16,
     "cast matmul inputs to bf16 and f32-policy op inputs to f32 "
     "(amp::Autocast's policy)"},
    {"autocast-f16", &AutocastF16, "the same with f16"},
    {"amp-weight-copies", &AmpWeightCopies,
     "after autocast: keep each weight's low-precision copy as state, "
     "written by the weight's update instead of cast every step"},
    {"grad-scaler", &InsertGradScaler,
     "dynamic loss scaling: scaled seed, unscaled grads, found_inf, predicated "
     "update",
     kGradScalerOptions, &InsertGradScalerWith, &GradScalerState},
};

std::string KnownPasses(absl::Span<const PassInfo> registry) {
  std::vector<absl::string_view> names;
  for (const PassInfo& p : registry) names.push_back(p.name);
  return absl::StrJoin(names, ", ");
}

const PassInfo* FindIn(absl::Span<const PassInfo> registry,
                       absl::string_view name) {
  for (const PassInfo& p : registry) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// How each OptionType reads in messages ("expected an integer") and in the
// list of options ("name=<int>"), in OptionType's order.
struct OptionTypeText {
  absl::string_view name, tag;
};
constexpr OptionTypeText kOptionTypeTexts[] = {{"an integer", "<int>"},
                                               {"a number", "<number>"},
                                               {"true or false", "<bool>"}};
static_assert(std::size(kOptionTypeTexts) ==
              static_cast<size_t>(OptionType::kBool) + 1);

const OptionTypeText& TextOf(OptionType type) {
  return kOptionTypeTexts[static_cast<int>(type)];
}

std::optional<PassOptions::Value> ParseValue(OptionType type,
                                             absl::string_view text) {
  switch (type) {
    case OptionType::kInt:
      if (int64_t v; absl::SimpleAtoi(text, &v)) return v;
      break;
    case OptionType::kDouble:
      if (double v; absl::SimpleAtod(text, &v) && std::isfinite(v)) return v;
      break;
    case OptionType::kBool:
      if (text == "true") return true;
      if (text == "false") return false;
      break;
  }
  return std::nullopt;
}

// The shortest text that reads back as the same double.
std::string FormatDouble(double v) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  SJ_CHECK(ec == std::errc());
  return std::string(buffer, end);
}

std::string FormatValue(const PassOptions::Value& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return absl::StrCat(*i);
  if (const auto* d = std::get_if<double>(&value)) return FormatDouble(*d);
  return std::get<bool>(value) ? "true" : "false";
}

OptionType TypeOf(const PassOptions::Value& value) {
  if (std::holds_alternative<int64_t>(value)) return OptionType::kInt;
  if (std::holds_alternative<double>(value)) return OptionType::kDouble;
  return OptionType::kBool;
}

std::string OptionNames(absl::Span<const PassOptionInfo> options) {
  std::vector<absl::string_view> names;
  for (const PassOptionInfo& o : options) names.push_back(o.name);
  return absl::StrJoin(names, ", ");
}

// Splits pipeline text at the commas outside braces; entries come back
// stripped, empty ones dropped. Braces must balance.
absl::StatusOr<std::vector<absl::string_view>> SplitEntries(
    absl::string_view text) {
  std::vector<absl::string_view> entries;
  int depth = 0;
  size_t start = 0;
  auto flush = [&](size_t end) {
    absl::string_view e =
        absl::StripAsciiWhitespace(text.substr(start, end - start));
    if (!e.empty()) entries.push_back(e);
    start = end + 1;
  };
  // The pass whose entry starts at `start`, for messages.
  auto pass_at = [&](size_t from) {
    absl::string_view rest = text.substr(from);
    return absl::StripAsciiWhitespace(rest.substr(0, rest.find('{')));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{' && ++depth > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pass `", pass_at(start), "`: nested '{' in pipeline '", text,
          "'; expected name=value options between one pair of braces"));
    }
    if (c == '}' && --depth < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unbalanced braces: a '}' after `",
          absl::StripAsciiWhitespace(text.substr(start, i - start)),
          "` in pipeline '", text, "' closes no '{'"));
    }
    if (c == ',' && depth == 0) flush(i);
  }
  if (depth != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pass `", pass_at(start),
        "`: unbalanced braces: no '}' closes its '{' in pipeline '", text,
        "'"));
  }
  flush(text.size());
  return entries;
}

// "name" or "name{opts}" of one entry; the options text without braces.
absl::StatusOr<PipelineEntry> ParseEntry(absl::string_view entry,
                                         absl::Span<const PassInfo> registry) {
  absl::string_view name = entry;
  absl::string_view options;
  bool braces = false;
  if (size_t open = entry.find('{'); open != absl::string_view::npos) {
    if (entry.back() != '}') {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected text after '}' in pipeline entry '", entry,
                       "'; expected ',' before the next pass"));
    }
    name = absl::StripAsciiWhitespace(entry.substr(0, open));
    options = entry.substr(open + 1, entry.size() - open - 2);
    braces = true;
  }
  const PassInfo* pass = FindIn(registry, name);
  if (pass == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown pass '", name, "'; known passes: ", KnownPasses(registry)));
  }
  PipelineEntry result{pass, PassOptions(pass->options)};
  if (braces && pass->options.empty() &&
      !absl::StripAsciiWhitespace(options).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pass `", name, "` takes no options, got {", options, "}"));
  }
  std::vector<absl::string_view> seen;
  for (absl::string_view item :
       absl::StrSplit(options, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("pass `", name, "`: expected name=value, got '", item,
                       "'; options: ", OptionNames(pass->options)));
    }
    const absl::string_view key = item.substr(0, eq);
    if (absl::c_linear_search(seen, key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("pass `", name, "`: option '", key, "' given twice"));
    }
    seen.push_back(key);
    if (absl::Status st = result.options.Set(key, item.substr(eq + 1));
        !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pass `", name, "`: ", st.message()));
    }
  }
  return result;
}

absl::Status WriteDump(const std::string& dir, int position,
                       absl::string_view pass, const ir::Graph& graph) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = absl::StrCat(
      dir, "/", absl::StrFormat("%03d", position), "-", pass, ".ir");
  std::ofstream out(path, std::ios::binary);
  ir::Print(graph, out);
  out.close();
  if (!out) {
    return absl::InternalError(
        absl::StrCat("cannot write IR dump '", path, "' (STEPJIT_DUMP)"));
  }
  return absl::OkStatus();
}

}  // namespace

PassOptions::PassOptions(absl::Span<const PassOptionInfo> declared)
    : declared_(declared), set_(declared.size(), false) {
  for (const PassOptionInfo& o : declared) {
    std::optional<Value> v = ParseValue(o.type, o.default_value);
    SJ_CHECK(v.has_value(), "option ", o.name, ": bad default ",
             o.default_value);
    values_.push_back(*v);
  }
}

int PassOptions::Index(absl::string_view name) const {
  for (size_t i = 0; i < declared_.size(); ++i) {
    if (declared_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::Status PassOptions::Set(absl::string_view name, absl::string_view text) {
  const int i = Index(name);
  if (i < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown option '", name, "'; options: ", OptionNames(declared_)));
  }
  std::optional<Value> v = ParseValue(declared_[i].type, text);
  if (!v.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("option '", name, "' expects ",
                     TextOf(declared_[i].type).name, ", got '", text, "'"));
  }
  values_[i] = *v;
  set_[i] = true;
  return absl::OkStatus();
}

void PassOptions::Set(absl::string_view name, Value value) {
  const int i = Index(name);
  SJ_CHECK(i >= 0, "undeclared option ", name);
  SJ_CHECK(declared_[i].type == TypeOf(value), "option ", name, ": wrong type");
  values_[i] = value;
  set_[i] = true;
}

int64_t PassOptions::Int(absl::string_view name) const {
  const int i = Index(name);
  SJ_CHECK(i >= 0 && declared_[i].type == OptionType::kInt, name);
  return std::get<int64_t>(values_[i]);
}

double PassOptions::Double(absl::string_view name) const {
  const int i = Index(name);
  SJ_CHECK(i >= 0 && declared_[i].type == OptionType::kDouble, name);
  return std::get<double>(values_[i]);
}

bool PassOptions::Bool(absl::string_view name) const {
  const int i = Index(name);
  SJ_CHECK(i >= 0 && declared_[i].type == OptionType::kBool, name);
  return std::get<bool>(values_[i]);
}

std::string PassOptions::ToString() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < declared_.size(); ++i) {
    if (set_[i]) {
      parts.push_back(
          absl::StrCat(declared_[i].name, "=", FormatValue(values_[i])));
    }
  }
  return absl::StrJoin(parts, " ");
}

std::string PipelineEntry::ToString() const {
  const std::string options_text = options.ToString();
  if (options_text.empty()) return std::string(pass->name);
  return absl::StrCat(pass->name, "{", options_text, "}");
}

std::string Pipeline::ToString() const {
  return absl::StrJoin(entries, ",",
                       [](std::string* out, const PipelineEntry& e) {
                         out->append(e.ToString());
                       });
}

std::string FormatPassEntry(
    absl::string_view pass,
    absl::Span<const std::pair<absl::string_view, PassOptions::Value>> values) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : values) {
    parts.push_back(absl::StrCat(name, "=", FormatValue(value)));
  }
  return absl::StrCat(pass, "{", absl::StrJoin(parts, " "), "}");
}

std::string DescribeOptions(const PassInfo& pass) {
  std::string out;
  for (const PassOptionInfo& o : pass.options) {
    absl::StrAppend(&out, "    ", o.name, "=", TextOf(o.type).tag, " (default ",
                    o.default_value, "): ", o.help, "\n");
  }
  return out;
}

int64_t PipelineStats::Get(const Statistic& counter) const {
  const PassStats* s = Find(counter.pass);
  return s == nullptr ? 0 : s->Get(counter.name);
}

void PassStats::Add(absl::string_view counter, int64_t n) {
  auto it = counters.find(counter);
  if (it == counters.end()) {
    counters.emplace(std::string(counter), n);
  } else {
    it->second += n;
  }
}

int64_t PassStats::Get(absl::string_view counter) const {
  auto it = counters.find(counter);
  return it == counters.end() ? 0 : it->second;
}

PassStats& PipelineStats::For(absl::string_view pass) {
  for (auto& [name, stats] : passes) {
    if (name == pass) return stats;
  }
  passes.emplace_back(std::string(pass), PassStats());
  return passes.back().second;
}

const PassStats* PipelineStats::Find(absl::string_view pass) const {
  for (const auto& [name, stats] : passes) {
    if (name == pass) return &stats;
  }
  return nullptr;
}

std::string PipelineStats::ToString() const {
  std::string out;
  for (const auto& [name, s] : passes) {
    absl::StrAppend(&out, name, ": runs=", s.runs, " changed=", s.changed);
    if (s.skipped > 0) absl::StrAppend(&out, " skipped=", s.skipped);
    if (s.runs > 0) {
      absl::StrAppend(&out, " nodes=", s.nodes_before, "->", s.nodes_after);
    }
    for (const auto& [counter, n] : s.counters) {
      absl::StrAppend(&out, " ", counter, "=", n);
    }
    out += "\n";
  }
  return out;
}

std::vector<PassInfo> ListPasses() {
  return std::vector<PassInfo>(std::begin(kPasses), std::end(kPasses));
}

const PassInfo* FindPass(absl::string_view name) {
  return FindIn(kPasses, name);
}

std::string PipelineForTarget(absl::string_view pipeline, Target target) {
  absl::StatusOr<std::vector<absl::string_view>> entries =
      SplitEntries(pipeline);
  // Unbalanced text stays as it is: running it reports the error.
  if (!entries.ok()) return std::string(pipeline);
  std::vector<std::string> out;
  int last_fuse = -1;
  for (absl::string_view entry : *entries) {
    const absl::string_view name =
        absl::StripAsciiWhitespace(entry.substr(0, entry.find('{')));
    if (name == "gemm-bgrad") return std::string(pipeline);
    if (name == "fuse") last_fuse = static_cast<int>(out.size());
    out.emplace_back(entry);
  }
  if (target != Target::kCuda || last_fuse < 0) return std::string(pipeline);
  out.insert(out.begin() + last_fuse + 1, "gemm-bgrad");
  return absl::StrJoin(out, ",");
}

PipelineOptions FromEnvironment() {
  PipelineOptions options;
  options.dump_dir = config::Get(config::Env::kDump).value_or("");
  options.disabled = config::ListOrThrow(config::Env::kDisable);
  return options;
}

absl::StatusOr<Pipeline> ParsePipelineText(
    absl::string_view pipeline, absl::Span<const PassInfo> registry) {
  ASSIGN_OR_RETURN(std::vector<absl::string_view> entries,
                   SplitEntries(pipeline));
  Pipeline result;
  for (absl::string_view entry : entries) {
    ASSIGN_OR_RETURN(PipelineEntry e, ParseEntry(entry, registry));
    result.entries.push_back(std::move(e));
  }
  return result;
}

absl::StatusOr<Pipeline> ParsePipelineText(absl::string_view pipeline) {
  return ParsePipelineText(pipeline, kPasses);
}

std::vector<StateParam> PipelineState(const Pipeline& pipeline) {
  std::vector<StateParam> state;
  for (const PipelineEntry& e : pipeline.entries) {
    if (e.pass->state == nullptr) continue;
    for (StateParam& p : e.pass->state(e.options)) {
      state.push_back(std::move(p));
    }
  }
  return state;
}

absl::StatusOr<std::vector<const PassInfo*>> ParsePipeline(
    absl::string_view pipeline, absl::Span<const PassInfo> registry) {
  ASSIGN_OR_RETURN(Pipeline parsed, ParsePipelineText(pipeline, registry));
  std::vector<const PassInfo*> passes;
  for (const PipelineEntry& e : parsed.entries) passes.push_back(e.pass);
  return passes;
}

absl::StatusOr<std::vector<const PassInfo*>> ParsePipeline(
    absl::string_view pipeline) {
  return ParsePipeline(pipeline, kPasses);
}

absl::Status RunPipeline(ir::Graph& graph, absl::string_view pipeline,
                         const PipelineOptions& options, PipelineStats* stats) {
  return RunPipeline(graph, pipeline, options, stats, kPasses);
}

absl::Status RunPipeline(ir::Graph& graph, absl::string_view pipeline,
                         const PipelineOptions& options, PipelineStats* stats,
                         absl::Span<const PassInfo> registry) {
  ASSIGN_OR_RETURN(Pipeline parsed, ParsePipelineText(pipeline, registry));
  for (const std::string& name : options.disabled) {
    if (FindIn(registry, name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown pass '", name,
          "' in the disabled list (STEPJIT_DISABLE); known passes: ",
          KnownPasses(registry)));
    }
  }
  PipelineStats local;
  if (stats == nullptr) stats = &local;
  for (size_t i = 0; i < parsed.entries.size(); ++i) {
    const PassInfo& pass = *parsed.entries[i].pass;
    PassStats& s = stats->For(pass.name);
    if (absl::c_linear_search(options.disabled, pass.name)) {
      ++s.skipped;
      continue;
    }
    ++s.runs;
    s.nodes_before += static_cast<int64_t>(graph.nodes().size());
    absl::StatusOr<bool> changed =
        pass.run_configured != nullptr
            ? pass.run_configured(graph, parsed.entries[i].options, s)
            : pass.run(graph, s);
    if (!changed.ok()) {
      return absl::Status(
          changed.status().code(),
          absl::StrCat("pass `", pass.name, "`: ", changed.status().message()));
    }
    s.changed += *changed ? 1 : 0;
    s.nodes_after += static_cast<int64_t>(graph.nodes().size());
    if (options.verify_each) {
      if (absl::Status v = ir::Verify(graph); !v.ok()) {
        return absl::InternalError(
            absl::StrCat("after pass `", pass.name, "`: ", v.message()));
      }
    }
    if (!options.dump_dir.empty()) {
      RETURN_IF_ERROR(WriteDump(options.dump_dir, static_cast<int>(i) + 1,
                                pass.name, graph));
    }
    if (options.after_pass) options.after_pass(pass.name, graph);
  }
  return absl::OkStatus();
}

}  // namespace stepjit::passes
