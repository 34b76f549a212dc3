#include "lowering/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "sim/error.hpp"

namespace strata::strategies {
namespace {

using std::to_string;

std::size_t idx(int i) { return static_cast<std::size_t>(i); }

Step forward(int mb, int chunk) { return {mb, chunk, Pass::Forward}; }
Step backward(int mb, int chunk) { return {mb, chunk, Pass::Backward}; }

std::string step_name(const Step& st) {
  return (st.pass == Pass::Forward ? "F" : "B") + to_string(st.microbatch) + "." +
         to_string(st.chunk);
}

// Warm-up forwards, then (forward, backward) pairs, then the remaining
// backwards: the shape every 1F1B-style stage order has. `fwd` and `bwd` list
// the stage's forwards and backwards in their own orders.
std::vector<Step> one_f_one_b(const std::vector<Step>& fwd, const std::vector<Step>& bwd,
                              int warmup) {
  const int total = static_cast<int>(fwd.size());
  warmup = std::min(warmup, total);
  std::vector<Step> out;
  out.reserve(2 * fwd.size());
  for (int k = 0; k < warmup; ++k) out.push_back(fwd[idx(k)]);
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(fwd[idx(warmup + k)]);
    out.push_back(bwd[idx(k)]);
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(bwd[idx(k)]);
  return out;
}

// Megatron get_schedule_table: (microbatch, chunk) in forward order.
std::vector<Step> schedule_table(int m, int v, int group) {
  std::vector<Step> table;
  for (int first = 0; first < m; first += group) {
    const int last = first + group >= m ? m : first + group;  // last group takes the rest
    for (int c = 0; c < v; ++c)
      for (int mb = first; mb < last; ++mb) table.push_back(forward(mb, c));
  }
  return table;
}

PipelineSchedule interleaved(int pp, int v, int m, int group) {
  if (group < pp || group > m)
    throw Error("interleaved schedule: microbatch group " + to_string(group) +
                " must lie in [pp=" + to_string(pp) + ", microbatches=" + to_string(m) +
                "] (Megatron microbatch_group_size_per_vp_stage)" +
                (m < pp ? "; microbatches must be at least pp" : ""));
  if (const int rest = m % group; rest != 0 && rest < pp)
    throw Error("interleaved schedule: microbatches=" + to_string(m) + " leave a last group of " +
                to_string(rest) + " < pp=" + to_string(pp) +
                " (Megatron requires m % group == 0 or >= pp; with the default group = pp, "
                "m must be a multiple of pp)");
  const std::vector<Step> fwd = schedule_table(m, v, group);
  std::vector<Step> bwd;
  bwd.reserve(fwd.size());
  for (const Step& f : fwd) bwd.push_back(backward(f.microbatch, v - 1 - f.chunk));

  PipelineSchedule s{Schedule::Interleaved, pp, v, m, {}};
  for (int stage = 0; stage < pp; ++stage)
    s.stages.push_back(one_f_one_b(fwd, bwd, (pp - stage - 1) * 2 + (v - 1) * group));
  return s;
}

PipelineSchedule single_chunk(Schedule kind, int pp, int m) {
  std::vector<Step> fwd, bwd;
  for (int mb = 0; mb < m; ++mb) {
    fwd.push_back(forward(mb, 0));
    bwd.push_back(backward(mb, 0));
  }
  PipelineSchedule s{kind, pp, 1, m, {}};
  for (int stage = 0; stage < pp; ++stage) {
    if (kind == Schedule::GPipe) {
      std::vector<Step> order = fwd;
      order.insert(order.end(), bwd.rbegin(), bwd.rend());
      s.stages.push_back(std::move(order));
    } else {
      s.stages.push_back(one_f_one_b(fwd, bwd, pp - stage - 1));
    }
  }
  return s;
}

void check_stage(const PipelineSchedule& s, int stage) {
  if (stage < 0 || stage >= s.pp)
    throw Error("pipeline schedule: stage " + to_string(stage) + " out of range [0, " +
                to_string(s.pp) + ")");
  if (s.stages.size() != idx(s.pp))
    throw Error("pipeline schedule: has " + to_string(s.stages.size()) +
                " stage lists; pp=" + to_string(s.pp));
}

// Per-stage structure: one forward and one backward of every (mb, chunk),
// backward after forward.
void check_structure(const PipelineSchedule& s) {
  if (s.pp < 1 || s.v < 1 || s.m < 1)
    throw Error("pipeline schedule: pp, v and m must be >= 1 (pp=" + to_string(s.pp) +
                ", v=" + to_string(s.v) + ", m=" + to_string(s.m) + ")");
  if (s.stages.size() != idx(s.pp))
    throw Error("pipeline schedule: has " + to_string(s.stages.size()) +
                " stage lists; pp=" + to_string(s.pp));
  for (int stage = 0; stage < s.pp; ++stage) {
    const std::string where = "pipeline schedule: stage " + to_string(stage) + ": ";
    std::vector<char> fwd_seen(idx(s.m * s.v), 0), bwd_seen(idx(s.m * s.v), 0);
    for (const Step& st : s.stages[idx(stage)]) {
      if (st.microbatch < 0 || st.microbatch >= s.m || st.chunk < 0 || st.chunk >= s.v)
        throw Error(where + step_name(st) + " is out of range (m=" + to_string(s.m) +
                    ", v=" + to_string(s.v) + ")");
      const std::size_t i = idx(st.microbatch * s.v + st.chunk);
      if (st.pass == Pass::Forward) {
        if (fwd_seen[i]) throw Error(where + step_name(st) + " runs twice");
        fwd_seen[i] = 1;
      } else {
        if (bwd_seen[i]) throw Error(where + step_name(st) + " runs twice");
        if (!fwd_seen[i]) throw Error(where + step_name(st) + " runs before its forward");
        bwd_seen[i] = 1;
      }
    }
    for (int mb = 0; mb < s.m; ++mb)
      for (int c = 0; c < s.v; ++c)
        if (!bwd_seen[idx(mb * s.v + c)])
          throw Error(where + "(microbatch " + to_string(mb) + ", chunk " + to_string(c) +
                      ") lacks a " + (fwd_seen[idx(mb * s.v + c)] ? "backward" : "forward"));
  }
}

// In-order list simulation; throws on deadlock. Assumes check_structure passed.
double run(const PipelineSchedule& s, double t_fwd, double t_bwd) {
  const int chunks = s.pp * s.v;
  // End times by [pass][microbatch][model chunk]; negative: not done yet.
  const auto at = [&](Pass ph, int mb, int k) {
    return idx(((ph == Pass::Forward ? 0 : 1) * s.m + mb) * chunks + k);
  };
  std::vector<double> end(idx(2 * s.m * chunks), -1.0);
  std::vector<std::size_t> next(idx(s.pp), 0);
  std::vector<double> free_at(idx(s.pp), 0.0);
  const double dur[2] = {t_fwd / s.v, t_bwd / s.v};
  double makespan = 0.0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int stage = 0; stage < s.pp; ++stage) {
      const auto& steps = s.stages[idx(stage)];
      while (next[idx(stage)] < steps.size()) {
        const Step& st = steps[next[idx(stage)]];
        const int k = st.chunk * s.pp + stage;
        double ready = free_at[idx(stage)];
        std::vector<std::size_t> deps;
        if (st.pass == Pass::Forward) {
          if (k > 0) deps.push_back(at(Pass::Forward, st.microbatch, k - 1));
        } else {
          deps.push_back(at(Pass::Forward, st.microbatch, k));
          if (k + 1 < chunks) deps.push_back(at(Pass::Backward, st.microbatch, k + 1));
        }
        bool ok = true;
        for (std::size_t d : deps) {
          if (end[d] < 0.0) ok = false;
          ready = std::max(ready, end[d]);
        }
        if (!ok) break;
        const double done = ready + dur[st.pass == Pass::Forward ? 0 : 1];
        end[at(st.pass, st.microbatch, k)] = done;
        free_at[idx(stage)] = done;
        makespan = std::max(makespan, done);
        ++next[idx(stage)];
        progress = true;
      }
    }
  }
  std::string blocked;
  for (int stage = 0; stage < s.pp; ++stage)
    if (next[idx(stage)] < s.stages[idx(stage)].size())
      blocked += " stage " + to_string(stage) + " waits at " +
                 step_name(s.stages[idx(stage)][next[idx(stage)]]) + ";";
  if (!blocked.empty()) throw Error("pipeline schedule deadlocks:" + blocked);
  return makespan;
}

