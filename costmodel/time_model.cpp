#include "costmodel/time_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sim/error.hpp"
#include "sim/limits.hpp"

namespace strata::cost {

namespace {

constexpr double kTera = 1e12;
constexpr double kUs = 1e-6;

double ceil_log2(std::int64_t n) {
  double steps = 0;
  for (std::int64_t v = 1; v < n; v *= 2) steps += 1;
  return steps;
}

// Bus bandwidth (bytes/s) of one scope's link for an op and message size.
double scope_busbw(const NodeSpec& node, const Calibration& cal, LinkScope s, CollectiveOp op,
                   double size) {
  const double link =
      s == LinkScope::IntraNode ? node.intra_node_GBps : node.inter_node_GBps_per_gpu;
  return link * kGB * cal.busbw_curve(s, op).at(size);
}

[[noreturn]] void no_link(LinkScope s) {
  throw Error(std::string("collective needs a ") +
              (s == LinkScope::IntraNode ? "intra_node_GBps" : "inter_node_GBps_per_gpu") +
              " > 0 on the node");
}

// A collective's time, seconds, and the latency terms in it (the rest is
// bandwidth-bound).
struct Split {
  double latency = 0, total = 0;
  static Split of(double latency, double bandwidth) { return {latency, latency + bandwidth}; }
  Split operator+(const Split& o) const { return {latency + o.latency, total + o.total}; }
};

// The layout of a group: n ranks, r per node, N nodes.
struct Layout {
  std::int64_t n, r, nodes;
  bool spans() const { return nodes > 1; }
};

// Bandwidth (bytes/s) a ring (or tree) over the whole group sees: the
// intra-node busbw, bounded by the r NICs of each node once it spans nodes.
double group_busbw(const Layout& g, const NodeSpec& node, const Calibration& cal,
                   CollectiveOp op, double size) {
  double bw = 0;
  if (g.r > 1) {
    bw = scope_busbw(node, cal, LinkScope::IntraNode, op, size);
    if (bw <= 0) no_link(LinkScope::IntraNode);
  }
  if (g.spans()) {
    const double inter =
        static_cast<double>(g.r) * scope_busbw(node, cal, LinkScope::InterNode, op, size);
    if (inter <= 0) no_link(LinkScope::InterNode);
    bw = bw > 0 ? std::min(bw, inter) : inter;
  }
  return bw;
}

const CollectiveScope& latency_scope(const Layout& g, const Calibration& cal) {
  return cal.scope(g.spans() ? LinkScope::InterNode : LinkScope::IntraNode);
}

// The fastest protocol's time for a latency (µs, given a protocol) and a
// bandwidth-bound part at full bandwidth (seconds), NCCL's choice.
template <class Latency>
Split fastest_protocol(const Calibration& cal, double bandwidth_seconds, Latency latency_us) {
  Split best{0, std::numeric_limits<double>::infinity()};
  for (const CollectiveProtocol& p : cal.protocols) {
    const Split s = Split::of(latency_us(p) * kUs, bandwidth_seconds / p.bandwidth_fraction);
    if (s.total < best.total) best = s;
  }
  return best;
}

}  // namespace

double intra_ring_GBps(const NodeSpec& node, std::span<const std::int64_t> gpus) {
  const std::size_t k = gpus.size();
  if (node.nvlinks.empty() || k < 2 || k > kMaxMeshRingGpus) return node.intra_node_GBps;
  const auto side = static_cast<std::size_t>(node.gpus_per_node);
  // Links each way between the members (a link carries one ring each way).
  std::vector<int> cap(k * k, 0);
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < k; ++j)
      if (i != j) cap[i * k + j] = node.nvlinks[static_cast<std::size_t>(gpus[i]) * side + static_cast<std::size_t>(gpus[j])];
  // Every directed ring through all members over NVLinks, from member 0, as
  // its k directed edges (i·k + j), ring after ring in one array; a ring
  // and its reverse are two rings.
  std::vector<std::size_t> edges;
  std::vector<std::size_t> order(k);
  for (std::size_t i = 0; i < k; ++i) order[i] = i;
  do {
    const std::size_t at = edges.size();
    bool linked = true;
    for (std::size_t i = 0; i < k && linked; ++i) {
      edges.push_back(order[i] * k + order[(i + 1) % k]);
      linked = cap[edges.back()] > 0;
    }
    if (!linked) edges.resize(at);
  } while (std::next_permutation(order.begin() + 1, order.end()));
  if (k == 2) edges.resize(std::min<std::size_t>(edges.size(), 2));  // 0→1→0 is its own reverse
  const std::size_t rings = edges.size() / k;
  // The most rings the links carry at once: a depth-first search over the
  // rings in order (a ring may be taken again while its links last), cut
  // where the members' spare outgoing links cannot add more, and stopped
  // after a fixed number of steps with the best found (deterministic).
  int best = 0;
  long steps = 0;
  constexpr long kMaxSteps = 200'000;
  const auto spare_bound = [&] {
    int least = std::numeric_limits<int>::max();
    for (std::size_t i = 0; i < k; ++i) {
      int out = 0;
      for (std::size_t j = 0; j < k; ++j) out += cap[i * k + j];
      least = std::min(least, out);
    }
    return least;
  };
  const int ceiling = spare_bound();
  const auto search = [&](const auto& self, std::size_t from, int taken) -> void {
    best = std::max(best, taken);
    if (best == ceiling || ++steps > kMaxSteps || taken + spare_bound() <= best) return;
    for (std::size_t r = from; r < rings; ++r) {
      const auto e = std::span<const std::size_t>(edges).subspan(r * k, k);
      if (!std::all_of(e.begin(), e.end(), [&](std::size_t x) { return cap[x] > 0; })) continue;
      for (std::size_t x : e) --cap[x];
      self(self, r, taken + 1);
      for (std::size_t x : e) ++cap[x];
      if (best == ceiling || steps > kMaxSteps) return;
    }
  };
  search(search, 0, 0);
  if (best == 0) return node.pcie_GBps > 0 ? node.pcie_GBps : node.intra_node_GBps;
  return std::min(static_cast<double>(best) * node.nvlink_GBps, node.intra_node_GBps);
}

