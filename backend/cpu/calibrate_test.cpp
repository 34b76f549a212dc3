#include "backend/cpu/calibrate.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <string>

#include "costmodel/calibration.hpp"
#include "costmodel/model_io.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

// Synthetic measurements on the cpu-local preset (fp32 0.085 TFLOPS, 10 GB/s
// memory, PCIe and intra-node links): every figure chosen so the expected
// efficiency is known in closed form.
CpuMeasurements synthetic() {
  CpuMeasurements m;
  m.machine = "test machine";
  m.ranks = 4;
  // 2n^3 FLOPs at 0.0425 TFLOPS (half the peak), 0.0595 (0.7 of it), and a
  // point above the peak (1.2x) that must be clamped.
  auto at = [](double n, double tflops) { return SizeTime{n, 2 * n * n * n / (tflops * 1e12)}; };
  m.gemm = {at(64, 0.0425), at(128, 0.0595), at(256, 0.102)};
  // memcpy of S bytes moves 2S: 2S / t = 5 GB/s is half of 10 GB/s; the
  // small size runs at 3x the peak (a cache), clamped.
  m.memory = {{4096, 2 * 4096 / 30e9}, {1 << 20, 2.0 * (1 << 20) / 5e9}};
  m.copy = {{1 << 20, (1 << 20) / 4e9}};
  // All-reduce of one float: 10 us over 2 threads, 22 us over 4:
  // beta = (22 - 10) / (2 (4 - 2)) = 3 us, alpha = 10 - 2 beta = 4 us.
  m.small_all_reduce_2 = 10e-6;
  m.small_all_reduce_n = 22e-6;
  // A 1 MiB all-reduce over 4: alpha + 6 beta = 22 us of latency plus
  // 2(3/4) S / busbw with busbw 5 GB/s.
  const double S = 1 << 20;
  m.all_reduce = {{S, 22e-6 + 1.5 * S / 5e9}};
  m.all_gather = {{S, 4e-6 + 3 * 3e-6 + 0.75 * S / 5e9}};
  m.reduce_scatter = m.all_gather;
  m.send_recv = {{S, 7e-6 + S / 2.5e9}};
  m.kernel_us = 1.5;
  m.step_us = 80;
  return m;
}

TEST_CASE("cpu/calibrate: the calibration JSON reads back with the measured fractions of cpu-local's peaks") {
  // The file's peaks are the cluster's, so the reader's fractions are the
  // measured rate over the cpu-local spec; a point above a peak is clamped
  // below 1 (the reader refuses more), with the clamp named in `source`.
  const auto cluster = cost::cluster_preset("cpu-local");
  const std::string text = calibration_json(synthetic(), cluster, "2026-11-30");
  const auto cal = cost::parse_calibration_text(text, "test", cost::ideal_calibration());
  CHECK(cal.backend == "cpu");
  CHECK(cal.date == "2026-11-30");
  CHECK(cal.machine == "test machine");
  const auto& g = cal.gemm_curve(cost::GemmDtype::FP32);
  REQUIRE(g.size() == 3);
  CHECK(g.at(2.0 * 64 * 64 * 64) == doctest::Approx(0.5).epsilon(1e-4));
  CHECK(g.at(2.0 * 128 * 128 * 128) == doctest::Approx(0.7).epsilon(1e-4));
  CHECK(g.at(2.0 * 256 * 256 * 256) == doctest::Approx(0.999).epsilon(1e-4));
  // Every dtype computes in fp32: bf16 gets the same curve (its peak is the same).
  CHECK(cal.gemm_curve(cost::GemmDtype::BF16).at(2.0 * 64 * 64 * 64) == doctest::Approx(0.5).epsilon(1e-4));
  CHECK(cal.memory.at(2.0 * (1 << 20)) == doctest::Approx(0.5).epsilon(1e-4));
  CHECK(cal.memory.at(2.0 * 4096) == doctest::Approx(0.999).epsilon(1e-4));
  CHECK(cal.copy_curve(cost::CopyKind::D2H, true).at(1 << 20) == doctest::Approx(0.4).epsilon(1e-4));
  CHECK(cal.copy_curve(cost::CopyKind::H2D, false).at(1 << 20) == doctest::Approx(0.4).epsilon(1e-4));
  const auto& s = cal.scope(cost::LinkScope::IntraNode);
  CHECK(s.latency_us == doctest::Approx(4.0).epsilon(1e-4));
  CHECK(s.step_latency_us == doctest::Approx(3.0).epsilon(1e-4));
  CHECK(s.group == 4);
  CHECK(cal.busbw_curve(cost::LinkScope::IntraNode, cost::CollectiveOp::AllReduce).at(1 << 20) ==
        doctest::Approx(0.5).epsilon(1e-3));
  CHECK(cal.busbw_curve(cost::LinkScope::IntraNode, cost::CollectiveOp::AllGather).at(1 << 20) ==
        doctest::Approx(0.5).epsilon(1e-3));
  // send/recv: S / (t − α − β) = 2.5 GB/s of 10.
  CHECK(cal.busbw_curve(cost::LinkScope::IntraNode, cost::CollectiveOp::SendRecv).at(1 << 20) ==
        doctest::Approx(0.25).epsilon(1e-3));
  CHECK(cal.overheads.kernel_launch_us == doctest::Approx(1.5));
  CHECK(cal.overheads.step_us == doctest::Approx(80));
  CHECK(cal.overheads.microbatch_us == 0);
  CHECK(text.find("clamped") != std::string::npos);
}