// Replays `stage` up to the first moment its live count reaches the maximum.
std::vector<Step> replay_to_peak(const PipelineSchedule& s, int stage) {
  check_stage(s, stage);
  std::vector<Step> alive, peak;
  for (const Step& st : s.stages[idx(stage)]) {
    if (st.pass == Pass::Forward) {
      alive.push_back(st);
      if (alive.size() > peak.size()) peak = alive;
    } else {
      const auto it = std::find(alive.begin(), alive.end(), forward(st.microbatch, st.chunk));
      if (it != alive.end()) alive.erase(it);
    }
  }
  return peak;
}

}  // namespace

PipelineSchedule make_schedule(Schedule kind, int pp, int virtual_stages, int microbatches,
                               std::optional<int> microbatch_group) {
  if (pp < 1 || virtual_stages < 1 || microbatches < 1)
    throw Error("pipeline schedule: pp, virtual_stages and microbatches must be >= 1 (pp=" +
                to_string(pp) + ", virtual_stages=" + to_string(virtual_stages) +
                ", microbatches=" + to_string(microbatches) + ")");
  if (kind == Schedule::Interleaved)
    return interleaved(pp, virtual_stages, microbatches, microbatch_group.value_or(pp));
  if (virtual_stages != 1)
    throw Error("pipeline schedule: virtual_stages=" + to_string(virtual_stages) +
                " needs the interleaved schedule");
  if (microbatch_group)
    throw Error("pipeline schedule: a microbatch group applies to the interleaved schedule only");
  return single_chunk(kind, pp, microbatches);
}

