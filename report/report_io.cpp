// Reading an explore directory into ReportData, re-simulating its best plan,
// and writing the report files.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "report/explore.hpp"
#include "report/files.hpp"
#include "report/html_report.hpp"
#include "report/table.hpp"
#include "sim/json_reader.hpp"
#include "strategies/space.hpp"
#include "lowering/step_costs.hpp"

namespace strata::report {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, "", "cannot read file");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A space value as `strata explore` prints it: booleans as yes/no.
std::string value_text(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

PlanRecord plan_record(const json& j, const std::string& where, const std::vector<SpaceAxis>& axes,
                       std::vector<std::string>& tags) {
  const JsonReader r(j, where);
  PlanRecord p;
  p.plan_id = r.at("plan_id").as_string();
  if (auto c = r.get("class_id")) p.class_id = c->as_string();
  const auto b = r.at("batch");
  p.batch_global = b.at("global").as_int(0, INT64_MAX);
  p.batch_micro = b.at("micro").as_int(0, INT64_MAX);
  const auto plan = r.at("plan");
  p.dp = plan.at("dp").as_int(1, INT64_MAX);
  p.tp = plan.at("tp").as_int(1, INT64_MAX);
  p.pp = plan.at("pp").as_int(1, INT64_MAX);
  for (const auto& a : axes) {
    try {
      p.axes.push_back(axis_cell(j, a.name));
    } catch (const json::exception&) {
      r.fail_at("plan", "has no readable value for the searched axis " + a.name);
    }
  }
  p.step_time_s = r.at("step_time_s").as_number(0, 1e30);
  p.tokens_per_s_per_gpu = r.at("tokens_per_s_per_gpu").as_number(0, 1e30);
  p.mfu = r.at("mfu").as_number(0, 1e30);
  p.peak_memory_bytes = r.at("peak_memory_bytes").as_int(0, INT64_MAX);
  p.gpu_memory_bytes = r.at("gpu_memory_bytes").as_int(0, INT64_MAX);
  p.required_memory_bytes = r.has("memory_required_bytes") ? r.at("memory_required_bytes").as_int(0, INT64_MAX)
                                                            : p.peak_memory_bytes;
  if (auto bf = r.get("bubble_fraction")) p.bubble_fraction = bf->as_number(0, 1e30);
  const auto mem = r.at("memory_breakdown_bytes");
  if (!mem.is_object()) mem.fail("must be an object of bytes by tag");
  for (const auto& [tag, v] : mem.json().items())
    if (std::find(tags.begin(), tags.end(), tag) == tags.end()) tags.push_back(tag);
  p.memory.assign(tags.size(), 0);
  for (std::size_t t = 0; t < tags.size(); ++t)
    if (auto v = mem.get(tags[t])) p.memory[t] = v->as_int(0, INT64_MAX);
  if (auto tr = r.get("training")) {
    const auto t = r.at("time_to_train_s");
    if (!t.is_null()) p.time_to_train_s = t.as_number(0, 1e300);
    const auto steps = tr->at("steps");
    if (!steps.is_null()) p.train_steps = steps.as_int(0, INT64_MAX);
    p.penalty = tr->at("penalty").at("total").as_number(0, 1e30);
    p.batch_tokens = tr->at("batch_tokens").as_number(0, 1e30);
  }
  const auto tb = r.at("time_breakdown_s");
  const auto comm = tb.at("exposed_comm");
  p.time_s.assign(kTimePartCount, 0);
  for (std::size_t k = 0; k < kTimePartCount; ++k) {
    const std::string key = kTimeParts[k].key;
    const std::string prefix = "exposed_comm_";
    if (key.rfind(prefix, 0) == 0) {
      if (auto v = comm.get(key.substr(prefix.size()))) p.time_s[k] = v->as_number(0, 1e30);
    } else if (auto v = tb.get(key)) {
      p.time_s[k] = v->as_number(0, 1e30);
    }
  }
  return p;
}

void add_rules(std::vector<CountRow>& rows, const ordered_json& rules) {
  if (!rules.is_object()) return;
  for (const auto& [rule, rc] : rules.items())
    rows.push_back({rule, rc.value("count", std::uint64_t{0}), rc.value("example", std::string()), true});
}

// The best plan's scenario: the directory's scenario with the record's batch and plan.
strategies::Scenario best_scenario(const std::string& dir, const std::string& summary_scenario,
                                   const std::string& line, const std::string& plan_id) {
  std::string source = (fs::path(dir) / "scenario.json").string();
  // Relative paths inside the scenario resolve against the original
  // scenario's directory when it is still there, else the explore directory.
  std::string base = fs::path(summary_scenario).parent_path().string();
  if (!fs::exists(source)) {
    if (summary_scenario.empty() || !fs::exists(summary_scenario))
      throw InputError(source, "", "not found, nor the scenario the summary names (\"" + summary_scenario +
                                       "\"): cannot re-simulate the best plan");
    source = summary_scenario;
  }
  if (base.empty() || !fs::is_directory(base)) base = fs::path(source).parent_path().string();
  json sc = load_json_file(source);
  if (!sc.is_object()) throw InputError(source, "", "a scenario must be a JSON object");
  const json rec = json::parse(line);
  sc["batch"] = rec.at("batch");
  sc["plan"] = rec.at("plan");
  sc.erase("space");
  return strategies::parse_scenario(sc.dump(), source + " (plan " + plan_id + ")", base);
}

// The best plan replayed at layer granularity.
Timeline replay(const strategies::Scenario& scenario, const std::string& plan_id) {
  sim::RunResult run;
  strategies::LoweredStep lowered;
  strategies::predict_step(scenario, &run, &lowered);
  Timeline t = make_timeline(lowered.graph, run, plan_id);
  if (scenario.cluster.heterogeneous())
    for (const auto& on : strategies::stage_groups(scenario.plan, scenario.cluster))
      t.stage_gpus.push_back(strategies::stage_gpus(scenario.cluster, on));
  return t;
}

}  // namespace

