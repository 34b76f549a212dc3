// One process per GPU, under `mpirun -n 2` (CTest mpi.bootstrap, mpi.nccl).
//
//   --bootstrap  needs no GPU: the launcher's variables against MPI's rank
//                and size, broadcast, all-gather and sums between the
//                processes, and each process's NCCL split colour and key
//                against the rank mesh's dp and tp groups (what every
//                process computes must form exactly the mesh's groups).
//   --nccl       needs a GPU per process (else every process exits 77:
//                skipped): an all-reduce over the world and over the dp
//                group, then a data-parallel step over NCCL (DP = 2, ZeRO 0,
//                1 and 3) against one GPU's step on the whole batch from
//                the same weights: the same loss (1e-5 relative) and the same
//                parameters after two steps (1e-4 of each tensor's largest
//                value: fp32 sums in another order); and compressed DP = 2
//                (random-k, PowerSGD) against the CPU executor's threads.
//
// A plain main (no doctest): a failed check prints the rank and the line,
// and the process exits 1, so mpirun fails the test.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/common/corpus.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/common/rng.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/communicator.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/executor.hpp"
#include "backend/cuda/process_group.hpp"
#include "backend/cuda/test_scenario.hpp"
#include "costmodel/model_io.hpp"
#include "sim/error.hpp"
#include "strategies/rank_mesh.hpp"

namespace cuda = strata::backend::cuda;
namespace strategies = strata::strategies;

namespace {

int failures = 0;
int my_rank = 0;

#define EXPECT(cond)                                                                        \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      ++failures;                                                                           \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", my_rank, __FILE__, __LINE__, #cond); \
    }                                                                                       \
  } while (0)

int bootstrap(const cuda::ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  EXPECT(pg.launch().launcher == "mpirun");
  EXPECT(n == 2);
  // Broadcast: rank 0's bytes everywhere.
  std::vector<std::byte> b(16, std::byte{0});
  if (r == 0)
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 3 + 1);
  pg.broadcast(b, 0);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT(b[i] == static_cast<std::byte>(i * 3 + 1));
  // All-gather: rank k sends k + 1 bytes of value k.
  const std::vector<std::byte> mine(static_cast<std::size_t>(r + 1), static_cast<std::byte>(r));
  const auto all = pg.all_gather(mine);
  EXPECT(static_cast<int>(all.size()) == n);
  for (int k = 0; k < n && k < static_cast<int>(all.size()); ++k)
    EXPECT(all[static_cast<std::size_t>(k)] ==
           std::vector<std::byte>(static_cast<std::size_t>(k + 1), static_cast<std::byte>(k)));
  EXPECT(pg.all_reduce_sum(r + 1.0) == n * (n + 1) / 2.0);
  EXPECT(pg.all_reduce_max(static_cast<double>(r)) == n - 1.0);
  // The split every process computes for itself forms the mesh's groups:
  // dp = n (one group, key = rank) and tp = n (the same, along tp), as the
  // CPU backend's rank threads and the simulator group them.
  for (const auto dim : {strategies::MeshDim::DP, strategies::MeshDim::TP}) {
    const bool along_dp = dim == strategies::MeshDim::DP;
    const strategies::RankMesh mesh(along_dp ? 1 : n, 1, along_dp ? n : 1, 1, 1,
                                    {strategies::ParallelDim::TP, strategies::ParallelDim::CP,
                                     strategies::ParallelDim::DP, strategies::ParallelDim::PP},
                                    8);
    const cuda::Split s = cuda::split_of(mesh, r, dim);
    const int pair[2] = {s.color, s.key};
    const auto splits = pg.all_gather(std::as_bytes(std::span(pair)));
    for (int k = 0; k < n; ++k) {
      int got[2];
      std::memcpy(got, splits[static_cast<std::size_t>(k)].data(), sizeof got);
      const auto group = mesh.group(dim, got[0]);
      EXPECT(got[1] < static_cast<int>(group.size()) && group[static_cast<std::size_t>(got[1])] == k);
    }
  }
  return failures == 0 ? 0 : 1;
}

