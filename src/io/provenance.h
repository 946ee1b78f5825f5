// Provenance: what produced a result. One ProvenanceRecord per rank (code version, build,
// library versions, host, and the environment variables that change communication and threading
// behaviour), gathered to rank 0, and a pure check that names every variable or version that
// differs between ranks. `specrun env` prints it; the result writer stores the records as JSON
// text per rank plus the mismatch list.
//
// The motivating failure: NCCL_* variables exported on rank 0's shell never reached the other
// ranks, and the slowdown looked like a code regression.
#pragma once

#include <array>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "io/comm_config.h"

namespace specrun {

class MpiSession;
class MpiComm;
struct World;

// One visible CUDA device as this rank saw it at start.
struct GpuDevice {
  int index = 0;           // CUDA runtime ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;        // "NVIDIA H200", or "error: <text>" when its properties were unreadable
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (format_gpu_uuid)
  std::string pci_bus_id;  // "0000:19:00.0", or "unknown"
  // Current clocks in MHz from NVML at start; -1 when unread, and clock_note then holds
  // "unavailable: <reason>". They may differ between ranks (boost, throttling): information,
  // not a mismatch.
  int sm_clock_mhz = -1;
  int mem_clock_mhz = -1;
  std::string clock_note;  // empty when both clocks were read
};

struct ProvenanceRecord {
  // Build (src/common/build_info.h): identical on every rank of a sane launch.
  std::string specrun_version;
  std::string git_commit;
  bool git_dirty = false;
  std::string build_type;
  std::string cxx_flags;
  std::string compiler;
  bool cuda_build = false;  // built with the CUDA backend (SPECRUN_HAVE_CUDA)

  // Libraries, as found at run time.
  std::string mpi_library;   // MPI_Get_library_version, first line
  std::string hdf5_version;  // H5get_libversion, "1.10.8"
  // Empty when not built with CUDA. A failed query holds "error: <text>" instead of a version.
  std::string cuda_runtime_version;   // cudaRuntimeGetVersion, "12.4"
  std::string cuda_driver_version;    // cudaDriverGetVersion: highest CUDA version the driver runs
  std::string nvidia_driver_version;  // NVML kernel driver, "550.54.15", or "unavailable: <why>"
  std::string nccl_version;           // ncclGetVersion (run time), "2.21.5"
  std::string nccl_build_version;     // NCCL_VERSION_CODE (compile time)
  std::vector<GpuDevice> cuda_devices;  // CUDA builds only; names and UUIDs differ by nature
  std::string cuda_device_error;        // "error: <text>" when cudaGetDeviceCount failed

  // This process. Hostname, pid and ranks differ between ranks by nature.
  std::string hostname;
  long pid = 0;
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string cpu_model;  // /proc/cpuinfo "model name" of the first CPU; "unknown" if absent
  // The CPU kernel variant this rank runs (kernels/cpu/dispatch.h: "avx512", "avx2",
  // "baseline"), and whether SPECRUN_CPU_ISA forced it rather than the CPU's best. A run on
  // another node type shows here first.
  std::string cpu_isa;
  bool cpu_isa_forced = false;

  // Every variable whose name starts with one of kRecordedEnvPrefixes, sorted by name.
  std::map<std::string, std::string> environment;

