// A small data-parallel loop whose last rank misbehaves, for the ctest
// checks that the other ranks fail with a clear error instead of hanging:
//   dist_failure hang   the last rank stops calling collectives (it sleeps)
//   dist_failure die    the last rank exits abruptly in the middle of the loop
//   dist_failure fewer  the last rank runs 3 steps, not 50, then shuts down
//   dist_failure count  the last rank all_reduces 1000 elements, not 1024
//   dist_failure kind   the last rank broadcasts where the others all_reduce
// Every rank prints what it saw; the exit status is non-zero on failure.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "dist/dist.h"
#include "frontend/stepjit.h"

using namespace stepjit;

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "hang" && mode != "die" && mode != "fewer" && mode != "count" &&
      mode != "kind") {
    std::fprintf(stderr, "usage: dist_failure hang|die|fewer|count|kind\n");
    return 2;
  }
  const bool hang = mode == "hang";
  try {
    dist::init();
    const bool culprit =
        dist::rank() == dist::world_size() - 1 && dist::world_size() > 1;
    Tensor w = full({1024}, 1.0);
    for (int step = 0; step < 50; ++step) {
      if (culprit && mode == "fewer" && step == 3) {
        std::printf("rank %d: stops after %d steps\n", dist::rank(), step);
        std::fflush(stdout);
        dist::shutdown();
        return 0;
      }
      if (culprit && mode == "count" && step == 5) {
        dist::all_reduce(full({1000}, 1.0), dist::ReduceOp::kAvg);
        continue;
      }
      if (culprit && mode == "kind" && step == 5) {
        dist::broadcast(w, 0);
        continue;
      }
      if (culprit && (mode == "hang" || mode == "die") && step == 5) {
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
