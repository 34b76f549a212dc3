// Closed forms from ../shared/validation/published_cases.json ("formulas"),
// checked against totals obtained by summing the op chain.
#include "costmodel/ops.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "costmodel/model_io.hpp"
#include "tests/testing.hpp"

namespace strata::cost {
namespace {

ModelSpec gpt(std::int64_t l, std::int64_t h, std::int64_t a, std::int64_t s = 2048,
              std::int64_t V = 51200) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = l;
  m.hidden = h;
  m.heads = a;
  m.kv_heads = a;
  m.ffn_hidden = 4 * h;
  m.vocab = V;
  m.seq_len = s;
  m.dropout = true;  // Megatron GPT, as in Korthikanti et al.
  return m;
}

// Megatron Eq. 2: P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)), written out as
// integers: 12lh² + 13lh + (V+s)h.
std::int64_t megatron_eq2(const ModelSpec& m) {
  const std::int64_t l = m.layers, h = m.hidden;
  return 12 * l * h * h + 13 * l * h + (m.vocab + m.seq_len) * h;
}

TEST_CASE("GPT parameters by summation match Megatron Eq. 2") {
  // Eq. 2 omits the final layer norm (2h parameters); the op chain has it.
  for (const auto& m : {gpt(96, 12288, 96), gpt(24, 2304, 24), gpt(128, 25600, 160),
                        gpt(40, 6144, 48)}) {
    const auto c = expand(m);
    CHECK(c.params() == megatron_eq2(m) + 2 * m.hidden);
  }
  // GPT-3 175B: 174.6 B parameters (MEG21 Eq. 2, vocab 51200).
  CHECK(static_cast<double>(expand(model_preset("gpt3-175b")).params()) ==
        doctest::Approx(174.6e9).epsilon(0.0005));
}

TEST_CASE("model FLOPs by summation match Korthikanti Eq. 7") {
  // 72·B·l·s·h²·(1 + s/(6h) + V/(12·h·l)) per iteration of B sequences;
  // only matrix products count, backward is twice forward.
  for (auto attention : {AttentionKernel::Standard, AttentionKernel::Flash}) {
    const auto m = gpt(96, 12288, 96);
    const double B = 1536, l = 96, s = 2048, h = 12288, V = 51200;
    ExpandOptions o;
    o.micro_batch = 1536;
    o.attention = attention;
    const auto c = expand(m, o);
    const double eq7 = 72 * B * l * s * h * h * (1 + s / (6 * h) + V / (12 * h * l));
    CHECK(c.model_flops() == doctest::Approx(eq7).epsilon(1e-12));
    // Forward is a third of the total.
    CHECK(c.fwd_flops() == doctest::Approx(eq7 / 3).epsilon(1e-12));
  }
}

TEST_CASE("full-recompute FLOPs match Megatron Eq. 3") {
  // 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)): model FLOPs plus one more forward
  // pass of every transformer block (the head is not recomputed).
  const auto m = gpt(40, 6144, 48);
  const double B = 1024, l = 40, s = 2048, h = 6144, V = 51200;
  ExpandOptions o;
  o.micro_batch = 1024;
  const auto c = expand(m, o);
  const double summed = c.model_flops() + static_cast<double>(c.blocks) * c.main_block().fwd_flops();
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  CHECK(summed == doctest::Approx(eq3).epsilon(1e-12));
}

// Korthikanti Table 2, per transformer layer, 16-bit activations, standard
// (non-fused) attention with dropout, in bytes.
struct Table2 {
  double s, b, h, a, t;
  double none() const { return s * b * h * (34 + 5 * a * s / h); }
  double tp() const { return s * b * h * (10 + 24 / t + 5 * a * s / (h * t)); }
  double tp_sp() const { return s * b * h / t * (34 + 5 * a * s / h); }
  double tp_selective() const { return s * b * h * (10 + 24 / t); }
  double tp_sp_selective() const { return 34 * s * b * h / t; }
  double full() const { return 2 * s * b * h; }
};

Bytes block_bytes(const ModelSpec& m, std::int64_t b, std::int64_t t, bool sp, Recompute r) {
  ExpandOptions o;
  o.micro_batch = b;
  o.tp = t;
  o.sequence_parallel = sp;
  o.attention = AttentionKernel::Standard;
  return expand(m, o).main_block().saved_bytes(r);
}

TEST_CASE("activation bytes per layer match Korthikanti Table 2") {
  struct Case {
    const char* name;
    ModelSpec m;
    std::int64_t b, t;
  };
  // Korthikanti Table 3 configurations (22B uses microbatch 4).
  for (const auto& c : {Case{"22B", gpt(48, 6144, 64), 4, 8}, Case{"175B", gpt(96, 12288, 96), 1, 8},
                        Case{"530B", gpt(105, 20480, 128), 1, 8},
                        Case{"1T", gpt(128, 25600, 160), 1, 8}}) {
    CAPTURE(c.name);
    const Table2 k{2048, static_cast<double>(c.b), static_cast<double>(c.m.hidden),
                   static_cast<double>(c.m.heads), static_cast<double>(c.t)};
    CHECK(block_bytes(c.m, c.b, 1, false, Recompute::None) == static_cast<Bytes>(k.none()));
    CHECK(block_bytes(c.m, c.b, c.t, false, Recompute::None) == static_cast<Bytes>(k.tp()));
    CHECK(block_bytes(c.m, c.b, c.t, true, Recompute::None) == static_cast<Bytes>(k.tp_sp()));
    CHECK(block_bytes(c.m, c.b, c.t, false, Recompute::Selective) ==
          static_cast<Bytes>(k.tp_selective()));
    CHECK(block_bytes(c.m, c.b, c.t, true, Recompute::Selective) ==
          static_cast<Bytes>(k.tp_sp_selective()));
    CHECK(block_bytes(c.m, c.b, c.t, false, Recompute::Full) == static_cast<Bytes>(k.full()));
  }
}

TEST_CASE("selective recompute saves 70% of GPT-3 175B activations") {
  // Korthikanti Sec. 5: 5as/h = 80 against 34 for GPT-3, so dropping the
  // attention core saves 80/114 = 70% with TP+SP.
  const auto m = gpt(96, 12288, 96);
  const double all = static_cast<double>(block_bytes(m, 1, 8, true, Recompute::None));
  const double sel = static_cast<double>(block_bytes(m, 1, 8, true, Recompute::Selective));
  CHECK(1 - sel / all == doctest::Approx(80.0 / 114.0).epsilon(1e-9));
}

TEST_CASE("flash attention saves no score matrix") {
  // Flash keeps Q, K, V (already counted by Table 2's 4sbh + 2sbh) and fp32
  // log-sum-exp (4·a·s·b bytes) instead of 5·a·s²·b bytes of scores.
  const auto m = gpt(2, 1024, 16, 512, 1000);
  ExpandOptions std_o, flash_o;
  std_o.attention = AttentionKernel::Standard;
  const double s = 512, b = 1, h = 1024, a = 16;
  const Bytes flash = expand(m, flash_o).main_block().saved_bytes();
  CHECK(flash == static_cast<Bytes>(s * b * h * 34 + 4 * a * s * b));
  CHECK(expand(m, std_o).main_block().saved_bytes() - flash ==
        static_cast<Bytes>(5 * a * s * s * b - 4 * a * s * b));
}

// Llama parameters written out: per layer q,o (h²), k,v (h·kv_hidden each),
// SwiGLU (3·h·f), two RMSNorms (h each); untied embedding and output (V·h
// each) and the final norm.
std::int64_t llama_params(const ModelSpec& m) {
  const std::int64_t h = m.hidden, f = m.ffn_hidden, kvh = m.kv_hidden();
  const std::int64_t experts = m.moe ? m.moe->experts : 1;
  const std::int64_t router = m.moe ? h * m.moe->experts : 0;
  return m.layers * (2 * h * h + 2 * h * kvh + experts * 3 * h * f + router + 2 * h) +
         2 * m.vocab * h + h;
}

TEST_CASE("Llama and Mixtral parameter counts (GQA, SwiGLU, RMSNorm, no bias, MoE)") {
  for (const char* name : {"llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
                           "mixtral-8x7b"}) {
    CAPTURE(name);
    const auto m = model_preset(name);
    CHECK(expand(m).params() == llama_params(m));
  }
  // Published sizes: Llama-3-70B ≈ 70.6 B, Llama-2-7B 6.74 B, Mixtral 46.7 B.
  CHECK(static_cast<double>(expand(model_preset("llama3-70b")).params()) ==
        doctest::Approx(70.6e9).epsilon(0.001));
  CHECK(static_cast<double>(expand(model_preset("llama2-7b")).params()) ==
        doctest::Approx(6.74e9).epsilon(0.001));
  CHECK(static_cast<double>(expand(model_preset("mixtral-8x7b")).params()) ==
        doctest::Approx(46.7e9).epsilon(0.001));
}

TEST_CASE("MoE forward FLOPs: top_k expert MLPs plus the router") {
  // Against the same model made dense: (top_k − 1) more SwiGLU MLPs of
  // 2·b·s·3·h·f FLOPs each, plus the router's 2·b·s·h·E.
  auto moe = model_preset("mixtral-8x7b");
  auto dense = moe;
  dense.moe.reset();
  const double b = 1, s = static_cast<double>(moe.seq_len), h = 4096, f = 14336, E = 8, k = 2;
  const double diff = expand(moe).main_block().fwd_flops() - expand(dense).main_block().fwd_flops();
  CHECK(diff == doctest::Approx((k - 1) * 2 * b * s * 3 * h * f + 2 * b * s * h * E).epsilon(1e-12));
}

TEST_CASE("tensor parallelism splits weights, not replicated biases and norms") {
  // Per tp rank: 12h²/t + column biases (3h + 4h)/t + row biases (h + h) +
  // two layer norms (4h): Megatron's ColumnParallel/RowParallel layout.
  const auto m = gpt(1, 1024, 16, 128, 1000);
  ExpandOptions o;
  o.tp = 4;
  const std::int64_t h = 1024, t = 4;
  CHECK(expand(m, o).main_block().params() == 12 * h * h / t + 7 * h / t + 2 * h + 4 * h);
}

TEST_CASE("fp32 doubles activation bytes; fp8 halves GEMM inputs") {
  const auto m = gpt(1, 512, 8, 256, 1000);
  ExpandOptions bf16, fp32, fp8;
  for (auto* o : {&bf16, &fp32, &fp8}) o->attention = AttentionKernel::Standard;
  fp32.precision = Precision::FP32;
  fp8.precision = Precision::FP8;
  const auto ops16 = expand(m, bf16).main_block().ops;
  const auto ops32 = expand(m, fp32).main_block().ops;
  const auto ops8 = expand(m, fp8).main_block().ops;
  for (std::size_t i = 0; i < ops16.size(); ++i) {
    CAPTURE(ops16[i].name);
    if (ops16[i].kind == OpKind::Dropout) {
      CHECK(ops32[i].saved_bytes == ops16[i].saved_bytes);  // 1-byte masks
    } else {
      CHECK(ops32[i].saved_bytes == 2 * ops16[i].saved_bytes);
    }
    if (ops16[i].kind == OpKind::Linear) CHECK(2 * ops8[i].saved_bytes == ops16[i].saved_bytes);
  }
}

TEST_CASE("cuDNN's fused attention keeps what flash keeps, its attention op marked") {
  const auto m = gpt(2, 512, 8, 2048, 1000);
  ExpandOptions flash, cudnn;
  cudnn.attention = AttentionKernel::Cudnn;
  const OpChain a = expand(m, flash), b = expand(m, cudnn);
  REQUIRE(a.main_block().ops.size() == b.main_block().ops.size());
  for (std::size_t i = 0; i < a.main_block().ops.size(); ++i) {
    const Op& x = a.main_block().ops[i];
    const Op& y = b.main_block().ops[i];
    CAPTURE(x.name);
    CHECK(y.saved_bytes == x.saved_bytes);
    CHECK(y.fwd_flops == x.fwd_flops);
    CHECK(y.cudnn == (x.kind == OpKind::Attention));
    CHECK_FALSE(x.cudnn);
  }
}

TEST_CASE("blocks kept in bf16 under fp8 or fp4: their own kind, bf16 ops marked unquantized") {
  // 6 layers, the first one and the last two in bf16 (Megatron-Core's
  // --first-last-layers-bf16 --num-layers-at-start-in-bf16 1
  // --num-layers-at-end-in-bf16 2): two kinds, the quantized block first;
  // the bf16 kind is the bf16 expansion's block, op for op, its Linear ops
  // unquantized, and it keeps no quantized weights.
  const auto m = gpt(6, 512, 8, 256, 1000);
  ExpandOptions bf16, fp4;
  fp4.precision = Precision::FP4;
  fp4.bf16_first_layers = 1;
  fp4.bf16_last_layers = 2;
  const OpChain c = expand(m, fp4);
  REQUIRE(c.kinds.size() == 2);
  CHECK(c.kind_of == std::vector<std::int32_t>{1, 0, 0, 0, 1, 1});
  const OpChain plain_chain = expand(m, bf16);
  const Layer& plain = plain_chain.main_block();
  const Layer& kept = c.kinds[1];
  CHECK(kept.unquantized);
  CHECK_FALSE(c.kinds[0].unquantized);
  REQUIRE(kept.ops.size() == plain.ops.size());
  for (std::size_t i = 0; i < kept.ops.size(); ++i) {
    CAPTURE(kept.ops[i].name);
    CHECK(kept.ops[i].saved_bytes == plain.ops[i].saved_bytes);
    CHECK(kept.ops[i].unquantized == (kept.ops[i].kind == OpKind::Linear));
    if (c.kinds[0].ops[i].kind == OpKind::Linear) CHECK(c.kinds[0].ops[i].saved_bytes < plain.ops[i].saved_bytes);
  }
  CHECK(kept.gemm_weight_params() == 0);
  CHECK(c.kinds[0].gemm_weight_params() == plain.gemm_weight_params());
  CHECK(c.params() == plain_chain.params());
  // Without fp8 or fp4 there is nothing to keep in bf16: one kind.
  bf16.bf16_first_layers = 1;
  CHECK(expand(m, bf16).kinds.size() == 1);
}

TEST_CASE("size_bound is above every byte count and parameter count expand forms") {
  // For every preset, with dropout, fp32, both attention kernels and no
  // tensor parallelism (the most a rank holds): parameters, and a
  // microbatch's saved bytes, gradients and traffic over all layers.
  for (ModelSpec m : model_presets()) {
    if (m.chain) continue;  // size_bound is a transformer's (validate.cpp bounds a chain itself)
    m.dropout = true;
    for (AttentionKernel attention : {AttentionKernel::Flash, AttentionKernel::Standard}) {
      ExpandOptions o;
      o.micro_batch = 2;
      o.precision = Precision::FP32;
      o.attention = attention;
      const OpChain c = expand(m, o);
      const SizeBound b = size_bound(m, 2, 1, 1, attention);
      CAPTURE(m.name);
      CHECK(static_cast<double>(c.params()) <= b.params);
      double kept = 0, traffic = 0;
      for (const Layer* l : {&c.embedding, &c.main_block(), &c.head}) {
        const double times = l == &c.main_block() ? static_cast<double>(c.blocks) : 1.0;
        for (const Op& op : l->ops) {
          kept += times * static_cast<double>(op.saved_bytes + op.grad_bytes);
          traffic += times * static_cast<double>(op.fwd_bytes + op.bwd_bytes);
        }
      }
      CHECK(kept <= b.activation_bytes);
      // Traffic reads the weights too (three times, fp32).
      CHECK(traffic <= b.total());
    }
  }
}

TEST_CASE("a model beyond 2^60 bytes is refused when read") {
  // 100,000 layers of hidden 2^24: about 4.5e20 parameters (bound).
  CHECK(!size_bound(ModelSpec{.layers = 100'000, .hidden = 1 << 24, .heads = 16, .kv_heads = 16,
                              .ffn_hidden = 1 << 24, .vocab = 50'000, .seq_len = 1024},
                    1, 1, 1, AttentionKernel::Flash)
             .countable());
  const auto j = nlohmann::json::parse(
      R"({"num_hidden_layers": 100000, "hidden_size": 16777216, "num_attention_heads": 16,
          "vocab_size": 50000, "max_position_embeddings": 1024})");
  CHECK(testing::input_error_of([&] { parse_model_file_text(j.dump(), "huge.json"); }) ==
        "huge.json: needs about 1.44e+22 bytes (4.5e+20 parameters, 3.08e+18 bytes of "
        "activations for one sequence); Strata counts at most 2^60 bytes (1 EiB)");
}

// A small untied SwiGLU model of 8 layers with RMSNorm, rope and no biases,
// so its parameters have a closed form (moe_pattern_model's test).
ModelSpec moe_pattern_model(const MoeSpec& moe) {
  ModelSpec m;
  m.name = "pattern";
  m.layers = 8;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 256;
  m.vocab = 1000;
  m.seq_len = 16;
  m.mlp = MlpKind::Swiglu;
  m.norm = NormKind::RmsNorm;
  m.position_embedding = PositionEmbedding::Rope;
  m.bias = false;
  m.tied_embeddings = false;
  m.dropout = false;
  m.moe = moe;
  return m;
}

TEST_CASE("moe layer patterns: DeepSeek's, Qwen's and Megatron's rules give their blocks") {
  // kinds[0] is the expert block, kinds[1] the dense one. Of 8 blocks:
  // - DeepSeek (first_k_dense_replace 1, moe_layer_freq 2: i >= 1 and
  //   i % 2 == 0): experts in 2, 4, 6;
  // - Qwen (decoder_sparse_step 2, mlp_only_layers [3]: (i + 1) % 2 == 0,
  //   i not 3): every 2 from 1 less 3, experts in 1, 5, 7;
  // - Megatron-Core (--moe-layer-freq 3: i % 3 == 0): experts in 0, 3, 6.
  const MoeSpec base{.experts = 4, .top_k = 2, .expert_ffn = 128};
  MoeSpec deepseek = base, qwen = base, megatron = base;
  deepseek.first_dense = 1, deepseek.every = 2;
  qwen.every = 2, qwen.offset = 1, qwen.dense_layers = {3};
  megatron.every = 3;
  const std::pair<MoeSpec, std::vector<std::int32_t>> cases[] = {
      {deepseek, {1, 1, 0, 1, 0, 1, 0, 1}},
      {qwen, {1, 0, 1, 1, 1, 0, 1, 0}},
      {megatron, {0, 1, 1, 0, 1, 1, 0, 1}},
  };
  for (const auto& [moe, kinds] : cases) {
    const ModelSpec m = moe_pattern_model(moe);
    const OpChain c = expand(m);
    CAPTURE(m.moe->every);
    REQUIRE(c.kinds.size() == 2);
    CHECK(c.kind_of == kinds);
    CHECK(m.moe_blocks() == 3);
    for (std::int64_t i = 0; i < m.layers; ++i)
      CHECK(m.moe_at(i) == (kinds[static_cast<std::size_t>(i)] == 0));
  }
}

TEST_CASE("moe layer pattern: total and active parameters in closed form") {
  // Megatron's rule with N = 3: experts in blocks 0, 3, 6, dense MLPs in the
  // other 5. h = 64, f = 256, E = 4 experts of fe = 128, top_k 2, V = 1000:
  //   embedding and untied logits 2·V·h, final norm h;
  //   each block: attention 4h² (qkv 3h², projection h²) and two norms 2h;
  //   an expert block: router h·E and E experts of 3·h·fe (SwiGLU);
  //   a dense block: 3·h·f.
  // Active: a token visits top_k of each expert block's E experts.
  MoeSpec moe{.experts = 4, .top_k = 2, .expert_ffn = 128};
  moe.every = 3;
  const ModelSpec m = moe_pattern_model(moe);
  const std::int64_t h = 64, f = 256, E = 4, fe = 128, k = 2, V = 1000;
  const std::int64_t total =
      2 * V * h + h + 8 * (4 * h * h + 2 * h) + 3 * (h * E + E * 3 * h * fe) + 5 * (3 * h * f);
  CHECK(total_params(m) == total);
  CHECK(active_params(m) == total - 3 * (E - k) * 3 * h * fe);
}

// moe_pattern_model's dense twin: 2 layers, no experts.
ModelSpec mtp_model(std::int64_t mtp_layers) {
  ModelSpec m = moe_pattern_model({});
  m.moe.reset();
  m.layers = 2;
  m.mtp_layers = mtp_layers;
  return m;
}

TEST_CASE("multi-token prediction: each module's parameters in closed form, in the head") {
  // DeepSeek-V3 Sec. 2.2: a module adds two RMSNorms (h each), the 2h → h
  // projection M_k (2h², no bias), one transformer block (attention 4h²,
  // two norms 2h, SwiGLU 3·h·f) and a final norm (h); the embedding and
  // output head are the main model's (no parameters). h = 64, f = 256.
  const std::int64_t h = 64, f = 256, V = 1000;
  const std::int64_t module = 2 * h + 2 * h * h + (4 * h * h + 2 * h + 3 * h * f) + h;
  for (const std::int64_t D : {1, 2}) {
    CAPTURE(D);
    const OpChain c = expand(mtp_model(D));
    CHECK(c.head.params() == h + V * h + D * module);  // final norm, untied logits, modules
    CHECK(total_params(mtp_model(D)) == total_params(mtp_model(0)) + D * module);
    CHECK(active_params(mtp_model(D)) == total_params(mtp_model(D)));  // dense: every parameter
    // The blocks and the embedding do not change.
    CHECK(c.main_block().params() == expand(mtp_model(0)).main_block().params());
  }
  // Ops after the main head's three are the module's, each named "mtp_…".
  const OpChain c = expand(mtp_model(1));
  REQUIRE(c.head.ops.size() > 3);
  for (std::size_t i = 3; i < c.head.ops.size(); ++i) CHECK(c.head.ops[i].name.substr(0, 4) == "mtp_");
  auto named = [&](std::string_view name) {
    return *std::find_if(c.head.ops.begin(), c.head.ops.end(), [&](const Op& op) { return op.name == name; });
  };
  CHECK(named("mtp_logits").params == 0);
  CHECK(named("mtp_eh_proj").params == 2 * h * h);
}

TEST_CASE("multi-token prediction: forward FLOPs and saved bytes of a module") {
  // One sequence of s = 16 tokens: M_k is 2·s·2h·h, the block as the main
  // one (QKV, projection, SwiGLU: 2·s·(3h² + h² + 3·h·f); flash attention
  // over s keys: 2·2·s·s·h), the shared logits 2·s·h·V; backward twice.
  const double s = 16, h = 64, f = 256, V = 1000;
  const OpChain with = expand(mtp_model(1)), without = expand(mtp_model(0));
  const double block = 2 * s * (3 * h * h + h * h + 3 * h * f) + 4 * s * s * h;
  CHECK(with.main_block().fwd_flops() == doctest::Approx(block));
  const double module = 2 * s * 2 * h * h + block + 2 * s * h * V;
  CHECK(with.head.fwd_flops() - without.head.fwd_flops() == doctest::Approx(module));
  CHECK(with.head.bwd_flops() - without.head.bwd_flops() == doctest::Approx(2 * module));
  CHECK(with.model_flops() - without.model_flops() == doctest::Approx(3 * module));
  // Saved for backward (bf16): the two norms' and the final norm's inputs
  // (s·h each, 2 bytes), M_k's input (s·2h), the block's own, the logits'
  // input (s·h) and the loss's fp32 logits (s·V, 4 bytes).
  const double saved = 3 * s * h * 2 + s * 2 * h * 2 + s * h * 2 + s * V * 4;
  CHECK(static_cast<double>(with.head.saved_bytes() - without.head.saved_bytes()) ==
        doctest::Approx(saved + static_cast<double>(with.main_block().saved_bytes())));
}

TEST_CASE("multi-token prediction: the module's block has the last block's shape") {
  // Megatron-Core builds the module's layer from the decoder's last layer
  // spec: with Qwen's rule (experts in 1, 5, 7 of 8) the module has experts,
  // and a token visits top_k of them as in every expert block: active =
  // total − (3 + 1)·(E − top_k)·3·h·fe. With Megatron's N = 3 (experts in
  // 0, 3, 6) block 7 is dense, and so is the module.
  MoeSpec qwen{.experts = 4, .top_k = 2, .expert_ffn = 128};
  qwen.every = 2, qwen.offset = 1, qwen.dense_layers = {3};
  ModelSpec m = moe_pattern_model(qwen);
  m.mtp_layers = 1;
  const OpChain c = expand(m);
  CHECK(std::any_of(c.head.ops.begin(), c.head.ops.end(), [](const Op& op) { return op.name == "mtp_router"; }));
  const std::int64_t h = 64, E = 4, k = 2, fe = 128;
  CHECK(active_params(m) == total_params(m) - 4 * (E - k) * 3 * h * fe);
  MoeSpec megatron{.experts = 4, .top_k = 2, .expert_ffn = 128};
  megatron.every = 3;
  ModelSpec d = moe_pattern_model(megatron);
  d.mtp_layers = 1;
  const OpChain dc = expand(d);
  CHECK(std::none_of(dc.head.ops.begin(), dc.head.ops.end(), [](const Op& op) { return op.expert; }));
  CHECK(active_params(d) == total_params(d) - 3 * (E - k) * 3 * h * fe);
}

TEST_CASE("multi-token prediction: every block variant's ops have their mtp_ names") {
  // Each option that adds ops to a block (dropout and eager attention,
  // sandwich norms, q/k norms, a parallel block, latent attention, shared
  // gated experts, GeLU) expands with a module, every op after the main
  // head's three named "mtp_…" (mtp_name throws on an op it lacks).
  std::vector<ModelSpec> variants;
  ModelSpec base = mtp_model(1);
  base.dropout = true;
  variants.push_back(base);
  ModelSpec v = base;
  v.norm_placement = NormPlacement::Sandwich;
  v.qk_norm = QkNorm::Head;
  variants.push_back(v);
  v = base;
  v.block = BlockKind::Parallel;
  v.mlp = MlpKind::Gelu;
  variants.push_back(v);
  v = base;
  v.mla = MlaSpec{.q_lora_rank = 32, .kv_lora_rank = 32, .qk_nope_head_dim = 16, .qk_rope_head_dim = 8,
                  .v_head_dim = 16};
  v.moe = MoeSpec{.experts = 4, .top_k = 2, .shared_experts = 1, .shared_gate = true};
  variants.push_back(v);
  v = base;
  v.mlp = MlpKind::Geglu;
  variants.push_back(v);
  ExpandOptions eager;
  eager.attention = AttentionKernel::Standard;
  for (const auto& m : variants)
    for (const ExpandOptions& o : {ExpandOptions{}, eager}) {
      const OpChain c = expand(m, o);
      for (std::size_t i = 3; i < c.head.ops.size(); ++i) CHECK(c.head.ops[i].name.substr(0, 4) == "mtp_");
    }
}

}  // namespace
}  // namespace strata::cost

