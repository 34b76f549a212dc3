#include "backend/cuda/calibrate.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/common/calibration_points.hpp"
#include "backend/cuda/blas.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/compression.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/cuda/optimizer.hpp"
#include "backend/cuda/tensor.hpp"
#include "costmodel/time_model.hpp"
#include "sim/error.hpp"
#include "sim/ranking.hpp"

namespace strata::backend::cuda {

using namespace calib;

namespace {

// Raw device or pinned buffers for the benchmarks (not the tracked
// allocator: nothing here is a training step's memory).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { STRATA_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1))); }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* f() const { return static_cast<float*>(p); }
};
struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(std::size_t bytes) { STRATA_CUDA_CHECK(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), cudaHostAllocDefault)); }
  ~PinnedBuffer() {
    if (p != nullptr) cudaFreeHost(p);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

std::size_t elem_bytes(cost::GemmDtype d) {
  return d == cost::GemmDtype::BF16 || d == cost::GemmDtype::FP16 ? 2 : 4;
}

std::string gemm_name(cost::GemmDtype d) { return std::string(enum_name(d)); }

}  // namespace

// ---------------------------------------------------------------- Microbench

struct Microbench::Impl {
  int device = 0;
  int gpus = 1;
  std::string machine;
  DeviceAllocator alloc;
  cudaStream_t stream = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::unique_ptr<Blas> blas;
  std::unique_ptr<DeviceBuffer> flush;  // twice the L2 size
  std::size_t flush_bytes = 0;
  // NCCL: one communicator, stream and pair of events per visible GPU.
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> nstreams;
  std::vector<cudaEvent_t> nstart, nend;

  explicit Impl(int d) : device(d), alloc(d) {
    STRATA_CUDA_CHECK(cudaGetDeviceCount(&gpus));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    STRATA_CUDA_CHECK(cudaEventCreate(&e0));
    STRATA_CUDA_CHECK(cudaEventCreate(&e1));
    alloc.set_stream(stream);
    blas = std::make_unique<Blas>(alloc);
    int l2 = 0;
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, d));
    flush_bytes = 2 * static_cast<std::size_t>(std::max(l2, 1 << 20));
    flush = std::make_unique<DeviceBuffer>(flush_bytes);
    cudaDeviceProp p{};
    STRATA_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
    int runtime = 0, driver = 0, cublas_major = 0, cublas_minor = 0, nccl = 0;
    STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    STRATA_CUDA_CHECK(cudaDriverGetVersion(&driver));
    STRATA_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &cublas_major));
    STRATA_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &cublas_minor));
    STRATA_NCCL_CHECK(ncclGetVersion(&nccl));
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%d x %s (%.1f GiB, %d SMs, sm_%d%d, L2 %d MiB); CUDA runtime %d.%d, driver %d.%d, "
                  "cuBLAS %d.%d, NCCL %d.%d.%d",
                  gpus, p.name, static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024 * 1024),
                  p.multiProcessorCount, p.major, p.minor, l2 >> 20, runtime / 1000, runtime % 1000 / 10,
                  driver / 1000, driver % 1000 / 10, cublas_major, cublas_minor, nccl / 10000,
                  nccl / 100 % 100, nccl % 100);
    machine = buf;
  }
  ~Impl() {
    for (auto c : comms) ncclCommDestroy(c);
    for (auto e : nstart) cudaEventDestroy(e);
    for (auto e : nend) cudaEventDestroy(e);
    for (auto s : nstreams) cudaStreamDestroy(s);
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    blas.reset();
    flush.reset();
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(stream);
  }

  void flush_l2() { STRATA_CUDA_CHECK(cudaMemsetAsync(flush->p, 0, flush_bytes, stream)); }

  // The median seconds of `op` (enqueued on `stream`) over `repeats`, after
  // one warm-up, the L2 flushed before each.
  template <class Op>
  double timed(Op op, int repeats) {
    op();
    std::vector<double> t;
    for (int r = 0; r < std::max(1, repeats); ++r) {
      flush_l2();
      STRATA_CUDA_CHECK(cudaEventRecord(e0, stream));
      op();
      STRATA_CUDA_CHECK(cudaEventRecord(e1, stream));
      STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms * 1e-3);
    }
    return median(t);
  }

  // The gap between back-to-back operations on the device: the stream is
  // kept busy while the host queues them, so the host's own launch cost is
  // hidden (as in a training step, where the host runs ahead of the GPU).
  template <class Op>
  double queued_gap_us(Op op, int count) {
    count = std::max(1, count);
    kernels::spin(stream, 50'000'000);  // 50 ms: longer than queueing `count` operations
    STRATA_CUDA_CHECK(cudaEventRecord(e0, stream));
    for (int i = 0; i < count; ++i) op();
    STRATA_CUDA_CHECK(cudaEventRecord(e1, stream));
    STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms) * 1e3 / count;
  }

  void ensure_nccl() {
    if (!comms.empty()) return;
    if (gpus < 2) throw Error("collective: one GPU visible; NCCL collectives need two or more");
    comms.resize(static_cast<std::size_t>(gpus));
    std::vector<int> devs(static_cast<std::size_t>(gpus));
    for (int i = 0; i < gpus; ++i) devs[static_cast<std::size_t>(i)] = i;
    STRATA_NCCL_CHECK(ncclCommInitAll(comms.data(), gpus, devs.data()));
    for (int i = 0; i < gpus; ++i) {
      STRATA_CUDA_CHECK(cudaSetDevice(i));
      cudaStream_t s = nullptr;
      cudaEvent_t a = nullptr, b = nullptr;
      STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      nstreams.push_back(s);
      STRATA_CUDA_CHECK(cudaEventCreate(&a));
      nstart.push_back(a);
      STRATA_CUDA_CHECK(cudaEventCreate(&b));
      nend.push_back(b);
    }
    STRATA_CUDA_CHECK(cudaSetDevice(device));
  }
};

