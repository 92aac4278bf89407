// Compiled-kernel cache: objects and cubins kept in memory and on disk,
// verified on load, the disk layer bounded by LRU eviction.
#include "codegen/kernel_cache.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cache_eviction.h"
#include "codegen/sha256.h"
#include "config/env.h"

namespace stepjit::codegen {
namespace {

// Entry layout, integers little-endian:
//   magic[8] | version u32 | key digest[32] | payload SHA-256[32] | length u64
//   | payload
constexpr std::string_view kMagic("SJKERNEL", 8);
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 8 + 4 + 32 + 32 + 8;

void Warn(const std::string& message) {
  std::fprintf(stderr, "stepjit: kernel cache: %s\n", message.c_str());
}

std::string ErrnoText() { return std::strerror(errno); }

template <typename T>
void AppendLittleEndian(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(char(uint8_t(value >> (8 * i))));
}

template <typename T>
T ReadLittleEndian(std::string_view bytes) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= T(uint8_t(bytes[i])) << (8 * i);
  return value;
}

std::string_view AsChars(const Sha256::Digest& digest) {
  return {reinterpret_cast<const char*>(digest.data()), digest.size()};
}

Sha256::Digest KeyDigest(const CacheKey& key) {
  // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
  Sha256 hasher;
  hasher.Update("stepjit kernel cache key v1");
  for (const std::string* field :
       {&key.source, &key.compiler, &key.target, &key.options}) {
    std::string length;
    AppendLittleEndian<uint64_t>(length, field->size());
    hasher.Update(length);
    hasher.Update(*field);
  }
  return hasher.Final();
}

// Creates `dir` and any missing parents with mode 0700 (the XDG base directory
// spec asks this of the parents too). Returns an error message, empty on
// success.
std::string MakeDirectory(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    std::string prefix = dir.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0700) == 0) {
      // The umask may have removed owner bits; group and other stay clear.
      if (chmod(prefix.c_str(), 0700) != 0)
        return absl::StrCat("chmod: ", ErrnoText());
    } else if (!prefix.empty() && errno != EEXIST) {
      return absl::StrCat("cannot create ", prefix, ": ", ErrnoText());
    }
    if (slash == std::string::npos) return "";
  }
}

// Why `dir` must not hold executable code, or empty when it is safe to use.
std::string UnsafeDirectoryReason(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0)
    return absl::StrCat("cannot stat: ", ErrnoText());
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (st.st_uid != geteuid()) {
    return absl::StrCat("owned by uid ", st.st_uid, ", not by uid ", geteuid());
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::StrFormat("writable by group or others (mode %04o)",
                           st.st_mode & 07777);
  }
  if (access(dir.c_str(), R_OK | X_OK) != 0) {
    return absl::StrCat("not accessible: ", ErrnoText());
  }
  return "";
}

// Checks an entry's bytes against the digest it was looked up by; returns
// what failed, or empty when the payload can be trusted.
std::string VerifyEntry(std::string_view bytes, const std::string& digest) {
  if (bytes.size() < kHeaderSize) {
    return absl::StrCat("truncated header (", bytes.size(), " of ", kHeaderSize,
                        " bytes)");
  }
  if (bytes.substr(0, 8) != kMagic) return "bad magic";
  uint32_t version = ReadLittleEndian<uint32_t>(bytes.substr(8));
  if (version != kFormatVersion) {
    return absl::StrCat("format version ", version, ", expected ",
                        kFormatVersion);
  }
  Sha256::Digest stored_key;
  std::memcpy(stored_key.data(), bytes.data() + 12, 32);
  if (ToHex(stored_key) != digest)
    return "key digest does not match the file name";
  uint64_t length = ReadLittleEndian<uint64_t>(bytes.substr(76));
  std::string_view payload = bytes.substr(kHeaderSize);
  if (payload.size() != length) {
    return absl::StrCat("payload length ", payload.size(), ", header says ",
                        length);
  }
  if (AsChars(Sha256Of(payload)) != bytes.substr(44, 32))
    return "payload hash mismatch";
  return "";
}

bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

// The largest entry read: a region's object code is kilobytes; anything far
// larger is not an entry this cache wrote.
constexpr int64_t kMaxEntryBytes = int64_t{256} << 20;

