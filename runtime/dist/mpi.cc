// MPI (Open MPI from Debian's libopenmpi-dev) behind runtime/dist/mpi.h.
#include "runtime/dist/mpi.h"

#include <algorithm>
#include <climits>
#include <string>

#include "absl/strings/str_cat.h"

#ifdef STEPJIT_HAVE_MPI
#include <mpi.h>
#endif

namespace stepjit::dist::internal {

#ifdef STEPJIT_HAVE_MPI
namespace {

absl::Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return absl::UnavailableError(
      absl::StrCat(what, " failed: ", std::string(text, len)));
}

// MPI counts are ints: larger payloads go in chunks.
constexpr int64_t kChunk = int64_t{1} << 30;

MPI_Datatype ToMpi(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
      return MPI_FLOAT;
    case ir::DType::kF64:
      return MPI_DOUBLE;
    case ir::DType::kI64:
      return MPI_INT64_T;
    case ir::DType::kI32:
      return MPI_INT32_T;
    case ir::DType::kBool:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

}  // namespace

bool MpiBuilt() { return true; }

absl::Status MpiInit(int* rank, int* size) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (int rc =
            MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
        rc != MPI_SUCCESS) {
      return absl::UnavailableError(
          absl::StrCat("MPI_Init_thread failed with code ", rc));
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (absl::Status s =
          Check(MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank");
      !s.ok())
    return s;
  return Check(MPI_Comm_size(MPI_COMM_WORLD, size), "MPI_Comm_size");
}

absl::Status MpiAllReduce(const void* send, void* recv, int64_t count,
                          ir::DType dtype, ReduceOp op) {
  const MPI_Datatype type = ToMpi(dtype);
  if (type == MPI_DATATYPE_NULL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MPI all_reduce of ", ir::DTypeName(dtype), " is not supported"));
  }
  const MPI_Op mpi_op = op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
  const int64_t size = ir::DTypeSize(dtype);
  for (int64_t done = 0; done < count; done += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, count - done));
    char* r = static_cast<char*>(recv) + done * size;
    const void* s = send == recv ? MPI_IN_PLACE
                                 : static_cast<const char*>(send) + done * size;
    if (absl::Status st =
            Check(MPI_Allreduce(s, r, n, type, mpi_op, MPI_COMM_WORLD),
                  "MPI_Allreduce");
        !st.ok())
      return st;
  }
  return absl::OkStatus();
}

absl::Status MpiBroadcast(void* data, int64_t bytes, int root) {
  for (int64_t done = 0; done < bytes; done += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, bytes - done));
    if (absl::Status st = Check(MPI_Bcast(static_cast<char*>(data) + done, n,
                                          MPI_BYTE, root, MPI_COMM_WORLD),
                                "MPI_Bcast");
        !st.ok())
      return st;
  }
  return absl::OkStatus();
}

absl::Status MpiAllGather(const void* send, void* recv,
                          int64_t bytes_per_rank) {
  if (bytes_per_rank > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_gather of ", bytes_per_rank,
                     " bytes per rank exceeds MPI's 2 GiB count limit"));
  }
  return Check(
      MPI_Allgather(send, static_cast<int>(bytes_per_rank), MPI_BYTE, recv,
                    static_cast<int>(bytes_per_rank), MPI_BYTE, MPI_COMM_WORLD),
      "MPI_Allgather");
}

absl::Status MpiBarrier() {
  return Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void MpiFinalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiAbort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

const char* MpiLibraryVersion() {
  static std::string version = [] {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(text, &len);
    std::string s(text, len);
    return s.substr(0, s.find_first_of(",\n"));
  }();
  return version.c_str();
}

#else  // !STEPJIT_HAVE_MPI

namespace {
absl::Status NoMpi() {
  return absl::FailedPreconditionError(
      "this stepjit build has no MPI: install libopenmpi-dev (Debian) and "
      "reconfigure");
}
}  // namespace

bool MpiBuilt() { return false; }
absl::Status MpiInit(int*, int*) { return NoMpi(); }
absl::Status MpiAllReduce(const void*, void*, int64_t, ir::DType, ReduceOp) {
  return NoMpi();
}
absl::Status MpiBroadcast(void*, int64_t, int) { return NoMpi(); }
absl::Status MpiAllGather(const void*, void*, int64_t) { return NoMpi(); }
absl::Status MpiBarrier() { return NoMpi(); }
void MpiFinalize() {}
void MpiAbort(int) {}
const char* MpiLibraryVersion() { return "none"; }

#endif

}  // namespace stepjit::dist::internal
