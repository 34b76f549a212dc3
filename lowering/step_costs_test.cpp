// ModelStepCosts against closed forms: with the ideal calibration (every
// efficiency 1, no latency or overhead) each price is bytes or FLOPs over a
// datasheet peak, so the tests can spell out what is charged.
#include "lowering/step_costs.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "costmodel/model_io.hpp"
#include "costmodel/time_model.hpp"
#include "sim/limits.hpp"
#include "lowering/coarse.hpp"
#include "lowering/memory.hpp"
#include "tests/testing.hpp"

namespace strata::strategies {
namespace {

// A 22B-like layer (Korthikanti et al. Table 3) on one DGX A100: tp 8, b 4.
Scenario gpt(const std::string& plan, int pp = 1) {
  return parse_scenario(
      "{\"model\": {\"layers\": 48, \"hidden\": 6144, \"heads\": 64, \"seq_len\": 2048, "
      "\"vocab\": 51200},"
      " \"cluster\": {\"preset\": \"dgx-a100-80g\", \"nodes\": " +
          std::to_string(pp) + "}, \"batch\": {\"global\": 4, \"micro\": 4}, \"plan\": " + plan + "}",
      "t.json");
}

constexpr Bytes kAct = 4LL * 2048 * 6144 * 2;  // b·s·h, fp16

Time coll(const Scenario& sc, const cost::Calibration& cal, cost::CollectiveOp op, Bytes bytes) {
  return cost::collective_time(op, bytes, 8, 8, sc.cluster.node, cal);
}

// The blocking communication of the scenario's (one kind of) block.
Time block_comm(const Scenario& sc, const ModelStepCosts& c, CommKind kind, Pass pass) {
  return c.layer_comm(cost::expand(sc.model, expand_options(sc)).main_block(), kind, pass);
}

TEST_CASE("tensor parallelism: forward exposed, backward as Megatron-LM overlaps it") {
  const cost::Calibration cal = cost::ideal_calibration();
  SUBCASE("without sequence parallelism") {
    const auto sc = gpt(R"({"tp": 8, "precision": "fp16"})");
    const ModelStepCosts c(sc, cal);
    const Time ar = coll(sc, cal, cost::CollectiveOp::AllReduce, kAct);
    CHECK(block_comm(sc, c, CommKind::TP, Pass::Forward) == 2 * ar);
    // Both backward all-reduces run beside the QKV and MLP-up weight-gradient
    // GEMMs, each longer than an all-reduce of b·s·h here: nothing exposed.
    CHECK(block_comm(sc, c, CommKind::TP, Pass::Backward) == 0);
  }
  SUBCASE("with sequence parallelism") {
    const auto sc = gpt(R"({"tp": 8, "precision": "fp16", "sequence_parallel": true})");
    const ModelStepCosts c(sc, cal);
    const Time ag = coll(sc, cal, cost::CollectiveOp::AllGather, kAct);
    const Time rs = coll(sc, cal, cost::CollectiveOp::ReduceScatter, kAct);
    CHECK(block_comm(sc, c, CommKind::TP, Pass::Forward) == 2 * (ag + rs));
    // The row-parallel linears' output-gradient all-gathers stay exposed; the
    // extra input all-gathers and the reduce-scatters hide behind GEMMs.
    CHECK(block_comm(sc, c, CommKind::TP, Pass::Backward) == 2 * ag);
    // Nothing overlapped (tp_grad_overlap false): the two column-parallel
    // linears' input gathers and input-gradient reduce-scatters are exposed
    // too; a linear that kept its gathered input (sp_regather_input false,
    // PyTorch DTensor) gathers nothing again.
    const auto exposed = gpt(R"({"tp": 8, "precision": "fp16", "sequence_parallel": true,
                                 "implementation": {"tp_grad_overlap": false}})");
    CHECK(block_comm(exposed, ModelStepCosts(exposed, cal), CommKind::TP, Pass::Backward) == 2 * ag + 2 * (ag + rs));
    const auto dtensor = gpt(R"({"tp": 8, "precision": "fp16", "sequence_parallel": true,
                                 "implementation": {"tp_grad_overlap": false, "sp_regather_input": false}})");
    CHECK(block_comm(dtensor, ModelStepCosts(dtensor, cal), CommKind::TP, Pass::Backward) == 2 * ag + 2 * rs);
    // The forward is the same either way.
    CHECK(block_comm(dtensor, ModelStepCosts(dtensor, cal), CommKind::TP, Pass::Forward) == 2 * (ag + rs));
  }
}

