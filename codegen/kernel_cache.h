// Compiled-kernel cache: objects and cubins kept in memory and on disk,
// verified on load, the disk layer bounded by a size cap with
// least-recently-used eviction.
#ifndef STEPJIT_CODEGEN_KERNEL_CACHE_H_
#define STEPJIT_CODEGEN_KERNEL_CACHE_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "codegen/sha256.h"

namespace stepjit::codegen {

// Everything that decides the bytes a compiler produces. Two keys with the same
// digest name the same kernel object, so every input that changes the output
// (compiler version, CPU features or sm_XX, flags) must be in here.
struct CacheKey {
  std::string source;    // generated LLVM IR or CUDA C
  std::string compiler;  // e.g. "LLVM 14.0.6" or "NVRTC 12.4"
  std::string target;    // CPU features string or "sm_90"
  std::string options;   // optimization level and flags

  // SHA-256 over the length-prefixed fields, as 64 hex digits.
  std::string Digest() const;
};

inline constexpr int64_t kDefaultMaxDiskMiB = 1024;

struct CacheOptions {
  // Directory for the disk layer; empty keeps the cache in memory only.
  std::string disk_dir;
  // The disk layer's size cap, in bytes of entry files. A store that takes
  // the directory past it deletes the least recently used entries (stored or
  // loaded longest ago, by any process) until it fits again; see
  // codegen/cache_eviction.h.
  int64_t max_disk_bytes = kDefaultMaxDiskMiB << 20;

  // Directory: $STEPJIT_CACHE_DIR if set ("off" disables the disk layer),
  // else $XDG_CACHE_HOME/stepjit, else ~/.cache/stepjit. Cap:
  // $STEPJIT_CACHE_MAX_MB MiB, a positive whole number; anything else warns
  // on stderr and keeps the default of kDefaultMaxDiskMiB.
  static CacheOptions FromEnvironment();
};

struct CacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t misses = 0;
  int64_t stores = 0;
  int64_t corrupt_entries = 0;  // disk entries rejected and deleted
  int64_t evictions = 0;        // disk entries deleted to honor the size cap
};

// Thread-safe. An entry on disk is `<digest>.bin`: a header (magic, format
// version, key digest, payload SHA-256, payload length) and the payload. A
// blob is only ever returned after all of these check out, so a truncated or
// tampered file is recompiled rather than executed.
//
// Several processes may share the directory. Entries are written to a
// temporary file and renamed, so readers see whole entries or none; a load
// marks its entry used; each store then evicts the least recently used
// entries beyond max_disk_bytes. An entry another process evicted is a miss
// here (and is recompiled and stored again). The memory layer is not
// bounded: it holds what this process has used.
class KernelCache {
 public:
  // The process-wide cache, configured from the environment on first use.
  static KernelCache& Global();

  // Creates the disk directory (mode 0700) if needed. If it cannot be created,
  // is not owned by this user, is writable by group or others, or cannot be
  // read, warns once on stderr and keeps the cache in memory only. A
  // directory it may read but not write is read only (stores stay in
  // memory). Entries are opened without following symbolic links or
  // blocking; one that is not a regular file, is larger than 256 MiB, is
  // owned by another user or writable by group or others, or lies in a
  // directory that has become so since, is ignored with a warning (its
  // kernel is compiled again): only code this user alone could have
  // written runs.
  explicit KernelCache(CacheOptions options);

  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  std::optional<std::string> Lookup(const CacheKey& key);
  // Disk write failures warn once and leave the entry in memory only.
  void Store(const CacheKey& key, const std::string& blob);

  CacheStats stats() const;
  // The directory in use; empty when the disk layer is off.
  const std::string& disk_dir() const { return disk_dir_; }
  // The directory is read but not written (not writable by this user).
  bool read_only() const { return read_only_; }
  int64_t max_disk_bytes() const { return max_disk_bytes_; }
  // Where the entry for `key` lives (or would live) on disk; empty when off.
  std::string EntryPath(const CacheKey& key) const;

 private:
  std::optional<std::string> LoadEntry(const std::string& digest);
  void WriteEntry(const Sha256::Digest& key_digest, const std::string& blob);

  std::string disk_dir_;
  bool read_only_ = false;
  int64_t max_disk_bytes_;
  // std::mutex rather than absl::Mutex: Debian's prebuilt abseil carries no
  // ThreadSanitizer annotations, so TSan could not check this class.
  mutable std::mutex mu_;  // guards memory_ and stats_
  absl::flat_hash_map<std::string, std::string> memory_;
  CacheStats stats_;
  std::atomic<bool> write_warned_{false};
};

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_KERNEL_CACHE_H_
