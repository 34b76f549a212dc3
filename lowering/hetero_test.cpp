// Clusters of node groups (cluster.groups) against closed forms: where each
// stage runs, what its work costs there, what memory it has, and how the
// weighed layouts split the blocks.
#include <doctest/doctest.h>

#include <string>

#include "costmodel/calibration.hpp"
#include "lowering/memory.hpp"
#include "lowering/step_costs.hpp"
#include "lowering/step_layout.hpp"
#include "lowering/step_program.hpp"
#include "sim/error.hpp"
#include "strategies/rank_mesh.hpp"
#include "strategies/space.hpp"
#include "strategies/stage_split.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {
namespace {

// Two groups of one node of 8 GPUs each. Both GPUs are named "g" (one chip,
// so one calibration prices both); the second has `slower` times less
// compute and memory bandwidth and `memory` GiB.
std::string two_groups(double slower = 2, double memory = 80) {
  auto gpu = [](double div, double mem) {
    return "{\"name\": \"g\", \"memory_GiB\": " + std::to_string(mem) + ", \"hbm_GBps\": " +
           std::to_string(2000 / div) + ", \"tflops\": {\"bf16\": " + std::to_string(400 / div) + "}}";
  };
  auto group = [](const std::string& name, const std::string& g) {
    return "{\"name\": \"" + name + "\", \"gpu\": " + g +
           ", \"gpus_per_node\": 8, \"intra_node_GBps\": 200, \"inter_node_GBps_per_gpu\": 25,"
           " \"pcie_GBps\": 25, \"host_memory_GiB\": 1024, \"nodes\": 1}";
  };
  return "{\"groups\": [" + group("fast", gpu(1, 80)) + ", " + group("slow", gpu(slower, memory)) + "]}";
}

Scenario scenario(const std::string& cluster, const std::string& plan, int layers = 16) {
  return parse_scenario("{\"model\": {\"layers\": " + std::to_string(layers) +
                            ", \"hidden\": 1024, \"heads\": 8, \"seq_len\": 1024, \"vocab\": 32000},"
                            " \"cluster\": " + cluster + ", \"batch\": {\"global\": 64}, \"plan\": " + plan + "}",
                        "t.json");
}

TEST_CASE("groups: ranks are numbered group by group; each stage sits on the groups of its ranks") {
  const auto sc = scenario(two_groups(), "{\"pp\": 2, \"dp\": 8}");
  const auto& c = sc.cluster;
  REQUIRE(c.heterogeneous());
  CHECK(c.gpus() == 16);
  CHECK(c.nodes == 2);
  CHECK(c.group_of_node(0) == 0);
  CHECK(c.group_of_node(1) == 1);
  // Pipeline outermost (tp-cp-dp-pp): ranks 0–7 are stage 0, on the first node.
  CHECK(stage_groups(sc.plan, c) == std::vector<std::vector<std::size_t>>{{0}, {1}});
  // Pipeline innermost: every stage has a rank on each node.
  const auto inner = scenario(two_groups(), "{\"pp\": 2, \"dp\": 8, \"implementation\": {\"rank_order\": \"pp-tp-cp-dp\"}}");
  CHECK(stage_groups(inner.plan, c) == std::vector<std::vector<std::size_t>>{{0, 1}, {0, 1}});
  CHECK(stage_gpus(c, {0, 1}) == "g (fast) + g (slow)");
  CHECK(c.gpus_text() == "16 GPUs: 8 x g (fast) + 8 x g (slow)");
  // MFU's peak: the mean over the GPUs.
  CHECK(c.mean_peak_tflops(cost::Precision::BF16) == doctest::Approx((400.0 + 200.0) / 2));
}

TEST_CASE("groups: a stage's work is priced on its own GPUs, a mixed stage at the slowest's pace") {
  // Ideal calibration (roofline, no latencies): every op of the half-speed
  // GPU takes twice as long, up to one nanosecond of rounding per op.
  const auto sc = scenario(two_groups(2), "{\"pp\": 2, \"dp\": 8}");
  const ModelStepCosts costs(sc, cost::ideal_calibration());
  const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
  const auto ops = static_cast<Time>(chain.main_block().ops.size());
  for (Pass pass : {Pass::Forward, Pass::Backward}) {
    const Time fast = costs.stage(0).layer(chain.main_block(), pass), slow = costs.stage(1).layer(chain.main_block(), pass);
    CHECK(fast > 0);
    CHECK(std::abs(slow - 2 * fast) <= 2 * ops);
  }
  // The top-level answers are the first group's.
  CHECK(costs.layer(chain.main_block(), Pass::Forward, false) == costs.stage(0).layer(chain.main_block(), Pass::Forward));
  // A stage on both groups runs every op at the slow group's pace.
  const auto inner = scenario(two_groups(2), "{\"pp\": 2, \"dp\": 8, \"implementation\": {\"rank_order\": \"pp-tp-cp-dp\"}}");
  const ModelStepCosts mixed(inner, cost::ideal_calibration());
  CHECK(mixed.stage(0).layer(chain.main_block(), Pass::Forward) == costs.stage(1).layer(chain.main_block(), Pass::Forward));
  CHECK(mixed.stage(0).optimizer_step(1e6, false) == costs.stage(1).optimizer_step(1e6, false));
  // A send between the groups runs at the slower end's link: the second
  // group's network at a fifth of the first's prices both directions.
  std::string slow_net = two_groups(2);
  const auto at = slow_net.rfind("\"inter_node_GBps_per_gpu\": 25");
  REQUIRE(at != std::string::npos);
  slow_net.replace(at, std::string("\"inter_node_GBps_per_gpu\": 25").size(), "\"inter_node_GBps_per_gpu\": 5");
  const auto net = scenario(slow_net, "{\"pp\": 2, \"dp\": 8}");
  const ModelStepCosts nc(net, cost::ideal_calibration());
  REQUIRE(nc.stage(1).p2p(1 << 20).total() > nc.stage(0).p2p(1 << 20).total());
  const StepProgram p = build_step_program(net, nc, Granularity::Layer);
  int sends = 0;
  for (std::size_t i = 0; i < p.tasks.size(); ++i)
    if (p.info[i].op == TaskOp::SendActivation || p.info[i].op == TaskOp::SendGradient) {
      ++sends;
      CHECK(p.tasks[i].duration == nc.stage(1).p2p(StepLayout(net, nc).p2p_bytes(net, 0)).total());
    }
  CHECK(sends == 2 * 8);  // each of 8 microbatches: an activation forward, a gradient back
}

TEST_CASE("groups: the slow stage sets the step; balanced pipelines wait for it") {
  // pp 2 with the second stage at half speed: the step is longer than on two
  // fast groups and shorter than on two slow ones (stage 0 keeps its pace).
  const auto hetero = scenario(two_groups(2), "{\"pp\": 2, \"dp\": 8}");
  const auto fast = scenario(two_groups(1), "{\"pp\": 2, \"dp\": 8}");
  const Time th = predict_step(hetero).step_time, tf = predict_step(fast).step_time;
  CHECK(th > tf);
  CHECK(th < 2 * tf);
  // Stage 1's compute, both passes, is twice stage 0's (to rounding).
  StepPrediction pr = predict_step(hetero);
  CHECK(pr.critical_stage == 1);
}

TEST_CASE("groups: each stage's memory is checked against its own GPU") {
  // The second group's GPU has 2 GiB: stage 1 does not fit there although
  // the peak stage (0, with the embedding) fits its 80 GiB.
  const auto sc = scenario(two_groups(1, 2), "{\"pp\": 2, \"dp\": 8}");
  const MemoryEstimate m = estimate_memory(sc);
  REQUIRE(m.stages.size() == 2);
  CHECK(m.stages[0].capacity == 80 * kGiB);
  CHECK(m.stages[1].capacity == 2 * kGiB);
  REQUIRE(m.stages[1].required() > 2 * kGiB);
  CHECK(m.stages[0].total > m.stages[1].total);
  REQUIRE(m.infeasible);
  CHECK(m.infeasible->pool == "gpu");
  CHECK(m.infeasible->needs == m.stages[1].required());
  CHECK(m.infeasible->has == 2 * kGiB);
  // The recompute planners' budget: the smallest GPU's.
  CHECK(memory_budget(sc, {}) == static_cast<Bytes>(2.0 * kGiB * 0.95));
}

TEST_CASE("weighed layouts: blocks in proportion to the stages' weights, largest remainders first") {
  Plan p;
  p.pp = 2;
  // 40 blocks, weights 2.5 : 1. Each stage first gets one block; the other
  // 38 split 27.14 : 10.86, so 27 + 1 and 10 + 1, and the larger remainder
  // (0.86) takes the last block: 28 and 12.
  CHECK(weighted_chunk_layers(p, 40, {2.5, 1}) == std::vector<std::int64_t>{28, 12});
  // Two virtual chunks a stage: each stage's share halves, chunk k on stage k mod 2.
  p.virtual_stages = 2;
  CHECK(weighted_chunk_layers(p, 40, {2.5, 1}) == std::vector<std::int64_t>{14, 6, 14, 6});
  // Equal weights: 37 spare over 3 stages, 12 each and one left, to stage 0.
  p.pp = 3;
  p.virtual_stages = 1;
  CHECK(weighted_chunk_layers(p, 40, {1, 1, 1}) == std::vector<std::int64_t>{14, 13, 13});
  // A weight far below the others still leaves its stage a block.
  p.pp = 2;
  CHECK(weighted_chunk_layers(p, 8, {1000, 1}) == std::vector<std::int64_t>{7, 1});
  // More chunks than blocks: nothing (validation names the rule).
  p.pp = 4;
  p.virtual_stages = 3;
  CHECK(weighted_chunk_layers(p, 8, {1, 1, 1, 1}).empty());
}

TEST_CASE("weighed layouts resolve where a plan meets its cluster, and write no stage_layers") {
  // The slow group at a quarter of the speed and of the memory: gpu_speed
  // and gpu_memory both weigh 4 : 1 (speed within the efficiency curves'
  // reach: the block's time on the slow GPU is four times, to the curves).
  const auto speed = scenario(two_groups(4, 20), "{\"pp\": 2, \"dp\": 8, \"pipeline_layout\": \"gpu_memory\"}");
  // 16 blocks: 1 + 1 and 14 spare split 11.2 : 2.8 → 12 and 4.
  CHECK(speed.plan.stage_layers == std::vector<std::int64_t>{12, 4});
  CHECK(chunk_layers(speed.plan, 16) == std::vector<std::int64_t>{12, 4});
  const std::string canon = canonical_json(speed.plan, speed.batch);
  CHECK(canon.find("stage_layers") == std::string::npos);
  CHECK(canon.find("\"pipeline_layout\":\"gpu_memory\"") != std::string::npos);
  // A faster stage with more blocks beats the balanced split on this cluster.
  const auto balanced = scenario(two_groups(4, 20), "{\"pp\": 2, \"dp\": 8}");
  const auto weighed = scenario(two_groups(4, 20), "{\"pp\": 2, \"dp\": 8, \"pipeline_layout\": \"gpu_speed\"}");
  CHECK(weighed.plan.stage_layers.front() > weighed.plan.stage_layers.back());
  CHECK(predict_step(weighed).step_time < predict_step(balanced).step_time);
  // "auto" opens the layout on a cluster of groups, with both weighed layouts.
  const auto sp = parse_scenario(
      "{\"model\": {\"layers\": 16, \"hidden\": 1024, \"heads\": 8, \"seq_len\": 1024, \"vocab\": 32000},"
      " \"cluster\": " + two_groups(4, 20) + ", \"batch\": {\"global\": 64}, \"space\": \"auto\"}",
      "t.json");
  const SpaceAxis* layout = sp.space->find(Axis::PipelineLayout);
  REQUIRE(layout);
  CHECK(layout->values.size() == 3);
}

TEST_CASE("weighed layouts on one kind of GPU: every stage weighs the same, the even split") {
  // Nothing to weigh: no block is priced (explore resolves the split for
  // every point), and the split is the balanced one.
  const auto sc = scenario(R"({"preset": "dgx-a100-80g", "nodes": 2})",
                           R"({"pp": 2, "dp": 8, "pipeline_layout": "gpu_speed"})");
  CHECK(stage_weights(sc.plan, sc.batch, sc.model, sc.cluster, nullptr) == std::vector<double>{1.0, 1.0});
  CHECK(sc.plan.stage_layers == std::vector<std::int64_t>{8, 8});
}

TEST_CASE("weighed layouts: explore's points split the blocks for their own pp and layout, not the template's") {
  // The template (pp 2, gpu_speed) resolves to a 4 : 1 split for the plan
  // single-plan commands run; the space's points must not inherit it: at
  // pp 1 there is one stage (no split, none of them refused for a split of
  // the wrong length), balanced keeps the even split, gpu_speed computes its
  // own, which on this cluster is the template's. Before, every point kept
  // the template's 2-entry split: the pp 1 points were refused and the
  // balanced ones ran the weighed split.
  const auto sp = parse_scenario(
      R"({"model": {"layers": 16, "hidden": 1024, "heads": 8, "seq_len": 1024, "vocab": 32000}, "cluster": )" +
          two_groups(4, 20) + R"(, "batch": {"global": 64},
          "plan": {"pp": 2, "dp": 8, "pipeline_layout": "gpu_speed"},
          "space": {"dp": [8, 16], "pp": [1, 2], "pipeline_layout": ["balanced", "gpu_speed"]}})",
      "t.json");
  REQUIRE(sp.space);
  const std::vector<std::int64_t> weighed = sp.plan.stage_layers;
  CHECK(weighed.front() > weighed.back());
  Space space = *sp.space;
  space.gpus = sp.cluster.gpus();
  int points = 0;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    Plan p;
    Batch b;
    space_point(sp, space, i, p, b);
    if (p.gpus() != sp.cluster.gpus()) continue;
    ++points;
    CAPTURE(p.pp);
    CAPTURE(enum_name(p.pipeline_layout));
    if (p.pp == 1)
      CHECK(chunk_layers(p, 16) == std::vector<std::int64_t>{16});
    else if (p.pipeline_layout == PipelineLayout::Balanced)
      CHECK(chunk_layers(p, 16) == std::vector<std::int64_t>{8, 8});
    else
      CHECK(chunk_layers(p, 16) == weighed);
    Scenario point = sp;
    point.plan = p;
    point.batch = b;
    CHECK_FALSE(first_violation(point).has_value());
  }
  CHECK(points == 4);
}