TEST_CASE("context parallelism: a ring hides its exchanges, a K/V all-gather exposes its collectives, PyTorch's hides part") {
  // 22B-like layers with 16,384-token sequences at cp 8 on one DGX A100:
  // this rank holds 2,048 tokens of each of 4 sequences, K and V
  // 2·b·(s/cp)·h·2 bytes (MHA).
  const cost::Calibration cal = cost::ideal_calibration();
  auto cp8 = [](const std::string& implementation) {
    return parse_scenario(
        R"({"model": {"layers": 48, "hidden": 6144, "heads": 64, "seq_len": 16384, "vocab": 51200},
            "cluster": {"preset": "dgx-a100-80g", "nodes": 1}, "batch": {"global": 4, "micro": 4},
            "plan": {"cp": 8, "precision": "fp16", "implementation": )" +
            implementation + "}}",
        "t.json");
  };
  constexpr Bytes kv = 2LL * 4 * 2048 * 6144 * 2;
  SUBCASE("p2p (the default): cp - 1 exchanges per pass, each behind the chunk in hand's attention") {
    const auto sc = cp8("{}");
    CHECK(sc.plan.implementation.cp_comm == CpComm::P2p);
    // 7 exchanges of 201 MB (~4.7 ms at the ideal NVSwitch bandwidth)
    // against 3.3 TFLOPs of attention forward (~10.6 ms): nothing exposed.
    const ModelStepCosts c(sc, cal);
    CHECK(block_comm(sc, c, CommKind::CP, Pass::Forward) == 0);
    CHECK(block_comm(sc, c, CommKind::CP, Pass::Backward) == 0);
  }
  SUBCASE("all_gather: forward the group's K/V gathered, backward again and their gradients reduce-scattered") {
    // Transformer Engine gathers K and V as two collectives (cp times this
    // rank's K, then V) and reduce-scatters dK and dV as two; the CPU
    // backend's kernels move K | V as one. With the bundled calibration's
    // latencies the two counts differ.
    auto sc = cp8(R"({"cp_comm": "all_gather"})");
    const cost::Calibration a100 = cost::default_calibration(sc.cluster.gpu);
    const ModelStepCosts te(sc, a100);
    const Time ag = coll(sc, a100, cost::CollectiveOp::AllGather, 8 * kv / 2);
    const Time rs = coll(sc, a100, cost::CollectiveOp::ReduceScatter, 8 * kv / 2);
    REQUIRE(ag > 0);
    CHECK(block_comm(sc, te, CommKind::CP, Pass::Forward) == 2 * ag);
    CHECK(block_comm(sc, te, CommKind::CP, Pass::Backward) == 2 * ag + 2 * rs);
    sc.kernel_memory = KernelMemory::Cpu;
    const ModelStepCosts cpu(sc, a100);
    const Time ag1 = coll(sc, a100, cost::CollectiveOp::AllGather, 8 * kv);
    const Time rs1 = coll(sc, a100, cost::CollectiveOp::ReduceScatter, 8 * kv);
    CHECK(block_comm(sc, cpu, CommKind::CP, Pass::Forward) == ag1);
    CHECK(block_comm(sc, cpu, CommKind::CP, Pass::Backward) == ag1 + rs1);
    CHECK(ag1 < 2 * ag);  // one latency fewer
  }
  SUBCASE("all_gather_ring: K | V gathered beside the diagonal sub-step, the gradients round the ring in fp32") {
    // PyTorch's context parallelism (torchtitan's "allgather" rotation):
    // forward, one gather of cp × this rank's K | V, exposed beyond the
    // first of cp equal sub-steps of attention; backward, the same, then
    // cp passes of the K/V gradient (fp32: twice fp16's bytes) to the next
    // rank, the first cp − 1 each behind one sub-step, the last exposed.
    const auto sc = cp8(R"({"cp_comm": "all_gather_ring"})");
    const ModelStepCosts c(sc, cal);
    Time attn_f = 0, attn_b = 0;
    const auto expanded = cost::expand(sc.model, expand_options(sc));  // owns the ops read below
    for (const auto& op : expanded.main_block().ops)
      if (op.kind == cost::OpKind::Attention) {
        attn_f += cost::op_time(sc.cluster.gpu, cal, sc.plan.precision, op, false);
        attn_b += cost::op_time(sc.cluster.gpu, cal, sc.plan.precision, op, true);
      }
    REQUIRE(attn_f > 0);
    const Time ag = coll(sc, cal, cost::CollectiveOp::AllGather, 8 * kv);
    const Time dkv = cost::collective_time(cost::CollectiveOp::SendRecv, 2 * kv, 2, 2, sc.cluster.node, cal);
    // The gather (1.6 GB, ~4.7 ms) outlasts an eighth of the attention
    // (~1.3 ms forward): exposed.
    REQUIRE(ag > attn_f / 8);
    CHECK(block_comm(sc, c, CommKind::CP, Pass::Forward) == ag - attn_f / 8);
    CHECK(block_comm(sc, c, CommKind::CP, Pass::Backward) ==
          std::max<Time>(0, ag - attn_b / 8) + 7 * std::max<Time>(0, dkv - attn_b / 8) + dkv);
  }
  SUBCASE("an unknown algorithm is refused, naming the JSON path") {
    CHECK_THROWS_WITH(cp8(R"({"cp_comm": "a2a"})"), doctest::Contains("plan.implementation.cp_comm"));
  }
}