Microbench::Microbench(int device) {
  if (devices().empty()) throw Error("calibrate: no CUDA device is visible (no GPU, or no driver)");
  impl_ = std::make_unique<Impl>(device);
}
Microbench::~Microbench() = default;

std::string Microbench::machine() const { return impl_->machine; }
int Microbench::gpus() const { return impl_->gpus; }

double Microbench::gemm(cost::GemmDtype dtype, std::int64_t m, std::int64_t n, std::int64_t k, int repeats) {
  Impl& I = *impl_;
  GemmType type = GemmType::FP32;
  switch (dtype) {
    case cost::GemmDtype::FP32: break;
    case cost::GemmDtype::TF32: type = GemmType::TF32; break;
    case cost::GemmDtype::BF16: type = GemmType::BF16; break;
    case cost::GemmDtype::FP16: type = GemmType::FP16; break;
    case cost::GemmDtype::FP8:
    case cost::GemmDtype::FP4:
      throw Error("calibrate: " + std::string(enum_name(dtype)) +
                  " GEMMs are not measured (cuBLASLt with scales is not implemented)");
  }
  const std::size_t e = elem_bytes(dtype);
  DeviceBuffer a(static_cast<std::size_t>(m * k) * e), b(static_cast<std::size_t>(k * n) * e),
      c(static_cast<std::size_t>(m * n) * e);
  // Random values: products of zeros draw less power and run faster.
  if (e == 4) {
    kernels::init_normal(I.stream, a.f(), m * k, 1.0f, 1);
    kernels::init_normal(I.stream, b.f(), k * n, 1.0f, 2);
  } else {
    kernels::init_uniform_16bit(I.stream, a.p, m * k, dtype == cost::GemmDtype::BF16, 1);
    kernels::init_uniform_16bit(I.stream, b.p, k * n, dtype == cost::GemmDtype::BF16, 2);
  }
  return I.timed([&] { I.blas->gemm_typed(I.stream, type, false, false, m, n, k, 1.0f, a.p, k, b.p, n, 0.0f, c.p, n); },
                 repeats);
}

double Microbench::triad(Bytes bytes, int repeats) {
  Impl& I = *impl_;
  const std::int64_t n = bytes / 4;
  DeviceBuffer a(static_cast<std::size_t>(bytes)), b(static_cast<std::size_t>(bytes)), c(static_cast<std::size_t>(bytes));
  kernels::fill(I.stream, b.f(), n, 1.0f);
  kernels::fill(I.stream, c.f(), n, 2.0f);
  return I.timed([&] { kernels::triad(I.stream, a.f(), b.f(), c.f(), 3.0f, n); }, repeats);
}

