#include "io/provenance.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#ifdef SPECRUN_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kernels/cuda/device_info.h"
#endif

#include "common/build_info.h"
#include "common/error.h"
#include "dist/gather.h"
#include "dist/mpi_comm.h"
#include "kernels/cpu/dispatch.h"

extern char** environ;

namespace specrun {
namespace {

// Variables whose values differ between ranks of a correct launch, so a difference says nothing
// about a misconfiguration. Checked against `mpirun -np 2 env` and an MPMD launch
// (`mpirun -np 1 A : -np 1 B`) with Open MPI 4.1.4, plus Slurm's documented per-task and
// per-node output variables (sbatch/srun man pages, "OUTPUT ENVIRONMENT VARIABLES").
// CUDA_VISIBLE_DEVICES is deliberately NOT here: with per-task GPU binding it differs per rank
// on purpose, but it also changes NCCL's topology (no P2P between ranks), which is exactly what
// the check should show.
constexpr std::array<std::string_view, 24> kPerProcessVariables = {
    // Open MPI, per rank.
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_NODE_RANK",
    "OMPI_MCA_ess_base_vpid",
    "OMPI_MCA_orte_ess_vpid",  // older Open MPI spelling of the vpid
    "OMPI_MCA_orte_ess_node_rank",
    // Open MPI, per MPMD application context (`mpirun A : B`): which program and arguments.
    "OMPI_MCA_orte_app_num",
    "OMPI_COMMAND",
    "OMPI_ARGV",
    // Open MPI, per node: node-local process count, session directories, local daemon address.
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_FILE_LOCATION",
    "OMPI_MCA_orte_local_daemon_uri",
    "OMPI_MCA_orte_jobfam_session_dir",
    "OMPI_MCA_orte_top_session_dir",
    // PMIx (not recorded by prefix today; listed so that adding the prefix stays safe).
    "PMIX_RANK",
    "PMIX_ID",
    // Slurm, per task.
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_TASK_PID",
    // Slurm, per node.
    "SLURM_NODEID",
    "SLURM_GTIDS",
    "SLURM_TOPOLOGY_ADDR",
    "SLURM_CPUS_ON_NODE",
    "SLURM_STEP_GPUS",
};

std::string read_hostname() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown";
  return name.data();
}

std::string hdf5_runtime_version() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "error: H5get_libversion failed";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

#ifdef SPECRUN_HAVE_CUDA
std::string cuda_error_text(cudaError_t rc) {
  return std::string("error: ") + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
}

void collect_cuda(ProvenanceRecord& r) {
  int version = 0;
  cudaError_t rc = cudaRuntimeGetVersion(&version);
  r.cuda_runtime_version = rc == cudaSuccess ? decode_cuda_version(version) : cuda_error_text(rc);
  version = 0;
  rc = cudaDriverGetVersion(&version);
  if (rc != cudaSuccess)
    r.cuda_driver_version = cuda_error_text(rc);
  else if (version == 0)
    r.cuda_driver_version = "none (no CUDA driver installed)";
  else
    r.cuda_driver_version = decode_cuda_version(version);
  version = 0;
  ncclResult_t nrc = ncclGetVersion(&version);
  r.nccl_version = nrc == ncclSuccess ? decode_nccl_version(version)
                                      : std::string("error: ") + ncclGetErrorString(nrc);
  r.nccl_build_version = decode_nccl_version(NCCL_VERSION_CODE);
  int count = 0;
  rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    r.cuda_device_error = cuda_error_text(rc);
    // The failed query leaves a sticky "last error"; clear it so later checks start clean.
    cudaGetLastError();
    count = 0;
  }
  std::vector<std::string> bus_ids;
  for (int d = 0; d < count; ++d) {
    GpuDevice g;
    g.index = d;
    g.pci_bus_id = "unknown";
    cudaDeviceProp prop{};
    rc = cudaGetDeviceProperties(&prop, d);
    if (rc != cudaSuccess) {
      g.name = cuda_error_text(rc);
    } else {
      g.name = prop.name;
      std::array<unsigned char, 16> uuid{};
      std::memcpy(uuid.data(), prop.uuid.bytes, uuid.size());
      g.uuid = format_gpu_uuid(uuid);
      std::array<char, 32> pci{};
      if (cudaDeviceGetPCIBusId(pci.data(), pci.size(), d) == cudaSuccess)
        g.pci_bus_id = pci.data();
    }
    bus_ids.push_back(g.pci_bus_id);
    r.cuda_devices.push_back(std::move(g));
  }
  // NVML is asked even without devices: its driver version (or why it is missing) is the record
  // of the driver this rank had.
  cuda::NvmlReadings nvml = cuda::read_nvml(bus_ids);
  r.nvidia_driver_version = nvml.driver_version;
  for (std::size_t i = 0; i < r.cuda_devices.size(); ++i) {
    GpuDevice& g = r.cuda_devices[i];
    if (g.pci_bus_id == "unknown") {
      g.clock_note = "unavailable: no PCI bus id to find the device in NVML";
      continue;
    }
    g.sm_clock_mhz = nvml.clocks[i].sm_mhz;
    g.mem_clock_mhz = nvml.clocks[i].mem_mhz;
    g.clock_note = nvml.clocks[i].note;
  }
}
#endif

