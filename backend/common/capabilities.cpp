#include "backend/common/capabilities.hpp"

#include <array>

#include "lowering/memory.hpp"
#include "sim/error.hpp"

namespace strata::backend {

namespace {

using cost::Precision;
using strategies::CompressionMethod;
using strategies::DpTopology;
using strategies::OffloadTarget;
using strategies::Optimizer;
using strategies::Scenario;
using strategies::Schedule;

constexpr Support yes(std::string_view note = {}) { return {Status::Runs, note}; }
constexpr Support differs(std::string_view how) { return {Status::Differs, how}; }
constexpr Support no(std::string_view why) { return {Status::Refused, why}; }
constexpr Support moot(std::string_view which) { return {Status::NotApplicable, which}; }

bool dp(const Scenario& s) { return s.plan.dp > 1; }
// ZeRO acts where it has ranks to shard over: dp × cp (strategies::zero_shards).
bool zero(const Scenario& s) { return strategies::zero_shards(s.plan) > 1 && s.plan.zero > 0; }
bool compressed(const Scenario& s) { return dp(s) && s.plan.compression.method != CompressionMethod::None; }
bool ps(const Scenario& s) { return dp(s) && s.plan.dp_topology == DpTopology::ParameterServer; }
bool pipedream(const Scenario& s) { return s.plan.pp > 1 && s.plan.schedule == Schedule::PipeDream; }
bool two_bw(const Scenario& s) { return s.plan.pp > 1 && s.plan.schedule == Schedule::PipeDream2BW; }
bool opt_offload(const Scenario& s) { return s.plan.offload.optimizer != OffloadTarget::None; }
// A scenario states a setting where it acts, and states another value than
// the one the executors' kernels run (what Executor::declare_kernels sets
// where it states none).
bool states_other(const Scenario& s, strategies::ImplKey k, std::int64_t executors) {
  return strategies::implementation_acts(k, s.plan) && s.implementation_keys.has(k) &&
         strategies::implementation_value(s.plan.implementation, k) != executors;
}
bool norms_or_factors(Optimizer o) {
  return o == Optimizer::Lars || o == Optimizer::Lamb || o == Optimizer::Adafactor || o == Optimizer::Sm3;
}

#define STRATA_NOT_ACROSS(what) \
  "the CUDA executor runs data parallelism and ZeRO across processes (one per GPU), not " what \
  " parallelism yet; the CPU backend executes such plans with rank threads"

const std::array kTable{
    // ---- parallelism -----------------------------------------------------------
    Capability{"dp", "parallelism", "data parallelism (dp > 1), bucketed gradient all-reduce",
               [](const Scenario& s) { return dp(s); }, yes("rank threads, ring all-reduce over shared memory"),
               yes("one process per GPU (mpirun or srun), NCCL")},
    Capability{"zero12", "parallelism", "ZeRO-1 and ZeRO-2 (optimizer states, + gradients sharded)",
               [](const Scenario& s) { return zero(s) && s.plan.zero <= 2; },
               yes("reduce-scatter, sharded step, all-gather of weights at the step's end (steps run one after "
                   "another, so overlap_param_gather does not move it into the next forward; the prediction "
                   "beside the measurement prices it there); ZeRO-2 keeps whole gradients through backward, "
                   "as ZeRO-1"),
               yes("as on the CPU backend, over NCCL")},
    Capability{"zero3", "parallelism", "ZeRO-3 (parameters sharded, gathered per layer)",
               [](const Scenario& s) { return zero(s) && s.plan.zero >= 3; },
               yes("the embedding and head stay whole, their gradients reduce-scattered"),
               yes("as on the CPU backend, over NCCL")},
    Capability{"zero3-reduce-bucket", "parallelism",
               "ZeRO-3 gradients copied into one reduce bucket (implementation.zero3_reduce_bucket > 0)",
               [](const Scenario& s) { return states_other(s, strategies::ImplKey::Zero3ReduceBucket, 0); },
               no("the CPU backend reduce-scatters each layer's gradients as the layer's backward ends, through "
                  "buffers of that layer's size (implementation.zero3_reduce_bucket 0)"),
               no("the CUDA backend reduce-scatters each layer's gradients as the layer's backward ends "
                  "(implementation.zero3_reduce_bucket 0)")},
    Capability{"zero3-host-per-rank", "parallelism",
               "ZeRO-3 handling each parameter rank by rank on the host (implementation.zero3_host_per_rank)",
               [](const Scenario& s) { return states_other(s, strategies::ImplKey::Zero3HostPerRank, false); },
               no("the CPU backend gathers and reduce-scatters each layer as one flat buffer "
                  "(implementation.zero3_host_per_rank false)"),
               no("the CUDA backend gathers and reduce-scatters each layer as one flat buffer "
                  "(implementation.zero3_host_per_rank false)")},
    Capability{"zero3-coordinator", "parallelism",
               "ZeRO-3 gathers through DeepSpeed's parameter coordinator (implementation.zero3_max_live > 0)",
               [](const Scenario& s) { return states_other(s, strategies::ImplKey::Zero3MaxLive, 0); },
               no("the CPU backend gathers each layer's parameters as the layer begins (implementation.zero3_max_live "
                  "0)"),
               no("the CUDA backend gathers each layer's parameters as the layer begins (implementation.zero3_max_live "
                  "0)")},
    Capability{"tp", "parallelism", "tensor parallelism (tp > 1, Megatron-LM's split)",
               [](const Scenario& s) { return s.plan.tp > 1; }, yes(), no(STRATA_NOT_ACROSS("tensor")), true},
    Capability{"sp", "parallelism", "sequence parallelism (with tp > 1)",
               [](const Scenario& s) { return s.plan.tp > 1 && s.plan.sequence_parallel; }, yes(),
               moot("tensor parallelism is refused")},
    Capability{"sp-gathered-input", "parallelism",
               "sequence parallelism keeping the gathered input (implementation.sp_regather_input false)",
               [](const Scenario& s) { return states_other(s, strategies::ImplKey::SpRegatherInput, true); },
               no("the CPU kernels keep the sequence shard of a linear's input and gather it again in the "
                  "backward (implementation.sp_regather_input true)"),
               moot("tensor parallelism is refused")},
    Capability{"cp", "parallelism", "context parallelism (cp > 1, load-balanced chunks)",
               [](const Scenario& s) { return s.plan.cp > 1; },
               yes("K and V all-gathered before the attention core, their gradients reduce-scattered "
                   "(implementation.cp_comm all_gather, where the plan states none)"),
               no(STRATA_NOT_ACROSS("context")), true},
    Capability{"cp-exchange", "parallelism",
               "context parallelism by ring attention or PyTorch's all-gather rotation (implementation.cp_comm "
               "p2p or all_gather_ring)",
               [](const Scenario& s) {
                 return states_other(s, strategies::ImplKey::CpComm,
                                     static_cast<std::int64_t>(strategies::CpComm::AllGather));
               },
               no("ring attention and PyTorch's all-gather rotation (implementation.cp_comm p2p, all_gather_ring) "
                  "are not executed by the CPU backend, which all-gathers K and V (cp_comm all_gather)"),
               moot("context parallelism is refused")},
    Capability{"ep", "parallelism", "expert parallelism (ep > 1)", [](const Scenario& s) { return s.plan.ep > 1; },
               no("expert parallelism (ep > 1) is not executed by the CPU backend yet"), no(STRATA_NOT_ACROSS("expert")),
               true},
    Capability{"pp", "parallelism", "pipeline parallelism (pp > 1): GPipe, 1F1B, interleaved; uneven chunks, the "
               "embedding or the output layer and loss in a chunk of its own",
               [](const Scenario& s) { return s.plan.pp > 1; }, yes(), no(STRATA_NOT_ACROSS("pipeline")), true},
    Capability{"pipedream", "parallelism", "the asynchronous PipeDream schedule",
               [](const Scenario& s) { return pipedream(s); },
               no("the asynchronous pipedream schedule (per-stage weight stashing, one update per microbatch) is not "
                  "executed by the CPU backend; pipedream-2bw is"),
               moot("pipeline parallelism is refused")},
    Capability{"pipedream-2bw", "parallelism", "PipeDream-2BW (two weight versions, one-step-stale gradients)",
               [](const Scenario& s) { return two_bw(s); },
               yes("each step flushed (the prediction beside a run keeps the fill, which an unflushed pipeline "
                   "pays once per run)"),
               moot("pipeline parallelism is refused")},
    Capability{"ps", "parallelism", "a parameter server (dp_topology: parameter_server)",
               [](const Scenario& s) { return ps(s); }, yes("the server on the first rank of each dp group"),
               no("a parameter server (dp_topology) is not executed by the CUDA backend; all-reduce is")},
    Capability{"ps-staleness", "parallelism", "a parameter server with bounded staleness (ps_staleness)",
               [](const Scenario& s) { return ps(s) && s.plan.ps_staleness > 0; },
               no("the CPU backend's parameter server is synchronous: every worker waits for its pull; set "
                  "ps_staleness to 0"),
               moot("parameter servers are refused")},
    Capability{"compression", "parallelism", "gradient compression (top-k, random-k, QSGD, 1-bit, PowerSGD)",
               [](const Scenario& s) { return compressed(s); }, yes("with error feedback"),
               yes("the device compressors between NCCL rounds")},
    Capability{"compression-bucketed", "parallelism",
               "gradient compression bucket by bucket under the backward (compression.bucketed)",
               [](const Scenario& s) { return compressed(s) && s.plan.compression.bucketed; },
               no("the CPU backend compresses the stage's gradients in one exchange after the backward: set "
                  "compression.bucketed to false"),
               no("the CUDA backend compresses the stage's gradients in one exchange after the backward: set "
                  "compression.bucketed to false")},
    // ---- combinations of parallelism --------------------------------------------
    Capability{"compression-zero", "parallelism", "gradient compression with ZeRO-1",
               [](const Scenario& s) { return compressed(s) && s.plan.zero > 0; },
               yes("every rank decodes the whole gradient and steps its shard (ZeRO-2 and -3 break the plan rule "
                   "compression-vs-zero)"),
               no("gradient compression with ZeRO is not executed by the CUDA backend (each rank would step its chunk "
                  "of the decoded gradient); set zero to 0, or run it on the CPU backend")},
    Capability{"compression-cp-ps", "parallelism", "gradient compression with context parallelism or a parameter server",
               [](const Scenario& s) { return compressed(s) && (s.plan.cp > 1 || ps(s)); },
               no("gradient compression with context parallelism or a parameter server is not executed by the CPU "
                  "backend"),
               moot("context parallelism and parameter servers are refused")},
    Capability{"tp-dropout", "parallelism", "tensor parallelism with dropout",
               [](const Scenario& s) { return s.plan.tp > 1 && s.model.dropout; },
               no("tensor parallelism (tp > 1) with dropout is not executed by the CPU backend"),
               moot("tensor parallelism is refused")},
    Capability{"cp-dropout", "parallelism", "context parallelism with dropout",
               [](const Scenario& s) { return s.plan.cp > 1 && s.model.dropout; },
               no("context parallelism (cp > 1) with dropout is not executed by the CPU backend"),
               moot("context parallelism is refused")},
    Capability{"zero-cp", "parallelism", "ZeRO with context parallelism",
               [](const Scenario& s) { return s.plan.cp > 1 && s.plan.zero > 0; },
               yes("sharded over dp x cp, as Megatron-LM and torchtitan shard it"),
               moot("context parallelism is refused")},
    Capability{"pipedream-2bw-zero-offload", "parallelism", "PipeDream-2BW with ZeRO, optimizer offload or weight offload",
               [](const Scenario& s) { return two_bw(s) && (zero(s) || opt_offload(s) || s.plan.offload.weights); },
               no("pipedream-2bw with ZeRO, optimizer offload or weight offload is not executed by the CPU backend"),
               moot("pipeline parallelism is refused")},
    Capability{"ps-zero", "parallelism", "a parameter server with ZeRO",
               [](const Scenario& s) { return ps(s) && s.plan.zero > 0; },
               no("a parameter server with ZeRO is not executed by the CPU backend (the server holds whole "
                  "gradients, weights and states)"),
               moot("parameter servers are refused")},
    Capability{"ps-optimizer-offload", "parallelism", "a parameter server with optimizer offload",
               [](const Scenario& s) { return ps(s) && opt_offload(s); },
               no("a parameter server with optimizer offload is not executed by the CPU backend"),
               moot("parameter servers are refused")},
    // ---- memory ------------------------------------------------------------------
    Capability{"recompute", "memory", "recompute: selective, full, every_k, sqrt, every_nth, optimal",
               [](const Scenario& s) {
                 return s.plan.recompute != cost::Recompute::None && s.plan.recompute != cost::Recompute::SelectiveOp;
               },
               yes("the lowering's per-layer choices"), yes("the lowering's per-layer choices")},
    Capability{"recompute-selective-op", "memory", "recompute selective_op (torchtitan's op-level save list)",
               [](const Scenario& s) { return s.plan.recompute == cost::Recompute::SelectiveOp; },
               no("recompute selective_op is not executed by the CPU backend (its blocks keep no save list)"),
               no("recompute selective_op is not executed by the CUDA backend (its blocks keep no save list)")},
    Capability{"recompute-modules", "memory", "recompute_modules other than the attention core (Megatron-Core's)",
               [](const Scenario& s) { return strategies::recompute_modules_of(s.plan) != cost::kDefaultRecomputeModules; },
               no("recompute_modules other than core_attn are not executed by the CPU backend (its selective "
                  "recompute reruns the attention core)"),
               no("recompute_modules other than core_attn are not executed by the CUDA backend (its selective "
                  "recompute reruns the attention core)")},
    Capability{"partition-activations", "memory",
               "kept layer inputs split over tp (partition_activations: Megatron-LM's --distribute-saved-activations)",
               [](const Scenario& s) { return s.plan.partition_activations; },
               no("partition_activations is not executed by the CPU backend (a recomputed segment keeps its whole "
                  "input on every tp rank)"),
               no("partition_activations is not executed by the CUDA backend (a recomputed segment keeps its whole "
                  "input on every tp rank)")},
    Capability{"optimizer-states-bf16", "memory", "optimizer statistics in bf16 (optimizer_states)",
               [](const Scenario& s) { return s.plan.optimizer_states != strategies::StateDtype::FP32; },
               no("bf16 optimizer statistics are not executed by the CPU backend (its optimizers keep fp32)"),
               no("bf16 optimizer statistics are not executed by the CUDA backend (its optimizers keep fp32)")},
    Capability{"activation-offload", "memory", "activation offload (every planner)",
               [](const Scenario& s) { return s.plan.offload.activations; }, yes("to a separate host pool"),
               yes("to pinned host memory on the copy streams")},
    Capability{"weight-offload", "memory", "weight offload (offload.weights)",
               [](const Scenario& s) { return s.plan.offload.weights; }, yes(),
               no("weight offload is not executed by the CUDA backend yet")},
    Capability{"weight-offload-zero", "memory", "weight offload with ZeRO",
               [](const Scenario& s) { return s.plan.offload.weights && zero(s); },
               no("weight offload with ZeRO is not executed by the CPU backend"), moot("weight offload is refused")},
    Capability{"weight-offload-optimizer-offload", "memory", "weight offload with optimizer offload",
               [](const Scenario& s) { return s.plan.offload.weights && opt_offload(s); },
               no("weight offload with optimizer offload is not executed by the CPU backend"),
               moot("weight offload is refused")},
    Capability{"optimizer-offload-cpu", "memory", "optimizer offload to the host (ZeRO-Offload)",
               [](const Scenario& s) { return s.plan.offload.optimizer == OffloadTarget::Cpu; }, yes(),
               no("optimizer offload (ZeRO-Offload, ZeRO-Infinity) is not executed by the CUDA backend yet")},
    Capability{"optimizer-offload-nvme", "memory", "optimizer offload to NVMe (ZeRO-Infinity)",
               [](const Scenario& s) { return s.plan.offload.optimizer == OffloadTarget::Nvme; },
               yes("the states in files (FileAllocator)"),
               no("optimizer offload (ZeRO-Offload, ZeRO-Infinity) is not executed by the CUDA backend yet")},
    // ---- precision and kernels ----------------------------------------------------
    Capability{"fp32", "precision", "fp32", [](const Scenario& s) { return s.plan.precision == Precision::FP32; },
               yes(), yes("cuBLAS without TF32")},
    Capability{"bf16", "precision", "bf16 mixed precision (fp32 gradient accumulation)",
               [](const Scenario& s) { return s.plan.precision == Precision::BF16; }, differs("computed in fp32"),
               yes("bf16 products and activations, fp32 master weights and gradients")},
    Capability{"bf16-zero", "precision", "bf16 with ZeRO",
               [](const Scenario& s) { return s.plan.precision == Precision::BF16 && zero(s); },
               yes("as bf16: computed in fp32"),
               no("bf16 with ZeRO is not executed by the CUDA backend (the bf16 working copies of sharded and "
                  "gathered parameters are not refreshed); bf16 runs with zero 0")},
    Capability{"bf16-grads", "precision", "bf16 gradients (fp32_grad_accumulation false)",
               [](const Scenario& s) {
                 return s.plan.precision == Precision::BF16 && !s.plan.implementation.fp32_grad_accumulation;
               },
               yes("as bf16: computed in fp32"),
               no("bf16 with bf16 gradients is not implemented by the CUDA backend: it accumulates bf16 models' "
                  "gradients in fp32, as Megatron-LM does for bf16; set plan.implementation.fp32_grad_accumulation "
                  "to true (4 bytes a gradient in the memory model)")},
    Capability{"grad-reduce-dtype", "precision",
               "gradients reduced in another dtype than they accumulate in (implementation.grad_reduce_dtype)",
               [](const Scenario& s) { return strategies::reduces_apart(s.plan); },
               differs("computed and reduced in fp32"),
               no("a reduction dtype apart from the gradients' accumulation dtype is not executed by the CUDA "
                  "backend (it reduces its fp32 gradient buffer); leave plan.implementation.grad_reduce_dtype "
                  "out")},
    Capability{"fp16", "precision", "fp16 mixed precision", [](const Scenario& s) { return s.plan.precision == Precision::FP16; },
               differs("computed in fp32"),
               no("fp16 mixed precision is not implemented by the CUDA backend: fp16's 5-bit exponent needs loss "
                  "scaling (dynamic scale, overflow checks and skipped steps), which it does not do; set "
                  "plan.precision to bf16 or fp32")},
    Capability{"fp8", "precision", "fp8", [](const Scenario& s) { return s.plan.precision == Precision::FP8; },
               differs("computed in fp32"),
               no("fp8 is not implemented by the CUDA backend (no per-tensor scaling nor fp8 products): set "
                  "plan.precision to bf16 or fp32")},
    Capability{"fp4", "precision", "fp4 (NVFP4)", [](const Scenario& s) { return s.plan.precision == Precision::FP4; },
               differs("computed in fp32"),
               no("fp4 is not implemented by the CUDA backend (no NVFP4 quantization nor fp4 products): set "
                  "plan.precision to bf16 or fp32")},
    Capability{"flash-attention", "precision", "flash attention (implementation.attention)",
               [](const Scenario& s) { return s.plan.implementation.attention != cost::AttentionKernel::Standard; },
               differs("computed as standard attention; the graph has no attention-core recompute, so everything is kept"),
               no("the CUDA backend computes standard attention (scores materialised) only; flash attention is not "
                  "implemented yet: set plan.implementation.attention to standard")},
    Capability{"unfused-cross-entropy", "precision", "PyTorch's unfused cross-entropy on fp32 logits "
               "(implementation.cross_entropy unfused)",
               [](const Scenario& s) { return s.plan.implementation.cross_entropy == cost::CrossEntropy::Unfused; },
               no("the CPU kernels compute the cross-entropy in place (the softmax turned into the gradient), "
                  "not as log_softmax and nll_loss: set plan.implementation.cross_entropy to in_place"),
               no("the CUDA backend computes the cross-entropy in place (the softmax turned into the gradient), "
                  "not as log_softmax and nll_loss: set plan.implementation.cross_entropy to in_place")},
    Capability{"parallel-cross-entropy", "precision", "PyTorch's loss_parallel over vocabulary-sharded fp32 logits "
               "(implementation.cross_entropy parallel)",
               [](const Scenario& s) { return s.plan.implementation.cross_entropy == cost::CrossEntropy::Parallel; },
               no("the CPU kernels compute the cross-entropy in place (the softmax turned into the gradient), "
                  "not as loss_parallel's eager ops: set plan.implementation.cross_entropy to in_place"),
               no("the CUDA backend computes the cross-entropy in place (the softmax turned into the gradient), "
                  "not as loss_parallel's eager ops: set plan.implementation.cross_entropy to in_place")},
    Capability{"fused-cross-entropy", "precision", "flash-attn's fused cross-entropy on the activation-type "
               "logits (implementation.cross_entropy fused)",
               [](const Scenario& s) { return s.plan.implementation.cross_entropy == cost::CrossEntropy::Fused; },
               no("the CPU kernels compute the cross-entropy in place on fp32 logits (the softmax turned into the "
                  "gradient), not as one kernel over the logits kept in their own type: set "
                  "plan.implementation.cross_entropy to in_place"),
               no("the CUDA backend computes the cross-entropy in place on fp32 logits (the softmax turned into the "
                  "gradient), not as one kernel over the logits kept in their own type: set "
                  "plan.implementation.cross_entropy to in_place")},
    Capability{"train-metrics", "precision", "the trainer's metrics over the logits "
               "(implementation.train_metric_passes)",
               [](const Scenario& s) { return s.plan.implementation.train_metric_passes > 0; },
               no("the CPU backend computes the loss alone, no metric over the logits: set "
                  "plan.implementation.train_metric_passes to 0"),
               no("the CUDA backend computes the loss alone, no metric over the logits: set "
                  "plan.implementation.train_metric_passes to 0")},
    // ---- cluster -------------------------------------------------------------------
    Capability{"stragglers", "cluster", "slow GPUs (cluster.slow, cluster.stragglers)",
               [](const Scenario& s) { return !s.cluster.slow.empty() || s.cluster.stragglers.has_value(); },
               no("the CPU backend runs every rank at the machine's own pace and slows none down: cluster.slow "
                  "and cluster.stragglers are for simulate and explore; remove them to run or validate"),
               no("the CUDA backend runs every GPU at its own pace and slows none down: cluster.slow and "
                  "cluster.stragglers are for simulate and explore; remove them to run or validate")},
    Capability{"node-groups", "cluster", "clusters of node groups (cluster.groups)",
               [](const Scenario& s) { return s.cluster.heterogeneous(); },
               no("the CPU backend runs every rank on this machine's cores, one kind of device: cluster.groups "
                  "is for simulate and explore; run or validate a plan on one group's cluster"),
               no("the CUDA backend runs on the GPUs of this machine, one kind: cluster.groups is for simulate "
                  "and explore; run or validate a plan on one group's cluster")},
    // ---- model ---------------------------------------------------------------------
    Capability{"moe", "model", "mixture-of-experts models", [](const Scenario& s) { return static_cast<bool>(s.model.moe); },
               no("mixture-of-experts models are not implemented by the CPU backend"),
               no("mixture-of-experts models are not implemented by the CUDA backend")},
    Capability{"gqa", "model", "grouped-query attention (kv_heads != heads)",
               [](const Scenario& s) { return s.model.kv_heads != 0 && s.model.kv_heads != s.model.heads; },
               no("grouped-query attention (kv_heads != heads) is not implemented by the CPU backend"),
               no("grouped-query attention (kv_heads != heads) is not implemented by the CUDA backend")},
    Capability{"architecture", "model",
               "head_dim apart from hidden/heads, GeGLU, q/k/v biases apart, q/k norms, post- or sandwich "
               "norms, parallel blocks, latent attention, a position table longer than seq_len, a sliding "
               "attention window shorter than seq_len, multi-token prediction modules, soft-capped scores or logits",
               [](const Scenario& s) {
                 const auto& m = s.model;
                 // A window of seq_len keys or more is full attention, which
                 // the backends run.
                 return (m.head_size && *m.head_size * m.heads != m.hidden) || m.mlp == cost::MlpKind::Geglu ||
                        m.has_qkv_bias() != m.bias || m.qk_norm != cost::QkNorm::None ||
                        m.norm_placement != cost::NormPlacement::Pre || m.block != cost::BlockKind::Sequential ||
                        m.mla.has_value() ||
                        (m.position_embedding == cost::PositionEmbedding::Learned && m.position_rows() != m.seq_len) ||
                        (m.attention_window && m.window_size() < m.seq_len) || m.mtp_layers > 0 ||
                        m.attn_softcap.has_value() || m.logit_softcap.has_value();
               },
               no("the CPU backend builds GPT and Llama blocks only (head_dim = hidden/heads, GeLU or SwiGLU, one "
                  "bias switch, pre-norms, sequential attention and MLP, full causal attention in every layer, a "
                  "position table of seq_len rows, one output head, no soft-capping)"),
               no("the CUDA backend builds GPT and Llama blocks only (head_dim = hidden/heads, GeLU or SwiGLU, one "
                  "bias switch, pre-norms, sequential attention and MLP, full causal attention in every layer, a "
                  "position table of seq_len rows, one output head, no soft-capping)")},
    Capability{"positions", "model", "rotary or ALiBi positions",
               [](const Scenario& s) {
                 return s.model.position_embedding != cost::PositionEmbedding::Learned &&
                        s.model.position_embedding != cost::PositionEmbedding::None;
               },
               no("only learned positions (or none) are implemented by the CPU backend"),
               no("only learned positions (or none) are implemented by the CUDA backend")},
    Capability{"dropout", "model", "dropout (model.dropout)", [](const Scenario& s) { return s.model.dropout; },
               differs("the executor's steps run with p = 0 (GptModel's own step applies it)"),
               no("dropout is not implemented by the CUDA backend (set the model's dropout to false)")},
    // ---- optimizers ------------------------------------------------------------------
    Capability{"elementwise-optimizers", "optimizer", "SGD, momentum, Adam, AdamW, 8-bit Adam",
               [](const Scenario& s) {
                 const auto o = s.plan.optimizer;
                 return o == Optimizer::Sgd || o == Optimizer::Momentum || o == Optimizer::Adam ||
                        o == Optimizer::AdamW || o == Optimizer::Adam8bit;
               },
               yes(), yes("one fused kernel per tensor")},
    Capability{"norm-optimizers", "optimizer", "LARS, LAMB, Adafactor, SM3",
               [](const Scenario& s) { return norms_or_factors(s.plan.optimizer); }, yes(),
               yes("norms and factors reduced on the device")},
    Capability{"adam4bit", "optimizer", "4-bit Adam", [](const Scenario& s) { return s.plan.optimizer == Optimizer::Adam4bit; },
               no("4-bit Adam is not implemented by the CPU backend"),
               no("the adam4bit optimizer has no CUDA kernels (nor a CPU implementation to check them against)")},
    Capability{"zero-norm-optimizers", "optimizer", "ZeRO with LARS, LAMB, Adafactor or SM3",
               [](const Scenario& s) { return zero(s) && norms_or_factors(s.plan.optimizer); },
               no("ZeRO shards the optimizer step, which needs an elementwise optimizer (sgd, momentum, adam, adamw, "
                  "adam8bit); lars, lamb, adafactor and sm3 use whole-tensor norms or factors"),
               differs("each rank takes the norms and factors of its shards only, which is not the unsharded "
                       "update")},
};
#undef STRATA_NOT_ACROSS

std::string cell(const Support& s) {
  std::string out;
  switch (s.status) {
    case Status::Runs: out = "yes"; break;
    case Status::Differs: out = "differs"; break;
    case Status::Refused: out = "no"; break;
    case Status::NotApplicable: out = "—"; break;
  }
  if (!s.note.empty()) out += ": " + std::string(s.note);
  // A cell holds no column separator.
  std::string escaped;
  for (const char c : out) {
    if (c == '|') escaped += '\\';
    escaped += c;
  }
  return escaped;
}

}  // namespace

std::span<const Capability> capabilities() { return kTable; }

const Capability* find_capability(std::string_view id) {
  for (const auto& c : kTable)
    if (c.id == id) return &c;
  return nullptr;
}

const Capability* first_refused(const Scenario& sc, Backend b, std::string_view area) {
  for (const auto& c : kTable) {
    if (!area.empty() && c.area != area) continue;
    if (c.on(b).status == Status::Refused && c.uses(sc)) return &c;
  }
  return nullptr;
}

std::vector<std::string> differences(const Scenario& sc, Backend b) {
  std::vector<std::string> out;
  for (const auto& c : kTable)
    if (c.on(b).status == Status::Differs && c.uses(sc)) out.push_back(std::string(c.feature) + ": " + std::string(c.on(b).note));
  return out;
}

std::string gpu_mesh_text(const strategies::Plan& p) {
  const std::int64_t gpus = p.gpus() * p.ep;
  return "the plan runs on " + std::to_string(gpus) + " GPUs (dp " + std::to_string(p.dp) + " x tp " +
         std::to_string(p.tp) + " x pp " + std::to_string(p.pp) + " x cp " + std::to_string(p.cp) + " x ep " +
         std::to_string(p.ep) + ")";
}

std::optional<std::string> refusal(const Scenario& sc, Backend b, std::string_view area) {
  const Capability* c = first_refused(sc, b, area);
  if (c == nullptr) return std::nullopt;
  std::string why(c->on(b).note);
  if (b == Backend::Cuda && c->names_gpus) why = gpu_mesh_text(sc.plan) + "; " + why;
  return why;
}

std::string capability_matrix_markdown() {
  std::string out = "| area | feature | CPU executor | CUDA executor |\n|---|---|---|---|\n";
  for (const auto& c : kTable)
    out += "| " + std::string(c.area) + " | " + std::string(c.feature) + " | " + cell(c.cpu) + " | " + cell(c.cuda) +
           " |\n";
  return out;
}

std::string with_capability_matrix(std::string_view text) {
  const auto b = text.find(kMatrixBegin);
  const auto e = text.find(kMatrixEnd);
  if (b == std::string_view::npos || e == std::string_view::npos || e < b)
    throw Error("capability matrix: the file has no '" + std::string(kMatrixBegin) + "' ... '" +
                std::string(kMatrixEnd) + "' block");
  const auto after_begin = b + kMatrixBegin.size();
  return std::string(text.substr(0, after_begin)) + "\n" + capability_matrix_markdown() + std::string(text.substr(e));
}

}  // namespace strata::backend
