// Counter-based Philox4x32-10 random streams with explicit seed and offset.
#ifndef STEPJIT_RUNTIME_GENERATOR_H_
#define STEPJIT_RUNTIME_GENERATOR_H_

#include <array>
#include <cstdint>
#include <mutex>

namespace stepjit {

// Philox4x32-10 (Salmon et al., SC'11): block `counter` under key `seed`
// yields four 32-bit words. Element i of a draw with offset o uses counter
// (o + i) / 4, word (o + i) % 4, so any slice of a stream can be computed
// independently (threads, replays and devices agree).
std::array<uint32_t, 4> Philox(uint64_t seed, uint64_t counter);
// Uniform float in [0, 1) from 24 random bits, and a standard normal by
// Box-Muller from two uniforms.
float UniformFromBits(uint32_t bits);
uint32_t PhiloxWord(uint64_t seed, uint64_t index);

// A seed plus a running offset; each draw of n values reserves n counters.
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  uint64_t offset() const;
  void set_offset(uint64_t offset);
  // Returns the offset to use for a draw of `n` values and advances past it.
  uint64_t Reserve(uint64_t n);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_GENERATOR_H_
