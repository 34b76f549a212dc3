// Per-layer recompute choices: the fixed policies' patterns, the memory
// model's closed forms over a chunk, and optimal recompute against a brute
// force over every per-layer choice and against the fixed policies.
#include "strategies/layer_recompute.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "strategies/memory.hpp"
#include "strategies/memory_lowering.hpp"
#include "strategies/step_costs.hpp"
#include "strategies/step_layout.hpp"
#include "sim/engine.hpp"

namespace strata::strategies {
namespace {

Keeps keeps_of(const std::string& pattern) {
  Keeps k;
  for (char c : pattern) k.push_back(static_cast<Keep>(std::string("ASIN").find(c)));
  return k;
}

// A small GPT (seq 512, 4 heads of 64) on `cluster`.
Scenario scenario(const std::string& plan, int layers, const std::string& cluster = "\"1xh100-sxm\"",
                  int global = 8) {
  return parse_scenario("{\"model\": {\"layers\": " + std::to_string(layers) +
                            ", \"hidden\": 256, \"heads\": 4, \"seq_len\": 512, \"vocab\": 1000},"
                            " \"cluster\": " + cluster + ", \"batch\": {\"global\": " +
                            std::to_string(global) + "}, \"plan\": " + plan + "}",
                        "t.json");
}

TEST_CASE("fixed policies as per-layer patterns") {
  Plan p;
  const std::vector<std::int64_t> chunks = {5, 4};
  p.recompute = Recompute::None;
  CHECK(keeps_pattern(fixed_keeps(p, chunks)) == "AAAAAAAAA");
  p.recompute = Recompute::Selective;
  CHECK(keeps_pattern(fixed_keeps(p, chunks)) == "SSSSSSSSS");
  p.recompute = Recompute::Full;
  CHECK(keeps_pattern(fixed_keeps(p, chunks)) == "IIIIIIIII");
  // every_k: one input per segment of k, chunk by chunk.
  p.recompute = Recompute::EveryK;
  p.recompute_k = 3;
  CHECK(keeps_pattern(fixed_keeps(p, chunks)) == "INNIN" "INNI");
  // sqrt: ⌈√5⌉ = 3, ⌈√4⌉ = 2.
  p.recompute = Recompute::Sqrt;
  CHECK(keeps_pattern(fixed_keeps(p, chunks)) == "INNIN" "ININ");
  p.recompute = Recompute::Optimal;
  CHECK_THROWS(fixed_keeps(p, chunks));
}

TEST_CASE("segments: a run of Nothing after an Input, rerun before the backward of its last layer") {
  const Keeps k = keeps_of("INNISIA");
  CHECK(segment_start(k, 2) == 0);
  CHECK(segment_start(k, 3) == 3);
  CHECK(segment_end(k, 2));
  CHECK(!segment_end(k, 1));
  CHECK(segment_end(k, 3));  // a one-layer segment: full recompute
  CHECK(!segment_end(k, 4));
  CHECK(segment_end(k, 5));
  CHECK(!segment_end(k, 6));
  CHECK_THROWS(segment_start(keeps_of("AN"), 1));
  const KeepCounts c = count_keeps(k);
  CHECK(c.all == 1);
  CHECK(c.selective == 1);
  CHECK(c.input == 3);
  CHECK(c.nothing == 2);
}

TEST_CASE("a chunk's working set: the largest hold less what later layers kept") {
  // F = 10 (all), S = 6 (selective), I = 1 (input), g = 2 (gradient).
  const ActivationRule r{10, 6, 1, 2};
  CHECK(r.chunk(keeps_of("A")).stored == 10);
  CHECK(r.chunk(keeps_of("A")).working == 2);
  CHECK(r.chunk(keeps_of("S")).working == 10 - 6 + 2);
  CHECK(r.chunk(keeps_of("I")).working == 10 + 2);
  // every_k with k dividing n: the last segment's k layers, 3·10 + 2.
  CHECK(r.chunk(keeps_of("ININNINN")).working == 32);
  CHECK(r.chunk(keeps_of("ININNINN")).stored == 3);
  // I I N N S A: stored 1 + 1 + 6 + 10; the segment 1..3 ends with three
  // layers rerun while S and A still keep theirs: 3·10 + 2 − 16.
  CHECK(r.chunk(keeps_of("IINNSA")).stored == 18);
  CHECK(r.chunk(keeps_of("IINNSA")).working == 16);
  // A short last segment: the longer one before it sets the working set,
  // less the later segment's input: max(3·10 + 2 − 1, 2·10 + 2) — below
  // the k·F + g of segments that divide the chunk.
  CHECK(r.chunk(keeps_of("INNIN")).working == 31);
  CHECK(r.chunk(keeps_of("INNIN")).largest == 1);
  CHECK(r.chunk(keeps_of("INSA")).largest == 10);
  CHECK_THROWS(r.chunk(keeps_of("AN")));
}

// Every valid per-layer choice of one stage (Nothing only after Input or
// Nothing), with its recompute time per microbatch.
void each_choice(std::int64_t n, const std::function<void(const Keeps&)>& fn) {
  Keeps k(static_cast<std::size_t>(n), Keep::All);
  std::function<void(std::int64_t)> rec = [&](std::int64_t i) {
    if (i == n) return fn(k);
    for (Keep x : {Keep::All, Keep::Selective, Keep::Input, Keep::Nothing}) {
      if (x == Keep::Nothing && (i == 0 || (k[static_cast<std::size_t>(i - 1)] != Keep::Input &&
                                            k[static_cast<std::size_t>(i - 1)] != Keep::Nothing)))
        continue;
      k[static_cast<std::size_t>(i)] = x;
      rec(i + 1);
    }
  };
  rec(0);
}

Time recompute_time(std::span<const Keep> keeps, const RecomputeTimes& t) {
  const KeepCounts c = count_keeps(keeps);
  return c.selective * t.core + (c.input + c.nothing) * t.layer;
}

TEST_CASE("optimal recompute: the fastest per-layer choice within the budget (brute force)") {
  // Every choice of every layer of a stage (4^n at most), timed per
  // microbatch and measured by the memory model: at every budget from the
  // least any choice needs to more than keeping everything, the solver's
  // choice fits and is as fast as the fastest that fits. One pipeline stage
  // (pp = 1, n = 7) and two (pp = 2 with 1F1B: two microbatches in flight
  // on the first stage, one on the last).
  std::mt19937 rng(7);
  int compared = 0;
  for (const char* plan : {"{\"recompute\": \"optimal\", \"implementation\": {\"attention\": \"standard\"}}",
                           "{\"recompute\": \"optimal\", \"pp\": 2, \"dp\": 4, \"implementation\": "
                           "{\"attention\": \"standard\"}}"}) {
    const bool pipeline = std::string(plan).find("\"pp\"") != std::string::npos;
    const Scenario sc = pipeline ? scenario(plan, 12, "\"dgx-h100\"", 16) : scenario(plan, 7);
    CAPTURE(plan);
    const MemoryModel mm(sc, {});
    const ActivationRule& r = mm.rule();
    REQUIRE(r.selective < r.full);
    for (const RecomputeTimes t : {RecomputeTimes{1000, 100}, RecomputeTimes{1000, 700},
                                   RecomputeTimes{1000, 990}, RecomputeTimes{1000, 1}}) {
      for (int s = 0; s < static_cast<int>(sc.plan.pp); ++s) {
        const std::size_t first = static_cast<std::size_t>(mm.first_layer(static_cast<std::size_t>(s)));
        const std::int64_t n = mm.chunks()[static_cast<std::size_t>(s)];
        // Every choice's (total, time).
        std::vector<std::pair<Bytes, Time>> all;
        Keeps keeps(static_cast<std::size_t>(sc.model.layers), Keep::All);
        each_choice(n, [&](const Keeps& k) {
          std::copy(k.begin(), k.end(), keeps.begin() + static_cast<std::ptrdiff_t>(first));
          all.push_back({mm.stage(s, mm.blocks(s, keeps)).total, recompute_time(k, t)});
        });
        Bytes lo = std::numeric_limits<Bytes>::max(), hi = 0;
        for (const auto& [b, _] : all) {
          lo = std::min(lo, b);
          hi = std::max(hi, b);
        }
        std::vector<Bytes> budgets = {lo, hi, hi + 1000, lo - 1};
        std::uniform_int_distribution<Bytes> pick(lo, hi);
        for (int i = 0; i < 24; ++i) budgets.push_back(pick(rng));
        for (const Bytes budget : budgets) {
          CAPTURE(s);
          CAPTURE(budget);
          Time best = std::numeric_limits<Time>::max();
          for (const auto& [b, time] : all)
            if (b <= budget) best = std::min(best, time);
          const Keeps got = optimal_keeps(mm, budget, t);
          const std::span<const Keep> mine(got.data() + first, static_cast<std::size_t>(n));
          const Bytes total = mm.stage(s, mm.blocks(s, got)).total;
          CAPTURE(keeps_pattern(mine));
          if (best == std::numeric_limits<Time>::max()) {
            CHECK(total == lo);  // nothing fits: the least memory
          } else {
            CHECK(total <= budget);
            CHECK(recompute_time(mine, t) == best);
          }
          ++compared;
        }
      }
    }
  }
  MESSAGE("budgets compared with the brute force: " << compared);
}

TEST_CASE("optimal recompute: within budget, never slower than a fixed policy that fits") {
  // A 24-layer GPT (standard attention: selective recompute saves the
  // scores) on 8 H100s, one stage (dp 8) and a 1F1B pipeline of four (dp 2).
  // Budgets from full recompute's peak to no recompute's: the optimal plan's
  // peak fits each (by the memory model, which the timeline equals), its step
  // (the layer level) is no slower than any fixed policy whose peak fits; at
  // no recompute's peak it is no recompute, at full recompute's peak on the
  // pipeline (two or more microbatches in flight per stage) it recomputes
  // every layer of full recompute's peak stage, as full recompute does.
  const std::string model =
      "{\"layers\": 24, \"hidden\": 1024, \"heads\": 16, \"seq_len\": 2048, \"vocab\": 51200}";
  for (const std::string par : {"\"pp\": 1, \"dp\": 8", "\"pp\": 4, \"dp\": 2"}) {
    CAPTURE(par);
    const auto make = [&](const std::string& rec) {
      return parse_scenario("{\"model\": " + model +
                                ", \"cluster\": \"dgx-h100\", \"batch\": {\"global\": 16}, \"plan\": {" +
                                par + ", \"implementation\": {\"attention\": \"standard\"}, " + rec + "}}",
                            "t.json");
    };
    struct Fixed {
      Bytes peak;
      Time step;
      int peak_stage;
    };
    std::map<std::string, Fixed> fixed;
    for (const char* rec : {"\"recompute\": \"none\"", "\"recompute\": \"selective\"",
                            "\"recompute\": \"full\"", "\"recompute\": \"sqrt\"",
                            "\"recompute\": \"every_k\", \"recompute_k\": 2",
                            "\"recompute\": \"every_k\", \"recompute_k\": 3"}) {
      const Scenario sc = make(rec);
      const MemoryEstimate est = estimate_memory(sc);
      fixed[rec] = {est.peak_bytes, predict_step(sc).step_time, est.peak_stage};
    }
    const Fixed none = fixed.at("\"recompute\": \"none\""), full = fixed.at("\"recompute\": \"full\"");
    REQUIRE(full.peak < none.peak);
    const int points = 8;
    for (int i = 0; i <= points; ++i) {
      const Bytes budget = full.peak + (none.peak - full.peak) * i / points;
      CAPTURE(budget);
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.17g", static_cast<double>(budget) / static_cast<double>(kGiB));
      const Scenario sc = make(std::string("\"recompute\": \"optimal\", \"memory_budget_GiB\": ") + gib);
      REQUIRE(memory_budget(sc, {}) == budget);
      LoweredStep low;
      sim::RunResult run;
      const StepPrediction step = predict_step(sc, &run, &low);
      const MemoryEstimate est = estimate_memory(sc);
      CHECK(est.keeps == low.keeps);
      CHECK(est.peak_bytes <= budget);
      CHECK(memory_from_run(sc, low, run).peak_bytes == est.peak_bytes);
      Time best = std::numeric_limits<Time>::max();
      for (const auto& [rec, f] : fixed)
        if (f.peak <= budget) best = std::min(best, f.step);
      CHECK(step.step_time <= best);
      CAPTURE(keeps_pattern(low.keeps));
      if (i == points) {
        CHECK(keeps_pattern(low.keeps) == std::string(24, 'A'));
        CHECK(step.step_time == none.step);
      }
      if (i == 0 && sc.plan.pp > 1) {
        // Full recompute's peak stage has no slack left; the others do.
        const std::string stage = keeps_pattern(low.keeps).substr(6 * full.peak_stage, 6);
        CHECK(stage == "IIIIII");
      }
    }
  }
}

}  // namespace
}  // namespace strata::strategies
