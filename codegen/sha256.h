// SHA-256 (FIPS 180-4): the content hash behind kernel cache keys and entries.
#ifndef STEPJIT_CODEGEN_SHA256_H_
#define STEPJIT_CODEGEN_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace stepjit::codegen {

// Incremental hasher, so a key's fields can be fed without concatenating them.
class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Finishes the hash; the hasher must not be updated afterwards.
  Digest Final();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256::Digest Sha256Of(std::string_view data);
// Lower-case hex, 64 characters.
std::string ToHex(const Sha256::Digest& digest);

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_SHA256_H_
