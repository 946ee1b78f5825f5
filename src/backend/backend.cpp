#include "backend/backend.h"

#include "common/error.h"

namespace specrun {

const char* backend_name(BackendKind kind) {
  return kind == BackendKind::kCuda ? "cuda" : "cpu";
}

bool cuda_backend_built() {
#ifdef SPECRUN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

BackendKind parse_backend(std::string_view name, std::string_view what) {
  SPEC_INPUT_CHECK(name == "cpu" || name == "cuda",
                   what << " = \"" << name << "\" is unknown: use \"cpu\" or \"cuda\"");
  if (name == "cpu") return BackendKind::kCpu;
  SPEC_INPUT_CHECK(cuda_backend_built(),
                   what << " = \"cuda\" but this specrun was built without CUDA: rebuild with "
                           "-DSPECRUN_CUDA=ON (needs nvcc and NCCL, see docs/gpu.md) or use "
                           "\"cpu\"");
  return BackendKind::kCuda;
}

}  // namespace specrun