ReportData load_report_data(const std::string& dir, const PhaseProgress& progress, bool verify,
                            ReportAnalysis* analysis) {
  if (!fs::is_directory(dir))
    throw InputError(dir, "", "not a directory (strata report reads the --out directory of strata explore)");
  const std::string sp = (fs::path(dir) / "summary.json").string();
  const std::string rp = (fs::path(dir) / "results.jsonl").string();
  for (const auto& p : {sp, rp})
    if (!fs::exists(p)) throw InputError(p, "", "file not found (not an explore output directory?)");

  ReportData d;
  d.dir = dir;
  const json s = load_json_file(sp);
  const ordered_json so = ordered_json::parse(read_text(sp), nullptr, false, true);
  const JsonReader r(s, sp);
  if (!r.is_object() || so.is_discarded()) r.fail("must be a JSON object (explore's summary)");
  d.scenario = r.at("scenario").as_string();
  d.model = r.at("model").as_string();
  if (r.has("throughput_unit")) d.throughput_unit = r.at("throughput_unit").as_string();
  d.gpus = r.at("gpus").as_int(0, INT64_MAX);
  d.gpu = r.at("gpu").as_string();
  if (r.has("cluster_gpus")) d.cluster_gpus = r.at("cluster_gpus").as_string();
  const auto space = r.at("space");
  d.space_size = static_cast<std::uint64_t>(space.at("size").as_int(0, INT64_MAX));
  const auto axes = space.at("axes");
  if (!axes.is_object()) axes.fail("must be an object of axis values");
  for (const auto& [name, values] : so.at("space").at("axes").items()) {
    SpaceAxis a{name, {}};
    if (!values.is_array()) axes.fail_at(name, "must be an array of values");
    for (const auto& v : values) a.values.push_back(value_text(v));
    d.axes.push_back(std::move(a));
  }
  const auto c = r.at("counts");
  auto count = [&](const char* k) { return static_cast<std::uint64_t>(c.at(k).as_int(0, INT64_MAX)); };
  d.counts.push_back({"enumerated", count("enumerated"), "", false});
  d.counts.push_back({"rejected (invalid)", count("invalid"), "", false});
  if (so.contains("rejected_by_rule")) add_rules(d.counts, so.at("rejected_by_rule"));
  d.counts.push_back({"pruned by memory", count("pruned_by_memory"), "", false});
  if (so.contains("pruned_by_pool")) add_rules(d.counts, so.at("pruned_by_pool"));
  d.counts.push_back({"not modelled", count("not_modelled"), "", false});
  d.counts.push_back({"failed", count("failed"), "", false});
  d.counts.push_back({"scored", count("scored"), "", false});

  // What the directory holds plans of (DIR/manifest.json): the summary and
  // the scenario copy (what the best plan is re-simulated on) must agree
  // with it, every record must be a plan of its space and shards, and the
  // plans the summary shows are re-scored (check_explore_dir). A directory
  // of an older strata has no manifest: its records' ids are still checked
  // against their own batch and plan.
  // Each record is parsed once, as it is checked: a refined record (read
  // after the coarse ones) replaces its plan's coarse one. The goal is the
  // first record's that has one, by id.
  std::unordered_map<std::uint64_t, PlanRecord> records;
  std::uint64_t goal_id = 0;
  bool have_goal = false;
  (void)check_explore_dir(
      dir,
      [&](std::uint64_t id, std::string_view, const json& j) {
        records.insert_or_assign(id, plan_record(j, rp + ": plan " + strategies::plan_id_hex(id), d.axes, d.memory_tags));
        if (j.contains("training") && (!have_goal || id < goal_id)) {
          const json& tr = j.at("training");
          const json& g = tr.at("goal");
          d.goal = g.contains("target_loss") ? "target loss " + g.at("target_loss").dump()
                                             : si(g.at("tokens").get<double>()) + " tokens";
          d.b_noise_tokens = tr.contains("B_noise_tokens") ? std::optional(tr.at("B_noise_tokens").get<double>())
                                                           : std::nullopt;
          goal_id = id;
          have_goal = true;
        }
      },
      progress, verify);
  std::vector<std::uint64_t> ids;
  ids.reserve(records.size());
  for (const auto& [id, p] : records) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  d.plans.reserve(ids.size());
  for (std::uint64_t id : ids) d.plans.push_back(std::move(records.at(id)));
  records.clear();
  // Tags in the order `simulate` prints them; any other after them, by name.
  static const std::vector<std::string> kOrder = {"params", "grads", "optimizer_states", "activations",
                                                  "comm_buffers", "workspace", "allocator_reserve",
                                                  "runtime", "other"};
  auto rank = [](const std::string& t) {
    return static_cast<std::size_t>(std::find(kOrder.begin(), kOrder.end(), t) - kOrder.begin());
  };
  std::vector<std::size_t> order(d.memory_tags.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto ra = rank(d.memory_tags[a]), rb = rank(d.memory_tags[b]);
    return ra != rb ? ra < rb : d.memory_tags[a] < d.memory_tags[b];
  });
  std::vector<std::string> tags;
  for (std::size_t i : order) tags.push_back(d.memory_tags[i]);
  for (auto& p : d.plans) {
    p.memory.resize(d.memory_tags.size(), 0);
    std::vector<Bytes> m;
    for (std::size_t i : order) m.push_back(p.memory[i]);
    p.memory = std::move(m);
  }
  d.memory_tags = std::move(tags);

  ReportAnalysis an = analyse(d);
  if (an.winner) {
    const auto& best = d.plans[*an.winner];
    const auto id = strategies::parse_plan_id(best.plan_id);
    std::optional<strategies::Scenario> sc;
    try {
      if (progress) progress("re-simulating the best plan " + best.plan_id + " per layer", 0, 1);
      sc = best_scenario(dir, d.scenario, record_line(dir, *id), best.plan_id);
      d.timeline = replay(*sc, best.plan_id);
    } catch (const std::exception& e) {
      d.timeline_note = std::string("re-simulating plan ") + best.plan_id + " failed: " + e.what();
    }
    try {
      if (progress && sc) progress("the recompute trade-off of the best plan", 0, 1);
      if (sc) d.tradeoff = strategies::plan_tradeoff(*sc, {.budgets = 12});
    } catch (const std::exception& e) {
      d.tradeoff_note = std::string("the recompute trade-off of plan ") + best.plan_id + ": " + e.what();
    }
  } else {
    d.timeline_note = d.tradeoff_note = "no plan fits";
  }
  if (analysis) *analysis = std::move(an);
  return d;
}

