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
      if (at(i - 1) == Held::Absent) return fail("needs its input a(" + std::to_string(i - 1) + ")");
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

Decisions sqrt_segments(const Chain& c) {
  const int k = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(c.size()))));
  return segments(c, std::max(1, k));
}

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

constexpr Time kInf = std::numeric_limits<Time>::max() / 4;

Bytes ceil_div(Bytes a, Bytes b) { return (a + b - 1) / b; }

// The table of optimal times Opt(s, t, m) for every sub-chain and every free
// memory m ∈ [0, M] (in units), and the decision reaching each.
class Programme {
 public:
  Programme(const Chain& c, Bytes unit, int M) : n_(c.size()), M_(M) {
    if (n_ > std::numeric_limits<std::int16_t>::max())
      throw Error("optimal: more than 32767 stages");
    const double cells = 0.5 * n_ * (n_ + 1.0) * (M + 1.0);
    if (cells * (sizeof(Time) + sizeof(std::int16_t)) > 8.0 * static_cast<double>(kGiB))
      throw Error("optimal: " + std::to_string(n_) + " stages × " + std::to_string(M + 1) +
                  " memory levels need more than 8 GiB of tables; use fewer levels");
    auto u = [&](Bytes b) { return static_cast<int>(ceil_div(b, unit)); };
    // Per-field rounding: the programme is exact for the rounded chain.
    x_.resize(static_cast<std::size_t>(n_) + 1);
    full_.resize(x_.size());
    wf_.resize(x_.size());
    wb_.resize(x_.size());
    for (int i = 0; i <= n_; ++i) x_[i] = u(c.act(i));
    for (int i = 1; i <= n_; ++i) {
      full_[i] = x_[i] + u(c.stage(i).saved);
      wf_[i] = u(c.stage(i).fwd_work);
      wb_[i] = u(c.stage(i).bwd_work);
    }
    fwd_.resize(x_.size());
    bwd_.resize(x_.size());
    for (int i = 1; i <= n_; ++i) {
      fwd_[i] = c.stage(i).fwd;
      bwd_[i] = c.stage(i).bwd;
    }
    const std::size_t rows = static_cast<std::size_t>(n_) * (n_ + 1) / 2;
    opt_.assign(rows * (M + 1), kInf);
    what_.assign(rows * (M + 1), -1);
    fill();
  }

  Time value(int m) const { return opt(1, n_)[m]; }

