// safetensors reader and writer. The file is untrusted input: every number in the header is
// checked against the file before a pointer into the mapping is handed out.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/atomic_output.h"
#include "common/error.h"
#include "common/json_depth.h"

namespace specrun {

namespace {

using json = nlohmann::json;

constexpr std::uint64_t kMaxHeaderSize = 100'000'000;  // the reference reader's limit
// Most dimensions a tensor may have (real ones have at most 5 or so; numpy 1.x allowed 32).
constexpr std::size_t kMaxRank = 32;
// Most values (numbers, strings, lists, objects) one tensor's header entry may hold: a dtype, a
// shape and two data_offsets, in an object.
constexpr std::size_t kMaxEntryValues = kMaxRank + 16;
// Most keys __metadata__ may have (real files have a handful: "format": "pt").
constexpr std::size_t kMaxMetadataKeys = 65536;

// Element size of every dtype safetensors defines; 0 for names it does not define.
std::size_t safetensors_dtype_size(const std::string& name) {
  static const std::map<std::string, std::size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(name);
  return it == kSizes.end() ? 0 : it->second;
}

bool float_dtype(const std::string& name, DType* out) {
  if (name == "F32")
    *out = DType::kF32;
  else if (name == "F16")
    *out = DType::kF16;
  else if (name == "BF16")
    *out = DType::kBF16;
  else
    return false;
  return true;
}

struct Entry {
  std::string name;
  std::uint64_t begin = 0, end = 0;
};

}  // namespace

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

namespace {

struct Member {
  std::string key;
  std::string_view value;  // the member's value, as text
};

// The members of the JSON object `text` (whitespace around it allowed): keys decoded, values as
// text, so that the header is never held as one document. Throws naming `path` when the text is
// not an object. The nesting depth was bounded before.
std::vector<Member> object_members(std::string_view text, const std::string& path) {
  std::size_t i = 0;
  const std::size_t n = text.size();
  auto fail = [&](const char* what) {
    SPEC_INPUT_FAIL(path << ": the header is not valid JSON (" << what << " at byte " << i
                         << "): corrupt or not a safetensors file");
  };
  auto skip_ws = [&] {
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  };
  auto skip_string = [&] {  // text[i] == '"'; moves past the closing quote
    for (++i; i < n; ++i) {
      if (text[i] == '\\')
        ++i;
      else if (text[i] == '"')
        break;
    }
    if (i >= n) fail("unterminated string");
    ++i;
  };
  std::vector<Member> out;
  skip_ws();
  if (i >= n || text[i] != '{') fail("expected '{'");
  ++i;
  skip_ws();
  if (i < n && text[i] == '}') {
    ++i;
  } else {
    for (;;) {
      skip_ws();
      if (i >= n || text[i] != '"') fail("expected a key");
      const std::size_t k0 = i;
      skip_string();
      std::string key;
      try {
        key = json::parse(text.substr(k0, i - k0)).get<std::string>();
      } catch (const json::exception&) {
        fail("malformed key");
      }
      skip_ws();
      if (i >= n || text[i] != ':') fail("expected ':'");
      ++i;
      const std::size_t v0 = i;
      int depth = 0;
      while (i < n) {
        const char c = text[i];
        if (c == '"') {
          skip_string();
          continue;
        }
        if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (depth == 0) break;
          --depth;
        } else if (c == ',' && depth == 0) {
          break;
        }
        ++i;
      }
      if (i >= n) fail("unterminated object");
      out.push_back({std::move(key), text.substr(v0, i - v0)});
      if (text[i] == '}') {
        ++i;
        break;
      }
      ++i;  // ','
    }
  }
  skip_ws();
  if (i != n) fail("text after the object");
  return out;
}

// One member of the header, parsed: a tensor's entry or __metadata__. A parsed value costs ~16
// bytes or more for the 2 of its text (a number and its comma), so shapes of more than kMaxRank
// dimensions, tensor entries of more than kMaxEntryValues values and metadata of more than
// kMaxMetadataKeys keys are refused while they are parsed, before they are built: one entry
// with a shape of 6.5 million 1s cost 21.9 times the header's size, a million metadata keys
// 18 times.
json parse_member(std::string_view text, const std::string& where, bool metadata) {
  const std::size_t max_values = metadata ? kMaxMetadataKeys + 1 : kMaxEntryValues;
  std::string key;            // the member of the entry being parsed
  std::size_t key_items = 0;  // values in it below its own level: the shape's dimensions
  std::size_t values = 0;
  const json::parser_callback_t bound = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      key = parsed.get<std::string>();
      key_items = 0;
    }
    if (event == json::parse_event_t::value || event == json::parse_event_t::object_start ||
        event == json::parse_event_t::array_start) {
      ++values;
      if (depth >= 2) ++key_items;
      SPEC_INPUT_CHECK(metadata || key != "shape" || key_items <= kMaxRank,
                       where << ": shape has more than " << kMaxRank
                             << " dimensions (real tensors have at most 5 or so): corrupt header");
      SPEC_INPUT_CHECK(!metadata || values <= max_values,
                       where << " has more than " << kMaxMetadataKeys
                             << " keys (real files have a few): corrupt header");
      SPEC_INPUT_CHECK(metadata || values <= max_values,
                       where << ": the header entry holds more than " << kMaxEntryValues
                             << " values, where a tensor's has a dtype, a shape of at most "
                             << kMaxRank << " dimensions and two data_offsets: corrupt header");
    }
    return true;
  };
  return json::parse(text, bound);
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SPEC_INPUT_CHECK(fd >= 0,
                   "cannot open safetensors file " << path << ": " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    SPEC_INPUT_FAIL("cannot stat " << path << ": " << std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    SPEC_INPUT_FAIL("safetensors file " << path
                                        << " is not a regular file (a FIFO, a device or a "
                                           "directory): refused");
  }
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    SPEC_INPUT_FAIL(path << ": file is " << file_size
                         << " bytes, shorter than the 8-byte header length: truncated or not a "
                            "safetensors file");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  SPEC_INPUT_CHECK(map != MAP_FAILED, "cannot mmap " << path << " (" << file_size
                                                     << " bytes): " << std::strerror(map_errno));
  map_ = map;
  map_size_ = file_size;
  try {
    const auto* base = static_cast<const std::byte*>(map_);
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i)
      header_len = (header_len << 8) | std::to_integer<std::uint64_t>(base[i]);
    SPEC_INPUT_CHECK(header_len <= file_size - 8, path << ": header length " << header_len
                                                       << " exceeds file size " << file_size
                                                       << ": truncated or not a safetensors file");
    SPEC_INPUT_CHECK(header_len <= kMaxHeaderSize,
                     path << ": header length " << header_len << " exceeds the limit of "
                          << kMaxHeaderSize << " bytes: corrupt or not a safetensors file");
    SPEC_INPUT_CHECK(header_len >= 2 && static_cast<char>(base[8]) == '{',
                     path << ": the header does not start with '{': not a safetensors file");
    const char* text = reinterpret_cast<const char*>(base + 8);
    const std::uint64_t data_size = file_size - 8 - header_len;
    const std::byte* data = base + 8 + header_len;

    // The header is split into its members and each tensor's entry parsed on its own: a JSON
    // document of the whole header cost 29x its size in memory (2.8 GB for a 98 MB header).
    const std::string too_deep = json_depth_error(std::string_view(text, header_len), path);
    SPEC_INPUT_CHECK(too_deep.empty(), too_deep);
    const std::vector<Member> members = object_members(std::string_view(text, header_len), path);
    {
      std::set<std::string_view> seen;
      for (const Member& m : members)
        SPEC_INPUT_CHECK(seen.insert(m.key).second,
                         path << ": tensor '" << m.key << "' appears twice in the header");
    }

    std::vector<Entry> entries;
    entries.reserve(members.size());
    for (const Member& m : members) {
      const std::string& name = m.key;
      const bool metadata = name == "__metadata__";
      const std::string where = path + (metadata ? ": __metadata__" : ": tensor '" + name + "'");
      json t;
      try {
        t = parse_member(m.value, where, metadata);
      } catch (const json::exception& e) {
        SPEC_INPUT_FAIL(path << ": the header is not valid JSON (" << e.what() << ", in the entry '"
                             << name << "'): corrupt or not a safetensors file");
      }
      if (name == "__metadata__") {
        SPEC_INPUT_CHECK(t.is_object(), path << ": __metadata__ is not a JSON object");
        for (auto it = t.begin(); it != t.end(); ++it) {
          SPEC_INPUT_CHECK(it.value().is_string(),
                           path << ": __metadata__ value for '" << it.key() << "' is not a string");
          metadata_[it.key()] = it.value().get<std::string>();
        }
        continue;
      }
      SPEC_INPUT_CHECK(t.is_object(), where << ": header entry is not a JSON object");
      SPEC_INPUT_CHECK(t.contains("dtype") && t["dtype"].is_string(),
                       where << ": missing or non-string \"dtype\"");
      SPEC_INPUT_CHECK(t.contains("shape") && t["shape"].is_array(),
                       where << ": missing or non-array \"shape\"");
      SPEC_INPUT_CHECK(t.contains("data_offsets") && t["data_offsets"].is_array() &&
                           t["data_offsets"].size() == 2,
                       where << ": \"data_offsets\" must be an array [begin, end]");
      const std::string dtype_str = t["dtype"].get<std::string>();
      const std::size_t elem = safetensors_dtype_size(dtype_str);

      TensorView view;
      view.name = name;
      view.file = path;
      // numel is bounded by the data section (or by 2^62 for zero-size tensors) to avoid overflow.
      std::uint64_t numel = 1;
      bool zero_dim = false;
      for (const json& d : t["shape"]) {
        SPEC_INPUT_CHECK(d.is_number_integer() && d.get<std::int64_t>() >= 0,
                         where << ": shape " << t["shape"].dump()
                               << " has an entry that is not a non-negative integer");
        std::uint64_t dim = d.get<std::uint64_t>();
        SPEC_INPUT_CHECK(dim < (std::uint64_t{1} << 62),
                         where << ": shape " << t["shape"].dump() << " is absurdly large");
        view.shape.push_back(static_cast<std::int64_t>(dim));
        if (dim == 0)
          zero_dim = true;
        else if (!zero_dim) {
          SPEC_INPUT_CHECK(numel <= (std::uint64_t{1} << 62) / dim,
                           where << ": shape " << t["shape"].dump() << " is absurdly large");
          numel *= dim;
        }
      }
      if (zero_dim) numel = 0;

      const json& off = t["data_offsets"];
      SPEC_INPUT_CHECK(
          off[0].is_number_unsigned() ||
              (off[0].is_number_integer() && off[0].get<std::int64_t>() >= 0),
          where << ": data_offsets " << off.dump() << " are not non-negative integers");
      SPEC_INPUT_CHECK(
          off[1].is_number_unsigned() ||
              (off[1].is_number_integer() && off[1].get<std::int64_t>() >= 0),
          where << ": data_offsets " << off.dump() << " are not non-negative integers");
      const std::uint64_t begin = off[0].get<std::uint64_t>();
      const std::uint64_t end = off[1].get<std::uint64_t>();
      SPEC_INPUT_CHECK(begin <= end, where << ": data_offsets [" << begin << ", " << end
                                           << "] have begin > end: corrupt header");
      SPEC_INPUT_CHECK(end <= data_size,
                       where << ": data_offsets [" << begin << ", " << end
                             << "] lie outside the data section of " << data_size
                             << " bytes: the file is truncated or the header is corrupt");
      if (elem != 0) {
        SPEC_INPUT_CHECK(numel <= std::numeric_limits<std::uint64_t>::max() / elem &&
                             end - begin == numel * elem,
                         where << ": data_offsets [" << begin << ", " << end << "] span "
                               << end - begin << " bytes, but shape " << t["shape"].dump() << " of "
                               << dtype_str << " needs " << numel * elem
                               << " bytes: corrupt header");
      }
      entries.push_back({name, begin, end});

      DType dt;
      if (float_dtype(dtype_str, &dt)) {
        view.dtype = dt;
        view.data = data + begin;
        view.nbytes = static_cast<std::size_t>(end - begin);
        tensors_.emplace(name, std::move(view));
      } else {
        unsupported_dtype_[name] = dtype_str;
        view.data = data + begin;
        view.nbytes = static_cast<std::size_t>(end - begin);
        other_.emplace(name, std::move(view));
      }
    }

    // Full coverage of the data section, no overlaps, no holes.
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t prev_end = 0;
    const Entry* prev = nullptr;
    for (const Entry& e : entries) {
      if (e.begin < prev_end) {
        SPEC_INPUT_FAIL(path << ": tensor '" << e.name << "' bytes [" << e.begin << ", " << e.end
                             << ") overlap tensor '" << prev->name << "' bytes [" << prev->begin
                             << ", " << prev->end << "): corrupt header");
      }
      if (e.begin > prev_end) {
        SPEC_INPUT_FAIL(path << ": hole of " << e.begin - prev_end << " bytes in the data section "
                             << "before tensor '" << e.name << "' (starts at " << e.begin
                             << ", previous data ends at " << prev_end << "): corrupt header");
      }
      prev_end = e.end;
      prev = &e;
    }
    SPEC_INPUT_CHECK(prev_end == data_size, path << ": the tensors cover " << prev_end
                                                 << " bytes but the data section has " << data_size
                                                 << " bytes: " << data_size - prev_end
                                                 << " trailing bytes not described by the header");
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  auto bad = unsupported_dtype_.find(name);
  if (bad != unsupported_dtype_.end()) {
    SPEC_INPUT_FAIL(path_ << ": tensor '" << name << "' has dtype " << bad->second
                          << "; only F32, F16 and BF16 weights are supported "
                             "(re-export the checkpoint in one of those)");
  }
  SPEC_INPUT_FAIL(path_ << ": tensor '" << name << "' not found (the file has "
                        << tensors_.size() + unsupported_dtype_.size() << " tensors)");
}

