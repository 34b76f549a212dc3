#include "strategies/remat.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/error.hpp"

namespace strata::strategies::remat {

Time Chain::compute() const {
  Time t = 0;
  for (const auto& s : stages) t += s.fwd + s.bwd;
  return t;
}

// --- build: decisions → operations, time and peak -----------------------------

Schedule build(const Chain& c, const Decisions& d) {
  const int n = c.size();
  if (n < 1) throw Error("remat: the chain has no stages");
  Schedule out;
  std::size_t next = 0;
  auto peak = [&](Bytes live) { out.peak = std::max(out.peak, live); };
  auto emit = [&](OpKind kind, int i, Time t) {
    out.ops.push_back({kind, i});
    out.time += t;
  };
  peak(c.input);

  // A sub-chain [s, t] entered with `base` live bytes (a(s−1) and δ(t)
  // included). Phases: 0 entered, 1 keep-all child done, 2 right part done,
  // 3 left part done. Explicit stack: chains may be deeper than the C++ stack.
  struct Frame {
    int s, t;
    Bytes base;
    int d = -1;
    int phase = 0;
  };
  std::vector<Frame> stack{{1, n, c.input}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    const int s = f.s, t = f.t;
    if (f.phase == 0) {
      if (next >= d.size())
        throw Error("remat: decisions end before sub-chain [" + std::to_string(s) + ", " +
                    std::to_string(t) + "]");
      f.d = d[next++];
      if (f.d == 0) {
        peak(f.base + c.full(s) + c.stage(s).fwd_work);
        emit(OpKind::ForwardAll, s, c.stage(s).fwd);
        f.phase = 1;
        if (s < t) {
          const Bytes base = f.base + c.full(s);
          stack.push_back({s + 1, t, base});
        }
        continue;
      }
      if (f.d <= s || f.d > t)
        throw Error("remat: decision " + std::to_string(f.d) + " for sub-chain [" +
                    std::to_string(s) + ", " + std::to_string(t) + "] is neither 0 nor in (s, t]");
      peak(f.base + c.act(s) + c.stage(s).fwd_work);
      emit(OpKind::ForwardCheckpoint, s, c.stage(s).fwd);
      for (int k = s + 1; k < f.d; ++k) {
        peak(f.base + c.act(k - 1) + c.act(k) + c.stage(k).fwd_work);
        emit(OpKind::ForwardNone, k, c.stage(k).fwd);
      }
      f.phase = 2;
      const Bytes base = f.base + c.act(f.d - 1);
      stack.push_back({f.d, t, base});
      continue;
    }
    if (f.phase == 1) {
      // ā(s) and δ(s) live, δ(t) freed by the child's first backward.
      peak(f.base + c.full(s) + c.grad(s) - c.grad(t) + c.grad(s - 1) + c.stage(s).bwd_work);
      emit(OpKind::Backward, s, c.stage(s).bwd);
      stack.pop_back();
      continue;
    }
    if (f.phase == 2) {
      // The right part freed a(d−1) and δ(t) and left δ(d−1).
      f.phase = 3;
      const Bytes base = f.base + c.grad(f.d - 1) - c.grad(t);
      const int dd = f.d;
      stack.push_back({s, dd - 1, base});
      continue;
    }
    stack.pop_back();
  }
  if (next != d.size())
    throw Error("remat: " + std::to_string(d.size() - next) + " decisions left over");
  out.recompute = out.time - c.compute();
  return out;
}

// --- replay: the checker -------------------------------------------------------

namespace {

enum class Held { Absent, Plain, Full };

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::ForwardNone: return "forward-none";
    case OpKind::ForwardCheckpoint: return "forward-checkpoint";
    case OpKind::ForwardAll: return "forward-all";
    case OpKind::Backward: return "backward";
    case OpKind::Free: return "free";
  }
  return "?";
}

}  // namespace

