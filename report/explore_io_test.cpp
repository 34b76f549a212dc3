#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "report/explore.hpp"
#include "report/export.hpp"
#include "report/files.hpp"
#include "report/html_report.hpp"
#include "sim/error.hpp"
#include "strategies/convergence_io.hpp"
#include "strategies/scenario.hpp"
#include "tests/testing.hpp"

namespace strata::report {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test case (test cases may run in parallel processes).
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("strata-explore-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& sub) const { return (path / sub).string(); }
};

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::multiset<std::string> lines_of(const std::string& text) {
  std::multiset<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.insert(l);
  return out;
}

// GPT-2 small on one DGX H100 node: 4 tp × 4 zero × 3 recompute × 4 micro
// = 192 plans, 48 with tp 8 (does not divide 12 heads), 144 scored.
const char* const kSmall =
    R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 64},
        "plan": {"optimizer": "adamw"},
        "space": {"tp": [1, 2, 4, 8], "zero": "auto", "recompute": ["none", "selective", "full"],
                  "batch.micro": [1, 2, 4, 8]}})";
strategies::Scenario scenario() { return strategies::parse_scenario(kSmall, "small.json"); }

// The same read from a file in `dir` (explore keeps a copy beside its
// results; merge and report check the records against it).
strategies::Scenario scenario_file(const std::string& path, const std::string& text = kSmall) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  return strategies::load_scenario(path);
}

// The small scenario on eight A100s instead of eight H100s.
std::string a100_text() {
  std::string text = kSmall;
  text.replace(text.find("dgx-h100"), 8, "dgx-a100-80g");
  return text;
}

ExploreRunOptions options(const std::string& dir, int jobs) {
  ExploreRunOptions o;
  o.out_dir = dir;
  o.jobs = jobs;
  o.top_k = 5;
  return o;
}

// `sc` explored as shards 0/2 and 1/2 into t/s0 and t/s1.
void explore_shards(const strategies::Scenario& sc, const TempDir& t) {
  for (std::uint64_t i = 0; i < 2; ++i) {
    auto o = options(t / ("s" + std::to_string(i)), 1);
    o.shard_index = i;
    o.shard_count = 2;
    run_explore(sc, o);
  }
}

TEST_CASE("explore output: results.jsonl and summary.json") {
  TempDir t("out");
  const auto rep = run_explore(scenario(), options(t / "a", 2));
  CHECK(rep.result.scored == 144);
  const auto results = read_results(t / "a/results.jsonl");
  CHECK(results.plans.size() == 144);
  CHECK(results.torn_bytes == 0);
  const auto s = nlohmann::json::parse(read(t / "a/summary.json"));
  CHECK(s["counts"]["enumerated"] == 192);
  CHECK(s["counts"]["invalid"] == 48);
  CHECK(s["rejected_by_rule"]["tp-divides-heads"]["count"] == 48);
  CHECK(s["counts"]["scored"] == 144);
  CHECK(s["counts"]["pareto"].get<std::size_t>() == s["pareto"].size());
  CHECK(s["counts"]["dominated"].get<std::size_t>() == 144 - s["pareto"].size());
  CHECK(s["top"].size() == 5);
  CHECK(s["space"]["size"] == 192);
  CHECK(s["space"]["axes"]["recompute"] == nlohmann::json({"none", "selective", "full"}));
  // A record carries the plan id, batch, plan and simulate's fields.
  const auto& best = s["top"][0];
  for (const char* k : {"plan_id", "batch", "plan", "feasible", "step_time_s", "tokens_per_s_per_gpu",
                        "model_tflops_per_gpu", "mfu", "time_breakdown_s", "peak_memory_bytes",
                        "memory_breakdown_bytes"})
    CHECK_MESSAGE(best.contains(k), k);
  // The id is the hash of the canonical {batch, plan}.
  const auto text = nlohmann::json{{"batch", best["batch"]}, {"plan", best["plan"]}}.dump();
  CHECK(best["plan_id"] == strategies::plan_id_hex(strategies::fnv1a64(text)));
  // Running again into the same directory needs --resume.
  CHECK(testing::input_error_of([&] { run_explore(scenario(), options(t / "a", 1)); }) ==
        t / "a/results.jsonl" + ": already exists; pass --resume to continue it, or choose another --out");
  // Every format renders.
  CHECK(render_explore(rep.summary_json, &rep, Format::Table).find("tp-divides-heads") != std::string::npos);
  CHECK(render_explore(rep.summary_json, &rep, Format::Csv).rfind("set,rank,plan_id", 0) == 0);
  CHECK(nlohmann::json::parse(render_explore(rep.summary_json, &rep, Format::Json))["run"]["jobs"] == 2);
}

TEST_CASE("explore output: summary.json is the same for --jobs 1 and 2") {
  TempDir t("jobs");
  run_explore(scenario(), options(t / "one", 1));
  run_explore(scenario(), options(t / "two", 2));
  CHECK(read(t / "one/summary.json") == read(t / "two/summary.json"));
  CHECK(lines_of(read(t / "one/results.jsonl")) == lines_of(read(t / "two/results.jsonl")));
}

TEST_CASE("explore output: resume after a kill mid-line loses and duplicates nothing") {
  TempDir t("resume");
  run_explore(scenario(), options(t / "full", 2));
  const std::string full = read(t / "full/results.jsonl");
  const std::string summary = read(t / "full/summary.json");
  // Keep the first 40% of the bytes: some whole lines and a torn one.
  fs::create_directories(t / "cut");
  const std::size_t cut = full.size() * 2 / 5;
  REQUIRE(full[cut - 1] != '\n');
  std::ofstream(t / "cut/results.jsonl", std::ios::binary) << full.substr(0, cut);
  fs::copy_file(t / "full/manifest.json", t / "cut/manifest.json");
  const std::size_t kept = lines_of(full.substr(0, full.rfind('\n', cut) + 1)).size();

  std::atomic<std::uint64_t> scored{0};
  auto o = options(t / "cut", 2);
  o.resume = true;
  const auto coarse = strategies::coarse_scorer(scenario());
  o.scorer = [&](const strategies::Scenario& sc) {
    ++scored;
    return coarse(sc);
  };
  const auto rep = run_explore(scenario(), o);
  CHECK(rep.torn_bytes > 0);
  CHECK(rep.result.resumed == kept);
  // Only the plans not finished before, the scorer once per class of
  // equivalent plans among them.
  CHECK(rep.result.scored - rep.result.resumed == 144 - kept);
  CHECK(scored == rep.result.scored_classes);
  CHECK(rep.result.scored_classes <= 144 - kept);
  CHECK(lines_of(read(t / "cut/results.jsonl")) == lines_of(full));  // each plan once
  CHECK(read(t / "cut/summary.json") == summary);
}

