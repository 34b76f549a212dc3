#pragma once
// A training plan: every axis of the plan space (DESIGN.md "The plan space")
// as typed data with documented defaults. Parsing and validation live in
// scenario_io.cpp; the rules that relate the plan to a model and a cluster
// live in validate.cpp.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "costmodel/ops.hpp"
#include "costmodel/techniques.hpp"
#include "sim/allocator_mode.hpp"
#include "sim/names.hpp"

namespace strata::strategies {

using cost::AttentionKernel;
using cost::CrossEntropy;
using cost::Precision;
using cost::Recompute;

enum class Schedule { GPipe, OneFOneB, Interleaved, PipeDream, PipeDream2BW };
enum class OffloadTarget { None, Cpu, Nvme };
enum class OffloadPlanner { All, Vdnn, Lifetime, Priority, Joint };
enum class CompressionMethod { None, TopK, RandomK, Qsgd, OneBit, PowerSgd };
enum class Optimizer { Sgd, Momentum, Adam, AdamW, Adam8bit, Adam4bit, Adafactor, Sm3, Lamb, Lars };
// Adafactor and SM3 keep statistics per weight-matrix shape.
inline bool is_factored(Optimizer opt) { return opt == Optimizer::Adafactor || opt == Optimizer::Sm3; }
enum class DpTopology { AllReduce, ParameterServer };
// The number type of the optimizer's statistics (Adam's moments, momentum):
// fp32, or bf16 (DeepSeek-V3, arXiv:2412.19437 Sec. 3.3.3: "BF16 ... to
// track the first and second moments in the AdamW optimizer"; Megatron-Core's
// --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype
// bf16). The fp32 master weights stay fp32.
enum class StateDtype { FP32, BF16 };
enum class TpCommOverlap { None, Bulk, Ring };
// How context parallelism brings each rank the keys and values of the other
// ranks' tokens (Megatron-Core's --cp-comm-type, Transformer Engine's
// cp_comm_type): P2p, ring attention, cp − 1 exchanges of a K/V chunk each
// way, each overlapped with the attention of the chunk in hand
// (AttnFuncWithCPAndKVP2P); AllGather, one all-gather of the group's K/V
// before the attention core and, backward, another all-gather and a
// reduce-scatter of their gradients, none of it overlapped
// (AttnFuncWithCPAndKVAllGather: "KV all-gather between CP ranks is
// exposed"; the Llama 3 paper, Sec. 3.3.2; the CPU backend's GptModel);
// AllGatherRing, PyTorch's context parallelism with its all-gather rotation
// (torch.distributed.tensor.experimental context_parallel, torchtitan's
// default "allgather"): one all-gather of the group's K | V issued before the
// first (diagonal) sub-attention and awaited after it, each way, and the K/V
// gradients passed round the ring in fp32, cp exchanges of which the first
// cp − 1 each overlap one sub-step and the last is awaited, exposed.
enum class CpComm : std::uint8_t { P2p, AllGather, AllGatherRing };
// The dtype data-parallel gradients travel and are summed in (the reduce-
// scatter or all-reduce of every gradient collective): the dtype they
// accumulate in (fp32 with fp32_grad_accumulation or fp32 training, else
// the plan's 16-bit one), or set apart from it, as PyTorch FSDP's
// MixedPrecision(reduce_dtype), DeepSpeed's communication_data_type and
// Megatron-LM v2.x's --fp32-allreduce do.
enum class GradReduceDtype : std::uint8_t { Accumulation, FP32, BF16, FP16 };
enum class ParallelDim { TP, CP, DP, PP };
// How balanced pipeline chunks share the model (without stage_layers):
// Balanced spreads the transformer blocks evenly, the embedding riding in
// the first chunk and the output layer and loss in the last;
// EmbeddingHeadAsLayers counts the embedding and the output layer with its
// loss as one block each while balancing, so the first and last chunks hold
// one block fewer, none where blocks + 2 = chunks (Llama 3 405B: 126 blocks,
// 128 chunks). The latter is torchtitan's split (generate_llm_fqn_per_model_part,
// input_weight = output_weight = 1) and Megatron-Core's
// --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split.
// GpuSpeed and GpuMemory (clusters of node groups) give each stage blocks
// in proportion to its GPUs' speed or memory (stage_split.hpp); the split
// is resolved into stage_layers wherever a plan meets its cluster.
enum class PipelineLayout : std::uint8_t { Balanced, EmbeddingHeadAsLayers, GpuSpeed, GpuMemory };

struct Offload {
  bool activations = false;
  bool weights = false;
  // Where offloaded weights live between their uses: host memory, or NVMe
  // read through host staging buffers (ZeRO-Infinity's offload_param with
  // device nvme). Input: `"weights": "nvme"`.
  OffloadTarget weights_target = OffloadTarget::Cpu;
  OffloadTarget optimizer = OffloadTarget::None;
  std::int64_t prefetch_depth = 1;
  OffloadPlanner planner = OffloadPlanner::All;
};

struct Compression {
  CompressionMethod method = CompressionMethod::None;
  double ratio = 0.01;          // topk, randomk: fraction of entries sent
  bool error_feedback = true;   // topk, randomk (onebit and powersgd always keep a residual)
  std::int64_t bits = 8;        // qsgd: levels 0..2^bits − 1 of |x|/‖bucket‖, plus a sign bit
  std::int64_t rank = 4;        // powersgd
  // Exchanged bucket by bucket as each of DDP's 25 MiB buckets of gradients
  // is complete, overlapped with the rest of the backward (a DDP
  // communication hook, as PyTorch's PowerSGD hook runs), each bucket with
  // its own error feedback; false: one exchange of the stage's gradients
  // after the backward.
  bool bucketed = false;
};

// Top-k and random-k send k = ⌈ratio·n⌉ of n gradients (at least one).
std::int64_t sparse_k(double ratio, std::int64_t n);
// QSGD: consecutive gradients that share one fp32 norm (Alistarh et al.
// 2017 quantize buckets of 512).
inline constexpr std::int64_t kQsgdBucket = 512;
// 1-bit: consecutive gradients that share one fp32 scale (their mean |x|).
inline constexpr std::int64_t kOneBitBucket = 512;

// The longest host dispatch per kernel a plan may state (1 ms: a kernel per
// millisecond is far slower than any framework issues them).
inline constexpr double kMaxHostDispatchUs = 1000;
// The most evaluations of the logits per microbatch a plan may state for
// its trainer's metrics (implementation.train_metric_passes).
inline constexpr std::int64_t kMaxTrainMetricPasses = 16;
// The largest ZeRO-3 persistence threshold a plan may state, in elements.
inline constexpr std::int64_t kMaxPersistenceThreshold = std::int64_t{1} << 40;
// The largest ZeRO-3 gradient bucket a plan may state, in elements (and
// the largest of DeepSpeed's other element counts: zero3_max_live,
// zero3_prefetch_bucket, zero3_reuse_distance).
inline constexpr std::int64_t kMaxReduceBucket = std::int64_t{1} << 40;

struct Implementation {
  AttentionKernel attention = AttentionKernel::Flash;
  bool fused_elementwise = true;
  // The loss's cross-entropy kernel (costmodel/techniques.hpp): Megatron-LM's
  // in place, or PyTorch's unfused one on fp32 logits (torchtitan).
  CrossEntropy cross_entropy = CrossEntropy::InPlace;
  // The trainer's metrics over the logits, each an evaluation by PyTorch's
  // cross-entropy without gradient per microbatch (Composer updates each
  // train metric after each microbatch's backward; llm-foundry's MPT has
  // two): priced as the unfused loss's forward traffic (costmodel/ops.cpp,
  // the head's train_metrics op). 0: the trainer computes none (Megatron,
  // DeepSpeed and torchtitan log the loss alone).
  std::int64_t train_metric_passes = 0;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;
  // FP8 parameters (Megatron-Core's --fp8-param-gather: "Keep the compute
  // param in fp8 ... and perform the param all-gather in fp8"): the blocks'
  // GEMM weights are FP8 parameters instead of 16-bit ones beside an FP8
  // copy, and the distributed optimizer gathers them in FP8.
  bool fp8_param_gather = false;
  // How PyTorch's caching allocator is configured (PYTORCH_CUDA_ALLOC_CONF):
  // simulate replays the step's allocations through it for the reserved
  // bytes (sim/caching_allocator.hpp).
  sim::AllocatorMode allocator = sim::AllocatorMode::Native;
  TpCommOverlap tp_comm_overlap = TpCommOverlap::None;
  CpComm cp_comm = CpComm::P2p;
  bool pp_scatter_gather = false;
  // Pipeline sends overlapped with the next step's compute (Megatron-LM's
  // --overlap-p2p-communication); off, a stage waits for its send.
  bool overlap_p2p = false;
  // Gradients accumulated in an fp32 buffer beside the 16-bit weights
  // (Megatron-LM's main_grad, DeepSpeed's fp16/bf16 optimizers): 4 more bytes
  // per parameter with fp16 (which also keeps 16-bit gradients), 4 instead of
  // 2 with bf16/fp8. Off: ZeRO's accounting, 2 bytes (16 per parameter with Adam).
  bool fp32_grad_accumulation = false;
  // The dtype gradients are reduced in (GradReduceDtype above); a 16-bit one
  // is the plan's (fp16 under fp16, bf16 under bf16, fp8 and fp4).
  GradReduceDtype grad_reduce_dtype = GradReduceDtype::Accumulation;
  // Backward tensor-parallel communication of the input gradient launched
  // beside the weight-gradient GEMM (Megatron-LM's asynchronous
  // tensor-model-parallel all-reduce, later always on): only what exceeds the
  // GEMM is exposed. Off (Megatron-LM of 2021): all of it is exposed.
  bool tp_grad_overlap = true;
  // Sequence parallelism keeps the sequence shard of a column-parallel
  // linear's input for its weight gradient and all-gathers it again in the
  // backward (Megatron-LM's and Transformer Engine's linears, Korthikanti
  // et al. Sec. 4.2.2). Off (PyTorch DTensor's PrepareModuleInput and
  // ColwiseParallel, torchtitan): the linear saves the all-gathered input
  // itself, tp times the bytes, and the backward gathers nothing.
  bool sp_regather_input = true;
  // Weight gradients accumulated into the gradient buffer by the
  // weight-gradient GEMM itself (Megatron-LM's --gradient-accumulation-fusion).
  // Off: a separate memory-bound kernel per layer and microbatch adds each
  // new gradient into the buffer (step_costs.cpp).
  bool grad_accumulation_fusion = true;
  // Host time the framework spends issuing one GPU kernel (Python, the
  // operator dispatcher, autograd and the launch), in microseconds. A pass
  // takes at least its kernels times this (step_costs.cpp): a GPU that
  // finishes kernels faster than the host issues them waits for the host.
  // 0: the host always keeps ahead (Strata's own executors, CUDA graphs).
  double host_dispatch_us = 0;
  // ZeRO-3 all-gathers each module's parameters on its own (DeepSpeed's
  // PartitionedParameterCoordinator fetches per submodule), one collective
  // per linear layer and per other module holding parameters; off, one
  // all-gather of the whole layer (FSDP wrapping each transformer block).
  bool zero3_gather_per_module = false;
  // ZeRO-3 keeps the root module's parameters — what no wrapped block holds:
  // the embedding, the final norm, the output layer — unsharded from their
  // forward to the end of their backward (PyTorch FSDP: FSDP1's
  // _post_forward_reshard does not free the root's flat parameter, FSDP2's
  // _lazy_init sets the root's post_forward_mesh_info to None: "for
  // training, the parameters would be freed and all-gathered immediately").
  // Off: they
  // are gathered for each use and freed after it like a block's (DeepSpeed).
  bool zero3_root_unsharded = false;
  // ZeRO-3 over flat parameters (PyTorch FSDP1): a unit's parameters are
  // views of one flat parameter, so each unit's backward concatenates their
  // gradients into the flat gradient — a memory-bound pass reading and
  // writing every gradient of the unit, per layer and microbatch, on the
  // compute stream (step_costs.cpp). Off: per-parameter sharding (FSDP2,
  // DeepSpeed), no such pass.
  bool zero3_flat_grads = false;
  // ZeRO-3 over per-parameter shards gathered into one buffer (PyTorch
  // FSDP2): after each all-gather the compute stream copies every parameter
  // out of the gathered buffer into its own tensor (split_with_sizes_copy),
  // reading and writing each gathered parameter once per gather — each
  // layer's forward and backward, the root's forward when it stays gathered
  // (step_costs.cpp). Off: the gather lands in the parameters themselves.
  bool zero3_gather_copy_out = false;
  // ZeRO-3 handles each parameter rank by rank on the host (DeepSpeed):
  // after a coalesced all-gather, AllGatherCoalescedHandle.wait splits each
  // gathered parameter out of the flat buffer with a narrow per rank before
  // its torch.cat; each reduce-scatter bucket slices each gradient into one
  // chunk per rank (reduce_scatter_coalesced). Priced as dp × cp eager
  // host operations per gathered tensor per gather and per reduced tensor
  // per microbatch, each at host_dispatch_us, in the host's dispatch bound
  // (step_costs.cpp). Off: one operation per gather whatever the ranks
  // (FSDP's split_with_sizes_copy).
  bool zero3_host_per_rank = false;
  // Parameter tensors with fewer elements than this stay whole on every
  // rank and are never gathered (DeepSpeed's param_persistence_threshold).
  // Only with zero3_gather_per_module.
  std::int64_t zero3_persistence_threshold = 0;
  // ZeRO-3 copies each parameter's gradient, as autograd produces it, into
  // one contiguous bucket of this many elements in the gradients' dtype,
  // allocated once for the whole run, and frees it; a full bucket is
  // flattened into a new buffer (pre-divided, reduce-scattered in place) and
  // emptied (DeepSpeed's stage 3 with contiguous_gradients:
  // __ipg_bucket_flat_buffer of reduce_bucket_size elements,
  // reduce_scatter_coalesced's torch.cat). 0: each module's whole gradient
  // is staged for its own reduce-scatter in the reduction's dtype (PyTorch
  // FSDP's foreach_reduce, FSDP1's flat gradient). Memory only: the
  // lowering reduce-scatters layer by layer either way.
  std::int64_t zero3_reduce_bucket = 0;
  // ZeRO-3 gathers parameters as DeepSpeed's coordinator does
  // (PartitionedParameterCoordinator), where zero3_max_live > 0: at each
  // module's use it prefetches the modules next in the recorded trace, up
  // to zero3_prefetch_bucket more elements while fewer than zero3_max_live
  // are gathered, and keeps a module's parameters after its use where the
  // trace uses them again within zero3_reuse_distance elements
  // (stage3_prefetch_bucket_size, stage3_max_live_parameters,
  // stage3_max_reuse_distance). What it holds gathered at most is a
  // communication buffer (memory.cpp). 0: FSDP's, a layer and the next.
  // Memory only: the lowering gathers a layer ahead either way.
  std::int64_t zero3_max_live = 0;
  std::int64_t zero3_prefetch_bucket = 0;
  std::int64_t zero3_reuse_distance = 0;
  // Order in which ranks are laid out, innermost (fastest varying) first.
  std::array<ParallelDim, 4> rank_order{ParallelDim::TP, ParallelDim::CP, ParallelDim::DP,
                                        ParallelDim::PP};
};

// How a MoE model's tokens reach its experts as the framework routes them
// (plan.moe). The step is as slow as its busiest expert-parallel rank: its
// routed experts compute, keep and receive load() times their balanced
// share of tokens (top_k · tokens / experts each).
struct MoeRouting {
  // Megatron-LM's --moe-expert-capacity-factor: an expert takes at most
  // this times its balanced share, the rest dropped; absent: dropless
  // (Megatron-Core's default, moe_expert_capacity_factor None).
  std::optional<double> capacity_factor;
  // --moe-pad-expert-input-to-capacity: every expert computes its whole
  // capacity, padded. Only with capacity_factor.
  bool pad_to_capacity = false;
  // The busiest rank's routed tokens over the balanced share: a property of
  // the router and the data, read from a run (Megatron-Core can log the
  // tokens per expert); 1 is perfectly balanced routing.
  double load_imbalance = 1.0;

