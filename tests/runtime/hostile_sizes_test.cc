// Tensor sizes a user can ask for that memory cannot hold: a clear
// stepjit::Error naming the shape or the bytes, never a wrapped size, a
// heap overflow or a bare std::bad_alloc.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "runtime/thread_pool.h"

namespace stepjit {
namespace {

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a stepjit::Error: ") + e.what();
  }
  return "no error";
}

TEST(HostileSizesTest, OverflowingShapesAreRefusedByName) {
  const int64_t k2p62 = int64_t{1} << 62;
  // 2^62 + 1 elements: 4 bytes each wrap to 4 bytes in int64.
  const std::string zeros_error = ErrorOf([&] { zeros({k2p62 + 1}); });
  EXPECT_NE(zeros_error.find("has more than 2^56 elements"), std::string::npos)
      << zeros_error;
  EXPECT_NE(ErrorOf([&] {
              empty({k2p62, 4});
            }).find("[4611686018427387904, 4]"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              empty({3, -2});
            }).find("negative size -2"),
            std::string::npos);
  // A valid tensor reshaped or expanded to an overflowing shape.
  const Tensor x = zeros({4, 1});
  const std::string reshape_error = ErrorOf([&] { x.reshape({k2p62, 4}); });
  EXPECT_NE(reshape_error.find("has more than 2^56 elements"),
            std::string::npos)
      << reshape_error;
  const std::string expand_error = ErrorOf([&] {
    x.expand({k2p62, 4, k2p62});
  });
  EXPECT_NE(expand_error.find("has more than 2^56 elements"), std::string::npos)
      << expand_error;
}

// A 0-element shape whose other dims multiply past 2^56: no elements, but
// its strides and views would overflow. Every factory and layer refuses it
// with the shape named, and nothing aborts.
TEST(HostileSizesTest, EmptyShapesWithHugeDimsAreRefusedEverywhere) {
  const int64_t k2p62 = int64_t{1} << 62;
  const std::string kWhy = "its other dims multiply to more than 2^56";
  struct Case {
    const char* what;
    std::function<void()> fn;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"empty",
       [&] {
         empty({0, k2p62, 4});
       },
       nullptr},
      {"zeros",
       [&] {
         zeros({4, k2p62, 0});
       },
       nullptr},
      {"full",
       [&] {
         full({0, k2p62, 4}, 1.0);
       },
       nullptr},
      {"randn",
       [&] {
         randn({3, k2p62});
       },
       "has more than 2^56 elements"},
      {"randn empty",
       [&] {
         randn({0, k2p62, 4});
       },
       nullptr},
      {"rand empty",
       [&] {
         rand({k2p62, 0, 4});
       },
       nullptr},
      {"randint empty",
       [&] {
         randint(0, 3, {0, k2p62, 4}, {.dtype = DType::kI64});
       },
       nullptr},
      {"reshape",
       [&] {
         zeros({0}).reshape({0, k2p62, 4});
       },
       nullptr},
      {"expand",
       [&] {
         zeros({0, 1, 1}).expand({0, k2p62, 4});
       },
       nullptr},
      {"Embedding", [&] { nn::Embedding(39, k2p62); },
       "has more than 2^56 elements"},
      {"Linear", [&] { nn::Linear(k2p62, 3); }, "has more than 2^56 elements"},
  };
  for (const Case& c : cases) {
    const std::string error = ErrorOf(c.fn);
    EXPECT_NE(error.find(c.expect != nullptr ? c.expect : kWhy),
              std::string::npos)
        << c.what << ": " << error;
  }
  // At the limit it is fine: 2^56 elements' worth of non-zero dims.
  EXPECT_EQ(empty({0, int64_t{1} << 28, int64_t{1} << 28}).numel(), 0);
}

TEST(HostileSizesTest, ATensorLargerThanMemoryIsAnErrorWithItsSize) {
  // 2^52 f32 elements: 16 PiB, valid as a shape, more than any machine has.
  const std::string error = ErrorOf([] { empty({int64_t{1} << 52}); });
  EXPECT_EQ(
      error.rfind("out of host memory: cannot allocate 18014398509481984 bytes",
                  0),
      0u)
      << error;
}

}  // namespace
}  // namespace stepjit

namespace stepjit::runtime {
namespace {

TEST(EnvironmentTest, NumThreadsTakesWholeNumbersFrom1To1024) {
  EXPECT_EQ(ParseNumThreads("4"), 4);
  EXPECT_EQ(ParseNumThreads("1024"), 1024);
  EXPECT_GE(ParseNumThreads(nullptr), 1);
  EXPECT_EQ(ParseNumThreads(""), ParseNumThreads(nullptr));
  for (const char* bad :
       {"0", "-1", "abc", "4abc", "1.5", "4294967297", "100000", " "}) {
    try {
      ParseNumThreads(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(
          std::string(e.what()),
          std::string(
              "STEPJIT_NUM_THREADS: expected an integer from 1 to 1024, got "
              "'") +
              bad + "'");
    }
  }
}

}  // namespace
}  // namespace stepjit::runtime
