#include "backend/common/param_table.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>

#include "costmodel/ops.hpp"
#include "tests/testing.hpp"

namespace strata::backend {
namespace {

using strategies::Part;

std::int64_t count(const ParamTable& t) {
  std::int64_t n = 0;
  for (const auto& p : t.params()) n += p.shape.numel();
  return n;
}

TEST_CASE("common/param_table: every tensor once, in the models' order, with its part, layer and role") {
  for (const bool swiglu : {false, true})
    for (const bool tied : {true, false}) {
      cost::ModelSpec m = testing::tiny_gpt();
      m.layers = 3;
      m.mlp = swiglu ? cost::MlpKind::Swiglu : cost::MlpKind::Gelu;
      m.norm = swiglu ? cost::NormKind::RmsNorm : cost::NormKind::LayerNorm;
      m.tied_embeddings = tied;
      CAPTURE(swiglu);
      CAPTURE(tied);
      const ParamTable t(m);
      // The parameter count is the op chain's (tied: the embedding counted once).
      CHECK(count(t) == cost::expand(m).params());
      // Names are unique; a block's start with its layer; parts partition the table.
      std::set<std::string> names(t.names().begin(), t.names().end());
      CHECK(static_cast<int>(names.size()) == t.size());
      std::size_t seen = t.embedding().size() + t.head().size();
      for (int l = 0; l < t.layers(); ++l) {
        seen += t.layer(l).size();
        for (const int i : t.layer(l)) {
          CHECK(t[i].part == Part::Layer);
          CHECK(t[i].layer == l);
          CHECK(t[i].name.rfind("block" + std::to_string(l) + ".", 0) == 0);
          CHECK(t.find(t[i].role, l) == i);
          CHECK(t.where(i) == "layer " + std::to_string(l));
        }
      }
      CHECK(static_cast<int>(seen) == t.size());
      // Order: embedding first, the head last, layers in between.
      CHECK(t.word_embedding() == 0);
      CHECK(t[0].name == "embedding");
      CHECK(t.find("position_embedding") == 1);
      CHECK(t.names().back() == (tied ? (swiglu ? "final_norm.gain" : "final_norm.bias") : "logits.weight"));
      CHECK((t.find(ParamRole::LogitsWeight) >= 0) == !tied);
      CHECK((t.find(ParamRole::AttnNormBias, 0) >= 0) == !swiglu);
      CHECK(t.find(ParamRole::UpWeight, 2) == t.find(swiglu ? "block2.mlp_up_gate.weight" : "block2.mlp_up.weight"));
      CHECK(t.where(t.word_embedding()) == "the embedding");
      CHECK(t.where(t.find("final_norm.gain")) == "the head");
      for (const auto& p : t.params()) {
        // Norms, and only they, are flagged (their gradients are split by rows under SP).
        CHECK(p.norm == (p.name.find("norm.") != std::string::npos));
        // GPT-2's initialisation.
        if (p.name.ends_with(".gain")) CHECK(p.init == Init::Ones);
        if (p.name.ends_with(".bias")) CHECK(p.init == Init::Zeros);
        if (p.name.ends_with(".weight") || p.part == Part::Embedding) CHECK(p.init == Init::Normal);
      }
      CHECK(t[t.find("block1.attn_proj.weight")].sd == doctest::Approx(0.02 / std::sqrt(6.0)));
      CHECK(t[t.find("position_embedding")].sd == doctest::Approx(0.01));
    }
}

TEST_CASE("common/param_table: tensor parallelism splits as Megatron-LM: columns, rows, whole") {
  cost::ModelSpec m = testing::tiny_gpt();
  m.mlp = cost::MlpKind::Swiglu;
  m.tied_embeddings = false;
  const ParamTable t(m);
  const std::int64_t h = m.hidden, f = m.ffn_hidden;
  auto local = [&](const char* name) { return t.local_shape(t.find(name), 2); };
  CHECK(local("embedding") == Shape{m.vocab / 2, h});
  CHECK(local("position_embedding") == Shape{m.seq_len, h});
  CHECK(local("block0.qkv.weight") == Shape{h, 3 * h / 2});
  CHECK(t[t.find("block0.qkv.weight")].parts == 3);
  CHECK(local("block0.attn_proj.weight") == Shape{h / 2, h});
  CHECK(local("block0.mlp_up_gate.weight") == Shape{h, f});
  CHECK(t[t.find("block0.mlp_up_gate.weight")].parts == 2);
  CHECK(local("block0.mlp_down.weight") == Shape{f / 2, h});
  CHECK(local("block0.mlp_down.bias") == Shape{h});
  CHECK(local("logits.weight") == Shape{m.vocab / 2, h});
  CHECK(t.local_shape(t.find("block0.qkv.weight"), 1) == Shape{h, 3 * h});
}

}  // namespace
}  // namespace strata::backend
