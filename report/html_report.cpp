// The comparison report of an explore directory: analysis, HTML, Markdown,
// CSV, and the timeline lanes of a replayed step.
#include "report/html_report.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

#include "report/svg.hpp"
#include "sim/ranking.hpp"
#include "report/table.hpp"
#include "report/tradeoff.hpp"

namespace strata::report {

namespace {

using svg::escape_xml;

// ---------------------------------------------------------------- helpers --

// Shortest round-trip text of a double (deterministic).
std::string shortest(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// 38,916.
std::string fmt_count(std::uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

double gib(Bytes b) { return to_GiB(b); }
std::string gib_text(Bytes b) { return fixed(gib(b), 2) + " GiB"; }

// `digits` significant digits, without an exponent: 0.01991, 15.05, 1234.
std::string sig(double v, int digits) {
  if (v == 0 || !std::isfinite(v)) return "0";
  const int mag = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  return fixed(v, std::clamp(digits - 1 - mag, 0, 9));
}

std::string seconds_text(double s) {
  if (s >= 100) return fixed(s, 1) + " s";
  if (s >= 1) return fixed(s, 3) + " s";
  return fixed(s * 1e3, 2) + " ms";
}

// "+12.3 %" / "−4.5 %" (a real minus sign) for a ratio new / old.
std::string change(double ratio) {
  const double pct = (ratio - 1) * 100;
  if (std::fabs(pct) < 0.05) return "±0.0 %";
  return (pct > 0 ? "+" : "\u2212") + fixed(std::fabs(pct), 1) + " %";
}

bool is_bool_axis(const SpaceAxis& a) {
  return a.values.size() == 2 && a.values[0] == "no" && a.values[1] == "yes";
}

// Column heading of an axis (as `strata explore` prints it).
std::string axis_heading(const std::string& axis) {
  if (axis == "sequence_parallel") return "sp";
  for (const char* prefix : {"implementation.", "batch."})
    if (axis.rfind(prefix, 0) == 0) return axis.substr(std::string(prefix).size());
  return axis;
}

// Axes worth a column: more than one value, and not dp/tp/pp (always shown).
std::vector<std::size_t> varying_axes(const ReportData& d) {
  std::vector<std::size_t> out;
  for (std::size_t a = 0; a < d.axes.size(); ++a) {
    const auto& n = d.axes[a].name;
    if (n != "dp" && n != "tp" && n != "pp" && d.axes[a].values.size() > 1) out.push_back(a);
  }
  return out;
}

const std::string& axis_value(const PlanRecord& p, std::size_t a) {
  static const std::string none = "-";
  return a < p.axes.size() ? p.axes[a] : none;
}

// "dp 64, tp 4, pp 4, schedule interleaved:4, micro 1, sp yes".
std::string plan_text(const ReportData& d, const PlanRecord& p) {
  std::string s = "dp " + std::to_string(p.dp) + ", tp " + std::to_string(p.tp) + ", pp " +
                  std::to_string(p.pp);
  for (std::size_t a : varying_axes(d)) s += ", " + axis_heading(d.axes[a].name) + " " + axis_value(p, a);
  return s;
}

// The axes in which two plans differ: "recompute none → full, zero 1 → 2".
std::string differences(const ReportData& d, const PlanRecord& from, const PlanRecord& to) {
  std::string s;
  auto add = [&](const std::string& name, const std::string& a, const std::string& b) {
    if (a == b) return;
    s += (s.empty() ? "" : ", ") + name + " " + a + " \u2192 " + b;
  };
  add("dp", std::to_string(from.dp), std::to_string(to.dp));
  add("tp", std::to_string(from.tp), std::to_string(to.tp));
  add("pp", std::to_string(from.pp), std::to_string(to.pp));
  for (std::size_t a = 0; a < d.axes.size(); ++a) {
    const auto& n = d.axes[a].name;
    if (n == "dp" || n == "tp" || n == "pp") continue;
    add(axis_heading(n), axis_value(from, a), axis_value(to, a));
  }
  return s.empty() ? "nothing searched" : s;
}

std::string pct_of(double part, double whole) {
  return whole > 0 ? fixed(100 * part / whole, 1) + " %" : "-";
}

// Where a plan's step goes, the parts above 1 %: "83.0 % compute, 9.1 % exposed tp comm".
std::string time_split(const PlanRecord& p) {
  std::vector<std::pair<double, std::size_t>> parts;
  for (std::size_t i = 0; i < p.time_s.size() && i < kTimePartCount; ++i)
    if (p.step_time_s > 0 && p.time_s[i] / p.step_time_s >= 0.01) parts.emplace_back(p.time_s[i], i);
  std::stable_sort(parts.begin(), parts.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::string s;
  for (const auto& [v, i] : parts)
    s += (s.empty() ? "" : ", ") + pct_of(v, p.step_time_s) + " " + kTimeParts[i].label;
  return s;
}

// ---------------------------------------------------------------- analysis --

std::size_t preferred_colour_axis(const ReportData& d, bool* found) {
  static const char* prefer[] = {"recompute", "offload", "zero", "schedule", "sequence_parallel",
                                 "offload.activations", "offload.optimizer", "optimizer",
                                 "compression.method", "precision"};
  *found = true;
  for (const char* name : prefer)
    for (std::size_t a = 0; a < d.axes.size(); ++a)
      if (d.axes[a].name == name && d.axes[a].values.size() > 1 && d.axes[a].values.size() <= 10)
        return a;
  for (std::size_t a = 0; a < d.axes.size(); ++a)
    if (d.axes[a].values.size() > 1 && d.axes[a].values.size() <= 10) return a;
  *found = false;
  return 0;
}

// ", not counting N where it cannot act" (pairs of equivalent plans).
std::string inert_text(std::size_t inert) {
  return inert == 0 ? std::string() : ", not counting " + fmt_count(inert) + " where it cannot act";
}

// Every plan's value of every axis as an index into the axis's values
// (those seen but not listed, which should not happen, last), made once for
// all the axis comparisons.
struct AxisCodes {
  std::vector<std::vector<std::string>> values;  // per axis
  std::vector<std::uint32_t> code;               // plan-major: code[plan · axes + axis]
  std::size_t axes = 0;
  std::uint32_t at(std::size_t plan, std::size_t a) const { return code[plan * axes + a]; }
};
AxisCodes axis_codes(const ReportData& d) {
  AxisCodes c;
  c.axes = d.axes.size();
  c.values.resize(c.axes);
  c.code.resize(d.plans.size() * c.axes);
  for (std::size_t a = 0; a < c.axes; ++a) {
    auto& values = c.values[a];
    values = d.axes[a].values;
    std::unordered_map<std::string, std::uint32_t> slot;
    for (std::size_t i = 0; i < values.size(); ++i) slot.emplace(values[i], static_cast<std::uint32_t>(i));
    for (std::size_t p = 0; p < d.plans.size(); ++p) {
      const std::string& v = axis_value(d.plans[p], a);
      auto [it, fresh] = slot.try_emplace(v, static_cast<std::uint32_t>(values.size()));
      if (fresh) values.push_back(v);
      c.code[p * c.axes + a] = it->second;
    }
  }
  return c;
}

AxisComparison compare_axis(const ReportData& d, const AxisCodes& codes, const std::vector<std::size_t>& ranked,
                            std::size_t a) {
  const SpaceAxis& axis = d.axes[a];
  AxisComparison c;
  c.axis = axis.name;
  const std::vector<std::string>& values = codes.values[a];
  c.values.resize(values.size());
  std::vector<std::vector<double>> steps(values.size()), peaks(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) c.values[i].value = values[i];
  for (std::size_t r : ranked) {
    const auto& p = d.plans[r];
    const std::size_t v = codes.at(r, a);
    auto& st = c.values[v];
    ++st.plans;
    if (!st.best) st.best = r;
    steps[v].push_back(p.step_time_s);
    peaks[v].push_back(static_cast<double>(p.peak_memory_bytes));
  }
  for (std::size_t v = 0; v < values.size(); ++v) {
    c.values[v].median_step_s = median(steps[v]);
    c.values[v].median_peak_bytes = median(peaks[v]);
  }
  // Pairs: plans equal in every other axis, grouped by those axes' values
  // as one mixed-radix number (exact: the product of the axes' value
  // counts is the size of the space).
  std::vector<std::uint64_t> stride(codes.axes, 0);
  std::uint64_t radix = 1;
  for (std::size_t o = 0; o < codes.axes; ++o) {
    if (o == a) continue;
    stride[o] = radix;
    if (__builtin_mul_overflow(radix, static_cast<std::uint64_t>(codes.values[o].size()), &radix))
      throw Error("report: the space's axes have more value combinations than 2^64");
  }
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> groups;  // key -> plan per value (+1)
  for (std::size_t i = 0; i < d.plans.size(); ++i) {
    const auto& p = d.plans[i];
    std::uint64_t key = 0;
    for (std::size_t o = 0; o < codes.axes; ++o)
      if (o != a) key += codes.at(i, o) * stride[o];
    auto& g = groups[key];
    if (g.empty()) g.assign(values.size(), 0);
    auto& cell = g[codes.at(i, a)];
    if (cell == 0 || d.plans[cell - 1].plan_id > p.plan_id) cell = i + 1;
  }
  std::vector<std::vector<double>> step_r(values.size()), peak_r(values.size());
  std::vector<std::size_t> inert(values.size(), 0);
  for (const auto& [key, g] : groups) {
    if (g[0] == 0) continue;
    const auto& base = d.plans[g[0] - 1];
    for (std::size_t v = 1; v < values.size(); ++v) {
      if (g[v] == 0) continue;
      const auto& p = d.plans[g[v] - 1];
      if (base.step_time_s <= 0 || base.peak_memory_bytes <= 0) continue;
      if (!p.class_id.empty() && p.class_id == base.class_id) {
        ++inert[v];
        continue;
      }
      step_r[v].push_back(p.step_time_s / base.step_time_s);
      peak_r[v].push_back(static_cast<double>(p.peak_memory_bytes) /
                          static_cast<double>(base.peak_memory_bytes));
    }
  }
  for (std::size_t v = 1; v < values.size(); ++v)
    c.paired.push_back({values[v], step_r[v].size(), inert[v], median(step_r[v]), median(peak_r[v])});

  // The sentence.
  const std::string& base = values[0];
  auto best_clause = [&](std::size_t v) {
    const auto& b = c.values[v];
    const auto& b0 = c.values[0];
    if (!b.best || !b0.best) return std::string("no plan scored with both");
    const auto& p = d.plans[*b.best];
    const auto& p0 = d.plans[*b0.best];
    return "best plan " + seconds_text(p.step_time_s) + " at " + gib_text(p.peak_memory_bytes) +
           " against " + seconds_text(p0.step_time_s) + " at " + gib_text(p0.peak_memory_bytes);
  };
  if (is_bool_axis(axis)) {
    const auto& pr = c.paired[0];
    c.sentence = "Turning on " + axis.name + ": ";
    if (pr.pairs > 0)
      c.sentence += "step time " + change(pr.step_ratio) + ", peak memory " + change(pr.peak_ratio) +
                    " (median over " + fmt_count(pr.pairs) + " pairs of plans that differ only in it" +
                    inert_text(pr.inert) + "); ";
    else if (pr.inert > 0)
      c.sentence += "it cannot act on any plan scored (" + fmt_count(pr.inert) + " pairs of equivalent plans); ";
    c.sentence += best_clause(1) + ".";
  } else {
    c.sentence = axis.name + " against " + base + ": ";
    for (std::size_t v = 1; v < values.size(); ++v) {
      const auto& pr = c.paired[v - 1];
      if (v > 1) c.sentence += "; ";
      c.sentence += values[v] + " ";
      if (pr.pairs > 0)
        c.sentence += "step time " + change(pr.step_ratio) + ", peak memory " + change(pr.peak_ratio) +
                      " (" + fmt_count(pr.pairs) + (pr.pairs == 1 ? " pair" : " pairs") + inert_text(pr.inert) + ")";
      else if (pr.inert > 0)
        c.sentence += "cannot act on any plan scored with it (" + fmt_count(pr.inert) + " pairs of equivalent plans)";
      else if (c.values[v].plans == 0)
        c.sentence += "no plan scored";
      else
        c.sentence += "no comparable pair; " + best_clause(v);
    }
    c.sentence += ".";
  }
  return c;
}

std::string ttt_text(const PlanRecord& p) {
  return p.time_to_train_s ? duration_text(*p.time_to_train_s) : std::string("never");
}

// Where each plan stands in a ranking (1-based).
std::unordered_map<std::size_t, std::size_t> positions(const std::vector<std::size_t>& order) {
  std::unordered_map<std::size_t, std::size_t> at;
  for (std::size_t i = 0; i < order.size(); ++i) at[order[i]] = i + 1;
  return at;
}

// The two rankings compared: which plan each puts first and why they differ.
void compare_rankings(const ReportData& d, ReportAnalysis& an) {
  const auto& P = d.plans;
  an.by_time_to_train = an.fitting;  // throughput order breaks ties
  std::stable_sort(an.by_time_to_train.begin(), an.by_time_to_train.end(), [&](std::size_t a, std::size_t b) {
    return P[a].time_to_train_s.value_or(INFINITY) < P[b].time_to_train_s.value_or(INFINITY);
  });
  static const char* prefer[] = {"batch.global", "compression.method", "optimizer", "schedule"};
  for (const char* name : prefer)
    for (std::size_t a = 0; a < d.axes.size() && !an.ranking_axis; ++a)
      if (d.axes[a].name == name && d.axes[a].values.size() > 1 && d.axes[a].values.size() <= 10) an.ranking_axis = a;
  if (!an.ranking_axis) an.ranking_axis = an.colour_axis;
  if (!an.winner || an.by_time_to_train.empty()) return;
  const auto& w = P[*an.winner];
  const auto& t = P[an.by_time_to_train.front()];
  auto steps_of = [](const PlanRecord& p) {
    return p.train_steps ? count(static_cast<double>(*p.train_steps)) + " steps" : std::string("no steps (never reached)");
  };
  an.ranking_why.push_back("Ranked by time to train to the goal (" + d.goal + "), the best plan is " + t.plan_id +
                           " (" + plan_text(d, t) + "): " + ttt_text(t) + ", " + steps_of(t) + " of " +
                           seconds_text(t.step_time_s) + ".");
  if (&w == &t) {
    an.ranking_why.push_back("It is also the plan with the highest throughput: here both rankings put the same plan first.");
  } else {
    std::string s = "The plan with the highest throughput, " + w.plan_id + " (" + differences(d, t, w) +
                    "), takes " + ttt_text(w);
    if (w.train_steps && t.train_steps && t.tokens_per_s_per_gpu > 0) {
      const double tokens_w = static_cast<double>(*w.train_steps) * w.batch_tokens;
      const double tokens_t = static_cast<double>(*t.train_steps) * t.batch_tokens;
      s += ": it processes tokens " + fixed(100 * (w.tokens_per_s_per_gpu / t.tokens_per_s_per_gpu - 1), 1) +
           " % faster, but reaching the goal takes it " + fixed(tokens_w / tokens_t, 2) + "x the tokens (" +
           count(static_cast<double>(*w.train_steps)) + " steps of " + si(w.batch_tokens) + " tokens against " +
           count(static_cast<double>(*t.train_steps)) + " of " + si(t.batch_tokens) + ")";
    }
    std::vector<std::string> because;
    if (w.batch_tokens > t.batch_tokens && d.b_noise_tokens)
      because.push_back("with the critical batch at " + si(*d.b_noise_tokens) +
                        " tokens, a larger batch saves fewer steps than it adds tokens (S = S_min (1 + B_noise/B), "
                        "E = E_min (1 + B/B_noise))");
    if (std::fabs(w.penalty - t.penalty) > 1e-9)
      because.push_back("its lossy choices multiply the steps by " + fixed(w.penalty, 3) + " against " +
                        fixed(t.penalty, 3));
    for (std::size_t i = 0; i < because.size(); ++i) s += (i == 0 ? ": " : "; ") + because[i];
    an.ranking_why.push_back(s + ".");
  }
  const auto ttt_at = positions(an.by_time_to_train);
  const std::size_t k = std::min<std::size_t>(10, an.fitting.size());
  std::size_t both = 0;
  for (std::size_t i = 0; i < k; ++i)
    if (ttt_at.at(an.fitting[i]) <= k) ++both;
  an.ranking_why.push_back(std::to_string(both) + " of the " + std::to_string(k) + " plans with the highest throughput are among the " +
                           std::to_string(k) + " with the shortest time to train; the throughput winner ranks #" +
                           std::to_string(ttt_at.at(*an.winner)) + " by time to train.");
}

}  // namespace

ReportAnalysis analyse(const ReportData& d) {
  ReportAnalysis an;
  const auto& P = d.plans;
  an.ranked.resize(P.size());
  for (std::size_t i = 0; i < P.size(); ++i) an.ranked[i] = i;
  std::sort(an.ranked.begin(), an.ranked.end(), [&](std::size_t a, std::size_t b) {
    if (P[a].tokens_per_s_per_gpu != P[b].tokens_per_s_per_gpu)
      return P[a].tokens_per_s_per_gpu > P[b].tokens_per_s_per_gpu;
    if (P[a].step_time_s != P[b].step_time_s) return P[a].step_time_s < P[b].step_time_s;
    return P[a].plan_id < P[b].plan_id;
  });
  for (std::size_t r : an.ranked)
    if (P[r].fits()) an.fitting.push_back(r);
  // Pareto front: no other plan both faster and smaller; equal plans all kept.
  std::vector<std::size_t> by_step = an.ranked;
  std::sort(by_step.begin(), by_step.end(), [&](std::size_t a, std::size_t b) {
    if (P[a].step_time_s != P[b].step_time_s) return P[a].step_time_s < P[b].step_time_s;
    if (P[a].peak_memory_bytes != P[b].peak_memory_bytes)
      return P[a].peak_memory_bytes < P[b].peak_memory_bytes;
    return P[a].plan_id < P[b].plan_id;
  });
  for (std::size_t i : by_step) {
    if (an.front.empty() || P[i].peak_memory_bytes < P[an.front.back()].peak_memory_bytes ||
        (P[i].peak_memory_bytes == P[an.front.back()].peak_memory_bytes &&
         P[i].step_time_s == P[an.front.back()].step_time_s))
      an.front.push_back(i);
  }
  if (!an.fitting.empty()) an.winner = an.fitting[0];
  if (an.fitting.size() > 1) an.runner_up = an.fitting[1];
  for (std::size_t r : an.fitting)
    if (!an.lowest_memory || P[r].peak_memory_bytes < P[*an.lowest_memory].peak_memory_bytes)
      an.lowest_memory = r;

  if (!an.winner) {
    an.why.push_back(P.empty() ? "No plan was scored: the explorer rejected or pruned every plan "
                                 "(see the counts below)."
                               : "None of the " + fmt_count(P.size()) +
                                     " scored plans fits in GPU memory.");
  } else {
    const auto& w = P[*an.winner];
    an.why.push_back("Plan " + w.plan_id + " (" + plan_text(d, w) + ") has the highest throughput of the " +
                     fmt_count(an.fitting.size()) + " plans that fit: " +
                     seconds_text(w.step_time_s) + " per step, " + fixed(w.tokens_per_s_per_gpu, 0) + " " +
                     d.throughput_unit + "/s per GPU, MFU " + fixed(100 * w.mfu, 1) + " %, peak memory " +
                     gib_text(w.peak_memory_bytes) + " of " + gib_text(w.gpu_memory_bytes) + ".");
    if (w.peak_memory_bytes > w.gpu_memory_bytes && w.gpu_memory_bytes > 0)
      an.why.push_back("Its peak with the caching allocator's reserve is above the GPU's memory; its tensors and "
                       "the CUDA context (" + gib_text(w.required_memory_bytes) +
                       ") fit, so PyTorch frees cached blocks and retries allocations to run it, a cost the "
                       "step time does not include (docs/memory-model.md, \"Fits\").");
    const std::string split = time_split(w);
    if (!split.empty()) an.why.push_back("Its step time is " + split + ".");
    if (an.runner_up) {
      const auto& r = P[*an.runner_up];
      an.why.push_back("The runner-up " + r.plan_id + " (" + differences(d, w, r) + "): throughput " +
                      change(w.tokens_per_s_per_gpu > 0 ? r.tokens_per_s_per_gpu / w.tokens_per_s_per_gpu : 1) +
                      ", step time " + change(w.step_time_s > 0 ? r.step_time_s / w.step_time_s : 1) +
                      ", peak memory " +
                      change(w.peak_memory_bytes > 0 ? static_cast<double>(r.peak_memory_bytes) /
                                                           static_cast<double>(w.peak_memory_bytes)
                                                     : 1) +
                      " against the winner.");
    }
    if (an.lowest_memory && *an.lowest_memory != *an.winner) {
      const auto& l = P[*an.lowest_memory];
      an.why.push_back("The plan with the lowest peak memory, " + l.plan_id + " (" +
                       differences(d, w, l) + "), needs " + gib_text(l.peak_memory_bytes) + " (" +
                       change(w.peak_memory_bytes > 0 ? static_cast<double>(l.peak_memory_bytes) /
                                                            static_cast<double>(w.peak_memory_bytes)
                                                      : 1) +
                       ") for a step time " + change(w.step_time_s > 0 ? l.step_time_s / w.step_time_s : 1) +
                       " against the winner.");
    } else if (an.lowest_memory) {
      an.why.push_back("It is also the plan with the lowest peak memory.");
    }
    const std::size_t not_fit = P.size() - an.fitting.size();
    if (not_fit > 0)
      an.why.push_back(fmt_count(not_fit) + " scored plans exceed the GPU's memory.");
  }

  const AxisCodes codes = axis_codes(d);
  for (std::size_t a = 0; a < d.axes.size(); ++a)
    if (d.axes[a].values.size() > 1) an.axes.push_back(compare_axis(d, codes, an.ranked, a));

  // Charted plans: the best eight, the front (sampled, both ends) and the
  // lowest-memory plan, by throughput.
  std::set<std::size_t> shown;
  for (std::size_t i = 0; i < an.ranked.size() && i < 8; ++i) shown.insert(an.ranked[i]);
  if (!an.front.empty()) {
    const std::size_t n = an.front.size(), k = std::min<std::size_t>(n, 5);
    for (std::size_t i = 0; i < k; ++i) shown.insert(an.front[k == 1 ? 0 : i * (n - 1) / (k - 1)]);
  }
  if (an.lowest_memory) shown.insert(*an.lowest_memory);
  for (std::size_t r : an.ranked)
    if (shown.count(r)) an.shown.push_back(r);
  bool found = false;
  const std::size_t ca = preferred_colour_axis(d, &found);
  if (found) an.colour_axis = ca;
  if (!d.goal.empty()) compare_rankings(d, an);
  return an;
}

// ---------------------------------------------------------------- timeline --

Timeline make_timeline(const sim::TaskGraph& graph, const sim::RunResult& run,
                       const std::string& plan_id, std::size_t columns, int max_stages) {
  static const char* kLaneNames[] = {"compute", "comm", "p2p", "copies", "cpu"};
  Timeline t;
  t.plan_id = plan_id;
  t.step_ns = run.makespan;
  std::map<std::pair<int, int>, std::vector<std::int32_t>> lanes;  // (stage, lane) -> tasks
  std::map<std::string, int> other_lanes;
  for (std::size_t i = 0; i < graph.num_tasks() && i < run.tasks.size(); ++i) {
    const sim::Task& task = graph.tasks()[i];
    const sim::TaskTiming& tm = run.tasks[i];
    if (tm.end <= tm.start) continue;
    const sim::Resource* queue = nullptr;
    for (sim::ResourceId r : task.resources)
      if (graph.at(r).kind != sim::ResourceKind::Link) {
        queue = &graph.at(r);
        break;
      }
    if (!queue) continue;
    // The queue's role says its stage and lane; one of no stage (−1) is
    // drawn in the task's, one of no lane gets a lane of its own, by name.
    const int stage = queue->role.stage >= 0 ? queue->role.stage : task.label.stage.value_or(0);
    int li = 0;
    switch (queue->role.lane) {
      case sim::Lane::Compute: li = 0; break;
      case sim::Lane::Comm: li = 1; break;
      case sim::Lane::P2P: li = 2; break;
      case sim::Lane::D2H:
      case sim::Lane::H2D: li = 3; break;
      case sim::Lane::Cpu: li = 4; break;
      case sim::Lane::None:
        li = 5 + other_lanes.emplace(queue->name, static_cast<int>(other_lanes.size())).first->second;
        break;
    }
    lanes[{stage, li}].push_back(static_cast<std::int32_t>(i));
    t.stages = std::max(t.stages, stage + 1);
    ++t.tasks;
  }
  std::set<int> keep;
  if (t.stages <= max_stages) {
    for (int s = 0; s < t.stages; ++s) keep.insert(s);
  } else {
    for (int i = 0; i < max_stages; ++i)
      keep.insert(static_cast<int>(std::lround(static_cast<double>(i) * (t.stages - 1) / (max_stages - 1))));
  }
  auto kind_of = [&](const sim::Task& task) {
    switch (task.label.phase) {
      case sim::Phase::Fwd: return SpanKind::Forward;
      case sim::Phase::Bwd: return SpanKind::Backward;
      case sim::Phase::Recompute: return SpanKind::Recompute;
      case sim::Phase::Optim: return SpanKind::Optimizer;
      case sim::Phase::Comm: return task.kind == sim::TaskKind::Copy ? SpanKind::Copy : SpanKind::Comm;
      case sim::Phase::None: break;
    }
    switch (task.kind) {
      case sim::TaskKind::Copy: return SpanKind::Copy;
      case sim::TaskKind::Collective:
      case sim::TaskKind::P2PSend:
      case sim::TaskKind::P2PRecv: return SpanKind::Comm;
      case sim::TaskKind::Host: return SpanKind::Optimizer;
      case sim::TaskKind::Compute: break;
    }
    return SpanKind::Other;
  };
  std::vector<std::string> other_names(other_lanes.size());
  for (const auto& [n, i] : other_lanes) other_names[static_cast<std::size_t>(i)] = n;
  for (auto& [key, tasks] : lanes) {
    if (!keep.count(key.first)) continue;
    std::stable_sort(tasks.begin(), tasks.end(), [&](std::int32_t a, std::int32_t b) {
      return run.tasks[a].start < run.tasks[b].start;
    });
    TimelineLane lane;
    lane.stage = key.first;
    lane.name = key.second < 5 ? kLaneNames[key.second] : other_names[static_cast<std::size_t>(key.second - 5)];
    lane.tasks = tasks.size();
    std::int64_t cover_end = INT64_MIN;
    for (std::int32_t i : tasks) {
      const auto& tm = run.tasks[i];
      const SpanKind k = kind_of(graph.tasks()[i]);
      if (tm.start >= cover_end) lane.busy_ns += tm.end - tm.start;
      else if (tm.end > cover_end) lane.busy_ns += tm.end - cover_end;
      cover_end = std::max(cover_end, tm.end);
      if (!lane.spans.empty() && lane.spans.back().kind == k && tm.start <= lane.spans.back().end_ns) {
        lane.spans.back().end_ns = std::max(lane.spans.back().end_ns, tm.end);
        ++lane.spans.back().tasks;
      } else {
        lane.spans.push_back({tm.start, tm.end, k, 1});
      }
    }
    if (lane.spans.size() > columns / 2 && t.step_ns > 0) {
      // Too many spans to draw: the kind filling most of each column.
      t.aggregated = true;
      const std::int64_t w = (t.step_ns + static_cast<std::int64_t>(columns) - 1) / static_cast<std::int64_t>(columns);
      std::vector<std::array<std::int64_t, kSpanKinds>> busy(columns);
      std::vector<std::uint32_t> starts(columns, 0);
      for (std::int32_t i : tasks) {
        const auto& tm = run.tasks[i];
        const auto k = static_cast<std::size_t>(kind_of(graph.tasks()[i]));
        const std::size_t c0 = static_cast<std::size_t>(tm.start / w);
        const std::size_t c1 = std::min(columns - 1, static_cast<std::size_t>((tm.end - 1) / w));
        if (c0 < columns) ++starts[c0];
        for (std::size_t c = c0; c <= c1 && c < columns; ++c) {
          const std::int64_t lo = std::max(tm.start, static_cast<std::int64_t>(c) * w);
          const std::int64_t hi = std::min(tm.end, static_cast<std::int64_t>(c + 1) * w);
          if (hi > lo) busy[c][k] += hi - lo;
        }
      }
      lane.spans.clear();
      for (std::size_t c = 0; c < columns; ++c) {
        std::size_t best = kSpanKinds;
        std::int64_t most = 0;
        for (std::size_t k = 0; k < kSpanKinds; ++k)
          if (busy[c][k] > most) most = busy[c][k], best = k;
        if (best == kSpanKinds) continue;
        const auto k = static_cast<SpanKind>(best);
        const std::int64_t lo = static_cast<std::int64_t>(c) * w;
        if (!lane.spans.empty() && lane.spans.back().kind == k && lane.spans.back().end_ns == lo) {
          lane.spans.back().end_ns = std::min(lo + w, t.step_ns);
          lane.spans.back().tasks += starts[c];
        } else {
          lane.spans.push_back({lo, std::min(lo + w, t.step_ns), k, starts[c]});
        }
      }
    }
    t.lanes.push_back(std::move(lane));
  }
  return t;
}

// -------------------------------------------------------------- rendering --

namespace {

const char* const kSpanColours[] = {"#4e79a7", "#f28e2b", "#edc948", "#e15759",
                                    "#b07aa1", "#59a14f", "#bab0ac"};
const char* const kTimeColours[] = {"#4e79a7", "#edc948", "#e15759", "#ff9da7", "#9c755f",
                                    "#d37295", "#fabfd2", "#b07aa1", "#bab0ac", "#76b7b2", "#59a14f"};

// A cell of an HTML table: text and an optional sort key.
struct Cell {
  std::string text;
  std::optional<double> key;
};
Cell num_cell(const std::string& text, double key) { return {text, key}; }

std::string html_table(const std::vector<std::string>& head, const std::vector<std::vector<Cell>>& rows,
                       bool sortable, const std::string& caption = "") {
  std::string out = sortable ? "<table class=\"sortable\">" : "<table>";
  if (!caption.empty()) out += "<caption>" + escape_xml(caption) + "</caption>";
  out += "<thead><tr>";
  for (const auto& h : head) out += "<th scope=\"col\">" + escape_xml(h) + "</th>";
  out += "</tr></thead><tbody>";
  for (const auto& r : rows) {
    out += "<tr>";
    for (const auto& c : r) {
      if (c.key) out += "<td class=\"n\" data-v=\"" + shortest(*c.key) + "\">";
      else out += "<td>";
      out += escape_xml(c.text) + "</td>";
    }
    out += "</tr>";
  }
  return out + "</tbody></table>";
}

// Rows of plans for the top and Pareto tables.
struct PlanRows {
  std::vector<std::string> head;
  std::vector<std::vector<Cell>> rows;
};
PlanRows plan_rows(const ReportData& d, const std::vector<std::size_t>& which,
                   const std::vector<std::size_t>& ranked) {
  std::unordered_map<std::size_t, std::size_t> rank_of;
  for (std::size_t i = 0; i < ranked.size(); ++i) rank_of[ranked[i]] = i + 1;
  PlanRows t;
  t.head = {"rank", "plan", "dp", "tp", "pp"};
  const auto axes = varying_axes(d);
  for (std::size_t a : axes) t.head.push_back(axis_heading(d.axes[a].name));
  t.head.insert(t.head.end(), {"step s", d.throughput_unit + "/s/GPU", "MFU %", "peak GiB", "fits"});
  for (std::size_t i : which) {
    const auto& p = d.plans[i];
    std::vector<Cell> r;
    const double rank = static_cast<double>(rank_of[i]);
    r.push_back(num_cell(std::to_string(rank_of[i]), rank));
    r.push_back({p.plan_id, std::nullopt});
    r.push_back(num_cell(std::to_string(p.dp), static_cast<double>(p.dp)));
    r.push_back(num_cell(std::to_string(p.tp), static_cast<double>(p.tp)));
    r.push_back(num_cell(std::to_string(p.pp), static_cast<double>(p.pp)));
    for (std::size_t a : axes) {
      const std::string& v = axis_value(p, a);
      double key = 0;
      const char* b = v.data();
      const auto res = std::from_chars(b, b + v.size(), key);
      if (res.ec == std::errc() && res.ptr == b + v.size()) r.push_back(num_cell(v, key));
      else r.push_back({v, std::nullopt});
    }
    r.push_back(num_cell(sig(p.step_time_s, 4), p.step_time_s));
    r.push_back(num_cell(fixed(p.tokens_per_s_per_gpu, 0), p.tokens_per_s_per_gpu));
    r.push_back(num_cell(fixed(100 * p.mfu, 1), 100 * p.mfu));
    r.push_back(num_cell(fixed(gib(p.peak_memory_bytes), 2), gib(p.peak_memory_bytes)));
    r.push_back({p.fits() ? "yes" : "no", std::nullopt});
    t.rows.push_back(std::move(r));
  }
  return t;
}

Table to_plain(const PlanRows& pr) {
  Table t;
  t.columns = pr.head;
  t.align.assign(t.columns.size(), Align::Right);
  for (const auto& r : pr.rows) {
    std::vector<std::string> row;
    for (const auto& c : r) row.push_back(c.text);
    t.add_row(std::move(row));
  }
  return t;
}

std::vector<std::size_t> first_n(const std::vector<std::size_t>& v, std::size_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size()))};
}

constexpr std::size_t kTopRows = 25;
constexpr std::size_t kFrontRows = 50;

// "#3 06d2e3b0": the plan's rank by throughput and the start of its id.
std::string bar_label(const ReportData& d, const ReportAnalysis& an, std::size_t i) {
  std::size_t rank = 0;
  for (std::size_t k = 0; k < an.ranked.size(); ++k)
    if (an.ranked[k] == i) rank = k + 1;
  return "#" + std::to_string(rank) + " " + d.plans[i].plan_id.substr(0, 8);
}

std::string memory_chart(const ReportData& d, const ReportAnalysis& an) {
  svg::Stacked s;
  s.title = "Peak memory per GPU by kind, against the GPU's capacity";
  s.desc = "Stacked bars, one per plan (the best by throughput, the Pareto front, the lowest-memory "
           "plan): bytes of each kind at the peak; the dashed line is the GPU's memory.";
  s.x_label = "GiB per GPU";
  s.scale = static_cast<double>(kGiB);
  for (std::size_t t = 0; t < d.memory_tags.size(); ++t) s.parts.push_back({d.memory_tags[t], svg::colour(t)});
  Bytes cap = 0;
  for (std::size_t i : an.shown) {
    const auto& p = d.plans[i];
    cap = std::max(cap, p.gpu_memory_bytes);
    svg::StackedBar b;
    b.label = bar_label(d, an, i);
    for (Bytes v : p.memory) b.parts.push_back(static_cast<double>(v));
    b.note = fixed(gib(p.peak_memory_bytes), 1) + " GiB";
    s.bars.push_back(std::move(b));
  }
  if (cap > 0) {
    s.limit = static_cast<double>(cap);
    s.limit_label = "GPU " + fixed(gib(cap), 0) + " GiB";
  }
  return svg::stacked_bars(s);
}

std::string time_chart(const ReportData& d, const ReportAnalysis& an) {
  std::vector<std::size_t> used;  // parts non-zero in some shown plan
  for (std::size_t k = 0; k < kTimePartCount; ++k)
    for (std::size_t i : an.shown)
      if (k < d.plans[i].time_s.size() && d.plans[i].time_s[k] > 0) {
        used.push_back(k);
        break;
      }
  svg::Stacked s;
  s.title = "Step time by where it goes";
  s.desc = "Stacked bars, one per plan: compute, recompute, exposed communication by kind, "
           "pipeline bubble, offload stall and optimizer, summing to the step time of the "
           "critical pipeline stage.";
  double longest = 0;
  for (std::size_t i : an.shown) longest = std::max(longest, d.plans[i].step_time_s);
  const bool ms = longest < 1;
  s.x_label = ms ? "milliseconds per step" : "seconds per step";
  s.scale = ms ? 1e-3 : 1;
  for (std::size_t k : used) s.parts.push_back({kTimeParts[k].label, kTimeColours[k]});
  for (std::size_t i : an.shown) {
    const auto& p = d.plans[i];
    svg::StackedBar b;
    b.label = bar_label(d, an, i);
    for (std::size_t k : used) b.parts.push_back(k < p.time_s.size() ? p.time_s[k] : 0);
    b.note = seconds_text(p.step_time_s);
    s.bars.push_back(std::move(b));
  }
  return svg::stacked_bars(s);
}

std::string scatter_chart(const ReportData& d, const ReportAnalysis& an) {
  svg::Scatter s;
  s.title = "Step time against peak memory, every scored plan";
  s.x_label = "step time (s)";
  s.y_label = "peak memory per GPU (GiB)";
  double lo = INFINITY, hi = 0;
  for (const auto& p : d.plans)
    if (p.step_time_s > 0) lo = std::min(lo, p.step_time_s), hi = std::max(hi, p.step_time_s);
  s.log_x = hi > 0 && lo > 0 && hi / lo > 20;
  if (an.colour_axis) {
    const auto& axis = d.axes[*an.colour_axis];
    s.desc = "One dot per plan (" + std::to_string(d.plans.size()) + "), coloured by " + axis.name +
             "; circled: the Pareto front; the dashed line is the GPU's memory.";
    std::map<std::string, std::size_t> slot;
    for (std::size_t v = 0; v < axis.values.size(); ++v) {
      slot.emplace(axis.values[v], v);
      s.series.push_back({axis.name + " " + axis.values[v], svg::colour(v), {}});
    }
    for (std::size_t r : an.ranked) {
      const auto& p = d.plans[r];
      auto it = slot.find(axis_value(p, *an.colour_axis));
      if (it == slot.end()) {
        it = slot.emplace(axis_value(p, *an.colour_axis), s.series.size()).first;
        s.series.push_back({axis.name + " " + it->first, svg::colour(s.series.size()), {}});
      }
      s.series[it->second].points.emplace_back(p.step_time_s, gib(p.peak_memory_bytes));
    }
  } else {
    s.desc = "One dot per plan (" + std::to_string(d.plans.size()) +
             "); circled: the Pareto front; the dashed line is the GPU's memory.";
    s.series.push_back({"plans", svg::colour(0), {}});
    for (std::size_t r : an.ranked)
      s.series[0].points.emplace_back(d.plans[r].step_time_s, gib(d.plans[r].peak_memory_bytes));
  }
  Bytes cap = 0;
  for (std::size_t i : an.front) {
    const auto& p = d.plans[i];
    s.front.emplace_back(p.step_time_s, gib(p.peak_memory_bytes));
    s.front_titles.push_back(p.plan_id + ": " + plan_text(d, p) + "; " + seconds_text(p.step_time_s) +
                             ", " + gib_text(p.peak_memory_bytes));
  }
  for (const auto& p : d.plans) cap = std::max(cap, p.gpu_memory_bytes);
  if (cap > 0) {
    s.y_limit = gib(cap);
    s.y_limit_label = "GPU memory " + fixed(gib(cap), 0) + " GiB";
  }
  return svg::scatter(s);
}

svg::TimelineChart timeline_chart(const Timeline& t) {
  svg::TimelineChart c;
  c.title = "Timeline of the best plan's step, per pipeline stage";
  c.desc = "One row per stream of each pipeline stage shown (compute, communication, pipeline "
           "sends, offload copies, host CPU); rectangles are tasks coloured by phase" +
           std::string(t.aggregated ? ", merged where there are very many" : "") + ".";
  c.end_ns = t.step_ns;
  for (std::size_t k = 0; k < kSpanKinds; ++k) c.kinds.push_back({kSpanKindNames[k], kSpanColours[k]});
  std::size_t spans = 0;
  int last_stage = -1;
  for (const auto& l : t.lanes) {
    svg::Lane lane;
    lane.label = "stage " + std::to_string(l.stage) + " " + l.name;
    lane.group_start = l.stage != last_stage;
    last_stage = l.stage;
    for (const auto& s : l.spans) lane.spans.push_back({s.start_ns, s.end_ns, static_cast<int>(s.kind), s.tasks});
    spans += l.spans.size();
    c.lanes.push_back(std::move(lane));
  }
  c.span_titles = spans <= 4000;
  return c;
}

// The technique table of one axis: a row per value.
Table axis_table(const ReportData& d, const AxisComparison& c) {
  Table t;
  t.columns = {c.axis, "plans", "best step", "its peak", "median step", "median peak",
               "paired step", "paired peak", "pairs"};
  t.align = {Align::Left};
  t.align.resize(t.columns.size(), Align::Right);
  for (std::size_t v = 0; v < c.values.size(); ++v) {
    const auto& st = c.values[v];
    std::vector<std::string> row = {st.value, fmt_count(st.plans)};
    if (st.best) {
      row.push_back(seconds_text(d.plans[*st.best].step_time_s));
      row.push_back(gib_text(d.plans[*st.best].peak_memory_bytes));
      row.push_back(seconds_text(st.median_step_s));
      row.push_back(fixed(st.median_peak_bytes / static_cast<double>(kGiB), 2) + " GiB");
    } else {
      row.insert(row.end(), 4, "-");
    }
    if (v == 0) {
      row.insert(row.end(), {"baseline", "baseline", ""});
    } else {
      const auto& pr = c.paired[v - 1];
      if (pr.pairs > 0)
        row.insert(row.end(), {change(pr.step_ratio), change(pr.peak_ratio), fmt_count(pr.pairs)});
      else
        row.insert(row.end(), {"-", "-", "0"});
    }
    t.add_row(std::move(row));
  }
  return t;
}

Table counts_table(const ReportData& d) {
  Table t;
  t.columns = {"plans", "count", "first example"};
  t.align = {Align::Left, Align::Right, Align::Left};
  for (const auto& c : d.counts) t.add_row({(c.sub ? "  " : "") + c.name, fmt_count(c.count), c.example});
  return t;
}

std::string html_of(const Table& t, const std::string& cls = "") {
  std::string out = cls.empty() ? "<table>" : "<table class=\"" + cls + "\">";
  out += "<thead><tr>";
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    out += "<th scope=\"col\">" + escape_xml(t.columns[i]) + "</th>";
  out += "</tr></thead><tbody>";
  for (const auto& r : t.rows) {
    out += "<tr>";
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
      const bool right = i < t.align.size() && t.align[i] == Align::Right;
      std::string cell = i < r.size() ? r[i] : "";
      std::string indent;
      while (cell.rfind("  ", 0) == 0) cell.erase(0, 2), indent = " class=\"sub\"";
      out += std::string(right ? "<td class=\"n\"" : "<td") + indent + ">" + escape_xml(cell) + "</td>";
    }
    out += "</tr>";
  }
  return out + "</tbody></table>";
}

// "64 × a100-80g", or a cluster of node groups as the summary describes it.
std::string cluster_text(const ReportData& d) {
  if (!d.cluster_gpus.empty()) return d.cluster_gpus;
  return std::to_string(d.gpus) + " \u00d7 " + d.gpu;
}

// Timeline lanes as a table: busy share per lane.
Table timeline_table(const Timeline& t) {
  Table tb;
  tb.columns = {"stage", "stream", "tasks", "busy", "share of the step"};
  tb.align = {Align::Right, Align::Left, Align::Right, Align::Right, Align::Right};
  const bool gpus = !t.stage_gpus.empty();
  if (gpus) {
    tb.columns.insert(tb.columns.begin() + 1, "GPUs");
    tb.align.insert(tb.align.begin() + 1, Align::Left);
  }
  for (const auto& l : t.lanes) {
    std::vector<std::string> row = {std::to_string(l.stage), l.name, fmt_count(l.tasks),
                                    seconds_text(static_cast<double>(l.busy_ns) / 1e9),
                                    pct_of(static_cast<double>(l.busy_ns), static_cast<double>(t.step_ns))};
    if (gpus) row.insert(row.begin() + 1, t.stage_gpus.at(static_cast<std::size_t>(l.stage)));
    tb.add_row(std::move(row));
  }
  return tb;
}

std::string space_text(const SpaceAxis& a) {
  std::string s;
  for (const auto& v : a.values) s += (s.empty() ? "" : ", ") + v;
  return s;
}

const PlanRecord* find_plan(const ReportData& d, const std::string& id) {
  for (const auto& p : d.plans)
    if (p.plan_id == id) return &p;
  return nullptr;
}

// What the trade-off section shows.
std::string tradeoff_caption(const strategies::Tradeoff& t) {
  return "The best plan (" + t.shape + ", " + std::to_string(t.microbatches) +
         " microbatches a step) with each recompute policy in turn, everything else kept: the "
         "fastest step of each policy within each memory budget per GPU, from no savings (" +
         fixed(to_seconds(t.no_savings), 3) + " s a step) down to the least optimal recompute "
         "reaches (strata tradeoff, docs/remat.md). A cell is the step time and its overhead over no "
         "savings; - when the policy does not fit.";
}

std::string timeline_caption(const ReportData& d, const Timeline& t) {
  std::string s = "Plan " + t.plan_id + " replayed: " + fmt_count(t.tasks) + " tasks, step " +
                  seconds_text(static_cast<double>(t.step_ns) / 1e9);
  if (const PlanRecord* p = find_plan(d, t.plan_id)) s += " (its record: " + seconds_text(p->step_time_s) + ")";
  s += "; " + std::to_string(t.stages) + (t.stages == 1 ? " pipeline stage" : " pipeline stages");
  std::set<int> shown;
  for (const auto& l : t.lanes) shown.insert(l.stage);
  if (static_cast<int>(shown.size()) < t.stages)
    s += ", " + std::to_string(shown.size()) + " shown (evenly spaced, first and last included)";
  if (t.aggregated) s += "; lanes with very many tasks are drawn by the phase filling most of each time column";
  return s + ".";
}

const char* kCss = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#222;margin:0 auto;max-width:960px;padding:0 16px 48px}
h1{font-size:24px;margin:24px 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:15px;margin:18px 0 4px}
.sub{color:#666}table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}td.sub{padding-left:24px;color:#444}th{background:#f6f6f6}
table.sortable th{cursor:pointer;user-select:none}table.sortable th[aria-sort=ascending]::after{content:" \25B2"}table.sortable th[aria-sort=descending]::after{content:" \25BC"}
table.kv th{text-align:left;background:none;font-weight:600;white-space:nowrap}
svg{max-width:100%;height:auto;display:block;margin:8px 0;font-family:inherit}.wide{overflow-x:auto}
nav a{margin-right:12px}p.why{margin:6px 0}code{background:#f4f4f4;padding:0 3px}
)";

const char* kSortScript = R"(
(function(){
function key(c){var v=c.getAttribute('data-v');if(v!==null){var f=parseFloat(v);if(!isNaN(f))return f;}return c.textContent;}
var tables=document.querySelectorAll('table.sortable');
for(var t=0;t<tables.length;t++)(function(table){
var heads=table.tHead.rows[0].cells;
for(var i=0;i<heads.length;i++)(function(th,col){
th.tabIndex=0;th.title='Sort by this column';
function sort(){
var asc=th.getAttribute('aria-sort')!=='ascending';
for(var h=0;h<heads.length;h++)heads[h].removeAttribute('aria-sort');
th.setAttribute('aria-sort',asc?'ascending':'descending');
var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
rows.sort(function(a,b){var x=key(a.cells[col]),y=key(b.cells[col]);
var c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));return asc?c:-c;});
for(var r=0;r<rows.length;r++)body.appendChild(rows[r]);}
th.addEventListener('click',sort);
th.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();sort();}});
})(heads[i],i);
})(tables[t]);
document.documentElement.setAttribute('data-report-ready','1');
})();
)";

