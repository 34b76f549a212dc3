#pragma once
// Calibration: how far below its datasheet peaks a machine runs, as
// piecewise-linear efficiency curves in log(size), plus the latencies and
// fixed overheads that no peak describes. The time model (time_model.hpp)
// multiplies a GPU's or node's peaks by these fractions.
//
// A calibration file (configs/calibration/<gpu>.json, or the output of
// `strata calibrate`) stores what was measured with units in its keys
// (`tflops`, `GBps`, `busbw_GBps`, `us`) next to the peak it was measured
// against; reading turns every point into a fraction of that peak, so one
// file can price a GPU or link whose peak differs (docs/cost-model.md).
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "costmodel/hardware.hpp"
#include "costmodel/techniques.hpp"
#include "sim/json_reader.hpp"
#include "sim/names.hpp"
#include "sim/units.hpp"

namespace strata::cost {

// Matrix-product input types with their own peak (GpuSpec::tflops).
enum class GemmDtype { FP32, TF32, FP16, BF16, FP8, FP4 };
inline constexpr std::size_t kGemmDtypes = 6;
// The dtype a training precision multiplies in: fp32 training uses the fp32
// peak (as GpuSpec::peak_tflops does; PyTorch leaves TF32 off for matmuls).
constexpr GemmDtype gemm_dtype(Precision p) {
  switch (p) {
    case Precision::FP32: return GemmDtype::FP32;
    case Precision::FP16: return GemmDtype::FP16;
    case Precision::BF16: return GemmDtype::BF16;
    case Precision::FP8: return GemmDtype::FP8;
    case Precision::FP4: return GemmDtype::FP4;
  }
  return GemmDtype::BF16;
}
// Dense peak of a GPU for a dtype, TFLOP/s (0: unsupported).
double peak_tflops(const GpuSpec& gpu, GemmDtype d);

enum class CollectiveOp { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv };
inline constexpr std::size_t kCollectiveOps = 5;

// Where a transfer runs: inside one node (NVLink/NVSwitch) or across nodes
// (the GPU's NIC share).
enum class LinkScope { IntraNode, InterNode };
inline constexpr std::size_t kLinkScopes = 2;

// Host <-> device over PCIe, and NVMe <-> host.
enum class CopyKind { H2D, D2H, NvmeRead, NvmeWrite };
inline constexpr std::size_t kCopyKinds = 4;

// A fraction of a peak as a function of a size (FLOPs of one GEMM, bytes of
// one kernel or message): linear in log(size) between the points, constant
// beyond the first and last. An empty curve is 1 everywhere. Evaluating it
// allocates nothing and touches only its own arrays.
class EfficiencyCurve {
 public:
  EfficiencyCurve() = default;
  // Points (size > 0, strictly increasing; value > 0). Throws Error otherwise.
  explicit EfficiencyCurve(const std::vector<std::pair<double, double>>& points);
  static EfficiencyCurve constant(double value);

  double at(double size) const {
    const std::size_t n = log_size_.size();
    if (n == 0) return 1.0;
    if (n == 1 || !(size > size_lo_)) return value_[0];
    if (size >= size_hi_) return value_[n - 1];
    const double x = std::log(size);
    std::size_t i = 1;
    while (log_size_[i] < x) ++i;  // n is small (a dozen points)
    return value_[i - 1] + slope_[i - 1] * (x - log_size_[i - 1]);
  }

  bool empty() const { return log_size_.empty(); }
  std::size_t size() const { return log_size_.size(); }
  // The points, sizes back in linear units.
  std::vector<std::pair<double, double>> points() const;
  // The same curve with every size multiplied by `factor` (> 0): a faster
  // device needs proportionally larger work to reach the same fraction.
  EfficiencyCurve scaled_sizes(double factor) const;

