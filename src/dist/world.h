// The shape of the job: world = dp x tp. Pure arithmetic, no MPI: tested without it.
//
// Ranks [g*tp, (g+1)*tp) form tensor-parallel group g (its dp index). Each tp group owns a
// disjoint shard of the prompts.
#pragma once

namespace specrun {

struct World {
  int rank = 0;        // rank in MPI_COMM_WORLD
  int size = 1;        // world size
  int local_rank = 0;  // rank among the processes on this node (MPI_Comm_split_type SHARED)
  int local_size = 1;  // processes on this node
  int tp = 1;          // tensor-parallel degree
  int dp = 1;          // number of tp groups = size / tp
  int tp_rank = 0;     // rank inside the tp group (0..tp-1)
  int dp_index = 0;    // which tp group this rank belongs to (0..dp-1)

  // Validates and derives dp, tp_rank and dp_index. Throws (exit code 2) when tp < 1 or the
  // world size is not divisible by tp, with advice.
  static World make(int rank, int size, int local_rank, int local_size, int tp);

  bool is_root() const { return rank == 0; }
  bool is_tp_leader() const { return tp_rank == 0; }
  // World rank of the first rank of this rank's tp group.
  int tp_group_first_rank() const { return dp_index * tp; }
};

}  // namespace specrun
