// IDX file reader (the MNIST container format) and the Fashion-MNIST loader.
//
// An IDX file is a 4-byte magic (0, 0, element type, rank), `rank` big-endian
// uint32 dims, then the row-major elements in big-endian order. Files may be
// gzip-compressed or plain; zlib reads both transparently.
#ifndef STEPJIT_TRAINING_DATA_IDX_H_
#define STEPJIT_TRAINING_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "training/data/dataset.h"

namespace stepjit::data {

// Element type codes: the third byte of the magic number.
enum class IdxType : uint8_t {
  kU8 = 0x08,
  kI8 = 0x09,
  kI16 = 0x0B,
  kI32 = 0x0C,
  kF32 = 0x0D,
  kF64 = 0x0E,
};

// Bytes per element of `type`, or 0 for a code that is not an IdxType.
int64_t IdxTypeSize(uint8_t type);

struct IdxArray {
  IdxType type = IdxType::kU8;
  std::vector<int64_t> dims;
  // Row-major elements; multi-byte values are already in host byte order.
  std::vector<uint8_t> bytes;

  int64_t num_elements() const;
};

// Reads and validates one IDX file (.gz or plain). Errors name the file and
// what was expected and found: NotFound for a missing file, InvalidArgument
// for a bad magic or dims, DataLoss for truncated, trailing or corrupt data.
//
// Nothing is inflated before the header is checked: data larger than
// `max_bytes` (default: this machine's memory) is ResourceExhausted, and
// `header_only` reads the type and dims alone (no bytes), so that a caller
// can check what it expects (matching dims of two files) before any data.
struct IdxReadOptions {
  bool header_only = false;
  int64_t max_bytes = 0;  // 0: the machine's physical memory
};
absl::StatusOr<IdxArray> ReadIdx(const std::string& path,
                                 IdxReadOptions options = {});

// Where the Debian package `dataset-fashion-mnist` installs the files.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
// Mean and standard deviation of the Fashion-MNIST training pixels in [0, 1].
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

struct FashionMnistOptions {
  // Maps pixels p in [0, 1] to (p - mean) / std.
  bool normalize = true;
};

// Loads the training (60000) or test (10000) split from `dir`, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. Inputs are f32 [N, 784]
// (pixels scaled to [0, 1], then normalized if asked); targets are i64 [N].
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train,
                                         FashionMnistOptions options = {});

}  // namespace stepjit::data

#endif  // STEPJIT_TRAINING_DATA_IDX_H_
