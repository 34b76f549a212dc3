// The CUDA backend's microbenchmarks as a Google Benchmark binary: GEMMs by
// dtype and shape, HBM triad and copy, host<->device copies pinned and
// pageable, NCCL collectives over the visible GPUs, launch gaps. Each
// iteration is one measurement of backend/cuda/calibrate.hpp's Microbench
// (CUDA events, L2 flushed first), reported as manual time, so these are the
// figures `strata calibrate --backend cuda` writes. Without a GPU it says so
// and exits 0.
//   build/backend/bench_cuda --benchmark_filter=gemm
//   build/backend/bench_cuda --gemm_shapes=4096:6144:2048,4096:2048:8192
// The second form measures only fp32 products of the given m:n:k shapes
// (scripts/gpu-check.sh passes a training step's).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdio>
#include <vector>
#include <memory>
#include <string>

#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/device.hpp"

namespace {

using strata::Bytes;
using strata::backend::cuda::Microbench;
namespace cost = strata::cost;

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

// The shapes of --gemm_shapes=m:n:k,... (removed from argv), or none.
std::vector<std::array<std::int64_t, 3>> take_shapes(int& argc, char** argv) {
  std::vector<std::array<std::int64_t, 3>> shapes;
  const std::string flag = "--gemm_shapes=";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(flag, 0) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    std::string list = a.substr(flag.size()) + ",";
    for (std::size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
      long long m = 0, n = 0, k = 0;
      if (std::sscanf(list.substr(at, comma - at).c_str(), "%lld:%lld:%lld", &m, &n, &k) == 3 && m > 0 && n > 0 && k > 0)
        shapes.push_back({m, n, k});
    }
  }
  argc = kept;
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  if (strata::backend::cuda::devices().empty()) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  const auto shapes = take_shapes(argc, argv);
  benchmark::Initialize(&argc, argv);
  Microbench mb(0);
  std::fprintf(stderr, "%s\n", mb.machine().c_str());
  if (!shapes.empty()) {
    for (const auto& s : shapes) add_gemm(mb, cost::GemmDtype::FP32, s[0], s[1], s[2]);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  }
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
