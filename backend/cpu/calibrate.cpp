#include "backend/cpu/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "backend/cpu/blas.hpp"
#include "backend/common/calibration_points.hpp"
#include "backend/cpu/comm.hpp"
#include "backend/cpu/host_info.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/tensor.hpp"
#include "costmodel/calibration.hpp"
#include "sim/error.hpp"

#if STRATA_HAVE_BENCHMARK
#include <benchmark/benchmark.h>
#endif

namespace strata::backend::cpu {

using namespace calib;

// ---------------------------------------------------------------- the file

std::string calibration_json(const CpuMeasurements& m, const cost::ClusterSpec& cluster,
                             const std::string& date) {
  if (m.stopped)
    throw Error("calibrate: stopped after " + std::to_string(m.benchmarks_run) + " of " +
                std::to_string(m.benchmarks) + " benchmarks; a calibration needs every curve");
  const auto& gpu = cluster.gpu;
  const auto& node = cluster.node;
  if (!(gpu.tflops.fp32 > 0) || !(gpu.hbm_GBps > 0) || !(node.pcie_GBps > 0) ||
      !(node.intra_node_GBps > 0))
    throw Error("calibrate: cluster '" + cluster.name +
                "' needs fp32 tflops, hbm_GBps, pcie_GBps and intra_node_GBps above 0");
  std::vector<std::string> notes;
  nlohmann::ordered_json j;
  j["machine"] = m.machine;
  j["backend"] = "cpu";
  j["date"] = date;
  j["gpu"] = gpu.name;

  // GEMM: m = n = k, 2n^3 FLOPs, the same curve under every dtype.
  std::vector<Point> gemm;
  for (const auto& p : m.gemm)
    gemm.push_back({2.0 * p.size * p.size * p.size, 2.0 * p.size * p.size * p.size / p.seconds / 1e12 / gpu.tflops.fp32});
  gemm = increasing(gemm);
  legalise(gemm, kMaxEff, "gemm", notes);
  if (!gemm.empty()) {
    auto& g = j["gemm"];
    for (const char* dt : {"fp32", "tf32", "fp16", "bf16"}) {
      double peak = gpu.tflops.fp32;
      if (std::string(dt) == "tf32") peak = gpu.tflops.tf32;
      if (std::string(dt) == "fp16") peak = gpu.tflops.fp16;
      if (std::string(dt) == "bf16") peak = gpu.tflops.bf16;
      if (!(peak > 0)) continue;
      // Every dtype computes in fp32: its efficiency is the fp32 rate over
      // this dtype's peak.
      std::vector<Point> pts = gemm;
      for (auto& p : pts) p.eff = std::min(kMaxEff, p.eff * gpu.tflops.fp32 / peak);
      g[dt] = {{"peak_tflops", peak}, {"points", table_points(pts, "tflops", peak, true)}};
    }
  }

  // Memory-bound kernels, sized as the op chain sizes them: the bytes one
  // kernel reads and writes. With the backend's kernels measured: GeLU and
  // layer norm over S input bytes move 2S each and the residual add 3S (a
  // block's byte-priced kernels: its two norms, its two residual adds and
  // the activation); the rate is their 7S over their time, read at 2S (a
  // layer kernel's size). Else memcpy (S bytes copied move 2S).
  std::vector<Point> mem;
  if (!m.elementwise.empty()) {
    for (const auto& p : m.elementwise)
      mem.push_back({2.0 * p.size, 7.0 * p.size / p.seconds / 1e9 / gpu.hbm_GBps});
  } else {
    for (const auto& p : m.memory)
      mem.push_back({2.0 * p.size, 2.0 * p.size / p.seconds / 1e9 / gpu.hbm_GBps});
  }
  mem = increasing(mem);
  legalise(mem, kMaxEff, "memory", notes);
  if (!mem.empty())
    j["memory"] = {{"peak_GBps", gpu.hbm_GBps}, {"points", table_points(mem, "GBps", gpu.hbm_GBps, false)}};
  // The optimizer's update: Adam over S/4 parameters moves 7S (the
  // gradient, and the weight and two moments read and written:
  // strategies::bytes_per_param's 28 bytes a parameter), read at 7S.
  std::vector<Point> opt;
  for (const auto& p : m.optimizer) opt.push_back({7.0 * p.size, 7.0 * p.size / p.seconds / 1e9 / gpu.hbm_GBps});
  opt = increasing(opt);
  legalise(opt, kMaxEff, "optimizer", notes);
  if (!opt.empty())
    j["optimizer"] = {{"peak_GBps", gpu.hbm_GBps}, {"points", table_points(opt, "GBps", gpu.hbm_GBps, false)}};

  // Copies to and from the host pool: allocate there and copy S bytes.
  std::vector<Point> cp;
  for (const auto& p : m.copy) cp.push_back({p.size, p.size / p.seconds / 1e9 / node.pcie_GBps});
  cp = increasing(cp);
  legalise(cp, kMaxEff, "copies", notes);
  if (!cp.empty()) {
    const auto t = nlohmann::ordered_json{{"link_GBps", node.pcie_GBps},
                                          {"points", table_points(cp, "GBps", node.pcie_GBps, false)}};
    auto& c = j["copies"];
    for (const char* k : {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable"}) c[k] = t;
  }

  // Collectives: α and the per-step latency from all-reduces of one float
  // over 2 and n threads (t = α + 2(n−1)·β), then the bandwidth part
  // busbw = factor·S / (t − α − steps·β) per size.
  const int n = std::max(2, m.ranks);
  double alpha = 0, beta = 0;
  if (n > 2 && m.small_all_reduce_n > 0 && m.small_all_reduce_2 > 0) {
    beta = std::max(0.0, (m.small_all_reduce_n - m.small_all_reduce_2) / (2.0 * (n - 2)));
    alpha = std::max(0.0, m.small_all_reduce_2 - 2.0 * beta);
  } else if (m.small_all_reduce_2 > 0) {
    beta = m.small_all_reduce_2 / 2.0;
  }
  const double link = node.intra_node_GBps;
  auto busbw = [&](const std::vector<SizeTime>& pts, double factor, double steps, const std::string& what) {
    std::vector<Point> out;
    for (const auto& p : pts) {
      const double bw_time = p.seconds - alpha - steps * beta;
      const double e = bw_time > 0 ? factor * p.size / bw_time / 1e9 / link : kMaxBusbwEff;
      out.push_back({p.size, e});
    }
    out = increasing(out);
    legalise(out, kMaxBusbwEff, what, notes);
    return out;
  };
  const double nn = n;
  auto ar = busbw(m.all_reduce, 2.0 * (nn - 1) / nn, 2.0 * (nn - 1), "all_reduce");
  auto ag = busbw(m.all_gather, (nn - 1) / nn, nn - 1, "all_gather");
  auto rs = busbw(m.reduce_scatter, (nn - 1) / nn, nn - 1, "reduce_scatter");
  auto sr = busbw(m.send_recv, 1.0, 1.0, "send_recv");
  if (!ar.empty() || !ag.empty() || !rs.empty() || !sr.empty()) {
    nlohmann::ordered_json s;
    s["link_GBps"] = link;
    s["group"] = n;
    s["latency_us"] = round6(alpha * 1e6);
    s["step_latency_us"] = round6(beta * 1e6);
    if (!ar.empty()) s["all_reduce"] = table_points(ar, "busbw_GBps", link, false);
    if (!ag.empty()) {
      s["all_gather"] = table_points(ag, "busbw_GBps", link, false);
      // Not measured: the executor's all-to-all runs the same n−1 pairwise
      // copies as an all-gather's ring.
      s["all_to_all"] = s["all_gather"];
    }
    if (!rs.empty()) s["reduce_scatter"] = table_points(rs, "busbw_GBps", link, false);
    if (!sr.empty()) s["send_recv"] = table_points(sr, "busbw_GBps", link, false);
    j["collectives"]["intra_node"] = s;
  }

  j["overheads_us"] = {{"kernel_launch", round6(m.kernel_us)},
                       {"copy_launch", 0},
                       {"microbatch", 0},
                       {"step", round6(m.step_us)},
                       {"optimizer_step", round6(m.kernel_us)}};
  j["attention"] = {{"fraction_of_gemm", 1.0},
                    {"source", "the CPU backend computes attention with sgemm (standard attention)"}};

  std::string src =
      "strata calibrate --backend cpu" + std::string(m.quick ? " --quick" : "") + " --ranks " +
      std::to_string(m.ranks) + ": Google Benchmark, real time; every figure per rank thread while " +
      std::to_string(m.ranks) +
      " rank threads run the same benchmark at once. GEMM: OpenBLAS sgemm (one thread per call), m = n "
      "= k, against the cluster's fp32 peak " + num(gpu.tflops.fp32) +
      " TFLOPS (the same curve for every dtype: the backend computes in fp32). Memory: " +
      std::string(m.elementwise.empty() ? "memcpy, 2 bytes moved per byte copied"
                                        : "the byte-weighted rate of the backend's GeLU and layer norm "
                                          "forward kernels (each moving twice its input bytes, the op "
                                          "chain's count) and its residual add (three times), which run "
                                          "several times slower than memcpy") +
      (m.optimizer.empty() ? std::string()
                           : std::string("; optimizer: the backend's Adam update alone (28 bytes per "
                                         "parameter), which streams faster than those")) +
      ", against hbm_GBps " + num(gpu.hbm_GBps) +
      " (cache-resident sizes may run faster than that DRAM figure and are then clamped). Copies (offload to "
      "the host pool): allocate, copy, free, against pcie_GBps " + num(node.pcie_GBps) +
      ", pinned and pageable alike. Collectives: the executor's shared-memory rings (backend/cpu/"
      "comm.hpp) over " + std::to_string(n) + " threads; latency_us and step_latency_us fitted from "
      "all-reduces of one float over 2 and " + std::to_string(n) +
      " threads; busbw is the bandwidth part only; all_to_all copies all_gather (not measured); "
      "send_recv is half a ping-pong between two threads. Overheads: kernel_launch and optimizer_step "
      "= one 4x4x4 GEMM into a fresh tensor; step = starting and joining the rank threads; "
      "microbatch and copy_launch 0 (no framework between tasks).";
  for (const auto& note : notes) src += " Clamped: " + note + ".";
  j["source"] = src;

  return checked_text(j);
}

std::string render_measurements(const CpuMeasurements& m) {
  std::string out = "calibrate: " + m.machine + (m.quick ? " (quick)" : "") + "\n";
  if (m.stopped)
    out += "stopped: " + std::to_string(m.benchmarks_run) + " of " + std::to_string(m.benchmarks) +
           " benchmarks ran; what they measured follows (0: not measured)\n";
  char buf[320];
  auto rows = [&](const char* title, const std::vector<SizeTime>& pts, const char* unit, auto rate) {
    if (pts.empty()) return;
    std::snprintf(buf, sizeof buf, "\n%-22s %-14s %s\n", title, "time_us", unit);
    out += buf;
    for (const auto& p : pts) {
      std::snprintf(buf, sizeof buf, "%-22.0f %-14.3f %.3f\n", p.size, p.seconds * 1e6, rate(p));
      out += buf;
    }
  };
  rows("gemm n (m=n=k)", m.gemm, "GFLOP/s", [](const SizeTime& p) { return 2 * p.size * p.size * p.size / p.seconds / 1e9; });
  rows("memcpy bytes", m.memory, "GB/s (2 bytes moved per byte)", [](const SizeTime& p) { return 2 * p.size / p.seconds / 1e9; });
  rows("elementwise bytes", m.elementwise, "GB/s (GeLU + layer norm forward + residual add: 7 bytes per input byte)",
       [](const SizeTime& p) { return 7 * p.size / p.seconds / 1e9; });
  rows("optimizer bytes", m.optimizer, "GB/s (Adam over bytes/4 parameters: 7 bytes per byte)",
       [](const SizeTime& p) { return 7 * p.size / p.seconds / 1e9; });
  rows("copy bytes", m.copy, "GB/s", [](const SizeTime& p) { return p.size / p.seconds / 1e9; });
  const double n = std::max(2, m.ranks);
  rows("all_reduce bytes", m.all_reduce, "algbw GB/s", [](const SizeTime& p) { return p.size / p.seconds / 1e9; });
  rows("all_gather bytes", m.all_gather, "algbw GB/s", [](const SizeTime& p) { return p.size / p.seconds / 1e9; });
  rows("reduce_scatter bytes", m.reduce_scatter, "algbw GB/s", [](const SizeTime& p) { return p.size / p.seconds / 1e9; });
  rows("send_recv bytes", m.send_recv, "GB/s", [](const SizeTime& p) { return p.size / p.seconds / 1e9; });
  std::snprintf(buf, sizeof buf,
                "\nall-reduce of one float: %.2f us over 2 threads, %.2f us over %.0f\n"
                "one op (4x4x4 GEMM into a fresh tensor): %.3f us; starting and joining %d threads: %.2f us\n",
                m.small_all_reduce_2 * 1e6, m.small_all_reduce_n * 1e6, n, m.kernel_us, m.ranks, m.step_us);
  out += buf;
  return out;
}

std::string default_calibration_cache_path() {
  return calib::cache_path("cpu-calibration.json");
}

// ---------------------------------------------------------------- measuring

#if !STRATA_HAVE_BENCHMARK

bool calibrate_available() { return false; }

CpuMeasurements measure_cpu(const CalibrateOptions&) {
  throw Error(
      "calibrate: this build has no Google Benchmark (configure with -DSTRATA_BUILD_BENCH=ON); "
      "pass a calibration file instead");
}

#else

bool calibrate_available() { return true; }

namespace {

// Captures every iteration run: seconds per operation on one thread.
class Capture final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      if (r.error_occurred) {
        errors.push_back(r.benchmark_name() + ": " + r.error_message);
        continue;
      }
      // real_accumulated_time is the threads' mean wall time, iterations
      // their sum: one thread ran iterations / threads operations.
      const double per_thread = static_cast<double>(r.iterations) / static_cast<double>(r.threads);
      if (per_thread > 0) seconds[r.run_name.function_name].push_back(r.real_accumulated_time / per_thread);
    }
  }
  std::map<std::string, std::vector<double>> seconds;  // by benchmark name
  std::vector<std::string> errors;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Clears the registry however the measurement ends.
struct RegistryGuard {
  RegistryGuard() { benchmark::ClearRegisteredBenchmarks(); }
  ~RegistryGuard() { benchmark::ClearRegisteredBenchmarks(); }
};

// Shared state of one collective benchmark: a world and group per thread
// count, made before the run, used by each GB thread as rank thread_index.
struct Ring {
  explicit Ring(int n) : world(n) {
    std::vector<int> members(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) members[static_cast<std::size_t>(i)] = i;
    group = &world.group(members);
    for (int i = 0; i < n; ++i) allocs.push_back(std::make_unique<TrackingAllocator>());
  }
  CommWorld world;
  GroupState* group = nullptr;
  std::vector<std::unique_ptr<TrackingAllocator>> allocs;
};

}  // namespace

CpuMeasurements measure_cpu(const CalibrateOptions& o) {
  if (o.ranks < 1 || o.ranks > 256) throw InputError("--ranks", "", "must be 1..256");
  const int n = o.ranks;
  const HostInfo host = host_info();
  CpuMeasurements m;
  m.ranks = n;
  m.quick = o.quick;
  m.machine = host.cpu_model + ", " + std::to_string(host.logical_cpus) + " logical CPUs; " +
              std::to_string(n) + " rank threads";
  set_blas_threads(1);

  const double min_time = o.quick ? 0.02 : 0.2;
  const int reps = o.quick ? 1 : 3;
  const std::vector<std::int64_t> gemm_sizes =
      o.quick ? std::vector<std::int64_t>{16, 32, 64, 128, 256}
              : std::vector<std::int64_t>{8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
  const std::vector<std::int64_t> byte_sizes =
      o.quick ? std::vector<std::int64_t>{4096, 65536, 1 << 20, 8 << 20}
              : std::vector<std::int64_t>{1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  const std::vector<std::int64_t> comm_sizes =
      o.quick ? std::vector<std::int64_t>{4096, 65536, 1 << 20, 8 << 20}
              : std::vector<std::int64_t>{1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};

  RegistryGuard guard;
  std::vector<std::string> names;  // registered, in order
  auto reg = [&](const std::string& name, auto fn, int threads) {
    names.push_back(name);
    benchmark::RegisterBenchmark(name.c_str(), std::move(fn))
        ->UseRealTime()
        ->MinTime(min_time)
        ->Repetitions(reps)
        ->Threads(threads);
  };

  // GEMM per rank thread, n threads at once.
  for (const auto s : gemm_sizes) {
    reg("gemm/" + std::to_string(s),
                                      [s](benchmark::State& st) {
                                        TrackingAllocator a;
                                        Tensor A(a, {s, s}, MemTag::Other), B(a, {s, s}, MemTag::Other),
                                            C(a, {s, s}, MemTag::Other);
                                        for (std::int64_t i = 0; i < s * s; ++i) {
                                          A[i] = 0.001f * static_cast<float>(i % 97);
                                          B[i] = 0.002f * static_cast<float>(i % 89);
                                        }
                                        for (auto _ : st) {
                                          gemm(false, false, s, s, s, 1.0f, A.data(), s, B.data(), s,
                                               0.0f, C.data(), s);
                                          benchmark::DoNotOptimize(C.data());
                                        }
                                      },
         n);
  }
  // Memory bandwidth: memcpy per rank thread.
  for (const auto s : byte_sizes) {
    reg("memory/" + std::to_string(s),
                                      [s](benchmark::State& st) {
                                        std::vector<char> a(static_cast<std::size_t>(s), 1),
                                            b(static_cast<std::size_t>(s), 2);
                                        for (auto _ : st) {
                                          std::memcpy(b.data(), a.data(), a.size());
                                          benchmark::ClobberMemory();
                                        }
                                      },
         n);
    // What the cost model prices by bytes: the element-wise kernels of a
    // layer (GeLU, layer norm, a residual add), and apart from them the
    // optimizer's update (Adam).
    reg("elementwise/" + std::to_string(s),
                                      [s](benchmark::State& st) {
                                        const std::int64_t n = std::max<std::int64_t>(128, s / 4);
                                        TrackingAllocator a;
                                        Tensor x(a, {n}, MemTag::Other), y(a, {n}, MemTag::Other),
                                            g(a, {128}, MemTag::Other), b(a, {128}, MemTag::Other);
                                        for (std::int64_t i = 0; i < n; ++i) x[i] = 0.01f * static_cast<float>(i % 101) - 0.5f;
                                        for (std::int64_t i = 0; i < 128; ++i) g[i] = 1.0f;
                                        for (auto _ : st) {
                                          gelu_forward(x.data(), y.data(), n);
                                          layernorm_forward(x.data(), g.data(), b.data(), y.data(), n / 128, 128, 1e-5f);
                                          residual_forward(x.data(), y.data(), y.data(), n);
                                          benchmark::DoNotOptimize(y.data());
                                        }
                                      },
         n);
    reg("optimizer/" + std::to_string(s),
                                      [s](benchmark::State& st) {
                                        const std::int64_t n = std::max<std::int64_t>(128, s / 4);
                                        TrackingAllocator a;
                                        std::vector<Tensor> P, G;
                                        P.emplace_back(a, Shape{n}, MemTag::Params);
                                        G.emplace_back(a, Shape{n}, MemTag::Grads);
                                        for (std::int64_t i = 0; i < n; ++i) G[0][i] = 1e-3f * static_cast<float>(i % 7);
                                        Adam adam(a, {.lr = 1e-6f});
                                        for (auto _ : st) {
                                          adam.step(P, G);
                                          benchmark::DoNotOptimize(P[0].data());
                                        }
                                      },
         n);
    // Offload: a clone into another pool (allocate, copy) and its free.
    reg("copy/" + std::to_string(s),
                                      [s](benchmark::State& st) {
                                        TrackingAllocator dev, hostpool;
                                        Tensor x(dev, {s / 4}, MemTag::Activations);
                                        for (auto _ : st) {
                                          Tensor y = x.clone(hostpool, MemTag::Activations);
                                          benchmark::DoNotOptimize(y.data());
                                        }
                                      },
         n);
  }
  // Fixed cost of one op: a 4x4x4 GEMM into a fresh tensor.
  reg("kernel", [](benchmark::State& st) {
         TrackingAllocator a;
         Tensor A(a, {4, 4}, MemTag::Other), B(a, {4, 4}, MemTag::Other);
         for (auto _ : st) {
           Tensor C(a, {4, 4}, MemTag::Activations);
           gemm(false, false, 4, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4);
           benchmark::DoNotOptimize(C.data());
         }
       },
       n);
  // A step starts and joins the rank threads.
  reg("step", [n](benchmark::State& st) {
         for (auto _ : st) {
           std::vector<std::thread> t;
           for (int i = 0; i < n; ++i) t.emplace_back([] {});
           for (auto& x : t) x.join();
         }
       },
       1);

  // Collectives over the executor's rings. Each benchmark thread is a rank.
  std::vector<std::unique_ptr<Ring>> rings;  // outlive the run
  auto ring_bench = [&](const std::string& name, int threads, std::int64_t bytes, int op) {
    rings.push_back(std::make_unique<Ring>(threads));
    Ring* r = rings.back().get();
    reg(name,
                                      [r, bytes, op, threads](benchmark::State& st) {
                                        const int me = st.thread_index();
                                        Allocator& a = *r->allocs[static_cast<std::size_t>(me)];
                                        Comm c(*r->group, me, a);
                                        const std::int64_t count = std::max<std::int64_t>(1, bytes / 4);
                                        const auto mine = chunk_range(count, threads, me);
                                        Tensor buf(a, {count}, MemTag::CommBuffers);
                                        Tensor part(a, {std::max<std::int64_t>(1, mine.size())}, MemTag::CommBuffers);
                                        auto part_span = part.span().first(static_cast<std::size_t>(mine.size()));
                                        for (auto _ : st) {
                                          if (op == 0) c.all_reduce(buf.span());
                                          if (op == 1) c.all_gather(part_span, buf.span());
                                          if (op == 2) c.reduce_scatter(buf.span(), part_span);
                                          if (op == 3) {
                                            // Ping-pong: two messages per iteration.
                                            if (me == 0) {
                                              c.send(1, 0, buf.span());
                                              c.recv(1, 1, buf.span());
                                            } else {
                                              c.recv(0, 0, buf.span());
                                              c.send(0, 1, buf.span());
                                            }
                                          }
                                        }
                                      },
         threads);
  };
  ring_bench("small_all_reduce_2", 2, 4, 0);
  if (n > 2) ring_bench("small_all_reduce_n", n, 4, 0);
  for (const auto s : comm_sizes) {
    ring_bench("all_reduce/" + std::to_string(s), std::max(2, n), s, 0);
    ring_bench("all_gather/" + std::to_string(s), std::max(2, n), s, 1);
    ring_bench("reduce_scatter/" + std::to_string(s), std::max(2, n), s, 2);
    ring_bench("send_recv/" + std::to_string(s), 2, s, 3);
  }

  // One benchmark at a time, in the order registered, so a stop request is
  // seen between two of them (a collective's threads cannot leave one
  // part-way: they wait for each other).
  Capture cap;
  for (const auto& name : names) {
    if (o.stop && o.stop->load()) {
      m.stopped = true;
      break;
    }
    if (o.on_benchmark) o.on_benchmark(m.benchmarks_run, static_cast<int>(names.size()), name);
    benchmark::RunSpecifiedBenchmarks(&cap, "^" + name + "(/|$)");
    if (!cap.errors.empty()) throw Error("calibrate: " + cap.errors.front());
    ++m.benchmarks_run;
  }
  m.benchmarks = static_cast<int>(names.size());

  // A stopped measurement keeps the points it has; a finished one has all.
  auto get = [&](const std::string& name) -> std::optional<double> {
    const auto it = cap.seconds.find(name);
    if (it != cap.seconds.end() && !it->second.empty()) return median(it->second);
    if (m.stopped) return std::nullopt;
    throw Error("calibrate: benchmark " + name + " reported nothing");
  };
  auto add = [&](std::vector<SizeTime>& to, double size, const std::string& name, double scale = 1) {
    if (const auto t = get(name)) to.push_back({size, *t * scale});
  };
  for (const auto s : gemm_sizes) add(m.gemm, static_cast<double>(s), "gemm/" + std::to_string(s));
  for (const auto s : byte_sizes) {
    add(m.memory, static_cast<double>(s), "memory/" + std::to_string(s));
    add(m.copy, static_cast<double>(s), "copy/" + std::to_string(s));
    // The element-wise and Adam benchmarks run on at least 128 floats.
    const auto floats_bytes = static_cast<double>(std::max<std::int64_t>(128, s / 4) * 4);
    add(m.elementwise, floats_bytes, "elementwise/" + std::to_string(s));
    add(m.optimizer, floats_bytes, "optimizer/" + std::to_string(s));
  }
  m.kernel_us = get("kernel").value_or(0) * 1e6;
  m.step_us = get("step").value_or(0) * 1e6;
  m.small_all_reduce_2 = get("small_all_reduce_2").value_or(0);
  m.small_all_reduce_n = n > 2 ? get("small_all_reduce_n").value_or(0) : m.small_all_reduce_2;
  for (const auto s : comm_sizes) {
    const auto d = static_cast<double>(s);
    add(m.all_reduce, d, "all_reduce/" + std::to_string(s));
    add(m.all_gather, d, "all_gather/" + std::to_string(s));
    add(m.reduce_scatter, d, "reduce_scatter/" + std::to_string(s));
    // One message is half a ping-pong.
    add(m.send_recv, d, "send_recv/" + std::to_string(s), 0.5);
  }
  return m;
}

#endif

}  // namespace strata::backend::cpu
