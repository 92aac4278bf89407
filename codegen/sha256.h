// SHA-256 (FIPS 180-4) for kernel cache keys and entries: LLVM's
// implementation behind the small interface the cache uses.
#ifndef STEPJIT_CODEGEN_SHA256_H_
#define STEPJIT_CODEGEN_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace llvm {
class SHA256;
}

namespace stepjit::codegen {

// Incremental hasher, so a key's fields can be fed without concatenating them.
class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Finishes the hash; the hasher must not be updated afterwards.
  Digest Final();

 private:
  std::unique_ptr<llvm::SHA256> impl_;
};

Sha256::Digest Sha256Of(std::string_view data);
// Lower-case hex, 64 characters.
std::string ToHex(const Sha256::Digest& digest);

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_SHA256_H_
