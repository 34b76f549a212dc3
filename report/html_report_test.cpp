#include "report/html_report.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "sim/engine.hpp"
#include "strategies/space.hpp"
#include "tests/testing.hpp"

namespace strata::report {
namespace {

std::size_t occurrences(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

const std::string kHostile = "<script>alert(\"x\")</script> & 'q'\x07";

PlanRecord plan(const std::string& id, const std::string& recompute, const std::string& zero,
                double step_s, double peak_gib) {
  PlanRecord p;
  p.plan_id = id;
  p.batch_global = 8;
  p.batch_micro = 1;
  p.axes = {recompute, zero};
  p.step_time_s = step_s;
  p.tokens_per_s_per_gpu = 1000 / step_s;  // fixed batch: throughput is 1 / step time
  p.mfu = 0.4 / step_s;
  p.peak_memory_bytes = static_cast<Bytes>(peak_gib * static_cast<double>(kGiB));
  p.gpu_memory_bytes = 80 * kGiB;
  p.required_memory_bytes = p.peak_memory_bytes;  // no reserve in these figures
  p.memory = {p.peak_memory_bytes / 4, p.peak_memory_bytes - p.peak_memory_bytes / 4};
  p.time_s.assign(kTimePartCount, 0);
  p.time_s[0] = step_s * 0.8;  // compute
  p.time_s[1] = step_s * 0.2;  // recompute
  return p;
}

// Six plans over recompute {none, full} x zero {0, 1, 2}; one more that is
// the fastest but does not fit. Every "full" plan is 1.25x (zero 0, 1) or
// 1.5x (zero 2) slower than its "none" twin and needs half its memory.
ReportData sample() {
  ReportData d;
  d.dir = "out/" + kHostile;
  d.scenario = "scenario " + kHostile;
  d.model = "model " + kHostile;
  d.gpu = "gpu,\"name\"";
  d.gpus = 8;
  d.space_size = 6;
  d.axes = {{"recompute", {"none", "full"}}, {"zero", {"0", "1", "2"}}};
  d.memory_tags = {"params", "activations"};
  d.counts = {{"enumerated", 6, "", false}, {"rejected (invalid)", 0, "", false},
              {"rule " + kHostile, 0, "example " + kHostile, true}};
  d.plans = {plan("00000000000000a0", "none", "0", 1.0, 60),
             plan("00000000000000a1", "none", "1", 1.1, 50),
             plan("00000000000000a2", "none", "2", 1.2, 40),
             plan("00000000000000b0", "full", "0", 1.25, 30),
             plan("00000000000000b1", "full", "1", 1.375, 25),
             plan("00000000000000b2", "full", "2", 1.8, 20),
             plan("00000000000000c0", "none", "0", 0.5, 90)};
  d.plans.back().batch_micro = 2;  // not the twin of a0: they differ in a non-axis key
  d.plans.back().axes = {"none", "0"};
  return d;
}

// A two-stage step: stage 0 runs fwd, fwd (touching: one span), bwd on its
// compute stream and an all-reduce on its comm stream; stage 1 one fwd.
Timeline sample_timeline() {
  sim::TaskGraph g;
  auto c0 = g.add_stream("s0.compute", {0, sim::Lane::Compute});
  auto m0 = g.add_stream("s0.comm", {0, sim::Lane::Comm});
  auto c1 = g.add_stream("s1.compute", {1, sim::Lane::Compute});
  auto f0 = g.add_task({.id = "f0", .resources = {c0}, .duration = 100, .label = {.phase = sim::Phase::Fwd}});
  auto f1 = g.add_task({.id = "f1", .resources = {c0}, .duration = 100, .label = {.phase = sim::Phase::Fwd}});
  auto b0 = g.add_task({.id = "b0", .resources = {c0}, .duration = 200, .label = {.phase = sim::Phase::Bwd}});
  auto ar = g.add_task({.id = "ar", .kind = sim::TaskKind::Collective, .resources = {m0}, .duration = 50,
                        .label = {.phase = sim::Phase::Comm}});
  auto g1 = g.add_task({.id = "g1", .resources = {c1}, .duration = 100, .label = {.phase = sim::Phase::Fwd}});
  g.add_dep(f0, f1);
  g.add_dep(f1, b0);
  g.add_dep(b0, ar);
  g.add_dep(f0, g1);
  sim::Engine e(g);
  const sim::RunResult r = e.run();
  return make_timeline(g, r, "00000000000000a0");
}

TEST_CASE("make_timeline: lanes per stage and stream, touching same-phase tasks merged") {
  // Stage 0 compute: fwd [0, 200) (two tasks), bwd [200, 400); comm: [400, 450);
  // stage 1 compute: fwd [100, 200). Step 450 ns.
  const Timeline t = sample_timeline();
  CHECK(t.step_ns == 450);
  CHECK(t.stages == 2);
  CHECK(t.tasks == 5);
  REQUIRE(t.lanes.size() == 3);
  CHECK(t.lanes[0].name == "compute");
  REQUIRE(t.lanes[0].spans.size() == 2);
  CHECK(t.lanes[0].spans[0].start_ns == 0);
  CHECK(t.lanes[0].spans[0].end_ns == 200);
  CHECK(t.lanes[0].spans[0].tasks == 2);
  CHECK(t.lanes[0].spans[1].kind == SpanKind::Backward);
  CHECK(t.lanes[0].busy_ns == 400);
  CHECK(t.lanes[1].name == "comm");
  CHECK(t.lanes[1].spans[0].kind == SpanKind::Comm);
  CHECK(t.lanes[2].stage == 1);
  CHECK(t.lanes[2].spans[0].start_ns == 100);
}

TEST_CASE("make_timeline reads stage and lane from the role, not the name") {
  // Names that look like another stage's or lane mean nothing: "s5.comm" is
  // stage 1's compute stream. The two copy engines share one lane; a queue
  // without a lane ("host") has one of its own, named after it, in the
  // stage of its task's label when it has no stage either.
  sim::TaskGraph g;
  auto c = g.add_stream("s5.comm", {1, sim::Lane::Compute});
  auto d2h = g.add_copy_engine("x", {1, sim::Lane::D2H});
  auto h2d = g.add_copy_engine("y", {1, sim::Lane::H2D});
  auto host = g.add_worker_pool("host", 1);
  g.add_task({.id = "f", .resources = {c}, .duration = 100, .label = {.phase = sim::Phase::Fwd}});
  g.add_task({.id = "out", .kind = sim::TaskKind::Copy, .resources = {d2h}, .duration = 10});
  g.add_task({.id = "in", .kind = sim::TaskKind::Copy, .resources = {h2d}, .duration = 10});
  sim::Task opt{.id = "opt", .kind = sim::TaskKind::Host, .resources = {host}, .duration = 30};
  opt.label.stage = 2;
  g.add_task(std::move(opt));
  sim::Engine e(g);
  const Timeline t = make_timeline(g, e.run(), "x");
  CHECK(t.stages == 3);
  REQUIRE(t.lanes.size() == 3);
  CHECK(t.lanes[0].stage == 1);
  CHECK(t.lanes[0].name == "compute");
  CHECK(t.lanes[1].stage == 1);
  CHECK(t.lanes[1].name == "copies");
  CHECK(t.lanes[1].tasks == 2);
  CHECK(t.lanes[2].stage == 2);
  CHECK(t.lanes[2].name == "host");
}

TEST_CASE("make_timeline aggregates a lane of very many tasks into time columns") {
  // 1000 alternating fwd/bwd tasks of 10 ns: 1000 spans exceed columns/2 = 50,
  // so the lane is cut into 100 columns of 100 ns, each half fwd, half bwd;
  // the tie goes to the first kind (fwd), so every column is fwd: one span.
  sim::TaskGraph g;
  auto c0 = g.add_stream("s0.compute", {0, sim::Lane::Compute});
  for (int i = 0; i < 1000; ++i) {
    sim::Task task{.id = "t" + std::to_string(i), .resources = {c0}, .duration = 10};
    task.label.phase = i % 2 ? sim::Phase::Bwd : sim::Phase::Fwd;
    g.add_task(std::move(task));
  }
  sim::Engine e(g);
  const Timeline t = make_timeline(g, e.run(), "x", 100);
  CHECK(t.aggregated);
  REQUIRE(t.lanes.size() == 1);
  REQUIRE(t.lanes[0].spans.size() == 1);
  CHECK(t.lanes[0].spans[0].end_ns == 10000);
  CHECK(t.lanes[0].spans[0].tasks == 1000);
}

TEST_CASE("analyse: the winner is the fastest plan that fits; Pareto front; paired comparisons") {
  const ReportData d = sample();
  const ReportAnalysis an = analyse(d);
  // c0 is fastest but needs 90 GiB of 80: a0 wins, a1 is the runner-up,
  // b2 (20 GiB) has the lowest memory.
  REQUIRE(an.winner);
  CHECK(d.plans[*an.winner].plan_id == "00000000000000a0");
  CHECK(d.plans[*an.runner_up].plan_id == "00000000000000a1");
  CHECK(d.plans[*an.lowest_memory].plan_id == "00000000000000b2");
  CHECK(an.fitting.size() == 6);
  // Front by step time: c0 (0.5 s, 90), a0 (1.0, 60), a1, a2, b0 (1.25, 30),
  // b1 (1.375, 25), b2 (1.8, 20): every plan is on it.
  CHECK(an.front.size() == 7);
  // recompute full against none: pairs over zero 0, 1, 2 (c0 also has
  // recompute none, zero 0: its key is the same, the lower plan id a0 is
  // kept): step ratios 1.25, 1.25, 1.5 -> median 1.25; memory 0.5 each.
  REQUIRE(an.axes.size() == 2);
  REQUIRE(an.axes[0].paired.size() == 1);
  CHECK(an.axes[0].paired[0].pairs == 3);
  CHECK(an.axes[0].paired[0].step_ratio == doctest::Approx(1.25));
  CHECK(an.axes[0].paired[0].peak_ratio == doctest::Approx(0.5));
  CHECK(an.axes[0].sentence.find("full step time +25.0 %, peak memory \u221250.0 % (3 pairs)") !=
        std::string::npos);
  // zero 1 against 0: (1.1/1.0, 1.375/1.25) -> median of 1.1, 1.1 = 1.1.
  CHECK(an.axes[1].paired[0].step_ratio == doctest::Approx(1.1));
  CHECK(an.axes[1].values[0].plans == 3);  // a0, b0, c0
}

TEST_CASE("analyse: pairs of equivalent plans say nothing of an axis and are left out") {
  // a0 and a1 differ only in zero (0 against 1); give them one class, as
  // the explorer does where ZeRO cannot act: zero 1 against 0 then rests on
  // b0/b1 alone (1.375 / 1.25 = 1.1), and the sentence counts the pair left out.
  ReportData d = sample();
  for (auto& p : d.plans)
    if (p.plan_id == "00000000000000a0" || p.plan_id == "00000000000000a1") p.class_id = "00000000000000c1";
  const ReportAnalysis an = analyse(d);
  REQUIRE(an.axes.size() == 2);
  REQUIRE(an.axes[1].paired.size() >= 1);
  CHECK(an.axes[1].paired[0].pairs == 1);
  CHECK(an.axes[1].paired[0].inert == 1);
  CHECK(an.axes[1].paired[0].step_ratio == doctest::Approx(1.1));
  CHECK(an.axes[1].sentence.find("not counting 1 where it cannot act") != std::string::npos);
  // Without classes every pair counts (the test above: two pairs).
  CHECK(analyse(sample()).axes[1].paired[0].pairs == 2);
  CHECK(analyse(sample()).axes[1].paired[0].inert == 0);
}

TEST_CASE("HTML: input strings are escaped; charts, legend, sorting script and markers are present") {
  ReportData d = sample();
  d.timeline = sample_timeline();
  const std::string html = report_html(d);
  // No input string reaches the page as markup: exactly the two scripts the
  // report carries (the error marker and the sorting script).
  CHECK(html.find("<script>alert") == std::string::npos);
  CHECK(occurrences(html, "<script>") == 2);
  CHECK(html.find("model &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;\\x07") !=
        std::string::npos);
  CHECK(html.find('\x07') == std::string::npos);
  // Four charts (scatter, memory, time, timeline), each with a title and a description.
  CHECK(occurrences(html, "<svg") == 4);
  CHECK(occurrences(html, "<desc") == 4);
  CHECK(html.find("class=\"sortable\"") != std::string::npos);
  CHECK(html.find("data-report-ready") != std::string::npos);
  CHECK(html.find("window.onerror") != std::string::npos);
  CHECK(html.find("class=\"legend\"") != std::string::npos);
  // Self-contained: nothing fetched.
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));
  CHECK(html.find("https://") == std::string::npos);
}

TEST_CASE("Markdown and CSV escape input strings") {
  const ReportData d = sample();
  const std::string markdown = report_markdown(d);
  CHECK(markdown.find("<script>") == std::string::npos);
  CHECK(markdown.find("model &lt;script&gt;alert(\"x\")&lt;/script&gt; &amp; 'q'\\\\x07") != std::string::npos);
  CHECK(markdown.find('\x07') == std::string::npos);
  // A right-to-left override (U+202E) would reorder what follows it, a raw
  // 0x9b byte is a terminal's CSI: both shown as escapes, in the title and
  // in the tables.
  ReportData b = sample();
  b.model = "m\xe2\x80\xae evil \x9b x";
  const std::string bidi = report_markdown(b);
  CHECK(bidi.find("\xe2\x80\xae") == std::string::npos);
  CHECK(bidi.find('\x9b') == std::string::npos);
  CHECK(bidi.find("# Strata report: m\\\\u{202e} evil \\\\x9b x") != std::string::npos);
  CHECK(bidi.find("| model | m\\\\u{202e} evil \\\\x9b x |") != std::string::npos);

  ReportData c = sample();
  c.axes[1].name = "=cmd,\"x\"";  // a hostile axis name becomes a CSV heading
  const std::string csv = results_csv(c);
  CHECK(csv.find(",\"'=cmd,\"\"x\"\"\",") != std::string::npos);
  // A header and one line per plan, the best (c0, fastest) first.
  CHECK(occurrences(csv, "\r\n") == 1 + 7);
  CHECK(csv.find("\r\n00000000000000c0,8,2,") != std::string::npos);
}

TEST_CASE("rendering does not depend on the order plans are read in") {
  ReportData a = sample();
  a.timeline = sample_timeline();
  ReportData b = a;
  std::reverse(b.plans.begin(), b.plans.end());
  CHECK(report_html(a) == report_html(b));
  CHECK(report_markdown(a) == report_markdown(b));
  CHECK(results_csv(a) == results_csv(b));
}

// A results.jsonl record with the fields the report reads; its plan_id is
// the hash of its batch and plan, as explore writes it (records whose id is
// not are refused).
std::string record(const std::string& offload, double step_s) {
  const std::string act = offload == "activations" ? "true" : "false";
  const std::string opt = offload == "optimizer" ? "cpu" : "none";
  const std::string point = "\"batch\":{\"global\":8,\"micro\":1},\"plan\":{\"dp\":8,"
         "\"offload\":{\"activations\":" + act + ",\"optimizer\":\"" + opt + "\",\"weights\":false},"
         "\"pp\":1,\"recompute\":\"none\",\"schedule\":\"1f1b\",\"tp\":1,\"virtual_stages\":1}";
  const std::string id = strategies::plan_id_hex(strategies::fnv1a64("{" + point + "}"));
  return "{\"plan_id\":\"" + id + "\"," + point + ","
         "\"feasible\":true,\"step_time_s\":" + std::to_string(step_s) +
         ",\"tokens_per_s_per_gpu\":" + std::to_string(1000 / step_s) +
         ",\"mfu\":0.3,\"time_breakdown_s\":{\"compute\":" + std::to_string(step_s) +
         ",\"recompute\":0,\"exposed_comm\":{\"dp\":0,\"tp\":0,\"pp\":0,\"cp\":0,\"ep\":0,\"offload\":0},"
         "\"bubble\":0,\"offload_stall\":0,\"optimizer\":0},\"bubble_fraction\":0,"
         "\"peak_memory_bytes\":3000,\"gpu_memory_bytes\":80000,"
         "\"memory_breakdown_bytes\":{\"activations\":2000,\"params\":1000}}\n";
}

TEST_CASE("a plan fits by its required memory: the tensors and the CUDA context, not the allocator's reserve") {
  // 90 GiB with the reserve on an 80 GiB GPU, 75 GiB without it: it fits
  // (docs/memory-model.md, "Fits"); 81 GiB without it does not. A record
  // without the required figure is judged by its peak.
  PlanRecord p = plan("00000000000000d0", "none", "0", 1.0, 90);
  p.required_memory_bytes = 75 * kGiB;
  CHECK(p.fits());
  p.required_memory_bytes = 81 * kGiB;
  CHECK_FALSE(p.fits());
  // As the winner it is said that only its reserve passes the GPU.
  ReportData d = sample();
  d.plans.front().peak_memory_bytes = 90 * kGiB;  // a0, the fastest that fits
  d.plans.front().required_memory_bytes = 75 * kGiB;
  const ReportAnalysis an = analyse(d);
  REQUIRE(an.winner);
  CHECK(d.plans[*an.winner].plan_id == "00000000000000a0");
  CHECK(std::any_of(an.why.begin(), an.why.end(), [](const std::string& w) {
    return w.find("above the GPU's memory; its tensors and the CUDA context (75.0") != std::string::npos;
  }));
}

TEST_CASE("load_report_data reads summary, results and refined records") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "strata-report-load-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const char* name, const std::string& text) { std::ofstream(dir / name) << text; };
  write("summary.json",
        R"({"scenario": "nowhere/scenario.json", "model": "m", "gpus": 8, "gpu": "g",
            "space": {"size": 3, "axes": {"recompute": ["none"], "offload": ["none", "activations", "optimizer"]}},
            "counts": {"enumerated": 3, "invalid": 1, "pruned_by_memory": 0, "not_modelled": 0,
                       "failed": 0, "scored": 2, "pareto": 1, "dominated": 1},
            "rejected_by_rule": {"some-rule": {"count": 1, "first_index": 2, "example": "e"}},
            "pruned_by_pool": {}})");
  write("results.jsonl", record("optimizer", 1.0) + record("activations", 2.0));
  // The layer-granularity figures of the activations plan replace its record.
  write("refined.jsonl", record("activations", 0.5));
  ReportData d = load_report_data(dir.string());
  REQUIRE(d.plans.size() == 2);
  // In plan id order; here by offload for the checks.
  std::sort(d.plans.begin(), d.plans.end(), [](const auto& a, const auto& b) { return a.axes[1] > b.axes[1]; });
  CHECK(d.axes[1].name == "offload");
  CHECK(d.plans[0].axes[1] == "optimizer");  // the composite axis's own value
  CHECK(d.plans[1].axes[1] == "activations");
  CHECK(d.plans[1].step_time_s == 0.5);
  // Records without memory_required_bytes are judged by their peak.
  CHECK(d.plans[0].required_memory_bytes == d.plans[0].peak_memory_bytes);
  // Tags in simulate's order, whatever the record's key order.
  CHECK(d.memory_tags == std::vector<std::string>{"params", "activations"});
  CHECK(d.plans[0].memory == std::vector<Bytes>{1000, 2000});
  // Counts with the rule under "rejected".
  CHECK(d.counts[2].name == "some-rule");
  CHECK(d.counts[2].sub);
  // Neither DIR/scenario.json nor the summary's scenario exists: no timeline, and why.
  CHECK(!d.timeline);
  CHECK(d.timeline_note.find("cannot re-simulate the best plan") != std::string::npos);
  // The files, written into another directory.
  const std::string printed = write_report(dir.string(), (dir / "out").string());
  CHECK(printed.find("2 plans") != std::string::npos);
  for (const char* f : {"report.html", "report.md", "results.csv"}) CHECK(fs::file_size(dir / "out" / f) > 0);
  fs::remove_all(dir);
}

