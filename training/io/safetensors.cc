// safetensors: header validation, the file reader and the writer.
#include "training/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/shape.h"
#include "ir/status.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace stepjit::io {
namespace {

namespace json = llvm::json;

// Every dtype the format defines (the reference implementation's Dtype
// enum); those without a stepjit dtype parse but cannot become tensors.
constexpr std::array<SafetensorsDType, 15> kDTypes = {{
    {"BOOL", 1, ir::DType::kBool},
    {"U8", 1, std::nullopt},
    {"I8", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt},
    {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},
    {"F16", 2, ir::DType::kF16},
    {"BF16", 2, ir::DType::kBF16},
    {"I32", 4, ir::DType::kI32},
    {"U32", 4, std::nullopt},
    {"F32", 4, ir::DType::kF32},
    {"F64", 8, ir::DType::kF64},
    {"I64", 8, ir::DType::kI64},
    {"U64", 8, std::nullopt},
}};

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", what));
}

// Where a character of JSON text lies: outside strings (where brackets,
// commas and colons count), inside one, or the quote closing one.
enum class JsonPlace { kOutside, kOpening, kInside, kClosing };

class JsonStrings {
 public:
  JsonPlace Feed(char c) {
    if (!in_string_) {
      if (c != '"') return JsonPlace::kOutside;
      in_string_ = true;
      return JsonPlace::kOpening;
    }
    if (escaped_) {
      escaped_ = false;
    } else if (c == '\\') {
      escaped_ = true;
    } else if (c == '"') {
      in_string_ = false;
      return JsonPlace::kClosing;
    }
    return JsonPlace::kInside;
  }

 private:
  bool in_string_ = false, escaped_ = false;
};

