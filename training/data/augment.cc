// Per-sample crop and flip (see augment.h).
#include "training/data/augment.h"

#include <cstring>
#include <vector>

#include "ir/status.h"
#include "training/data/permutation.h"

namespace stepjit::data {
void CheckAugment(const ImageAugment& a, int64_t sample_numel) {
  if (!a.enabled()) return;
  SJ_REQUIRE(a.channels >= 1 && a.height >= 1 && a.width >= 1,
             "ImageAugment: expected channels, height and width >= 1, found ",
             a.channels, " x ", a.height, " x ", a.width);
  SJ_REQUIRE(a.padding >= 0 && a.padding <= (int64_t{1} << 20),
             "ImageAugment: expected padding in [0, 2^20], found ", a.padding);
  SJ_REQUIRE(a.channels * a.height * a.width == sample_numel,
             "ImageAugment: expected samples of channels x height x width = ",
             a.channels, " x ", a.height, " x ", a.width, " = ",
             a.channels * a.height * a.width, " values, found ", sample_numel);
}

AugmentDraw DrawAugment(const ImageAugment& a, uint64_t seed, int64_t epoch,
                        int64_t index) {
  const uint64_t key =
      SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(epoch)) ^
                 static_cast<uint64_t>(index));
  AugmentDraw d;
  if (a.padding > 0) {
    const uint64_t span = static_cast<uint64_t>(2 * a.padding + 1);
    d.dy = static_cast<int64_t>((key & 0xffffffffULL) % span);
    d.dx = static_cast<int64_t>(((key >> 32) & 0x7fffffffULL) % span);
  }
  d.flip = a.horizontal_flip && (key >> 63) != 0;
  return d;
}

void AugmentBatch(Tensor& x, absl::Span<const int64_t> indices,
                  const ImageAugment& a, uint64_t seed, int64_t epoch) {
  if (!a.enabled() || x.numel() == 0) return;
  SJ_REQUIRE(x.is_contiguous() && x.device().is_cpu(),
             "AugmentBatch: expected a contiguous CPU batch");
  SJ_REQUIRE(x.dim() >= 1 && x.size(0) == static_cast<int64_t>(indices.size()),
             "AugmentBatch: expected ", indices.size(), " samples, found ",
             x.dim() >= 1 ? x.size(0) : 0);
  const int64_t n = x.size(0), per = x.numel() / n;
  CheckAugment(a, per);
  const size_t elem = static_cast<size_t>(x.element_size());
  const int64_t h = a.height, w = a.width, p = a.padding;
  char* base = static_cast<char*>(x.data_ptr());
  std::vector<char> src(static_cast<size_t>(per) * elem);
  for (int64_t i = 0; i < n; ++i) {
    const AugmentDraw d = DrawAugment(a, seed, epoch, indices[i]);
    if (d.dy == p && d.dx == p && !d.flip) continue;  // unchanged
    char* sample = base + static_cast<size_t>(i * per) * elem;
    std::memcpy(src.data(), sample, src.size());
    for (int64_t c = 0; c < a.channels; ++c) {
      for (int64_t y = 0; y < h; ++y) {
        const int64_t sy = y + d.dy - p;  // row in the unpadded image
        char* out_row = sample + static_cast<size_t>((c * h + y) * w) * elem;
        if (sy < 0 || sy >= h) {
          std::memset(out_row, 0, static_cast<size_t>(w) * elem);
          continue;
        }
        const char* in_row =
            src.data() + static_cast<size_t>((c * h + sy) * w) * elem;
        for (int64_t xx = 0; xx < w; ++xx) {
          const int64_t cx = d.flip ? w - 1 - xx : xx;  // column of the crop
          const int64_t sx = cx + d.dx - p;
          char* o = out_row + static_cast<size_t>(xx) * elem;
          if (sx < 0 || sx >= w) {
            std::memset(o, 0, elem);
          } else {
            std::memcpy(o, in_row + static_cast<size_t>(sx) * elem, elem);
          }
        }
      }
    }
  }
}

}  // namespace stepjit::data