TEST_CASE("explore --resume: records of a stacked scenario are its points, the stack resolved per point") {
  // DeepSpeed overlaps gradient reduction under ZeRO-3 only: each record
  // carries its own point's setting, and resume finds every record at its
  // point (the check rebuilds the point with the stack, as explore does).
  std::string text = kSmall;
  text.replace(text.find(R"("plan": {"optimizer": "adamw"})"), 30,
               R"("plan": {"optimizer": "adamw"}, "stack": "deepspeed")");
  TempDir t("stack");
  const auto sc = scenario_file(t / "s.json", text);
  run_explore(sc, options(t / "a", 1));
  const std::string first = read(t / "a/results.jsonl");
  int zero3 = 0, others = 0;
  std::istringstream in(first);
  for (std::string l; std::getline(in, l);) {
    const auto j = nlohmann::json::parse(l);
    const bool overlap = j["plan"]["implementation"]["overlap_grad_reduce"].get<bool>();
    CHECK(overlap == (j["plan"]["zero"].get<int>() == 3));
    ++(overlap ? zero3 : others);
  }
  CHECK(zero3 > 0);
  CHECK(others > 0);
  auto o = options(t / "a", 1);
  o.resume = true;
  const auto rep = run_explore(sc, o);
  CHECK(rep.result.resumed == 144);
  CHECK(read(t / "a/results.jsonl") == first);
  // The directory is bound to its stack: resuming it under another is
  // refused before anything is written, naming the difference.
  std::string other = text;
  other.replace(other.find("deepspeed"), 9, "torchtitan");
  const auto sc2 = scenario_file(t / "s2.json", other);
  const std::string refused = testing::input_error_of([&] { run_explore(sc2, o); });
  CAPTURE(refused);
  CHECK(refused.find("stack.name") != std::string::npos);
  CHECK(read(t / "a/results.jsonl") == first);
}

TEST_CASE("explore output: with a goal, records carry the time to train and the top is ranked by it") {
  // 144 plans, each record with time_to_train_s = steps_to_target x step_time_s;
  // the summary's top is in ascending time to train. Resuming the directory
  // without the goal is an error (its records would rank against none).
  TempDir t("goal");
  auto sc = scenario();
  sc.goal = strategies::Goal{{}, 2.5};
  sc.convergence = std::make_shared<const strategies::ConvergenceModel>(strategies::bundled_convergence());
  run_explore(sc, options(t / "g", 2));
  std::istringstream in(read(t / "g/results.jsonl"));
  int n = 0;
  for (std::string l; std::getline(in, l); ++n) {
    const auto j = nlohmann::json::parse(l);
    CHECK(j.at("time_to_train_s").get<double>() ==
          doctest::Approx(j.at("steps_to_target").get<double>() * j.at("step_time_s").get<double>()));
  }
  CHECK(n == 144);
  const auto s = nlohmann::json::parse(read(t / "g/summary.json"));
  CHECK(s.at("rank_by") == "time_to_train");
  double last = 0;
  for (const auto& r : s.at("top")) {
    CHECK(r.at("time_to_train_s").get<double>() >= last);
    last = r.at("time_to_train_s").get<double>();
  }
  auto o = options(t / "g", 2);
  o.resume = true;
  const std::string convergence = "{\"file\":\"" + sc.convergence->file + "\",\"fnv1a64\":\"" +
                                  strategies::plan_id_hex(strategies::fnv1a64(strategies::convergence_json(*sc.convergence))) +
                                  "\"}";
  CHECK(testing::input_error_of([&] { run_explore(scenario(), o); }) ==
        t / "g/manifest.json" + ": goal: the directory holds plans of {\"target_loss\":2.5,\"convergence\":" +
            convergence + "}, the scenario has null: use the scenario it was explored with, or another directory");
  // Another convergence model (its B_noise changed) changes every time to
  // train: named by its key, not taken for forged records.
  auto other = sc;
  auto changed = *sc.convergence;
  changed.b_noise_tokens.value *= 2;
  other.convergence = std::make_shared<const strategies::ConvergenceModel>(changed);
  CHECK(testing::input_error_of([&] { run_explore(other, o); }).find(t / "g/manifest.json: goal.convergence.fnv1a64: ") == 0);
  // So does the GPU's count of streaming multiprocessors (interference).
  other = sc;
  other.cluster.gpu.sms += 1;
  CHECK(testing::input_error_of([&] { run_explore(other, o); }).find(t / "g/manifest.json: cluster.gpu.sms: ") == 0);
  // And the tile its GEMMs run in (their waves).
  other = sc;
  other.cluster.gpu.gemm_tile = {128, 128};
  CHECK(testing::input_error_of([&] { run_explore(other, o); }).find(t / "g/manifest.json: cluster.gpu") == 0);
  // And whether it has row- and block-scaled FP8 GEMMs (fp8_recipe).
  other = sc;
  other.cluster.gpu.fp8_block_scaling = cost::Fp8BlockScaling::Native;
  CHECK(testing::input_error_of([&] { run_explore(other, o); }).find(t / "g/manifest.json: cluster.gpu") == 0);
}

TEST_CASE("explore output: the pipeline layout axis reads back, its default included") {
  // GPT-2's 12 layers over pp 4 (interleaved v 2 and 1F1B): the balanced
  // plans' records leave pipeline_layout out (their ids as before); the
  // tables and results.csv still show "balanced" for them, and a resume
  // finds every record in the space.
  TempDir t("layout");
  const std::string text = R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 64},
      "plan": {"optimizer": "adamw", "pp": 4},
      "space": {"schedule": ["1f1b", "interleaved:2"],
                "pipeline_layout": ["balanced", "embedding_head_as_layers"]}})";
  const auto sc = scenario_file(t / "layout.json", text);
  run_explore(sc, options(t / "d", 1));
  write_report(t / "d", t / "d");
  const std::string csv = read(t / "d/results.csv");
  CHECK(csv.find(",balanced,") != std::string::npos);
  CHECK(csv.find(",embedding_head_as_layers,") != std::string::npos);
  CHECK(csv.find(",'-,") == std::string::npos);
  std::istringstream in(read(t / "d/results.jsonl"));
  int balanced = 0, counted = 0;
  for (std::string l; std::getline(in, l);) {
    const auto j = nlohmann::json::parse(l);
    (j.at("plan").contains("pipeline_layout") ? counted : balanced) += 1;
  }
  CHECK(balanced == 2);
  CHECK(counted == 2);
  auto o = options(t / "d", 1);
  o.resume = true;
  CHECK(run_explore(sc, o).result.resumed == 4);
}

TEST_CASE("explore output: the reduction dtype axis, a nested key left out at its default, reads back") {
  // bf16 with fp32 accumulation, ZeRO-3 on 16 GPUs: "accumulation" records
  // leave implementation.grad_reduce_dtype out (canonical_json), "bf16"
  // ones carry it, "fp16" is rejected by its rule. results.csv and the
  // report's table name each plan's own value, the default read back from
  // a nested key left out; a resume finds them all.
  TempDir t("reduce");
  const std::string text = R"({"model": "gpt2-124m", "cluster": {"preset": "dgx-h100", "nodes": 2},
      "batch": {"global": 64}, "plan": {"optimizer": "adamw", "zero": 3, "precision": "bf16",
      "implementation": {"fp32_grad_accumulation": true}},
      "space": {"implementation.grad_reduce_dtype": ["accumulation", "bf16", "fp16"]}})";
  const auto sc = scenario_file(t / "reduce.json", text);
  const auto r = run_explore(sc, options(t / "d", 1)).result;
  CHECK(r.scored == 2);
  CHECK(r.rejected.at("grad-reduce-dtype").count == 1);
  write_report(t / "d", t / "d");
  const std::string csv = read(t / "d/results.csv");
  CHECK(csv.find(",accumulation,") != std::string::npos);
  CHECK(csv.find(",bf16,") != std::string::npos);
  const std::string md = read(t / "d/report.md");
  CHECK(md.find("| bf16 |") != std::string::npos);
  CHECK(md.find("| accumulation |") != std::string::npos);
  auto o = options(t / "d", 1);
  o.resume = true;
  CHECK(run_explore(sc, o).result.resumed == 2);
}

