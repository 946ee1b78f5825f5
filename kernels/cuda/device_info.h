// What the CUDA runtime sees on this process: device count and names, plus the driver version
// and current clocks read through NVML. Built only with -DSPECRUN_CUDA=ON; the CPU build has no
// CUDA symbols at all.
#pragma once

#include <string>
#include <vector>

namespace specrun::cuda {

// Number of visible devices; 0 (with `error` set) when the runtime or driver is unavailable.
int device_count(std::string* error = nullptr);

// Runs a trivial kernel on `device` (adds 1 to a buffer) and checks the result: proves the
// build's device code matches the GPU (sm_80 / sm_90). Throws specrun::Error on failure.
void self_test(int device);

// NCCL version linked at run time, encoded as NCCL_VERSION_CODE.
int nccl_runtime_version();

// Current clocks of one device, in MHz; -1 where not read, and then `note` says why
// ("unavailable: <reason>"). Empty note: both clocks were read.
struct DeviceClocks {
  int sm_mhz = -1;
  int mem_mhz = -1;
  std::string note;
};

// What NVML reports: the kernel driver version ("550.54.15") or "unavailable: <reason>", and one
// DeviceClocks per entry of the query, in order.
struct NvmlReadings {
  std::string driver_version;
  std::vector<DeviceClocks> clocks;
};

// Reads the driver version and the current SM and memory clocks of the devices at
// `pci_bus_ids` (as cudaDeviceGetPCIBusId writes them, "0000:19:00.0"). NVML is loaded with
// dlopen("libnvidia-ml.so.1") at call time, never linked, so a machine without a driver still
// runs specrun: every failure (no library, a missing symbol, a failed call) is recorded in the
// result, never thrown. Local to the process; initialises and shuts NVML down within the call.
NvmlReadings read_nvml(const std::vector<std::string>& pci_bus_ids);

// The GPU's conditions after a batch (the GPU fields of a host snapshot, common/host_stats.h):
// NaN where NVML could not read one.
struct GpuConditions {
  double sm_mhz = 0, mem_mhz = 0, temp_c = 0, power_w = 0;
  double slowdown = 0;         // clock event reasons & kGpuSlowdownMask
  double ecc_uncorrected = 0;  // volatile uncorrected ECC errors
  double xid = 0;              // XID critical error events since the previous sample
};

// Samples one device through NVML, kept open between samples (dlopen'ed like read_nvml; a
// machine without the driver gives NaN readings and `note` says why). The XID count comes from
// an NVML event set registered for XID critical errors, drained without waiting.
class GpuSampler {
 public:
  explicit GpuSampler(const std::string& pci_bus_id);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;
  GpuConditions sample();
  const std::string& note() const { return note_; }

 private:
  struct Impl;
  Impl* impl_ = nullptr;
  std::string note_;
};

}  // namespace specrun::cuda
