#include "io/comm_config.h"

#include <dlfcn.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "io/model_fingerprint.h"

extern char** environ;

namespace specrun {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos && eq > 0) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

std::string env_or(const std::map<std::string, std::string>& env, const char* name,
                   const std::string& fallback) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

std::string password_home() {
  const struct passwd* pw = ::getpwuid(::getuid());
  return pw && pw->pw_dir ? pw->pw_dir : "";
}

// Reads one file (absent: present = false) and parses it with `parse`.
CommConfigFile read_file(const std::string& path,
                         std::map<std::string, std::string> (*parse)(const std::string&)) {
  CommConfigFile f;
  f.path = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return f;
  std::ostringstream text;
  text << in.rdbuf();
  const std::string bytes = text.str();
  f.present = true;
  f.hash = xxh3_text(bytes.data(), bytes.size());
  f.entries = parse(bytes);
  return f;
}

// The first file (in reading order) that sets a parameter gives its value, unless the
// environment (under `env_name(param)`) has it.
template <typename EnvName>
CommConfig resolve(std::vector<CommConfigFile> files,
                   const std::map<std::string, std::string>& environment, EnvName env_name) {
  CommConfig c;
  for (const CommConfigFile& f : files)
    for (const auto& [name, value] : f.entries) {
      if (c.params.count(name)) continue;
      auto it = environment.find(env_name(name));
      c.params[name] =
          it != environment.end() ? CommParam{it->second, "environment"} : CommParam{value, f.path};
    }
  c.files = std::move(files);
  return c;
}

template <typename T>
void read_key(const nlohmann::json& j, const char* key, T& out, const char* what) {
  auto it = j.find(key);
  SPEC_CHECK(it != j.end(), what << " JSON has no key '" << key << "'");
  try {
    it->get_to(out);
  } catch (const nlohmann::json::exception& e) {
    SPEC_FAIL(what << " JSON key '" << key << "' has the wrong type (" << it->type_name()
                   << "): " << e.what());
  }
}

}  // namespace

std::map<std::string, std::string> parse_nccl_conf(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    // NCCL sets a variable once (setenv without overwrite): the first line for a name counts.
    out.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

std::map<std::string, std::string> parse_mca_conf(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const auto eq = t.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = trim(t.substr(0, eq));
    if (!name.empty()) out[name] = trim(t.substr(eq + 1));  // a later line overrides
  }
  return out;
}

CommConfig resolve_nccl_config(std::vector<CommConfigFile> files,
                               const std::map<std::string, std::string>& environment) {
  CommConfig c =
      resolve(std::move(files), environment, [](const std::string& name) { return name; });
  c.library = "NCCL";
  return c;
}

CommConfig resolve_mca_config(std::vector<CommConfigFile> files,
                              const std::map<std::string, std::string>& environment) {
  CommConfig c = resolve(std::move(files), environment,
                         [](const std::string& name) { return "OMPI_MCA_" + name; });
  c.library = "Open MPI";
  return c;
}

std::vector<std::string> nccl_conf_paths(const std::map<std::string, std::string>& environment,
                                         const std::string& home) {
  std::vector<std::string> paths;
  const std::string named = env_or(environment, "NCCL_CONF_FILE", "");
  if (!named.empty())
    paths.push_back(named);
  else if (!home.empty())
    paths.push_back(home + "/.nccl.conf");
  paths.push_back("/etc/nccl.conf");
  return paths;
}

std::vector<std::string> mca_param_file_paths(const std::map<std::string, std::string>& environment,
                                              const std::string& home,
                                              const std::string& sysconfdir) {
  std::vector<std::string> paths;
  const std::string list = env_or(environment, "OMPI_MCA_mca_base_param_files", "");
  if (list.empty()) {
    if (!home.empty()) paths.push_back(home + "/.openmpi/mca-params.conf");
    paths.push_back(sysconfdir + "/openmpi-mca-params.conf");
    return paths;
  }
  std::istringstream in(list);
  std::string p;
  while (std::getline(in, p, ','))
    if (!p.empty()) paths.push_back(p);
  return paths;
}

