#include "text/hf_json.h"

#include "common/error.h"

namespace specrun::hf {

namespace {

const nlohmann::json& null_json() {
  static const nlohmann::json kNull;
  return kNull;
}

const char* kind_of(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    default:
      return "a number";
  }
}

}  // namespace

JsonField::JsonField(const nlohmann::json& value, std::string path, const std::string& file)
    : value_(&value), path_(std::move(path)), file_(&file) {}

std::string JsonField::child_path(const char* key) const {
  return path_.empty() ? std::string(key) : path_ + "." + key;
}

std::string JsonField::where() const {
  return *file_ + ": " + (path_.empty() ? "(top)" : path_);
}

std::string JsonField::where(const char* key) const {
  return *file_ + ": " + child_path(key);
}

JsonField JsonField::get(const char* key) const {
  if (!value_->is_object()) return JsonField(null_json(), child_path(key), *file_);
  auto it = value_->find(key);
  return JsonField(it == value_->end() ? null_json() : *it, child_path(key), *file_);
}

JsonField JsonField::at(std::size_t index) const {
  SPEC_INPUT_CHECK(value_->is_array() && index < value_->size(),
                   where() << " has no element " << index);
  return JsonField((*value_)[index], path_ + "[" + std::to_string(index) + "]", *file_);
}

JsonField JsonField::require(const char* key) const {
  expect_object();
  JsonField f = get(key);
  SPEC_INPUT_CHECK(!f.is_null(), where(key) << " is missing");
  return f;
}

std::size_t JsonField::array_size() const {
  SPEC_INPUT_CHECK(value_->is_array(),
                   where() << " must be an array (it is " << kind_of(*value_) << ")");
  return value_->size();
}

void JsonField::expect_object() const {
  SPEC_INPUT_CHECK(value_->is_object(),
                   where() << " must be an object (it is " << kind_of(*value_) << ")");
}

std::string JsonField::string(const char* key) const {
  JsonField f = require(key);
  SPEC_INPUT_CHECK(f.value().is_string(),
                   f.where() << " must be a string (it is " << kind_of(f.value()) << ")");
  return f.value().get<std::string>();
}

std::string JsonField::string_or(const char* key, const std::string& fallback) const {
  JsonField f = get(key);
  if (f.is_null()) return fallback;
  SPEC_INPUT_CHECK(f.value().is_string(),
                   f.where() << " must be a string (it is " << kind_of(f.value()) << ")");
  return f.value().get<std::string>();
}

bool JsonField::bool_or(const char* key, bool fallback) const {
  JsonField f = get(key);
  if (f.is_null()) return fallback;
  SPEC_INPUT_CHECK(f.value().is_boolean(),
                   f.where() << " must be true or false (it is " << kind_of(f.value()) << ")");
  return f.value().get<bool>();
}

long long JsonField::integer(const char* key) const {
  JsonField f = require(key);
  SPEC_INPUT_CHECK(f.value().is_number_integer(),
                   f.where() << " must be an integer (it is " << f.value().dump() << ")");
  return f.value().get<long long>();
}

long long JsonField::integer_or(const char* key, long long fallback) const {
  if (get(key).is_null()) return fallback;
  return integer(key);
}

std::string JsonField::type() const {
  return string("type");
}

void JsonField::unsupported_type(const char* supported) const {
  SPEC_INPUT_FAIL(where("type") << " \"" << type()
                                << "\" is not supported (supported: " << supported << ")");
}

void JsonField::fail(const char* key, const std::string& message) const {
  SPEC_INPUT_FAIL(where(key) << " " << message);
}

}  // namespace specrun::hf