TEST_CASE("explore output: the cp_comm axis, p2p left out at its default and read back") {
  // cp 2 on 16 GPUs: p2p records leave implementation.cp_comm out
  // (canonical_json), all_gather and all_gather_ring ones carry it;
  // results.csv and the report name each plan's own value; a resume finds
  // all three.
  TempDir t("cpcomm");
  const std::string text = R"({"model": "gpt2-124m", "cluster": {"preset": "dgx-h100", "nodes": 2},
      "batch": {"global": 64}, "plan": {"cp": 2},
      "space": {"implementation.cp_comm": "auto"}})";
  const auto sc = scenario_file(t / "cp.json", text);
  const auto r = run_explore(sc, options(t / "d", 1)).result;
  CHECK(r.scored == 3);
  write_report(t / "d", t / "d");
  const std::string csv = read(t / "d/results.csv");
  CHECK(csv.find(",p2p,") != std::string::npos);
  CHECK(csv.find(",all_gather,") != std::string::npos);
  CHECK(csv.find(",all_gather_ring,") != std::string::npos);
  const std::string md = read(t / "d/report.md");
  CHECK(md.find("| p2p |") != std::string::npos);
  CHECK(md.find("| all\\_gather |") != std::string::npos);  // Markdown escapes the underscore
  CHECK(md.find("| all\\_gather\\_ring |") != std::string::npos);
  auto o = options(t / "d", 1);
  o.resume = true;
  CHECK(run_explore(sc, o).result.resumed == 3);
}

TEST_CASE("explore output: the FP8 recipe axis, its default read back and its unsupported values ruled out") {
  // On H100s (block scaling emulated): delayed, tensorwise and blockwise
  // are scored, mxfp8 is rejected by its rule; delayed records leave the
  // key out (canonical_json) and read back as "delayed"; a resume finds them.
  TempDir t("fp8");
  const std::string text = R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 64},
      "plan": {"optimizer": "adamw", "precision": "fp8"},
      "space": {"fp8_recipe": ["delayed", "tensorwise", "blockwise", "mxfp8"]}})";
  const auto sc = scenario_file(t / "fp8.json", text);
  const auto r = run_explore(sc, options(t / "d", 1)).result;
  CHECK(r.scored == 3);
  CHECK(r.rejected.at("fp8-recipe-supported").count == 1);
  write_report(t / "d", t / "d");
  const std::string csv = read(t / "d/results.csv");
  for (const char* v : {",delayed,", ",tensorwise,", ",blockwise,"}) CHECK(csv.find(v) != std::string::npos);
  auto o = options(t / "d", 1);
  o.resume = true;
  CHECK(run_explore(sc, o).result.resumed == 3);
}

TEST_CASE("explore output: shards 0/2 and 1/2 merged equal the unsharded run") {
  TempDir t("shard");
  const auto sc = scenario_file(t / "small.json");
  run_explore(sc, options(t / "all", 2));
  explore_shards(sc, t);
  const std::string merged = merge_explore({t / "s1", t / "s0"}, t / "merged");
  CHECK(merged == read(t / "merged/summary.json"));
  auto a = nlohmann::ordered_json::parse(read(t / "all/summary.json"));
  auto m = nlohmann::ordered_json::parse(merged);
  CHECK(m["shards"].dump() == R"({"count":2,"indices":[0,1]})");
  a.erase("shards");
  m.erase("shards");
  CHECK(a.dump() == m.dump());  // the same text, key order included
  CHECK(lines_of(read(t / "merged/results.jsonl")) == lines_of(read(t / "all/results.jsonl")));
  // The merged directory is one of its own: its manifest names both shards, and it merges again.
  CHECK(nlohmann::json::parse(read(t / "merged/manifest.json"))["shards"].dump() == R"({"count":2,"indices":[0,1]})");
  CHECK(merge_explore({t / "merged"}, t / "again") == merged);

  // The same shard twice is an error.
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s0"}, t / "bad"); })
            .find("shards.indices[0]: shard 0 is merged twice") != std::string::npos);
  CHECK(!fs::exists(t / "bad"));

  // Another path to the same scenario is merged (the path may differ between machines).
  auto moved = nlohmann::json::parse(read(t / "s0/summary.json"));
  moved["scenario"] = "elsewhere/small.json";
  std::ofstream(t / "s0/summary.json") << moved.dump();
  CHECK(nlohmann::json::parse(merge_explore({t / "s1", t / "s0"}, t / "ok2"))["counts"] == a["counts"]);
}

TEST_CASE("merge: a shard of another cluster is refused, naming what differs") {
  // Shard 1 explored on A100s: its summary's gpu and its manifest differ;
  // the records would rank A100 figures against H100 ones.
  TempDir t("merge-other");
  auto o = options(t / "s0", 1);
  o.shard_count = 2;
  run_explore(scenario_file(t / "h100.json"), o);
  o = options(t / "s1", 1);
  o.shard_index = 1;
  o.shard_count = 2;
  run_explore(scenario_file(t / "a100.json", a100_text()), o);
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }) ==
        t / "s1/summary.json" + ": explores another model, cluster or space than " + t / "s0/summary.json");
  // The summary made to agree: the manifest still tells.
  std::ofstream(t / "s1/summary.json") << read(t / "s0/summary.json").replace(
      read(t / "s0/summary.json").find("\"indices\": [\n      0"), 22, "\"indices\": [\n      1");
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }) ==
        t / "s1/manifest.json" + ": cluster.name: is \"dgx-a100-80g\" and " + t / "s0/manifest.json" +
            " has \"dgx-h100\": the directories explore different scenarios");
  CHECK(!fs::exists(t / "m"));
}

TEST_CASE("report: a torn last line is refused, not left out") {
  // The record being written when the run was killed is missing from the
  // file but not from the summary: a report without it would show another
  // top and front. explore --resume cuts it and scores the plan again.
  TempDir t("report-torn");
  const auto sc = scenario_file(t / "small.json");
  explore_shards(sc, t);
  const std::string whole = read(t / "s0/results.jsonl");
  std::ofstream(t / "s0/results.jsonl", std::ios::binary) << whole.substr(0, whole.size() - 10);
  CHECK(testing::input_error_of([&] { write_report(t / "s0", t / "r"); }) ==
        t / "s0/results.jsonl" + ": ends in a torn line (the run was killed while writing it): finish the run "
                                  "with explore --resume before reporting it");
  CHECK(!fs::exists(t / "r"));
  std::ofstream(t / "s0/results.jsonl", std::ios::binary) << whole;
  CHECK(write_report(t / "s0", t / "r").find("report.html") != std::string::npos);
}

TEST_CASE("merge: a shard without its results, torn or cut short is refused") {
  // A shard whose summary counts 72 scored plans must hold 72 records:
  // anything less was lost or never written, and merging it would report a
  // front and top of a part of the space as the whole.
  TempDir t("merge-incomplete");
  const auto sc = scenario_file(t / "small.json");
  explore_shards(sc, t);
  const std::string whole = read(t / "s1/results.jsonl");
  fs::remove(t / "s1/results.jsonl");
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }) ==
        t / "s1/results.jsonl" + ": file not found: the shard has no results");
  std::ofstream(t / "s1/results.jsonl", std::ios::binary) << whole.substr(0, whole.size() / 2);
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }) ==
        t / "s1/results.jsonl" + ": ends in a torn line (the run was killed while writing it): finish the "
                                  "shard with explore --resume before merging it");
  std::ofstream(t / "s1/results.jsonl", std::ios::binary) << whole.substr(0, whole.rfind('\n', whole.size() / 2) + 1);
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); })
            .find("plans and " + t / "s1/summary.json" + " counts 72 scored: the shard is incomplete") !=
        std::string::npos);
  CHECK(!fs::exists(t / "m"));
}

