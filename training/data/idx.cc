// IDX reading through zlib, and Fashion-MNIST assembled from four IDX files.
#include "training/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/host_memory.h"

namespace stepjit::data {
namespace {

// Larger declared payloads are treated as a corrupt header.
constexpr int64_t kMaxIdxBytes = int64_t{1} << 40;
// Read in chunks so a header claiming a huge payload fails on the missing
// data instead of on one huge allocation.
constexpr int64_t kChunkBytes = int64_t{16} << 20;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// Reads up to `n` bytes; returns how many arrived, or an error for a stream
// that zlib could not decode (a torn or corrupt .gz).
absl::StatusOr<int64_t> ReadSome(gzFile f, const std::string& path, void* dst,
                                 int64_t n) {
  int64_t total = 0;
  auto* out = static_cast<uint8_t*>(dst);
  while (total < n) {
    const auto want =
        static_cast<unsigned>(std::min<int64_t>(n - total, 1 << 30));
    const int got = gzread(f, out + total, want);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::DataLossError(
          absl::StrCat("IDX file '", path, "': cannot decompress: ",
                       errnum == Z_ERRNO ? std::strerror(errno) : msg));
    }
    if (got == 0) {
      // The input ended: Z_BUF_ERROR says it ended inside the gzip stream
      // (a cut file: the rest of the data, or just the CRC and length
      // trailer that would have caught a corrupt byte).
      int errnum = 0;
      gzerror(f, &errnum);
      if (errnum == Z_BUF_ERROR) {
        return absl::DataLossError(absl::StrCat(
            "IDX file '", path,
            "' is truncated: its gzip stream ends before its CRC trailer"));
      }
      break;
    }
    total += got;
  }
  return total;
}

// The most a .gz of `compressed` bytes can hold: deflate stores at most
// 258 bytes in 2 bits (a ratio under 1032:1), plus the stream's framing.
int64_t MaxInflatedBytes(int64_t compressed) {
  return compressed > (int64_t{1} << 52) ? std::numeric_limits<int64_t>::max()
                                         : compressed * 1032 + 1024;
}

void SwapToHost(std::vector<uint8_t>& bytes, int64_t elem_size) {
  if constexpr (std::endian::native == std::endian::big) return;
  if (elem_size == 1) return;
  for (size_t i = 0; i + elem_size <= bytes.size(); i += elem_size) {
    std::reverse(bytes.begin() + i, bytes.begin() + i + elem_size);
  }
}

}  // namespace

int64_t IdxTypeSize(uint8_t type) {
  switch (static_cast<IdxType>(type)) {
    case IdxType::kU8:
    case IdxType::kI8:
      return 1;
    case IdxType::kI16:
      return 2;
    case IdxType::kI32:
    case IdxType::kF32:
      return 4;
    case IdxType::kF64:
      return 8;
  }
  return 0;
}

int64_t IdxArray::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {
absl::StatusOr<IdxArray> ReadIdxOrThrow(const std::string& path,
                                        IdxReadOptions options);
}  // namespace

absl::StatusOr<IdxArray> ReadIdx(const std::string& path,
                                 IdxReadOptions options) {
  return StatusOnAllocationFailure(absl::StrCat("IDX file '", path, "'"), [&] {
    return ReadIdxOrThrow(path, options);
  });
}

