// results.jsonl, summary.json and the rendering of `strata explore` / `strata merge`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_set>

#include "report/explore.hpp"
#include "report/table.hpp"
#include "report/fields_io.hpp"
#include "report/files.hpp"
#include "sim/json_reader.hpp"

namespace strata::report {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;
using sim::MemTag;
using strategies::ScoredPlan;

std::string results_path(const std::string& dir) { return (fs::path(dir) / "results.jsonl").string(); }
std::string summary_path(const std::string& dir) { return (fs::path(dir) / "summary.json").string(); }
std::string refined_path(const std::string& dir) { return (fs::path(dir) / "refined.jsonl").string(); }

// Lines sorted by plan id, each with its newline.
std::string jsonl(const std::map<std::uint64_t, std::string>& lines) {
  std::string all;
  for (const auto& [id, line] : lines) {
    all += line;
    all += '\n';
  }
  return all;
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError(dir, "", "cannot create the output directory" +
                                  (ec ? ": " + ec.message() : std::string()));
}

ordered_json axis_values_json(strategies::Axis a, const std::vector<strategies::AxisValue>& vs) {
  ordered_json arr = ordered_json::array();
  for (const auto& v : vs) {
    switch (strategies::axis_kind(a)) {
      case strategies::AxisKind::Int: arr.push_back(v.value); break;
      case strategies::AxisKind::Bool: arr.push_back(v.value != 0); break;
      case strategies::AxisKind::Enum: arr.push_back(strategies::value_name(a, v)); break;
    }
  }
  return arr;
}

ordered_json rules_json(const std::map<std::string, strategies::RuleCount>& m) {
  ordered_json j = ordered_json::object();
  for (const auto& [rule, rc] : m)
    j[rule] = {{"count", rc.count}, {"first_index", rc.first_index}, {"example", rc.example}};
  return j;
}

std::map<std::string, strategies::RuleCount> rules_from(const JsonReader& r) {
  std::map<std::string, strategies::RuleCount> m;
  for (const auto& item : r.json().items()) {
    const JsonReader e(item.value(), r.file(), r.child_path(item.key()));
    strategies::RuleCount rc;
    rc.count = static_cast<std::uint64_t>(e.at("count").as_int(0, INT64_MAX));
    rc.first_index = static_cast<std::uint64_t>(e.at("first_index").as_int(0, INT64_MAX));
    rc.example = e.at("example").as_string();
    m[item.key()] = rc;
  }
  return m;
}

// What a summary says besides its plans.
struct SummaryHead {
  ordered_json meta;  // scenario, model, gpus, gpu, space
  std::uint64_t shard_count = 1;
  std::vector<std::uint64_t> shard_indices;
  std::size_t top_k = 10;
  strategies::RankBy rank_by = strategies::RankBy::Throughput;
  std::uint64_t enumerated = 0, invalid = 0, pruned = 0, not_modelled = 0, failed = 0, scored = 0;
  std::map<std::string, strategies::RuleCount> rejected, pruned_by_pool;
};

std::string summary_text(const SummaryHead& h, const std::vector<ScoredPlan>& pareto,
                         const std::vector<ScoredPlan>& top,
                         const std::unordered_map<std::uint64_t, std::string>& lines) {
  ordered_json j = h.meta;
  j["shards"] = {{"count", h.shard_count}, {"indices", h.shard_indices}};
  j["top_k"] = h.top_k;
  j["rank_by"] = enum_name(h.rank_by);
  j["counts"] = {{"enumerated", h.enumerated},
                 {"invalid", h.invalid},
                 {"pruned_by_memory", h.pruned},
                 {"not_modelled", h.not_modelled},
                 {"failed", h.failed},
                 {"scored", h.scored},
                 {"pareto", pareto.size()},
                 {"dominated", h.scored - std::min<std::uint64_t>(h.scored, pareto.size())}};
  j["rejected_by_rule"] = rules_json(h.rejected);
  j["pruned_by_pool"] = rules_json(h.pruned_by_pool);
  auto records = [&](const std::vector<ScoredPlan>& ps) {
    ordered_json arr = ordered_json::array();
    for (const auto& p : ps) {
      const auto it = lines.find(p.plan_id);
      if (it == lines.end())
        throw Error("explore: no results.jsonl record for plan " + strategies::plan_id_hex(p.plan_id));
      arr.push_back(ordered_json::parse(it->second));
    }
    return arr;
  };
  j["pareto"] = records(pareto);
  j["top"] = records(top);
  return j.dump(2) + "\n";
}

std::string fmt_count(std::uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

// The value of a searched axis in a record ("interleaved:3" for a schedule
// with virtual stages; the composite offload from its three keys).
std::string axis_cell(const ordered_json& r, const std::string& axis) {
  const auto& p = r.at("plan");
  auto text = [](const ordered_json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return std::string(v.get<bool>() ? "yes" : "no");
    return v.dump();
  };
  if (axis == "schedule") {
    std::string sched = p.at("schedule").get<std::string>();
    if (p.at("virtual_stages").get<std::int64_t>() > 1)
      sched += ":" + std::to_string(p.at("virtual_stages").get<std::int64_t>());
    return sched;
  }
  if (axis == "offload") {
    const auto& o = p.at("offload");
    std::string out;
    auto add = [&](const std::string& x) { out += (out.empty() ? "" : "+") + x; };
    if (o.at("activations").get<bool>()) add("activations");
    if (o.at("weights").get<bool>()) add("weights");
    if (o.at("optimizer").get<std::string>() != "none")
      add("optimizer:" + o.at("optimizer").get<std::string>());
    return out.empty() ? "none" : out;
  }
  if (axis.rfind("batch.", 0) == 0) return text(r.at("batch").at(axis.substr(6)));
  const ordered_json* v = &p;
  std::size_t from = 0;
  for (std::size_t dot; (dot = axis.find('.', from)) != std::string::npos; from = dot + 1)
    v = &v->at(axis.substr(from, dot - from));
  return text(v->at(axis.substr(from)));
}

// Column heading of an axis: without its `implementation.` or `batch.` prefix.
std::string axis_heading(const std::string& axis) {
  if (axis == "sequence_parallel") return "sp";
  for (const char* prefix : {"implementation.", "batch."})
    if (axis.rfind(prefix, 0) == 0) return axis.substr(std::string(prefix).size());
  return axis;
}

// Rows of records: plan id, dp, tp, pp, every other axis the space searches
// with more than one value, then the figures.
Table plans_table(const ordered_json& records, const ordered_json& axes, bool csv,
                  const std::string& set) {
  std::vector<std::string> shown;
  for (const auto& [axis, values] : axes.items())
    if (axis != "dp" && axis != "tp" && axis != "pp" && values.size() > 1) shown.push_back(axis);
  Table t;
  if (!set.empty()) t.columns.push_back("set");
  for (const char* c : {"rank", "plan_id", "dp", "tp", "pp"}) t.columns.emplace_back(c);
  for (const auto& a : shown) t.columns.push_back(csv ? a : axis_heading(a));
  static constexpr const char* kCsv[] = {"step_time_s", "tokens_per_s_per_gpu", "mfu",
                                         "peak_memory_bytes"};
  static constexpr const char* kText[] = {"step s", "tokens/s/GPU", "MFU %", "peak GiB"};
  for (const char* c : csv ? kCsv : kText) t.columns.emplace_back(c);
  // With a goal: the steps to it and the time to train.
  const bool goal = !records.empty() && records.front().contains("training");
  if (goal) {
    t.columns.emplace_back(csv ? "train_steps" : "train steps");
    t.columns.emplace_back(csv ? "time_to_train_s" : "time to train");
  }
  t.align.assign(t.columns.size(), Align::Right);
  int rank = 1;
  for (const auto& r : records) {
    std::vector<std::string> row;
    if (!set.empty()) row.push_back(set);
    const auto& p = r.at("plan");
    row.push_back(std::to_string(rank++));
    row.push_back(r.at("plan_id").get<std::string>());
    for (const char* k : {"dp", "tp", "pp"}) row.push_back(std::to_string(p.at(k).get<std::int64_t>()));
    for (const auto& a : shown) row.push_back(axis_cell(r, a));
    const double step = r.at("step_time_s").get<double>();
    const double tokens = r.at("tokens_per_s_per_gpu").get<double>();
    const double mfu = r.at("mfu").get<double>();
    const Bytes peak = r.at("peak_memory_bytes").get<Bytes>();
    if (csv) {
      for (double v : {step, tokens, mfu}) row.push_back(ordered_json(v).dump());
      row.push_back(std::to_string(peak));
    } else {
      row.push_back(fixed(step, 3));
      row.push_back(fixed(tokens, 0));
      row.push_back(fixed(100 * mfu, 1));
      row.push_back(fixed(static_cast<double>(peak) / static_cast<double>(kGiB), 1));
    }
    if (goal) {
      const auto& steps = r.at("training").at("steps");
      const auto& ttt = r.at("time_to_train_s");
      if (csv) {
        row.push_back(steps.is_null() ? "" : steps.dump());
        row.push_back(ttt.is_null() ? "" : ttt.dump());
      } else {
        row.push_back(steps.is_null() ? "never" : count(steps.get<double>()));
        row.push_back(ttt.is_null() ? "never" : duration_text(ttt.get<double>()));
      }
    }
    t.add_row(std::move(row));
  }
  return t;
}

}  // namespace

std::string result_line(const strategies::ScoredOutcome& o) {
  const auto& sc = o.point;
  const auto& step = o.score.step;
  const auto& mem = o.memory;
  const double step_s = o.ranked.step_time_s;
  const double gpus = static_cast<double>(sc.cluster.gpus());
  const double model_tflops = step_s > 0 ? step.model_flops_per_step / step_s / gpus / 1e12 : 0;
  const double hw_tflops = step_s > 0 ? step.hardware_flops_per_step / step_s / gpus / 1e12 : 0;
  const double peak = sc.cluster.gpu.peak_tflops(sc.plan.precision);
  ordered_json j;
  j["feasible"] = true;
  j["step_time_s"] = step_s;
  j["tokens_per_s_per_gpu"] = o.ranked.tokens_per_s_per_gpu;
  j["model_tflops_per_gpu"] = model_tflops;
  j["hardware_tflops_per_gpu"] = hw_tflops;
  j["mfu"] = peak > 0 ? model_tflops / peak : 0;
  j["granularity"] = o.score.granularity == strategies::Granularity::Layer ? "layer" : "chunk";
  // False: folded figures (bounds), replayed per layer if the plan is kept.
  j["exact"] = o.score.exact;
  j["time_breakdown_s"] = breakdown_json(step.breakdown);
  j["bubble_fraction"] = step.bubble_fraction;
  j["peak_memory_bytes"] = mem.peak_bytes;
  j["gpu_memory_bytes"] = mem.gpu_capacity;
  j["memory_breakdown_bytes"] = tags_json(mem.breakdown);
  j["host_memory_bytes"] = mem.host_bytes_per_node;
  j["memory_source"] = mem.source;
  if (o.goal) add_goal_fields(j, sc, *o.goal, step_s);
  const std::string canon =
      o.canonical.empty() ? strategies::canonical_json(sc.plan, sc.batch) : std::string(o.canonical);
  return "{\"plan_id\":\"" + strategies::plan_id_hex(o.ranked.plan_id) + "\"," +
         canon.substr(1, canon.size() - 2) + "," + j.dump().substr(1);
}

ResultsFile read_results(const std::string& path,
                         const std::function<bool(std::uint64_t)>& keep_line) {
  if (!fs::exists(path)) return {};
  // As large as the plans written to it (about 1.4 KiB each).
  return parse_results(read_input_file(path, std::numeric_limits<std::uint64_t>::max()), path,
                       keep_line);
}

ResultsFile parse_results(std::string_view text, const std::string& path,
                          const std::function<bool(std::uint64_t)>& keep_line) {
  ResultsFile out;
  std::size_t pos = 0;
  std::uint64_t line_no = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {  // torn: the run stopped mid-line
      out.torn_bytes = text.size() - pos;
      break;
    }
    ++line_no;
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw InputError(where, "", "not a JSON object (results.jsonl holds one per line)");
    const JsonReader r(j, where);
    const auto id_text = r.at("plan_id").as_string();
    const auto id = strategies::parse_plan_id(id_text);
    if (!id) r.fail_at("plan_id", "must be 16 lower-case hex digits (got \"" + id_text + "\")");
    ScoredPlan sp{*id, r.at("step_time_s").as_number(0, 1e30),
                  r.at("peak_memory_bytes").as_int(0, INT64_MAX),
                  r.at("tokens_per_s_per_gpu").as_number(0, 1e30)};
    // With a goal; null: never reached.
    if (auto t = r.get("time_to_train_s"))
      sp.time_to_train_s = t->is_null() ? std::numeric_limits<double>::infinity() : t->as_number(0, 1e300);
    auto [it, fresh] = out.plans.try_emplace(*id, sp);
    if (!fresh && !(it->second == sp))
      throw InputError(where, "", "plan " + id_text + " appears twice with different results");
    if (auto e = r.get("exact"); e && !e->as_bool()) out.inexact.insert(*id);
    if (keep_line && keep_line(*id)) out.lines.try_emplace(*id, line);
  }
  out.valid_bytes = pos;
  return out;
}