namespace strata::cost {
namespace {

TEST_CASE("weight shapes: a GPT block has 12h² in matrices and 13h in vectors") {
  // QKV h×3h, projection h×h, MLP h×4h and 4h×h; biases 3h+h+4h+h and two
  // layer norms 2h each.
  const auto m = gpt(2, 256, 4, 64, 1000);
  const auto c = expand(m);
  std::int64_t mat = 0, vec = 0;
  for (const auto& op : c.main_block().ops) {
    CHECK(op.vector_params() >= 0);
    mat += op.matrix_params();
    vec += op.vector_params();
  }
  CHECK(mat == 12 * 256 * 256);
  CHECK(vec == 13 * 256);
  // Embedding: a V×h token table and an s×h position table.
  CHECK(c.embedding.ops[0].matrix_params() == 1000 * 256);
  CHECK(c.embedding.ops[1].matrix_params() == 64 * 256);
}

TEST_CASE("expert parallelism divides expert weights, not attention") {
  // Mixtral with ep = 4: each rank holds 2 of 8 experts; the router and the
  // attention stay whole.
  const auto m = model_preset("mixtral-8x7b");
  ExpandOptions o;
  o.ep = 4;
  const auto full = expand(m);
  const auto part = expand(m, o);
  const std::int64_t expert = 8 * 3 * 4096 * 14336;  // 8 SwiGLU experts
  CHECK(full.main_block().params() - part.main_block().params() == expert - expert / 4);
  CHECK(part.main_block().fwd_flops() == full.main_block().fwd_flops());
}

// A Llama-style block without dropout for the architecture options below.
ModelSpec llama_like(std::int64_t h, std::int64_t a, std::int64_t kv, std::int64_t f) {
  ModelSpec m = gpt(2, h, a, 512, 1000);
  m.kv_heads = kv;
  m.ffn_hidden = f;
  m.mlp = MlpKind::Swiglu;
  m.norm = NormKind::RmsNorm;
  m.bias = false;
  m.position_embedding = PositionEmbedding::Rope;
  m.tied_embeddings = false;
  m.dropout = false;
  return m;
}

const Op& op_named(const Layer& l, std::string_view name) {
  for (const auto& op : l.ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  return l.ops.front();
}

TEST_CASE("head_dim apart from hidden/heads widens q/k/v, the scores and the output projection") {
  // Gemma-7B's block: hidden 3072, 16 heads of 256 (q width 4096): q, k, v
  // are 3·h·4096, the output projection 4096·h, and scores and values cost
  // 2·b·s²·4096 each (not 2·b·s²·h).
  ModelSpec m = llama_like(3072, 16, 16, 24576);
  m.head_size = 256;
  const OpChain c = expand(m);
  const double q = 16 * 256, h = 3072, s = 512;
  CHECK(op_named(c.main_block(), "qkv").params == static_cast<std::int64_t>(h * 3 * q));
  CHECK(op_named(c.main_block(), "attn_proj").params == static_cast<std::int64_t>(q * h));
  CHECK(op_named(c.main_block(), "attention").fwd_flops == doctest::Approx(2 * 2 * s * s * q));
  // Flash keeps Q, K, V at their width and fp32 statistics.
  CHECK(op_named(c.main_block(), "attention").saved_bytes ==
        static_cast<Bytes>(2 * s * 3 * q + 4 * 16 * s));
}

TEST_CASE("GeGLU is priced as SwiGLU: three matrices, gate and up saved") {
  ModelSpec swiglu = llama_like(1024, 16, 16, 2816), geglu = swiglu;
  geglu.mlp = MlpKind::Geglu;
  const OpChain a = expand(swiglu), b = expand(geglu);
  CHECK(a.params() == b.params());
  CHECK(a.main_block().fwd_flops() == b.main_block().fwd_flops());
  CHECK(a.main_block().saved_bytes() == b.main_block().saved_bytes());
  CHECK(op_named(b.main_block(), "geglu").saved_bytes == op_named(a.main_block(), "swiglu").saved_bytes);
}

TEST_CASE("q/k/v biases apart from the output and MLP biases (Qwen2)") {
  // Qwen2: biases on q (h), k and v (kv_hidden each) only.
  ModelSpec m = llama_like(1024, 16, 4, 2816);
  const std::int64_t plain = expand(m).main_block().params();
  m.qkv_bias = true;
  CHECK(expand(m).main_block().params() - plain == 1024 + 2 * 4 * 64);
}

TEST_CASE("MoE: expert width, shared experts, dense first blocks, active parameters") {
  // DeepSeek-V2-Lite's MLPs (h 2048): 64 routed experts of 1408, top 6, 2
  // shared of 1408, the first of 27 blocks dense with 10944; per MoE block
  // 66 experts of 3·h·1408 and a 64·h router.
  ModelSpec m = llama_like(2048, 16, 16, 10944);
  m.layers = 27;
  m.moe = MoeSpec{.experts = 64, .top_k = 6, .expert_ffn = 1408, .shared_experts = 2, .first_dense = 1};
  const OpChain c = expand(m);
  const std::int64_t h = 2048, attn = 4 * h * h + 2 * h, expert = 3 * h * 1408;
  // Two kinds: the expert block (main) and the first block's dense one.
  REQUIRE(c.kinds.size() == 2);
  CHECK(c.kind_of[0] == 1);
  CHECK(c.kind_of[1] == 0);
  CHECK(&c.block_at(0) == &c.kinds[1]);
  CHECK(c.kinds[1].params() == attn + 3 * h * 10944);
  CHECK(c.main_block().params() == attn + 66 * expert + 64 * h);
  CHECK(c.params() == c.embedding.params() + c.kinds[1].params() + 26 * c.main_block().params() +
                          c.head.params());
  // A token visits 6 routed and the 2 shared experts.
  CHECK(active_params(m) == c.params() - 26 * (64 - 6) * expert);
  // FLOPs: 8 expert MLPs a token in MoE blocks, one wide MLP in the dense one.
  const double tokens = 512;
  CHECK(c.main_block().fwd_flops() - c.kinds[1].fwd_flops() ==
        doctest::Approx(2 * tokens * (8 * expert + 64 * h - 3 * h * 10944)));
  // Shared experts are not expert-parallel: only the routed ones split by ep.
  ExpandOptions o;
  o.ep = 8;
  CHECK(expand(m, o).main_block().params() == attn + (8 + 2) * expert + 64 * h);
}

TEST_CASE("multi-head latent attention: projections, scores and what flash keeps") {
  // DeepSeek-V3's attention (h 7168, 128 heads): q through a 1536 latent,
  // k/v through a 512 latent plus a 64 rotary key, heads of 128 + 64 for
  // q·k and 128 for v.
  ModelSpec m = llama_like(7168, 128, 128, 18432);
  m.mla = MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
                  .qk_rope_head_dim = 64, .v_head_dim = 128};
  const OpChain c = expand(m);
  const std::int64_t h = 7168, H = 128;
  const std::int64_t attn_params = h * 1536 + 1536 + 1536 * H * 192 + h * 576 + 512 +
                                   512 * H * 256 + H * 128 * h;
  std::int64_t sum = 0;
  for (const char* n : {"q_down", "q_down_norm", "q_up", "kv_down", "kv_down_norm", "kv_up", "attn_proj"})
    sum += op_named(c.main_block(), n).params;
  CHECK(sum == attn_params);  // 187,107,328: DeepSeek-V3's per-layer attention
  CHECK(sum == 187'107'328);
  const double s = 512;
  CHECK(op_named(c.main_block(), "attention").fwd_flops == doctest::Approx(2 * s * s * H * (192 + 128)));
  CHECK(op_named(c.main_block(), "attention").saved_bytes ==
        static_cast<Bytes>(2 * s * H * (192 + 192 + 128) + 4 * H * s));
  // Context parallelism's K/V exchange sees K and V together.
  CHECK(2 * m.kv_hidden() == H * (192 + 128));
}

TEST_CASE("recompute_modules: what Megatron-Core's selective recompute drops and reruns, module by module") {
  // A DeepSeek-V3-like block (h 7168, 128 heads, MLA 1536/512, 128+64 and
  // 128 head dims; 8 of 16 experts of 2048 and one shared expert), one
  // sequence of 512 tokens in bf16 with flash attention.
  ModelSpec m = llama_like(7168, 128, 128, 18432);
  m.mla = MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
                  .qk_rope_head_dim = 64, .v_head_dim = 128};
  m.moe = MoeSpec{.experts = 16, .top_k = 8, .expert_ffn = 2048, .shared_experts = 1};
  const double s = 512, h = 7168, H = 128;
  auto block = [&](RecomputeModules mods) {
    ExpandOptions o;
    o.recompute_modules = mods;
    return expand(m, o).main_block();
  };
  const Layer base = block(kDefaultRecomputeModules);
  // The default, the attention core, drops nothing under flash attention
  // and reruns nothing: "selective" is "none" there.
  CHECK(base.saved_bytes(Recompute::Selective) == base.saved_bytes(Recompute::None));
  for (const Op& op : base.ops) CHECK(rerun_share(op, Recompute::Selective) == 0.0);
  const Bytes all = base.saved_bytes(Recompute::None);

