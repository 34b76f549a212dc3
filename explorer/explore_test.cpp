#include <doctest/doctest.h>

#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "sim/error.hpp"
#include "explorer/explore.hpp"
#include "lowering/memory_lowering.hpp"
#include "lowering/step_costs.hpp"
#include "strategies/scenario.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {
namespace {

Scenario gpt2(const std::string& space) {
  return parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
                            "batch": {"global": 64, "micro": 1}, "plan": {"optimizer": "adamw"},
                            "space": )" + space + "}",
                        "s.json");
}

// A scorer that needs no simulator: 1 ms per tensor-parallel degree, less
// with larger microbatches.
Score fake_score(const Scenario& sc) {
  Score s;
  s.step.step_time = 1'000'000 * sc.plan.tp + 100'000 / sc.batch.micro;
  return s;
}

TEST_CASE("explore: rejections counted per rule, by hand") {
  // 6 tp × 2 micro = 12 plans on 8 GPUs, 12 heads, global batch 64:
  // tp 3 and 5 leave dp·tp ≠ 8 (gpu-count, 2 × 2 plans); tp 8 does not divide
  // 12 heads (2 plans); micro 3 does not divide 64 / dp (tp 1, 2, 4: 3 plans);
  // 3 plans remain.
  const auto sc = gpt2(R"({"tp": [1, 2, 3, 4, 5, 8], "batch.micro": [1, 3]})");
  ExploreOptions o;
  o.scorer = fake_score;
  const auto r = explore(sc, o);
  CHECK(r.space_size == 12);
  CHECK(r.enumerated == 12);
  CHECK(r.invalid == 9);
  CHECK(r.rejected.at("gpu-count").count == 4);
  CHECK(r.rejected.at("gpu-count").first_index == 4);  // tp 3, micro 1
  CHECK(r.rejected.at("gpu-count").example ==
        "plan: dp·tp·pp·cp = 2·3·1·1 = 6 does not equal the cluster's 8 GPUs (1 nodes × 8)");
  CHECK(r.rejected.at("tp-divides-heads").count == 2);
  CHECK(r.rejected.at("batch-divisible").count == 3);
  CHECK(r.pruned == 0);
  CHECK(r.scored == 3);
  CHECK(r.plans.size() == 3);
}

TEST_CASE("explore: plans that do not fit are pruned before scoring, per pool") {
  // GPT-3 175B on one DGX A100 node: 2.8 TB of Adam state cannot fit in 8 × 80 GB.
  const auto sc = parse_scenario(R"({"model": "gpt3-175b", "cluster": "dgx-a100-80g",
      "batch": {"global": 64}, "plan": {"tp": 8}, "space": {"zero": "auto"}})", "s.json");
  std::atomic<int> calls{0};
  ExploreOptions o;
  o.scorer = [&](const Scenario& s) { ++calls; return fake_score(s); };
  const auto r = explore(sc, o);
  CHECK(r.pruned == 4);
  CHECK(r.pruned_by_pool.at("gpu").count == 4);
  CHECK(r.scored == 0);
  CHECK(calls == 0);
}