// Reads a field, turning nlohmann's exceptions into one that names the key.
template <typename T>
void read_field(const nlohmann::json& j, const char* key, T& out, const char* what) {
  auto it = j.find(key);
  SPEC_CHECK(it != j.end(), what << " JSON has no key '" << key
                                 << "': it was written by an incompatible specrun version");
  try {
    it->get_to(out);
  } catch (const nlohmann::json::exception& e) {
    SPEC_FAIL(what << " JSON key '" << key << "' has the wrong type (" << it->type_name()
                   << "): " << e.what());
  }
}

// The record fields that every rank of one launch should share, with a text form for the
// mismatch report. Hostname, pid, ranks and device lists differ by nature and are not here.
struct ComparedField {
  const char* name;
  std::function<std::string(const ProvenanceRecord&)> value;
};

const std::vector<ComparedField>& compared_fields() {
  auto text = [](bool b) { return std::string(b ? "true" : "false"); };
  static const std::vector<ComparedField> fields = {
      {"specrun_version", [](const ProvenanceRecord& r) { return r.specrun_version; }},
      {"git_commit", [](const ProvenanceRecord& r) { return r.git_commit; }},
      {"git_dirty", [text](const ProvenanceRecord& r) { return text(r.git_dirty); }},
      {"build_type", [](const ProvenanceRecord& r) { return r.build_type; }},
      {"cxx_flags", [](const ProvenanceRecord& r) { return r.cxx_flags; }},
      {"compiler", [](const ProvenanceRecord& r) { return r.compiler; }},
      {"cuda_build", [text](const ProvenanceRecord& r) { return text(r.cuda_build); }},
      {"mpi_library", [](const ProvenanceRecord& r) { return r.mpi_library; }},
      {"hdf5_version", [](const ProvenanceRecord& r) { return r.hdf5_version; }},
      {"cuda_runtime_version", [](const ProvenanceRecord& r) { return r.cuda_runtime_version; }},
      {"cuda_driver_version", [](const ProvenanceRecord& r) { return r.cuda_driver_version; }},
      {"nvidia_driver_version", [](const ProvenanceRecord& r) { return r.nvidia_driver_version; }},
      {"nccl_version", [](const ProvenanceRecord& r) { return r.nccl_version; }},
      {"nccl_build_version", [](const ProvenanceRecord& r) { return r.nccl_build_version; }},
      {"cpu_model", [](const ProvenanceRecord& r) { return r.cpu_model; }},
      {"cpu_isa", [](const ProvenanceRecord& r) { return r.cpu_isa; }},
      {"cpu_isa_forced", [text](const ProvenanceRecord& r) { return text(r.cpu_isa_forced); }},
      {"world_size", [](const ProvenanceRecord& r) { return std::to_string(r.world_size); }},
  };
  return fields;
}

