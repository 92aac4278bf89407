// MPI (Open MPI from Debian's libopenmpi-dev) behind dist/mpi.h.
#include "dist/mpi.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#ifdef STEPJIT_HAVE_MPI
#include <mpi.h>
#endif

namespace stepjit::dist::internal {

std::string DescribeHeader(const CollectiveHeader& h) {
  const std::string seq = absl::StrCat(" #", h.seq);
  switch (h.kind) {
    case CollectiveHeader::kAllReduce: {
      // Another rank's header may come from another build: every field is
      // checked before it names anything.
      const std::string op =
          h.aux >= 0 && h.aux <= static_cast<int64_t>(ReduceOp::kMax)
              ? ReduceOpName(static_cast<ReduceOp>(h.aux))
              : absl::StrCat("op ", h.aux);
      const std::string dtype =
          h.dtype >= 0 && h.dtype < ir::kNumDTypes
              ? std::string(ir::DTypeName(static_cast<ir::DType>(h.dtype)))
              : absl::StrCat("dtype ", h.dtype);
      return absl::StrCat("all_reduce", seq, " (", op, ") of ", h.count, " ",
                          dtype, " values");
    }
    case CollectiveHeader::kBroadcast:
      return absl::StrCat("broadcast", seq, " of ", h.count,
                          " bytes from rank ", h.aux);
    case CollectiveHeader::kAllGather:
      return absl::StrCat("all_gather", seq, " of ", h.count,
                          " bytes per rank");
    case CollectiveHeader::kBarrier:
      return absl::StrCat("barrier", seq);
    case CollectiveHeader::kCheckSame:
      return absl::StrCat("check_same", seq, " (of a setting that must agree)");
    case CollectiveHeader::kFinalize:
      return absl::StrCat("dist::shutdown after ", h.seq,
                          " collectives (it has finished)");
    default:
      return absl::StrCat("unknown collective", seq, " (kind ", h.kind, ")");
  }
}

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

absl::Status MpiCheckSame(const std::string& name, const std::string& value) {
  // Each rank sends a fixed-size record: a hash of its whole value, then as
  // much of the value as fits (for the message).
  constexpr size_t kRecord = 256, kText = kRecord - 8;
  const uint64_t hash = Fnv1a(value);
  char mine[kRecord] = {};
  std::memcpy(mine, &hash, 8);
  std::memcpy(mine + 8, value.data(), std::min(value.size(), kText));
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string all(kRecord * static_cast<size_t>(size), '\0');
  if (absl::Status st = Check(MPI_Allgather(mine, kRecord, MPI_CHAR, all.data(),
                                            kRecord, MPI_CHAR, MPI_COMM_WORLD),
                              "MPI_Allgather (check_same)");
      !st.ok())
    return st;
  bool same = true;
  for (int r = 0; r < size; ++r)
    same &= std::memcmp(all.data() + kRecord * r, mine, kRecord) == 0;
  if (same) return absl::OkStatus();
  std::string views;
  for (int r = 0; r < size; ++r) {
    const char* text = all.data() + kRecord * r + 8;
    std::string v(text, strnlen(text, kText));
    if (v.size() == kText) v += "...";
    absl::StrAppend(&views, r == 0 ? "" : "; ", "rank ", r,
                    r == rank ? " (this one)" : "", ": ", v);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the ranks disagree on ", name, ": ", views));
}

absl::Status MpiCheckHeader(const CollectiveHeader& header) {
  constexpr int kFields = 5;
  const int64_t mine[kFields] = {header.seq, header.kind, header.dtype,
                                 header.count, header.aux};
  int64_t both[2 * kFields];
  for (int i = 0; i < kFields; ++i) {
    both[i] = mine[i];
    both[kFields + i] = -mine[i];
  }
  if (absl::Status st =
          Check(MPI_Allreduce(MPI_IN_PLACE, both, 2 * kFields, MPI_INT64_T,
                              MPI_MAX, MPI_COMM_WORLD),
                "MPI_Allreduce (collective header)");
      !st.ok())
    return st;
  bool same = true;
  for (int i = 0; i < kFields; ++i) same &= both[i] == -both[kFields + i];
  if (same) return absl::OkStatus();
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<int64_t> all(static_cast<size_t>(size) * kFields);
  if (absl::Status st =
          Check(MPI_Allgather(mine, kFields, MPI_INT64_T, all.data(), kFields,
                              MPI_INT64_T, MPI_COMM_WORLD),
                "MPI_Allgather (collective headers)");
      !st.ok())
    return st;
  std::string views;
  for (int r = 0; r < size; ++r) {
    const int64_t* f = all.data() + static_cast<size_t>(r) * kFields;
    absl::StrAppend(&views, r == 0 ? "" : "; ", "rank ", r,
                    r == rank ? " (this one)" : "", ": ",
                    DescribeHeader({f[0], f[1], f[2], f[3], f[4]}));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the ranks disagree on their next collective (different "
                   "steps, batch sizes, bucket "
                   "sizes or models?): ",
                   views));
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
absl::Status MpiCheckHeader(const CollectiveHeader&) { return NoMpi(); }
absl::Status MpiCheckSame(const std::string&, const std::string&) {
  return NoMpi();
}
void MpiFinalize() {}
void MpiAbort(int) {}
const char* MpiLibraryVersion() { return "none"; }

#endif

}  // namespace stepjit::dist::internal