TEST_CASE("explore: the analytical memory the explorer prunes with bounds the timeline's, over sampled auto spaces") {
  // Pruning by the analytical estimate may drop only plans the replayed
  // timeline (what simulate reports) would also call out of memory. Every
  // "auto" system axis, sampled at a stride, on two models; GPUs small
  // enough that the fit decides. Without activation offload the analytical
  // required bytes (every tag but the allocator's reserve) bound the
  // timeline's stage by stage. With it they need not: offloaded bytes leave
  // the device when their copy ends, which the analytical count (1 +
  // prefetch depth layers kept) does not time, so a plan the bound lets
  // through is checked again on its timeline after scoring (explore.cpp) —
  // and no plan the timeline fits is pruned either way.
  struct Sweep {
    const char* text;
    std::uint64_t stride;
  };
  const Sweep sweeps[] = {
      {R"({"model": "gpt2-124m", "cluster": {"preset": "dgx-a100-80g", "gpu": {"preset": "a100-80g", "memory_GiB": 6}},
           "batch": {"global": 64}, "plan": {"optimizer": "adamw"}, "space": "auto"})", 37},
      {R"({"model": {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 2048, "vocab": 32000, "mlp": "swiglu",
                     "norm": "rmsnorm", "position_embedding": "rope", "bias": false, "tied_embeddings": false},
           "cluster": {"preset": "dgx-h100", "gpu": {"preset": "h100-sxm", "memory_GiB": 8}},
           "batch": {"global": 32}, "plan": {"optimizer": "adamw"}, "space": "auto"})", 53},
  };
  int checked = 0, fits = 0, offloaded = 0, rechecked = 0;
  for (const auto& sw : sweeps) {
    const Scenario base = parse_scenario(sw.text, "s.json");
    REQUIRE(base.space);
    const Space& space = *base.space;
    const Scorer timeline = simulator_scorer(base);
    const cost::Calibration cal = cost::default_calibration(base.cluster.gpu);
    Scenario pt = base;
    pt.space.reset();
    for (std::uint64_t index = 0; index < space.size(); index += sw.stride) {
      space_point(base, space, index, pt.plan, pt.batch);
      if (first_violation(pt)) continue;
      MemoryEstimate analytic, replayed;
      try {
        analytic = pruning_memory(pt, ModelStepCosts(pt, cal));
        const Score s = timeline(pt);
        REQUIRE(s.memory);
        replayed = *s.memory;
      } catch (const InputError&) {
        continue;  // not modelled (the explorer counts it apart)
      }
      ++checked;
      fits += replayed.feasible();
      INFO("plan ", canonical_json(pt.plan, pt.batch));
      // What the explorer needs: nothing the timeline fits is pruned.
      if (replayed.feasible()) CHECK(analytic.feasible());
      if (pt.plan.offload.activations) {
        ++offloaded;
        rechecked += analytic.feasible() && !replayed.feasible();
        continue;
      }
      REQUIRE(analytic.stages.size() == replayed.stages.size());
      for (std::size_t st = 0; st < analytic.stages.size(); ++st) {
        INFO("stage ", st);
        CHECK(analytic.stages[st].required() >= replayed.stages[st].required());
      }
    }
  }
  MESSAGE(checked, " plans checked, ", fits, " fit by the timeline; ", offloaded, " offload activations, ", rechecked,
          " of them let through by the bound and out of memory on the timeline");
  CHECK(checked >= 100);
  CHECK(fits > 0);
  CHECK(fits < checked);  // the GPUs are small enough that the fit decides
}

TEST_CASE("pareto front: hand-made set") {
  // (time, memory): G(0.5, 20), A(1, 10), B(2, 5), C(2, 5) twin of B, F(4, 1)
  // are on the front; E(1, 12) and H(1, 11) lose to A, D(3, 5) to B.
  auto p = [](std::uint64_t id, double t, Bytes m) { return ScoredPlan{id, t, m, 1 / t}; };
  const std::vector<ScoredPlan> all = {p(1, 1, 10), p(2, 2, 5),  p(3, 2, 5), p(4, 3, 5),
                                       p(5, 1, 12), p(6, 4, 1),  p(7, 0.5, 20), p(8, 1, 11)};
  std::vector<std::uint64_t> ids;
  for (const auto& x : pareto_front(all)) ids.push_back(x.plan_id);
  CHECK(ids == std::vector<std::uint64_t>{7, 1, 2, 3, 6});
  CHECK(pareto_front({}).empty());
  // Top 3 by throughput (1 / time): G, then A, E, H at equal throughput by id.
  ids.clear();
  for (const auto& x : top_plans(all, 3, RankBy::Throughput)) ids.push_back(x.plan_id);
  CHECK(ids == std::vector<std::uint64_t>{7, 1, 5});
  CHECK(top_plans(all, 100, RankBy::Throughput).size() == all.size());
}