// Reads an entry file whole: nullopt when it does not exist or cannot be
// read; `*refused` says why a file that exists is not read (a symlink, a
// FIFO or other non-regular file — opened without following links and
// without blocking — or one larger than kMaxEntryBytes).
std::optional<std::string> ReadEntryFile(const std::string& path,
                                         std::string* refused) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) *refused = "a symbolic link";
    return std::nullopt;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *refused = "not a regular file";
    close(fd);
    return std::nullopt;
  }
  // Only this user's own code runs: an entry someone else owns or could
  // have rewritten (a forged kernel with a recomputed hash) is not read.
  if (st.st_uid != geteuid()) {
    *refused =
        absl::StrCat("owned by uid ", st.st_uid, ", not by uid ", geteuid());
    close(fd);
    return std::nullopt;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    *refused = absl::StrFormat("writable by group or others (mode %04o)",
                               st.st_mode & 07777);
    close(fd);
    return std::nullopt;
  }
  if (st.st_size > kMaxEntryBytes) {
    *refused = absl::StrCat(st.st_size, " bytes, more than an entry may have (",
                            kMaxEntryBytes, ")");
    close(fd);
    return std::nullopt;
  }
  std::string bytes;
  bytes.reserve(size_t(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || static_cast<int64_t>(bytes.size()) + n > kMaxEntryBytes) {
      close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    bytes.append(chunk, size_t(n));
  }
  close(fd);
  return bytes;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string DiskDirFromEnvironment() {
  if (std::optional<std::string> dir = config::Get(config::Env::kCacheDir))
    return *dir == "off" ? "" : *std::move(dir);
  // The XDG spec says to ignore a relative XDG_CACHE_HOME.
  if (std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/') {
    return xdg + "/stepjit";
  }
  std::string home = Env("HOME");
  if (home.empty()) {
    if (const passwd* pw = getpwuid(getuid());
        pw != nullptr && pw->pw_dir != nullptr) {
      home = pw->pw_dir;
    }
  }
  if (home.empty()) return "";
  return home + "/.cache/stepjit";
}

// A bad cap must not stop a training run, nor silently turn into "no cap".
int64_t MaxDiskBytesFromEnvironment() {
  // config/env.def bounds it so that the bytes fit in an int64_t.
  const absl::StatusOr<std::optional<int64_t>> mib =
      config::GetInt(config::Env::kCacheMaxMb);
  if (!mib.ok()) {
    Warn(absl::StrCat(mib.status().message(), "; using the default of ",
                      kDefaultMaxDiskMiB,
                      " MiB (STEPJIT_CACHE_DIR=off disables the disk cache)"));
    return kDefaultMaxDiskMiB << 20;
  }
  return mib->value_or(kDefaultMaxDiskMiB) << 20;
}

}  // namespace

std::string CacheKey::Digest() const { return ToHex(KeyDigest(*this)); }

CacheOptions CacheOptions::FromEnvironment() {
  return {.disk_dir = DiskDirFromEnvironment(),
          .max_disk_bytes = MaxDiskBytesFromEnvironment()};
}

KernelCache& KernelCache::Global() {
  static KernelCache* cache = new KernelCache(CacheOptions::FromEnvironment());
  return *cache;
}

KernelCache::KernelCache(CacheOptions options)
    : disk_dir_(std::move(options.disk_dir)),
      max_disk_bytes_(options.max_disk_bytes) {
  if (disk_dir_.empty()) return;
  std::string reason = MakeDirectory(disk_dir_);
  if (reason.empty()) reason = UnsafeDirectoryReason(disk_dir_);
  if (!reason.empty()) {
    Warn(absl::StrCat("not using ", disk_dir_, ": ", reason,
                      "; compiled kernels are cached in memory only"));
    disk_dir_.clear();
    return;
  }
  // A directory this user cannot write (a cache prepared once and made
  // read-only) is still read.
  if (access(disk_dir_.c_str(), W_OK) != 0) {
    read_only_ = true;
    Warn(absl::StrCat("reading ", disk_dir_, " read-only (", ErrnoText(),
                      "); new kernels are cached in memory only"));
  }
}

std::string KernelCache::EntryPath(const CacheKey& key) const {
  if (disk_dir_.empty()) return "";
  return absl::StrCat(disk_dir_, "/", key.Digest(), ".bin");
}

