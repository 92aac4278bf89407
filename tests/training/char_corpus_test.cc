// LoadFortuneCorpus on fortune databases written here: file order, skipped
// index and link files, the every-tenth-entry validation split, the
// vocabulary and encoding, and its errors.
#include "training/data/char_corpus.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace stepjit::data {
namespace {

namespace fs = std::filesystem;

class CharCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / absl::StrCat("stepjit_corpus_", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  fs::path dir_;
};

TEST_F(CharCorpusTest, SplitsEveryTenthEntryToValidation) {
  // "b" sorts after "a": entries 0..5 come from a, 6..11 from b.
  std::string a, b;
  for (int i = 0; i < 6; ++i) absl::StrAppend(&a, "a", i, "\n%\n");
  for (int i = 6; i < 12; ++i) absl::StrAppend(&b, "b", i, "\n%\n");
  Write("b", b + "\n%\n");  // a blank entry does not count
  Write("a", a);
  Write("a.dat", "binary index");
  fs::create_symlink(dir_ / "a", dir_ / "a.u8");
  absl::StatusOr<CharCorpus> c = LoadFortuneCorpus(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->entries, 12);
  ASSERT_EQ(c->files.size(), 2u);
  EXPECT_EQ(fs::path(c->files[0]).filename(), "a");
  EXPECT_EQ(c->vocab, "\n0123456789ab");
  EXPECT_EQ(c->Decode(c->valid), "b9\n");  // entry 9
  EXPECT_EQ(c->Decode(c->train),
            "a0\na1\na2\na3\na4\na5\nb6\nb7\nb8\nb10\nb11\n");
  absl::StatusOr<std::vector<int64_t>> ids = c->Encode("ab\n");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int64_t>{11, 12, 0}));
  EXPECT_FALSE(c->Encode("z").ok());
}

TEST_F(CharCorpusTest, RefusesMissingAndTinyCorpora) {
  absl::StatusOr<CharCorpus> missing =
      LoadFortuneCorpus((dir_ / "none").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("apt-get install fortunes"),
            std::string::npos);
  Write("a", "one\n%\ntwo\n");
  absl::StatusOr<CharCorpus> tiny = LoadFortuneCorpus(dir_.string());
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("2 entries, need at least 10"),
            std::string::npos)
      << tiny.status();
}

// A huge file (sparse here: 1 TiB that takes no disk) is refused from its
// size before it is read, naming it; files that add up past the cap too.
TEST_F(CharCorpusTest, RefusesAHugeFileWithoutReadingIt) {
  std::string a;
  for (int i = 0; i < 12; ++i) absl::StrAppend(&a, "a", i, "\n%\n");
  Write("a", a);
  Write("z", "");
  ASSERT_EQ(truncate((dir_ / "z").c_str(), off_t{1} << 40), 0);
  absl::StatusOr<CharCorpus> c = LoadFortuneCorpus(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find(
                (dir_ / "z").string() + " brings the corpus to " +
                std::to_string((int64_t{1} << 40) + a.size()) +
                " bytes or more, beyond the 268435456"),
            std::string::npos)
      << c.status();
  ASSERT_EQ(truncate((dir_ / "z").c_str(), kMaxCorpusBytes - 10), 0);
  c = LoadFortuneCorpus(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted)
      << c.status();
}

}  // namespace
}  // namespace stepjit::data