// ---------------------------------------------------------------- Markdown --

// Each line through printable (report/table.hpp): C0 and C1 controls,
// bidirectional overrides and bytes that are not UTF-8 shown as \xNN or
// \u{NNNN}, so a name cannot reorder or hide what a reader sees.
std::string printable_lines(std::string_view s) {
  std::string out;
  for (std::size_t at = 0;;) {
    const std::size_t nl = s.find('\n', at);
    out += printable(s.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at));
    if (nl == std::string_view::npos) return out;
    out += '\n';
    at = nl + 1;
  }
}

// Inline Markdown text: printable_lines with the line breaks as spaces,
// characters with a meaning escaped, HTML as entities.
std::string md(std::string_view s) {
  std::string out;
  for (const char c : printable_lines(s)) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '\\': case '`': case '*': case '_': case '[': case ']': case '|': case '#': case '!':
        out += '\\';
        out += c;
        break;
      case '\n': out += ' '; break;
      default: out += c;
    }
  }
  return out;
}

// Table cells: printable_lines before to_markdown escapes.
Table visible(Table t) {
  auto fix = [](std::string& s) { s = printable_lines(s); };
  for (auto& c : t.columns) fix(c);
  for (auto& r : t.rows)
    for (auto& c : r) fix(c);
  return t;
}

}  // namespace