TEST_CASE("top and Pareto lists hold one plan per equivalence class") {
  // Class 7: plans 5 and 3 (the same figures, as equivalent plans have);
  // class 2: plan 8 alone; class 0 is no class: plans 9 and 4 stand alone.
  auto p = [](std::uint64_t id, std::uint64_t cls, double t, Bytes m) {
    ScoredPlan x{id, t, m, 1 / t};
    x.class_id = cls;
    return x;
  };
  const std::vector<ScoredPlan> all = {p(5, 7, 1, 10), p(9, 0, 2, 5), p(3, 7, 1, 10), p(4, 0, 2, 5), p(8, 2, 3, 1)};
  // The lowest id of a class stands for it, with the count of the others.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> got;
  for (const auto& x : one_per_class(all)) got.emplace_back(x.plan_id, x.equivalent);
  CHECK(got == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{3, 1}, {4, 0}, {8, 0}, {9, 0}});
  // Top 2 by throughput: class 7 once (plan 3), then 4 before 9 (tie, by id);
  // before, plan 5 would have taken the second place with plan 3's figures.
  std::vector<std::uint64_t> ids;
  for (const auto& x : top_plans(all, 2, RankBy::Throughput)) ids.push_back(x.plan_id);
  CHECK(ids == std::vector<std::uint64_t>{3, 4});
  // The front: (1, 10) once, the two classless (2, 5) ties both, (3, 1).
  ids.clear();
  for (const auto& x : pareto_front(all)) ids.push_back(x.plan_id);
  CHECK(ids == std::vector<std::uint64_t>{3, 4, 9, 8});
  CHECK(pareto_front(all).front().equivalent == 1);
}

TEST_CASE("top plans by time to train: shortest first, never-reached last, ties by id") {
  auto p = [](std::uint64_t id, double tput, double ttt) { return ScoredPlan{id, 1 / tput, 1, tput, ttt}; };
  const double never = std::numeric_limits<double>::infinity();
  const std::vector<ScoredPlan> all = {p(1, 10, 50), p(2, 20, 80), p(3, 5, never), p(4, 8, 50), p(5, 30, 90)};
  std::vector<std::uint64_t> ids;
  for (const auto& x : top_plans(all, 5, RankBy::TimeToTrain)) ids.push_back(x.plan_id);
  CHECK(ids == std::vector<std::uint64_t>{1, 4, 2, 5, 3});
  ids.clear();
  for (const auto& x : top_plans(all, 5, RankBy::Throughput)) ids.push_back(x.plan_id);
  CHECK(ids == std::vector<std::uint64_t>{5, 2, 1, 4, 3});
}

TEST_CASE("explore ranks by time to train when the scenario has a goal") {
  // Batch 32 or 64 sequences of 1024 tokens, 4 s and 5 s a step: 64 has the
  // higher throughput (13,107 against 8,192 tokens/s), but with B_noise =
  // 8192 tokens it needs almost as many steps: S(32) = 1000 · 1.25 = 1250
  // (5000 s), S(64) = 1000 · 1.125 = 1125 (5625 s). Time to train prefers 32.
  auto sc = parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
                            "batch": {"global": 64, "micro": 1}, "plan": {"optimizer": "adamw"},
                            "goal": {"target_loss": 2.5},
                            "convergence": {"S_min_steps": 1000, "B_noise_tokens": 8192, "loss_scaling": null},
                            "space": {"batch.global": [32, 64]}})",
                           "s.json");
  ExploreOptions o;
  o.jobs = 1;
  o.scorer = [](const Scenario& s) {
    Score r;
    r.step.step_time = 1'000'000'000LL * (3 + s.batch.global / 32);
    return r;
  };
  const auto r = explore(sc, o);
  CHECK(r.rank_by == RankBy::TimeToTrain);
  REQUIRE(r.top.size() == 2);
  CHECK(r.top[0].time_to_train_s == doctest::Approx(5000));
  CHECK(r.top[1].time_to_train_s == doctest::Approx(5625));
  o.rank_by = RankBy::Throughput;
  const auto t = explore(sc, o);
  CHECK(t.top[0].plan_id == r.top[1].plan_id);
  CHECK(t.top[1].plan_id == r.top[0].plan_id);
  sc.goal.reset();
  o.rank_by = RankBy::TimeToTrain;
  CHECK_THROWS_AS(explore(sc, o), InputError);
}

TEST_CASE("explore: the result does not depend on the number of jobs") {
  const auto sc = gpt2(R"({"tp": [1, 2, 4, 8], "zero": "auto", "recompute": ["none", "full"],
                           "batch.micro": [1, 2, 4, 8]})");
  ExploreOptions o;
  o.jobs = 1;
  const auto a = explore(sc, o);  // the simulator
  o.jobs = 3;
  const auto b = explore(sc, o);
  CHECK(a.scored == 96);  // tp 8 does not divide 12 heads
  CHECK(a.plans == b.plans);
  CHECK(a.pareto == b.pareto);
  CHECK(a.top == b.top);
  CHECK(a.rejected.at("tp-divides-heads").example == b.rejected.at("tp-divides-heads").example);
  CHECK(b.jobs == 3);
}

