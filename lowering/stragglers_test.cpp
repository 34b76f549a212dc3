// Stragglers (cluster.slow, cluster.stragglers) against closed forms.
#include "lowering/stragglers.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "lowering/coarse.hpp"
#include "lowering/unit_costs_testing.hpp"
#include "sim/error.hpp"

namespace strata::strategies {
namespace {

cost::SlowDevice slow_rank(std::int64_t r, double f) { return {.rank = r, .node = -1, .factor = f}; }
cost::SlowDevice slow_node(std::int64_t n, double f) { return {.rank = -1, .node = n, .factor = f}; }

Time step_of(const Scenario& sc, const StepCosts& c) { return predict_step(sc, c).step_time; }

TEST_CASE("stragglers: a stage runs at its slowest GPU's pace, placed by the rank mesh") {
  // 8 GPUs, pp 4, dp 2 under the default order tp-cp-dp-pp: ranks 2s and
  // 2s + 1 hold stage s (rank = dp + 2·pp).
  auto sc = unit_scenario("{\"pp\": 4}");
  CHECK(fixed_stage_slowdown(sc).empty());
  sc.cluster.slow = {slow_rank(5, 1.5), slow_rank(4, 1.25)};
  CHECK(fixed_stage_slowdown(sc) == std::vector<double>{1, 1, 1.5, 1});
  // A slow node slows every GPU on it: here all eight, every stage.
  sc.cluster.slow = {slow_node(0, 2)};
  CHECK(fixed_stage_slowdown(sc) == std::vector<double>{2, 2, 2, 2});
  // With pp outermost reversed (pp innermost), ranks 0–3 are stages 0–3 of replica 0.
  auto inner = unit_scenario("{\"pp\": 4, \"implementation\": {\"rank_order\": \"pp-tp-cp-dp\"}}");
  inner.cluster.slow = {slow_rank(3, 3)};
  CHECK(fixed_stage_slowdown(inner) == std::vector<double>{1, 1, 1, 3});
}

TEST_CASE("stragglers: every GPU twice as slow doubles a step without communication") {
  // GPipe and 1F1B over 4 stages and data parallelism alone: compute and the
  // optimizer step scale by 2 (integer factor: no rounding), nothing else exists.
  for (const char* plan : {"{\"pp\": 4}", "{\"pp\": 4, \"schedule\": \"gpipe\"}", "{}"}) {
    CAPTURE(plan);
    auto sc = unit_scenario(plan);
    UnitCosts c;
    c.optimizer = 700;
    const Time nominal = step_of(sc, c);
    sc.cluster.slow = {slow_node(0, 2)};
    CHECK(step_of(sc, c) == 2 * nominal);
    // The chunk level's merged passes scale the same way.
    CHECK(predict_step_coarse(sc, c).step_time == 2 * nominal);
  }
}

TEST_CASE("stragglers: one slow stage gates the pipeline, communication keeps its time") {
  // 1F1B, p = 4, m = 8, 4 layers a stage: the slow stage alone computes
  // m·f·4·(tf + tb); the step is at least that and at most f times the
  // nominal (1F1B's (m + p − 1)·4·(tf + tb)).
  auto sc = unit_scenario("{\"pp\": 4}");
  UnitCosts c;
  const Time nominal = step_of(sc, c);
  CHECK(nominal == (8 + 4 - 1) * 4 * (c.tf + c.tb));
  sc.cluster.slow = {slow_rank(4, 1.5)};  // stage 2
  const Time slow = step_of(sc, c);
  CHECK(slow >= static_cast<Time>(8 * 1.5 * 4 * (c.tf + c.tb)));
  CHECK(slow <= static_cast<Time>(1.5 * static_cast<double>(nominal)));

  // The program: only stage 2's compute-lane compute tasks change.
  UnitCosts cc;
  cc.p2p_t = 300;
  cc.collective_t = 400;
  auto plain = unit_scenario("{\"pp\": 4}");
  const auto a = build_step_program(plain, cc, Granularity::Layer);
  const auto b = build_step_program(sc, cc, Granularity::Layer);
  REQUIRE(a.tasks.size() == b.tasks.size());
  int changed = 0;
  for (std::size_t i = 0; i < a.tasks.size(); ++i) {
    const auto& t = a.tasks[i];
    const bool slowed = t.stage == 2 && t.lane == sim::Lane::Compute && t.comm == CommKind::None &&
                        t.kind == sim::TaskKind::Compute && t.duration > 0;
    CHECK(b.tasks[i].duration == (slowed ? std::llround(1.5 * static_cast<double>(t.duration)) : t.duration));
    changed += slowed;
  }
  CHECK(changed > 0);
}

TEST_CASE("stragglers: sampled factors on one GPU follow the lognormal's closed forms") {
  // One GPU, no communication: a sample's step is nominal · exp(σZ), so its
  // median is the nominal step and its mean nominal · exp(σ²/2).
  auto sc = parse_scenario(
      "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1000},"
      " \"cluster\": {\"preset\": \"1xa100-80g\", \"stragglers\": {\"rank_sigma\": 0.2, \"samples\": 4000, \"seed\": 7}},"
      " \"batch\": {\"global\": 4}}",
      "t.json");
  UnitCosts c;
  auto p = build_step_program(sc, c, Granularity::Layer);
  const Time before = p.tasks.back().duration;
  const auto st = straggler_distribution(sc, p);
  REQUIRE(st);
  CHECK(p.tasks.back().duration == before);  // the program is given back unchanged
  CHECK(st->samples == 4000);
  CHECK(st->nominal_s == doctest::Approx(to_seconds(step_of(sc, c))));
  // Standard errors: σ/√n ≈ 0.3 % of the mean; the median's ≈ 1.25σ/√n.
  CHECK(st->all.mean_s / st->nominal_s == doctest::Approx(std::exp(0.02)).epsilon(0.012));
  CHECK(st->all.p50_s / st->nominal_s == doctest::Approx(1.0).epsilon(0.012));
  CHECK(st->all.p99_s / st->nominal_s == doctest::Approx(std::exp(0.2 * 2.326)).epsilon(0.03));
  CHECK(st->all.max_s >= st->all.p99_s);
  CHECK_FALSE(st->with_backup);
}

TEST_CASE("stragglers: slow nodes, and backup replicas never wait longer") {
  // Every node slow by 2 with probability 1: every sample is the all-slow step.
  auto sc = unit_scenario("{}");
  sc.cluster.stragglers = cost::StragglerModel{.node_probability = 1, .node_factor = 2, .samples = 20};
  UnitCosts c;
  auto p = build_step_program(sc, c, Granularity::Layer);
  auto st = straggler_distribution(sc, p);
  REQUIRE(st);
  CHECK(st->all.mean_s == doctest::Approx(2 * st->nominal_s));
  CHECK(st->all.p99_s == doctest::Approx(2 * st->nominal_s));
  // Per sample, dropping the slowest replicas can only lower the slowest
  // GPU waited for, so every order statistic is at most the full wait's.
  sc.cluster.stragglers = cost::StragglerModel{.rank_sigma = 0.1, .samples = 300, .backup_replicas = 2};
  st = straggler_distribution(sc, p);
  REQUIRE(st);
  REQUIRE(st->with_backup);
  CHECK(st->with_backup->mean_s < st->all.mean_s);
  CHECK(st->with_backup->p50_s <= st->all.p50_s);
  CHECK(st->with_backup->p99_s <= st->all.p99_s);
  // Eight GPUs wait for the slowest of eight draws: E[max of 8 normals] =
  // 1.4236 σ puts the median step well above the nominal one.
  CHECK(st->all.p50_s / st->nominal_s > std::exp(0.1 * 1.0));
}

TEST_CASE("stragglers: asynchronous replicas each go at their own pace") {
  // Data parallelism over 8 GPUs without communication, one GPU twice as
  // slow (cluster.slow) and no other spread: a synchronous step waits for
  // it (2T); asynchronous replicas deliver 7/T + 1/(2T) global batches' worth
  // of eighths per second, so a global batch takes 8T/7.5.
  auto sc = unit_scenario("{}");
  sc.cluster.slow = {slow_rank(0, 2)};
  sc.cluster.stragglers = cost::StragglerModel{.rank_sigma = 1e-9, .samples = 3};
  UnitCosts c;
  c.optimizer = 500;
  sc.cluster.slow.clear();
  const double t = to_seconds(step_of(sc, c));
  sc.cluster.slow = {slow_rank(0, 2)};
  auto p = build_step_program(sc, c, Granularity::Layer);
  const auto st = straggler_distribution(sc, p);
  REQUIRE(st);
  CHECK(st->all.mean_s == doctest::Approx(2 * t).epsilon(1e-6));
  REQUIRE(st->asynchronous);
  CHECK(st->asynchronous->mean_s == doctest::Approx(8 * t / 7.5).epsilon(1e-6));
  // Never slower than waiting for every replica; one replica has nothing to wait for.
  CHECK(st->asynchronous->max_s <= st->all.p50_s);
  auto one = parse_scenario(
      "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1000},"
      " \"cluster\": {\"preset\": \"1xa100-80g\", \"stragglers\": {\"rank_sigma\": 0.1, \"samples\": 5}},"
      " \"batch\": {\"global\": 4}}",
      "t.json");
  auto q = build_step_program(one, c, Granularity::Layer);
  CHECK_FALSE(straggler_distribution(one, q)->asynchronous);
}

TEST_CASE("stragglers: bad input is refused with its path and rule") {
  const std::string head =
      "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1000},"
      " \"batch\": {\"global\": 8}, \"cluster\": {\"preset\": \"dgx-a100-80g\", ";
  auto refused = [&](const std::string& cluster, const std::string& path) {
    CAPTURE(cluster);
    try {
      (void)parse_scenario(head + cluster + "}}", "t.json");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(e.path() == path);
    }
  };
  refused("\"slow\": [{\"rank\": 8, \"factor\": 2}]", "cluster.slow[0].rank");
  refused("\"slow\": [{\"node\": 1, \"factor\": 2}]", "cluster.slow[0].node");
  refused("\"slow\": [{\"rank\": 1, \"factor\": 0.5}]", "cluster.slow[0].factor");
  refused("\"slow\": [{\"rank\": 1, \"node\": 0, \"factor\": 2}]", "cluster.slow[0]");
  refused("\"slow\": [{\"rank\": 1, \"factor\": 2}, {\"rank\": 1, \"factor\": 3}]", "cluster.slow[1]");
  refused("\"stragglers\": {\"samples\": 10}", "cluster.stragglers");
  refused("\"stragglers\": {\"rank_sigma\": 0.1, \"backup_replicas\": 8}",
          "cluster.stragglers.backup_replicas");
}

}  // namespace
}  // namespace strata::strategies