namespace {
absl::StatusOr<IdxArray> ReadIdxOrThrow(const std::string& path,
                                        IdxReadOptions options) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("IDX file '", path, "' does not exist"));
  }
  errno = 0;
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open IDX file '", path,
                                            "': ", std::strerror(errno)));
  }
  uint8_t magic[4];
  ASSIGN_OR_RETURN(int64_t got, ReadSome(file.get(), path, magic, 4));
  if (got < 4) {
    return absl::DataLossError(
        absl::StrCat("IDX file '", path,
                     "' is truncated: expected a 4-byte magic number, "
                     "found ",
                     got, " bytes"));
  }
  const int64_t elem_size = IdxTypeSize(magic[2]);
  if (magic[0] != 0 || magic[1] != 0 || elem_size == 0 || magic[3] == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "IDX file '%s' has a bad magic number: expected 00 00 <type in "
        "{08,09,0b,0c,0d,0e}> <rank >= 1>, found %02x %02x %02x %02x",
        path, magic[0], magic[1], magic[2], magic[3]));
  }
  IdxArray array;
  array.type = static_cast<IdxType>(magic[2]);
  const int rank = magic[3];
  std::vector<uint8_t> header(4 * rank);
  ASSIGN_OR_RETURN(got, ReadSome(file.get(), path, header.data(), 4 * rank));
  if (got < 4 * rank) {
    return absl::DataLossError(absl::StrCat(
        "IDX file '", path, "' is truncated: expected ", rank, " dims (",
        4 * rank, " bytes) after the magic, found ", got, " bytes"));
  }
  int64_t nbytes = elem_size;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* b = &header[4 * i];
    const int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) |
                      (int64_t{b[2]} << 8) | int64_t{b[3]};
    array.dims.push_back(d);
    if (d != 0 && nbytes > kMaxIdxBytes / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "IDX file '", path, "' declares dims ", DimsString(array.dims),
          "..., more than ", kMaxIdxBytes, " bytes of data"));
    }
    nbytes *= d;
  }
  if (options.header_only) return array;
  const double memory = PhysicalMemoryBytes();
  const int64_t cap = options.max_bytes > 0 ? options.max_bytes
                      : memory > 0          ? static_cast<int64_t>(memory)
                                            : kMaxIdxBytes;
  if (nbytes > cap) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "IDX file '%s' declares dims %s (%d data bytes), more than %s (%d "
        "bytes); nothing "
        "was inflated",
        path, DimsString(array.dims), nbytes,
        options.max_bytes > 0 ? "the reader's limit" : "this machine's memory",
        cap));
  }
  // Refuse a size the file cannot hold before allocating for it: a plain
  // file holds its bytes, a .gz at most ~1032x its size.
  const auto file_size =
      static_cast<int64_t>(std::filesystem::file_size(path, ec));
  const int64_t header_bytes = 4 + 4 * rank;
  const bool plain = gzdirect(file.get()) == 1;
  const int64_t most = ec      ? std::numeric_limits<int64_t>::max()
                       : plain ? file_size - header_bytes
                               : MaxInflatedBytes(file_size);
  if (nbytes > most && plain) {
    return absl::DataLossError(absl::StrCat(
        "IDX file '", path, "' is truncated: dims ", DimsString(array.dims),
        " need ", nbytes, " data bytes after the header, found ", most));
  }
  if (nbytes > most) {
    return absl::DataLossError(absl::StrCat(
        "IDX file '", path, "' declares dims ", DimsString(array.dims), " (",
        nbytes, " data bytes), more than its ", file_size,
        " bytes of gzip data can hold"));
  }
  while (static_cast<int64_t>(array.bytes.size()) < nbytes) {
    const int64_t have = static_cast<int64_t>(array.bytes.size());
    const int64_t chunk = std::min(kChunkBytes, nbytes - have);
    array.bytes.resize(have + chunk);
    ASSIGN_OR_RETURN(
        got, ReadSome(file.get(), path, array.bytes.data() + have, chunk));
    if (got < chunk) {
      return absl::DataLossError(
          absl::StrCat("IDX file '", path, "' is truncated: dims ",
                       DimsString(array.dims), " need ", nbytes,
                       " data bytes after the header, found ", have + got));
    }
  }
  uint8_t extra;
  ASSIGN_OR_RETURN(got, ReadSome(file.get(), path, &extra, 1));
  if (got != 0) {
    return absl::DataLossError(absl::StrCat(
        "IDX file '", path, "' has trailing bytes: dims ",
        DimsString(array.dims), " need exactly ", nbytes, " data bytes"));
  }
  SwapToHost(array.bytes, elem_size);
  return array;
}

}  // namespace

}  // namespace stepjit::data
