#pragma once
// Training techniques whose effect the cost model must know: numeric
// precision, the attention kernel and the activation-recompute policy. The
// plan (strategies/) chooses them; the cost and memory models price them.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/names.hpp"
#include "sim/units.hpp"

namespace strata::cost {

// 16-bit, fp8 and fp4 are mixed precision with fp32 master weights. fp8
// and fp4 are bf16 training whose blocks' linear layers multiply in FP8
// (Transformer Engine's FP8 recipes, fp8_recipe) or NVFP4 (Transformer
// Engine's NVFP4BlockScaling; Megatron-Core's --fp4-format e2m1
// --fp4-recipe nvfp4): E2M1 values, an E4M3 scale per 16 elements and an
// fp32 scale per tensor, in the forward, data-gradient and weight-gradient
// GEMMs alike; attention, the embedding and the output layer stay bf16.
enum class Precision { FP32, FP16, BF16, FP8, FP4 };
// Whether the blocks' linear layers multiply quantized operands.
constexpr bool quantized_gemms(Precision p) { return p == Precision::FP8 || p == Precision::FP4; }

// `Standard` materialises the attention scores (saved for backward: softmax
// output, dropout mask and output, 5·a·s²·b bytes per layer in 16 bits);
// `Flash` fuses them and saves only the output and fp32 log-sum-exp statistics.
// `Cudnn` is Transformer Engine's cuDNN fused attention (FusedAttention,
// Megatron-Core's --attention-backend fused), which TE prefers over
// FlashAttention on Hopper and newer (transformer_engine/pytorch/attention
// get_attention_backend: "Disabling FlashAttention to give FusedAttention
// preference on Hopper+ for performance reasons"): it saves what flash
// saves and runs at the calibration's cudnn_fraction_of_gemm where the GPU
// has one (as flash elsewhere, where TE runs FlashAttention).
enum class AttentionKernel { Flash, Standard, Cudnn };
// Whether the scores stay inside one fused kernel (nothing s × s saved).
constexpr bool fused_attention(AttentionKernel k) { return k != AttentionKernel::Standard; }

// How the loss's cross-entropy runs over the logits (docs/memory.md, the
// loss). `InPlace`: Megatron-LM's vocabulary-parallel cross-entropy
// (megatron/core/tensor_parallel/cross_entropy.py) computes the softmax of
// fp32 logits in place, saves it, and its backward turns that buffer into
// the gradient in place: 4 bytes per logit saved, the gradient cast back to
// the activation type. `Unfused`: PyTorch's F.cross_entropy on an fp32 copy
// of the logits (torchtitan's cross_entropy_loss, torchtitan/components/
// loss.py: cross_entropy(pred.float(), labels)): log_softmax saves its fp32
// output, and the backward holds nll_loss's fp32 gradient and
// log_softmax's fp32 gradient beside it, 8 bytes per logit more. `Fused`:
// one kernel each way over the logits in the activation type (flash-attn's
// CrossEntropyLoss, apex's xentropy kernel, as llm-foundry's default
// loss_fn fused_crossentropy calls it): the logits saved as they are (the
// activation type's bytes per logit) and a new gradient of their type.
// `Parallel`: PyTorch's loss_parallel over vocabulary-sharded logits
// (torch/distributed/tensor/parallel/loss.py, as torchtitan runs its loss
// under tensor parallelism): log_softmax of the fp32 copy decomposed into
// eager ops, saving its fp32 output; the backward fuses nll_loss's and
// log_softmax's into zeros, a scatter, exp, add and multiply, holding three
// fp32 tensors at once beside the saved one, 12 bytes per logit.
enum class CrossEntropy { InPlace, Unfused, Fused, Parallel };

// EveryNth (torchtitan's layer-level selective checkpointing): every
// recompute_k-th layer of a chunk is fully recomputed, alone; the others keep
// everything. SelectiveOp (torchtitan's op-level selective checkpointing,
// selective_ac_option "op"): each block keeps its input and the outputs of
// its save list (every other matrix product, the attention kernel) and reruns
// the rest before its backward. Selective is Megatron-LM's: each block drops
// and reruns only the attention core.
enum class Recompute { None, Selective, Full, EveryK, Sqrt, Optimal, EveryNth, SelectiveOp };

// What Megatron-Core's selective recompute reruns (TransformerConfig.
// recompute_modules with recompute_granularity "selective"; the default is
// the attention core alone, which `Recompute::Selective` has always meant).
// Output-discarding modules (layernorm, mla_up_proj, moe_act) free their
// output after its consumers ran and recompute it before their backward, so
// the bytes those consumers keep of it are not kept; core_attn reruns the
// attention core from Q, K and V. mlp, moe and shared_experts checkpoint a
// whole submodule from its input; their reruns repeat communication Strata
// does not re-price, so they are refused (strategies/validate.cpp).
enum class RecomputeModule : std::uint8_t { CoreAttn, Layernorm, MlaUpProj, MoeAct, Mlp, Moe, SharedExperts };
// A set of modules, one bit each (bit i: RecomputeModule i).
using RecomputeModules = std::uint8_t;
constexpr RecomputeModules module_bit(RecomputeModule m) {
  return static_cast<RecomputeModules>(1u << static_cast<unsigned>(m));
}
constexpr bool has_module(RecomputeModules set, RecomputeModule m) { return (set & module_bit(m)) != 0; }
inline constexpr RecomputeModules kDefaultRecomputeModules = module_bit(RecomputeModule::CoreAttn);

// How FP8 training scales its operands: Transformer Engine's recipes
// (transformer_engine/common/recipe/__init__.py), named as Megatron-Core's
// --fp8-recipe (0.12+: delayed, tensorwise, blockwise, mxfp8).
//   Delayed     one fp32 scale per tensor from an amax history (DelayedScaling,
//               TE's default): the amax is taken in the cast, one read.
//   Tensorwise  one scale per tensor from the tensor itself (Float8CurrentScaling):
//               a read for the amax, then a read to cast ("reading the tensor
//               twice", TE docs fp8_current_scaling.rst).
//   Blockwise   an fp32 scale per 1×128 block of activations and gradients
//               (128×128 of weights) (Float8BlockScaling; DeepSeek-V3's recipe).
//   Mxfp8       an E8M0 byte per 32 elements (MXFP8BlockScaling; Blackwell).
//   Rowwise     torchao's (torchtitan's float8 recipe_name "rowwise"): an fp32
//               scale per row, taken from the tensor itself along the GEMM's
//               reduction axis — each GEMM's operands cast apart (torchao
//               float8_linear.py, manual_float8_matmul_with_args_in_hp: the
//               16-bit input and weight saved, cast again in the backward).
enum class Fp8Recipe { Delayed, Tensorwise, Blockwise, Mxfp8, Rowwise };

// What quantizing one element of a GEMM operand costs and keeps under a
// precision and recipe. `native_columnwise`: the GPU's tensor cores read a
// column-wise (transposed) operand without a physical copy (Blackwell;
// Hopper cannot: TE docs performance_considerations.rst).
struct GemmQuantization {
  double reads = 1;        // passes over the 16-bit operand (2 bytes an element)
  double copies = 1;       // quantized copies written (row-wise and column-wise)
  double elem_bytes = 1;   // bytes of an element of a copy (FP8 1, FP4 0.5)
  double scale_bytes = 0;  // bytes of scales per element of each copy
  double bytes_per_copy() const { return elem_bytes + scale_bytes; }
  double bytes_written() const { return copies * bytes_per_copy(); }
};
constexpr GemmQuantization gemm_quantization(Precision p, Fp8Recipe r, bool native_columnwise) {
  // NVFP4: the per-tensor scale comes from the tensor's own amax (a read
  // before the cast); the 1×16 block scales run along one dimension, so the
  // row-wise and column-wise copies are quantized together but apart
  // (Transformer Engine's quantize_transpose_nvfp4 writes both, the weight
  // gradient's operands after a 16-point random Hadamard transform fused
  // into the cast); each element 4 bits plus an E4M3 byte per 16.
  if (p == Precision::FP4) return {2, 2, 0.5, 1.0 / 16};
  switch (r) {
    // Per-tensor: the wgrad GEMM needs the operand column-wise, a second
    // (transposed) copy on Hopper, the same bytes on Blackwell.
    case Fp8Recipe::Delayed: return {1, native_columnwise ? 1.0 : 2.0, 1, 0};
    case Fp8Recipe::Tensorwise: return {2, native_columnwise ? 1.0 : 2.0, 1, 0};
    // Block scales are along one dimension: the column-wise copy is
    // quantized on its own (TE docs: "transposing a 1D quantized tensor is
    // not supported"; MXFP8: "Both must be quantized independently").
    case Fp8Recipe::Blockwise: return {1, 2, 1, 4.0 / 128};
    case Fp8Recipe::Mxfp8: return {1, 2, 1, 1.0 / 32};
    // Per cast: an amax pass and the cast (dynamic scaling), one copy; the
    // scale per row (4 bytes per row of thousands) is left out.
    case Fp8Recipe::Rowwise: return {2, 1, 1, 0};
  }
  return {};
}

// Bytes a block GEMM's weight keeps per element in FP8 for the step: Transformer
// Engine quantizes it at a step's first microbatch and keeps it for the rest
// (is_first_microbatch, which Megatron-Core passes; the column-wise transpose
// is not kept: Megatron-Core's --keep-fp8-transpose-cache is off by default).
// One byte (TE docs' memory example: "1 MB (weight in FP8)" for a 2 MB bf16
// weight), with 128×128 block scales under blockwise; MXFP8's row-wise and
// column-wise copies are quantized apart, each with its scales.
constexpr double fp8_weight_bytes(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Delayed:
    case Fp8Recipe::Tensorwise: return 1;
    case Fp8Recipe::Blockwise: return 1 + 4.0 / (128 * 128);
    case Fp8Recipe::Mxfp8: return 2 * (1 + 1.0 / 32);
    case Fp8Recipe::Rowwise: return 0;  // cast in every pass, none kept
  }
  return 1;
}
// The same for any precision: NVFP4 keeps the weight's row-wise and
// column-wise copies (its 16×16 weight blocks are quantized both ways by
// the one cast-transpose), 0 for unquantized precisions.
constexpr double quantized_weight_bytes(Precision p, Fp8Recipe r) {
  if (p == Precision::FP4) return gemm_quantization(p, r, false).bytes_written();
  return p == Precision::FP8 ? fp8_weight_bytes(r) : 0;
}

