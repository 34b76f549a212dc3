#pragma once
// `strata calibrate --backend cuda`: measures this machine's GPUs as the CUDA
// backend uses them and writes a calibration JSON (docs/cost-model.md's
// schema, the same the CPU backend writes) whose peaks are the cluster's, so
// the cost model, which multiplies those peaks by the curves' fractions,
// prices a GPU as measured. Plain C++ (no CUDA types): the application
// includes it. docs/cuda-backend.md says what is measured and how.
//
// Every figure is timed on the device with CUDA events (host wall time for
// pageable copies, whose staging the host does), the L2 cache flushed before
// every repeat (a write over twice its size), the median of the repeats
// after one warm-up. Microbench exposes the single measurements, which the
// Google Benchmark binary backend/bench/bench_cuda also runs.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/hardware.hpp"
#include "strategies/plan.hpp"
#include "sim/units.hpp"

namespace strata::backend::cuda {

struct CalibrateOptions {
  // The short grid (under a minute on an H200: scripts/gpu-check.sh) rather
  // than the full one (a few minutes).
  bool quick = false;
  int device = 0;  // the GPU measured (collectives use every visible GPU)
};

struct GemmTime {
  cost::GemmDtype dtype = cost::GemmDtype::FP32;
  std::int64_t m = 0, n = 0, k = 0;
  double seconds = 0;  // one product
};
struct BytesTime {
  double bytes = 0;    // the size the table is keyed by (see each field)
  double seconds = 0;  // one operation
};

struct CudaMeasurements {
  std::string machine;  // device, runtime, driver, cuBLAS and NCCL versions
  bool quick = false;
  int gpus = 1;         // visible GPUs (collectives ran over all of them)
  std::vector<GemmTime> gemm;
  // HBM: a STREAM triad a = b + s·c and a device-to-device copy, keyed by
  // the bytes they move (3 and 2 times one array's bytes).
  std::vector<BytesTime> triad, device_copy;
  // Host <-> device copies of `bytes`.
  std::vector<BytesTime> h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable;
  // NCCL over `gpus` GPUs in this process, keyed by nccl-tests' size (the
  // whole buffer); empty with one GPU. small_all_reduce: 8 bytes (latency).
  std::vector<BytesTime> all_reduce, all_gather, reduce_scatter, all_to_all, send_recv;
  double small_all_reduce = 0;
  double kernel_launch_us = 0;  // launch-to-launch gap of back-to-back empty kernels
  double copy_launch_us = 0;    // the same for 4-byte pinned copies
  std::vector<std::string> notes;  // what was not measured, and why
};

// Single measurements on one device. Throws Error without a GPU.
class Microbench {
 public:
  explicit Microbench(int device = 0);
  ~Microbench();
  Microbench(const Microbench&) = delete;
  Microbench& operator=(const Microbench&) = delete;

  std::string machine() const;
  int gpus() const;  // visible GPUs
  // Seconds of one C[m×n] = A[m×k]·B[k×n] (fp8 is not measured: throws).
  double gemm(cost::GemmDtype dtype, std::int64_t m, std::int64_t n, std::int64_t k, int repeats);
  // Seconds of one triad over arrays of `bytes`, and of one copy of `bytes`.
  double triad(Bytes bytes, int repeats);
  double device_copy(Bytes bytes, int repeats);
  double host_copy(Bytes bytes, bool to_device, bool pinned, int repeats);
  double kernel_launch_us(int launches);
  double copy_launch_us(int copies);
  // Seconds of one collective of nccl-tests size `bytes` over every visible
  // GPU (at least 2; send_recv between the first two).
  double collective(cost::CollectiveOp op, Bytes bytes, int repeats);
  // Seconds of one optimizer step (the CUDA backend's kernels) over one
  // fp32 parameter matrix of `rows` × 1024 entries, states warm (the
  // warm-up step allocates them). Throws Error for an optimizer without
  // CUDA kernels.
  double optimizer_step(strategies::Optimizer o, std::int64_t rows, int repeats);
  // Seconds of one rank's compressed exchange of a `rows` × 1024 fp32
  // gradient with one rank (encode, each round's local work, decode; the
  // collectives are identities here).
  double compression(const strategies::Compression& c, std::int64_t rows, int repeats);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs the grid (quick: the short one).
CudaMeasurements measure_cuda(const CalibrateOptions& opts);

// The calibration JSON for `cluster`: GEMM tflops per dtype against
// gpu.tflops, one curve by FLOPs per dtype (shapes of equal FLOPs: their
// median); memory GBps (the triad) against hbm_GBps; copies against
// node.pcie_GBps; collectives (with 2 or more GPUs) against
// node.intra_node_GBps, latency_us from the 8-byte all-reduce; overheads
// kernel_launch and copy_launch as measured, microbatch 0 and step 0 (the
// executor has no framework between tasks), optimizer_step one launch.
// Efficiencies are clamped to the reader's limits; `source` lists every
// clamp and what was not measured. `date`: ISO 8601.
std::string calibration_json(const CudaMeasurements& m, const cost::ClusterSpec& cluster,
                             const std::string& date);

// What was measured, as tables (TFLOP/s, GB/s, bus GB/s).
std::string render_measurements(const CudaMeasurements& m);

// The single-GPU cluster preset for a device name ("NVIDIA H200" →
// "1xh200"), or empty when none fits.
std::string cluster_for_device(const std::string& device_name, Bytes memory);

// ${XDG_CACHE_HOME:-$HOME/.cache}/strata/cuda-calibration.json. Throws
// InputError when neither variable is set.
std::string default_calibration_cache_path();

}  // namespace strata::backend::cuda