TEST_CASE("current FP8 scaling under sequence parallelism: an amax all-reduce before each gathered cast") {
  // Transformer Engine's Float8CurrentScaling reduces the amax of the
  // tensors sequence parallelism gathers over the tp group (the two
  // column-parallel inputs forward, the two row-parallel output gradients
  // backward): tensorwise adds 2 all-reduces of 4 bytes each way over
  // delayed, blocking; without sequence parallelism, none. (The backward
  // gathers wait for no GEMM here, tp_grad_overlap off, so the difference
  // is the amax all-reduces alone; the bundled calibration has latencies.)
  const cost::Calibration cal = cost::default_calibration(cost::gpu_preset("h100-sxm"));
  auto on = [](const std::string& plan) {
    return parse_scenario(R"({"model": {"layers": 4, "hidden": 4096, "heads": 32, "seq_len": 2048, "vocab": 32000},
        "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 4, "micro": 4},
        "plan": )" + plan + "}",
                          "t.json");
  };
  const auto delayed = on(R"({"tp": 8, "precision": "fp8", "sequence_parallel": true,
                             "implementation": {"tp_grad_overlap": false}})");
  const auto current = on(R"({"tp": 8, "precision": "fp8", "sequence_parallel": true, "fp8_recipe": "tensorwise",
                             "implementation": {"tp_grad_overlap": false}})");
  const Time amax = cost::collective_time(cost::CollectiveOp::AllReduce, 4, 8, 8, delayed.cluster.node, cal);
  CHECK(amax > 0);
  const ModelStepCosts a(delayed, cal), b(current, cal);
  for (const Pass pass : {Pass::Forward, Pass::Backward})
    CHECK(block_comm(current, b, CommKind::TP, pass) - block_comm(delayed, a, CommKind::TP, pass) == 2 * amax);
  const auto plain = on(R"({"tp": 8, "precision": "fp8"})");
  const auto plain_current = on(R"({"tp": 8, "precision": "fp8", "fp8_recipe": "tensorwise"})");
  CHECK(block_comm(plain_current, ModelStepCosts(plain_current, cal), CommKind::TP, Pass::Forward) ==
        block_comm(plain, ModelStepCosts(plain, cal), CommKind::TP, Pass::Forward));
}

TEST_CASE("expert parallelism: the all-to-alls block the expert blocks only, not a MoE model's dense ones") {
  // 8 experts over ep 8 on one DGX A100: dispatch and combine forward and
  // their gradients backward, top_k·b·s·h activations each, in the blocks
  // with routed experts; the first (dense) block has none.
  const auto sc = parse_scenario(
      R"({"model": {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 32000,
                    "moe": {"experts": 8, "top_k": 2, "first_dense": 1}},
          "cluster": {"preset": "dgx-a100-80g", "nodes": 1}, "batch": {"global": 8},
          "plan": {"ep": 8, "precision": "bf16"}})",
      "t.json");
  const cost::Calibration cal = cost::ideal_calibration();
  const ModelStepCosts c(sc, cal);
  const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
  REQUIRE(chain.kinds.size() == 2);
  const Bytes tokens = 2LL * 1 * 1024 * 1024 * 2;  // top_k · b · s · h · 2 bytes
  const Time a2a = cost::collective_time(cost::CollectiveOp::AllToAll, tokens, 8, 8, sc.cluster.node, cal);
  REQUIRE(a2a > 0);
  for (const Pass pass : {Pass::Forward, Pass::Backward}) {
    CHECK(c.layer_comm(chain.kinds[0], CommKind::EP, pass) == 2 * a2a);
    CHECK(c.layer_comm(chain.kinds[1], CommKind::EP, pass) == 0);
    CHECK(c.layer_comm(chain.head, CommKind::EP, pass) == 0);
  }
  // Each kind's passes are its own ops' times.
  CHECK(c.layer(chain.kinds[0], Pass::Forward, false) != c.layer(chain.kinds[1], Pass::Forward, false));
}

TEST_CASE("plan.moe: the busiest expert-parallel rank's load scales its experts' work and its all-to-alls") {
  // The model above with ep 8. MoeRouting::load(): the imbalance (1.5),
  // cut at a capacity of 1.25 without padding, the capacity when padded
  // (1.25, even for a balanced router). The routed experts' FLOPs, bytes
  // and kept activations, and the dispatched tokens, scale by it; the
  // router, the shared experts and the dense blocks do not.
  auto with = [](const std::string& moe) {
    return parse_scenario(
        R"({"model": {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 32000,
                      "moe": {"experts": 8, "top_k": 2, "first_dense": 1}},
            "cluster": {"preset": "dgx-a100-80g", "nodes": 1}, "batch": {"global": 8},
            "plan": {"ep": 8, "precision": "bf16", "moe": )" + moe + "}}",
        "t.json");
  };
  const Scenario balanced = with("{}"), skewed = with(R"({"load_imbalance": 1.5})"),
                 capped = with(R"({"load_imbalance": 1.5, "capacity_factor": 1.25})"),
                 padded = with(R"({"capacity_factor": 1.25, "pad_to_capacity": true})");
  CHECK(balanced.plan.moe.load() == 1.0);
  CHECK(skewed.plan.moe.load() == 1.5);
  CHECK(capped.plan.moe.load() == 1.25);
  CHECK(padded.plan.moe.load() == 1.25);
  const cost::Calibration cal = cost::ideal_calibration();
  const Bytes tokens = 2LL * 1 * 1024 * 1024 * 2;  // top_k · b · s · h · 2 bytes, balanced
  for (const Scenario* sc : {&balanced, &skewed, &capped, &padded}) {
    const double load = sc->plan.moe.load();
    const cost::OpChain chain = cost::expand(sc->model, expand_options(*sc));
    const cost::OpChain base = cost::expand(balanced.model, expand_options(balanced));
    const Time a2a = cost::collective_time(cost::CollectiveOp::AllToAll, static_cast<Bytes>(load * tokens), 8, 8,
                                           sc->cluster.node, cal);
    CHECK(ModelStepCosts(*sc, cal).layer_comm(chain.kinds[0], CommKind::EP, Pass::Forward) == 2 * a2a);
    // The model's MLP is GeLU (the default): its routed experts' ops are
    // mlp_up and mlp_down.
    for (const char* name : {"mlp_up", "mlp_down"}) {
      const auto find = [&](const cost::Layer& l) -> const cost::Op* {
        const auto it =
            std::find_if(l.ops.begin(), l.ops.end(), [&](const cost::Op& op) { return op.name == name && op.expert; });
        return it == l.ops.end() ? nullptr : &*it;
      };
      const cost::Op *routed = find(chain.kinds[0]), *balanced_op = find(base.kinds[0]);
      REQUIRE(routed != nullptr);
      REQUIRE(balanced_op != nullptr);
      REQUIRE(balanced_op->fwd_flops > 0);
      CHECK(routed->fwd_flops == doctest::Approx(load * balanced_op->fwd_flops));
    }
    CHECK(chain.kinds[1].fwd_flops() == base.kinds[1].fwd_flops());  // the dense block
  }
  // Refused where it cannot act.
  CHECK(testing::input_error_of([] {
          parse_scenario(R"({"model": {"layers": 2, "hidden": 64, "heads": 4, "seq_len": 64, "vocab": 100},
                             "cluster": {"preset": "dgx-a100-80g", "nodes": 1}, "batch": {"global": 8},
                             "plan": {"moe": {"load_imbalance": 1.2}}})",
                         "d.json");
        }) == "d.json: plan.moe: routes tokens to experts: custom has none");
  CHECK(testing::input_error_of([&] { with(R"({"pad_to_capacity": true})"); }) ==
        "t.json: plan.moe.pad_to_capacity: pads each expert's tokens to its capacity: needs capacity_factor");
}

