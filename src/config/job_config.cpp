// Reading a JobConfig: TOML file, then --set overrides, then one validation pass. Every step
// walks the option table (option_table.h); nothing here names an individual option except the
// rules that relate several options (validate_cross_rules).
#include "config/job_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/utf8.h"
#include "config/config_text.h"
#include "config/option_table.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;

// Where each option got its value: "set at job.toml:5:13" or "set by --set decode.top_k=5".
using Origins = std::map<std::string, std::string>;

std::string origin_of(const Origins& origins, const std::string& name) {
  auto it = origins.find(name);
  return it == origins.end() ? std::string("default") : it->second;
}

std::string location(const std::string& source, const toml::source_region& region) {
  return source + ":" + std::to_string(region.begin.line) + ":" +
         std::to_string(region.begin.column);
}

std::string resolve_path(const std::string& text, const fs::path& base) {
  if (text.empty()) return "";
  fs::path p(text);
  if (p.is_relative()) p = base / p;
  return p.lexically_normal().string();
}

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  auto e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

// "\"text\"" or "'text'" -> "text"; anything else unchanged.
std::string unquote(const std::string& s) {
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front())
    return s.substr(1, s.size() - 2);
  return s;
}

const char* toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date/time";
  }
}

const char* type_example(const char* type_name) {
  std::string_view t = type_name;
  if (t == "boolean") return "true";
  if (t == "integer") return "4";
  if (t == "float") return "0.5";
  if (t == "list of strings") return "[\"a\", \"b\"]";
  return "\"text in double quotes\"";
}

template <class T>
[[noreturn]] void wrong_type(const OptionSpec& spec, const T& member, const std::string& where,
                             const std::string& got) {
  const char* expected = option_type_name(member);
  SPEC_INPUT_FAIL(where << ": wrong type for " << spec.name() << ": expected " << expected
                        << ", got " << got << " (write it like " << spec.key << " = "
                        << type_example(expected) << ")");
}

[[noreturn]] void out_of_range(const OptionSpec& spec, const std::string& value, bool integer,
                               const std::string& origin) {
  SPEC_INPUT_FAIL(spec.name() << " = " << value << " is out of range (" << origin << "): allowed "
                              << describe_allowed(spec, integer));
}

template <class Int>
void assign_int(const OptionSpec& spec, std::int64_t v, Int& member, const std::string& origin) {
  if (v < std::numeric_limits<Int>::min() || v > std::numeric_limits<Int>::max())
    out_of_range(spec, std::to_string(v), true, origin);
  member = static_cast<Int>(v);
}

// ---- values from TOML nodes -----------------------------------------------------------------

struct TomlSource {
  std::string where;  // file:line:col of the value
  fs::path base;      // for relative paths
};

void set_from_toml(const toml::node& n, const OptionSpec& spec, bool& m, const TomlSource& src) {
  if (!n.is_boolean()) wrong_type(spec, m, src.where, toml_type_name(n));
  m = n.as_boolean()->get();
}

template <class Int>
requires std::is_integral_v<Int>
void set_from_toml(const toml::node& n, const OptionSpec& spec, Int& m, const TomlSource& src) {
  if (!n.is_integer()) wrong_type(spec, m, src.where, toml_type_name(n));
  assign_int(spec, n.as_integer()->get(), m, "set at " + src.where);
}

void set_from_toml(const toml::node& n, const OptionSpec& spec, double& m, const TomlSource& src) {
  if (n.is_integer()) {
    m = static_cast<double>(n.as_integer()->get());
  } else if (n.is_floating_point()) {
    m = n.as_floating_point()->get();
  } else {
    wrong_type(spec, m, src.where, toml_type_name(n));
  }
}

void set_from_toml(const toml::node& n, const OptionSpec& spec, std::string& m,
                   const TomlSource& src) {
  if (!n.is_string()) wrong_type(spec, m, src.where, toml_type_name(n));
  m = n.as_string()->get();
}

void set_from_toml(const toml::node& n, const OptionSpec& spec, ConfigPath& m,
                   const TomlSource& src) {
  if (!n.is_string()) wrong_type(spec, m, src.where, toml_type_name(n));
  m.text = n.as_string()->get();
  m.resolved = resolve_path(m.text, src.base);
}

void set_from_toml(const toml::node& n, const OptionSpec& spec, std::vector<std::string>& m,
                   const TomlSource& src) {
  const toml::array* arr = n.as_array();
  if (arr == nullptr) wrong_type(spec, m, src.where, toml_type_name(n));
  std::vector<std::string> values;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const toml::node& element = *arr->get(i);
    // decode.stop_tokens mixes ids and token strings: its integers are kept as their text.
    if (spec.integers_as_text && element.is_integer()) {
      values.push_back(std::to_string(element.as_integer()->get()));
      continue;
    }
    if (!element.is_string())
      wrong_type(
          spec, m, src.where,
          "an array whose element " + std::to_string(i + 1) + " is " + toml_type_name(element));
    values.push_back(element.as_string()->get());
  }
  m = std::move(values);
}