TEST_CASE("merge: a forged record is refused by its id, its space or its shard") {
  // Each record's plan_id must be the hash of its own batch and plan, and
  // that plan must be one of the space's, in the directory's shard: a line
  // with a made-up step time would otherwise top the merged ranking.
  TempDir t("merge-forged");
  const auto sc = scenario_file(t / "small.json");
  explore_shards(sc, t);
  const std::string s0 = read(t / "s0/results.jsonl");
  const std::string s1 = read(t / "s1/results.jsonl");
  const std::string first = s1.substr(0, s1.find('\n'));
  auto forge = [&](const std::string& extra) {
    std::ofstream(t / "s0/results.jsonl", std::ios::binary) << s0 << extra << "\n";
  };
  // 1. The figures of a real plan, the step time made up, the id kept: its
  //    shard is 1, not 0.
  auto rec = nlohmann::json::parse(first);
  rec["step_time_s"] = 1e-6;
  forge(rec.dump());
  const std::string line = t / "s0/results.jsonl:73";
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); })
            .find(line + ": plan: plan " + rec["plan_id"].get<std::string>() + " is plan ") != std::string::npos);
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); })
            .find("in shard 1/2, not in this directory's shard 0/2") != std::string::npos);
  // 2. A plan outside the space (microbatch 3 is not listed), its id right.
  rec["batch"]["micro"] = 3;
  const auto id = strategies::plan_id_hex(
      strategies::fnv1a64(nlohmann::json{{"batch", rec["batch"]}, {"plan", rec["plan"]}}.dump()));
  rec["plan_id"] = id;
  forge(rec.dump());
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }) ==
        line + ": plan: plan " + id + " is not a plan of the explored space (" + t / "s0/scenario.json" + ")");
  // 3. The id not the hash of the record's batch and plan.
  rec["plan_id"] = "00000000000000ab";
  forge(rec.dump());
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }) ==
        line + ": plan_id: 00000000000000ab is not the id of the record's batch and plan (FNV-1a 64 of them is " +
            id + "): the record was not written by strata explore");
  // 4. A breakdown figure report would refuse (below 0), in a record of
  //    the shard's own: merge and export refuse it too.
  const std::string own = s0.substr(0, s0.find('\n'));
  auto mine = nlohmann::json::parse(own);
  REQUIRE(mine["time_breakdown_s"].contains("compute"));
  mine["time_breakdown_s"]["compute"] = -1.0;
  forge(mine.dump());
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); })
            .find(line + ": time_breakdown_s.compute: ") == 0);
  mine = nlohmann::json::parse(own);
  mine["memory_breakdown_bytes"]["activations"] = -5;
  forge(mine.dump());
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); })
            .find(line + ": memory_breakdown_bytes.activations: ") == 0);
  // 5. A key twice: a plain parse keeps the last (the made-up step time).
  forge(own.substr(0, own.size() - 1) + ", \"step_time_s\": 1e-6}");
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }) ==
        line + ": step_time_s: duplicate key (JSON objects name each key once)");
  CHECK(!fs::exists(t / "m"));
}

TEST_CASE("merge and resume: a plan several points share is in each of their shards") {
  // recompute_k applies only with every_k: with recompute none, k 1 and 2
  // are one plan (one id) at two indices, one in each shard of 2. Each
  // shard's record of it is its own, not another shard's.
  TempDir t("shared-plan");
  std::string text = kSmall;
  text.replace(text.find(R"("recompute": ["none", "selective", "full"])"), 42,
               R"("recompute": ["none", "every_k"], "recompute_k": [1, 2])");
  const auto sc = scenario_file(t / "k.json", text);
  REQUIRE(sc.space->size() == 4 * 4 * 4 * 2 * 2);
  for (std::uint64_t i = 0; i < 2; ++i) {
    auto o = options(t / ("s" + std::to_string(i)), 1);
    o.shard_index = i;
    o.shard_count = 2;
    run_explore(sc, o);
    o.resume = true;
    CHECK(run_explore(sc, o).result.resumed > 0);
  }
  const auto m = nlohmann::json::parse(merge_explore({t / "s0", t / "s1"}, t / "m"));
  CHECK(m["counts"]["scored"].get<int>() > 0);
  // Each plan once in the merged records.
  const auto merged = lines_of(read(t / "m/results.jsonl"));
  CHECK(std::set<std::string>(merged.begin(), merged.end()).size() == merged.size());
}

TEST_CASE("explore --resume: another cluster is refused before anything is written") {
  // The directory's plans were scored on H100s; resuming with the A100
  // scenario would keep every H100 figure under an A100 summary. The
  // refusal names the manifest key that differs, and DIR/scenario.json
  // (what report re-simulates) is the H100 one still.
  TempDir t("resume-other");
  run_explore(scenario_file(t / "h100.json"), options(t / "d", 2));
  const std::string copy = read(t / "d/scenario.json"), manifest = read(t / "d/manifest.json"),
                    summary = read(t / "d/summary.json");
  auto o = options(t / "d", 2);
  o.resume = true;
  const auto a100 = scenario_file(t / "a100.json", a100_text());
  CHECK(testing::input_error_of([&] { run_explore(a100, o); }) ==
        t / "d/manifest.json" + ": cluster.name: the directory holds plans of \"dgx-h100\", the scenario has "
                                "\"dgx-a100-80g\": use the scenario it was explored with, or another directory");
  // Without --resume: refused for the existing results, the copy untouched too.
  CHECK(testing::input_error_of([&] { run_explore(a100, options(t / "d", 2)); })
            .find("already exists; pass --resume") != std::string::npos);
  CHECK(read(t / "d/scenario.json") == copy);
  CHECK(read(t / "d/manifest.json") == manifest);
  CHECK(read(t / "d/summary.json") == summary);
  // Another shard of the same scenario is another directory too.
  o.shard_count = 2;
  CHECK(testing::input_error_of([&] { run_explore(scenario_file(t / "h100.json"), o); })
            .find("manifest.json: shards.count: the directory holds plans of 1, the scenario has 2") !=
        std::string::npos);
  // Another build of strata (another commit) may price plans otherwise: a
  // directory it wrote is not resumed, nor one whose build is unrecorded.
  o.shard_count = 1;
  auto m = nlohmann::json::parse(manifest);
  CHECK(m.at("build").is_string());
  CHECK(!m.at("build").get<std::string>().empty());
  m["build"] = "git 000000000000";
  std::ofstream(t / "d/manifest.json") << m.dump(2);
  CHECK(testing::input_error_of([&] { run_explore(scenario_file(t / "h100.json"), o); }) ==
        t / "d/manifest.json" + ": build: the directory was written by \"git 000000000000\", this is \"" +
            nlohmann::json::parse(manifest).at("build").get<std::string>() +
            "\", which may price its plans otherwise: explore again into another directory");
  m.erase("build");
  std::ofstream(t / "d/manifest.json") << m.dump(2);
  CHECK(testing::input_error_of([&] { run_explore(scenario_file(t / "h100.json"), o); })
            .find("build: the directory was written by an unrecorded build") != std::string::npos);
  // A directory without a manifest (an older strata's, or made by hand) is not resumed.
  fs::remove(t / "d/manifest.json");
  o.shard_count = 1;
  CHECK(testing::input_error_of([&] { run_explore(scenario_file(t / "h100.json"), o); })
            .find("manifest.json: file not found") != std::string::npos);
}