namespace {

// Ring all-reduce / all-gather / reduce-scatter over the whole group, seconds.
Split ring_seconds(CollectiveOp op, double size, const Layout& g, const NodeSpec& node,
                   const Calibration& cal) {
  const double n = static_cast<double>(g.n);
  const double f = op == CollectiveOp::AllReduce ? 2.0 * (n - 1) / n : (n - 1) / n;
  const double steps = op == CollectiveOp::AllReduce ? 2.0 * (n - 1) : n - 1;
  const double bandwidth = f * size / group_busbw(g, node, cal, op, size);
  if (cal.protocols.empty()) {
    const CollectiveScope& sc = latency_scope(g, cal);
    return Split::of((sc.latency_us + steps * sc.step_latency_us) * kUs, bandwidth);
  }
  // NCCL's ring (tuning.cc): a step crosses the network once per node
  // boundary, N − 1 times for all-gather and reduce-scatter, 2(N − 1) for
  // all-reduce; every other step stays inside a node.
  const double nodes = static_cast<double>(g.nodes);
  const double inter = op == CollectiveOp::AllReduce ? 2.0 * (nodes - 1) : nodes - 1;
  const double intra = steps - inter;
  return fastest_protocol(cal, bandwidth, [&](const CollectiveProtocol& p) {
    return p.ring.base_us + intra * p.ring.intra_us + inter * p.ring.inter_us;
  });
}

Split tree_seconds(double size, const Layout& g, const NodeSpec& node, const Calibration& cal) {
  const double bandwidth = 2.0 * size / group_busbw(g, node, cal, CollectiveOp::AllReduce, size);
  if (cal.protocols.empty()) {
    const CollectiveScope& sc = latency_scope(g, cal);
    return Split::of((sc.latency_us + 2.0 * ceil_log2(g.n) * sc.step_latency_us) * kUs, bandwidth);
  }
  // NCCL's double binary tree over nodes, a chain over the r GPUs of each.
  const double chain = static_cast<double>(g.r - 1);
  const double levels = ceil_log2(g.nodes);
  return fastest_protocol(cal, bandwidth, [&](const CollectiveProtocol& p) {
    return p.tree.base_us + 2.0 * (chain * p.tree.intra_us + levels * p.tree.inter_us);
  });
}

// Intra-node phase(s) around an inter-node phase over one GPU per node.
Split hierarchical_seconds(CollectiveOp op, double size, const Layout& g, const NodeSpec& node,
                           const Calibration& cal) {
  const Layout intra{g.r, g.r, 1};
  const Layout inter{g.nodes, 1, g.nodes};
  const double shard = size / static_cast<double>(g.r);
  switch (op) {
    case CollectiveOp::AllReduce:
      return ring_seconds(CollectiveOp::ReduceScatter, size, intra, node, cal) +
             ring_seconds(CollectiveOp::AllReduce, shard, inter, node, cal) +
             ring_seconds(CollectiveOp::AllGather, size, intra, node, cal);
    case CollectiveOp::AllGather:
      return ring_seconds(CollectiveOp::AllGather, shard, inter, node, cal) +
             ring_seconds(CollectiveOp::AllGather, size, intra, node, cal);
    case CollectiveOp::ReduceScatter:
      return ring_seconds(CollectiveOp::ReduceScatter, size, intra, node, cal) +
             ring_seconds(CollectiveOp::ReduceScatter, shard, inter, node, cal);
    default: return {};  // not used for all-to-all and send/recv
  }
}

Split all_to_all_seconds(double size, const Layout& g, const NodeSpec& node,
                         const Calibration& cal) {
  const double n = static_cast<double>(g.n);
  const double r = static_cast<double>(g.r);
  const CollectiveScope& sc = latency_scope(g, cal);
  double t = 0;
  if (g.r > 1) {
    const double bw = scope_busbw(node, cal, LinkScope::IntraNode, CollectiveOp::AllToAll, size);
    if (bw <= 0) no_link(LinkScope::IntraNode);
    t = (r - 1) / n * size / bw;
  }
  if (g.spans()) {
    const double bw = scope_busbw(node, cal, LinkScope::InterNode, CollectiveOp::AllToAll, size);
    if (bw <= 0) no_link(LinkScope::InterNode);
    t = std::max(t, (n - r) / n * size / bw);
  }
  return Split::of((sc.latency_us + (n - 1) * sc.step_latency_us) * kUs, t);
}

Split send_recv_seconds(double size, const Layout& g, const NodeSpec& node,
                        const Calibration& cal) {
  const LinkScope s = g.spans() ? LinkScope::InterNode : LinkScope::IntraNode;
  const double bw = scope_busbw(node, cal, s, CollectiveOp::SendRecv, size);
  if (bw <= 0) no_link(s);
  const CollectiveScope& sc = cal.scope(s);
  return Split::of((sc.latency_us + sc.step_latency_us) * kUs, size / bw);
}

}  // namespace

