// UTF-8 validation of untrusted text (job files, --set values) before it reaches parsers and
// JSON serialisation that assume valid UTF-8 (toml++ reached undefined behaviour on some
// non-ASCII bytes; nlohmann::json's dump() throws on them).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace specrun {

// The offset of the first byte that does not start or continue a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are ill-formed), or npos.
std::size_t invalid_utf8_at(std::string_view text);

// `bytes` with every ill-formed sequence replaced by U+FFFD, one per maximal subpart (the
// Unicode recommendation that Python's errors="replace" and Rust's from_utf8_lossy follow), so
// that decoded token bytes cut inside a character still give valid text.
std::string utf8_replace_invalid(std::string_view bytes);

}  // namespace specrun