TEST_CASE("explore --resume: records of another shard or forged ones are refused") {
  // Shard 0/2's directory given shard 1's records: they are plans of the
  // space, but not of this shard; a made-up record breaks its id.
  TempDir t("resume-forged");
  const auto sc = scenario_file(t / "small.json");
  auto o = options(t / "s0", 1);
  o.shard_count = 2;
  run_explore(sc, o);
  o.shard_index = 1;
  o.out_dir = t / "s1";
  run_explore(sc, o);
  const std::string s1 = read(t / "s1/results.jsonl");
  std::ofstream(t / "s0/results.jsonl", std::ios::app | std::ios::binary) << s1.substr(0, s1.find('\n') + 1);
  o.shard_index = 0;
  o.out_dir = t / "s0";
  o.resume = true;
  CHECK(testing::input_error_of([&] { run_explore(sc, o); }).find("not in this directory's shard 0/2") !=
        std::string::npos);
}

TEST_CASE("explore and merge: a directory another strata holds is refused") {
  // The lock (DIR/strata.lock) names its holder; nothing is written.
  TempDir t("locked");
  const auto sc = scenario_file(t / "small.json");
  run_explore(sc, options(t / "d", 1));
  const std::string results = read(t / "d/results.jsonl");
  const DirLock held(t / "d", "explore");
  auto o = options(t / "d", 1);
  o.resume = true;
  const std::string busy = t / "d" + ": is in use by another strata (pid " + std::to_string(::getpid()) +
                           ", explore); wait for it to finish, or choose another directory";
  CHECK(testing::input_error_of([&] { run_explore(sc, o); }) == busy);
  CHECK(testing::input_error_of([&] { merge_explore({t / "d"}, t / "m"); }) == busy);
  CHECK(read(t / "d/results.jsonl") == results);
}

TEST_CASE("explore: a results.jsonl link is refused, nothing created where it points") {
  // A dangling DIR/results.jsonl link would make explore append to a file
  // outside DIR.
  TempDir t("link");
  fs::create_directories(t / "d");
  fs::create_symlink(t / "outside.jsonl", t / "d/results.jsonl");
  auto o = options(t / "d", 1);
  o.resume = true;
  CHECK(testing::input_error_of([&] { run_explore(scenario(), o); }).find("results.jsonl: is a symbolic link") !=
        std::string::npos);
  CHECK(!fs::exists(t / "outside.jsonl"));
  // A planted link at a summary's temporary name of old leads nowhere either
  // (in an explore's own directory: one that is not is refused outright).
  fs::remove(t / "d/results.jsonl");
  run_explore(scenario(), options(t / "d", 1));
  std::ofstream(t / "victim") << "precious";
  fs::create_symlink(t / "victim", t / "d/summary.json.tmp");
  o = options(t / "d", 1);
  o.resume = true;
  run_explore(scenario(), o);
  CHECK(read(t / "victim") == "precious");
}

TEST_CASE("explore: a directory of someone's own files is refused; an empty one or an explore's is used") {
  // Only results.jsonl was checked: summary.json, scenario.json and report.*
  // of a directory that is not an explore's were replaced.
  TempDir t("foreign");
  fs::create_directories(t / "e5");
  std::ofstream(t / "e5/summary.json") << "mine";
  const std::string refused = t / "e5" +
                              ": is not empty (it holds summary.json) and is not a strata explore directory (no "
                              "manifest.json): explore would replace files there; choose a new or empty directory";
  CHECK(testing::input_error_of([&] { run_explore(scenario(), options(t / "e5", 1)); }) == refused);
  auto o = options(t / "e5", 1);
  o.resume = true;
  CHECK(testing::input_error_of([&] { run_explore(scenario(), o); }) == refused);
  CHECK(read(t / "e5/summary.json") == "mine");
  CHECK(!fs::exists(t / "e5/strata.lock"));  // nothing made there either
  // An empty directory, one holding only the scenario explored, and an
  // explore's own (with --resume) are used.
  fs::create_directories(t / "empty");
  CHECK(run_explore(scenario(), options(t / "empty", 1)).result.scored == 144);
  const auto sc = scenario_file(t / "own/small.json");
  CHECK(run_explore(sc, options(t / "own", 1)).result.scored == 144);
  CHECK(read(t / "own/small.json") == kSmall);
  o = options(t / "own", 1);
  o.resume = true;
  CHECK(run_explore(sc, o).result.resumed == 144);
}

TEST_CASE("merge: into one of its shards, another explore or someone's own files is refused") {
  // Before: merge wrote over any directory, another scenario's explore
  // included, and into a shard it was reading.
  TempDir t("merge-into");
  const auto sc = scenario_file(t / "small.json");
  explore_shards(sc, t);
  const std::string s0 = read(t / "s0/summary.json");
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "s0"); }) ==
        t / "s0" + ": is one of the directories merged: merge writes a new directory (--out), it does not add "
                   "shards to one of them");
  CHECK(testing::input_error_of([&] { merge_explore({t / "s1", t / "s0"}, t / "s0"); }).find("is one of the") !=
        std::string::npos);
  CHECK(read(t / "s0/summary.json") == s0);
  // An explore of the A100 scenario at the output.
  run_explore(scenario_file(t / "a100/a100.json", a100_text()), options(t / "a100", 1));
  const std::string other = read(t / "a100/summary.json");
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "a100"); }) ==
        t / "a100/manifest.json" +
            ": cluster.name: the directory holds plans of \"dgx-a100-80g\", the merge has \"dgx-h100\": merge "
            "into a new directory");
  CHECK(read(t / "a100/summary.json") == other);
  // The unsharded explore of the same scenario holds other shards.
  run_explore(sc, options(t / "all", 1));
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "all"); }) ==
        t / "all/manifest.json" + ": shards.count: the directory holds plans of 1, the merge has 2: merge into a "
                                  "new directory");
  // Someone's own files.
  fs::create_directories(t / "mine");
  std::ofstream(t / "mine/summary.json") << "mine";
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "mine"); }) ==
        t / "mine" + ": is not empty (it holds summary.json) and is not a strata explore directory (no "
                     "manifest.json): merge would replace files there; choose a new or empty directory");
  CHECK(read(t / "mine/summary.json") == "mine");
  CHECK(!fs::exists(t / "mine/strata.lock"));
  // Shards are read under a shared lock: another reader of a shard (a
  // report for another --out) does not stop the merge, an explore writing
  // one does, naming it.
  {
    const DirReadLock reading(t / "s0");
    CHECK(merge_explore({t / "s0", t / "s1"}, t / "shared") == merge_explore({t / "s0", t / "s1"}, t / "shared2"));
    CHECK(fs::exists(t / "shared/summary.json"));
  }
  {
    const DirLock writing(t / "s1", "explore");
    CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "held"); })
              .find(t / "s1" + ": is in use by another strata") == 0);
    CHECK(!fs::exists(t / "held/summary.json"));
  }
  // A new or empty directory, and the same merge again over its own output.
  fs::create_directories(t / "empty");
  const std::string merged = merge_explore({t / "s0", t / "s1"}, t / "empty");
  CHECK(merge_explore({t / "s1", t / "s0"}, t / "empty") == merged);
  CHECK(merge_explore({t / "s0", t / "s1"}, t / "new") == merged);
}

