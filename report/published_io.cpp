#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "report/published.hpp"
#include "report/table.hpp"
#include "sim/json_reader.hpp"
#include "strategies/memory.hpp"
#include "strategies/step_costs.hpp"

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

double num(const json& j, const char* key) {
  if (!j.contains(key) || !j.at(key).is_number()) throw Error(std::string("missing number ") + key);
  return j.at(key).get<double>();
}

json gpt_model(const json& m, bool dropout) {
  return {{"layers", m.at("layers")}, {"hidden", m.at("hidden")}, {"heads", m.at("heads")},
          {"seq_len", 2048}, {"vocab", 51200}, {"dropout", dropout}};
}

// One counted measurement: the scenario, the metric and how to read it off
// the prediction.
struct Case {
  std::string id, family, metric, note;
  double measured = 0;
  json scenario;
};

std::vector<Case> cases_of(const json& file) {
  std::vector<Case> out;
  const json& families = file.at("family_notes");
  for (const json& raw : file.at("cases")) {
    if (!raw.contains("family") || !raw.at("family").is_string()) continue;
    const std::string fam = raw.at("family").get<std::string>();
    const json c = merged(families.contains(fam) ? families.at(fam).value("defaults", json::object())
                                                 : json::object(),
                          raw);
    const json& m = c.at("model");
    const json& st = c.value("strategy", json::object());
    const json& hw = c.value("hardware", json::object());
    const json& meas = c.value("measured", json::object());
    const std::string id = c.at("id").get<std::string>();
    if (fam == "MEG21-T1") {
      // Megatron-LM 2021 Table 1: fp16, full recompute, interleaved
      // schedule; microbatch and virtual stages not stated: microbatch 1,
      // 2 virtual stages. What the code of 2021 did (gradients reduced
      // after the backward, no asynchronous tensor-parallel all-reduce, no
      // gradient-accumulation fusion) is its stack's.
      const int pp = st.at("pp").get<int>();
      json plan = {{"tp", st.at("tp")}, {"pp", pp}, {"dp", st.at("dp")}, {"recompute", "full"},
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
                    {"cluster", {{"preset", "dgx-a100-80g"}, {"nodes", hw.at("count").get<int>() / 8}}},
                    {"batch", {{"global", st.at("global_batch_seqs")}, {"micro", 1}}},
                    {"plan", plan},
                    {"stack", "megatron-lm-2021"}};
      out.push_back(k);
    } else if (fam == "KOR22" && m.contains("layers") && meas.contains("iteration_time_s_full_recompute")) {
      // Korthikanti et al. 2022 Tables 3 and 5: baseline (TP + PP, full
      // recompute) and present work (sequence parallelism + selective).
      const json& v = st.at("interleave_stages_m");
      const int gpus = hw.at("count").get<int>();
      for (bool present : {false, true}) {
        json plan = {{"tp", st.at("tp")}, {"pp", st.at("pp")}, {"dp", st.at("dp")},
                     {"precision", "fp16"}, {"sequence_parallel", present},
                     {"recompute", present ? "selective" : "full"}};
        if (v.is_number()) {
          plan["schedule"] = "interleaved";
          plan["virtual_stages"] = v;
        }
        Case k{id + (present ? "/selective+sp" : "/full-recompute"), fam, "step_time_s",
               present ? "sequence parallel + selective recompute" : "full recompute, no SP",
               num(meas, present ? "iteration_time_s_selective_plus_sp" : "iteration_time_s_full_recompute"),
               json::object()};
        k.scenario = {{"model", gpt_model(m, true)},
                      {"cluster", {{"preset", "dgx-a100-80g"}, {"nodes", std::max(1, gpus / 8)}}},
                      {"batch", {{"global", st.at("global_batch_seqs")}, {"micro", st.at("microbatch")}}},
                      {"plan", plan},
                      {"stack", "megatron-lm-2022"}};
        out.push_back(k);
      }
    } else if (fam == "KOR22" && meas.contains("iteration_time_s") && st.contains("dp")) {
      // The 530B data-parallel run (its stack reduces gradients after the
      // backward).
      json plan = {{"tp", st.at("tp")}, {"pp", st.at("pp")}, {"dp", st.at("dp")},
                   {"precision", "fp16"}, {"sequence_parallel", true}, {"recompute", "selective"},
                   {"schedule", "interleaved"}, {"virtual_stages", st.at("interleave_stages_m")}};
      Case k{id, fam, "step_time_s", "selective + SP, gradient all-reduce not overlapped",
             num(meas, "iteration_time_s"), json::object()};
      k.scenario = {{"model", gpt_model(m, true)},
                    {"cluster", {{"preset", "dgx-a100-80g"}, {"nodes", hw.at("count").get<int>() / 8}}},
                    {"batch", {{"global", st.at("global_batch_seqs")}, {"micro", st.at("microbatch")}}},
                    {"plan", plan},
                    {"stack", "megatron-lm-2022"}};
      out.push_back(k);
    } else if (fam == "DLPERF" && meas.contains("iteration_latency_ms")) {
      // DLPerf's Megatron-LM runs on V100-SXM2-16GB, 8 per node, one 100 Gb/s
      // EDR link per node: fp16 with fp32 master weights and gradient copy,
      // Adam, full recompute.
      const int gpus = hw.at("count").get<int>();
      Case k{id, fam, "step_time_s",
             "fp16, full recompute, gradient reduction after backward, V100-16GB, EDR 100 Gb/s per node",
             num(meas, "iteration_latency_ms") / 1000.0, json::object()};
      k.scenario = {
          {"model", gpt_model(m, true)},
          {"cluster", {{"gpu", {{"preset", "v100-32g"}, {"name", "v100-16g"}, {"memory_GiB", 16}}},
                       {"gpus_per_node", std::min(8, gpus)}, {"nodes", std::max(1, gpus / 8)},
                       {"inter_node_GBps_per_gpu", 12.5 / 8}}},
          {"batch", {{"global", st.at("global_batch_seqs")}, {"micro", st.at("microbatch")}}},
          {"plan", {{"tp", st.at("tp")}, {"pp", st.at("pp")}, {"dp", st.at("dp")}, {"recompute", "full"},
                    {"precision", "fp16"},
                    {"implementation", {{"attention", "standard"}, {"fp32_grad_accumulation", true},
                                        {"overlap_grad_reduce", false}}}}}};
      out.push_back(k);
    } else if (fam == "MOSAIC" && meas.contains("tokens_per_s_per_gpu")) {
      // MosaicML llm-foundry MPT runs: FSDP FULL_SHARD (ZeRO-3), flash
      // attention, ALiBi, no bias, no dropout, tied embeddings, bf16.
      const std::string gpu = hw.at("gpu").get<std::string>();
      const int gpus = hw.at("count").get<int>();
      json cluster = gpu.rfind("H100", 0) == 0 ? json{{"preset", "dgx-h100"}}
                     : gpu == "A100-40GB"      ? json{{"gpu", "a100-40g"}}
                                               : json{{"preset", "dgx-a100-80g"}};
      cluster["nodes"] = std::max(1, gpus / 8);
      const bool ckpt = st.value("activation_checkpointing", false);
      Case k{id, fam, "tokens_per_s_per_gpu", "FSDP = ZeRO-3, flash attention, bf16",
             num(meas, "tokens_per_s_per_gpu"), json::object()};
      k.scenario = {
          {"model", {{"layers", m.at("layers")}, {"hidden", m.at("hidden")}, {"heads", m.at("heads")},
                     {"seq_len", m.at("seq_len")}, {"vocab", m.value("vocab", 50368)},
                     {"position_embedding", "alibi"}, {"bias", false}, {"dropout", false}}},
          {"cluster", cluster},
          {"batch", {{"global", st.at("global_batch_seqs")}, {"micro", st.at("microbatch")}}},
          {"plan", {{"zero", 3}, {"recompute", ckpt ? "full" : "none"}, {"precision", "bf16"}}},
          {"stack", "llm-foundry"}};
      out.push_back(k);
    }
  }
  return out;
}

}  // namespace