double Microbench::optimizer_step(strategies::Optimizer o, std::int64_t rows, int repeats) {
  Impl& I = *impl_;
  std::vector<DeviceTensor> params, grads;
  params.emplace_back(I.alloc, Shape{rows, 1024}, MemTag::Params, Fill::Uninitialised);
  grads.emplace_back(I.alloc, Shape{rows, 1024}, MemTag::Grads, Fill::Uninitialised);
  kernels::fill(I.stream, params[0].data(), params[0].numel(), 0.5f);
  kernels::fill(I.stream, grads[0].data(), grads[0].numel(), 1e-3f);
  const auto opt = make_optimizer(o, 1e-4f, 0.0f, I.alloc);
  return I.timed([&] { opt->step(I.stream, params, grads, nullptr); }, repeats);
}

double Microbench::compression(const strategies::Compression& c, std::int64_t rows, int repeats) {
  Impl& I = *impl_;
  const Shape shape{rows, 1024};
  DeviceTensor grad(I.alloc, shape, MemTag::Grads, Fill::Uninitialised), out(I.alloc, shape, MemTag::Grads);
  kernels::fill(I.stream, grad.data(), grad.numel(), 1e-3f);
  const auto comp = make_device_compressor({.method = c, .ranks = 1, .rank = 0, .seed = 1},
                                           flat_layout(std::span<const Shape>(&shape, 1)), I.alloc, *I.blas);
  return I.timed(
      [&] {
        comp->encode(grad.data());
        for (int r = 0; r < comp->rounds(); ++r) {
          const CompressRound x = comp->round(r);
          if (x.op == CompressCollective::AllToAll)  // one rank: its own block
            STRATA_CUDA_CHECK(cudaMemcpyAsync(x.recv, x.send, static_cast<std::size_t>(x.count) * 4,
                                              cudaMemcpyDeviceToDevice, I.stream));
        }
        comp->decode(out.data());
      },
      repeats);
}

double Microbench::device_copy(Bytes bytes, int repeats) {
  Impl& I = *impl_;
  DeviceBuffer a(static_cast<std::size_t>(bytes)), b(static_cast<std::size_t>(bytes));
  STRATA_CUDA_CHECK(cudaMemsetAsync(b.p, 1, static_cast<std::size_t>(bytes), I.stream));
  return I.timed(
      [&] { STRATA_CUDA_CHECK(cudaMemcpyAsync(a.p, b.p, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice, I.stream)); },
      repeats);
}

