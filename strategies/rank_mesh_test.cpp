#include "strategies/rank_mesh.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/error.hpp"

namespace strata::strategies {
namespace {

using i64 = std::int64_t;
using Groups = std::vector<std::vector<i64>>;
using Order = std::array<ParallelDim, 4>;

constexpr ParallelDim TP = ParallelDim::TP, CP = ParallelDim::CP, DP = ParallelDim::DP,
                      PP = ParallelDim::PP;
constexpr Order kDefault{TP, CP, DP, PP};

Groups groups(const RankMesh& m, MeshDim d) {
  Groups out;
  for (i64 i = 0; i < m.num_groups(d); ++i) out.push_back(m.group(d, i));
  return out;
}

Groups table(std::initializer_list<std::initializer_list<i64>> g) {
  Groups out;
  for (auto x : g) out.emplace_back(x);
  return out;
}

std::vector<Order> all_orders() {
  Order o{TP, CP, DP, PP};
  std::sort(o.begin(), o.end());
  std::vector<Order> out;
  do out.push_back(o);
  while (std::next_permutation(o.begin(), o.end()));
  return out;
}

std::string text(const Order& o) {
  std::string s;
  for (ParallelDim d : o) s += std::string(enum_name(d)) + " ";
  return s;
}

// --- The golden tables of Megatron-LM's test_rank_generator_for_tp_dp_pp
// (tests/unit_tests/test_parallel_state.py), which predate RankGenerator and
// write every group of the default order tp-cp-dp-pp (expert order
// tp-ep-dp-pp) as a strided range of ranks.
struct Golden {
  Groups dp, dp_cp, cp, mp, tp, pp, expert_dp;
};
std::vector<i64> strided(i64 first, i64 end, i64 step) {
  std::vector<i64> r;
  for (i64 x = first; x < end; x += step) r.push_back(x);
  return r;
}
Golden megatron_golden(i64 world, i64 tp, i64 pp, i64 cp, i64 ep) {
  Golden g;
  const i64 dp = world / (tp * pp * cp), stage = world / pp, edp = world / (tp * ep * pp);
  for (i64 s = 0; s < pp; ++s) {
    const i64 lo = s * stage, hi = lo + stage;  // one pipeline stage's ranks
    for (i64 j = 0; j < tp * cp; ++j) g.dp.push_back(strided(lo + j, hi, tp * cp));
    for (i64 j = 0; j < tp; ++j) g.dp_cp.push_back(strided(lo + j, hi, tp));
    for (i64 d = 0; d < dp; ++d)  // one replica's tp·cp block
      for (i64 t = 0; t < tp; ++t)
        g.cp.push_back(strided(lo + d * tp * cp + t, lo + (d + 1) * tp * cp, tp));
  }
  for (i64 i = 0; i < dp * cp; ++i) {  // the i-th member of every dp-cp group
    g.mp.emplace_back();
    for (const auto& grp : g.dp_cp) g.mp.back().push_back(grp[static_cast<std::size_t>(i)]);
  }
  for (i64 i = 0; i < world / tp; ++i) g.tp.push_back(strided(i * tp, (i + 1) * tp, 1));
  for (i64 i = 0; i < stage; ++i) g.pp.push_back(strided(i, world, stage));
  for (i64 s = 0; s < pp; ++s)  // ranks laid out as (pp, edp, ep, tp), tp fastest
    for (i64 e = 0; e < ep; ++e)
      for (i64 t = 0; t < tp; ++t) {
        g.expert_dp.emplace_back();
        for (i64 d = 0; d < edp; ++d)
          g.expert_dp.back().push_back(((s * edp + d) * ep + e) * tp + t);
      }
  return g;
}

// --- An independent brute-force mesh: every rank tuple by nested loops in the
// given order (innermost loop = first dimension), groups by collecting the
// ranks that agree on the unmasked coordinates.
struct Brute {
  std::vector<std::array<i64, 4>> dense, expert;  // per rank: (tp, cp, dp, pp), (etp, ep, edp, pp)
};
std::vector<std::array<i64, 4>> nested(const std::array<i64, 4>& size,
                                       const std::array<int, 4>& order) {
  std::vector<std::array<i64, 4>> out;
  std::array<i64, 4> c{};
  for (i64 a3 = 0; a3 < size[order[3]]; ++a3)
    for (i64 a2 = 0; a2 < size[order[2]]; ++a2)
      for (i64 a1 = 0; a1 < size[order[1]]; ++a1)
        for (i64 a0 = 0; a0 < size[order[0]]; ++a0) {
          c[order[0]] = a0;
          c[order[1]] = a1;
          c[order[2]] = a2;
          c[order[3]] = a3;
          out.push_back(c);
        }
  return out;
}
Brute brute(i64 tp, i64 cp, i64 dp, i64 pp, i64 ep, const Order& order) {
  std::array<int, 4> dense_order{}, expert_order{};
  int n = 0;
  for (ParallelDim d : order) {
    dense_order[static_cast<std::size_t>(n++)] = static_cast<int>(d);
  }
  // Expert order (etp, ep, edp, pp): cp dropped, dp read as ep-dp.
  n = 0;
  for (ParallelDim d : order) switch (d) {
      case ParallelDim::TP:
        expert_order[static_cast<std::size_t>(n++)] = 0;
        break;
      case ParallelDim::CP:
        break;
      case ParallelDim::DP:
        expert_order[static_cast<std::size_t>(n++)] = 1;
        expert_order[static_cast<std::size_t>(n++)] = 2;
        break;
      case ParallelDim::PP:
        expert_order[static_cast<std::size_t>(n++)] = 3;
        break;
    }
  return {nested({tp, cp, dp, pp}, dense_order), nested({tp, ep, cp * dp / ep, pp}, expert_order)};
}
Groups brute_groups(const std::vector<std::array<i64, 4>>& coords, std::array<bool, 4> mask) {
  std::map<std::array<i64, 4>, std::vector<i64>> by_key;
  for (std::size_t r = 0; r < coords.size(); ++r) {
    std::array<i64, 4> key = coords[r];
    for (int i = 0; i < 4; ++i)
      if (mask[i]) key[i] = -1;
    by_key[key].push_back(static_cast<i64>(r));
  }
  Groups out;
  for (auto& [k, v] : by_key) out.push_back(v);
  std::sort(out.begin(), out.end());
  return out;
}

// Placement straight from the members' node numbers.
GroupPlacement brute_placement(std::span<const i64> members, i64 g) {
  std::map<i64, i64> per_node;
  for (i64 r : members) ++per_node[r / g];
  GroupPlacement p{static_cast<i64>(members.size()), static_cast<i64>(per_node.size()), 0, true};
  for (auto [node, n] : per_node) p.ranks_per_node = std::max(p.ranks_per_node, n);
  for (auto [node, n] : per_node) p.uniform = p.uniform && n == p.ranks_per_node;
  return p;
}

// Every rank's coordinates round-trip; each dimension's groups have the right
// size and partition the ranks; members agree on every coordinate outside the
// dimension and differ inside it; group_index / index_in_group / group_of
// agree with the enumeration; placements() tallies what the members say.
void check_structure(const RankMesh& m, i64 tp, i64 cp, i64 dp, i64 pp, i64 ep) {
  const i64 world = m.world();
  REQUIRE(world == tp * cp * dp * pp);
  for (i64 r = 0; r < world; ++r) {
    const RankCoords c = m.coords(r);
    const ExpertCoords e = m.expert_coords(r);
    if (m.rank(c) != r || m.rank(e) != r || e.pp != c.pp) {
      FAIL_CHECK("rank " << r << " does not round-trip");
      return;
    }
  }
  // Which coordinates a dimension varies, for the dense dimensions.
  auto dense_mask = [](MeshDim d) -> std::array<bool, 4> {
    switch (d) {
      case MeshDim::TP:
        return {true, false, false, false};
      case MeshDim::CP:
        return {false, true, false, false};
      case MeshDim::DP:
        return {false, false, true, false};
      case MeshDim::PP:
        return {false, false, false, true};
      case MeshDim::DataWithContext:
        return {false, true, true, false};
      case MeshDim::ModelParallel:
        return {true, false, false, true};
      default:
        return {false, false, false, false};
    }
  };
  const std::map<MeshDim, i64> sizes{{MeshDim::TP, tp},
                                     {MeshDim::CP, cp},
                                     {MeshDim::DP, dp},
                                     {MeshDim::PP, pp},
                                     {MeshDim::DataWithContext, dp * cp},
                                     {MeshDim::ModelParallel, tp * pp},
                                     {MeshDim::EP, ep},
                                     {MeshDim::ExpertTP, tp},
                                     {MeshDim::ExpertDP, dp * cp / ep}};
  for (MeshDim d : kAllMeshDims) {
    CAPTURE(enum_name(d));
    const i64 size = sizes.at(d);
    CHECK(m.group_size(d) == size);
    CHECK(m.num_groups(d) * size == world);
    std::vector<char> seen(static_cast<std::size_t>(world), 0);
    std::map<GroupPlacement, i64, bool (*)(const GroupPlacement&, const GroupPlacement&)> tally(
        [](const GroupPlacement& a, const GroupPlacement& b) {
          return std::tuple(a.size, a.nodes, a.ranks_per_node, a.uniform) <
                 std::tuple(b.size, b.nodes, b.ranks_per_node, b.uniform);
        });
    bool ok = true;
    i64 count = 0;
    m.for_each_group(d, [&](i64 index, std::span<const i64> members) {
      ok = ok && index == count++ && static_cast<i64>(members.size()) == size &&
           std::is_sorted(members.begin(), members.end());
      const RankCoords first = m.coords(members[0]);
      const ExpertCoords efirst = m.expert_coords(members[0]);
      std::set<std::array<i64, 4>> inside;
      for (std::size_t i = 0; i < members.size(); ++i) {
        const i64 r = members[i];
        ok = ok && !seen[static_cast<std::size_t>(r)]++;
        ok = ok && m.group_index(r, d) == index && m.index_in_group(r, d) == static_cast<i64>(i);
        const RankCoords c = m.coords(r);
        const ExpertCoords e = m.expert_coords(r);
        const std::array<i64, 4> cv{c.tp, c.cp, c.dp, c.pp},
            fv{first.tp, first.cp, first.dp, first.pp};
        const std::array<i64, 4> ev{e.tp, e.ep, e.dp, e.pp},
            efv{efirst.tp, efirst.ep, efirst.dp, efirst.pp};
        const bool expert = d == MeshDim::EP || d == MeshDim::ExpertTP || d == MeshDim::ExpertDP;
        const std::array<bool, 4> mask =
            expert ? std::array<bool, 4>{d == MeshDim::ExpertTP, d == MeshDim::EP,
                                         d == MeshDim::ExpertDP, false}
                   : dense_mask(d);
        std::array<i64, 4> in{-1, -1, -1, -1};
        for (int k = 0; k < 4; ++k) {
          const i64 mine = expert ? ev[k] : cv[k], theirs = expert ? efv[k] : fv[k];
          if (mask[k])
            in[k] = mine;
          else
            ok = ok && mine == theirs;
        }
        inside.insert(in);
      }
      ok = ok && static_cast<i64>(inside.size()) == size;
      ++tally[brute_placement(members, m.gpus_per_node())];
    });
    CHECK(ok);
    CHECK(count == m.num_groups(d));
    CHECK(std::count(seen.begin(), seen.end(), 1) == world);
    const std::vector<PlacementCount> ps = m.placements(d);
    CHECK(ps.size() == tally.size());
    for (const PlacementCount& p : ps) CHECK(tally[p.placement] == p.groups);
    CHECK(m.uniform_placement(d) == (tally.size() == 1));
  }
}

// ---------------------------------------------------------------------------

TEST_CASE("rank mesh: Megatron initialize_model_parallel docstring, 16 GPUs tp 2 pp 4") {
  // tp groups [g0,g1],[g2,g3]…; pp groups [g0,g4,g8,g12]…; dp groups [g0,g2],[g1,g3],[g4,g6]…
  const RankMesh m(2, 1, 2, 4, 1, kDefault, 8);
  CHECK(groups(m, MeshDim::TP) ==
        table({{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  CHECK(groups(m, MeshDim::PP) ==
        table({{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  CHECK(groups(m, MeshDim::DP) ==
        table({{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  CHECK(groups(m, MeshDim::DataWithContext) == groups(m, MeshDim::DP));
  CHECK(groups(m, MeshDim::ModelParallel) ==
        table({{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  CHECK(m.coords(13) == RankCoords{1, 0, 0, 3});
  CHECK(m.group_of(13, MeshDim::PP) == std::vector<i64>{1, 5, 9, 13});
  CHECK(m.group_index(13, MeshDim::PP) == 1);
  CHECK(m.index_in_group(13, MeshDim::PP) == 3);
  // Megatron's test_pipeline_parallel_initializations: next = rank+2, prev = rank-2, wrapping.
  for (i64 r = 0; r < 16; ++r) {
    CHECK(m.next_pp_rank(r) == (r + 4) % 16);
    CHECK(m.prev_pp_rank(r) == (r + 12) % 16);
  }
}

TEST_CASE("rank mesh: Megatron generate_masked_orthogonal_rank_groups docstring") {
  // sizes tp 2, dp 3, pp 4 in order tp-dp-pp, mask dp: group[0] = [0,2,4], [1] = [1,3,5], [7] =
  // [19,21,23]
  const RankMesh m(2, 1, 3, 4, 1, kDefault, 8);
  CHECK(m.num_groups(MeshDim::DP) == 8);
  CHECK(m.group(MeshDim::DP, 0) == std::vector<i64>{0, 2, 4});
  CHECK(m.group(MeshDim::DP, 1) == std::vector<i64>{1, 3, 5});
  CHECK(m.group(MeshDim::DP, 7) == std::vector<i64>{19, 21, 23});
  // order tp-pp-dp, sizes 2-2-2: dp groups [[0,4],[1,5],[2,6],[3,7]]
  const RankMesh o(2, 1, 2, 2, 1, Order{TP, PP, DP, CP}, 8);
  CHECK(groups(o, MeshDim::DP) == table({{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST_CASE("rank mesh: context parallel, Megatron docstring 8 GPUs tp 4 cp 2") {
  // cp groups [g0,g4],[g1,g5],[g2,g6],[g3,g7]; with dp = 1 the dp-cp groups are the cp groups
  const RankMesh m(4, 2, 1, 1, 1, kDefault, 8);
  CHECK(groups(m, MeshDim::CP) == table({{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  CHECK(groups(m, MeshDim::DataWithContext) == groups(m, MeshDim::CP));
  CHECK(groups(m, MeshDim::DP) == table({{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  CHECK(m.coords(6) == RankCoords{2, 1, 0, 0});
  // tp 2 cp 2 dp 2 pp 2: dp groups stride tp·cp = 4, dp-cp groups stride tp = 2
  const RankMesh n(2, 2, 2, 2, 1, kDefault, 8);
  CHECK(groups(n, MeshDim::DP) ==
        table({{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  CHECK(groups(n, MeshDim::DataWithContext) ==
        table({{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  CHECK(groups(n, MeshDim::CP) ==
        table({{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
}

TEST_CASE("rank mesh: expert parallel, by hand") {
  // 16 GPUs tp 2 dp 4 pp 2 ep 2: expert mesh tp-ep-edp-pp = 2-2-2-2;
  // ep groups stride tp = 2, expert-dp groups stride tp·ep = 4
  const RankMesh m(2, 1, 4, 2, 2, kDefault, 8);
  CHECK(groups(m, MeshDim::EP) ==
        table({{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  CHECK(groups(m, MeshDim::ExpertDP) ==
        table({{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  CHECK(groups(m, MeshDim::ExpertTP) == groups(m, MeshDim::TP));
  CHECK(m.expert_coords(6) == ExpertCoords{0, 1, 1, 0});
  CHECK(m.rank(ExpertCoords{1, 1, 1, 1}) == 15);
  // tp 1 cp 2 dp 4 ep 2 (8 GPUs): ep is carved out of cp·dp, so here ep groups =
  // cp groups [0,1]…, expert-dp groups = dp groups [0,2,4,6],[1,3,5,7]
  const RankMesh c(1, 2, 4, 1, 2, kDefault, 8);
  CHECK(groups(c, MeshDim::EP) == table({{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  CHECK(groups(c, MeshDim::EP) == groups(c, MeshDim::CP));
  CHECK(groups(c, MeshDim::ExpertDP) == table({{0, 2, 4, 6}, {1, 3, 5, 7}}));
  CHECK(groups(c, MeshDim::ExpertDP) == groups(c, MeshDim::DP));
  // ep 4 spans two cp and two dp positions: [0,1,2,3],[4,5,6,7]; expert dp [0,4]…
  const RankMesh e(1, 2, 4, 1, 4, kDefault, 8);
  CHECK(groups(e, MeshDim::EP) == table({{0, 1, 2, 3}, {4, 5, 6, 7}}));
  CHECK(groups(e, MeshDim::ExpertDP) == table({{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // order tp-pp-cp-dp (Megatron's "tp-cp-pp-ep-dp"), pp not outermost, so Megatron needs
  // expert dp = dp, i.e. ep = cp: tp 2 pp 2 cp 2 dp 2 ep 2 → ep groups stride tp·pp = 4
  // [0,4],[1,5]…, expert-dp groups stride 8 [0,8]…
  const RankMesh p(2, 2, 2, 2, 2, Order{TP, PP, CP, DP}, 8);
  CHECK(p.group_of(0, MeshDim::EP) == std::vector<i64>{0, 4});
  CHECK(p.group_of(3, MeshDim::EP) == std::vector<i64>{3, 7});
  CHECK(p.group_of(0, MeshDim::ExpertDP) == std::vector<i64>{0, 8});
  CHECK(groups(p, MeshDim::EP) == groups(p, MeshDim::CP));
  CHECK(groups(p, MeshDim::ExpertDP) == groups(p, MeshDim::DP));
}

TEST_CASE("rank mesh: Megatron test_different_initialize_order_consistency") {
  // on 8 GPUs with dp = 1 or pp = 1, orders tp-cp-dp-pp and tp-pp-cp-dp give the same groups
  for (auto [tp, pp, ep] : std::vector<std::array<i64, 3>>{{1, 8, 1},
                                                           {2, 4, 1},
                                                           {4, 2, 1},
                                                           {8, 1, 1},
                                                           {4, 1, 2},
                                                           {1, 1, 8},
                                                           {1, 1, 2},
                                                           {2, 1, 4}}) {
    CAPTURE(tp);
    CAPTURE(pp);
    CAPTURE(ep);
    const i64 dp = 8 / (tp * pp);
    const RankMesh a(tp, 1, dp, pp, ep, Order{TP, CP, DP, PP}, 8);
    const RankMesh b(tp, 1, dp, pp, ep, Order{TP, PP, CP, DP}, 8);
    for (MeshDim d : kAllMeshDims) CHECK(groups(a, d) == groups(b, d));
    for (i64 r = 0; r < 8; ++r) CHECK(a.expert_coords(r) == b.expert_coords(r));
  }
}

TEST_CASE("rank mesh: Megatron test_rank_generator_for_tp_dp_pp golden tables up to 10,752 GPUs") {
  // every group list equals Megatron's golden_rank_result_from_past_code
  struct Case {
    i64 nodes, gpus, tp, pp, cp, ep;
  };
  for (const Case& c : std::vector<Case>{{1, 8, 2, 4, 1, 1},
                                         {3, 8, 8, 3, 1, 1},
                                         {8, 8, 2, 1, 1, 4},
                                         {8, 8, 2, 2, 2, 4},
                                         {8, 8, 2, 1, 4, 8},
                                         {8, 8, 2, 2, 2, 8},
                                         {16, 8, 4, 8, 1, 4},
                                         {16, 8, 4, 8, 4, 1},
                                         {32, 8, 8, 8, 4, 1},
                                         {64, 8, 4, 2, 8, 8},
                                         {128, 8, 4, 2, 8, 8},
                                         {316, 8, 4, 8, 1, 1},
                                         {1344, 8, 4, 8, 1, 1}}) {
    const i64 world = c.nodes * c.gpus, dp = world / (c.tp * c.pp * c.cp);
    CAPTURE(world);
    CAPTURE(c.ep);
    const Golden g = megatron_golden(world, c.tp, c.pp, c.cp, c.ep);
    const RankMesh m(c.tp, c.cp, dp, c.pp, c.ep, kDefault, c.gpus);
    CHECK(groups(m, MeshDim::DP) == g.dp);
    CHECK(groups(m, MeshDim::DataWithContext) == g.dp_cp);
    CHECK(groups(m, MeshDim::CP) == g.cp);
    CHECK(groups(m, MeshDim::ModelParallel) == g.mp);
    CHECK(groups(m, MeshDim::TP) == g.tp);
    CHECK(groups(m, MeshDim::PP) == g.pp);
    CHECK(groups(m, MeshDim::ExpertDP) == g.expert_dp);
  }
}

TEST_CASE("rank mesh: 10,240 GPUs tp 8 cp 2 pp 16 dp 40 on 8-GPU nodes") {
  // tp groups fill one node; cp, dp, dp-cp and pp groups put one member on each of
  // 2, 40, 80, 16 nodes; one symmetry class of 640 ranks per stage
  const RankMesh m(8, 2, 40, 16, 1, kDefault, 8);
  check_structure(m, 8, 2, 40, 16, 1);
  CHECK(m.placement(12345 % 10240, MeshDim::TP) == GroupPlacement{8, 1, 8, true});
  for (i64 r : {0, 7, 5000, 10239}) {
    CHECK(m.placement(r, MeshDim::CP) == GroupPlacement{2, 2, 1, true});
    CHECK(m.placement(r, MeshDim::DP) == GroupPlacement{40, 40, 1, true});
    CHECK(m.placement(r, MeshDim::DataWithContext) == GroupPlacement{80, 80, 1, true});
    CHECK(m.placement(r, MeshDim::PP) == GroupPlacement{16, 16, 1, true});
    CHECK(m.placement(r, MeshDim::ModelParallel) == GroupPlacement{128, 16, 8, true});
  }
  for (MeshDim d : kAllMeshDims) CHECK(m.uniform_placement(d));
  const std::vector<SymmetryClass> cls = m.representatives();
  REQUIRE(cls.size() == 16);
  for (i64 s = 0; s < 16; ++s) {
    CHECK(cls[static_cast<std::size_t>(s)].stage == s);
    CHECK(cls[static_cast<std::size_t>(s)].representative == s * 640);
    CHECK(cls[static_cast<std::size_t>(s)].size == 640);
  }
}

TEST_CASE("rank mesh: 16,384 GPUs tp 8 pp 64 dp 32 ep 8, every rank order") {
  // for every order: round-trip, partitions, sizes, placements as members say;
  // tp innermost → tp groups in one node, dp groups one member on each of 32 nodes
  for (const Order& o : all_orders()) {
    CAPTURE(text(o));
    const bool ep_ok = o[3] == PP;  // Megatron: ep > 1 with pp > 1 needs pp outermost (cp = 1)
    const i64 ep = ep_ok ? 8 : 1;
    const RankMesh m(8, 1, 32, 64, ep, o, 8);
    check_structure(m, 8, 1, 32, 64, ep);
    const bool tp_inner = o[0] == TP || (o[0] == CP && o[1] == TP);
    if (tp_inner) {
      CHECK(m.placements(MeshDim::TP).size() == 1);
      CHECK(m.placement(777, MeshDim::TP) == GroupPlacement{8, 1, 8, true});
      CHECK(m.placement(777, MeshDim::DP) == GroupPlacement{32, 32, 1, true});
      CHECK(m.placement(777, MeshDim::PP) == GroupPlacement{64, 64, 1, true});
      CHECK(m.representatives().size() == 64);
    }
  }
  CHECK_THROWS_AS(RankMesh(8, 1, 32, 64, 8, Order{TP, PP, CP, DP}, 8), Error);
}

TEST_CASE("rank mesh: brute force, 2,048 GPUs tp 4 cp 2 dp 32 pp 8, every order") {
  // every group list equals the nested-loop enumeration in the same order
  for (const Order& o : all_orders()) {
    CAPTURE(text(o));
    for (i64 ep : {1, 2, 4, 16}) {
      CAPTURE(ep);
      if (RankMesh::violation(4, 2, 32, 8, ep, o, 8)) continue;
      const RankMesh m(4, 2, 32, 8, ep, o, 8);
      const Brute b = brute(4, 2, 32, 8, ep, o);
      CHECK(groups(m, MeshDim::TP) == brute_groups(b.dense, {true, false, false, false}));
      CHECK(groups(m, MeshDim::CP) == brute_groups(b.dense, {false, true, false, false}));
      CHECK(groups(m, MeshDim::DP) == brute_groups(b.dense, {false, false, true, false}));
      CHECK(groups(m, MeshDim::PP) == brute_groups(b.dense, {false, false, false, true}));
      CHECK(groups(m, MeshDim::DataWithContext) ==
            brute_groups(b.dense, {false, true, true, false}));
      CHECK(groups(m, MeshDim::ModelParallel) == brute_groups(b.dense, {true, false, false, true}));
      // Megatron keeps the expert mesh only where its pipeline groups match
      const bool megatron_expert =
          brute_groups(b.expert, {false, false, false, true}) == groups(m, MeshDim::PP) &&
          (o[3] == PP || 2 * 32 / ep == 32);
      if (megatron_expert) {
        CHECK(groups(m, MeshDim::ExpertTP) == brute_groups(b.expert, {true, false, false, false}));
        CHECK(groups(m, MeshDim::EP) == brute_groups(b.expert, {false, true, false, false}));
        CHECK(groups(m, MeshDim::ExpertDP) == brute_groups(b.expert, {false, false, true, false}));
        for (i64 r = 0; r < m.world(); r += 97) {
          const auto& e = b.expert[static_cast<std::size_t>(r)];
          CHECK(m.expert_coords(r) == ExpertCoords{e[0], e[1], e[2], e[3]});
        }
      } else {  // ep = 1 fallback: the dense meaning
        CHECK(ep == 1);
        CHECK(groups(m, MeshDim::ExpertTP) == groups(m, MeshDim::TP));
        CHECK(m.group_size(MeshDim::EP) == 1);
        CHECK(groups(m, MeshDim::ExpertDP) == groups(m, MeshDim::DataWithContext));
      }
      for (i64 r = 0; r < m.world(); r += 31) {
        const auto& c = b.dense[static_cast<std::size_t>(r)];
        CHECK(m.coords(r) == RankCoords{c[0], c[1], c[2], c[3]});
      }
    }
  }
}

TEST_CASE("rank mesh: symmetry classes against pairwise same_class") {
  // tp 3 dp 4 on 4-GPU nodes: tp groups {0,1,2} and {9,10,11} sit in one node, {3,4,5} and
  // {6,7,8} straddle two → two classes of 6 ranks, representatives 0 and 3
  const RankMesh m(3, 1, 4, 1, 1, kDefault, 4);
  const std::vector<SymmetryClass> cls = m.representatives();
  REQUIRE(cls.size() == 2);
  CHECK(cls[0].representative == 0);
  CHECK(cls[0].size == 6);
  CHECK(cls[1].representative == 3);
  CHECK(cls[1].size == 6);
  CHECK(m.placement(4, MeshDim::TP) == GroupPlacement{3, 2, 2, false});
  CHECK(m.placement(1, MeshDim::DP) == GroupPlacement{4, 3, 2, false});
  CHECK(m.placements(MeshDim::TP).size() == 2);
  CHECK_FALSE(m.uniform_placement(MeshDim::TP));
  CHECK(m.uniform_placement(MeshDim::DP));
  // unaligned stages (tp 2 dp 6 pp 2 on 8-GPU nodes) and odd layouts: classes are exactly
  // the same_class partition, sizes sum to the world, representative = lowest rank
  struct Case {
    i64 tp, cp, dp, pp, ep, g;
    Order o;
  };
  for (const Case& c : std::vector<Case>{{2, 1, 6, 2, 1, 8, kDefault},
                                         {2, 2, 6, 3, 3, 8, kDefault},
                                         {4, 2, 8, 4, 2, 8, Order{DP, TP, CP, PP}},
                                         {3, 1, 10, 4, 1, 8, Order{PP, TP, DP, CP}},
                                         {3, 1, 10, 4, 5, 8, Order{DP, CP, TP, PP}},
                                         {2, 3, 4, 5, 1, 6, Order{CP, PP, TP, DP}},
                                         {2, 2, 4, 3, 2, 8, Order{PP, TP, CP, DP}},
                                         {5, 1, 3, 2, 1, 100, kDefault}}) {
    CAPTURE(c.tp);
    CAPTURE(c.g);
    CAPTURE(text(c.o));
    const RankMesh x(c.tp, c.cp, c.dp, c.pp, c.ep, c.o, c.g);
    check_structure(x, c.tp, c.cp, c.dp, c.pp, c.ep);
    const std::vector<SymmetryClass> k = x.representatives();
    i64 total = 0;
    std::set<i64> reps;
    for (const SymmetryClass& s : k) {
      total += s.size;
      reps.insert(s.representative);
      CHECK(x.coords(s.representative).pp == s.stage);
    }
    CHECK(total == x.world());
    for (i64 r = 0; r < x.world(); ++r) {
      i64 n = 0, rep = -1;
      for (const SymmetryClass& s : k)
        if (x.same_class(r, s.representative)) ++n, rep = s.representative;
      CHECK(n == 1);
      CHECK(rep <= r);
    }
    for (const SymmetryClass& s : k) {
      i64 members = 0;
      for (i64 r = 0; r < x.world(); ++r) members += x.same_class(r, s.representative) ? 1 : 0;
      CHECK(members == s.size);
    }
  }
}

TEST_CASE("rank mesh: bad arguments throw strata::Error naming the rule") {
  // sizes < 1, an order that is not a permutation, ep ∤ dp·cp, Megatron's expert asserts,
  // out-of-range ranks, coordinates and group indices
  auto err = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(err([] { RankMesh(0, 1, 1, 1, 1, kDefault, 8); }).find("mesh-positive") == 0);
  CHECK(err([] { RankMesh(1, 1, 1, 1, 1, kDefault, 0); }).find("gpus_per_node") !=
        std::string::npos);
  CHECK(err([] {
          RankMesh(1, 1, 1, 1, 1, Order{TP, TP, DP, PP}, 8);
        }).find("rank-order-permutation") == 0);
  CHECK(err([] { RankMesh(1, 2, 3, 1, 4, kDefault, 8); }).find("ep-divides-dp-cp") == 0);
  CHECK(err([] {
          RankMesh(2, 1, 4, 2, 2, Order{TP, CP, PP, DP}, 8);
        }).find("expert-dp-needs-pp-last") == 0);
  CHECK(err([] {
          RankMesh(2, 2, 4, 2, 2, Order{TP, DP, PP, CP}, 8);
        }).find("expert-pp-groups") == 0);
  CHECK(err([] { RankMesh(1 << 21, 1 << 20, 1, 1, 1, kDefault, 8); }).find("mesh-size") == 0);
  // ep = 1 with the same orders is fine: expert groups take their dense meaning
  CHECK_NOTHROW(RankMesh(2, 2, 4, 2, 1, Order{TP, DP, PP, CP}, 8));
  // ep | dp·cp is Megatron's rule; Strata's validate requires ep | dp, which is stricter
  CHECK_NOTHROW(RankMesh(1, 2, 3, 1, 2, kDefault, 8));
  const RankMesh m(2, 1, 2, 2, 1, kDefault, 4);
  CHECK_THROWS_AS(m.coords(8), Error);
  CHECK_THROWS_AS(m.coords(-1), Error);
  CHECK_THROWS_AS(m.rank(RankCoords{2, 0, 0, 0}), Error);
  CHECK_THROWS_AS(m.rank(ExpertCoords{0, 1, 0, 0}), Error);
  CHECK_THROWS_AS(m.group(MeshDim::TP, 4), Error);
  CHECK_THROWS_AS(m.placement(8, MeshDim::DP), Error);
  Plan p;
  p.tp = 2;
  p.dp = 2;
  p.pp = 2;
  const RankMesh from_plan(p, 4);
  CHECK(from_plan.world() == 8);
  CHECK(from_plan.nodes() == 2);
  CHECK(groups(from_plan, MeshDim::DP) == groups(m, MeshDim::DP));
}

}  // namespace
}  // namespace strata::strategies