// Groups (rank, value-or-unset) pairs by value; returns a mismatch when there is more than one
// group. Groups are ordered by their lowest rank.
std::optional<Mismatch> group_values(
    const std::string& name, bool is_environment,
    const std::vector<std::pair<int, std::optional<std::string>>>& values) {
  std::vector<MismatchValue> groups;
  for (const auto& entry : values) {
    const int rank = entry.first;
    const std::optional<std::string>& value = entry.second;
    auto same = [&](const MismatchValue& g) {
      return g.set == value.has_value() && (!g.set || g.value == *value);
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) {
      groups.push_back(MismatchValue{value.has_value(), value.value_or(""), {}});
      it = std::prev(groups.end());
    }
    it->ranks.push_back(rank);
  }
  if (groups.size() < 2) return std::nullopt;
  for (auto& g : groups) std::sort(g.ranks.begin(), g.ranks.end());
  std::sort(groups.begin(), groups.end(), [](const MismatchValue& a, const MismatchValue& b) {
    return a.ranks.front() < b.ranks.front();
  });
  return Mismatch{name, is_environment, std::move(groups)};
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

bool is_recorded_variable(const std::string& name) {
  for (const char* prefix : kRecordedEnvPrefixes)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

bool is_per_process_variable(const std::string& name) {
  return std::find(kPerProcessVariables.begin(), kPerProcessVariables.end(), name) !=
         kPerProcessVariables.end();
}

std::map<std::string, std::string> select_environment(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> out;
  for (const std::string& entry : entries) {
    auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string name = entry.substr(0, eq);
    if (is_recorded_variable(name)) out[name] = entry.substr(eq + 1);
  }
  return out;
}

std::string decode_cuda_version(int code) {
  return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}

std::string format_gpu_uuid(const std::array<unsigned char, 16>& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0xF];
  }
  return out;
}

std::string decode_nccl_version(int code) {
  const int major_unit = code < 10000 ? 1000 : 10000;
  return std::to_string(code / major_unit) + "." + std::to_string((code % major_unit) / 100) + "." +
         std::to_string(code % 100);
}

ProvenanceRecord collect_local_provenance(const MpiSession& mpi) {
  return collect_local_provenance(mpi.world(1));
}

ProvenanceRecord collect_local_provenance(const World& world) {
  ProvenanceRecord r;
  const BuildInfo& b = build_info();
  r.specrun_version = b.version;
  r.git_commit = b.git_commit;
  r.git_dirty = b.git_dirty;
  r.build_type = b.build_type;
  r.cxx_flags = b.cxx_flags;
  r.compiler = b.compiler;
  r.cuda_build = b.cuda;
  r.mpi_library = MpiSession::library_version();
  r.hdf5_version = hdf5_runtime_version();
#ifdef SPECRUN_HAVE_CUDA
  collect_cuda(r);
#endif
  r.hostname = read_hostname();
  r.pid = static_cast<long>(getpid());
  r.world_rank = world.rank;
  r.world_size = world.size;
  r.local_rank = world.local_rank;
  r.cpu_model = cpu::cpu_model_name();
  const cpu::KernelChoice& kernels = cpu::select_kernels();
  r.cpu_isa = cpu::isa_name(kernels.isa);
  r.cpu_isa_forced = kernels.forced;
  std::vector<std::string> entries;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) entries.emplace_back(*e);
  r.environment = select_environment(entries);
  // Configuration files the communication libraries read (io/comm_config.h): NCCL's where it is
  // linked, Open MPI's MCA parameter files where it is the MPI.
  if (r.cuda_build) r.nccl_config = read_nccl_config();
  if (r.mpi_library.find("Open MPI") != std::string::npos) r.mpi_config = read_openmpi_config();
  return r;
}

std::vector<ProvenanceRecord> gather_provenance(MpiComm& world, const ProvenanceRecord& local) {
  // Environment values may hold bytes that are not UTF-8; replace them rather than fail.
  nlohmann::json j = local;
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::vector<std::string> texts = gather_strings(world, text, 0);
  std::vector<ProvenanceRecord> records;
  records.reserve(texts.size());
  for (std::size_t r = 0; r < texts.size(); ++r) {
    nlohmann::json parsed = nlohmann::json::parse(texts[r], nullptr, false);
    SPEC_CHECK(!parsed.is_discarded(), "the provenance record gathered from rank "
                                           << r << " is not valid JSON (" << texts[r].size()
                                           << " bytes)");
    records.push_back(parsed.get<ProvenanceRecord>());
  }
  return records;
}

