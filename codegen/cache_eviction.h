// The kernel cache's disk size cap: least-recently-used eviction over the
// entries of a cache directory that several processes share.
//
// Recency is an entry's mtime. A store creates the file (mtime = now) and a
// load touches it (MarkUsed), so the oldest mtime is the entry no process has
// stored or loaded for the longest time. mtime rather than atime because
// atime is often not kept (noatime, relatime).
//
// Any process may delete any entry at any moment: a file that vanishes
// between listing and stat or unlink is skipped, and a reader that finds an
// entry gone treats it as a miss. A reader that already opened the file
// keeps reading it (POSIX unlink semantics), so eviction never hands out a
// partial entry.
//
// Not LLVM's pruneCache (llvm/Support/CachePruning.h), which this would
// otherwise be: in LLVM 14 it considers only files named llvmcache-*, ranks
// them by last access time (which noatime and relatime mounts do not keep
// current), cannot spare the entry a store just wrote, and scans at most
// once per interval (a timestamp file), so a cap could stay exceeded for
// that long.
#ifndef STEPJIT_CODEGEN_CACHE_EVICTION_H_
#define STEPJIT_CODEGEN_CACHE_EVICTION_H_

#include <cstdint>
#include <string>

namespace stepjit::codegen {

// Records a use of the entry at `path` (sets its mtime to now). A vanished or
// read-only entry is left as it is: recency is a hint, not a requirement.
void MarkUsed(const std::string& path);

struct EvictionResult {
  int64_t entries_removed = 0;  // by this call (not ones others removed first)
  int64_t bytes_before = 0;     // entry bytes found in the directory
  int64_t bytes_after = 0;      // entry bytes left
};

// If the entries (`<64 hex digits>.bin`) in `dir` take more than `max_bytes`,
// deletes them least recently used first (ties by name) until they fit,
// never deleting the entry named `keep` (the one just stored, so a store is
// never lost to its own eviction; the cap can be exceeded by that one
// entry). Also deletes temporary files of writes that died before their
// rename (older than an hour; a live write takes milliseconds). One readdir
// and one stat per entry: small next to the compile that precedes a store.
EvictionResult EvictLeastRecentlyUsed(const std::string& dir, int64_t max_bytes,
                                      const std::string& keep);

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_CACHE_EVICTION_H_
