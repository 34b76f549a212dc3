#include "strategies/remat.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <unordered_map>

#include "sim/error.hpp"

namespace strata::strategies::remat {
namespace {

// n alike stages: forward f, backward b, output x, saved sv; the input is x too.
Chain uniform(int n, Time f, Time b, Bytes x, Bytes sv) {
  Chain c;
  c.input = x;
  c.stages.assign(static_cast<std::size_t>(n), Stage{f, b, x, sv, 0, 0});
  return c;
}

Chain random_chain(std::mt19937_64& rng, int n) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Chain c;
  c.input = pick(1, 8);
  for (int i = 0; i < n; ++i)
    c.stages.push_back({pick(1, 9), pick(1, 19), pick(1, 8), pick(0, 9), pick(0, 3), pick(0, 3)});
  return c;
}

int count(const std::vector<Op>& ops, std::initializer_list<OpKind> kinds) {
  return static_cast<int>(std::count_if(ops.begin(), ops.end(), [&](const Op& o) {
    return std::find(kinds.begin(), kinds.end(), o.kind) != kinds.end();
  }));
}

// Build's claims against the checker's replay of the same operations.
Schedule checked(const Chain& c, const Decisions& d) {
  const Schedule s = build(c, d);
  const Replay r = replay(c, s.ops);
  REQUIRE_MESSAGE(r.ok(), r.error);
  CHECK(r.time == s.time);
  CHECK(r.peak == s.peak);
  CHECK(r.recompute == s.recompute);
  return s;
}

// --- brute force ----------------------------------------------------------------
// Dijkstra over every state of the operation model (each activation absent,
// plain or full, and whether a forward has kept it; the next backward), with
// every operation the checker accepts (forwards of any kind, the next
// backward, freeing a plain activation) whose peak fits the budget. With
// `persistent`, an activation a forward kept as its input stays until the
// backward that consumes it (rotor's persistent schedules: no forward-none
// and no free of it); without, any valid schedule. Returns the least time and
// one schedule reaching it.
struct Best {
  Time time = 0;
  std::vector<Op> ops;
};

std::optional<Best> brute_force(const Chain& c, Bytes budget, bool persistent = true) {
  const int n = c.size();
  REQUIRE(n <= 12);
  // State: 3 bits per activation (held: 0 absent, 1 plain, 2 full; bit 2:
  // kept), the next backward from bit 48.
  using Key = std::uint64_t;
  auto held = [](Key k, int j) { return static_cast<int>((k >> (3 * j)) & 3); };
  auto kept = [](Key k, int j) { return ((k >> (3 * j)) & 4) != 0; };
  auto with = [](Key k, int j, int h) {
    return (k & ~(Key{7} << (3 * j))) | (static_cast<Key>(h) << (3 * j));
  };
  auto keep = [](Key k, int j) { return k | (Key{4} << (3 * j)); };
  auto next_bwd = [&](Key k) { return static_cast<int>(k >> 48); };
  auto set_next = [&](Key k, int nb) {
    return (k & ((Key{1} << 48) - 1)) | (static_cast<Key>(nb) << 48);
  };
  auto live = [&](Key k) {
    Bytes b = 0;
    for (int j = 0; j <= n; ++j)
      b += held(k, j) == 1 ? c.act(j) : held(k, j) == 2 ? c.full(j) : 0;
    const int nb = next_bwd(k);
    return b + (nb < n ? c.grad(nb) : 0);
  };
  const Key start = set_next(with(0, 0, 1), n);
  if (c.input > budget) return std::nullopt;
  std::unordered_map<Key, Time> dist{{start, 0}};
  std::unordered_map<Key, std::pair<Key, Op>> from;
  using Item = std::pair<Time, Key>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> pq;
  pq.push({0, start});
  while (!pq.empty()) {
    const auto [d, k] = pq.top();
    pq.pop();
    if (d != dist[k]) continue;
    const int nb = next_bwd(k);
    if (nb == 0 && live(k) == 0) {
      Best b{d, {}};
      for (Key at = k; at != start; at = from[at].first) b.ops.push_back(from[at].second);
      std::reverse(b.ops.begin(), b.ops.end());
      return b;
    }
    const Bytes m = live(k);
    auto relax = [&](Key to, Time cost, Op op) {
      auto it = dist.find(to);
      if (it == dist.end() || d + cost < it->second) {
        dist[to] = d + cost;
        from[to] = {k, op};
        pq.push({d + cost, to});
      }
    };
    auto droppable = [&](int j) { return held(k, j) == 1 && !(persistent && kept(k, j)); };
    for (int j = 0; j <= n; ++j)
      if (droppable(j) && (j == n || held(k, j + 1) != 2))
        relax(with(k, j, 0), 0, {OpKind::Free, j});
    for (int i = 1; i <= nb; ++i) {
      if (held(k, i - 1) == 0 || held(k, i) != 0) continue;
      const Stage& st = c.stage(i);
      if (m + c.act(i) + st.fwd_work <= budget) {
        relax(with(keep(k, i - 1), i, 1), st.fwd, {OpKind::ForwardCheckpoint, i});
        if (droppable(i - 1))
          relax(with(with(k, i, 1), i - 1, 0), st.fwd, {OpKind::ForwardNone, i});
      }
      if (m + c.full(i) + st.fwd_work <= budget)
        relax(with(keep(k, i - 1), i, 2), st.fwd, {OpKind::ForwardAll, i});
    }
    if (nb >= 1 && held(k, nb) == 2 && held(k, nb - 1) != 0 &&
        m + c.grad(nb - 1) + c.stage(nb).bwd_work <= budget) {
      Key to = set_next(with(k, nb, 0), nb - 1);
      if (held(k, nb - 1) == 1) to = with(to, nb - 1, 0);
      relax(to, c.stage(nb).bwd, {OpKind::Backward, nb});
    }
  }
  return std::nullopt;
}

// The least budget at which the brute force finds a schedule.
Bytes brute_lowest(const Chain& c) {
  Bytes hi = build(c, store_all(c)).peak, lo = c.input - 1;  // hi fits, lo does not
  while (hi - lo > 1) {
    const Bytes mid = (lo + hi) / 2;
    (brute_force(c, mid) ? hi : lo) = mid;
  }
  return hi;
}

// --- closed forms -----------------------------------------------------------------

TEST_CASE("store_all: n forwards and backwards, every saved tensor live at the last backward") {
  // Homogeneous x = 3, saved 5: peak = x0 + n·(x + saved) + δ(n−1) = 3 + 6·8 + 3.
  const Chain c = uniform(6, 10, 20, 3, 5);
  const Schedule s = checked(c, store_all(c));
  CHECK(s.time == 6 * 30);
  CHECK(s.recompute == 0);
  CHECK(s.peak == 3 + 6 * 8 + 3);
  CHECK(count(s.ops, {OpKind::ForwardAll}) == 6);
}

TEST_CASE("every_k: one extra forward of all but the last segment; peak (J+1)·x + k·(x + saved)") {
  // J = ⌈n/k⌉ segments; stored: a(0), a(k), …, a((J−1)k), then one segment
  // kept whole beside δ of its last stage and the δ being produced.
  for (const auto& [n, k] : {std::pair{16, 4}, {17, 4}, {20, 3}, {9, 2}, {12, 1}}) {
    CAPTURE(n);
    CAPTURE(k);
    const Chain c = uniform(n, 10, 20, 4, 6);
    const Schedule s = checked(c, segments(c, k));
    const int J = (n + k - 1) / k;
    const int last = n - (J - 1) * k;
    CHECK(s.time == n * 30 + (n - last) * 10);
    CHECK(s.recompute == (n - last) * 10);
    CHECK(s.peak == (J + 1) * 4 + k * (4 + 6));
  }
  // k ≥ n is store_all.
  const Chain c = uniform(5, 1, 2, 3, 3);
  CHECK(segments(c, 5) == store_all(c));
}

TEST_CASE("sqrt: ⌈√n⌉ segments keep about 2·√n activations (Chen et al. 2016)") {
  // n = 100, nothing saved beyond outputs: peak = (J+1)·x + k·x = 21·x = (2√n + 1)·x,
  // one extra forward of 90 stages.
  const Chain c = uniform(100, 10, 20, 1000, 0);
  const Schedule s = checked(c, sqrt_segments(c));
  CHECK(s.peak == 21 * 1000);
  CHECK(s.recompute == 90 * 10);
  // Against store_all: 101·x + x.
  CHECK(build(c, store_all(c)).peak == 102 * 1000);
}

TEST_CASE("revolve: Griewank's binomial forward count on homogeneous chains") {
  // t(l, s) = r·l − β(s+1, r−1) against the recurrence it solves,
  // T(l, s) = min_m m + T(l−m, s−1) + T(m, s), T(1, s) = 0, T(l > 1, 0) = ∞.
  CHECK(binomial_beta(2, 3) == 10);
  CHECK(binomial_beta(5, 0) == 1);
  CHECK(binomial_beta(3, -1) == 0);
  std::map<std::pair<int, int>, std::int64_t> T;
  const std::int64_t inf = std::int64_t{1} << 40;
  std::function<std::int64_t(int, int)> rec = [&](int l, int s) -> std::int64_t {
    if (l == 1) return 0;
    if (s == 0) return inf;
    auto it = T.find({l, s});
    if (it != T.end()) return it->second;
    std::int64_t best = inf;
    for (int m = 1; m < l; ++m) best = std::min(best, m + rec(l - m, s - 1) + rec(m, s));
    return T[{l, s}] = best;
  };
  for (int l = 1; l <= 40; ++l)
    for (int s = 1; s <= 6; ++s) {
      CAPTURE(l);
      CAPTURE(s);
      CHECK(revolve_forwards(l, s) == rec(l, s));
    }
  // One snapshot: l(l−1)/2; s ≥ l−1: each step once.
  CHECK(revolve_forwards(10, 1) == 45);
  CHECK(revolve_forwards(10, 9) == 9);
  // The schedule performs exactly n taped forwards plus t(n, s) advances.
  for (int s = 1; s <= 6; ++s) {
    CAPTURE(s);
    const Chain c = uniform(30, 10, 20, 4, 6);
    const Schedule sch = checked(c, revolve(c, s));
    const std::int64_t t = revolve_forwards(30, s);
    CHECK(count(sch.ops, {OpKind::ForwardAll}) == 30);
    CHECK(count(sch.ops, {OpKind::ForwardNone, OpKind::ForwardCheckpoint}) == t);
    CHECK(sch.time == (30 + t) * 10 + 30 * 20);
  }
}

// --- the dynamic programme --------------------------------------------------------

TEST_CASE("optimal equals the brute force over persistent schedules on random heterogeneous chains") {
  // Exact levels (one byte each): the programme's time is the least time of
  // any valid persistent schedule within the budget, at budgets from the
  // least feasible one to store_all's peak; its schedule replays to that
  // time. Schedules that drop a kept activation early and recompute it can
  // be faster still: never faster than the programme's would be wrong, and
  // the gap is reported.
  std::mt19937_64 rng(20240611);
  int compared = 0, beaten = 0;
  double worst = 1;
  for (int trial = 0; trial < 24; ++trial) {
    const int n = 2 + trial % 7;  // 2..8 stages
    const Chain c = random_chain(rng, n);
    CAPTURE(trial);
    CAPTURE(n);
    const Bytes lo = brute_lowest(c);
    const Bytes hi = build(c, store_all(c)).peak;
    CHECK(lowest_budget(c, static_cast<int>(hi)) == lo);
    for (Bytes budget : {lo - 1, lo, lo + 1, (lo + hi) / 2, hi - 1, hi}) {
      CAPTURE(budget);
      const auto bf = brute_force(c, budget);
      const Optimal dp = optimal(c, budget, static_cast<int>(budget));
      REQUIRE(dp.unit == 1);
      REQUIRE(dp.feasible() == bf.has_value());
      if (!bf) continue;
      CHECK(dp.time == bf->time);
      const Replay br = replay(c, bf->ops);
      CHECK_MESSAGE(br.ok(), br.error);
      CHECK(br.time == bf->time);
      const Schedule s = checked(c, *dp.decisions);
      CHECK(s.time == dp.time);
      CHECK(s.peak <= budget);
      ++compared;
      const auto any = brute_force(c, budget, /*persistent=*/false);
      REQUIRE(any.has_value());
      CHECK(any->time <= dp.time);
      CHECK(replay(c, any->ops).ok());
      if (any->time < dp.time) ++beaten;
      worst = std::max(worst, static_cast<double>(dp.time) / static_cast<double>(any->time));
    }
  }
  CHECK(compared > 100);
  MESSAGE("non-persistent schedules beat the programme in " << beaten << " of " << compared
          << " cases, by at most " << (worst - 1) * 100 << " %");
}

TEST_CASE("optimal on a 9-stage chain at every budget") {
  // The longest chain the brute force covers quickly, budget by budget.
  std::mt19937_64 rng(7);
  const Chain c = random_chain(rng, 9);
  const Bytes lo = brute_lowest(c), hi = build(c, store_all(c)).peak;
  for (Bytes budget = lo; budget <= hi; budget += std::max<Bytes>(1, (hi - lo) / 6)) {
    CAPTURE(budget);
    const auto bf = brute_force(c, budget);
    const Optimal dp = optimal(c, budget, static_cast<int>(budget));
    REQUIRE(bf.has_value());
    REQUIRE(dp.feasible());
    CHECK(dp.time == bf->time);
  }
}

TEST_CASE("optimal with coarse levels fits the budget and is never slower than the simple plans") {
  // 60 random stages of tens of bytes, 100 levels: sizes rounded up to the level, so the
  // schedule's true peak is within the budget; at the peak of every_k or
  // revolve the programme finds a schedule at least as fast (exact levels
  // would find theirs; rounding may cost a little, so compare with a level
  // of slack in the budget).
  std::mt19937_64 rng(11);
  Chain c = random_chain(rng, 60);
  for (auto& st : c.stages) st.output *= 10, st.saved *= 10, st.fwd_work *= 10, st.bwd_work *= 10;
  c.input *= 10;
  for (const Decisions& d : {segments(c, 8), sqrt_segments(c), revolve(c, 4), revolve(c, 10)}) {
    const Schedule simple = checked(c, d);
    const Optimal dp = optimal(c, simple.peak, 100);
    REQUIRE(dp.feasible());
    const Schedule s = checked(c, *dp.decisions);
    CHECK(s.time == dp.time);
    CHECK(s.peak <= simple.peak);
    const Optimal exact = optimal(c, simple.peak, static_cast<int>(simple.peak));
    CHECK(exact.time <= simple.time);
    CHECK(exact.time <= dp.time);
  }
}

TEST_CASE("infeasible budgets are a result, not a crash") {
  // Below the least budget: no schedule; below the input: says so.
  const Chain c = uniform(10, 1, 2, 10, 10);
  const Bytes lo = lowest_budget(c, 1000);
  const Optimal at = optimal(c, lo, static_cast<int>(lo));
  CHECK(at.feasible());
  const Optimal below = optimal(c, lo - 1, static_cast<int>(lo - 1));
  CHECK(!below.feasible());
  CHECK(below.infeasible.find("no schedule fits") != std::string::npos);
  const Optimal tiny = optimal(c, 5, 5);
  CHECK(!tiny.feasible());
  CHECK(tiny.infeasible == "the chain's input alone exceeds the budget");
}

TEST_CASE("the checker rejects schedules that break the model") {
  // Each case names the rule it breaks.
  const Chain c = uniform(3, 1, 1, 2, 2);
  using K = OpKind;
  auto err = [&](std::vector<Op> ops) { return replay(c, ops).error; };
  CHECK(err({{K::ForwardAll, 1}, {K::ForwardAll, 2}, {K::ForwardCheckpoint, 3}, {K::Backward, 3}})
            .find("needs all saved tensors") != std::string::npos);
  CHECK(err({{K::ForwardAll, 1}, {K::ForwardAll, 2}, {K::ForwardAll, 3}, {K::Backward, 2}})
            .find("expected 3") != std::string::npos);
  CHECK(err({{K::ForwardNone, 1}}).find("backward 3 never ran") != std::string::npos);
  // Forward-none of stage 2 frees a(1), which backward 2 then lacks.
  CHECK(err({{K::ForwardCheckpoint, 1}, {K::ForwardNone, 2}, {K::ForwardAll, 3}, {K::Backward, 3},
             {K::ForwardAll, 2}})
            .find("needs its input a(1)") != std::string::npos);
  CHECK(err({{K::ForwardAll, 1}, {K::ForwardAll, 1}}).find("already live") != std::string::npos);
  CHECK(err({{K::ForwardAll, 1}, {K::ForwardAll, 2}, {K::ForwardAll, 3}, {K::Backward, 3},
             {K::Backward, 2}})
            .find("never ran") != std::string::npos);
  CHECK(err({{K::ForwardAll, 1}, {K::ForwardAll, 2}, {K::ForwardAll, 3}, {K::Backward, 3},
             {K::Backward, 2}, {K::ForwardCheckpoint, 2}})
            .find("backward already ran") != std::string::npos);
  CHECK(err({{K::Free, 0}, {K::ForwardAll, 1}}).find("needs its input a(0)") != std::string::npos);
  // ā(2) holds its input a(1) until backward 2.
  CHECK(err({{K::ForwardCheckpoint, 1}, {K::ForwardAll, 2}, {K::Free, 1}})
            .find("a(1) is held by ā(2)") != std::string::npos);
  // Well-formed but a decision list that does not cover the chain.
  CHECK_THROWS_AS(build(c, {0, 0}), Error);
  CHECK_THROWS_AS(build(c, {0, 0, 0, 0}), Error);
  CHECK_THROWS_AS(build(c, {5, 0, 0}), Error);
}

}  // namespace
}  // namespace strata::strategies::remat