// One pass over the header text before llvm::json sees it: the top-level
// names (llvm::json keeps the last of duplicate keys). CheckJsonDepth has
// bounded its nesting.
absl::Status ScanHeader(absl::string_view text) {
  int depth = 0;
  bool expect_key = false;
  size_t key_start = 0;
  absl::flat_hash_set<std::string> names;
  JsonStrings strings;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (strings.Feed(c)) {
      case JsonPlace::kInside:
        continue;
      case JsonPlace::kOpening:
        key_start = i;
        continue;
      case JsonPlace::kClosing:
        if (depth == 1 && expect_key) {
          expect_key = false;
          // Decoded, so that "a" and "\u0061" are the same name.
          llvm::Expected<json::Value> key = json::parse(
              llvm::StringRef(text.data() + key_start, i + 1 - key_start));
          if (!key) {
            llvm::consumeError(key.takeError());
            continue;  // the full parse reports it
          }
          const std::string name = key->getAsString()->str();
          if (!names.insert(name).second) {
            return Invalid(absl::StrCat("the header names '", name, "' twice"));
          }
          const int64_t entries = static_cast<int64_t>(names.size()) -
                                  (names.contains("__metadata__") ? 1 : 0);
          if (entries > kMaxEntries) {
            return Invalid(absl::StrCat("the header has more than ",
                                        kMaxEntries,
                                        " entries, the most a file may hold"));
          }
        }
        continue;
      case JsonPlace::kOutside:
        break;
    }
    if (c == '{' || c == '[') {
      expect_key = ++depth == 1;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expect_key = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJsonDepth(absl::string_view text, absl::string_view what) {
  int depth = 0;
  JsonStrings strings;
  for (const char c : text) {
    if (strings.Feed(c) != JsonPlace::kOutside) continue;
    if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " nests deeper than ", kMaxJsonDepth, " levels"));
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return absl::OkStatus();
}

namespace {

// A non-negative integer JSON value (`what` names it in errors).
absl::StatusOr<int64_t> NonNegative(const json::Value& v,
                                    const std::string& what) {
  const auto i = v.getAsInteger();  // llvm::Optional
  // llvm::json saturates integers beyond int64 to its maximum (strtoll).
  if (!i || *i < 0 || *i == std::numeric_limits<int64_t>::max()) {
    std::string found;
    llvm::raw_string_ostream os(found);
    os << v;
    return Invalid(absl::StrCat(
        what, ": expected a non-negative integer below 2^63 - 1, got ",
        os.str()));
  }
  return *i;
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name,
                                            const json::Value& value) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  const json::Object* obj = value.getAsObject();
  if (obj == nullptr)
    return Invalid(absl::StrCat(where, ": expected an object"));
  for (const auto& [key, unused] : *obj) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Invalid(absl::StrCat(where, ": unexpected field '", key.str(),
                                  "' (expected dtype, shape, data_offsets)"));
    }
  }
  SafetensorsEntry entry;
  entry.name = name;
  const auto dtype = obj->getString("dtype");
  if (!dtype) {
    return Invalid(absl::StrCat(where, ": missing string field 'dtype'"));
  }
  const std::optional<SafetensorsDType> dt =
      FindSafetensorsDType(absl::string_view(dtype->data(), dtype->size()));
  if (!dt.has_value()) {
    std::vector<absl::string_view> names;
    for (const SafetensorsDType& d : kDTypes) names.push_back(d.name);
    return Invalid(absl::StrCat(where, ": unknown dtype '", dtype->str(),
                                "' (expected one of ",
                                absl::StrJoin(names, ", "), ")"));
  }
  entry.dtype = *dt;
  const json::Array* shape = obj->getArray("shape");
  if (shape == nullptr) {
    return Invalid(absl::StrCat(where, ": missing array field 'shape'"));
  }
  // The byte count, checked for overflow dim by dim.
  int64_t bytes = entry.dtype.bytes;
  bool overflow = false;
  for (size_t d = 0; d < shape->size(); ++d) {
    ASSIGN_OR_RETURN(
        const int64_t dim,
        NonNegative((*shape)[d], absl::StrCat(where, ": shape[", d, "]")));
    entry.shape.push_back(dim);
    if (!overflow && dim != 0 &&
        bytes > std::numeric_limits<int64_t>::max() / dim) {
      overflow = true;
    }
    if (!overflow) bytes *= dim;
  }
  // A tensor's shape rules (ir::ValidateShape) hold for every entry, also
  // an empty one whose other dims would overflow its strides.
  if (absl::Status valid = ir::ValidateShape(entry.shape); !valid.ok()) {
    return Invalid(absl::StrCat(where, ": ", valid.message()));
  }
  const json::Array* offsets = obj->getArray("data_offsets");
  if (offsets == nullptr || offsets->size() != 2) {
    return Invalid(absl::StrCat(
        where, ": expected 'data_offsets' as an array [begin, end]"));
  }
  ASSIGN_OR_RETURN(entry.begin,
                   NonNegative((*offsets)[0], where + ": data_offsets[0]"));
  ASSIGN_OR_RETURN(entry.end,
                   NonNegative((*offsets)[1], where + ": data_offsets[1]"));
  if (entry.end < entry.begin) {
    return Invalid(absl::StrCat(where, ": data_offsets [", entry.begin, ", ",
                                entry.end, "] end before they begin"));
  }
  if (overflow || bytes != entry.end - entry.begin) {
    return Invalid(
        absl::StrCat(where, ": shape [", absl::StrJoin(entry.shape, ", "),
                     "] of ", entry.dtype.name, " needs ",
                     overflow ? "more than 2^63" : absl::StrCat(bytes),
                     " bytes, but data_offsets [", entry.begin, ", ", entry.end,
                     "] hold ", entry.end - entry.begin));
  }
  return entry;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(
    const json::Value& value) {
  const json::Object* obj = value.getAsObject();
  if (obj == nullptr) {
    return Invalid("__metadata__: expected an object of strings");
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : *obj) {
    const auto s = v.getAsString();
    if (!s) {
      return Invalid(absl::StrCat("__metadata__['", key.str(),
                                  "']: expected a string value"));
    }
    out.emplace(key.str(), s->str());
  }
  return out;
}