TEST_CASE("explore: finished plans are not scored again; shards partition the space") {
  const auto sc = gpt2(R"({"tp": [1, 2, 4], "zero": "auto", "batch.micro": [1, 2]})");
  std::atomic<int> calls{0};
  std::mutex mu;
  std::set<std::uint64_t> sunk;
  ExploreOptions o;
  o.scorer = [&](const Scenario& s) { ++calls; return fake_score(s); };
  o.on_scored = [&](const ScoredOutcome& so) {
    std::lock_guard lock(mu);
    CHECK(so.ranked.plan_id == plan_id(so.point.plan, so.point.batch));
    sunk.insert(so.ranked.plan_id);
  };
  const auto full = explore(sc, o);
  CHECK(full.scored == 24);
  CHECK(calls == 24);
  CHECK(sunk.size() == 24);

  // Resume with 10 plans done: 14 are scored, the result is the same.
  std::unordered_map<std::uint64_t, ScoredPlan> done;
  for (std::size_t i = 0; i < 10; ++i) done[full.plans[i].plan_id] = full.plans[i];
  calls = 0;
  sunk.clear();
  o.finished = &done;
  const auto resumed = explore(sc, o);
  CHECK(calls == 14);
  CHECK(sunk.size() == 14);
  CHECK(resumed.resumed == 10);
  CHECK(resumed.plans == full.plans);
  CHECK(resumed.pareto == full.pareto);

  // Shards 0/2 and 1/2: disjoint, together the whole space.
  o.finished = nullptr;
  o.shard_count = 2;
  o.shard_index = 0;
  const auto s0 = explore(sc, o);
  o.shard_index = 1;
  const auto s1 = explore(sc, o);
  CHECK(s0.enumerated + s1.enumerated == 24);
  std::vector<ScoredPlan> both = s0.plans;
  both.insert(both.end(), s1.plans.begin(), s1.plans.end());
  CHECK(pareto_front(both) == full.pareto);
  CHECK(top_plans(both, 10, RankBy::Throughput) == full.top);
}