ExploreReport run_explore(const strategies::Scenario& sc, const ExploreRunOptions& o) {
  strategies::ExploreOptions eo;
  eo.jobs = o.jobs;
  eo.shard_index = o.shard_index;
  eo.shard_count = o.shard_count;
  eo.top_k = o.top_k;
  eo.max_plans = o.max_plans;
  eo.rank_by = strategies::resolve_rank_by(sc, o.rank_by);
  strategies::check_plan_limit(sc, eo);  // before anything is written
  make_dir(o.out_dir);
  // The scenario beside its results, so `strata report` can re-simulate a
  // plan from the directory alone (docs/report.md).
  if (!sc.file.empty() && fs::is_regular_file(sc.file)) {
    std::ifstream in(sc.file, std::ios::binary);
    std::stringstream text;
    if (!in || !(text << in.rdbuf())) throw InputError(sc.file, "", "cannot read file");
    const std::string copy = (fs::path(o.out_dir) / "scenario.json").string();
    if (!fs::exists(copy) || !fs::equivalent(copy, sc.file)) write_file_atomically(copy, text.str());
  }
  const std::string results = results_path(o.out_dir);
  ExploreReport rep;
  ResultsFile prev;
  if (fs::exists(results)) {
    if (!o.resume)
      throw InputError(results, "",
                       "already exists; pass --resume to continue it, or choose another --out");
    prev = read_results(results);
    // Records scored with a goal carry a time to train (never 0); without, none.
    for (const auto& [id, p] : prev.plans)
      if ((p.time_to_train_s != 0) != sc.goal.has_value())
        throw InputError(results, "",
                         std::string("its plans were scored ") + (sc.goal ? "without" : "with") +
                             " a training goal and the scenario now has " + (sc.goal ? "one" : "none") +
                             "; resume with the same scenario, or choose another --out");
    rep.torn_bytes = prev.torn_bytes;
    if (prev.torn_bytes > 0) fs::resize_file(results, prev.valid_bytes);
  }
  std::FILE* out = std::fopen(results.c_str(), "ab");
  if (!out) throw InputError(results, "", "cannot write file");
  std::mutex mu;
  eo.scorer = o.scorer;
  eo.refine = o.refine;
  eo.finished = &prev.plans;
  eo.finished_inexact = &prev.inexact;
  eo.on_progress = o.on_progress;
  eo.progress_interval_s = o.progress_interval_s;
  // The kept plans re-simulated at layer granularity: DIR/refined.jsonl.
  std::map<std::uint64_t, std::string> refined;
  eo.on_refined = [&](const strategies::ScoredOutcome& so) {
    std::string line = result_line(so);
    std::lock_guard lock(mu);
    refined[so.ranked.plan_id] = std::move(line);
  };
  // Whole lines go to the file in batches, at least every 50 ms: a killed
  // run loses at most the plans of the last 50 ms (scored again on resume)
  // and a torn last line, which --resume cuts.
  using Clock = std::chrono::steady_clock;
  std::string pending;
  auto last_write = Clock::now();
  auto write_pending = [&] {
    if (!pending.empty() &&
        (std::fwrite(pending.data(), 1, pending.size(), out) != pending.size() || std::fflush(out) != 0))
      throw InputError(results, "", "cannot write file");
    pending.clear();
    last_write = Clock::now();
  };
  eo.on_scored = [&](const strategies::ScoredOutcome& so) {
    std::string line = result_line(so);
    line += '\n';
    std::lock_guard lock(mu);
    pending += line;
    if (pending.size() >= (1 << 16) || Clock::now() - last_write >= std::chrono::milliseconds(50))
      write_pending();
  };
  try {
    rep.result = strategies::explore(sc, eo);
    write_pending();
  } catch (...) {
    try {
      write_pending();  // what was scored before the failure stays
    } catch (...) {
    }
    std::fclose(out);
    throw;
  }
  if (std::fclose(out) != 0) throw InputError(results, "", "cannot write file");
  rep.jobs = rep.result.jobs;

  std::unordered_set<std::uint64_t> wanted;
  for (const auto& p : rep.result.pareto) wanted.insert(p.plan_id);
  for (const auto& p : rep.result.top) wanted.insert(p.plan_id);
  ResultsFile now = read_results(results, [&](std::uint64_t id) { return wanted.count(id) > 0; });
  for (const auto& [id, line] : refined) now.lines[id] = line;
  write_file_atomically(refined_path(o.out_dir), jsonl(refined));

  SummaryHead h;
  h.meta["scenario"] = sc.file;
  h.meta["model"] = sc.model.name;
  h.meta["gpus"] = sc.cluster.gpus();
  h.meta["gpu"] = sc.cluster.gpu.name;
  ordered_json axes = ordered_json::object();
  if (sc.space)
    for (const auto& ax : sc.space->axes)
      axes[std::string(enum_name(ax.axis))] = axis_values_json(ax.axis, ax.values);
  h.meta["space"] = {{"size", rep.result.space_size}, {"axes", axes}};
  h.shard_count = o.shard_count;
  h.shard_indices = {o.shard_index};
  h.top_k = o.top_k;
  h.rank_by = rep.result.rank_by;
  const auto& r = rep.result;
  h.enumerated = r.enumerated;
  h.invalid = r.invalid;
  h.pruned = r.pruned;
  h.not_modelled = r.not_modelled;
  h.failed = r.failed;
  h.scored = r.scored;
  h.rejected = r.rejected;
  h.pruned_by_pool = r.pruned_by_pool;
  rep.summary_json = summary_text(h, r.pareto, r.top, now.lines);
  write_file_atomically(summary_path(o.out_dir), rep.summary_json);
  return rep;
}