Replay replay(const Chain& c, const std::vector<Op>& ops) {
  const int n = c.size();
  Replay r;
  std::vector<Held> held(static_cast<std::size_t>(n) + 1, Held::Absent);
  std::vector<int> forwards(static_cast<std::size_t>(n) + 1, 0);
  auto at = [&](int j) -> Held& { return held[static_cast<std::size_t>(j)]; };
  auto size = [&](int j) {
    return at(j) == Held::Plain ? c.act(j) : at(j) == Held::Full ? c.full(j) : 0;
  };
  int next_backward = n;  // δ(next_backward) is live when next_backward < n
  Bytes live = c.input;
  at(0) = Held::Plain;
  r.peak = live;
  for (std::size_t step = 0; step < ops.size(); ++step) {
    const Op op = ops[step];
    const int i = op.index;
    auto fail = [&](const std::string& why) {
      r.error = "op " + std::to_string(step) + " (" + op_name(op.kind) + " " +
                std::to_string(i) + "): " + why;
      return r;
    };
    if (op.kind == OpKind::Free) {
      if (i < 0 || i > n) return fail("no such activation");
      if (at(i) != Held::Plain) return fail("frees only a plain live activation");
      if (i < n && at(i + 1) == Held::Full)
        return fail("a(" + std::to_string(i) + ") is held by ā(" + std::to_string(i + 1) +
                    ") until backward " + std::to_string(i + 1));
      live -= c.act(i);
      at(i) = Held::Absent;
      continue;
    }
    if (i < 1 || i > n) return fail("no such stage");
    const Stage& st = c.stage(i);
    if (op.kind == OpKind::Backward) {
      if (i != next_backward)
        return fail("backwards run n, n-1, …, 1; expected " + std::to_string(next_backward));
      if (at(i) != Held::Full) return fail("needs all saved tensors of its stage (a forward-all)");
      if (at(i - 1) == Held::Absent)
        return fail("needs its input a(" + std::to_string(i - 1) + ")");
      r.peak = std::max(r.peak, live + c.grad(i - 1) + st.bwd_work);
      r.time += st.bwd;
      live += c.grad(i - 1) - c.grad(i) - c.full(i);
      at(i) = Held::Absent;
      if (at(i - 1) == Held::Plain) {  // a plain input has no further use
        live -= c.act(i - 1);
        at(i - 1) = Held::Absent;
      }
      next_backward = i - 1;
      continue;
    }
    // Forwards.
    if (i > next_backward) return fail("its backward already ran");
    if (at(i - 1) == Held::Absent) return fail("needs its input a(" + std::to_string(i - 1) + ")");
    if (at(i) != Held::Absent) return fail("a(" + std::to_string(i) + ") is already live");
    if (op.kind == OpKind::ForwardNone && at(i - 1) != Held::Plain)
      return fail("frees its input, which must be plain");
    const bool all = op.kind == OpKind::ForwardAll;
    r.peak = std::max(r.peak, live + (all ? c.full(i) : c.act(i)) + st.fwd_work);
    r.time += st.fwd;
    if (forwards[static_cast<std::size_t>(i)]++ > 0) r.recompute += st.fwd;
    at(i) = all ? Held::Full : Held::Plain;
    live += size(i);
    if (op.kind == OpKind::ForwardNone) {
      live -= c.act(i - 1);
      at(i - 1) = Held::Absent;
    }
  }
  if (next_backward != 0) {
    r.error = "incomplete: backward " + std::to_string(next_backward) + " never ran";
    return r;
  }
  for (int j = 0; j <= n; ++j)
    if (at(j) != Held::Absent) {
      r.error = "a(" + std::to_string(j) + ") is still live at the end";
      return r;
    }
  return r;
}

// --- simple solvers -------------------------------------------------------------

Decisions store_all(const Chain& c) { return Decisions(static_cast<std::size_t>(c.size()), 0); }

Decisions segments(const Chain& c, int k) {
  const int n = c.size();
  if (k < 1) throw Error("remat: segment length must be >= 1");
  // Segment starts 1, k+1, 2k+1, …: checkpoint each start's input (pre-order:
  // the starts after the first), then every stage keep-all, last segment first.
  Decisions d;
  for (int start = 1 + k; start <= n; start += k) d.push_back(start);
  d.resize(d.size() + static_cast<std::size_t>(n), 0);
  return d;
}

int sqrt_segment(std::int64_t n) {
  return std::max(1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n)))));
}

Decisions sqrt_segments(const Chain& c) { return segments(c, sqrt_segment(c.size())); }

// --- Revolve -------------------------------------------------------------------

namespace {
constexpr std::int64_t kSaturated = std::int64_t{1} << 62;
}

