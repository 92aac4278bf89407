// What the examples share: wall-clock helpers and a one-line progress bar.
#ifndef STEPJIT_EXAMPLES_PROGRESS_H_
#define STEPJIT_EXAMPLES_PROGRESS_H_

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"

namespace stepjit::examples {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

inline std::string Clock2(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

// A one-line progress bar on stderr: redrawn in place (at most ~10 times a
// second) on a terminal, one plain line every kPlainEvery steps otherwise.
class Progress {
 public:
  Progress(int64_t total, bool enabled)
      : total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0) {}

  void Update(int64_t step, double loss, double elapsed_s) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (tty_ ? (step != total_ && now - last_draw_ < kRedraw)
             : (step % kPlainEvery != 0)) {
      return;
    }
    last_draw_ = now;
    const double rate = step / std::max(elapsed_s, 1e-9);
    const double eta = (total_ - step) / std::max(rate, 1e-9);
    constexpr int kWidth = 24;
    const int filled =
        static_cast<int>(kWidth * step / std::max<int64_t>(total_, 1));
    std::string bar =
        std::string(filled, '#') + std::string(kWidth - filled, '.');
    std::string line =
        absl::StrFormat("[%s] step %d/%d  loss %.4f  %.1f steps/s  ETA %s", bar,
                        step, total_, loss, rate, Clock2(eta));
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  // Clears the in-place line so the next output starts on a clean line.
  void Clear() {
    if (enabled_ && tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  static constexpr int64_t kPlainEvery = 100;
  static constexpr auto kRedraw = std::chrono::milliseconds(100);
  int64_t total_;
  bool enabled_;
  bool tty_;
  Clock::time_point last_draw_{};
};

}  // namespace stepjit::examples

#endif  // STEPJIT_EXAMPLES_PROGRESS_H_
