#pragma once
// Lowering a plan into the task graph of one training step, and predicting
// its time by replaying the graph.
//
// Each pipeline stage is lowered once, as the representative of the ranks
// that do identical work (any dp/tp/cp index); collectives are single tasks
// whose duration the cost model gives from the group's size and placement,
// their bandwidth-bound part a flow over the rank's links (Transfer below;
// step_program.hpp, "ProgramFlow"), so transfers that meet on a link share it.
// Per stage: a compute stream running the pipeline schedule layer by layer
// (forward, recompute, backward, blocking tensor/context/expert-parallel
// communication, the optimizer step), a communication stream for data-
// parallel and ZeRO collectives (overlapped with backward when the plan says
// so), a point-to-point stream for pipeline sends, host<->device copy engines
// for offload, and a CPU worker pool for ZeRO-Offload's optimizer step.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/ops.hpp"
#include "sim/engine.hpp"
#include "sim/limits.hpp"
#include "sim/task_graph.hpp"
#include "lowering/layer_plan.hpp"
#include "strategies/scenario.hpp"
#include "lowering/schedule.hpp"

namespace strata::strategies {
// What a communication task is for; the keys of `exposed_comm` in outputs.
enum class CommKind : std::uint8_t { None, DP, TP, PP, CP, EP, Offload };
}
namespace strata {
template <>
struct EnumNames<strategies::CommKind> {
  static constexpr std::array<std::pair<strategies::CommKind, std::string_view>, 7> table{{
      {strategies::CommKind::None, "none"},
      {strategies::CommKind::DP, "dp"},
      {strategies::CommKind::TP, "tp"},
      {strategies::CommKind::PP, "pp"},
      {strategies::CommKind::CP, "cp"},
      {strategies::CommKind::EP, "ep"},
      {strategies::CommKind::Offload, "offload"},
  }};
};
}  // namespace strata

namespace strata::strategies {

inline constexpr std::size_t kCommKinds = enum_count<CommKind>();

// SendRecv: each member sends and receives `bytes` (parameter-server push or pull).
enum class Collective : std::uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv };
// The group a collective runs over.
enum class Group : std::uint8_t { TP, CP, DP, EP, ExpertDP, EmbeddingTie };
enum class CopyDir : std::uint8_t { ToHost, ToDevice, NvmeRead, NvmeWrite };

// Which of a rank's links a transfer's bandwidth-bound part crosses
// (docs/step-time.md, "Shared links"): its NVLink (or the PCIe the node's
// GPUs reach each other over), the network (the rank's NIC and the PCIe
// link between its GPU and the NIC), or its PCIe link to the host, out
// (device to host) or in.
enum class Path : std::uint8_t { None, NvLink, Network, HostOut, HostIn };

// A communication task alone: `latency` fixed, then its bandwidth-bound part,
// `bandwidth` long at its path's full rate. With Path::None it is all fixed
// (what closed-form tests give, and a Time converts to).
struct Transfer {
  Time latency = 0;
  Time bandwidth = 0;
  Path path = Path::None;
  Transfer() = default;
  Transfer(Time fixed) : latency(fixed) {}  // NOLINT: a fixed time is a transfer
  Transfer(Time latency_, Time bandwidth_, Path path_) : latency(latency_), bandwidth(bandwidth_), path(path_) {}
  Time total() const { return capped_sum(latency, bandwidth); }
  bool operator==(const Transfer&) const = default;
  // This, then `next` over the same links (its bandwidth part joins ours) or
  // over others (its whole time is fixed here).
  Transfer then(const Transfer& next) const {
    if (bandwidth == 0) return {capped_sum(latency, next.latency), next.bandwidth, next.path};
    if (next.path == path || next.bandwidth == 0)
      return {capped_sum(latency, next.latency), capped_sum(bandwidth, next.bandwidth), path};
    return {capped_sum(latency, next.total()), bandwidth, path};
  }
};

// One rank's link rates, GB/s each way (NodeSpec's per-GPU figures); 0: the
// link is not modelled and transfers over it keep their fixed time.
struct LinkRates {
  double nvlink_GBps = 0, network_GBps = 0, pcie_GBps = 0;
};