void to_json(nlohmann::json& j, const GpuDevice& g) {
  j = nlohmann::json{{"index", g.index},
                     {"name", g.name},
                     {"uuid", g.uuid},
                     {"pci_bus_id", g.pci_bus_id},
                     {"sm_clock_mhz", g.sm_clock_mhz},
                     {"mem_clock_mhz", g.mem_clock_mhz},
                     {"clock_note", g.clock_note}};
}

void from_json(const nlohmann::json& j, GpuDevice& g) {
  const char* what = "provenance GPU device";
  SPEC_CHECK(j.is_object(), what << " JSON is a " << j.type_name() << ", not an object");
  read_field(j, "index", g.index, what);
  read_field(j, "name", g.name, what);
  read_field(j, "uuid", g.uuid, what);
  read_field(j, "pci_bus_id", g.pci_bus_id, what);
  read_field(j, "sm_clock_mhz", g.sm_clock_mhz, what);
  read_field(j, "mem_clock_mhz", g.mem_clock_mhz, what);
  read_field(j, "clock_note", g.clock_note, what);
}

void to_json(nlohmann::json& j, const ProvenanceRecord& r) {
  j = nlohmann::json{{"specrun_version", r.specrun_version},
                     {"git_commit", r.git_commit},
                     {"git_dirty", r.git_dirty},
                     {"build_type", r.build_type},
                     {"cxx_flags", r.cxx_flags},
                     {"compiler", r.compiler},
                     {"cuda_build", r.cuda_build},
                     {"mpi_library", r.mpi_library},
                     {"hdf5_version", r.hdf5_version},
                     {"cuda_runtime_version", r.cuda_runtime_version},
                     {"cuda_driver_version", r.cuda_driver_version},
                     {"nvidia_driver_version", r.nvidia_driver_version},
                     {"nccl_version", r.nccl_version},
                     {"nccl_build_version", r.nccl_build_version},
                     {"cuda_devices", r.cuda_devices},
                     {"cuda_device_error", r.cuda_device_error},
                     {"hostname", r.hostname},
                     {"pid", r.pid},
                     {"world_rank", r.world_rank},
                     {"world_size", r.world_size},
                     {"local_rank", r.local_rank},
                     {"cpu_model", r.cpu_model},
                     {"cpu_isa", r.cpu_isa},
                     {"cpu_isa_forced", r.cpu_isa_forced},
                     {"environment", r.environment}};
  if (!r.nccl_config.library.empty()) j["nccl_config"] = r.nccl_config;
  if (!r.mpi_config.library.empty()) j["mpi_config"] = r.mpi_config;
}

void from_json(const nlohmann::json& j, ProvenanceRecord& r) {
  const char* what = "provenance record";
  SPEC_CHECK(j.is_object(), what << " JSON is a " << j.type_name() << ", not an object");
  read_field(j, "specrun_version", r.specrun_version, what);
  read_field(j, "git_commit", r.git_commit, what);
  read_field(j, "git_dirty", r.git_dirty, what);
  read_field(j, "build_type", r.build_type, what);
  read_field(j, "cxx_flags", r.cxx_flags, what);
  read_field(j, "compiler", r.compiler, what);
  read_field(j, "cuda_build", r.cuda_build, what);
  read_field(j, "mpi_library", r.mpi_library, what);
  read_field(j, "hdf5_version", r.hdf5_version, what);
  read_field(j, "cuda_runtime_version", r.cuda_runtime_version, what);
  read_field(j, "cuda_driver_version", r.cuda_driver_version, what);
  read_field(j, "nvidia_driver_version", r.nvidia_driver_version, what);
  read_field(j, "nccl_version", r.nccl_version, what);
  read_field(j, "nccl_build_version", r.nccl_build_version, what);
  read_field(j, "cuda_devices", r.cuda_devices, what);
  read_field(j, "cuda_device_error", r.cuda_device_error, what);
  read_field(j, "hostname", r.hostname, what);
  read_field(j, "pid", r.pid, what);
  read_field(j, "world_rank", r.world_rank, what);
  read_field(j, "world_size", r.world_size, what);
  read_field(j, "local_rank", r.local_rank, what);
  read_field(j, "cpu_model", r.cpu_model, what);
  read_field(j, "cpu_isa", r.cpu_isa, what);
  read_field(j, "cpu_isa_forced", r.cpu_isa_forced, what);
  read_field(j, "environment", r.environment, what);
  // Recorded since issue 17's communication configuration; absent in older files.
  if (j.contains("nccl_config")) read_field(j, "nccl_config", r.nccl_config, what);
  if (j.contains("mpi_config")) read_field(j, "mpi_config", r.mpi_config, what);
}