PublishedReport validate_published(const std::string& cases_file) {
  const json file = load_json_file(cases_file);
  PublishedReport r;
  std::map<std::string, std::pair<double, int>> fam;
  for (const Case& c : cases_of(file)) {
    PublishedRow row{c.id, c.family, c.metric, c.measured, std::nullopt, 100, c.note};
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
        row.error_pct = 100.0 * std::fabs(v - c.measured) / c.measured;
      }
    } catch (const Error& e) {
      row.note = std::string("cannot express: ") + e.what();
    }
    fam[c.family].first += row.error_pct;
    fam[c.family].second += 1;
    r.mape += row.error_pct;
    r.rows.push_back(row);
  }
  for (const auto& [name, acc] : fam) r.mape_by_family.emplace_back(name, acc.first / acc.second);
  if (!r.rows.empty()) r.mape /= static_cast<double>(r.rows.size());
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
                      {"error_pct", row.error_pct}, {"note", row.note}});
    j["cases"] = rows;
    auto fam = nlohmann::ordered_json::object();
    for (const auto& [name, m] : r.mape_by_family) fam[name] = m;
    j["mape_pct_by_family"] = fam;
    j["mape_pct"] = r.mape;
    return j.dump(2) + "\n";
  }
  Table t;
  t.columns = {"case", "metric", "measured", "predicted", "error"};
  t.align = {Align::Left, Align::Left, Align::Right, Align::Right, Align::Right};
  for (const auto& row : r.rows)
    t.add_row({row.id, row.metric, fixed(row.measured, 3),
               row.predicted ? fixed(*row.predicted, 3) : "-", fixed(row.error_pct, 1) + " %"});
  if (f == Format::Csv) return to_csv(t);
  std::string out = to_text(t) + "\nMAPE by family\n";
  for (const auto& [name, m] : r.mape_by_family) out += "  " + name + ": " + fixed(m, 1) + " %\n";
  out += "  all counted cases: " + fixed(r.mape, 1) + " %\n";
  for (const auto& row : r.rows)
    if (!row.predicted) out += "\n" + row.id + ": " + row.note;
  return out + "\n";
}

std::string published_markdown(const PublishedReport& r) {
  Table t;
  t.columns = {"case", "metric", "measured", "predicted", "error", "settings"};
  t.align = {Align::Left, Align::Left, Align::Right, Align::Right, Align::Right, Align::Left};
  for (const auto& row : r.rows)
    t.add_row({row.id, row.metric, fixed(row.measured, 3),
               row.predicted ? fixed(*row.predicted, 3) : "-", fixed(row.error_pct, 1) + " %", row.note});
  std::string out = to_markdown(t) + "\n| family | MAPE |\n|---|---:|\n";
  for (const auto& [name, m] : r.mape_by_family) out += "| " + name + " | " + fixed(m, 1) + " % |\n";
  return out + "| all counted | " + fixed(r.mape, 1) + " % |\n";
}

}  // namespace strata::report