TEST_CASE("tensor parallelism without the backward overlap (tp_grad_overlap false)") {
  // Megatron-LM of 2021 waited for each input-gradient all-reduce before the
  // weight-gradient GEMM: all of the backward communication is exposed.
  const cost::Calibration cal = cost::ideal_calibration();
  SUBCASE("without sequence parallelism: both all-reduces") {
    const auto sc = gpt(R"({"tp": 8, "precision": "fp16",
                            "implementation": {"tp_grad_overlap": false}})");
    const ModelStepCosts c(sc, cal);
    const Time ar = coll(sc, cal, cost::CollectiveOp::AllReduce, kAct);
    CHECK(block_comm(sc, c, CommKind::TP, Pass::Backward) == 2 * ar);
    CHECK(block_comm(sc, c, CommKind::TP, Pass::Forward) == 2 * ar);  // forward unchanged
  }
  SUBCASE("with sequence parallelism: the output-gradient all-gathers, and per "
          "column-parallel linear the input all-gather and the reduce-scatter") {
    const auto sc = gpt(R"({"tp": 8, "precision": "fp16", "sequence_parallel": true,
                            "implementation": {"tp_grad_overlap": false}})");
    const ModelStepCosts c(sc, cal);
    const Time ag = coll(sc, cal, cost::CollectiveOp::AllGather, kAct);
    const Time rs = coll(sc, cal, cost::CollectiveOp::ReduceScatter, kAct);
    CHECK(block_comm(sc, c, CommKind::TP, Pass::Backward) == 2 * ag + 2 * (ag + rs));
  }
}

TEST_CASE("gradient accumulation without fusion: a pass over the weight gradients per microbatch") {
  // 12·h²/t weight-matrix parameters per block on each rank (QKV 3h², output
  // h², MLP 8h²). Without fusion each layer's backward adds a memory-bound
  // pass: read the 16-bit gradient, read and write the buffer — 2 + 2 + 2
  // bytes per parameter into a 16-bit buffer, 2 + 4 + 4 into an fp32 one.
  const cost::Calibration cal = cost::ideal_calibration();
  const double params = 12.0 * 6144 * 6144 / 8;
  auto pass = [&](const Scenario& sc, double per) {
    return cost::seconds_to_time(static_cast<double>(static_cast<Bytes>(params * per)) /
                                 (sc.cluster.gpu.hbm_GBps * kGB));
  };
  const auto fused = gpt(R"({"tp": 8, "precision": "fp16"})");
  const cost::OpChain chain = cost::expand(fused.model, expand_options(fused));
  const ModelStepCosts base(fused, cal);
  auto added = [&](const Scenario& sc, Pass p) {
    return ModelStepCosts(sc, cal).layer(chain.main_block(), p, false) - base.layer(chain.main_block(), p, false);
  };
  const auto fp16 = gpt(R"({"tp": 8, "precision": "fp16",
                            "implementation": {"grad_accumulation_fusion": false}})");
  CHECK(added(fp16, Pass::Backward) == pass(fp16, 6));
  CHECK(added(fp16, Pass::Forward) == 0);
  CHECK(added(fp16, Pass::Recompute) == 0);
  // Strict like every implementation key: a boolean or an error.
  CHECK_THROWS_AS(gpt(R"({"implementation": {"grad_accumulation_fusion": 0}})"), InputError);
  CHECK_THROWS_AS(gpt(R"({"implementation": {"tp_grad_overlap": "no"}})"), InputError);
  const auto fp32_acc = gpt(R"({"tp": 8, "precision": "fp16",
                                "implementation": {"grad_accumulation_fusion": false,
                                                   "fp32_grad_accumulation": true}})");
  const cost::OpChain acc_chain = cost::expand(fp32_acc.model, expand_options(fp32_acc));
  CHECK(ModelStepCosts(fp32_acc, cal).layer(acc_chain.main_block(), Pass::Backward, false) -
            ModelStepCosts(gpt(R"({"tp": 8, "precision": "fp16",
                                   "implementation": {"fp32_grad_accumulation": true}})"),
                           cal)
                .layer(acc_chain.main_block(), Pass::Backward, false) ==
        pass(fp32_acc, 10));
}

