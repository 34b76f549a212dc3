#include "costmodel/time_model.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "costmodel/model_io.hpp"

namespace strata::cost {
namespace {

constexpr double kUs = 1e-6;

GpuSpec test_gpu() {
  GpuSpec g;
  g.name = "test-gpu";
  g.hbm_GBps = 2000;
  g.tflops.bf16 = 300;
  g.tflops.fp32 = 20;
  return g;
}

NodeSpec test_node() {
  NodeSpec n;
  n.name = "test-node";
  n.gpus_per_node = 8;
  n.intra_node_GBps = 300;
  n.inter_node_GBps_per_gpu = 25;
  n.pcie_GBps = 32;
  n.nvme_GBps = 10;
  return n;
}

// Constant efficiencies: GEMM 0.8, memory 0.9, intra busbw 0.5 (150 GB/s),
// inter busbw 0.8 (20 GB/s); α 10 µs + 0.5 µs per step inside a node, 20 µs
// + 2 µs per step across nodes; no launch overheads unless a test sets them.
Calibration test_cal() {
  Calibration c = ideal_calibration();
  c.gemm[static_cast<std::size_t>(GemmDtype::BF16)] = EfficiencyCurve::constant(0.8);
  c.memory = EfficiencyCurve::constant(0.9);
  for (auto& curve : c.collective[0].busbw) curve = EfficiencyCurve::constant(0.5);
  for (auto& curve : c.collective[1].busbw) curve = EfficiencyCurve::constant(0.8);
  c.collective[0].latency_us = 10;
  c.collective[0].step_latency_us = 0.5;
  c.collective[1].latency_us = 20;
  c.collective[1].step_latency_us = 2;
  return c;
}

// A ring's time by its formula, for the tests below.
Time ring(double alpha_us, double steps, double step_us, double factor, double bytes,
          double busbw_GBps) {
  return seconds_to_time((alpha_us + steps * step_us) * kUs + factor * bytes / (busbw_GBps * 1e9));
}

TEST_CASE("GEMM at the efficiency plateau takes FLOPs / (peak x eff)") {
  // 3e12 FLOPs at 300 TFLOP/s x 0.8 = 12.5 ms; its 1 MB of traffic is far
  // below the compute time; no launch overhead in this calibration.
  const Time t = compute_time(test_gpu(), test_cal(), Precision::BF16, 3e12, 1'000'000);
  CHECK(t == 12'500'000);
  // With a 2 µs launch and 4 kernels: + 8 µs.
  Calibration c = test_cal();
  c.overheads.kernel_launch_us = 2;
  CHECK(compute_time(test_gpu(), c, Precision::BF16, 3e12, 1'000'000, {0, 4}) == 12'508'000);
  CHECK(gemm_flops(2, 3, 4) == 48.0);
}

TEST_CASE("memory-bound op takes bytes / (HBM x eff)") {
  // 1.8e9 bytes at 2000 GB/s x 0.9 = 1 ms, above 1e9 FLOPs' 4.2 µs; plus
  // three 2 µs launches: 1.006 ms. No FLOPs at all: the same.
  Calibration c = test_cal();
  c.overheads.kernel_launch_us = 2;
  CHECK(compute_time(test_gpu(), c, Precision::BF16, 1e9, 1'800'000'000, {0, 3}) == 1'006'000);
  CHECK(compute_time(test_gpu(), c, Precision::BF16, 0, 1'800'000'000, {0, 3}) == 1'006'000);
  // Nothing to do but launch.
  CHECK(compute_time(test_gpu(), c, Precision::BF16, 0, 0) == 2'000);
}

TEST_CASE("the optimizer's update reads its own memory curve, the element-wise one where it has none") {
  // 1.8e9 bytes: at the memory curve's 0.9 of 2000 GB/s 1 ms; with an
  // optimizer curve of 0.6, 1.5 ms for the optimizer's kernels only.
  Calibration c = test_cal();
  KernelShape opt;
  opt.memory = MemoryKernel::Optimizer;
  CHECK(compute_time(test_gpu(), c, Precision::BF16, 0, 1'800'000'000, opt) == 1'000'000);
  c.optimizer = EfficiencyCurve::constant(0.6);
  CHECK(compute_time(test_gpu(), c, Precision::BF16, 0, 1'800'000'000, opt) == 1'500'000);
  CHECK(compute_time(test_gpu(), c, Precision::BF16, 0, 1'800'000'000) == 1'000'000);
}

TEST_CASE("GEMM efficiency interpolates linearly in log FLOPs and clamps outside") {
  // Curve (1e9, 0.2) - (1e11, 0.6): a 1e10-FLOP GEMM runs at 0.4 of 300
  // TFLOP/s (83,333 ns); 1e8 clamps to 0.2 (1,667 ns); 1e13 to 0.6.
  Calibration c = test_cal();
  c.gemm[static_cast<std::size_t>(GemmDtype::BF16)] = EfficiencyCurve({{1e9, 0.2}, {1e11, 0.6}});
  const GpuSpec g = test_gpu();
  CHECK(compute_time(g, c, Precision::BF16, 1e10, 0) == 83'333);
  CHECK(compute_time(g, c, Precision::BF16, 1e8, 0) == 1'667);
  CHECK(compute_time(g, c, Precision::BF16, 1e13, 0) == 55'555'556);
  // 1e12 FLOPs in 100 GEMMs of 1e10 each: the curve is read at 1e10 (0.4).
  CHECK(compute_time(g, c, Precision::BF16, 1e12, 0, {0, 100}) == 8'333'333);
  CHECK(compute_time(g, c, Precision::BF16, 1e12, 0, {1e10, 100}) == 8'333'333);
}

TEST_CASE("op time: a linear op's backward is two GEMMs of the forward's size per matrix") {
  // Linear, 2 matrices, 2e10 forward FLOPs: forward 2 GEMMs of 1e10 at 0.4
  // (166,667 ns) + 2 launches of 1 µs; backward 4e10 in 4 GEMMs of 1e10:
  // 333,333 ns + 4 µs.
  Calibration c = test_cal();
  c.gemm[static_cast<std::size_t>(GemmDtype::BF16)] = EfficiencyCurve({{1e9, 0.2}, {1e11, 0.6}});
  c.overheads.kernel_launch_us = 1;
  const GpuSpec g = test_gpu();
  Op lin;
  lin.kind = OpKind::Linear;
  lin.matrices = 2;
  lin.rows = lin.cols = 1000;
  lin.fwd_flops = 2e10;
  lin.bwd_flops = 4e10;
  CHECK(op_kernels(lin, false).kernels == 2);
  CHECK(op_kernels(lin, true).kernels == 4);
  CHECK(op_kernels(lin, true).gemm_flops == doctest::Approx(1e10));
  CHECK(op_time(g, c, Precision::BF16, lin, false) == 166'667 + 2'000);
  CHECK(op_time(g, c, Precision::BF16, lin, true) == 333'333 + 4'000);
  // Flash attention with 1e10 forward FLOPs (0.4): one kernel forward
  // (83,333 ns + 1 µs), two of 1e10 backward (166,667 ns + 2 µs).
  Op attn;
  attn.kind = OpKind::Attention;
  attn.fwd_flops = 1e10;
  attn.bwd_flops = 2e10;
  CHECK(op_time(g, c, Precision::BF16, attn, false) == 83'333 + 1'000);
  CHECK(op_time(g, c, Precision::BF16, attn, true) == 166'667 + 2'000);
  // At attention_fraction 0.5 of the GEMM efficiency its matrix products
  // take twice as long; linear layers are unaffected.
  c.attention_fraction = 0.5;
  CHECK(op_time(g, c, Precision::BF16, attn, false) == 166'667 + 1'000);
  CHECK(op_time(g, c, Precision::BF16, lin, false) == 166'667 + 2'000);
  // cuDNN's fused attention at its own fraction (0.8 here: 1.6 times the
  // 0.5 kernel's speed), where the calibration gives one.
  attn.cudnn = true;
  CHECK(op_time(g, c, Precision::BF16, attn, false) == 166'667 + 1'000);  // none given: as flash
  c.cudnn_attention_fraction = 0.8;
  CHECK(op_time(g, c, Precision::BF16, attn, false) == 104'167 + 1'000);
  attn.cudnn = false;
  c.attention_fraction = 1.0;
  // A norm moves 1.8e9 bytes each way: 1 ms + one launch.
  Op norm;
  norm.kind = OpKind::Norm;
  norm.fwd_bytes = norm.bwd_bytes = 1'800'000'000;
  CHECK(op_time(g, c, Precision::BF16, norm, false) == 1'001'000);
  CHECK(op_time(g, c, Precision::BF16, norm, true) == 1'001'000);
}

// The test GPU with 100 SMs and 256 x 128 tiles: a wave is 100 tiles.
GpuSpec tiled_gpu() {
  GpuSpec g = test_gpu();
  g.sms = 100;
  g.gemm_tile = {256, 128};
  return g;
}

TEST_CASE("GEMM by shape: whole waves of tiles cost what the FLOPs say; a barely begun wave costs a whole one") {
  const GpuSpec g = tiled_gpu();
  const Calibration c = test_cal();  // GEMM 0.8, memory 0.9
  // 2560 x 1280: 10 x 10 tiles = one full wave (either way round: 20 x 5).
  CHECK(gemm_quantisation(g, c, GemmDtype::BF16, 2560, 1280, 4096) == doctest::Approx(1.0));
  // Fewer tiles than SMs (256 x 6400: 1 x 50 tiles, or 2 x 25): the curve's
  // small-size regime, no correction.
  CHECK(gemm_quantisation(g, c, GemmDtype::BF16, 256, 6400, 4096) == doctest::Approx(1.0));
  // 2560 x 1408: 10 x 11 = 110 tiles (or 20 x 6 = 120 of 128 x 256): two
  // waves where 2560·1408 / (100 · 256·128) = 1.1 would do: 20/11. With
  // k = 256 the GEMM takes 2·2560·1408·256 / (300e12 · 0.8) = 7.69 µs, and
  // splitting k in two (220 tiles: 3 waves, 15/11) would add the fp32
  // partials' round trip, (2·2·4 + 2)·2560·1408 bytes at 1,800 GB/s = 36 µs:
  // no split.
  CHECK(gemm_quantisation(g, c, GemmDtype::BF16, 2560, 1408, 256) == doctest::Approx(20.0 / 11));
  // With k = 65,536 (1,968.5 µs) splitting pays: ten ways make 1,100 tiles,
  // 11 full waves (q = 1), plus (2·10·4 + 2)·2560·1408 bytes = 295.6 MB at
  // 1,800 GB/s; no other split does better (nine: 10 waves for 9.9, 1.0101
  // + 148.2 µs; eleven: 13 for 12.1).
  const double ideal = 2.0 * 2560 * 1408 * 65536 / (300e12 * 0.8);
  const double reduce = (2.0 * 10 * 4 + 2) * 2560 * 1408 / (2000e9 * 0.9);
  CHECK(gemm_quantisation(g, c, GemmDtype::BF16, 2560, 1408, 65536) == doctest::Approx(1.0 + reduce / ideal));
  CHECK(gemm_quantisation(g, c, GemmDtype::BF16, 2560, 1408, 65536) < 1.09);
  // A partial edge tile runs whole: 2600 x 1280 is 11 x 10 tiles (the
  // 11th row of tiles 40 of 256 full), 2 waves for 2600·1280/(100·32768).
  CHECK(gemm_quantisation(g, c, GemmDtype::BF16, 2600, 1280, 256) ==
        doctest::Approx(2.0 * 100 * 32768 / (2600.0 * 1280)));
  // A GPU without a tile (or without SMs) prices by FLOPs alone.
  CHECK(gemm_quantisation(test_gpu(), c, GemmDtype::BF16, 2560, 1408, 256) == 1.0);

  // A Linear op multiplies the forward by its GEMM's factor and the
  // backward by the mean of its input gradient's (m x k: 2560 x 256, 20
  // tiles) and weight gradient's (k x n: 256 x 1408, 11 tiles), here both
  // fewer tiles than SMs: 1.
  Op lin;
  lin.kind = OpKind::Linear;
  lin.matrices = 1;
  lin.rows = 256;    // k
  lin.cols = 1408;   // n
  lin.fwd_flops = 2.0 * 2560 * 1408 * 256;  // m = 2560
  lin.bwd_flops = 2 * lin.fwd_flops;
  const double fwd = 20.0 / 11;
  const double bwd = 1.0;
  CHECK(op_quantisation(g, c, GemmDtype::BF16, lin, false) == doctest::Approx(fwd));
  CHECK(op_quantisation(g, c, GemmDtype::BF16, lin, true) == doctest::Approx(bwd));
  CHECK(op_time(g, c, Precision::BF16, lin, false) ==
        seconds_to_time(fwd * lin.fwd_flops / (300e12 * 0.8)));
  // Products run one by one (wq, wk, wv): each its share of the columns,
  // weighted by its FLOPs. Half of 2816 columns is the 1408 above, twice.
  lin.cols = 2816;
  lin.fwd_flops *= 2;
  lin.products = {0.5, 0.5, 0.0};
  CHECK(op_quantisation(g, c, GemmDtype::BF16, lin, false) == doctest::Approx(fwd));
  lin.products = {};  // one GEMM of 2560 x 2816: 10 x 22 = 220 tiles, 3 waves for 2.2
  CHECK(op_quantisation(g, c, GemmDtype::BF16, lin, false) == doctest::Approx(3.0 / 2.2));
  // Attention, norms and the rest are not cuBLAS GEMMs.
  Op attn;
  attn.kind = OpKind::Attention;
  attn.fwd_flops = 1e12;
  CHECK(op_quantisation(g, c, GemmDtype::BF16, attn, false) == 1.0);
}

TEST_CASE("GEMM by shape on an A100: GPT-3 175B's QKV at tp 8, one sequence of 2048, runs 3 waves for 2.67") {
  // m 2048, n 3·12288/8 = 4608, k 12288: 8 x 36 = 288 tiles of 256 x 128
  // on 108 SMs, 2.67 waves' work in 3 (9/8); a split of k in two or three
  // fills 6 or 8 waves but its fp32 partials (2048 x 4608 of them, 2 or 3
  // times, written and read) cost more than the third of a wave it saves.
  const GpuSpec a100 = gpu_preset("a100-80g");
  const Calibration cal = default_calibration(a100);
  CHECK(a100.sms == 108);
  CHECK(a100.gemm_tile.m == 256);
  CHECK(gemm_quantisation(a100, cal, GemmDtype::BF16, 2048, 4608, 12288) == doctest::Approx(9.0 / 8));
  // 8192^3, the plateau's own shape: 2048 tiles, 19 waves for 18.96.
  CHECK(gemm_quantisation(a100, cal, GemmDtype::BF16, 8192, 8192, 8192) == doctest::Approx(19 * 108 / 2048.0));
}

TEST_CASE("compute time rejects a dtype the GPU lacks and negative counts") {
  // The test GPU has no fp16 peak; a memory-only task needs no peak.
  CHECK_THROWS_AS(compute_time(test_gpu(), test_cal(), Precision::FP16, 1e9, 0), Error);
  CHECK(compute_time(test_gpu(), test_cal(), Precision::FP16, 0, 1000) >= 0);
  CHECK_THROWS_AS(compute_time(test_gpu(), test_cal(), Precision::BF16, -1, 0), Error);
  CHECK_THROWS_AS(compute_time(test_gpu(), test_cal(), Precision::BF16, 0, -1), Error);
}

TEST_CASE("ring all-reduce takes alpha + 2(n-1)/n B / busbw") {
  // 8 GPUs in one node, 1 GB, busbw 150 GB/s, α = 10 µs + 14 steps x 0.5 µs:
  // 17 µs + 1.75e9 / 150e9 s.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  const Time t = collective_time(CollectiveOp::AllReduce, 1'000'000'000, 8, 8, n, c,
                                 CollectiveAlgorithm::Ring);
  CHECK(t == ring(10, 14, 0.5, 2.0 * 7 / 8, 1e9, 150));
  // Two GPUs: factor 1, 2 steps.
  CHECK(collective_time(CollectiveOp::AllReduce, 1'000'000'000, 2, 2, n, c,
                        CollectiveAlgorithm::Ring) == ring(10, 2, 0.5, 1.0, 1e9, 150));
}

TEST_CASE("ring all-gather and reduce-scatter take alpha + (n-1)/n B / busbw") {
  // 8 GPUs, 1 GB gathered (or scattered): 10 µs + 7 x 0.5 µs + 7/8 · 1e9 / 150e9 s.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  const Time want = ring(10, 7, 0.5, 7.0 / 8, 1e9, 150);
  CHECK(collective_time(CollectiveOp::AllGather, 1'000'000'000, 8, 8, n, c) == want);
  CHECK(collective_time(CollectiveOp::ReduceScatter, 1'000'000'000, 8, 8, n, c) == want);
}

TEST_CASE("a collective's cost says its latency terms and whether its bandwidth term crosses nodes") {
  // The ring all-gather above: latency 10 µs + 7 x 0.5 µs, the rest 7/8 GB at
  // 150 GB/s, inside the node. Over two nodes of 8 (inter-node α 20 µs, step
  // 2 µs, 15 steps): latency 50 µs, across nodes.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  const auto in = collective_cost(CollectiveOp::AllGather, 1'000'000'000, 8, 8, n, c);
  CHECK(in.latency == seconds_to_time((10 + 7 * 0.5) * 1e-6));
  CHECK(in.time == ring(10, 7, 0.5, 7.0 / 8, 1e9, 150));
  CHECK(!in.spans);
  const auto across = collective_cost(CollectiveOp::AllGather, 1'000'000'000, 16, 8, n, c);
  CHECK(across.latency == seconds_to_time((20 + 15 * 2.0) * 1e-6));
  CHECK(across.time > across.latency);
  CHECK(across.spans);
  // Send/recv: α and one step.
  const auto send = collective_cost(CollectiveOp::SendRecv, 1'000'000, 2, 1, n, c);
  CHECK(send.latency == seconds_to_time((20 + 2.0) * 1e-6));
  CHECK(send.spans);
}

TEST_CASE("tree all-reduce: alpha + 2 log2(n) steps + 2 B / busbw; auto takes the faster") {
  // 8 GPUs: tree α = 10 + 6 x 0.5 = 13 µs, bandwidth 2 B / 150 GB/s. For
  // 1 KiB the tree's fewer steps win; for 1 GB the ring's 7/8 factor wins.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  CHECK(collective_time(CollectiveOp::AllReduce, 1'000'000'000, 8, 8, n, c,
                        CollectiveAlgorithm::Tree) == ring(10, 6, 0.5, 2.0, 1e9, 150));
  const auto small = collective_cost(CollectiveOp::AllReduce, 1024, 8, 8, n, c);
  CHECK(small.algorithm == CollectiveAlgorithm::Tree);
  CHECK(small.time == ring(10, 6, 0.5, 2.0, 1024, 150));
  const auto big = collective_cost(CollectiveOp::AllReduce, 1'000'000'000, 8, 8, n, c);
  CHECK(big.algorithm == CollectiveAlgorithm::Ring);
  // Tree does not apply to all-gather: priced as a ring.
  const auto ag = collective_cost(CollectiveOp::AllGather, 1'000'000'000, 8, 8, n, c,
                                  CollectiveAlgorithm::Tree);
  CHECK(ag.algorithm == CollectiveAlgorithm::Ring);
}

TEST_CASE("hierarchical all-reduce over 2 nodes x 8 GPUs is the sum of its three phases") {
  // Intra reduce-scatter of 1 GB over 8 (10 + 7x0.5 µs + 7/8 B/150e9),
  // inter all-reduce of B/8 over 2 nodes on 20 GB/s (20 + 2x2 µs + 1 · B/8 /
  // 20e9), intra all-gather (as the reduce-scatter).
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  const Bytes b = 1'000'000'000;
  const Time h = collective_time(CollectiveOp::AllReduce, b, 16, 8, n, c,
                                 CollectiveAlgorithm::Hierarchical);
  const Time rs = collective_time(CollectiveOp::ReduceScatter, b, 8, 8, n, c,
                                  CollectiveAlgorithm::Ring);
  const Time ar = collective_time(CollectiveOp::AllReduce, b / 8, 2, 1, n, c,
                                  CollectiveAlgorithm::Ring);
  const Time ag = collective_time(CollectiveOp::AllGather, b, 8, 8, n, c,
                                  CollectiveAlgorithm::Ring);
  CHECK(std::llabs(h - (rs + ar + ag)) <= 2);
  CHECK(rs == ring(10, 7, 0.5, 7.0 / 8, 1e9, 150));
  CHECK(ar == ring(20, 2, 2, 1.0, 1e9 / 8, 20));
  CHECK(ag == rs);
  // The flat ring over 16 spans nodes: α across nodes, 30 steps, bandwidth
  // min(150, 8 NICs x 20) = 150 GB/s.
  CHECK(collective_time(CollectiveOp::AllReduce, b, 16, 8, n, c, CollectiveAlgorithm::Ring) ==
        ring(20, 30, 2, 2.0 * 15 / 16, 1e9, 150));
  // One GPU per node: every byte crosses its own NIC (20 GB/s); hierarchical
  // does not apply and is priced as the ring.
  CHECK(collective_time(CollectiveOp::AllReduce, b, 4, 1, n, c, CollectiveAlgorithm::Ring) ==
        ring(20, 6, 2, 2.0 * 3 / 4, 1e9, 20));
  CHECK(collective_cost(CollectiveOp::AllReduce, b, 4, 1, n, c, CollectiveAlgorithm::Hierarchical)
            .algorithm == CollectiveAlgorithm::Ring);
  // Hierarchical all-gather and reduce-scatter: inter phase on B/8, intra on B.
  CHECK(std::llabs(collective_time(CollectiveOp::AllGather, b, 16, 8, n, c,
                                   CollectiveAlgorithm::Hierarchical) -
                   (ring(20, 1, 2, 0.5, 1e9 / 8, 20) + ag)) <= 2);
}

TEST_CASE("auto prices only the algorithms NCCL runs: never hierarchical phases") {
  // NCCL picks among ring and tree (all-reduce) by its cost model
  // (NCCL_ALGO: Tree, Ring, CollNet, NVLS; no hierarchical all-gather or
  // reduce-scatter). 1 MiB gathered over 16 GPUs on 2 nodes: hierarchical
  // phases would take 22 µs + 3 µs inter plus 13.5 µs + 6 µs intra, under
  // the flat ring's 20 + 15 x 2 µs + 6 µs; auto still prices the flat ring.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  const Bytes b = 1 << 20;
  for (CollectiveOp op : {CollectiveOp::AllGather, CollectiveOp::ReduceScatter}) {
    const std::string name(enum_name(op));
    CAPTURE(name);
    const CollectiveCost a = collective_cost(op, b, 16, 8, n, c);
    CHECK(a.algorithm != CollectiveAlgorithm::Hierarchical);
    CHECK(collective_time(op, b, 16, 8, n, c, CollectiveAlgorithm::Hierarchical) < a.time);
  }
  CHECK(collective_time(CollectiveOp::AllGather, b, 16, 8, n, c) ==
        collective_time(CollectiveOp::AllGather, b, 16, 8, n, c, CollectiveAlgorithm::Ring));
  CHECK(collective_cost(CollectiveOp::AllReduce, b, 16, 8, n, c).algorithm !=
        CollectiveAlgorithm::Hierarchical);
}

TEST_CASE("all-to-all: (n-1)/n of the buffer, the inter-node share on the NIC") {
  // 8 GPUs in a node: 10 + 7 x 0.5 µs + 7/8 B / 150e9. 16 over 2 nodes:
  // 20 + 15 x 2 µs + max(7/16 B / 150e9, 8/16 B / 20e9) — the NIC dominates.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  CHECK(collective_time(CollectiveOp::AllToAll, 1'000'000'000, 8, 8, n, c) ==
        ring(10, 7, 0.5, 7.0 / 8, 1e9, 150));
  CHECK(collective_time(CollectiveOp::AllToAll, 1'000'000'000, 16, 8, n, c) ==
        ring(20, 15, 2, 0.5, 1e9, 20));
}

TEST_CASE("send/recv: alpha + one step + B / bandwidth of its link") {
  // Same node: 10.5 µs + B / 150e9; across nodes: 22 µs + B / 20e9.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  CHECK(collective_time(CollectiveOp::SendRecv, 1'000'000, 2, 2, n, c) ==
        ring(10, 1, 0.5, 1.0, 1e6, 150));
  CHECK(collective_time(CollectiveOp::SendRecv, 1'000'000, 2, 1, n, c) ==
        ring(20, 1, 2, 1.0, 1e6, 20));
}

TEST_CASE("collectives of one rank or no bytes cost nothing; bad groups throw") {
  // Nothing to exchange: 0 ns. A group needs >= 1 rank, a node >= 1 member.
  const NodeSpec n = test_node();
  const Calibration c = test_cal();
  CHECK(collective_time(CollectiveOp::AllReduce, 1'000'000, 1, 1, n, c) == 0);
  CHECK(collective_time(CollectiveOp::AllReduce, 0, 8, 8, n, c) == 0);
  CHECK_THROWS_AS(collective_time(CollectiveOp::AllReduce, 10, 0, 1, n, c), Error);
  CHECK_THROWS_AS(collective_time(CollectiveOp::AllReduce, 10, 8, 0, n, c), Error);
  NodeSpec lonely = n;
  lonely.inter_node_GBps_per_gpu = 0;
  CHECK_THROWS_AS(collective_time(CollectiveOp::AllReduce, 10, 16, 8, lonely, c,
                                  CollectiveAlgorithm::Ring),
                  Error);
}

TEST_CASE("copies: launch + bytes / (link x eff)") {
  // PCIe 32 GB/s x 0.75 (pinned h2d) = 24 GB/s: 2.4 GB in 100 ms + 5 µs.
  // NVMe 10 GB/s x 0.5: 1 GB in 200 ms + 5 µs.
  Calibration c = test_cal();
  c.overheads.copy_launch_us = 5;
  c.copy[static_cast<std::size_t>(CopyKind::H2D)][1] = EfficiencyCurve::constant(0.75);
  c.copy[static_cast<std::size_t>(CopyKind::NvmeWrite)][0] = EfficiencyCurve::constant(0.5);
  const NodeSpec n = test_node();
  CHECK(copy_time(2'400'000'000, CopyKind::H2D, true, n, c) == 100'005'000);
  CHECK(copy_time(2'400'000'000, CopyKind::H2D, false, n, c) == 75'005'000);  // ideal pageable
  CHECK(copy_time(1'000'000'000, CopyKind::NvmeWrite, false, n, c) == 200'005'000);
  CHECK(copy_time(0, CopyKind::D2H, true, n, c) == 0);
}

TEST_CASE("bundled calibrations: bigger messages, copies and kernels are never faster") {
  // For every bundled (and one generic) calibration, every collective op and
  // algorithm over several layouts, time is non-decreasing in bytes from
  // 1 KiB to 16 GiB in steps of 1.25x; so are copies, memory-bound kernels
  // and GEMMs in FLOPs.
  const std::vector<std::string> gpus{"a100-80g", "h100-sxm", "h200", "b200"};
  for (const auto& name : gpus) {
    CAPTURE(name);
    const GpuSpec g = gpu_preset(name);
    const Calibration cal = default_calibration(g);
    const NodeSpec& node = g.server;
    const std::vector<std::pair<int, int>> layouts{{2, 2}, {8, 8}, {2, 1}, {16, 8}, {64, 8},
                                                   {32, 1}, {12, 4}};
    for (const auto& [op, op_name] : EnumNames<CollectiveOp>::table) {
      for (const auto& [algo, algo_name] : EnumNames<CollectiveAlgorithm>::table) {
        for (const auto& [group, per_node] : layouts) {
          Time prev = 0;
          for (double b = 1024; b < 16.0 * kGiB; b *= 1.25) {
            const Time t = collective_time(op, static_cast<Bytes>(b), group, per_node, node, cal,
                                           algo);
            if (t < prev) {
              FAIL_CHECK(op_name << " " << algo_name << " n=" << group << " r=" << per_node
                                 << " at " << b << " bytes: " << t << " < " << prev);
              break;
            }
            prev = t;
          }
        }
      }
    }
    for (const auto& [kind, kind_name] : EnumNames<CopyKind>::table) {
      for (bool pinned : {false, true}) {
        Time prev = 0;
        for (double b = 1024; b < 16.0 * kGiB; b *= 1.25) {
          const Time t = copy_time(static_cast<Bytes>(b), kind, pinned, node, cal);
          CHECK_MESSAGE(t >= prev, kind_name << " pinned=" << pinned << " at " << b);
          prev = t;
        }
      }
    }
    Time prev_mem = 0, prev_gemm = 0;
    for (double x = 1024; x < 1e16; x *= 1.25) {
      const Time tm = compute_time(g, cal, Precision::BF16, 0, static_cast<Bytes>(std::min(x, 1e15)));
      const Time tg = compute_time(g, cal, Precision::BF16, x, 0);
      CHECK(tm >= prev_mem);
      CHECK(tg >= prev_gemm);
      prev_mem = tm;
      prev_gemm = tg;
    }
  }
}

TEST_CASE("A100 bf16 GEMM of 8192^3 against the published achievable rate") {
  // Stas Bekman's ml-engineering MAMF table: the best A100 SXM bf16 matmul
  // reaches 267.9 of 312 TFLOPS (85.9%); a plain 8192^3 GEMM sits a little
  // below, so the prediction must lie in [0.75, 0.859] of peak: 1.1e12 FLOPs
  // in 4.10 ms (0.859) to 4.70 ms (0.75), plus one launch.
  const GpuSpec a100 = gpu_preset("a100-80g");
  const Calibration cal = default_calibration(a100);
  const double eff = cal.gemm_curve(GemmDtype::BF16).at(gemm_flops(8192, 8192, 8192));
  CHECK(eff >= 0.75);
  CHECK(eff <= 0.859);
  const Time t = compute_time(a100, cal, Precision::BF16, gemm_flops(8192, 8192, 8192), 3 * 8192LL * 8192 * 2);
  const double tflops = gemm_flops(8192, 8192, 8192) / to_seconds(t) / 1e12;
  CHECK(tflops >= 0.75 * 312 * 0.999);
  CHECK(tflops <= 267.9);
  // The H100 SXM's plateau stays under its MAMF of 792.1 TFLOPS.
  const GpuSpec h100 = gpu_preset("h100-sxm");
  const Time th = compute_time(h100, default_calibration(h100), Precision::BF16,
                               gemm_flops(16384, 16384, 16384), 0);
  CHECK(gemm_flops(16384, 16384, 16384) / to_seconds(th) / 1e12 <= 792.1);
}

// A block linear of 6e12 FLOPs forward (twice that backward) whose input
// holds 1e9 elements and whose output 5e8: the FP8 and FP4 cases' op.
Op quantized_block_linear() {
  Op op;
  op.kind = OpKind::Linear;
  op.fwd_flops = 6e12;
  op.bwd_flops = 12e12;
  op.matrices = 1;
  op.gemm_in_elems = 1e9;
  op.gemm_out_elems = 5e8;
  return op;
}

TEST_CASE("FP8 recipes: each pass quantizes its operand; emulated block scaling runs at BF16 / 1.75") {
  // GPU: 300 TFLOP/s bf16 and 600 fp8, GEMM efficiency 0.8, HBM 2,000 GB/s at
  // 0.9 (1,800 GB/s), no launch overhead. A block linear of 6e12 FLOPs
  // forward whose input holds 1e9 elements and whose output 5e8.
  GpuSpec g = test_gpu();
  g.tflops.fp8 = 600;
  g.hbm_GBps = 2000;
  Calibration c = test_cal();
  c.gemm[static_cast<std::size_t>(GemmDtype::FP8)] = EfficiencyCurve::constant(0.8);
  Op op = quantized_block_linear();
  const double bw = 1800e9;
  auto ns = [](double s) { return seconds_to_time(s); };
  auto fwd = [&](Fp8Recipe r) { return op_time(g, c, Precision::FP8, op, false, LayerKind::Block, r); };
  auto bwd = [&](Fp8Recipe r) { return op_time(g, c, Precision::FP8, op, true, LayerKind::Block, r); };
  const Time gemm_f = 12'500'000, gemm_b = 25'000'000;  // 6e12 / (600e12 · 0.8), twice that
  // Hopper (no native column-wise reads): delayed reads the bf16 input once
  // (2 bytes) and writes it and its transpose (1 + 1): 4 bytes an element.
  g.fp8_block_scaling = Fp8BlockScaling::Emulated;
  CHECK(fwd(Fp8Recipe::Delayed) == gemm_f + ns(4e9 / bw));
  CHECK(bwd(Fp8Recipe::Delayed) == gemm_b + ns(4 * 5e8 / bw));
  // Current scaling reads twice: 6 bytes, over two kernels.
  CHECK(fwd(Fp8Recipe::Tensorwise) == gemm_f + ns(6e9 / bw));
  // Block scaling: both copies with an fp32 per 128 (2 + 2·(1 + 1/32)
  // bytes), and the GEMM emulated: the bf16 GEMM (25 ms) over 1.75.
  CHECK(fwd(Fp8Recipe::Blockwise) == ns(0.025 / 1.75) + ns((2 + 2 * (1 + 4.0 / 128)) * 1e9 / bw));
  // Blackwell-like (native): one per-tensor copy read in place, block
  // scales read by the tensor cores at the FP8 rate.
  g.fp8_block_scaling = Fp8BlockScaling::Native;
  CHECK(fwd(Fp8Recipe::Delayed) == gemm_f + ns(3e9 / bw));
  CHECK(fwd(Fp8Recipe::Mxfp8) == gemm_f + ns((2 + 2 * (1 + 1.0 / 32)) * 1e9 / bw));
  // torchao's rowwise casts every GEMM operand along its reduction axis,
  // each an amax pass and a cast (2 + 2 bytes read, 1 written): the input
  // and the weight (1e6 parameters) forward; the output gradient twice, the
  // weight and the saved input backward. Its GEMM on Hopper is bound as
  // block scaling's (channel-scaled: cuBLAS 12.9's figure); natively, the FP8 rate.
  op.rows = 1000;
  op.cols = 1000;
  CHECK(fwd(Fp8Recipe::Rowwise) == gemm_f + ns(5 * (1e9 + 1e6) / bw));
  CHECK(bwd(Fp8Recipe::Rowwise) == gemm_b + ns(5 * (2 * 5e8 + 1e6 + 1e9) / bw));
  g.fp8_block_scaling = Fp8BlockScaling::Emulated;
  CHECK(fwd(Fp8Recipe::Rowwise) == ns(0.025 / 1.75) + ns(5 * (1e9 + 1e6) / bw));
  // Not an FP8 GEMM (the head's): nothing quantized.
  CHECK(op_time(g, c, Precision::FP8, op, false, LayerKind::Head, Fp8Recipe::Mxfp8) == 25'000'000);
}

TEST_CASE("FP4 (NVFP4): block linears at the FP4 peak, each pass quantizing its operand both ways") {
  // GPU: 600 TFLOP/s fp8, 1,200 fp4 at efficiency 0.8, HBM 1,800 GB/s
  // effective. A block linear of 6e12 FLOPs forward (input 1e9 elements,
  // output 5e8): the GEMM 6e12 / (1,200e12 · 0.8) = 6.25 ms, backward twice.
  // NVFP4's cast: an amax read and a read to cast (2 + 2 bytes), both
  // copies written at 4 bits plus an E4M3 byte per 16 (2 · (0.5 + 1/16)):
  // 5.125 bytes an element, whatever the GPU's column-wise reads.
  GpuSpec g = test_gpu();
  g.tflops.fp8 = 600;
  g.tflops.fp4 = 1200;
  g.hbm_GBps = 2000;
  g.fp8_block_scaling = Fp8BlockScaling::Native;
  Calibration c = test_cal();
  c.gemm[static_cast<std::size_t>(GemmDtype::FP4)] = EfficiencyCurve::constant(0.8);
  Op op = quantized_block_linear();
  const double bw = 1800e9;
  auto ns = [](double s) { return seconds_to_time(s); };
  const double per_elem = 2 + 2 + 2 * (0.5 + 1.0 / 16);
  CHECK(op_time(g, c, Precision::FP4, op, false) == 6'250'000 + ns(per_elem * 1e9 / bw));
  CHECK(op_time(g, c, Precision::FP4, op, true) == 12'500'000 + ns(per_elem * 5e8 / bw));
  // The FP8 recipe plays no part (NVFP4 is one recipe).
  CHECK(op_time(g, c, Precision::FP4, op, false, LayerKind::Block, Fp8Recipe::Mxfp8) ==
        op_time(g, c, Precision::FP4, op, false));
  // The head and attention stay bf16 (300 TFLOP/s at 0.8: 25 ms), unquantized.
  CHECK(op_time(g, c, Precision::FP4, op, false, LayerKind::Head) == 25'000'000);
  Op attn = op;
  attn.kind = OpKind::Attention;
  CHECK(op_time(g, c, Precision::FP4, attn, false) == 25'000'000);
  CHECK(op_gemm_dtype(Precision::FP4, op, LayerKind::Block) == GemmDtype::FP4);
  // A Linear op of a block kept in bf16: the bf16 GEMM, nothing quantized.
  op.unquantized = true;
  CHECK(op_gemm_dtype(Precision::FP4, op, LayerKind::Block) == GemmDtype::BF16);
  CHECK(op_time(g, c, Precision::FP4, op, false) == 25'000'000);
  CHECK(op_time(g, c, Precision::FP8, op, true) == op_time(g, c, Precision::BF16, op, true));
}

TEST_CASE("FP8 training multiplies only the blocks' linear layers in FP8") {
  // Transformer Engine's recipe: attention in 16 bits (fp8_dpa off), the
  // output layer outside TE in bf16. GPU: 300 TFLOP/s bf16, 600 fp8, both
  // at efficiency 0.8 here: a 6e12-FLOP block linear takes 12.5 ms in fp8;
  // the same FLOPs as attention or in the head take 25 ms (bf16).
  GpuSpec g = test_gpu();
  g.tflops.fp8 = 600;
  Calibration c = test_cal();
  c.gemm[static_cast<std::size_t>(GemmDtype::FP8)] = EfficiencyCurve::constant(0.8);
  Op linear;
  linear.kind = OpKind::Linear;
  linear.fwd_flops = 6e12;
  Op attention = linear;
  attention.kind = OpKind::Attention;
  CHECK(op_time(g, c, Precision::FP8, linear, false) == 12'500'000);
  CHECK(op_time(g, c, Precision::FP8, linear, false, LayerKind::Head) == 25'000'000);
  CHECK(op_time(g, c, Precision::FP8, attention, false) == 25'000'000);
  CHECK(op_gemm_dtype(Precision::FP8, linear, LayerKind::Block) == GemmDtype::FP8);
  // Other precisions: every op in the training dtype.
  CHECK(op_time(g, c, Precision::BF16, linear, false, LayerKind::Head) == 25'000'000);
  CHECK(op_gemm_dtype(Precision::FP16, attention, LayerKind::Block) == GemmDtype::FP16);
}

// NCCL's ring/Simple and ring/LL latencies (NCCL src/graph/tuning.cc):
// Simple 8.4 µs base, 3.4 per NVLink step, 14 per network step, full
// bandwidth; LL 6.6 base, 0.6 and 2.7 per step, a quarter of the bandwidth.
CollectiveProtocol simple_protocol() {
  return {"simple", 1.0, {8.4, 3.4, 14.0}, {0, 28, 28}};
}
CollectiveProtocol ll_protocol() { return {"ll", 0.25, {6.6, 0.6, 2.7}, {6.8, 0.6, 5.0}}; }

TEST_CASE("a ring's latency: one step per hop, network hops priced apart (NCCL's model)") {
  // 4 nodes x 8 GPUs, all-gather: 31 steps, 3 of them across nodes (one
  // per node boundary), 28 over NVLink: 8.4 + 28 x 3.4 + 3 x 14 = 145.6 µs.
  // Bandwidth: min(150 intra, 8 x 20 inter) = 150 GB/s; 31/32 of 32 MB
  // = 206.667 µs.
  Calibration c = test_cal();
  c.protocols = {simple_protocol()};
  const NodeSpec n = test_node();
  const Time want = seconds_to_time(145.6e-6 + 31e6 / 150e9);
  CHECK(collective_time(CollectiveOp::AllGather, 32'000'000, 32, 8, n, c,
                        CollectiveAlgorithm::Ring) == want);
  CHECK(collective_time(CollectiveOp::ReduceScatter, 32'000'000, 32, 8, n, c,
                        CollectiveAlgorithm::Ring) == want);
  // All-reduce: 62 steps, 6 across nodes: 8.4 + 56 x 3.4 + 6 x 14 = 282.8 µs,
  // plus twice the bandwidth term.
  CHECK(collective_time(CollectiveOp::AllReduce, 32'000'000, 32, 8, n, c,
                        CollectiveAlgorithm::Ring) ==
        seconds_to_time(282.8e-6 + 2 * 31e6 / 150e9));
  // Inside one node every step is an NVLink step: 8 GPUs, 7 steps:
  // 8.4 + 7 x 3.4 = 32.2 µs.
  CHECK(collective_time(CollectiveOp::AllGather, 8'000'000, 8, 8, n, c,
                        CollectiveAlgorithm::Ring) ==
        seconds_to_time(32.2e-6 + 7e6 / 150e9));
  // The latency grows with the group while the bandwidth term does not:
  // ZeRO-3's gathers over 2,048 GPUs (256 nodes) pay 8.4 + 1792 x 3.4 +
  // 255 x 14 = 9671.2 µs.
  const Time big = collective_time(CollectiveOp::AllGather, 32'000'000, 2048, 8, n, c,
                                   CollectiveAlgorithm::Ring);
  CHECK(big == seconds_to_time(9671.2e-6 + 2047.0 / 2048 * 32e6 / 150e9));
}

TEST_CASE("a collective runs in its fastest protocol") {
  // LL: lower latency, a quarter of the bandwidth. One node, 8 GPUs,
  // all-reduce (14 steps): Simple 8.4 + 47.6 = 56 µs, LL 6.6 + 8.4 = 15 µs.
  // 64 kB: bandwidth 2 x 7/8 x 64 kB / 150 GB/s = 0.747 µs, LL 2.99 µs:
  // LL wins (17.99 < 56.75). 64 MB: Simple 56 + 746.7 = 802.7 µs, LL 15 +
  // 2986.7: Simple wins.
  Calibration c = test_cal();
  c.protocols = {simple_protocol(), ll_protocol()};
  const NodeSpec n = test_node();
  const double small_bw = 2.0 * 7 / 8 * 64'000 / 150e9, big_bw = 2.0 * 7 / 8 * 64e6 / 150e9;
  CHECK(collective_time(CollectiveOp::AllReduce, 64'000, 8, 8, n, c, CollectiveAlgorithm::Ring) ==
        seconds_to_time(15e-6 + small_bw / 0.25));
  CHECK(collective_time(CollectiveOp::AllReduce, 64'000'000, 8, 8, n, c,
                        CollectiveAlgorithm::Ring) == seconds_to_time(56e-6 + big_bw));
  // A tree over 4 nodes x 8: a chain of 7 in each node, 2 levels across:
  // LL 6.8 + 2 x (7 x 0.6 + 2 x 5) = 35.2 µs; Simple 0 + 2 x (7 x 28 + 2 x
  // 28) = 504 µs. Bandwidth: 2 x 64 kB / 150 GB/s.
  CHECK(collective_time(CollectiveOp::AllReduce, 64'000, 32, 8, n, c, CollectiveAlgorithm::Tree) ==
        seconds_to_time(35.2e-6 + 2.0 * 64'000 / 150e9 / 0.25));
  // Without protocols the scope's α and per-step latency apply (test_cal:
  // 20 µs + 2 µs per step across nodes, here 31 steps).
  const Calibration plain = test_cal();
  CHECK(collective_time(CollectiveOp::AllGather, 32'000'000, 32, 8, n, plain,
                        CollectiveAlgorithm::Ring) == seconds_to_time(82e-6 + 31e6 / 150e9));
}

TEST_CASE("rings over a DGX-1's NVLink mesh: as many as the links between the group's GPUs carry") {
  // The hybrid cube-mesh (NVIDIA's DGX-1V whitepaper; nvidia-smi topo -m):
  // six 25 GB/s links a GPU, some pairs joined twice, some not at all.
  NodeSpec n;
  n.gpus_per_node = 8;
  n.intra_node_GBps = 150;
  n.pcie_GBps = 16;
  n.nvlink_GBps = 25;
  n.nvlinks = {0, 1, 1, 2, 2, 0, 0, 0,  1, 0, 2, 1, 0, 2, 0, 0,  1, 2, 0, 2, 0, 0, 1, 0,
               2, 1, 2, 0, 0, 0, 0, 1,  2, 0, 0, 0, 0, 1, 1, 2,  0, 2, 0, 0, 1, 0, 2, 1,
               0, 0, 1, 0, 1, 2, 0, 2,  0, 0, 0, 1, 2, 1, 2, 0};
  using G = std::vector<std::int64_t>;
  CHECK(intra_ring_GBps(n, G{0, 1}) == 25);  // one link: one ring, each way on it
  CHECK(intra_ring_GBps(n, G{0, 3}) == 50);  // two links
  CHECK(intra_ring_GBps(n, G{0, 5}) == 16);  // none: PCIe (and QPI)
  // GPUs 0-3 are fully joined (0-1, 0-2, 1-3 once, the rest twice): GPU 0's
  // four links out bound it, and four rings fit (0→1→2→3→0, 0→2→1→3→0,
  // 0→3→1→2→0, 0→3→2→1→0).
  CHECK(intra_ring_GBps(n, G{0, 1, 2, 3}) == 100);
  // GPUs 0, 2, 4, 6 (a data-parallel group under tp 2): 0-6 and 2-4 are not
  // linked, so the only ring is 0→2→6→4→0, once each way.
  CHECK(intra_ring_GBps(n, G{0, 2, 4, 6}) == 50);
  // All eight: six rings, one per link out of each GPU: the node's 150.
  CHECK(intra_ring_GBps(n, G{0, 1, 2, 3, 4, 5, 6, 7}) == 150);
  // Without a matrix (NVSwitch) every group sees the node's bandwidth.
  n.nvlinks.clear();
  CHECK(intra_ring_GBps(n, G{0, 1}) == 150);
}

}  // namespace
}  // namespace strata::cost
