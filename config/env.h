// The environment variables stepjit reads, declared once (config/env.def):
// the one place that calls getenv for a STEPJIT_* variable, with typed
// reads that reject a bad value in one message format,
//
//   STEPJIT_NUM_THREADS: expected an integer from 1 to 1024, got 'abc'
//
// and a warning for a set variable whose name is one or two letters away
// from a declared one (STEPJIT_NUM_THREAD: did you mean ...?).
//
// Variables are read when the reader asks (most readers keep what they read
// for the life of the process); nothing here caches a value.
#ifndef STEPJIT_CONFIG_ENV_H_
#define STEPJIT_CONFIG_ENV_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stepjit::config {

enum class Env : uint8_t {
#define ENV(id, name, kind, values, default_text, help) k##id,
#include "config/env.def"
#undef ENV
};

enum class EnvKind : uint8_t { kPath, kText, kInt, kReal, kChoice, kList };

struct EnvInfo {
  Env env;
  const char* name;
  EnvKind kind;
  const char* values;
  const char* default_text;
  const char* help;
};

// Every declared variable, in env.def's order.
absl::Span<const EnvInfo> AllEnv();
const EnvInfo& Info(Env env);
// The kind's name in docs and messages ("path", "int", ...).
const char* KindName(EnvKind kind);

// The variable's text; nullopt when it is unset or empty.
std::optional<std::string> Get(Env env);

// The one message for a value a variable does not take:
// "<NAME>: expected <expected>, got '<value>'".
std::string Invalid(Env env, absl::string_view value,
                    absl::string_view expected);

// Typed reads against the kind and values env.def declares (the caller's
// kind must match). nullopt: unset. An error carries Invalid's message.
absl::StatusOr<std::optional<int64_t>> GetInt(Env env);
absl::StatusOr<std::optional<double>> GetReal(Env env);
// kChoice: the value as env.def spells it.
absl::StatusOr<std::optional<std::string>> GetChoice(Env env);
// kList: the names in order (empty when unset).
absl::StatusOr<std::vector<std::string>> GetList(Env env);

// `text` read as the variable's value would be (tests, and readers that
// take the value from elsewhere).
absl::StatusOr<int64_t> ParseInt(Env env, absl::string_view text);
absl::StatusOr<double> ParseReal(Env env, absl::string_view text);
absl::StatusOr<std::string> ParseChoice(Env env, absl::string_view text);
absl::StatusOr<std::vector<std::string>> ParseList(Env env,
                                                   absl::string_view text);

// The same, throwing stepjit::Error on a bad value.
std::optional<int64_t> IntOrThrow(Env env);
std::optional<double> RealOrThrow(Env env);
std::optional<std::string> ChoiceOrThrow(Env env);
std::vector<std::string> ListOrThrow(Env env);

// The STEPJIT_* names set in `environment` ("NAME=value" entries, as
// environ holds them) that are not declared but are at most two edits from
// a declared one, each with a message naming the declared one. The first
// read of any variable prints these to stderr, once per process.
std::vector<std::string> Misspelt(absl::Span<const char* const> environment);

}  // namespace stepjit::config

#endif  // STEPJIT_CONFIG_ENV_H_
