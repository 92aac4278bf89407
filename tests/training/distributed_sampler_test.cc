// data::DistributedSampler with simulated ranks: every rank's sampler is
// built explicitly (rank 0..R-1 of R), and the shards are checked against
// the definition: one permutation per (seed, epoch), padded from its start
// or cut to a multiple of R, position i going to rank i % R.
#include "training/data/distributed_sampler.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/expect_error.h"
#include "training/data/permutation.h"

namespace stepjit::data {
namespace {

using Indices = std::vector<int64_t>;

std::vector<Indices> Shards(int64_t n, int ranks,
                            DistributedSamplerOptions options,
                            int64_t epoch = 0) {
  std::vector<Indices> shards;
  for (int r = 0; r < ranks; ++r) {
    options.num_replicas = ranks;
    options.rank = r;
    DistributedSampler sampler(n, options);
    sampler.set_epoch(epoch);
    shards.push_back(sampler.indices());
  }
  return shards;
}

// How often each index occurs over all shards.
std::map<int64_t, int> Counts(const std::vector<Indices>& shards) {
  std::map<int64_t, int> counts;
  for (const Indices& s : shards) {
    for (int64_t i : s) ++counts[i];
  }
  return counts;
}

TEST(DistributedSamplerTest, DivisibleShardsPartitionTheDataset) {
  const auto shards = Shards(100, 4, {.seed = 5});
  std::map<int64_t, int> counts = Counts(shards);
  ASSERT_EQ(counts.size(), 100u);
  EXPECT_EQ(counts.begin()->first, 0);
  EXPECT_EQ(counts.rbegin()->first, 99);
  for (const auto& [index, count] : counts) EXPECT_EQ(count, 1) << index;
  for (const Indices& s : shards) EXPECT_EQ(s.size(), 25u);
  // The shards interleave one permutation: rank r holds its positions r, r+4,
  // ...
  const Indices perm = EpochPermutation(100, 5, 0);
  for (int r = 0; r < 4; ++r) {
    for (size_t k = 0; k < shards[r].size(); ++k)
      EXPECT_EQ(shards[r][k], perm[4 * k + r]);
  }
}

TEST(DistributedSamplerTest, PaddingRepeatsTheStartOfThePermutation) {
  // 103 samples over 4 ranks: 26 each, the permutation's first sample twice.
  const auto shards = Shards(103, 4, {.seed = 1});
  for (const Indices& s : shards) EXPECT_EQ(s.size(), 26u);
  const std::map<int64_t, int> counts = Counts(shards);
  ASSERT_EQ(counts.size(), 103u);
  const Indices perm = EpochPermutation(103, 1, 0);
  for (const auto& [index, count] : counts) {
    EXPECT_EQ(count, index == perm[0] ? 2 : 1) << index;
  }
  EXPECT_EQ(shards[3].back(), perm[0]);  // position 103 = 3 (mod 4)

  // In order, 10 over 4: 0..9 then 0, 1.
  const auto ordered = Shards(10, 4, {.shuffle = false});
  EXPECT_EQ(ordered,
            (std::vector<Indices>{{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}}));
  // More ranks than samples: the order repeats as often as needed.
  EXPECT_EQ(Shards(2, 5, {.shuffle = false}),
            (std::vector<Indices>{{0}, {1}, {0}, {1}, {0}}));
}

TEST(DistributedSamplerTest, DropLastCutsTheTail) {
  const auto shards = Shards(103, 4, {.seed = 1, .drop_last = true});
  const std::map<int64_t, int> counts = Counts(shards);
  EXPECT_EQ(counts.size(), 100u);
  for (const auto& [index, count] : counts) EXPECT_EQ(count, 1) << index;
  for (const Indices& s : shards) EXPECT_EQ(s.size(), 25u);
  // The three cut samples are the permutation's last three.
  const Indices perm = EpochPermutation(103, 1, 0);
  for (int k = 100; k < 103; ++k) EXPECT_EQ(counts.count(perm[k]), 0u);
  EXPECT_EQ(Shards(10, 4, {.shuffle = false, .drop_last = true}),
            (std::vector<Indices>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // Fewer samples than ranks: every shard is empty.
  for (const Indices& s : Shards(3, 4, {.drop_last = true}))
    EXPECT_TRUE(s.empty());
}

TEST(DistributedSamplerTest, EpochsReorderAndSeedsReproduce) {
  const auto e0 = Shards(64, 2, {.seed = 9}, 0);
  const auto e1 = Shards(64, 2, {.seed = 9}, 1);
  EXPECT_NE(e0[0], e1[0]);
  EXPECT_NE(e0[1], e1[1]);
  // Each epoch still partitions the dataset.
  EXPECT_EQ(Counts(e1).size(), 64u);
  EXPECT_EQ(Shards(64, 2, {.seed = 9}, 1),
            e1);  // separately built samplers agree
  EXPECT_NE(Shards(64, 2, {.seed = 10}, 1), e1);
  DistributedSampler sampler(64, {.num_replicas = 2, .rank = 1, .seed = 9});
  EXPECT_EQ(sampler.epoch(), 0);
  EXPECT_EQ(sampler.indices(), e0[1]);
  sampler.set_epoch(1);
  EXPECT_EQ(sampler.epoch(), 1);
  EXPECT_EQ(sampler.indices(), e1[1]);
  EXPECT_EQ(sampler.Indices(0), e0[1]);
  // Without shuffle every epoch is the same.
  EXPECT_EQ(Shards(64, 2, {.shuffle = false}, 0),
            Shards(64, 2, {.shuffle = false}, 7));
}

TEST(DistributedSamplerTest, SizesAndDefaults) {
  DistributedSampler sampler(103, {.num_replicas = 4, .rank = 2});
  EXPECT_EQ(sampler.num_samples(), 26);
  EXPECT_EQ(sampler.total_size(), 104);
  EXPECT_EQ(sampler.dataset_size(), 103);
  EXPECT_EQ(sampler.num_replicas(), 4);
  EXPECT_EQ(sampler.rank(), 2);
  // Unset, num_replicas and rank come from dist:: (one process here).
  DistributedSampler single(7);
  EXPECT_EQ(single.num_replicas(), 1);
  EXPECT_EQ(single.rank(), 0);
  Indices sorted = single.indices();
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (Indices{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(DistributedSampler(0, {.num_replicas = 3, .rank = 1}).indices(),
            Indices{});
}

TEST(DistributedSamplerTest, RejectsBadRanks) {
  using test::ExpectError;
  ExpectError([] { DistributedSampler(10, {.num_replicas = 2, .rank = 2}); },
              {"expected a rank in [0, 2), got 2"});
  ExpectError([] { DistributedSampler(10, {.num_replicas = 2, .rank = -1}); },
              {"expected a rank in [0, 2), got -1"});
  ExpectError([] { DistributedSampler(10, {.num_replicas = 0, .rank = 0}); },
              {"expected num_replicas > 0, got 0"});
  ExpectError([] { DistributedSampler(-1, {.num_replicas = 1, .rank = 0}); },
              {"expected a dataset size >= 0, got -1"});
}

}  // namespace
}  // namespace stepjit::data
