// What the examples share under --ddp: the data-parallel fields of a JSON
// result, the throughput table of all ranks, and a main() whose error
// message names the rank.
#ifndef STEPJIT_EXAMPLES_DDP_H_
#define STEPJIT_EXAMPLES_DDP_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/dist.h"
#include "ir/status.h"
#include "llvm/Support/JSON.h"

namespace stepjit::examples {

// --ddp's keys of a result's JSON object: world_size, per_rank_batch and
// the run's samples_per_s and buckets.
template <typename Result>
void AddDdpFields(llvm::json::Object& o, const Result& r, int world_size,
                  int64_t rank_batch) {
  o["world_size"] = world_size;
  o["per_rank_batch"] = rank_batch;
  o["samples_per_s"] = r.samples_per_s;
  o["buckets"] = r.buckets;
}

// --ddp: the throughput of all ranks together.
template <typename Result>
void PrintDdpSummary(const std::vector<Result>& rows, int world_size,
                     int64_t rank_batch, int64_t batch) {
  std::printf(
      "\ndata-parallel: world size %d, per-rank batch %lld, global batch "
      "%lld\n",
      world_size, static_cast<long long>(rank_batch),
      static_cast<long long>(batch));
  std::printf("%-14s %12s %8s %8s\n", "mode", "samples/s", "ms/step",
              "buckets");
  for (const Result& r : rows) {
    std::printf("%-14s %12.1f %8.3f %8d\n", r.mode.c_str(), r.samples_per_s,
                r.ms_per_step, static_cast<int>(r.buckets));
  }
}

// Runs `run`; a stepjit::Error it throws prints "<program>: error: ..."
// (with "rank R: " before "error" in a world of several ranks) and gives
// status 1.
inline int RunMain(const char* program, int (*run)(int, char**), int argc,
                   char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    // Under mpirun every rank's error reaches the same terminal.
    const std::string rank =
        dist::world_size() > 1 ? absl::StrCat("rank ", dist::rank(), ": ") : "";
    std::fprintf(stderr, "%s: %serror: %s\n", program, rank.c_str(), e.what());
    return 1;
  }
}

}  // namespace stepjit::examples

#endif  // STEPJIT_EXAMPLES_DDP_H_
