#include "text/hf_normalize.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "common/error.h"
#include "text/hf_regex.h"
#include "text/hf_unicode.h"

namespace specrun::hf {

namespace {

constexpr const char* kSupported =
    "NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, StripAccents, Sequence";

class UnicodeForm : public Normalizer {
 public:
  UnicodeForm(utf8proc_option_t options, std::string where)
      : options_(options), where_(std::move(where)) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &out, options_);
    SPEC_CHECK(n >= 0, where_ << ": utf8proc failed: " << utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
    std::free(out);
  }

 private:
  utf8proc_option_t options_;
  std::string where_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
      const char32_t cp = next_code_point(text, pos);
      if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping
        out += "i\xCC\x87";
        continue;
      }
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    text = std::move(out);
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  explicit Replace(const JsonField& json)
      : pattern_(json.require("pattern")), content_(json.string("content")) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    if (right_) text.erase(text.size() - trailing_white_space(text));
    if (left_) text.erase(0, leading_white_space(text));
  }

 private:
  bool left_, right_;
};

class StripAccents : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t start = pos;
      const auto category =
          utf8proc_category(static_cast<utf8proc_int32_t>(next_code_point(text, pos)));
      if (category != UTF8PROC_CATEGORY_MN && category != UTF8PROC_CATEGORY_MC &&
          category != UTF8PROC_CATEGORY_ME)
        out.append(text, start, pos - start);
    }
    text = std::move(out);
  }
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonField& json) {
  if (json.is_null()) return nullptr;
  json.expect_object();
  const std::string type = json.type();
  if (type == "NFC")
    return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE), json.where());
  if (type == "NFD")
    return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE), json.where());
  if (type == "NFKC")
    return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT),
        json.where());
  if (type == "NFKD")
    return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT),
        json.where());
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") return std::make_unique<Prepend>(json.string("prepend"));
  if (type == "Replace") return std::make_unique<Replace>(json);
  if (type == "Strip")
    return std::make_unique<Strip>(json.bool_or("strip_left", true),
                                   json.bool_or("strip_right", true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Sequence") {
    const JsonField list = json.require("normalizers");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      const JsonField item = list.at(i);
      SPEC_INPUT_CHECK(!item.is_null(), item.where() << " must be a normalizer, not null");
      steps.push_back(make_normalizer(item));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  json.unsupported_type(kSupported);
}

}  // namespace specrun::hf