// The executor tests' small GPT (test_scenario.hpp), data-parallel over the
// processes' GPUs: global batch 8 in microbatches of 2.
strategies::Scenario tiny(int dp, int zero) {
  strategies::Plan plan;
  plan.dp = dp;
  plan.zero = zero;
  return cuda::test::tiny_gpt(3, plan, 8, 2, dp);
}

// The largest difference over all tensors, relative to each tensor's largest value.
double worst_relative(const std::map<std::string, std::vector<float>>& a,
                      const std::map<std::string, std::vector<float>>& b, std::string* where) {
  double worst = 0;
  for (const auto& [name, x] : a) {
    const auto it = b.find(name);
    if (it == b.end() || it->second.size() != x.size()) {
      *where = name + " (missing or a different size)";
      return 1e9;
    }
    double scale = 1e-12, d = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::fabs(x[i])));
      d = std::max(d, static_cast<double>(std::fabs(x[i] - it->second[i])));
    }
    if (d / scale > worst) {
      worst = d / scale;
      *where = name;
    }
  }
  return worst;
}

void data_parallel_equals_one_gpu(const cuda::ProcessGroup& pg, int zero) {
  const auto sc = tiny(pg.size(), zero);
  const auto whole = tiny(1, 0);
  cuda::Executor one(whole, {.seed = 3, .lr = 0.05f, .device = pg.local_rank()});
  cuda::Executor many(sc, {.seed = 3, .lr = 0.05f, .device = pg.local_rank(), .group = &pg});
  const strata::backend::MarkovCorpus corpus(sc.model.vocab, 7);
  for (int step = 0; step < 2; ++step) {
    strata::backend::Rng rng(100 + static_cast<std::uint64_t>(step));
    const auto n = static_cast<std::size_t>(sc.batch.global * sc.model.seq_len);
    std::vector<std::int32_t> tokens(n), targets(n);
    corpus.sample(tokens, targets, sc.batch.global, sc.model.seq_len, rng);
    const auto want = one.step(tokens, targets);
    const auto got = many.step(tokens, targets);
    EXPECT(std::fabs(got.loss - want.loss) <= 1e-5 * std::fabs(want.loss));
    // Every rank's measurements came back: each task once per rank.
    EXPECT(static_cast<int>(got.memory.size()) == pg.size());
    EXPECT(got.tasks.size() == many.lowered().graph.num_tasks() * static_cast<std::size_t>(pg.size()));
    if (std::fabs(got.loss - want.loss) > 1e-5 * std::fabs(want.loss))
      std::fprintf(stderr, "rank %d: zero %d, step %d: loss %.8f over NCCL, %.8f on one GPU\n", my_rank, zero,
                   step, got.loss, want.loss);
  }
  std::string where;
  const double d = worst_relative(many.parameters(), one.parameters(), &where);
  EXPECT(d < 1e-4);
  if (d >= 1e-4) std::fprintf(stderr, "rank %d: zero %d: parameter %s off by %g\n", my_rank, zero, where.c_str(), d);
}

// Compressed data parallelism over NCCL (the device compressors) against
// the CPU executor's rank threads running the same plan from the same
// weights: random-k with error feedback and rank-2 PowerSGD, whose
// messages are continuous in the gradients (top-k and QSGD pick indices
// and levels by comparisons that fp32 sums in another order can flip).
void compressed_equals_cpu(const cuda::ProcessGroup& pg, strategies::CompressionMethod method) {
  auto sc = tiny(pg.size(), 0);
  sc.plan.compression.method = method;
  sc.plan.compression.ratio = 0.25;
  sc.plan.compression.rank = 2;
  sc.plan.compression.error_feedback = true;
  strata::backend::cpu::Executor ref(sc, {.seed = 1, .lr = 0.05f});
  cuda::Executor many(sc, {.seed = 1, .lr = 0.05f, .device = pg.local_rank(), .group = &pg});
  many.set_parameters(ref.parameters());
  const strata::backend::MarkovCorpus corpus(sc.model.vocab, 7);
  const char* name = strata::enum_name(method).data();
  for (int step = 0; step < 2; ++step) {
    strata::backend::Rng rng(200 + static_cast<std::uint64_t>(step));
    const auto n = static_cast<std::size_t>(sc.batch.global * sc.model.seq_len);
    std::vector<std::int32_t> tokens(n), targets(n);
    corpus.sample(tokens, targets, sc.batch.global, sc.model.seq_len, rng);
    const auto want = ref.step(tokens, targets);
    const auto got = many.step(tokens, targets);
    EXPECT(std::fabs(got.loss - want.loss) <= 1e-5 * std::fabs(want.loss));
    if (std::fabs(got.loss - want.loss) > 1e-5 * std::fabs(want.loss))
      std::fprintf(stderr, "rank %d: %s, step %d: loss %.8f over NCCL, %.8f on the CPU\n", my_rank, name, step,
                   got.loss, want.loss);
  }
  std::string where;
  const double d = worst_relative(many.parameters(), ref.parameters(), &where);
  EXPECT(d < 1e-4);
  if (d >= 1e-4) std::fprintf(stderr, "rank %d: %s: parameter %s off by %g\n", my_rank, name, where.c_str(), d);
}

