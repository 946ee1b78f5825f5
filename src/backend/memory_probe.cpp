#include "backend/memory_probe.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"

#ifdef SPECRUN_HAVE_CUDA
#include "backend/cuda_backend.h"
#endif

namespace specrun {
namespace {

// float32 buffer in anonymous memory with the huge-page hint, filled with ones.
class HugeBuffer {
 public:
  explicit HugeBuffer(std::size_t n) : n_(n) {
    void* p = ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    SPEC_CHECK(p != MAP_FAILED, "cannot allocate the "
                                    << bytes() / (1 << 20)
                                    << " MiB bandwidth buffer: " << std::strerror(errno));
#ifdef MADV_HUGEPAGE
    ::madvise(p, bytes(), MADV_HUGEPAGE);
#endif
    data_ = static_cast<float*>(p);
    std::fill(data_, data_ + n_, 1.0f);
  }
  ~HugeBuffer() {
    ::munmap(data_, bytes());
  }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  const float* data() const {
    return data_;
  }
  std::size_t size() const {
    return n_;
  }

 private:
  std::size_t bytes() const {
    return std::max<std::size_t>(n_, 1) * sizeof(float);
  }
  std::size_t n_;
  float* data_ = nullptr;
};

// One read kernel of one kernel variant over the shared buffer.
class CpuReadProbe final : public MemoryProbe {
 public:
  CpuReadProbe(std::shared_ptr<const HugeBuffer> buffer, cpu::Isa isa, int kernel, int threads)
      : buffer_(std::move(buffer)), isa_(isa), kernel_(kernel), threads_(threads) {}
  void pass() override {
    omp_set_num_threads(threads_);
    volatile float sink =
        cpu::kernels_for(isa_)->stream_read(buffer_->data(), buffer_->size(), kernel_);
    (void)sink;
  }
  double bytes() const override { return static_cast<double>(buffer_->size()) * sizeof(float); }
  std::string isa() const override { return cpu::isa_name(isa_); }
  std::string kernel() const override { return cpu::read_kernel_name(kernel_); }

 private:
  std::shared_ptr<const HugeBuffer> buffer_;
  cpu::Isa isa_;
  int kernel_;
  int threads_;
};

#ifdef SPECRUN_HAVE_CUDA
class DeviceCopy final : public MemoryProbe {
 public:
  DeviceCopy(CudaContext& context, std::size_t bytes) : bytes_(bytes), copy_(context, bytes) {}
  void pass() override { copy_.pass(); }
  double bytes() const override { return 2.0 * static_cast<double>(bytes_); }
  std::string isa() const override { return "cuda"; }
  std::string kernel() const override { return "device-to-device copy"; }

 private:
  std::size_t bytes_;
  DeviceCopyProbe copy_;
};
#endif

}  // namespace

std::vector<std::unique_ptr<MemoryProbe>> make_memory_probes(BackendKind backend, CudaContext* cuda,
                                                             std::size_t bytes, int threads) {
  std::vector<std::unique_ptr<MemoryProbe>> probes;
  if (backend == BackendKind::kCpu) {
    auto buffer = std::make_shared<const HugeBuffer>(bytes / sizeof(float));
    for (cpu::Isa isa : cpu::built_isas())
      if (cpu::cpu_supports(isa))
        for (int k = 0; k < cpu::kReadKernels; ++k)
          probes.push_back(std::make_unique<CpuReadProbe>(buffer, isa, k, threads));
    return probes;
  }
#ifdef SPECRUN_HAVE_CUDA
  SPEC_CHECK(cuda != nullptr, "the CUDA memory probe needs the rank's CUDA context");
  probes.push_back(
      std::make_unique<DeviceCopy>(*cuda, std::max<std::size_t>(bytes, std::size_t{1} << 26)));
  return probes;
#else
  (void)cuda;
  SPEC_FAIL("unreachable: the CUDA backend in a build without CUDA (parse_backend refuses it)");
#endif
}

}  // namespace specrun
