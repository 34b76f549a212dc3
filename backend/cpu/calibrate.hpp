#pragma once
// `strata calibrate --backend cpu`: measures this machine as the CPU
// backend uses it (GEMM throughput by size, memory bandwidth, copies into a
// second pool, ring collectives and pipeline messages between rank threads,
// fixed per-op and per-step costs) with Google Benchmark, and writes a
// calibration JSON (schema: docs/cost-model.md) whose peaks are the
// cluster's (configs/clusters/cpu-local.json), so the cost model, which
// multiplies those peaks by the curves' fractions, prices a rank thread as
// measured. docs/validate.md says what is measured and how.
//
// Google Benchmark keeps its benchmarks in a process-wide registry. Only
// measure_cpu() touches it: it registers its benchmarks, runs them with
// its own reporter and clears the registry before it returns (also when it
// throws), so two calls do not see each other's benchmarks. It must not
// run beside other code that registers Google Benchmark benchmarks.
//
// Built with Google Benchmark only when the build found it
// (STRATA_BUILD_BENCH=ON); otherwise calibrate_available() is false and
// measure_cpu() throws Error saying so. calibration_json() needs no
// benchmark library.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "costmodel/hardware.hpp"

namespace strata::backend::cpu {

struct CalibrateOptions {
  // Fewer sizes and shorter runs: under 10 s (tests, CI, first use).
  bool quick = false;
  // Rank threads running at once while GEMMs, memory kernels and copies are
  // measured: per-rank throughput when this many ranks share the cores
  // (set it to the rank count of the plans to be validated).
  int ranks = 4;
  // Set (by a signal handler): no benchmark starts after it; the one
  // running ends its repetitions and measure_cpu returns what was measured,
  // with `stopped`.
  const std::atomic<bool>* stop = nullptr;
  // Called before each benchmark with the number done, the number
  // registered and the next one's name (for a progress line).
  std::function<void(int done, int total, const std::string& next)> on_benchmark;
};

// One measured point: a size (square GEMM edge, or bytes) and the seconds
// one operation took on one rank thread.
struct SizeTime {
  double size = 0;
  double seconds = 0;
};

// What measure_cpu() measured; calibration_json() turns it into the file.
struct CpuMeasurements {
  std::string machine;           // CPU model, cores
  int ranks = 1;                 // rank threads running at once
  bool quick = false;
  std::vector<SizeTime> gemm;    // m = n = k = size, fp32 sgemm per rank thread
  std::vector<SizeTime> memory;  // memcpy of `size` bytes per rank thread
  // What the cost model prices by bytes: a GeLU forward, a layer norm
  // forward (rows of 128) and a residual add over `size` bytes of fp32
  // input each, per rank thread; the seconds of the three. The memory curve comes from these;
  // memcpy is shown beside them.
  std::vector<SizeTime> elementwise;
  // The optimizer's update: Adam over size/4 parameters (28 bytes each),
  // per rank thread. The optimizer curve comes from these.
  std::vector<SizeTime> optimizer;
  std::vector<SizeTime> copy;    // allocate + copy `size` bytes into another pool, per rank
  // Ring collectives: all-reduce of one float over groups of 2 and of
  // `ranks` (latency), and all-reduce, all-gather, reduce-scatter of
  // `size` bytes over `ranks` threads.
  double small_all_reduce_2 = 0, small_all_reduce_n = 0;
  std::vector<SizeTime> all_reduce, all_gather, reduce_scatter;
  std::vector<SizeTime> send_recv;  // one message of `size` bytes between two threads
  double kernel_us = 0;             // fixed cost of one op call (a 4x4x4 GEMM into a fresh tensor)
  double step_us = 0;               // starting and joining `ranks` threads (one step)
  // `stop` ended the measurement: only `benchmarks_run` of `benchmarks`
  // ran, the lists hold the points measured, an unmeasured scalar is 0.
  // Such measurements cannot make a calibration (calibration_json refuses).
  bool stopped = false;
  int benchmarks = 0, benchmarks_run = 0;
};

// False when this build has no Google Benchmark (STRATA_BUILD_BENCH=OFF).
bool calibrate_available();

// Runs the microbenchmarks (quick: 2-3 s, full: about 100 s on the 2-core
// development machine), one at a time, checking opts.stop before each.
// Sets OpenBLAS to one thread per call (as `strata run` does). Throws
// Error when calibrate_available() is false.
CpuMeasurements measure_cpu(const CalibrateOptions& opts);

// The calibration JSON for `cluster` (its GPU spec is one rank thread):
// GEMM tflops per point against gpu.tflops (the same curve for every
// dtype: the CPU backend computes in fp32 whatever the precision), memory
// GBps against gpu.hbm_GBps, copies against node.pcie_GBps, collectives
// against node.intra_node_GBps with α and the per-step latency fitted from
// the small all-reduces. Efficiencies are clamped to the reader's limits
// (caches make small buffers faster than the spec's DRAM bandwidth) and
// to its rule that time never falls when the size grows; `source` lists
// every clamp. `date` is an ISO 8601 date. Throws Error for stopped
// measurements (a curve would be missing).
std::string calibration_json(const CpuMeasurements& m, const cost::ClusterSpec& cluster,
                             const std::string& date);

// What was measured, as a table: per size the time and rate per rank
// thread (GFLOP/s, GB/s, bus GB/s), the collective latencies and overheads;
// for stopped measurements, the benchmarks run and those not.
std::string render_measurements(const CpuMeasurements& m);

// ${XDG_CACHE_HOME:-$HOME/.cache}/strata/cpu-calibration.json. Throws
// InputError when neither variable is set.
std::string default_calibration_cache_path();

}  // namespace strata::backend::cpu