  Decisions decisions(int m) const {
    Decisions d;
    struct Task {
      int s, t, m;
    };
    std::vector<Task> todo{{1, n_, m}};
    while (!todo.empty()) {
      const Task k = todo.back();
      todo.pop_back();
      const int w = what(k.s, k.t)[k.m];
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
  std::size_t row(int s, int t) const {
    // Rows by (s, t), s ≤ t, s-major: row(s, t) = Σ_{j<s} (n − j + 1) + (t − s).
    const std::size_t S = static_cast<std::size_t>(s - 1);
    return (S * (2 * static_cast<std::size_t>(n_) - S + 1) / 2 + static_cast<std::size_t>(t - s)) *
           static_cast<std::size_t>(M_ + 1);
  }
  Time* opt(int s, int t) { return opt_.data() + row(s, t); }
  const Time* opt(int s, int t) const { return opt_.data() + row(s, t); }
  std::int16_t* what(int s, int t) { return what_.data() + row(s, t); }
  const std::int16_t* what(int s, int t) const { return what_.data() + row(s, t); }

  void fill() {
    for (int len = 1; len <= n_; ++len)
      for (int s = 1; s + len - 1 <= n_; ++s) fill_row(s, s + len - 1);
  }

  void fill_row(int s, int t) {
    Time* best = opt(s, t);
    std::int16_t* choice = what(s, t);
    // Keep all of stage s: forward-all s, then [s+1, t], then backward s.
    {
      const int lo = std::max({full_[s] + wf_[s],
                               full_[s] + g(s) - g(t) + g(s - 1) + wb_[s], full_[s], 0});
      const Time here = fwd_[s] + bwd_[s];
      if (s == t) {
        for (int m = lo; m <= M_; ++m) {
          best[m] = here;
          choice[m] = 0;
        }
      } else {
        const Time* child = opt(s + 1, t);
        for (int m = lo; m <= M_; ++m) {
          const Time v = here + child[m - full_[s]];
          if (v < best[m]) {
            best[m] = v;
            choice[m] = 0;
          }
        }
      }
    }
    // Checkpoint a(s'−1): forward s..s'−1 keeping only a(s'−1), [s', t],
    // then [s, s'−1] from a(s−1).
    Time forward = 0;
    int peak = 0;
    for (int sp = s + 1; sp <= t; ++sp) {
      const int k = sp - 1;  // the stage run just now
      forward += fwd_[k];
      peak = std::max(peak, (k == s ? x_[k] : x_[k - 1] + x_[k]) + wf_[k]);
      const int dx = x_[k];
      const int dg = g(t) - g(k);
      const Time* right = opt(sp, t);
      const Time* left = opt(s, k);
      const auto tag = static_cast<std::int16_t>(sp);
      const int hi = std::min(M_, M_ - dg);  // keeps m + dg ≤ M
      for (int m = std::max(peak, -dg); m <= hi; ++m) {
        const Time v = forward + right[m - dx] + left[m + dg];
        if (v < best[m]) {
          best[m] = v;
          choice[m] = tag;
        }
      }
      // Free memory beyond M after the right part is unreachable; the
      // top m values read the left part at M.
      for (int m = std::max({peak, hi + 1, -dg}); m <= M_; ++m) {
        const Time v = forward + right[m - dx] + left[M_];
        if (v < best[m]) {
          best[m] = v;
          choice[m] = tag;
        }
      }
    }
    for (int m = 0; m <= M_; ++m)
      if (best[m] >= kInf) {
        best[m] = kInf;
        choice[m] = -1;
      }
  }

  int n_, M_;
  std::vector<int> x_, full_, wf_, wb_;
  std::vector<Time> fwd_, bwd_;
  std::vector<Time> opt_;
  std::vector<std::int16_t> what_;
};

}  // namespace

Optimal optimal(const Chain& c, Bytes budget, int levels) {
  if (c.size() < 1) throw Error("remat: the chain has no stages");
  if (levels < 1) throw Error("optimal: needs at least one memory level");
  Optimal out;
  out.unit = std::max<Bytes>(1, ceil_div(std::max<Bytes>(budget, 1), levels));
  const Bytes M = budget / out.unit - ceil_div(c.input, out.unit);
  if (M < 0) {
    out.infeasible = "the chain's input alone exceeds the budget";
    return out;
  }
  const Programme p(c, out.unit, static_cast<int>(M));
  const Time v = p.value(static_cast<int>(M));
  if (v >= kInf) {
    out.infeasible = "no schedule fits the budget (memory levels of " +
                     std::to_string(out.unit) + " bytes)";
    return out;
  }
  out.time = v;
  out.decisions = p.decisions(static_cast<int>(M));
  return out;
}

Bytes lowest_budget(const Chain& c, int levels) {
  Bytes best = build(c, store_all(c)).peak;
  for (int round = 0; round < 3; ++round) {
    const Bytes unit = std::max<Bytes>(1, ceil_div(best, levels));
    const Bytes M = best / unit - ceil_div(c.input, unit);
    if (M < 0) break;
    const Programme p(c, unit, static_cast<int>(M));
    int m = 0;
    while (m <= M && p.value(m) >= kInf) ++m;
    if (m > M) break;
    const Bytes peak = build(c, p.decisions(m)).peak;
    if (peak >= best) break;
    best = peak;
  }
  return best;
}

}  // namespace strata::strategies::remat
