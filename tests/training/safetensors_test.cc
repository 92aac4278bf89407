// The safetensors reader refuses every hostile file with a message naming
// what was expected and found (one case per rule of training/io/safetensors.h),
// and reads what the writer writes back exactly.
#include "training/io/safetensors.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stepjit::io {
namespace {

using ::testing::HasSubstr;

// 8-byte little-endian length, the header, then `data`.
std::string File(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string LengthOnly(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

std::string ErrorOf(const std::string& bytes) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(bytes);
  EXPECT_FALSE(f.ok()) << "accepted a bad file";
  return f.ok() ? "" : std::string(f.status().message());
}

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

TEST(SafetensorsTest, ReadsAValidFileWithPaddingAndMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}    )";
  int64_t seven = 7;
  const std::string data =
      std::string(reinterpret_cast<const char*>(&seven), 8) +
      Floats({1.5f, -2});
  absl::StatusOr<SafetensorsFile> f =
      SafetensorsFile::Parse(File(header, data));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->entries().size(), 2u);
  EXPECT_EQ(f->entries()[0].name, "a");  // sorted by offset
  EXPECT_EQ(f->entries()[0].dtype.ir, ir::DType::kI64);
  EXPECT_TRUE(f->entries()[0].shape.empty());
  const SafetensorsEntry* b = f->Find("b");
  ASSERT_NE(b, nullptr);
  float values[2];
  std::memcpy(values, f->Data(*b), 8);
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.0f);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(SafetensorsTest, WriterOutputReadsBackAndIsAligned) {
  const std::string w = Floats({1, 2, 3, 4, 5, 6});
  const std::string flags("\x01\x00\x01", 3);
  absl::StatusOr<std::string> bytes =
      SerializeSafetensors({{"layer.weight", ir::DType::kF32, {2, 3}, w},
                            {"mask \"quoted\"", ir::DType::kBool, {3}, flags},
                            {"empty", ir::DType::kF16, {0, 5}, ""}},
                           {{"k", "v"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t n = 0;
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data buffer starts 8-byte aligned";
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  const SafetensorsEntry* e = f->Find("layer.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::string(f->Data(*e), e->end - e->begin), w);
  const SafetensorsEntry* m = f->Find("mask \"quoted\"");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(std::string(f->Data(*m), 3), flags);
  EXPECT_EQ(f->metadata().at("k"), "v");
}

TEST(SafetensorsTest, WriterRefusesBadNamesAndSizes) {
  EXPECT_THAT(std::string(SerializeSafetensors(
                              {{"a", ir::DType::kF32, {2}, "abcd"}}, {})
                              .status()
                              .message()),
              HasSubstr("tensor 'a': shape [2] needs 8 bytes, got 4"));
  EXPECT_THAT(
      std::string(SerializeSafetensors({{"a", ir::DType::kF32, {1}, "abcd"},
                                        {"a", ir::DType::kF32, {1}, "abcd"}},
                                       {})
                      .status()
                      .message()),
      HasSubstr("two tensors are named 'a'"));
  EXPECT_FALSE(
      SerializeSafetensors({{"__metadata__", ir::DType::kF32, {1}, "abcd"}}, {})
          .ok());
}

TEST(SafetensorsTest, TooShortForTheLength) {
  EXPECT_THAT(ErrorOf("abc"),
              HasSubstr("the file has 3 bytes, fewer than the 8"));
}

TEST(SafetensorsTest, HeaderLengthBeyondTheFile) {
  EXPECT_THAT(
      ErrorOf(LengthOnly(100) + "{}"),
      HasSubstr(
          "header length 100 runs past the end of the file (2 bytes follow"));
}

TEST(SafetensorsTest, AbsurdHeaderLengthAllocatesNothing) {
  EXPECT_THAT(ErrorOf(LengthOnly(uint64_t{1} << 62) + "{}"),
              HasSubstr("exceeds the limit of 100000000 bytes"));
}

TEST(SafetensorsTest, BadJson) {
  EXPECT_THAT(ErrorOf(File(R"({"a": {"dtype": "F32",)")),
              HasSubstr("the header is not valid JSON"));
  EXPECT_THAT(ErrorOf(File("[1, 2]")), HasSubstr("does not start with '{'"));
  EXPECT_THAT(ErrorOf(File("{\"a\xff\": 1}")), HasSubstr("not valid JSON"));
}

TEST(SafetensorsTest, DeepNestingIsRefusedBeforeParsing) {
  EXPECT_THAT(ErrorOf(File("{\"a\":" + std::string(100000, '['))),
              HasSubstr("nests deeper than 64 levels"));
}

TEST(SafetensorsTest, UnknownDType) {
  EXPECT_THAT(
      ErrorOf(
          File(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})",
               std::string(16, '\0'))),
      HasSubstr("tensor 'w': unknown dtype 'F128' (expected one of BOOL, U8"));
}

TEST(SafetensorsTest, ShapeDoesNotMatchOffsets) {
  EXPECT_THAT(
      ErrorOf(
          File(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
               std::string(20, '\0'))),
      HasSubstr("tensor 'w': shape [2, 3] of F32 needs 24 bytes, but "
                "data_offsets [0, 20] "
                "hold 20"));
}

TEST(SafetensorsTest, HugeShapeOverflowsWithoutAllocating) {
  EXPECT_THAT(
      ErrorOf(File(
          R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
          std::string(8, '\0'))),
      HasSubstr("tensor 'w': shape [4294967296, 4294967296] has more than "
                "2^56 elements"));
}

TEST(SafetensorsTest, EmptyShapeWithHugeDimsIsRefused) {
  EXPECT_THAT(
      ErrorOf(File(
          R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})",
          "")),
      HasSubstr("tensor 'w': shape [0, 4611686018427387904, 4] has a 0 dim, "
                "but its other dims multiply to more than 2^56"));
}

