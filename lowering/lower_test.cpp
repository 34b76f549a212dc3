// Step-time lowering checked with closed-form costs: layers take fixed
// times, communication is free unless a test prices it.
#include "lowering/lower.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <vector>

#include "lowering/coarse.hpp"
#include "lowering/step_costs.hpp"
#include "lowering/step_program.hpp"
#include "lowering/unit_costs_testing.hpp"

namespace strata::strategies {
namespace {

// Tasks of a layer-granularity program whose description satisfies `pred`.
template <class Pred>
int count_tasks(const StepProgram& p, Pred pred) {
  int n = 0;
  for (const TaskInfo& i : p.info) n += pred(i) ? 1 : 0;
  return n;
}

Scenario scenario(const std::string& plan, int global = 16, int hidden = 256) {
  return unit_scenario(plan, global, hidden);
}

TEST_CASE("1F1B and GPipe: step (m + p − 1)·(tf + tb) per stage, bubble (p − 1)/(m + p − 1)") {
  // 16 layers over p = 4 stages (4 each), m = 8 microbatches (dp 2), free comm.
  for (const char* sched : {"1f1b", "gpipe"}) {
    CAPTURE(sched);
    const auto sc = scenario(std::string("{\"pp\": 4, \"schedule\": \"") + sched + "\"}");
    const UnitCosts c;
    const auto pr = predict_step(sc, c);
    const Time per_mb = 4 * (c.tf + c.tb);
    CHECK(pr.step_time == (8 + 4 - 1) * per_mb);
    CHECK(pr.bubble_fraction == doctest::Approx(3.0 / 11.0));
    CHECK(pr.breakdown.compute == 8 * per_mb);
    CHECK(pr.breakdown.total() == pr.step_time);
    CHECK(pr.pipeline_fill == 0);
  }
}

TEST_CASE("PipeDream and 2BW without flushes: step m·(tf + tb) per stage, the fill once per run") {
  // The same pipeline: steps follow one another through a full pipeline,
  // so the (p − 1)·(tf + tb) of fill and drain is paid once per run, not
  // per step: throughput (m + p − 1)/m = 11/8 of 1F1B's (Narayanan et al.
  // 2019 Sec. 3.2; 2021 Sec. 3.1).
  const UnitCosts c;
  const Time per_mb = 4 * (c.tf + c.tb);
  const auto flushed = predict_step(scenario(R"({"pp": 4, "schedule": "1f1b"})"), c);
  for (const char* sched : {"pipedream", "pipedream-2bw"}) {
    CAPTURE(sched);
    const auto sc = scenario(std::string("{\"pp\": 4, \"schedule\": \"") + sched + "\"}");
    const auto pr = predict_step(sc, c, nullptr, nullptr);
    CHECK(pr.step_time == 8 * per_mb);
    CHECK(pr.pipeline_fill == 3 * per_mb);
    CHECK(pr.bubble_fraction == 0);
    CHECK(pr.breakdown.compute == 8 * per_mb);
    CHECK(pr.breakdown.total() == pr.step_time);
    CHECK(static_cast<double>(flushed.step_time) / static_cast<double>(pr.step_time) ==
          doctest::Approx(11.0 / 8.0));
    // Strata's executors flush between steps: their prediction keeps it.
    Scenario executed = sc;
    executed.executed = true;
    CHECK(predict_step(executed, c).step_time == 11 * per_mb);
  }
}

// UnitCosts whose dense blocks (kind 1: a MoE model's first blocks) take
// three times as long as its expert blocks (kind 0).
struct KindCosts : UnitCosts {
  Time layer(const cost::Layer& l, Pass pass, bool core) const override {
    return (l.kind == cost::LayerKind::Block && l.block_kind == 1 ? 3 : 1) * UnitCosts::layer(l, pass, core);
  }
};

TEST_CASE("blocks of two kinds: each layer priced as its own kind, the slowest stage sets the pace") {
  // 16 layers, the first 4 dense (three times the time of an expert
  // block), over p = 4 stages of 4 layers under GPipe, m = 8 microbatches
  // (dp 2), free communication: stage 0 holds the dense blocks and is the
  // bottleneck both ways.
  const auto sc = parse_scenario(
      R"({"model": {"layers": 16, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000,
                    "moe": {"experts": 4, "top_k": 2, "first_dense": 4}},
          "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 16},
          "plan": {"pp": 4, "schedule": "gpipe"}})",
      "t.json");
  const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
  REQUIRE(chain.kinds.size() == 2);
  for (std::int64_t l = 0; l < 16; ++l) CHECK(chain.kind_of[static_cast<std::size_t>(l)] == (l < 4 ? 1 : 0));
  const KindCosts c;
  const Time expert = 4 * (c.tf + c.tb), dense = 3 * expert;
  const auto pr = predict_step(sc, c);
  CHECK(pr.per_stage[0].compute == 8 * dense);
  for (int s = 1; s < 4; ++s) CHECK(pr.per_stage[static_cast<std::size_t>(s)].compute == 8 * expert);
  // Forwards: stage 0 ends one every fwd_d and each faster stage passes it
  // on at once, so the last reaches the end of stage 3 at 8·fwd_d +
  // 3·fwd_e. Backwards: stage 3's first ends bwd_e later and reaches stage
  // 0 after two more expert stages; there they queue, bwd_d each.
  const Time fwd_d = dense / 3, bwd_d = 2 * dense / 3, fwd_e = expert / 3, bwd_e = 2 * expert / 3;
  CHECK(pr.step_time == 8 * fwd_d + 3 * fwd_e + 3 * bwd_e + 8 * bwd_d);
  // The chunk level builds the same program.
  CHECK(predict_step_coarse(sc, c).step_time == pr.step_time);
}