  // mla_up_proj: the attention's Q, K and V (bf16: 2·s·H·(192 + 192 + 128))
  // are the up-projections' and RoPE's outputs, rerun before the backward.
  const RecomputeModules up = kDefaultRecomputeModules | module_bit(RecomputeModule::MlaUpProj);
  const Layer l_up = block(up);
  CHECK(all - l_up.saved_bytes(Recompute::Selective) == static_cast<Bytes>(2 * s * H * (192 + 192 + 128)));
  for (const char* n : {"q_up", "kv_up", "rope"}) CHECK(rerun_share(op_named(l_up, n), Recompute::Selective) == 1.0);
  CHECK(rerun_share(op_named(l_up, "attention"), Recompute::Selective) == 0.0);

  // layernorm: the two pre-norms' outputs, which q_down and the shared
  // expert's up-projection keep (2·s·h each); the routed experts keep their
  // dispatched copies, not the norm's output.
  const Layer l_ln = block(module_bit(RecomputeModule::Layernorm));
  CHECK(all - l_ln.saved_bytes(Recompute::Selective) == static_cast<Bytes>(2 * (2 * s * h)));
  CHECK(rerun_share(op_named(l_ln, "attn_norm"), Recompute::Selective) == 1.0);
  CHECK(rerun_share(op_named(l_ln, "mlp_norm"), Recompute::Selective) == 1.0);
  CHECK(rerun_share(op_named(l_ln, "q_down_norm"), Recompute::Selective) == 0.0);