// Bytes per element of a saved activation.
constexpr Bytes activation_bytes(Precision p) { return p == Precision::FP32 ? 4 : 2; }

}  // namespace strata::cost

namespace strata {

template <>
struct EnumNames<cost::Precision> {
  static constexpr std::array<std::pair<cost::Precision, std::string_view>, 5> table{
      {{cost::Precision::FP32, "fp32"},
       {cost::Precision::FP16, "fp16"},
       {cost::Precision::BF16, "bf16"},
       {cost::Precision::FP8, "fp8"},
       {cost::Precision::FP4, "fp4"}}};
};
template <>
struct EnumNames<cost::Fp8Recipe> {
  static constexpr std::array<std::pair<cost::Fp8Recipe, std::string_view>, 5> table{
      {{cost::Fp8Recipe::Delayed, "delayed"},
       {cost::Fp8Recipe::Tensorwise, "tensorwise"},
       {cost::Fp8Recipe::Blockwise, "blockwise"},
       {cost::Fp8Recipe::Mxfp8, "mxfp8"},
       {cost::Fp8Recipe::Rowwise, "rowwise"}}};
};
template <>
struct EnumNames<cost::AttentionKernel> {
  static constexpr std::array<std::pair<cost::AttentionKernel, std::string_view>, 3> table{
      {{cost::AttentionKernel::Flash, "flash"},
       {cost::AttentionKernel::Standard, "standard"},
       {cost::AttentionKernel::Cudnn, "cudnn"}}};
};
template <>
struct EnumNames<cost::CrossEntropy> {
  static constexpr std::array<std::pair<cost::CrossEntropy, std::string_view>, 4> table{
      {{cost::CrossEntropy::InPlace, "in_place"},
       {cost::CrossEntropy::Unfused, "unfused"},
       {cost::CrossEntropy::Fused, "fused"},
       {cost::CrossEntropy::Parallel, "parallel"}}};
};
template <>
struct EnumNames<cost::RecomputeModule> {
  static constexpr std::array<std::pair<cost::RecomputeModule, std::string_view>, 7> table{
      {{cost::RecomputeModule::CoreAttn, "core_attn"},
       {cost::RecomputeModule::Layernorm, "layernorm"},
       {cost::RecomputeModule::MlaUpProj, "mla_up_proj"},
       {cost::RecomputeModule::MoeAct, "moe_act"},
       {cost::RecomputeModule::Mlp, "mlp"},
       {cost::RecomputeModule::Moe, "moe"},
       {cost::RecomputeModule::SharedExperts, "shared_experts"}}};
};
template <>
struct EnumNames<cost::Recompute> {
  static constexpr std::array<std::pair<cost::Recompute, std::string_view>, 8> table{
      {{cost::Recompute::None, "none"},
       {cost::Recompute::Selective, "selective"},
       {cost::Recompute::Full, "full"},
       {cost::Recompute::EveryK, "every_k"},
       {cost::Recompute::Sqrt, "sqrt"},
       {cost::Recompute::Optimal, "optimal"},
       {cost::Recompute::EveryNth, "every_nth"},
       {cost::Recompute::SelectiveOp, "selective_op"}}};
};

}  // namespace strata

namespace strata::cost {
// The modules of a set by name, in RecomputeModule order.
inline std::vector<std::string_view> module_names(RecomputeModules set) {
  std::vector<std::string_view> out;
  for (const auto& [m, name] : EnumNames<RecomputeModule>::table)
    if (has_module(set, m)) out.push_back(name);
  return out;
}
// The same, space-separated (Megatron-LM's --recompute-modules).
inline std::string module_list(RecomputeModules set) {
  std::string out;
  for (const std::string_view name : module_names(set)) out += (out.empty() ? "" : " ") + std::string(name);
  return out;
}
}  // namespace strata::cost
