// Contract: who a traced process was in a multi-process job (torchrun, torch.multiprocessing,
// SLURM, MPI), derived from one place only: the tool section's `rank` map, which holds the
// launcher's environment variables the preload read when tracing started (RANK, LOCAL_RANK,
// WORLD_SIZE, SLURM_PROCID...) and, for jobs whose ranks are known only to PyTorch
// (torch.multiprocessing.spawn), the keys `torch.distributed.rank` / `torch.distributed.world_size`
// reported when the program's process group was created. The most specific source wins:
// torch.distributed, then torchrun's variables, then SLURM's, then Open MPI's, then PMI's.
// The job a rank belongs to (`job`: torchrun's TORCHELASTIC_RUN_ID, else SLURM_JOB_ID) and its
// node's rank in the job (`node`: torchrun's GROUP_RANK, else SLURM_NODEID) come from the same
// map, whichever source gave the rank: they tell two jobs writing into one folder apart and label
// the per-node metrics.
// Every view that names a rank (file names, `run`'s per-process summary, the rank table, diff,
// Perfetto's process names) asks this function; none reads the variables itself.
#pragma once

#include <string>

#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

struct RankIdentity {
  int rank = -1;         // global rank; -1 when the process was not part of a job
  int local_rank = -1;   // rank on its host; -1 when unknown
  int world_size = 0;    // 0 when unknown
  std::string launcher;  // "torchrun", "torch.distributed", "slurm", "mpirun", "pmi" or ""
  std::string host;      // the tool section's hostname
  std::string job;       // TORCHELASTIC_RUN_ID, else SLURM_JOB_ID; "" when unknown
  int node = -1;         // GROUP_RANK, else SLURM_NODEID; -1 when unknown

  bool known() const { return rank >= 0; }
  // "rank 1/2 (local 1) on host", or "" when not part of a job.
  std::string describe() const;
};

// The identity a snapshot's tool section records; a snapshot without one (PyTorch's own) has
// none (rank -1). Values that are not plain non-negative integers are ignored.
RankIdentity rank_identity(const snap::Snapshot& s);
RankIdentity rank_identity(const snap::ToolSection& t);

// How every view names a process: "rank 1/2 (local 1) on node7" for a rank, else
// "pid 1234 (app)".
std::string process_name(const snap::Snapshot& s);

}  // namespace cumemtrace::analysis
