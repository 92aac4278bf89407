// SHA-256 through llvm::SHA256, and hex formatting of digests.
#include "codegen/sha256.h"

#include <algorithm>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SHA256.h"

namespace stepjit::codegen {

Sha256::Sha256() : impl_(std::make_unique<llvm::SHA256>()) {}
Sha256::~Sha256() = default;

void Sha256::Update(const void* data, size_t size) {
  impl_->update(
      llvm::ArrayRef<uint8_t>(static_cast<const uint8_t*>(data), size));
}

Sha256::Digest Sha256::Final() {
  const llvm::StringRef bytes = impl_->final();
  Digest digest;
  std::copy_n(bytes.bytes_begin(), digest.size(), digest.begin());
  return digest;
}

Sha256::Digest Sha256Of(std::string_view data) {
  Sha256 hasher;
  hasher.Update(data);
  return hasher.Final();
}

std::string ToHex(const Sha256::Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (uint8_t byte : digest) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 0xf]);
  }
  return hex;
}

}  // namespace stepjit::codegen
