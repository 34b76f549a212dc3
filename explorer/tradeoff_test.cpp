#include "explorer/tradeoff.hpp"

#include <doctest/doctest.h>

#include "sim/error.hpp"
#include "lowering/step_costs.hpp"

namespace strata::strategies {
namespace {

Scenario scenario(const std::string& text) { return parse_scenario(text, "t.json"); }

TEST_CASE("a transformer's step without savings is the layer-level simulation's") {
  // pp = 1 on one GPU: the chain's forwards and backwards, the optimizer and
  // the framework overheads are exactly what the lowered step runs.
  const Scenario sc = scenario(R"({"model": "gpt2-124m", "cluster": "1xa100-80g",
                                   "batch": {"global": 16, "micro": 4}})");
  const Tradeoff t = tradeoff(sc, {.budgets = 2, .levels = 50});
  CHECK(t.stages == 12 + 2);  // embedding, blocks, head
  CHECK(t.microbatches == 4);
  CHECK(t.step_time(t.compute) == predict_step(sc).step_time);
}

TEST_CASE("a layer chain's stages are its layers, sizes times the microbatch") {
  // ResNet-50: stem, 16 bottleneck units, head; 4 samples a microbatch.
  // Each stage is timed as simulate's step prices it: its block's pass.
  const Scenario sc = scenario(R"({"model": "resnet50", "cluster": "1xa100-80g",
                                   "batch": {"global": 8, "micro": 4}, "plan": {"precision": "fp32"}})");
  const remat::Chain c = remat_chain(sc);
  const auto& layers = sc.model.chain->layers;
  const ModelStepCosts costs(sc);
  REQUIRE(c.size() == 18);
  CHECK(c.input == 4 * sc.model.chain->input_bytes);
  for (int i = 1; i <= c.size(); ++i) {
    CAPTURE(i);
    const auto& l = layers[static_cast<std::size_t>(i - 1)];
    CHECK(c.stage(i).output == 4 * l.output_bytes);
    CHECK(c.stage(i).saved == 4 * l.saved_bytes);
    CHECK(c.stage(i).bwd > 0);
    const cost::Layer& block = costs.chain().block_at(i - 1);
    CHECK(c.stage(i).fwd == costs.layer(block, Pass::Forward, false));
    CHECK(c.stage(i).bwd == costs.layer(block, Pass::Backward, false));
  }
}

TEST_CASE("the sweep runs from no savings down to the least budget, optimal never slower") {
  // Budgets descend from store-all's peak; none fits only the first; on
  // this 18-stage chain the programme's frontier is at least as fast as
  // every simple policy at every budget.
  const Scenario sc = scenario(R"({"model": "resnet50", "cluster": "1xa100-80g",
                                   "batch": {"global": 32, "micro": 32}, "plan": {"precision": "fp32"}})");
  const Tradeoff t = tradeoff(sc, {.budgets = 8, .levels = 100});
  REQUIRE(t.budgets.size() == 8);
  REQUIRE(t.curves.size() == 5);
  CHECK(t.budgets.front() == remat::build(remat_chain(sc), remat::store_all(remat_chain(sc))).peak);
  for (std::size_t b = 1; b < t.budgets.size(); ++b) CHECK(t.budgets[b] < t.budgets[b - 1]);
  const TradeoffCurve& optimal = t.curves.back();
  REQUIRE(optimal.policy == RematPolicy::Optimal);
  for (std::size_t b = 0; b < t.budgets.size(); ++b) {
    CAPTURE(b);
    CHECK(t.curves.front().best[b].has_value() == (b == 0));
    REQUIRE(optimal.best[b].has_value());
    CHECK(optimal.best[b]->peak <= t.budgets[b]);
    for (const auto& c : t.curves)
      if (c.best[b]) CHECK(optimal.best[b]->time <= c.best[b]->time);
  }
  CHECK(optimal.best.back()->peak == t.budgets.back());
}