int model_chunk(const PipelineSchedule& s, int stage, int chunk) {
  check_stage(s, stage);
  if (chunk < 0 || chunk >= s.v)
    throw Error("pipeline schedule: chunk " + to_string(chunk) + " out of range [0, " +
                to_string(s.v) + ")");
  return chunk * s.pp + stage;
}

int weight_versions(Schedule kind, int pp, int stage) {
  if (pp < 1 || stage < 0 || stage >= pp)
    throw Error("weight_versions: stage " + to_string(stage) +
                " out of range for pp=" + to_string(pp));
  switch (kind) {
    case Schedule::PipeDream:
      return pp - stage;
    case Schedule::PipeDream2BW:
      return pp > 1 ? 2 : 1;
    default:
      return 1;
  }
}

int max_in_flight(const PipelineSchedule& s, int stage) {
  return static_cast<int>(replay_to_peak(s, stage).size());
}

std::vector<Step> in_flight_at_peak(const PipelineSchedule& s, int stage) {
  return replay_to_peak(s, stage);
}

void validate(const PipelineSchedule& s) {
  check_structure(s);
  run(s, 1.0, 1.0);
}

double simulate_makespan(const PipelineSchedule& s, double t_fwd, double t_bwd) {
  if (!(std::isfinite(t_fwd) && std::isfinite(t_bwd) && t_fwd >= 0.0 && t_bwd >= 0.0))
    throw Error("simulate_makespan: t_fwd and t_bwd must be finite and >= 0");
  check_structure(s);
  return run(s, t_fwd, t_bwd);
}

std::string to_string(const PipelineSchedule& s) {
  std::string out;
  for (std::size_t stage = 0; stage < s.stages.size(); ++stage) {
    out += "stage " + std::to_string(stage) + ":";
    for (const Step& st : s.stages[stage]) out += " " + step_name(st);
    out += "\n";
  }
  return out;
}

}  // namespace strata::strategies
