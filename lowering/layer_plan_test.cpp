// Per-layer recompute choices: the fixed policies' patterns, the memory
// model's closed forms over a chunk, and optimal recompute against a brute
// force over every per-layer choice and against the fixed policies.
#include "lowering/layer_plan.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "lowering/memory.hpp"
#include "lowering/memory_lowering.hpp"
#include "lowering/step_costs.hpp"
#include "lowering/step_layout.hpp"
#include "lowering/unit_costs_testing.hpp"
#include "sim/engine.hpp"

namespace strata::strategies {
namespace {

Keeps keeps_of(const std::string& pattern) {
  Keeps k;
  for (char c : pattern) k.push_back(static_cast<Keep>(std::string("ASIN").find(c)));
  return k;
}

// A chunk of `keeps` (ASIN letters) whose layers swap as `swaps` says (-HL
// letters; none when empty).
ActivationRule::Chunk chunk(const ActivationRule& r, const std::string& keeps, std::string swaps = "") {
  if (swaps.empty()) swaps.assign(keeps.size(), '-');
  Swaps sw;
  for (char c : swaps) sw.push_back(static_cast<Swap>(std::string("-HL").find(c)));
  return r.chunk(keeps_of(keeps), sw);
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
  // every_nth (torchtitan's layer-level selective checkpointing, option "2"):
  // each chunk's 2nd, 4th, ... block is recomputed alone, the others keep all.
  p.recompute = Recompute::EveryNth;
  p.recompute_k = 2;
  CHECK(keeps_pattern(fixed_keeps(p, chunks)) == "AIAIA" "AIAI");
  p.recompute_k = 1;
  CHECK(keeps_pattern(fixed_keeps(p, chunks)) == "IIIII" "IIII");
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
  // F = 10 (all), S = 6 (selective), I = 1 (input), g = 2 (gradient), 4
  // of F the inputs of linear layers. A segment's rerun shares its first
  // layer's kept input (ActivationRule::rerun): it holds F − I for that
  // layer, F for the others.
  const ActivationRule r{10, 6, 1, 2, 4};
  CHECK(chunk(r, "A").stored == 10);
  CHECK(chunk(r, "A").working == 2);
  CHECK(chunk(r, "S").working == 10 - 6 + 2);
  CHECK(chunk(r, "I").working == 10 - 1 + 2);
  // every_k with k dividing n: the last segment's k layers, 3·10 − 1 + 2.
  CHECK(chunk(r, "ININNINN").working == 31);
  CHECK(chunk(r, "ININNINN").stored == 3);
  // I I N N S A: stored 1 + 1 + 6 + 10; the segment 1..3 ends with three
  // layers rerun while S and A still keep theirs: 3·10 − 1 + 2 − 16.
  CHECK(chunk(r, "IINNSA").stored == 18);
  CHECK(chunk(r, "IINNSA").working == 15);
  // A short last segment: the longer one before it sets the working set,
  // less the later segment's input: max(3·10 − 1 + 2 − 1, 2·10 − 1 + 2) —
  // below the k·F − I + g of segments that divide the chunk.
  CHECK(chunk(r, "INNIN").working == 30);
  // With partition_activations the rerun gathers a whole input of its own.
  ActivationRule gathered = r;
  gathered.input_shared = false;
  CHECK(chunk(gathered, "I").working == 10 + 2);
  // Swapped: all a layer keeps, or (vDNN) its linear layers' inputs (4 of
  // F = 10 here) where it keeps them (all or selective).
  CHECK(chunk(r, "INNIN", "HHHHH").swapped == 2);
  CHECK(chunk(r, "INNIN", "HHHHH").largest_swapped == 1);
  CHECK(chunk(r, "INSA", "HHHH").swapped == 1 + 6 + 10);
  CHECK(chunk(r, "INSA", "HHHH").largest_swapped == 10);
  CHECK(chunk(r, "INSA", "LLLL").swapped == 4 + 4);
  CHECK(chunk(r, "INSA", "--H-").swapped == 6);
  CHECK_THROWS(chunk(r, "AN"));
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

Time recompute_time(std::span<const Keep> keeps, const UnitCosts& t) {
  const KeepCounts c = count_keeps(keeps);
  return c.selective * t.tc + (c.input + c.nothing) * t.tf;
}

TEST_CASE("optimal recompute: the fastest per-layer choice within the budget (brute force)") {
  // Every choice of every layer of a stage (4^n at most), timed per
  // microbatch and measured by the memory model: at every budget from the
  // least any choice needs to more than keeping everything, the solver's
  // choice fits and is as fast as the fastest that fits. One pipeline stage
  // (pp = 1, n = 7) and two (pp = 2 with 1F1B: two microbatches in flight
  // on the first stage, one on the last); and with every layer's saved
  // bytes offloaded (planner all, which recompute is planned with).
  std::mt19937 rng(7);
  int compared = 0;
  for (const char* plan : {"{\"recompute\": \"optimal\", \"implementation\": {\"attention\": \"standard\"}}",
                           "{\"recompute\": \"optimal\", \"pp\": 2, \"dp\": 4, \"implementation\": "
                           "{\"attention\": \"standard\"}}",
                           "{\"recompute\": \"optimal\", \"pp\": 2, \"dp\": 4, \"implementation\": "
                           "{\"attention\": \"standard\"}, \"offload\": {\"activations\": true}}"}) {
    const bool pipeline = std::string(plan).find("\"pp\"") != std::string::npos;
    const Scenario sc = pipeline ? scenario(plan, 12, "\"dgx-h100\"", 16) : scenario(plan, 7);
    CAPTURE(plan);
    const MemoryModel mm(sc, {});
    const ActivationRule& r = mm.largest_rule();
    REQUIRE(r.selective < r.full);
    for (const Time core : {100, 700, 990, 1}) {
      UnitCosts t;  // a layer's rerun 1000, its attention core `core`
      t.tc = core;
      for (int s = 0; s < static_cast<int>(sc.plan.pp); ++s) {
        const std::size_t first = static_cast<std::size_t>(mm.first_layer(static_cast<std::size_t>(s)));
        const std::int64_t n = mm.chunks()[static_cast<std::size_t>(s)];
        // Every choice's (total, time).
        std::vector<std::pair<Bytes, Time>> all;
        const auto layers = static_cast<std::size_t>(sc.model.layers);
        LayerPlan plan{Keeps(layers, Keep::All),
                       Swaps(layers, sc.plan.offload.activations ? Swap::Saved : Swap::None)};
        each_choice(n, [&](const Keeps& k) {
          std::copy(k.begin(), k.end(), plan.keeps.begin() + static_cast<std::ptrdiff_t>(first));
          all.push_back({mm.stage(s, mm.blocks(s, plan)).required(), recompute_time(k, t)});
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
          Scenario within = sc;
          within.plan.memory_budget_GiB = static_cast<double>(budget) / static_cast<double>(kGiB);
          const MemoryModel at(within, {});
          REQUIRE(memory_budget(within, {}) == budget);
          const LayerPlan got = plan_layers(at, t);
          const std::span<const Keep> mine(got.keeps.data() + first, static_cast<std::size_t>(n));
          const Bytes total = mm.stage(s, mm.blocks(s, got)).required();
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
      CHECK(est.layers == low.layers);
      CHECK(est.required_bytes <= budget);
      CHECK(memory_from_run(sc, low, run).peak_bytes == est.peak_bytes);
      Time best = std::numeric_limits<Time>::max();
      for (const auto& [rec, f] : fixed)
        if (f.peak <= budget) best = std::min(best, f.step);
      CHECK(step.step_time <= best);
      CAPTURE(keeps_pattern(low.layers.keeps));
      if (i == points) {
        CHECK(keeps_pattern(low.layers.keeps) == std::string(24, 'A'));
        CHECK(step.step_time == none.step);
      }
      if (i == 0 && sc.plan.pp > 1) {
        // Full recompute's peak stage has no slack left; the others do.
        const std::string stage = keeps_pattern(low.layers.keeps).substr(6 * full.peak_stage, 6);
        CHECK(stage == "IIIIII");
      }
    }
  }
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

// The activation-offload planners on a 16-layer model over 4 stages (1F1B,
// 16 microbatches) with closed-form costs: forward 1000, backward 2000, a
// copy 1500 either way.
Scenario offloading(const std::string& planner, const std::string& more = "") {
  return unit_scenario("{\"pp\": 4, \"dp\": 2, \"implementation\": {\"attention\": \"standard\"}, "
                       "\"offload\": {\"activations\": true, \"planner\": \"" + planner + "\"}" + more + "}",
                       32);
}

TEST_CASE("offload planners: all moves everything a layer keeps, vdnn its linear layers' inputs") {
  for (const char* rec : {"none", "selective", "full"}) {
    CAPTURE(std::string(rec));
    const std::string r = std::string(", \"recompute\": \"") + rec + "\"";
    const auto all = estimate_memory(offloading("all", r));
    const auto vdnn = estimate_memory(offloading("vdnn", r));
    CHECK(swaps_pattern(all.layers.swaps) == std::string(16, 'H'));
    CHECK(swaps_pattern(vdnn.layers.swaps) == std::string(16, 'L'));
    const MemoryModel mm(offloading("vdnn", r), {});
    const ActivationRule& a = mm.largest_rule();
    REQUIRE(a.linear_inputs > 0);
    REQUIRE(a.linear_inputs < a.selective);
    // Stage 0 holds 4 microbatches of its 4 layers.
    const Bytes kept = a.stored(all.layers.keeps[0]);
    CHECK(all.stages[0].host_activation_bytes == 16 * kept);
    // Full recompute keeps the block's input, no linear layer's.
    CHECK(vdnn.stages[0].host_activation_bytes == (std::string(rec) == "full" ? 0 : 16 * a.linear_inputs));
  }
}

TEST_CASE("offload planners: lifetime moves what hides behind the chunk pass (closed form)") {
  // Chunks of 4 layers. Forward: layer i ends at 1000·(i + 1); copies out
  // run one at a time, 1500 each, and must end by 4000: layer 0 (1000 →
  // 2500) and 1 (2500 → 4000). Backward (prefetch depth 1): layer i's
  // backward starts at 2000·(3 − i); layer 1's prefetch waits for layer 3's
  // backward (2000 → 3500 ≤ 4000), layer 0's for layer 2's (4000 → 5500 ≤
  // 6000).
  UnitCosts c;
  c.copy_t = 1500;
  const Scenario sc = offloading("lifetime");
  const LayerPlan got = plan_layers(sc, c);
  CHECK(swaps_pattern(got.swaps) == "HH--HH--HH--HH--");
  // Their copies never stall the step; offloading every layer does.
  CHECK(predict_step(sc, c).breakdown.offload_stall == 0);
  CHECK(predict_step(offloading("all"), c).breakdown.offload_stall > 0);
  // Copies slower than a layer's backward hide nowhere.
  c.copy_t = 2500;
  CHECK(swaps_pattern(plan_layers(sc, c).swaps) == std::string(16, '-'));
}

TEST_CASE("offload planners: priority moves the layers idle longest until the stage fits") {
  // AutoSwap's score, bytes × idle time: within a chunk the earliest layers
  // wait longest for their backward, so each stage moves a prefix of its
  // layers, the shortest that fits.
  UnitCosts c;
  const Scenario plain = offloading("all", ", \"recompute\": \"none\"");
  Scenario none = plain;
  none.plan.offload.activations = false;
  const double hi = static_cast<double>(estimate_memory(none).peak_bytes);
  const double lo = static_cast<double>(estimate_memory(plain).peak_bytes);
  int moved = 0;
  for (double f : {0.1, 0.4, 0.7, 0.95}) {
    char b[64];
    std::snprintf(b, sizeof b, ", \"memory_budget_GiB\": %.17g", (lo + (hi - lo) * f) / static_cast<double>(kGiB));
    const Scenario sc = offloading("priority", b);
    CAPTURE(f);
    const MemoryModel mm(sc, {});
    const Bytes budget = memory_budget(sc, {});
    const LayerPlan got = plan_layers(mm, c);
    const std::string swaps = swaps_pattern(got.swaps);
    CAPTURE(swaps);
    for (int s = 0; s < 4; ++s) {
      const std::string stage = swaps.substr(static_cast<std::size_t>(4 * s), 4);
      const std::size_t k = stage.find('-');
      CHECK(stage.find('H', k == std::string::npos ? 4 : k) == std::string::npos);  // a prefix
      CHECK(mm.stage(s, mm.blocks(s, got)).required() <= budget);
      if (k > 0 && k != std::string::npos) {
        LayerPlan fewer = got;
        fewer.swaps[static_cast<std::size_t>(4 * s) + k - 1] = Swap::None;
        CHECK(mm.stage(s, mm.blocks(s, fewer)).required() > budget);  // the shortest
      }
      moved += static_cast<int>(k == std::string::npos ? 4 : k);
    }
  }
  CHECK(moved > 0);
}

TEST_CASE("joint planner: never slower than recompute or offload alone at the same budget") {
  // A GPT-3 175B-shaped model (8 layers) on a DGX A100, tp 8 with sequence
  // parallelism: a layer's copies can hide behind its compute. At budgets
  // from the least the joint planner reaches to no recompute's peak, its
  // step (the layer level) is no slower than any pure policy whose peak fits
  // by the memory model: none, selective, full, optimal recompute, and
  // offload by every planner.
  const auto make = [](const std::string& plan) {
    return parse_scenario(
        "{\"model\": {\"preset\": \"gpt3-175b\", \"layers\": 16}, \"cluster\": {\"preset\": "
        "\"dgx-a100-80g\", \"nodes\": 4}, \"batch\": {\"global\": 16}, \"plan\": {\"tp\": 8, \"pp\": 4, "
        "\"dp\": 1, \"sequence_parallel\": true, " +
            plan + "}}",
        "t.json");
  };
  const auto budget = [](double bytes) {
    char b[64];
    std::snprintf(b, sizeof b, "\"memory_budget_GiB\": %.17g", bytes / static_cast<double>(kGiB));
    return std::string(b);
  };
  int mixed = 0, offload_only = 0, recompute_only = 0;
  for (const char* att : {"flash", "standard"}) {
    const std::string impl = std::string("\"implementation\": {\"attention\": \"") + att + "\"}";
    CAPTURE(std::string(att));
    const auto joint_at = [&](double b) {
      return make(impl + ", \"recompute\": \"optimal\", " + budget(b) +
                  ", \"offload\": {\"activations\": true, \"planner\": \"joint\"}");
    };
    const double hi = static_cast<double>(estimate_memory(make(impl)).peak_bytes);
    const double lo = static_cast<double>(estimate_memory(joint_at(1e6)).peak_bytes);
    REQUIRE(lo < hi);
    for (int i = 0; i <= 8; ++i) {
      const double b = lo + (hi - lo) * i / 8;
      CAPTURE(b);
      const Scenario joint = joint_at(b);
      const MemoryEstimate je = estimate_memory(joint);
      CHECK(je.required_bytes <= static_cast<Bytes>(b));
      const Time jt = predict_step(joint).step_time;

      Time best = std::numeric_limits<Time>::max();
      for (const std::string& pure :
           {std::string("\"recompute\": \"none\""), std::string("\"recompute\": \"selective\""),
            std::string("\"recompute\": \"full\""), "\"recompute\": \"optimal\", " + budget(b),
            std::string("\"offload\": {\"activations\": true, \"planner\": \"all\"}"),
            std::string("\"offload\": {\"activations\": true, \"planner\": \"vdnn\"}"),
            std::string("\"offload\": {\"activations\": true, \"planner\": \"lifetime\"}"),
            budget(b) + ", \"offload\": {\"activations\": true, \"planner\": \"priority\"}"}) {
        const Scenario sc = make(impl + ", " + pure);
        if (estimate_memory(sc).peak_bytes > static_cast<Bytes>(b)) continue;
        const Time t = predict_step(sc).step_time;
        CAPTURE(pure);
        CHECK(jt <= t);
        best = std::min(best, t);
      }
      CHECK(best < std::numeric_limits<Time>::max());  // some pure policy fits
      const bool offloads = swaps_pattern(je.layers.swaps) != std::string(16, '-');
      const bool recomputes = count_keeps(je.layers.keeps).all < 16;
      ++(offloads ? (recomputes ? mixed : offload_only) : recompute_only);
    }
  }
  // Which it takes depends on the budget and on whether a layer's copies
  // hide: here it offloads some layers at some budgets and recomputes at others.
  CHECK(offload_only > 0);
  CHECK(recompute_only > 0);
  MESSAGE("joint plans: " << offload_only << " offload only, " << recompute_only
                          << " recompute only, " << mixed << " both");
}

}  // namespace
}  // namespace strata::strategies
