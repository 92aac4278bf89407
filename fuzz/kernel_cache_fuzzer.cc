// libFuzzer target: the kernel cache's loader on entry files it did not
// write, or wrote and then saw damaged.
//
// Input byte 0 picks the mode. Even: the rest is the whole entry file for a
// fixed key. Odd: bytes 1-2 give a payload length; the cache stores that
// payload under the key, then each following (offset, xor) byte pair damages
// the file and a final byte may truncate it. Property checked: a lookup
// returns nothing or exactly the payload that was stored (never damaged
// bytes: those would be executed as kernels).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "codegen/kernel_cache.h"

namespace {

const std::string& Dir() {
  static const std::string dir = [] {
    char pattern[] = "/tmp/stepjit_fuzz_cache_XXXXXX";
    const char* made = mkdtemp(pattern);
    if (made == nullptr) std::abort();
    return std::string(made);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using stepjit::codegen::CacheKey;
  using stepjit::codegen::KernelCache;
  if (size < 1 || size > (1 << 20)) return 0;
  std::filesystem::remove_all(Dir());
  const CacheKey key{"fuzz source", "fuzz compiler", "fuzz target", "O2"};
  const std::string path = Dir() + "/" + key.Digest() + ".bin";
  std::string stored;
  bool have_stored = false;
  if (data[0] % 2 == 0) {
    std::filesystem::create_directories(Dir());
    std::filesystem::permissions(Dir(), std::filesystem::perms::owner_all);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data + 1),
               static_cast<std::streamsize>(size - 1));
  } else {
    if (size < 3) return 0;
    const size_t length = std::min<size_t>(data[1] | (data[2] << 8), size - 3);
    stored.assign(reinterpret_cast<const char*>(data + 3), length);
    {
      KernelCache writer({.disk_dir = Dir()});
      writer.Store(key, stored);
    }
    have_stored = true;
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (bytes.empty()) return 0;
    size_t at = 3 + length;
    for (; at + 1 < size; at += 2)
      bytes[data[at] % bytes.size()] ^= static_cast<char>(data[at + 1]);
    if (at < size)
      bytes.resize(bytes.size() - std::min<size_t>(data[at], bytes.size()));
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  KernelCache reader({.disk_dir = Dir()});
  const std::optional<std::string> blob = reader.Lookup(key);
  if (blob && (!have_stored || *blob != stored)) {
    std::fprintf(
        stderr,
        "kernel_cache_fuzzer: a damaged or foreign entry was returned\n");
    std::abort();
  }
  return 0;
}
