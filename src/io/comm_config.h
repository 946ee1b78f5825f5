// The configuration a communication library resolves at start, beyond the environment: NCCL and
// Open MPI both read configuration files that no environment record shows, and a file that
// differs on one node (an /etc/nccl.conf pinning NCCL_PROTO) looks like a code regression.
//
// NCCL (src/misc/param.cc, 2.x): the file named by NCCL_CONF_FILE, else ~/.nccl.conf (the home
// directory from the password database), then /etc/nccl.conf; each line "NAME=value" (lines
// starting with '#' skipped, nothing trimmed) is set only where the variable is not set yet, so
// the environment wins, then the first file. NCCL 2.28 has no query API for its parameters
// (ncclParamGetAllParameterKeys is not exported), so this is NCCL's own resolution, redone.
// Open MPI: the MCA parameter files of mca_base_param_files (OMPI_MCA_mca_base_param_files, else
// $HOME/.openmpi/mca-params.conf then <sysconfdir>/openmpi-mca-params.conf), lines "name = value"
// with '#' comments; OMPI_MCA_<name> in the environment (which is also where mpirun --mca puts
// them) wins, then the earlier file. Reading them costs microseconds; Open MPI's MPI_T interface
// would list every variable but takes 0.2 s per rank to initialise.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace specrun {

// One configuration file as this rank found it.
struct CommConfigFile {
  std::string path;
  bool present = false;
  std::string hash;                            // "xxh3:<16 hex>" of its bytes when present
  std::map<std::string, std::string> entries;  // as the library parses it
};

// A parameter set in a file, with the value the library uses and where that value came from.
struct CommParam {
  std::string value;
  std::string source;  // "environment" or the path of the file that set it
};

struct CommConfig {
  std::string library;                // "NCCL" or "Open MPI"; empty: not recorded
  std::string note;                   // how it was read
  std::vector<CommConfigFile> files;  // in the order the library reads them
  // Every parameter that a file sets (parameters set only in the environment are in the
  // environment record already): parameter name (NCCL_PROTO, btl) -> value and source.
  std::map<std::string, CommParam> params;
};

// Parsers, pure. NCCL: "NAME=value" per line, '#' at the start of a line is a comment, nothing
// is trimmed, lines without '=' are skipped. Open MPI: "name = value", blanks around both
// trimmed, '#' starts a comment line, lines without '=' skipped.
std::map<std::string, std::string> parse_nccl_conf(const std::string& text);
std::map<std::string, std::string> parse_mca_conf(const std::string& text);

// The resolution, pure: `files` in reading order (entries filled in), `environment` the
// process's variables (NAME -> value). NCCL parameter names are the variable names; Open MPI's
// are the MCA names, looked up as OMPI_MCA_<name> in the environment.
CommConfig resolve_nccl_config(std::vector<CommConfigFile> files,
                               const std::map<std::string, std::string>& environment);
CommConfig resolve_mca_config(std::vector<CommConfigFile> files,
                              const std::map<std::string, std::string>& environment);

// The files each library would read on this process, in order (paths only). `home` is the
// home directory; `sysconfdir` Open MPI's configuration directory.
std::vector<std::string> nccl_conf_paths(const std::map<std::string, std::string>& environment,
                                         const std::string& home);
std::vector<std::string> mca_param_file_paths(const std::map<std::string, std::string>& environment,
                                              const std::string& home,
                                              const std::string& sysconfdir);

// This process: reads the files (a missing file is recorded as absent, never an error).
CommConfig read_nccl_config();
CommConfig read_openmpi_config();

// Flat "name -> text" form that mismatch checks and compare diff key by key:
// "<prefix> NCCL_PROTO" -> "LL (/etc/nccl.conf)", "<prefix> file /etc/nccl.conf" -> "xxh3:..."
// or "absent". Empty for an unrecorded config.
std::map<std::string, std::string> comm_config_fields(const CommConfig& config,
                                                      const std::string& prefix);

void to_json(nlohmann::json& j, const CommConfig& config);
// Throws specrun::Error naming the key that is missing or mistyped.
void from_json(const nlohmann::json& j, CommConfig& config);

}  // namespace specrun
