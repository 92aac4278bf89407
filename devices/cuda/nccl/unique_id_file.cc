// The unique-id file: atomic write by rank 0, polling read by the others.
#include "devices/cuda/nccl/unique_id_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/env.h"

namespace stepjit::runtime::cuda {

namespace {

std::string Errno() { return std::strerror(errno); }

// Reads the whole of a file that exists; NotFound when it does not.
absl::StatusOr<std::string> ReadAll(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(path);
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", path, ": ", Errno()));
  }
  std::string data;
  char buf[256];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = Errno();
      close(fd);
      return absl::InternalError(absl::StrCat("cannot read ", path, ": ", why));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    // Anything longer than an id is not one; stop reading a large file.
    if (data.size() > nccl::kUniqueIdBytes) break;
  }
  close(fd);
  return data;
}

}  // namespace

absl::Status WriteUniqueIdFile(const std::string& path,
                               const nccl::UniqueId& id) {
  // Same directory, so rename() stays within one file system and is atomic.
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create ", tmp,
        " for NCCL's unique id (STEPJIT_DIST_INIT_FILE=", path, "): ", Errno(),
        "; the directory must exist and be writable by rank 0"));
  }
  size_t done = 0;
  while (done < sizeof(id.internal)) {
    const ssize_t n = write(fd, id.internal + done, sizeof(id.internal) - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = Errno();
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  // On disk before it becomes visible under its name (a reader on another
  // host of a shared file system must not see an empty file).
  if (fsync(fd) != 0 || close(fd) != 0) {
    const std::string why = Errno();
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", why));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = Errno();
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<nccl::UniqueId> ReadUniqueIdFile(const std::string& path,
                                                double timeout_s, int rank) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(std::max(timeout_s, 0.0)));
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    absl::StatusOr<std::string> data = ReadAll(path);
    if (data.ok()) {
      if (data->size() != nccl::kUniqueIdBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, " holds ",
            data->size() > nccl::kUniqueIdBytes ? "more than " : "",
            data->size() > nccl::kUniqueIdBytes ? nccl::kUniqueIdBytes
                                                : data->size(),
            " bytes, expected NCCL's unique id of ", nccl::kUniqueIdBytes,
            " bytes written by rank 0; is STEPJIT_DIST_INIT_FILE a file "
            "another program "
            "uses?"));
      }
      nccl::UniqueId id;
      std::memcpy(id.internal, data->data(), nccl::kUniqueIdBytes);
      return id;
    }
    if (!absl::IsNotFound(data.status())) return data.status();
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("rank %d waited %.1f s for NCCL's unique id in %s, "
                          "which rank 0 writes; it never "
                          "appeared. Is rank 0 running, and is that path on a "
                          "file system every rank "
                          "shares? (InitOptions::init_file or "
                          "STEPJIT_DIST_INIT_FILE; the wait is the dist "
                          "timeout, STEPJIT_DIST_TIMEOUT_S)",
                          rank, timeout_s, path));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::string UniqueIdFilePath(const std::string& init_file) {
  std::string path = init_file;
  if (path.empty()) {
    path = config::Get(config::Env::kDistInitFile).value_or("");
  }
  if (absl::StartsWith(path, "file://")) path = path.substr(7);
  return path;
}

}  // namespace stepjit::runtime::cuda