// The two rankings side by side: row i holds the i-th plan by throughput
// and the i-th by time to train, each with its place in the other ranking.
Table ranking_table(const ReportData& d, const ReportAnalysis& an, std::size_t rows) {
  const auto tput_at = positions(an.fitting);
  const auto ttt_at = positions(an.by_time_to_train);
  Table t;
  t.columns = {"rank", "by throughput", d.throughput_unit + "/s/GPU", "time to train", "its rank by time",
               "by time to train", "time to train", "steps", "its rank by throughput"};
  t.align = {Align::Right, Align::Left, Align::Right, Align::Right, Align::Right,
             Align::Left, Align::Right, Align::Right, Align::Right};
  const std::size_t n = std::min(rows, an.fitting.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto& a = d.plans[an.fitting[i]];
    const auto& b = d.plans[an.by_time_to_train[i]];
    t.add_row({std::to_string(i + 1), a.plan_id + " (" + plan_text(d, a) + ")", fixed(a.tokens_per_s_per_gpu, 0),
               ttt_text(a), "#" + std::to_string(ttt_at.at(an.fitting[i])), b.plan_id + " (" + plan_text(d, b) + ")",
               ttt_text(b), b.train_steps ? count(static_cast<double>(*b.train_steps)) : "-",
               "#" + std::to_string(tput_at.at(an.by_time_to_train[i]))});
  }
  return t;
}

