// results.jsonl, summary.json and the rendering of `strata explore` / `strata merge`.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_set>

#include "strata_build_id.hpp"
#include "report/explore.hpp"
#include "report/table.hpp"
#include "report/fields_io.hpp"
#include "report/files.hpp"
#include "sim/json_reader.hpp"
#include "strategies/convergence_io.hpp"
#include "strategies/validate.hpp"
#include "sim/text.hpp"

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

// The first entry of `dir` that Strata did not put there for its own use
// (anything but its lock and the ".NAME.<hex>.tmp" temporaries a killed write
// leaves), or nothing. `except`, when given, is a file that may be there
// (the scenario explored, kept in the directory).
std::optional<std::string> first_foreign_entry(const std::string& dir, const std::string& except = {}) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) names.push_back(entry.path().filename().string());
  if (ec) throw InputError(dir, "", "cannot list the directory: " + ec.message());
  std::sort(names.begin(), names.end());  // the same one named every time
  for (const auto& n : names) {
    if (n == "strata.lock") continue;
    if (n.size() > 5 && n[0] == '.' && n.compare(n.size() - 4, 4, ".tmp") == 0) continue;
    const fs::path p = fs::path(dir) / n;
    if (!except.empty() && fs::equivalent(p, except, ec)) continue;
    return n;
  }
  return std::nullopt;
}