  // The busiest rank's load as a multiple of the balanced share: the
  // capacity when padded, else the imbalance cut at the capacity.
  double load() const {
    if (capacity_factor && pad_to_capacity) return *capacity_factor;
    return capacity_factor ? std::min(load_imbalance, *capacity_factor) : load_imbalance;
  }
  bool operator==(const MoeRouting&) const = default;
};

struct Plan {
  std::int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  std::int64_t zero = 0;
  Schedule schedule = Schedule::OneFOneB;
  std::int64_t virtual_stages = 1;
  // Transformer blocks per chunk, given; empty: split by pipeline_layout.
  // Only the first and the last chunk may hold none (the embedding, or the
  // output layer and loss, alone).
  std::vector<std::int64_t> stage_layers;
  PipelineLayout pipeline_layout = PipelineLayout::Balanced;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::None;
  std::int64_t recompute_k = 1;                  // every_k
  // What "selective" reruns (Megatron-Core's recompute_modules; the
  // attention core by default). Only with recompute "selective".
  cost::RecomputeModules recompute_modules = cost::kDefaultRecomputeModules;
  std::optional<double> memory_budget_GiB;       // optimal
  // The layer inputs a recomputed segment keeps, split over the tp ranks
  // (each keeps 1/tp) and all-gathered over tp before the segment reruns:
  // Megatron-LM's --distribute-saved-activations (tensor_parallel/random.py
  // CheckpointFunction: "Divide hidden states across model parallel group
  // and only keep the chunk corresponding to the current rank", gathered by
  // gather_split_1d_tensor in its backward) and DeepSpeed's
  // activation_checkpointing.partition_activations. With tp > 1, without
  // sequence parallelism (whose inputs are already split) and a recompute
  // that keeps layer inputs.
  bool partition_activations = false;
  MoeRouting moe;  // MoE models only
  Offload offload;
  Compression compression;
  Optimizer optimizer = Optimizer::Adam;
  StateDtype optimizer_states = StateDtype::FP32;
  Precision precision = Precision::BF16;
  // How FP8 operands are scaled (precision fp8 only; costmodel/techniques.hpp).
  cost::Fp8Recipe fp8_recipe = cost::Fp8Recipe::Delayed;
  // Under fp8 or fp4, the first and the last blocks of the model (by global
  // layer number) that multiply in bf16 instead (Megatron-Core's
  // --first-last-layers-bf16 with --num-layers-at-start-in-bf16 and
  // --num-layers-at-end-in-bf16: get_fp8_context and get_fp4_context give
  // those layers no quantization context).
  std::int64_t bf16_first_layers = 0;
  std::int64_t bf16_last_layers = 0;
  DpTopology dp_topology = DpTopology::AllReduce;
  // With a parameter server: how many updates a worker's weights may lag
  // (bounded staleness: Ho et al. 2013's stale synchronous parallel,
  // HetPipe's wave synchronous parallel). 0: a worker waits for the pull of
  // the weights its step produced; s ≥ 1: the pull overlaps the next step,
  // and the convergence model prices s versions of staleness.
  std::int64_t ps_staleness = 0;
  Implementation implementation;

