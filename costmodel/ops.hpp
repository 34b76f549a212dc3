#pragma once
// A model expanded into its chain of ops (embedding, transformer blocks,
// head), each with parameters, matrix-product FLOPs, memory traffic and the
// bytes it saves for backward, for one microbatch on one tensor-parallel rank.
//
// Accounting follows Korthikanti et al. 2022 ("Reducing Activation
// Recomputation in Large Transformer Models", Sec. 4): 16-bit activations,
// 1-byte dropout masks; tensors in the tensor-parallel region are split by
// `tp`, the rest (layer-norm inputs, dropout masks after the block's linear
// layers) are split only with sequence parallelism.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <span>
#include <vector>

#include "costmodel/model.hpp"
#include "costmodel/techniques.hpp"
#include "sim/units.hpp"

namespace strata::cost {

enum class OpKind {
  Embedding,   // token (and learned position) lookup
  Norm,        // layer norm / RMS norm
  Linear,      // matrix product with a weight (QKV, projections, MLP, logits)
  Attention,   // flash attention: scores, softmax and values fused
  Rotary,      // rotary position embedding applied to queries and keys
  AttnScores,  // Q·Kᵀ
  Softmax,
  AttnValues,  // softmax(QKᵀ)·V
  Dropout,
  Activation,  // GeLU, or SiLU-gate product for SwiGLU
  Residual,
  Router,      // MoE gate
  Loss,        // softmax cross-entropy over the vocabulary
  Stage,       // a layer-chain model's stage, priced from its given FLOPs and bytes
};

// The attention core's products: the fused kernel, or the scores and values
// products of the unfused one.
constexpr bool is_attention_product(OpKind k) {
  return k == OpKind::Attention || k == OpKind::AttnScores || k == OpKind::AttnValues;
}

struct Op {
  std::string_view name;  // a literal: expanding allocates no strings
  OpKind kind = OpKind::Linear;
  std::int64_t params = 0;  // parameters held by this rank
  Flops fwd_flops = 0;      // matrix-product FLOPs (model FLOPs), forward
  Flops bwd_flops = 0;      // matrix-product FLOPs, backward (2× forward)
  Bytes fwd_bytes = 0;      // memory traffic estimate, forward
  Bytes bwd_bytes = 0;      // memory traffic estimate, backward
  Bytes saved_bytes = 0;    // activation bytes kept from forward to backward
  // The part of saved_bytes that selective recompute (Recompute::Selective
  // with ExpandOptions::recompute_modules) drops: by default the attention
  // core's (softmax output, dropout mask and output over the scores),
  // recomputed from Q, K and V in backward; with layernorm, mla_up_proj or
  // moe_act also what this op keeps of those modules' outputs.
  Bytes core_saved_bytes = 0;
  // The share of its forward that op reruns under Recompute::Selective
  // before the block's backward (1: the whole op).
  double selective_rerun = 0;
  // The gradient of its output, alive while its backward runs (for the loss:
  // the logits' gradient in the activation type).
  Bytes grad_bytes = 0;
  // Weight matrices held by this rank: `matrices` of `rows` × `cols` (MoE
  // experts give several); the rest of `params` are vectors (biases, norms).
  std::int64_t matrices = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool expert = false;  // MoE expert weights: split by ep, sharded over dp / ep
  // An Attention op run by cuDNN's fused attention (AttentionKernel::Cudnn):
  // priced at the calibration's cudnn fraction where it has one.
  bool cudnn = false;
  // A Linear op of a block the plan keeps in bf16 under fp8 or fp4
  // (ExpandOptions::bf16_first_layers): it multiplies and saves as bf16.
  bool unquantized = false;
  // The separate matrix products a Linear op stands for where eager modules
  // run them one by one (torchtitan's and Hugging Face's wq, wk, wv; w1, w3):
  // each one's share of the output columns, in order; all zero: one product.
  std::array<double, 3> products{};
  // Kernels an op without matrix products launches forward and backward: one
  // fused kernel each way, or an eager composite's several
  // (ExpandOptions::fused_elementwise).
  std::int64_t fwd_kernels = 1;
  std::int64_t bwd_kernels = 1;
  // Under torchtitan's op-level selective checkpointing (Recompute::
  // SelectiveOp): the bytes of this op's outputs the policy stores, and the
  // share of its forward it reruns before the block's backward (1 off the
  // save list, 0 for a stored op, between for a Linear op standing for
  // several products of which some are stored).
  Bytes sac_stored_bytes = 0;
  double sac_rerun = 1.0;
  // A Linear op's GEMM operands that FP8 training quantizes each pass: its
  // input's elements on this rank (forward) and its output gradient's
  // (backward). The weights are quantized once a step and cached
  // (Transformer Engine's is_first_microbatch, which Megatron-Core passes).
  double gemm_in_elems = 0, gemm_out_elems = 0;