TEST_CASE("explore: the goal sweep's rejections (docs/explore.md)") {
  // GPT-3 175B on 1024 A100s, "space": "auto": 322,560 plans. tp 3 and
  // 6 (2 of 6 tp values) never divide 1024 GPUs: 107,520 gpu-count; tp 1 with
  // sequence parallelism (1/6 · 1/2): 26,880 sp-needs-tp.
  const auto sc = load_scenario(STRATA_SOURCE_DIR "/configs/scenarios/gpt3-175b-explore.json");
  ExploreOptions o;
  o.scorer = fake_score;
  const auto r = explore(sc, o);
  CHECK(r.enumerated == 322'560);
  CHECK(r.invalid == 226'560);
  CHECK(r.rejected.at("gpu-count").count == 107'520);
  CHECK(r.rejected.at("sp-needs-tp").count == 26'880);
  CHECK(r.rejected.at("interleaved-microbatches").count == 34'944);
  CHECK(r.rejected.at("chunks-exceed-layers").count == 21'504);
  CHECK(r.rejected.at("batch-divisible").count == 19'584);
  CHECK(r.rejected.at("interleaved-needs-pp").count == 16'128);
  CHECK(r.pruned + r.not_modelled + r.scored == 322'560 - 226'560);
}

TEST_CASE("explore: scorer errors are counted, not fatal") {
  const auto sc = gpt2(R"({"tp": [1, 2, 4]})");
  ExploreOptions o;
  o.scorer = [](const Scenario& s) -> Score {
    if (s.plan.tp == 2) throw InputError("", "plan.recompute", "not modelled yet");
    if (s.plan.tp == 4) throw std::runtime_error("boom");
    return fake_score(s);
  };
  const auto r = explore(sc, o);
  CHECK(r.scored == 1);
  CHECK(r.not_modelled == 1);
  CHECK(r.failed == 1);
  CHECK(r.rejected.at("not-modelled").example == "plan.recompute: not modelled yet");
  CHECK(r.rejected.at("internal-error").example == "boom");
}

TEST_CASE("explore: a scenario without a space is its one plan") {
  const auto sc = parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
                                     "batch": {"global": 64}})", "s.json");
  ExploreOptions o;
  o.scorer = fake_score;
  const auto r = explore(sc, o);
  CHECK(r.space_size == 1);
  CHECK(r.scored == 1);
  CHECK(r.plans[0].plan_id == plan_id(sc.plan, sc.batch));
}

TEST_CASE("equivalence_key: layers kept selectively under recompute modules are not the attention core's") {
  // GPT-2 with standard attention, every layer kept "selectively": under
  // optimal recompute (its selective choice is the attention core's) and
  // plain selective that is one plan; selective with the layernorm module
  // drops and reruns more, so it is another.
  auto scenario = [](const std::string& plan) {
    return parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 64, "micro": 8},
        "plan": {"implementation": {"attention": "standard"}, )" + plan + "}}",
                          "s.json");
  };
  const Scenario core = scenario(R"("recompute": "selective")");
  const Scenario optimal = scenario(R"("recompute": "optimal")");
  const Scenario modules = scenario(R"("recompute": "selective", "recompute_modules": ["core_attn", "layernorm"])");
  LayerPlan all_s;
  all_s.keeps.assign(12, Keep::Selective);
  all_s.swaps.assign(12, Swap::None);
  CHECK(equivalence_key(core, all_s) == equivalence_key(optimal, all_s));
  CHECK(equivalence_key(modules, all_s) != equivalence_key(core, all_s));
  CHECK(equivalence_key(modules, all_s).find("|modules core_attn layernorm") != std::string::npos);
}

TEST_CASE("equivalent plans score alike: one score per equivalence class gives every plan its own figures") {
  // Spaces with every setting equivalence_key drops: recompute none,
  // selective (flash attention: keeps what none keeps) and optimal (which
  // keeps everything where it fits), offload planners, p2p overlap at pp 1,
  // gradient-reduce overlap at dp 1, under ZeRO-3 (each layer reduced as its
  // backward ends) or compression (one exchange after the backward), and parameter-gather overlap without
  // ZeRO or at dp · cp 1. Scored plan by plan, the plans of
  // one class have equal step times and equal memory, stage by stage and tag
  // by tag; scored one per class, the explorer's figures are the same.
  const char* scenarios[] = {
      R"({"model": "gpt3-1.3b", "cluster": "dgx-a100-80g", "batch": {"global": 16, "micro": 1},
          "plan": {"optimizer": "adamw", "precision": "bf16"},
          "space": {"tp": [1, 2, 8], "pp": [1, 2], "cp": [1, 2], "zero": [0, 1, 3], "recompute": ["none", "selective", "optimal", "full"],
                    "offload": ["none", "activations"], "offload.planner": ["all", "priority"],
                    "implementation.overlap_p2p": [false, true],
                    "implementation.overlap_grad_reduce": [false, true],
                    "implementation.overlap_param_gather": [false, true]}})",
      R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 32, "micro": 2},
          "plan": {"optimizer": "adamw", "implementation": {"attention": "standard"}},
          "space": {"tp": [1, 4], "pp": [1, 2, 4], "schedule": ["1f1b", "gpipe"], "recompute": ["none", "selective", "optimal"],
                    "implementation.overlap_p2p": [false, true],
                    "implementation.overlap_grad_reduce": [false, true]}})",
      R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 32, "micro": 2},
          "plan": {"optimizer": "adamw"},
          "space": {"tp": [1, 2], "pp": [1, 2], "zero": [0, 1, 3], "compression.method": ["none", "topk", "powersgd"],
                    "recompute": ["none", "full"], "implementation.overlap_p2p": [false, true],
                    "implementation.overlap_grad_reduce": [false, true]}})",
      // Selective with Megatron-Core's layernorm module beside optimal
      // recompute, whose selective choice is the attention core's: layers
      // kept "selectively" by the two are not alike.
      R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 32, "micro": 8},
          "plan": {"optimizer": "adamw", "recompute": "selective", "recompute_modules": ["core_attn", "layernorm"],
                   "implementation": {"attention": "standard"}},
          "space": {"tp": [1, 2], "pp": [1, 2], "zero": [0, 1, 3], "recompute": ["none", "selective", "optimal"],
                    "implementation.overlap_p2p": [false, true],
                    "implementation.overlap_grad_reduce": [false, true]}})",
  };
  for (const char* text : scenarios) {
    const Scenario sc = parse_scenario(text, "s.json");
    struct Figures {
      Time step;
      Bytes peak;
      std::vector<Bytes> stages;
      sim::TagBytes breakdown;
      bool operator==(const Figures&) const = default;
    };
    std::mutex mu;
    std::map<std::uint64_t, Figures> each;
    std::map<std::uint64_t, std::string> key_of;
    auto record = [&](std::map<std::uint64_t, Figures>& into) {
      return [&](const ScoredOutcome& so) {
        std::vector<Bytes> stages;
        for (const auto& st : so.memory.stages) stages.push_back(st.total);
        std::lock_guard lock(mu);
        into[so.ranked.plan_id] = {so.score.step.step_time, so.memory.peak_bytes, stages, so.memory.breakdown};
        key_of[so.ranked.plan_id] = equivalence_key(so.point, so.memory.layers);
      };
    };
    ExploreOptions o;
    o.jobs = 2;
    o.refine_kept = false;
    o.share_equivalent = false;
    o.on_scored = record(each);
    const ExploreResult alone = explore(sc, o);
    std::map<std::uint64_t, Figures> shared_figures;
    o.share_equivalent = true;
    o.on_scored = record(shared_figures);
    const ExploreResult shared = explore(sc, o);
    REQUIRE(alone.scored > 50);
    CHECK(alone.scored_classes == alone.scored);
    // The classes are real: several plans each, on average.
    CHECK(shared.scored_classes * 2 < shared.scored);
    std::map<std::string, Figures> of_class;
    std::size_t twins = 0;
    for (const auto& [id, f] : each) {
      CAPTURE(key_of.at(id));
      const auto [it, fresh] = of_class.try_emplace(key_of.at(id), f);
      if (!fresh) {
        ++twins;
        CHECK((it->second == f));
      }
    }
    CHECK(twins == shared.scored - shared.scored_classes);
    CHECK(shared.plans == alone.plans);
    CHECK((shared_figures == each));
    // Every scored plan carries its class; the lists hold each class once.
    for (const auto& p : shared.plans) CHECK(p.class_id != 0);
    for (const auto* list : {&shared.top, &shared.pareto}) {
      std::set<std::uint64_t> classes;
      for (const auto& p : *list) CHECK(classes.insert(p.class_id).second);
    }
  }
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

