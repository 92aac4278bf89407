// The safetensors file format: a validating reader and a writer, on bytes.
//
// Layout (https://github.com/huggingface/safetensors, "Format"): an 8-byte
// little-endian u64 N; N bytes of UTF-8 JSON, an object mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
// "__metadata__" object of string values; then the byte buffer the offsets
// index (relative to its start). Tensors are contiguous, row-major and
// little-endian. The header may be padded at its end with spaces.
//
// Validation (each rule has a case in tests/training/safetensors_test.cc and
// the reader is fuzzed by fuzz/checkpoint_fuzzer.cc):
//   * the file holds the 8 length bytes, and N fits in the file and is at
//     most kMaxHeaderBytes (the reference implementation's limit);
//   * the header is valid UTF-8 JSON, an object, with no duplicate names;
//   * each entry has exactly dtype, shape and data_offsets, a known dtype,
//     non-negative dims whose product times the element size does not
//     overflow and equals end - begin;
//   * sorted by begin, the entries tile the buffer: the first starts at 0,
//     each starts where the previous ends, the last ends at the file's end
//     (no holes, no overlap, nothing out of range);
//   * __metadata__ maps strings to strings.
// Nothing is allocated from a size the header claims: every byte count is
// checked against the file's real size first.
#ifndef STEPJIT_TRAINING_IO_SAFETENSORS_H_
#define STEPJIT_TRAINING_IO_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/dtype.h"

namespace stepjit::io {

// The reference implementation refuses headers above 100 MB.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// A dtype as the format names it ("F32", "BF16", "U8", ...).
struct SafetensorsDType {
  absl::string_view name;
  int64_t bytes;                // element size
  std::optional<ir::DType> ir;  // the stepjit dtype, when there is one
};
// The dtype named `name`, or nullopt for a name the format does not define.
std::optional<SafetensorsDType> FindSafetensorsDType(absl::string_view name);
// The format's name of a stepjit dtype.
absl::string_view SafetensorsDTypeName(ir::DType dtype);

struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets into the data buffer
  int64_t end = 0;
};

// At most this many tensors in one file: llvm::json holds the whole header
// parsed, about 5 KB per entry, so 600,000 small entries would take 3 GB.
// (A 70B-parameter model with its optimizer state has a few thousand.)
inline constexpr int64_t kMaxEntries = 65536;

// A parsed, validated file: its bytes in memory (Parse), or its header read
// from disk and its tensors read on demand (ReadSafetensorsFile), so that
// nothing the header names is read before it is needed. Entries are sorted
// by their offsets.
class SafetensorsFile {
 public:
  // Validates `bytes` (a whole file) by every rule above.
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes);

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // The entry called `name`, or nullptr.
  const SafetensorsEntry* Find(absl::string_view name) const;
  // The bytes of `entry` (end - begin of them); only for a file parsed from
  // memory (Parse).
  const char* Data(const SafetensorsEntry& entry) const;
  // Copies the bytes of `entry` to `dst` (end - begin of them), from memory
  // or from the file; DataLoss if the file no longer holds them.
  absl::Status Read(const SafetensorsEntry& entry, void* dst) const;
  // The bytes of all entries together.
  int64_t data_bytes() const { return data_bytes_; }

 private:
  friend absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(
      const std::string& path);
  // Everything but the data: `header` is the JSON text, `data_bytes` what
  // follows it in the file.
  static absl::StatusOr<SafetensorsFile> FromHeader(absl::string_view header,
                                                    uint64_t data_bytes);

  std::string bytes_;        // Parse: the whole file
  std::shared_ptr<int> fd_;  // ReadSafetensorsFile: the open file
  std::string path_;
  int64_t data_start_ = 0;
  int64_t data_bytes_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Reads and validates the file at `path`; errors name the path.
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path);

// JSON text from a file (a header, a metadata value such as an optimizer's
// param_groups) nests at most kMaxJsonDepth arrays and objects deep:
// llvm::json's parser recurses once per level, so deeper text would
// overflow the stack. Brackets inside strings do not count. Else
// InvalidArgument naming `what`.
inline constexpr int kMaxJsonDepth = 64;
absl::Status CheckJsonDepth(absl::string_view text, absl::string_view what);

// One tensor to write: `data` holds its little-endian, row-major bytes.
struct SafetensorsTensorView {
  std::string name;
  ir::DType dtype;
  std::vector<int64_t> shape;
  absl::string_view data;
};

// The file's bytes: header entries in the order given, the header padded
// with spaces to a multiple of 8 bytes (so that the buffer is aligned, as
// the reference writer does). Fails on duplicate or empty names, the
// reserved name __metadata__, and data whose size does not match the shape.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsTensorView>& tensors,
    const std::map<std::string, std::string>& metadata);

// Writes `bytes` to `path` through a temporary file renamed into place, so
// that a failed write never leaves a truncated checkpoint under `path`.
// A symlink at `path` is followed (its target is replaced, the link stays);
// a path that names anything but a regular file (a device such as
// /dev/null, a FIFO, a directory) is refused with FailedPrecondition and
// left as it was.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes);

}  // namespace stepjit::io

#endif  // STEPJIT_TRAINING_IO_SAFETENSORS_H_
