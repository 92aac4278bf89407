// Tests for the IDX reader, Fashion-MNIST loading, Dataset and DataLoader.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "devices/cuda/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/status.h"
#include "training/data/dataloader.h"
#include "training/data/dataset.h"
#include "training/data/distributed_sampler.h"
#include "training/data/idx.h"

namespace stepjit::data {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> IdxBytes(uint8_t type, std::vector<uint32_t> dims,
                              const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(d >> shift);
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("stepjit_data_") + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes,
                    bool gz) {
    const std::string path = (dir_ / name).string();
    if (gz) {
      gzFile f = gzopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      EXPECT_EQ(gzwrite(f, bytes.data(), bytes.size()),
                static_cast<int>(bytes.size()));
      gzclose(f);
    } else {
      FILE* f = std::fopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(DataFilesTest, ReadsPlainAndGzU8) {
  const std::vector<uint8_t> payload = {0, 1, 2, 3, 4, 255};
  for (bool gz : {false, true}) {
    const std::string path =
        Write(gz ? "a.idx.gz" : "a.idx", IdxBytes(0x08, {2, 3}, payload), gz);
    absl::StatusOr<IdxArray> a = ReadIdx(path);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->type, IdxType::kU8);
    EXPECT_EQ(a->dims, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->num_elements(), 6);
    EXPECT_EQ(a->bytes, payload);
  }
}

TEST_F(DataFilesTest, ConvertsBigEndianInts) {
  const std::vector<uint8_t> payload = {0x01, 0x02, 0x03, 0x04,
                                        0xff, 0xff, 0xff, 0xfe};
  const std::string path =
      Write("i.idx.gz", IdxBytes(0x0C, {2}, payload), true);
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->type, IdxType::kI32);
  ASSERT_EQ(a->bytes.size(), 8u);
  int32_t v[2];
  std::memcpy(v, a->bytes.data(), 8);
  EXPECT_EQ(v[0], 0x01020304);
  EXPECT_EQ(v[1], -2);
}

TEST_F(DataFilesTest, MissingFileNamesPath) {
  const std::string path = (dir_ / "nope.idx").string();
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("does not exist"));
}

TEST_F(DataFilesTest, BadMagicShowsFoundBytes) {
  const std::string path =
      Write("bad.idx", {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 0}, false);
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(a.status().message());
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("bad magic number"));
  EXPECT_THAT(msg, HasSubstr("found 12 34 08 01"));

  // An unknown element type is a bad magic too.
  const std::string path2 =
      Write("bad2.idx", {0, 0, 0x07, 0x01, 0, 0, 0, 0}, false);
  a = ReadIdx(path2);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("found 00 00 07 01"));
}

TEST_F(DataFilesTest, TruncatedDataSaysExpectedAndFound) {
  std::vector<uint8_t> payload(10, 7);
  for (bool gz : {false, true}) {
    const std::string path =
        Write(gz ? "t.idx.gz" : "t.idx", IdxBytes(0x08, {4, 4}, payload), gz);
    absl::StatusOr<IdxArray> a = ReadIdx(path);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
    const std::string msg(a.status().message());
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr("truncated"));
    EXPECT_THAT(msg, HasSubstr("[4, 4] need 16 data bytes"));
    EXPECT_THAT(msg, HasSubstr("found 10"));
  }
}

TEST_F(DataFilesTest, TruncatedHeaderAndTrailingBytes) {
  absl::StatusOr<IdxArray> a = ReadIdx(Write("h.idx", {0, 0, 8}, false));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("expected a 4-byte magic number, found 3 bytes"));

  a = ReadIdx(Write("d.idx", {0, 0, 8, 2, 0, 0, 0, 1, 0, 0}, false));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("expected 2 dims (8 bytes) after the magic, found 6"));

  a = ReadIdx(Write("x.idx", IdxBytes(0x08, {2}, {1, 2, 3}), false));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("trailing bytes"));
}