  std::int64_t matrix_params() const { return matrices * rows * cols; }
  std::int64_t vector_params() const { return params - matrix_params(); }
};

// The share of an op's forward that a layer kept under a selective policy
// reruns before its backward: Selective (Megatron-LM) its recompute modules
// (by default the attention core: scores, softmax, its dropout, values;
// nothing under flash attention), SelectiveOp (torchtitan) all that its save
// list does not store. 0 for any other policy.
double rerun_share(const Op& op, Recompute selective_policy);

enum class LayerKind { Embedding, Block, Head };

struct Layer {
  std::string_view name;  // "embedding", "block" or "head"
  LayerKind kind = LayerKind::Block;
  // A block's index in its OpChain's kinds (0 for the embedding and head).
  std::int32_t block_kind = 0;
  // A block kept in bf16 under fp8 or fp4 (its Linear ops `unquantized`).
  bool unquantized = false;
  std::vector<Op> ops;
  // Bytes of the layer's input on this rank: what full recompute keeps.
  Bytes input_bytes = 0;

  std::int64_t params() const;
  // Its Linear ops' weight matrices: what FP8 training multiplies in FP8
  // (in a block) and keeps as FP8 copies or parameters; none in a block
  // kept in bf16.
  std::int64_t gemm_weight_params() const;
  Flops fwd_flops() const;
  Flops bwd_flops() const;
  Bytes saved_bytes() const;
  // Bytes saved under a per-layer recompute policy: None keeps everything,
  // Selective drops the attention core, SelectiveOp keeps the layer's input
  // and its save list's outputs, Full keeps only the layer's input. Other
  // policies are schedules over many layers; they throw here.
  Bytes saved_bytes(Recompute policy) const;
  // The same as the tensors its ops save, in forward order (the non-empty
  // ones; they sum to saved_bytes(policy)): what a framework allocates one
  // by one, for the caching allocator's replay.
  std::vector<Bytes> saved_tensors(Recompute policy) const;
  // The largest output gradient of its ops: what one backward holds at once
  // beyond the saved bytes.
  Bytes max_grad_bytes() const;
};

struct ExpandOptions {
  std::int64_t micro_batch = 1;  // sequences per microbatch
  std::int64_t tp = 1;
  bool sequence_parallel = false;
  // With sequence parallelism, a linear whose input lies in the replicated
  // region saves that input's sequence shard and gathers it again in the
  // backward (Megatron-LM, Transformer Engine); false: it saves the
  // all-gathered input (PyTorch DTensor tensor parallelism).
  bool sp_regather_input = true;
  std::int64_t cp = 1;  // context parallel: each rank holds seq_len / cp tokens
  std::int64_t ep = 1;  // expert parallel: each rank holds experts / ep experts
  Precision precision = Precision::BF16;
  Fp8Recipe fp8_recipe = Fp8Recipe::Delayed;  // with precision fp8
  // Under fp8 or fp4: the first and last blocks kept in bf16 (their kinds'
  // ops `unquantized`; Plan::bf16_first_layers).
  std::int64_t bf16_first_layers = 0;
  std::int64_t bf16_last_layers = 0;
  AttentionKernel attention = AttentionKernel::Flash;
  // Elementwise ops run as one fused kernel each (Megatron's and Transformer
  // Engine's fused norms and RoPE, or torch.compile). False: as eager PyTorch
  // runs the reference Llama modules (torchtitan, Hugging Face, Megatron's
  // unfused paths), an RMSNorm in fp32 over several kernels, RoPE as an fp32
  // complex product, a gated unit as an activation and a product
  // (docs/cost-model.md, eager elementwise ops).
  bool fused_elementwise = true;
  CrossEntropy cross_entropy = CrossEntropy::InPlace;
  // Evaluations of the logits per microbatch by PyTorch's cross-entropy,
  // without gradient, beside the loss (a trainer's train metrics: Composer
  // updates each after each microbatch's backward): the head's
  // `train_metrics` op, each pass the unfused loss's forward traffic.
  std::int64_t train_metric_passes = 0;
  // What Recompute::Selective drops and reruns (Op::core_saved_bytes,
  // Op::selective_rerun).
  RecomputeModules recompute_modules = kDefaultRecomputeModules;
  // The routed experts' tokens on this rank over their balanced share
  // (top_k per token spread evenly): the busiest expert-parallel rank's
  // load under the plan's routing (strategies::MoeRouting::load).
  double expert_load = 1.0;
};

// The whole model: embedding, one block per transformer layer, head (final
// norm, logits, loss). Blocks differ by kind: each distinct kind is built
// once (`kinds`) and block i is kinds[kind_of[i]]. Kinds are the shapes
// present in a fixed order: expert MLP before dense (a MoE model's first
// blocks, DeepSeek's first_k_dense_replace), and within each full attention
// before a sliding window (ModelSpec::windowed_at: Gemma 2 and 3's local
// layers). kinds[0], the first present, is the model's main block. A model
// with one shape (dense, windowed in no layer or in every layer) has one kind.
struct OpChain {
  Layer embedding;
  std::vector<Layer> kinds;
  std::vector<std::int32_t> kind_of;  // per block, 0-based
  std::int64_t blocks = 0;            // kind_of.size()
  Layer head;