// Durations the lowering needs for one stage's representative rank. A cost
// model answers (costs.hpp); tests answer with closed forms.
class StepCosts {
 public:
  virtual ~StepCosts() = default;
  // One pass of `layer` over one microbatch on this rank (a recompute pass is
  // a forward over what the policy drops: the whole layer, or with
  // `selective_only` what the plan's selective policy reruns, cost::rerun_share).
  virtual Time layer(const cost::Layer& layer, Pass pass, bool selective_only = false) const = 0;
  // The forward of a block's last linear layer and the ops after it: what a
  // rerun that refills the block's saved tensors and makes no output skips
  // (the CPU kernels rerun the last layer of a recomputed segment so). 0:
  // nothing priced apart.
  virtual Time layer_tail(const cost::Layer& layer) const {
    (void)layer;
    return 0;
  }
  // Tensor-, context- and expert-parallel communication one block of this
  // kind blocks on, per microbatch and pass (0 for the embedding and head,
  // whose passes hold theirs).
  virtual Time layer_comm(const cost::Layer& layer, CommKind kind, Pass pass) const = 0;
  virtual Transfer collective(Collective op, Group group, Bytes bytes_per_rank) const = 0;
  virtual Transfer p2p(Bytes bytes) const = 0;
  // A memory-bound kernel touching `bytes` (compression encode/decode), and
  // matrix products of `flops` (PowerSGD's projections).
  virtual Time elementwise(Bytes bytes) const = 0;
  virtual Time gemm(Flops flops) const = 0;
  virtual Transfer copy(Bytes bytes, CopyDir dir) const = 0;
  // The rate of each link a Transfer's path names; none by default (every
  // transfer fixed, as alone).
  virtual LinkRates link_rates() const { return {}; }
  // The optimizer step over `params` parameters held by this rank, on the GPU
  // or (ZeRO-Offload) on the host CPU.
  virtual Time optimizer_step(double params, bool on_host) const = 0;
  // Framework work the GPU waits on: per forward or backward of a
  // microbatch's chunk, and once per step.
  virtual Time overhead_per_microbatch() const { return 0; }
  virtual Time overhead_per_step() const { return 0; }
  // The fraction by which compute slows while a collective runs beside it
  // (the share of the GPU's SMs the collective holds); 0: none.
  virtual double interference_fraction() const { return 0; }
  // The costs of pipeline stage s's ranks: where stages run on different
  // GPUs (cluster.groups), the answers for the stage's own; else this
  // object's.
  virtual const StepCosts& stage(int s) const {
    (void)s;
    return *this;
  }
};

// The gradients one pipeline stage reduces over dp: its transformer blocks,
// the embedding (first stage) and the head (last stage).
struct StageGradients {
  std::vector<std::int64_t> blocks;  // per kind of block (OpChain::kinds); empty: none
  bool embedding = false, head = false;
  std::int64_t block_count() const;
  double block_params(const cost::OpChain& chain) const;
  double params(const cost::OpChain& chain) const;
};

// A compressed data-parallel gradient exchange of one stage's gradients:
// the encode and decode kernels on the compute stream and the collective
// rounds between them, each (operation, bytes of the whole buffer: an
// all-gather's output, a reduce-scatter's input, an all-reduce's data).
// What each rank sends, for n gradients (the CPU executor exchanges exactly
// these, backend/cpu/compression.hpp):
//   topk      k (int32 index, fp16 value) pairs, padded to 4 bytes; all-gathered
//   randomk   the k values at indices drawn from a seed every rank shares, in
//             the gradient type; all-reduced
//   qsgd      ⌈n/512⌉ fp32 norms and n·(bits+1) bits (level in 0..2^bits−1,
//             sign) in 32-bit words; all-gathered
//   onebit    to each rank, its chunk as sign bits (⌈⌈n/dp⌉/32⌉ words) and an
//             fp32 scale per 512 (a compressed reduce-scatter: an all-to-all of
//             dp such blocks); then the reduced chunk in the same form, all-gathered
//   powersgd  P = M·Q (rows × r per matrix, r ≤ min(rows, cols)) with the
//             uncompressed vectors (biases, norms), then Q = Mᵀ·P (cols × r),
//             each all-reduced in fp32
struct GradientExchange {
  Time encode = 0, decode = 0;
  std::vector<std::pair<Collective, double>> rounds;
};
GradientExchange compressed_exchange(const Plan& plan, const cost::OpChain& chain,
                                     const StageGradients& stage, const StepCosts& costs);

// What a task does, for executors that run the graph for real (the
// simulator needs only durations). Task ids say the same for people.
enum class TaskOp : std::uint8_t {
  Framework,       // framework overhead (nothing to run)
  Forward,         // forward of `part` (layer `layer`) for `microbatch`
  Backward,        // backward of `part`
  Recompute,       // recompute of layer `layer` (attention core only when `core_only`)
  LayerComm,       // blocking tensor/context/expert-parallel communication of a layer (`pass`)
  InputGather,     // partition_activations: all-gather over tp of the input layer `layer` kept split
  SendActivation,  // pipeline send of model chunk `chunk`'s output
  SendGradient,    // pipeline send of the gradient of model chunk `chunk`'s input
  DpReduce,        // bucketed gradient reduction over dp: `layers`, plus `head`/`embedding`
  PsPush,          // parameter server: push of a bucket (as DpReduce)
  PsPull,          // parameter server: pull of the updated weights
  EmbeddingTie,    // all-reduce of the tied word embedding's gradient, first and last stage
  Zero3Gather,     // ZeRO-3 all-gather of layer `layer`'s parameters (or the embedding's, the head's: `part`) before its `pass`
  Zero3Reduce,     // ZeRO-3 reduce-scatter of layer `layer`'s gradients (or `head`/`embedding`)
  WeightFetch,     // weight offload: layer `layer`'s weights to the device before its `pass`
  WeightFromNvme,  // ... read from NVMe into host staging first (weights on NVMe)
  Offload,         // layer `layer`'s saved activations to the host pool
  Prefetch,        // ... and back before its backward
  GradsToHost,     // ZeRO-Offload: gradients to the host
  StatesFromNvme,  // ZeRO-Infinity: optimizer states from NVMe
  OptimizerStep,   // the optimizer step (on the host with ZeRO-Offload)
  StatesToNvme,
  WeightsToDevice,  // ZeRO-Offload: updated weights back to the device
  WeightsToNvme,    // weights on NVMe: the stepped 16-bit weights written back
  GatherWeights,    // ZeRO-1/2: all-gather of the updated weights
  CompressEncode,
  CompressRound,    // one collective round of compressed gradient exchange (`round`)
  CompressDecode,
};
enum class Part : std::uint8_t { None, Embedding, Layer, Head };