 private:
  void finish();
  std::vector<double> log_size_, value_, slope_;
  double size_lo_ = 0, size_hi_ = 0;
};

// Fixed costs no peak describes, in microseconds. Defaults are estimates
// (docs/cost-model.md says where each comes from).
struct Overheads {
  // GPU-side gap per kernel launch (asynchronous launches overlap the host
  // cost; what remains is the launch-to-start gap between kernels).
  double kernel_launch_us = 2.0;
  // Per host<->device or NVMe copy issued (cudaMemcpyAsync / I/O submit).
  double copy_launch_us = 5.0;
  // Framework work per microbatch forward and per backward (Python, schedule
  // bookkeeping) that the GPU waits on.
  double microbatch_us = 10.0;
  // Per training step: zero_grad, gradient-norm and loss-scale checks,
  // logging, data-loader hand-off.
  double step_us = 200.0;
  // Launching the optimizer step (multi-tensor fused kernels), per step.
  double optimizer_step_us = 50.0;
};

// Collective curves and latency for one scope.
struct CollectiveScope {
  // Bus-bandwidth efficiency over the message size (nccl-tests `size`: the
  // full buffer), as a fraction of the link bandwidth, per CollectiveOp.
  std::array<EfficiencyCurve, kCollectiveOps> busbw;
  double latency_us = 0;       // α: fixed cost of one collective
  double step_latency_us = 0;  // added per algorithm step (ring hop, tree level)
  std::int64_t group = 0;      // group size the curves were measured with (0: unknown)
};

// A collective protocol's latency in NCCL's own cost model (NCCL
// src/graph/tuning.cc, ncclTopoTuneModel): a base latency per collective
// plus one hop latency per ring step, that of the node's links for a step
// between GPUs of one node and that of the network for a step between
// nodes; a tree pays 2·((r − 1)·intra + log₂N·inter) over r GPUs per node
// and N nodes. Its bandwidth is `bandwidth_fraction` of the busbw curve
// (LL sends 8 bytes of data per 16, LL128 120 per 128). A ring or tree
// collective runs in the fastest protocol for its size and group, as NCCL
// picks one (ncclTopoGetAlgoTime: latency + bytes / bandwidth).
struct HopLatency {
  double base_us = 0;   // per collective
  double intra_us = 0;  // per step between two GPUs of one node
  double inter_us = 0;  // per step across the network
};
struct CollectiveProtocol {
  std::string name;
  double bandwidth_fraction = 1;
  HopLatency ring, tree;
};

// Which memory curve prices a kernel's bytes: the layers' element-wise
// kernels (Calibration::memory) or the optimizer's update
// (Calibration::optimizer, the memory curve where it is empty).
enum class MemoryKernel : std::uint8_t { Elementwise, Optimizer };

struct Calibration {
  std::string machine;  // what was measured
  std::string backend;  // "cuda", "cpu" or "estimate"
  std::string date;     // ISO 8601 date of the measurement
  std::string source;   // provenance of every number
  // The GPU preset whose peaks the efficiencies are fractions of, as
  // `strata calibrate` measured them ("" when the file does not say): a
  // measured file is used by default only for scenarios on that GPU.
  std::string gpu;

  // GEMM efficiency (fraction of the dtype's dense peak) over the FLOPs of
  // one GEMM (2·m·n·k), per GemmDtype.
  std::array<EfficiencyCurve, kGemmDtypes> gemm;
  // Memory-bound kernels: fraction of HBM bandwidth over the bytes one
  // kernel moves.
  EfficiencyCurve memory;
  // The optimizer's update (MemoryKernel::Optimizer), the same way; empty:
  // the memory curve. A backend whose optimizer streams at another rate
  // than its layers' element-wise kernels measures it apart (the CPU
  // executor's Adam runs several times faster than its GeLU and layer norm).
  EfficiencyCurve optimizer;
  // Copies: fraction of the node's pcie_GBps (h2d, d2h) or nvme_GBps, over
  // the bytes of one copy; [kind][pinned ? 1 : 0] (NVMe ignores pinned).
  std::array<std::array<EfficiencyCurve, 2>, kCopyKinds> copy;
  // Collectives by LinkScope.
  std::array<CollectiveScope, kLinkScopes> collective;
  // Ring and tree collectives' protocols (above). Empty: a ring or tree pays
  // its scope's latency_us plus step_latency_us per step, every step in the
  // scope of the whole group, and the busbw curves carry the small-size
  // regime themselves (what a measured calibration holds). All-to-all and
  // send/recv always use the scopes' latencies.
  std::vector<CollectiveProtocol> protocols;
  Overheads overheads;
  // Fused (flash) attention kernels reach this fraction of what a GEMM of
  // the same FLOPs reaches (forward and backward together); 1 = as a GEMM.
  double attention_fraction = 1.0;
  // The same for cuDNN's fused attention (AttentionKernel::Cudnn); 0: as
  // attention_fraction (a GPU where Transformer Engine runs FlashAttention).
  double cudnn_attention_fraction = 0;
  // Streaming multiprocessors a collective occupies while it runs: NCCL
  // launches one thread block per channel and a block holds its SM, so a
  // GEMM beside it runs on the others (docs/cost-model.md, interference).
  // 0: collectives slow nothing.
  double collective_sms = 0;

