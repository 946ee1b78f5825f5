#include "common/utf8.h"

namespace specrun {

namespace {

// Length of the well-formed sequence at s[i] (1..4), or 0 with `*valid_prefix` set to the
// length of the longest prefix that could still have become one (the maximal subpart).
int utf8_sequence_at(const unsigned char* s, std::size_t n, std::size_t i, int* valid_prefix) {
  const unsigned char c = s[i];
  *valid_prefix = 1;
  if (c < 0x80) return 1;
  int len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + static_cast<std::size_t>(k) >= n) return 0;
    const unsigned char b = s[i + static_cast<std::size_t>(k)];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    *valid_prefix = k + 1;
  }
  return len;
}

}  // namespace

std::string utf8_replace_invalid(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  std::size_t i = 0;
  while (i < n) {
    int prefix = 0;
    const int len = utf8_sequence_at(s, n, i, &prefix);
    if (len > 0) {
      out.append(bytes.substr(i, static_cast<std::size_t>(len)));
      i += static_cast<std::size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<std::size_t>(prefix);
    }
  }
  return out;
}

std::size_t invalid_utf8_at(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0; i < text.size();) {
    int prefix = 0;
    const int len = utf8_sequence_at(s, text.size(), i, &prefix);
    if (len == 0) return i;
    i += static_cast<std::size_t>(len);
  }
  return std::string_view::npos;
}

}  // namespace specrun