// An existing directory that holds no manifest.json holds no explore: its
// files are someone's own, and summary.json, scenario.json or report.* would
// replace them. Refused unless it is empty (but for Strata's lock and
// temporaries).
void require_empty_unless_explored(const std::string& dir, const std::string& command,
                                   const std::string& except = {}) {
  if (!fs::is_directory(dir)) return;
  const fs::path manifest = fs::path(dir) / "manifest.json";
  if (fs::exists(manifest) || fs::is_symlink(manifest)) return;
  if (const auto n = first_foreign_entry(dir, except))
    throw InputError(dir, "",
                     "is not empty (it holds " + *n + ") and is not a strata explore directory (no "
                     "manifest.json): " + command + " would replace files there; choose a new or empty directory");
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
      // The other scored plans of its class, listed once through it.
      arr.back()["equivalent_plans"] = p.equivalent;
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
                  const std::string& set, const std::string& unit = "tokens") {
  std::vector<std::string> shown;
  for (const auto& [axis, values] : axes.items())
    if (axis != "dp" && axis != "tp" && axis != "pp" && values.size() > 1) shown.push_back(axis);
  Table t;
  if (!set.empty()) t.columns.push_back("set");
  for (const char* c : {"rank", "plan_id", "dp", "tp", "pp"}) t.columns.emplace_back(c);
  for (const auto& a : shown) t.columns.push_back(csv ? a : axis_heading(a));
  static constexpr const char* kCsv[] = {"step_time_s", "tokens_per_s_per_gpu", "mfu",
                                         "peak_memory_bytes"};
  const std::string per_gpu = unit + "/s/GPU";
  const char* kText[] = {"step s", per_gpu.c_str(), "MFU %", "peak GiB"};
  for (const char* c : csv ? kCsv : kText) t.columns.emplace_back(c);
  // With a goal: the steps to it and the time to train.
  const bool goal = !records.empty() && records.front().contains("training");
  if (goal) {
    t.columns.emplace_back(csv ? "train_steps" : "train steps");
    t.columns.emplace_back(csv ? "time_to_train_s" : "time to train");
  }
  // Plans equivalent to the row's (same figures, listed once): in the CSV
  // whenever the summary counts them, in the text where any row has some.
  bool twins = false;
  for (const auto& r : records)
    if (r.contains("equivalent_plans") && (csv || r.at("equivalent_plans").get<std::uint64_t>() > 0)) twins = true;
  if (twins) t.columns.emplace_back(csv ? "equivalent_plans" : "equivalent plans");
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
    if (twins) {
      const auto n = r.contains("equivalent_plans") ? r.at("equivalent_plans").get<std::uint64_t>() : 0;
      row.push_back(csv ? std::to_string(n) : n > 0 ? "+" + count(static_cast<double>(n)) : "");
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
  const double peak = sc.cluster.mean_peak_tflops(sc.plan.precision);
  ordered_json j;
  // Plans of one class (strategies::equivalence_key) have the same figures;
  // top and Pareto lists hold one of each.
  if (o.ranked.class_id != 0) j["class_id"] = strategies::plan_id_hex(o.ranked.class_id);
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
  j["memory_required_bytes"] = mem.required_bytes;
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

namespace {

// The longest results.jsonl line read (a record is about 1.4 KiB).
constexpr std::size_t kMaxRecordBytes = 1 << 20;

// Lines of a regular file, read in blocks: memory bounded by the longest line.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw InputError(path, "", "cannot read file: " + std::generic_category().message(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw InputError(path, "", "not a regular file");
    }
  }
  ~LineReader() { ::close(fd_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its newline; `complete` is false for a last line
  // that has none. False at the end of the file.
  bool next(std::string& line, bool& complete) {
    line.clear();
    for (;;) {
      if (begin_ < end_) {
        const char* from = buf_.data() + begin_;
        const void* nl = std::memchr(from, '\n', end_ - begin_);
        const std::size_t n = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - from) : end_ - begin_;
        if (line.size() + n > kMaxRecordBytes)
          throw InputError(path_, "", "a line is longer than 1 MiB (not a results record)");
        line.append(from, n);
        begin_ += n;
        if (nl) {
          ++begin_;
          complete = true;
          return true;
        }
      }
      const ssize_t got = ::read(fd_, buf_.data(), buf_.size());
      if (got < 0) {
        if (errno == EINTR) continue;
        throw InputError(path_, "", "cannot read file: " + std::generic_category().message(errno));
      }
      begin_ = 0;
      end_ = static_cast<std::size_t>(got);
      if (got == 0) {
        complete = false;
        return !line.empty();
      }
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<char> buf_ = std::vector<char>(1 << 16);
  std::size_t begin_ = 0, end_ = 0;
};

// The JSON value at a dotted key of a record's plan or batch; null when absent.
const json* field_at(const json& batch, const json& plan, std::string_view dotted) {
  const json* v = &plan;
  if (dotted.rfind("batch.", 0) == 0) {
    v = &batch;
    dotted.remove_prefix(6);
  }
  for (;;) {
    const auto dot = dotted.find('.');
    const std::string key(dotted.substr(0, dot));
    if (!v->is_object()) return nullptr;
    const auto it = v->find(key);
    if (it == v->end()) return nullptr;
    v = &*it;
    if (dot == std::string_view::npos) return v;
    dotted.remove_prefix(dot + 1);
  }
}

// The values of `ax` a record's plan and batch may have been made with, the
// likeliest first; every value when the record does not say.
std::vector<std::size_t> axis_candidates(const strategies::SpaceAxis& ax, const json& batch, const json& plan) {
  using strategies::Axis;
  std::vector<std::size_t> exact, loose;
  const std::string name(enum_name(ax.axis));
  if (ax.axis == Axis::Offload) {
    const json* o = field_at(batch, plan, "offload");
    std::string choice;
    if (o && o->is_object()) {
      const bool act = o->value("activations", false);
      const std::string weights = weights_offload_of(*o);
      const std::string opt = o->value("optimizer", std::string("none"));
      const int on = int{act} + int{!weights.empty()} + int{opt != "none"};
      choice = on == 0                 ? "none"
               : on > 1                ? ""
               : act                   ? "activations"
               : weights == "weights"  ? "weights"
               : opt == "cpu"          ? "optimizer"
                                       : "";
    }
    for (std::size_t i = 0; i < ax.values.size(); ++i)
      if (strategies::value_name(ax.axis, ax.values[i]) == choice) exact.push_back(i);
  } else if (const json* f = field_at(batch, plan, name)) {
    for (std::size_t i = 0; i < ax.values.size(); ++i) {
      const auto& v = ax.values[i];
      switch (strategies::axis_kind(ax.axis)) {
        case strategies::AxisKind::Int:
          if (f->is_number_integer() && f->get<std::int64_t>() == v.value) exact.push_back(i);
          break;
        case strategies::AxisKind::Bool:
          if (f->is_boolean() && f->get<bool>() == (v.value != 0)) exact.push_back(i);
          break;
        case strategies::AxisKind::Enum: {
          if (!f->is_string()) break;
          const std::string plain = strategies::value_name(ax.axis, {v.value, 0});
          if (f->get<std::string>() != plain) break;
          if (ax.axis != Axis::Schedule || v.virtual_stages == 0) {
            loose.push_back(i);
            break;
          }
          const json* vs = field_at(batch, plan, "virtual_stages");
          if (vs && vs->is_number_integer() && vs->get<std::int64_t>() == v.virtual_stages) exact.push_back(i);
          break;
        }
      }
    }
  }
  exact.insert(exact.end(), loose.begin(), loose.end());
  if (exact.empty())
    for (std::size_t i = 0; i < ax.values.size(); ++i) exact.push_back(i);
  return exact;
}

// Where in `sc`'s space the plan whose canonical {batch, plan} is
// `canonical` is: each axis's value read from the record, the point rebuilt
// and its canonical JSON compared (so the answer is exact whatever the axes
// do to each other). A plan some points share (recompute_k without every_k)
// has several indices: `found` is the first one `wanted` accepts, else
// `other` the first one it does not.
struct SpaceIndex {
  std::optional<std::uint64_t> found, other;
};
SpaceIndex space_index(const strategies::Scenario& sc, const json& batch, const json& plan,
                       const std::string& canonical, const std::function<bool(std::uint64_t)>& wanted) {
  SpaceIndex out;
  if (!sc.space) {
    if (strategies::canonical_json(sc.plan, sc.batch) == canonical) (wanted(0) ? out.found : out.other) = 0;
    return out;
  }
  const auto& axes = sc.space->axes;
  std::vector<std::vector<std::size_t>> cands;
  cands.reserve(axes.size());
  for (const auto& ax : axes) cands.push_back(axis_candidates(ax, batch, plan));
  std::vector<std::size_t> pick(axes.size(), 0);
  // Ambiguous values (one plan reached from several points) are few: a bounded search.
  for (int attempt = 0; attempt < 256; ++attempt) {
    std::uint64_t index = 0;
    for (std::size_t a = 0; a < axes.size(); ++a) index = index * axes[a].values.size() + cands[a][pick[a]];
    strategies::Plan p;
    strategies::Batch b;
    strategies::space_point(sc, *sc.space, index, p, b);
    if (strategies::canonical_json(p, b) == canonical) {
      if (wanted(index)) {
        out.found = index;
        return out;
      }
      if (!out.other) out.other = index;
    }
    std::size_t a = axes.size();
    while (a > 0 && ++pick[a - 1] == cands[a - 1].size()) pick[--a] = 0;
    if (a == 0) break;
  }
  return out;
}

// One whole line of a results file, checked and added to `out`.
void parse_record(std::string_view line, std::uint64_t line_no, const std::string& where, const RecordCheck* check,
                  std::optional<strategies::Scenario>& point, const std::function<bool(std::uint64_t)>& keep_line,
                  const RecordFn& on_line, ResultsFile& out) {
  // The strict parser: a key twice in one record is refused (a plain parse
  // keeps the last, so an appended key could override what was scored).
  json j;
  try {
    j = parse_json_text(line, where);
  } catch (const InputError& e) {
    if (!e.path().empty()) throw;  // a key twice, named by its path
    throw InputError(where, "", "not a JSON object (results.jsonl holds one per line)");
  }
  if (!j.is_object()) throw InputError(where, "", "not a JSON object (results.jsonl holds one per line)");
  const JsonReader r(j, where);
  const auto id_text = r.at("plan_id").as_string();
  const auto id = strategies::parse_plan_id(id_text);
  if (!id) r.fail_at("plan_id", "must be 16 lower-case hex digits (got \"" + id_text + "\")");
  ScoredPlan sp{*id, r.at("step_time_s").as_number(0, 1e30), r.at("peak_memory_bytes").as_int(0, INT64_MAX),
                r.at("tokens_per_s_per_gpu").as_number(0, 1e30)};
  // Explore records scored plans only: a step takes time and memory.
  if (!(sp.step_time_s > 0)) r.fail_at("step_time_s", "must be above 0 (explore records only plans it scored)");
  if (sp.peak_memory_bytes <= 0)
    r.fail_at("peak_memory_bytes", "must be above 0 (explore records only plans it scored)");
  // The breakdowns as report reads them (seconds and bytes, none below 0),
  // so merge and export keep no record report would refuse.
  const auto time_parts = r.at("time_breakdown_s");
  if (!time_parts.is_object()) time_parts.fail("must be an object of seconds by part");
  for (const auto& [part, v] : time_parts.json().items()) {
    const auto x = time_parts.at(part);
    if (part != "exposed_comm") {
      x.as_number(0, 1e30);
      continue;
    }
    if (!x.is_object()) x.fail("must be an object of seconds by kind of communication");
    for (const auto& [kind, s] : v.items()) x.at(kind).as_number(0, 1e30);
  }
  const auto memory_parts = r.at("memory_breakdown_bytes");
  if (!memory_parts.is_object()) memory_parts.fail("must be an object of bytes by tag");
  for (const auto& [tag, v] : memory_parts.json().items()) memory_parts.at(tag).as_int(0, INT64_MAX);
  // The id is the hash of the record's own batch and plan: a record edited
  // or made up by hand does not keep it.
  const json& batch = r.at("batch").json();
  const json& plan = r.at("plan").json();
  if (!batch.is_object()) r.fail_at("batch", "must be an object");
  if (!plan.is_object()) r.fail_at("plan", "must be an object");
  const std::string canonical = json{{"batch", batch}, {"plan", plan}}.dump();
  const std::uint64_t hash = strategies::fnv1a64(canonical);
  if (hash != *id)
    r.fail_at("plan_id", id_text + " is not the id of the record's batch and plan (FNV-1a 64 of them is " +
                             strategies::plan_id_hex(hash) + "): the record was not written by strata explore");
  if (check && check->scenario) {
    const auto& mine_shards = check->shard_indices;
    const auto at = space_index(*check->scenario, batch, plan, canonical, [&](std::uint64_t i) {
      return std::find(mine_shards.begin(), mine_shards.end(), i % check->shard_count) != mine_shards.end();
    });
    if (!at.found && !at.other)
      r.fail_at("plan", "plan " + id_text + " is not a plan of the explored space (" +
                            check->scenario->file + ")");
    const auto index = at.found ? at.found : at.other;
    const std::uint64_t shard = *index % check->shard_count;
    if (!at.found) {
      std::string mine;
      for (auto i : check->shard_indices) mine += (mine.empty() ? "" : ",") + std::to_string(i);
      r.fail_at("plan", "plan " + id_text + " is plan " + std::to_string(*index) + " of the space, in shard " +
                            std::to_string(shard) + "/" + std::to_string(check->shard_count) +
                            ", not in this directory's shard " + mine + "/" + std::to_string(check->shard_count));
    }
    // One scenario reused for every record: only its plan and batch change.
    if (!point) {
      point = *check->scenario;
      point->space.reset();
    }
    point->plan = check->scenario->plan;
    point->batch = check->scenario->batch;
    if (check->scenario->space)
      strategies::space_point(*check->scenario, *check->scenario->space, *index, point->plan, point->batch);
    if (auto v = strategies::first_violation(*point))
      r.fail_at("plan", "plan " + id_text + " breaks the rule " + v->rule + " (" + v->path + ": " + v->message +
                            "): explore records no such plan");
    // The figures agree with each other: throughput is the step's tokens over its time.
    const double want = strategies::tokens_per_s_per_gpu(*point, sp.step_time_s);
    if (!(std::fabs(sp.tokens_per_s_per_gpu - want) <= 1e-9 * std::max(1.0, std::fabs(want)))) {
      std::ostringstream os;
      os.precision(17);
      os << "is " << sp.tokens_per_s_per_gpu << ", and the record's step time of " << sp.step_time_s
         << " s gives " << want << " (" << point->batch.global << " sequences of " << point->model.seq_len
         << " tokens on " << point->cluster.gpus() << " GPUs): the record's figures disagree";
      r.fail_at("tokens_per_s_per_gpu", os.str());
    }
  }
  // Its equivalence class (records written before classes have none: a
  // class of their own). The plans of one class are one step program, so
  // one file gives them one step time and one peak: a record changed alone
  // (the true best plan made slow, say) disagrees with its class.
  if (auto c = r.get("class_id")) {
    const auto text = c->as_string();
    const auto cls = strategies::parse_plan_id(text);
    if (!cls) r.fail_at("class_id", "must be 16 lower-case hex digits (got \"" + text + "\")");
    sp.class_id = *cls;
    const auto [first, fresh] = out.class_figures.try_emplace(sp.class_id, sp);
    const ScoredPlan& f = first->second;
    if (!fresh && f.plan_id != sp.plan_id)
      for (const auto& [key, mine, theirs] :
           {std::tuple{"step_time_s", sp.step_time_s, f.step_time_s},
            std::tuple{"peak_memory_bytes", static_cast<double>(sp.peak_memory_bytes),
                       static_cast<double>(f.peak_memory_bytes)}})
        if (mine != theirs) {
          std::ostringstream os;
          os.precision(17);
          os << "is " << mine << " and plan " << strategies::plan_id_hex(f.plan_id) << " of the same equivalence class "
             << text << " has " << theirs << ": the plans of one class are one step program, scored once";
          r.fail_at(key, os.str());
        }
  }
  // With a goal; null: never reached.
  if (auto t = r.get("time_to_train_s"))
    sp.time_to_train_s = t->is_null() ? std::numeric_limits<double>::infinity() : t->as_number(0, 1e300);
  auto [it, fresh] = out.plans.try_emplace(*id, sp);
  if (!fresh && !(it->second == sp))
    throw InputError(where, "", "plan " + id_text + " appears twice with different results");
  if (auto e = r.get("exact"); e && !e->as_bool()) out.inexact.insert(*id);
  if (keep_line && keep_line(*id) && out.lines.try_emplace(*id, line).second) out.line_numbers[*id] = line_no;
  if (on_line) on_line(*id, line, j);
}

}  // namespace

ResultsFile read_results(const std::string& path, const std::function<bool(std::uint64_t)>& keep_line,
                         const RecordCheck* check, const RecordFn& on_line, const PhaseProgress& progress) {
  ResultsFile out;
  if (!fs::exists(path)) return out;
  LineReader in(path);
  std::error_code ec;
  const std::uint64_t size = progress ? fs::file_size(path, ec) : 0;
  const std::string phase = progress ? "checking " + sim::utf8_escaped(path) : "";
  std::optional<strategies::Scenario> point;
  std::string line;
  bool complete = false;
  std::uint64_t line_no = 0, pos = 0;
  while (in.next(line, complete)) {
    if (!complete) {  // torn: the run stopped mid-line
      out.torn_bytes = line.size();
      break;
    }
    ++line_no;
    pos += line.size() + 1;
    if (line.empty()) continue;
    ++out.lines_read;
    parse_record(line, line_no, path + ":" + std::to_string(line_no), check, point, keep_line, on_line, out);
    if (progress && out.lines_read % 1000 == 0) progress(phase, pos, std::max(size, pos));
  }
  if (progress) progress(phase, pos, pos);
  out.valid_bytes = pos;
  return out;
}

ResultsFile parse_results(std::string_view text, const std::string& path,
                          const std::function<bool(std::uint64_t)>& keep_line, const RecordCheck* check) {
  ResultsFile out;
  std::optional<strategies::Scenario> point;
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
    ++out.lines_read;
    parse_record(line, line_no, path + ":" + std::to_string(line_no), check, point, keep_line, {}, out);
  }
  out.valid_bytes = pos;
  return out;
}

namespace {

std::string manifest_path(const std::string& dir) { return (fs::path(dir) / "manifest.json").string(); }
std::string scenario_copy_path(const std::string& dir) { return (fs::path(dir) / "scenario.json").string(); }

ordered_json manifest_json(const strategies::Scenario& sc, std::uint64_t shard_count,
                           const std::vector<std::uint64_t>& shard_indices) {
  const auto& m = sc.model;
  ordered_json model = {{"name", m.name},           {"layers", m.layers},
                        {"hidden", m.hidden},       {"heads", m.heads},
                        {"kv_heads", m.kv_heads},   {"ffn_hidden", m.ffn_hidden},
                        {"vocab", m.vocab},         {"seq_len", m.seq_len},
                        {"mlp", enum_name(m.mlp)},  {"norm", enum_name(m.norm)},
                        {"bias", m.bias},           {"position_embedding", enum_name(m.position_embedding)},
                        {"tied_embeddings", m.tied_embeddings}, {"dropout", m.dropout}};
  model["moe"] = m.moe ? ordered_json{{"experts", m.moe->experts}, {"top_k", m.moe->top_k}} : ordered_json();
  const auto& c = sc.cluster;
  const auto gpu_json = [](const cost::GpuSpec& g) {
    ordered_json j{{"name", g.name},
                   {"memory_GiB", g.memory_GiB},
                   {"hbm_GBps", g.hbm_GBps},
                   {"sms", g.sms},
                   {"tflops", tflops_json(g.tflops)}};
    // Prices a GEMM's tile and wave quantisation (with sms).
    if (g.gemm_tile.known()) j["gemm_tile"] = ordered_json{{"m", g.gemm_tile.m}, {"n", g.gemm_tile.n}};
    // Prices row- and block-scaled FP8; written only where the GPU has such
    // GEMMs, so directories explored on others keep their manifest.
    if (g.fp8_block_scaling != cost::Fp8BlockScaling::None)
      j["fp8_block_scaling"] = std::string(enum_name(g.fp8_block_scaling));
    return j;
  };
  ordered_json cluster = {{"name", c.name},
                          {"gpus", c.gpus()},
                          {"nodes", c.nodes},
                          {"gpu", gpu_json(c.gpu)},
                          {"node", node_links_json(c.node)}};
  // Each node group (cluster.groups) prices its stages: written only with
  // groups, so directories explored without them keep their manifest.
  if (c.heterogeneous()) {
    ordered_json groups = ordered_json::array();
    for (const auto& g : c.groups)
      groups.push_back({{"name", g.name}, {"nodes", g.nodes}, {"gpu", gpu_json(g.gpu)}, {"node", node_links_json(g.node)}});
    cluster["groups"] = groups;
  }
  // Slow GPUs change every record's step; written only when there are some,
  // so directories explored without them keep their manifest.
  if (!c.slow.empty()) {
    ordered_json slow = ordered_json::array();
    for (const auto& d : c.slow)
      slow.push_back(d.rank >= 0 ? ordered_json{{"rank", d.rank}, {"factor", d.factor}}
                                 : ordered_json{{"node", d.node}, {"factor", d.factor}});
    cluster["slow"] = slow;
  }
  ordered_json axes = ordered_json::object();
  std::uint64_t size = 1;
  if (sc.space) {
    for (const auto& ax : sc.space->axes)
      axes[std::string(enum_name(ax.axis))] = axis_values_json(ax.axis, ax.values);
    size = sc.space->size();
  }
  ordered_json space = {{"size", size},
                        {"template", ordered_json::parse(strategies::canonical_json(sc.plan, sc.batch))},
                        {"axes", axes},
                        {"derive_dp", sc.space && sc.space->derive_dp},
                        {"balance_stages", sc.space && sc.space->balance_stages}};
  ordered_json goal;  // null without one
  if (sc.goal) {
    goal = ordered_json::object();
    if (sc.goal->tokens) goal["tokens"] = *sc.goal->tokens;
    if (sc.goal->target_loss) goal["target_loss"] = *sc.goal->target_loss;
    // What the time to train is read from: the convergence model as read
    // (its file, and FNV-1a 64 of the model with the scenario's overrides)
    // and the learning-rate rule.
    if (sc.convergence)
      goal["convergence"] = {
          {"file", sim::utf8_escaped(sc.convergence->file)},
          {"fnv1a64", strategies::plan_id_hex(strategies::fnv1a64(strategies::convergence_json(*sc.convergence)))}};
    if (sc.lr) {
      goal["lr"] = {{"base", sc.lr->base},
                    {"scaling", enum_name(sc.lr->scaling)},
                    {"warmup_steps", sc.lr->warmup_steps},
                    {"reference_batch", sc.lr->reference_batch ? ordered_json(*sc.lr->reference_batch) : ordered_json()}};
    }
  }
  // The stack as read (each setting's values), so that another stack, or
  // the same name with other settings, is a difference; the calibration by
  // the file it was read from.
  ordered_json stack;  // null without one
  if (sc.stack) {
    ordered_json settings = ordered_json::object();
    for (const auto& st : sc.stack->settings)
      settings[std::string(enum_name(st.key))] = strategies::setting_text(st);
    stack = {{"name", sc.stack->name}, {"settings", settings}};
  }
  ordered_json j;
  j["strata"] = STRATA_VERSION;
  // The build (its source commit): another build may price plans otherwise.
  j["build"] = STRATA_BUILD;
  j["model"] = model;
  j["cluster"] = cluster;
  // Before the space: the stack sets the template's implementation, so a
  // changed stack is named as such.
  j["stack"] = stack;
  j["calibration"] = sc.calibration ? ordered_json(sim::utf8_escaped(*sc.calibration)) : ordered_json();
  j["space"] = space;
  j["goal"] = goal;
  j["shards"] = {{"count", shard_count}, {"indices", shard_indices}};
  return j;
}

// The first dotted key where `a` and `b` differ, with both values.
struct Difference {
  std::string key;
  std::string a, b;
};
std::optional<Difference> first_difference(const ordered_json& a, const ordered_json& b, const std::string& at) {
  if (a.is_object() && b.is_object()) {
    // In the manifest's own order (names before figures), then keys only `b` has.
    std::vector<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.push_back(k);
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) keys.push_back(k);
    for (const auto& k : keys) {
      const std::string sub = at.empty() ? k : at + "." + k;
      if (!a.contains(k) || !b.contains(k))
        return Difference{sub, a.contains(k) ? a.at(k).dump() : "nothing", b.contains(k) ? b.at(k).dump() : "nothing"};
      if (auto d = first_difference(a.at(k), b.at(k), sub)) return d;
    }
    return std::nullopt;
  }
  // Lists of one length: the first element that differs (cluster.groups[1].nodes).
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (std::size_t i = 0; i < a.size(); ++i)
      if (auto d = first_difference(a.at(i), b.at(i), at + "[" + std::to_string(i) + "]")) return d;
    return std::nullopt;
  }
  // Numbers compare by value (80 and 80.0 are one figure).
  if (a.is_number() && b.is_number() && a.get<double>() == b.get<double>()) return std::nullopt;
  if (a != b) return Difference{at, a.dump(), b.dump()};
  return std::nullopt;
}

