// Fisher-Yates over a 64-bit Mersenne Twister seeded by SplitMix64(seed,
// epoch).
#include "training/data/permutation.h"

#include <numeric>
#include <random>
#include <utility>

namespace stepjit::data {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

namespace {

// Uniform in [0, n) without modulo bias (Lemire, "Fast random integer
// generation in an interval", 2019). std::uniform_int_distribution is
// avoided because its output differs between standard libraries.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(rng()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = -n % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(rng()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(
      SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(epoch))));
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[UniformBelow(rng, i)]);
  }
  return order;
}

}  // namespace stepjit::data
