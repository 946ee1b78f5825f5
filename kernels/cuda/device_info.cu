// device_count, self_test, nccl_runtime_version: the first CUDA translation unit. It keeps the
// CUDA build path (nvcc, cudart, NCCL) compiled and linked from day one. read_nvml: NVML through
// dlopen, declared here from its documented C API (nvml.h is not part of the CUDA toolkit here).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <array>
#include <cmath>

#include "common/host_stats.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"

namespace specrun::cuda {
namespace {

// x[i] += 1 for i < n.
__global__ void add_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

// The NVML subset used by read_nvml, with nvml.h's C signatures. nvmlReturn_t is a C enum
// (int-sized); NVML_SUCCESS is 0. nvmlDevice_t is an opaque pointer.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;                   // NVML_CLOCK_SM
constexpr int kNvmlClockMem = 2;                  // NVML_CLOCK_MEM
constexpr unsigned kNvmlDriverVersionBytes = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

struct NvmlApi {
  NvmlReturn (*init)() = nullptr;                                   // nvmlInit_v2
  NvmlReturn (*shutdown)() = nullptr;                               // nvmlShutdown
  const char* (*error_string)(NvmlReturn) = nullptr;                // nvmlErrorString
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;          // nvmlSystemGetDriverVersion
  NvmlReturn (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;  // ..HandleByPciBusId_v2
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;   // nvmlDeviceGetClockInfo
};

// Resolves `name` into `fn`; on failure returns the reason.
template <typename Fn>
std::string resolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn ? std::string() : std::string("unavailable: libnvidia-ml.so.1 has no ") + name;
}

std::string nvml_error(const NvmlApi& api, const char* call, NvmlReturn rc) {
  return std::string("unavailable: ") + call + " failed: " + api.error_string(rc) + " (" +
         std::to_string(rc) + ")";
}

// Fills `out` from an initialised NVML.
void read_initialised(const NvmlApi& api, const std::vector<std::string>& pci_bus_ids,
                      NvmlReadings& out) {
  std::array<char, kNvmlDriverVersionBytes> version{};
  NvmlReturn rc = api.driver_version(version.data(), kNvmlDriverVersionBytes);
  out.driver_version = rc == kNvmlSuccess ? std::string(version.data())
                                          : nvml_error(api, "nvmlSystemGetDriverVersion", rc);
  for (std::size_t i = 0; i < pci_bus_ids.size(); ++i) {
    DeviceClocks& c = out.clocks[i];
    NvmlDevice device = nullptr;
    rc = api.handle_by_pci(pci_bus_ids[i].c_str(), &device);
    if (rc != kNvmlSuccess) {
      c.note = nvml_error(api, "nvmlDeviceGetHandleByPciBusId_v2", rc) + " for " + pci_bus_ids[i];
      continue;
    }
    unsigned mhz = 0;
    rc = api.clock_info(device, kNvmlClockSm, &mhz);
    if (rc == kNvmlSuccess)
      c.sm_mhz = static_cast<int>(mhz);
    else
      c.note = nvml_error(api, "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", rc);
    rc = api.clock_info(device, kNvmlClockMem, &mhz);
    if (rc == kNvmlSuccess)
      c.mem_mhz = static_cast<int>(mhz);
    else
      c.note += (c.note.empty() ? "" : "; ") +
                nvml_error(api, "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", rc);
  }
}

}  // namespace

NvmlReadings read_nvml(const std::vector<std::string>& pci_bus_ids) {
  NvmlReadings out;
  out.clocks.resize(pci_bus_ids.size());
  auto fail_all = [&](const std::string& reason) {
    out.driver_version = reason;
    for (DeviceClocks& c : out.clocks) c.note = reason;
    return out;
  };
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return fail_all(std::string("unavailable: cannot load libnvidia-ml.so.1 (") +
                    (why ? why : "unknown reason") + "): no NVIDIA driver on this machine?");
  }
  NvmlApi api;
  std::string missing;
  for (std::string reason :
       {resolve(lib, "nvmlInit_v2", api.init), resolve(lib, "nvmlShutdown", api.shutdown),
        resolve(lib, "nvmlErrorString", api.error_string),
        resolve(lib, "nvmlSystemGetDriverVersion", api.driver_version),
        resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", api.handle_by_pci),
        resolve(lib, "nvmlDeviceGetClockInfo", api.clock_info)})
    if (missing.empty()) missing = reason;
  if (missing.empty()) {
    NvmlReturn rc = api.init();
    if (rc != kNvmlSuccess) {
      missing = nvml_error(api, "nvmlInit_v2", rc);
    } else {
      read_initialised(api, pci_bus_ids, out);
      (void)api.shutdown();
    }
  }
  dlclose(lib);
  if (!missing.empty()) return fail_all(missing);
  return out;
}

// GpuSampler: the NVML calls it makes, with nvml.h's C signatures.
struct NvmlEventData {  // nvmlEventData_t
  NvmlDevice device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
using NvmlEventSet = struct NvmlEventSetOpaque*;
constexpr unsigned long long kNvmlEventXidCritical = 0x8;  // nvmlEventTypeXidCriticalError
constexpr int kNvmlTemperatureGpu = 0;                     // NVML_TEMPERATURE_GPU
constexpr int kNvmlUncorrected = 1;                        // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kNvmlVolatileEcc = 0;                        // NVML_VOLATILE_ECC

struct GpuSampler::Impl {
  void* lib = nullptr;
  NvmlApi api;
  bool initialised = false;
  NvmlDevice device = nullptr;
  NvmlEventSet events = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*ecc)(NvmlDevice, int, int, unsigned long long*) = nullptr;
  NvmlReturn (*event_set_create)(NvmlEventSet*) = nullptr;
  NvmlReturn (*register_events)(NvmlDevice, unsigned long long, NvmlEventSet) = nullptr;
  NvmlReturn (*event_wait)(NvmlEventSet, NvmlEventData*, unsigned) = nullptr;
  NvmlReturn (*event_set_free)(NvmlEventSet) = nullptr;
};

