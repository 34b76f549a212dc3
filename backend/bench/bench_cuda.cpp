// The CUDA backend's microbenchmarks as a Google Benchmark binary: GEMMs by
// dtype and shape, HBM triad and copy, host<->device copies pinned and
// pageable, NCCL collectives over the visible GPUs, launch gaps, and the
// optimizer and compression kernels. Each iteration is one measurement of
// backend/cuda/calibrate.hpp's Microbench (CUDA events, L2 flushed first),
// reported as manual time, so these are the figures `strata calibrate
// --backend cuda` writes (the optimizer and compression kernels are not in
// the calibration: the cost model prices them by their bytes over the HBM
// rate).
// Without a GPU it says so and exits 0.
//   build/backend/bench_cuda --benchmark_filter=gemm
//   build/backend/bench_cuda --step_gemms=configs/scenarios/gpu-1x-plain.json
// The second form runs two training steps of a single-GPU scenario on the
// CUDA executor with every matrix product timed where it runs (CUDA events
// around each), and prints one JSON object: per shape the calls and TFLOP/s
// inside the step and the same product timed alone (L2 flushed), and the
// rate over the step's large products (at least 10 GFLOP each).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdio>
#include <map>
#include <vector>
#include <memory>
#include <string>

#include "backend/common/rng.hpp"
#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/executor.hpp"
#include "strategies/scenario.hpp"

namespace {

using strata::Bytes;
using strata::backend::cuda::Microbench;
namespace cost = strata::cost;
namespace strategies = strata::strategies;

void add_gemm(Microbench& mb, cost::GemmDtype d, std::int64_t m, std::int64_t n, std::int64_t k) {
  const std::string name = "gemm/" + std::string(strata::enum_name(d)) + "/" + std::to_string(m) + "x" +
                           std::to_string(n) + "x" + std::to_string(k);
  benchmark::RegisterBenchmark(name.c_str(), [&mb, d, m, n, k](benchmark::State& st) {
    for (auto _ : st) st.SetIterationTime(mb.gemm(d, m, n, k, 1));
    st.counters["TFLOPS"] = benchmark::Counter(2.0 * static_cast<double>(m) * static_cast<double>(n) *
                                                   static_cast<double>(k) * static_cast<double>(st.iterations()) / 1e12,
                                               benchmark::Counter::kIsRate);
  })->UseManualTime();
}

template <class F>
void add_bytes(const std::string& name, double moved, F f) {
  benchmark::RegisterBenchmark(name.c_str(), [moved, f](benchmark::State& st) {
    for (auto _ : st) st.SetIterationTime(f());
    st.counters["GBps"] = benchmark::Counter(moved * static_cast<double>(st.iterations()) / 1e9,
                                             benchmark::Counter::kIsRate);
  })->UseManualTime();
}

// The value of --step_gemms=SCENARIO (removed from argv), or empty.
std::string take_step_flag(int& argc, char** argv) {
  const std::string flag = "--step_gemms=";
  std::string value;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(flag, 0) == 0)
      value = a.substr(flag.size());
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  return value;
}