ordered_json read_manifest(const std::string& path) {
  if (!fs::exists(path))
    throw InputError(path, "",
                     "file not found: the directory was written by an older strata or by hand, so what its "
                     "records are of is unknown; explore again into another directory");
  const ordered_json m = ordered_json::parse(read_input_file(path, kMaxJsonFileBytes), nullptr, false);
  if (m.is_discarded() || !m.is_object() || !m.contains("strata") || !m.contains("shards"))
    throw InputError(path, "", "not an explore manifest (a JSON object with \"strata\", \"model\", \"cluster\", "
                               "\"space\", \"goal\" and \"shards\")");
  return m;
}

}  // namespace

std::string manifest_text(const strategies::Scenario& sc, std::uint64_t shard_count,
                          const std::vector<std::uint64_t>& shard_indices) {
  return manifest_json(sc, shard_count, shard_indices).dump(2) + "\n";
}

void check_manifest(const std::string& path, const strategies::Scenario& sc, const std::string& what,
                    const ShardSet* shards) {
  ordered_json have = read_manifest(path);
  ordered_json want =
      manifest_json(sc, shards ? shards->count : 1, shards ? shards->indices : std::vector<std::uint64_t>{0});
  if (!shards) {
    have.erase("shards");
    want.erase("shards");
  }
  if (have.at("strata") != want.at("strata"))
    throw InputError(path, "strata",
                     "the directory was written by strata " + have.at("strata").dump() + ", this is strata " +
                         want.at("strata").dump() + ": explore again into another directory");
  const std::string built = have.contains("build") ? have.at("build").dump() : std::string("an unrecorded build");
  if (!have.contains("build") || have.at("build") != want.at("build"))
    throw InputError(path, "build",
                     "the directory was written by " + built + ", this is " + want.at("build").dump() +
                         ", which may price its plans otherwise: explore again into another directory");
  if (auto d = first_difference(have, want, ""))
    throw InputError(path, d->key,
                     "the directory holds plans of " + d->a + ", " + what + " has " + d->b +
                         ": use the scenario it was explored with, or another directory");
}

