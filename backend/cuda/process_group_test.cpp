// The multi-GPU bootstrap without a GPU (suite "host"): the launcher's
// variables, the NCCL split of the dp groups against the rank mesh the CPU
// backend and the simulator use, and the executor's refusals and launch
// hints for multi-GPU plans.
#include "backend/cuda/process_group.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/executor.hpp"
#include "backend/cuda/test_scenario.hpp"
#include "costmodel/model_io.hpp"
#include "sim/error.hpp"
#include "strategies/rank_mesh.hpp"

namespace strata::backend::cuda {
namespace {

using strategies::MeshDim;
using strategies::ParallelDim;
using strategies::RankMesh;

// A fake environment.
EnvLookup env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// The groups NCCL forms from split_of's colours and keys: ranks of one colour,
// ordered by key.
std::vector<std::vector<std::int64_t>> nccl_groups(const RankMesh& mesh, MeshDim dim) {
  std::map<int, std::vector<std::pair<int, std::int64_t>>> by_color;
  for (std::int64_t r = 0; r < mesh.world(); ++r) {
    const Split s = split_of(mesh, r, dim);
    by_color[s.color].push_back({s.key, r});
  }
  std::vector<std::vector<std::int64_t>> out;
  for (auto& [color, members] : by_color) {
    std::sort(members.begin(), members.end());
    std::vector<std::int64_t> g;
    for (const auto& [key, r] : members) g.push_back(r);
    out.push_back(g);
  }
  return out;
}

TEST_SUITE("host") {
  TEST_CASE("cuda/process_group: the launcher's variables give rank, world and local rank") {
    // No launcher: one process, rank 0.
    const Launch none = launch_from_env(env({}));
    CHECK(none.rank == 0);
    CHECK(none.world == 1);
    CHECK(none.local_rank == 0);
    CHECK(none.launcher.empty());
    // mpirun (OpenMPI).
    const Launch ompi = launch_from_env(
        env({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
    CHECK(ompi.rank == 5);
    CHECK(ompi.world == 8);
    CHECK(ompi.local_rank == 1);
    CHECK(ompi.launcher == "mpirun");
    // srun (Slurm).
    const Launch slurm =
        launch_from_env(env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "3"}}));
    CHECK(slurm.rank == 3);
    CHECK(slurm.world == 4);
    CHECK(slurm.local_rank == 3);
    CHECK(slurm.launcher == "srun");
    // mpirun inside a Slurm allocation: OpenMPI's variables describe its processes.
    const Launch both = launch_from_env(env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"},
                                             {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
    CHECK(both.launcher == "mpirun");
    CHECK(both.rank == 1);
    CHECK(both.world == 2);
  }

  TEST_CASE("cuda/process_group: malformed or partial launcher variables are errors naming them") {
    CHECK_THROWS_WITH_AS(launch_from_env(env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
                         doctest::Contains("OMPI_COMM_WORLD_LOCAL_RANK is unset"), Error);
    CHECK_THROWS_WITH_AS(
        launch_from_env(env({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}})),
        doctest::Contains("SLURM_PROCID='x1' is not a non-negative integer"), Error);
    CHECK_THROWS_WITH_AS(
        launch_from_env(env({{"SLURM_PROCID", "-1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}})),
        doctest::Contains("not a non-negative integer"), Error);
    CHECK_THROWS_WITH_AS(
        launch_from_env(env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}})),
        doctest::Contains("SLURM_PROCID=2 is not below SLURM_NTASKS=2"), Error);
    CHECK_THROWS_WITH_AS(launch_from_env(env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"},
                                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}})),
                         doctest::Contains("a world of no process"), Error);
  }

  TEST_CASE("cuda/process_group: one process needs no MPI; several without MPI say so") {
    // A world of one never touches MPI: every operation is local.
    const ProcessGroup one(Launch{});
    CHECK(one.size() == 1);
    std::vector<std::byte> b{std::byte{7}, std::byte{9}};
    one.broadcast(b, 0);
    const auto all = one.all_gather(b);
    REQUIRE(all.size() == 1);
    CHECK(all[0] == b);
    CHECK(one.all_reduce_sum(2.5) == 2.5);
    CHECK_THROWS_AS(one.broadcast(b, 1), Error);
    if (!built_with_mpi())
      CHECK_THROWS_WITH_AS(ProcessGroup(Launch{0, 2, 0, "mpirun"}), doctest::Contains("built without MPI"), Error);
  }

  TEST_CASE("cuda/process_group: NCCL's dp groups are the rank mesh's (CPU backend, simulator)") {
    // Megatron's default order tp-cp-dp-pp with tp = 2, dp = 2, pp = 2 (8
    // ranks): dp groups {0,2} {1,3} {4,6} {5,7} (parallel_state.py's table).
    const RankMesh m8(2, 1, 2, 2, 1, {ParallelDim::TP, ParallelDim::CP, ParallelDim::DP, ParallelDim::PP}, 8);
    const std::vector<std::vector<std::int64_t>> golden{{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    CHECK(nccl_groups(m8, MeshDim::DP) == golden);
    // Every order and several shapes: the split's groups are the mesh's
    // groups, members in the mesh's order (the CPU executor builds its
    // communicators from group_of), for dp and tp.
    const std::vector<std::array<ParallelDim, 4>> orders{
        {ParallelDim::TP, ParallelDim::CP, ParallelDim::DP, ParallelDim::PP},
        {ParallelDim::TP, ParallelDim::CP, ParallelDim::PP, ParallelDim::DP},
        {ParallelDim::DP, ParallelDim::TP, ParallelDim::CP, ParallelDim::PP}};
    for (const auto& order : orders)
      for (const auto& [tp, dp, pp] : {std::tuple{1, 4, 1}, std::tuple{2, 2, 2}, std::tuple{2, 4, 3}}) {
        if (RankMesh::violation(tp, 1, dp, pp, 1, order, 8)) continue;
        const RankMesh mesh(tp, 1, dp, pp, 1, order, 8);
        for (const MeshDim dim : {MeshDim::DP, MeshDim::TP}) {
          std::vector<std::vector<std::int64_t>> want;
          mesh.for_each_group(dim, [&](std::int64_t, std::span<const std::int64_t> g) {
            want.emplace_back(g.begin(), g.end());
          });
          CHECK(nccl_groups(mesh, dim) == want);
          for (std::int64_t r = 0; r < mesh.world(); ++r) {
            const auto g = mesh.group_of(r, dim);
            CHECK(g[static_cast<std::size_t>(split_of(mesh, r, dim).key)] == r);
          }
        }
      }
  }

  TEST_CASE("cuda/executor: a multi-GPU plan says how many processes and how to launch them") {
    strategies::Plan plan;
    plan.dp = 4;
    strategies::Scenario sc = test::tiny_gpt(2, plan, 8, 2, 4);
    // One process: how many and how.
    const auto one = Executor::unsupported(sc, 1);
    REQUIRE(one);
    CHECK(one->find("runs on 4 GPUs") != std::string::npos);
    CHECK(one->find("mpirun -n 4 strata") != std::string::npos);
    CHECK(one->find("srun --ntasks=4") != std::string::npos);
    // The right number of processes: data parallelism runs, with any ZeRO stage.
    CHECK_FALSE(Executor::unsupported(sc, 4));
    for (const auto z : {1, 2, 3}) {
      sc.plan.zero = z;
      CHECK_FALSE(Executor::unsupported(sc, 4));
    }
    // Too few processes.
    const auto two = Executor::unsupported(sc, 2);
    REQUIRE(two);
    CHECK(two->find("2 processes were launched") != std::string::npos);
    // Compression runs without ZeRO (the device compressors), not with it.
    sc.plan.zero = 0;
    sc.plan.compression.method = strategies::CompressionMethod::TopK;
    CHECK_FALSE(Executor::unsupported(sc, 4));
    sc.plan.zero = 1;
    const auto comp = Executor::unsupported(sc, 4);
    REQUIRE(comp);
    CHECK(comp->find("gradient compression with ZeRO") != std::string::npos);
    // What the multi-GPU executor does not run, whatever the processes.
    sc.plan.zero = 0;
    sc.plan.compression.method = strategies::CompressionMethod::None;
    sc.plan.dp = 2;
    sc.plan.tp = 2;
    const auto tp = Executor::unsupported(sc, 4);
    REQUIRE(tp);
    CHECK(tp->find("not tensor parallelism") != std::string::npos);
  }
}

}  // namespace
}  // namespace strata::backend::cuda
