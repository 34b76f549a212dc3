#pragma once
// The cost model's answers to the lowering (lower.hpp): layer passes from
// the op chain priced by costmodel/time_model.hpp, collectives from the
// group's size and placement in the rank mesh, copies over PCIe/NVMe.
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/ops.hpp"
#include "lowering/lower.hpp"
#include "strategies/rank_mesh.hpp"

namespace strata::strategies {

class ModelStepCosts final : public StepCosts {
 public:
  // Uses the scenario's calibration file when it names one, else the bundled
  // curves for its GPU.
  explicit ModelStepCosts(const Scenario& sc);
  ModelStepCosts(const Scenario& sc, cost::Calibration calibration);

  Time layer(const cost::Layer& layer, Pass pass, bool selective_only) const override;
  Time layer_tail(const cost::Layer& layer) const override;
  Time layer_comm(const cost::Layer& layer, CommKind kind, Pass pass) const override;
  Transfer collective(Collective op, Group group, Bytes bytes_per_rank) const override;
  Transfer p2p(Bytes bytes) const override;
  Transfer copy(Bytes bytes, CopyDir dir) const override;
  // The cluster node's per-GPU NVLink, network and PCIe rates; none for
  // Strata's executors.
  LinkRates link_rates() const override;
  Time elementwise(Bytes bytes) const override;
  Time gemm(Flops flops) const override;
  Time optimizer_step(double params, bool on_host) const override;
  Time overhead_per_microbatch() const override;
  Time overhead_per_step() const override;
  // Calibration::collective_sms over the GPU's SMs; 0 for Strata's
  // executors (their steps run one after another, priced as they ran) or
  // a GPU whose SM count is unknown.
  double interference_fraction() const override;

  // Host memory bandwidth one node's CPU optimizer steps share (ZeRO-Offload):
  // a documented estimate for a two-socket server (docs/cost-model.md).
  static constexpr double kHostOptimizerGBps = 100.0;

  const cost::Calibration& calibration() const { return cal_; }
  // The op chain priced (layer() takes its layers).
  const cost::OpChain& chain() const { return chain_; }

  // A cluster of node groups: each stage's GPUs' costs (a stage on several
  // groups runs each task at the pace of the slowest). Otherwise this.
  const StepCosts& stage(int s) const override;

 private:
  struct Stages;
  // A communication group of the representative rank (rank 0): its
  // placement and the node as the group sees it, the cluster's with
  // intra_node_GBps the bandwidth of a ring through its members on rank 0's
  // node (cost::intra_ring_GBps: on a DGX-1's NVLink mesh a pair of GPUs
  // has one or two links, not a GPU's six).
  struct PricedGroup {
    GroupPlacement at;
    cost::NodeSpec node;
  };
  PricedGroup priced(const GroupPlacement& at, std::span<const std::int64_t> members) const;
  Transfer ring(cost::CollectiveOp op, Bytes bytes, const PricedGroup& g) const;
  // The host's time to issue `kernels` (host_dispatch_us_ each).
  Time host_time(std::int64_t kernels) const;

  const Scenario& sc_;
  cost::Calibration cal_;
  double host_dispatch_us_;  // implementation.host_dispatch_us, 0 when executed
  RankMesh mesh_;
  cost::OpChain chain_;
  // Index of a layer of chain_ in pass_: the embedding, the head, then
  // each kind of block.
  static std::size_t priced_index(const cost::Layer& l);
  // [priced_index][pass]: forward, backward, full recompute (= forward).
  std::vector<std::array<Time, 3>> pass_;
  // Per kind of block: its rerun under the plan's selective policy, and the
  // communication it blocks on per layer (forward, backward).
  std::vector<Time> selective_;
  // Per kind of block: layer_tail.
  std::vector<Time> tail_;
  struct BlockComm {
    std::array<Time, 2> tp{}, cp{}, ep{};
  };
  std::vector<BlockComm> comm_;
  PricedGroup tp_g_, cp_g_, dp_g_, ep_g_, edp_g_, pp_g_, tie_g_;
  std::shared_ptr<const Stages> stages_;  // with cluster.groups
};

// predict_step with ModelStepCosts.
StepPrediction predict_step(const Scenario& sc, sim::RunResult* run = nullptr,
                            LoweredStep* lowered = nullptr);

}  // namespace strata::strategies