std::optional<strategies::Scenario> load_explored_scenario(const std::string& dir, const std::string& original) {
  const std::string source = scenario_copy_path(dir);
  if (!fs::exists(source)) return std::nullopt;
  std::string base = fs::path(original).parent_path().string();
  if (base.empty() || !fs::is_directory(base)) base = dir;
  auto sc = strategies::parse_scenario(read_input_file(source, kMaxJsonFileBytes), source, base);
  // A scenario that named no calibration was explored with the measured one
  // found for its GPU (strata's default): the manifest records which.
  const std::string manifest = manifest_path(dir);
  if (!sc.calibration && fs::exists(manifest)) {
    const ordered_json m = read_manifest(manifest);
    if (m.contains("calibration") && m.at("calibration").is_string()) {
      const std::string cal = m.at("calibration").get<std::string>();
      if (!fs::is_regular_file(cal))
        throw InputError(manifest, "calibration",
                         "the directory was explored with the calibration " + cal + ", which is gone");
      sc.calibration = cal;
    }
  }
  return sc;
}

ShardSet manifest_shards(const std::string& path) {
  const json m = json::parse(read_manifest(path).dump());
  const JsonReader r(m, path);
  const auto sh = r.at("shards");
  ShardSet s;
  s.count = static_cast<std::uint64_t>(sh.at("count").as_int(1, INT64_MAX));
  s.indices.clear();
  for (const auto& e : sh.at("indices").elements()) {
    const auto i = static_cast<std::uint64_t>(e.as_int(0, INT64_MAX));
    if (i >= s.count) e.fail("shard " + std::to_string(i) + " is not below the count " + std::to_string(s.count));
    s.indices.push_back(i);
  }
  return s;
}

namespace {

// The first field where a stored record differs from the re-scored one, in
// the re-scored record's order (figures compare within a relative 1e-9:
// the JSON writer rounds nothing, but a last bit is no forgery).
std::optional<Difference> record_difference(const ordered_json& stored, const ordered_json& want,
                                            const std::string& at) {
  if (stored.is_object() && want.is_object()) {
    for (const auto& [k, v] : want.items()) {
      const std::string sub = at.empty() ? k : at + "." + k;
      if (!stored.contains(k)) return Difference{sub, "absent", v.dump()};
      if (auto d = record_difference(stored.at(k), v, sub)) return d;
    }
    for (const auto& [k, v] : stored.items())
      if (!want.contains(k)) return Difference{at.empty() ? k : at + "." + k, v.dump(), "absent"};
    return std::nullopt;
  }
  if (stored.is_array() && want.is_array() && stored.size() == want.size()) {
    for (std::size_t i = 0; i < want.size(); ++i)
      if (auto d = record_difference(stored[i], want[i], at + "[" + std::to_string(i) + "]")) return d;
    return std::nullopt;
  }
  if (stored.is_number() && want.is_number() && !stored.is_boolean()) {
    const double a = stored.get<double>(), b = want.get<double>();
    if (std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b))) return std::nullopt;
  }
  if (stored != want) return Difference{at, stored.dump(), want.dump()};
  return std::nullopt;
}

}  // namespace