GpuSampler::GpuSampler(const std::string& pci_bus_id) : impl_(new Impl) {
  Impl& m = *impl_;
  m.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (m.lib == nullptr) {
    note_ = "unavailable: cannot load libnvidia-ml.so.1";
    return;
  }
  for (std::string reason :
       {resolve(m.lib, "nvmlInit_v2", m.api.init), resolve(m.lib, "nvmlShutdown", m.api.shutdown),
        resolve(m.lib, "nvmlErrorString", m.api.error_string),
        resolve(m.lib, "nvmlDeviceGetHandleByPciBusId_v2", m.api.handle_by_pci),
        resolve(m.lib, "nvmlDeviceGetClockInfo", m.api.clock_info)})
    if (note_.empty()) note_ = reason;
  if (!note_.empty()) return;
  NvmlReturn rc = m.api.init();
  if (rc != kNvmlSuccess) {
    note_ = nvml_error(m.api, "nvmlInit_v2", rc);
    return;
  }
  m.initialised = true;
  rc = m.api.handle_by_pci(pci_bus_id.c_str(), &m.device);
  if (rc != kNvmlSuccess) {
    note_ = nvml_error(m.api, "nvmlDeviceGetHandleByPciBusId_v2", rc) + " for " + pci_bus_id;
    m.device = nullptr;
    return;
  }
  // Optional calls: a missing one leaves its field NaN.
  (void)resolve(m.lib, "nvmlDeviceGetTemperature", m.temperature);
  (void)resolve(m.lib, "nvmlDeviceGetPowerUsage", m.power);
  if (!resolve(m.lib, "nvmlDeviceGetCurrentClocksEventReasons", m.reasons).empty())
    (void)resolve(m.lib, "nvmlDeviceGetCurrentClocksThrottleReasons", m.reasons);
  (void)resolve(m.lib, "nvmlDeviceGetTotalEccErrors", m.ecc);
  if (resolve(m.lib, "nvmlEventSetCreate", m.event_set_create).empty() &&
      resolve(m.lib, "nvmlDeviceRegisterEvents", m.register_events).empty() &&
      resolve(m.lib, "nvmlEventSetWait_v2", m.event_wait).empty() &&
      resolve(m.lib, "nvmlEventSetFree", m.event_set_free).empty() &&
      m.event_set_create(&m.events) == kNvmlSuccess) {
    if (m.register_events(m.device, kNvmlEventXidCritical, m.events) != kNvmlSuccess) {
      (void)m.event_set_free(m.events);
      m.events = nullptr;
    }
  }
}

GpuSampler::~GpuSampler() {
  if (impl_->events) (void)impl_->event_set_free(impl_->events);
  if (impl_->initialised) (void)impl_->api.shutdown();
  if (impl_->lib) dlclose(impl_->lib);
  delete impl_;
}

GpuConditions GpuSampler::sample() {
  const double nan = std::nan("");
  GpuConditions c{nan, nan, nan, nan, nan, nan, nan};
  Impl& m = *impl_;
  if (m.device == nullptr) return c;
  unsigned u = 0;
  if (m.api.clock_info(m.device, kNvmlClockSm, &u) == kNvmlSuccess) c.sm_mhz = u;
  if (m.api.clock_info(m.device, kNvmlClockMem, &u) == kNvmlSuccess) c.mem_mhz = u;
  if (m.temperature && m.temperature(m.device, kNvmlTemperatureGpu, &u) == kNvmlSuccess)
    c.temp_c = u;
  if (m.power && m.power(m.device, &u) == kNvmlSuccess) c.power_w = u / 1000.0;
  unsigned long long bits = 0;
  if (m.reasons && m.reasons(m.device, &bits) == kNvmlSuccess)
    c.slowdown = static_cast<double>(bits & kGpuSlowdownMask);
  if (m.ecc && m.ecc(m.device, kNvmlUncorrected, kNvmlVolatileEcc, &bits) == kNvmlSuccess)
    c.ecc_uncorrected = static_cast<double>(bits);
  if (m.events) {
    // Drain what arrived since the last sample; at most 64 per call so a storm cannot stall it.
    int n = 0;
    NvmlEventData data{};
    while (n < 64 && m.event_wait(m.events, &data, 0) == kNvmlSuccess) ++n;
    c.xid = n;
  }
  return c;
}

int device_count(std::string* error) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (error) *error = cudaGetErrorString(rc);
    return 0;
  }
  return n;
}

void self_test(int device) {
  constexpr int kN = 1000;
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  int* d = nullptr;
  CUDA_CHECK(cudaMallocAsync(&d, kN * sizeof(int), stream));
  CUDA_CHECK(cudaMemsetAsync(d, 0, kN * sizeof(int), stream));
  add_one<<<(kN + 255) / 256, 256, 0, stream>>>(d, kN);
  CUDA_CHECK(cudaGetLastError());
  int host[kN];
  CUDA_CHECK(cudaMemcpyAsync(host, d, sizeof(host), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaFreeAsync(d, stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  for (int i = 0; i < kN; ++i)
    SPEC_CHECK(host[i] == 1, "device self-test: element " << i << " is " << host[i] << ", not 1");
}

int nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

}  // namespace specrun::cuda