TEST_CASE("partition_activations: each recomputed segment's input is all-gathered over tp before it reruns") {
  // 16 layers, tp 2 (dp 4, m = 4 microbatches), full recompute: every layer
  // is a segment of one, so each microbatch's backward gathers 16 inputs
  // on the compute stream, one collective each (collective_t): the step
  // grows by 16·4·collective_t; the gradient all-reduce after the backward
  // moves with it. The chunk level prices the same.
  UnitCosts c;
  c.collective_t = 700;
  const auto plain = scenario(R"({"tp": 2, "recompute": "full"})");
  const auto split = scenario(R"({"tp": 2, "recompute": "full", "partition_activations": true})");
  const Time before = predict_step(plain, c).step_time, after = predict_step(split, c).step_time;
  CHECK(after - before == 16 * 4 * c.collective_t);
  CHECK(predict_step_coarse(split, c).step_time == after);
  // Every gather is a blocking tp task of the recompute pass.
  CHECK(count_tasks(build_step_program(split, c, Granularity::Layer),
                    [](const TaskInfo& i) { return i.op == TaskOp::InputGather; }) == 16 * 4);
}

TEST_CASE("multi-token prediction: the head's module blocks block on their expert all-to-alls, as the blocks do") {
  // A MoE model with one MTP module (DeepSeek-V3's), ep 2, m = 8 (dp 8 on
  // one node, micro 1, global 64): after each head forward and backward,
  // one blocking ep task of the module's block (UnitCosts::ep), so the step
  // grows by 2·m·ep over the same model without the module (whose head the
  // unit costs price at 0 either way); the chunk level prices the same.
  UnitCosts c;
  c.ep = 300;
  auto with = [](int mtp) {
    return parse_scenario(
        R"({"model": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000,
                      "moe": {"experts": 4, "top_k": 2}, "mtp_layers": )" +
            std::to_string(mtp) + R"(},
            "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 64},
            "plan": {"ep": 2}})",
        "t.json");
  };
  const Scenario none = with(0), one = with(1);
  const Time before = predict_step(none, c).step_time, after = predict_step(one, c).step_time;
  CHECK(after - before == 2 * 8 * c.ep);
  CHECK(predict_step_coarse(one, c).step_time == after);
  CHECK(count_tasks(build_step_program(one, c, Granularity::Layer), [](const TaskInfo& i) {
          return i.op == TaskOp::LayerComm && i.part == Part::Head;
        }) == 2 * 8);
}

TEST_CASE("interleaved: bubble (p − 1)/(v·m + p − 1)") {
  // p = 4, v = 2, m = 8: the bubble shrinks by v (Megatron Sec 2.2.2).
  const auto sc = scenario("{\"pp\": 4, \"schedule\": \"interleaved\", \"virtual_stages\": 2}");
  const UnitCosts c;
  const auto pr = predict_step(sc, c);
  const Time per_mb = 4 * (c.tf + c.tb);
  CHECK(pr.step_time == 8 * per_mb + 3 * per_mb / 2);
  CHECK(pr.bubble_fraction == doctest::Approx(3.0 / (2 * 8 + 3)));
  CHECK(pr.breakdown.total() == pr.step_time);
}

TEST_CASE("full recompute adds one forward per layer; selective adds the attention core") {
  const UnitCosts c;
  const auto none = predict_step(scenario("{\"pp\": 4}"), c);
  const auto full = predict_step(scenario("{\"pp\": 4, \"recompute\": \"full\"}"), c);
  CHECK(full.step_time == none.step_time / (c.tf + c.tb) * (2 * c.tf + c.tb));
  CHECK(full.breakdown.recompute == 8 * 4 * c.tf);
  // Selective needs a kernel that saved the core: standard attention.
  const auto sel = predict_step(
      scenario("{\"pp\": 4, \"recompute\": \"selective\", \"implementation\": {\"attention\": \"standard\"}}"), c);
  CHECK(sel.step_time == none.step_time / (c.tf + c.tb) * (c.tf + c.tb + c.tc));
  // With flash attention there is nothing to recompute.
  CHECK(predict_step(scenario("{\"pp\": 4, \"recompute\": \"selective\"}"), c).step_time ==
        none.step_time);
  // Hardware FLOPs add one forward of every block with full recompute.
  CHECK(full.hardware_flops_per_step > full.model_flops_per_step);
  CHECK(none.hardware_flops_per_step == none.model_flops_per_step);
}

