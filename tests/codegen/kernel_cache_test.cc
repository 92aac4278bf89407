// Tests for SHA-256 and the kernel cache: hits, disk persistence, corrupt
// entries, safety, the size cap and its least-recently-used eviction.
#include "codegen/kernel_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/sha256.h"
#include "gtest/gtest.h"

namespace stepjit::codegen {
namespace {

namespace fs = std::filesystem;
// gtest only: the layer test executables do not link gmock.
#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "expected to contain \"" << (part) << "\":\n"       \
      << (text)

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/stepjit_kernel_cache_XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    value != nullptr ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    names.push_back(entry.path().lexically_relative(dir).string());
  }
  return names;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

CacheKey Key(const std::string& source) {
  return {source, "LLVM 14.0.6", "+avx512f,+avx512bw", "-O2"};
}

// Every byte value, so NULs and high bytes round-trip.
std::string Blob(int seed, size_t size = 1000) {
  std::string blob(size, '\0');
  for (size_t i = 0; i < size; ++i) blob[i] = char((i * 131 + seed) & 0xff);
  return blob;
}

TEST(Sha256Test, Fips180Vectors) {
  EXPECT_EQ(ToHex(Sha256Of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(ToHex(Sha256Of("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ToHex(Sha256Of(
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(ToHex(Sha256Of(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalUpdatesMatchOneShot) {
  std::string message = Blob(7, 300);
  for (size_t step : {1, 3, 63, 64, 65, 200}) {
    Sha256 hasher;
    for (size_t at = 0; at < message.size(); at += step) {
      hasher.Update(std::string_view(message).substr(at, step));
    }
    EXPECT_EQ(hasher.Final(), Sha256Of(message)) << "step " << step;
  }
}

TEST(CacheKeyTest, EveryFieldChangesTheDigest) {
  CacheKey base = Key("define void @k() { ret void }");
  std::string digest = base.Digest();
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_EQ(Key("define void @k() { ret void }").Digest(), digest);
  for (std::string CacheKey::*field : {&CacheKey::source, &CacheKey::compiler,
                                       &CacheKey::target, &CacheKey::options}) {
    CacheKey changed = base;
    changed.*field += " ";
    EXPECT_NE(changed.Digest(), digest);
  }
  // Field boundaries count: moving a character between fields is a new key.
  EXPECT_NE((CacheKey{"ab", "c", "", ""}.Digest()),
            (CacheKey{"a", "bc", "", ""}.Digest()));
}

TEST(KernelCacheTest, MemoryOnlyStoreThenLookup) {
  KernelCache cache(CacheOptions{});
  EXPECT_EQ(cache.disk_dir(), "");
  EXPECT_EQ(cache.Lookup(Key("k")), std::nullopt);
  cache.Store(Key("k"), Blob(1));
  EXPECT_EQ(cache.Lookup(Key("k")), Blob(1));
  EXPECT_EQ(cache.Lookup(Key("other")), std::nullopt);
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.memory_hits, 1);
  EXPECT_EQ(stats.disk_hits, 0);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.stores, 1);
  EXPECT_EQ(stats.corrupt_entries, 0);
}

TEST(KernelCacheTest, SecondInstanceHitsTheDisk) {
  TempDir tmp;
  std::string dir = tmp.Sub("cache");
  {
    KernelCache first({dir});
    EXPECT_EQ(first.disk_dir(), dir);
    first.Store(Key("k"), Blob(2));
    EXPECT_EQ(first.Lookup(Key("k")), Blob(2));
    EXPECT_EQ(first.stats().memory_hits, 1);
  }
  // Exactly one entry file, no temp file left behind.
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{Key("k").Digest() + ".bin"});

  KernelCache second({dir});  // a new process: empty memory layer
  EXPECT_EQ(second.Lookup(Key("k")), Blob(2));
  EXPECT_EQ(second.Lookup(Key("k")), Blob(2));
  CacheStats stats = second.stats();
  EXPECT_EQ(stats.disk_hits, 1);
  EXPECT_EQ(stats.memory_hits, 1);
  EXPECT_EQ(stats.misses, 0);
  EXPECT_EQ(stats.corrupt_entries, 0);
}

TEST(KernelCacheTest, EmptyBlobRoundTrips) {
  TempDir tmp;
  KernelCache({tmp.path()}).Store(Key("empty"), "");
  EXPECT_EQ(KernelCache({tmp.path()}).Lookup(Key("empty")), "");
}

struct Corruption {
  const char* name;
  const char* reported;  // what the warning must say failed
  void (*damage)(std::string& bytes);
};

class CorruptEntryTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptEntryTest, IsRejectedCountedDeletedAndRebuilt) {
  TempDir tmp;
  CacheKey key = Key("define void @fused_0() { ret void }");
  KernelCache({tmp.path()}).Store(key, Blob(3));
  std::string path = KernelCache({tmp.path()}).EntryPath(key);
  std::string bytes = ReadBytes(path);
  ASSERT_EQ(bytes.size(), 84 + Blob(3).size());
  GetParam().damage(bytes);
  WriteBytes(path, bytes);

  KernelCache reader({tmp.path()});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(reader.Lookup(key), std::nullopt);
  std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(warning, path);
  EXPECT_CONTAINS(warning, GetParam().reported);
  EXPECT_FALSE(fs::exists(path));
  CacheStats stats = reader.stats();
  EXPECT_EQ(stats.corrupt_entries, 1);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.disk_hits, 0);

  // Reported once: the entry is gone, so the next lookup is a quiet miss.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(reader.Lookup(key), std::nullopt);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(reader.stats().corrupt_entries, 1);

  // The caller recompiles and stores; a later process gets the good entry.
  reader.Store(key, Blob(3));
  KernelCache later({tmp.path()});
  EXPECT_EQ(later.Lookup(key), Blob(3));
  EXPECT_EQ(later.stats().disk_hits, 1);
  EXPECT_EQ(later.stats().corrupt_entries, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Damage, CorruptEntryTest,
    ::testing::Values(Corruption{"PayloadByte", "payload hash mismatch",
                                 [](std::string& b) { b[84 + 500] ^= 0x01; }},
                      Corruption{
                          "TruncatedPayload", "payload length",
                          [](std::string& b) { b.resize(b.size() - 10); }},
                      Corruption{"TruncatedHeader", "truncated header",
                                 [](std::string& b) { b.resize(40); }},
                      Corruption{"EmptyFile", "truncated header",
                                 [](std::string& b) { b.clear(); }},
                      Corruption{"AppendedBytes", "payload length",
                                 [](std::string& b) { b += "xx"; }},
                      Corruption{"WrongMagic", "bad magic",
                                 [](std::string& b) { b[0] = 'X'; }},
                      Corruption{"WrongVersion", "format version",
                                 [](std::string& b) { b[8] = 99; }},
                      Corruption{"WrongKeyDigest", "key digest",
                                 [](std::string& b) { b[12] ^= 0xff; }},
                      Corruption{"PayloadHashField", "payload hash mismatch",
                                 [](std::string& b) { b[44] ^= 0xff; }}),
    [](const auto& info) { return std::string(info.param.name); });

// What may stand where an entry should: a FIFO (reading it would block
// forever), a symbolic link (to anything), a file far too large to be an
// entry. Each is ignored with a warning and counted, and is not deleted.
TEST(KernelCacheTest, NonRegularOrHugeEntriesAreIgnoredWithoutBlocking) {
  TempDir tmp;
  const std::string dir = tmp.Sub("cache");
  KernelCache writer({dir});
  writer.Store(Key("real"), Blob(1));
  const std::string real = writer.EntryPath(Key("real"));
  const std::string fifo = writer.EntryPath(Key("fifo"));
  const std::string link = writer.EntryPath(Key("link"));
  const std::string huge = writer.EntryPath(Key("huge"));
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  { std::ofstream(huge, std::ios::binary); }
  ASSERT_EQ(truncate(huge.c_str(), int64_t{300} << 20),
            0);  // sparse: no disk used

  KernelCache reader({dir});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(reader.Lookup(Key("fifo")), std::nullopt);
  EXPECT_EQ(reader.Lookup(Key("link")), std::nullopt);
  EXPECT_EQ(reader.Lookup(Key("huge")), std::nullopt);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(err, "ignoring entry " + fifo + ": not a regular file");
  EXPECT_CONTAINS(err, "ignoring entry " + link + ": a symbolic link");
  EXPECT_CONTAINS(err, "ignoring entry " + huge +
                           ": 314572800 bytes, more than an entry may have");
  EXPECT_EQ(reader.stats().corrupt_entries, 3);
  EXPECT_TRUE(fs::exists(fs::symlink_status(fifo)));
  EXPECT_TRUE(fs::exists(fs::symlink_status(link)));
  EXPECT_EQ(reader.Lookup(Key("real")), Blob(1));
}

// A cache directory this user may read but not write (prepared once, then
// made read-only) serves its entries; new kernels stay in memory. Root
// writes anywhere, so as root the check runs in a child as user nobody.
TEST(KernelCacheTest, ReadOnlyDirectoryIsReadNotWritten) {
  TempDir tmp;
  const std::string dir = tmp.Sub("ro");
  {
    KernelCache writer({dir});
    writer.Store(Key("a"), Blob(3));
  }
  auto check = [&]() -> int {
    KernelCache cache({dir});
    if (cache.disk_dir() != dir) return 2;
    if (!cache.read_only()) return 3;
    if (cache.Lookup(Key("a")) != Blob(3)) return 4;
    cache.Store(Key("b"), Blob(4));
    if (fs::exists(cache.EntryPath(Key("b")))) return 5;
    if (cache.Lookup(Key("b")) != Blob(4)) return 6;  // from memory
    return 0;
  };
  if (geteuid() != 0) {
    ASSERT_EQ(chmod(dir.c_str(), 0500), 0);
    EXPECT_EQ(check(), 0);
    chmod(dir.c_str(), 0700);
    return;
  }
  constexpr uid_t kNobody = 65534;
  ASSERT_EQ(lchown(tmp.path().c_str(), kNobody, kNobody), 0);
  for (const auto& e : fs::recursive_directory_iterator(tmp.path())) {
    ASSERT_EQ(lchown(e.path().c_str(), kNobody, kNobody), 0);
  }
  ASSERT_EQ(chmod(dir.c_str(), 0500), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(9);
    _exit(check());
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "2: disk layer off, 3: not read-only, 4: entry not read, "
         "5: entry written, 6: store lost";
}

TEST(KernelCacheTest, EntryCopiedUnderAnotherKeyIsRejected) {
  TempDir tmp;
  KernelCache writer({tmp.path()});
  writer.Store(Key("a"), Blob(4));
  fs::copy_file(writer.EntryPath(Key("a")), writer.EntryPath(Key("b")));

  KernelCache reader({tmp.path()});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(reader.Lookup(Key("b")), std::nullopt);
  EXPECT_CONTAINS(::testing::internal::GetCapturedStderr(), "key digest");
  EXPECT_EQ(reader.stats().corrupt_entries, 1);
  EXPECT_EQ(reader.Lookup(Key("a")), Blob(4));
}

TEST(KernelCacheTest, EnvironmentChoosesTheDirectory) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv dir("STEPJIT_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    EXPECT_EQ(CacheOptions::FromEnvironment().disk_dir,
              "/home/someone/.cache/stepjit");
  }
  {
    ScopedEnv dir("STEPJIT_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(CacheOptions::FromEnvironment().disk_dir, "/xdg/stepjit");
  }
  {
    ScopedEnv dir("STEPJIT_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/ignored");
    EXPECT_EQ(CacheOptions::FromEnvironment().disk_dir,
              "/home/someone/.cache/stepjit");
  }
  {
    ScopedEnv dir("STEPJIT_CACHE_DIR", "/explicit");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(CacheOptions::FromEnvironment().disk_dir, "/explicit");
  }
}

TEST(KernelCacheTest, OffWritesNoFiles) {
  TempDir tmp;
  ScopedEnv dir("STEPJIT_CACHE_DIR", "off");
  ScopedEnv xdg("XDG_CACHE_HOME", tmp.Sub("xdg").c_str());
  ScopedEnv home("HOME", tmp.path().c_str());
  CacheOptions options = CacheOptions::FromEnvironment();
  EXPECT_EQ(options.disk_dir, "");
  KernelCache cache(options);
  cache.Store(Key("k"), Blob(5));
  EXPECT_EQ(cache.Lookup(Key("k")), Blob(5));
  EXPECT_TRUE(ListDir(tmp.path()).empty());
}

TEST(KernelCacheTest, CreatesDirectoriesWithMode0700) {
  TempDir tmp;
  std::string parent = tmp.Sub("xdg");
  std::string dir = parent + "/stepjit";
  mode_t old_umask =
      umask(0);  // the cache, not the umask, must keep others out
  KernelCache cache({dir});
  umask(old_umask);
  EXPECT_EQ(cache.disk_dir(), dir);
  EXPECT_EQ(ModeOf(parent), 0700u);
  EXPECT_EQ(ModeOf(dir), 0700u);
  cache.Store(Key("k"), Blob(6));
  EXPECT_EQ(ModeOf(cache.EntryPath(Key("k"))) & 077, 0u);
}

TEST(KernelCacheTest, WorldWritableDirectoryIsRefused) {
  TempDir tmp;
  std::string dir = tmp.Sub("open");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  ::testing::internal::CaptureStderr();
  KernelCache cache({dir});
  std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(warning, dir);
  EXPECT_CONTAINS(warning, "writable by group or others (mode 0777)");
  EXPECT_CONTAINS(warning, "memory only");
  EXPECT_EQ(cache.disk_dir(), "");

  ::testing::internal::CaptureStderr();
  cache.Store(Key("k"), Blob(7));
  EXPECT_EQ(cache.Lookup(Key("k")), Blob(7));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // warned once
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST(KernelCacheTest, DirectoryOwnedBySomeoneElseIsRefused) {
  if (geteuid() != 0)
    GTEST_SKIP() << "needs root to hand a directory to another user";
  TempDir tmp;
  std::string dir = tmp.Sub("theirs");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  ::testing::internal::CaptureStderr();
  KernelCache cache({dir});
  EXPECT_CONTAINS(::testing::internal::GetCapturedStderr(),
                  "owned by uid 65534");
  EXPECT_EQ(cache.disk_dir(), "");
}

// A forged entry (a changed kernel with its hash recomputed) passes every
// content check, so only an entry this user alone could have written is
// read: one writable by group or others, owned by another user, or in a
// directory opened to others after the cache checked it is ignored (kept,
// with a warning naming why) and the kernel is compiled again.
TEST(KernelCacheTest, EntriesOthersCouldHaveWrittenAreNotRead) {
  TempDir tmp;
  const std::string dir = tmp.Sub("cache");
  KernelCache writer({dir});
  writer.Store(Key("group"), Blob(1));
  writer.Store(Key("mine"), Blob(2));
  const std::string group = writer.EntryPath(Key("group"));
  ASSERT_EQ(chmod(group.c_str(), 0620), 0);

  KernelCache reader({dir});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(reader.Lookup(Key("group")), std::nullopt);
  EXPECT_CONTAINS(
      ::testing::internal::GetCapturedStderr(),
      "ignoring entry " + group + ": writable by group or others (mode 0620)");
  EXPECT_TRUE(fs::exists(group));
  EXPECT_EQ(reader.Lookup(Key("mine")), Blob(2));

  if (geteuid() == 0) {
    const std::string theirs = writer.EntryPath(Key("mine"));
    KernelCache other({dir});
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(other.Lookup(Key("mine")), std::nullopt);
    EXPECT_CONTAINS(::testing::internal::GetCapturedStderr(),
                    "owned by uid 65534");
    ASSERT_EQ(chown(theirs.c_str(), 0, 0), 0);
  }

  // The directory checked fine when `late` opened it, then was opened up.
  KernelCache late({dir});
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(late.Lookup(Key("mine")), std::nullopt);
  EXPECT_CONTAINS(::testing::internal::GetCapturedStderr(),
                  "its directory is writable by group or others (mode 0777)");
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  EXPECT_EQ(late.Lookup(Key("mine")), Blob(2));
}

TEST(KernelCacheTest, UncreatableDirectoryFallsBackToMemory) {
  TempDir tmp;
  WriteBytes(tmp.Sub("file"), "not a directory");
  ::testing::internal::CaptureStderr();
  KernelCache cache({tmp.Sub("file/stepjit")});
  EXPECT_CONTAINS(::testing::internal::GetCapturedStderr(), "cannot create");
  EXPECT_EQ(cache.disk_dir(), "");
  cache.Store(Key("k"), Blob(8));
  EXPECT_EQ(cache.Lookup(Key("k")), Blob(8));
}

TEST(KernelCacheTest, ConcurrentStoresAndLookups) {
  TempDir tmp;
  constexpr int kThreads = 4;
  constexpr int kKeys = 40;
  KernelCache cache({tmp.path()});
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < kKeys; ++i) {
          int k = (i + t * 7) % kKeys;  // threads collide on the same keys
          CacheKey key = Key(absl::StrCat("kernel_", k));
          std::optional<std::string> hit = cache.Lookup(key);
          if (!hit) cache.Store(key, Blob(k, 256 + k));
          if (hit && *hit != Blob(k, 256 + k)) ++wrong[t];
          if (cache.Lookup(key) != Blob(k, 256 + k)) ++wrong[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(kThreads, 0));
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.memory_hits + stats.disk_hits + stats.misses,
            2 * kThreads * 3 * kKeys);
  EXPECT_EQ(stats.stores, stats.misses);
  EXPECT_GE(stats.stores, kKeys);
  EXPECT_EQ(stats.corrupt_entries, 0);
  EXPECT_EQ(ListDir(tmp.path()).size(), size_t(kKeys));  // no temp files left

  KernelCache reader({tmp.path()});
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(reader.Lookup(Key(absl::StrCat("kernel_", k))), Blob(k, 256 + k));
  }
  EXPECT_EQ(reader.stats().disk_hits, kKeys);
  EXPECT_EQ(reader.stats().corrupt_entries, 0);
}

// Every entry in these tests is this many bytes on disk (header + Blob()).
constexpr int64_t kEntryBytes = 84 + 1000;

// Ages `path` as if it was last stored or loaded `seconds` ago.
void SetAge(const std::string& path, int seconds) {
  const timespec t = {time(nullptr) - seconds, 0};
  const timespec times[2] = {t, t};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".bin")
      names.push_back(entry.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The entry file names of Key(k) for each of `keys`, sorted.
std::vector<std::string> EntriesOf(const std::vector<std::string>& keys) {
  std::vector<std::string> names;
  for (const std::string& k : keys) names.push_back(Key(k).Digest() + ".bin");
  std::sort(names.begin(), names.end());
  return names;
}

TEST(KernelCacheCapTest, LeastRecentlyUsedEntriesGoFirst) {
  TempDir tmp;
  KernelCache writer({tmp.path()});  // the default cap: nothing is evicted
  for (const char* k : {"a", "b", "c"}) writer.Store(Key(k), Blob(k[0]));
  SetAge(writer.EntryPath(Key("a")), 300);
  SetAge(writer.EntryPath(Key("b")), 200);
  SetAge(writer.EntryPath(Key("c")), 100);

  // Another process, with room for three entries, loads the oldest one:
  // that load makes it the most recently used.
  KernelCache capped(
      {.disk_dir = tmp.path(), .max_disk_bytes = 3 * kEntryBytes + 100});
  EXPECT_EQ(capped.Lookup(Key("a")), Blob('a'));
  EXPECT_EQ(capped.stats().evictions, 0);

  capped.Store(Key("d"), Blob('d'));
  EXPECT_EQ(Entries(tmp.path()), EntriesOf({"a", "c", "d"}));
  EXPECT_EQ(capped.stats().evictions, 1);
  SetAge(capped.EntryPath(Key("d")), 50);  // d is now older than a
  capped.Store(Key("e"), Blob('e'));
  EXPECT_EQ(Entries(tmp.path()), EntriesOf({"a", "d", "e"}));
  EXPECT_EQ(capped.stats().evictions, 2);

  // An evicted entry is a plain miss, not a corrupt one.
  KernelCache later({tmp.path()});
  EXPECT_EQ(later.Lookup(Key("b")), std::nullopt);
  EXPECT_EQ(later.Lookup(Key("a")), Blob('a'));
  EXPECT_EQ(later.stats().corrupt_entries, 0);
}

TEST(KernelCacheCapTest, AnEntryLargerThanTheCapOutlivesOnlyItsOwnStore) {
  TempDir tmp;
  KernelCache cache({.disk_dir = tmp.path(), .max_disk_bytes = 100});
  cache.Store(Key("x"), Blob(1));
  EXPECT_EQ(Entries(tmp.path()), EntriesOf({"x"}));
  cache.Store(Key("y"), Blob(2));
  EXPECT_EQ(Entries(tmp.path()), EntriesOf({"y"}));
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.Lookup(Key("x")), Blob(1));  // still in this process's memory
}

TEST(KernelCacheCapTest, StoresRemoveTemporaryFilesOfDeadWritesOnly) {
  TempDir tmp;
  const std::string dead = tmp.Sub(".0123.tmp.99999.0");
  const std::string live = tmp.Sub(".4567.tmp.99998.0");
  const std::string foreign = tmp.Sub("notes.txt");
  for (const std::string& path : {dead, live, foreign})
    WriteBytes(path, "partial");
  SetAge(dead, 2 * 60 * 60);
  SetAge(foreign, 2 * 60 * 60);
  KernelCache({tmp.path()}).Store(Key("k"), Blob(3));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(foreign));  // not the cache's to delete
}

TEST(KernelCacheCapTest, EnvironmentSetsTheCapInMiB) {
  {
    ScopedEnv cap("STEPJIT_CACHE_MAX_MB", nullptr);
    EXPECT_EQ(CacheOptions::FromEnvironment().max_disk_bytes,
              int64_t{1024} << 20);
  }
  {
    ScopedEnv cap("STEPJIT_CACHE_MAX_MB", "64");
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(CacheOptions::FromEnvironment().max_disk_bytes,
              int64_t{64} << 20);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
  for (const char* bad : {"abc", "0", "-5", "1.5", "64MB",
                          "99999999999999999999", "9223372036854775807"}) {
    ScopedEnv cap("STEPJIT_CACHE_MAX_MB", bad);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(CacheOptions::FromEnvironment().max_disk_bytes,
              int64_t{1024} << 20)
        << bad;
    const std::string warning = ::testing::internal::GetCapturedStderr();
    EXPECT_CONTAINS(warning,
                    absl::StrCat("STEPJIT_CACHE_MAX_MB: expected an integer "
                                 "from 1 to 8796093022207, got '",
                                 bad, "'"));
    EXPECT_CONTAINS(warning, "default of 1024 MiB");
  }
}

// Processes sharing one directory with a cap of a few entries: each
// iteration is a fresh cache (an empty memory layer, as a new process has),
// so every lookup reads the disk while other threads store and evict.
TEST(KernelCacheCapTest, ProcessesSharingATinyCacheNeverSeeABadEntry) {
  TempDir tmp;
  constexpr int kThreads = 4;
  constexpr int kKeys = 12;
  constexpr int64_t kCap = 4 * kEntryBytes;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0), corrupt(kThreads, 0), hits(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 30; ++round) {
        KernelCache cache({.disk_dir = tmp.path(), .max_disk_bytes = kCap});
        const int k = (round * 5 + t * 3) % kKeys;
        const CacheKey key = Key(absl::StrCat("kernel_", k));
        std::optional<std::string> hit = cache.Lookup(key);
        if (hit && *hit != Blob(k)) ++wrong[t];
        if (!hit) cache.Store(key, Blob(k));
        corrupt[t] += static_cast<int>(cache.stats().corrupt_entries);
        // Another fresh cache reads the entry back while the others keep
        // storing: it is the newest, so only several stores in between can
        // have evicted it (then this is a plain miss).
        KernelCache reader({.disk_dir = tmp.path(), .max_disk_bytes = kCap});
        std::optional<std::string> again = reader.Lookup(key);
        if (again) ++hits[t];
        if (again && *again != Blob(k)) ++wrong[t];
        corrupt[t] += static_cast<int>(reader.stats().corrupt_entries);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(kThreads, 0));
  EXPECT_EQ(corrupt, std::vector<int>(kThreads, 0));
  int total_hits = 0;
  for (int h : hits) total_hits += h;
  EXPECT_GT(total_hits, 0) << "no lookup found an entry: the test read nothing";
  // Quiet now: one more store leaves the directory within the cap.
  KernelCache({.disk_dir = tmp.path(), .max_disk_bytes = kCap})
      .Store(Key("last"), Blob(0));
  EXPECT_LE(static_cast<int64_t>(Entries(tmp.path()).size()) * kEntryBytes,
            kCap);
}

}  // namespace
}  // namespace stepjit::codegen