Time seconds_to_time(double seconds) {
  // Saturates at the longest step Strata models: a longer duration makes the
  // step reach it, and the step is refused (lowering/lower.cpp, coarse.cpp).
  const double ns = seconds * static_cast<double>(kSecond);
  if (std::isnan(ns)) throw Error("seconds_to_time: NaN seconds");
  const double cap = static_cast<double>(kMaxStepTime);
  return static_cast<Time>(std::llround(std::clamp(ns, -cap, cap)));
}

Time compute_time(const GpuSpec& gpu, const Calibration& cal, GemmDtype dtype,
                  Flops matmul_flops, Bytes bytes, KernelShape shape) {
  if (matmul_flops < 0 || bytes < 0 || shape.kernels < 0 || shape.gemm_flops < 0)
    throw Error("compute_time: FLOPs, bytes and kernels must be >= 0");
  if (!(shape.efficiency_scale > 0)) throw Error("compute_time: efficiency_scale must be > 0");
  if (!(shape.quantisation >= 1)) throw Error("compute_time: quantisation must be >= 1");
  const double kernels = static_cast<double>(std::max<std::int64_t>(shape.kernels, 1));
  double seconds = 0;
  if (matmul_flops > 0) {
    const double peak = peak_tflops(gpu, dtype);
    if (peak <= 0)
      throw Error("compute_time: GPU " + gpu.name + " has no " +
                  std::string(enum_name(dtype)) + " peak");
    const Flops per_gemm = shape.gemm_flops > 0 ? shape.gemm_flops : matmul_flops / kernels;
    seconds = shape.quantisation * matmul_flops /
              (peak * kTera * cal.gemm_curve(dtype).at(per_gemm) * shape.efficiency_scale);
  }
  if (bytes > 0) {
    if (gpu.hbm_GBps <= 0) throw Error("compute_time: GPU " + gpu.name + " has no hbm_GBps");
    const double b = static_cast<double>(bytes);
    seconds = std::max(seconds, b / (gpu.hbm_GBps * kGB * cal.memory_curve(shape.memory).at(b / kernels)));
  }
  seconds += static_cast<double>(shape.kernels) * cal.overheads.kernel_launch_us * kUs;
  return seconds_to_time(seconds);
}