void to_json(nlohmann::json& j, const MismatchValue& v) {
  j = nlohmann::json{{"set", v.set},
                     {"value", v.value},
                     {"ranks", v.ranks},
                     {"rank_ranges", format_rank_ranges(v.ranks)}};
}

void from_json(const nlohmann::json& j, MismatchValue& v) {
  const char* what = "mismatch value";
  read_field(j, "set", v.set, what);
  read_field(j, "value", v.value, what);
  read_field(j, "ranks", v.ranks, what);
}

void to_json(nlohmann::json& j, const Mismatch& m) {
  j = nlohmann::json{{"name", m.name},
                     {"is_environment", m.is_environment},
                     {"values", m.values},
                     {"description", describe(m)}};
}

void from_json(const nlohmann::json& j, Mismatch& m) {
  const char* what = "mismatch";
  read_field(j, "name", m.name, what);
  read_field(j, "is_environment", m.is_environment, what);
  read_field(j, "values", m.values, what);
}

std::vector<Mismatch> find_mismatches(const std::vector<ProvenanceRecord>& records) {
  std::vector<Mismatch> out;
  if (records.size() < 2) return out;
  for (const ComparedField& field : compared_fields()) {
    std::vector<std::pair<int, std::optional<std::string>>> values;
    for (const ProvenanceRecord& r : records) values.emplace_back(r.world_rank, field.value(r));
    if (auto m = group_values(field.name, false, values)) out.push_back(std::move(*m));
  }
  std::set<std::string> names;
  for (const ProvenanceRecord& r : records)
    for (const auto& [name, value] : r.environment)
      if (!is_per_process_variable(name)) names.insert(name);
  for (const std::string& name : names) {
    std::vector<std::pair<int, std::optional<std::string>>> values;
    for (const ProvenanceRecord& r : records) {
      auto it = r.environment.find(name);
      values.emplace_back(r.world_rank, it == r.environment.end()
                                            ? std::nullopt
                                            : std::optional<std::string>(it->second));
    }
    if (auto m = group_values(name, true, values)) out.push_back(std::move(*m));
  }
  // Configuration files and the parameters they set (a file present on some nodes only).
  std::vector<std::map<std::string, std::string>> config(records.size());
  std::set<std::string> keys;
  for (std::size_t i = 0; i < records.size(); ++i) {
    config[i] = comm_config_fields(records[i]);
    for (const auto& [key, value] : config[i]) keys.insert(key);
  }
  for (const std::string& key : keys) {
    std::vector<std::pair<int, std::optional<std::string>>> values;
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto it = config[i].find(key);
      values.emplace_back(records[i].world_rank, it == config[i].end()
                                                     ? std::nullopt
                                                     : std::optional<std::string>(it->second));
    }
    if (auto m = group_values(key, false, values)) out.push_back(std::move(*m));
  }
  return out;
}

std::map<std::string, std::string> comm_config_fields(const ProvenanceRecord& r) {
  std::map<std::string, std::string> out = comm_config_fields(r.nccl_config, "NCCL config");
  out.merge(comm_config_fields(r.mpi_config, "Open MPI config"));
  return out;
}