TEST_CASE("report: a directory an explore holds is refused, written in place or read for another --out") {
  // Before: `strata report D` wrote report.* into D while `explore --resume`
  // held it.
  TempDir t("report-locked");
  run_explore(scenario_file(t / "small.json"), options(t / "d", 1));
  {
    const DirLock held(t / "d", "explore");
    const std::string busy = t / "d" + ": is in use by another strata (pid " + std::to_string(::getpid()) +
                             ", explore); wait for it to finish, or choose another directory";
    CHECK(testing::input_error_of([&] { write_report(t / "d", t / "d"); }) == busy);
    CHECK(!fs::exists(t / "d/report.html"));
    CHECK(testing::input_error_of([&] { write_report(t / "d", t / "r"); }) == busy);
    CHECK(!fs::exists(t / "r"));
  }
  CHECK(write_report(t / "d", t / "d").find("report.html") != std::string::npos);
  CHECK(fs::exists(t / "d/report.html"));
  CHECK(write_report(t / "d", t / "r").find("report.html") != std::string::npos);
  // Another explore's directory as --out: refused, its report untouched.
  run_explore(scenario_file(t / "small.json"), options(t / "e", 1));
  write_report(t / "e", t / "e");
  const auto before = fs::last_write_time(t / "e/report.html");
  CHECK(testing::input_error_of([&] { write_report(t / "d", t / "e"); }) ==
        t / "e" + ": is another explore output directory (it holds summary.json): a report of " + t / "d" +
            " there would replace its own; choose another --out");
  CHECK(fs::last_write_time(t / "e/report.html") == before);
  // A report being written in place holds the directory as explore does.
  {
    const DirLock reporting(t / "d", "report");
    auto o = options(t / "d", 1);
    o.resume = true;
    CHECK(testing::input_error_of([&] { run_explore(strategies::load_scenario(t / "small.json"), o); })
              .find("is in use by another strata (pid " + std::to_string(::getpid()) + ", report)") !=
          std::string::npos);
  }
  // A report not in place has no lock file made in a directory of its own.
  CHECK(!fs::exists(t / "r/strata.lock"));
}

TEST_CASE("explore output: a space over --max-plans is refused before anything is written") {
  // The space holds 4 tp · 4 zero · 3 recompute · 4 micro = 192 plans.
  TempDir t("limit");
  auto o = options(t / "out", 1);
  o.max_plans = 191;
  CHECK(testing::input_error_of([&] { run_explore(scenario(), o); }) ==
        "small.json: space: enumerates 192 plans, more than --max-plans 191; list fewer values "
        "for some axes, split the sweep with --shard i/n, or raise --max-plans");
  CHECK(!fs::exists(t / "out"));
  // Half of it per shard fits.
  o.max_plans = 96;
  o.shard_count = 2;
  CHECK(run_explore(scenario(), o).result.enumerated == 96);
}

TEST_CASE("report: a scenario copy or summary that is not the manifest's is refused") {
  // DIR/scenario.json is what report re-simulates the best plan on: an
  // A100 copy beside H100 records would replay the wrong cluster. The
  // manifest catches it, and a summary of another model too.
  TempDir t("report-check");
  run_explore(scenario_file(t / "h100.json"), options(t / "d", 2));
  CHECK(load_report_data(t / "d").plans.size() == 144);
  const std::string copy = read(t / "d/scenario.json");
  std::ofstream(t / "d/scenario.json") << a100_text();
  CHECK(testing::input_error_of([&] { load_report_data(t / "d"); }) ==
        t / "d/manifest.json" + ": cluster.name: the directory holds plans of \"dgx-h100\", " + t /
            "d/scenario.json" + " has \"dgx-a100-80g\": use the scenario it was explored with, or another directory");
  std::ofstream(t / "d/scenario.json") << copy;
  auto s = nlohmann::json::parse(read(t / "d/summary.json"));
  s["model"] = "llama3-8b";
  std::ofstream(t / "d/summary.json") << s.dump();
  CHECK(testing::input_error_of([&] { load_report_data(t / "d"); }) ==
        t / "d/summary.json" + ": model: is \"llama3-8b\" and " + t / "d/manifest.json" +
            " says \"gpt2-124m\": the summary is not of the records beside it");
}

// The record of plan `id` in `path` changed by `edit`; its line number (from 1).
std::size_t edit_record(const std::string& path, const std::string& id,
                        const std::function<void(nlohmann::ordered_json&)>& edit) {
  std::istringstream in(read(path));
  std::string out, l;
  std::size_t n = 0, at = 0;
  while (std::getline(in, l)) {
    ++n;
    if (l.find("\"plan_id\":\"" + id + "\"") != std::string::npos) {
      auto j = nlohmann::ordered_json::parse(l);
      edit(j);
      l = j.dump();
      at = n;
    }
    out += l + "\n";
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
  return at;
}

// Every record of `path` that `which` picks changed by `edit`; how many.
std::size_t edit_records(const std::string& path, const std::function<bool(const nlohmann::ordered_json&)>& which,
                         const std::function<void(nlohmann::ordered_json&)>& edit) {
  std::istringstream in(read(path));
  std::string out;
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);) {
    if (auto j = nlohmann::ordered_json::parse(l); which(j)) {
      edit(j);
      l = j.dump();
      ++n;
    }
    out += l + "\n";
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
  return n;
}

// The equivalence classes of the plans `ids` in `path`.
std::set<std::string> classes_of(const std::string& path, const std::set<std::string>& ids) {
  std::set<std::string> out;
  std::istringstream in(read(path));
  for (std::string l; std::getline(in, l);)
    if (const auto j = nlohmann::json::parse(l); ids.count(j["plan_id"].get<std::string>()))
      out.insert(j["class_id"].get<std::string>());
  return out;
}

// Every record of the equivalence class of plan `id` in `path` changed by
// `edit` (a class's plans share their figures: one changed alone disagrees
// with the others). How many.
std::size_t edit_class(const std::string& path, const std::string& id,
                       const std::function<void(nlohmann::ordered_json&)>& edit) {
  const auto cls = classes_of(path, {id});
  return edit_records(path, [&](const auto& j) { return cls.count(j["class_id"].template get<std::string>()) > 0; },
                      edit);
}

