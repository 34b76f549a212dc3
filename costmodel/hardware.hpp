#pragma once
// Hardware description: a GPU, the node (server) that holds several, and a
// cluster of identical nodes. Bandwidths are decimal GB/s (1e9 bytes/s) in
// one direction, as vendors quote them halved from bidirectional figures;
// memory sizes are GiB. Peaks are dense (no structured sparsity).
#include <cstdint>
#include <string>

#include "costmodel/techniques.hpp"
#include "sim/units.hpp"

namespace strata::cost {

struct PeakTflops {
  double fp32 = 0;  // 0: not supported
  double tf32 = 0;
  double fp16 = 0;
  double bf16 = 0;
  double fp8 = 0;
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
  std::string source;
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
  NodeSpec server;  // the GPU's standard server (DGX/HGX), cluster defaults
  std::string source;
  // The GPU preset it was built from, the innermost where presets build on
  // presets (h800 on h100-sxm); "" for a GPU object without one. Its
  // bundled calibration (default_calibration) applies whatever the object
  // renames or changes, as the same chip's efficiencies.
  std::string preset;

  Bytes memory_bytes() const { return static_cast<Bytes>(memory_GiB * static_cast<double>(kGiB)); }
  // Dense matrix-multiply peak for a training precision (fp32 uses fp32, the
  // mixed precisions their 16/8-bit tensor-core peak). 0 when unsupported.
  double peak_tflops(Precision p) const;
};

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  NodeSpec node;
  std::int64_t nodes = 1;
  std::string source;

  std::int64_t gpus() const { return node.gpus_per_node * nodes; }
};

}  // namespace strata::cost
