// Tests the CSV the tools print (tools/cli_output.h): RFC 4180 quoting, and
// rows holding the values --json prints under the header's columns.
#include "tools/cli_output.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace stepjit::tools {
namespace {

TEST(CsvTest, QuotesOnlyFieldsThatNeedIt) {
  EXPECT_EQ(CsvField("mlp784_adamw_b128"), "mlp784_adamw_b128");
  EXPECT_EQ(CsvField(""), "");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("cr\r"), "\"cr\r\"");
}

TEST(CsvTest, ARowHoldsTheJsonValuesInColumnOrder) {
  const llvm::json::Object row{{"name", "x,y"},
                               {"count", int64_t{42}},
                               {"ms", 0.1},
                               {"big", 1e300},
                               {"ok", true}};
  ::testing::internal::CaptureStdout();
  PrintCsvLine({"name", "count", "ms", "missing", "big", "ok"});
  PrintCsvRow(row, {"name", "count", "ms", "missing", "big", "ok"});
  // Doubles in their shortest round-trip form; a missing key is empty.
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "name,count,ms,missing,big,ok\n\"x,y\",42,0.1,,1e+300,true\n");
}

}  // namespace
}  // namespace stepjit::tools