TEST_CASE("resume, merge and report: a record of a real plan with forged figures is refused") {
  // The plan id is the record's own and the plan is the space's: only its
  // figures are made up. A step time alone disagrees with the record's
  // throughput; both scaled together agree, and the re-score (the plan
  // explored alone, as explore scores it) refuses them.
  TempDir t("forged-figures");
  const auto sc = scenario_file(t / "small.json");
  run_explore(sc, options(t / "d", 2));
  const auto s = nlohmann::json::parse(read(t / "d/summary.json"));
  // The worst of the top list (its record is in results.jsonl, exact).
  std::string id;
  for (const auto& r : s["top"])
    if (r["granularity"] == "chunk") id = r["plan_id"].get<std::string>();
  REQUIRE(!id.empty());
  const std::string clean = read(t / "d/results.jsonl");
  auto resume = [&] {
    auto o = options(t / "d", 1);
    o.resume = true;
    run_explore(sc, o);
  };
  const std::string summary = read(t / "d/summary.json");

  // 1. The step time made up: the record's figures disagree with each other.
  const std::size_t line = edit_record(t / "d/results.jsonl", id, [](auto& j) { j["step_time_s"] = 1e-6; });
  const std::string where = t / "d/results.jsonl:" + std::to_string(line);
  for (const auto& msg : {testing::input_error_of(resume), testing::input_error_of([&] { load_report_data(t / "d"); }),
                          testing::input_error_of([&] { load_export_scenario(t / "d", 1, ""); })})
    CHECK(msg.rfind(where + ": tokens_per_s_per_gpu: is ", 0) == 0);
  CHECK(read(t / "d/summary.json") == summary);

  // 2. Step time and throughput forged together, the peak too, for its
  // whole equivalence class (one plan alone disagrees with its class): the
  // re-score refuses them, naming the first of them it re-scores.
  std::ofstream(t / "d/results.jsonl", std::ios::binary | std::ios::trunc) << clean;
  REQUIRE(edit_class(t / "d/results.jsonl", id, [](auto& j) {
            j["step_time_s"] = j["step_time_s"].template get<double>() / 1000;
            j["tokens_per_s_per_gpu"] = j["tokens_per_s_per_gpu"].template get<double>() * 1000;
          }) >= 1);
  for (const auto& msg : {testing::input_error_of(resume), testing::input_error_of([&] { load_report_data(t / "d"); }),
                          testing::input_error_of([&] { load_export_scenario(t / "d", 1, ""); })}) {
    CHECK(msg.rfind(t / "d/results.jsonl:", 0) == 0);
    CHECK(msg.find(": step_time_s: is ") != std::string::npos);
  }
  CHECK(testing::input_error_of(resume).find(" re-scored: the record's figures are not what strata explore computes") !=
        std::string::npos);
  CHECK(read(t / "d/summary.json") == summary);
  std::ofstream(t / "d/results.jsonl", std::ios::binary | std::ios::trunc) << clean;
  edit_record(t / "d/results.jsonl", id, [](auto& j) { j["peak_memory_bytes"] = 0; });
  CHECK(testing::input_error_of(resume) == where + ": peak_memory_bytes: must be above 0 (explore records only plans it scored)");

  // 3. Merge: shards with a consistent forgery in one of them.
  explore_shards(sc, t);
  const auto s0 = nlohmann::json::parse(read(t / "s0/summary.json"));
  std::string id0;
  for (const auto& r : s0["top"])
    if (r["granularity"] == "chunk") id0 = r["plan_id"].get<std::string>();
  REQUIRE(!id0.empty());
  REQUIRE(edit_class(t / "s0/results.jsonl", id0, [](auto& j) {
            j["step_time_s"] = j["step_time_s"].template get<double>() / 1000;
            j["tokens_per_s_per_gpu"] = j["tokens_per_s_per_gpu"].template get<double>() * 1000;
          }) >= 1);
  const std::string merged_msg = testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); });
  // Its refined record (where it has one) or its coarse one is named.
  CHECK(merged_msg.find(": step_time_s: is ") != std::string::npos);
  CHECK(merged_msg.find(" re-scored: the record's figures are not what strata explore computes") != std::string::npos);
  CHECK(!fs::exists(t / "m"));
  // Untouched, every check passes.
  std::ofstream(t / "d/results.jsonl", std::ios::binary | std::ios::trunc) << clean;
  CHECK_NOTHROW(resume());
  CHECK(read(t / "d/summary.json") == summary);
  CHECK(load_report_data(t / "d").plans.size() == 144);
}

// Every record of `path` but those of the equivalence classes of `keep`
// made slower with figures that agree with each other and with their class
// (step time doubled, throughput halved): a forgery the record checks cannot
// see, which leaves the top and the Pareto front as they were. How many
// records it changed.
std::size_t forge_all_but(const std::string& path, const std::set<std::string>& keep) {
  const auto kept = classes_of(path, keep);
  return edit_records(
      path, [&](const auto& j) { return kept.count(j["class_id"].template get<std::string>()) == 0; },
      [](auto& j) {
        j["step_time_s"] = j["step_time_s"].template get<double>() * 2;
        j["tokens_per_s_per_gpu"] = j["tokens_per_s_per_gpu"].template get<double>() / 2;
      });
}

// The plans a summary shows (its top and Pareto front), by id.
std::set<std::string> shown_in(const std::string& summary_path) {
  const auto s = nlohmann::json::parse(read(summary_path));
  std::set<std::string> ids;
  for (const char* list : {"top", "pareto"})
    for (const auto& r : s[list]) ids.insert(r["plan_id"].get<std::string>());
  return ids;
}

TEST_CASE("report, export, resume and merge: records the summary does not show are re-scored by a random sample") {
  // The shown plans are re-scored whole; a consistent forgery of the others
  // (here every one of them, slower, so the shown lists stay the same) was
  // read as it stood. A sample of kDrawnPlans of them drawn at random is
  // re-scored too: with every one forged, any draw finds one.
  TempDir t("forged-unshown");
  const auto sc = scenario_file(t / "small.json");
  run_explore(sc, options(t / "d", 2));
  const std::string clean = read(t / "d/results.jsonl");
  const std::string summary = read(t / "d/summary.json");
  REQUIRE(forge_all_but(t / "d/results.jsonl", shown_in(t / "d/summary.json")) > 0);
  auto resume = [&] {
    auto o = options(t / "d", 1);
    o.resume = true;
    run_explore(sc, o);
  };
  for (const auto& msg : {testing::input_error_of([&] { load_report_data(t / "d"); }),
                          testing::input_error_of([&] { load_export_scenario(t / "d", 1, ""); }),
                          testing::input_error_of(resume)}) {
    CHECK(msg.find(t / "d/results.jsonl:") == 0);
    CHECK(msg.find(": step_time_s: is ") != std::string::npos);
    CHECK(msg.find(" re-scored: the record's figures are not what strata explore computes") != std::string::npos);
  }
  CHECK(read(t / "d/summary.json") == summary);
  // Merge: one shard forged so.
  explore_shards(sc, t);
  REQUIRE(forge_all_but(t / "s0/results.jsonl", shown_in(t / "s0/summary.json")) > 0);
  const std::string merged = testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); });
  CHECK(merged.find(t / "s0/results.jsonl:") == 0);
  CHECK(merged.find(" re-scored: the record's figures are not what strata explore computes") != std::string::npos);
  CHECK(!fs::exists(t / "m"));
  // Untouched, the sample passes.
  std::ofstream(t / "d/results.jsonl", std::ios::binary | std::ios::trunc) << clean;
  CHECK(load_report_data(t / "d").plans.size() == 144);
}

TEST_CASE("report and resume: a record forged alone disagrees with its equivalence class") {
  // The true best plan made ten times slower, throughput with it (the
  // figures agree with each other), so that it is no longer shown and not
  // re-scored: the other plans of its class keep the class's figures.
  TempDir t("forged-class");
  const auto sc = scenario_file(t / "small.json");
  run_explore(sc, options(t / "d", 2));
  // A class of more than one plan, and its first plan's id.
  std::map<std::string, std::vector<std::string>> members;
  {
    std::istringstream in(read(t / "d/results.jsonl"));
    for (std::string l; std::getline(in, l);) {
      const auto j = nlohmann::json::parse(l);
      members[j["class_id"].get<std::string>()].push_back(j["plan_id"].get<std::string>());
    }
  }
  std::string cls, id;
  for (const auto& [c, ids] : members)
    if (ids.size() > 1) cls = c, id = ids.front();
  REQUIRE(!id.empty());
  const std::size_t line = edit_record(t / "d/results.jsonl", id, [](auto& j) {
    j["step_time_s"] = j["step_time_s"].template get<double>() * 10;
    j["tokens_per_s_per_gpu"] = j["tokens_per_s_per_gpu"].template get<double>() / 10;
  });
  REQUIRE(line > 0);
  auto resume = [&] {
    auto o = options(t / "d", 1);
    o.resume = true;
    run_explore(sc, o);
  };
  for (const auto& msg : {testing::input_error_of([&] { load_report_data(t / "d"); }),
                          testing::input_error_of(resume)}) {
    // The class's first record read names the disagreement, whichever of the two it is.
    CHECK(msg.find(t / "d/results.jsonl:") == 0);
    CHECK(msg.find(": step_time_s: is ") != std::string::npos);
    CHECK(msg.find(" of the same equivalence class " + cls + " has ") != std::string::npos);
  }
}