  std::int64_t gpus() const { return dp * tp * pp * cp; }
};

struct Batch {
  std::int64_t global = 1;  // sequences per optimizer step
  std::int64_t micro = 1;   // sequences per microbatch
};

// Layers per pipeline chunk (pp · virtual_stages chunks, in pipeline order):
// the plan's `stage_layers`, or the pipeline_layout's balanced split (sizes
// that differ by at most one, counting the embedding and head as layers
// under EmbeddingHeadAsLayers; the remainder goes to the middle chunks).
std::vector<std::int64_t> chunk_layers(const Plan& plan, std::int64_t layers);

// The op-chain options of a plan's ranks (microbatch, tp, sp, cp, ep,
// precision, attention kernel, fused elementwise ops, cross-entropy).
cost::ExpandOptions expand_options(const Plan& plan, const Batch& batch);
// What the plan's recompute reruns of a block's modules: its
// recompute_modules under "selective", the attention core's under every
// other policy (optimal recompute's selective choice included). What the
// plan is priced, recorded, exported and executed with.
cost::RecomputeModules recompute_modules_of(const Plan& plan);

// Microbatches per pipeline per step: global / (dp · micro).
std::int64_t microbatches(const Plan& plan, const Batch& batch);

// The ranks ZeRO shards optimizer state, gradients and weights over: every
// rank the gradients are reduced over, dp · cp. Megatron-LM's distributed
// optimizer and Megatron-FSDP shard over the data-parallel group with
// context parallelism (megatron/core/distributed/distributed_data_parallel.py:
// intra_dp_cp_group = get_data_parallel_group(with_context_parallel=True));
// torchtitan's FSDP shards over the flattened dp_shard × cp mesh
// (parallel_dims.py, "dp_shard_cp").
std::int64_t zero_shards(const Plan& plan);

}  // namespace strata::strategies

