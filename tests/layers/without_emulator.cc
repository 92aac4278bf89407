// Linked with libstepjit.a alone (no stepjit_cuda_emulator): the library
// ships without the CUDA host emulator, and STEPJIT_CUDA_BACKEND=emulator in
// such a program leaves CUDA unavailable with a message saying why. Exits 0
// when that holds, 1 (printing what it found) otherwise.
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "devices/cuda/backend.h"

int main() {
  namespace cuda = stepjit::runtime::cuda;
  const absl::StatusOr<cuda::Backend*> backend = cuda::RequireBackend();
  if (backend.ok()) {
    std::printf("expected no CUDA backend without the emulator, found %s\n",
                (*backend)->Describe().c_str());
    return 1;
  }
  const std::string message(backend.status().message());
  std::printf("%s\n", message.c_str());
  return message.find("does not link the host emulator") != std::string::npos
             ? 0
             : 1;
}