TEST_CASE("cpu/calibrate: a smaller size slower than the reader's rule allows is raised, not refused") {
  // 0.05 of the peak at 16^3 then 0.9 at 256^3 rises faster than
  // e1 <= e0 (1 + ln(s1/s0)) allows; the writer raises the small point so the
  // file reads (time still grows with size) instead of failing.
  auto m = synthetic();
  auto at = [](double n, double frac) { return SizeTime{n, 2 * n * n * n / (frac * 0.085e12)}; };
  m.gemm = {at(16, 0.05), at(256, 0.9)};
  const auto cluster = cost::cluster_preset("cpu-local");
  const std::string text = calibration_json(m, cluster, "2026-11-30");
  const auto cal = cost::parse_calibration_text(text, "test", cost::ideal_calibration());
  const auto& g = cal.gemm_curve(cost::GemmDtype::FP32);
  const double s0 = 2.0 * 16 * 16 * 16, s1 = 2.0 * 256 * 256 * 256;
  CHECK(g.at(s1) == doctest::Approx(0.9).epsilon(1e-4));
  CHECK(g.at(s0) > 0.05);
  CHECK(g.at(s0) * (1 + std::log(s1 / s0)) >= g.at(s1) * (1 - 1e-6));
}

TEST_CASE("cpu/calibrate: with the backend's element-wise kernels measured, they set the memory curve") {
  // GeLU and layer norm over S input bytes move 2S each and the residual
  // add 3S, 7S; at 7S / t = 2 GB/s the curve reads 0.2 of cpu-local's
  // 10 GB/s at 2S, and memcpy (which would say 0.5) is not used. Without
  // Adam measured the file has no optimizer curve (the memory curve prices
  // the update).
  auto m = synthetic();
  const double S = 1 << 20;
  m.elementwise = {{S, 7 * S / 2e9}};
  const auto cluster = cost::cluster_preset("cpu-local");
  const auto cal = cost::parse_calibration_text(calibration_json(m, cluster, "2026-11-30"), "test",
                                                cost::ideal_calibration());
  REQUIRE(cal.memory.size() == 1);
  CHECK(cal.memory.at(2 * S) == doctest::Approx(0.2).epsilon(1e-4));
  CHECK(cal.optimizer.empty());
}

TEST_CASE("cpu/calibrate: the Adam update measured apart sets the optimizer curve") {
  // Adam over S/4 parameters moves 28 bytes each, 7S; at 7S / t = 6 GB/s
  // the optimizer curve reads 0.6 of cpu-local's 10 GB/s at 7S, while the
  // layers' element-wise kernels keep their own 0.2.
  auto m = synthetic();
  const double S = 1 << 20;
  m.elementwise = {{S, 7 * S / 2e9}};
  m.optimizer = {{S, 7 * S / 6e9}};
  const auto cluster = cost::cluster_preset("cpu-local");
  const std::string text = calibration_json(m, cluster, "2026-11-30");
  const auto cal = cost::parse_calibration_text(text, "test", cost::ideal_calibration());
  REQUIRE(cal.optimizer.size() == 1);
  CHECK(cal.optimizer.at(7 * S) == doctest::Approx(0.6).epsilon(1e-4));
  CHECK(cal.memory.at(2 * S) == doctest::Approx(0.2).epsilon(1e-4));
  CHECK(text.find("Adam update alone") != std::string::npos);
}

TEST_CASE("cpu/calibrate: a cluster without the peaks the file is written against is refused") {
  auto cluster = cost::cluster_preset("cpu-local");
  cluster.node.intra_node_GBps = 0;
  CHECK_THROWS_AS(calibration_json(synthetic(), cluster, "2026-11-30"), Error);
}

TEST_CASE("cpu/calibrate: a stop requested before the first benchmark measures nothing and writes no calibration") {
  // The flag is checked before each benchmark, so with it already set none
  // runs: every list is empty, the count of registered benchmarks is kept,
  // and calibration_json refuses (a curve would be missing).
  const std::atomic<bool> stop{true};
  if (!calibrate_available()) {  // a build without Google Benchmark refuses
    CHECK_THROWS_AS(measure_cpu({.quick = true, .ranks = 2, .stop = &stop}), Error);
    return;
  }
  const auto m = measure_cpu({.quick = true, .ranks = 2, .stop = &stop});
  CHECK(m.stopped);
  CHECK(m.benchmarks_run == 0);
  CHECK(m.benchmarks > 0);
  CHECK(m.gemm.empty());
  CHECK(m.all_reduce.empty());
  CHECK(m.kernel_us == 0);
  CHECK_THROWS_AS(calibration_json(m, cost::cluster_preset("cpu-local"), "2026-12-03"), Error);
  CHECK(render_measurements(m).find("stopped: 0 of " + std::to_string(m.benchmarks)) != std::string::npos);
}

TEST_CASE("cpu/calibrate: synthetic measurements marked stopped are refused with the counts named") {
  auto m = synthetic();
  m.stopped = true;
  m.benchmarks = 40;
  m.benchmarks_run = 12;
  try {
    (void)calibration_json(m, cost::cluster_preset("cpu-local"), "2026-12-03");
    FAIL("a stopped measurement made a calibration");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("12 of 40") != std::string::npos);
  }
}

}  // namespace
}  // namespace strata::backend::cpu