  // moe_act: the routed experts' activation output, which their
  // down-projection keeps: top_k · s · 2048 elements of 2 bytes.
  const Layer l_act = block(module_bit(RecomputeModule::MoeAct));
  CHECK(all - l_act.saved_bytes(Recompute::Selective) == static_cast<Bytes>(8 * s * 2048 * 2));
  CHECK(rerun_share(op_named(l_act, "swiglu"), Recompute::Selective) == 1.0);
  CHECK(rerun_share(op_named(l_act, "shared_act"), Recompute::Selective) == 0.0);

  // Modules add up; the other policies do not see them.
  const Layer l_all = block(up | module_bit(RecomputeModule::Layernorm) | module_bit(RecomputeModule::MoeAct));
  CHECK(all - l_all.saved_bytes(Recompute::Selective) ==
        (all - l_up.saved_bytes(Recompute::Selective)) + (all - l_ln.saved_bytes(Recompute::Selective)) +
            (all - l_act.saved_bytes(Recompute::Selective)));
  CHECK(l_all.saved_bytes(Recompute::Full) == base.saved_bytes(Recompute::Full));
  CHECK(l_all.saved_bytes(Recompute::None) == all);

  // Without core_attn under standard attention the scores are kept and
  // nothing of the core reruns; with it (the default) the core is dropped.
  ModelSpec g = gpt(2, 1024, 16);
  ExpandOptions st;
  st.attention = AttentionKernel::Standard;
  const Layer core = expand(g, st).main_block();
  st.recompute_modules = module_bit(RecomputeModule::Layernorm);
  const Layer no_core = expand(g, st).main_block();
  CHECK(core.saved_bytes(Recompute::Selective) < core.saved_bytes(Recompute::None));
  CHECK(rerun_share(op_named(core, "softmax"), Recompute::Selective) == 1.0);
  CHECK(rerun_share(op_named(no_core, "softmax"), Recompute::Selective) == 0.0);
  // GPT's layernorm module drops what the QKV and MLP-up products keep of
  // the norms' outputs: 2·s·h bytes each, s = 2048.
  CHECK(no_core.saved_bytes(Recompute::None) - no_core.saved_bytes(Recompute::Selective) ==
        static_cast<Bytes>(2 * (2 * 2048 * 1024)));
  // mlp: the dense MLP from its input: GeLU's input and the down-projection's
  // input (4h each, 2 bytes) dropped; up, GeLU and down rerun.
  st.recompute_modules = module_bit(RecomputeModule::Mlp);
  const Layer mlp = expand(g, st).main_block();
  CHECK(mlp.saved_bytes(Recompute::None) - mlp.saved_bytes(Recompute::Selective) ==
        static_cast<Bytes>(2 * (2 * 2048 * 4 * 1024)));
  for (const char* n : {"mlp_up", "gelu", "mlp_down"}) CHECK(rerun_share(op_named(mlp, n), Recompute::Selective) == 1.0);
  CHECK(rerun_share(op_named(mlp, "qkv"), Recompute::Selective) == 0.0);
  // MoE blocks are not dense MLPs: nothing of them.
  CHECK(block(module_bit(RecomputeModule::Mlp)).saved_bytes(Recompute::Selective) == all);
}

TEST_CASE("parallel blocks: same FLOPs, the MLP's input saved once") {
  // GPT-J/Falcon: one shared norm; the MLP reads what the QKV projection
  // saved. NeoX: two norms, the second reads the block's input the first
  // saved. Either way one residual add instead of two.
  const ModelSpec seq = llama_like(1024, 16, 16, 4096);
  ModelSpec par = seq, par2 = seq;
  par.block = BlockKind::Parallel;
  par2.block = BlockKind::Parallel2Norm;
  const OpChain a = expand(seq), b = expand(par), c = expand(par2);
  CHECK(a.main_block().fwd_flops() == b.main_block().fwd_flops());
  CHECK(a.main_block().fwd_flops() == c.main_block().fwd_flops());
  CHECK(b.main_block().params() == a.main_block().params() - 1024);  // one RMSNorm fewer
  CHECK(c.main_block().params() == a.main_block().params());
  const Bytes x = 2 * 512 * 1024;  // one hidden-state tensor, bf16
  CHECK(a.main_block().saved_bytes() - b.main_block().saved_bytes() == 2 * x);  // mlp_norm's and mlp_up's input
  CHECK(a.main_block().saved_bytes() - c.main_block().saved_bytes() == x);      // mlp_norm's input
}

TEST_CASE("q/k norms and post- and sandwich norms") {
  // Qwen3: RMSNorms of head_dim on q and k (2·128 parameters); OLMo 2: over
  // all heads (q and k widths). Sandwich (Gemma 2) adds two norms a block.
  ModelSpec m = llama_like(4096, 32, 8, 12288);
  m.head_size = 128;
  const std::int64_t plain = expand(m).main_block().params();
  m.qk_norm = QkNorm::Head;
  CHECK(expand(m).main_block().params() - plain == 2 * 128);
  m.qk_norm = QkNorm::Full;
  CHECK(expand(m).main_block().params() - plain == 4096 + 8 * 128);
  m.qk_norm = QkNorm::None;
  m.norm_placement = NormPlacement::Sandwich;
  CHECK(expand(m).main_block().params() - plain == 2 * 4096);
  m.norm_placement = NormPlacement::Post;
  CHECK(expand(m).main_block().params() == plain);
}

TEST_CASE("size_bound stays above the counts of models with every option") {
  // The bound adds each option's widths; check it on the extreme mixes.
  ModelSpec m = llama_like(2048, 16, 16, 10944);
  m.dropout = true;
  m.moe = MoeSpec{.experts = 64, .top_k = 6, .expert_ffn = 1408, .shared_experts = 2,
                  .shared_gate = true, .first_dense = 1};
  m.mla = MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
                  .qk_rope_head_dim = 64, .v_head_dim = 128};
  m.norm_placement = NormPlacement::Sandwich;
  ModelSpec g = llama_like(3072, 16, 16, 24576);
  g.head_size = 256;
  g.qk_norm = QkNorm::Full;
  g.dropout = true;
  for (const ModelSpec& x : {m, g})
    for (AttentionKernel attention : {AttentionKernel::Flash, AttentionKernel::Standard}) {
      ExpandOptions o;
      o.micro_batch = 2;
      o.precision = Precision::FP32;
      o.attention = attention;
      const OpChain c = expand(x, o);
      const SizeBound b = size_bound(x, 2, 1, 1, attention);
      CHECK(static_cast<double>(c.params()) <= b.params);
      double kept = 0;
      for (std::int64_t i = 0; i < c.blocks; ++i)
        for (const Op& op : c.block_at(i).ops) kept += static_cast<double>(op.saved_bytes + op.grad_bytes);
      CHECK(kept <= b.activation_bytes);
    }
}

