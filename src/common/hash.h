// FNV-1a, 64 bit: the project's one non-cryptographic hash (configuration hashes, prompt-file
// content hashes, the seeds of synthetic weights). Stable across machines and builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace specrun {

inline constexpr std::uint64_t kFnv1a64Basis = 0xcbf29ce484222325ull;

// h after hashing `bytes` bytes of `data` (pass the previous result to continue a hash).
inline std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t h = kFnv1a64Basis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

inline std::uint64_t fnv1a64(std::string_view text, std::uint64_t h = kFnv1a64Basis) {
  return fnv1a64(text.data(), text.size(), h);
}

}  // namespace specrun