TEST_F(DataFilesTest, TornGzipIsAnError) {
  std::vector<uint8_t> payload(4096);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = (i * 7919) % 251;
  const std::string path =
      Write("g.idx.gz", IdxBytes(0x08, {4096}, payload), true);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr(path));
}

// A .gz cut just before (or inside) its 8-byte CRC and length trailer
// decompresses every data byte: only the trailer would have caught a
// corrupt one. Both cuts, and a flipped byte with the trailer cut, are
// refused.
TEST_F(DataFilesTest, AGzipWithoutItsTrailerIsAnError) {
  std::vector<uint8_t> payload(4096);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = (i * 7919) % 251;
  for (int cut : {8, 3, 1}) {
    const std::string path =
        Write("c.idx.gz", IdxBytes(0x08, {4096}, payload), true);
    const auto size = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, size - cut);
    absl::StatusOr<IdxArray> a = ReadIdx(path);
    ASSERT_FALSE(a.ok()) << "cut " << cut;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(a.status().message(),
              "IDX file '" + path +
                  "' is truncated: its gzip stream ends before its CRC trailer")
        << "cut " << cut;
  }
  // A flipped byte with the trailer intact fails the CRC check.
  const std::string path =
      Write("f.idx.gz", IdxBytes(0x08, {4096}, payload), true);
  std::vector<char> bytes(std::filesystem::file_size(path));
  std::ifstream(path, std::ios::binary)
      .read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
}

// A small file declaring a huge payload is refused before any allocation
// for it: a plain file holds its bytes, a .gz at most ~1032x its size.
TEST_F(DataFilesTest, ADeclaredSizeTheFileCannotHoldIsRefusedUpFront) {
  const std::vector<uint8_t> bytes =
      IdxBytes(0x08, {3u << 30}, std::vector<uint8_t>(4096, 0));
  const std::string gz = Write("big.idx.gz", bytes, true);
  absl::StatusOr<IdxArray> a = ReadIdx(gz);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      std::string(a.status().message()),
      HasSubstr(
          "declares dims [3221225472] (3221225472 data bytes), more than its "))
      << a.status().message();
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("bytes of gzip data can hold"));
  const std::string plain = Write("big.idx", bytes, false);
  a = ReadIdx(plain);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(
      std::string(a.status().message()),
      HasSubstr("need 3221225472 data bytes after the header, found 4096"))
      << a.status().message();
}

// A small .gz that claims gigabytes (a decompression bomb) is refused from
// its header: beyond the reader's limit, or, for Fashion-MNIST, when the
// pixels would not fit in memory or the labels' count does not match; no
// data is inflated, so each refusal is immediate.
TEST_F(DataFilesTest, GzipBombsAreRefusedFromTheirHeaders) {
  std::vector<uint8_t> zeros(1 << 20, 0);
  const std::string bomb =
      Write("bomb.idx.gz", IdxBytes(0x08, {4096, 1024}, zeros), true);
  absl::StatusOr<IdxArray> a = ReadIdx(bomb, {.max_bytes = 1 << 20});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("declares dims [4096, 1024] (4194304 data bytes), more "
                        "than the reader's limit (1048576 bytes); nothing was "
                        "inflated"))
      << a.status().message();
  a = ReadIdx(bomb, {.header_only = true});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dims, (std::vector<int64_t>{4096, 1024}));
  EXPECT_TRUE(a->bytes.empty());

  // 10^8 images of 28x28: 78 GB of pixels, five times that to train.
  Write("t10k-images-idx3-ubyte.gz", IdxBytes(0x08, {100000000, 28, 28}, zeros),
        true);
  Write("t10k-labels-idx1-ubyte.gz", IdxBytes(0x08, {100000000}, {}), true);
  absl::StatusOr<Dataset> d = LoadFashionMnist(dir_.string(), false);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted)
      << d.status();
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("more than the reader's limit"));
  // Labels that do not match are found before the images are inflated.
  Write("t10k-images-idx3-ubyte.gz", IdxBytes(0x08, {5000000, 28, 28}, zeros),
        true);
  Write("t10k-labels-idx1-ubyte.gz", IdxBytes(0x08, {7}, {}), true);
  d = LoadFashionMnist(dir_.string(), false);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(
      std::string(d.status().message()),
      HasSubstr("expected u8 labels of dims [5000000] to match the images"))
      << d.status().message();
}

