// Error handling shared by every layer: stepjit::Error, SJ_CHECK and Status macros.
#ifndef STEPJIT_IR_STATUS_H_
#define STEPJIT_IR_STATUS_H_

#include <new>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace stepjit {

// Thrown by the user-facing API (tensor ops, modules, optimizers, data) for
// mistakes a user can make; the message names what was expected and found.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error carrying the status message when `status` is not OK.
void ThrowIfError(const absl::Status& status);

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return *std::move(v);
}

// Runs `fn` (returning a StatusOr or Status) for a Status-returning API
// whose allocations a user's input sizes (a file's header, a directory's
// files): running out of memory there (std::bad_alloc, std::length_error,
// or a tensor allocation's Error) becomes ResourceExhausted naming `what`,
// instead of an exception the caller did not expect.
template <typename Fn>
auto StatusOnAllocationFailure(absl::string_view what, Fn&& fn)
    -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": out of memory (", e.what(), ")"));
  } catch (const Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": ", e.what()));
  }
}

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond,
                              const std::string& msg);

}  // namespace stepjit

// Internal invariant: a failure is a bug in stepjit, not in user code.
#define SJ_CHECK(cond, ...)                                                \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ::stepjit::CheckFailed(__FILE__, __LINE__, #cond,                    \
                             ::absl::StrCat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                      \
  } while (0)

// User error in the throwing API.
#define SJ_REQUIRE(cond, ...)                                         \
  do {                                                                \
    if (!(cond)) throw ::stepjit::Error(::absl::StrCat(__VA_ARGS__)); \
  } while (0)

#define SJ_STATUS_CONCAT_INNER(a, b) a##b
#define SJ_STATUS_CONCAT(a, b) SJ_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status sj_status_ = (expr);          \
    if (!sj_status_.ok()) return sj_status_;     \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr)                                        \
  auto SJ_STATUS_CONCAT(sj_statusor_, __LINE__) = (expr);                  \
  if (!SJ_STATUS_CONCAT(sj_statusor_, __LINE__).ok())                      \
    return SJ_STATUS_CONCAT(sj_statusor_, __LINE__).status();              \
  lhs = *std::move(SJ_STATUS_CONCAT(sj_statusor_, __LINE__))

#endif  // STEPJIT_IR_STATUS_H_
