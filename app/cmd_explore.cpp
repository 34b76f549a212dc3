// strata explore SCENARIO --out DIR and strata merge DIR... --out DIR: the
// search of a scenario's space, and the combination of its shards.

#include <functional>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/explore.hpp"
#include "report/html_report.hpp"
#include "report/table.hpp"

namespace strata::app {

namespace {

struct ExploreArgs {
  std::string scenario;
  std::string out_dir;
  int jobs = 0;  // 0: hardware threads
  bool resume = false;
  std::string shard;  // "i/n"; empty: all plans
  std::size_t top_k = 10;
  std::optional<strategies::RankBy> rank_by;
  std::uint64_t max_plans = strategies::kDefaultMaxPlans;
  report::Format format = report::Format::Table;
  bool quiet = false;
};

// "i/n" with 0 <= i < n.
std::pair<std::uint64_t, std::uint64_t> parse_shard(const std::string& s) {
  const auto slash = s.find('/');
  std::uint64_t i = 0, n = 0;
  try {
    if (slash == std::string::npos) throw std::invalid_argument(s);
    std::size_t used_i = 0, used_n = 0;
    i = std::stoull(s.substr(0, slash), &used_i);
    n = std::stoull(s.substr(slash + 1), &used_n);
    if (used_i != slash || used_n != s.size() - slash - 1 || s[0] == '-' || s[slash + 1] == '-')
      throw std::invalid_argument(s);
  } catch (const std::exception&) {
    bad_value("--shard", "must be i/n, e.g. 0/4 (got \"" + s + "\")");
  }
  if (n < 1 || i >= n)
    bad_value("--shard", "needs n >= 1 and 0 <= i < n (got " + s + ")");
  return {i, n};
}

// The explorer's progress line.
struct ProgressLine : StatusLine {
  using StatusLine::StatusLine;
  void operator()(const strategies::Progress& p) {
    char buf[256];
    auto n = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    if (p.checked < p.total) {
      const double rate = p.elapsed_s > 0 ? static_cast<double>(p.checked) / p.elapsed_s : 0;
      std::snprintf(buf, sizeof buf, "explore: checking %llu/%llu plans (%.1f %%), %.0f configs/s",
                    n(p.checked), n(p.total),
                    100.0 * static_cast<double>(p.checked) / static_cast<double>(p.total), rate);
    } else {
      // Costliest plans are scored first: the ETA weighs what is left by its cost estimate.
      const double rate = p.scoring_s > 0 ? static_cast<double>(p.scored) / p.scoring_s : 0;
      const double eta = p.scored >= p.to_score ? 0
                         : p.cost_done > 0  ? p.scoring_s * (p.cost_total - p.cost_done) / p.cost_done
                                            : -1;
      std::snprintf(buf, sizeof buf,
                    "explore: %llu plans checked, %llu/%llu scored (%.1f %%), %.1f configs/s, "
                    "elapsed %s, ETA %s",
                    n(p.total), n(p.scored), n(p.to_score),
                    p.to_score > 0 ? 100.0 * static_cast<double>(p.scored) / static_cast<double>(p.to_score) : 100.0,
                    rate, duration(p.elapsed_s).c_str(), duration(eta).c_str());
    }
    show(buf);
  }
};

std::string explore(const ExploreArgs& a) {
  std::pair<std::uint64_t, std::uint64_t> shard{0, 1};
  if (!a.shard.empty()) shard = parse_shard(a.shard);
  const auto sc = load_scenario_file(a.scenario);
  ProgressLine line(a.quiet);
  report::ExploreRunOptions o;
  o.out_dir = a.out_dir;
  o.resume = a.resume;
  o.jobs = a.jobs;
  o.shard_index = shard.first;
  o.shard_count = shard.second;
  o.top_k = a.top_k;
  o.rank_by = a.rank_by;
  o.max_plans = a.max_plans;
  o.progress_interval_s = line.tty() ? 0.25 : 10.0;
  o.on_progress = [&line](const strategies::Progress& p) { line(p); };
  if (sc.cluster.stragglers && !a.quiet)
    std::cerr << "explore: note: cluster.stragglers' step-time distribution is strata simulate's; plans "
                 "are ranked by their step with cluster.slow alone\n";
  try {
    const auto rep = report::run_explore(sc, o);
    line.finish();
    std::string out = report::render_explore(rep.summary_json, &rep, a.format);
    // The comparison report beside the results (docs/report.md); the
    // results stand without it, so a failure here is only a warning.
    try {
      PhaseLine report_line("explore: report", a.quiet);
      // Of the records this process has just written: read, not verified
      // again (strata report DIR verifies them).
      report::write_report(a.out_dir, a.out_dir, std::ref(report_line), /*verify=*/false);
      report_line.finish();
      if (!a.quiet) std::cerr << "explore: report in " << (std::filesystem::path(a.out_dir) / "report.html").string()
                << "\n";
    } catch (const std::exception& e) {
      std::cerr << "strata: warning: explore: no report: " << report::printable(e.what()) << "\n";
    }
    return out;
  } catch (...) {
    line.finish();
    throw;
  }
}

struct MergeArgs {
  std::vector<std::string> dirs;
  std::string out_dir;
  report::Format format = report::Format::Table;
};

std::string merge(const MergeArgs& a) {
  return report::render_explore(report::merge_explore(a.dirs, a.out_dir), nullptr, a.format);
}

}  // namespace

Command add_explore(CLI::App& app) {
  auto a = std::make_shared<ExploreArgs>();
  Subcommand cmd(
      app, "explore", "Search the scenario's space: reject invalid plans, prune by memory, simulate "
                 "the rest; results stream to DIR/results.jsonl, counts and best plans to "
                 "DIR/summary.json");
  cmd.option("SCENARIO", a->scenario, "A scenario JSON with a \"space\"").required();
  cmd.option("--out", a->out_dir, "Output directory").required().type_name("DIR");
  cmd.option("--jobs", a->jobs, "Worker threads (default: hardware threads)").range(1, 4096);
  cmd.flag("--resume", a->resume, "Continue DIR/results.jsonl: plans already there are not simulated again");
  cmd.flag("--quiet", a->quiet, "No progress lines on standard error");
  cmd.option("--shard", a->shard, "Explore plans with index % n == i only").type_name("i/n");
  cmd.option("--top", a->top_k, "Keep the K best plans by the --rank-by key (default 10)").range(0, 1000000);
  enum_option<strategies::RankBy>(cmd, "--rank-by", a->rank_by,
                                  "Top plans by " + enum_choices<strategies::RankBy>() +
                                      " (default: time_to_train when the scenario has a goal, else throughput)")
      .type_name("KEY");
  cmd.option(
         "--max-plans",
         [a](const std::string& s) {
           // Digits only: an unsigned parse would take -1 as the largest count (no limit).
           std::uint64_t n = 0;
           bool ok = !s.empty() && s.size() <= 19;
           for (char ch : s) ok = ok && ch >= '0' && ch <= '9';
           if (ok) n = std::stoull(s);
           if (!ok || n < 1) bad_value("--max-plans", "must be a whole number of plans >= 1 (got \"" + s + "\")");
           a->max_plans = n;
         },
         "Refuse, before any work, a space (or shard) of more plans than N (default " +
             std::to_string(strategies::kDefaultMaxPlans) + ")")
      .type_name("N");
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a] { return explore(*a); }};
}

Command add_merge(CLI::App& app) {
  auto a = std::make_shared<MergeArgs>();
  Subcommand cmd(app, "merge", "Combine the output directories of explore shards into one");
  cmd.option("DIR", a->dirs, "Explore output directories (--shard i/n)").required();
  cmd.option("--out", a->out_dir, "Output directory").required().type_name("DIR");
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a] { return merge(*a); }};
}

}  // namespace strata::app
