// libFuzzer target: the safetensors reader on arbitrary bytes.
//
// Properties checked on every accepted file: the entries tile the data
// buffer (each range inside the input), and writing the entries back out
// (those with a stepjit dtype) and reading that gives the same names,
// dtypes, shapes, bytes and metadata.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/io/safetensors.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "checkpoint_fuzzer: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using stepjit::io::SafetensorsFile;
  auto file = SafetensorsFile::Parse(
      std::string(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return 0;
  std::vector<stepjit::io::SafetensorsTensorView> views;
  int64_t covered = 0;
  for (const auto& e : file->entries()) {
    if (e.begin != covered || e.end < e.begin)
      Fail("entries do not tile the buffer");
    covered = e.end;
    if (e.end > static_cast<int64_t>(size))
      Fail("an entry lies outside the input");
    if (!e.dtype.ir.has_value()) return 0;
    views.push_back({e.name, *e.dtype.ir, e.shape,
                     absl::string_view(file->Data(e),
                                       static_cast<size_t>(e.end - e.begin))});
  }
  auto bytes = stepjit::io::SerializeSafetensors(views, file->metadata());
  if (!bytes.ok()) Fail("an accepted file could not be written back");
  auto again = SafetensorsFile::Parse(*bytes);
  if (!again.ok()) Fail("a written file could not be read back");
  if (again->metadata() != file->metadata())
    Fail("metadata changed in a round trip");
  if (again->entries().size() != views.size())
    Fail("entry count changed in a round trip");
  for (const auto& v : views) {
    const auto* e = again->Find(v.name);
    if (e == nullptr || e->dtype.ir != v.dtype || e->shape != v.shape ||
        static_cast<size_t>(e->end - e->begin) != v.data.size() ||
        std::memcmp(again->Data(*e), v.data.data(), v.data.size()) != 0) {
      Fail("an entry changed in a round trip");
    }
  }
  return 0;
}