TEST_CASE("the CPU kernels rerun a recomputed segment's last layer without its tail") {
  // pp 4, 16 layers: full recompute reruns each layer once per microbatch
  // (`reruns` on the busiest stage, counted from the whole forward). The CPU
  // kernels (kernel_memory Cpu) refill a segment's last layer's saved
  // tensors and make no output, so that rerun skips layer_tail (300 ns of
  // the 1 µs forward); with full recompute every layer ends its segment,
  // with every_k 2 every second layer does. Any other executor reruns the
  // whole forward.
  struct TailCosts : UnitCosts {
    Time layer_tail(const cost::Layer& l) const override { return l.kind == cost::LayerKind::Block ? 300 : 0; }
  } c;
  auto recompute = [&](const std::string& plan, bool cpu) {
    auto sc = scenario(plan);
    if (cpu) sc.kernel_memory = KernelMemory::Cpu;
    return predict_step(sc, c).breakdown.recompute;
  };
  const std::string full = "{\"pp\": 4, \"recompute\": \"full\"}";
  const Time reruns = recompute(full, false) / c.tf;  // layer reruns on the busiest stage
  CHECK(reruns > 0);
  CHECK(recompute(full, true) == reruns * (c.tf - 300));
  const std::string every2 = "{\"pp\": 4, \"recompute\": \"every_k\", \"recompute_k\": 2}";
  CHECK(recompute(every2, false) == reruns * c.tf);
  CHECK(recompute(every2, true) == reruns * c.tf - reruns / 2 * 300);
}

TEST_CASE("tensor-parallel communication blocks the compute stream") {
  // tp 2 with 50 ns per layer and pass: forward and backward each grow by it.
  UnitCosts c;
  c.tp = 50;
  const auto pr = predict_step(scenario("{\"tp\": 2}", 8), c);  // dp 4, m 2
  CHECK(pr.step_time == 2 * 16 * (c.tf + c.tb + 2 * c.tp));
  CHECK(pr.breakdown.exposed_comm[static_cast<std::size_t>(CommKind::TP)] == 2 * 16 * 2 * c.tp);
}

TEST_CASE("data-parallel reduction hides behind backward when overlapped") {
  // dp 8, one stage, 16 layers of 100 MB of gradients: one 25 MiB+ bucket
  // per layer, each all-reduce 1 µs. Overlapped, only the last bucket (the
  // first layer's) is exposed; not overlapped, all 16 are.
  UnitCosts c;
  c.collective_t = 1000;
  const auto on = predict_step(scenario("{}", 8, 2048), c);
  const auto off =
      predict_step(scenario("{\"implementation\": {\"overlap_grad_reduce\": false}}", 8, 2048), c);
  const Time compute = 16 * (c.tf + c.tb);
  CHECK(on.step_time == compute + 2 * c.collective_t);  // the first layer's and the embedding's buckets
  CHECK(off.step_time == compute + 18 * c.collective_t);  // + head and embedding buckets
  CHECK(off.breakdown.exposed_comm[static_cast<std::size_t>(CommKind::DP)] == off.step_time - compute);
  CHECK(on.breakdown.total() == on.step_time);
}

TEST_CASE("ZeRO-3 parameter prefetch: with overlap_param_gather the gathers hide behind compute, without it each is exposed") {
  // dp 8, one stage, m 2, 16 layers; every collective 300 ns, shorter than
  // a layer's forward (1 µs) and backward (2 µs). Without prefetch a layer's
  // all-gather starts only when the layer before has finished, so each of
  // the 2 m 16 = 64 gathers (forward and backward) adds its 300 ns to the
  // compute lane: at least 16 m (tf + tb) + 64 · 300. With prefetch (depth
  // 1) the next layer's gather runs during this layer's compute, in the
  // backward too (issued before this layer's reduce-scatter), so only
  // collectives at a microbatch's boundaries show: at most 5 per
  // microbatch (its first forward gathers — the embedding's, then the first
  // layer's — the reduce-scatter queued ahead of them, the output layer's
  // gathers, which nothing hides where the head computes in no time, as
  // here), 10 for m 2. Without prefetch the embedding's and the head's 4
  // gathers per microbatch are exposed too.
  UnitCosts c;
  c.collective_t = 300;
  const auto on = predict_step(scenario("{\"zero\": 3}", 16, 2048), c);
  const auto off = predict_step(
      scenario("{\"zero\": 3, \"implementation\": {\"overlap_param_gather\": false}}", 16, 2048), c);
  const Time compute = 2 * 16 * (c.tf + c.tb);
  const auto dp = static_cast<std::size_t>(CommKind::DP);
  CHECK(off.step_time >= compute + 72 * c.collective_t);
  CHECK(off.breakdown.exposed_comm[dp] >= 72 * c.collective_t);
  CHECK(on.breakdown.exposed_comm[dp] <= 10 * c.collective_t);
  CHECK(on.step_time <= compute + 10 * c.collective_t);
}