std::int64_t binomial_beta(std::int64_t s, std::int64_t t) {
  if (s < 0 || t < 0) return 0;
  // C(s + t, min(s, t)), saturating at 2^62.
  const std::int64_t k = std::min(s, t);
  std::int64_t v = 1;
  for (std::int64_t j = 1; j <= k; ++j) {
    // v · (s + t − k + j) / j stays integral at each step.
    const std::int64_t num = s + t - k + j;
    if (v > kSaturated / num) return kSaturated;
    v = v * num / j;
  }
  return v;
}

std::int64_t revolve_forwards(std::int64_t l, std::int64_t s) {
  if (l < 1 || s < 1) throw Error("revolve_forwards: needs steps >= 1 and snaps >= 1");
  std::int64_t r = 0;
  while (binomial_beta(s, r) < l) ++r;
  return r * l - binomial_beta(s + 1, r - 1);
}

Decisions revolve(const Chain& c, int snaps) {
  const int n = c.size();
  if (snaps < 1) throw Error("remat: revolve needs at least one snapshot");
  // T(l, 0): with no snapshot left, only a single step (from the current state).
  auto cost = [](std::int64_t l, std::int64_t s) {
    return s == 0 ? (l == 1 ? 0 : kSaturated) : revolve_forwards(l, s);
  };
  struct Task {
    int p, l, s;  // reverse stages p+1..p+l from a(p), with s snapshots
  };
  Decisions d;
  std::vector<Task> todo{{0, n, snaps}};
  while (!todo.empty()) {
    const Task k = todo.back();
    todo.pop_back();
    if (k.l == 1) {
      d.push_back(0);
      continue;
    }
    // The first split m reaching Griewank's minimum: advance m steps, store
    // a(p+m), reverse the rest with one snapshot fewer, then the first m.
    const std::int64_t best = cost(k.l, k.s);
    int m = k.s == 1 ? k.l - 1 : 1;
    for (; m < k.l; ++m)
      if (m + cost(k.l - m, k.s - 1) + cost(m, k.s) == best) break;
    if (m >= k.l) throw Error("revolve: no split reaches the binomial bound");
    d.push_back(k.p + m + 1);
    todo.push_back({k.p, m, k.s});             // left, after
    todo.push_back({k.p + m, k.l - m, k.s - 1});  // right, first
  }
  return d;
}

// --- the rotor dynamic programme --------------------------------------------------

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Bytes ceil_div(Bytes a, Bytes b) { return (a + b - 1) / b; }

// Sizes in memory levels of `unit` bytes. Each sequence (outputs a(0..n),
// saved tensors, working bytes) is rounded by error diffusion — the running
// sum rounded to the nearest level — so any run of consecutive buffers is off
// by less than a level, instead of a level per buffer. The programme is
// exact for these sizes; its schedules are then measured in bytes.
std::vector<int> diffuse(const std::vector<Bytes>& sizes, Bytes unit) {
  std::vector<int> out(sizes.size());
  Bytes sum = 0, rounded = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sum += sizes[i];
    const Bytes r = (sum + unit / 2) / unit;
    out[i] = static_cast<int>(r - rounded);
    rounded = r;
  }
  return out;
}

// How sizes become levels: `Nearest` by error diffusion (close on average,
// but the programme may favour buffers rounded down, so its schedules are
// measured before use); `Up` each buffer rounded up (every schedule of the
// table fits its m, with up to a level lost per buffer).
enum class Rounding { Nearest, Up };

std::vector<int> levels_of(const std::vector<Bytes>& sizes, Bytes unit, Rounding r) {
  if (r == Rounding::Nearest) return diffuse(sizes, unit);
  std::vector<int> out(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i)
    out[i] = static_cast<int>(ceil_div(sizes[i], unit));
  return out;
}

