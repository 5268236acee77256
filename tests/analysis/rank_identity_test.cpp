// Rank identity (rank_identity.h) from each launcher's variables, their precedence, and values
// that must not be taken for a rank.
#include <catch2/catch.hpp>

#include "analysis/rank_identity.h"

using namespace cumemtrace;
using analysis::rank_identity;

namespace {

snap::ToolSection tool(std::map<std::string, std::string> env) {
  snap::ToolSection t;
  t.hostname = "node7";
  t.rank = std::move(env);
  return t;
}

}  // namespace

TEST_CASE("rank identity: torchrun's variables") {
  auto id = rank_identity(tool({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}}));
  CHECK(id.rank == 3);
  CHECK(id.local_rank == 1);
  CHECK(id.world_size == 4);
  CHECK(id.launcher == "torchrun");
  CHECK(id.describe() == "rank 3/4 (local 1) on node7");
}

TEST_CASE("rank identity: torchrun under srun keeps torchrun's numbers") {
  auto id = rank_identity(
      tool({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "5"}, {"WORLD_SIZE", "8"}}));
  CHECK(id.rank == 5);
  CHECK(id.world_size == 8);
  CHECK(id.local_rank == -1);
  CHECK(id.launcher == "torchrun");
  CHECK(id.describe() == "rank 5/8 on node7");
}

TEST_CASE("rank identity: SLURM, Open MPI and PMI") {
  auto slurm =
      rank_identity(tool({{"SLURM_PROCID", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "3"}}));
  CHECK((slurm.rank == 2 && slurm.local_rank == 0 && slurm.world_size == 3));
  CHECK(slurm.launcher == "slurm");
  auto ompi = rank_identity(tool({{"OMPI_COMM_WORLD_RANK", "1"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                  {"OMPI_COMM_WORLD_SIZE", "2"}}));
  CHECK((ompi.rank == 1 && ompi.local_rank == 1 && ompi.world_size == 2));
  CHECK(ompi.launcher == "mpirun");
  auto pmi = rank_identity(tool({{"PMI_RANK", "6"}, {"PMI_SIZE", "7"}}));
  CHECK((pmi.rank == 6 && pmi.local_rank == -1 && pmi.world_size == 7));
  CHECK(pmi.launcher == "pmi");
}

TEST_CASE("rank identity: the process group's rank beats the environment") {
  auto id = rank_identity(tool({{"torch.distributed.rank", "1"},
                                {"torch.distributed.world_size", "2"},
                                {"RANK", "0"},
                                {"LOCAL_RANK", "0"},
                                {"TORCHELASTIC_RUN_ID", "abc"}}));
  CHECK(id.rank == 1);
  CHECK(id.world_size == 2);
  CHECK(id.local_rank == 0);
  CHECK(id.launcher == "torchrun");
  auto spawned = rank_identity(tool({{"torch.distributed.rank", "1"}}));
  CHECK(spawned.launcher == "torch.distributed");
}

TEST_CASE("rank identity: none, or values that are not ranks") {
  CHECK_FALSE(rank_identity(tool({})).known());
  CHECK(rank_identity(tool({})).describe().empty());
  CHECK_FALSE(rank_identity(tool({{"RANK", "-1"}})).known());
  CHECK_FALSE(rank_identity(tool({{"RANK", "1x"}})).known());
  CHECK_FALSE(rank_identity(tool({{"RANK", ""}})).known());
  CHECK_FALSE(rank_identity(snap::Snapshot{}).known());
  // An unusable RANK does not hide a usable SLURM_PROCID.
  CHECK(rank_identity(tool({{"RANK", "x"}, {"SLURM_PROCID", "4"}})).rank == 4);
}

TEST_CASE("rank identity: the job's id and the node's rank") {
  // torchrun's run id and group rank come first; under srun, SLURM's are the fallback.
  auto id = rank_identity(tool({{"RANK", "9"},
                                {"GROUP_RANK", "1"},
                                {"TORCHELASTIC_RUN_ID", "abc"},
                                {"SLURM_JOB_ID", "4242"},
                                {"SLURM_NODEID", "3"}}));
  CHECK(id.job == "abc");
  CHECK(id.node == 1);
  id =
      rank_identity(tool({{"SLURM_PROCID", "5"}, {"SLURM_JOB_ID", "4242"}, {"SLURM_NODEID", "2"}}));
  CHECK(id.job == "4242");
  CHECK(id.node == 2);
  // Unknown, or not a number for the node.
  id = rank_identity(tool({{"RANK", "0"}, {"GROUP_RANK", "x"}}));
  CHECK(id.job.empty());
  CHECK(id.node == -1);
  CHECK(id.describe() == "rank 0 on node7");  // the name is unchanged by either
}