  // The configuration files NCCL (CUDA builds) and Open MPI read, and the parameters they set
  // (io/comm_config.h); library empty when not recorded (older files, another MPI).
  CommConfig nccl_config;
  CommConfig mpi_config;
};

// The flat form of a record's nccl_config and mpi_config ("NCCL config NCCL_PROTO" ->
// "LL (/etc/nccl.conf)", "Open MPI config file <path>" -> hash or "absent"): what
// find_mismatches and compare diff.
std::map<std::string, std::string> comm_config_fields(const ProvenanceRecord& record);

// Name prefixes of the environment variables a record keeps.
inline constexpr const char* kRecordedEnvPrefixes[] = {"NCCL_", "CUDA_",  "OMPI_",
                                                       "UCX_",  "SLURM_", "OMP_"};

// True when `name` starts with one of kRecordedEnvPrefixes.
bool is_recorded_variable(const std::string& name);

// True for variables that the launcher sets to a different value on each rank, node or MPMD
// application context (OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...): find_mismatches ignores them.
// The list is explicit and documented in provenance.cpp.
bool is_per_process_variable(const std::string& name);

// The recorded subset of `entries`, each "NAME=value" as in `environ`. Entries without '=' are
// skipped. Pure: tested without touching the process environment.
std::map<std::string, std::string> select_environment(const std::vector<std::string>& entries);

// This rank's record. Local: no communication. Reads the process environment, /proc/cpuinfo
// and the linked libraries' versions; a CUDA query that fails is recorded, not thrown.
ProvenanceRecord collect_local_provenance(const MpiSession& mpi);
// The same with the ranks taken from `world` (rank, size, local_rank); for callers that hold a
// World rather than the session.
ProvenanceRecord collect_local_provenance(const World& world);

// Collective over `world` (every rank calls it with its own record, normally from
// collect_local_provenance): the records travel to rank 0 as JSON text. Rank 0 gets
// world.size() records, index = rank in `world`; other ranks get an empty vector.
std::vector<ProvenanceRecord> gather_provenance(MpiComm& world, const ProvenanceRecord& local);

// JSON form, one object per record; from_json throws specrun::Error naming the missing or
// mistyped key. These are the nlohmann ADL hooks, so `nlohmann::json j = record;` works too.
void to_json(nlohmann::json& j, const GpuDevice& device);
void from_json(const nlohmann::json& j, GpuDevice& device);
void to_json(nlohmann::json& j, const ProvenanceRecord& record);
void from_json(const nlohmann::json& j, ProvenanceRecord& record);

// One distinct value of a mismatching variable and the ranks that hold it.
struct MismatchValue {
  bool set = true;         // false: the variable is absent on these ranks ("<unset>")
  std::string value;       // empty when !set
  std::vector<int> ranks;  // world ranks, ascending
};

// A variable (or build/version field) whose value is not the same on every rank.
struct Mismatch {
  std::string name;                   // "NCCL_PROTO", or a record field such as "git_commit"
  bool is_environment = true;         // false for record fields (versions, build, CPU model)
  std::vector<MismatchValue> values;  // at least two, ordered by their lowest rank
};

void to_json(nlohmann::json& j, const MismatchValue& value);
void from_json(const nlohmann::json& j, MismatchValue& value);
void to_json(nlohmann::json& j, const Mismatch& mismatch);
void from_json(const nlohmann::json& j, Mismatch& mismatch);

// Every environment variable (except per-process ones) and every build/version field whose
// value differs between the records, or that is set on some ranks only. Ranks are the records'
// world_rank. Record fields come first (in declaration order), then variables by name. Pure.
std::vector<Mismatch> find_mismatches(const std::vector<ProvenanceRecord>& records);

// Compact rank list: {0,1,2,3,6,8,9} -> "0-3,6,8-9". Input in any order; duplicates ignored.
std::string format_rank_ranges(std::vector<int> ranks);

// Bytes per world rank as "12.35 MB on ranks 0-1, 10.20 MB on ranks 2-3" (MB = 1e6 bytes; equal
// values grouped, in order of first appearance): the target's weight memory in the job log and
// `report`.
std::string describe_weight_memory(const std::vector<std::int64_t>& bytes_per_rank);

// One line: `NCCL_PROTO differs: "LL" on ranks 0-3; <unset> on ranks 4-7`.
std::string describe(const Mismatch& mismatch);

// Version decoding. CUDA: 12040 -> "12.4". NCCL (nccl.h NCCL_VERSION): codes below 10000 are
// X*1000+Y*100+Z (2804 -> "2.8.4"), later ones X*10000+Y*100+Z (22803 -> "2.28.3").
std::string decode_cuda_version(int code);
std::string decode_nccl_version(int code);

// cudaDeviceProp::uuid bytes as nvidia-smi -L prints them:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower-case hex.
std::string format_gpu_uuid(const std::array<unsigned char, 16>& bytes);

// Human-readable multi-line description of one record (what `specrun env` prints), no trailing
// newline.
std::string format_record(const ProvenanceRecord& record);

}  // namespace specrun
