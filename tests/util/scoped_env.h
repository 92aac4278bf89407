// Sets (or, with nullopt, unsets) an environment variable for one scope and
// puts the old value back at its end.
#ifndef STEPJIT_TESTS_UTIL_SCOPED_ENV_H_
#define STEPJIT_TESTS_UTIL_SCOPED_ENV_H_

#include <cstdlib>
#include <optional>
#include <string>

namespace stepjit::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value.has_value()) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_SCOPED_ENV_H_