std::string merge_explore(const std::vector<std::string>& dirs, const std::string& out_dir) {
  if (dirs.empty()) throw InputError("", "", "merge needs at least one directory");
  SummaryHead h;
  std::set<std::uint64_t> seen_shards;
  std::map<std::uint64_t, std::string> lines;  // by plan id: sorted output
  std::map<std::uint64_t, std::string> line_dir;
  std::vector<ScoredPlan> plans;
  // Plans the shards re-simulated at layer granularity: their records and figures.
  std::map<std::uint64_t, std::string> refined;
  std::unordered_map<std::uint64_t, ScoredPlan> refined_figures;
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    const std::string sp = summary_path(dirs[d]);
    if (!fs::exists(sp)) throw InputError(sp, "", "file not found (not an explore output directory?)");
    const json s = load_json_file(sp);
    const JsonReader r(s, sp);
    r.allow({"scenario", "model", "gpus", "gpu", "space", "pareto", "top"});
    // Read again keeping the key order, so the merged summary lists the axes
    // as the shards do.
    std::ifstream sf(sp, std::ios::binary);
    std::stringstream sst;
    sst << sf.rdbuf();
    const ordered_json ordered = ordered_json::parse(sst.str(), nullptr, true, true);
    ordered_json meta;
    for (const char* k : {"scenario", "model", "gpus", "gpu", "space"}) {
      r.at(k);
      meta[k] = ordered.at(k);
    }
    const auto shards = r.at("shards");
    const auto count = static_cast<std::uint64_t>(shards.at("count").as_int(1, INT64_MAX));
    const auto k = static_cast<std::size_t>(r.at("top_k").as_int(0, 1'000'000));
    const auto by = r.enum_or("rank_by", strategies::RankBy::Throughput);
    if (d == 0) {
      h.meta = meta;
      h.shard_count = count;
      h.top_k = k;
      h.rank_by = by;
    } else {
      // The scenario's path may differ between machines; what it explores may not.
      auto what = [](const ordered_json& m) {
        json j = json::parse(m.dump());
        j.erase("scenario");
        return j;
      };
      if (what(meta) != what(h.meta))
        throw InputError(sp, "", "explores another model, cluster or space than " +
                                     summary_path(dirs[0]));
      if (count != h.shard_count)
        shards.fail_at("count", "is " + std::to_string(count) + "; " + summary_path(dirs[0]) +
                                    " has " + std::to_string(h.shard_count));
      if (k != h.top_k) r.fail_at("top_k", "differs from " + summary_path(dirs[0]));
      if (by != h.rank_by) r.fail_at("rank_by", "differs from " + summary_path(dirs[0]));
    }
    for (const auto& e : shards.at("indices").elements()) {
      const auto i = static_cast<std::uint64_t>(e.as_int(0, INT64_MAX));
      if (!seen_shards.insert(i).second)
        e.fail("shard " + std::to_string(i) + " is merged twice");
      h.shard_indices.push_back(i);
    }
    shards.reject_unknown_keys();
    const auto c = r.at("counts");
    c.allow({"pareto", "dominated"});
    auto add = [&](const char* key, std::uint64_t& to) {
      to += static_cast<std::uint64_t>(c.at(key).as_int(0, INT64_MAX));
    };
    add("enumerated", h.enumerated);
    add("invalid", h.invalid);
    add("pruned_by_memory", h.pruned);
    add("not_modelled", h.not_modelled);
    add("failed", h.failed);
    add("scored", h.scored);
    c.reject_unknown_keys();
    strategies::merge_rule_counts(h.rejected, rules_from(r.at("rejected_by_rule")));
    strategies::merge_rule_counts(h.pruned_by_pool, rules_from(r.at("pruned_by_pool")));
    r.reject_unknown_keys();

    const std::string rp = results_path(dirs[d]);
    const ResultsFile rf = read_results(rp, [](std::uint64_t) { return true; });
    for (const auto& [id, line] : rf.lines) {
      auto [it, fresh] = lines.try_emplace(id, line);
      if (fresh) {
        line_dir[id] = rp;
        plans.push_back(rf.plans.at(id));
      } else if (it->second != line) {
        throw InputError(rp, "plan " + strategies::plan_id_hex(id),
                         "has other results than in " + line_dir[id]);
      }
    }
    const std::string fp = refined_path(dirs[d]);
    const ResultsFile rr = read_results(fp, [](std::uint64_t) { return true; });
    for (const auto& [id, line] : rr.lines) {
      auto [it, fresh] = refined.try_emplace(id, line);
      if (!fresh && it->second != line)
        throw InputError(fp, "plan " + strategies::plan_id_hex(id), "has other results than in another shard");
      refined_figures[id] = rr.plans.at(id);
    }
  }
  for (auto& p : plans)
    if (const auto it = refined_figures.find(p.plan_id); it != refined_figures.end()) p = it->second;
  std::sort(h.shard_indices.begin(), h.shard_indices.end());
  std::sort(plans.begin(), plans.end(),
            [](const ScoredPlan& a, const ScoredPlan& b) { return a.plan_id < b.plan_id; });
  const auto pareto = strategies::pareto_front(plans);
  const auto top = strategies::top_plans(plans, h.top_k, h.rank_by);
  std::unordered_map<std::uint64_t, std::string> wanted;
  for (const auto* set : {&pareto, &top})
    for (const auto& p : *set) {
      const auto it = refined.find(p.plan_id);
      wanted[p.plan_id] = it != refined.end() ? it->second : lines.at(p.plan_id);
    }
  const std::string summary = summary_text(h, pareto, top, wanted);

  make_dir(out_dir);
  write_file_atomically(results_path(out_dir), jsonl(lines));
  write_file_atomically(refined_path(out_dir), jsonl(refined));
  write_file_atomically(summary_path(out_dir), summary);
  return summary;
}

