#pragma once
// The ops of a GPT block (costmodel/ops.hpp's op chain), forward and
// backward, over raw fp32 buffers. Stateless and thread-safe: every buffer,
// scratch included, is the caller's (so it comes from the caller's
// allocator). Activations are row-major [tokens × features], tokens ordered
// (sequence, position).
//
// Conventions: forward writes its output. Backward writes the input gradient
// unless it says it accumulates; parameter gradients always accumulate (+=),
// so microbatches add up. Each op's comment names what it reads in backward:
// exactly the tensors the op chain says it saves.
#include <cstdint>

#include "backend/common/op_shapes.hpp"

namespace strata::backend::cpu {

// --- embedding (op `embedding`, `position_embedding`) -------------------------
// y[t] = table[tokens[t]] + pos[t mod seq] (pos may be null: no positions).
// Throws Error for a token outside [0, vocab).
// Saves: the token ids.
void embedding_forward(const std::int32_t* tokens, const float* table, const float* pos,
                       float* y, std::int64_t batch, std::int64_t seq, std::int64_t hidden,
                       std::int64_t vocab);
// dtable[tokens[t]] += dy[t]; dpos[t mod seq] += dy[t] (either may be null).
void embedding_backward(const std::int32_t* tokens, const float* dy, float* dtable,
                        float* dpos, std::int64_t batch, std::int64_t seq, std::int64_t hidden);
// Vocabulary-parallel table (Megatron-LM): `table` holds rows
// [begin, begin + rows) of the whole [vocab × hidden] table. Forward writes
// y[t] = the token's row when it is one of them, else zeros (the group sums
// the parts; positions are added after the sum). Backward adds dy[t] to the
// token's row when it is one of them. Tokens are checked against `vocab`.
void embedding_forward_part(const std::int32_t* tokens, const float* table, float* y,
                            std::int64_t n, std::int64_t hidden, std::int64_t vocab,
                            std::int64_t begin, std::int64_t rows);
void embedding_backward_part(const std::int32_t* tokens, const float* dy, float* dtable,
                             std::int64_t n, std::int64_t hidden, std::int64_t begin,
                             std::int64_t rows);
// Rows r in [0, n) of a [sequences × seq] layout starting at row first_row:
// row r holds position positions[(first_row + r) mod seq] of its sequence
// (context parallelism keeps some positions of each sequence, tensor
// parallelism with sequence parallelism some rows).
// Forward: y[r] += pos[position]. Backward: dpos[position] += dy[r].
void add_positions(float* y, const float* pos, std::int64_t n, std::int64_t first_row,
                   std::int64_t seq, std::int64_t hidden, const std::int32_t* positions);
void add_position_grads(const float* dy, float* dpos, std::int64_t n, std::int64_t first_row,
                        std::int64_t seq, std::int64_t hidden, const std::int32_t* positions);

// --- norms (ops `attn_norm`, `mlp_norm`, `final_norm`) ------------------------
// Layer norm over the last dimension: y = (x − mean)/sqrt(var + eps)·gamma + beta.
// Saves: its input x (mean and variance are recomputed in backward).
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                       std::int64_t rows, std::int64_t dim, float eps);
// dx ACCUMULATES (+=): the norm sits on a residual branch whose gradient
// already holds the skip path. dgamma, dbeta accumulate.
void layernorm_backward(const float* x, const float* gamma, const float* dy, float* dx,
                        float* dgamma, float* dbeta, std::int64_t rows, std::int64_t dim,
                        float eps);
// RMS norm (Llama): y = x / sqrt(mean(x²) + eps) · gamma. Saves: its input.
void rmsnorm_forward(const float* x, const float* gamma, float* y, std::int64_t rows,
                     std::int64_t dim, float eps);
// dx ACCUMULATES, dgamma accumulates.
void rmsnorm_backward(const float* x, const float* gamma, const float* dy, float* dx,
                      float* dgamma, std::int64_t rows, std::int64_t dim, float eps);

// --- linear (ops `qkv`, `attn_proj`, `mlp_up`, `mlp_up_gate`, `mlp_down`, `logits`)
// y[n×out] = x[n×in]·W + b, or y += x·W + b with `accumulate` (a residual
// add folded into the product). b may be null (no bias). W is stored as
// `layout` says (WeightLayout: backend/common/op_shapes.hpp).
// Saves: its input x.
void linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t n,
                    std::int64_t in, std::int64_t out, WeightLayout layout, bool accumulate);
// dx = dy·Wᵀ (+= with accumulate_dx; dx may be null: no input gradient);
// dw += xᵀ·dy; db += column sums of dy (db may be null).
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, std::int64_t n, std::int64_t in, std::int64_t out,
                     WeightLayout layout, bool accumulate_dx);

// --- standard causal attention (ops `attn_scores`, `softmax`, `attn_values`) ---
// qkv: [batch·seq × 3·heads·head_dim], each row Q | K | V, heads side by side
// within each (the `qkv` linear's output). probs: [batch × heads × seq × seq].
// out: [batch·seq × heads·head_dim]. P = softmax(QKᵀ/sqrt(head_dim) with
// keys after the query masked), out = P·V.
// Saves: Q and K (attn_scores), P (softmax), V (attn_values): the qkv tensor
// and probs. (AttentionDims: backend/common/op_shapes.hpp.)
//
// Dropout on the probabilities (op `attn_dropout`): `mask` (from
// dropout_mask, one byte per element of probs) is the caller's; `dropped`
// [like probs] receives P⊙mask/(1−p), which attn_values multiplies with V
// and saves. Backward reads both.
struct AttentionDropout {
  const std::uint8_t* mask = nullptr;
  float* dropped = nullptr;
  float p = 0.0f;
};
// out may be null: only P (and the dropout output), as selective recompute
// refills the attention core. dropout may be null: none.
void attention_forward(const float* qkv, float* probs, float* out, const AttentionDims& d,
                       const AttentionDropout* dropout = nullptr);