TEST(SafetensorsTest, BadShapesAndOffsets) {
  EXPECT_THAT(
      ErrorOf(File(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                   std::string(4, '\0'))),
      HasSubstr("tensor 'w': shape[0]: expected a non-negative integer below "
                "2^63 - 1, got -1"));
  EXPECT_THAT(
      ErrorOf(
          File(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
               std::string(4, '\0'))),
      HasSubstr(
          "shape[0]: expected a non-negative integer below 2^63 - 1, got 1.5"));
  EXPECT_THAT(
      ErrorOf(File(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})")),
      HasSubstr("expected 'data_offsets' as an array [begin, end]"));
  EXPECT_THAT(ErrorOf(File(
                  R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})")),
              HasSubstr("data_offsets [4, 0] end before they begin"));
  EXPECT_THAT(ErrorOf(File(R"({"w":{"dtype":"F32","shape":[1]}})")),
              HasSubstr("expected 'data_offsets'"));
  EXPECT_THAT(
      ErrorOf(File(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd")),
      HasSubstr("missing string field 'dtype'"));
  EXPECT_THAT(
      ErrorOf(File(
          R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
          "abcd")),
      HasSubstr("unexpected field 'x'"));
  EXPECT_THAT(ErrorOf(File(R"({"w":[1]})")),
              HasSubstr("tensor 'w': expected an object"));
}

TEST(SafetensorsTest, OverlappingOffsets) {
  EXPECT_THAT(
      ErrorOf(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   std::string(12, '\0'))),
      HasSubstr("tensor 'b' begins at byte 4 but 'a' ends at 8 (overlap)"));
}

TEST(SafetensorsTest, HoleBetweenTensors) {
  EXPECT_THAT(
      ErrorOf(File(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                   std::string(12, '\0'))),
      HasSubstr("tensor 'b' begins at byte 8 but 'a' ends at 4 (a hole)"));
  EXPECT_THAT(
      ErrorOf(File(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   std::string(8, '\0'))),
      HasSubstr("the data buffer begins at 0 (a hole)"));
}

TEST(SafetensorsTest, OffsetsOutOfRange) {
  EXPECT_THAT(
      ErrorOf(File(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                   std::string(8, '\0'))),
      HasSubstr("data_offsets [0, 16] lie outside the data buffer of 8 bytes"));
  EXPECT_THAT(
      ErrorOf(File(
          R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551616]}})")),
      HasSubstr("expected a non-negative integer below 2^63 - 1"));
}