TEST_CASE("explore: the recorded memory of every exact record and every kept plan is simulate's") {
  // GPT-3 1.3B on 8 A100s with activation offload and ZeRO-3 on the axes:
  // the chunk level merges the plain plans exactly and folds the rest; the
  // kept plans are replayed per layer. Every record marked exact, and every
  // kept plan, carries the layer level's timeline memory (what `strata
  // simulate` prints) and step time.
  const auto sc = parse_scenario(R"({"model": "gpt3-1.3b", "cluster": "dgx-a100-80g",
      "batch": {"global": 32, "micro": 1}, "plan": {"optimizer": "adamw", "precision": "bf16"},
      "space": {"tp": [1, 2], "pp": [1, 2], "zero": [1, 3], "offload": ["none", "activations"],
                "recompute": ["none", "full"]}})", "s.json");
  std::mutex mu;
  std::map<std::uint64_t, std::pair<Bytes, Time>> exact, refined;
  std::map<std::uint64_t, Scenario> points;
  ExploreOptions o;
  o.jobs = 2;
  o.top_k = 4;
  o.on_scored = [&](const ScoredOutcome& so) {
    std::lock_guard lock(mu);
    points.emplace(so.ranked.plan_id, so.point);
    if (so.score.exact) exact[so.ranked.plan_id] = {so.memory.peak_bytes, so.score.step.step_time};
  };
  o.on_refined = [&](const ScoredOutcome& so) {
    std::lock_guard lock(mu);
    refined[so.ranked.plan_id] = {so.memory.peak_bytes, so.score.step.step_time};
  };
  const auto r = explore(sc, o);
  REQUIRE(r.scored > 20);
  CHECK(!exact.empty());
  CHECK(exact.size() < points.size());  // some plans were folded
  auto simulated = [&](std::uint64_t id) {
    const Scenario& pt = points.at(id);
    sim::RunResult run;
    LoweredStep low;
    const ModelStepCosts costs(pt);
    const StepPrediction step = predict_step(pt, costs, &run, &low);
    return std::pair<Bytes, Time>{memory_from_run(pt, low, run).peak_bytes, step.step_time};
  };
  for (const auto& [id, figures] : exact) CHECK(figures == simulated(id));
  for (const auto& [id, figures] : refined) CHECK(figures == simulated(id));
  // Every kept plan's figures are exact ones.
  for (const auto* list : {&r.pareto, &r.top})
    for (const auto& p : *list) {
      const auto& from = refined.count(p.plan_id) ? refined : exact;
      REQUIRE(from.count(p.plan_id) == 1);
      CHECK(p.peak_memory_bytes == from.at(p.plan_id).first);
    }
}