int nccl(const cuda::ProcessGroup& pg) {
  // Skipped unless every process has a GPU of its own (all agree).
  const auto devs = cuda::devices();
  const bool short_of_gpus = static_cast<int>(devs.size()) <= pg.local_rank() || static_cast<int>(devs.size()) < pg.size();
  if (pg.all_reduce_max(short_of_gpus ? 1.0 : 0.0) > 0) {
    if (pg.rank() == 0)
      std::printf("%zu GPU(s) visible, %d processes need one each: NCCL tests skipped\n", devs.size(), pg.size());
    return 77;
  }
  STRATA_CUDA_CHECK(cudaSetDevice(pg.local_rank()));
  cudaStream_t s = nullptr;
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    // The world and its dp split: the sum of (rank + 1) over ranks.
    const cuda::NcclComm world = cuda::NcclComm::world(pg);
    const strategies::RankMesh mesh(1, 1, pg.size(), 1, 1,
                                    {strategies::ParallelDim::TP, strategies::ParallelDim::CP,
                                     strategies::ParallelDim::DP, strategies::ParallelDim::PP},
                                    8);
    const cuda::NcclComm dp = world.split(cuda::split_of(mesh, pg.rank(), strategies::MeshDim::DP));
    EXPECT(world.size() == pg.size());
    EXPECT(dp.size() == pg.size());
    EXPECT(dp.rank() == mesh.index_in_group(pg.rank(), strategies::MeshDim::DP));
    const int n = 1000;
    std::vector<float> h(n, static_cast<float>(pg.rank() + 1));
    float* d = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    for (const cuda::NcclComm* c : {&world, &dp}) {
      STRATA_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      c->all_reduce(d, n, s);
      std::vector<float> out(n);
      STRATA_CUDA_CHECK(cudaMemcpyAsync(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
      STRATA_CUDA_CHECK(cudaStreamSynchronize(s));
      const float want = static_cast<float>(pg.size() * (pg.size() + 1) / 2);
      EXPECT(std::all_of(out.begin(), out.end(), [&](float x) { return x == want; }));
    }
    STRATA_CUDA_CHECK(cudaFree(d));
  }
  STRATA_CUDA_CHECK(cudaStreamDestroy(s));
  for (const int zero : {0, 1, 3}) data_parallel_equals_one_gpu(pg, zero);
  for (const auto method : {strategies::CompressionMethod::RandomK, strategies::CompressionMethod::PowerSgd})
    compressed_equals_cpu(pg, method);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "--bootstrap" && mode != "--nccl") {
    std::fprintf(stderr, "usage: mpirun -n 2 %s --bootstrap|--nccl\n", argv[0]);
    return 2;
  }
  try {
    const cuda::ProcessGroup pg(cuda::launch_from_env());
    my_rank = pg.rank();
    if (pg.size() < 2) {
      std::fprintf(stderr, "run under mpirun -n 2 (one process was started)\n");
      return 1;
    }
    const int rc = mode == "--bootstrap" ? bootstrap(pg) : nccl(pg);
    // Every process has the verdict of all (one failing fails the test on each).
    const double worst = pg.all_reduce_max(rc == 77 ? 0.0 : rc);
    if (rc == 77) return 77;
    if (worst == 0 && pg.rank() == 0) std::printf("%s: %d processes: all checks passed\n", mode.c_str(), pg.size());
    return worst == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", my_rank, e.what());
    return 1;
  }
}
