#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "sim/error.hpp"
#include "strategies/convergence_fit.hpp"
#include "strategies/convergence_io.hpp"
#include "tests/testing.hpp"

namespace strata::strategies {
namespace {

TEST_CASE("fit-convergence settings: compression, optimizer and learning-rate multiplier") {
  auto s = parse_fit_setting("topk:0.01:noef", "--settings");
  CHECK(s.compression.method == CompressionMethod::TopK);
  CHECK(s.compression.ratio == 0.01);
  CHECK_FALSE(s.compression.error_feedback);
  CHECK(parse_fit_setting("randomk:0.1", "x").compression.error_feedback);
  CHECK(parse_fit_setting("qsgd:4", "x").compression.bits == 4);
  CHECK(parse_fit_setting("powersgd:2", "x").compression.rank == 2);
  CHECK(parse_fit_setting("onebit", "x").compression.method == CompressionMethod::OneBit);
  s = parse_fit_setting("opt:adam8bit@0.5", "x");
  CHECK(*s.optimizer == Optimizer::Adam8bit);
  CHECK(s.lr_multiplier == 0.5);
  CHECK_FALSE(s.baseline());
  CHECK(parse_fit_setting("none", "x").baseline());
  auto err = [](const std::string& t) { return testing::input_error_of([&] { parse_fit_setting(t, "--settings"); }); };
  CHECK(err("topk:2") == "--settings: \"topk:2\": the ratio must be in (0, 1]");
  CHECK(err("qsgd:2.5") == "--settings: \"qsgd:2.5\": bits must be an integer in [1, 16]");
  CHECK(err("opt:adma") == "--settings: \"opt:adma\": unknown optimizer (one of " + enum_choices<Optimizer>() + ")");
  CHECK(err("zip") == "--settings: \"zip\": unknown setting (none, topk, randomk, qsgd, onebit, powersgd, opt or sched)");
  CHECK(*parse_fit_setting("sched:pipedream-2bw", "x").schedule == Schedule::PipeDream2BW);
  CHECK(err("sched:1f1b") == "--settings: \"sched:1f1b\": the schedule must be pipedream or pipedream-2bw (the asynchronous ones)");
  CHECK(err("none@0") == "--settings: \"none@0\": the learning-rate multiplier after @ must be a number > 0");
  CHECK(err("onebit:3").find("expected no parameter") != std::string::npos);
}

TEST_CASE("fit: S(B) = S_min(1 + B_noise/B) recovered from exact steps; penalties; held-out error 0") {
  // S_min 100, B_noise 2000 tokens, sequences of 10 tokens: the baseline at
  // its best rate 0.01 (0.02 takes 1.5x the steps), top-k 1.3x, 8-bit Adam
  // 1.1x, QSGD twice the noise term (factors 1 and 2), a second target loss
  // with S_min 25 and B_noise 1024 (exponents 2 and 3 above the floor 1.5).
  const CriticalBatch at2{100, 2000}, at25{25, 1024};
  FitInput in;
  in.settings = {parse_fit_setting("none", "x"), parse_fit_setting("topk:0.01", "x"),
                 parse_fit_setting("opt:adam8bit", "x"), parse_fit_setting("qsgd:2", "x")};
  in.seq_len = 10;
  in.target_losses = {2.0, 2.5};
  in.loss_floor = 1.5;
  in.held_out = {16, 64};
  in.base = bundled_convergence();
  in.source = "test";
  for (std::int64_t b : {8, 16, 32, 64, 128})
    for (std::uint64_t seed : {1, 2}) {
      const double s2 = steps_at_batch(at2, static_cast<double>(b) * 10);
      const double s25 = steps_at_batch(at25, static_cast<double>(b) * 10);
      in.runs.push_back({"none", b, 0.01, seed, 1000, {s2, s25}});
      in.runs.push_back({"none", b, 0.02, seed, 1000, {1.5 * s2, 1.5 * s25}});
      in.runs.push_back({"topk:0.01", b, 0.01, seed, 1000, {1.3 * s2, {}}});
      in.runs.push_back({"opt:adam8bit", b, 0.01, seed, 1000, {1.1 * s2, {}}});
      // Only more gradient noise: S_min (1 + 2 B_noise/B).
      in.runs.push_back({"qsgd:2", b, 0.01, seed, 1000, {100 * (1 + 2 * 2000 / (static_cast<double>(b) * 10)), {}}});
    }
  CHECK(*best_lr(in, 32) == 0.01);
  const auto out = fit_convergence_model(in);
  CHECK(out.model.s_min_steps.value == doctest::Approx(100));
  CHECK(out.model.b_noise_tokens.value == doctest::Approx(2000));
  CHECK(out.model.target_loss == 2.0);
  REQUIRE(out.model.loss_scaling);
  CHECK(out.model.loss_scaling->s_min_exponent.value == doctest::Approx(2.0));
  CHECK(out.model.loss_scaling->b_noise_exponent.value == doctest::Approx(3.0));
  CHECK(out.model.optimizer.at(Optimizer::Adam8bit).factor == doctest::Approx(1.1));
  CHECK(out.model.optimizer.at(Optimizer::Adam).factor == 1.0);
  Compression c;
  c.method = CompressionMethod::TopK;
  c.ratio = 0.01;
  CHECK(compression_penalty(out.model, c).factor == doctest::Approx(1.3));
  // The measured top-k point replaced the default's (ratio 0.001), so other ratios hold 1.3.
  c.ratio = 0.001;
  CHECK(compression_penalty(out.model, c).factor == doctest::Approx(1.3));
  // Entries that were not measured keep the default's value and source.
  c.method = CompressionMethod::PowerSgd;
  c.rank = 2;
  CHECK(compression_penalty(out.model, c).factor == compression_penalty(in.base, c).factor);
  c.method = CompressionMethod::Qsgd;
  c.bits = 2;
  CHECK(compression_penalty(out.model, c).factor == doctest::Approx(1.0));
  CHECK(*compression_penalty(out.model, c).noise_factor == doctest::Approx(2.0));
  CHECK(out.penalties.size() == 3);
  CHECK(out.points.size() == 20);
  CHECK(*out.held_out_max_error == doctest::Approx(0).epsilon(1e-3));
  for (const auto& p : out.points) {
    CHECK(p.held_out == (p.batch == 16 || p.batch == 64));
    CHECK(p.runs == 2);
    CHECK(p.lr == 0.01);
  }
  CHECK(out.model.s_min_steps.source.find("batches 8, 32, 128 sequences") != std::string::npos);
  // What it writes reads back.
  CHECK_NOTHROW(parse_convergence(convergence_json(out.model), "fit.json"));
}

TEST_CASE("fit: a biased compressor's three parameters recovered from exact steps") {
  // Steps made by S_min (f₁ + f₂ B_noise/B)(1 + b B_noise/B) with S_min
  // 100, B_noise 1000 tokens, f₁ 1.5, f₂ 2, b = 2^(3/8) (on the fit's
  // grid): the fit finds all three; steps without the bias term give b 0.
  const CriticalBatch c{100, 1000};
  const double bf = std::exp2(3.0 / 8.0), bc = 1000 * bf;
  std::vector<StepsAtBatch> pts;
  for (double b : {100.0, 400.0, 1600.0, 6400.0})
    pts.push_back({b, 100 * (1.5 + 2 * 1000 / b) * (1 + bc / b)});
  const Penalty p = fit_biased_penalty(pts, c);
  REQUIRE(p.noise_factor);
  REQUIRE(p.bias_factor);
  CHECK(p.factor == doctest::Approx(1.5));
  CHECK(*p.noise_factor == doctest::Approx(2.0));
  CHECK(*p.bias_factor == doctest::Approx(bf));
  for (auto& q : pts) q.steps = 100 * (1.5 + 2 * 1000 / q.batch_tokens);
  const Penalty z = fit_biased_penalty(pts, c);
  CHECK(*z.bias_factor == 0.0);
  CHECK(z.factor == doctest::Approx(1.5));
  // Two batches cannot fit three parameters: the two factors alone.
  pts.resize(2);
  CHECK_FALSE(fit_biased_penalty(pts, c).bias_factor);
}

TEST_CASE("fit: noisy steps, a setting that never reaches the target, too few batches") {
  // Relative least squares: ±10 % noise on alternating batches leaves S_min
  // and B_noise within a few per cent.
  std::vector<StepsAtBatch> pts;
  const CriticalBatch c{50, 4096};
  int i = 0;
  for (double b : {512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0})
    pts.push_back({b, steps_at_batch(c, b) * (i++ % 2 ? 1.1 : 0.9)});
  const auto f = fit_critical_batch(pts);
  CHECK(f.s_min_steps == doctest::Approx(50).epsilon(0.12));
  CHECK(f.b_noise_tokens == doctest::Approx(4096).epsilon(0.12));
  CHECK(fit_penalty({{1000, 30}, {2000, 40}}, {10, 1000}) == doctest::Approx(std::sqrt(1.5 * 40.0 / 15)));
  CHECK_THROWS_AS(fit_critical_batch({{1000, 10}, {1000, 12}}), Error);
  // Steps that fall faster than 1/B (20, then 5 at twice the batch) fit no positive S_min.
  CHECK_THROWS_AS(fit_critical_batch({{1000, 20}, {2000, 5}}), Error);

  FitInput in;
  in.settings = {parse_fit_setting("none", "x"), parse_fit_setting("randomk:0.01:noef", "x")};
  in.seq_len = 1;
  in.target_losses = {2.0};
  in.base = bundled_convergence();
  for (std::int64_t b : {8, 16, 32}) {
    in.runs.push_back({"none", b, 0.01, 1, 100, {steps_at_batch(c, static_cast<double>(b))}});
    in.runs.push_back({"randomk:0.01:noef", b, 0.01, 1, 100, {std::nullopt}});
  }
  const auto out = fit_convergence_model(in);
  REQUIRE(out.notes.size() == 1);
  CHECK(out.notes[0].find("randomk:0.01:noef: no batch") == 0);
  CHECK_FALSE(out.held_out_max_error.has_value());
}

}  // namespace
}  // namespace strata::strategies