TEST_CASE("RoPE: one fused kernel per tensor over q and k, saving nothing; none without rotary") {
  // Llama-3-8B, microbatch 1, seq 8192: q 4096 and k 1024 features per token;
  // fused, each element is read and written once in bf16 (4 bytes).
  auto m = model_preset("llama3-8b");
  m.seq_len = 8192;
  const auto c = expand(m);
  const Op& rope = op_named(c.main_block(), "rope");
  const double elems = 8192.0 * (4096 + 1024);
  CHECK(rope.kind == OpKind::Rotary);
  CHECK(rope.fwd_bytes == static_cast<Bytes>(4 * elems));
  CHECK(rope.bwd_bytes == 2 * rope.fwd_bytes);
  CHECK(rope.saved_bytes == 0);
  CHECK(rope.fwd_flops == 0);
  CHECK(rope.fwd_kernels == 2);
  // tp 4 splits the heads, so q and k with them.
  ExpandOptions o;
  o.tp = 4;
  CHECK(op_named(expand(m, o).main_block(), "rope").fwd_bytes == static_cast<Bytes>(elems));
  // GPT's learned positions have no rotary op; nor does the op change a FLOP.
  const auto learned = expand(gpt(2, 256, 4));  // owns the ops read below
  for (const auto& op : learned.main_block().ops) CHECK(op.kind != OpKind::Rotary);
  o.tp = 1;
  o.fused_elementwise = false;
  CHECK(expand(m, o).model_flops() == c.model_flops());
}

TEST_CASE("eager elementwise ops: the reference Llama modules' passes over their tensors") {
  // Llama-3-8B in bf16, one sequence of 8192: N = 8192·4096 hidden elements,
  // F = 8192·14336 MLP elements.
  auto m = model_preset("llama3-8b");
  m.seq_len = 8192;
  const double N = 8192.0 * 4096, F = 8192.0 * 14336, QK = 8192.0 * (4096 + 1024);
  ExpandOptions o;
  o.fused_elementwise = false;
  const auto eager = expand(m, o);
  const auto fused = expand(m);
  // RMSNorm: x.float() 6, pow 8, mean 4, x·rsqrt 8, type_as 6, ·weight 4 =
  // 36 bytes per element, 8 kernels (two of them over one value per token);
  // fused: read and write once, 4 bytes, one kernel.
  const Op& norm = op_named(eager.main_block(), "attn_norm");
  CHECK(norm.fwd_bytes == static_cast<Bytes>(36 * N));
  CHECK(norm.fwd_kernels == 8);
  CHECK(norm.bwd_bytes == 2 * norm.fwd_bytes);
  CHECK(norm.bwd_kernels == 16);
  CHECK(op_named(fused.main_block(), "attn_norm").fwd_bytes == static_cast<Bytes>(4 * N));
  CHECK(op_named(fused.main_block(), "attn_norm").fwd_kernels == 1);
  // What an op saves does not depend on how it is computed.
  CHECK(eager.main_block().saved_bytes() == fused.main_block().saved_bytes());
  // RoPE: float 6, complex product 8, type_as 6 = 20 bytes, 3 kernels per tensor.
  const Op& rope = op_named(eager.main_block(), "rope");
  CHECK(rope.fwd_bytes == static_cast<Bytes>(20 * QK));
  CHECK(rope.fwd_kernels == 6);
  // SwiGLU as silu(gate) · up: 2 + 2 + 4 + 2 = 10 bytes per output element, 2 kernels.
  const Op& act = op_named(eager.main_block(), "swiglu");
  CHECK(act.fwd_bytes == static_cast<Bytes>(10 * F));
  CHECK(act.fwd_kernels == 2);
  // fp32 activations: no casts (RMSNorm 8 + 4 + 8 + 8 = 28 bytes, 6 kernels;
  // RoPE 8 bytes, one kernel per tensor).
  o.precision = Precision::FP32;
  const auto fp32 = expand(m, o);
  CHECK(op_named(fp32.main_block(), "attn_norm").fwd_bytes == static_cast<Bytes>(28 * N));
  CHECK(op_named(fp32.main_block(), "attn_norm").fwd_kernels == 6);
  CHECK(op_named(fp32.main_block(), "rope").fwd_bytes == static_cast<Bytes>(8 * QK));
  CHECK(op_named(fp32.main_block(), "rope").fwd_kernels == 2);
  // LayerNorm and plain GeLU are one native kernel eager too (aten::native_layer_norm, gelu).
  ExpandOptions g;
  g.fused_elementwise = false;
  const auto gpt_eager = expand(gpt(2, 256, 4), g);
  const auto gpt_fused = expand(gpt(2, 256, 4));
  for (std::size_t i = 0; i < gpt_fused.main_block().ops.size(); ++i) {
    CHECK(gpt_eager.main_block().ops[i].fwd_bytes == gpt_fused.main_block().ops[i].fwd_bytes);
    CHECK(gpt_eager.main_block().ops[i].fwd_kernels == gpt_fused.main_block().ops[i].fwd_kernels);
  }
}

