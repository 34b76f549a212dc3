#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "sim/error.hpp"
#include "strategies/convergence.hpp"
#include "strategies/convergence_io.hpp"
#include "tests/testing.hpp"

namespace strata::strategies {
namespace {

// S_min 1000 steps, B_noise 1e6 tokens at loss 2.0; penalties: top-k with
// error feedback 1.0 at ratio 0.001 and 2.0 at 0.1, without it 1.5; 8-bit
// Adam 1.2, Adam 1; 1 % per step of staleness.
ConvergenceModel model() {
  ConvergenceModel m;
  m.file = "m.json";
  m.target_loss = 2.0;
  m.s_min_steps = {1000, "t"};
  m.b_noise_tokens = {1e6, "t"};
  m.compression = {{CompressionMethod::TopK, true, {{0.001, {1.0, {}, "t"}}, {0.1, {2.0, {}, "t"}}}},
                   {CompressionMethod::TopK, false, {{0.01, {1.5, {}, "t"}}}},
                   {CompressionMethod::Qsgd, true, {{4, {1.1, {}, "t"}}}}};
  m.optimizer = {{Optimizer::Adam, {1.0, {}, "t"}}, {Optimizer::Adam8bit, {1.2, {}, "t"}}};
  m.staleness_per_step = {0.01, {}, "t"};
  return m;
}

TEST_CASE("convergence: McCandlish's S(B) = S_min(1 + B_noise/B) and E(B) = E_min(1 + B/B_noise)") {
  // At B = B_noise the steps and tokens are both twice their minimum; S·B = E everywhere.
  const CriticalBatch c{1000, 1e6};
  CHECK(steps_at_batch(c, 1e6) == doctest::Approx(2000));
  CHECK(tokens_at_batch(c, 1e6) == doctest::Approx(2e9));
  for (double b : {1e3, 1e5, 1e7, 1e9})
    CHECK(steps_at_batch(c, b) * b == doctest::Approx(tokens_at_batch(c, b)));
  // Far below B_noise, doubling the batch halves the steps (E ≈ E_min = 1e9);
  // far above it the steps approach S_min and the tokens grow with B.
  CHECK(steps_at_batch(c, 1e2) / steps_at_batch(c, 2e2) == doctest::Approx(2.0).epsilon(1e-3));
  CHECK(tokens_at_batch(c, 1e2) == doctest::Approx(1e9).epsilon(1e-3));
  CHECK(steps_at_batch(c, 1e12) == doctest::Approx(1000).epsilon(1e-5));
  // B_noise 0: no gradient noise, every batch needs S_min steps.
  CHECK(steps_at_batch({1000, 0}, 1) == doctest::Approx(1000));
  CHECK(steps_at_batch({1000, 0}, 1e9) == doctest::Approx(1000));
}

TEST_CASE("convergence: learning-rate rules scale the base rate by B/B_ref, its square root, or not") {
  const LrRule lin{0.001, LrScaling::Linear, 0, {}};
  const LrRule sq{0.001, LrScaling::Sqrt, 0, {}};
  const LrRule none{0.001, LrScaling::None, 0, {}};
  CHECK(lr_at_batch(lin, 1024, 256) == doctest::Approx(0.004));
  CHECK(lr_at_batch(sq, 1024, 256) == doctest::Approx(0.002));
  CHECK(lr_at_batch(none, 1024, 256) == doctest::Approx(0.001));
}

TEST_CASE("convergence: a learning rate r times the best one costs 1/(2r - r^2) the steps") {
  // The quadratic model: r = 1 is free, 0.5 and 1.5 both cost 4/3, r >= 2 diverges.
  CHECK(*lr_steps_factor(1.0) == doctest::Approx(1.0));
  CHECK(*lr_steps_factor(0.5) == doctest::Approx(4.0 / 3.0));
  CHECK(*lr_steps_factor(1.5) == doctest::Approx(4.0 / 3.0));
  CHECK_FALSE(lr_steps_factor(2.0).has_value());
  CHECK_FALSE(lr_steps_factor(0.0).has_value());
  // At the reference batch every rule gives the best rate.
  for (auto s : {LrScaling::Linear, LrScaling::Sqrt, LrScaling::None})
    CHECK(lr_ratio(s, 5e5, 5e5, 1e6) == doctest::Approx(1.0));
  // ε_opt(B) ∝ B/(B + B_noise): linear scaling keeps r = (B + B_noise)/(B_ref + B_noise),
  // near 1 well below the critical batch (Goyal et al.'s regime) ...
  CHECK(lr_ratio(LrScaling::Linear, 2e3, 1e3, 1e6) == doctest::Approx((1e6 + 2e3) / (1e6 + 1e3)));
  // ... and 2 (divergence) at B = 2·B_ref when there is no gradient noise.
  CHECK(lr_ratio(LrScaling::Linear, 2e6, 1e6, 0) == doctest::Approx(2.0));
  // No scaling: r = (1 + B_noise/B)/(1 + B_noise/B_ref); quadrupling B at B_ref = B_noise gives 5/8.
  CHECK(lr_ratio(LrScaling::None, 4e6, 1e6, 1e6) == doctest::Approx(1.25 / 2.0));
  // Square root: sqrt(4)·(1.25/2) = 1.25.
  CHECK(lr_ratio(LrScaling::Sqrt, 4e6, 1e6, 1e6) == doctest::Approx(1.25));
}

TEST_CASE("convergence: penalties of compression, optimizer and staleness multiply") {
  auto m = model();
  Plan p;
  CHECK(penalties_for(m, p, 1e6, 1e6).total() == 1.0);
  p.compression.method = CompressionMethod::TopK;
  p.compression.error_feedback = false;
  p.optimizer = Optimizer::Adam8bit;
  p.schedule = Schedule::PipeDream;
  p.pp = 4;  // stage 0 is pp - 1 = 3 versions behind
  const auto pen = penalties_for(m, p, 1e6, 1e6);
  CHECK(pen.compression == doctest::Approx(1.5));
  CHECK(pen.optimizer == doctest::Approx(1.2));
  CHECK(pen.staleness == doctest::Approx(1.03));
  CHECK(pen.total() == doctest::Approx(1.5 * 1.2 * 1.03));
  p.schedule = Schedule::PipeDream2BW;  // one version behind
  CHECK(penalties_for(m, p, 1e6, 1e6).staleness == doctest::Approx(1.01));
  // Two factors per version of lag: 0.5 on S_min, 1.0 on E_min; a lag of 2
  // costs factors 2 and 3, so (2B + 3 B_noise)/(B + B_noise) = 2.5 at B = B_noise.
  const Staleness st{0.5, 1.0, "t"};
  CHECK(st.at_lag(2).factor == 2.0);
  CHECK(*st.at_lag(2).noise_factor == 3.0);
  m.staleness_per_step = st;
  p.schedule = Schedule::PipeDream;
  p.pp = 3;
  CHECK(penalties_for(m, p, 1e6, 1e6).staleness == doctest::Approx(2.5));
}

TEST_CASE("convergence: a compression penalty is interpolated in log(parameter) and held at the ends") {
  // Points 1.0 at ratio 0.001 and 2.0 at 0.1: ratio 0.01 is half way in log.
  const auto m = model();
  Compression c;
  c.method = CompressionMethod::TopK;
  c.error_feedback = true;
  c.ratio = 0.01;
  CHECK(compression_penalty(m, c).factor == doctest::Approx(1.5));
  c.ratio = 1e-4;
  CHECK(compression_penalty(m, c).factor == doctest::Approx(1.0));
  c.ratio = 0.5;
  CHECK(compression_penalty(m, c).factor == doctest::Approx(2.0));
  c.method = CompressionMethod::Qsgd;
  c.bits = 2;
  CHECK(compression_penalty(m, c).factor == doctest::Approx(1.1));
  // A method the model has no entry for is bad input naming the file and the rule.
  c.method = CompressionMethod::PowerSgd;
  CHECK(testing::input_error_of([&] { compression_penalty(m, c).factor; }) ==
        "m.json: penalties.compression: no penalty for compression method \"powersgd\"");
  Plan p;
  p.optimizer = Optimizer::Sgd;
  CHECK(testing::input_error_of([&] { penalties_for(m, p, 1e6, 1e6); }) ==
        "m.json: penalties.optimizer: no penalty for optimizer \"sgd\"");
}

TEST_CASE("convergence: a penalty with a noise factor moves from one factor to the other with the batch") {
  // Factor 2 on S_min, 4 on E_min: (2B + 4 B_noise)/(B + B_noise) is 3 at
  // B = B_noise, 2 far above it, 4 far below; without a noise factor, 2 everywhere.
  const Penalty p{2.0, 4.0, "t"};
  CHECK(p.at_batch(1e6, 1e6) == doctest::Approx(3.0));
  CHECK(p.at_batch(1e12, 1e6) == doctest::Approx(2.0).epsilon(1e-5));
  CHECK(p.at_batch(1, 1e6) == doctest::Approx(4.0).epsilon(1e-5));
  CHECK(Penalty{2.0, {}, "t"}.at_batch(1, 1e6) == 2.0);
  // The steps are S_min (factor + noise_factor B_noise/B): 1000 (2 + 4) at B = B_noise.
  auto m = model();
  m.optimizer[Optimizer::Adam8bit] = p;
  Plan plan;
  plan.optimizer = Optimizer::Adam8bit;
  CHECK(estimate_goal(m, {}, {}, 2.0, plan, 125, 8000).steps == 6000);
  // Interpolated between a point with noise factor 3 and one without (2.0): both factors.
  m.compression[0].points[0].penalty.noise_factor = 3.0;
  Compression c;
  c.method = CompressionMethod::TopK;
  c.ratio = 0.01;
  const Penalty q = compression_penalty(m, c);
  CHECK(q.factor == doctest::Approx(1.5));
  CHECK(*q.noise_factor == doctest::Approx(2.5));
}

TEST_CASE("convergence: a biased compressor's penalty multiplies the steps by (1 + bias_factor B_noise/B)") {
  // Factors 2 and 4 give 3 at B = B_noise; a bias factor of 1 (B_c =
  // B_noise) doubles that there (the descent kept is B/(B + B_c) = 1/2),
  // adds 1 % at 100 B_c and 100x at B_c/100.
  const Penalty p{2.0, 4.0, "t", 1.0};
  CHECK(p.at_batch(1e6, 1e6) == doctest::Approx(6.0));
  CHECK(p.at_batch(1e8, 1e6) == doctest::Approx(1.01 * (2e8 + 4e6) / (1e8 + 1e6)));
  CHECK(p.at_batch(1e4, 1e6) == doctest::Approx(101.0 * (2e4 + 4e6) / (1e4 + 1e6)));
}

TEST_CASE("convergence: steps to a target loss and to a token goal") {
  const auto m = model();
  Plan p;
  // Batch 125 sequences of 8000 tokens = B_noise: S = 2·S_min = 2000.
  auto g = estimate_goal(m, {}, {}, 2.0, p, 125, 8000);
  CHECK(g.reachable);
  CHECK(g.steps == 2000);
  CHECK(g.tokens == doctest::Approx(2e9));
  CHECK(g.critical->s_min_steps == 1000);
  // 8-bit Adam's 1.2 multiplies the steps.
  p.optimizer = Optimizer::Adam8bit;
  CHECK(estimate_goal(m, {}, {}, 2.0, p, 125, 8000).steps == 2400);
  // A token goal: 1e10 tokens / 1e6 per step = 10,000 steps, times 1.2.
  CHECK(estimate_goal(m, {}, 1e10, {}, p, 125, 8000).steps == 12000);
  p.optimizer = Optimizer::Adam;
  // Warmup steps are added; at the reference batch the rule costs nothing.
  const LrRule rule{3e-4, LrScaling::Linear, 500, {}};
  g = estimate_goal(m, rule, {}, 2.0, p, 125, 8000);
  CHECK(g.steps == 2500);
  CHECK(*g.lr == doctest::Approx(3e-4));
  // Linear scaling from a reference of 125 to 250 sequences (2e6 tokens):
  // r = (2e6 + 1e6)/(1e6 + 1e6) = 1.5, 4/3 the steps: 1500·4/3 + 500.
  g = estimate_goal(m, LrRule{3e-4, LrScaling::Linear, 500, 125}, {}, 2.0, p, 250, 8000);
  CHECK(g.lr_ratio == doctest::Approx(1.5));
  CHECK(*g.lr == doctest::Approx(6e-4));
  CHECK(g.steps == 2500);
  // To 375 sequences: r = 4e6/2e6 = 2, which never converges.
  g = estimate_goal(m, LrRule{3e-4, LrScaling::Linear, 0, 125}, {}, 2.0, p, 375, 8000);
  CHECK_FALSE(g.reachable);
  CHECK(g.unreachable_reason.find("never converges") != std::string::npos);
}

TEST_CASE("convergence: a parameter server's bounded staleness is priced as weight versions") {
  // 1 % a version (model()): ps_staleness 3 with dp > 1 costs 1.03; a
  // PipeDream pipeline's pp − 1 adds to it; without a server nothing.
  const auto m = model();
  Plan p;
  p.dp = 4;
  p.dp_topology = DpTopology::ParameterServer;
  p.ps_staleness = 3;
  CHECK(penalties_for(m, p, 1e6, 1e6).staleness_steps == 3);
  CHECK(penalties_for(m, p, 1e6, 1e6).staleness == doctest::Approx(1.03));
  p.schedule = Schedule::PipeDream;
  p.pp = 4;
  CHECK(penalties_for(m, p, 1e6, 1e6).staleness_steps == 6);
  p.dp_topology = DpTopology::AllReduce;
  CHECK(penalties_for(m, p, 1e6, 1e6).staleness_steps == 3);
}

TEST_CASE("convergence: a layer-wise adaptive optimizer's reach R takes the rule R times further") {
  // effective r = 1 + (r − 1)/R above the best rate, r below it (a trust
  // ratio clips overshoot, it does not make a small rate larger).
  CHECK(effective_lr_ratio(3.0, 4.0) == doctest::Approx(1.5));
  CHECK(effective_lr_ratio(1.0, 4.0) == doctest::Approx(1.0));
  CHECK(effective_lr_ratio(0.5, 4.0) == doctest::Approx(0.5));
  CHECK(effective_lr_ratio(3.0, 1.0) == doctest::Approx(3.0));
  // Linear scaling from 125 sequences (1e6 tokens = B_noise) to 625 (5e6):
  // r = (5e6 + 1e6)/(1e6 + 1e6) = 3, which Adam never converges at; LAMB
  // with reach 4 acts at 1.5: 1/(3 − 2.25) = 4/3 the steps, S = 1000·(1 + 1/5)·4/3 = 1600.
  auto m = model();
  m.optimizer[Optimizer::Lamb] = {1.0, {}, "t"};
  m.lr_reach[Optimizer::Lamb] = {4.0, "t"};
  Plan p;
  const LrRule rule{3e-4, LrScaling::Linear, 0, 125};
  auto adam = estimate_goal(m, rule, {}, 2.0, p, 625, 8000);
  CHECK(adam.lr_ratio == doctest::Approx(3.0));
  CHECK_FALSE(adam.reachable);
  p.optimizer = Optimizer::Lamb;
  auto lamb = estimate_goal(m, rule, {}, 2.0, p, 625, 8000);
  REQUIRE(lamb.reachable);
  CHECK(lamb.lr_ratio == doctest::Approx(3.0));
  CHECK(lamb.lr_reach == 4.0);
  CHECK(lamb.lr_ratio_effective == doctest::Approx(1.5));
  CHECK(lamb.lr_factor == doctest::Approx(4.0 / 3.0));
  CHECK(lamb.steps == 1600);
  // The largest batch LAMB reaches: r_eff = 2 at r = 1 + R = 5, i.e.
  // B + 1e6 = 5·2e6: B = 9e6 tokens (1,125 sequences); Adam's is r = 2: 3e6.
  CHECK(estimate_goal(m, rule, {}, 2.0, p, 1124, 8000).reachable);
  CHECK_FALSE(estimate_goal(m, rule, {}, 2.0, p, 1125, 8000).reachable);
  // At the reference batch the reach changes nothing.
  CHECK(estimate_goal(m, rule, {}, 2.0, p, 125, 8000).steps == 2000);
  // The bundled model gives LAMB and LARS a sourced reach, Adam none.
  const auto b = bundled_convergence();
  for (Optimizer o : {Optimizer::Lamb, Optimizer::Lars}) {
    REQUIRE(b.lr_reach.count(o) == 1);
    CHECK(b.lr_reach.at(o).value > 1);
    CHECK(b.lr_reach.at(o).source.size() > 10);
  }
  CHECK(b.lr_reach.count(Optimizer::Adam) == 0);
}

TEST_CASE("convergence: S_min and B_noise follow the target loss through the loss scaling") {
  auto m = model();
  // Without loss scaling only the model's own target can be asked for.
  CHECK(testing::input_error_of([&] { critical_batch_at(m, 2.5); }) ==
        "m.json: target_loss: the fit is for a target loss of 2, not 2.5, and has no loss_scaling "
        "to move it (fit one for this target)");
  m.loss_scaling = LossScaling{{1.0, "t"}, {2.0, "t"}, {4.0, "t"}};
  // Twice as far above the floor: S_min / 2^2; loss 1.5x: B_noise / 1.5^4.
  const auto c = critical_batch_at(m, 3.0);
  CHECK(c.s_min_steps == doctest::Approx(1000.0 / 4.0));
  CHECK(c.b_noise_tokens == doctest::Approx(1e6 / std::pow(1.5, 4)));
  CHECK(critical_batch_at(m, 2.0).s_min_steps == 1000);
  CHECK(testing::input_error_of([&] { critical_batch_at(m, 0.9); }) ==
        "m.json: loss_scaling.loss_floor: a target loss of 0.9 is not above the loss floor 1: it "
        "is never reached");
}

TEST_CASE("convergence: the bundled default states a source for every value") {
  const auto m = bundled_convergence();
  CHECK(m.file == "configs/convergence/default.json");
  CHECK(m.s_min_steps.value > 0);
  auto has_source = [](const std::string& s) {
    CHECK_MESSAGE(s.size() > 10, s);
    CHECK(s.rfind("given in", 0) == std::string::npos);
  };
  auto sourced = [&](const Sourced& s) { has_source(s.source); };
  sourced(m.s_min_steps);
  sourced(m.b_noise_tokens);
  REQUIRE(m.loss_scaling);
  sourced(m.loss_scaling->loss_floor);
  has_source(m.staleness_per_step.source);
  for (const auto& p : m.compression)
    for (const auto& pt : p.points) has_source(pt.penalty.source);
  // Every optimizer and every compression method (both error-feedback settings of the sparse ones).
  for (const auto& [o, name] : EnumNames<Optimizer>::table) {
    CHECK_MESSAGE(m.optimizer.count(o) == 1, name);
    if (m.optimizer.count(o)) has_source(m.optimizer.at(o).source);
  }
  Compression c;
  for (const auto& [method, name] : EnumNames<CompressionMethod>::table)
    for (bool ef : {true, false}) {
      c.method = method;
      c.error_feedback = ef;
      CHECK_NOTHROW(compression_penalty(m, c).factor);
    }
}

TEST_CASE("convergence: a file round-trips through convergence_json") {
  auto m = model();
  m.loss_scaling = LossScaling{{1.0, "a"}, {2.0, "b"}, {4.0, "c"}};
  m.lr = LrRule{1e-3, LrScaling::Sqrt, 10, 64};
  m.description = "d";
  const auto back = parse_convergence(convergence_json(m), "m.json");
  CHECK(convergence_json(back) == convergence_json(m));
  CHECK(back.compression.size() == 3);
  CHECK(back.lr->reference_batch == 64);
  CHECK(back.optimizer.at(Optimizer::Adam8bit).factor == 1.2);
}

TEST_CASE("convergence: bad files name the file, the JSON path and the rule") {
  auto err = [](const std::string& text) {
    return testing::input_error_of([&] { parse_convergence(text, "c.json"); });
  };
  const std::string head =
      R"({"target_loss": 2, "S_min_steps": 10, "B_noise_tokens": {"value": 5, "source": "x"}, )";
  const std::string tail = R"("optimizer": {"adam": 1}, "staleness_per_step": 0}})";
  CHECK(err(head + R"("penalties": {"compression": [], )" + tail) == "no error");
  CHECK(err(R"({"target_loss": 2})") == "c.json: S_min_steps: missing required key");
  CHECK(err(head + R"("penalties": {"compression": [{"method": "qsgd", "bits": 4, "error_feedback": true, "factor": 1, "source": "s"}], )" + tail) ==
        "c.json: penalties.compression[0].error_feedback: applies only to methods topk and randomk");
  CHECK(err(head + R"("penalties": {"compression": [{"method": "topk", "error_feedback": true, "bits": 4, "ratio": 0.1, "factor": 1, "source": "s"}], )" + tail) ==
        "c.json: penalties.compression[0].bits: does not apply to method \"topk\"");
  CHECK(err(head + R"("penalties": {"compression": [], "optimizer": {"adma": 1}, "staleness_per_step": 0}})") ==
        "c.json: penalties.optimizer.adma: unknown optimizer (one of " + enum_choices<Optimizer>() + ")");
  CHECK(err(head + R"("penalties": {"compression": [{"method": "powersgd", "rank": 2, "factor": 1, "source": "s"}, {"method": "powersgd", "rank": 2, "factor": 2, "source": "s"}], )" + tail) ==
        "c.json: penalties.compression[1]: a second entry for the same method and parameter");
  CHECK(err(head + R"("penalties": {"compression": [], )" + tail + "x").find("c.json: invalid JSON") == 0);
  CHECK(err(R"({"target_loss": 2, "S_min_steps": {"value": 10}, "B_noise_tokens": 1, "penalties": {}})") ==
        "c.json: S_min_steps.source: missing required key");
}

}  // namespace
}  // namespace strata::strategies