double Microbench::host_copy(Bytes bytes, bool to_device, bool pinned, int repeats) {
  Impl& I = *impl_;
  const auto n = static_cast<std::size_t>(bytes);
  DeviceBuffer d(n);
  const auto kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  if (pinned) {
    PinnedBuffer h(n);
    std::memset(h.p, 1, n);
    return I.timed(
        [&] { STRATA_CUDA_CHECK(cudaMemcpyAsync(to_device ? d.p : h.p, to_device ? h.p : d.p, n, kind, I.stream)); },
        repeats);
  }
  // Pageable: the host stages the copy, so it is timed by the host clock.
  std::vector<char> h(n, 1);
  auto once = [&] {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(to_device ? d.p : static_cast<void*>(h.data()),
                                      to_device ? static_cast<const void*>(h.data()) : d.p, n, kind, I.stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  };
  once();
  std::vector<double> t;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    I.flush_l2();
    STRATA_CUDA_CHECK(cudaStreamSynchronize(I.stream));
    const auto a = std::chrono::steady_clock::now();
    once();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  return median(t);
}

double Microbench::kernel_launch_us(int launches) {
  Impl& I = *impl_;
  return I.queued_gap_us([&] { kernels::empty(I.stream); }, launches);
}

double Microbench::copy_launch_us(int copies) {
  Impl& I = *impl_;
  PinnedBuffer h(4);
  DeviceBuffer d(4);
  return I.queued_gap_us([&] { STRATA_CUDA_CHECK(cudaMemcpyAsync(d.p, h.p, 4, cudaMemcpyHostToDevice, I.stream)); },
                         copies);
}

double Microbench::collective(cost::CollectiveOp op, Bytes bytes, int repeats) {
  Impl& I = *impl_;
  I.ensure_nccl();
  const int n = I.gpus;
  const auto count = static_cast<std::size_t>(std::max<Bytes>(bytes / 4, 1));  // floats in the whole buffer
  const std::size_t chunk = count / static_cast<std::size_t>(n);
  if (op != cost::CollectiveOp::AllReduce && op != cost::CollectiveOp::SendRecv && chunk == 0)
    throw Error("collective: " + std::to_string(bytes) + " bytes do not split over " + std::to_string(n) + " GPUs");
  std::vector<std::unique_ptr<DeviceBuffer>> send, recv;
  for (int i = 0; i < n; ++i) {
    STRATA_CUDA_CHECK(cudaSetDevice(i));
    send.push_back(std::make_unique<DeviceBuffer>(count * 4));
    recv.push_back(std::make_unique<DeviceBuffer>(count * 4));
    STRATA_CUDA_CHECK(cudaMemset(send.back()->p, 0, count * 4));
  }
  auto launch = [&] {
    STRATA_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < n; ++i) {
      const auto ii = static_cast<std::size_t>(i);
      void* s = send[ii]->p;
      void* r = recv[ii]->p;
      ncclComm_t c = I.comms[ii];
      cudaStream_t st = I.nstreams[ii];
      switch (op) {
        case cost::CollectiveOp::AllReduce:
          STRATA_NCCL_CHECK(ncclAllReduce(s, r, count, ncclFloat, ncclSum, c, st));
          break;
        case cost::CollectiveOp::AllGather:
          STRATA_NCCL_CHECK(ncclAllGather(s, r, chunk, ncclFloat, c, st));
          break;
        case cost::CollectiveOp::ReduceScatter:
          STRATA_NCCL_CHECK(ncclReduceScatter(s, r, chunk, ncclFloat, ncclSum, c, st));
          break;
        case cost::CollectiveOp::AllToAll:
          for (int j = 0; j < n; ++j) {
            STRATA_NCCL_CHECK(ncclSend(static_cast<float*>(s) + static_cast<std::size_t>(j) * chunk, chunk, ncclFloat, j, c, st));
            STRATA_NCCL_CHECK(ncclRecv(static_cast<float*>(r) + static_cast<std::size_t>(j) * chunk, chunk, ncclFloat, j, c, st));
          }
          break;
        case cost::CollectiveOp::SendRecv:
          if (i == 0) STRATA_NCCL_CHECK(ncclSend(s, count, ncclFloat, 1, c, st));
          if (i == 1) STRATA_NCCL_CHECK(ncclRecv(r, count, ncclFloat, 0, c, st));
          break;
      }
    }
    STRATA_NCCL_CHECK(ncclGroupEnd());
  };
  auto sync_all = [&] {
    for (int i = 0; i < n; ++i) {
      STRATA_CUDA_CHECK(cudaSetDevice(i));
      STRATA_CUDA_CHECK(cudaStreamSynchronize(I.nstreams[static_cast<std::size_t>(i)]));
    }
  };
  launch();
  sync_all();
  std::vector<double> t;
  for (int rep = 0; rep < std::max(1, repeats); ++rep) {
    for (int i = 0; i < n; ++i) {
      STRATA_CUDA_CHECK(cudaSetDevice(i));
      STRATA_CUDA_CHECK(cudaEventRecord(I.nstart[static_cast<std::size_t>(i)], I.nstreams[static_cast<std::size_t>(i)]));
    }
    launch();
    for (int i = 0; i < n; ++i) {
      STRATA_CUDA_CHECK(cudaSetDevice(i));
      STRATA_CUDA_CHECK(cudaEventRecord(I.nend[static_cast<std::size_t>(i)], I.nstreams[static_cast<std::size_t>(i)]));
    }
    sync_all();
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      float ms = 0;
      STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, I.nstart[static_cast<std::size_t>(i)], I.nend[static_cast<std::size_t>(i)]));
      worst = std::max(worst, ms * 1e-3);
    }
    t.push_back(worst);
  }
  for (int i = 0; i < n; ++i) {
    STRATA_CUDA_CHECK(cudaSetDevice(i));
    send[static_cast<std::size_t>(i)].reset();
    recv[static_cast<std::size_t>(i)].reset();
  }
  STRATA_CUDA_CHECK(cudaSetDevice(I.device));
  return median(t);
}