double gemm_quantisation(const GpuSpec& gpu, const Calibration& cal, GemmDtype dtype, double m,
                         double n, double k) {
  const GemmTile& tile = gpu.gemm_tile;
  if (!tile.known() || gpu.sms <= 0 || !(m > 0 && n > 0 && k > 0)) return 1.0;
  const double peak = peak_tflops(gpu, dtype);
  if (peak <= 0 || gpu.hbm_GBps <= 0) return 1.0;
  const double sms = static_cast<double>(gpu.sms);
  const double area = static_cast<double>(tile.m) * static_cast<double>(tile.n);
  const double flops = 2.0 * m * n * k;
  const double ideal = flops / (peak * kTera * cal.gemm_curve(dtype).at(flops));
  // The output's bytes per element: fp32 GEMMs write fp32, every other
  // dtype a 16-bit output.
  const double out = dtype == GemmDtype::FP32 || dtype == GemmDtype::TF32 ? 4.0 : 2.0;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [tm, tn] : {std::pair{tile.m, tile.n}, std::pair{tile.n, tile.m}}) {
    const double tiles = std::ceil(m / static_cast<double>(tm)) * std::ceil(n / static_cast<double>(tn));
    if (tiles < sms) return 1.0;
    for (int s = 1; s <= kMaxSplitK; ++s) {
      const double splits = static_cast<double>(s);
      const double waves = std::ceil(splits * tiles / sms);
      double q = waves * sms * area / (splits * m * n);
      if (s > 1) {
        const double bytes = (2.0 * splits * 4.0 + out) * m * n;
        q += (bytes / (gpu.hbm_GBps * kGB * cal.memory_curve(MemoryKernel::Elementwise).at(bytes)) +
              cal.overheads.kernel_launch_us * kUs) / ideal;
      }
      best = std::min(best, q);
      // Full waves: more splits only add partials.
      if (waves * sms == splits * tiles) break;
    }
  }
  return best;
}

double op_quantisation(const GpuSpec& gpu, const Calibration& cal, GemmDtype dtype, const Op& op,
                       bool backward) {
  if (op.kind != OpKind::Linear || op.matrices <= 0 || op.rows <= 0 || op.cols <= 0 || op.fwd_flops <= 0 ||
      !gpu.gemm_tile.known())
    return 1.0;
  const double k = static_cast<double>(op.rows), n = static_cast<double>(op.cols);
  const double m = op.fwd_flops / (2.0 * k * n * static_cast<double>(op.matrices));
  const bool split = std::any_of(op.products.begin(), op.products.end(), [](double x) { return x > 0; });
  double sum = 0, weight = 0;
  const auto add = [&](double share) {
    if (!(share > 0)) return;
    const double cols = share * n;
    sum += share * (backward ? 0.5 * (gemm_quantisation(gpu, cal, dtype, m, k, cols) +
                                      gemm_quantisation(gpu, cal, dtype, k, cols, m))
                             : gemm_quantisation(gpu, cal, dtype, m, cols, k));
    weight += share;
  };
  if (split)
    for (const double share : op.products) add(share);
  else
    add(1.0);
  return weight > 0 ? sum / weight : 1.0;
}