std::string format_rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string describe(const Mismatch& m) {
  std::string out = m.name + " differs: ";
  for (std::size_t i = 0; i < m.values.size(); ++i) {
    const MismatchValue& v = m.values[i];
    if (i > 0) out += "; ";
    out += v.set ? quoted(v.value) : std::string("<unset>");
    out += v.ranks.size() == 1 ? " on rank " : " on ranks ";
    out += format_rank_ranges(v.ranks);
  }
  return out;
}

std::string format_record(const ProvenanceRecord& r) {
  std::ostringstream s;
  s << "specrun " << r.specrun_version << " (commit " << r.git_commit
    << (r.git_dirty ? ", dirty tree" : "") << ")\n";
  s << "build:       " << r.build_type << ", " << r.compiler << ", flags \"" << r.cxx_flags
    << "\"\n";
  s << "MPI:         " << r.mpi_library << "\n";
  s << "HDF5:        " << r.hdf5_version << "\n";
  if (r.cuda_build) {
    s << "CUDA:        runtime " << r.cuda_runtime_version << ", driver " << r.cuda_driver_version
      << "\n";
    s << "driver:      " << r.nvidia_driver_version << "\n";
    s << "NCCL:        " << r.nccl_version << " (built against " << r.nccl_build_version << ")\n";
    if (!r.cuda_device_error.empty()) s << "devices:     " << r.cuda_device_error << "\n";
    if (r.cuda_devices.empty() && r.cuda_device_error.empty()) s << "devices:     none visible\n";
    for (const GpuDevice& d : r.cuda_devices) {
      s << "device:      " << d.index << ": " << d.name << " (" << d.uuid << ", pci "
        << d.pci_bus_id << "), clocks ";
      if (d.sm_clock_mhz >= 0) s << "sm " << d.sm_clock_mhz << " MHz";
      if (d.mem_clock_mhz >= 0)
        s << (d.sm_clock_mhz >= 0 ? ", " : "") << "mem " << d.mem_clock_mhz << " MHz";
      if (!d.clock_note.empty())
        s << (d.sm_clock_mhz >= 0 || d.mem_clock_mhz >= 0 ? "; " : "") << d.clock_note;
      s << "\n";
    }
  } else {
    s << "CUDA:        not built with CUDA (CPU backend only)\n";
  }
  s << "process:     rank " << r.world_rank << " of " << r.world_size << ", local rank "
    << r.local_rank << ", host " << r.hostname << ", pid " << r.pid << "\n";
  s << "CPU:         " << r.cpu_model << "; kernels " << r.cpu_isa
    << (r.cpu_isa_forced ? " (forced by SPECRUN_CPU_ISA)" : "") << "\n";
  s << "environment: " << r.environment.size() << " variables (";
  for (std::size_t i = 0; i < std::size(kRecordedEnvPrefixes); ++i)
    s << (i ? " " : "") << kRecordedEnvPrefixes[i] << "*";
  s << ")";
  for (const auto& [name, value] : r.environment) s << "\n  " << name << "=" << value;
  for (const CommConfig* c : {&r.nccl_config, &r.mpi_config}) {
    if (c->library.empty()) continue;
    s << "\n" << c->library << " configuration files (" << c->note << "):";
    for (const CommConfigFile& f : c->files)
      s << "\n  " << f.path << ": "
        << (f.present ? f.hash + ", " + std::to_string(f.entries.size()) + " entries" : "absent");
    for (const auto& [name, p] : c->params)
      s << "\n  " << name << "=" << p.value << " (" << p.source << ")";
  }
  return s.str();
}

std::string describe_weight_memory(const std::vector<std::int64_t>& bytes) {
  std::vector<std::pair<std::int64_t, std::vector<int>>> groups;  // value, ranks; first seen first
  for (std::size_t r = 0; r < bytes.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == bytes[r]; });
    if (it == groups.end()) it = groups.insert(groups.end(), {bytes[r], {}});
    it->second.push_back(static_cast<int>(r));
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  for (std::size_t i = 0; i < groups.size(); ++i)
    out << (i ? ", " : "") << static_cast<double>(groups[i].first) / 1e6 << " MB on rank"
        << (groups[i].second.size() > 1 ? "s " : " ") << format_rank_ranges(groups[i].second);
  return out.str();
}

}  // namespace specrun