TEST_F(DataFilesTest, AnEmptySplitIsAnError) {
  Write("t10k-images-idx3-ubyte", IdxBytes(0x08, {0, 28, 28}, {}), false);
  Write("t10k-labels-idx1-ubyte", IdxBytes(0x08, {0}, {}), false);
  absl::StatusOr<Dataset> d = LoadFashionMnist(dir_.string(), false);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(
      std::string(d.status().message()),
      HasSubstr("holds no images (dims [0, 28, 28]); a dataset needs at "
                "least one example"))
      << d.status().message();
}

TEST_F(DataFilesTest, MissingFashionMnistDirNamesPackage) {
  absl::StatusOr<Dataset> d =
      LoadFashionMnist((dir_ / "no_such_dir").string(), /*train=*/true);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  const std::string msg(d.status().message());
  EXPECT_THAT(msg, HasSubstr("no_such_dir"));
  EXPECT_THAT(msg, HasSubstr("dataset-fashion-mnist"));
  EXPECT_THAT(msg, HasSubstr("/usr/share/datasets/fashion-mnist"));

  d = LoadFashionMnist(dir_.string(), /*train=*/false);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("t10k-images-idx3-ubyte.gz"));
}

TEST_F(DataFilesTest, LoadsSmallFashionMnistSplit) {
  constexpr int kN = 3;
  std::vector<uint8_t> pixels(kN * 784);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = i % 256;
  Write("t10k-images-idx3-ubyte.gz", IdxBytes(0x08, {kN, 28, 28}, pixels),
        true);
  // Uncompressed labels are found too.
  Write("t10k-labels-idx1-ubyte", IdxBytes(0x08, {kN}, {9, 0, 4}), false);

  absl::StatusOr<Dataset> raw =
      LoadFashionMnist(dir_.string(), false, {.normalize = false});
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_EQ(raw->size(), kN);
  EXPECT_EQ(raw->inputs().shape(), (Shape{kN, 784}));
  EXPECT_EQ(raw->inputs().dtype(), DType::kF32);
  EXPECT_EQ(raw->targets().dtype(), DType::kI64);
  const float* x = raw->inputs().data<float>();
  for (size_t i = 0; i < pixels.size(); ++i) {
    ASSERT_NEAR(x[i], pixels[i] / 255.0, 1e-6) << i;
  }
  const int64_t* y = raw->targets().data<int64_t>();
  EXPECT_EQ(y[0], 9);
  EXPECT_EQ(y[1], 0);
  EXPECT_EQ(y[2], 4);

  absl::StatusOr<Dataset> norm = LoadFashionMnist(dir_.string(), false);
  ASSERT_TRUE(norm.ok()) << norm.status();
  const float* xn = norm->inputs().data<float>();
  for (size_t i = 0; i < pixels.size(); ++i) {
    const double want = (pixels[i] / 255.0 - 0.2860) / 0.3530;
    ASSERT_NEAR(xn[i], want, 1e-5) << i;
  }

  Write("t10k-labels-idx1-ubyte", IdxBytes(0x08, {kN}, {9, 10, 4}), false);
  absl::StatusOr<Dataset> bad = LoadFashionMnist(dir_.string(), false);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("label 1 is 10, expected a class in [0, 9]"));
}