// ---------------------------------------------------------------- the grid

CudaMeasurements measure_cuda(const CalibrateOptions& o) {
  Microbench mb(o.device);
  CudaMeasurements m;
  m.machine = mb.machine();
  m.quick = o.quick;
  m.gpus = mb.gpus();
  const int reps = o.quick ? 5 : 20;
  // Square GEMMs for the curve's shape, and a grid of (m, n, k) around a
  // training step's products.
  std::vector<std::array<std::int64_t, 3>> shapes;
  const std::vector<std::int64_t> squares =
      o.quick ? std::vector<std::int64_t>{256, 512, 1024, 2048, 4096, 8192}
              : std::vector<std::int64_t>{128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  for (const auto s : squares) shapes.push_back({s, s, s});
  const std::vector<std::int64_t> grid = o.quick ? std::vector<std::int64_t>{2048, 8192}
                                                 : std::vector<std::int64_t>{1024, 4096, 16384};
  for (const auto a : grid)
    for (const auto b : grid)
      for (const auto c : grid)
        if (!(a == b && b == c)) shapes.push_back({a, b, c});
  for (const auto d : {cost::GemmDtype::FP32, cost::GemmDtype::TF32, cost::GemmDtype::BF16, cost::GemmDtype::FP16})
    for (const auto& s : shapes) m.gemm.push_back({d, s[0], s[1], s[2], mb.gemm(d, s[0], s[1], s[2], reps)});
  m.notes.push_back("fp8 GEMMs not measured (cuBLASLt with scaling factors is not implemented)");

  const std::vector<Bytes> hbm = o.quick ? std::vector<Bytes>{Bytes{1} << 20, Bytes{16} << 20, Bytes{256} << 20, Bytes{1} << 30}
                                         : std::vector<Bytes>{Bytes{64} << 10, Bytes{256} << 10, Bytes{1} << 20, Bytes{4} << 20,
                                                              Bytes{16} << 20, Bytes{64} << 20, Bytes{256} << 20, Bytes{1} << 30,
                                                              Bytes{2} << 30};
  for (const Bytes s : hbm) {
    m.triad.push_back({3.0 * static_cast<double>(s), mb.triad(s, reps)});
    m.device_copy.push_back({2.0 * static_cast<double>(s), mb.device_copy(s, reps)});
  }
  const std::vector<Bytes> pcie = o.quick ? std::vector<Bytes>{Bytes{64} << 10, Bytes{1} << 20, Bytes{16} << 20, Bytes{256} << 20}
                                          : std::vector<Bytes>{Bytes{4} << 10, Bytes{64} << 10, Bytes{256} << 10, Bytes{1} << 20,
                                                               Bytes{4} << 20, Bytes{16} << 20, Bytes{64} << 20, Bytes{256} << 20,
                                                               Bytes{1} << 30};
  for (const Bytes s : pcie) {
    const auto b = static_cast<double>(s);
    m.h2d_pinned.push_back({b, mb.host_copy(s, true, true, reps)});
    m.d2h_pinned.push_back({b, mb.host_copy(s, false, true, reps)});
    m.h2d_pageable.push_back({b, mb.host_copy(s, true, false, reps)});
    m.d2h_pageable.push_back({b, mb.host_copy(s, false, false, reps)});
  }
  if (m.gpus >= 2) {
    const std::vector<Bytes> sizes = o.quick ? std::vector<Bytes>{Bytes{1} << 20, Bytes{16} << 20, Bytes{128} << 20, Bytes{1} << 30}
                                             : std::vector<Bytes>{Bytes{64} << 10, Bytes{1} << 20, Bytes{8} << 20, Bytes{64} << 20,
                                                                  Bytes{256} << 20, Bytes{1} << 30, Bytes{2} << 30};
    m.small_all_reduce = mb.collective(cost::CollectiveOp::AllReduce, 8, reps);
    for (const Bytes s : sizes) {
      const auto b = static_cast<double>(s);
      m.all_reduce.push_back({b, mb.collective(cost::CollectiveOp::AllReduce, s, reps)});
      m.all_gather.push_back({b, mb.collective(cost::CollectiveOp::AllGather, s, reps)});
      m.reduce_scatter.push_back({b, mb.collective(cost::CollectiveOp::ReduceScatter, s, reps)});
      m.all_to_all.push_back({b, mb.collective(cost::CollectiveOp::AllToAll, s, reps)});
      m.send_recv.push_back({b, mb.collective(cost::CollectiveOp::SendRecv, s, reps)});
    }
  } else {
    m.notes.push_back("one GPU visible: NCCL collectives need two or more, so no collective table was written");
  }
  m.kernel_launch_us = mb.kernel_launch_us(2000);
  m.copy_launch_us = mb.copy_launch_us(1000);
  return m;
}

// ---------------------------------------------------------------- the file

std::string calibration_json(const CudaMeasurements& m, const cost::ClusterSpec& cluster,
                             const std::string& date) {
  const auto& gpu = cluster.gpu;
  const auto& node = cluster.node;
  if (!(gpu.hbm_GBps > 0) || !(node.pcie_GBps > 0))
    throw Error("calibrate: cluster '" + cluster.name + "' needs hbm_GBps and pcie_GBps above 0");
  std::vector<std::string> notes;
  nlohmann::ordered_json j;
  j["machine"] = m.machine;
  j["backend"] = "cuda";
  j["date"] = date;
  j["gpu"] = gpu.name;

  // GEMM: one curve by FLOPs per dtype; shapes of equal FLOPs give their
  // median. Each measured rate is read as full waves of tiles: divided by
  // the shape's tile and wave quantisation (cost::gemm_quantisation, the
  // bundled calibration deciding its splits), which the time model applies
  // again per shape, so a measured shape is predicted as measured.
  const cost::Calibration bundled = cost::default_calibration(gpu);
  if (gpu.gemm_tile.known() && gpu.sms > 0)
    notes.push_back("GEMM points are full-wave rates: each measured shape's tile and wave quantisation (" +
                    std::to_string(gpu.gemm_tile.m) + " x " + std::to_string(gpu.gemm_tile.n) + " tiles on " +
                    std::to_string(gpu.sms) + " SMs) divided out");
  for (const auto d : {cost::GemmDtype::FP32, cost::GemmDtype::TF32, cost::GemmDtype::BF16, cost::GemmDtype::FP16,
                       cost::GemmDtype::FP8}) {
    const double peak = cost::peak_tflops(gpu, d);
    std::map<double, std::vector<const GemmTime*>> by_size;
    for (const auto& g : m.gemm)
      if (g.dtype == d) by_size[2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k)].push_back(&g);
    if (by_size.empty() || !(peak > 0)) continue;
    std::vector<Point> pts;
    for (const auto& [size, gs] : by_size) {
      std::vector<double> eff;
      for (const auto* g : gs)
        eff.push_back(size / g->seconds / 1e12 / peak *
                      cost::gemm_quantisation(gpu, bundled, d, static_cast<double>(g->m), static_cast<double>(g->n),
                                              static_cast<double>(g->k)));
      pts.push_back({size, median(eff), gs.front()->m, gs.front()->n, gs.front()->k});
    }
    legalise(pts, kMaxEff, "gemm " + gemm_name(d), notes);
    j["gemm"][gemm_name(d)] = {{"peak_tflops", peak}, {"points", table_points(pts, "tflops", peak, true)}};
  }

  // Memory-bound kernels: the triad, keyed and rated by the bytes it moves.
  std::vector<Point> mem;
  for (const auto& p : m.triad) mem.push_back({p.bytes, p.bytes / p.seconds / 1e9 / gpu.hbm_GBps});
  mem = increasing(mem);
  legalise(mem, kMaxEff, "memory", notes);
  if (!mem.empty())
    j["memory"] = {{"peak_GBps", gpu.hbm_GBps}, {"points", table_points(mem, "GBps", gpu.hbm_GBps, false)}};

  auto copies = [&](const std::vector<BytesTime>& v, const char* key) {
    std::vector<Point> pts;
    for (const auto& p : v) pts.push_back({p.bytes, p.bytes / p.seconds / 1e9 / node.pcie_GBps});
    pts = increasing(pts);
    legalise(pts, kMaxEff, key, notes);
    if (!pts.empty())
      j["copies"][key] = {{"link_GBps", node.pcie_GBps}, {"points", table_points(pts, "GBps", node.pcie_GBps, false)}};
  };
  copies(m.h2d_pinned, "h2d_pinned");
  copies(m.d2h_pinned, "d2h_pinned");
  copies(m.h2d_pageable, "h2d_pageable");
  copies(m.d2h_pageable, "d2h_pageable");

  // Collectives: busbw = factor·S / (t − α) (nccl-tests' factors), α the
  // 8-byte all-reduce's time.
  if (m.gpus >= 2 && !m.all_reduce.empty()) {
    if (!(node.intra_node_GBps > 0))
      throw Error("calibrate: cluster '" + cluster.name + "' needs intra_node_GBps above 0 for collectives");
    const double n = m.gpus, alpha = m.small_all_reduce, link = node.intra_node_GBps;
    auto busbw = [&](const std::vector<BytesTime>& v, double factor, const std::string& what) {
      std::vector<Point> out;
      for (const auto& p : v) {
        const double bw_time = p.seconds - alpha;
        out.push_back({p.bytes, bw_time > 0 ? factor * p.bytes / bw_time / 1e9 / link : kMaxBusbwEff});
      }
      out = increasing(out);
      legalise(out, kMaxBusbwEff, what, notes);
      return table_points(out, "busbw_GBps", link, false);
    };
    nlohmann::ordered_json s;
    s["link_GBps"] = link;
    s["group"] = m.gpus;
    s["latency_us"] = round6(alpha * 1e6);
    s["step_latency_us"] = 0;
    const std::pair<const char*, std::pair<const std::vector<BytesTime>*, double>> ops[] = {
        {"all_reduce", {&m.all_reduce, 2.0 * (n - 1) / n}},
        {"all_gather", {&m.all_gather, (n - 1) / n}},
        {"reduce_scatter", {&m.reduce_scatter, (n - 1) / n}},
        {"all_to_all", {&m.all_to_all, (n - 1) / n}},
        {"send_recv", {&m.send_recv, 1.0}}};
    for (const auto& [name, v] : ops)
      if (!v.first->empty()) s[name] = busbw(*v.first, v.second, name);
    j["collectives"]["intra_node"] = s;
  }

  j["overheads_us"] = {{"kernel_launch", round6(m.kernel_launch_us)},
                       {"copy_launch", round6(m.copy_launch_us)},
                       {"microbatch", 0},
                       {"step", 0},
                       {"optimizer_step", round6(m.kernel_launch_us)}};
  j["attention"] = {{"fraction_of_gemm", 1.0},
                    {"source", "the CUDA backend computes standard attention with cuBLAS products and a softmax "
                               "kernel; this figure applies to flash attention, which it does not run"}};
  std::string src =
      "strata calibrate --backend cuda" + std::string(m.quick ? " --quick" : "") +
      ": CUDA events around each operation, the L2 cache flushed (a write of twice its size) before every "
      "repeat, the median of " + std::string(m.quick ? "5" : "20") +
      " repeats after one warm-up. GEMM: cublasGemmEx on random inputs (fp32: CUBLAS_COMPUTE_32F, no TF32; "
      "tf32: CUBLAS_COMPUTE_32F_FAST_TF32; bf16 and fp16: 16-bit inputs and output, fp32 accumulation), "
      "square shapes and a grid of (m, n, k), one curve by FLOPs per dtype (equal FLOPs: the median), "
      "against the cluster GPU's dense peaks. Memory: a STREAM triad a = b + s*c keyed by the bytes it "
      "moves (3 per array byte), against hbm_GBps " + num(gpu.hbm_GBps) +
      " (device-to-device copies are shown beside it). Copies: cudaMemcpyAsync of pinned (events) and "
      "pageable (host clock: the host stages them) buffers against pcie_GBps " + num(node.pcie_GBps) +
      ". Collectives: NCCL over the " + std::to_string(m.gpus) +
      " visible GPUs in one process (ncclCommInitAll), busbw with nccl-tests' factors after the 8-byte "
      "all-reduce's time (latency_us); all_to_all as grouped ncclSend/ncclRecv; send_recv between the first two "
      "GPUs. Overheads: kernel_launch = the gap between back-to-back empty kernels, copy_launch = the same for "
      "4-byte pinned copies, optimizer_step one launch, microbatch and step 0 (the executor runs no framework "
      "code between tasks).";
  for (const auto& note : m.notes) src += " Not measured: " + note + ".";
  for (const auto& note : notes) src += " Clamped: " + note + ".";
  j["source"] = src;
  return checked_text(j);
}

