// Reading tokenizer.json: a JSON value together with the file it came from and its field path
// ("pre_tokenizer.pretokenizers[1]"), so that every error names both, e.g.
//   /m/tokenizer.json: pre_tokenizer.type "Whitespace" is not supported (supported: ...)
// Unknown members are ignored, as the Rust library's serde structs ignore them.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace specrun::hf {

class JsonField {
 public:
  // `value` and `file` must outlive this object and every field taken from it.
  JsonField(const nlohmann::json& value, std::string path, const std::string& file);

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return *file_; }
  bool is_null() const { return value_->is_null(); }

  // "FILE: PATH" and "FILE: PATH.KEY", the prefixes of messages.
  std::string where() const;
  std::string where(const char* key) const;

  // Member `key` (a null field when absent); element `index` of an array.
  JsonField get(const char* key) const;
  JsonField at(std::size_t index) const;
  // Member `key`, which must be present and not null.
  JsonField require(const char* key) const;
  // Number of elements; throws unless this is an array.
  std::size_t array_size() const;
  // Throws unless this is an object.
  void expect_object() const;

  // Member `key` as a string (required), or `fallback` when absent or null.
  std::string string(const char* key) const;
  std::string string_or(const char* key, const std::string& fallback) const;
  bool bool_or(const char* key, bool fallback) const;
  long long integer(const char* key) const;
  long long integer_or(const char* key, long long fallback) const;
  // This object's "type" member (required).
  std::string type() const;

  // Throws "FILE: PATH.type "T" is not supported (supported: `supported`)".
  [[noreturn]] void unsupported_type(const char* supported) const;
  // Throws "FILE: PATH.KEY `message`".
  [[noreturn]] void fail(const char* key, const std::string& message) const;

 private:
  std::string child_path(const char* key) const;

  const nlohmann::json* value_;
  std::string path_;
  const std::string* file_;
};

}  // namespace specrun::hf