// ---- values from --set text -----------------------------------------------------------------

struct TextSource {
  std::string where;  // "--set section.key=value"
  fs::path cwd;       // --set paths are relative to the current directory
};

void set_from_text(const std::string& text, const OptionSpec& spec, bool& m,
                   const TextSource& src) {
  if (text == "true") {
    m = true;
  } else if (text == "false") {
    m = false;
  } else {
    wrong_type(spec, m, src.where, "'" + text + "'");
  }
}

template <class Int>
requires std::is_integral_v<Int>
void set_from_text(const std::string& text, const OptionSpec& spec, Int& m, const TextSource& src) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data() + (text.starts_with('+') ? 1 : 0), end, v);
  if (ec == std::errc::result_out_of_range) out_of_range(spec, text, true, "set by " + src.where);
  if (ec != std::errc() || ptr != end || text.empty())
    wrong_type(spec, m, src.where, "'" + text + "'");
  assign_int(spec, v, m, "set by " + src.where);
}

void set_from_text(const std::string& text, const OptionSpec& spec, double& m,
                   const TextSource& src) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data() + (text.starts_with('+') ? 1 : 0), end, v);
  if (ec != std::errc() || ptr != end || text.empty())
    wrong_type(spec, m, src.where, "'" + text + "'");
  m = v;
}

void set_from_text(const std::string& text, const OptionSpec&, std::string& m, const TextSource&) {
  m = unquote(text);
}

void set_from_text(const std::string& text, const OptionSpec&, ConfigPath& m,
                   const TextSource& src) {
  m.text = unquote(text);
  m.resolved = resolve_path(m.text, src.cwd);
}

// A TOML array ("[\"a\", \"b\"]") or a comma-separated list ("a,b").
void set_from_text(const std::string& text, const OptionSpec& spec, std::vector<std::string>& m,
                   const TextSource& src) {
  if (text.starts_with('[')) {
    toml::table doc;
    try {
      doc = toml::parse("value = " + text);
    } catch (const toml::parse_error& e) {
      SPEC_INPUT_FAIL(src.where << ": the value is not a valid TOML array (" << e.description()
                                << "); write it as [\"a\", \"b\"] or a,b");
    }
    set_from_toml(*doc.get("value"), spec, m, TomlSource{src.where, src.cwd});
    return;
  }
  std::vector<std::string> values;
  std::string_view rest = text;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string item = unquote(trim(rest.substr(0, comma)));
    if (!item.empty()) values.push_back(item);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  m = std::move(values);
}

// ---- validation -----------------------------------------------------------------------------

template <class Num>
requires std::is_arithmetic_v<Num>
void check_option(const OptionSpec& spec, const Num& v, const std::string& origin) {
  if constexpr (std::is_same_v<Num, bool>) {
    return;
  } else {
    double x = static_cast<double>(v);
    bool ok = (spec.min_exclusive ? x > spec.min : x >= spec.min) && x <= spec.max;
    if (!ok) out_of_range(spec, format_number(x), std::is_integral_v<Num>, origin);
  }
}

void check_choice(const OptionSpec& spec, const std::string& value, const std::string& origin) {
  if (spec.choices.empty()) return;
  if (std::find(spec.choices.begin(), spec.choices.end(), value) != spec.choices.end()) return;
  SPEC_INPUT_FAIL(spec.name() << " = \"" << value << "\" is not allowed (" << origin
                              << "): choose one of " << describe_allowed(spec, false)
                              << "; did you mean \"" << closest_match(value, spec.choices)
                              << "\"?");
}

[[noreturn]] void not_set(const OptionSpec& spec, const std::string& origin) {
  SPEC_INPUT_FAIL(spec.name() << " is not set (" << origin << "): " << spec.help
                              << " Set it under [" << spec.section << "] in the job file or with "
                              << "--set " << spec.name() << "=VALUE");
}

void check_option(const OptionSpec& spec, const std::string& v, const std::string& origin) {
  if (spec.non_empty && v.empty()) not_set(spec, origin);
  check_choice(spec, v, origin);
}

void check_option(const OptionSpec& spec, const ConfigPath& v, const std::string& origin) {
  if (spec.non_empty && v.empty()) not_set(spec, origin);
}

void check_option(const OptionSpec& spec, const std::vector<std::string>& v,
                  const std::string& origin) {
  if (spec.non_empty && v.empty()) not_set(spec, origin);
  for (std::size_t i = 0; i < v.size(); ++i) {
    check_choice(spec, v[i], origin);
    if (std::find(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v[i]) !=
        v.begin() + static_cast<std::ptrdiff_t>(i))
      SPEC_INPUT_FAIL(spec.name() << " lists \"" << v[i] << "\" twice (" << origin
                                  << "): give each value once");
  }
}