TEST(FashionMnistTest, RealFilesLoad) {
  if (!std::filesystem::is_directory(kFashionMnistDir)) {
    GTEST_SKIP() << kFashionMnistDir << " is absent (dataset-fashion-mnist)";
  }
  for (bool train : {true, false}) {
    absl::StatusOr<Dataset> d =
        LoadFashionMnist(kFashionMnistDir, train, {.normalize = false});
    ASSERT_TRUE(d.ok()) << d.status();
    const int64_t n = train ? 60000 : 10000;
    ASSERT_EQ(d->size(), n);
    EXPECT_EQ(d->inputs().shape(), (Shape{n, 784}));
    const int64_t* y = d->targets().data<int64_t>();
    std::vector<int64_t> counts(10, 0);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(y[i] >= 0 && y[i] <= 9) << "label " << i << " = " << y[i];
      ++counts[y[i]];
    }
    // Fashion-MNIST is balanced: n / 10 per class.
    for (int64_t c : counts) EXPECT_EQ(c, n / 10);
    const float* x = d->inputs().data<float>();
    double total = 0;
    for (int64_t i = 0; i < n * 784; ++i) total += x[i];
    if (train) {
      EXPECT_NEAR(total / (n * 784), kFashionMnistMean, 5e-4);
    }
  }
}

// Sample i has inputs {i, i + 0.5} and target i.
Dataset Numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(i);
    x.push_back(i + 0.5f);
    y.push_back(i);
  }
  return Dataset(from_vector(x, {n, 2}), from_vector(y, {n}));
}

// The targets of each batch of one epoch; checks inputs match targets.
std::vector<std::vector<int64_t>> RunEpoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (Batch& b : loader) {
    const int64_t k = b.y.size(0);
    EXPECT_EQ(b.x.shape(), (Shape{k, 2}));
    EXPECT_TRUE(b.x.is_contiguous() && b.y.is_contiguous());
    const float* x = b.x.data<float>();
    const int64_t* y = b.y.data<int64_t>();
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_EQ(x[2 * i], static_cast<float>(y[i]));
      EXPECT_EQ(x[2 * i + 1], y[i] + 0.5f);
    }
    batches.emplace_back(y, y + k);
  }
  return batches;
}