TEST_CASE("a block's tail: its last linear layer and the ops after it, forward") {
  // GPT's block ends mlp_down, mlp_dropout, mlp_residual: layer_tail is
  // their forward op times, the rest of the forward before it; the
  // embedding and the head have none.
  const auto sc = gpt(R"({"tp": 8})");
  const cost::Calibration cal = cost::default_calibration(sc.cluster.gpu);
  const ModelStepCosts c(sc, cal);
  const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
  const auto& block = chain.main_block();
  const auto down = std::find_if(block.ops.begin(), block.ops.end(),
                                 [](const cost::Op& op) { return op.name == "mlp_down"; });
  REQUIRE(down != block.ops.end());
  CHECK(std::none_of(std::next(down), block.ops.end(), [](const cost::Op& op) { return op.kind == cost::OpKind::Linear; }));
  Time tail = 0;
  for (auto it = down; it != block.ops.end(); ++it)
    tail += cost::op_time(sc.cluster.gpu, cal, sc.plan.precision, *it, false);
  CHECK(tail > 0);
  CHECK(c.layer_tail(block) == tail);
  CHECK(c.layer_tail(block) < c.layer(block, Pass::Forward, false));
  CHECK(c.layer_tail(chain.head) == 0);
  CHECK(c.layer_tail(chain.embedding) == 0);
}

TEST_CASE("ZeRO-3 over flat parameters: each layer's backward concatenates its gradients once") {
  // FSDP1 (zero3_flat_grads): one memory-bound kernel per layer's backward
  // reads and writes each of the layer's P gradients — 2 × 2 bytes a
  // parameter in bf16 — under the ideal calibration P·4 / HBM. The forward
  // and the recompute are unchanged, and so is a plan without ZeRO-3 (no
  // flat parameters to assemble), and Strata's executors (executed).
  const cost::Calibration cal = cost::ideal_calibration();
  const auto plain = gpt(R"({"tp": 8, "zero": 3, "precision": "bf16"})");
  const cost::OpChain chain = cost::expand(plain.model, expand_options(plain));
  const auto& block = chain.main_block();
  const auto params = static_cast<double>(block.params());
  auto added = [&](const Scenario& sc, const Scenario& base, Pass p) {
    return ModelStepCosts(sc, cal).layer(block, p, false) - ModelStepCosts(base, cal).layer(block, p, false);
  };
  const auto flat = gpt(R"({"tp": 8, "zero": 3, "precision": "bf16", "implementation": {"zero3_flat_grads": true}})");
  CHECK(added(flat, plain, Pass::Backward) ==
        cost::seconds_to_time(static_cast<double>(static_cast<Bytes>(4.0 * params)) /
                              (plain.cluster.gpu.hbm_GBps * kGB)));
  CHECK(added(flat, plain, Pass::Forward) == 0);
  CHECK(added(flat, plain, Pass::Recompute) == 0);
  const auto zero1 = gpt(R"({"tp": 8, "zero": 1, "precision": "bf16"})");
  const auto zero1_flat = gpt(R"({"tp": 8, "zero": 1, "precision": "bf16", "implementation": {"zero3_flat_grads": true}})");
  CHECK(added(zero1_flat, zero1, Pass::Backward) == 0);
  Scenario executed = flat;
  executed.executed = true;
  Scenario executed_plain = plain;
  executed_plain.executed = true;
  CHECK(added(executed, executed_plain, Pass::Backward) == 0);
}

TEST_CASE("ZeRO-3 gathering into one buffer: each gather's parameters are copied out on the compute stream") {
  // FSDP2 (zero3_gather_copy_out): one memory-bound kernel per gather reads
  // and writes each of the layer's P parameters — 2 × 2 bytes a parameter
  // in bf16 — before the forward and again for the backward's re-gather;
  // not for the recompute (it runs on the backward's gather); a root module
  // held gathered (zero3_root_unsharded) pays it in its forward only.
  const cost::Calibration cal = cost::ideal_calibration();
  const auto plain = gpt(R"({"tp": 8, "zero": 3, "precision": "bf16"})");
  const cost::OpChain chain = cost::expand(plain.model, expand_options(plain));
  const auto bytes_time = [&](const cost::Layer& l) {
    return cost::seconds_to_time(static_cast<double>(static_cast<Bytes>(4.0 * static_cast<double>(l.params()))) /
                                 (plain.cluster.gpu.hbm_GBps * kGB));
  };
  auto added = [&](const Scenario& sc, const cost::Layer& l, Pass p) {
    return ModelStepCosts(sc, cal).layer(l, p, false) - ModelStepCosts(plain, cal).layer(l, p, false);
  };
  const auto copy = gpt(R"({"tp": 8, "zero": 3, "precision": "bf16", "implementation": {"zero3_gather_copy_out": true}})");
  CHECK(added(copy, chain.main_block(), Pass::Forward) == bytes_time(chain.main_block()));
  CHECK(added(copy, chain.main_block(), Pass::Backward) == bytes_time(chain.main_block()));
  CHECK(added(copy, chain.main_block(), Pass::Recompute) == 0);
  CHECK(added(copy, chain.embedding, Pass::Backward) == bytes_time(chain.embedding));
  const auto held = gpt(R"({"tp": 8, "zero": 3, "precision": "bf16",
                           "implementation": {"zero3_gather_copy_out": true, "zero3_root_unsharded": true}})");
  const auto held_plain = gpt(R"({"tp": 8, "zero": 3, "precision": "bf16", "implementation": {"zero3_root_unsharded": true}})");
  CHECK(ModelStepCosts(held, cal).layer(chain.embedding, Pass::Forward, false) -
            ModelStepCosts(held_plain, cal).layer(chain.embedding, Pass::Forward, false) ==
        bytes_time(chain.embedding));
  CHECK(ModelStepCosts(held, cal).layer(chain.embedding, Pass::Backward, false) ==
        ModelStepCosts(held_plain, cal).layer(chain.embedding, Pass::Backward, false));
}