TEST_CASE("ZeRO-3 gathers per module (DeepSpeed): one collective per module holding parameters, small tensors kept whole") {
  // The same ZeRO-3 plan on serial ranks, where the step is the sum of its
  // tasks, with every collective 300 ns. Per layer (FSDP) a layer's gather is
  // one collective; per module (zero3_gather_per_module) it is one per
  // module with parameters: the two norms and the QKV, projection, MLP-up
  // and MLP-down linears (each weight with its bias), 6 collectives. With a
  // persistence threshold of 100,000 elements the norms' 2·2048 and the
  // biases stay whole on every rank: only the 4 weight matrices
  // (2048 x 6144 and larger) are gathered. The step has 2 m 16 = 64 layer
  // gathers, so it grows by 64 · 5 · 300 and 64 · 3 · 300 ns.
  UnitCosts c;
  c.collective_t = 300;
  auto serial_sum = [&](const std::string& im) {
    Scenario sc = scenario("{\"zero\": 3, \"implementation\": {" + im + "}}", 16, 2048);
    sc.serial_ranks = true;
    return predict_step(sc, c).step_time;
  };
  const Time layer = serial_sum("");
  CHECK(serial_sum("\"zero3_gather_per_module\": true") - layer == 64 * 5 * 300);
  CHECK(serial_sum("\"zero3_gather_per_module\": true, \"zero3_persistence_threshold\": 100000") - layer ==
        64 * 3 * 300);
  // The threshold alone changes nothing: a whole layer is one tensor set.
  CHECK(serial_sum("\"zero3_persistence_threshold\": 100000") == layer);
  // Strata's executors gather by layer.
  Scenario ex = scenario("{\"zero\": 3, \"implementation\": {\"zero3_gather_per_module\": true}}", 16, 2048);
  ex.serial_ranks = true;
  ex.executed = true;
  Scenario ex_layer = scenario("{\"zero\": 3}", 16, 2048);
  ex_layer.serial_ranks = true;
  ex_layer.executed = true;
  CHECK(predict_step(ex, c).step_time == predict_step(ex_layer, c).step_time);
}

TEST_CASE("interference: compute beside a collective is slowed by the collective's share of the SMs") {
  // The ZeRO-3 prefetch plan above: 72 gathers (64 of layers, 8 of the
  // embedding and the head) and 32 reduce-scatters of 300 ns, all but at
  // most 10 hidden behind 1-2 µs of compute. With a quarter of the SMs held
  // by each collective, the compute that ran beside them takes a quarter of
  // that time longer: between 0.25 · 94 · 300 less the at most 10 · 300 ns
  // the compute lane waited for them, and 0.25 · 104 · 300. It is its own
  // line, and the step grows by exactly it.
  struct Slowed : UnitCosts {
    double f = 0.25;
    double interference_fraction() const override { return f; }
  };
  Slowed c;
  c.collective_t = 300;
  const Scenario sc = scenario("{\"zero\": 3}", 16, 2048);
  const auto slowed = predict_step(sc, c);
  UnitCosts plain;
  plain.collective_t = 300;
  const auto alone = predict_step(sc, plain);
  const Time i = slowed.breakdown.interference;
  CHECK(alone.breakdown.interference == 0);
  CHECK(slowed.step_time == alone.step_time + i);
  CHECK(slowed.breakdown.total() == slowed.step_time);
  CHECK(i >= static_cast<Time>(0.25 * 94 * 300) - 10 * 300);
  CHECK(i <= static_cast<Time>(0.25 * 104 * 300));
  // Communication-bound (each collective 5 µs, longer than any layer's
  // compute): the compute lane waits for the gathers anyway, and the slower
  // compute only shortens the wait.
  c.collective_t = 5000;
  CHECK(predict_step(sc, c).breakdown.interference == 0);
}

TEST_CASE("serial ranks: a stage's tasks run one after another, in program order") {
  // The same ZeRO-3 plan as above, for an executor that runs each rank's
  // tasks on one thread (Scenario::serial_ranks, the CPU backend): the
  // gathers cannot hide behind compute any more, so the step is the sum of
  // every task of the stage, 2 m 16 (tf + tb) + 96 · 300 (a forward gather,
  // a backward gather and a reduce-scatter per layer and microbatch), and
  // no task of a stage starts before the one before it in the program ends.
  UnitCosts c;
  c.collective_t = 300;
  Scenario sc = scenario("{\"zero\": 3}", 16, 2048);
  sc.serial_ranks = true;
  const LoweredStep low = lower_step(sc, c);
  const sim::RunResult run = sim::simulate(low.graph);
  Time sum = 0;
  Time prev_end = 0;
  for (std::size_t i = 0; i < low.graph.num_tasks(); ++i) {
    CHECK(run.tasks[i].start >= prev_end);
    prev_end = run.tasks[i].end;
    sum += run.tasks[i].end - run.tasks[i].start;
  }
  CHECK(run.makespan == sum);
  CHECK(sum >= 2 * 16 * (c.tf + c.tb) + 96 * c.collective_t);
  const auto overlapped = predict_step(scenario("{\"zero\": 3}", 16, 2048), c);
  CHECK(predict_step(sc, c).step_time > overlapped.step_time);
}

// All-gathers priced by their bytes (1 ns per 4 kB), every other
// collective free; the all-gathers asked for are recorded.
struct GatherCosts : UnitCosts {
  mutable std::vector<Bytes> gathers;
  Transfer collective(Collective op, Group, Bytes b) const override {
    if (op != Collective::AllGather) return 0;
    gathers.push_back(b);
    return b / 4000;
  }
};

