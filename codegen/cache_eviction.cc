// Least-recently-used eviction for the kernel cache's disk directory.
#include "codegen/cache_eviction.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace stepjit::codegen {
namespace {

// A temporary file this old belongs to a write whose process died.
constexpr time_t kStaleTempSeconds = 60 * 60;

// `<64 hex digits>.bin`, as KernelCache names entries.
bool IsEntryName(absl::string_view name) {
  if (name.size() != 64 + 4 || !absl::EndsWith(name, ".bin")) return false;
  return std::all_of(name.begin(), name.begin() + 64,
                     [](char c) { return absl::ascii_isxdigit(c); });
}

// `.<digest>.tmp.<pid>.<n>`, as KernelCache names a write in flight.
bool IsTempName(absl::string_view name) {
  return absl::StartsWith(name, ".") && absl::StrContains(name, ".tmp.");
}

struct Entry {
  timespec used;
  std::string name;
  int64_t bytes;
};

bool OlderThan(const Entry& a, const Entry& b) {
  return std::tie(a.used.tv_sec, a.used.tv_nsec, a.name) <
         std::tie(b.used.tv_sec, b.used.tv_nsec, b.name);
}

}  // namespace

void MarkUsed(const std::string& path) {
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
}

EvictionResult EvictLeastRecentlyUsed(const std::string& dir, int64_t max_bytes,
                                      const std::string& keep) {
  EvictionResult result;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return result;
  const int dir_fd = dirfd(d);
  const time_t now = time(nullptr);
  std::vector<Entry> entries;
  while (const dirent* e = readdir(d)) {
    const absl::string_view name = e->d_name;
    const bool entry = IsEntryName(name);
    if (!entry && !IsTempName(name)) continue;
    struct stat st;
    // A file gone since readdir was evicted or replaced by another process.
    if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
      continue;
    }
    if (!entry) {
      if (now - st.st_mtim.tv_sec > kStaleTempSeconds) {
        unlinkat(dir_fd, e->d_name, 0);
      }
      continue;
    }
    entries.push_back({st.st_mtim, std::string(name), st.st_size});
    result.bytes_before += st.st_size;
  }
  result.bytes_after = result.bytes_before;
  if (result.bytes_after > max_bytes) {
    std::sort(entries.begin(), entries.end(), OlderThan);
    for (const Entry& e : entries) {
      if (result.bytes_after <= max_bytes) break;
      if (e.name == keep) continue;
      if (unlinkat(dir_fd, e.name.c_str(), 0) == 0) {
        ++result.entries_removed;
        result.bytes_after -= e.bytes;
      } else if (errno == ENOENT) {
        result.bytes_after -= e.bytes;  // another process evicted it first
      }
    }
  }
  closedir(d);
  return result;
}

}  // namespace stepjit::codegen