constexpr std::size_t kRankingRows = 10;

std::string ranking_chart(const ReportData& d, const ReportAnalysis& an) {
  svg::Scatter s;
  s.title = "Step time against time to train, every plan that reaches the goal";
  double hi = 0;
  for (std::size_t r : an.fitting)
    if (d.plans[r].time_to_train_s) hi = std::max(hi, *d.plans[r].time_to_train_s);
  const double unit = hi >= 2 * 86400 ? 86400 : hi >= 2 * 3600 ? 3600 : 1;
  const char* unit_name = unit == 86400 ? "days" : unit == 3600 ? "hours" : "s";
  s.x_label = "step time (s)";
  s.y_label = std::string("time to train (") + unit_name + ")";
  double xlo = INFINITY, xhi = 0, ylo = INFINITY;
  for (std::size_t r : an.fitting) {
    const auto& p = d.plans[r];
    if (!p.time_to_train_s || p.step_time_s <= 0) continue;
    xlo = std::min(xlo, p.step_time_s), xhi = std::max(xhi, p.step_time_s);
    ylo = std::min(ylo, *p.time_to_train_s);
  }
  s.log_x = xhi > 0 && xhi / xlo > 20;
  s.log_y = hi > 0 && hi / ylo > 20;
  std::map<std::string, std::size_t> slot;
  if (an.ranking_axis) {
    const auto& axis = d.axes[*an.ranking_axis];
    for (std::size_t v = 0; v < axis.values.size(); ++v) {
      slot.emplace(axis.values[v], v);
      s.series.push_back({axis.name + " " + axis.values[v], svg::colour(v), {}});
    }
  } else {
    s.series.push_back({"plans", svg::colour(0), {}});
  }
  for (std::size_t r : an.fitting) {
    const auto& p = d.plans[r];
    if (!p.time_to_train_s) continue;
    std::size_t k = 0;
    if (an.ranking_axis) {
      auto it = slot.find(axis_value(p, *an.ranking_axis));
      if (it == slot.end()) {
        it = slot.emplace(axis_value(p, *an.ranking_axis), s.series.size()).first;
        s.series.push_back({d.axes[*an.ranking_axis].name + " " + it->first, svg::colour(s.series.size()), {}});
      }
      k = it->second;
    }
    s.series[k].points.emplace_back(p.step_time_s, *p.time_to_train_s / unit);
  }
  s.desc = "One dot per plan that fits and reaches the goal (" + d.goal + ")" +
           (an.ranking_axis ? ", coloured by " + d.axes[*an.ranking_axis].name : std::string()) +
           ": left is a faster step, low is a shorter time to train.";
  return svg::scatter(s);
}

