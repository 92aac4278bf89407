// libFuzzer target: the IDX reader (plain and gzip) on arbitrary files.
//
// The input is written to a file and read back; odd first bytes wrap the
// rest in gzip first, so both the plain path and zlib's are reached.
// Property checked: an accepted file yields exactly num_elements() x the
// element size in bytes.
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "training/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  static const std::string path =
      "/tmp/stepjit_fuzz_idx_" + std::to_string(::getpid());
  if (data[0] % 2 == 0) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data + 1),
               static_cast<std::streamsize>(size - 1));
  } else {
    gzFile f = gzopen(path.c_str(), "wb");
    if (f == nullptr) return 0;
    gzwrite(f, data + 1, static_cast<unsigned>(size - 1));
    gzclose(f);
  }
  const auto array = stepjit::data::ReadIdx(path);
  if (array.ok()) {
    const int64_t want =
        array->num_elements() *
        stepjit::data::IdxTypeSize(static_cast<uint8_t>(array->type));
    if (static_cast<int64_t>(array->bytes.size()) != want) {
      std::fprintf(stderr, "idx_fuzzer: %zu bytes for %lld elements\n",
                   array->bytes.size(),
                   static_cast<long long>(array->num_elements()));
      std::abort();
    }
  }
  return 0;
}
