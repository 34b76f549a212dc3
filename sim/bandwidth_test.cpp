#include "sim/bandwidth.hpp"

#include <doctest/doctest.h>

#include <random>

namespace strata::sim {
namespace {

TEST_CASE("sim/bandwidth: max-min rates: equal split on one link") {
  // Three flows on a 12 B/ns link get 4 each.
  const std::vector<double> cap{12};
  const auto r = max_min_rates(cap, {{0}, {0}, {0}});
  CHECK(r == std::vector<double>{4, 4, 4});
}

TEST_CASE("sim/bandwidth: max-min rates: progressive filling over two links") {
  // A = 10, B = 4. f0 on A+B, f1 on A, f2 on B: B saturates first at 2 each,
  // f1 takes the rest of A: 10 - 2 = 8.
  const std::vector<double> cap{10, 4};
  const auto r = max_min_rates(cap, {{0, 1}, {0}, {1}});
  CHECK(r == std::vector<double>{2, 8, 2});
}

TEST_CASE("sim/bandwidth: max-min rates: a flow limited elsewhere leaves its share to others") {
  // A = 9 with f0 (A+B) and f1 (A); B = 1 caps f0 at 1, so f1 gets 8.
  const std::vector<double> cap{9, 1};
  const auto r = max_min_rates(cap, {{0, 1}, {0}});
  CHECK(r == std::vector<double>{1, 8});
}

TEST_CASE("sim/bandwidth: LinkSharing matches the reference rates as flows come and go") {
  // Random flows over 5 links; after every start and finish each active flow's
  // rate equals max_min_rates() on the active set, bit for bit.
  std::mt19937 rng(3);
  const std::vector<double> cap{1, 2, 3, 5, 8};
  LinkSharing ls(cap);
  std::vector<std::vector<std::int32_t>> paths;
  for (int i = 0; i < 60; ++i) {
    std::vector<std::int32_t> p{static_cast<std::int32_t>(rng() % 5)};
    if (rng() % 2) {
      const auto q = static_cast<std::int32_t>(rng() % 5);
      if (q != p[0]) p.push_back(q);
    }
    paths.push_back(p);
  }
  std::vector<std::int32_t> active_flow, active_path;
  Time now = 0;
  for (int step = 0; step < 200; ++step) {
    now += 1;
    if (active_flow.empty() || (rng() % 3 != 0 && active_flow.size() < 30)) {
      const auto pi = static_cast<std::int32_t>(rng() % paths.size());
      active_flow.push_back(ls.start(paths[pi].data(), static_cast<std::int32_t>(paths[pi].size()),
                                     1e6, now, pi));
      active_path.push_back(pi);
    } else {
      const std::size_t k = rng() % active_flow.size();
      ls.finish(active_flow[k]);
      active_flow.erase(active_flow.begin() + static_cast<long>(k));
      active_path.erase(active_path.begin() + static_cast<long>(k));
    }
    ls.update(now);
    std::vector<std::vector<std::int32_t>> live;
    for (auto pi : active_path) live.push_back(paths[pi]);
    const auto want = max_min_rates(cap, live);
    for (std::size_t i = 0; i < active_flow.size(); ++i)
      CHECK(ls.rate(active_flow[i]) == want[i]);  // bit for bit
  }
}

TEST_CASE("sim/bandwidth: LinkSharing reports only flows whose rate changed") {
  // Flows on disjoint links do not disturb each other: starting one on link 1
  // changes only itself; a second flow on link 0 changes both flows there.
  const std::vector<double> cap{10, 10};
  LinkSharing ls(cap);
  const std::int32_t l0 = 0, l1 = 1;
  const auto a = ls.start(&l0, 1, 100, 0, 0);
  ls.update(0);
  CHECK(ls.changed() == std::vector<std::int32_t>{a});
  const auto b = ls.start(&l1, 1, 100, 0, 1);
  ls.update(0);
  CHECK(ls.changed() == std::vector<std::int32_t>{b});
  const auto c = ls.start(&l0, 1, 100, 2, 2);
  CHECK(ls.pending());
  ls.update(2);
  CHECK(!ls.pending());
  CHECK(ls.changed().size() == 2);
  CHECK(ls.rate(a) == 5);
  CHECK(ls.rate(c) == 5);
  // a moved 20 B in [0, 2) at 10 B/ns; 80 B left at 5 B/ns -> ends at 2 + 16 = 18.
  CHECK(ls.finish_time(a) == 18);
  CHECK(ls.finish_time(b) == 10);
}

TEST_CASE("sim/bandwidth: a resumed flow is the flow that had been moving alone since it began") {
  // a: 100 B on link 0 (10 B/ns) from t = 0; b joins at t = 2. Started then
  // updated, or resumed at t = 2 with the rate it had alone: a has 80 B left
  // at 5 B/ns and ends at 18 either way; b's completion is 2 + 100/5 = 22 in
  // both (until a ends).
  const std::vector<double> cap{10};
  const std::int32_t l0 = 0;
  LinkSharing x(cap), y(cap);
  const auto a = x.start(&l0, 1, 100, 0, 0);
  x.update(0);
  const auto xb = x.start(&l0, 1, 100, 2, 1);
  x.update(2);
  const auto ya = y.resume(&l0, 1, 100, 10, 0, 0, 42);
  CHECK(y.token(ya) == 42);
  CHECK(y.pending());
  const auto yb = y.start(&l0, 1, 100, 2, 1);
  y.update(2);
  CHECK(y.finish_time(ya) == x.finish_time(a));
  CHECK(y.finish_time(ya) == 18);
  CHECK(y.finish_time(yb) == x.finish_time(xb));
  // A resumed flow whose rate does not change keeps its completion event.
  LinkSharing z(std::vector<double>{10, 10});
  const std::int32_t l1 = 1;
  z.resume(&l0, 1, 100, 10, 0, 0, 7);
  z.start(&l1, 1, 50, 2, 1);
  z.update(2);
  CHECK(z.changed().size() == 1);
}

TEST_CASE("sim/bandwidth: a flow ending on two links speeds up the flows left on each") {
  // pcie = 3 B/ns, nic = 5 B/ns. a (349 B, pcie) alone from 114: 3 B/ns. b (283 B,
  // pcie + nic) joins at 133: both 1.5 B/ns; b ends at 133 + 283/1.5 = 321.67 -> 322.
  // a has then moved 57 + 1.5 * 189 = 340.5 B; its last 8.5 B at 3 B/ns end at 325.
  const std::vector<double> cap{3, 5};
  LinkSharing ls(cap);
  const std::int32_t pcie[1] = {0}, both[2] = {0, 1};
  const auto a = ls.start(pcie, 1, 349, 114, 0);
  ls.update(114);
  CHECK(ls.finish_time(a) == 231);  // 114 + 349/3 = 230.33
  const auto b = ls.start(both, 2, 283, 133, 1);
  ls.update(133);
  CHECK(ls.rate(a) == 1.5);
  CHECK(ls.finish_time(b) == 322);
  ls.finish(b);
  ls.update(322);
  CHECK(ls.changed() == std::vector<std::int32_t>{a});
  CHECK(ls.rate(a) == 3);
  CHECK(ls.finish_time(a) == 325);
}

}  // namespace
}  // namespace strata::sim
