// The Fashion-MNIST loader: two IDX files per split into a Dataset.
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/host_memory.h"
#include "training/data/idx.h"

namespace stepjit::data {
namespace {

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// `<dir>/<stem>.gz` if present, else the uncompressed `<dir>/<stem>`.
absl::StatusOr<std::string> FindIdxFile(const std::string& dir,
                                        const std::string& stem) {
  const std::string gz = absl::StrCat(dir, "/", stem, ".gz");
  const std::string plain = absl::StrCat(dir, "/", stem);
  std::error_code ec;
  if (std::filesystem::is_regular_file(gz, ec)) return gz;
  if (std::filesystem::is_regular_file(plain, ec)) return plain;
  return absl::NotFoundError(absl::StrCat(
      "Fashion-MNIST file not found: expected '", gz, "' or '", plain, "'"));
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train,
                                         FashionMnistOptions options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "Fashion-MNIST directory '", dir,
        "' does not exist. Install the "
        "Debian package dataset-fashion-mnist (apt-get install "
        "dataset-fashion-mnist), which puts the files in ",
        kFashionMnistDir,
        ", or point to a directory holding {train,t10k}-images-idx3-ubyte.gz "
        "and {train,t10k}-labels-idx1-ubyte.gz"));
  }
  const std::string prefix = train ? "train" : "t10k";
  ASSIGN_OR_RETURN(std::string images_path,
                   FindIdxFile(dir, prefix + "-images-idx3-ubyte"));
  ASSIGN_OR_RETURN(std::string labels_path,
                   FindIdxFile(dir, prefix + "-labels-idx1-ubyte"));
  // Both headers first: the dims must agree (and be Fashion-MNIST's)
  // before any image data is inflated, so a small .gz that claims
  // gigabytes is refused from its 16-byte header.
  ASSIGN_OR_RETURN(IdxArray images,
                   ReadIdx(images_path, {.header_only = true}));
  ASSIGN_OR_RETURN(IdxArray labels,
                   ReadIdx(labels_path, {.header_only = true}));
  if (images.type != IdxType::kU8 || images.dims.size() != 3 ||
      images.dims[1] != 28 || images.dims[2] != 28) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", images_path,
                     "': expected u8 images of dims [N, 28, 28], found "
                     "type 0x",
                     absl::Hex(static_cast<int>(images.type)), " dims ",
                     DimsString(images.dims)));
  }
  if (labels.type != IdxType::kU8 || labels.dims.size() != 1 ||
      labels.dims[0] != images.dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", labels_path, "': expected u8 labels of dims [",
                     images.dims[0], "] to match the images, found type 0x",
                     absl::Hex(static_cast<int>(labels.type)), " dims ",
                     DimsString(labels.dims)));
  }
  // The u8 pixels and their f32 copy (5 bytes per pixel) must fit.
  const double memory = PhysicalMemoryBytes();
  const std::vector<int64_t> header_dims = images.dims;
  ASSIGN_OR_RETURN(
      images, ReadIdx(images_path,
                      {.max_bytes =
                           memory > 0 ? static_cast<int64_t>(memory / 5) : 0}));
  ASSIGN_OR_RETURN(labels, ReadIdx(labels_path));
  if (images.dims != header_dims || labels.dims.size() != 1 ||
      labels.dims[0] != images.dims[0]) {
    return absl::DataLossError(absl::StrCat(
        "'", images_path, "' or '", labels_path, "' changed while being read"));
  }
  const int64_t n = images.dims[0];
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", images_path, "': holds no images (dims ", DimsString(images.dims),
        "); a dataset needs at least one example"));
  }
  constexpr int64_t kPixels = 28 * 28;
  Tensor x = empty({n, kPixels}, {.dtype = DType::kF32});
  Tensor y = empty({n}, {.dtype = DType::kI64});
  float scale = 1.0f / 255.0f;
  float shift = 0.0f;
  if (options.normalize) {
    scale /= kFashionMnistStd;
    shift = -kFashionMnistMean / kFashionMnistStd;
  }
  float* xs = x.data<float>();
  for (int64_t i = 0; i < n * kPixels; ++i) {
    xs[i] = static_cast<float>(images.bytes[i]) * scale + shift;
  }
  int64_t* ys = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (labels.bytes[i] > 9) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", labels_path, "': label ", i, " is ",
          static_cast<int>(labels.bytes[i]), ", expected a class in [0, 9]"));
    }
    ys[i] = labels.bytes[i];
  }
  return Dataset(std::move(x), std::move(y));
}

}  // namespace stepjit::data
