// Linked with libstepjit.a by its path, without the devices layer's anchor
// (-Wl,--undefined=stepjit_link_devices, which the CMake target adds): the
// linker leaves devices/registry.cc out, and the first tensor the program
// makes fails with a message saying how to link. Exits 0 when that holds,
// 1 (printing what it found) otherwise.
#include <cstdio>
#include <exception>
#include <string>

#include "runtime/ops.h"
#include "runtime/tensor.h"

int main() {
  try {
    const stepjit::Tensor t = stepjit::zeros({2, 3});
    std::printf(
        "expected no CPU runtime without the anchor, made %lld elements\n",
        static_cast<long long>(t.numel()));
    return 1;
  } catch (const std::exception& e) {
    const std::string message = e.what();
    std::printf("%s\n", message.c_str());
    return message.find("no cpu device runtime is linked") !=
                       std::string::npos &&
                   message.find("-Wl,--undefined=stepjit_link_devices") !=
                       std::string::npos
               ? 0
               : 1;
  }
}
