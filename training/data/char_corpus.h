// A character-level text corpus from fortune(6) databases: the plain-text
// files of the Debian package `fortunes` (/usr/share/games/fortunes), whose
// entries are separated by lines holding a single '%'.
//
// Split: the files are read in name order (skipping the *.dat indexes and
// the *.u8 links), their entries numbered in that order, and entry i goes
// to validation when i % 10 == 9, to training otherwise: deterministic, and
// both sides sample every file. The vocabulary is the sorted set of bytes
// of all entries; text is encoded as their indices.
#ifndef STEPJIT_TRAINING_DATA_CHAR_CORPUS_H_
#define STEPJIT_TRAINING_DATA_CHAR_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stepjit::data {

inline constexpr char kFortunesDir[] = "/usr/share/games/fortunes";
// The most text the loader reads from a directory (Debian's fortunes are
// about 5 MB): a larger file, or files adding up to more, are refused
// before they are read (ResourceExhausted naming the file).
inline constexpr int64_t kMaxCorpusBytes = int64_t{256} << 20;

struct CharCorpus {
  std::string vocab;           // vocab[i] is the byte of token i
  std::vector<int64_t> train;  // token ids, entries one after another
  std::vector<int64_t> valid;
  std::vector<std::string> files;  // the databases read, in order
  int64_t entries = 0;

  int64_t vocab_size() const { return static_cast<int64_t>(vocab.size()); }
  // Token ids of `text` (NotFound for a byte outside the vocabulary), and back.
  absl::StatusOr<std::vector<int64_t>> Encode(const std::string& text) const;
  std::string Decode(const std::vector<int64_t>& ids) const;
};

// Reads every database in `dir`. NotFound when the directory is missing
// (with the Debian package to install), InvalidArgument when it holds no
// entries or too few for a validation split.
absl::StatusOr<CharCorpus> LoadFortuneCorpus(
    const std::string& dir = kFortunesDir);

}  // namespace stepjit::data

#endif  // STEPJIT_TRAINING_DATA_CHAR_CORPUS_H_
