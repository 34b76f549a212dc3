// The CUDA calibration file from measurements with known answers (the
// "host" suite: no GPU needed), and the microbenchmarks on a GPU.
#include "backend/cuda/calibrate.hpp"

#include <doctest/doctest.h>

#include <string>

#include "costmodel/calibration.hpp"
#include "costmodel/model_io.hpp"
#include "costmodel/time_model.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {
namespace {

TEST_SUITE("host") {
  TEST_CASE("cuda/calibrate: the calibration JSON reads back with the measured fractions of the H200's peaks") {
    const auto cluster = cost::cluster_preset("1xh200");
    CudaMeasurements m;
    m.machine = "test";
    m.gpus = 8;
    // fp32: 4096^3 at half of 67 TFLOPS; a second shape of equal FLOPs at 0.7
    // and a third at 0.4: their median, 0.5, is the point.
    const double f = 2.0 * 4096.0 * 4096.0 * 4096.0;
    m.gemm.push_back({cost::GemmDtype::FP32, 4096, 4096, 4096, f / (0.5 * 67e12)});
    m.gemm.push_back({cost::GemmDtype::FP32, 8192, 4096, 2048, f / (0.7 * 67e12)});
    m.gemm.push_back({cost::GemmDtype::FP32, 2048, 4096, 8192, f / (0.4 * 67e12)});
    // bf16: 8192^3 at 0.75 of 989.4.
    const double g = 2.0 * 8192.0 * 8192.0 * 8192.0;
    m.gemm.push_back({cost::GemmDtype::BF16, 8192, 8192, 8192, g / (0.75 * 989.4e12)});
    // Triad: 3 GiB moved at 3.6 TB/s = 0.75 of 4800 GB/s.
    m.triad.push_back({3.0 * (1 << 30), 3.0 * (1 << 30) / 3600e9});
    m.h2d_pinned.push_back({1 << 28, (1 << 28) / 51.2e9});  // 0.8 of 64
    m.d2h_pageable.push_back({1 << 28, (1 << 28) / 16e9});  // 0.25
    // All-reduce of 1 GiB over 8 GPUs: busbw 2·7/8·S / (t − α) = 360 GB/s = 0.8 of 450.
    m.small_all_reduce = 20e-6;
    const double S = 1 << 30;
    m.all_reduce.push_back({S, 2.0 * 7 / 8 * S / 360e9 + 20e-6});
    m.all_gather.push_back({S, 7.0 / 8 * S / 360e9 + 20e-6});
    m.kernel_launch_us = 1.5;
    m.copy_launch_us = 3;
    const std::string text = calibration_json(m, cluster, "2026-12-01");
    const auto c = cost::parse_calibration_text(text, "test", cost::ideal_calibration());
    CHECK(c.backend == "cuda");
    // Read as full waves: every shape here runs its last wave of 256 x 128
    // tiles on 132 SMs 0.97 full (8192^3: 2,048 tiles in 16 waves for
    // 15.5; 4096^3 512 in 4 for 3.88; 8192 x 4096 and 2048 x 4096 alike),
    // so the points are the measured rates x 1.03125, and the time model,
    // quantising the shape again, predicts the measured time.
    const double q = 16.0 * 132 * 256 * 128 / (8192.0 * 8192);
    CHECK(q == doctest::Approx(1.03125));
    CHECK(c.gemm_curve(cost::GemmDtype::FP32).at(f) == doctest::Approx(0.5 * q).epsilon(1e-4));
    CHECK(c.gemm_curve(cost::GemmDtype::BF16).at(g) == doctest::Approx(0.75 * q).epsilon(1e-4));
    cost::Op square;
    square.kind = cost::OpKind::Linear;
    square.matrices = 1;
    square.rows = square.cols = 8192;
    square.fwd_flops = g;
    CHECK(to_seconds(cost::op_time(cluster.gpu, c, cost::Precision::BF16, square, false)) ==
          doctest::Approx(g / (0.75 * 989.4e12) + 1.5e-6).epsilon(1e-4));
    CHECK(c.gemm_curve(cost::GemmDtype::TF32).empty());  // not measured: not written
    CHECK(c.memory.at(3.0 * (1 << 30)) == doctest::Approx(0.75).epsilon(1e-4));
    CHECK(c.copy_curve(cost::CopyKind::H2D, true).at(1 << 28) == doctest::Approx(0.8).epsilon(1e-4));
    CHECK(c.copy_curve(cost::CopyKind::D2H, false).at(1 << 28) == doctest::Approx(0.25).epsilon(1e-4));
    const auto& intra = c.scope(cost::LinkScope::IntraNode);
    CHECK(intra.latency_us == doctest::Approx(20));
    CHECK(intra.group == 8);
    CHECK(c.busbw_curve(cost::LinkScope::IntraNode, cost::CollectiveOp::AllReduce).at(S) ==
          doctest::Approx(0.8).epsilon(1e-4));
    CHECK(c.busbw_curve(cost::LinkScope::IntraNode, cost::CollectiveOp::AllGather).at(S) ==
          doctest::Approx(0.8).epsilon(1e-4));
    CHECK(c.overheads.kernel_launch_us == doctest::Approx(1.5));
    CHECK(c.overheads.copy_launch_us == doctest::Approx(3));
    CHECK(c.overheads.step_us == 0);
  }

  TEST_CASE("cuda/calibrate: one GPU writes no collective table and says so") {
    CudaMeasurements m;
    m.machine = "test";
    m.gpus = 1;
    m.notes.push_back("one GPU visible: no collective table");
    m.triad.push_back({1e9, 1e9 / 4000e9});
    const std::string text = calibration_json(m, cost::cluster_preset("1xh200"), "2026-12-01");
    CHECK(text.find("collectives") == std::string::npos);
    CHECK(text.find("one GPU visible") != std::string::npos);
  }

  TEST_CASE("cuda/calibrate: device names map to their single-GPU cluster presets") {
    CHECK(cluster_for_device("NVIDIA H200", Bytes{141} << 30) == "1xh200");
    CHECK(cluster_for_device("NVIDIA H100 80GB HBM3", Bytes{80} << 30) == "1xh100-sxm");
    CHECK(cluster_for_device("NVIDIA A100-SXM4-40GB", Bytes{40} << 30) == "1xa100-40g");
    CHECK(cluster_for_device("NVIDIA A100-SXM4-80GB", Bytes{80} << 30) == "1xa100-80g");
    CHECK(cluster_for_device("Some Other GPU", Bytes{16} << 30).empty());
    for (const char* n : {"1xh200", "1xh100-sxm", "1xa100-40g", "1xa100-80g", "1xv100-32g", "1xb200"})
      CHECK_NOTHROW(cost::cluster_preset(n));
  }
}

TEST_CASE("cuda/calibrate: the microbenchmarks measure plausible rates on this GPU") {
  // Loose floors any datacenter GPU of the last decade clears; the figures
  // themselves are for the calibration file, not for a test.
  Microbench mb(0);
  const double t = mb.gemm(cost::GemmDtype::FP32, 2048, 2048, 2048, 3);
  CHECK(2.0 * 2048 * 2048 * 2048 / t > 5e12);
  CHECK(mb.gemm(cost::GemmDtype::BF16, 2048, 2048, 2048, 3) < t);
  CHECK(3.0 * (256 << 20) / mb.triad(Bytes{256} << 20, 3) > 300e9);
  CHECK((64 << 20) / mb.host_copy(Bytes{64} << 20, true, true, 3) > 3e9);
  const double launch = mb.kernel_launch_us(500);
  CHECK(launch > 0);
  CHECK(launch < 50);
  if (mb.gpus() >= 2) CHECK(mb.collective(cost::CollectiveOp::AllReduce, Bytes{16} << 20, 3) > 0);
  else CHECK_THROWS_AS(mb.collective(cost::CollectiveOp::AllReduce, Bytes{16} << 20, 3), Error);
}

}  // namespace
}  // namespace strata::backend::cuda