TEST_CASE("a pipeline plan's sweep: its own steps, optimal recompute never slower") {
  // GPT-2 (12 layers, standard attention) over 4 stages: every point is a
  // plan the simulator steps; at every budget optimal recompute is at least
  // as fast as any fixed policy within it, and at the top it is no savings.
  const Scenario sc = scenario(R"({"model": "gpt2-124m", "cluster": "dgx-a100-80g",
                                   "batch": {"global": 64, "micro": 8},
                                   "plan": {"pp": 4, "dp": 2, "implementation": {"attention": "standard"}}})");
  const Tradeoff t = tradeoff(sc, {.budgets = 6});
  CHECK(t.shape == "12 layers over 4 pipeline stages");
  REQUIRE(t.budgets.size() == 6);
  REQUIRE(t.curves.size() == 6);
  for (std::size_t b = 1; b < t.budgets.size(); ++b) CHECK(t.budgets[b] < t.budgets[b - 1]);
  const TradeoffCurve& none = t.curves.front();
  const TradeoffCurve& optimal = t.curves.back();
  REQUIRE(optimal.policy == RematPolicy::Optimal);
  CHECK(none.best[0]->time == t.no_savings);
  CHECK(optimal.best[0]->time == t.no_savings);
  Scenario plain = sc;
  CHECK(t.no_savings == predict_step(plain).step_time);  // the coarse level is exact here
  for (std::size_t b = 0; b < t.budgets.size(); ++b) {
    CAPTURE(b);
    REQUIRE(optimal.best[b].has_value());
    for (const auto& c : t.curves)
      if (c.best[b]) {
        CHECK(c.best[b]->peak <= t.budgets[b]);
        CHECK(optimal.best[b]->time <= c.best[b]->time);
      }
  }
  CHECK(optimal.best.back()->time > t.no_savings);
}

TEST_CASE("a pipeline plan's trade-off is bounded: (budgets + 2) x (layers per chunk)² refused past 2e8") {
  // 7,000 layers over 2 stages at 16 budgets: 18 optimal-recompute tables
  // of 3,500² cells, 2.2e8, refused at once with the rule; 4 budgets (6
  // tables, 7.4e7) run.
  const std::string text = R"({"model": {"preset": "gpt2-124m", "layers": 7000},
      "cluster": {"preset": "dgx-h100", "gpu": {"preset": "h100-sxm", "memory_GiB": 20000}},
      "batch": {"global": 8, "micro": 1}, "plan": {"optimizer": "sgd", "pp": 2, "dp": 4}})";
  const Scenario sc = scenario(text);
  std::string message;
  try {
    tradeoff(sc, {.budgets = 16});
  } catch (const InputError& e) {
    message = e.what();
  }
  CHECK(message.find("model.layers: the trade-off solves optimal recompute 18 times over chunks of up to 3500 "
                     "layers") != std::string::npos);
  CHECK(message.find("rule tradeoff-size") != std::string::npos);
  // A chunk longer than 64 layers: every_k tries every length to 64, then
  // lengths 1.25 apart and the chunk's own (200 here).
  const Tradeoff t = tradeoff(scenario(R"({"model": {"preset": "gpt2-124m", "layers": 400},
      "cluster": "dgx-a100-80g", "batch": {"global": 8, "micro": 1}, "plan": {"pp": 2, "dp": 4}})"),
                              {.budgets = 2});
  CHECK(t.shape == "400 layers over 2 pipeline stages");
}

TEST_CASE("tradeoff says what it does not model") {
  // A pipeline stage's microbatches overlap: not one chain.
  const Scenario sc = scenario(R"({"model": "gpt2-124m", "cluster": "dgx-a100-80g",
                                   "batch": {"global": 16}, "plan": {"pp": 2, "dp": 4}})");
  CHECK_THROWS_WITH_AS(remat_chain(sc),
                       "t.json: plan.pp: strata tradeoff models one chain per GPU (pp = 1); a "
                       "pipeline stage's microbatches overlap",
                       InputError);
}

}  // namespace
}  // namespace strata::strategies