// The table of optimal times Opt(s, t, m) for every sub-chain [s, t] and
// every free memory m ∈ [0, M] levels. Times are whole nanoseconds held in
// doubles (exact below 2^53 ns, about 104 days): +∞ marks "does not fit" and
// the inner loops are plain minima the compiler vectorises.
class Programme {
 public:
  Programme(const Chain& c, Bytes unit, int M, Rounding rounding) : n_(c.size()), M_(M) {
    // Two copies of the table (by start and by end of the sub-chain).
    const double cells = n_ * (n_ + 1.0) * (M + 1.0);
    if (cells * sizeof(double) > 8.0 * static_cast<double>(kGiB))
      throw Error("optimal: " + std::to_string(n_) + " stages × " + std::to_string(M + 1) +
                  " memory levels need more than 8 GiB of tables; use fewer levels");
    const auto N = static_cast<std::size_t>(n_) + 1;
    std::vector<Bytes> xs(N), sv(N, 0), wf(N, 0), wb(N, 0);
    for (int i = 0; i <= n_; ++i) xs[i] = c.act(i);
    for (int i = 1; i <= n_; ++i) {
      sv[i] = c.stage(i).saved;
      wf[i] = c.stage(i).fwd_work;
      wb[i] = c.stage(i).bwd_work;
    }
    x_ = levels_of(xs, unit, rounding);
    const std::vector<int> saved = levels_of(sv, unit, rounding);
    wf_ = levels_of(wf, unit, rounding);
    wb_ = levels_of(wb, unit, rounding);
    full_.resize(N);
    fwd_.resize(N);
    bwd_.resize(N);
    for (int i = 1; i <= n_; ++i) {
      full_[i] = x_[i] + saved[i];
      fwd_[i] = static_cast<double>(c.stage(i).fwd);
      bwd_[i] = static_cast<double>(c.stage(i).bwd);
    }
    const std::size_t rows = static_cast<std::size_t>(n_) * (n_ + 1) / 2;
    opt_.assign(rows * (M + 1), kInf);
    by_end_.assign(rows * (M + 1), kInf);
    need_.assign(rows, 0);
    for (int len = 1; len <= n_; ++len)
      for (int s = 1; s + len - 1 <= n_; ++s) fill(s, s + len - 1);
  }

  double value(int m) const { return opt(1, n_)[m]; }

  // The decisions reaching Opt(1, n, m) (finite), re-deriving each choice
  // from the table: the first option whose value is the optimum.
  Decisions decisions(int m) const {
    Decisions d;
    struct Task {
      int s, t, m;
    };
    std::vector<Task> todo{{1, n_, m}};
    while (!todo.empty()) {
      const Task k = todo.back();
      todo.pop_back();
      const int w = choice(k.s, k.t, k.m);
      d.push_back(w);
      if (w == 0) {
        if (k.s < k.t) todo.push_back({k.s + 1, k.t, k.m - full_[k.s]});
      } else {
        todo.push_back({k.s, w - 1, std::min(M_, k.m + g(k.t) - g(w - 1))});
        todo.push_back({w, k.t, k.m - x_[w - 1]});
      }
    }
    return d;
  }

 private:
  int g(int i) const { return i == 0 || i == n_ ? 0 : x_[i]; }
  std::size_t index(int s, int t) const {
    // Rows by (s, t), s ≤ t, s-major: Σ_{j<s} (n − j + 1) + (t − s).
    const auto S = static_cast<std::size_t>(s - 1);
    return S * (2 * static_cast<std::size_t>(n_) - S + 1) / 2 + static_cast<std::size_t>(t - s);
  }
  double* opt(int s, int t) { return opt_.data() + index(s, t) * static_cast<std::size_t>(M_ + 1); }
  const double* opt(int s, int t) const {
    return opt_.data() + index(s, t) * static_cast<std::size_t>(M_ + 1);
  }
  // The same rows by end, t-major (Σ_{j<t} j + (s − 1)): the split loop of
  // fill reads Opt(s', t) for consecutive s', which the s-major table holds
  // a row of the triangle apart; read from here they are adjacent. Without
  // it a 600-stage chain at 10 levels spent most of its 46 s in cache misses.
  double* by_end(int s, int t) {
    const auto T = static_cast<std::size_t>(t - 1);
    return by_end_.data() + (T * (T + 1) / 2 + static_cast<std::size_t>(s - 1)) *
                                static_cast<std::size_t>(M_ + 1);
  }

  // Keep all of stage s: forward-all s, then [s+1, t], then backward s.
  int keep_all_floor(int s, int t) const {
    return std::max({full_[s] + wf_[s], full_[s] + g(s) - g(t) + g(s - 1) + wb_[s], full_[s]});
  }
  double keep_all(int s, int t, int m) const {
    if (m < keep_all_floor(s, t)) return kInf;
    return fwd_[s] + bwd_[s] + (s == t ? 0.0 : opt(s + 1, t)[m - full_[s]]);
  }