// The step's products by shape, inside the second of two steps and alone.
int step_gemms(const std::string& path) {
  namespace cuda = strata::backend::cuda;
  const auto sc = strata::strategies::load_scenario(path);
  cuda::Executor ex(sc, {.profile_gemms = true});
  const auto n = static_cast<std::size_t>(sc.batch.global * sc.model.seq_len);
  std::vector<std::int32_t> tokens(n), targets(n);
  strata::backend::Rng rng(7);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(sc.model.vocab));
  for (auto& t : targets) t = static_cast<std::int32_t>(rng.below(sc.model.vocab));
  ex.step(tokens, targets);  // warm-up: optimizer states, the memory pool
  const double step_s = ex.step(tokens, targets).seconds;
  struct Shape {
    std::int64_t calls = 0;
    double seconds = 0;
  };
  std::map<std::array<std::int64_t, 4>, Shape> by_shape;
  double large_flops = 0, large_s = 0, all_flops = 0, all_s = 0;
  for (const auto& g : ex.gemms()) {
    auto& s = by_shape[{g.m, g.n, g.k, g.batch}];
    ++s.calls;
    s.seconds += g.seconds;
    const double f = 2.0 * static_cast<double>(g.m * g.n) * static_cast<double>(g.k * g.batch);
    all_flops += f;
    all_s += g.seconds;
    if (f >= 1e10) {
      large_flops += f;
      large_s += g.seconds;
    }
  }
  Microbench mb(0);
  std::printf("{\n  \"scenario\": \"%s\",\n  \"step_s\": %.6f,\n  \"gemm_s\": %.6f,\n", path.c_str(), step_s, all_s);
  std::printf("  \"all_tflops\": %.3f,\n  \"large_tflops\": %.3f,\n  \"large_fraction_of_gemm_time\": %.4f,\n",
              all_s > 0 ? all_flops / all_s / 1e12 : 0.0, large_s > 0 ? large_flops / large_s / 1e12 : 0.0,
              all_s > 0 ? large_s / all_s : 0.0);
  std::printf("  \"shapes\": [");
  const char* sep = "\n";
  for (const auto& [key, s] : by_shape) {
    const auto [m, nn, k, batch] = key;
    const double f = 2.0 * static_cast<double>(m * nn) * static_cast<double>(k * batch);
    const double alone = batch == 1 ? f / mb.gemm(cost::GemmDtype::FP32, m, nn, k, 3) / 1e12 : 0.0;
    std::printf("%s    {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"batch\": %lld, \"calls\": %lld, "
                "\"gflop\": %.3f, \"in_step_tflops\": %.3f, \"alone_tflops\": %.3f}",
                sep, static_cast<long long>(m), static_cast<long long>(nn), static_cast<long long>(k),
                static_cast<long long>(batch), static_cast<long long>(s.calls), f / 1e9,
                f * static_cast<double>(s.calls) / s.seconds / 1e12, alone);
    sep = ",\n";
  }
  std::printf("\n  ]\n}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (strata::backend::cuda::devices().empty()) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  if (const std::string scenario = take_step_flag(argc, argv); !scenario.empty()) {
    try {
      return step_gemms(scenario);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_cuda: %s\n", e.what());
      return 1;
    }
  }
  benchmark::Initialize(&argc, argv);
  Microbench mb(0);
  std::fprintf(stderr, "%s\n", mb.machine().c_str());
  for (const auto d : {cost::GemmDtype::FP32, cost::GemmDtype::TF32, cost::GemmDtype::BF16, cost::GemmDtype::FP16})
    for (const std::int64_t s : {1024, 2048, 4096, 8192}) add_gemm(mb, d, s, s, s);
  for (const Bytes s : {Bytes{1} << 20, Bytes{64} << 20, Bytes{1} << 30}) {
    const auto b = static_cast<double>(s);
    add_bytes("hbm/triad/" + std::to_string(s), 3 * b, [&mb, s] { return mb.triad(s, 1); });
    add_bytes("hbm/copy/" + std::to_string(s), 2 * b, [&mb, s] { return mb.device_copy(s, 1); });
  }
  for (const Bytes s : {Bytes{64} << 10, Bytes{16} << 20, Bytes{256} << 20})
    for (const bool to_device : {true, false})
      for (const bool pinned : {true, false}) {
        const std::string name = std::string(to_device ? "h2d" : "d2h") + (pinned ? "_pinned/" : "_pageable/") +
                                 std::to_string(s);
        add_bytes(name, static_cast<double>(s), [&mb, s, to_device, pinned] { return mb.host_copy(s, to_device, pinned, 1); });
      }
  if (mb.gpus() >= 2)
    for (const auto op : {cost::CollectiveOp::AllReduce, cost::CollectiveOp::AllGather, cost::CollectiveOp::ReduceScatter,
                          cost::CollectiveOp::AllToAll, cost::CollectiveOp::SendRecv})
      for (const Bytes s : {Bytes{1} << 20, Bytes{64} << 20, Bytes{1} << 30})
        add_bytes("nccl/" + std::string(strata::enum_name(op)) + "/" + std::to_string(s), static_cast<double>(s),
                  [&mb, op, s] { return mb.collective(op, s, 1); });
  // Optimizer steps over 64M parameters, the rate in parameters per second
  // (every rule reads and writes different state bytes per parameter).
  for (const auto o : {strategies::Optimizer::Sgd, strategies::Optimizer::Adam, strategies::Optimizer::Adam8bit,
                       strategies::Optimizer::Lamb, strategies::Optimizer::Adafactor, strategies::Optimizer::Sm3}) {
    constexpr std::int64_t kRows = 65536;  // × 1024 columns
    benchmark::RegisterBenchmark(("optimizer/" + std::string(strata::enum_name(o))).c_str(),
                                 [&mb, o](benchmark::State& st) {
                                   for (auto _ : st) st.SetIterationTime(mb.optimizer_step(o, kRows, 1));
                                   st.counters["Gparams_per_s"] = benchmark::Counter(
                                       static_cast<double>(kRows) * 1024 * static_cast<double>(st.iterations()) / 1e9,
                                       benchmark::Counter::kIsRate);
                                 })
        ->UseManualTime();
  }
  // Compression of a 64M-entry gradient by one rank (encode, the rounds'
  // local work, decode), in gradient entries per second.
  for (const auto m : {strategies::CompressionMethod::TopK, strategies::CompressionMethod::RandomK,
                       strategies::CompressionMethod::Qsgd, strategies::CompressionMethod::OneBit,
                       strategies::CompressionMethod::PowerSgd}) {
    constexpr std::int64_t kRows = 65536;  // × 1024 columns
    strategies::Compression c;
    c.method = m;
    benchmark::RegisterBenchmark(("compression/" + std::string(strata::enum_name(m))).c_str(),
                                 [&mb, c](benchmark::State& st) {
                                   for (auto _ : st) st.SetIterationTime(mb.compression(c, kRows, 1));
                                   st.counters["Gentries_per_s"] = benchmark::Counter(
                                       static_cast<double>(kRows) * 1024 * static_cast<double>(st.iterations()) / 1e9,
                                       benchmark::Counter::kIsRate);
                                 })
        ->UseManualTime();
  }
  benchmark::RegisterBenchmark("launch/kernel_us", [&mb](benchmark::State& st) {
    double us = 0;
    for (auto _ : st) {
      us = mb.kernel_launch_us(1000);
      st.SetIterationTime(us * 1e-6);
    }
    st.counters["us"] = us;
  })->UseManualTime()->Iterations(3);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
