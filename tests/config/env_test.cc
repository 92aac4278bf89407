// config/env.h: the declared environment variables, their typed reads and
// the one message format, misspellings, and that no library file reads a
// STEPJIT_* variable except through config/env.h.
#include "config/env.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/status.h"

namespace stepjit::config {
namespace {

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// Each of `bad` refused by `parse` with `expected` and the value quoted.
template <typename Parse>
void ExpectRefused(Parse parse, std::initializer_list<const char*> bad,
                   const std::string& expected) {
  for (const char* value : bad) {
    EXPECT_EQ(Message(parse(value).status()), expected + value + "'") << value;
  }
}

TEST(EnvTest, IntegersInTheDeclaredRange) {
  EXPECT_EQ(*ParseInt(Env::kNumThreads, "1"), 1);
  EXPECT_EQ(*ParseInt(Env::kNumThreads, "1024"), 1024);
  ExpectRefused(
      [](const char* v) { return ParseInt(Env::kNumThreads, v); },
      {"0", "1025", "-1", "abc", "4 ", "1.5", ""},
      "STEPJIT_NUM_THREADS: expected an integer from 1 to 1024, got '");
  // An upper bound that keeps MiB -> bytes inside an int64_t.
  EXPECT_EQ(*ParseInt(Env::kCacheMaxMb, "8796093022207"), 8796093022207);
  EXPECT_FALSE(ParseInt(Env::kCacheMaxMb, "8796093022208").ok());
}

TEST(EnvTest, RealsWithAnOpenLowerBound) {
  EXPECT_EQ(*ParseReal(Env::kDistTimeoutS, "0.5"), 0.5);
  EXPECT_EQ(*ParseReal(Env::kDistTimeoutS, "604800"), 604800);
  ExpectRefused([](const char* v) { return ParseReal(Env::kDistTimeoutS, v); },
                {"0", "-1", "604801", "inf", "nan", "5s"},
                "STEPJIT_DIST_TIMEOUT_S: expected a finite number > 0 and <= "
                "604800, got '");
  EXPECT_EQ(*ParseReal(Env::kPeakGflops, "1e6"), 1e6);
  EXPECT_FALSE(ParseReal(Env::kPeakGflops, "0").ok());
}

TEST(EnvTest, ChoicesAreCaseInsensitiveAndSpelledAsDeclared) {
  EXPECT_EQ(*ParseChoice(Env::kCudaBackend, "Emulator"), "emulator");
  EXPECT_EQ(*ParseChoice(Env::kAdaptiveThreads, "OFF"), "off");
  EXPECT_EQ(Message(ParseChoice(Env::kAdaptiveThreads, "2").status()),
            "STEPJIT_ADAPTIVE_THREADS: expected 1, on, 0 or off, got '2'");
  EXPECT_EQ(Message(ParseChoice(Env::kCudaBackend, "gpu").status()),
            "STEPJIT_CUDA_BACKEND: expected auto, driver or emulator, got "
            "'gpu'");
}

TEST(EnvTest, ListsNameEveryMemberAndRefuseUnknownOnes) {
  EXPECT_EQ(*ParseList(Env::kLog, "guards, compile,"),
            (std::vector<std::string>{"guards", "compile"}));
  EXPECT_EQ(*ParseList(Env::kLog, ""), std::vector<std::string>());
  EXPECT_EQ(Message(ParseList(Env::kLog, "guards,guard").status()),
            "STEPJIT_LOG: expected a comma-separated list of guards or "
            "compile ('guard' is none of them), got 'guards,guard'");
  // STEPJIT_DISABLE declares no names: the pass registry checks them.
  EXPECT_EQ(*ParseList(Env::kDisable, "fuse,anything"),
            (std::vector<std::string>{"fuse", "anything"}));
}

TEST(EnvTest, UnsetAndEmptyAreTheSame) {
  ASSERT_EQ(unsetenv("STEPJIT_CACHE_MAX_MB"), 0);
  EXPECT_EQ(Get(Env::kCacheMaxMb), std::nullopt);
  EXPECT_EQ(*GetInt(Env::kCacheMaxMb), std::nullopt);
  ASSERT_EQ(setenv("STEPJIT_CACHE_MAX_MB", "", 1), 0);
  EXPECT_EQ(Get(Env::kCacheMaxMb), std::nullopt);
  ASSERT_EQ(setenv("STEPJIT_CACHE_MAX_MB", "64", 1), 0);
  EXPECT_EQ(*GetInt(Env::kCacheMaxMb), 64);
  ASSERT_EQ(setenv("STEPJIT_CACHE_MAX_MB", "64MB", 1), 0);
  EXPECT_FALSE(GetInt(Env::kCacheMaxMb).ok());
  EXPECT_THROW(IntOrThrow(Env::kCacheMaxMb), Error);
  ASSERT_EQ(unsetenv("STEPJIT_CACHE_MAX_MB"), 0);
}

TEST(EnvTest, AVariableReadAsAnotherKindIsAnInternalError) {
  EXPECT_DEATH(ParseInt(Env::kLog, "1").IgnoreError(),
               "STEPJIT_LOG is declared list in config/env.def, but read as "
               "integer");
}

TEST(EnvTest, MisspeltNamesNameTheDeclaredOne) {
  const char* environment[] = {
      "STEPJIT_NUM_THREAD=4",  "STEPJIT_NUM_THREADS=2", "PATH=/bin",
      "STEPJIT_PROFIL=1",      "STEPJIT_BUILD_DIR=b",   "STEPJIT_FUZZ_SEED=1",
      "STEPJIT_CACHEDIR=/tmp", "NOT_STEPJIT_LOG=1"};
  EXPECT_EQ(
      Misspelt(environment),
      (std::vector<std::string>{
          "STEPJIT_NUM_THREAD is set, but stepjit reads no such variable; did "
          "you mean STEPJIT_NUM_THREADS? (docs/environment.md)",
          "STEPJIT_PROFIL is set, but stepjit reads no such variable; did you "
          "mean STEPJIT_PROFILE? (docs/environment.md)",
          "STEPJIT_CACHEDIR is set, but stepjit reads no such variable; did "
          "you mean STEPJIT_CACHE_DIR? (docs/environment.md)"}));
}

TEST(EnvTest, TheTableIsWellFormed) {
  std::set<std::string> names;
  for (const EnvInfo& info : AllEnv()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_EQ(std::string(info.name).rfind("STEPJIT_", 0), 0u) << info.name;
    EXPECT_EQ(&Info(info.env), &info) << info.name;
    EXPECT_NE(std::string(info.help), "") << info.name;
  }
}

// The library reads a STEPJIT_* variable only through config/env.h, and
// every declared variable is read somewhere.
TEST(EnvTest, OnlyConfigReadsTheEnvironmentAndEveryVariableIsRead) {
  const std::filesystem::path root =
      std::filesystem::path(STEPJIT_TESTS_DIR).parent_path();
  const std::regex direct(R"re(getenv\(\s*"STEPJIT_)re");
  std::set<std::string> read;
  for (const char* layer :
       {"ir", "config", "passes", "codegen", "runtime", "dist", "devices",
        "program", "training", "frontend", "tools"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(root / layer)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cc" && ext != ".h") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      EXPECT_FALSE(std::regex_search(s, direct))
          << entry.path() << " reads a STEPJIT_* variable with getenv; "
          << "declare it in config/env.def and read it through config/env.h";
      if (std::string(layer) == "config") continue;
      static const std::regex use(R"re(Env::k(\w+))re");
      for (auto it = std::sregex_iterator(s.begin(), s.end(), use);
           it != std::sregex_iterator(); ++it)
        read.insert((*it)[1]);
    }
  }
  // The enumerators, from the table's own text.
  std::ifstream def(root / "config" / "env.def");
  std::stringstream text;
  text << def.rdbuf();
  const std::string s = text.str();
  static const std::regex row(R"re(\nENV\((\w+),)re");
  int rows = 0;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), row);
       it != std::sregex_iterator(); ++it, ++rows)
    EXPECT_TRUE(read.count((*it)[1]))
        << "config::Env::k" << (*it)[1] << " is declared but nothing reads it";
  EXPECT_EQ(rows, static_cast<int>(AllEnv().size()));
}

}  // namespace
}  // namespace stepjit::config