TEST_CASE("ZeRO-1 with overlap_param_gather: the weight gather overlaps the first forward, each layer waiting for its own") {
  // dp 8, one stage, one microbatch. A layer's weights (790 k parameters in
  // bf16, 1.6 MB) gather in about 395 ns, under a layer's forward (1 µs).
  // Without the overlap the one all-gather of every weight follows the
  // optimizer step, exposed: compute + t(all). With it the gathers run per
  // part from the step's start (the previous step's, in the steady state):
  // the embedding's, each layer's, the head's; the embedding's and the
  // first layer's are exposed, the rest hide behind the layers' forwards:
  // compute + t(embedding) + t(layer 0). The bytes are the same.
  const Time compute = 16 * (1000 + 2000);
  GatherCosts off_costs;
  const auto off = predict_step(
      scenario("{\"zero\": 1, \"implementation\": {\"overlap_param_gather\": false}}", 8), off_costs);
  REQUIRE(off_costs.gathers.size() == 1);
  CHECK(off.step_time == compute + off_costs.gathers[0] / 4000);
  GatherCosts on_costs;
  const auto on = predict_step(scenario("{\"zero\": 1}", 8), on_costs);
  REQUIRE(on_costs.gathers.size() == 18);  // embedding, 16 layers, head
  const auto& g = on_costs.gathers;
  CHECK(g[1] / 4000 < 1000);
  CHECK(on.step_time == compute + g[0] / 4000 + g[1] / 4000);
  Bytes all = 0;
  for (const Bytes b : g) all += b;
  CHECK(std::llabs(all - off_costs.gathers[0]) <= 18);  // each part's bytes rounded down
  const auto dp = static_cast<std::size_t>(CommKind::DP);
  CHECK(on.breakdown.exposed_comm[dp] == g[0] / 4000 + g[1] / 4000);
  // An executor's steps run one after another: the gather stays at the end.
  Scenario executed = scenario("{\"zero\": 1}", 8);
  executed.executed = true;
  GatherCosts ex_costs;
  CHECK(predict_step(executed, ex_costs).step_time == off.step_time);
}

TEST_CASE("ZeRO at dp 1 with cp 8 shards over the cp ranks: the weights are gathered") {
  // The gradients are reduced over dp · cp = 8 ranks, so ZeRO-1 steps an
  // eighth and gathers the updated weights (once, after the step, without
  // overlap_param_gather); ZeRO-3 gathers every layer, the embedding and
  // the output layer in the forward and again in the backward of each of
  // the m = 16 microbatches (global 16 over dp 1: context parallelism
  // splits sequences, not the batch); ZeRO-0 gathers nothing.
  const auto gathers = [](const std::string& plan) {
    const StepProgram p = build_step_program(unit_scenario(plan, 16), UnitCosts{}, Granularity::Layer);
    return std::count_if(p.info.begin(), p.info.end(), [](const TaskInfo& i) {
      return i.op == TaskOp::GatherWeights || i.op == TaskOp::Zero3Gather;
    });
  };
  CHECK(gathers("{\"cp\": 8, \"dp\": 1, \"zero\": 0}") == 0);
  CHECK(gathers("{\"cp\": 8, \"dp\": 1, \"zero\": 1, \"implementation\": {\"overlap_param_gather\": false}}") == 1);
  CHECK(gathers("{\"cp\": 8, \"dp\": 1, \"zero\": 3}") == 2 * 16 * (16 + 2));
  // FSDP's root module (zero3_root_unsharded): one gather per microbatch.
  CHECK(gathers("{\"cp\": 8, \"dp\": 1, \"zero\": 3, \"implementation\": {\"zero3_root_unsharded\": true}}") ==
        2 * 16 * 16 + 16);
}

TEST_CASE("parameter server: gradients pushed per bucket, weights pulled after the step") {
  // dp 8, one stage, overlap off: 18 bucket pushes after backward, the step,
  // then one pull of all weights, each 1 µs.
  UnitCosts c;
  c.collective_t = 1000;
  const auto ps = predict_step(scenario("{\"dp_topology\": \"parameter_server\", \"implementation\": {\"overlap_grad_reduce\": false}}", 8, 2048), c);
  CHECK(ps.step_time == 16 * (c.tf + c.tb) + 18 * c.collective_t + c.collective_t);
}

