// A small data-parallel loop whose last rank misbehaves, for the ctest
// checks that the other ranks fail with a clear error instead of hanging:
//   dist_failure hang   the last rank stops calling collectives (it sleeps)
//   dist_failure die    the last rank exits abruptly in the middle of the loop
// Every rank prints what it saw; the exit status is non-zero on failure.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "frontend/stepjit.h"
#include "runtime/dist/dist.h"

using namespace stepjit;

int main(int argc, char** argv) {
  if (argc != 2 ||
      (std::strcmp(argv[1], "hang") != 0 && std::strcmp(argv[1], "die") != 0)) {
    std::fprintf(stderr, "usage: dist_failure hang|die\n");
    return 2;
  }
  const bool hang = std::strcmp(argv[1], "hang") == 0;
  try {
    dist::init();
    const bool culprit =
        dist::rank() == dist::world_size() - 1 && dist::world_size() > 1;
    Tensor w = full({1024}, 1.0);
    for (int step = 0; step < 50; ++step) {
      if (culprit && step == 5) {
        if (hang) {
          std::printf("rank %d: stops calling collectives at step %d\n",
                      dist::rank(), step);
          std::fflush(stdout);
          std::this_thread::sleep_for(std::chrono::seconds(120));
        } else {
          std::printf("rank %d: dies at step %d\n", dist::rank(), step);
          std::fflush(stdout);
          _exit(3);
        }
      }
      Tensor g = dist::all_reduce(w * 0.5, dist::ReduceOp::kAvg);
      w.sub_(g * 0.01);
    }
    std::printf("rank %d: finished\n", dist::rank());
  } catch (const Error& e) {
    std::printf("rank %d: error: %s\n", dist::rank(), e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
