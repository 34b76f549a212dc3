#pragma once
// Hardware description: a GPU, the node (server) that holds several, and a
// cluster of identical nodes, or of groups of identical nodes (NodeGroup).
// Bandwidths are decimal GB/s (1e9 bytes/s) in one direction, as vendors
// quote them halved from bidirectional figures; memory sizes are GiB. Peaks are dense (no structured sparsity).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/techniques.hpp"
#include "sim/units.hpp"

namespace strata::cost {

struct PeakTflops {
  double fp32 = 0;  // 0: not supported
  double tf32 = 0;
  double fp16 = 0;
  double bf16 = 0;
  double fp8 = 0;
  double fp4 = 0;  // NVFP4 (E2M1 with E4M3 block scales)
};

// A server of GPUs and its links.
struct NodeSpec {
  std::string name;
  std::int64_t gpus_per_node = 1;
  double intra_node_GBps = 0;          // per GPU (NVLink/NVSwitch)
  double inter_node_GBps_per_gpu = 0;  // per GPU (NIC share)
  double pcie_GBps = 0;                // per GPU, host <-> device
  double host_memory_GiB = 0;          // per node
  double nvme_GBps = 0;                // per node, read
  double nvme_GiB = 0;                 // per node
  // NVLinks between each pair of the node's GPUs, row-major, a square of
  // side gpus_per_node (a DGX-1's hybrid cube-mesh: 0, 1 or 2 a pair);
  // empty: every GPU reaches every other at intra_node_GBps (NVSwitch).
  // nvlink_GBps: one link, one direction.
  std::vector<int> nvlinks;
  double nvlink_GBps = 0;
  std::string source;
};

// Row- and block-scaled FP8 GEMMs (fp8_recipe rowwise, blockwise, mxfp8): none; emulated
// in software by cuBLAS (12.9+) on tensor cores that take one scale per
// operand (Hopper: "block-scaled GEMMs are software-emulated", Transformer
// Engine docs fp8_blockwise_scaling.rst); native on tensor cores that read
// block scales and column-wise operands (Blackwell's fifth generation:
// MXFP8, NVIDIA cuBLAS 12.9 blog).
enum class Fp8BlockScaling { None, Emulated, Native };

// The output tile (rows × columns, either way round) of the GEMM kernels
// the GPU's BLAS library runs for large training GEMMs: one thread block
// per tile and SM, so a GEMM runs in waves of `sms` tiles
// (cost::gemm_quantisation). 0 × 0: GEMMs priced by their FLOPs alone.
struct GemmTile {
  std::int64_t m = 0, n = 0;
  bool known() const { return m > 0 && n > 0; }
};

struct GpuSpec {
  std::string name;
  double memory_GiB = 0;
  double hbm_GBps = 0;
  PeakTflops tflops;
  // Streaming multiprocessors (compute units): what a collective's thread
  // blocks take from the GEMMs beside it (Calibration::collective_sms). 0:
  // unknown, no interference priced.
  std::int64_t sms = 0;
  GemmTile gemm_tile;
  Fp8BlockScaling fp8_block_scaling = Fp8BlockScaling::None;
  NodeSpec server;  // the GPU's standard server (DGX/HGX), cluster defaults
  std::string source;
  // The GPU preset it was built from, the innermost where presets build on
  // presets (h800 on h100-sxm); "" for a GPU object without one. Its
  // bundled calibration (default_calibration) applies whatever the object
  // renames or changes, as the same chip's efficiencies.
  std::string preset;

  // The chip it is: its preset, else its name (what a calibration measured).
  const std::string& chip() const { return preset.empty() ? name : preset; }
  Bytes memory_bytes() const { return static_cast<Bytes>(memory_GiB * static_cast<double>(kGiB)); }
  // Dense matrix-multiply peak for a training precision (fp32 uses fp32, the
  // mixed precisions their 16/8-bit tensor-core peak). 0 when unsupported.
  double peak_tflops(Precision p) const;
};

// A GPU, or every GPU of a node, slower than its class (a straggler: a
// throttled or faulty device, a noisy neighbour): its kernels take `factor`
// times as long. Exactly one of rank and node is set (≥ 0).
struct SlowDevice {
  std::int64_t rank = -1;
  std::int64_t node = -1;
  double factor = 1;
};

// Slowdowns drawn afresh for every step (cluster.stragglers): each GPU's
// kernels take exp(rank_sigma · Z) times as long (Z standard normal: the
// class's figures are its median GPU), each node independently is slowed
// by node_factor with node_probability; `samples` steps are drawn from
// `seed`. backup_replicas k: the step also reports waiting for the fastest
// dp − k data-parallel replicas only (backup workers, Chen et al. 2016).
struct StragglerModel {
  double rank_sigma = 0;
  double node_probability = 0;
  double node_factor = 1;
  std::int64_t samples = 200;
  std::uint64_t seed = 1;
  std::int64_t backup_replicas = 0;
};

// Nodes of one kind in a cluster that mixes kinds (cluster.groups): their
// GPU, their server and how many. Ranks are numbered node by node, the
// groups in the order listed.
struct NodeGroup {
  std::string name;
  GpuSpec gpu;
  NodeSpec node;
  std::int64_t nodes = 1;
};

struct ClusterSpec {
  std::string name;
  // With groups: the first group's GPU and server (what a figure of the
  // whole cluster that is not per stage is read from), and every group's
  // nodes; every group has this gpus_per_node.
  GpuSpec gpu;
  NodeSpec node;
  std::int64_t nodes = 1;
  std::string source;
  // Two or more groups of different nodes, in rank order; empty: every node
  // is `node` with `gpu`s.
  std::vector<NodeGroup> groups;
  // Fixed stragglers, applied to every step (cluster.slow).
  std::vector<SlowDevice> slow;
  std::optional<StragglerModel> stragglers;

  std::int64_t gpus() const { return node.gpus_per_node * nodes; }
  bool heterogeneous() const { return !groups.empty(); }
  // The mean dense peak of the cluster's GPUs (the GPU's without groups):
  // what model FLOP/s per GPU is a fraction of (MFU).
  double mean_peak_tflops(Precision p) const;
  // Its GPUs for people: "64 x a100-80g", or with groups
  // "64 GPUs: 32 x a100-80g (dgx-a100-80g) + 32 x v100-32g (dgx-1)".
  std::string gpus_text() const;
  // The group holding node n (0 ≤ n < nodes); 0 without groups.
  std::size_t group_of_node(std::int64_t n) const;
  // The cluster as if every node were group g's (its GPU and server, this
  // cluster's node count, no groups; slow GPUs and stragglers kept): what
  // prices the work of ranks on group g.
  ClusterSpec group_view(std::size_t g) const;
};

}  // namespace strata::cost

namespace strata {
template <>
struct EnumNames<cost::Fp8BlockScaling> {
  static constexpr std::array<std::pair<cost::Fp8BlockScaling, std::string_view>, 3> table{
      {{cost::Fp8BlockScaling::None, "none"},
       {cost::Fp8BlockScaling::Emulated, "emulated"},
       {cost::Fp8BlockScaling::Native, "native"}}};
};
}  // namespace strata