// Sorted by offsets, the entries must tile [0, buffer_bytes) exactly.
absl::Status CheckTiling(const std::vector<SafetensorsEntry>& entries,
                         int64_t buffer_bytes) {
  int64_t at = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin != at) {
      if (e.begin > buffer_bytes) {
        return Invalid(absl::StrCat(
            "tensor '", e.name, "': data_offsets [", e.begin, ", ", e.end,
            "] lie outside the data buffer of ", buffer_bytes, " bytes"));
      }
      return Invalid(absl::StrCat(
          "tensor '", e.name, "' begins at byte ", e.begin, " but ",
          prev == nullptr ? "the data buffer begins at 0"
                          : absl::StrCat("'", prev->name, "' ends at ", at),
          e.begin < at ? " (overlap)" : " (a hole)"));
    }
    if (e.end > buffer_bytes) {
      return Invalid(absl::StrCat(
          "tensor '", e.name, "': data_offsets [", e.begin, ", ", e.end,
          "] lie outside the data buffer of ", buffer_bytes, " bytes"));
    }
    at = e.end;
    prev = &e;
  }
  if (at != buffer_bytes) {
    return Invalid(absl::StrCat("the tensors cover ", at,
                                " bytes of a data buffer of ", buffer_bytes,
                                " (trailing bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<SafetensorsDType> FindSafetensorsDType(absl::string_view name) {
  for (const SafetensorsDType& d : kDTypes) {
    if (d.name == name) return d;
  }
  return std::nullopt;
}

absl::string_view SafetensorsDTypeName(ir::DType dtype) {
  for (const SafetensorsDType& d : kDTypes) {
    if (d.ir == dtype) return d.name;
  }
  SJ_CHECK(false, "no safetensors name for dtype ", ir::DTypeName(dtype));
  return "";
}

namespace {

// The 8-byte little-endian header length, checked against the bytes that
// follow it (`rest`).
absl::StatusOr<uint64_t> HeaderLength(const char* first8, uint64_t file_size) {
  if (file_size < 8) {
    return Invalid(
        absl::StrCat("the file has ", file_size,
                     " bytes, fewer than the 8 of the header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(first8[i]);
  if (n > kMaxHeaderBytes) {
    return Invalid(absl::StrCat("header length ", n, " exceeds the limit of ",
                                kMaxHeaderBytes, " bytes"));
  }
  if (n > file_size - 8) {
    return Invalid(absl::StrCat("header length ", n,
                                " runs past the end of the file (",
                                file_size - 8, " bytes follow the length)"));
  }
  return n;
}

// pread until `bytes` are read; false on an error or an early end.
bool ReadAt(int fd, void* dst, int64_t bytes, int64_t offset) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n =
        pread(fd, p, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)),
              static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= n;
    offset += n;
  }
  return true;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromHeader(
    absl::string_view header, uint64_t data_bytes) {
  if (header.empty() || header[0] != '{') {
    return Invalid("the header does not start with '{'");
  }
  if (absl::Status deep = CheckJsonDepth(header, "header JSON"); !deep.ok())
    return Invalid(deep.message());
  RETURN_IF_ERROR(ScanHeader(header));
  llvm::Expected<json::Value> parsed =
      json::parse(llvm::StringRef(header.data(), header.size()));
  if (!parsed) {
    return Invalid(absl::StrCat("the header is not valid JSON: ",
                                llvm::toString(parsed.takeError())));
  }
  const json::Object* root = parsed->getAsObject();
  if (root == nullptr) return Invalid("the header is not a JSON object");

  SafetensorsFile file;
  for (const auto& [key, value] : *root) {
    if (key == "__metadata__") {
      ASSIGN_OR_RETURN(file.metadata_, ParseMetadata(value));
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsEntry entry, ParseEntry(key.str(), value));
    file.entries_.push_back(std::move(entry));
  }
  // json::Object is a hash map: order by offsets, then by name, so that
  // errors (and entries()) do not depend on hashing.
  std::sort(file.entries_.begin(), file.entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.begin, a.end, a.name) <
                     std::tie(b.begin, b.end, b.name);
            });
  file.data_start_ = static_cast<int64_t>(8 + header.size());
  file.data_bytes_ = static_cast<int64_t>(data_bytes);
  RETURN_IF_ERROR(CheckTiling(file.entries_, static_cast<int64_t>(data_bytes)));
  return file;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string bytes) {
  const uint64_t size = bytes.size();
  ASSIGN_OR_RETURN(const uint64_t n, HeaderLength(bytes.data(), size));
  ASSIGN_OR_RETURN(
      SafetensorsFile file,
      FromHeader(absl::string_view(bytes.data() + 8, n), size - 8 - n));
  file.bytes_ = std::move(bytes);
  return file;
}

const SafetensorsEntry* SafetensorsFile::Find(absl::string_view name) const {
  for (const SafetensorsEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const char* SafetensorsFile::Data(const SafetensorsEntry& entry) const {
  SJ_CHECK(
      fd_ == nullptr,
      "SafetensorsFile::Data: the file's bytes are not in memory; use Read");
  return bytes_.data() + data_start_ + entry.begin;
}

absl::Status SafetensorsFile::Read(const SafetensorsEntry& entry,
                                   void* dst) const {
  const int64_t bytes = entry.end - entry.begin;
  if (bytes <= 0) return absl::OkStatus();
  if (fd_ == nullptr) {
    std::memcpy(dst, bytes_.data() + data_start_ + entry.begin,
                static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  if (!ReadAt(*fd_, dst, bytes, data_start_ + entry.begin)) {
    return absl::DataLossError(absl::StrCat(
        "safetensors: '", path_, "': reading tensor '", entry.name, "' (",
        bytes, " bytes at offset ", data_start_ + entry.begin,
        ") failed: the file changed or cannot be read"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path) {
  // Only the header is read here (8 bytes, then at most kMaxHeaderBytes):
  // the tensors are read when asked for, so a file whose header names a
  // terabyte (a sparse file) costs nothing until then.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(
        "safetensors: cannot open '", path,
        "': ", errno == ENOENT ? "no such file" : std::strerror(errno)));
  }
  auto owned = std::shared_ptr<int>(new int(fd), [](int* f) {
    close(*f);
    delete f;
  });
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("safetensors: cannot open '", path,
                                            "': not a regular file"));
  }
  const auto with_path = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  };
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char first8[8] = {};
  if (size >= 8 && !ReadAt(fd, first8, 8, 0))
    return absl::DataLossError(
        absl::StrCat("safetensors: reading '", path, "' failed"));
  absl::StatusOr<uint64_t> n = HeaderLength(first8, size);
  if (!n.ok()) return with_path(n.status());
  std::string header(static_cast<size_t>(*n), '\0');
  if (*n > 0 && !ReadAt(fd, header.data(), static_cast<int64_t>(*n), 8))
    return absl::DataLossError(
        absl::StrCat("safetensors: reading '", path, "' failed"));
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::FromHeader(header, size - 8 - *n);
  if (!file.ok()) return with_path(file.status());
  file->fd_ = std::move(owned);
  file->path_ = path;
  return file;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsTensorView>& tensors,
    const std::map<std::string, std::string>& metadata) {
  // llvm::json::Object would reorder the entries: write the header by hand,
  // escaping names through json::Value.
  std::string header = "{";
  const auto quoted = [](const std::string& s) {
    std::string out;
    llvm::raw_string_ostream os(out);
    os << json::Value(s);
    return os.str();
  };
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!json::isUTF8(key) || !json::isUTF8(value)) {
        return Invalid(
            absl::StrCat("metadata key '", key, "' or its value is not UTF-8"));
      }
      absl::StrAppend(&header, first ? "" : ",", quoted(key), ":",
                      quoted(value));
      first = false;
    }
    header += "}";
  }
  absl::flat_hash_set<std::string> names;
  int64_t offset = 0;
  for (const SafetensorsTensorView& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !json::isUTF8(t.name)) {
      return Invalid(absl::StrCat("cannot write a tensor named '", t.name,
                                  "' (empty, reserved or not UTF-8)"));
    }
    if (!names.insert(t.name).second) {
      return Invalid(absl::StrCat("two tensors are named '", t.name, "'"));
    }
    int64_t bytes = ir::DTypeSize(t.dtype);
    for (int64_t d : t.shape) bytes *= d;
    if (bytes != static_cast<int64_t>(t.data.size())) {
      return Invalid(absl::StrCat("tensor '", t.name, "': shape [",
                                  absl::StrJoin(t.shape, ", "), "] needs ",
                                  bytes, " bytes, got ", t.data.size()));
    }
    absl::StrAppend(&header, header.size() > 1 ? "," : "", quoted(t.name),
                    ":{\"dtype\":\"", SafetensorsDTypeName(t.dtype),
                    "\",\"shape\":[", absl::StrJoin(t.shape, ","),
                    "],\"data_offsets\":[", offset, ",", offset + bytes, "]}");
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  out.reserve(out.size() + offset);
  for (const SafetensorsTensorView& t : tensors)
    out.append(t.data.data(), t.data.size());
  return out;
}

