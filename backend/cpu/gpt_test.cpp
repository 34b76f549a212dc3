#include "backend/cpu/gpt.hpp"

#include <doctest/doctest.h>

#include "tests/testing.hpp"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/common/rng.hpp"
#include "backend/cpu/test_util.hpp"
#include "costmodel/ops.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

cost::ModelSpec tiny(cost::MlpKind mlp = cost::MlpKind::Gelu,
                     cost::NormKind norm = cost::NormKind::LayerNorm, bool bias = true,
                     bool tied = true) {
  cost::ModelSpec m = testing::tiny_gpt();
  m.mlp = mlp;
  m.norm = norm;
  m.bias = bias;
  m.tied_embeddings = tied;
  return m;
}

std::vector<std::int32_t> ids(std::size_t n, std::int64_t vocab, Rng& rng) {
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(rng.below(vocab));
  return v;
}

std::size_t tag(MemTag t) { return static_cast<std::size_t>(t); }

// Central differences of the mean loss against the analytical gradient, for
// six entries of every parameter tensor. Parameters are redrawn larger than
// GPT-2's init (sd 0.3) so gradients stand well above fp32 round-off.
void check_model_gradients(const cost::ModelSpec& spec, Dropout dropout = {}) {
  TrackingAllocator alloc;
  GptModel model(spec, alloc, 7);
  Rng rng(11);
  for (std::size_t i = 0; i < model.params().size(); ++i) {
    const bool gain = model.names()[i].ends_with("norm.gain");
    for (float& v : model.params()[i].span())
      v = static_cast<float>((gain ? 1.0 : 0.0) + 0.3 * rng.normal());
  }
  const std::int64_t batch = 2;
  const auto n = static_cast<std::size_t>(batch * spec.seq_len);
  const auto tokens = ids(n, spec.vocab, rng), targets = ids(n, spec.vocab, rng);
  model.zero_grads();
  model.forward_backward(tokens, targets, batch, StepOptions{.dropout = dropout});
  for (std::size_t i = 0; i < model.params().size(); ++i) {
    Tensor& p = model.params()[i];
    std::vector<float> x(p.span().begin(), p.span().end());
    const std::vector<float> analytic(model.grads()[i].span().begin(),
                                      model.grads()[i].span().end());
    std::vector<std::size_t> idx;
    for (int k = 0; k < 6; ++k) idx.push_back(static_cast<std::size_t>(rng.below(p.numel())));
    auto f = [&] {
      std::copy(x.begin(), x.end(), p.data());
      return model.loss(tokens, targets, batch, dropout);
    };
    test::check_grad(model.names()[i], x, analytic, f, 1e-2f, 1e-3, 2e-2, idx);
    std::copy(x.begin(), x.end(), p.data());
  }
}

TEST_CASE("cpu/gpt: GPT (GeLU, layer norm, bias, tied logits): gradients match finite differences") {
  // 2 layers, hidden 16, heads 2, seq 8, vocab 11: the whole chain's backward.
  check_model_gradients(tiny());
}

TEST_CASE("cpu/gpt: Llama-style GPT (SwiGLU, RMS norm, no bias, untied logits): gradients match finite differences") {
  // The other branch of every op choice the model implements.
  check_model_gradients(tiny(cost::MlpKind::Swiglu, cost::NormKind::RmsNorm, false, false));
}

// Largest |a − b| over every gradient entry, relative to the largest |a|
// of the same tensor; 0 when bit-identical.
double grad_mismatch(const GptModel& a, const GptModel& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.grads().size(); ++i) {
    float largest = 0.0f, diff = 0.0f;
    for (std::int64_t j = 0; j < a.grads()[i].numel(); ++j) {
      largest = std::max(largest, std::abs(a.grads()[i][j]));
      diff = std::max(diff, std::abs(a.grads()[i][j] - b.grads()[i][j]));
    }
    if (diff > 0.0f) worst = std::max(worst, static_cast<double>(diff / largest));
  }
  return worst;
}

cost::ModelSpec with_dropout(cost::ModelSpec m) {
  m.dropout = true;
  return m;
}

TEST_CASE("cpu/gpt: GPT with dropout (p 0.2, fixed seed): gradients match finite differences") {
  // Masks depend on the seed only, so the loss is a smooth function of the
  // parameters and the backward through all four dropout sites is checkable.
  check_model_gradients(with_dropout(tiny()), Dropout{.p = 0.2f, .seed = 99});
}

