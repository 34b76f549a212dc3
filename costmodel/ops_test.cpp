// Closed forms from ../shared/validation/published_cases.json ("formulas"),
// checked against totals obtained by summing the op chain.
#include "costmodel/ops.hpp"

#include <doctest/doctest.h>

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
  const double summed = c.model_flops() + static_cast<double>(c.blocks) * c.block.fwd_flops();
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
  return expand(m, o).block.saved_bytes(r);
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
  const Bytes flash = expand(m, flash_o).block.saved_bytes();
  CHECK(flash == static_cast<Bytes>(s * b * h * 34 + 4 * a * s * b));
  CHECK(expand(m, std_o).block.saved_bytes() - flash ==
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
  const double diff = expand(moe).block.fwd_flops() - expand(dense).block.fwd_flops();
  CHECK(diff == doctest::Approx((k - 1) * 2 * b * s * 3 * h * f + 2 * b * s * h * E).epsilon(1e-12));
}

TEST_CASE("tensor parallelism splits weights, not replicated biases and norms") {
  // Per tp rank: 12h²/t + column biases (3h + 4h)/t + row biases (h + h) +
  // two layer norms (4h): Megatron's ColumnParallel/RowParallel layout.
  const auto m = gpt(1, 1024, 16, 128, 1000);
  ExpandOptions o;
  o.tp = 4;
  const std::int64_t h = 1024, t = 4;
  CHECK(expand(m, o).block.params() == 12 * h * h / t + 7 * h / t + 2 * h + 4 * h);
}

TEST_CASE("fp32 doubles activation bytes; fp8 halves GEMM inputs") {
  const auto m = gpt(1, 512, 8, 256, 1000);
  ExpandOptions bf16, fp32, fp8;
  for (auto* o : {&bf16, &fp32, &fp8}) o->attention = AttentionKernel::Standard;
  fp32.precision = Precision::FP32;
  fp8.precision = Precision::FP8;
  const auto& ops16 = expand(m, bf16).block.ops;
  const auto& ops32 = expand(m, fp32).block.ops;
  const auto& ops8 = expand(m, fp8).block.ops;
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

TEST_CASE("size_bound is above every byte count and parameter count expand forms") {
  // For every preset, with dropout, fp32, both attention kernels and no
  // tensor parallelism (the most a rank holds): parameters, and a
  // microbatch's saved bytes, gradients and traffic over all layers.
  for (ModelSpec m : model_presets()) {
    if (m.chain) continue;  // layer chains are not expanded into ops
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
      for (const Layer* l : {&c.embedding, &c.block, &c.head}) {
        const double times = l == &c.block ? static_cast<double>(c.blocks) : 1.0;
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
  for (const auto& op : c.block.ops) {
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
  CHECK(full.block.params() - part.block.params() == expert - expert / 4);
  CHECK(part.block.fwd_flops() == full.block.fwd_flops());
}

}  // namespace
}  // namespace strata::cost