// Rules that relate several options (the drafter's keys are its kind's: spec/drafter_registry).
void validate_cross_rules(const JobConfig& c, const Origins& origins) {
  SPEC_INPUT_CHECK(!c.uses_mode("dataset") || c.decode.modes.size() == 1,
                   "decode.modes (" << origin_of(origins, "decode.modes")
                                    << ") combines \"dataset\" with other modes: a dataset job "
                                       "runs alone (decode.modes = [\"dataset\"])");
  // hidden_layers: a keyword or a list of ids; the ids are checked against the model at start.
  const std::string& layers = c.dataset.hidden_layers;
  if (layers != "eagle3" && layers != "none") {
    std::size_t at = 0;
    while (at <= layers.size()) {
      const std::size_t comma = std::min(layers.find(',', at), layers.size());
      std::string item = layers.substr(at, comma - at);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      SPEC_INPUT_CHECK(item == "final" || (item == "eagle3" && at == 0) ||
                           (!item.empty() && item.size() <= 6 &&
                            item.find_first_not_of("0123456789") == std::string::npos),
                       "dataset.hidden_layers = \""
                           << layers << "\" (" << origin_of(origins, "dataset.hidden_layers")
                           << "): '" << item
                           << "' is not a layer id; write eagle3, none, or ids such as "
                              "\"2,3,4,final\"");
      at = comma + 1;
    }
  }
  SPEC_INPUT_CHECK(c.parallel.ep == 0 || c.parallel.ep == 1 || c.parallel.ep == c.parallel.tp,
                   "parallel.ep = " << c.parallel.ep << " (" << origin_of(origins, "parallel.ep")
                                    << ") is not supported with parallel.tp = " << c.parallel.tp
                                    << ": use 1 (every expert on every rank) or " << c.parallel.tp
                                    << " (= tp: the experts split over the ranks; the default)");
  SPEC_INPUT_CHECK(c.debug.inject_delay_ms == 0 || c.debug.inject_phase != "none",
                   "debug.inject_delay_ms = " << format_number(c.debug.inject_delay_ms) << " ("
                                              << origin_of(origins, "debug.inject_delay_ms")
                                              << ") has no effect with debug.inject_phase = "
                                                 "\"none\": choose draft, verify or sample");
}

void validate_impl(const JobConfig& config, const Origins& origins) {
  for_each_option(config, [&](const OptionSpec& spec, const auto& member) {
    check_option(spec, member, origin_of(origins, spec.name()));
  });
  validate_cross_rules(config, origins);
}

// ---- applying a job file and overrides ------------------------------------------------------

std::string keys_of_section(const std::string& section) {
  std::string keys;
  JobConfig defaults;
  for_each_option(defaults, [&](const OptionSpec& spec, const auto&) {
    if (section != spec.section) return;
    keys += (keys.empty() ? "" : ", ") + std::string(spec.key);
  });
  return keys;
}

// Calls apply(spec, member) for the option named "section.key"; false when there is none.
template <class Apply>
bool with_option(JobConfig& config, const std::string& name, Apply&& apply) {
  bool found = false;
  for_each_option(config, [&](const OptionSpec& spec, auto& member) {
    if (found || spec.name() != name) return;
    found = true;
    apply(spec, member);
  });
  return found;
}

void apply_job_table(const toml::table& root, const std::string& source, const fs::path& base,
                     JobConfig& config, Origins& origins) {
  const std::vector<std::string>& sections = config_sections();
  std::string section_list;
  for (const auto& s : sections) section_list += (section_list.empty() ? "" : ", ") + s;
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string at = location(source, section_key.source());
    const toml::table* table = section_node.as_table();
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      if (table != nullptr)
        SPEC_INPUT_FAIL(at << ": unknown section [" << section << "]; did you mean ["
                           << closest_match(section, sections) << "]? (sections: " << section_list
                           << ")");
      SPEC_INPUT_FAIL(at << ": unknown key '" << section << "' outside any section; did you mean '"
                         << closest_option_name(section) << "'? Put keys below their [section] "
                         << "header");
    }
    SPEC_INPUT_CHECK(table != nullptr, at << ": '" << section << "' must be a table: write ["
                                          << section << "] on its own line, its keys below it");
    for (auto&& [key, node] : *table) {
      const std::string name = section + "." + std::string(key.str());
      const TomlSource src{location(source, node.source()), base};
      const auto& value = node;  // a lambda cannot capture a structured binding before clang 16
      bool known = with_option(config, name, [&](const OptionSpec& spec, auto& member) {
        set_from_toml(value, spec, member, src);
      });
      if (!known)
        SPEC_INPUT_FAIL(location(source, key.source())
                        << ": unknown key '" << name << "'; did you mean '"
                        << closest_option_name(name) << "'? (keys of [" << section
                        << "]: " << keys_of_section(section) << ")");
      origins[name] = "set at " + src.where;
    }
  }
}

