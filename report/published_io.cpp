#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "report/published.hpp"
#include "report/table.hpp"
#include "sim/json_reader.hpp"
#include "lowering/memory.hpp"
#include "lowering/step_costs.hpp"
#include "sim/ranking.hpp"

namespace strata::report {

namespace {

using nlohmann::json;

// family defaults overlaid by the case's own fields, recursively.
json merged(const json& defaults, const json& c) {
  json out = defaults.is_object() ? defaults : json::object();
  for (const auto& [k, v] : c.items()) {
    if (v.is_object() && out.contains(k) && out[k].is_object())
      out[k] = merged(out[k], v);
    else
      out[k] = v;
  }
  return out;
}

// "+12.3 %", "-4.0 %".
std::string signed_pct(double v) { return (v >= 0 ? "+" : "") + fixed(v, 1) + " %"; }

// The case's fields are read with their JSON path (cases[3].model.layers),
// so a missing or mistyped one is bad input naming the file, the path and
// the rule. Numbers passed on into a scenario are checked here, not only in
// the scenario built from them, whose errors would name that scenario.
constexpr std::int64_t kMaxField = std::int64_t{1} << 40;
json pos_int(const JsonReader& r) { return r.as_int(1, kMaxField); }
json pos_int_at(const JsonReader& obj, std::string_view key) { return pos_int(obj.at(key)); }

// A measurement: a positive finite number (errors are relative to it).
double num(const JsonReader& meas, std::string_view key) {
  return meas.at(key).as_number(std::numeric_limits<double>::min(), std::numeric_limits<double>::max());
}

// A GPT of the Megatron papers: the case's sequence and vocabulary where it
// states them, else 2,048 and 51,200 (the padded GPT-2 vocabulary).
json gpt_model(const JsonReader& m, bool dropout) {
  return {{"layers", pos_int_at(m, "layers")}, {"hidden", pos_int_at(m, "hidden")},
          {"heads", pos_int_at(m, "heads")}, {"seq_len", m.has("seq_len") ? pos_int_at(m, "seq_len") : json(2048)},
          {"vocab", m.has("vocab") ? pos_int_at(m, "vocab") : json(51200)}, {"dropout", dropout}};
}

// A Llama 2 / 3 architecture from a case's layers, hidden, heads,
// kv_heads (absent: multi-head) and ffn_hidden: rmsnorm, no bias, SwiGLU,
// rotary, untied output layer, no dropout.
json llama_model(const JsonReader& m, int vocab) {
  const json heads = pos_int_at(m, "heads");
  return {{"layers", pos_int_at(m, "layers")}, {"hidden", pos_int_at(m, "hidden")}, {"heads", heads},
          {"kv_heads", m.has("kv_heads") ? pos_int_at(m, "kv_heads") : heads},
          {"ffn_hidden", pos_int_at(m, "ffn_hidden")},
          {"vocab", vocab}, {"mlp", "swiglu"}, {"norm", "rmsnorm"}, {"bias", false},
          {"position_embedding", "rope"}, {"tied_embeddings", false}, {"dropout", false}};
}


// A NeMo 24.07 table row's architecture and training settings, from the
// case where it states them and otherwise from NeMo-Framework-Launcher's
// training config of the model (launcher_scripts/conf/training/<family>/
// <model>.yaml): {"model", "recompute", "tp_comm_overlap"} and, where the config
// sets it apart from the stack, "fp32_grad_accumulation"; or a string
// saying why the row is not counted.
json nemo_architecture(const JsonReader& m) {
  const std::string name = m.at("name").as_string();
  // GPT-3 (NeMo's megatron_gpt defaults): GeLU MLP, LayerNorm, biases,
  // learned positions, tied embeddings, dropout 0.1; GPT-2 BPE vocabulary
  // (50,257) padded to a multiple of 128 (make_vocab_size_divisible_by).
  auto gpt3 = [](int layers, int hidden, int heads) {
    return json{{"layers", layers}, {"hidden", hidden}, {"heads", heads},
                {"ffn_hidden", 4 * hidden}, {"vocab", 50304}, {"mlp", "gelu"},
                {"norm", "layernorm"}, {"bias", true}, {"position_embedding", "learned"},
                {"tied_embeddings", true}, {"dropout", true}};
  };
  // Llama 2 / 3: llama2_*.yaml, llama3_*.yaml at 3dd35614cf43.
  // gpt3/5b.yaml (3dd35614cf43): 24 layers, hidden 4096, 32 heads, no
  // recompute, no TP overlap. gpt3/20b.yaml and 175b.yaml (056a90edf914,
  // an older snapshot): 44 x 6144 x 48 and 96 x 12288 x 96, selective
  // recompute, userbuffers TP overlap.
  if (name == "GPT3-5B") return {{"model", gpt3(24, 4096, 32)}, {"recompute", "none"}, {"tp_comm_overlap", false}};
  if (name == "GPT3-20B") return {{"model", gpt3(44, 6144, 48)}, {"recompute", "selective"}, {"tp_comm_overlap", true}};
  if (name == "GPT3-175B") return {{"model", gpt3(96, 12288, 96)}, {"recompute", "selective"}, {"tp_comm_overlap", true}};
  // No recompute in any Llama config; userbuffers TP overlap in the 70B
  // configs (ub_tp_comm_overlap: true), not in 7B, 13B, 8B.
  if (name == "LLAMA2-7B" || name == "LLAMA2-13B")
    return {{"model", llama_model(m, 32000)}, {"recompute", "none"}, {"tp_comm_overlap", false}};
  if (name == "LLAMA2-70B") return {{"model", llama_model(m, 32000)}, {"recompute", "none"}, {"tp_comm_overlap", true}};
  if (name == "LLAMA3-8B") return {{"model", llama_model(m, 128256)}, {"recompute", "none"}, {"tp_comm_overlap", false}};
  if (name == "LLAMA3-70B") return {{"model", llama_model(m, 128256)}, {"recompute", "none"}, {"tp_comm_overlap", true}};
  // Nemotron (nemotron/nemotron_8b.yaml at 089b90e6849f, nemotron_22b.yaml
  // and nemotron_340b.yaml at 3dd35614cf43): squared-ReLU MLP of two
  // matrices (priced as the GeLU MLP: the same weights and GEMMs, a
  // different element-wise op), LayerNorm1p (a LayerNorm), no bias,
  // rotary embeddings on half the head dimension (priced on all of it),
  // untied output layer, the 256,000-token SentencePiece vocabulary
  // (nemotron_2_256k.model; Nemotron-4 technical report). Selective
  // recompute in the 340B config only; userbuffers TP overlap in 8B and 22B.
  // The 340B config alone reduces gradients in bf16 (optim.grad_sync_dtype:
  // bf16; NeMo's setup_mcore_distributed_parallel sets Megatron-Core's
  // grad_reduce_in_fp32 only for "fp32", the default): a bf16 gradient buffer.
  auto nemotron = [](int layers, int hidden, int heads, int kv_heads) {
    return json{{"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"kv_heads", kv_heads},
                {"ffn_hidden", 4 * hidden}, {"vocab", 256000}, {"mlp", "gelu"},
                {"norm", "layernorm"}, {"bias", false}, {"position_embedding", "rope"},
                {"tied_embeddings", false}, {"dropout", false}};
  };
  if (name == "Nemotron-8B") return {{"model", nemotron(32, 4096, 32, 32)}, {"recompute", "none"}, {"tp_comm_overlap", true}};
  if (name == "Nemotron-22B") return {{"model", nemotron(40, 6144, 48, 48)}, {"recompute", "none"}, {"tp_comm_overlap", true}};
  if (name == "Nemotron-340B")
    return {{"model", nemotron(96, 18432, 96, 8)}, {"recompute", "selective"}, {"tp_comm_overlap", false},
            {"fp32_grad_accumulation", false}};
  return json("no launcher configuration of " + name + " is transcribed");
}

// One counted measurement: the scenario, the metric and how to read it off
// the prediction.
struct Case {
  std::string id, family, metric, note;
  double measured = 0;
  json scenario;
  std::string uncounted;  // non-empty: listed with this reason, not predicted nor counted
};

// An int field of a case (a GPU count, a degree, a batch).
int int_at(const JsonReader& obj, std::string_view key) {
  return static_cast<int>(obj.at(key).as_int(1, std::int64_t{1} << 30));
}

std::vector<Case> cases_of(const json& file, const std::string& path) {
  std::vector<Case> out;
  const JsonReader root(file, path);
  if (!root.is_object())
    root.fail("must be a JSON object with \"family_notes\" and \"cases\" (the layout of published_cases.json)");
  const JsonReader families = root.at("family_notes");
  if (!families.is_object()) families.fail("must be an object: the notes and defaults of each family");
  const JsonReader cases = root.at("cases");
  if (!cases.is_array()) cases.fail("must be an array of cases");
  static const json kNone = json::object();
  for (const JsonReader& raw : cases.elements()) {
    if (!raw.is_object()) raw.fail("must be an object (a published case with \"id\" and \"family\")");
    const std::string id = raw.at("id").as_string();
    if (id.empty()) raw.fail_at("id", "must not be empty");
    // A case of no family (ZeRO, GPipe, ...) states no layout Strata reads: not a row.
    const auto family = raw.get("family");
    if (!family) continue;
    const std::string fam = family->as_string();
    json defaults = json::object();
    if (families.has(fam)) {
      if (const auto d = families.at(fam).get("defaults")) {
        if (!d->is_object()) d->fail("must be an object: the fields every case of the family shares");
        defaults = d->json();
      }
    }
    // The case over its family's defaults, read under the case's own path.
    const json c = merged(defaults, raw.json());
    const JsonReader cr(c, path, raw.path());
    auto part = [&](std::string_view key) {
      return cr.has(key) ? cr.at(key) : JsonReader(kNone, path, cr.child_path(key));
    };
    const JsonReader m = cr.at("model");
    const JsonReader st = part("strategy");
    const JsonReader hw = part("hardware");
    const JsonReader meas = part("measured");
    if (fam == "MEG21-T1") {
      // Megatron-LM 2021 Table 1: fp16, full recompute, interleaved
      // schedule; microbatch and virtual stages not stated: microbatch 1,
      // 2 virtual stages. What the code of 2021 did (gradients reduced
      // after the backward, no asynchronous tensor-parallel all-reduce, no
      // gradient-accumulation fusion) is its stack's.
      const int pp = int_at(st, "pp");
      json plan = {{"tp", pos_int_at(st, "tp")}, {"pp", pp}, {"dp", pos_int_at(st, "dp")}, {"recompute", "full"},
                   {"precision", "fp16"}};
      if (pp > 1) {
        plan["schedule"] = "interleaved";
        plan["virtual_stages"] = 2;
      }
      Case k{id, fam, "tflops_per_gpu",
             "fp16, full recompute, gradient reduction not overlapped; 2021 Megatron-LM: TP gradient "
             "all-reduce not overlapped, separate gradient-accumulation kernel; microbatch 1, v = 2 "
             "(not stated)",
             num(meas, "tflops_per_gpu"), json::object()};
      k.scenario = {{"model", gpt_model(m, true)},
                    {"cluster", {{"preset", "dgx-a100-80g"}, {"nodes", int_at(hw, "count") / 8}}},
                    {"batch", {{"global", pos_int_at(st, "global_batch_seqs")}, {"micro", 1}}},
                    {"plan", plan},
                    {"stack", "megatron-lm-2021"}};
      out.push_back(k);
    } else if (fam == "KOR22" && m.has("layers") && meas.has("iteration_time_s_full_recompute")) {
      // Korthikanti et al. 2022 Tables 3 and 5: baseline (TP + PP, full
      // recompute) and present work (sequence parallelism + selective).
      // A number of virtual stages, or "none".
      const JsonReader v = st.at("interleave_stages_m");
      if (!v.json().is_number() && !v.is_string()) v.fail("must be a number of virtual stages or \"none\"");
      const int gpus = int_at(hw, "count");
      for (bool present : {false, true}) {
        json plan = {{"tp", pos_int_at(st, "tp")}, {"pp", pos_int_at(st, "pp")}, {"dp", pos_int_at(st, "dp")},
                     {"precision", "fp16"}, {"sequence_parallel", present},
                     {"recompute", present ? "selective" : "full"}};
        if (v.json().is_number()) {
          plan["schedule"] = "interleaved";
          plan["virtual_stages"] = pos_int(v);
        }
        Case k{id + (present ? "/selective+sp" : "/full-recompute"), fam, "step_time_s",
               present ? "sequence parallel + selective recompute" : "full recompute, no SP",
               num(meas, present ? "iteration_time_s_selective_plus_sp" : "iteration_time_s_full_recompute"),
               json::object()};
        k.scenario = {{"model", gpt_model(m, true)},
                      {"cluster", {{"preset", "dgx-a100-80g"}, {"nodes", std::max(1, gpus / 8)}}},
                      {"batch", {{"global", pos_int_at(st, "global_batch_seqs")}, {"micro", pos_int_at(st, "microbatch")}}},
                      {"plan", plan},
                      {"stack", "megatron-lm-2022"}};
        out.push_back(k);
      }
    } else if (fam == "KOR22" && meas.has("iteration_time_s") && st.has("dp")) {
      // The 530B data-parallel run (its stack reduces gradients after the
      // backward).
      json plan = {{"tp", pos_int_at(st, "tp")}, {"pp", pos_int_at(st, "pp")}, {"dp", pos_int_at(st, "dp")},
                   {"precision", "fp16"}, {"sequence_parallel", true}, {"recompute", "selective"},
                   {"schedule", "interleaved"}, {"virtual_stages", pos_int_at(st, "interleave_stages_m")}};
      Case k{id, fam, "step_time_s", "selective + SP, gradient all-reduce not overlapped",
             num(meas, "iteration_time_s"), json::object()};
      k.scenario = {{"model", gpt_model(m, true)},
                    {"cluster", {{"preset", "dgx-a100-80g"}, {"nodes", int_at(hw, "count") / 8}}},
                    {"batch", {{"global", pos_int_at(st, "global_batch_seqs")}, {"micro", pos_int_at(st, "microbatch")}}},
                    {"plan", plan},
                    {"stack", "megatron-lm-2022"}};
      out.push_back(k);
    } else if (fam == "DLPERF" && meas.has("iteration_latency_ms")) {
      // DLPerf's Megatron-LM runs on V100-SXM2-16GB, 8 per node in a DGX-1's
      // NVLink hybrid cube-mesh (the README's nvidia-smi topo -m), one 100 Gb/s
      // EDR link per node: fp16 with fp32 master weights and gradient copy,
      // Adam, full recompute. The software is Megatron-LM v2.x, the
      // megatron-lm-2021 stack: commit 8aa4619f in NGC's PyTorch 20.12
      // container with NCCL 2.8.3, run with --fp16 --checkpoint-activations
      // and no overlap or fusion flag (Oneflow-Inc/DLPerf Megatron-LM/README.md
      // and scripts/mutil_perf_pretrain_gpt_dp_mp_pp.sh). The fp16 optimizer
      // keeps fp32 master gradients beside the fp16 ones
      // (optimizer.update_master_grads: fp32_grad_accumulation holds both),
      // while the gradients are all-reduced in fp16: v2.x's local DDP calls
      // allreduce_params(reduce_after=False, fp32_allreduce=args.fp32_allreduce)
      // and --fp32-allreduce is off (megatron/training.py, backward_step).
      const int gpus = int_at(hw, "count");
      Case k{id, fam, "step_time_s",
             "Megatron-LM v2.x (megatron-lm-2021 stack), fp16, full recompute, gradient reduction after "
             "backward, V100-16GB, EDR 100 Gb/s per node",
             num(meas, "iteration_latency_ms") / 1000.0, json::object()};
      k.scenario = {
          {"model", gpt_model(m, true)},
          {"cluster", {{"preset", "dgx1-v100"},
                       {"gpu", {{"preset", "v100-32g"}, {"name", "v100-16g"}, {"memory_GiB", 16}}},
                       {"gpus_per_node", std::min(8, gpus)}, {"nodes", std::max(1, gpus / 8)},
                       {"inter_node_GBps_per_gpu", 12.5 / 8}}},
          {"batch", {{"global", pos_int_at(st, "global_batch_seqs")}, {"micro", pos_int_at(st, "microbatch")}}},
          {"plan", {{"tp", pos_int_at(st, "tp")}, {"pp", pos_int_at(st, "pp")}, {"dp", pos_int_at(st, "dp")}, {"recompute", "full"},
                    {"precision", "fp16"},
                    {"implementation", {{"attention", "standard"}, {"fp32_grad_accumulation", true},
                                        {"grad_reduce_dtype", "fp16"}, {"overlap_grad_reduce", false}}}}},
          {"stack", "megatron-lm-2021"}};
      out.push_back(k);
    } else if (fam == "MEG19" && meas.has("tflops_per_gpu")) {
      // Megatron-LM 2019 (Shoeybi et al.) on DGX-2H servers: 16 V100 SXM3
      // per node on NVSwitch, eight 100 Gb/s InfiniBand adapters a node
      // (the v100-32g preset's dgx-2 server), at the paper's 130 TFLOP/s
      // fp16 peak (39 TFLOP/s is "30% of the theoretical peak ... in a
      // DGX-2H server"); fp16, a checkpoint after every layer (Sec. 4.2),
      // one batch per model-parallel group and step (no gradient
      // accumulation in that release). The software is its stack's.
      const int gpus = int_at(hw, "count");
      const json batch = pos_int_at(st, "global_batch_seqs");
      const int dp = int_at(st, "dp");
      Case k{id, fam, "tflops_per_gpu",
             "Megatron-LM 2019 (megatron-lm-2019 stack), fp16, full recompute, DGX-2H V100 at 130 TFLOP/s; "
             "39 TFLOP/s x the paper's scaling figure",
             num(meas, "tflops_per_gpu"), json::object()};
      k.scenario = {
          {"model", gpt_model(m, true)},
          {"cluster", {{"gpu", {{"preset", "v100-32g"}, {"name", "v100-sxm3-32g-h"}, {"tflops", {{"fp16", 130}}}}},
                       {"gpus_per_node", std::min(16, gpus)}, {"nodes", std::max(1, gpus / 16)}}},
          {"batch", {{"global", batch}, {"micro", batch.get<int>() / dp}}},
          {"plan", {{"tp", pos_int_at(st, "tp")}, {"dp", dp}, {"recompute", "full"}, {"precision", "fp16"}}},
          {"stack", "megatron-lm-2019"}};
      out.push_back(k);
    } else if (fam == "MOSAIC" && meas.has("tokens_per_s_per_gpu")) {
      // MosaicML llm-foundry MPT runs: FSDP FULL_SHARD (ZeRO-3), flash
      // attention, ALiBi, no bias, no dropout, tied embeddings, bf16.
      const std::string gpu = hw.at("gpu").as_string();
      const int gpus = int_at(hw, "count");
      json cluster = gpu.rfind("H100", 0) == 0 ? json{{"preset", "dgx-h100"}}
                     : gpu == "A100-40GB"      ? json{{"gpu", "a100-40g"}}
                                               : json{{"preset", "dgx-a100-80g"}};
      cluster["nodes"] = std::max(1, gpus / 8);
      const bool ckpt = st.bool_or("activation_checkpointing", false);
      // Composer's amp_fp8: Transformer Engine's fp8_autocast over the MPT
      // blocks' te.Linear layers with its default delayed scaling
      // (composer/core/precision.py); every other precision the tables
      // list trains in bf16.
      const bool fp8 = st.string_or("precision", "") == "amp_fp8";
      Case k{id, fam, "tokens_per_s_per_gpu",
             std::string("FSDP = ZeRO-3, flash attention, ") + (fp8 ? "fp8 (delayed scaling)" : "bf16"),
             num(meas, "tokens_per_s_per_gpu"), json::object()};
      k.scenario = {
          {"model", {{"layers", pos_int_at(m, "layers")}, {"hidden", pos_int_at(m, "hidden")}, {"heads", pos_int_at(m, "heads")},
                     {"seq_len", pos_int_at(m, "seq_len")}, {"vocab", m.has("vocab") ? pos_int_at(m, "vocab") : json(50368)},
                     {"position_embedding", "alibi"}, {"bias", false}, {"dropout", false}}},
          {"cluster", cluster},
          {"batch", {{"global", pos_int_at(st, "global_batch_seqs")}, {"micro", pos_int_at(st, "microbatch")}}},
          {"plan", {{"zero", 3}, {"recompute", ckpt ? "full" : "none"}, {"precision", fp8 ? "fp8" : "bf16"}}},
          {"stack", "llm-foundry"}};
      // Composer's FSDP mixed precision where the row states it
      // (composer/trainer/mosaic_fsdp_utils.py, get_mixed_precision):
      // DEFAULT reduces gradients in fp32 (reduce_dtype float32), PURE in
      // bf16; both accumulate the shards in fp32 (the stack's).
      if (const auto mp = st.get("fsdp_mixed_precision")) {
        const std::string mode = mp->as_string();
        if (mode == "DEFAULT" || mode == "PURE")
          k.scenario["plan"]["implementation"] = {{"grad_reduce_dtype", mode == "DEFAULT" ? "fp32" : "bf16"}};
        else
          k.uncounted = "FSDP mixed precision '" + mode + "' has no Strata setting here (DEFAULT and PURE do)";
      }
      out.push_back(k);
    } else if (fam == "TITAN-A100" && meas.has("tokens_per_s_per_gpu")) {
      // torchtitan's FSDP2 runs on 64 A100-80GB (docs/performance.md):
      // fully_shard over all 64 ranks (ZeRO-3), bf16, local batch = the
      // microbatch. Vocabulary from the public model configs (Llama 3:
      // 128,256; Llama 2: 32,000); the interconnect is not stated (DGX
      // A100: eight 200 Gb/s HDR NICs per node). torchtitan's "selective
      // layer" checkpointing is every_nth at its default selective_ac_option
      // "2" (torchtitan/config/job_config.py ActivationCheckpoint: every 2nd
      // block wrapped, _apply_layer_sac); "selective op" is selective_op
      // (its save list, every second matmul rerun). Another mode (the later
      // "memory_budget") is listed, not counted.
      const std::string ac = st.at("recompute").as_string();
      const int gpus = int_at(hw, "count");
      const bool llama3 = m.at("arch").as_string().rfind("Llama3", 0) == 0;
      Case k{id, fam, "tokens_per_s_per_gpu",
             "torchtitan FSDP2 (ZeRO-3 over 64), bf16, recompute " + ac + ", DGX A100 HDR (not stated)",
             num(meas, "tokens_per_s_per_gpu"), json::object()};
      if (ac != "none" && ac != "full" && ac != "selective layer" && ac != "selective op") {
        k.uncounted = "torchtitan's '" + ac + "' activation checkpointing has no Strata policy";
      } else {
        json model = llama_model(m, llama3 ? 128256 : 32000);
        model["seq_len"] = pos_int_at(m, "seq_len");
        const int local = int_at(st, "local_batch");
        k.scenario = {{"model", model},
                      {"cluster", {{"preset", "dgx-a100-80g"}, {"nodes", gpus / 8}}},
                      {"batch", {{"global", local * gpus}, {"micro", local}}},
                      {"plan", {{"dp", gpus}, {"zero", 3}, {"recompute", ac}, {"precision", "bf16"}}},
                      {"stack", "torchtitan"}};
        if (ac == "selective layer") {
          k.scenario["plan"]["recompute"] = "every_nth";
          k.scenario["plan"]["recompute_k"] = 2;
        }
        if (ac == "selective op") k.scenario["plan"]["recompute"] = "selective_op";
      }
      out.push_back(k);
    } else if (fam == "NEMO2407" && meas.has("tokens_per_s_per_gpu")) {
      // NeMo 24.07's FP8 pre-training table on DGX H100
      // (docs/source/performance/performance_summary.md): the stated
      // parallel layout and batch; everything else from its stack
      // (configs/stacks/nemo-24.07.json) and the NeMo-Framework-Launcher
      // training config of each model (nemo_architecture below).
      const json arch = nemo_architecture(m);
      const int gpus = int_at(hw, "count");
      const int tp = int_at(st, "tp"), pp = int_at(st, "pp");
      const int vp = int_at(st, "vp_interleave");
      Case k{id, fam, "tokens_per_s_per_gpu",
             "NeMo 24.07: fp8, distributed optimizer, overlapped reduce-scatter and gather, SP with "
             "TP; recompute and TP overlap per launcher config",
             num(meas, "tokens_per_s_per_gpu"), json::object()};
      if (arch.is_string()) {
        k.uncounted = arch.get<std::string>();
      } else {
        json plan = {{"tp", tp}, {"pp", pp}, {"cp", pos_int_at(st, "cp")}, {"dp", pos_int_at(st, "dp")},
                     {"zero", 1}, {"precision", "fp8"}, {"sequence_parallel", tp > 1},
                     {"recompute", arch.at("recompute")}};
        plan["implementation"] = json::object();
        if (arch.at("tp_comm_overlap").get<bool>() && tp > 1) plan["implementation"]["tp_comm_overlap"] = "ring";
        if (arch.contains("fp32_grad_accumulation"))
          plan["implementation"]["fp32_grad_accumulation"] = arch.at("fp32_grad_accumulation");
        if (vp > 1) {
          plan["schedule"] = "interleaved";
          plan["virtual_stages"] = vp;
        }
        json model = arch.at("model");
        model["seq_len"] = pos_int_at(m, "seq_len");
        k.scenario = {{"model", model},
                      {"cluster", {{"preset", "dgx-h100"}, {"nodes", gpus / 8}}},
                      {"batch", {{"global", pos_int_at(st, "global_batch_seqs")}, {"micro", pos_int_at(st, "microbatch")}}},
                      {"plan", plan},
                      {"stack", "nemo-24.07"}};
      }
      out.push_back(k);
    }
  }
  return out;
}

// The groups of plans of one model (PublishedGroup) among `rows`, whose
// entries in `keys` name the family, metric, model, GPU count and GPU
// (empty for a row without a prediction), and each family's summary.
void rank_groups(PublishedReport& r, const std::vector<std::string>& keys) {
  std::map<std::string, std::vector<std::size_t>> by_key;
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (!keys[i].empty()) by_key[keys[i]].push_back(i);
  for (const auto& [key, members] : by_key) {
    if (members.size() < 2) continue;
    PublishedGroup g;
    g.family = r.rows[members.front()].family;
    const bool time = r.rows[members.front()].metric == "step_time_s";
    // Oriented so that larger is faster for either kind of metric.
    std::vector<double> measured, predicted;
    for (const std::size_t i : members) {
      const PublishedRow& row = r.rows[i];
      g.ids.push_back(row.id);
      measured.push_back(time ? -row.measured : row.measured);
      predicted.push_back(time ? -*row.predicted : *row.predicted);
    }
    const auto distinct = [](const std::vector<double>& v) {
      return std::any_of(v.begin(), v.end(), [&](double x) { return x != v.front(); });
    };
    if (distinct(measured) && distinct(predicted)) g.tau = kendall_tau(predicted, measured);
    const double best_pred = *std::max_element(predicted.begin(), predicted.end());
    const double best_meas = *std::max_element(measured.begin(), measured.end());
    double chosen = best_meas;
    for (std::size_t k = 0; k < predicted.size(); ++k)
      if (predicted[k] == best_pred) chosen = std::min(chosen, measured[k]);
    // The chosen plan's time over the best one's, less one: a throughput's
    // inverse ratio, or the ratio of the (negated) times.
    g.first_shortfall_pct = 100.0 * ((time ? chosen / best_meas : best_meas / chosen) - 1.0);
    r.groups.push_back(std::move(g));
  }
  std::map<std::string, std::vector<const PublishedGroup*>> by_family;
  for (const PublishedGroup& g : r.groups) by_family[g.family].push_back(&g);
  for (const auto& [family, groups] : by_family) {
    PublishedRanking f;
    f.family = family;
    f.groups = static_cast<int>(groups.size());
    std::vector<double> taus;
    for (const PublishedGroup* g : groups) {
      if (g->tau) taus.push_back(*g->tau);
      f.mean_first_shortfall_pct += g->first_shortfall_pct / static_cast<double>(groups.size());
    }
    if (!taus.empty()) f.median_tau = median(taus);
    r.ranking_by_family.push_back(f);
  }
}

}  // namespace

PublishedReport validate_published(const std::string& cases_file) {
  const json file = load_json_file(cases_file);
  PublishedReport r;
  struct Sums {
    double abs = 0, faster = 0;
    int n = 0;
  };
  std::map<std::string, Sums> fam;
  std::vector<std::string> keys;  // per row: its group of plans of one model (rank_groups)
  for (const Case& c : cases_of(file, cases_file)) {
    keys.emplace_back();
    PublishedRow row{c.id, c.family, c.metric, c.measured, std::nullopt, 100, 0, true, c.note};
    if (!c.uncounted.empty()) {
      row.counted = false;
      row.note = "not counted: " + c.uncounted;
      r.rows.push_back(row);
      continue;
    }
    try {
      const auto sc = strategies::parse_scenario(c.scenario.dump(), c.id);
      const auto mem = strategies::estimate_memory(sc);
      if (!mem.feasible()) {
        row.note = "predicted out of memory (needs " + fixed(to_GiB(mem.infeasible->needs), 1) +
                   " GiB, has " + fixed(to_GiB(mem.infeasible->has), 1) + ") although it trained";
      } else {
        const auto pr = strategies::predict_step(sc);
        const double t = to_seconds(pr.step_time);
        const double gpus = static_cast<double>(sc.cluster.gpus());
        double v = t;
        if (c.metric == "tflops_per_gpu") v = pr.hardware_flops_per_step / t / gpus / 1e12;
        if (c.metric == "tokens_per_s_per_gpu")
          v = static_cast<double>(sc.batch.global * sc.model.seq_len) / t / gpus;
        row.predicted = v;
        keys.back() = c.family + "\n" + c.metric + "\n" + c.scenario.at("model").dump() + "\n" +
                      std::to_string(sc.cluster.gpus()) + " x " + sc.cluster.gpu.name;
        row.error_pct = 100.0 * std::fabs(v - c.measured) / c.measured;
        const bool faster = c.metric == "step_time_s" ? v < c.measured : v > c.measured;
        row.faster_pct = faster ? row.error_pct : -row.error_pct;
      }
    } catch (const Error& e) {
      row.note = std::string("cannot express: ") + e.what();
    }
    Sums& f = fam[c.family];
    f.abs += row.error_pct;
    f.faster += row.faster_pct;
    f.n += 1;
    r.mape += row.error_pct;
    r.bias += row.faster_pct;
    r.counted += 1;
    r.rows.push_back(row);
  }
  for (const auto& [name, acc] : fam) {
    r.mape_by_family.emplace_back(name, acc.abs / acc.n);
    r.bias_by_family.emplace_back(name, acc.faster / acc.n);
  }
  if (r.counted > 0) {
    r.mape /= r.counted;
    r.bias /= r.counted;
  }
  rank_groups(r, keys);
  return r;
}

std::string render_published(const PublishedReport& r, Format f) {
  if (f == Format::Json) {
    nlohmann::ordered_json j;
    auto rows = nlohmann::ordered_json::array();
    for (const auto& row : r.rows)
      rows.push_back({{"id", row.id}, {"family", row.family}, {"metric", row.metric},
                      {"measured", row.measured},
                      {"predicted", row.predicted ? nlohmann::ordered_json(*row.predicted) : nullptr},
                      {"error_pct", row.counted ? nlohmann::ordered_json(row.error_pct) : nullptr},
                      {"faster_pct", row.predicted ? nlohmann::ordered_json(row.faster_pct) : nullptr},
                      {"counted", row.counted}, {"note", row.note}});
    j["cases"] = rows;
    auto fam = nlohmann::ordered_json::object();
    for (const auto& [name, m] : r.mape_by_family) fam[name] = m;
    j["mape_pct_by_family"] = fam;
    auto bias = nlohmann::ordered_json::object();
    for (const auto& [name, b] : r.bias_by_family) bias[name] = b;
    j["faster_pct_by_family"] = bias;
    j["mape_pct"] = r.mape;
    j["faster_pct"] = r.bias;
    j["counted"] = r.counted;
    auto groups = nlohmann::ordered_json::array();
    for (const auto& g : r.groups)
      groups.push_back({{"family", g.family}, {"ids", g.ids},
                        {"tau", g.tau ? nlohmann::ordered_json(*g.tau) : nullptr},
                        {"first_shortfall_pct", g.first_shortfall_pct}});
    j["groups"] = groups;
    auto ranking = nlohmann::ordered_json::object();
    for (const auto& f : r.ranking_by_family)
      ranking[f.family] = {{"groups", f.groups},
                           {"median_tau", f.median_tau ? nlohmann::ordered_json(*f.median_tau) : nullptr},
                           {"mean_first_shortfall_pct", f.mean_first_shortfall_pct}};
    j["ranking_by_family"] = ranking;
    return j.dump(2) + "\n";
  }
  Table t;
  t.columns = {"case", "metric", "measured", "predicted", "error", "faster"};
  t.align = {Align::Left, Align::Left, Align::Right, Align::Right, Align::Right, Align::Right};
  for (const auto& row : r.rows)
    t.add_row({row.id, row.metric, fixed(row.measured, 3),
               row.predicted ? fixed(*row.predicted, 3) : "-",
               row.counted ? fixed(row.error_pct, 1) + " %" : "not counted",
               row.predicted ? signed_pct(row.faster_pct) : "-"});
  if (f == Format::Csv) return to_csv(t);
  std::string out = to_text(t) + "\nMAPE by family (mean signed error: + predicted faster)\n";
  for (std::size_t i = 0; i < r.mape_by_family.size(); ++i)
    out += "  " + r.mape_by_family[i].first + ": " + fixed(r.mape_by_family[i].second, 1) + " % (" +
           signed_pct(r.bias_by_family[i].second) + ")\n";
  out += "  all " + std::to_string(r.counted) + " counted cases: " + fixed(r.mape, 1) + " % (" +
         signed_pct(r.bias) + ")\n";
  if (!r.ranking_by_family.empty()) {
    out += "\nPlans of one model ranked (cases of a family with the same model, GPUs and metric)\n";
    for (const auto& f : r.ranking_by_family)
      out += "  " + f.family + ": " + std::to_string(f.groups) + (f.groups == 1 ? " group" : " groups") +
             ", median tau-b " + (f.median_tau ? fixed(*f.median_tau, 2) : std::string("-")) +
             ", the plan ranked first " + fixed(f.mean_first_shortfall_pct, 1) +
             " % slower than the best on average\n";
  }
  for (const auto& row : r.rows)
    if (!row.predicted) out += "\n" + row.id + ": " + row.note;
  return out + "\n";
}

std::string published_markdown(const PublishedReport& r) {
  Table t;
  t.columns = {"case", "metric", "measured", "predicted", "error", "faster", "settings"};
  t.align = {Align::Left, Align::Left, Align::Right, Align::Right, Align::Right, Align::Right, Align::Left};
  for (const auto& row : r.rows)
    t.add_row({row.id, row.metric, fixed(row.measured, 3),
               row.predicted ? fixed(*row.predicted, 3) : "-",
               row.counted ? fixed(row.error_pct, 1) + " %" : "not counted",
               row.predicted ? signed_pct(row.faster_pct) : "-", row.note});
  std::string out = to_markdown(t) + "\n| family | MAPE | mean signed (+ faster) |\n|---|---:|---:|\n";
  for (std::size_t i = 0; i < r.mape_by_family.size(); ++i)
    out += "| " + r.mape_by_family[i].first + " | " + fixed(r.mape_by_family[i].second, 1) + " % | " +
           signed_pct(r.bias_by_family[i].second) + " |\n";
  out += "| all " + std::to_string(r.counted) + " counted | " + fixed(r.mape, 1) + " % | " +
         signed_pct(r.bias) + " |\n";
  if (r.ranking_by_family.empty()) return out;
  out += "\n| family | groups of plans of one model | median τ-b | the plan ranked first, slower than the best |\n"
         "|---|---:|---:|---:|\n";
  for (const auto& f : r.ranking_by_family)
    out += "| " + f.family + " | " + std::to_string(f.groups) + " | " +
           (f.median_tau ? fixed(*f.median_tau, 2) : std::string("-")) + " | " +
           fixed(f.mean_first_shortfall_pct, 1) + " % |\n";
  return out;
}

}  // namespace strata::report
