// Counting the places a string stands in a text (dot files, IR dumps).
#ifndef STEPJIT_TESTS_UTIL_COUNT_H_
#define STEPJIT_TESTS_UTIL_COUNT_H_

#include <string>

namespace stepjit::test {

// How many times `what` stands in `text`, not overlapping.
inline int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_COUNT_H_
