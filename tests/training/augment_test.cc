// DataLoader augmentation (training/data/augment.h): each sample's random
// crop from the zero-padded image and its horizontal flip against the same
// transformation written as a padded array, the draws' distribution, the
// same batches whatever the worker count, and clear errors.
#include "training/data/augment.h"

#include <map>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/expect_error.h"
#include "training/data/dataloader.h"

namespace stepjit {
namespace {

constexpr int64_t kC = 2, kH = 5, kW = 7;

// Image i's value at (c, y, x): distinct and never 0, so padding shows.
double Pixel(int64_t i, int64_t c, int64_t y, int64_t x) {
  return 1 + i * 1000 + c * 100 + y * 10 + x;
}

data::Dataset Images(int64_t n, bool flat) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t y = 0; y < kH; ++y)
        for (int64_t x = 0; x < kW; ++x) v.push_back(Pixel(i, c, y, x));
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i);
  const Shape shape = flat ? Shape{n, kC * kH * kW} : Shape{n, kC, kH, kW};
  return data::Dataset(from_vector(v, shape).to(DType::kF32),
                       from_vector(labels, {n}));
}

// torchvision's RandomCrop(padding) then RandomHorizontalFlip, written out:
// pad, take the window at (dy, dx), mirror it.
std::vector<double> Expected(int64_t i, const data::AugmentDraw& d, int64_t p) {
  const int64_t ph = kH + 2 * p, pw = kW + 2 * p;
  std::vector<double> padded(static_cast<size_t>(kC * ph * pw), 0.0);
  for (int64_t c = 0; c < kC; ++c)
    for (int64_t y = 0; y < kH; ++y)
      for (int64_t x = 0; x < kW; ++x)
        padded[(c * ph + y + p) * pw + x + p] = Pixel(i, c, y, x);
  std::vector<double> crop;
  for (int64_t c = 0; c < kC; ++c)
    for (int64_t y = 0; y < kH; ++y)
      for (int64_t x = 0; x < kW; ++x)
        crop.push_back(padded[(c * ph + y + d.dy) * pw + x + d.dx]);
  if (!d.flip) return crop;
  std::vector<double> out(crop.size());
  for (int64_t c = 0; c < kC; ++c)
    for (int64_t y = 0; y < kH; ++y)
      for (int64_t x = 0; x < kW; ++x)
        out[(c * kH + y) * kW + x] = crop[(c * kH + y) * kW + (kW - 1 - x)];
  return out;
}

TEST(AugmentTest, EachSampleIsItsCropAndFlip) {
  for (bool flat : {false, true}) {
    const data::ImageAugment aug{.channels = kC,
                                 .height = kH,
                                 .width = kW,
                                 .padding = 2,
                                 .horizontal_flip = true};
    data::DataLoader loader(
        Images(40, flat),
        {.batch_size = 8, .shuffle = true, .seed = 9, .augment = aug});
    int64_t changed = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (data::Batch& b : loader) {
        const std::vector<int64_t> ids = b.y.to_vector<int64_t>();
        const std::vector<float> x = b.x.contiguous().to_vector<float>();
        for (size_t k = 0; k < ids.size(); ++k) {
          const data::AugmentDraw d = data::DrawAugment(aug, 9, epoch, ids[k]);
          const std::vector<double> want = Expected(ids[k], d, 2);
          for (size_t j = 0; j < want.size(); ++j)
            ASSERT_EQ(x[k * want.size() + j], want[j])
                << "sample " << ids[k] << " epoch " << epoch << " value " << j;
          changed += d.dy != 2 || d.dx != 2 || d.flip;
        }
      }
    }
    EXPECT_GT(changed, 60);  // of 80 samples, nearly all move
  }
}

TEST(AugmentTest, DrawsAreUniformAndDifferByEpoch) {
  const data::ImageAugment aug{
      .height = 28, .width = 28, .padding = 3, .horizontal_flip = true};
  std::map<int64_t, int> dy, dx;
  int flips = 0, same_next_epoch = 0;
  constexpr int kN = 7000;
  for (int64_t i = 0; i < kN; ++i) {
    const data::AugmentDraw d = data::DrawAugment(aug, 1, 0, i);
    ++dy[d.dy];
    ++dx[d.dx];
    flips += d.flip;
    const data::AugmentDraw e = data::DrawAugment(aug, 1, 1, i);
    same_next_epoch += d.dy == e.dy && d.dx == e.dx && d.flip == e.flip;
  }
  ASSERT_EQ(dy.size(), 7u);
  ASSERT_EQ(dx.size(), 7u);
  for (const auto& [v, count] : dy) EXPECT_NEAR(count, kN / 7, 150) << v;
  for (const auto& [v, count] : dx) EXPECT_NEAR(count, kN / 7, 150) << v;
  EXPECT_NEAR(flips, kN / 2, 250);
  EXPECT_LT(same_next_epoch, kN / 50);  // 1 in 98 by chance
  // Without padding there is no crop; without flip, none.
  const data::AugmentDraw d = data::DrawAugment(
      {.height = 4, .width = 4, .horizontal_flip = true}, 1, 0, 3);
  EXPECT_EQ(d.dy, 0);
  EXPECT_EQ(d.dx, 0);
}

TEST(AugmentTest, WorkersGiveTheSameBatches) {
  const data::ImageAugment aug{.channels = kC,
                               .height = kH,
                               .width = kW,
                               .padding = 1,
                               .horizontal_flip = true};
  auto run = [&](int workers) {
    data::DataLoader loader(Images(50, true), {.batch_size = 7,
                                               .shuffle = true,
                                               .seed = 3,
                                               .num_workers = workers,
                                               .augment = aug});
    std::vector<float> all;
    for (data::Batch& b : loader) {
      const std::vector<float> x = b.x.to_vector<float>();
      all.insert(all.end(), x.begin(), x.end());
    }
    return all;
  };
  const std::vector<float> inline_batches = run(0);
  EXPECT_EQ(run(3), inline_batches);
  EXPECT_EQ(run(1), inline_batches);
}

TEST(AugmentTest, BadOptionsSayWhatWasExpected) {
  test::ExpectError(
      [] {
        data::DataLoader loader(Images(4, true),
                                {.augment = {.channels = 1,
                                             .height = 5,
                                             .width = 7,
                                             .horizontal_flip = true}});
      },
      {"ImageAugment", "1 x 5 x 7 = 35 values", "found 70"});
  test::ExpectError(
      [] {
        data::DataLoader loader(Images(4, true),
                                {.augment = {.channels = 2, .padding = 1}});
      },
      {"ImageAugment", "height and width >= 1", "2 x 0 x 0"});
}

}  // namespace
}  // namespace stepjit
