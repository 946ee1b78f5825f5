#include "model/model_factory.h"

#include "backend/cuda_backend.h"
#include "backend/cuda_timeline.h"
#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "model/checkpoint.h"

#include <iomanip>
#include <sstream>

#ifdef SPECRUN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <array>

#include "kernels/cuda/device_info.h"
#endif

namespace specrun {

#ifdef SPECRUN_HAVE_CUDA
struct ModelFactory::DeviceSampler {
  explicit DeviceSampler(const std::string& pci_bus_id) : nvml(pci_bus_id) {}
  cuda::GpuSampler nvml;
};
#else
struct ModelFactory::DeviceSampler {};
#endif

ModelFactory::ModelFactory(BackendKind backend, MpiComm& tp_comm, MpiComm& self_comm,
                           const World& world, int threads, double comm_timeout_s)
    : backend_(backend), tp_mpi_(tp_comm), self_mpi_(self_comm), world_(world), threads_(threads) {
  if (backend == BackendKind::kCpu) {
    description_ = "cpu, " + std::to_string(threads) + " thread(s) per rank";
    return;
  }
#ifdef SPECRUN_HAVE_CUDA
  std::string why, note;
  const int count = cuda::device_count(&why);
  SPEC_INPUT_CHECK(count > 0, "the CUDA backend was asked for but rank "
                                  << world.rank << " sees no CUDA device (" << why
                                  << "): run on a GPU node, check CUDA_VISIBLE_DEVICES and the "
                                     "driver (nvidia-smi), or use the cpu backend");
  const int device = choose_device(world.local_rank, world.local_size, count, &note);
  cuda_ = std::make_unique<CudaContext>(device, tp_comm, self_comm, comm_timeout_s);
  timeline_ = std::make_unique<CudaPhaseTimeline>(*cuda_);
  description_ = "cuda device " + std::to_string(device) + " (" + cuda_->device().description() +
                 ")" + (note.empty() ? "" : "; " + note);
#else
  (void)comm_timeout_s;
  SPEC_FAIL("unreachable: the CUDA backend in a build without CUDA (parse_backend refuses it)");
#endif
}

ModelFactory::~ModelFactory() = default;

std::string ModelFactory::kernel_description() const {
  return backend_ == BackendKind::kCpu ? cpu::describe_kernel_choice() : description_;
}

void ModelFactory::sample_device(HostSnapshot& snapshot) {
#ifdef SPECRUN_HAVE_CUDA
  if (!cuda_) return;
  if (!sampler_) {
    std::array<char, 32> pci{};
    const bool have = cudaDeviceGetPCIBusId(pci.data(), static_cast<int>(pci.size()),
                                            cuda_->device().device()) == cudaSuccess;
    if (!have) cudaGetLastError();  // the failed query's sticky error, cleared
    sampler_ = std::make_unique<DeviceSampler>(have ? std::string(pci.data()) : "unknown");
  }
  const cuda::GpuConditions c = sampler_->nvml.sample();
  auto& v = snapshot.values;
  v[kGpuSmMhz] = c.sm_mhz;
  v[kGpuMemMhz] = c.mem_mhz;
  v[kGpuTempC] = c.temp_c;
  v[kGpuPowerW] = c.power_w;
  v[kGpuSlowdown] = c.slowdown;
  v[kGpuEccUncorrected] = c.ecc_uncorrected;
  v[kGpuXid] = c.xid;
#else
  (void)snapshot;
#endif
}

void ModelFactory::set_cuda_launch(const CudaLaunchOptions& options) {
#ifdef SPECRUN_HAVE_CUDA
  if (cuda_) {
    cuda_->set_step_graphs(options.step_graphs);
    cuda_->set_dependent_launch(options.dependent_launch);
    cuda_->set_tensor_core_gemv(options.tensor_cores);
    cuda_->set_fused_ops(options.fused_ops);
  }
#else
  (void)options;
#endif
}

std::string ModelFactory::step_graph_report() const {
#ifdef SPECRUN_HAVE_CUDA
  if (cuda_) {
    const cuda::StepGraphStats& s = cuda_->step_graph_stats();
    std::ostringstream out;
    out << "step graphs " << (cuda_->step_graphs() ? "on" : "off") << ": " << s.replays << " of "
        << s.steps << " passes replayed, " << s.captures << " graphs captured (" << std::fixed
        << std::setprecision(1) << s.capture_ms << " ms), " << s.eager << " launched one by one, "
        << s.unrecorded << " not recorded (larger than a step graph takes, or graphs off)";
    if (s.evicted > 0)
      out << "; " << s.evicted << " graphs evicted (least recently used, beyond "
          << cuda::StepGraphs::kMaxGraphs << " per model)";
    if (s.capture_failures > 0)
      out << "; " << s.capture_failures
          << " capture(s) failed, their models' passes launched one by one since (first: "
          << s.capture_error << ")";
    out << "; dependent launches " << (cuda_->dependent_launch() ? "on" : "off")
        << "; projections on the " << (cuda_->tensor_core_gemv() ? "tensor" : "CUDA") << " cores";
    return out.str();
  }
#endif
  return "";
}

std::unique_ptr<LanguageModel> ModelFactory::load(const Checkpoint& checkpoint, bool sharded) {
#ifdef SPECRUN_HAVE_CUDA
  if (cuda_)
    return load_cuda_model(checkpoint, *cuda_, sharded ? cuda_->tp() : cuda_->self(),
                           sharded ? ep_ : 0);
#endif
  return load_cpu_model(checkpoint, sharded ? static_cast<Communicator&>(tp_mpi_) : self_mpi_,
                        threads_, sharded ? ep_ : 0);
}

std::unique_ptr<DraftHead> ModelFactory::load_head(const std::string& dir, const Checkpoint& target,
                                                   bool sharded, bool mtp_chain_shared_head_norm) {
  HeadConfig config = HeadConfig::from_dir(dir, target.config());
  if (auto* mtp = std::get_if<MtpConfig>(&config.of))
    mtp->chain_shared_head_norm = mtp_chain_shared_head_norm;
  const Checkpoint head(dir, [&](const std::string&) { return config.layers(); });
#ifdef SPECRUN_HAVE_CUDA
  if (cuda_) return load_cuda_head(head, target, config, *cuda_, sharded ? &cuda_->tp() : nullptr);
#endif
  return load_cpu_head(head, target, config, threads_, sharded ? &tp_mpi_ : nullptr);
}

Communicator& ModelFactory::tp_comm() {
#ifdef SPECRUN_HAVE_CUDA
  if (cuda_) return cuda_->tp();
#endif
  return tp_mpi_;
}

CudaContext* ModelFactory::cuda_context() {
  return cuda_.get();
}

}  // namespace specrun