void apply_override(const std::string& arg, const fs::path& cwd, JobConfig& config,
                    Origins& origins) {
  auto eq = arg.find('=');
  const std::string name = trim(std::string_view(arg).substr(0, eq));
  if (eq == std::string::npos || name.empty())
    SPEC_INPUT_FAIL("malformed --set '" << arg << "': expected section.key=value, e.g. "
                                        << "--set decode.draft_len=8");
  SPEC_INPUT_CHECK(invalid_utf8_at(arg.substr(0, eq)) == std::string_view::npos,
                   "--set: a key is not valid UTF-8 (keys are names such as decode.draft_len)");
  if (const std::size_t bad = invalid_utf8_at(std::string_view(arg).substr(eq + 1));
      bad != std::string_view::npos)
    SPEC_INPUT_FAIL("--set " << name << "=...: the value is not valid UTF-8 (at byte " << bad
                             << " of the value); job settings must be UTF-8 text");
  const TextSource src{"--set " + arg, cwd};
  const std::string value = trim(std::string_view(arg).substr(eq + 1));
  bool known = with_option(config, name, [&](const OptionSpec& spec, auto& member) {
    set_from_text(value, spec, member, src);
  });
  if (!known)
    SPEC_INPUT_FAIL("unknown --set key '" << name << "'; did you mean '"
                                          << closest_option_name(name)
                                          << "'? (every key is listed by config_help, "
                                          << "shown in `specrun run --help`)");
  origins[name] = "set by " + src.where;
}

}  // namespace

bool JobConfig::uses_mode(const std::string& mode) const {
  return std::find(decode.modes.begin(), decode.modes.end(), mode) != decode.modes.end();
}

std::string JobConfig::origin(const std::string& key) const {
  return origin_of(origins, key);
}

void validate_job_config(const JobConfig& config, const ConfigValidator& extra) {
  validate_impl(config, config.origins);
  if (extra) extra(config);
}

JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides, const std::string& base_dir,
                           const ConfigValidator& extra) {
  const fs::path cwd = fs::current_path();
  const fs::path base = base_dir.empty() ? cwd : fs::absolute(base_dir);
  if (const std::size_t at = invalid_utf8_at(toml_text); at != std::string_view::npos) {
    const std::string_view before(toml_text.data(), at);
    const std::size_t line =
        1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
    const std::size_t nl = before.rfind('\n');
    const std::size_t column = at - (nl == std::string_view::npos ? 0 : nl + 1) + 1;
    SPEC_INPUT_FAIL(source_name << ":" << line << ":" << column << ": not valid UTF-8 (byte 0x"
                                << std::hex
                                << static_cast<int>(static_cast<unsigned char>(toml_text[at]))
                                << "); job files must be UTF-8 text");
  }
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    SPEC_INPUT_FAIL(location(source_name, e.source())
                    << ": malformed TOML: " << e.description()
                    << " (strings need double quotes, lists are written [\"a\", \"b\"], each "
                       "[section] header on its own line)");
  }
  JobConfig config;
  Origins origins;
  apply_job_table(root, source_name, base, config, origins);
  for (const std::string& arg : overrides) apply_override(arg, cwd, config, origins);
  // Paths left at their defaults are relative to the current directory.
  for_each_option(config, [&](const OptionSpec&, auto& member) {
    if constexpr (std::is_same_v<std::decay_t<decltype(member)>, ConfigPath>) {
      if (member.resolved.empty()) member.resolved = resolve_path(member.text, cwd);
    }
  });
  config.job_text = toml_text;
  config.job_path = source_name;
  config.overrides = overrides;
  config.origins = std::move(origins);
  validate_job_config(config, extra);
  return config;
}

std::string read_job_file(const std::string& path) {
  std::error_code ec;
  SPEC_INPUT_CHECK(fs::is_regular_file(path, ec),
                   "cannot read job file '"
                       << path
                       << "': " << (fs::exists(path, ec) ? "not a regular file" : "no such file")
                       << " (relative paths start at the current "
                       << "directory " << fs::current_path().string() << ")");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  SPEC_INPUT_CHECK(!in.bad(), "cannot read job file '" << path << "': " << std::strerror(errno));
  return text.str();
}

std::string job_file_dir(const std::string& path) {
  return fs::absolute(path).parent_path().lexically_normal().string();
}

JobConfig load_job_config(const std::string& path, const std::vector<std::string>& overrides,
                          const ConfigValidator& extra) {
  return parse_job_config(read_job_file(path), path, overrides, job_file_dir(path), extra);
}

}  // namespace specrun
