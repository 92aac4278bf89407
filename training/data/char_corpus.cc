// LoadFortuneCorpus: reading, splitting and encoding fortune databases.
#include "training/data/char_corpus.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ir/status.h"

namespace stepjit::data {

namespace fs = std::filesystem;

namespace {
absl::StatusOr<CharCorpus> LoadOrThrow(const std::string& dir);
}  // namespace

absl::StatusOr<CharCorpus> LoadFortuneCorpus(const std::string& dir) {
  return StatusOnAllocationFailure(absl::StrCat("fortune databases in ", dir),
                                   [&] { return LoadOrThrow(dir); });
}

namespace {
absl::StatusOr<CharCorpus> LoadOrThrow(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "fortune databases: no directory ", dir,
        " (install the Debian package fortunes: apt-get install fortunes)"));
  }
  CharCorpus c;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const fs::path& p = e.path();
    if (e.is_symlink() || !e.is_regular_file() || p.has_extension()) continue;
    c.files.push_back(p.string());
  }
  if (ec)
    return absl::InternalError(
        absl::StrCat("reading ", dir, ": ", ec.message()));
  std::sort(c.files.begin(), c.files.end());
  std::vector<std::string> train_text, valid_text;
  int64_t total = 0;
  const auto too_big = [&](const std::string& file, int64_t bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "fortune databases in ", dir, ": ", file, " brings the corpus to ",
        bytes, " bytes or more, beyond the ", kMaxCorpusBytes,
        " the loader reads (each character becomes an 8-byte token id); move "
        "it out of "
        "the directory"));
  };
  for (const std::string& file : c.files) {
    // Sized before reading, and read no further than the cap allows (the
    // file may grow meanwhile): a huge file is refused, not read whole.
    const uintmax_t size = fs::file_size(file, ec);
    if (ec)
      return absl::InternalError(
          absl::StrCat("cannot stat ", file, ": ", ec.message()));
    if (static_cast<int64_t>(size) > kMaxCorpusBytes - total)
      return too_big(file, total + static_cast<int64_t>(size));
    std::ifstream in(file, std::ios::binary);
    if (!in) return absl::InternalError(absl::StrCat("cannot open ", file));
    std::string text(static_cast<size_t>(kMaxCorpusBytes - total) + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    if (in.bad())
      return absl::InternalError(absl::StrCat("cannot read ", file));
    total += static_cast<int64_t>(text.size());
    if (total > kMaxCorpusBytes) return too_big(file, total);
    std::stringstream ss(std::move(text));
    std::string entry;
    auto flush = [&] {
      if (entry.find_first_not_of(" \t\n") != std::string::npos) {
        ((c.entries % 10 == 9) ? valid_text : train_text).push_back(entry);
        ++c.entries;
      }
      entry.clear();
    };
    for (absl::string_view line : absl::StrSplit(ss.str(), '\n')) {
      if (line == "%") {
        flush();
      } else {
        absl::StrAppend(&entry, line, "\n");
      }
    }
    flush();
  }
  if (c.entries < 10) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fortune databases in ", dir, ": ", c.entries,
        " entries, need at least 10 for a train/validation split"));
  }
  std::array<bool, 256> seen{};
  for (const auto* side : {&train_text, &valid_text})
    for (const std::string& t : *side)
      for (unsigned char ch : t) seen[ch] = true;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) c.vocab.push_back(static_cast<char>(b));
  std::array<int64_t, 256> id{};
  for (size_t i = 0; i < c.vocab.size(); ++i)
    id[static_cast<unsigned char>(c.vocab[i])] = static_cast<int64_t>(i);
  for (auto [side, ids] :
       {std::pair{&train_text, &c.train}, std::pair{&valid_text, &c.valid}})
    for (const std::string& t : *side)
      for (unsigned char ch : t) ids->push_back(id[ch]);
  return c;
}
}  // namespace

absl::StatusOr<std::vector<int64_t>> CharCorpus::Encode(
    const std::string& text) const {
  std::vector<int64_t> ids;
  for (char ch : text) {
    const size_t at = vocab.find(ch);
    if (at == std::string::npos) {
      return absl::NotFoundError(
          absl::StrCat("byte 0x", absl::Hex(static_cast<unsigned char>(ch)),
                       " is not in the corpus vocabulary"));
    }
    ids.push_back(static_cast<int64_t>(at));
  }
  return ids;
}

std::string CharCorpus::Decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t i : ids)
    s.push_back(i >= 0 && i < vocab_size() ? vocab[i] : '?');
  return s;
}

}  // namespace stepjit::data