CommConfig read_nccl_config() {
  const auto env = process_environment();
  std::vector<CommConfigFile> files;
  for (const std::string& p : nccl_conf_paths(env, password_home()))
    files.push_back(read_file(p, parse_nccl_conf));
  CommConfig c = resolve_nccl_config(std::move(files), env);
  // A later NCCL's parameter query API (not in 2.28) would list every parameter; its
  // presence is noted so that a record says which way its values were found.
  const bool api = ::dlsym(RTLD_DEFAULT, "ncclParamGetAllParameterKeys") != nullptr;
  c.note = std::string(
               "NCCL's resolution redone: environment, then NCCL_CONF_FILE or ~/.nccl.conf, then "
               "/etc/nccl.conf") +
           (api ? " (the loaded NCCL exports ncclParamGetAllParameterKeys; not read)"
                : " (the loaded NCCL has no parameter query API)");
  return c;
}

CommConfig read_openmpi_config() {
  const auto env = process_environment();
  // Open MPI's configuration directory: relocated (OPAL_SYSCONFDIR, OPAL_PREFIX) or the one it
  // was built with.
  std::string sysconfdir = env_or(env, "OPAL_SYSCONFDIR", "");
  if (sysconfdir.empty() && !env_or(env, "OPAL_PREFIX", "").empty())
    sysconfdir = env_or(env, "OPAL_PREFIX", "") + "/etc";
  if (sysconfdir.empty()) sysconfdir = SPECRUN_OMPI_SYSCONFDIR;
  std::vector<CommConfigFile> files;
  for (const std::string& p :
       mca_param_file_paths(env, env_or(env, "HOME", password_home()), sysconfdir))
    files.push_back(read_file(p, parse_mca_conf));
  CommConfig c = resolve_mca_config(std::move(files), env);
  c.note =
      "MCA parameter files (mca_base_param_files) under the OMPI_MCA_* environment; parameters "
      "set only in the environment are in the environment record";
  return c;
}

std::map<std::string, std::string> comm_config_fields(const CommConfig& config,
                                                      const std::string& prefix) {
  std::map<std::string, std::string> out;
  if (config.library.empty()) return out;
  for (const CommConfigFile& f : config.files)
    out[prefix + " file " + f.path] = f.present ? f.hash : "absent";
  for (const auto& [name, p] : config.params)
    out[prefix + " " + name] = p.value + " (" + p.source + ")";
  return out;
}

void to_json(nlohmann::json& j, const CommConfig& c) {
  nlohmann::json files = nlohmann::json::array();
  for (const CommConfigFile& f : c.files)
    files.push_back(
        {{"path", f.path}, {"present", f.present}, {"hash", f.hash}, {"entries", f.entries}});
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, p] : c.params) params[name] = {{"value", p.value}, {"source", p.source}};
  j = {{"library", c.library},
       {"note", c.note},
       {"files", std::move(files)},
       {"params", std::move(params)}};
}

void from_json(const nlohmann::json& j, CommConfig& c) {
  const char* what = "communication configuration";
  SPEC_CHECK(j.is_object(), what << " JSON is a " << j.type_name() << ", not an object");
  read_key(j, "library", c.library, what);
  read_key(j, "note", c.note, what);
  nlohmann::json files, params;
  read_key(j, "files", files, what);
  read_key(j, "params", params, what);
  SPEC_CHECK(files.is_array() && params.is_object(), what << " JSON has malformed files/params");
  c.files.clear();
  for (const nlohmann::json& f : files) {
    CommConfigFile file;
    read_key(f, "path", file.path, what);
    read_key(f, "present", file.present, what);
    read_key(f, "hash", file.hash, what);
    read_key(f, "entries", file.entries, what);
    c.files.push_back(std::move(file));
  }
  c.params.clear();
  for (auto it = params.begin(); it != params.end(); ++it) {
    CommParam p;
    read_key(it.value(), "value", p.value, what);
    read_key(it.value(), "source", p.source, what);
    c.params[it.key()] = std::move(p);
  }
}

}  // namespace specrun
