// ExpectError: runs a callable that must throw stepjit::Error whose message
// holds every given part; shared by the runtime tests.
#ifndef STEPJIT_TESTS_UTIL_EXPECT_ERROR_H_
#define STEPJIT_TESTS_UTIL_EXPECT_ERROR_H_

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/status.h"

namespace stepjit::test {

template <typename F>
void ExpectError(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected stepjit::Error";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
  }
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_EXPECT_ERROR_H_