  int choice(int s, int t, int m) const {
    const double best = opt(s, t)[m];
    if (keep_all(s, t, m) == best) return 0;
    double forward = 0;
    int peak = 0;
    for (int sp = s + 1; sp <= t; ++sp) {
      const int k = sp - 1;
      forward += fwd_[k];
      peak = std::max(peak, (k == s ? x_[k] : x_[k - 1] + x_[k]) + wf_[k]);
      const int lm = m + g(t) - g(k);
      if (m < peak || lm < 0) continue;
      if (forward + opt(sp, t)[m - x_[k]] + opt(s, k)[std::min(M_, lm)] == best) return sp;
    }
    throw Error("optimal: no decision reaches the table's value");
  }

  void fill(int s, int t) {
    double* best = opt(s, t);
    // Enough memory to keep every stage of [s, t]: no recompute can beat it.
    const std::size_t row = index(s, t);
    const int floor = keep_all_floor(s, t);
    need_[row] = s == t ? floor : std::max(floor, full_[s] + need_[index(s + 1, t)]);
    double all = 0;
    for (int i = s; i <= t; ++i) all += fwd_[i] + bwd_[i];
    const int top = std::min(M_ + 1, need_[row]);  // below `top`, the programme proper
    for (int m = std::max(0, need_[row]); m <= M_; ++m) best[m] = all;
    for (int m = floor; m < top; ++m) best[m] = keep_all(s, t, m);
    // Checkpoint a(s'−1): forward s..s'−1 keeping only a(s'−1), [s', t], then
    // [s, s'−1] from a(s−1) with δ(s'−1) for δ(t).
    double forward = 0;
    int peak = 0;
    for (int sp = s + 1; sp <= t; ++sp) {
      const int k = sp - 1;
      forward += fwd_[k];
      peak = std::max(peak, (k == s ? x_[k] : x_[k - 1] + x_[k]) + wf_[k]);
      const int dx = x_[k];
      const int dg = g(t) - g(k);
      const double* right = by_end(sp, t);
      const double* left = opt(s, k);
      // m + dg ≤ M: free memory beyond M after the right part is unreachable;
      // the last m values read the left part at M.
      const int lo = std::max(peak, -dg), mid = std::min(top, M_ - dg + 1);
      for (int m = lo; m < mid; ++m)
        best[m] = std::min(best[m], forward + right[m - dx] + left[m + dg]);
      for (int m = std::max(lo, mid); m < top; ++m)
        best[m] = std::min(best[m], forward + right[m - dx] + left[M_]);
    }
    std::copy(best, best + M_ + 1, by_end(s, t));
  }

  int n_, M_;
  std::vector<int> x_, full_, wf_, wb_;
  std::vector<double> fwd_, bwd_;
  std::vector<double> opt_, by_end_;
  std::vector<int> need_;  // per row: the least m at which keeping all fits
};

// Levels of the chain's input, as the programme rounds it.
int input_levels(const Chain& c, Bytes unit, Rounding r) {
  return static_cast<int>(r == Rounding::Up ? ceil_div(c.input, unit)
                                            : (c.input + unit / 2) / unit);
}

// The programme's schedules at the corners of its top row, fastest first:
// for each time the row takes, the least m taking it (the schedule the table
// deems leanest), measured in bytes by `build`; `visit(decisions, schedule)`
// returns whether to go on.
template <class Visit>
void corners(const Chain& c, const Programme& p, int from, Visit visit) {
  int lowest = 0;
  while (lowest <= from && p.value(lowest) == kInf) ++lowest;
  for (int m = from; m >= lowest; --m) {
    if (m > lowest && p.value(m - 1) == p.value(m)) continue;
    Decisions d = p.decisions(m);
    const Schedule s = build(c, d);
    if (!visit(std::move(d), s)) break;
  }
}

}  // namespace

