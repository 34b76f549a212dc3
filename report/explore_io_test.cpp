#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "report/explore.hpp"
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
strategies::Scenario scenario() {
  return strategies::parse_scenario(
      R"({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": {"global": 64},
          "plan": {"optimizer": "adamw"},
          "space": {"tp": [1, 2, 4, 8], "zero": "auto", "recompute": ["none", "selective", "full"],
                    "batch.micro": [1, 2, 4, 8]}})",
      "small.json");
}

ExploreRunOptions options(const std::string& dir, int jobs) {
  ExploreRunOptions o;
  o.out_dir = dir;
  o.jobs = jobs;
  o.top_k = 5;
  return o;
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
  CHECK(scored == 144 - kept);  // only the plans not finished before
  CHECK(lines_of(read(t / "cut/results.jsonl")) == lines_of(full));  // each plan once
  CHECK(read(t / "cut/summary.json") == summary);
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
  CHECK(testing::input_error_of([&] { run_explore(scenario(), o); }).find(
            "its plans were scored with a training goal and the scenario now has none") != std::string::npos);
}

TEST_CASE("explore output: shards 0/2 and 1/2 merged equal the unsharded run") {
  TempDir t("shard");
  run_explore(scenario(), options(t / "all", 2));
  for (std::uint64_t i = 0; i < 2; ++i) {
    auto o = options(t / ("s" + std::to_string(i)), 1);
    o.shard_index = i;
    o.shard_count = 2;
    run_explore(scenario(), o);
  }
  const std::string merged = merge_explore({t / "s1", t / "s0"}, t / "merged");
  CHECK(merged == read(t / "merged/summary.json"));
  auto a = nlohmann::ordered_json::parse(read(t / "all/summary.json"));
  auto m = nlohmann::ordered_json::parse(merged);
  CHECK(m["shards"].dump() == R"({"count":2,"indices":[0,1]})");
  a.erase("shards");
  m.erase("shards");
  CHECK(a.dump() == m.dump());  // the same text, key order included
  CHECK(lines_of(read(t / "merged/results.jsonl")) == lines_of(read(t / "all/results.jsonl")));

  // The same shard twice, or a plan with other figures, is an error.
  CHECK(testing::input_error_of([&] { merge_explore({t / "s0", t / "s0"}, t / "bad"); })
            .find("shards.indices[0]: shard 0 is merged twice") != std::string::npos);
  // x: shard 0 by its summary, with s1's plans at another step time.
  fs::create_directories(t / "x");
  auto xs = nlohmann::json::parse(read(t / "s1/summary.json"));
  xs["shards"]["indices"] = {0};
  std::ofstream(t / "x/summary.json") << xs.dump();
  std::string s1 = read(t / "s1/results.jsonl");
  const auto at = s1.find("\"step_time_s\":");
  s1.replace(at, 15, "\"step_time_s\":9");
  std::ofstream(t / "x/results.jsonl", std::ios::binary) << s1;
  const std::string err = testing::input_error_of([&] { merge_explore({t / "s1", t / "x"}, t / "bad"); });
  CHECK(err.find("has other results than in") != std::string::npos);

  // Another space (or model, or cluster) is not merged; another path to the
  // same scenario is.
  xs["space"]["size"] = 7;
  std::ofstream(t / "x/summary.json") << xs.dump();
  CHECK(testing::input_error_of([&] { merge_explore({t / "s1", t / "x"}, t / "bad"); }) ==
        t / "x/summary.json" + ": explores another model, cluster or space than " + t / "s1/summary.json");
  auto moved = nlohmann::json::parse(read(t / "s0/summary.json"));
  moved["scenario"] = "elsewhere/small.json";
  std::ofstream(t / "s0/summary.json") << moved.dump();
  CHECK(nlohmann::json::parse(merge_explore({t / "s1", t / "s0"}, t / "ok2"))["counts"] ==
        a["counts"]);
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
