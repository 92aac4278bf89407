// The declared environment variables: lookup, typed reads, misspellings.
#include "config/env.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ir/parse_number.h"
#include "ir/status.h"

extern char** environ;

namespace stepjit::config {
namespace {

constexpr EnvInfo kEnv[] = {
#define ENV(id, name, kind, values, default_text, help) \
  {Env::k##id, name, EnvKind::kind, values, default_text, help},
#include "config/env.def"
#undef ENV
};

std::vector<std::string> Alternatives(const EnvInfo& info) {
  return absl::StrSplit(info.values, '|', absl::SkipEmpty());
}

// "a, b or c".
std::string OneOf(const std::vector<std::string>& names) {
  if (names.size() <= 1) return names.empty() ? "" : names[0];
  return absl::StrCat(absl::StrJoin(names.begin(), names.end() - 1, ", "),
                      " or ", names.back());
}

void CheckKind(const EnvInfo& info, EnvKind kind) {
  SJ_CHECK(info.kind == kind, info.name, " is declared ", KindName(info.kind),
           " in config/env.def, but read as ", KindName(kind));
}

// Levenshtein distance, stopping early above `limit`.
int Distance(absl::string_view a, absl::string_view b, int limit) {
  if (static_cast<int>(std::max(a.size(), b.size()) -
                       std::min(a.size(), b.size())) > limit)
    return limit + 1;
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

void WarnMisspeltOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<const char*> entries;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e)
      entries.push_back(*e);
    for (const std::string& m : Misspelt(entries))
      std::fprintf(stderr, "stepjit: warning: %s\n", m.c_str());
  });
}

}  // namespace

absl::Span<const EnvInfo> AllEnv() { return kEnv; }

const EnvInfo& Info(Env env) { return kEnv[static_cast<int>(env)]; }

const char* KindName(EnvKind kind) {
  // In EnvKind's order; scripts/gen-docs' ENV_KINDS spells them alike.
  static constexpr const char* kNames[] = {"path",   "text",   "integer",
                                           "number", "choice", "list"};
  static_assert(std::size(kNames) == static_cast<size_t>(EnvKind::kList) + 1);
  return kNames[static_cast<int>(kind)];
}

std::optional<std::string> Get(Env env) {
  WarnMisspeltOnce();
  const char* v = std::getenv(Info(env).name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string Invalid(Env env, absl::string_view value,
                    absl::string_view expected) {
  return absl::StrCat(Info(env).name, ": expected ", expected, ", got '", value,
                      "'");
}

absl::StatusOr<int64_t> ParseInt(Env env, absl::string_view text) {
  const EnvInfo& info = Info(env);
  CheckKind(info, EnvKind::kInt);
  const std::vector<std::string> range =
      absl::StrSplit(info.values, absl::MaxSplits("..", 1));
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
  SJ_CHECK(range.size() == 2 && absl::SimpleAtoi(range[0], &lo) &&
               (range[1].empty() || absl::SimpleAtoi(range[1], &hi)),
           info.name, ": bad range '", info.values, "' in config/env.def");
  return ir::ParseInteger(info.name, text, lo, hi);
}

absl::StatusOr<double> ParseReal(Env env, absl::string_view text) {
  const EnvInfo& info = Info(env);
  CheckKind(info, EnvKind::kReal);
  absl::string_view values = info.values;
  ir::RealRange range;
  range.min_inclusive = !absl::ConsumePrefix(&values, ">");
  const std::vector<std::string> bounds =
      absl::StrSplit(values, absl::MaxSplits("..", 1));
  SJ_CHECK(bounds.size() == 2 && absl::SimpleAtod(bounds[0], &range.min) &&
               (bounds[1].empty() || absl::SimpleAtod(bounds[1], &range.max)),
           info.name, ": bad range '", info.values, "' in config/env.def");
  return ir::ParseReal(info.name, text, range);
}

absl::StatusOr<std::string> ParseChoice(Env env, absl::string_view text) {
  const EnvInfo& info = Info(env);
  CheckKind(info, EnvKind::kChoice);
  const std::vector<std::string> choices = Alternatives(info);
  for (const std::string& c : choices) {
    if (absl::EqualsIgnoreCase(c, text)) return c;
  }
  return absl::InvalidArgumentError(Invalid(env, text, OneOf(choices)));
}

absl::StatusOr<std::vector<std::string>> ParseList(Env env,
                                                   absl::string_view text) {
  const EnvInfo& info = Info(env);
  CheckKind(info, EnvKind::kList);
  const std::vector<std::string> known = Alternatives(info);
  std::vector<std::string> out;
  for (absl::string_view name : absl::StrSplit(text, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name.empty()) continue;
    if (!known.empty() &&
        std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(
          Invalid(env, text,
                  absl::StrCat("a comma-separated list of ", OneOf(known),
                               " ('", name, "' is none of them)")));
    }
    out.emplace_back(name);
  }
  return out;
}

absl::StatusOr<std::optional<int64_t>> GetInt(Env env) {
  const std::optional<std::string> text = Get(env);
  if (!text) return std::nullopt;
  return ParseInt(env, *text);
}

absl::StatusOr<std::optional<double>> GetReal(Env env) {
  const std::optional<std::string> text = Get(env);
  if (!text) return std::nullopt;
  return ParseReal(env, *text);
}

absl::StatusOr<std::optional<std::string>> GetChoice(Env env) {
  const std::optional<std::string> text = Get(env);
  if (!text) return std::nullopt;
  return ParseChoice(env, *text);
}

absl::StatusOr<std::vector<std::string>> GetList(Env env) {
  const std::optional<std::string> text = Get(env);
  if (!text) return std::vector<std::string>();
  return ParseList(env, *text);
}

std::optional<int64_t> IntOrThrow(Env env) { return ValueOrThrow(GetInt(env)); }
std::optional<double> RealOrThrow(Env env) {
  return ValueOrThrow(GetReal(env));
}
std::optional<std::string> ChoiceOrThrow(Env env) {
  return ValueOrThrow(GetChoice(env));
}
std::vector<std::string> ListOrThrow(Env env) {
  return ValueOrThrow(GetList(env));
}

std::vector<std::string> Misspelt(absl::Span<const char* const> environment) {
  std::vector<std::string> out;
  for (const char* entry : environment) {
    absl::string_view e(entry);
    const absl::string_view name = e.substr(0, e.find('='));
    if (!absl::StartsWith(name, "STEPJIT_")) continue;
    const EnvInfo* closest = nullptr;
    int best = 3;
    for (const EnvInfo& info : kEnv) {
      const int d = Distance(name, info.name, 2);
      if (d == 0) {
        closest = nullptr;
        best = 0;
        break;
      }
      if (d < best) {
        best = d;
        closest = &info;
      }
    }
    if (closest == nullptr) continue;
    out.push_back(absl::StrCat(name,
                               " is set, but stepjit reads no such "
                               "variable; did you mean ",
                               closest->name, "? (docs/environment.md)"));
  }
  return out;
}

}  // namespace stepjit::config