KernelShape op_kernels(const Op& op, bool backward) {
  const Flops flops = backward ? op.bwd_flops : op.fwd_flops;
  if (op.kind == OpKind::Linear && op.matrices > 0) {
    // Forward: one GEMM per matrix. Backward: input gradient and weight
    // gradient per matrix, each the forward GEMM's size.
    const std::int64_t gemms = backward ? 2 * op.matrices : op.matrices;
    return {flops / static_cast<double>(gemms), gemms};
  }
  if (flops > 0) {
    const std::int64_t k = backward ? 2 : 1;
    return {flops / static_cast<double>(k), k};
  }
  return {0, backward ? op.bwd_kernels : op.fwd_kernels};
}

GemmDtype op_gemm_dtype(Precision p, const Op& op, LayerKind layer) {
  if (!quantized_gemms(p)) return gemm_dtype(p);
  if (op.unquantized) return GemmDtype::BF16;
  return is_attention_product(op.kind) || layer != LayerKind::Block ? GemmDtype::BF16 : gemm_dtype(p);
}

Time op_time(const GpuSpec& gpu, const Calibration& cal, Precision p, const Op& op,
             bool backward, LayerKind layer, Fp8Recipe recipe) {
  KernelShape shape = op_kernels(op, backward);
  if (op.kind == OpKind::Attention)
    shape.efficiency_scale = op.cudnn && cal.cudnn_attention_fraction > 0 ? cal.cudnn_attention_fraction
                                                                          : cal.attention_fraction;
  const GemmDtype dtype = op_gemm_dtype(p, op, layer);
  shape.quantisation = op_quantisation(gpu, cal, dtype, op, backward);
  const Flops flops = backward ? op.bwd_flops : op.fwd_flops;
  const Bytes bytes = backward ? op.bwd_bytes : op.fwd_bytes;
  Time t = compute_time(gpu, cal, dtype, flops, bytes, shape);
  if ((dtype != GemmDtype::FP8 && dtype != GemmDtype::FP4) || op.kind != OpKind::Linear) return t;
  // NVFP4 runs only where the GPU has an FP4 peak (validate's
  // precision-supported): natively.
  if (p == Precision::FP8 && recipe != Fp8Recipe::Delayed && recipe != Fp8Recipe::Tensorwise &&
      gpu.fp8_block_scaling == Fp8BlockScaling::Emulated)
    t = std::max(t, seconds_to_time(to_seconds(compute_time(gpu, cal, GemmDtype::BF16, flops, bytes, shape)) /
                                    kEmulatedBlockFp8Speedup));
  const GemmQuantization q = gemm_quantization(p, recipe, gpu.fp8_block_scaling == Fp8BlockScaling::Native);
  // The elements cast: Transformer Engine's recipes cast the pass's new
  // operand once (the weights are cached for the step); torchao's rowwise
  // casts every GEMM operand along its GEMM's reduction axis, the input and
  // the weight forward, the output gradient twice, the weight and the saved
  // input again backward.
  const double w = static_cast<double>(op.matrix_params());
  double elems = backward ? op.gemm_out_elems : op.gemm_in_elems;
  double casts = 1;
  if (p == Precision::FP8 && recipe == Fp8Recipe::Rowwise) {
    elems = backward ? 2 * op.gemm_out_elems + w + op.gemm_in_elems : op.gemm_in_elems + w;
    casts = backward ? 4 : 2;
  }
  const auto traffic = static_cast<Bytes>(std::llround(elems * (2 * q.reads + q.bytes_written())));
  if (traffic > 0)
    t += compute_time(gpu, cal, dtype, 0, traffic, {0, static_cast<std::int64_t>(casts * q.reads)});
  return t;
}