std::string report_html(const ReportData& d, const ReportAnalysis& an) {
  const std::string heading = "Strata report: " + d.model + " on " + cluster_text(d);
  std::string o;
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  o += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
       "script-src 'unsafe-inline'; img-src data:\">\n";
  o += "<title>" + escape_xml(heading) + "</title>\n";
  o += "<script>window.onerror=function(){document.documentElement.setAttribute('data-report-error','1');};</script>\n";
  o += "<style>" + std::string(kCss) + "</style>\n</head>\n<body>\n";
  o += "<h1>" + escape_xml(heading) + "</h1>\n";
  o += "<p class=\"sub\">Explore directory <code>" + escape_xml(d.dir) + "</code>, scenario <code>" +
       escape_xml(d.scenario) + "</code>: " + fmt_count(d.plans.size()) + " plans scored of " +
       fmt_count(d.space_size) + " in the space.</p>\n";
  o += std::string("<nav><a href=\"#winner\">Winner</a>") +
       (d.goal.empty() ? "" : "<a href=\"#ranking\">Time to train</a>") + "<a href=\"#pareto\">Time vs memory</a><a href=\"#memory\">Memory</a>"
       "<a href=\"#time\">Time</a><a href=\"#timeline\">Timeline</a><a href=\"#tradeoff\">Trade-off</a>"
       "<a href=\"#techniques\">Techniques</a>"
       "<a href=\"#top\">Top plans</a><a href=\"#front\">Pareto front</a><a href=\"#counts\">Counts</a></nav>\n";

  // Scenario.
  o += "<section id=\"scenario\"><h2>Scenario</h2><table class=\"kv\"><tbody>";
  auto kv = [&](const std::string& k, const std::string& v) {
    o += "<tr><th scope=\"row\">" + escape_xml(k) + "</th><td>" + escape_xml(v) + "</td></tr>";
  };
  kv("model", d.model);
  kv("cluster", cluster_text(d));
  kv("scenario", d.scenario);
  kv("space", fmt_count(d.space_size) + " plans over " + std::to_string(d.axes.size()) + " axes");
  for (const auto& a : d.axes) kv(a.name, space_text(a));
  o += "</tbody></table></section>\n";

  // Winner.
  o += "<section id=\"winner\"><h2>The winning plan and why</h2>";
  for (const auto& s : an.why) o += "<p class=\"why\">" + escape_xml(s) + "</p>";
  if (an.winner) {
    std::vector<std::size_t> three = {*an.winner};
    if (an.runner_up) three.push_back(*an.runner_up);
    if (an.lowest_memory && *an.lowest_memory != *an.winner &&
        (!an.runner_up || *an.lowest_memory != *an.runner_up))
      three.push_back(*an.lowest_memory);
    const PlanRows pr = plan_rows(d, three, an.ranked);
    o += "<div class=\"wide\">" + html_table(pr.head, pr.rows, false) + "</div>";
  }
  o += "</section>\n";

  if (!d.goal.empty() && !an.fitting.empty()) {
    o += "<section id=\"ranking\"><h2>Step time against time to train</h2>";
    o += "<p>With a training goal (" + escape_xml(d.goal) + ") a plan's worth is its time to train: the steps "
         "the goal takes at its batch and with its lossy techniques, times its step time. The two "
         "rankings side by side:</p>";
    for (const auto& w : an.ranking_why) o += "<p class=\"why\">" + escape_xml(w) + "</p>";
    o += "<div class=\"wide\">" + html_of(ranking_table(d, an, kRankingRows)) + "</div>";
    o += ranking_chart(d, an) + "</section>\n";
  }
  if (!d.plans.empty()) {
    o += "<section id=\"pareto\"><h2>Step time against peak memory</h2>";
    o += "<p>Every scored plan is a dot (plans on the same spot are drawn once); circled plans form "
         "the Pareto front: no other plan is both faster and needs less memory.</p>";
    o += scatter_chart(d, an) + "</section>\n";
    o += "<section id=\"memory\"><h2>Memory per plan</h2><p>Peak memory per GPU of the charted plans "
         "(the best " + std::to_string(std::min<std::size_t>(8, an.ranked.size())) +
         " by throughput, samples of the Pareto front, the lowest-memory plan), split by what the bytes hold.</p>";
    o += memory_chart(d, an) + "</section>\n";
    o += "<section id=\"time\"><h2>Where the step time goes</h2><p>The same plans' step time on the critical "
         "pipeline stage: compute, recompute, communication not hidden behind compute, pipeline bubble, "
         "offload stall and the optimizer step.</p>";
    o += time_chart(d, an) + "</section>\n";
  }

  o += "<section id=\"timeline\"><h2>Timeline of the best plan</h2>";
  if (d.timeline) {
    o += "<p>" + escape_xml(timeline_caption(d, *d.timeline)) + "</p>";
    o += svg::timeline(timeline_chart(*d.timeline));
    o += "<div class=\"wide\">" + html_of(timeline_table(*d.timeline)) + "</div>";
  } else {
    o += "<p>No timeline: " + escape_xml(d.timeline_note.empty() ? "no plan to replay" : d.timeline_note) + "</p>";
  }
  o += "</section>\n";

  o += "<section id=\"tradeoff\"><h2>Step time against memory, per recompute policy</h2>";
  if (d.tradeoff) {
    o += "<p>" + escape_xml(tradeoff_caption(*d.tradeoff)) + "</p>";
    o += tradeoff_svg(*d.tradeoff);
    o += "<div class=\"wide\">" + html_of(tradeoff_table(*d.tradeoff)) + "</div>";
  } else {
    o += "<p>No trade-off: " + escape_xml(d.tradeoff_note.empty() ? "no plan to vary" : d.tradeoff_note) + "</p>";
  }
  o += "</section>\n";

  o += "<section id=\"techniques\"><h2>Technique by technique</h2>";
  o += "<p>For each searched axis: the plans scored with each value, the best of them (highest "
       "throughput) and its peak memory, the medians, and \u2014 the fairest comparison \u2014 the median "
       "change over pairs of plans that differ in this axis only, against the axis's first value.</p>";
  if (an.axes.empty()) o += "<p>The space searches no axis with more than one value.</p>";
  for (const auto& c : an.axes) {
    o += "<h3>" + escape_xml(c.axis) + "</h3><p>" + escape_xml(c.sentence) + "</p>";
    o += "<div class=\"wide\">" + html_of(axis_table(d, c)) + "</div>";
  }
  o += "</section>\n";

  {
    const PlanRows top = plan_rows(d, first_n(an.ranked, kTopRows), an.ranked);
    o += "<section id=\"top\"><h2>Top plans</h2><p>The " + std::to_string(top.rows.size()) + " best of " +
         fmt_count(d.plans.size()) + " by " + d.throughput_unit + "/s per GPU (click a heading to sort; every plan is in "
         "<code>results.csv</code>).</p><div class=\"wide\">" + html_table(top.head, top.rows, true) + "</div></section>\n";
    const PlanRows fr = plan_rows(d, first_n(an.front, kFrontRows), an.ranked);
    o += "<section id=\"front\"><h2>Pareto front</h2><p>" + std::to_string(an.front.size()) +
         " plans, by step time" + (an.front.size() > kFrontRows ? " (the first " + std::to_string(kFrontRows) + " shown)" : std::string()) +
         ".</p><div class=\"wide\">" + html_table(fr.head, fr.rows, true) + "</div></section>\n";
  }
  o += "<section id=\"counts\"><h2>What the explorer did</h2><div class=\"wide\">" + html_of(counts_table(d)) +
       "</div></section>\n";
  o += "<footer class=\"sub\"><p>Written by <code>strata report</code> beside <code>report.md</code> and "
       "<code>results.csv</code>.</p></footer>\n";
  o += "<script>" + std::string(kSortScript) + "</script>\n</body>\n</html>\n";
  return o;
}