std::string write_report(const std::string& dir, const std::string& out_dir, const PhaseProgress& progress,
                         bool verify) {
  // An explore or merge writing DIR (its lock, DIR/strata.lock) is waited
  // for by nobody: refused, naming it. Written in place, DIR is locked as
  // explore locks it; read for another --out, it is locked shared, and that
  // directory too when it is one Strata locks. The checks load_report_data
  // makes of DIR come first, so no lock file is made in a directory that is
  // not an explore's.
  if (!fs::is_directory(dir))
    throw InputError(dir, "", "not a directory (strata report reads the --out directory of strata explore)");
  for (const char* name : {"summary.json", "results.jsonl"}) {
    const std::string p = (fs::path(dir) / name).string();
    if (!fs::exists(p)) throw InputError(p, "", "file not found (not an explore output directory?)");
  }
  std::error_code ec;
  const bool in_place = fs::equivalent(dir, out_dir, ec);
  // The three files' paths are checked before the directory is read (a
  // re-simulation and a trade-off search): none is written when one would be refused.
  const auto path = [&](const char* name) { return (fs::path(out_dir) / name).string(); };
  static constexpr const char* kFiles[] = {"report.html", "report.md", "results.csv"};
  if (fs::exists(fs::symlink_status(out_dir, ec)) && !fs::is_directory(out_dir, ec))
    throw InputError(out_dir, "", "exists and is not a directory");
  // Another explore's directory would get a report of DIR's plans beside
  // its own summary: one directory, one sweep.
  if (!in_place)
    for (const char* name : {"summary.json", "results.jsonl"})
      if (fs::exists(fs::symlink_status(fs::path(out_dir) / name, ec)))
        throw InputError(out_dir, "",
                         "is another explore output directory (it holds " + std::string(name) +
                             "): a report of " + dir + " there would replace its own; choose another --out");
  if (fs::is_directory(out_dir, ec))
    for (const char* name : kFiles) check_output_target(path(name));
  std::optional<DirLock> write_lock;
  std::optional<DirReadLock> read_lock;
  if (in_place)
    write_lock.emplace(dir, "report");
  else
    read_lock.emplace(dir);
  ReportAnalysis an;
  const ReportData d = load_report_data(dir, progress, verify, &an);
  const std::string html = report_html(d, an);
  const std::string markdown = report_markdown(d, an);
  const std::string csv = results_csv(d, an);
  ec.clear();
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir))
    throw InputError(out_dir, "", "cannot create the output directory" + (ec ? ": " + ec.message() : std::string()));
  if (!in_place && fs::is_regular_file(fs::symlink_status(fs::path(out_dir) / "strata.lock")))
    write_lock.emplace(out_dir, "report");
  write_files_atomically({{path("report.html"), html}, {path("report.md"), markdown}, {path("results.csv"), csv}});
  std::string out = "report     " + path("report.html") + " (" + bytes_iec(static_cast<double>(html.size())) + ")\n";
  out += "           " + path("report.md") + " (" + bytes_iec(static_cast<double>(markdown.size())) + ")\n";
  out += "           " + path("results.csv") + " (" + bytes_iec(static_cast<double>(csv.size())) + ", " +
         std::to_string(d.plans.size()) + " plans)\n";
  if (!d.timeline) out += "timeline   none: " + d.timeline_note + "\n";
  return out;
}

}  // namespace strata::report
