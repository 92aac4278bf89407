// The collective path of CUDA tensors and the dist world's NCCL
// communicator, created on first use.
#include "devices/cuda/nccl/dist_nccl.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "config/env.h"
#include "devices/cuda/nccl/nccl_library.h"
#include "devices/cuda/nccl/unique_id_file.h"
#include "dist/dist.h"
#include "dist/dist_internal.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {

namespace {

enum class NcclMode { kAuto, kForce, kOff };

NcclMode ModeFromEnv() {
  const std::optional<std::string> v =
      config::ChoiceOrThrow(config::Env::kDistNccl);
  if (!v || *v == "auto") return NcclMode::kAuto;
  if (*v == "force" || *v == "on" || *v == "1") return NcclMode::kForce;
  return NcclMode::kOff;
}

// Why NCCL cannot run collectives on this backend ("" when it can).
std::string WhyNotNccl(Backend& b) {
  if (b.DeviceOrdinal() < 0) {
    return absl::StrCat("the CUDA backend is ", b.Describe(),
                        ", not a device NCCL can use");
  }
  absl::StatusOr<const NcclLibrary*> lib = LoadNccl();
  if (!lib.ok()) return std::string(lib.status().message());
  return "";
}

struct DistComm {
  std::mutex mu;
  uint64_t generation = 0;
  std::unique_ptr<NcclComm> comm;
};

DistComm& State() {
  static DistComm* s = new DistComm;  // NCCL may still be in use at exit
  return *s;
}

// Rank 0's id reaches every rank: over MPI when the world has it, else
// through the init file.
nccl::UniqueId ExchangeId(const NcclLibrary& lib, int rank, int world,
                          double timeout_s) {
  nccl::UniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    ThrowIfError(NcclStatus(lib, lib.api.GetUniqueId(&id), "ncclGetUniqueId"));
  }
  if (world == 1) return id;
  if (dist::internal::HasMpi()) {
    dist::internal::BroadcastBytes(&id, sizeof(id), 0);
    return id;
  }
  const std::string path = UniqueIdFilePath(dist::internal::InitFile());
  SJ_REQUIRE(!path.empty(), "NCCL: ", world, " ranks launched by ",
             dist::launcher(),
             " without MPI exchange NCCL's unique id through a file every rank "
             "can read; set "
             "STEPJIT_DIST_INIT_FILE (or InitOptions::init_file) to a path on "
             "a shared file "
             "system, or launch with mpirun");
  if (rank == 0) {
    ThrowIfError(WriteUniqueIdFile(path, id));
  } else {
    id = ValueOrThrow(ReadUniqueIdFile(path, timeout_s, rank));
  }
  return id;
}

}  // namespace

const char* CollectivePathName(CollectivePath path) {
  switch (path) {
    case CollectivePath::kLocal:
      return "local";
    case CollectivePath::kNccl:
      return "nccl";
    case CollectivePath::kHostStaging:
      return "host staging";
  }
  return "?";
}

CollectiveChoice ChooseCollectivePath() {
  const NcclMode mode = ModeFromEnv();
  if (mode == NcclMode::kOff) {
    return {CollectivePath::kHostStaging, "STEPJIT_DIST_NCCL=off"};
  }
  Backend& b = BackendOrThrow();
  const std::string why_not = WhyNotNccl(b);
  if (mode == NcclMode::kForce) {
    SJ_REQUIRE(why_not.empty(),
               "STEPJIT_DIST_NCCL=force, but NCCL cannot run: ", why_not);
    return {CollectivePath::kNccl, ""};
  }
  if (dist::world_size() == 1) return {CollectivePath::kLocal, why_not};
  if (why_not.empty()) return {CollectivePath::kNccl, ""};
  return {CollectivePath::kHostStaging, why_not};
}

NcclComm& DistNcclComm() {
  DistComm& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.comm != nullptr && s.generation == BackendGeneration()) {
    ThrowIfError(s.comm->health());
    return *s.comm;
  }
  // A communicator of a replaced backend is only dropped: its device
  // context is gone with that backend.
  (void)s.comm.release();
  // A rank that cannot join (no id in time, init timed out) leaves the
  // others waiting: the world is failed, not retried with a new id.
  const int rank = dist::rank(), world = dist::world_size();
  try {
    Backend& b = BackendOrThrow();
    const NcclLibrary& lib = *ValueOrThrow(LoadNccl());
    const double timeout_s = dist::timeout_seconds();
    const nccl::UniqueId id = ExchangeId(lib, rank, world, timeout_s);
    s.comm = ValueOrThrow(NcclComm::Create(
        lib, b,
        {.rank = rank,
         .world = world,
         .id = id,
         .timeout_s = timeout_s,
         .on_failure = [](const absl::Status& why) {
           dist::internal::MarkFailed(std::string(why.message()));
         }}));
  } catch (const Error& e) {
    dist::internal::MarkFailed(e.what());
    throw;
  }
  s.generation = BackendGeneration();
  // Every rank has read the file once the collective init returned: remove
  // it so that a later job on the same path waits for its own rank 0.
  if (world > 1 && rank == 0 && !dist::internal::HasMpi()) {
    std::remove(UniqueIdFilePath(dist::internal::InitFile()).c_str());
  }
  return *s.comm;
}

}  // namespace stepjit::runtime::cuda
