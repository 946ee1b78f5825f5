// The derived views of a JobConfig: canonical TOML and JSON, the hash, and the help text. All
// of them walk the option table, so they list every option in the same order.
#include <charconv>
#include <cstdio>
#include <sstream>

#include "common/hash.h"
#include "config/config_text.h"
#include "config/job_config.h"
#include "config/option_table.h"

namespace specrun {
namespace {

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

std::string toml_value(bool v) {
  return v ? "true" : "false";
}
std::string toml_value(int v) {
  return std::to_string(v);
}
std::string toml_value(std::int64_t v) {
  return std::to_string(v);
}
std::string toml_value(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, ptr);
  // TOML floats need a fraction or an exponent ("600" would read back as an integer).
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}
std::string toml_value(const std::string& v) {
  return toml_string(v);
}
std::string toml_value(const ConfigPath& v) {
  return toml_string(v.resolved.empty() ? v.text : v.resolved);
}
std::string toml_value(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_string(v[i]);
  return out + "]";
}

nlohmann::json json_value(const ConfigPath& v) {
  return v.resolved.empty() ? v.text : v.resolved;
}
template <class T>
nlohmann::json json_value(const T& v) {
  return nlohmann::json(v);
}

// Shown in help: paths as written in the defaults.
std::string default_text(const ConfigPath& v) {
  return v.text.empty() ? std::string("(none)") : toml_string(v.text);
}
template <class T>
std::string default_text(const T& v) {
  return toml_value(v);
}

}  // namespace

std::string to_toml(const JobConfig& config) {
  std::ostringstream out;
  std::string section;
  for_each_option(config, [&](const OptionSpec& spec, const auto& member) {
    if (section != spec.section) {
      out << (section.empty() ? "" : "\n") << "[" << spec.section << "]\n";
      section = spec.section;
    }
    out << spec.key << " = " << toml_value(member) << "\n";
  });
  return out.str();
}

nlohmann::json to_json(const JobConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for_each_option(config, [&](const OptionSpec& spec, const auto& member) {
    j[spec.section][spec.key] = json_value(member);
  });
  return j;
}

std::uint64_t config_hash(const JobConfig& config) {
  // nlohmann::json keeps object keys sorted, so dump() is canonical.
  return fnv1a64(to_json(config).dump());
}

std::string config_hash_hex(const JobConfig& config) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx",
                static_cast<unsigned long long>(config_hash(config)));
  return buf;
}

std::string config_help() {
  std::ostringstream out;
  out << "Job file keys (TOML). Defaults < job file < --set section.key=value (repeatable).\n"
         "Relative paths in the job file are taken from the job file's directory, those\n"
         "given with --set from the current directory. Lists: [\"a\", \"b\"], or a,b with --set.\n";
  const JobConfig defaults;
  std::string section;
  for_each_option(defaults, [&](const OptionSpec& spec, const auto& member) {
    if (section != spec.section) {
      out << "\n[" << spec.section << "]\n";
      section = spec.section;
    }
    using T = std::decay_t<decltype(member)>;
    constexpr bool kNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;
    std::string type = option_type_name(member);
    if (kNumber || !spec.choices.empty())
      type += " in " + describe_allowed(spec, std::is_integral_v<T>);
    if (spec.non_empty) type += ", required";
    out << "  " << spec.name() << "  (" << type << "; default " << default_text(member) << ")\n"
        << "      " << spec.help << "\n";
  });
  return out.str();
}

}  // namespace specrun
