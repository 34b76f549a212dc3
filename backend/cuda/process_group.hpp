#pragma once
// One process per GPU: who this process is among the processes a launcher
// started, and the host-side messages between them (MPI). Plain C++ (no
// MPI, CUDA or NCCL type): the application includes it.
//
// A multi-GPU plan runs as one process per GPU, started by OpenMPI's
// `mpirun -n N strata run …` or Slurm's `srun --ntasks=N strata run …`.
// Each process reads its rank, the world size and its rank on the node from
// the launcher's environment (launch_from_env), uses GPU `local rank`, and
// joins the others through a ProcessGroup: MPI when the world has more than
// one process (rank 0's NCCL unique id is broadcast over it; each step's
// per-task measurements are gathered over it), nothing at all for one.
//
// Rank r of the world is rank r of the plan's RankMesh (strategies/
// rank_mesh.hpp), exactly as the CPU backend's rank threads and the
// simulator number them; a communication group is an NCCL split of the
// world communicator with colour = the group's index in the mesh and key =
// the rank's index in the group (split_of), so its members are the mesh's
// group in the mesh's order.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "strategies/rank_mesh.hpp"

namespace strata::backend::cuda {

// Where this process sits among the processes the launcher started.
struct Launch {
  int rank = 0;        // in the world: the plan's global rank
  int world = 1;       // processes
  int local_rank = 0;  // on this node: the CUDA device it uses
  // "mpirun" (OpenMPI's variables), "srun" (Slurm's), or "" (no launcher:
  // one process started by hand).
  std::string launcher;
};

// Looks a variable up: its value, or null when unset.
using EnvLookup = std::function<const char*(const char*)>;

// The launcher's variables: OpenMPI's OMPI_COMM_WORLD_RANK, _SIZE and
// _LOCAL_RANK first (mpirun inside a Slurm allocation sets both kinds; its
// own are the ones that describe its processes), else Slurm's SLURM_PROCID,
// SLURM_NTASKS and SLURM_LOCALID (srun), else one process. A launcher's
// variables come as a set: one missing, not a non-negative integer, or a
// rank outside the world throws Error naming the variable and its value.
Launch launch_from_env(const EnvLookup& env);
Launch launch_from_env();  // this process's environment

// Whether this build can join processes (MPI was found at configure time:
// STRATA_MPI). Without it a world of more than one process is an error.
bool built_with_mpi();

// How to start the `processes` a plan needs ("mpirun -n 4 strata …").
std::string launch_hint(std::int64_t processes);

// The ncclCommSplit arguments that make `dim`'s groups out of the world:
// colour = the index of `rank`'s group in the mesh, key = its index in the
// group (NCCL orders a split's ranks by key).
struct Split {
  int color = 0;
  int key = 0;
};
Split split_of(const strategies::RankMesh& mesh, std::int64_t rank, strategies::MeshDim dim);

// The processes of one run. With one process: no MPI, every operation is
// local. With more: MPI_Init (unless the process already did; then
// MPI_Finalize is left to it) and a check that MPI sees the same rank and
// size as the launcher's variables. One per process; not thread-safe.
class ProcessGroup {
 public:
  // Throws Error when launch.world > 1 and the build has no MPI, or when MPI
  // disagrees with the launcher's variables.
  explicit ProcessGroup(const Launch& launch);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return launch_.rank; }
  int size() const { return launch_.world; }
  int local_rank() const { return launch_.local_rank; }
  const Launch& launch() const { return launch_; }

  // Every process calls each of these, in the same order (they are
  // collectives). broadcast: root's bytes into every process's `data`
  // (same size everywhere). all_gather: every process's bytes, by rank
  // (sizes may differ). all_reduce_max: the largest value.
  void broadcast(std::span<std::byte> data, int root) const;
  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) const;
  double all_reduce_max(double value) const;
  double all_reduce_sum(double value) const;
  void barrier() const;

  // With more than one process, ends every process of the run with `code`
  // (MPI_Abort, which does not return): a process that failed while the
  // others wait in a collective would otherwise leave them waiting for
  // ever. With one process it does nothing and returns; the caller (app/,
  // which alone ends processes) exits.
  void abort_peers(int code) const;

 private:
  Launch launch_;
  bool initialised_mpi_ = false;  // this object called MPI_Init (and will finalise)
};

}  // namespace strata::backend::cuda