std::string render_explore(const std::string& summary_json, const ExploreReport* report, Format f) {
  ordered_json s = ordered_json::parse(summary_json);
  if (f == Format::Json) {
    if (report) {
      const auto& r = report->result;
      s["run"] = {{"wall_s", r.wall_s},
                  {"jobs", report->jobs},
                  {"resumed", r.resumed},
                  {"scored_now", r.scored - r.resumed},
                  {"plans_per_s", r.wall_s > 0 ? static_cast<double>(r.enumerated) / r.wall_s : 0},
                  {"scoring_s", r.scoring_s},
                  {"scored_per_s", r.scoring_s > 0 ? static_cast<double>(r.scored - r.resumed) / r.scoring_s : 0},
                  {"refined", r.refined.size()},
                  {"refine_rounds", r.refine_rounds},
                  {"refine_s", r.refine_s}};
    }
    return s.dump(2) + "\n";
  }
  if (f == Format::Csv) {
    const auto& axes = s.at("space").at("axes");
    Table t = plans_table(s.at("top"), axes, true, "top");
    const Table p = plans_table(s.at("pareto"), axes, true, "pareto");
    t.rows.insert(t.rows.end(), p.rows.begin(), p.rows.end());
    return to_csv(t);
  }
  const auto& c = s.at("counts");
  auto n = [&](const char* k) { return fmt_count(c.at(k).get<std::uint64_t>()); };
  std::string out;
  const auto& sh = s.at("shards");
  std::string shards;
  for (const auto& i : sh.at("indices")) shards += (shards.empty() ? "" : ",") + std::to_string(i.get<std::uint64_t>());
  out += "scenario   " + printable(s.at("scenario").get<std::string>()) + "\n";
  out += "model      " + printable(s.at("model").get<std::string>()) + " on " +
         std::to_string(s.at("gpus").get<std::int64_t>()) + " x " +
         printable(s.at("gpu").get<std::string>()) + "\n";
  out += "space      " + fmt_count(s.at("space").at("size").get<std::uint64_t>()) + " plans over " +
         std::to_string(s.at("space").at("axes").size()) + " axes";
  if (sh.at("count").get<std::uint64_t>() > 1)
    out += " (shard " + shards + " of " + std::to_string(sh.at("count").get<std::uint64_t>()) + ")";
  out += "\n\n";
  Table t;
  t.columns = {"plans", "count", "first example"};
  t.align = {Align::Left, Align::Right, Align::Left};
  t.add_row({"enumerated", n("enumerated"), ""});
  t.add_row({"rejected (invalid)", n("invalid"), ""});
  for (const auto& [rule, rc] : s.at("rejected_by_rule").items())
    if (rule != "not-modelled" && rule != "internal-error")
      t.add_row({"  " + rule, fmt_count(rc.at("count").get<std::uint64_t>()), rc.at("example").get<std::string>()});
  t.add_row({"pruned by memory", n("pruned_by_memory"), ""});
  for (const auto& [pool, rc] : s.at("pruned_by_pool").items())
    t.add_row({"  " + pool, fmt_count(rc.at("count").get<std::uint64_t>()), rc.at("example").get<std::string>()});
  if (c.at("not_modelled").get<std::uint64_t>() > 0 || c.at("failed").get<std::uint64_t>() > 0) {
    t.add_row({"not modelled", n("not_modelled"), ""});
    t.add_row({"failed", n("failed"), ""});
    for (const char* rule : {"not-modelled", "internal-error"})
      if (s.at("rejected_by_rule").contains(rule)) {
        const auto& rc = s.at("rejected_by_rule").at(rule);
        t.add_row({std::string("  ") + rule, fmt_count(rc.at("count").get<std::uint64_t>()),
                   rc.at("example").get<std::string>()});
      }
  }
  t.add_row({"scored by the simulator", n("scored"), ""});
  t.add_row({"  on the Pareto front", n("pareto"), ""});
  t.add_row({"  dominated", n("dominated"), ""});
  out += to_text(t);
  if (report) {
    const auto& r = report->result;
    const double now = static_cast<double>(r.scored - r.resumed);
    out += "\nrun        " + fixed(r.wall_s, 2) + " s with " + std::to_string(report->jobs) +
           " jobs: " + fixed(r.wall_s > 0 ? static_cast<double>(r.enumerated) / r.wall_s : 0, 0) +
           " plans/s enumerated, " + fixed(r.scoring_s > 0 ? now / r.scoring_s : 0, 1) +
           " plans/s scored (coarse level)";
    if (!r.refined.empty())
      out += "; the " + fmt_count(r.refined.size()) + " plans kept re-simulated per layer in " +
             fixed(r.refine_s, 2) + " s";
    if (r.resumed > 0) out += "; " + fmt_count(r.resumed) + " scored plans resumed from results.jsonl";
    out += "\n";
  }
  const bool by_time = s.value("rank_by", std::string("throughput")) == "time_to_train";
  out += "\ntop " + std::to_string(s.at("top").size()) + " plans by " +
         (by_time ? "time to train" : "throughput") + "\n";
  out += to_text(plans_table(s.at("top"), s.at("space").at("axes"), false, ""));
  out += "\nPareto front of step time and peak memory (" + std::to_string(s.at("pareto").size()) +
         " plans)\n";
  out += to_text(plans_table(s.at("pareto"), s.at("space").at("axes"), false, ""));
  return out;
}

}  // namespace strata::report