std::string report_markdown(const ReportData& d, const ReportAnalysis& an) {
  std::string o;
  o += "# Strata report: " + md(d.model) + " on " + md(cluster_text(d)) + "\n\n";
  o += "Explore directory " + md(d.dir) + ", scenario " + md(d.scenario) + ": " + fmt_count(d.plans.size()) +
       " plans scored of " + fmt_count(d.space_size) + " in the space.\n\n";
  o += "## Scenario\n\n";
  Table sc;
  sc.columns = {"", ""};
  sc.add_row({"model", d.model});
  sc.add_row({"cluster", cluster_text(d)});
  sc.add_row({"scenario", d.scenario});
  sc.add_row({"space", fmt_count(d.space_size) + " plans over " + std::to_string(d.axes.size()) + " axes"});
  for (const auto& a : d.axes) sc.add_row({a.name, space_text(a)});
  o += to_markdown(visible(sc)) + "\n";
  o += "## The winning plan and why\n\n";
  for (const auto& s : an.why) o += md(s) + "\n\n";
  if (an.winner) {
    std::vector<std::size_t> three = {*an.winner};
    if (an.runner_up) three.push_back(*an.runner_up);
    if (an.lowest_memory && *an.lowest_memory != *an.winner &&
        (!an.runner_up || *an.lowest_memory != *an.runner_up))
      three.push_back(*an.lowest_memory);
    o += to_markdown(visible(to_plain(plan_rows(d, three, an.ranked)))) + "\n";
  }
  if (!d.goal.empty() && !an.fitting.empty()) {
    o += "## Step time against time to train\n\n";
    for (const auto& w : an.ranking_why) o += md(w) + "\n\n";
    o += to_markdown(visible(ranking_table(d, an, kRankingRows))) + "\n";
  }
  if (!d.plans.empty()) {
    o += "## Memory per plan (GiB per GPU at the peak)\n\n";
    Table m;
    m.columns = {"plan"};
    for (const auto& t : d.memory_tags) m.columns.push_back(t);
    m.columns.insert(m.columns.end(), {"peak", "GPU"});
    m.align.assign(m.columns.size(), Align::Right);
    for (std::size_t i : an.shown) {
      const auto& p = d.plans[i];
      std::vector<std::string> r = {bar_label(d, an, i)};
      for (Bytes b : p.memory) r.push_back(fixed(gib(b), 2));
      r.resize(1 + d.memory_tags.size());
      r.push_back(fixed(gib(p.peak_memory_bytes), 2));
      r.push_back(fixed(gib(p.gpu_memory_bytes), 0));
      m.add_row(std::move(r));
    }
    o += to_markdown(visible(m)) + "\n";
    double longest = 0;
    for (std::size_t i : an.shown) longest = std::max(longest, d.plans[i].step_time_s);
    const double unit = longest < 1 ? 1e3 : 1;
    o += std::string("## Where the step time goes (") + (longest < 1 ? "milliseconds" : "seconds") + ")\n\n";
    Table t;
    t.columns = {"plan"};
    for (const auto& tp : kTimeParts) t.columns.emplace_back(tp.label);
    t.columns.emplace_back("step");
    t.align.assign(t.columns.size(), Align::Right);
    for (std::size_t i : an.shown) {
      const auto& p = d.plans[i];
      std::vector<std::string> r = {bar_label(d, an, i)};
      for (std::size_t k = 0; k < kTimePartCount; ++k)
        r.push_back(fixed(unit * (k < p.time_s.size() ? p.time_s[k] : 0), 3));
      r.push_back(fixed(unit * p.step_time_s, 3));
      t.add_row(std::move(r));
    }
    o += to_markdown(visible(t)) + "\n";
  }
  o += "## Timeline of the best plan\n\n";
  if (d.timeline) {
    o += md(timeline_caption(d, *d.timeline)) + "\n\n" + to_markdown(visible(timeline_table(*d.timeline))) + "\n";
  } else {
    o += "No timeline: " + md(d.timeline_note.empty() ? "no plan to replay" : d.timeline_note) + "\n\n";
  }
  o += "## Step time against memory, per recompute policy\n\n";
  if (d.tradeoff) {
    o += md(tradeoff_caption(*d.tradeoff)) + "\n\n" + to_markdown(visible(tradeoff_table(*d.tradeoff))) + "\n";
  } else {
    o += "No trade-off: " + md(d.tradeoff_note.empty() ? "no plan to vary" : d.tradeoff_note) + "\n\n";
  }
  o += "## Technique by technique\n\n";
  if (an.axes.empty()) o += "The space searches no axis with more than one value.\n\n";
  for (const auto& c : an.axes) {
    o += "### " + md(c.axis) + "\n\n" + md(c.sentence) + "\n\n" + to_markdown(visible(axis_table(d, c))) + "\n";
  }
  o += "## Top plans\n\n";
  o += to_markdown(visible(to_plain(plan_rows(d, first_n(an.ranked, kTopRows), an.ranked)))) + "\n";
  o += "## Pareto front\n\n" + std::to_string(an.front.size()) + " plans, by step time.\n\n";
  o += to_markdown(visible(to_plain(plan_rows(d, first_n(an.front, kFrontRows), an.ranked)))) + "\n";
  o += "## What the explorer did\n\n" + to_markdown(visible(counts_table(d)));
  return o;
}