TEST_CASE("explore: plans dropped on refinement are counted under their pool") {
  // A refining scorer whose replay finds every tp 2 plan out of GPU memory:
  // those kept plans leave the lists, and the per-pool counts still add up
  // to pruned_by_memory (before, refinement's drops were missing from them,
  // and report refused the directory's own summary).
  const auto sc = parse_scenario(R"({"model": "gpt3-1.3b", "cluster": "dgx-a100-80g",
      "batch": {"global": 32, "micro": 1}, "plan": {"optimizer": "adamw", "precision": "bf16"},
      "space": {"tp": [1, 2], "pp": [1, 2], "recompute": ["none", "full"]}})", "s.json");
  const Scorer coarse = coarse_scorer(sc);
  ExploreOptions o;
  o.jobs = 2;
  o.top_k = 4;
  o.refine = [&](const Scenario& pt) {
    Score s = coarse(pt);
    if (!s.memory) s.memory = estimate_memory(pt);
    if (pt.plan.tp == 2) s.memory->infeasible = Infeasible{"gpu", 100 * kGiB, 80 * kGiB};
    return s;
  };
  const auto r = explore(sc, o);
  std::uint64_t by_pool = 0;
  for (const auto& [pool, rc] : r.pruned_by_pool) by_pool += rc.count;
  CHECK(r.pruned > 0);
  CHECK(r.pruned_by_pool.count("gpu") == 1);
  CHECK(by_pool == r.pruned);
  for (const auto& p : r.plans) CHECK(p.peak_memory_bytes > 0);
  for (const auto* list : {&r.top, &r.pareto})
    for (const auto& p : *list) CHECK(std::find_if(r.plans.begin(), r.plans.end(), [&](const ScoredPlan& q) {
                                        return q.plan_id == p.plan_id;
                                      }) != r.plans.end());
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

TEST_CASE("explore: a layer chain's auto space, scored by the simulator") {
  // ResNet-50 on one DGX A100, global batch 256: "auto" opens tp {1}, no
  // sequence parallelism, recompute none/full/optimal and no fp8, so no
  // plan is rejected for splitting a stage; pp 1, 2, 4 and 8 are searched
  // (18 stages), and every kept plan carries exact figures in samples/s.
  const auto sc = parse_scenario(R"({"model": "resnet50", "cluster": "dgx-a100-80g",
      "batch": {"global": 256}, "plan": {"precision": "bf16"}, "space": "auto"})", "s.json");
  REQUIRE(sc.space);
  CHECK(sc.space->find(Axis::TP)->values.size() == 1);
  CHECK(sc.space->find(Axis::SequenceParallel)->values.size() == 1);
  CHECK(sc.space->find(Axis::Recompute)->values.size() == 3);
  const auto r = explore(sc, ExploreOptions{});
  CHECK(r.rejected.count("chain-parallelism") == 0);
  CHECK(r.rejected.count("chain-recompute") == 0);
  CHECK(r.scored > 100);
  CHECK(sc.space->find(Axis::PP)->values.size() == 4);
  REQUIRE(!r.top.empty());
  CHECK(r.top.front().tokens_per_s_per_gpu > 0);
}

}  // namespace
}  // namespace strata::strategies
