// Opening NVIDIA's libraries at run time (cuBLASLt, NCCL): the first of a
// list of candidate paths that dlopen accepts, and typed symbol lookup.
#ifndef STEPJIT_RUNTIME_CUDA_DL_LIBRARY_H_
#define STEPJIT_RUNTIME_CUDA_DL_LIBRARY_H_

#include <dlfcn.h>

#include <string>
#include <vector>

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

// Sets `fn` to `name` in `lib`; false when the library lacks it.
template <typename Fn>
bool DlResolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_RUNTIME_CUDA_DL_LIBRARY_H_
