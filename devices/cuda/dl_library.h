// Opening NVIDIA's libraries at run time (cuBLASLt, NCCL): the first of a
// list of candidate paths that dlopen accepts, and typed symbol lookup.
#ifndef STEPJIT_DEVICES_CUDA_DL_LIBRARY_H_
#define STEPJIT_DEVICES_CUDA_DL_LIBRARY_H_

#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stepjit::runtime::cuda {

struct DlOpened {
  void* handle = nullptr;  // null when no candidate opened
  std::string path;        // the candidate that opened
  // dlerror()'s text (or the candidate) for each one that did not, in order.
  std::vector<std::string> failures;
};

// dlopen(RTLD_NOW | RTLD_LOCAL) of each candidate in turn until one opens.
inline DlOpened DlOpenFirst(const std::vector<std::string>& candidates) {
  DlOpened out;
  for (const std::string& candidate : candidates) {
    dlerror();
    out.handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.handle != nullptr) {
      out.path = candidate;
      return out;
    }
    const char* err = dlerror();
    out.failures.push_back(err != nullptr ? err : candidate);
  }
  return out;
}

// DlOpenFirst, or when no candidate opens NotFoundError
// "<not_found>: tried <each failure, '; ' between><advice>".
inline absl::StatusOr<DlOpened> DlOpenFirstOrNotFound(
    const std::vector<std::string>& candidates, absl::string_view not_found,
    absl::string_view advice = "") {
  DlOpened opened = DlOpenFirst(candidates);
  if (opened.handle == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        not_found, ": tried ", absl::StrJoin(opened.failures, "; "), advice));
  }
  return opened;
}

// Sets `fn` to `name` in `lib`; false when the library lacks it.
template <typename Fn>
bool DlResolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

// An entry point's name and whether DlResolve found it.
using DlSymbol = std::pair<const char*, bool>;

// The name of the first entry point of `symbols` not found, or null.
inline const char* DlFirstMissing(absl::Span<const DlSymbol> symbols) {
  for (const auto& [name, found] : symbols) {
    if (!found) return name;
  }
  return nullptr;
}

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_DL_LIBRARY_H_