const TensorView& SafetensorsFile::get_other(const std::string& name,
                                             const std::string& want) const {
  auto it = other_.find(name);
  if (it == other_.end()) {
    SPEC_INPUT_CHECK(tensors_.count(name) == 0,
                     path_ << ": tensor '" << name << "' has a float dtype, expected " << want);
    SPEC_INPUT_FAIL(path_ << ": tensor '" << name << "' not found");
  }
  const std::string& dtype = unsupported_dtype_.at(name);
  SPEC_INPUT_CHECK(dtype == want, path_ << ": tensor '" << name << "' has dtype " << dtype
                                        << ", expected " << want);
  return it->second;
}

std::string SafetensorsFile::dtype_of(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return dtype_name(it->second.dtype);
  auto other = unsupported_dtype_.find(name);
  SPEC_INPUT_CHECK(other != unsupported_dtype_.end(),
                   path_ << ": tensor '" << name << "' not found");
  return other->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  for (const auto& kv : unsupported_dtype_) out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    SPEC_CHECK(names.insert(t.name).second,
               "write_safetensors " << path << ": tensor '" << t.name << "' given twice");
    std::uint64_t numel = 1;
    for (std::int64_t d : t.shape) {
      SPEC_CHECK(d >= 0, "write_safetensors " << path << ": tensor '" << t.name
                                              << "' has a negative dimension");
      numel *= static_cast<std::uint64_t>(d);
    }
    const bool other = !t.other_dtype.empty();
    const std::size_t size = other ? t.other_size : dtype_size(t.dtype);
    SPEC_CHECK(numel * size == t.bytes.size(),
               "write_safetensors " << path << ": tensor '" << t.name << "' has " << t.bytes.size()
                                    << " bytes, its shape and dtype need " << numel * size);
    header[t.name] = {{"dtype", other ? t.other_dtype : std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicOutput out(path, OutputPolicy{true, {}, "safetensors file"});
  unsigned char len[8];
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(text);
  for (const TensorToWrite& t : tensors) out.write(t.bytes.data(), t.bytes.size());
  out.commit();
}

}  // namespace specrun