TEST_CASE("vocabulary-parallel embedding and logits communicate over the group") {
  const cost::Calibration cal = cost::ideal_calibration();
  const auto sc = gpt(R"({"tp": 8, "precision": "fp16"})");
  const ModelStepCosts c(sc, cal);
  const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
  auto ops = [&](const cost::Layer& l, bool bwd) {
    Time t = 0;
    for (const auto& op : l.ops) t += cost::op_time(sc.cluster.gpu, cal, sc.plan.precision, op, bwd);
    return t;
  };
  const Time ar = coll(sc, cal, cost::CollectiveOp::AllReduce, kAct);
  CHECK(c.layer(chain.embedding, Pass::Forward, false) == ops(chain.embedding, false) + ar);
  CHECK(c.layer(chain.embedding, Pass::Backward, false) == ops(chain.embedding, true));
  CHECK(c.layer(chain.head, Pass::Forward, false) == ops(chain.head, false));
  CHECK(c.layer(chain.head, Pass::Backward, false) == ops(chain.head, true) + ar);
}

TEST_CASE("scatter/gather: a pipeline send is 1/t of the tensor plus the receivers' all-gather") {
  const cost::Calibration cal = cost::ideal_calibration();
  const auto sc = gpt(R"({"tp": 8, "pp": 2, "precision": "fp16",
                          "implementation": {"pp_scatter_gather": true}})",
                      2);
  const ModelStepCosts c(sc, cal);
  const Bytes part = kAct / 8;
  const Time send = cost::collective_time(cost::CollectiveOp::SendRecv, part, 2, 1, sc.cluster.node, cal);
  CHECK(c.p2p(part).total() == send + coll(sc, cal, cost::CollectiveOp::AllGather, kAct));
  // With sequence parallelism the tensor stays split: the send alone.
  const auto sp = gpt(R"({"tp": 8, "pp": 2, "precision": "fp16", "sequence_parallel": true,
                          "implementation": {"pp_scatter_gather": true}})",
                      2);
  CHECK(ModelStepCosts(sp, cal).p2p(part).total() == send);
}

TEST_CASE("optimizer step: the passes of a mixed-precision Adam step over HBM") {
  // Bytes per parameter: zero the gradients (their bytes), 16-bit gradients
  // into fp32 (6), fp16's unscale and inf check (8), the norm (4), the update
  // (4 + 2·12) and the master weights back (4 + 2): fp16 54, bf16 46; fp32
  // training: zero 4, norm 4, update 4 + 2·(4 + 8) = 36.
  const cost::Calibration cal = cost::ideal_calibration();
  const double params = 1e9;
  auto expect = [&](const Scenario& sc, double per) {
    return cost::seconds_to_time(params * per / (sc.cluster.gpu.hbm_GBps * kGB));
  };
  const auto fp16 = gpt(R"({"tp": 8, "precision": "fp16"})");
  CHECK(ModelStepCosts(fp16, cal).optimizer_step(params, false) == expect(fp16, 54));
  const auto bf16 = gpt(R"({"tp": 8, "precision": "bf16"})");
  CHECK(ModelStepCosts(bf16, cal).optimizer_step(params, false) == expect(bf16, 46));
  const auto fp32 = gpt(R"({"tp": 8, "precision": "fp32"})");
  CHECK(ModelStepCosts(fp32, cal).optimizer_step(params, false) == expect(fp32, 36));
  // fp32 gradient accumulation (fp16): 6 bytes of gradients to zero, no copy.
  const auto acc = gpt(R"({"tp": 8, "precision": "fp16",
                           "implementation": {"fp32_grad_accumulation": true}})");
  CHECK(ModelStepCosts(acc, cal).optimizer_step(params, false) == expect(acc, 6 + 8 + 4 + 28 + 6));
}

// A small model whose block runs in about 2 µs under the ideal
// calibration, so a host issuing one kernel per microsecond is the bound.
Scenario small(const std::string& implementation, int tp = 1) {
  return parse_scenario(
      "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1024},"
      " \"cluster\": {\"preset\": \"dgx-a100-80g\"}, \"batch\": {\"global\": 8, \"micro\": 1},"
      " \"plan\": {\"tp\": " + std::to_string(tp) +
          ", \"precision\": \"bf16\", \"implementation\": " + implementation + "}}",
      "t.json");
}