std::string render_measurements(const CudaMeasurements& m) {
  std::string out = "calibrate: " + m.machine + (m.quick ? " (quick)" : "") + "\n";
  char buf[256];
  out += "\ngemm dtype  m       n       k       time_us        TFLOP/s\n";
  for (const auto& g : m.gemm) {
    std::snprintf(buf, sizeof buf, "%-11s %-7lld %-7lld %-7lld %-14.2f %.1f\n", gemm_name(g.dtype).c_str(),
                  static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                  g.seconds * 1e6,
                  2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) / g.seconds / 1e12);
    out += buf;
  }
  auto rows = [&](const char* title, const std::vector<BytesTime>& v, double factor, const char* unit) {
    if (v.empty()) return;
    std::snprintf(buf, sizeof buf, "\n%-26s %-14s %s\n", title, "time_us", unit);
    out += buf;
    for (const auto& p : v) {
      std::snprintf(buf, sizeof buf, "%-26.0f %-14.2f %.1f\n", p.bytes, p.seconds * 1e6, factor * p.bytes / p.seconds / 1e9);
      out += buf;
    }
  };
  rows("triad bytes moved", m.triad, 1, "GB/s");
  rows("device copy bytes moved", m.device_copy, 1, "GB/s");
  rows("h2d pinned bytes", m.h2d_pinned, 1, "GB/s");
  rows("d2h pinned bytes", m.d2h_pinned, 1, "GB/s");
  rows("h2d pageable bytes", m.h2d_pageable, 1, "GB/s");
  rows("d2h pageable bytes", m.d2h_pageable, 1, "GB/s");
  const double n = m.gpus;
  rows("all_reduce bytes", m.all_reduce, n > 1 ? 2 * (n - 1) / n : 1, "busbw GB/s");
  rows("all_gather bytes", m.all_gather, n > 1 ? (n - 1) / n : 1, "busbw GB/s");
  rows("reduce_scatter bytes", m.reduce_scatter, n > 1 ? (n - 1) / n : 1, "busbw GB/s");
  rows("all_to_all bytes", m.all_to_all, n > 1 ? (n - 1) / n : 1, "busbw GB/s");
  rows("send_recv bytes", m.send_recv, 1, "GB/s");
  if (m.gpus >= 2) {
    std::snprintf(buf, sizeof buf, "\n8-byte all-reduce over %d GPUs: %.2f us\n", m.gpus, m.small_all_reduce * 1e6);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "\nkernel launch gap %.2f us, copy launch gap %.2f us\n", m.kernel_launch_us,
                m.copy_launch_us);
  out += buf;
  for (const auto& note : m.notes) out += "not measured: " + note + "\n";
  return out;
}

std::string cluster_for_device(const std::string& device_name, Bytes memory) {
  std::string s = device_name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](const char* x) { return s.find(x) != std::string::npos; };
  if (has("h200")) return "1xh200";
  if (has("h100")) return "1xh100-sxm";
  if (has("b200")) return "1xb200";
  if (has("a100")) return memory > (Bytes{60} << 30) ? "1xa100-80g" : "1xa100-40g";
  if (has("v100")) return "1xv100-32g";
  return "";
}

std::string default_calibration_cache_path() { return calib::cache_path("cuda-calibration.json"); }

}  // namespace strata::backend::cuda