namespace strata {

#define STRATA_ENUM_NAMES(E, N, ...)                                             \
  template <>                                                                    \
  struct EnumNames<E> {                                                          \
    static constexpr std::array<std::pair<E, std::string_view>, N> table{{__VA_ARGS__}}; \
  }

STRATA_ENUM_NAMES(strategies::Schedule, 5, {strategies::Schedule::GPipe, "gpipe"},
                  {strategies::Schedule::OneFOneB, "1f1b"},
                  {strategies::Schedule::Interleaved, "interleaved"},
                  {strategies::Schedule::PipeDream, "pipedream"},
                  {strategies::Schedule::PipeDream2BW, "pipedream-2bw"});
STRATA_ENUM_NAMES(strategies::OffloadTarget, 3, {strategies::OffloadTarget::None, "none"},
                  {strategies::OffloadTarget::Cpu, "cpu"},
                  {strategies::OffloadTarget::Nvme, "nvme"});
STRATA_ENUM_NAMES(strategies::OffloadPlanner, 5, {strategies::OffloadPlanner::All, "all"},
                  {strategies::OffloadPlanner::Vdnn, "vdnn"},
                  {strategies::OffloadPlanner::Lifetime, "lifetime"},
                  {strategies::OffloadPlanner::Priority, "priority"},
                  {strategies::OffloadPlanner::Joint, "joint"});
STRATA_ENUM_NAMES(strategies::CompressionMethod, 6,
                  {strategies::CompressionMethod::None, "none"},
                  {strategies::CompressionMethod::TopK, "topk"},
                  {strategies::CompressionMethod::RandomK, "randomk"},
                  {strategies::CompressionMethod::Qsgd, "qsgd"},
                  {strategies::CompressionMethod::OneBit, "onebit"},
                  {strategies::CompressionMethod::PowerSgd, "powersgd"});
STRATA_ENUM_NAMES(strategies::Optimizer, 10, {strategies::Optimizer::Sgd, "sgd"},
                  {strategies::Optimizer::Momentum, "momentum"},
                  {strategies::Optimizer::Adam, "adam"}, {strategies::Optimizer::AdamW, "adamw"},
                  {strategies::Optimizer::Adam8bit, "adam8bit"},
                  {strategies::Optimizer::Adam4bit, "adam4bit"},
                  {strategies::Optimizer::Adafactor, "adafactor"},
                  {strategies::Optimizer::Sm3, "sm3"}, {strategies::Optimizer::Lamb, "lamb"},
                  {strategies::Optimizer::Lars, "lars"});
STRATA_ENUM_NAMES(strategies::StateDtype, 2, {strategies::StateDtype::FP32, "fp32"},
                  {strategies::StateDtype::BF16, "bf16"});
STRATA_ENUM_NAMES(strategies::DpTopology, 2, {strategies::DpTopology::AllReduce, "allreduce"},
                  {strategies::DpTopology::ParameterServer, "parameter_server"});
STRATA_ENUM_NAMES(strategies::TpCommOverlap, 3, {strategies::TpCommOverlap::None, "none"},
                  {strategies::TpCommOverlap::Bulk, "bulk"},
                  {strategies::TpCommOverlap::Ring, "ring"});
STRATA_ENUM_NAMES(strategies::CpComm, 3, {strategies::CpComm::P2p, "p2p"},
                  {strategies::CpComm::AllGather, "all_gather"},
                  {strategies::CpComm::AllGatherRing, "all_gather_ring"});
STRATA_ENUM_NAMES(strategies::GradReduceDtype, 4,
                  {strategies::GradReduceDtype::Accumulation, "accumulation"},
                  {strategies::GradReduceDtype::FP32, "fp32"},
                  {strategies::GradReduceDtype::BF16, "bf16"},
                  {strategies::GradReduceDtype::FP16, "fp16"});
STRATA_ENUM_NAMES(strategies::PipelineLayout, 4,
                  {strategies::PipelineLayout::Balanced, "balanced"},
                  {strategies::PipelineLayout::EmbeddingHeadAsLayers, "embedding_head_as_layers"},
                  {strategies::PipelineLayout::GpuSpeed, "gpu_speed"},
                  {strategies::PipelineLayout::GpuMemory, "gpu_memory"});
STRATA_ENUM_NAMES(strategies::ParallelDim, 4, {strategies::ParallelDim::TP, "tp"},
                  {strategies::ParallelDim::CP, "cp"}, {strategies::ParallelDim::DP, "dp"},
                  {strategies::ParallelDim::PP, "pp"});

#undef STRATA_ENUM_NAMES

}  // namespace strata