namespace {

// What kind of file `st` describes, for messages.
const char* FileKind(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes) {
  // A symlink is followed on purpose: its target is replaced and the link
  // stays. Whatever the path names must be a regular file or nothing:
  // renaming over a device (/dev/null, /dev/full), a FIFO or a directory
  // would replace it.
  std::string target = path;
  std::error_code ec;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec))) {
    const std::filesystem::path resolved =
        std::filesystem::weakly_canonical(path, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot resolve the symlink '", path, "': ", ec.message()));
    }
    target = resolved.string();
  }
  struct stat st;
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to write '", path, "'",
        target == path ? "" : absl::StrCat(" (a symlink to '", target, "')"),
        ": it is ", FileKind(st),
        ", not a regular file (a checkpoint replaces the file at its path)"));
  }
  const std::string tmp = absl::StrCat(target, ".tmp.", ::getpid());
  // O_EXCL | O_NOFOLLOW: never write through something already at the
  // temporary name.
  ::unlink(tmp.c_str());
  const int fd = ::open(
      tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", tmp, "': ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::DataLossError(
          absl::StrCat("writing '", tmp, "' failed: ", err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::DataLossError(
        absl::StrCat("writing '", tmp, "' failed: ", err));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot rename '", tmp, "' to '", target, "': ", err));
  }
  return absl::OkStatus();
}

}  // namespace stepjit::io