struct TaskInfo {
  TaskOp op = TaskOp::Framework;
  Part part = Part::None;
  std::int32_t layer = -1;       // global layer index, −1 when none
  std::int32_t microbatch = -1;  // −1 when none
  std::int32_t chunk = -1;       // model chunk (pipeline order), −1 when none
  Pass pass = Pass::Forward;     // LayerComm, Zero3Gather, WeightFetch, WeightFromNvme
  bool core_only = false;        // Recompute: the attention core only (selective)
  // DpReduce, PsPush, Zero3Reduce: the gradients reduced.
  std::vector<std::int32_t> layers;
  bool head = false, embedding = false;
  std::int32_t round = -1;   // CompressRound
  std::int32_t bucket = -1;  // DpReduce, PsPush: the bucket's place in reduction order
};

// The step program (step_program.hpp) at layer granularity, as the task
// graph the simulator replays and the executors run.
struct LoweredStep {
  sim::TaskGraph graph;
  std::vector<CommKind> comm_kind;  // by task index: what a communication task is for
  std::vector<TaskInfo> info;       // by task index: what the task does
  int stages = 0;
  std::vector<sim::PoolId> gpu_pool, host_pool;  // by stage
  LayerPlan layers;                 // what each layer keeps for its backward, and where
  // Buffer b is allocated as the tensors [tensors_at[b], tensors_at[b + 1])
  // of `tensors` when that range is not empty, else as one (StepProgram::
  // splits); empty when no buffer is split.
  std::vector<std::uint32_t> tensors_at;
  std::vector<Bytes> tensors;
};

// `layers`, when given, replaces what plan_layers decides for the plan (the
// joint offload planner times its candidates so).
LoweredStep lower_step(const Scenario& sc, const StepCosts& costs, const LayerPlan* layers = nullptr);

// Where one stage's time went, summing to the step time.
struct TimeBreakdown {
  Time compute = 0;
  Time recompute = 0;
  std::array<Time, kCommKinds> exposed_comm{};  // by CommKind
  Time bubble = 0;
  Time offload_stall = 0;
  Time optimizer = 0;
  // Compute slowed by the collectives beside it (interference_fraction of
  // the time both ran), less what waits for communication absorb.
  Time interference = 0;
  // The compute lane's time while a collective ran beside it (what the
  // interference is priced from; not a part of the step).
  Time beside_collectives = 0;
  Time total() const;
};

struct StepPrediction {
  Time step_time = 0;
  int critical_stage = 0;  // the stage with the most compute
  TimeBreakdown breakdown;  // of the critical stage
  std::vector<TimeBreakdown> per_stage;  // every stage's, where asked for (prediction)
  double bubble_fraction = 0;
  Flops model_flops_per_step = 0;     // whole model, global batch (Korthikanti Eq. 7)
  Flops hardware_flops_per_step = 0;  // plus recompute
  std::uint64_t tasks = 0;
  // PipeDream and PipeDream-2BW (not executed): the pipeline's fill and
  // drain, paid once per run rather than per step; not in step_time.
  Time pipeline_fill = 0;
};

// Completes a prediction whose step_time and breakdowns (with interference)
// are the replayed program's: a schedule without flushes (PipeDream,
// PipeDream-2BW) drops the critical stage's fill-and-drain idle from the
// step (`pipeline_fill`), as steps follow one another through a full
// pipeline; then bubble_fraction, and model_flops_per_step and
// hardware_flops_per_step: the whole model for the global batch, each
// matrix product once (Korthikanti Eq. 7), and that plus what the layers'
// recompute choices (`keeps`) redo.
void finish_prediction(const Scenario& sc, const Keeps& keeps, StepPrediction& pr);

// Throws InputError (the scenario's file) when the step's tasks, one after
// another, take `serial_ns` >= kMaxStepTime (sim/limits.hpp): no schedule of
// them is longer, so below it every time either level sums stays in 64 bits.
void require_countable_step(const Scenario& sc, double serial_ns, std::uint64_t tasks);

// Builds the step program at layer granularity, replays and attributes it;
// with `run` or `lowered` the replay is the engine's over the program's task
// graph (for traces and executors), else the program's own replay (the same
// figures, without the graph).
StepPrediction predict_step(const Scenario& sc, const StepCosts& costs,
                            sim::RunResult* run = nullptr, LoweredStep* lowered = nullptr,
                            const LayerPlan* layers = nullptr);

}  // namespace strata::strategies

