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
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "training/io/safetensors.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "checkpoint_fuzzer: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Value-level mutations besides libFuzzer's byte-level ones: half the time
// a valid file is parsed and one value changed with its structure kept (a
// tensor element set to a special bit pattern, or a number in a metadata
// string replaced by a hostile one), then written back, so that the
// fuzzer reaches files every structural check passes.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,
                                          size_t max_size, unsigned int seed) {
  using stepjit::io::SafetensorsFile;
  if (seed % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  auto file = SafetensorsFile::Parse(
      std::string(reinterpret_cast<const char*>(data), size));
  if (!file.ok() || file->entries().empty())
    return LLVMFuzzerMutate(data, size, max_size);
  std::map<std::string, std::string> metadata = file->metadata();
  std::vector<std::string> bytes;
  for (const auto& e : file->entries()) {
    if (!e.dtype.ir.has_value()) return LLVMFuzzerMutate(data, size, max_size);
    bytes.emplace_back(file->Data(e), static_cast<size_t>(e.end - e.begin));
  }
  static const char* const kNumbers[] = {
      "inf",     "-inf",  "nan", "1e300", "-1", "0", "9223372036854775808",
      "1.4e-45", "\"x\"", "null"};
  static const uint32_t kBits[] = {0x7f800000u, 0xff800000u, 0x7fc00000u,
                                   0x00000001u, 0x80000000u, 0x7f7fffffu};
  unsigned r = seed / 2;
  if (!metadata.empty() && r % 2 == 0) {
    auto it = metadata.begin();
    std::advance(it, (r / 2) % metadata.size());
    std::string& v = it->second;
    const size_t at = v.find_first_of("-0123456789");
    const std::string hostile =
        kNumbers[(r / 7) % (sizeof(kNumbers) / sizeof(*kNumbers))];
    if (at == std::string::npos) {
      v = hostile;
    } else {
      size_t end = at + 1;
      while (end < v.size() &&
             std::strchr("0123456789.eE+-", v[end]) != nullptr)
        ++end;
      v.replace(at, end - at, hostile);
    }
  } else {
    std::string& t = bytes[(r / 2) % bytes.size()];
    if (t.size() >= 4) {
      const uint32_t b = kBits[(r / 11) % (sizeof(kBits) / sizeof(*kBits))];
      std::memcpy(&t[4 * ((r / 3) % (t.size() / 4))], &b, 4);
    } else if (!t.empty()) {
      t[(r / 3) % t.size()] = static_cast<char>(r);
    }
  }
  std::vector<stepjit::io::SafetensorsTensorView> views;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto& e = file->entries()[i];
    views.push_back({e.name, *e.dtype.ir, e.shape, bytes[i]});
  }
  auto out = stepjit::io::SerializeSafetensors(views, metadata);
  if (!out.ok() || out->size() > max_size)
    return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out->data(), out->size());
  return out->size();
}

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