TEST(DataLoaderTest, SameBatchesForAnyWorkerCount) {
  const Dataset ds = Numbered(103);
  std::vector<std::vector<std::vector<int64_t>>> runs;
  for (int workers : {0, 1, 4}) {
    DataLoader loader(ds, {.batch_size = 10,
                           .shuffle = true,
                           .seed = 7,
                           .num_workers = workers,
                           .prefetch = 3});
    auto e0 = RunEpoch(loader);
    auto e1 = RunEpoch(loader);
    e0.insert(e0.end(), e1.begin(), e1.end());
    runs.push_back(e0);
  }
  EXPECT_EQ(runs[0].size(), 22u);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// pin_memory on a machine without a CUDA device: a warning and ordinary
// batches, as PyTorch's DataLoader; with one (the emulator), pinned batches.
TEST(DataLoaderTest, PinMemoryWithoutADeviceWarnsAndDeliversUnpinnedBatches) {
  const Dataset ds = Numbered(23);
  ::testing::internal::CaptureStderr();
  DataLoader pinned(ds,
                    {.batch_size = 5, .num_workers = 2, .pin_memory = true});
  const std::string err = ::testing::internal::GetCapturedStderr();
  DataLoader plain(ds, {.batch_size = 5});
  EXPECT_EQ(RunEpoch(pinned), RunEpoch(plain));
  if (runtime::cuda::RequireBackend().ok()) {
    EXPECT_TRUE(pinned.options().pin_memory);
    return;
  }
  EXPECT_FALSE(pinned.options().pin_memory);
  EXPECT_NE(
      err.find("stepjit: warning: DataLoader: pin_memory=true but there is no "
               "CUDA device"),
      std::string::npos)
      << err;
  for (Batch& b : pinned) EXPECT_FALSE(b.x.is_pinned());
  // A device that is asked for is still an error.
  EXPECT_THROW(DataLoader(ds, {.batch_size = 5, .device = Device::cuda()}),
               Error);
}

TEST(DataLoaderTest, EverySampleExactlyOnce) {
  const Dataset ds = Numbered(103);
  for (int workers : {0, 4}) {
    for (bool drop_last : {false, true}) {
      DataLoader loader(ds, {.batch_size = 10,
                             .shuffle = true,
                             .seed = 1,
                             .drop_last = drop_last,
                             .num_workers = workers});
      auto batches = RunEpoch(loader);
      ASSERT_EQ(batches.size(), drop_last ? 10u : 11u);
      EXPECT_EQ(loader.num_batches(), static_cast<int64_t>(batches.size()));
      std::vector<int64_t> seen;
      for (const auto& b : batches) {
        seen.insert(seen.end(), b.begin(), b.end());
        EXPECT_EQ(b.size(), &b == &batches.back() && !drop_last ? 3u : 10u);
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end())
          << "a sample was repeated";
      if (!drop_last) {
        std::vector<int64_t> all(103);
        std::iota(all.begin(), all.end(), 0);
        EXPECT_EQ(seen, all);
      } else {
        EXPECT_EQ(seen.size(), 100u);
      }
    }
  }
}

TEST(DataLoaderTest, EpochsDifferButReplay) {
  const Dataset ds = Numbered(50);
  DataLoader loader(ds, {.batch_size = 50, .shuffle = true, .seed = 3});
  const auto e0 = RunEpoch(loader);
  const auto e1 = RunEpoch(loader);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(loader.epoch(), 2);
  loader.set_epoch(0);
  EXPECT_EQ(RunEpoch(loader), e0);

  DataLoader same_seed(ds, {.batch_size = 50, .shuffle = true, .seed = 3});
  EXPECT_EQ(RunEpoch(same_seed), e0);
  DataLoader other_seed(ds, {.batch_size = 50, .shuffle = true, .seed = 4});
  EXPECT_NE(RunEpoch(other_seed), e0);

  DataLoader in_order(ds, {.batch_size = 50});
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(RunEpoch(in_order), std::vector<std::vector<int64_t>>{identity});
}

TEST(DataLoaderTest, BreakingEarlyDoesNotHang) {
  const Dataset ds = Numbered(1000);
  for (int round = 0; round < 50; ++round) {
    DataLoader loader(
        ds,
        {.batch_size = 7, .shuffle = true, .num_workers = 4, .prefetch = 2});
    int seen = 0;
    for (Batch& b : loader) {
      EXPECT_EQ(b.y.size(0), 7);
      if (++seen == round % 3 + 1) break;
    }
    // A second epoch after the abandoned one starts cleanly.
    auto it = loader.begin();
    ASSERT_TRUE(it != loader.end());
  }
}

TEST(DataLoaderTest, EmptyEpochs) {
  DataLoader small(Numbered(5),
                   {.batch_size = 8, .drop_last = true, .num_workers = 2});
  EXPECT_EQ(small.num_batches(), 0);
  EXPECT_TRUE(RunEpoch(small).empty());
  DataLoader none(Numbered(10).Subset(0), {.batch_size = 4, .num_workers = 2});
  EXPECT_TRUE(RunEpoch(none).empty());
}

TEST(DataLoaderTest, RejectsBadOptions) {
  const Dataset ds = Numbered(4);
  auto message = [&](DataLoaderOptions o) -> std::string {
    try {
      DataLoader loader(ds, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message({.batch_size = 0}),
            "DataLoader: batch_size must be > 0, got 0");
  EXPECT_EQ(message({.num_workers = -2}),
            "DataLoader: num_workers must be >= 0, got -2");
  EXPECT_EQ(message({.prefetch = 0}),
            "DataLoader: prefetch must be >= 1, got 0");
}

// Three simulated ranks, each with its own sampler and loader over the same
// dataset: disjoint shards that cover it, the same batch count everywhere,
// and set_epoch reaching the sampler.
TEST(DataLoaderTest, DistributedSamplerShardsTheEpochs) {
  const Dataset ds =
      Numbered(50);  // 17 per rank (one padded), 5 batches of <= 4
  std::vector<std::shared_ptr<DistributedSampler>> samplers;
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (int r = 0; r < 3; ++r) {
    samplers.push_back(std::make_shared<DistributedSampler>(
        50,
        DistributedSamplerOptions{.num_replicas = 3, .rank = r, .seed = 11}));
    loaders.push_back(std::make_unique<DataLoader>(
        ds, DataLoaderOptions{
                .batch_size = 4, .num_workers = r, .sampler = samplers[r]}));
  }
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> all;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(loaders[r]->num_batches(), 5);
      const auto batches = RunEpoch(*loaders[r]);
      EXPECT_EQ(samplers[r]->epoch(), epoch);
      ASSERT_EQ(batches.size(), 5u);
      std::vector<int64_t> mine;
      for (const auto& b : batches) mine.insert(mine.end(), b.begin(), b.end());
      EXPECT_EQ(mine, samplers[r]->Indices(epoch));
      EXPECT_EQ(mine, loaders[r]->EpochOrder(epoch));
      all.insert(all.end(), mine.begin(), mine.end());
    }
    ASSERT_EQ(all.size(), 51u);
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    EXPECT_EQ(all.size(), 50u);
  }
  EXPECT_NE(samplers[0]->Indices(0), samplers[0]->Indices(1));
  // set_epoch on the loader sets the sampler's too, and the next epoch is it.
  loaders[1]->set_epoch(7);
  EXPECT_EQ(samplers[1]->epoch(), 7);
  const auto batches = RunEpoch(*loaders[1]);
  std::vector<int64_t> mine;
  for (const auto& b : batches) mine.insert(mine.end(), b.begin(), b.end());
  EXPECT_EQ(mine, samplers[1]->Indices(7));
  // drop_last on the loader applies to the shard: 17 / 4 -> 4 batches.
  DataLoader dropping(
      ds, {.batch_size = 4, .drop_last = true, .sampler = samplers[0]});
  EXPECT_EQ(dropping.num_batches(), 4);
  EXPECT_EQ(RunEpoch(dropping).size(), 4u);
}

TEST(DataLoaderTest, RejectsASamplerWithShuffleOrAnotherDatasetSize) {
  const Dataset ds = Numbered(10);
  auto sampler = std::make_shared<DistributedSampler>(
      10, DistributedSamplerOptions{.num_replicas = 2, .rank = 0});
  try {
    DataLoader loader(ds,
                      {.batch_size = 2, .shuffle = true, .sampler = sampler});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("shuffle=true and a sampler both order the samples"));
  }
  auto other = std::make_shared<DistributedSampler>(
      12, DistributedSamplerOptions{.num_replicas = 2, .rank = 0});
  try {
    DataLoader loader(ds, {.batch_size = 2, .sampler = other});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(
        e.what(),
        HasSubstr("the sampler was made for a dataset of 12 samples, but the "
                  "dataset has 10"));
  }
}

TEST(DatasetTest, GetSubsetAndErrors) {
  const Dataset ds = Numbered(10);
  const std::vector<int64_t> idx = {9, 0, 9};
  Batch b = ds.Get(idx);
  EXPECT_EQ(b.y.to_vector<int64_t>(), idx);
  EXPECT_EQ(b.x.to_vector<float>(),
            (std::vector<float>{9, 9.5f, 0, 0.5f, 9, 9.5f}));

  const Dataset sub = ds.Subset(4);
  EXPECT_EQ(sub.size(), 4);
  EXPECT_EQ(sub.targets().to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 2, 3}));

  try {
    ds.Get(std::vector<int64_t>{10});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(
        std::string(e.what()),
        HasSubstr("index 10 is out of range for a dataset of 10 samples"));
  }
  EXPECT_THROW(ds.Subset(11), Error);
  EXPECT_THROW(Dataset(from_vector(std::vector<float>{1, 2}, {2}),
                       from_vector(std::vector<int64_t>{1, 2, 3}, {3})),
               Error);
}

}  // namespace
}  // namespace stepjit::data
