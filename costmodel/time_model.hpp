#pragma once
// Time cost model: how long a kernel, a collective or a copy takes on the
// modelled hardware, from its peaks (hardware.hpp) scaled by calibrated
// efficiencies (calibration.hpp). Pure functions of their arguments; they
// allocate nothing and look nothing up by name, so the lowering can call
// them per task. Formulas and their sources: docs/cost-model.md.
#include <cstdint>
#include <span>

#include "costmodel/calibration.hpp"
#include "costmodel/hardware.hpp"
#include "costmodel/ops.hpp"
#include "costmodel/techniques.hpp"
#include "sim/names.hpp"
#include "sim/units.hpp"

namespace strata::cost {

// FLOPs of one m×k by k×n matrix product.
constexpr Flops gemm_flops(std::int64_t m, std::int64_t n, std::int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

// What the efficiency curves need to know about a compute task beyond its
// totals: how many kernels it launches and how big each GEMM is.
struct KernelShape {
  // FLOPs of one GEMM, the size the GEMM efficiency curve is read at;
  // 0: the task's matmul FLOPs divided evenly over its kernels.
  Flops gemm_flops = 0;
  // Kernels launched (each pays the launch overhead; memory efficiency is
  // read at bytes / kernels).
  std::int64_t kernels = 1;
  // Multiplies the GEMM efficiency: kernels that do matrix products less
  // well than cuBLAS (fused attention: Calibration::attention_fraction).
  double efficiency_scale = 1.0;
  MemoryKernel memory = MemoryKernel::Elementwise;
  // Multiplies the matmul term: the tile and wave quantisation of the
  // task's GEMMs (gemm_quantisation; 1: none).
  double quantisation = 1.0;
};

// time = max(F / (peak(dtype) · eff_gemm(gemm size)), B / (HBM · eff_mem(B / kernels)))
//        + kernels · kernel_launch.
// Throws Error when F > 0 and the GPU has no peak for the dtype, or when a
// count is negative.
Time compute_time(const GpuSpec& gpu, const Calibration& cal, GemmDtype dtype,
                  Flops matmul_flops, Bytes bytes, KernelShape shape = {});
inline Time compute_time(const GpuSpec& gpu, const Calibration& cal, Precision p,
                         Flops matmul_flops, Bytes bytes, KernelShape shape = {}) {
  return compute_time(gpu, cal, gemm_dtype(p), matmul_flops, bytes, shape);
}

// Tile and wave quantisation of one m × n × k GEMM (output m × n, reduction
// k): how much longer it runs than the GEMM efficiency curve says for its
// FLOPs. The library covers the output with GpuSpec::gemm_tile tiles (either
// way round, the better one), one thread block per tile and SM, so a GEMM of
// t tiles takes ⌈t / sms⌉ waves of whole tiles where its FLOPs need
// m·n / (sms · tile) of them. It may split the reduction s ways (s ≤
// kMaxSplitK: s·t blocks of k / s each, the s partial outputs written in
// fp32 and summed by a second, memory-bound kernel) where that fills the
// waves better than its cost:
//   q = min over s of  ⌈s·t / sms⌉ · sms · tile / (s · m · n)
//                      + [s > 1] reduction(2·s·4 + out bytes per element) / ideal
// with ideal the curve's time for 2·m·n·k FLOPs. A GEMM of fewer tiles than
// SMs (t < sms) is in the curve's small-size regime, measured on GEMMs that
// do not fill the GPU either: q = 1; so is any GEMM on a GPU without a
// tile. q ≥ 1: the curve's plateau is read as full waves (docs/cost-model.md,
// "GEMMs by shape").
inline constexpr int kMaxSplitK = 16;
double gemm_quantisation(const GpuSpec& gpu, const Calibration& cal, GemmDtype dtype, double m,
                         double n, double k);
// The same, FLOP-weighted over the GEMMs of a Linear op's forward (its
// products, each m × share·cols × rows) or backward pass (per product the
// input gradient, m × rows × share·cols, and the weight gradient, rows ×
// share·cols × m, of equal FLOPs); m is the tokens one matrix multiplies.
// 1 for any other op.
double op_quantisation(const GpuSpec& gpu, const Calibration& cal, GemmDtype dtype, const Op& op,
                       bool backward);

// The kernels of one op's forward or backward pass. A linear op runs one
// GEMM per weight matrix forward and two backward (input gradient and
// weight gradient), each of the forward GEMM's size; any other op with
// matmul FLOPs (attention) is one kernel forward and two backward; ops
// without matmul FLOPs (norms, activations, dropout, …) launch their
// fwd_kernels and bwd_kernels (one each way when fused).
KernelShape op_kernels(const Op& op, bool backward);
// The dtype an op of a layer multiplies in under a training precision.
// FP8 training runs only the transformer blocks' linear layers in FP8, as
// Transformer Engine's recipe does: its DotProductAttention computes in
// 16 bits unless the recipe asks for FP8 attention (fp8_dpa, off by default:
// transformer_engine/common/recipe/__init__.py, DelayedScaling), and
// Megatron-Core's output layer is a tensor_parallel.ColumnParallelLinear,
// not a Transformer Engine module (megatron/core/models/gpt/gpt_model.py),
// so the logits GEMM runs in bf16 too. FP4 (NVFP4) likewise, at the fp4
// peak; an `unquantized` op (a block kept in bf16) in bf16. Every other
// precision: gemm_dtype.
GemmDtype op_gemm_dtype(Precision p, const Op& op, LayerKind layer);
// compute_time of an op's forward (backward = false) or backward pass in
// the layer it belongs to.
// Under FP8 and FP4 a Linear op's pass also quantizes its operand (the input
// forward, the output gradient backward): a memory-bound pass reading it
// in 16 bits `reads` times and writing the recipe's copies and scales
// (gemm_quantization), one kernel per read (torchao's rowwise casts more
// operands: time_model.cpp). Row- and block-scaled GEMMs emulated in
// software (Hopper, GpuSpec::fp8_block_scaling) run no faster than the BF16
// GEMM over kEmulatedBlockFp8Speedup.
Time op_time(const GpuSpec& gpu, const Calibration& cal, Precision p, const Op& op,
             bool backward, LayerKind layer = LayerKind::Block, Fp8Recipe recipe = Fp8Recipe::Delayed);
// cuBLAS 12.9's channel- and block-scaled FP8 matmuls on Hopper: "a 1.75x speedup for
// large matmuls ... compared to the BF16 baseline" (NVIDIA technical blog,
// "Boosting Matrix Multiplication Speed and Flexibility with NVIDIA cuBLAS
// 12.9", 2025; "at least 1.25x" for most other sizes: the bound is the
// large matmuls').
inline constexpr double kEmulatedBlockFp8Speedup = 1.75;

// What a ring over `gpus` (indices within one node, at least two) sees of
// the node's links, GB/s per GPU and direction: intra_node_GBps where every
// GPU reaches every other alike (no `nvlinks`: NVSwitch); over an NVLink
// mesh, NCCL's rings through those GPUs: as many edge-disjoint directed
// rings as the links carry (a link carries a ring each way, two links two),
// each at nvlink_GBps, at most intra_node_GBps; with no NVLink ring through
// them, pcie_GBps (NCCL's P2P and SHM transports over PCIe). Groups of more
// than kMaxMeshRingGpus on a mesh: intra_node_GBps.
inline constexpr std::size_t kMaxMeshRingGpus = 8;
double intra_ring_GBps(const NodeSpec& node, std::span<const std::int64_t> gpus);

// Collective algorithms. Auto is NCCL's choice: the faster of ring and (for
// all-reduce) tree; Hierarchical phases, which NCCL does not run, only when
// asked for.
enum class CollectiveAlgorithm { Auto, Ring, Tree, Hierarchical };

struct CollectiveCost {
  Time time = 0;
  // The latency terms in `time` (α and the steps'); the rest is the
  // bandwidth-bound term, which crosses the network when the group `spans`
  // nodes and the node's NVLink (or PCIe) otherwise. The step program puts
  // that term on the rank's links (docs/step-time.md, "Shared links").
  Time latency = 0;
  bool spans = false;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::Ring;  // what was priced
};

// One collective over `group` ranks, `ranks_per_node` of them on each node
// (placed node by node, so nodes = ceil(group / ranks_per_node)). `bytes` is
// nccl-tests' size S: the full buffer each rank holds — the all-reduce
// buffer, the gathered output of all-gather, the input of reduce-scatter,
// each rank's send buffer for all-to-all, the message for send/recv.
//   ring all-reduce:          α + 2(n−1)·α_step + 2(n−1)/n · S / busbw
//   ring all-gather / r-s:    α + (n−1)·α_step  +  (n−1)/n · S / busbw
//   tree all-reduce:          α + 2⌈log2 n⌉·α_step + 2 · S / busbw
//   hierarchical (n over N nodes of r): intra reduce-scatter(S, r), inter
//     all-reduce(S/r, N), intra all-gather(S, r), each a ring priced alone.
//   all-to-all:               α + (n−1)·α_step + max((r−1)/n·S / bw_intra, (n−r)/n·S / bw_inter)
//   send/recv:                α + α_step + S / bw
// busbw inside a node is intra_node_GBps · eff_intra(op, S); a ring that
// spans nodes is bounded by min(intra, r · inter_node_GBps_per_gpu · eff_inter)
// (each node's r GPUs drive r NICs); α and α_step are the inter-node ones
// once the group spans nodes. A group of one costs nothing.
CollectiveCost collective_cost(CollectiveOp op, Bytes bytes, std::int64_t group,
                               std::int64_t ranks_per_node, const NodeSpec& node,
                               const Calibration& cal,
                               CollectiveAlgorithm algo = CollectiveAlgorithm::Auto);
inline Time collective_time(CollectiveOp op, Bytes bytes, std::int64_t group,
                            std::int64_t ranks_per_node, const NodeSpec& node,
                            const Calibration& cal,
                            CollectiveAlgorithm algo = CollectiveAlgorithm::Auto) {
  return collective_cost(op, bytes, group, ranks_per_node, node, cal, algo).time;
}

// A copy of `bytes`: copy_launch + bytes / (link · eff(kind, pinned, bytes)),
// the link being the node's pcie_GBps (h2d, d2h) or nvme_GBps.
Time copy_time(Bytes bytes, CopyKind kind, bool pinned, const NodeSpec& node,
               const Calibration& cal);

// Seconds to the engine's integer nanoseconds (rounded to nearest), saturating
// at kMaxStepTime (sim/limits.hpp).
Time seconds_to_time(double seconds);

}  // namespace strata::cost

namespace strata {

template <>
struct EnumNames<cost::CollectiveAlgorithm> {
  static constexpr std::array<std::pair<cost::CollectiveAlgorithm, std::string_view>, 4> table{
      {{cost::CollectiveAlgorithm::Auto, "auto"},
       {cost::CollectiveAlgorithm::Ring, "ring"},
       {cost::CollectiveAlgorithm::Tree, "tree"},
       {cost::CollectiveAlgorithm::Hierarchical, "hierarchical"}}};
};

}  // namespace strata