// The 1.2B GPT of Shoeybi et al. 2019 (gpt(40, 1536, 16, 1024)) as that
// release ran it: fp16, standard attention, 8 sequences a microbatch, tp 2.
ExpandOptions megatron2019_tp2() {
  ExpandOptions o;
  o.attention = AttentionKernel::Standard;
  o.precision = Precision::FP16;
  o.micro_batch = 8;
  o.tp = 2;
  return o;
}

TEST_CASE("standard attention's batched GEMMs move each operand once") {
  // GPT 1.2B of Shoeybi et al. 2019 in fp16, 8 sequences of 1024, tp 2:
  // Q = K = V = O = 8 · 1024 · 768 elements on the rank, S = 8 · 8 heads ·
  // 1024² scores. Scores: forward reads Q, K and writes S; backward's two
  // GEMMs (dQ = dS·K, dK = dSᵀ·Q) read dS each with K or Q and write dQ or
  // dK. Values: forward reads P (S) and V and writes O; backward (dP =
  // dO·Vᵀ, dV = Pᵀ·dO) reads dO twice, V and P and writes dP and dV.
  const auto m = gpt(40, 1536, 16, 1024);
  ExpandOptions o = megatron2019_tp2();
  const double X = 8.0 * 1024 * 768, S = 8.0 * 8 * 1024 * 1024;
  const auto ex = expand(m, o);
  const Op& qk = op_named(ex.main_block(), "attn_scores");
  const Op& av = op_named(ex.main_block(), "attn_values");
  CHECK(qk.fwd_bytes == static_cast<Bytes>(2 * (2 * X + S)));
  CHECK(qk.bwd_bytes == static_cast<Bytes>(2 * 2 * (2 * X + S)));
  CHECK(av.fwd_bytes == static_cast<Bytes>(2 * (2 * X + S)));
  CHECK(av.bwd_bytes == static_cast<Bytes>(2 * 2 * (2 * X + S)));
  CHECK(qk.fwd_flops == 2.0 * 8 * 1024 * 1024 * 768);
}

TEST_CASE("eager standard attention: scale, mask and softmax as separate kernels over the scores") {
  // GPT 1.2B of Shoeybi et al. 2019 (hidden 1536, 16 heads, sequence 1024)
  // in fp16, 8 sequences, tp 2: S = 8 · 8 heads · 1024 · 1024 score elements
  // on the rank. Eager (the 2019 Megatron-LM's GPT2ParallelSelfAttention):
  // division, product and difference with the mask, softmax: 4 kernels of
  // one read and one write, 8 · 2 bytes per element; backward softmax's
  // (3 passes), the product's and the division's (2 each): 7 · 2 bytes, 3
  // kernels. Fused: one kernel, 2 · 2 bytes forward, twice that backward.
  const auto m = gpt(40, 1536, 16, 1024);
  ExpandOptions o = megatron2019_tp2();
  const double S = 8.0 * 8 * 1024 * 1024;
  const auto fused = expand(m, o);
  o.fused_elementwise = false;
  const auto eager = expand(m, o);
  const Op& f = op_named(fused.main_block(), "softmax");
  const Op& g = op_named(eager.main_block(), "softmax");
  CHECK(f.fwd_bytes == static_cast<Bytes>(4 * S));
  CHECK(f.bwd_bytes == static_cast<Bytes>(8 * S));
  CHECK(f.fwd_kernels == 1);
  CHECK(g.fwd_bytes == static_cast<Bytes>(16 * S));
  CHECK(g.bwd_bytes == static_cast<Bytes>(14 * S));
  CHECK(g.fwd_kernels == 4);
  CHECK(g.bwd_kernels == 3);
  // What it saves (the softmax output) and the FLOPs do not change.
  CHECK(g.saved_bytes == f.saved_bytes);
  CHECK(eager.model_flops() == fused.model_flops());
}

TEST_CASE("the loss: in place saves the fp32 softmax; unfused holds two fp32 gradients beside it; each kernel's traffic") {
  // Llama-3-8B, two sequences of 8192 in bf16: N = 16384 · 128256 logits.
  auto m = model_preset("llama3-8b");
  m.seq_len = 8192;
  const double N = 2.0 * 8192 * 128256;
  ExpandOptions o;
  o.micro_batch = 2;
  const auto in_place_chain = expand(m, o);
  const Op in_place = op_named(in_place_chain.head, "loss");
  o.cross_entropy = CrossEntropy::Unfused;
  const auto unfused_chain = expand(m, o);
  const Op unfused = op_named(unfused_chain.head, "loss");
  // Both save the fp32 softmax (or log-softmax): 4 bytes per logit.
  CHECK(in_place.saved_bytes == static_cast<Bytes>(4 * N));
  CHECK(unfused.saved_bytes == in_place.saved_bytes);
  // In place, the backward holds the gradient cast to bf16 (2 bytes); unfused,
  // nll_loss's and log_softmax's fp32 gradients at once (8 bytes).
  CHECK(in_place.grad_bytes == static_cast<Bytes>(2 * N));
  CHECK(unfused.grad_bytes == static_cast<Bytes>(8 * N));
  CHECK(unfused_chain.head.max_grad_bytes() == static_cast<Bytes>(8 * N));
  // Traffic: cast (read 2, write 4) and log_softmax (read 4, write 4)
  // forward, 3 kernels with nll_loss; backward the fill (4), log_softmax's
  // backward (read 4 + 4, write 4) and the cast back (read 4, write 2), 4 kernels.
  CHECK(unfused.fwd_bytes == static_cast<Bytes>(14 * N));
  CHECK(unfused.bwd_bytes == static_cast<Bytes>(22 * N));
  CHECK(unfused.fwd_kernels == 3);
  CHECK(unfused.bwd_kernels == 4);
  // In place, Megatron-LM's _VocabParallelCrossEntropy of logits.float()
  // passes over the logits once per kernel: forward the cast (read 2, write
  // 4), max (read 4), sub_ (read 4, write 4), exp (8), sum (read 4) and
  // div_ (8), 6 kernels; backward the target's index update (per token, no
  // logit traffic), mul_ by the loss gradient (8) and the cast back (read
  // 4, write 2), 3 kernels.
  CHECK(in_place.fwd_bytes == static_cast<Bytes>(38 * N));
  CHECK(in_place.bwd_bytes == static_cast<Bytes>(14 * N));
  CHECK(in_place.fwd_kernels == 6);
  CHECK(in_place.bwd_kernels == 3);
  // Nothing else in the model changes.
  CHECK(unfused_chain.main_block().saved_bytes() == in_place_chain.main_block().saved_bytes());
  CHECK(unfused_chain.head.saved_bytes() == in_place_chain.head.saved_bytes());
  // fp32 training has no casts: 8 and 16 bytes per logit, 2 and 3 kernels.
  o.precision = Precision::FP32;
  const Op fp32 = op_named(expand(m, o).head, "loss");
  CHECK(fp32.fwd_bytes == static_cast<Bytes>(8 * N));
  CHECK(fp32.bwd_bytes == static_cast<Bytes>(16 * N));
  CHECK(fp32.fwd_kernels == 2);
  CHECK(fp32.grad_bytes == static_cast<Bytes>(8 * N));
  // Fused (flash-attn's xentropy kernel) on the bf16 logits: it saves them
  // (2 bytes per logit) and writes a bf16 gradient; forward reads them twice
  // (4), backward reads them and writes the gradient (4), one kernel each.
  o.precision = Precision::BF16;
  o.cross_entropy = CrossEntropy::Fused;
  const Op fused = op_named(expand(m, o).head, "loss");
  CHECK(fused.saved_bytes == static_cast<Bytes>(2 * N));
  CHECK(fused.grad_bytes == static_cast<Bytes>(2 * N));
  CHECK(fused.fwd_bytes == static_cast<Bytes>(4 * N));
  CHECK(fused.bwd_bytes == static_cast<Bytes>(4 * N));
  CHECK(fused.fwd_kernels == 1);
  CHECK(fused.bwd_kernels == 1);
  o.precision = Precision::FP32;
  // In place in fp32: 32 and 8 bytes per logit, 5 and 2 kernels.
  o.cross_entropy = CrossEntropy::InPlace;
  const Op fp32_in_place = op_named(expand(m, o).head, "loss");
  CHECK(fp32_in_place.fwd_bytes == static_cast<Bytes>(32 * N));
  CHECK(fp32_in_place.bwd_bytes == static_cast<Bytes>(8 * N));
  CHECK(fp32_in_place.fwd_kernels == 5);
  CHECK(fp32_in_place.bwd_kernels == 2);
  // PyTorch's loss_parallel on the fp32 logits (torchtitan under tensor
  // parallelism): it saves the log-softmax (4 bytes per logit) and its
  // backward holds three fp32 tensors beside it (zeros with the scatter,
  // their sum with exp, the product): 12 bytes per logit where unfused
  // holds 8. Traffic in bf16: the cast (6), amax (4), sub (8), exp (8), sum
  // (4), sub (8) forward, 38 bytes, 6 kernels; zeros (4), exp (8), add
  // (12), mul (8), the cast back (6) backward, 38 bytes, 6 kernels.
  o.precision = Precision::BF16;
  o.cross_entropy = CrossEntropy::Parallel;
  const auto parallel_chain = expand(m, o);
  const Op parallel = op_named(parallel_chain.head, "loss");
  CHECK(parallel.saved_bytes == static_cast<Bytes>(4 * N));
  CHECK(parallel.grad_bytes == static_cast<Bytes>(12 * N));
  CHECK(parallel_chain.head.max_grad_bytes() == static_cast<Bytes>(12 * N));
  CHECK(parallel.fwd_bytes == static_cast<Bytes>(38 * N));
  CHECK(parallel.bwd_bytes == static_cast<Bytes>(38 * N));
  CHECK(parallel.fwd_kernels == 6);
  CHECK(parallel.bwd_kernels == 6);
  // Over a vocabulary shard: tp 8 holds an eighth of the logits.
  o.tp = 8;
  o.sequence_parallel = true;
  CHECK(op_named(expand(m, o).head, "loss").grad_bytes == static_cast<Bytes>(12 * N / 8));
}