TEST_CASE("host dispatch: a pass takes at least its kernels times the host's time per kernel") {
  const cost::Calibration cal = cost::ideal_calibration();
  const cost::OpChain chain = cost::expand(small("{}").model, expand_options(small("{}")));
  SUBCASE("no tensor parallelism: the kernels of the block's ops") {
    // The GPT block's ops: two norms, the QKV, projection and two MLP
    // linears (one GEMM each forward, two backward), flash attention (one
    // kernel forward, two backward), the activation, two dropouts and two
    // residual adds (one kernel each way): 12 kernels forward, 17 backward.
    const ModelStepCosts c(small(R"({"host_dispatch_us": 10})"), cal);
    CHECK(chain.main_block().ops.size() == 12);
    CHECK(c.layer(chain.main_block(), Pass::Forward, false) == 12 * 10'000);
    CHECK(c.layer(chain.main_block(), Pass::Backward, false) == 17 * 10'000);
    CHECK(c.layer(chain.main_block(), Pass::Recompute, false) == 12 * 10'000);
    // Without it the same pass is the roofline's 2 µs.
    const ModelStepCosts none(small("{}"), cal);
    CHECK(none.layer(chain.main_block(), Pass::Forward, false) < 12 * 10'000 / 10);
  }
  SUBCASE("tensor parallelism: the pass and its blocking all-reduces take the host's time") {
    // Two forward all-reduces are launched by the host too (14 launches);
    // the pass is charged what the host needs beyond the communication, so
    // pass + communication = 14 launches exactly when the host is the bound.
    const ModelStepCosts c(small(R"({"host_dispatch_us": 10})", 2), cal);
    const Time comm = c.layer_comm(chain.main_block(), CommKind::TP, Pass::Forward);
    CHECK(comm > 0);
    CHECK(c.layer(chain.main_block(), Pass::Forward, false) + comm == 14 * 10'000);
  }
  SUBCASE("DeepSpeed's rank-by-rank host work on each ZeRO-3 parameter (zero3_host_per_rank)") {
    // dp 8, ZeRO-3: the block's twelve parameter tensors (two norms'
    // weight and bias as one vector each; the QKV linear's three products
    // (q, k, v) and the projection's and two MLP linears' weights, each
    // linear's bias as one vector) are split out of each gather with a
    // narrow per rank: 8 × 12 more host operations forward; backward the
    // gather's again and the reduce-scatter bucket's slices, 2 × 8 × 12.
    // Without the setting, or with one rank, none.
    auto z3 = [](const std::string& implementation, int dp) {
      return parse_scenario(
          "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1024},"
          " \"cluster\": " + std::string(dp == 8 ? "{\"preset\": \"dgx-a100-80g\"}" : "\"1xa100-80g\"") +
          ", \"batch\": {\"global\": 8, \"micro\": 1},"
          " \"plan\": {\"dp\": " + std::to_string(dp) + ", \"zero\": 3, \"precision\": \"bf16\", "
          "\"implementation\": " + implementation + "}}",
          "t.json");
    };
    std::int64_t tensors = 0;
    for (const auto& op : chain.main_block().ops) tensors += zero3_module_tensors(op, 0);
    CHECK(tensors == 12);
    const ModelStepCosts c(z3(R"({"host_dispatch_us": 10, "zero3_host_per_rank": true})", 8), cal);
    CHECK(c.layer(chain.main_block(), Pass::Forward, false) == (12 + 8 * 12) * 10'000);
    CHECK(c.layer(chain.main_block(), Pass::Backward, false) == (17 + 2 * 8 * 12) * 10'000);
    const ModelStepCosts off(z3(R"({"host_dispatch_us": 10})", 8), cal);
    CHECK(off.layer(chain.main_block(), Pass::Forward, false) == 12 * 10'000);
    const ModelStepCosts one(z3(R"({"host_dispatch_us": 10, "zero3_host_per_rank": true})", 1), cal);
    CHECK(one.layer(chain.main_block(), Pass::Forward, false) == 12 * 10'000);
  }
  SUBCASE("Strata's own executors issue kernels without a framework") {
    Scenario sc = small(R"({"host_dispatch_us": 10})");
    sc.executed = true;
    CHECK(ModelStepCosts(sc, cal).layer(chain.main_block(), Pass::Forward, false) ==
          ModelStepCosts(small("{}"), cal).layer(chain.main_block(), Pass::Forward, false));
  }
  SUBCASE("a GPU slower than the host is not charged") {
    // The 22B-like layer's forward runs for milliseconds: 12 launches at
    // 10 µs change nothing.
    const Scenario slow = gpt(R"({"tp": 8, "precision": "fp16", "implementation": {"host_dispatch_us": 10}})");
    const Scenario fast = gpt(R"({"tp": 8, "precision": "fp16"})");
    const cost::OpChain big = cost::expand(slow.model, expand_options(slow));
    CHECK(ModelStepCosts(slow, cal).layer(big.main_block(), Pass::Forward, false) ==
          ModelStepCosts(fast, cal).layer(big.main_block(), Pass::Forward, false));
  }
}

TEST_CASE("a selectively kept block reruns its policy's share of each op's forward") {
  // Llama-3-8B, one sequence of 4096 on a DGX H100, ideal calibration.
  const cost::Calibration cal = cost::ideal_calibration();
  auto llama = [](const char* recompute, const char* attention) {
    return parse_scenario(std::string(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100"},
        "batch": {"global": 8, "micro": 1}, "plan": {"recompute": ")") + recompute +
                              R"(", "implementation": {"attention": ")" + attention + R"("}}})",
                          "t.json");
  };
  auto forward = [&](const Scenario& sc, const cost::Op& op) {
    return static_cast<double>(cost::op_time(sc.cluster.gpu, cal, sc.plan.precision, op, false));
  };
  SUBCASE("torchtitan's op policy: wk, wo, w3 and the elementwise ops, not wq, wv, w1, w2 or attention") {
    const Scenario sc = llama("selective_op", "flash");
    const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
    double expected = 0, full = 0;
    for (const auto& op : chain.main_block().ops) {
      expected += op.sac_rerun * forward(sc, op);
      full += forward(sc, op);
    }
    const Time rerun = ModelStepCosts(sc, cal).layer(chain.main_block(), Pass::Recompute, true);
    CHECK(static_cast<double>(rerun) == doctest::Approx(expected).epsilon(1e-6));
    // About a third of the block's products plus its memory-bound ops.
    CHECK(rerun > 0);
    CHECK(static_cast<double>(rerun) < 0.6 * full);
  }
  SUBCASE("Megatron-LM's policy: the attention core under standard attention, nothing under flash") {
    const Scenario sc = llama("selective", "standard");
    const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
    double core = 0;
    for (const auto& op : chain.main_block().ops)
      if (op.kind == cost::OpKind::AttnScores || op.kind == cost::OpKind::Softmax ||
          op.kind == cost::OpKind::AttnValues)
        core += forward(sc, op);
    CHECK(static_cast<double>(ModelStepCosts(sc, cal).layer(chain.main_block(), Pass::Recompute, true)) ==
          doctest::Approx(core).epsilon(1e-6));
    const Scenario flash = llama("selective", "flash");
    CHECK(ModelStepCosts(flash, cal).layer(cost::expand(flash.model, expand_options(flash)).main_block(),
                                           Pass::Recompute, true) == 0);
  }
}

TEST_CASE("a step longer than 2^56 ns is refused at both levels, not summed past 64 bits") {
  // 1e-12 TFLOP/s and a 1e-300 GB/s NVLink: every kernel and collective
  // saturates at 2^56 ns; at either level the step is an input error.
  const auto sc = parse_scenario(
      R"({"model": "gpt2-124m", "batch": {"global": 64, "micro": 1},
          "cluster": {"preset": "dgx-a100-80g", "intra_node_GBps": 1e-300,
                      "gpu": {"preset": "a100-80g", "tflops": {"bf16": 1e-12}}}})",
      "slow.json");
  const ModelStepCosts costs(sc);
  const std::string expect = "slow.json: the step's ";
  CHECK(testing::input_error_of([&] { predict_step(sc, costs); }).rfind(expect, 0) == 0);
  CHECK(testing::input_error_of([&] { predict_step_coarse(sc, costs); }).rfind(expect, 0) == 0);
  CHECK(cost::seconds_to_time(1e300) == kMaxStepTime);
  CHECK(cost::seconds_to_time(-1e300) == -kMaxStepTime);
}

TEST_CASE("groups on a DGX-1's NVLink mesh: each collective at its own members' links") {
  // dp 4 x tp 2 on one DGX-1 (tp innermost): tensor-parallel pairs {0, 1}
  // share one 25 GB/s link, the data-parallel group {0, 2, 4, 6} two rings
  // (50 GB/s); on a node where every GPU reaches every other at 150 GB/s
  // (no matrix) both see 150. With the ideal calibration a collective is
  // its bytes over that bandwidth: an all-reduce of S over n ranks moves
  // 2(n-1)/n·S per rank.
  const auto on = [](const std::string& cluster) {
    return parse_scenario(R"({"model": {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 32000},
                              "cluster": )" + cluster + R"(, "batch": {"global": 8, "micro": 2},
                              "plan": {"dp": 4, "tp": 2, "precision": "fp16"}})",
                          "t.json");
  };
  const Scenario mesh = on(R"({"preset": "dgx1-v100"})");
  const Scenario flat = on(R"({"gpu": "v100-32g", "gpus_per_node": 8, "intra_node_GBps": 150})");
  const cost::Calibration cal = cost::ideal_calibration();
  const ModelStepCosts m(mesh, cal), f(flat, cal);
  const Bytes s = 1'000'000'000;
  CHECK(m.collective(Collective::AllReduce, Group::TP, s).total() == cost::seconds_to_time(1.0 * s / 25e9));
  CHECK(f.collective(Collective::AllReduce, Group::TP, s).total() == cost::seconds_to_time(1.0 * s / 150e9));
  CHECK(m.collective(Collective::AllReduce, Group::DP, s).total() == cost::seconds_to_time(1.5 * s / 50e9));
  CHECK(f.collective(Collective::AllReduce, Group::DP, s).total() == cost::seconds_to_time(1.5 * s / 150e9));
}

}  // namespace
}  // namespace strata::strategies