TEST_CASE("cpu/gpt: dropout with p 0 is the model without dropout; p > 0 changes the loss") {
  // All-ones masks scale by 1: loss and gradients equal the dropout-free
  // model's (same seed, same parameters) up to the order of the residual
  // add; p = 0.3 gives another loss, the same for the same seed.
  TrackingAllocator alloc;
  GptModel plain(tiny(), alloc, 4), drop(with_dropout(tiny()), alloc, 4);
  Rng rng(8);
  const auto n = static_cast<std::size_t>(2 * tiny().seq_len);
  const auto tokens = ids(n, 11, rng), targets = ids(n, 11, rng);
  const double l = plain.forward_backward(tokens, targets, 2);
  CHECK(drop.forward_backward(tokens, targets, 2) == doctest::Approx(l).epsilon(1e-6));
  CHECK(grad_mismatch(plain, drop) < 1e-5);
  const double l3 = drop.loss(tokens, targets, 2, {.p = 0.3f, .seed = 1});
  CHECK(std::abs(l3 - l) > 1e-3);
  CHECK(drop.loss(tokens, targets, 2, {.p = 0.3f, .seed = 1}) == l3);
}

TEST_CASE("cpu/gpt: GPT parameters and saved activations equal the op chain's at fp32") {
  // Parameter count = cost::expand(...).params(); bytes saved per block,
  // embedding and head = the op chain's saved_bytes with fp32 activations and
  // standard attention: per block 4·sb(8h + up + f) + 4·as²b (up = f for
  // GeLU, 2f for SwiGLU); with GeLU and f = 4h that is
  // twice Korthikanti's 16-bit sbh(34 + 5as/h) less its dropout terms.
  // With dropout add the op chain's masks (1 byte each: sbh after the
  // embedding, the projection and the MLP, as²b on the scores) and the
  // dropout output attn_values multiplies (4·as²b).
  for (const auto& spec : {tiny(), tiny(cost::MlpKind::Swiglu, cost::NormKind::RmsNorm, false, false),
                           with_dropout(tiny())}) {
    TrackingAllocator alloc;
    GptModel model(spec, alloc, 1);
    const std::int64_t batch = 3;
    cost::ExpandOptions o;
    o.micro_batch = batch;
    o.precision = cost::Precision::FP32;
    o.attention = cost::AttentionKernel::Standard;
    const auto chain = cost::expand(spec, o);
    CHECK(model.parameter_count() == chain.params());
    CHECK(alloc.stats().current[tag(MemTag::Params)] == 4 * chain.params());
    CHECK(alloc.stats().current[tag(MemTag::Grads)] == 4 * chain.params());

    Rng rng(2);
    const auto n = static_cast<std::size_t>(batch * spec.seq_len);
    const auto tokens = ids(n, spec.vocab, rng), targets = ids(n, spec.vocab, rng);
    model.forward_backward(tokens, targets, batch);
    const auto& s = model.last_saved_bytes();
    CHECK(s.embedding == chain.embedding.saved_bytes());
    CHECK(s.block == chain.main_block().saved_bytes());
    CHECK(s.head == chain.head.saved_bytes());
    const std::int64_t sb = spec.seq_len * batch, h = spec.hidden, f = spec.ffn_hidden;
    const std::int64_t up = spec.mlp == cost::MlpKind::Swiglu ? 2 * f : f;
    const std::int64_t as2b = spec.heads * spec.seq_len * sb;
    CHECK(s.block == 4 * sb * (8 * h + up + f) + 4 * as2b +
                         (spec.dropout ? 2 * sb * h + 5 * as2b : 0));
    // Everything a step holds is gone after it; its peak holds at least
    // every layer's saved tensors at once.
    const auto st = alloc.stats();
    CHECK(st.current[tag(MemTag::Activations)] == 0);
    CHECK(st.current[tag(MemTag::Workspace)] == 0);
    CHECK(st.peak[tag(MemTag::Activations)] >= s.embedding + spec.layers * s.block + s.head);
  }
}