TEST_CASE("train metrics: each pass is PyTorch's cross-entropy forward over the logits, nothing kept or differentiated") {
  // GPT-3 1.3B's shape with MPT's 50,368-entry vocabulary, six sequences
  // of 2,048 in bf16: N = 12,288 · 50,368 logits. Composer updates each train metric
  // after each microbatch's backward; llm-foundry's MPT has two
  // (LanguageCrossEntropy and LanguagePerplexity), each a
  // torch.nn.CrossEntropyLoss of the logits under autocast: the cast to
  // fp32 (read 2, write 4) and log_softmax (read 4, write 4), with
  // nll_loss 3 kernels: 14 bytes a logit per pass, no backward.
  auto m = model_preset("gpt3-1.3b");
  m.vocab = 50368;
  m.seq_len = 2048;
  ExpandOptions o;
  o.micro_batch = 6;
  const double N = 6.0 * 2048 * 50368;
  const auto none = expand(m, o);
  for (const Op& op : none.head.ops) CHECK(op.name != "train_metrics");  // 0 passes: no op
  o.train_metric_passes = 2;
  const auto two = expand(m, o);
  const Op metrics = op_named(two.head, "train_metrics");
  CHECK(metrics.fwd_bytes == static_cast<Bytes>(28 * N));
  CHECK(metrics.fwd_kernels == 6);
  CHECK(metrics.bwd_bytes == 0);
  CHECK(metrics.bwd_kernels == 0);
  CHECK(metrics.saved_bytes == 0);
  CHECK(metrics.grad_bytes == 0);
  CHECK(metrics.fwd_flops == 0);
  // Each pass is the unfused loss's forward, whatever kernel the loss runs.
  o.cross_entropy = CrossEntropy::Unfused;
  CHECK(metrics.fwd_bytes == 2 * op_named(expand(m, o).head, "loss").fwd_bytes);
  // Nothing else changes: the blocks, the loss, what the head keeps.
  CHECK(two.main_block().saved_bytes() == none.main_block().saved_bytes());
  CHECK(two.head.saved_bytes() == none.head.saved_bytes());
  CHECK(two.head.max_grad_bytes() == none.head.max_grad_bytes());
  CHECK(two.head.bwd_flops() == none.head.bwd_flops());
  // fp32 training casts nothing: 8 bytes a logit and 2 kernels per pass.
  o.cross_entropy = CrossEntropy::InPlace;
  o.precision = Precision::FP32;
  const Op fp32 = op_named(expand(m, o).head, "train_metrics");
  CHECK(fp32.fwd_bytes == static_cast<Bytes>(16 * N));
  CHECK(fp32.fwd_kernels == 4);
}

TEST_CASE("torchtitan's op-level checkpointing: wq, wv, w1, w2 and attention stored, wk, wo, w3 rerun") {
  // Llama-3-8B, one sequence of 8192 in bf16: h 4096, kv 1024, f 14336
  // features per token. The block's aten.mm order is wq, wk, wv, wo, w1, w3,
  // w2; torchtitan stores the odd ones' outputs and the flash kernel's
  // output and fp32 log-sum-exp (32 heads), and keeps the block's input.
  auto m = model_preset("llama3-8b");
  m.seq_len = 8192;
  const auto c = expand(m);
  const double s = 8192, h = 4096, kv = 1024, f = 14336;
  const Op& qkv = op_named(c.main_block(), "qkv");
  CHECK(qkv.sac_stored_bytes == static_cast<Bytes>(2 * s * (h + kv)));  // wq, wv
  CHECK(qkv.sac_rerun == doctest::Approx(kv / (h + 2 * kv)));              // wk
  CHECK(op_named(c.main_block(), "attn_proj").sac_rerun == 1.0);                  // wo
  CHECK(op_named(c.main_block(), "attn_proj").sac_stored_bytes == 0);
  CHECK(op_named(c.main_block(), "mlp_up_gate").sac_stored_bytes == static_cast<Bytes>(2 * s * f));  // w1
  CHECK(op_named(c.main_block(), "mlp_up_gate").sac_rerun == 0.5);                                  // w3
  CHECK(op_named(c.main_block(), "mlp_down").sac_stored_bytes == static_cast<Bytes>(2 * s * h));     // w2
  CHECK(op_named(c.main_block(), "mlp_down").sac_rerun == 0.0);
  const Op& attn = op_named(c.main_block(), "attention");
  CHECK(attn.sac_stored_bytes == static_cast<Bytes>(2 * s * h + 4 * 32 * s));
  CHECK(rerun_share(attn, Recompute::SelectiveOp) == 0.0);
  // Norms, RoPE, the gated unit and residuals are rerun; none is stored.
  for (const char* name : {"attn_norm", "rope", "mlp_norm", "swiglu", "attn_residual", "mlp_residual"}) {
    CAPTURE(name);
    CHECK(rerun_share(op_named(c.main_block(), name), Recompute::SelectiveOp) == 1.0);
    CHECK(op_named(c.main_block(), name).sac_stored_bytes == 0);
  }
  // Input + wq + wv + attention (+ lse) + w1 + w2 = (4h + kv + f)·2 bytes
  // per token and the log-sum-exp, below what no recompute keeps.
  const Bytes stored = c.main_block().saved_bytes(Recompute::SelectiveOp);
  CHECK(stored == static_cast<Bytes>(2 * s * (4 * h + kv + f) + 4 * 32 * s));
  CHECK(stored < c.main_block().saved_bytes(Recompute::None));
  CHECK(stored > c.main_block().saved_bytes(Recompute::Full));
  // Megatron-LM's policy reruns nothing under flash attention.
  for (const auto& op : c.main_block().ops) CHECK(rerun_share(op, Recompute::Selective) == 0.0);
}

TEST_CASE("torchtitan's op-level checkpointing counts only aten.mm: a biased projection is addmm") {
  // Qwen2's q/k/v biases make the qkv projections aten.addmm: off the save
  // list and not counted, so wo is the block's first mm (stored), w1 the
  // second (rerun), w3 the third (stored), w2 the fourth (rerun).
  auto m = model_preset("llama3-8b");
  m.qkv_bias = true;
  const auto c = expand(m);
  CHECK(op_named(c.main_block(), "qkv").sac_rerun == 1.0);
  CHECK(op_named(c.main_block(), "qkv").sac_stored_bytes == 0);
  CHECK(op_named(c.main_block(), "attn_proj").sac_rerun == 0.0);
  CHECK(op_named(c.main_block(), "mlp_up_gate").sac_rerun == 0.5);
  CHECK(op_named(c.main_block(), "mlp_down").sac_rerun == 1.0);
}

// Every op of two layers alike, field by field (Op has no operator==).
void check_same_ops(const Layer& x, const Layer& y) {
  REQUIRE(x.ops.size() == y.ops.size());
  for (std::size_t i = 0; i < x.ops.size(); ++i) {
    const Op &p = x.ops[i], &q = y.ops[i];
    CAPTURE(p.name);
    CHECK(p.name == q.name);
    CHECK(p.params == q.params);
    CHECK(p.fwd_flops == q.fwd_flops);
    CHECK(p.bwd_flops == q.bwd_flops);
    CHECK(p.fwd_bytes == q.fwd_bytes);
    CHECK(p.bwd_bytes == q.bwd_bytes);
    CHECK(p.saved_bytes == q.saved_bytes);
    CHECK(p.core_saved_bytes == q.core_saved_bytes);
    CHECK(p.grad_bytes == q.grad_bytes);
    CHECK(p.sac_stored_bytes == q.sac_stored_bytes);
  }
}

// A model of `layers` blocks of h 64, 4 heads, seq_len 8.
ModelSpec small_windowed(std::int64_t layers, std::int64_t window, std::optional<std::int64_t> global_every) {
  ModelSpec m = llama_like(64, 4, 4, 128);
  m.layers = layers;
  m.seq_len = 8;
  m.attention_window = AttentionWindow{.size = window, .global_every = global_every};
  return m;
}

TEST_CASE("sliding-window attention prices the causal pairs inside the window") {
  // s = 8, w = 3: query p attends to min(p + 1, 3) keys, 1+2+3+3+3+3+3+3 =
  // 21 of the 36 causal pairs. Full attention is priced as every query
  // against all 8 keys (2·b·s·s per query and per output feature, 64 + 64
  // here), so the window costs 21/36 of it: 8·21/36 keys a query, which is
  // w(2s − w + 1)/(s + 1) = 3·14/9.
  const ModelSpec win = small_windowed(2, 3, std::nullopt);
  ModelSpec full = win;
  full.attention_window.reset();
  const double s = 8, qw = 64, ow = 64;
  const OpChain c_full = expand(full), c_win = expand(win);
  const Op& a_full = op_named(c_full.main_block(), "attention");
  const Op& a_win = op_named(c_win.main_block(), "attention");
  CHECK(a_full.fwd_flops == doctest::Approx(2 * s * s * (qw + ow)));
  CHECK(a_win.fwd_flops == doctest::Approx(2 * s * (8.0 * 21 / 36) * (qw + ow)));
  CHECK(a_win.fwd_flops == doctest::Approx(2 * s * (3.0 * 14 / 9) * (qw + ow)));
  CHECK(a_win.bwd_flops == doctest::Approx(2 * a_win.fwd_flops));
  // Every layer windowed: one kind.
  CHECK(c_win.kinds.size() == 1);
  // Flash attention keeps Q, K, V and the log-sum-exp whatever the window,
  // and moves the same bytes.
  CHECK(a_win.saved_bytes == a_full.saved_bytes);
  CHECK(a_win.fwd_bytes == a_full.fwd_bytes);
  CHECK(c_win.main_block().saved_bytes() == c_full.main_block().saved_bytes());
  // Context parallelism: each rank's s/2 queries count the same mean.
  ExpandOptions cp2;
  cp2.cp = 2;
  CHECK(op_named(expand(win, cp2).main_block(), "attention").fwd_flops ==
        doctest::Approx(a_win.fwd_flops / 2));
  // Standard (eager) attention computes the whole masked score matrix: the
  // window changes nothing.
  ExpandOptions eager;
  eager.attention = AttentionKernel::Standard;
  check_same_ops(expand(win, eager).main_block(), expand(full, eager).main_block());
}

