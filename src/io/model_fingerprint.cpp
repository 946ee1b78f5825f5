#include "io/model_fingerprint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fs = std::filesystem;

namespace specrun {

namespace {

constexpr std::size_t kPieceBytes = std::size_t{16} << 20;

std::string hex_of(std::uint64_t h) {
  char hex[24];
  std::snprintf(hex, sizeof hex, "xxh3:%016llx", static_cast<unsigned long long>(h));
  return hex;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One file hashed through a read-only mapping. `contents` false: a safetensors file's header
// only (the mapping then touches its first pages alone).
ModelFileHash hash_file(const fs::path& path, bool contents) {
  ModelFileHash f;
  f.name = path.filename().string();
  const bool weights = ends_with(f.name, ".safetensors");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SPEC_INPUT_CHECK(fd >= 0, "cannot read " << path.string() << ": " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    SPEC_INPUT_CHECK(false, "cannot stat " << path.string() << ": " << std::strerror(err));
  }
  f.bytes = static_cast<std::uint64_t>(st.st_size);
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  const void* map = nullptr;
  if (size > 0) {
    map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      SPEC_INPUT_CHECK(false, "cannot map " << path.string() << ": " << std::strerror(err));
    }
  }
  ::close(fd);
  const auto* bytes = static_cast<const unsigned char*>(map);
  // Pieces of kPieceBytes hashed in parallel, then the hash of their hashes (little-endian u64s).
  const std::size_t pieces = contents || !weights ? (size + kPieceBytes - 1) / kPieceBytes : 0;
  std::vector<unsigned char> piece_hashes(pieces * 8);
#pragma omp parallel for schedule(dynamic, 1) if (pieces > 1)
  for (std::size_t i = 0; i < pieces; ++i) {
    const std::size_t at = i * kPieceBytes;
    const std::uint64_t h = XXH3_64bits(bytes + at, std::min(kPieceBytes, size - at));
    for (int b = 0; b < 8; ++b) piece_hashes[i * 8 + b] = static_cast<unsigned char>(h >> (8 * b));
  }
  if (contents || !weights)
    f.content = hex_of(XXH3_64bits(piece_hashes.data(), piece_hashes.size()));
  if (weights) {
    // The 8-byte little-endian header length and the header; a length past the end (a
    // corrupted file, refused by the loader with its own message) hashes what is there.
    std::uint64_t n = 0;
    if (size >= 8)
      for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
    const std::size_t header = size < 8 ? size
                                        : static_cast<std::size_t>(std::min<std::uint64_t>(
                                              8 + n, static_cast<std::uint64_t>(size)));
    f.header = hex_of(XXH3_64bits(bytes, header));
  }
  if (map) ::munmap(const_cast<void*>(map), size);
  return f;
}

}  // namespace

std::string xxh3_text(const void* data, std::size_t bytes) {
  return hex_of(XXH3_64bits(data, bytes));
}

bool fingerprinted_file(const std::string& name) {
  return ends_with(name, ".safetensors") || ends_with(name, ".json") || ends_with(name, ".jinja") ||
         name == "tokenizer.model";
}

ModelFingerprint fingerprint_model(const std::string& dir, bool contents) {
  const SteadyClockPoint t0 = SteadyClock::now();
  SPEC_INPUT_CHECK(fs::is_regular_file(fs::path(dir) / "config.json"),
                   "model directory " << dir << " has no config.json");
  std::vector<fs::path> paths;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.' && fingerprinted_file(name) && it->is_regular_file())
      paths.push_back(it->path());
  }
  SPEC_INPUT_CHECK(!ec, "cannot list model directory " << dir << ": " << ec.message());
  std::sort(paths.begin(), paths.end());
  ModelFingerprint fp;
  std::string canonical;
  for (const fs::path& p : paths) {
    fp.files.push_back(hash_file(p, contents));
    const ModelFileHash& f = fp.files.back();
    canonical += f.name + '\0' + std::to_string(f.bytes) + '\0' +
                 (f.content.empty() ? f.header : f.content) + '\n';
  }
  fp.complete = contents;
  fp.id = (contents ? "xxh3:" : "xxh3-headers:") +
          xxh3_text(canonical.data(), canonical.size()).substr(5);
  fp.seconds = seconds_since(t0);
  return fp;
}

void to_json(nlohmann::json& j, const ModelFingerprint& f) {
  nlohmann::json files = nlohmann::json::array();
  for (const ModelFileHash& h : f.files) {
    nlohmann::json e = {{"name", h.name}, {"bytes", h.bytes}};
    if (!h.content.empty()) e["content"] = h.content;
    if (!h.header.empty()) e["header"] = h.header;
    files.push_back(std::move(e));
  }
  j = {{"fingerprint", f.id},
       {"complete", f.complete},
       {"files", std::move(files)},
       {"hash_s", f.seconds}};
}

std::vector<std::string> describe_file_changes(const nlohmann::json& base,
                                               const nlohmann::json& next) {
  auto by_name = [](const nlohmann::json& files) {
    std::map<std::string, nlohmann::json> m;
    if (files.is_array())
      for (const nlohmann::json& f : files)
        if (f.is_object() && f.contains("name") && f["name"].is_string())
          m[f["name"].get<std::string>()] = f;
    return m;
  };
  const auto b = by_name(base), n = by_name(next);
  std::map<std::string, std::string> out;
  for (const auto& [name, f] : b) {
    auto it = n.find(name);
    if (it == n.end()) {
      out[name] = name + ": removed";
      continue;
    }
    const nlohmann::json& g = it->second;
    // What both sides have: the whole content, else the safetensors header, else the size.
    const bool headers = f.contains("header") && g.contains("header");
    const bool sizes = f.value("bytes", std::uint64_t{0}) == g.value("bytes", std::uint64_t{0});
    const bool same = f.contains("content") && g.contains("content")
                          ? sizes && f["content"] == g["content"]
                      : headers ? sizes && f["header"] == g["header"]
                                : sizes;
    if (same) continue;
    if (headers && f["header"] == g["header"])
      out[name] = name + ": values (same tensors)";
    else if (headers)
      out[name] = name + ": tensors";
    else
      out[name] = name + ": content";
  }
  for (const auto& [name, g] : n)
    if (!b.count(name)) out[name] = name + ": added";
  std::vector<std::string> phrases;
  for (auto& [name, phrase] : out) phrases.push_back(std::move(phrase));
  return phrases;
}

}  // namespace specrun