CollectiveCost collective_cost(CollectiveOp op, Bytes bytes, std::int64_t group,
                               std::int64_t ranks_per_node, const NodeSpec& node,
                               const Calibration& cal, CollectiveAlgorithm algo) {
  if (bytes < 0) throw Error("collective_time: bytes must be >= 0");
  if (group < 1) throw Error("collective_time: group must be >= 1");
  if (ranks_per_node < 1) throw Error("collective_time: ranks_per_node must be >= 1");
  CollectiveCost out;
  out.algorithm = algo == CollectiveAlgorithm::Auto ? CollectiveAlgorithm::Ring : algo;
  if (group == 1 || bytes == 0) return out;
  const std::int64_t r = std::min(ranks_per_node, group);
  const Layout g{group, r, (group + r - 1) / r};
  const double size = static_cast<double>(bytes);

  Split seconds;
  switch (op) {
    case CollectiveOp::AllToAll:
      out.algorithm = CollectiveAlgorithm::Ring;
      seconds = all_to_all_seconds(size, g, node, cal);
      break;
    case CollectiveOp::SendRecv:
      out.algorithm = CollectiveAlgorithm::Ring;
      seconds = send_recv_seconds(size, g, node, cal);
      break;
    default: {
      // Auto is NCCL's own choice, among the algorithms it runs: ring, and
      // tree for all-reduce (NCCL_ALGO's Tree and Ring; CollNet needs
      // in-network reduction, NVLS NVLink SHARP, neither modelled).
      // Hierarchical phases are a framework's choice (Horovod's
      // hierarchical all-reduce, ZeRO++'s hpZ), priced only when asked for.
      const bool tree_ok = op == CollectiveOp::AllReduce;
      const bool hier_ok = g.spans() && g.r > 1;
      auto price = [&](CollectiveAlgorithm a) {
        switch (a) {
          case CollectiveAlgorithm::Tree: return tree_seconds(size, g, node, cal);
          case CollectiveAlgorithm::Hierarchical:
            return hierarchical_seconds(op, size, g, node, cal);
          default: return ring_seconds(op, size, g, node, cal);
        }
      };
      if (algo == CollectiveAlgorithm::Auto) {
        out.algorithm = CollectiveAlgorithm::Ring;
        seconds = price(CollectiveAlgorithm::Ring);
        if (tree_ok) {
          const Split t = price(CollectiveAlgorithm::Tree);
          if (t.total < seconds.total) seconds = t, out.algorithm = CollectiveAlgorithm::Tree;
        }
      } else {
        // An algorithm that does not apply (tree for all-gather, hierarchical
        // inside one node or with one GPU per node) is priced as a ring.
        if ((algo == CollectiveAlgorithm::Tree && !tree_ok) ||
            (algo == CollectiveAlgorithm::Hierarchical && !hier_ok))
          out.algorithm = CollectiveAlgorithm::Ring;
        seconds = price(out.algorithm);
      }
    }
  }
  out.time = seconds_to_time(seconds.total);
  out.latency = std::min(out.time, seconds_to_time(seconds.latency));
  out.spans = g.spans();
  return out;
}

Time copy_time(Bytes bytes, CopyKind kind, bool pinned, const NodeSpec& node,
               const Calibration& cal) {
  if (bytes < 0) throw Error("copy_time: bytes must be >= 0");
  if (bytes == 0) return 0;
  const bool nvme = kind == CopyKind::NvmeRead || kind == CopyKind::NvmeWrite;
  const double link = nvme ? node.nvme_GBps : node.pcie_GBps;
  if (link <= 0)
    throw Error(std::string("copy_time: node has no ") + (nvme ? "nvme_GBps" : "pcie_GBps"));
  const double b = static_cast<double>(bytes);
  const double seconds =
      cal.overheads.copy_launch_us * kUs + b / (link * kGB * cal.copy_curve(kind, pinned).at(b));
  return seconds_to_time(seconds);
}

}  // namespace strata::cost