TEST_CASE("plans_to_rescore: the shown plans and a uniform sample of the others, once each") {
  std::vector<strategies::ScoredPlan> plans;
  for (std::uint64_t id = 1; id <= 1000; ++id) plans.push_back(strategies::ScoredPlan{id, 1.0, 1, 1.0});
  const std::vector<std::uint64_t> shown{5, 7, 7, 999};
  const auto ids = plans_to_rescore(plans, shown, 50);
  // 3 shown (7 once) and 50 drawn, sorted, no repeats.
  CHECK(ids.size() == 53);
  CHECK(std::is_sorted(ids.begin(), ids.end()));
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  for (const auto id : {5, 7, 999}) CHECK(std::binary_search(ids.begin(), ids.end(), static_cast<std::uint64_t>(id)));
  for (const auto id : ids) CHECK((id >= 1 && id <= 1000));
  // Fewer others than asked: all of them.
  CHECK(plans_to_rescore(plans, shown, 5000).size() == 1000);
  // Drawn at random: two draws of 50 of 997 agree on every plan with
  // probability 1 / C(997, 50), i.e. never.
  CHECK(plans_to_rescore(plans, shown, 50) != plans_to_rescore(plans, shown, 50));
}

TEST_CASE("merge, report and export: a summary's counts must be a partition of its space, checked again") {
  // A record dropped and counted invalid by hand (a forgery that would
  // hide the best plan): the totals no longer add up, or, with a rule's
  // count raised too, the space's own rules refuse one plan fewer.
  TempDir t("forged-counts");
  const auto sc = scenario_file(t / "small.json");
  explore_shards(sc, t);
  auto edit = [&](auto&& f) {
    auto s = nlohmann::json::parse(read(t / "s1/summary.json"));
    f(s);
    std::ofstream(t / "s1/summary.json", std::ios::binary | std::ios::trunc) << s.dump(2) << "\n";
  };
  const std::string clean = read(t / "s1/summary.json");
  edit([](auto& s) {
    s["counts"]["scored"] = s["counts"]["scored"].template get<int>() - 1;
    s["counts"]["invalid"] = s["counts"]["invalid"].template get<int>() + 1;
  });
  const std::string sp = t / "s1/summary.json";
  const std::string msg = testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); });
  CHECK(msg.rfind(sp + ": rejected_by_rule: adds up to ", 0) == 0);
  CHECK(!fs::exists(t / "m"));
  edit([](auto& s) {
    auto& r = s["rejected_by_rule"];
    auto& first = r.begin().value();
    first["count"] = first["count"].template get<int>() + 1;
  });
  for (const auto& m : {testing::input_error_of([&] { merge_explore({t / "s0", t / "s1"}, t / "m"); }),
                        testing::input_error_of([&] { load_report_data(t / "s1"); }),
                        testing::input_error_of([&] { load_export_scenario(t / "s1", 1, ""); })})
    CHECK(m.find(sp + ": counts.invalid: is ") == 0);
  CHECK(!fs::exists(t / "m"));
  // Counts that do not partition the plans enumerated.
  std::ofstream(t / "s1/summary.json", std::ios::binary | std::ios::trunc) << clean;
  edit([](auto& s) { s["counts"]["enumerated"] = s["counts"]["enumerated"].template get<int>() + 1; });
  CHECK(testing::input_error_of([&] { load_report_data(t / "s1"); }).rfind(sp + ": counts: invalid + ", 0) == 0);
  std::ofstream(t / "s1/summary.json", std::ios::binary | std::ios::trunc) << clean;
  CHECK_NOTHROW(merge_explore({t / "s0", t / "s1"}, t / "m"));
}

TEST_CASE("export and run of a directory: checked as report checks it") {
  // A scenario copy that is not the manifest's, and a summary whose top
  // plan is not the records', are refused as report refuses them.
  TempDir t("export-check");
  run_explore(scenario_file(t / "h100.json"), options(t / "d", 2));
  CHECK(load_export_scenario(t / "d", 1, "").cluster.name == "dgx-h100");
  const std::string copy = read(t / "d/scenario.json"), summary = read(t / "d/summary.json");
  std::ofstream(t / "d/scenario.json") << a100_text();
  CHECK(testing::input_error_of([&] { load_export_scenario(t / "d", 1, ""); }) ==
        t / "d/manifest.json" + ": cluster.name: the directory holds plans of \"dgx-h100\", " + t /
            "d/scenario.json" + " has \"dgx-a100-80g\": use the scenario it was explored with, or another directory");
  std::ofstream(t / "d/scenario.json") << copy;
  // top[0] replaced by a plan outside the space (microbatch 3), its id made to match.
  auto s = nlohmann::json::parse(summary);
  auto& rec = s["top"][0];
  rec["batch"]["micro"] = 3;
  rec["plan_id"] = strategies::plan_id_hex(
      strategies::fnv1a64(nlohmann::json{{"batch", rec["batch"]}, {"plan", rec["plan"]}}.dump()));
  std::ofstream(t / "d/summary.json") << s.dump();
  CHECK(testing::input_error_of([&] { load_export_scenario(t / "d", 1, ""); })
            .find(t / "d/summary.json" + ": top[0].plan_id: is " + rec["plan_id"].get<std::string>() +
                  ", and the directory's records rank plan ") != std::string::npos);
  // Its id left as it was: not the id of its batch and plan.
  rec["plan_id"] = nlohmann::json::parse(summary)["top"][0]["plan_id"];
  std::ofstream(t / "d/summary.json") << s.dump();
  CHECK(testing::input_error_of([&] { load_export_scenario(t / "d", 1, ""); }) ==
        t / "d/summary.json" + ": top[0].plan_id: is not the id of the record's batch and plan: the summary was "
                               "not written by strata explore");
}

TEST_CASE("results.jsonl: read line by line, the same as from its whole text") {
  // read_results streams the file in 64 KiB blocks, holding one line at a
  // time (at most 1 MiB): the records, the valid bytes and the torn tail
  // are those parse_results finds in the whole text.
  TempDir t("stream");
  run_explore(scenario(), options(t / "d", 2));
  std::string text = read(t / "d/results.jsonl");
  text += text.substr(0, 700);  // a torn last line
  std::ofstream(t / "r.jsonl", std::ios::binary) << text;
  const auto streamed = read_results(t / "r.jsonl", [](std::uint64_t) { return true; });
  const auto whole = parse_results(text, t / "r.jsonl", [](std::uint64_t) { return true; });
  CHECK(streamed.plans.size() == 144);
  CHECK(streamed.plans == whole.plans);
  CHECK(streamed.lines == whole.lines);
  CHECK(streamed.inexact == whole.inexact);
  CHECK(streamed.valid_bytes == whole.valid_bytes);
  CHECK(streamed.torn_bytes == 700);
  CHECK(whole.torn_bytes == 700);
  // A line longer than any record is refused, not gathered without end.
  std::ofstream(t / "long.jsonl", std::ios::binary) << std::string(3 << 20, ' ') << "\n";
  CHECK(testing::input_error_of([&] { read_results(t / "long.jsonl"); }) ==
        t / "long.jsonl" + ": a line is longer than 1 MiB (not a results record)");
}

TEST_CASE("results.jsonl: a malformed line that is not the last is an error") {
  TempDir t("malformed");
  std::ofstream(t / "results.jsonl") << "{\"plan_id\": \"00000000000000ab\"}\nnot json\n";
  CHECK(testing::input_error_of([&] { read_results(t / "results.jsonl"); }) ==
        t / "results.jsonl" + ":1: step_time_s: missing required key");
  std::ofstream(t / "r2.jsonl") << "[1]\n";
  CHECK(testing::input_error_of([&] { read_results(t / "r2.jsonl"); }) ==
        t / "r2.jsonl" + ":1: not a JSON object (results.jsonl holds one per line)");
}

}  // namespace
}  // namespace strata::report
