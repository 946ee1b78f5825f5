#include "dist/world.h"

#include "common/error.h"

namespace specrun {

World World::make(int rank, int size, int local_rank, int local_size, int tp) {
  SPEC_CHECK(size >= 1 && rank >= 0 && rank < size,
             "invalid rank " << rank << " in a world of size " << size);
  SPEC_CHECK(local_rank >= 0 && local_rank < local_size,
             "invalid local rank " << local_rank << " of " << local_size);
  SPEC_INPUT_CHECK(tp >= 1, "parallel.tp must be at least 1 (got " << tp << ")");
  SPEC_INPUT_CHECK(size % tp == 0, "the world size "
                                       << size << " is not divisible by parallel.tp = " << tp
                                       << ": start a multiple of " << tp
                                       << " ranks, or set parallel.tp to a divisor of " << size);
  World w;
  w.rank = rank;
  w.size = size;
  w.local_rank = local_rank;
  w.local_size = local_size;
  w.tp = tp;
  w.dp = size / tp;
  w.tp_rank = rank % tp;
  w.dp_index = rank / tp;
  return w;
}

}  // namespace specrun