TEST_CASE("a directory that is not an explore output is an InputError") {
  CHECK(testing::input_error_of([] { load_report_data("/nonexistent/strata-report"); }) ==
        "/nonexistent/strata-report: not a directory (strata report reads the --out directory of "
        "strata explore)");
  CHECK(testing::input_error_of([] { load_report_data(STRATA_SOURCE_DIR "/report"); }) ==
        STRATA_SOURCE_DIR "/report/summary.json: file not found (not an explore output directory?)");
}


TEST_CASE("report: with a goal, the step-time ranking beside the time-to-train ranking") {
  // a0 is the fastest step that fits (1.0 s) but needs 3000 steps (a larger
  // batch): 3000 s, fifth after a1 (2000 x 1.1 s), b0 (2000 x 1.25 s), a2
  // (2100 x 1.2 s) and b1 (2000 x 1.375 s); b2 never reaches the goal. Both
  // rankings, the reason and the chart appear.
  ReportData d = sample();
  d.goal = "target loss 2.5";
  d.b_noise_tokens = 1e6;
  const double steps[] = {3000, 2000, 2100, 2000, 2000, 0, 3000};
  for (std::size_t i = 0; i < d.plans.size(); ++i) {
    auto& p = d.plans[i];
    p.batch_tokens = i == 0 ? 4e6 : 1e6;
    if (i == 5) continue;  // b2: never
    p.train_steps = static_cast<std::int64_t>(steps[i]);
    p.time_to_train_s = steps[i] * p.step_time_s;
  }
  const ReportAnalysis an = analyse(d);
  REQUIRE(an.by_time_to_train.size() == 6);
  CHECK(d.plans[an.by_time_to_train.front()].plan_id == "00000000000000a1");
  CHECK(d.plans[an.by_time_to_train.back()].plan_id == "00000000000000b2");
  REQUIRE(an.ranking_why.size() == 3);
  CHECK(an.ranking_why[0].find("the best plan is 00000000000000a1") != std::string::npos);
  CHECK(an.ranking_why[1].find("The plan with the highest throughput, 00000000000000a0") == 0);
  CHECK(an.ranking_why[1].find("critical batch") != std::string::npos);
  CHECK(an.ranking_why[2].find("the throughput winner ranks #5 by time to train") != std::string::npos);
  const std::string md = report_markdown(d);
  CHECK(md.find("## Step time against time to train") != std::string::npos);
  CHECK(md.find("| never |") != std::string::npos);
  const std::string html = report_html(d);
  CHECK(html.find("id=\"ranking\"") != std::string::npos);
  CHECK(html.find("Step time against time to train, every plan") != std::string::npos);
  CHECK(results_csv(d).find("train_steps,time_to_train_s") != std::string::npos);
  // Without a goal none of it.
  CHECK(report_markdown(sample()).find("time to train") == std::string::npos);
}

}  // namespace
}  // namespace strata::report