TEST_CASE("every plan axis lowers and simulates") {
  // One plan per axis and a few mixed ones: the graph replays without error
  // and the breakdown sums to the step time.
  const char* plans[] = {
      "{\"zero\": 1}", "{\"zero\": 2}", "{\"zero\": 3}",
      "{\"tp\": 2, \"sequence_parallel\": true}", "{\"dp\": 4, \"cp\": 2}",
      "{\"recompute\": \"every_k\", \"recompute_k\": 4}", "{\"recompute\": \"sqrt\"}",
      "{\"offload\": {\"activations\": true, \"prefetch_depth\": 2}}",
      "{\"offload\": {\"weights\": true}}", "{\"zero\": 2, \"offload\": {\"optimizer\": \"cpu\"}}",
      "{\"zero\": 2, \"offload\": {\"optimizer\": \"nvme\"}}",
      "{\"compression\": {\"method\": \"topk\", \"ratio\": 0.01}}",
      "{\"compression\": {\"method\": \"randomk\", \"ratio\": 0.1}}",
      "{\"compression\": {\"method\": \"qsgd\", \"bits\": 4}}",
      "{\"compression\": {\"method\": \"onebit\"}}", "{\"compression\": {\"method\": \"powersgd\", \"rank\": 2}}",
      "{\"optimizer\": \"sgd\", \"precision\": \"fp32\"}", "{\"dp_topology\": \"parameter_server\"}",
      "{\"pp\": 2, \"tp\": 2, \"zero\": 1, \"recompute\": \"full\", \"schedule\": \"interleaved\"}",
      "{\"pp\": 4, \"zero\": 3, \"offload\": {\"activations\": true}, \"recompute\": \"selective\"}",
  };
  UnitCosts c;
  c.collective_t = 3000;
  c.p2p_t = 200;
  c.copy_t = 700;
  c.optimizer = 5000;
  c.tp = c.cp = c.ep = 40;
  for (const char* p : plans) {
    SUBCASE(p) {
      const auto pr = predict_step(scenario(p), c);
      CHECK(pr.step_time > 0);
      CHECK(pr.breakdown.total() == pr.step_time);
    }
  }
  // Expert parallelism needs a MoE model.
  const auto moe = parse_scenario(
      "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1000,"
      " \"moe\": {\"experts\": 8, \"top_k\": 2}}, \"cluster\": {\"preset\": \"dgx-h100\"},"
      " \"batch\": {\"global\": 16}, \"plan\": {\"ep\": 4}}",
      "t.json");
  const auto pr = predict_step(moe, c);
  CHECK(pr.breakdown.exposed_comm[static_cast<std::size_t>(CommKind::EP)] == 2 * 4 * 2 * c.ep);
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

// Collectives priced by their bytes (10 GB/s), everything else as UnitCosts.
struct BytesCosts : UnitCosts {
  Transfer collective(Collective, Group, Bytes bytes) const override { return bytes / 10; }
};

TEST_CASE("compression.bucketed: each bucket's exchange overlaps the backward that follows it") {
  // 16 layers of hidden 2,048 (about 100 MB of bf16 gradients each: every
  // layer fills a 25 MiB bucket), dp 8, 2 microbatches, random-k sending
  // every gradient (one all-reduce of the bucket), backward 20 ms a layer so
  // each layer's round (about 10 ms at 10 GB/s) ends within the next
  // layer's backward. Free collectives give T; then:
  //   one exchange after the backward:  T + r(all gradients)
  //   a hook per bucket:                T + r(layer 0's bucket) + r(the rest: the embedding)
  // (the head's and layers 15–1's rounds hide behind the backward).
  const std::string plan = R"({"compression": {"method": "randomk", "ratio": 1.0, "bucketed": BUCKETED}})";
  auto with = [&](bool bucketed) {
    std::string p = plan;
    p.replace(p.find("BUCKETED"), 8, bucketed ? "true" : "false");
    return scenario(p, 16, 2048);
  };
  const Scenario one = with(false), hooked = with(true);
  REQUIRE(hooked.plan.compression.bucketed);
  BytesCosts c;
  c.tb = 20'000'000;
  UnitCosts free_comm;
  free_comm.tb = c.tb;
  const Time t = predict_step(one, free_comm).step_time;
  CHECK(predict_step(hooked, free_comm).step_time == t);
  const cost::OpChain chain = cost::expand(one.model, expand_options(one));
  auto round = [&](const StageGradients& g) {
    const GradientExchange ex = compressed_exchange(one.plan, chain, g, c);
    REQUIRE(ex.rounds.size() == 1);
    return c.collective(ex.rounds[0].first, Group::DP, static_cast<Bytes>(ex.rounds[0].second)).total();
  };
  const Time layer = round({{1}, false, false}), rest = round({{}, true, false});
  REQUIRE(layer < c.tb);
  CHECK(predict_step(one, c).step_time == t + round({{16}, true, true}));
  CHECK(predict_step(hooked, c).step_time == t + layer + rest);
  // The chunk level builds the same program.
  CHECK(predict_step_coarse(hooked, c).step_time == t + layer + rest);
  // One encode, round and decode per bucket: the head's, 16 layers', the rest's.
  const StepProgram p = build_step_program(hooked, c, Granularity::Layer);
  int encodes = 0;
  for (std::size_t i = 0; i < p.tasks.size(); ++i) encodes += p.info[i].op == TaskOp::CompressEncode;
  CHECK(encodes == 18);
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

TEST_CASE("ps_staleness: a parameter server's pull leaves the worker's critical path") {
  // dp 8 over a parameter server, every collective c: synchronously the
  // worker waits for the pull after the server's step (c at the end); with
  // bounded staleness the previous step's pull runs under this step's
  // compute (2 microbatches of 16 layers, 3 us each: far longer than c).
  UnitCosts c;
  c.collective_t = 5000;
  const Time sync = predict_step(scenario(R"({"dp_topology": "parameter_server"})"), c).step_time;
  const Time stale =
      predict_step(scenario(R"({"dp_topology": "parameter_server", "ps_staleness": 2})"), c).step_time;
  CHECK(sync - stale == c.collective_t);
  // The chunk level agrees.
  CHECK(predict_step_coarse(scenario(R"({"dp_topology": "parameter_server", "ps_staleness": 2})"), c).step_time ==
        stale);
  // Staleness without a parameter server is refused by its rule.
  try {
    (void)scenario(R"({"ps_staleness": 1})");
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(e.path() == "plan.ps_staleness");
  }
}

TEST_CASE("grad_reduce_dtype: every gradient reduction moves the dtype it names, the accumulation's by default") {
  // bf16 on 8 H100s with fp32 gradient accumulation. ZeRO-3 reduce-scatters
  // each layer's P gradients: 4·P bytes in the accumulation's fp32, 2·P when
  // the reduction is set to bf16 (FSDP's MixedPrecision(reduce_dtype=bf16),
  // Composer's PURE), 4·P again when set to fp32. Without ZeRO the bucketed
  // all-reduce moves the same totals. The held gradients stay fp32 (4 bytes a
  // parameter) whatever the reduction.
  auto with = [](int zero, const char* reduce) {
    return parse_scenario(
        R"({"model": {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 32000},
            "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 8},
            "plan": {"dp": 8, "zero": )" +
            std::to_string(zero) + R"(, "precision": "bf16",
                     "implementation": {"fp32_grad_accumulation": true)" +
            (reduce ? std::string(R"(, "grad_reduce_dtype": ")") + reduce + "\"" : std::string()) + "}}}",
        "t.json");
  };
  const Scenario base = with(3, nullptr);
  const cost::Calibration cal = cost::default_calibration(base.cluster.gpu);
  const cost::OpChain chain = cost::expand(base.model, expand_options(base));
  const double layer = static_cast<double>(chain.block_at(0).params());
  auto reduce = [&](const Scenario& sc, TaskOp op, bool layers_only) {
    const StepProgram prog = build_step_program(sc, ModelStepCosts(sc, cal), Granularity::Layer);
    std::vector<Time> out;
    for (std::size_t i = 0; i < prog.tasks.size(); ++i)
      if (prog.info[i].op == op && (!layers_only || (!prog.info[i].head && !prog.info[i].embedding)))
        out.push_back(prog.tasks[i].duration);
    return out;
  };
  const ModelStepCosts costs(base, cal);
  const Time rs4 = costs.collective(Collective::ReduceScatter, Group::DP, static_cast<Bytes>(4 * layer)).total();
  const Time rs2 = costs.collective(Collective::ReduceScatter, Group::DP, static_cast<Bytes>(2 * layer)).total();
  CHECK(rs2 < rs4);
  for (const auto& [reduce_dtype, want] : {std::pair{static_cast<const char*>(nullptr), rs4},
                                           std::pair{static_cast<const char*>("fp32"), rs4},
                                           std::pair{static_cast<const char*>("bf16"), rs2}}) {
    const auto got = reduce(with(3, reduce_dtype), TaskOp::Zero3Reduce, true);
    REQUIRE(got.size() == 4);  // one per layer and microbatch (one microbatch)
    for (Time t : got) CHECK(t == want);
  }
  // The bucketed all-reduce (zero 0) moves half the bytes in bf16: its
  // buckets take less time in all.
  Time all4 = 0, all2 = 0;
  for (Time t : reduce(with(0, nullptr), TaskOp::DpReduce, false)) all4 += t;
  for (Time t : reduce(with(0, "bf16"), TaskOp::DpReduce, false)) all2 += t;
  CHECK(all2 < all4);
  CHECK(estimate_memory(with(3, "bf16")).stages[0].bytes[static_cast<std::size_t>(sim::MemTag::Grads)] ==
        estimate_memory(with(3, nullptr)).stages[0].bytes[static_cast<std::size_t>(sim::MemTag::Grads)]);
  CHECK(reduced_grad_bytes(with(3, nullptr).plan) == 4);
  CHECK(reduced_grad_bytes(with(3, "bf16").plan) == 2);
}

TEST_CASE("FP8 parameters: the blocks' GEMM weights kept and gathered in FP8") {
  // Megatron-Core's --fp8-param-gather on 8 H100s, dp 8, ZeRO-1, fp8: the
  // blocks' weight matrices (M) are FP8 parameters, so the stage keeps M
  // 16-bit bytes fewer (2·M), and the distributed optimizer's all-gather of
  // updated weights moves (P − M)·2 + M bytes instead of P·2.
  auto with = [](bool fp8_params) {
    return parse_scenario(
        R"({"model": {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 32000},
            "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 8},
            "plan": {"dp": 8, "zero": 1, "precision": "fp8",
                     "implementation": {"overlap_param_gather": false, "fp8_param_gather": )" +
            std::string(fp8_params ? "true" : "false") + "}}}",
        "t.json");
  };
  const Scenario plain = with(false), fp8 = with(true);
  const cost::OpChain chain = cost::expand(plain.model, expand_options(plain));
  const double m = 4.0 * static_cast<double>(chain.main_block().gemm_weight_params());
  const double p = static_cast<double>(estimate_memory(plain).stages[0].params);
  CHECK(m > 0);
  const auto params_tag = [](const Scenario& sc) {
    return static_cast<double>(estimate_memory(sc).stages[0].bytes[static_cast<std::size_t>(sim::MemTag::Params)]);
  };
  CHECK(params_tag(plain) - params_tag(fp8) == doctest::Approx(2 * m).epsilon(1e-9));
  const cost::Calibration cal = cost::default_calibration(plain.cluster.gpu);
  const ModelStepCosts costs(plain, cal);
  auto gather = [&](const Scenario& sc) {
    const StepProgram prog = build_step_program(sc, ModelStepCosts(sc, cal), Granularity::Layer);
    Time t = 0;
    for (std::size_t i = 0; i < prog.tasks.size(); ++i)
      if (prog.info[i].op == TaskOp::GatherWeights) t += prog.tasks[i].duration;
    return t;
  };
  CHECK(gather(plain) == costs.collective(Collective::AllGather, Group::DP, static_cast<Bytes>(2 * p)).total());
  CHECK(gather(fp8) == costs.collective(Collective::AllGather, Group::DP, static_cast<Bytes>(2 * (p - m) + m)).total());
  CHECK(gather(fp8) < gather(plain));
}

TEST_CASE("multi-token prediction on a pipeline: the last stage keeps a copy of the word embedding") {
  // Megatron-Core builds the embedding on the stage of the MTP modules (the
  // last) and all-reduces its gradient between the first and last stage,
  // as for tied embeddings (finalize_model_grads.py). An untied model, pp 2,
  // tp 1: with one module the last stage holds V·h more parameters and each
  // end stage runs one embedding all-reduce; without, neither.
  auto with = [](int mtp) {
    return parse_scenario(
        R"({"model": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000,
                      "tied_embeddings": false, "mtp_layers": )" +
            std::to_string(mtp) + R"(},
            "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 16},
            "plan": {"pp": 2, "dp": 4}})",
        "t.json");
  };
  const Scenario none = with(0), one = with(1);
  const auto a = estimate_memory(none), b = estimate_memory(one);
  CHECK(b.stages[0].params == a.stages[0].params);
  // The module's own block, norms and 2h → h projection, and the copy.
  const std::int64_t h = 256, V = 1000;
  const double module = cost::expand(one.model, expand_options(one)).head.params() -
                        cost::expand(none.model, expand_options(none)).head.params();
  CHECK(module > 0);
  CHECK(static_cast<double>(b.stages[1].params - a.stages[1].params) == doctest::Approx(module + V * h).epsilon(1e-12));
  const UnitCosts c;
  auto ties = [&](const Scenario& sc) {
    return count_tasks(build_step_program(sc, c, Granularity::Layer),
                       [](const TaskInfo& i) { return i.op == TaskOp::EmbeddingTie; });
  };
  CHECK(ties(none) == 0);
  CHECK(ties(one) == 2);
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

TEST_CASE("a layer chain's pipeline sends carry each boundary's activations") {
  // VGG-19 over 4 interleaved stages of 2 chunks (8 chunks of 19 stages:
  // 3, 3, 3, 2, 2, 2, 2, 2): each send across the boundary after chunk k
  // carries b times the output of the stage before it (the next chunk's
  // input), forward and, as its gradient, backward; its time is the
  // network's for those bytes. The outputs shrink along the chain, so the
  // boundaries' messages differ.
  const Scenario sc = parse_scenario(
      R"({"model": "vgg19", "cluster": {"preset": "dgx-a100-80g"}, "batch": {"global": 16, "micro": 2},
          "plan": {"dp": 2, "pp": 4, "schedule": "interleaved", "virtual_stages": 2, "precision": "bf16"}})",
      "vgg.json");
  const ModelStepCosts costs(sc, cost::ideal_calibration());
  const StepProgram p = build_step_program(sc, costs, Granularity::Layer);
  const auto chunks = chunk_layers(sc.plan, sc.model.layers);
  std::vector<std::int64_t> first{0};
  for (std::int64_t n : chunks) first.push_back(first.back() + n);
  const auto& layers = sc.model.chain->layers;
  std::set<Time> times;
  int sends = 0;
  for (std::size_t i = 0; i < p.tasks.size(); ++i) {
    const TaskOp op = p.info[i].op;
    if (op != TaskOp::SendActivation && op != TaskOp::SendGradient) continue;
    ++sends;
    // The task's chunk is its sender's; the boundary is after it forward,
    // before it backward.
    const int k = p.info[i].chunk;
    REQUIRE(k >= 0);
    const int boundary = op == TaskOp::SendActivation ? k : k - 1;
    const Bytes msg = 2 * layers[static_cast<std::size_t>(first[static_cast<std::size_t>(boundary) + 1] - 1)].output_bytes;
    CHECK(p.tasks[i].duration == costs.p2p(msg).total());
    times.insert(p.tasks[i].duration);
  }
  CHECK(sends == 2 * 7 * 4);  // 7 boundaries, 4 microbatches (16 / (2 · dp 2)), both ways
  CHECK(times.size() > 2);
}

}  // namespace
}  // namespace strata::strategies
