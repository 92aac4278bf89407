#include "ir/parse_number.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace stepjit::ir {
namespace {

absl::Status Bad(absl::string_view name, absl::string_view what,
                 absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(
      name, name.empty() ? "" : ": ", "expected ", what, ", got '", text, "'"));
}

bool NoSpace(absl::string_view text) {
  // absl::SimpleAtoi/SimpleAtod skip surrounding white space; a flag or
  // variable with spaces in it is a typo, not a number.
  return !text.empty() &&
         text.find_first_of(" \t\n\r\f\v") == absl::string_view::npos;
}

}  // namespace

std::string DescribeRange(int64_t min, int64_t max) {
  if (max == std::numeric_limits<int64_t>::max())
    return absl::StrCat("an integer >= ", min);
  return absl::StrCat("an integer from ", min, " to ", max);
}

std::string DescribeRange(RealRange range) {
  std::string s =
      absl::StrCat("a number ", range.min_inclusive ? ">= " : "> ", range.min);
  if (range.max < std::numeric_limits<double>::max())
    absl::StrAppend(&s, " and <= ", range.max);
  return s;
}

absl::StatusOr<int64_t> ParseInteger(absl::string_view name,
                                     absl::string_view text, int64_t min,
                                     int64_t max) {
  int64_t value = 0;
  if (!NoSpace(text) || !absl::SimpleAtoi(text, &value) || value < min ||
      value > max)
    return Bad(name, DescribeRange(min, max), text);
  return value;
}

absl::StatusOr<double> ParseReal(absl::string_view name, absl::string_view text,
                                 RealRange range) {
  double value = 0;
  if (!NoSpace(text) || !absl::SimpleAtod(text, &value) ||
      !std::isfinite(value) || value < range.min ||
      (!range.min_inclusive && value == range.min) || value > range.max)
    return Bad(name, absl::StrCat("a finite ", DescribeRange(range).substr(2)),
               text);
  return value;
}

}  // namespace stepjit::ir