// dqkv (same layout as qkv) is written. scratch: seq·seq floats.
void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                        float* scratch, const AttentionDims& d,
                        const AttentionDropout* dropout = nullptr);

// Context parallelism (Megatron-LM's CP): each rank holds `sq` positions of
// every sequence (qpos, ascending), and attends with them to all `sk`
// positions of the sequence, whose K | V rows (`kv`, [batch·sk × 2·H], in
// position order) the group gathered. Query i sees keys 0..qpos[i].
// qkv: the rank's [batch·sq × 3·H] rows (its Q used); probs: [batch × heads
// × sq × sk]; out: [batch·sq × H].
struct ContextDims {
  std::int64_t batch = 1, sq = 1, sk = 1, heads = 1, head_dim = 1;
  std::int64_t hidden() const { return heads * head_dim; }
};
void attention_forward_cp(const float* qkv, const float* kv, const std::int32_t* qpos,
                          float* probs, float* out, const ContextDims& d);
// dqkv's Q columns are written (K and V columns untouched); dkv [batch·sk ×
// 2·H] receives this rank's part of the K and V gradients of every position
// (the group sums them). scratch: sq·sk floats.
void attention_backward_cp(const float* qkv, const float* kv, const std::int32_t* qpos,
                           const float* probs, const float* dout, float* dqkv, float* dkv,
                           float* scratch, const ContextDims& d);

// --- dropout (ops `embedding_dropout`, `attn_dropout`, `attn_out_dropout`, `mlp_dropout`)
// mask[i] = 1 (keep) or 0, from a counter-based hash of (seed, i): element i
// is dropped with probability p, the same on every thread and every rerun,
// so recomputation regenerates the same mask. Throws Error unless 0 <= p < 1.
// Saves: the mask, one byte per element.
void dropout_mask(std::uint8_t* mask, std::int64_t n, float p, std::uint64_t seed);
// y = x·mask/(1 − p) (forward, and backward on the gradient); y may alias x.
void dropout_apply(const float* x, const std::uint8_t* mask, float* y, std::int64_t n, float p);

// --- activations (ops `gelu`, `swiglu`) ----------------------------------------
// GeLU, tanh approximation (GPT-2, Megatron-LM):
// y = x/2·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))). Saves: its input.
void gelu_forward(const float* x, float* y, std::int64_t n);
// dx = dy·gelu'(x); dx may alias dy.
void gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n);
// SwiGLU (Llama): gu rows are gate | up (the `mlp_up_gate` linear's output,
// [rows × 2·f]); y[rows × f] = silu(gate)·up. Saves: gate and up.
void swiglu_forward(const float* gu, float* y, std::int64_t rows, std::int64_t f);
// dgu [rows × 2·f] is written.
void swiglu_backward(const float* gu, const float* dy, float* dgu, std::int64_t rows,
                     std::int64_t f);

// --- residual (ops `attn_residual`, `mlp_residual`) -----------------------------
// y = a + b. Saves nothing; its backward passes the gradient to both inputs
// unchanged (the block keeps one residual-stream gradient and adds to it).
void residual_forward(const float* a, const float* b, float* y, std::int64_t n);

// --- loss (op `loss`) ---------------------------------------------------------
// Softmax cross-entropy. Turns logits [n × vocab] into softmax probabilities
// in place and returns the summed (not averaged) loss over the n rows in
// double precision. Throws Error for a target outside [0, vocab).
// Saves: the fp32 logits, here as their softmax (the same bytes).
double cross_entropy_forward(float* logits, const std::int32_t* targets, std::int64_t n,
                             std::int64_t vocab);
// Turns the probabilities into the gradient of scale·(summed loss) in place:
// (p − onehot(target))·scale. For a mean over N tokens, scale = 1/N. With a
// split vocabulary the rows hold columns [vocab_begin, vocab_begin + vocab)
// and a target outside them has no one-hot entry here.
void cross_entropy_backward(float* probs, const std::int32_t* targets, std::int64_t n,
                            std::int64_t vocab, float scale, std::int64_t vocab_begin = 0);
// Cross-entropy over a vocabulary split by columns (Megatron-LM's
// vocab-parallel cross-entropy), in steps between the group's reductions.
// Rows hold columns [vocab_begin, vocab_begin + vocab) of `whole_vocab`.
// 1. mx[r] = the row's maximum (the group then takes the maximum over parts).
void row_max(const float* logits, std::int64_t n, std::int64_t vocab, float* mx);
// 2. logits := exp(logits − mx[r]); sums[r] = the row's sum of them;
//    sums[n + r] = logit[target] − mx[r] when the target is a local column,
//    else 0 (the group then sums both halves of `sums` over parts).
void exp_shifted_sums(float* logits, const std::int32_t* targets, std::int64_t n,
                      std::int64_t vocab, std::int64_t vocab_begin, std::int64_t whole_vocab,
                      const float* mx, float* sums);
// 3. logits := logits / sum[r] (probabilities); returns the summed loss
//    Σ log(sum[r]) − shifted_target[r] in double.
double normalize_rows(float* logits, std::int64_t n, std::int64_t vocab, const float* sums);

// --- checks -------------------------------------------------------------------
// The index of the first NaN or ±Inf among x[0..n), or −1 when all are finite.
std::int64_t first_non_finite(const float* x, std::int64_t n);

}  // namespace strata::backend::cpu