std::vector<std::uint64_t> shown_plans(const std::vector<ScoredPlan>& plans, std::size_t top_k,
                                       strategies::RankBy by) {
  std::vector<std::uint64_t> ids;
  for (const auto& p : strategies::pareto_front(plans)) ids.push_back(p.plan_id);
  for (const auto& p : strategies::top_plans(plans, top_k, by)) ids.push_back(p.plan_id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

namespace {
// The lines of the records of `want` in `path`, with their numbers: the
// first of each id, as read_results keeps them. For files read_results has
// checked already (rescore_records' callers): a record whose line starts
// with its plan_id, as explore writes every one, is told by that alone,
// any other is parsed.
ResultsFile wanted_lines(const std::string& path, const std::unordered_set<std::uint64_t>& want) {
  ResultsFile out;
  LineReader in(path);
  std::string line;
  bool complete = false;
  std::uint64_t line_no = 0;
  static constexpr std::string_view kPrefix = "{\"plan_id\":\"";
  while (in.next(line, complete) && complete) {
    ++line_no;
    if (line.empty()) continue;
    std::optional<std::uint64_t> id;
    if (line.size() > kPrefix.size() + 16 && line.compare(0, kPrefix.size(), kPrefix) == 0 &&
        line[kPrefix.size() + 16] == '"')
      id = strategies::parse_plan_id(line.substr(kPrefix.size(), 16));
    if (!id) {
      const json j = parse_json_text(line, path + ":" + std::to_string(line_no));
      id = strategies::parse_plan_id(j.at("plan_id").get<std::string>());
    }
    if (id && want.count(*id) && out.lines.try_emplace(*id, line).second) out.line_numbers[*id] = line_no;
  }
  return out;
}
}  // namespace

std::string record_line(const std::string& dir, std::uint64_t id) {
  const std::unordered_set<std::uint64_t> want{id};
  for (const std::string& path : {refined_path(dir), results_path(dir)}) {
    if (!fs::exists(path)) continue;
    ResultsFile f = wanted_lines(path, want);
    if (auto it = f.lines.find(id); it != f.lines.end()) return std::move(it->second);
  }
  throw InputError(results_path(dir), "", "holds no record of plan " + strategies::plan_id_hex(id));
}

std::vector<std::uint64_t> plans_to_rescore(const std::vector<ScoredPlan>& plans, std::vector<std::uint64_t> shown,
                                            std::size_t drawn) {
  std::sort(shown.begin(), shown.end());
  shown.erase(std::unique(shown.begin(), shown.end()), shown.end());
  std::vector<std::uint64_t> others;
  for (const auto& p : plans)
    if (!std::binary_search(shown.begin(), shown.end(), p.plan_id)) others.push_back(p.plan_id);
  std::sort(others.begin(), others.end());
  others.erase(std::unique(others.begin(), others.end()), others.end());
  // A partial Fisher-Yates shuffle: the first `drawn` are a uniform sample.
  std::mt19937_64 rng((static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}());
  const std::size_t n = std::min(drawn, others.size());
  for (std::size_t i = 0; i < n; ++i) {
    std::uniform_int_distribution<std::size_t> pick(i, others.size() - 1);
    std::swap(others[i], others[pick(rng)]);
  }
  shown.insert(shown.end(), others.begin(), others.begin() + static_cast<std::ptrdiff_t>(n));
  std::sort(shown.begin(), shown.end());
  return shown;
}

void rescore_records(const strategies::Scenario& sc, const std::string& results, const std::string& refined,
                     const std::vector<std::uint64_t>& ids, const PhaseProgress& progress) {
  if (ids.empty()) return;
  const std::string phase = "re-scoring " + std::to_string(ids.size()) +
                            " plans (those the summary shows and others drawn at random)";
  std::uint64_t done = 0;
  const std::unordered_set<std::uint64_t> want(ids.begin(), ids.end());
  const ResultsFile coarse = wanted_lines(results, want);
  ResultsFile fine;
  if (!refined.empty() && fs::exists(refined)) fine = wanted_lines(refined, want);
  strategies::Scenario pt = sc;
  pt.space.reset();
  for (const std::uint64_t id : ids) {
    if (progress) progress(phase, done++, ids.size());
    const auto c = coarse.lines.find(id);
    const auto f = fine.lines.find(id);
    if (c == coarse.lines.end() && f == fine.lines.end()) continue;
    const bool from_coarse = c != coarse.lines.end();
    const std::string& line = from_coarse ? c->second : f->second;
    const std::string where = from_coarse ? results + ":" + std::to_string(coarse.line_numbers.at(id))
                                          : refined + ":" + std::to_string(fine.line_numbers.at(id));
    // The point of the space the record is of (read_results found it).
    const json j = json::parse(line);
    const json& batch = j.at("batch");
    const json& plan = j.at("plan");
    const auto at = space_index(sc, batch, plan, json{{"batch", batch}, {"plan", plan}}.dump(),
                                [](std::uint64_t) { return true; });
    const auto index = at.found ? at.found : at.other;
    if (!index) throw InputError(where, "plan", "is not a plan of the explored space (" + sc.file + ")");
    pt.plan = sc.plan;
    pt.batch = sc.batch;
    if (sc.space) strategies::space_point(sc, *sc.space, *index, pt.plan, pt.batch);
    // The plan explored alone, as explore scores and refines every plan.
    strategies::ExploreOptions eo;
    eo.jobs = 1;
    eo.top_k = 1;
    eo.progress_interval_s = 1e9;
    // Refined per layer only where the directory holds refined figures.
    eo.refine_kept = f != fine.lines.end();
    std::string scored, refined_line;
    eo.on_scored = [&](const strategies::ScoredOutcome& so) { scored = result_line(so); };
    eo.on_refined = [&](const strategies::ScoredOutcome& so) { refined_line = result_line(so); };
    strategies::explore(pt, eo);
    const std::string id_text = strategies::plan_id_hex(id);
    auto compare = [&](const std::string& stored, const std::string& where_, const std::string& again) {
      if (again.empty())
        throw InputError(where_, "",
                         "plan " + id_text + " re-scored does not fit or is not modelled: explore records no "
                         "such plan (the record was not written by strata explore)");
      if (auto d = record_difference(ordered_json::parse(stored), ordered_json::parse(again), ""))
        throw InputError(where_, d->key,
                         "is " + d->a + " in the record of plan " + id_text + " and " + d->b +
                             " re-scored: the record's figures are not what strata explore computes for its plan");
    };
    if (from_coarse) compare(line, where, scored);
    if (f != fine.lines.end()) {
      const std::string fwhere = refined + ":" + std::to_string(fine.line_numbers.at(id));
      // A plan explore did not need to refine is refined to its coarse figures' plan alone.
      compare(f->second, fwhere, refined_line.empty() ? scored : refined_line);
    }
  }
}

namespace {

// A summary's counts: one partition of its shards' plans.
struct Counts {
  std::uint64_t enumerated = 0, invalid = 0, pruned = 0, not_modelled = 0, failed = 0, scored = 0;
  std::map<std::string, strategies::RuleCount> rejected, by_pool;
};

// Reads `counts`, `rejected_by_rule` and `pruned_by_pool` of summary `r`
// and checks that they add up: every plan enumerated is invalid, pruned,
// not modelled, failed or scored, and the per-rule and per-pool counts sum
// to their totals (a record dropped with a count moved by hand does not).
Counts read_counts(const JsonReader& r) {
  const auto c = r.at("counts");
  c.allow({"pareto", "dominated"});
  auto n = [&](const char* key) { return static_cast<std::uint64_t>(c.at(key).as_int(0, INT64_MAX)); };
  Counts k;
  k.enumerated = n("enumerated");
  k.invalid = n("invalid");
  k.pruned = n("pruned_by_memory");
  k.not_modelled = n("not_modelled");
  k.failed = n("failed");
  k.scored = n("scored");
  c.reject_unknown_keys();
  k.rejected = rules_from(r.at("rejected_by_rule"));
  k.by_pool = rules_from(r.at("pruned_by_pool"));
  auto total = [](const std::map<std::string, strategies::RuleCount>& m) {
    std::uint64_t t = 0;
    for (const auto& [rule, rc] : m) t += rc.count;
    return t;
  };
  const std::string forged = ": the summary's counts are not explore's";
  const std::uint64_t parts = k.invalid + k.pruned + k.not_modelled + k.failed + k.scored;
  if (parts != k.enumerated)
    c.fail("invalid + pruned_by_memory + not_modelled + failed + scored is " + std::to_string(parts) +
           ", not enumerated = " + std::to_string(k.enumerated) + forged);
  if (total(k.rejected) != k.invalid)
    r.fail_at("rejected_by_rule", "adds up to " + std::to_string(total(k.rejected)) +
                                      " plans, not counts.invalid = " + std::to_string(k.invalid) + forged);
  if (total(k.by_pool) != k.pruned)
    r.fail_at("pruned_by_pool", "adds up to " + std::to_string(total(k.by_pool)) +
                                    " plans, not counts.pruned_by_memory = " + std::to_string(k.pruned) + forged);
  return k;
}

// The counts against the space explored: as many plans enumerated as the
// shards hold of it (plan i is in shard i % count), and as many invalid as
// its rules refuse there, checked again (about a microsecond a plan): a
// valid plan dropped from the records and counted invalid is found.
void check_counts(const JsonReader& r, const Counts& k, const strategies::Scenario& sc, const ShardSet& shards) {
  if (!sc.space) return;
  const auto c = r.at("counts");
  const std::uint64_t size = sc.space->size();
  std::uint64_t expected = 0;
  for (const std::uint64_t i : shards.indices) expected += i < size ? (size - i + shards.count - 1) / shards.count : 0;
  if (k.enumerated != expected)
    c.fail_at("enumerated", "is " + std::to_string(k.enumerated) + "; the space's " + std::to_string(size) +
                                " plans give this directory's shards " + std::to_string(expected) +
                                ": the summary's counts are not explore's");
  strategies::Scenario pt = sc;
  pt.space.reset();
  std::uint64_t refused = 0;
  for (const std::uint64_t i : shards.indices)
    for (std::uint64_t index = i; index < size; index += shards.count) {
      strategies::space_point(sc, *sc.space, index, pt.plan, pt.batch);
      if (strategies::first_violation(pt)) ++refused;
    }
  if (refused != k.invalid)
    c.fail_at("invalid", "is " + std::to_string(k.invalid) + "; the space's rules refuse " + std::to_string(refused) +
                             " of the shards' plans: the summary's counts are not explore's");
}

}  // namespace

CheckedDir check_explore_dir(const std::string& dir, const RecordFn& on_record, const PhaseProgress& progress,
                             bool verify) {
  const std::string sp = summary_path(dir), rp = results_path(dir), fp = refined_path(dir);
  for (const auto& p : {sp, rp})
    if (!fs::exists(p)) throw InputError(p, "", "file not found (not an explore output directory?)");
  const json s = load_json_file(sp);
  const JsonReader r(s, sp);
  if (!r.is_object()) r.fail("must be a JSON object (explore's summary)");
  const std::string scenario = r.at("scenario").as_string();
  const auto top_k = static_cast<std::size_t>(r.int_or("top_k", 10, 0, 1'000'000));
  const auto rank_by = r.enum_or("rank_by", strategies::RankBy::Throughput);
  CheckedDir out;
  RecordCheck check;
  const std::string mp = manifest_path(dir);
  if (fs::exists(mp) || fs::is_symlink(mp)) {
    const json m = load_json_file(mp);
    const JsonReader mr(m, mp);
    auto agree = [&](const char* key, const json& summary_value, const json& manifest_value) {
      if (summary_value != manifest_value)
        r.fail_at(key, "is " + summary_value.dump() + " and " + mp + " says " + manifest_value.dump() +
                           ": the summary is not of the records beside it");
    };
    agree("model", r.at("model").json(), mr.at("model").at("name").json());
    agree("gpus", r.at("gpus").json(), mr.at("cluster").at("gpus").json());
    agree("gpu", r.at("gpu").json(), mr.at("cluster").at("gpu").at("name").json());
    agree("space", r.at("space").at("size").json(), mr.at("space").at("size").json());
    const ShardSet shards = manifest_shards(mp);
    out.explored = load_explored_scenario(dir, scenario);
    if (out.explored) {
      check_manifest(mp, *out.explored, scenario_copy_path(dir), &shards);
      check = {&*out.explored, shards.count, shards.indices};
      if (r.has("counts")) check_counts(r, read_counts(r), *out.explored, shards);
    }
  }
  const RecordCheck* checking = out.explored && verify ? &check : nullptr;
  // A torn last line is a record the run was writing when it was killed:
  // reporting without it would show a top and a front the summary does not.
  const auto whole = [](const std::string& path, const ResultsFile& f) {
    if (f.torn_bytes > 0)
      throw InputError(path, "",
                       "ends in a torn line (the run was killed while writing it): finish the run with explore "
                       "--resume before reporting it");
  };
  out.results = read_results(rp, {}, checking, on_record, progress);
  whole(rp, out.results);
  // Plans the explorer re-simulated at layer granularity count with those figures, as in its summary.
  if (fs::exists(fp)) {
    ResultsFile rr = read_results(fp, {}, checking, on_record, progress);
    whole(fp, rr);
    for (auto& [id, p] : rr.plans) out.results.plans[id] = p;
  }
  std::vector<ScoredPlan> plans;
  plans.reserve(out.results.plans.size());
  for (const auto& [id, p] : out.results.plans) plans.push_back(p);
  std::sort(plans.begin(), plans.end(), [](const ScoredPlan& a, const ScoredPlan& b) { return a.plan_id < b.plan_id; });
  out.pareto = strategies::pareto_front(plans);
  out.top = strategies::top_plans(plans, top_k, rank_by);
  if (out.explored && verify)
    rescore_records(*out.explored, rp, fp, plans_to_rescore(plans, shown_plans(plans, top_k, rank_by)), progress);
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
  // The scenario's text, for its copy beside the results (so `strata
  // report` can re-simulate a plan from the directory alone, docs/report.md).
  std::optional<std::string> scenario_text;
  if (!sc.file.empty() && fs::is_regular_file(sc.file)) scenario_text = read_input_file(sc.file, kMaxJsonFileBytes);
  if (fs::exists(o.out_dir) && !fs::is_directory(o.out_dir))
    throw InputError(o.out_dir, "", "exists and is not a directory");
  const std::string results = results_path(o.out_dir);
  const std::string manifest = manifest_path(o.out_dir);
  // A directory of someone's own files is refused before the lock is made
  // there (and again once it is held). One with a results.jsonl is resumed
  // or refused below.
  auto results_there = [&] { return fs::exists(results) || fs::is_symlink(results); };
  if (!results_there()) require_empty_unless_explored(o.out_dir, "explore", sc.file);
  make_dir(o.out_dir);
  // Every check passes before anything but the lock is written: a refused
  // run leaves the directory as it found it.
  const DirLock lock(o.out_dir, "explore");
  const ShardSet shards{o.shard_count, {o.shard_index}};
  ExploreReport rep;
  ResultsFile prev;
  const bool have_results = results_there();
  if (!have_results) require_empty_unless_explored(o.out_dir, "explore", sc.file);
  if (have_results && !o.resume)
    throw InputError(results, "", "already exists; pass --resume to continue it, or choose another --out");
  require_regular_or_missing(results);
  if (have_results || (o.resume && fs::exists(manifest))) {
    check_manifest(manifest, sc, "the scenario", &shards);
    const RecordCheck check{&sc, o.shard_count, {o.shard_index}};
    prev = read_results(results, {}, &check);
    // Records scored with a goal carry a time to train (never 0); without, none.
    for (const auto& [id, p] : prev.plans)
      if ((p.time_to_train_s != 0) != sc.goal.has_value())
        throw InputError(results, "",
                         std::string("its plans were scored ") + (sc.goal ? "without" : "with") +
                             " a training goal and the scenario now has " + (sc.goal ? "one" : "none") +
                             "; resume with the same scenario, or choose another --out");
    rep.torn_bytes = prev.torn_bytes;
  }
  // Records are trusted for their figures only once re-scored: those a
  // summary of them would show (a plan the final summary shows is among
  // them, fewer plans competing here) and a sample of the others drawn at
  // random (plans_to_rescore), before anything is written.
  std::unordered_set<std::uint64_t> rescored;
  auto rescore_kept = [&](const std::vector<std::uint64_t>& ids) {
    std::vector<std::uint64_t> todo;
    for (const auto id : ids)
      if (prev.plans.count(id) && rescored.insert(id).second) todo.push_back(id);
    rescore_records(sc, results, "", todo);
  };
  if (!prev.plans.empty()) {
    std::vector<ScoredPlan> before;
    before.reserve(prev.plans.size());
    for (const auto& [id, p] : prev.plans) before.push_back(p);
    std::sort(before.begin(), before.end(),
              [](const ScoredPlan& a, const ScoredPlan& b) { return a.plan_id < b.plan_id; });
    rescore_kept(plans_to_rescore(before, shown_plans(before, o.top_k, *eo.rank_by)));
  }
  for (const char* name : {"summary.json", "refined.jsonl", "scenario.json"})
    require_regular_or_missing((fs::path(o.out_dir) / name).string());

  // What a killed run left half-written (its temporaries) goes, once every check
  // passed; the lock
  // says no other strata is writing here.
  remove_stale_temporaries(o.out_dir, {"summary.json", "refined.jsonl", "scenario.json", "manifest.json",
                                       "results.csv", "report.md", "report.html"});
  write_file_atomically(manifest, manifest_text(sc, o.shard_count, {o.shard_index}));
  if (scenario_text) {
    const std::string copy = scenario_copy_path(o.out_dir);
    if (!fs::exists(copy) || !fs::equivalent(copy, sc.file)) write_file_atomically(copy, *scenario_text);
  }
  AppendFile out(results);
  if (prev.torn_bytes > 0) out.truncate(prev.valid_bytes);
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
    if (!pending.empty()) out.write(pending);
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
    throw;
  }
  out.close();
  rep.jobs = rep.result.jobs;
  {
    // Resumed plans the refined ranking let in (rare): re-scored before the summary shows them.
    std::vector<std::uint64_t> kept;
    for (const auto* set : {&rep.result.pareto, &rep.result.top})
      for (const auto& p : *set) kept.push_back(p.plan_id);
    rescore_kept(kept);
  }

  std::unordered_set<std::uint64_t> wanted;
  for (const auto& p : rep.result.pareto) wanted.insert(p.plan_id);
  for (const auto& p : rep.result.top) wanted.insert(p.plan_id);
  // The shown plans' lines, found by their ids alone: every record was
  // checked as it was read (resumed) or written by this run.
  ResultsFile now = wanted_lines(results, wanted);
  for (const auto& [id, line] : refined) now.lines[id] = line;
  write_file_atomically(refined_path(o.out_dir), jsonl(refined));

  SummaryHead h;
  h.meta["scenario"] = sim::utf8_escaped(sc.file);
  h.meta["model"] = sc.model.name;
  h.meta["gpus"] = sc.cluster.gpus();
  h.meta["gpu"] = sc.cluster.gpu.name;
  // A layer chain's throughput counts samples (ModelSpec::tokens_per_sample).
  if (sc.model.chain) h.meta["throughput_unit"] = sc.model.throughput_unit();
  if (sc.cluster.heterogeneous()) h.meta["cluster_gpus"] = sc.cluster.gpus_text();
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
  // No explore or merge writes a shard while it is read: each is locked
  // shared (a read-only shard merges; two merges may read one shard).
  std::vector<std::unique_ptr<DirReadLock>> locks;
  for (const auto& d : dirs) {
    if (!fs::is_directory(d)) throw InputError(d, "", "not a directory (merge reads the --out directories of strata explore)");
    std::error_code ec;
    if (fs::equivalent(d, out_dir, ec))
      throw InputError(out_dir, "",
                       "is one of the directories merged: merge writes a new directory (--out), it does not "
                       "add shards to one of them");
    bool held = false;
    for (std::size_t e = 0; e < locks.size() && !held; ++e) held = fs::equivalent(d, dirs[e]);
    if (!held) locks.push_back(std::make_unique<DirReadLock>(d));
  }
  SummaryHead h;
  std::set<std::uint64_t> seen_shards;
  std::vector<ScoredPlan> plans;
  std::unordered_map<std::uint64_t, std::size_t> plan_dir;  // plan id -> its place in `plans`
  std::vector<std::size_t> plan_from;                       // the directory of each plan
  // Plans the shards re-simulated at layer granularity: their records and figures.
  std::map<std::uint64_t, std::string> refined;
  std::unordered_map<std::uint64_t, ScoredPlan> refined_figures;
  std::unordered_map<std::uint64_t, std::size_t> refined_from;  // the directory of each refined record
  std::vector<strategies::Scenario> scenarios;  // each directory's, read from its copy
  std::vector<std::uint64_t> first_shard(dirs.size());
  ordered_json manifest0;
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    const std::string sp = summary_path(dirs[d]);
    if (!fs::exists(sp)) throw InputError(sp, "", "file not found (not an explore output directory?)");
    const json s = load_json_file(sp);
    const JsonReader r(s, sp);
    r.allow({"scenario", "model", "gpus", "gpu", "cluster_gpus", "throughput_unit", "space", "pareto", "top"});
    // Read again keeping the key order, so the merged summary lists the axes
    // as the shards do.
    const ordered_json ordered =
        ordered_json::parse(read_input_file(sp, kMaxJsonFileBytes), nullptr, true, true);
    ordered_json meta;
    for (const char* k : {"scenario", "model", "gpus", "gpu", "cluster_gpus", "throughput_unit", "space"}) {
      // cluster_gpus: a cluster of node groups' only; throughput_unit: a
      // layer chain's only.
      if ((std::string_view(k) == "cluster_gpus" || std::string_view(k) == "throughput_unit") && !r.has(k)) continue;
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
    ShardSet mine{count, {}};
    for (const auto& e : shards.at("indices").elements()) {
      const auto i = static_cast<std::uint64_t>(e.as_int(0, INT64_MAX));
      if (i >= count) e.fail("shard " + std::to_string(i) + " is not below the count " + std::to_string(count));
      if (!seen_shards.insert(i).second)
        e.fail("shard " + std::to_string(i) + " is merged twice");
      h.shard_indices.push_back(i);
      mine.indices.push_back(i);
    }
    if (mine.indices.empty()) shards.fail_at("indices", "names no shard");
    first_shard[d] = *std::min_element(mine.indices.begin(), mine.indices.end());
    shards.reject_unknown_keys();
    const Counts counts = read_counts(r);
    h.enumerated += counts.enumerated;
    h.invalid += counts.invalid;
    h.pruned += counts.pruned;
    h.not_modelled += counts.not_modelled;
    h.failed += counts.failed;
    h.scored += counts.scored;
    const std::uint64_t scored = counts.scored, pruned = counts.pruned;
    strategies::merge_rule_counts(h.rejected, counts.rejected);
    strategies::merge_rule_counts(h.pruned_by_pool, counts.by_pool);
    r.reject_unknown_keys();

    // What the directory holds plans of: its manifest, the same for every
    // shard but the shards, and the scenario copy its records are checked
    // against.
    const std::string mp = manifest_path(dirs[d]);
    const ShardSet manifest_has = manifest_shards(mp);
    {
      auto sorted = [](std::vector<std::uint64_t> v) {
        std::sort(v.begin(), v.end());
        return v;
      };
      if (manifest_has.count != mine.count || sorted(manifest_has.indices) != sorted(mine.indices))
        throw InputError(mp, "shards", "differ from " + sp + "'s");
    }
    ordered_json m = read_manifest(mp);
    m.erase("shards");
    if (d == 0) {
      manifest0 = m;
    } else if (auto diff = first_difference(manifest0, m, "")) {
      throw InputError(mp, diff->key,
                       "is " + diff->b + " and " + manifest_path(dirs[0]) + " has " + diff->a +
                           ": the directories explore different scenarios");
    }
    auto sc = load_explored_scenario(dirs[d], meta.at("scenario").get<std::string>());
    if (!sc)
      throw InputError(scenario_copy_path(dirs[d]), "",
                       "file not found: merge checks every record against the space explored, read from the "
                       "copy of the scenario explore keeps there");
    check_manifest(mp, *sc, scenario_copy_path(dirs[d]), &mine);
    check_counts(r, counts, *sc, mine);
    scenarios.push_back(std::move(*sc));
    const RecordCheck check{&scenarios.back(), count, mine.indices};

    // Every plan the summary counts is in results.jsonl, whole: a shard cut
    // short is not merged as if it were complete.
    const std::string rp = results_path(dirs[d]);
    if (!fs::exists(rp)) throw InputError(rp, "", "file not found: the shard has no results");
    const ResultsFile rf = read_results(rp, {}, &check);
    if (rf.torn_bytes > 0)
      throw InputError(rp, "",
                       "ends in a torn line (the run was killed while writing it): finish the shard with "
                       "explore --resume before merging it");
    // Kept plans that no longer fit once replayed per layer keep their record and count as pruned.
    if (rf.plans.size() < scored || rf.plans.size() > scored + pruned)
      throw InputError(rp, "",
                       "holds " + std::to_string(rf.plans.size()) + " plans and " + sp + " counts " +
                           std::to_string(scored) + " scored: the shard is incomplete or not its own; finish "
                           "it with explore --resume");
    // A plan several points of the space share is in each of their shards, the same.
    for (const auto& [id, p] : rf.plans) {
      auto [it, fresh] = plan_dir.try_emplace(id, plans.size());
      if (fresh) {
        plans.push_back(p);
        plan_from.push_back(d);
      } else if (!(plans[it->second] == p)) {
        throw InputError(rp, "plan " + strategies::plan_id_hex(id),
                         "has other results than in " + results_path(dirs[plan_from[it->second]]));
      }
    }
    const std::string fp = refined_path(dirs[d]);
    const ResultsFile rr = read_results(fp, [](std::uint64_t) { return true; }, &check);
    if (rr.torn_bytes > 0) throw InputError(fp, "", "ends in a torn line");
    for (const auto& [id, line] : rr.lines) {
      auto [it, fresh] = refined.try_emplace(id, line);
      if (!fresh && it->second != line)
        throw InputError(fp, "plan " + strategies::plan_id_hex(id), "has other results than in another shard");
      refined_figures[id] = rr.plans.at(id);
      refined_from.try_emplace(id, d);
    }
  }
  for (auto& p : plans)
    if (const auto it = refined_figures.find(p.plan_id); it != refined_figures.end()) p = it->second;
  std::unordered_map<std::uint64_t, std::size_t> dir_of_plan;  // the first directory holding each plan
  for (const auto& [id, at] : plan_dir) dir_of_plan.emplace(id, plan_from[at]);
  std::sort(h.shard_indices.begin(), h.shard_indices.end());
  std::sort(plans.begin(), plans.end(),
            [](const ScoredPlan& a, const ScoredPlan& b) { return a.plan_id < b.plan_id; });
  const auto pareto = strategies::pareto_front(plans);
  const auto top = strategies::top_plans(plans, h.top_k, h.rank_by);
  {
    // The plans the merged summary shows and a sample of the others drawn
    // at random, re-scored in the directories their records come from,
    // before anything is written.
    std::map<std::size_t, std::vector<std::uint64_t>> by_dir;
    for (const auto id : plans_to_rescore(plans, shown_plans(plans, h.top_k, h.rank_by))) {
      const std::size_t from = dir_of_plan.at(id);
      by_dir[from].push_back(id);
      if (const auto it = refined_from.find(id); it != refined_from.end() && it->second != from)
        by_dir[it->second].push_back(id);
    }
    for (const auto& [d, ids] : by_dir)
      rescore_records(scenarios[d], results_path(dirs[d]), refined_path(dirs[d]), ids);
  }
  std::unordered_map<std::uint64_t, std::string> wanted;
  for (const auto* set : {&pareto, &top})
    for (const auto& p : *set)
      if (const auto it = refined.find(p.plan_id); it != refined.end()) wanted[p.plan_id] = it->second;

  // The shards' records streamed into one file, in shard order; the kept
  // plans' records picked on the way.
  std::vector<std::size_t> order(dirs.size());
  for (std::size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return first_shard[a] < first_shard[b]; });
  const std::string manifest = manifest_text(scenarios[order.front()], h.shard_count, h.shard_indices);
  // An existing output directory is written over only when it holds this
  // very merge (the same manifest: a merge run again); one of another
  // scenario or shards, or of someone's own files, is refused, as explore
  // refuses it without --resume. Checked before the lock is made there, and
  // again once it is held.
  auto require_same_explore = [&] {
    if (!fs::is_directory(out_dir)) return;
    const std::string mp = manifest_path(out_dir);
    if (fs::exists(mp) || fs::is_symlink(mp)) {
      if (auto diff = first_difference(read_manifest(mp), ordered_json::parse(manifest), ""))
        throw InputError(mp, diff->key,
                         "the directory holds plans of " + diff->a + ", the merge has " + diff->b +
                             ": merge into a new directory");
      return;
    }
    require_empty_unless_explored(out_dir, "merge");
  };
  require_same_explore();
  // Every check passed: the output directory, locked.
  make_dir(out_dir);
  const DirLock out_lock(out_dir, "merge");
  require_same_explore();
  {
    AtomicFile out(results_path(out_dir));
    std::unordered_set<std::uint64_t> written, kept;
    for (const auto* set : {&pareto, &top})
      for (const auto& p : *set) kept.insert(p.plan_id);
    std::string buf;
    for (std::size_t d : order) {
      read_results(results_path(dirs[d]), {}, nullptr, [&](std::uint64_t id, std::string_view line, const json&) {
        if (!written.insert(id).second) return;
        buf.append(line);
        buf += '\n';
        if (buf.size() >= (1 << 20)) {
          out.write(buf);
          buf.clear();
        }
        if (kept.count(id) && !wanted.count(id)) wanted.emplace(id, std::string(line));
      });
    }
    out.write(buf);
    const std::string summary = summary_text(h, pareto, top, wanted);
    write_file_atomically(refined_path(out_dir), jsonl(refined));
    write_file_atomically(scenario_copy_path(out_dir),
                          read_input_file(scenario_copy_path(dirs[order.front()]), kMaxJsonFileBytes));
    write_file_atomically(manifest_path(out_dir), manifest);
    out.commit();
    write_file_atomically(summary_path(out_dir), summary);
    return summary;
  }
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
         (s.contains("cluster_gpus") ? printable(s.at("cluster_gpus").get<std::string>())
                                     : std::to_string(s.at("gpus").get<std::int64_t>()) + " x " +
                                           printable(s.at("gpu").get<std::string>())) +
         "\n";
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
    if (r.scored_classes > 0 && static_cast<double>(r.scored_classes) < now)
      out += ", " + fmt_count(r.scored_classes) + " of them simulated (equivalent plans share one step program)";
    if (!r.refined.empty())
      out += "; the " + fmt_count(r.refined.size()) + " plans kept re-simulated per layer in " +
             fixed(r.refine_s, 2) + " s";
    if (r.resumed > 0) out += "; " + fmt_count(r.resumed) + " scored plans resumed from results.jsonl";
    out += "\n";
  }
  const bool by_time = s.value("rank_by", std::string("throughput")) == "time_to_train";
  out += "\ntop " + std::to_string(s.at("top").size()) + " plans by " +
         (by_time ? "time to train" : "throughput") + "\n";
  const std::string unit = s.value("throughput_unit", std::string("tokens"));
  out += to_text(plans_table(s.at("top"), s.at("space").at("axes"), false, "", unit));
  out += "\nPareto front of step time and peak memory (" + std::to_string(s.at("pareto").size()) +
         " plans)\n";
  out += to_text(plans_table(s.at("pareto"), s.at("space").at("axes"), false, "", unit));
  return out;
}

}  // namespace strata::report
