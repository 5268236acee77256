#include "analysis/rank_identity.h"

#include <charconv>
#include <optional>

#include <fmt/format.h>

namespace cumemtrace::analysis {

namespace {

std::optional<int> number(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  int v = -1;
  const char* b = it->second.data();
  const char* e = b + it->second.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc{} || p != e || v < 0) return std::nullopt;
  return v;
}

struct Source {
  const char* launcher;
  const char* rank;
  const char* local_rank;
  const char* world_size;
};

// Most specific first. torchrun also sets LOCAL_RANK/WORLD_SIZE; SLURM_* and OMPI_* may be
// present under torchrun too (a torchrun started by srun), which is why torchrun's come first.
constexpr Source kSources[] = {
    {"torch.distributed", "torch.distributed.rank", "torch.distributed.local_rank",
     "torch.distributed.world_size"},
    {"torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"},
};

}  // namespace

std::string RankIdentity::describe() const {
  if (!known()) return {};
  std::string s =
      world_size > 0 ? fmt::format("rank {}/{}", rank, world_size) : fmt::format("rank {}", rank);
  if (local_rank >= 0) s += fmt::format(" (local {})", local_rank);
  if (!host.empty()) s += " on " + host;
  return s;
}

RankIdentity rank_identity(const snap::ToolSection& t) {
  RankIdentity id;
  id.host = t.hostname;
  for (const char* key : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    auto it = t.rank.find(key);
    if (it != t.rank.end() && !it->second.empty()) {
      id.job = it->second;
      break;
    }
  }
  id.node = number(t.rank, "GROUP_RANK").value_or(number(t.rank, "SLURM_NODEID").value_or(-1));
  for (const Source& src : kSources) {
    auto rank = number(t.rank, src.rank);
    if (!rank) continue;
    id.rank = *rank;
    id.local_rank = number(t.rank, src.local_rank).value_or(-1);
    id.world_size = number(t.rank, src.world_size).value_or(0);
    id.launcher = src.launcher;
    // A torchrun worker's launcher is torchrun even when the rank came from its process group.
    if (id.launcher == std::string("torch.distributed") && t.rank.count("TORCHELASTIC_RUN_ID")) {
      id.launcher = "torchrun";
    }
    if (id.local_rank < 0) id.local_rank = number(t.rank, "LOCAL_RANK").value_or(-1);
    break;
  }
  return id;
}

RankIdentity rank_identity(const snap::Snapshot& s) {
  return s.tool ? rank_identity(*s.tool) : RankIdentity{};
}

std::string process_name(const snap::Snapshot& s) {
  const RankIdentity id = rank_identity(s);
  if (id.known()) return id.describe();
  if (!s.tool) return "(no process recorded)";
  std::string exe = s.tool->exe;
  if (auto slash = exe.rfind('/'); slash != std::string::npos) exe = exe.substr(slash + 1);
  return exe.empty() ? fmt::format("pid {}", s.tool->pid)
                     : fmt::format("pid {} ({})", s.tool->pid, exe);
}

}  // namespace cumemtrace::analysis
