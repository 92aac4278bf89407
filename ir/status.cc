// Error reporting helpers.
#include "ir/status.h"

#include <cstdio>
#include <cstdlib>

namespace stepjit {

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw Error(std::string(status.message()));
}

void CheckFailed(const char* file, int line, const char* cond,
                 const std::string& msg) {
  std::fprintf(stderr, "stepjit internal error at %s:%d: check `%s` failed%s%s\n",
               file, line, cond, msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace stepjit