TEST_CASE("groups: bad input names the file, the path and the rule") {
  const std::string head =
      "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1000},"
      " \"batch\": {\"global\": 16}, \"cluster\": ";
  auto refused = [&](const std::string& cluster, const std::string& path) {
    CAPTURE(cluster);
    try {
      (void)parse_scenario(head + cluster + "}", "t.json");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(e.path() == path);
    }
  };
  refused("{\"groups\": [\"dgx-a100-80g\"]}", "cluster.groups");
  refused("{\"groups\": [\"dgx-a100-80g\", \"dgx-h100\"], \"gpus_per_node\": 8}", "cluster.gpus_per_node");
  refused("{\"groups\": [\"dgx-a100-80g\", {\"gpu\": \"v100-32g\"}]}", "cluster.groups[1]");
  refused("{\"groups\": [\"dgx-a100-80g\", {\"preset\": \"dgx-h100\", \"slow\": []}]}", "cluster.groups[1].slow");
  refused("{\"groups\": [\"dgx-a100-80g\", {\"groups\": []}]}", "cluster.groups[1].groups");
  refused("{\"groups\": [\"dgx-a100-80g\", \"dgx-h100\"], \"slow\": [{\"rank\": 16, \"factor\": 2}]}",
          "cluster.slow[0].rank");
  // A well-formed one: two nodes, the plan fills them.
  const auto ok = parse_scenario(head + "{\"groups\": [\"dgx-a100-80g\", \"dgx-h100\"]}}", "t.json");
  CHECK(ok.cluster.gpus() == 16);
  CHECK(ok.plan.dp == 16);
}

}  // namespace
}  // namespace strata::strategies
