// Test helper: the tensor-parallel group of a single rank, where every collective is the
// identity (a model built without MPI).
#pragma once

#include <cstring>

#include "dist/communicator.h"

namespace specrun::test {

class SingleRankComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, std::size_t) override {}
  void all_reduce_max(float*, std::size_t) override {}
  void all_gather(const void* send, void* recv, std::size_t bytes) override {
    std::memcpy(recv, send, bytes);
  }
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
};

}  // namespace specrun::test