TEST_CASE("a window of seq_len keys or more is full attention, bit for bit") {
  // min(p + 1, w) = p + 1 for every query when w >= s = 8.
  ModelSpec full = small_windowed(2, 8, std::nullopt);
  full.attention_window.reset();
  for (const std::int64_t w : {8, 9, 4096}) {
    CAPTURE(w);
    const ModelSpec m = small_windowed(2, w, std::nullopt);
    check_same_ops(expand(m).main_block(), expand(full).main_block());
    CHECK(expand(m).model_flops() == expand(full).model_flops());
  }
}

TEST_CASE("global_every 6: layers 5 and 11 of 12 are global, the others windowed") {
  // Gemma 3's 5:1 rule, (i + 1) % 6 == 0 global: kinds[0] is the full
  // attention block (the main block), kinds[1] the windowed one.
  const ModelSpec m = small_windowed(12, 3, 6);
  const OpChain c = expand(m);
  REQUIRE(c.kinds.size() == 2);
  for (std::int64_t i = 0; i < 12; ++i) {
    CAPTURE(i);
    CHECK(m.windowed_at(i) == (i != 5 && i != 11));
    CHECK(c.kind_of[static_cast<std::size_t>(i)] == (i == 5 || i == 11 ? 0 : 1));
    CHECK(c.block_at(i).block_kind == c.kind_of[static_cast<std::size_t>(i)]);
  }
  const double s = 8, qw = 64, ow = 64;
  CHECK(op_named(c.kinds[0], "attention").fwd_flops == doctest::Approx(2 * s * s * (qw + ow)));
  CHECK(op_named(c.kinds[1], "attention").fwd_flops == doctest::Approx(2 * s * (8.0 * 21 / 36) * (qw + ow)));
  // Parameters and saved bytes do not depend on the window.
  CHECK(c.kinds[0].params() == c.kinds[1].params());
  CHECK(c.kinds[0].saved_bytes() == c.kinds[1].saved_bytes());
  // The chain's FLOPs are each block's own: 2 full and 10 windowed.
  CHECK(c.fwd_flops() == doctest::Approx(c.embedding.fwd_flops() + c.head.fwd_flops() +
                                         2 * c.kinds[0].fwd_flops() + 10 * c.kinds[1].fwd_flops()));
}

TEST_CASE("block kinds with experts and a window: expert before dense, full before windowed") {
  // 4 layers, the first dense (first_dense 1), global_every 2: layer 0 is
  // dense and windowed, 1 and 3 expert and full, 2 expert and windowed. The
  // kinds present in order: (expert, full), (expert, windowed), (dense,
  // windowed).
  ModelSpec m = small_windowed(4, 3, 2);
  m.moe = MoeSpec{.experts = 4, .top_k = 2, .first_dense = 1};
  const OpChain c = expand(m);
  REQUIRE(c.kinds.size() == 3);
  CHECK(c.kind_of == std::vector<std::int32_t>{2, 0, 1, 0});
  const double full = op_named(c.kinds[0], "attention").fwd_flops;
  CHECK(op_named(c.kinds[1], "attention").fwd_flops < full);
  CHECK(op_named(c.kinds[2], "attention").fwd_flops == op_named(c.kinds[1], "attention").fwd_flops);
  CHECK(c.kinds[0].params() == c.kinds[1].params());
  CHECK(c.kinds[2].params() < c.kinds[1].params());  // a dense MLP: no experts
}

TEST_CASE("soft-capping: one more score- or logit-sized tensor kept, three eager kernels, nothing under flash") {
  // A Llama-like model (h 1024, 16 heads, seq 512, vocab 1000), microbatch
  // 1, bf16. Gemma 2's cap · tanh(x / cap): over the logits, the tanh's
  // output (s·V elements, 2 bytes) is kept and the three kernels each read
  // and write the tensor once (12 bytes an element forward); over standard
  // attention's scores (a·s·s elements) the same, as part of the attention
  // core; under flash attention the kernel caps in place: no op.
  ModelSpec m = llama_like(1024, 16, 16, 2816);
  const double s = 512, V = 1000, a = 16;
  ExpandOptions eager;
  eager.fused_elementwise = false;
  eager.attention = AttentionKernel::Standard;
  const OpChain plain = expand(m, eager);
  m.logit_softcap = 30.0;
  m.attn_softcap = 50.0;
  const OpChain capped = expand(m, eager);
  const Op& logits = op_named(capped.head, "logit_softcap");
  CHECK(logits.saved_bytes == static_cast<Bytes>(s * V * 2));
  CHECK(logits.fwd_bytes == static_cast<Bytes>(s * V * 12));
  CHECK(logits.fwd_kernels == 3);
  CHECK(capped.head.saved_bytes() - plain.head.saved_bytes() == static_cast<Bytes>(s * V * 2));
  const Op& scores = op_named(capped.main_block(), "attn_softcap");
  CHECK(scores.saved_bytes == static_cast<Bytes>(a * s * s * 2));
  CHECK(capped.main_block().saved_bytes() - plain.main_block().saved_bytes() ==
        static_cast<Bytes>(a * s * s * 2));
  // Part of the attention core: selective recompute drops and reruns it.
  CHECK(capped.main_block().saved_bytes(Recompute::Selective) == plain.main_block().saved_bytes(Recompute::Selective));
  CHECK(rerun_share(scores, Recompute::Selective) == 1.0);
  // Fused, one kernel of one read and one write.
  ExpandOptions fused = eager;
  fused.fused_elementwise = true;
  CHECK(op_named(expand(m, fused).head, "logit_softcap").fwd_bytes == static_cast<Bytes>(s * V * 4));
  // Flash attention caps in its kernel: the block is the uncapped one.
  ExpandOptions flash;
  const Layer flash_capped = expand(m, flash).main_block();
  ModelSpec no_attn_cap = m;
  no_attn_cap.attn_softcap.reset();
  CHECK(flash_capped.ops.size() == expand(no_attn_cap, flash).main_block().ops.size());
  CHECK(flash_capped.saved_bytes() == expand(no_attn_cap, flash).main_block().saved_bytes());
}

}  // namespace
}  // namespace strata::cost

namespace strata::cost {
namespace {

TEST_CASE("a layer chain expands to one Stage op per stage, equal stages one kind") {
  // Input 100 B a sample; stage a (1 GFLOP forward, 2 backward, 10
  // parameters, output 200 B, 50 B saved, 30 B workspace), then b twice
  // (output 200 B): both b read 200 B, so they are one kind. With a
  // microbatch of 4, a keeps 4·(100 + 50) = 600 B (its input and saved
  // tensors; its output is b's input), holds 4·(200 + 30) = 920 B while its
  // backward runs, and moves 4·(100 + 200 + 50) = 1,400 B forward, twice
  // that backward. The head holds the last output, 800 B.
  ModelSpec m;
  m.name = "toy";
  m.chain = LayerChain{100,
                       {{"a", 1e9, 2e9, 10, 200, 50, 30}, {"b.1", 4e9, 8e9, 5, 200, 0, 0},
                        {"b.2", 4e9, 8e9, 5, 200, 0, 0}}};
  m.layers = 3;
  ExpandOptions o;
  o.micro_batch = 4;
  const OpChain c = expand(m, o);
  REQUIRE(c.kinds.size() == 2);
  CHECK(c.kind_of == std::vector<std::int32_t>{0, 1, 1});
  CHECK(c.blocks == 3);
  const Op& a = c.kinds[0].ops.at(0);
  CHECK(a.kind == OpKind::Stage);
  CHECK(a.fwd_flops == 4e9);
  CHECK(a.bwd_flops == 8e9);
  CHECK(a.params == 10);
  CHECK(a.saved_bytes == 600);
  CHECK(a.grad_bytes == 920);
  CHECK(a.fwd_bytes == 1400);
  CHECK(a.bwd_bytes == 2800);
  CHECK(c.kinds[0].input_bytes == 400);
  CHECK(c.kinds[1].input_bytes == 800);
  CHECK(c.kinds[1].ops.at(0).saved_bytes == 800);
  CHECK(c.embedding.input_bytes == 400);
  CHECK(c.embedding.ops.empty());
  CHECK(c.head.input_bytes == 800);
  CHECK(c.head.ops.empty());
  CHECK(c.params() == 20);
  CHECK(c.fwd_flops() == 4 * (1e9 + 4e9 + 4e9));
  // Full recompute keeps a stage's input; its saved tensors are one op's.
  CHECK(c.kinds[0].saved_bytes(Recompute::Full) == 400);
  CHECK(c.kinds[0].saved_tensors(Recompute::None) == std::vector<Bytes>{600});
  // A chain's stages are not split.
  o.tp = 2;
  CHECK_THROWS(expand(m, o));
}

}  // namespace
}  // namespace strata::cost
