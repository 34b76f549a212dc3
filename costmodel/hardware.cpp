#include "costmodel/hardware.hpp"

namespace strata::cost {

double GpuSpec::peak_tflops(Precision p) const {
  switch (p) {
    case Precision::FP32: return tflops.fp32;
    case Precision::FP16: return tflops.fp16;
    case Precision::BF16: return tflops.bf16;
    case Precision::FP8: return tflops.fp8;
    case Precision::FP4: return tflops.fp4;
  }
  return 0;
}

double ClusterSpec::mean_peak_tflops(Precision p) const {
  if (groups.empty() || nodes <= 0) return gpu.peak_tflops(p);
  double sum = 0;
  for (const auto& g : groups) sum += g.gpu.peak_tflops(p) * static_cast<double>(g.nodes);
  return sum / static_cast<double>(nodes);
}

std::string ClusterSpec::gpus_text() const {
  if (groups.empty()) return std::to_string(gpus()) + " x " + gpu.name;
  std::string out = std::to_string(gpus()) + " GPUs: ";
  for (std::size_t g = 0; g < groups.size(); ++g)
    out += (g ? " + " : "") + std::to_string(groups[g].nodes * node.gpus_per_node) + " x " + groups[g].gpu.name +
           " (" + groups[g].name + ")";
  return out;
}

std::size_t ClusterSpec::group_of_node(std::int64_t n) const {
  std::int64_t end = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    end += groups[g].nodes;
    if (n < end) return g;
  }
  return 0;
}

ClusterSpec ClusterSpec::group_view(std::size_t g) const {
  ClusterSpec c = *this;
  c.groups.clear();
  if (g < groups.size()) {
    c.gpu = groups[g].gpu;
    c.node = groups[g].node;
  }
  return c;
}

}  // namespace strata::cost