std::optional<std::string> KernelCache::Lookup(const CacheKey& key) {
  std::string digest = key.Digest();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = memory_.find(digest); it != memory_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  // Disk I/O runs unlocked; a racing Store of the same key writes the same
  // bytes.
  std::optional<std::string> blob;
  if (!disk_dir_.empty()) blob = LoadEntry(digest);
  std::lock_guard<std::mutex> lock(mu_);
  if (!blob) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.disk_hits;
  memory_.try_emplace(digest, *blob);
  return blob;
}

void KernelCache::Store(const CacheKey& key, const std::string& blob) {
  Sha256::Digest key_digest = KeyDigest(key);
  std::string digest = ToHex(key_digest);
  {
    std::lock_guard<std::mutex> lock(mu_);
    memory_.insert_or_assign(digest, blob);
    ++stats_.stores;
  }
  if (!disk_dir_.empty() && !read_only_) WriteEntry(key_digest, blob);
}

CacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::optional<std::string> KernelCache::LoadEntry(const std::string& digest) {
  std::string path = absl::StrCat(disk_dir_, "/", digest, ".bin");
  // The directory was safe when this cache opened it; a directory opened to
  // others since then (chmod, or replaced) is not trusted either.
  std::string refused = UnsafeDirectoryReason(disk_dir_);
  if (!refused.empty()) refused = absl::StrCat("its directory is ", refused);
  std::optional<std::string> bytes;
  if (refused.empty()) bytes = ReadEntryFile(path, &refused);
  if (!refused.empty()) {
    Warn(absl::StrCat("ignoring entry ", path, ": ", refused));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.corrupt_entries;
    return std::nullopt;
  }
  if (!bytes) return std::nullopt;
  if (std::string failure = VerifyEntry(*bytes, digest); !failure.empty()) {
    // Deleting the entry is what makes this report once: the next lookup
    // misses cleanly and the recompiled kernel replaces it.
    Warn(absl::StrCat("discarding corrupt entry ", path, ": ", failure));
    unlink(path.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.corrupt_entries;
    return std::nullopt;
  }
  MarkUsed(path);
  return bytes->substr(kHeaderSize);
}

void KernelCache::WriteEntry(const Sha256::Digest& key_digest,
                             const std::string& blob) {
  static std::atomic<uint64_t> temp_counter{0};
  std::string digest = ToHex(key_digest);
  std::string path = absl::StrCat(disk_dir_, "/", digest, ".bin");
  std::string temp = absl::StrCat(disk_dir_, "/.", digest, ".tmp.", getpid(),
                                  ".", temp_counter.fetch_add(1));
  std::string header;
  header.reserve(kHeaderSize);
  header.append(kMagic);
  AppendLittleEndian<uint32_t>(header, kFormatVersion);
  header.append(AsChars(key_digest));
  header.append(AsChars(Sha256Of(blob)));
  AppendLittleEndian<uint64_t>(header, blob.size());

  // Temp file, fsync, rename: readers in other processes see either no
  // entry or a complete one, never a partial write.
  std::string failure;
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    failure = absl::StrCat("cannot create ", temp, ": ", ErrnoText());
  } else {
    if (!WriteAll(fd, header) || !WriteAll(fd, blob)) {
      failure = absl::StrCat("cannot write ", temp, ": ", ErrnoText());
    } else if (fsync(fd) != 0) {
      failure = absl::StrCat("cannot fsync ", temp, ": ", ErrnoText());
    }
    if (close(fd) != 0 && failure.empty()) {
      failure = absl::StrCat("cannot close ", temp, ": ", ErrnoText());
    }
    if (failure.empty() && rename(temp.c_str(), path.c_str()) != 0) {
      failure = absl::StrCat("cannot rename to ", path, ": ", ErrnoText());
    }
    if (!failure.empty()) unlink(temp.c_str());
  }
  if (!failure.empty()) {
    if (!write_warned_.exchange(true)) {
      Warn(absl::StrCat(failure, "; the kernel stays in memory only",
                        " (later write failures are not reported)"));
    }
    return;
  }
  // Make the rename itself durable.
  if (int dir_fd = open(disk_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  const EvictionResult evicted =
      EvictLeastRecentlyUsed(disk_dir_, max_disk_bytes_, digest + ".bin");
  if (evicted.entries_removed > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.evictions += evicted.entries_removed;
  }
}

}  // namespace stepjit::codegen