TEST(SafetensorsTest, TrailingBytes) {
  EXPECT_THAT(
      ErrorOf(File(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                   std::string(6, '\0'))),
      HasSubstr(
          "the tensors cover 4 bytes of a data buffer of 6 (trailing bytes)"));
}

TEST(SafetensorsTest, DuplicateNames) {
  EXPECT_THAT(
      ErrorOf(File(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   std::string(8, '\0'))),
      HasSubstr("the header names 'a' twice"));
  // An escape names the same string.
  EXPECT_THAT(
      ErrorOf(File(
          R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
          R"("\u0061":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})")),
      HasSubstr("the header names 'a' twice"));
}

TEST(SafetensorsTest, MetadataMustBeStrings) {
  EXPECT_THAT(ErrorOf(File(R"({"__metadata__":{"epoch":3}})")),
              HasSubstr("__metadata__['epoch']: expected a string value"));
  EXPECT_THAT(ErrorOf(File(R"({"__metadata__":[]})")),
              HasSubstr("__metadata__: expected an object of strings"));
}

TEST(SafetensorsTest, EveryTruncationOfAValidFileIsRefused) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(
      {{"w", ir::DType::kF32, {2, 2}, Floats({1, 2, 3, 4})},
       {"b", ir::DType::kF32, {2}, Floats({5, 6})}},
      {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok());
  for (size_t n = 0; n < bytes->size(); ++n) {
    EXPECT_FALSE(SafetensorsFile::Parse(bytes->substr(0, n)).ok())
        << "accepted " << n << " bytes";
  }
  EXPECT_TRUE(SafetensorsFile::Parse(*bytes).ok());
}

TEST(SafetensorsTest, MissingFileNamesThePath) {
  absl::StatusOr<SafetensorsFile> f =
      ReadSafetensorsFile("/nonexistent/x.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()),
              HasSubstr("cannot open '/nonexistent/x.safetensors'"));
}

TEST(SafetensorsTest, DirectoryIsNotAFile) {
  absl::StatusOr<SafetensorsFile> f = ReadSafetensorsFile("/tmp");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()),
              HasSubstr("cannot open '/tmp': not a regular file"));
}

// More entries than any model has: refused from the header scan, before
// llvm::json holds them all (600,000 took 2.9 GB).
TEST(SafetensorsTest, TooManyEntriesAreRefusedBeforeParsing) {
  std::string header = "{";
  for (int i = 0; i < kMaxEntries + 1; ++i)
    absl::StrAppend(&header, i == 0 ? "" : ",", "\"t", i,
                    R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})");
  header += "}";
  EXPECT_THAT(ErrorOf(File(header)), HasSubstr("more than 65536 entries"));
}

// From a path, only the header is read; tensors are read when asked for.
// A sparse file whose header names a terabyte costs nothing to open, and a
// tensor the file no longer holds (truncated since) is a DataLoss error.
TEST(SafetensorsTest, FilesAreReadByRangeNotWhole) {
  const std::string path = ::testing::TempDir() + "/sparse.safetensors";
  const int64_t tib = int64_t{1} << 40;
  const std::string header =
      absl::StrCat(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)",
                   R"("huge":{"dtype":"F32","shape":[)", tib / 4,
                   R"(],"data_offsets":[8,)", tib + 8, "]}}");
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string head = File(header, Floats({1.5f, -2}));
    std::fwrite(head.data(), 1, head.size(), f);
    std::fclose(f);
  }
  ASSERT_EQ(
      truncate(path.c_str(), static_cast<off_t>(8 + header.size() + 8 + tib)),
      0);
  absl::StatusOr<SafetensorsFile> f = ReadSafetensorsFile(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->data_bytes(), tib + 8);
  float a[2] = {};
  ASSERT_TRUE(f->Read(*f->Find("a"), a).ok());
  EXPECT_EQ(a[0], 1.5f);
  EXPECT_EQ(a[1], -2.0f);
  // Truncated after the header was read: the tensor's bytes are gone.
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(8 + header.size() + 4)),
            0);
  const absl::Status gone = f->Read(*f->Find("a"), a);
  EXPECT_EQ(gone.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(gone.message()),
              HasSubstr("reading tensor 'a' (8 bytes at offset"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace stepjit::io
