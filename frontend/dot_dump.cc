// Writes dot files of graphs and renders them with Graphviz's `dot`.
#include "frontend/dot_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ir/dot.h"

extern char** environ;

namespace stepjit::frontend {
namespace {

// Reports `message` on stderr unless a message of the same kind came before.
void WarnOnce(std::atomic<bool>& warned, const std::string& message) {
  if (!warned.exchange(true)) {
    std::cerr << "stepjit: STEPJIT_DUMP: " << message << "\n";
  }
}

std::atomic<bool> g_write_warned{false};
std::atomic<bool> g_render_warned{false};

}  // namespace

absl::Status RenderSvg(const std::string& dot_path, const std::string& svg_path,
                       std::chrono::milliseconds timeout) {
  const std::string command =
      absl::StrCat("dot -Tsvg -o ", svg_path, " ", dot_path);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::string args[] = {"dot", "-Tsvg", "-o", svg_path, dot_path};
  char* argv[] = {args[0].data(), args[1].data(), args[2].data(),
                  args[3].data(), args[4].data(), nullptr};
  pid_t pid = 0;
  const int spawned =
      posix_spawnp(&pid, "dot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT) {
    return absl::NotFoundError(
        "no `dot` on PATH (Graphviz: apt-get install graphviz)");
  }
  if (spawned != 0) {
    return absl::InternalError(
        absl::StrCat("cannot run `", command, "`: ", std::strerror(spawned)));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat(
          "waiting for `", command, "` failed: ", std::strerror(errno)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::error_code ec;
      std::filesystem::remove(svg_path, ec);
      return absl::DeadlineExceededError(
          absl::StrCat("`", command, "` ran longer than ", timeout.count(),
                       " ms", " and was stopped"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::remove(svg_path, ec);
  return absl::InternalError(absl::StrCat(
      "`", command, "` ",
      WIFEXITED(status)
          ? absl::StrCat("exited with status ", WEXITSTATUS(status))
          : absl::StrCat("was killed by signal ", WTERMSIG(status)),
      " (run it to see why)"));
}

void DumpDot(const ir::Graph& graph, const std::string& dir,
             absl::string_view stem) {
  const std::filesystem::path base =
      std::filesystem::path(dir) / std::string(stem);
  const std::string dot_path = base.string() + ".dot";
  std::ofstream out(dot_path, std::ios::binary);
  ir::PrintDot(graph, out);
  out.close();
  if (!out) {
    WarnOnce(g_write_warned, absl::StrCat("cannot write ", dot_path));
    return;
  }
  if (absl::Status s = RenderSvg(dot_path, base.string() + ".svg"); !s.ok()) {
    WarnOnce(g_render_warned, absl::StrCat(s.message(),
                                           "; the .dot files are kept, without "
                                           "their .svg"));
  }
}

}  // namespace stepjit::frontend