Optimal optimal(const Chain& c, Bytes budget, int levels) {
  if (c.size() < 1) throw Error("remat: the chain has no stages");
  if (levels < 1) throw Error("optimal: needs at least one memory level");
  Optimal out;
  out.unit = std::max<Bytes>(1, ceil_div(std::max<Bytes>(budget, 1), levels));
  if (c.input > budget) {
    out.infeasible = "the chain's input alone exceeds the budget";
    return out;
  }
  // First sizes rounded to the nearest level: the fastest schedule of the
  // table whose measured peak fits. When none does (the programme favours
  // buffers rounded down to nothing), sizes rounded up.
  for (const Rounding r : {Rounding::Nearest, Rounding::Up}) {
    // Rounded up, sizes overstate schedules: the table spans twice the
    // budget, and its schedules are measured too.
    const Bytes span = r == Rounding::Up ? 2 * budget : budget;
    const int M = static_cast<int>(span / out.unit) - input_levels(c, out.unit, r);
    if (M < 0) continue;
    const Programme p(c, out.unit, M, r);
    ++out.tables;
    corners(c, p, M, [&](Decisions d, const Schedule& s) {
      if (s.peak > budget) return true;
      out.time = s.time;
      out.decisions = std::move(d);
      return false;
    });
    if (out.feasible() || out.unit == 1) break;
  }
  if (!out.feasible())
    out.infeasible = "no schedule fits the budget (memory levels of " + std::to_string(out.unit) +
                     " bytes)";
  return out;
}

namespace {
// No schedule peaks below what every backward holds: a(0), a(i−1), ā(i),
// δ(i), δ(i−1) and its working bytes.
Bytes backward_floor(const Chain& c) {
  Bytes floor = c.input;
  for (int i = 1; i <= c.size(); ++i)
    floor = std::max(floor, (i > 1 ? c.input : 0) + c.act(i - 1) + c.full(i) + c.grad(i) +
                                c.grad(i - 1) + c.stage(i).bwd_work);
  return floor;
}

// The tables optimal_frontier fills: (level size, levels) per top, from
// store_all's peak halving down to the floor, each rounded two ways.
template <class Visit>
void frontier_tables(const Chain& c, int levels, Bytes hi, Visit visit) {
  const Bytes floor = backward_floor(c);
  for (Bytes top = hi;; top /= 2) {
    const Bytes unit = std::max<Bytes>(1, ceil_div(top, levels));
    for (const Rounding r : {Rounding::Nearest, Rounding::Up}) {
      const int M = static_cast<int>(top / unit) - input_levels(c, unit, r);
      if (M >= 0) visit(unit, M, r);
    }
    if (unit == 1 || top / 2 < floor) break;
  }
}
}  // namespace

double frontier_steps(const Chain& c, int levels) {
  if (c.size() < 1 || levels < 1) return 0;
  const double n = c.size();
  double steps = 0;
  // Each table: every segment [s, t] tries its t − s split points at each
  // of its M + 1 levels, about n³/6 · (M + 1).
  frontier_tables(c, levels, build(c, store_all(c)).peak,
                  [&](Bytes, int M, Rounding) { steps += n * n * n / 6.0 * (M + 1.0); });
  return steps;
}

std::vector<FrontierPoint> optimal_frontier(const Chain& c, int levels,
                                            const std::function<void(double, double)>& progress) {
  if (c.size() < 1) throw Error("remat: the chain has no stages");
  if (levels < 1) throw Error("optimal: needs at least one memory level");
  const Schedule none = build(c, store_all(c));
  // Keeping everything is the fastest schedule; coarse levels may miss it.
  std::vector<FrontierPoint> all{{none.peak, none.time, store_all(c)}};
  const double n = c.size(), total = progress ? frontier_steps(c, levels) : 0;
  double done = 0;
  if (progress) progress(0, total);
  frontier_tables(c, levels, none.peak, [&](Bytes unit, int M, Rounding r) {
    const Programme p(c, unit, M, r);
    corners(c, p, M, [&](Decisions d, const Schedule& s) {
      all.push_back({s.peak, s.time, std::move(d)});
      return true;
    });
    done += n * n * n / 6.0 * (M + 1.0);  // as frontier_steps counts a table
    if (progress) progress(done, total);
  });
  // Pareto: ascending peak, each strictly faster than every smaller one.
  std::sort(all.begin(), all.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
    return a.peak != b.peak ? a.peak < b.peak : a.time < b.time;
  });
  std::vector<FrontierPoint> front;
  for (auto& q : all)
    if (front.empty() || q.time < front.back().time) front.push_back(std::move(q));
  return front;
}

Bytes lowest_budget(const Chain& c, int levels) { return optimal_frontier(c, levels).front().peak; }

}  // namespace strata::strategies::remat