TEST_CASE("cpu/gpt: GPT step: deterministic, starts at log V, microbatches add up") {
  // The same seed gives the same loss; near-zero init predicts uniformly
  // (loss ≈ log 11); two microbatches of 1 with loss_scale ½ give the
  // gradients of one batch of 2.
  const auto spec = tiny();
  TrackingAllocator alloc;
  GptModel a(spec, alloc, 5), b(spec, alloc, 5);
  Rng rng(3);
  const std::size_t n = static_cast<std::size_t>(spec.seq_len);
  const auto tokens = ids(2 * n, spec.vocab, rng), targets = ids(2 * n, spec.vocab, rng);
  const double la = a.forward_backward(tokens, targets, 2);
  CHECK(la == b.loss(tokens, targets, 2));
  CHECK(la == doctest::Approx(std::log(11.0)).epsilon(0.02));

  const std::span<const std::int32_t> t(tokens), y(targets);
  const double l0 = b.forward_backward(t.first(n), y.first(n), 1, 0.5f);
  const double l1 = b.forward_backward(t.last(n), y.last(n), 1, 0.5f);
  CHECK((l0 + l1) / 2 == doctest::Approx(la).epsilon(1e-6));
  for (std::size_t i = 0; i < a.grads().size(); ++i) {
    float largest = 0.0f, worst = 0.0f;
    for (std::int64_t j = 0; j < a.grads()[i].numel(); ++j) {
      largest = std::max(largest, std::abs(a.grads()[i][j]));
      worst = std::max(worst, std::abs(a.grads()[i][j] - b.grads()[i][j]));
    }
    CHECK_MESSAGE(worst <= 1e-4f * largest, a.names()[i]);
  }
}

TEST_CASE("cpu/gpt: recompute (selective, full, per layer) gives bit-identical gradients and the op chain's saved bytes") {
  // Recomputing reruns the same kernels on the same inputs (dropout masks
  // regenerate from their seed), so loss and gradients equal the plain
  // step's exactly, with and without dropout; the bytes kept per block are
  // cost::expand's saved_bytes(policy): Selective drops the softmax output,
  // Full keeps only the block's input. The peak falls accordingly.
  set_blas_threads(1);
  for (const auto& spec : {tiny(), with_dropout(tiny())}) {
  const Dropout drop{.p = spec.dropout ? 0.1f : 0.0f, .seed = 5};
  const std::int64_t batch = 2;
  cost::ExpandOptions o;
  o.micro_batch = batch;
  o.precision = cost::Precision::FP32;
  o.attention = cost::AttentionKernel::Standard;
  const auto chain = cost::expand(spec, o);
  Rng rng(4);
  const auto n = static_cast<std::size_t>(batch * spec.seq_len);
  const auto tokens = ids(n, spec.vocab, rng), targets = ids(n, spec.vocab, rng);

  TrackingAllocator base_alloc;
  GptModel base(spec, base_alloc, 3);
  const double base_loss = base.forward_backward(tokens, targets, batch, StepOptions{.dropout = drop});
  const Bytes base_peak = base_alloc.stats().peak[tag(MemTag::Activations)];
  using R = cost::Recompute;
  for (const auto& opts :
       {StepOptions{.recompute = R::Selective, .dropout = drop},
        StepOptions{.recompute = R::Full, .dropout = drop},
        StepOptions{.layer_recompute = {R::Full, R::None}, .dropout = drop}}) {
    TrackingAllocator alloc;
    GptModel model(spec, alloc, 3);
    CHECK(model.forward_backward(tokens, targets, batch, opts) == base_loss);
    CHECK(grad_mismatch(base, model) == 0.0);
    const R policy = opts.layer_recompute.empty() ? opts.recompute : R::None;  // the largest block
    CHECK(model.last_saved_bytes().block == chain.main_block().saved_bytes(policy));
    if (opts.recompute == R::Full)
      CHECK(alloc.stats().peak[tag(MemTag::Activations)] < base_peak);
  }
  GptModel model(spec, base_alloc, 3);
  CHECK_THROWS_AS(model.forward_backward(tokens, targets, batch, StepOptions{.recompute = R::EveryK}),
                  Error);
  }
}