  // Block i (0-based) of the model.
  const Layer& block_at(std::int64_t i) const {
    return kinds[static_cast<std::size_t>(kind_of[static_cast<std::size_t>(i)])];
  }
  const Layer& main_block() const { return kinds.front(); }
  // Blocks of each kind (indexed as `kinds`) among the blocks listed.
  std::vector<std::int64_t> kind_counts(std::span<const std::int64_t> layers) const;
  // … among blocks first … first + n − 1.
  std::vector<std::int64_t> kind_counts(std::int64_t first, std::int64_t n) const;

  std::int64_t params() const;
  Flops fwd_flops() const;
  Flops bwd_flops() const;
  // Model FLOPs of one training step (forward + backward) for this microbatch.
  Flops model_flops() const { return fwd_flops() + bwd_flops(); }
};

OpChain expand(const ModelSpec& model, const ExpandOptions& opts = {});

// Parameters of the whole model (no parallelism), and those one token's
// forward pass uses: all but the routed experts it does not visit (top_k of
// each MoE block's experts count). Equal for dense models. Embedding and
// output layer are counted in both (as Mixtral's and Qwen's model cards do).
std::int64_t total_params(const ModelSpec& model);
std::int64_t active_params(const ModelSpec& model);

// An upper bound, in doubles, of the bytes Strata counts for a model
// trained on `microbatches` microbatches of `micro_batch` sequences on nodes
// of `gpus_per_node` GPUs: every parameter's states (32 bytes each, on every
// GPU of a node: a host holds its GPUs' offloaded states) and every
// activation of every microbatch in fp32, none sharded and none freed. Every
// byte count expand() and the memory models form is below it, so checking it
// against kMaxBytes (sim/limits.hpp) before expanding keeps them in 64 bits.
struct SizeBound {
  double params = 0;            // parameters, all experts, untied
  double state_bytes = 0;       // 32 bytes per parameter per GPU of a node
  double activation_bytes = 0;  // every microbatch's activations
  double total() const { return state_bytes + activation_bytes; }
  bool countable() const;  // total() <= kMaxBytes
  // Why it is not countable, for an InputError: "needs about 2.1e+21 bytes
  // (3.4e+15 parameters, 9.9e+19 bytes of activations for <what>); Strata counts at most ...".
  std::string rule(const std::string& what) const;
};
SizeBound size_bound(const ModelSpec& model, double micro_batch, double microbatches,
                     double gpus_per_node, AttentionKernel attention);

}  // namespace strata::cost