  const EfficiencyCurve& gemm_curve(GemmDtype d) const {
    return gemm[static_cast<std::size_t>(d)];
  }
  const EfficiencyCurve& memory_curve(MemoryKernel k) const {
    return k == MemoryKernel::Optimizer && !optimizer.empty() ? optimizer : memory;
  }
  const EfficiencyCurve& copy_curve(CopyKind k, bool pinned) const {
    return copy[static_cast<std::size_t>(k)][pinned ? 1 : 0];
  }
  const CollectiveScope& scope(LinkScope s) const {
    return collective[static_cast<std::size_t>(s)];
  }
  const EfficiencyCurve& busbw_curve(LinkScope s, CollectiveOp op) const {
    return scope(s).busbw[static_cast<std::size_t>(op)];
  }
};

// Every efficiency 1, every latency and overhead 0: the roofline of the
// datasheet peaks. The base a calibration file's absent tables fall back to
// when no other base is given, and the reference for closed-form tests.
Calibration ideal_calibration();

// Reads a calibration object (schema in docs/cost-model.md). Tables the
// object leaves out keep `base`'s. Unknown keys, bad units, unsorted or
// out-of-range points throw InputError naming the file and JSON path.
Calibration read_calibration(const JsonReader& value, const Calibration& base);
Calibration load_calibration_file(const std::string& path, const Calibration& base);
Calibration parse_calibration_text(std::string_view text, const std::string& source,
                                   const Calibration& base);

// Bundled calibrations (configs/calibration/<name>.json), read over
// ideal_calibration(); names in order.
std::vector<std::string> calibration_preset_names();
Calibration calibration_preset(std::string_view name);

// The bundled curves for a GPU preset (by GpuSpec::preset, the preset a GPU
// object was built from, else by GpuSpec::name); for any other GPU
// the a100-80g curves with every size axis scaled by the ratio of this
// GPU's (or its server's) peak to the A100's, so a faster device needs
// proportionally larger work for the same efficiency (docs/cost-model.md).
// Parses JSON: call once per run and pass the result around, not per task.
Calibration default_calibration(const GpuSpec& gpu);

}  // namespace strata::cost

namespace strata {

template <>
struct EnumNames<cost::GemmDtype> {
  static constexpr std::array<std::pair<cost::GemmDtype, std::string_view>, cost::kGemmDtypes> table{
      {{cost::GemmDtype::FP32, "fp32"},
       {cost::GemmDtype::TF32, "tf32"},
       {cost::GemmDtype::FP16, "fp16"},
       {cost::GemmDtype::BF16, "bf16"},
       {cost::GemmDtype::FP8, "fp8"},
       {cost::GemmDtype::FP4, "fp4"}}};
};
template <>
struct EnumNames<cost::CollectiveOp> {
  static constexpr std::array<std::pair<cost::CollectiveOp, std::string_view>, 5> table{
      {{cost::CollectiveOp::AllReduce, "all_reduce"},
       {cost::CollectiveOp::AllGather, "all_gather"},
       {cost::CollectiveOp::ReduceScatter, "reduce_scatter"},
       {cost::CollectiveOp::AllToAll, "all_to_all"},
       {cost::CollectiveOp::SendRecv, "send_recv"}}};
};
template <>
struct EnumNames<cost::LinkScope> {
  static constexpr std::array<std::pair<cost::LinkScope, std::string_view>, 2> table{
      {{cost::LinkScope::IntraNode, "intra_node"}, {cost::LinkScope::InterNode, "inter_node"}}};
};
template <>
struct EnumNames<cost::CopyKind> {
  static constexpr std::array<std::pair<cost::CopyKind, std::string_view>, 4> table{
      {{cost::CopyKind::H2D, "h2d"},
       {cost::CopyKind::D2H, "d2h"},
       {cost::CopyKind::NvmeRead, "nvme_read"},
       {cost::CopyKind::NvmeWrite, "nvme_write"}}};
};

}  // namespace strata