std::string results_csv(const ReportData& d, const ReportAnalysis& an) {
  Table t;
  t.columns = {"plan_id", "batch_global", "batch_micro", "dp", "tp", "pp"};
  std::vector<std::size_t> axes;
  for (std::size_t a = 0; a < d.axes.size(); ++a) {
    const auto& n = d.axes[a].name;
    if (n == "dp" || n == "tp" || n == "pp" || n == "batch.global" || n == "batch.micro") continue;
    axes.push_back(a);
    t.columns.push_back(n);
  }
  for (const char* c : {"step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_bytes",
                        "gpu_memory_bytes", "fits"})
    t.columns.emplace_back(c);
  for (const auto& tag : d.memory_tags) t.columns.push_back("memory_" + tag + "_bytes");
  for (const auto& tp : kTimeParts) t.columns.push_back("time_" + std::string(tp.key) + "_s");
  t.columns.emplace_back("bubble_fraction");
  const bool goal = !d.goal.empty();
  if (goal) t.columns.insert(t.columns.end(), {"train_steps", "time_to_train_s"});
  for (std::size_t i : an.ranked) {
    const auto& p = d.plans[i];
    std::vector<std::string> r = {p.plan_id, std::to_string(p.batch_global), std::to_string(p.batch_micro),
                                  std::to_string(p.dp), std::to_string(p.tp), std::to_string(p.pp)};
    for (std::size_t a : axes) r.push_back(axis_value(p, a));
    r.push_back(shortest(p.step_time_s));
    r.push_back(shortest(p.tokens_per_s_per_gpu));
    r.push_back(shortest(p.mfu));
    r.push_back(std::to_string(p.peak_memory_bytes));
    r.push_back(std::to_string(p.gpu_memory_bytes));
    r.push_back(p.fits() ? "yes" : "no");
    for (std::size_t k = 0; k < d.memory_tags.size(); ++k)
      r.push_back(std::to_string(k < p.memory.size() ? p.memory[k] : 0));
    for (std::size_t k = 0; k < kTimePartCount; ++k) r.push_back(shortest(k < p.time_s.size() ? p.time_s[k] : 0));
    r.push_back(shortest(p.bubble_fraction));
    if (goal) {
      r.push_back(p.train_steps ? std::to_string(*p.train_steps) : "");
      r.push_back(p.time_to_train_s ? shortest(*p.time_to_train_s) : "");
    }
    t.add_row(std::move(r));
  }
  return to_csv(t);
}

}  // namespace strata::report
