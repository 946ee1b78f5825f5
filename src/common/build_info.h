// What this binary was built from. Filled in at build time by cmake/build_info.cmake.
#pragma once

namespace specrun {

struct BuildInfo {
  const char* version;     // project version, e.g. "0.1.0"
  const char* git_commit;  // full commit hash, or "unknown" outside a git checkout
  bool git_dirty;          // tracked files differed from the commit at build time
  const char* build_type;  // CMAKE_BUILD_TYPE
  const char* cxx_flags;
  const char* compiler;  // "GNU 12.2.0"
  bool cuda;             // built with the CUDA backend
};

const BuildInfo& build_info();

}  // namespace specrun