TEST_CASE("cpu/gpt: per-layer steps, two microbatches interleaved, equal one batch") {
  // Forward of microbatch 0 and 1, then their backwards (a pipeline-like
  // order through the public per-layer entry points), each with loss scale
  // ½, gives the gradients of forward_backward on both sequences at once
  // (up to fp32 summation order: 1e-4 of each tensor's largest entry).
  set_blas_threads(1);
  const auto spec = tiny();
  Rng rng(6);
  const auto S = static_cast<std::size_t>(spec.seq_len);
  const auto tokens = ids(2 * S, spec.vocab, rng), targets = ids(2 * S, spec.vocab, rng);
  TrackingAllocator alloc;
  GptModel whole(spec, alloc, 8), parts(spec, alloc, 8);
  const double loss = whole.forward_backward(tokens, targets, 2);

  const std::span<const std::int32_t> t(tokens), y(targets);
  EmbeddingSaved emb[2];
  std::vector<BlockSaved> blocks[2];
  HeadSaved head[2];
  double sum = 0.0;
  for (int mb = 0; mb < 2; ++mb) {
    Tensor x = parts.embedding_forward(t.subspan(mb * S, S), 1, emb[mb]);
    blocks[mb].resize(static_cast<std::size_t>(spec.layers));
    for (int l = 0; l < spec.layers; ++l) {
      x = parts.block_forward(l, std::move(x), blocks[mb][static_cast<std::size_t>(l)]);
      GptModel::drop_for_recompute(blocks[mb][static_cast<std::size_t>(l)], cost::Recompute::Full);
    }
    sum += parts.head_forward(std::move(x), y.subspan(mb * S, S), 0.5f, head[mb]);
  }
  CHECK(sum / 2 == doctest::Approx(loss).epsilon(1e-6));
  for (int mb = 0; mb < 2; ++mb) {
    BackwardBuffers buf = parts.backward_buffers(1);
    parts.head_backward(head[mb], buf);
    for (int l = spec.layers - 1; l >= 0; --l) {
      auto& s = blocks[mb][static_cast<std::size_t>(l)];
      CHECK_THROWS_AS(parts.block_backward(l, s, buf), Error);  // dropped: recompute first
      parts.recompute(l, s);
      parts.block_backward(l, s, buf);
    }
    parts.embedding_backward(emb[mb], buf);
  }
  CHECK(grad_mismatch(whole, parts) < 1e-4);
}

TEST_CASE("cpu/gpt: four models stepping on four threads at once match a model stepping alone") {
  // Ranks will be threads: kernels keep no state and OpenBLAS (one thread
  // per call) is re-entrant, so concurrent steps give bit-identical
  // gradients to a sequential one (hidden 64, seq 32: real GEMM blocking).
  set_blas_threads(1);
  auto spec = tiny();
  spec.hidden = 64;
  spec.heads = 4;
  spec.kv_heads = 4;
  spec.ffn_hidden = 256;
  spec.seq_len = 32;
  Rng rng(21);
  const auto n = static_cast<std::size_t>(2 * spec.seq_len);
  const auto tokens = ids(n, spec.vocab, rng), targets = ids(n, spec.vocab, rng);
  TrackingAllocator alone_alloc;
  GptModel alone(spec, alone_alloc, 2);
  const double loss = alone.forward_backward(tokens, targets, 2);

  std::vector<TrackingAllocator> allocs(4);
  std::vector<GptModel> models;
  for (auto& a : allocs) models.emplace_back(spec, a, 2);
  std::vector<double> losses(4);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < 4; ++r)
      threads.emplace_back([&, r] {
        for (int k = 0; k < 3; ++k) {
          models[r].zero_grads();
          losses[r] = models[r].forward_backward(tokens, targets, 2);
        }
      });
  }
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(losses[r] == loss);
    CHECK(grad_mismatch(alone, models[r]) == 0.0);
  }
}

TEST_CASE("cpu/gpt: GPT rejects what it does not implement and malformed batches") {
  // GQA and rotary positions throw; so do wrong id counts, dropout on a
  // model without it, and p outside [0, 1).
  TrackingAllocator alloc;
  auto m = tiny();
  m.kv_heads = 1;
  CHECK_THROWS_AS(GptModel(m, alloc, 1), Error);
  m = tiny();
  m.position_embedding = cost::PositionEmbedding::Rope;
  CHECK_THROWS_AS(GptModel(m, alloc, 1), Error);
  GptModel model(tiny(), alloc, 1);
  std::vector<std::int32_t> few(5, 0);
  CHECK_THROWS_AS(model.forward_backward(few, few, 1), Error);
  std::vector<std::int32_t> ok(8, 0);
  CHECK_THROWS_AS(model.loss(ok, ok, 1, {.p = 0.1f}), Error);
  GptModel dropping(with_dropout(tiny()), alloc, 1);
  CHECK_THROWS_AS(dropping.loss(ok, ok, 1, {.p = 1.0f}), Error);
}

}  // namespace
}  // namespace strata::backend::cpu
