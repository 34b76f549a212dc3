#include "strategies/rank_mesh.hpp"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "sim/error.hpp"

namespace strata::strategies {

namespace {

using i64 = std::int64_t;

std::string str(i64 v) { return std::to_string(v); }

int slot(ParallelDim d) { return static_cast<int>(d); }  // TP, CP, DP, PP

std::string order_text(const std::array<ParallelDim, 4>& order) {
  std::string s;
  for (ParallelDim d : order) s += (s.empty() ? "" : "-") + std::string(enum_name(d));
  return s;
}

// Strides of the dense mesh (indexed TP, CP, DP, PP) and of Megatron's expert
// mesh (indexed expert TP, EP, expert DP, PP; cp dropped, "dp" read as "ep-dp").
struct Strides {
  std::array<i64, 4> dense{}, expert{};
};
Strides strides(i64 tp, i64 cp, i64 dp, i64 ep, i64 pp, const std::array<ParallelDim, 4>& order) {
  const std::array<i64, 4> size{tp, cp, dp, pp};
  Strides s;
  i64 d = 1, e = 1;
  for (ParallelDim p : order) {
    s.dense[slot(p)] = d;
    d *= size[slot(p)];
    switch (p) {
      case ParallelDim::TP:
        s.expert[0] = e;
        e *= tp;
        break;
      case ParallelDim::CP:
        break;
      case ParallelDim::DP:
        s.expert[1] = e;
        e *= ep;
        s.expert[2] = e;
        e *= cp * dp / ep;
        break;
      case ParallelDim::PP:
        s.expert[3] = e;
        e *= pp;
        break;
    }
  }
  return s;
}

// Megatron's asserts on the expert rank generator (initialize_model_parallel):
// the reason it would refuse this layout, or nothing.
std::optional<std::string> megatron_expert_problem(i64 tp, i64 cp, i64 dp, i64 pp, i64 ep,
                                                   const std::array<ParallelDim, 4>& order) {
  const Strides s = strides(tp, cp, dp, ep, pp, order);
  const std::string o = order_text(order);
  if (pp > 1 && s.dense[3] != s.expert[3])
    return "expert-pp-groups: with rank order " + o + " and cp=" + str(cp) +
           " the expert mesh's pipeline groups differ from the dense ones (cp and dp must lie "
           "on the same side of pp, Megatron-LM parallel_state.py)";
  if (pp > 1 && order[3] != ParallelDim::PP && cp * dp / ep != dp)
    return "expert-dp-needs-pp-last: rank order " + o + " does not put pp outermost, so " +
           "the expert data-parallel size dp·cp/ep = " + str(cp * dp / ep) +
           " must equal dp=" + str(dp) + " (Megatron-LM parallel_state.py)";
  return std::nullopt;
}

// Counts i in [0, n) by (i·s) mod m: residue -> count, as a dense vector.
std::vector<i64> residue_histogram(i64 n, i64 s, i64 m) {
  std::vector<i64> h(static_cast<std::size_t>(m), 0);
  const i64 step = s % m;
  const i64 period = m / std::gcd(step, m);  // step 0: gcd(0, m) = m, period 1
  for (i64 t = 0; t < std::min(n, period); ++t)
    h[static_cast<std::size_t>(t * step % m)] += n / period + (t < n % period ? 1 : 0);
  return h;
}

}  // namespace

std::optional<std::string> RankMesh::violation(i64 tp, i64 cp, i64 dp, i64 pp, i64 ep,
                                               const std::array<ParallelDim, 4>& order,
                                               i64 gpus_per_node) {
  const std::array<std::pair<const char*, i64>, 6> args{{{"tp", tp},
                                                         {"cp", cp},
                                                         {"dp", dp},
                                                         {"pp", pp},
                                                         {"ep", ep},
                                                         {"gpus_per_node", gpus_per_node}}};
  for (const auto& [name, v] : args)
    if (v < 1) return std::string("mesh-positive: ") + name + " = " + str(v) + " must be >= 1";
  std::array<int, 4> seen{};
  for (ParallelDim d : order) {
    const int i = slot(d);
    if (i < 0 || i > 3 || seen[static_cast<std::size_t>(i)]++)
      return "rank-order-permutation: rank order must name tp, cp, dp and pp once each";
  }
  i64 world = 1;
  for (i64 v : {tp, cp, dp, pp})
    if (__builtin_mul_overflow(world, v, &world) || world > (i64{1} << 40))
      return "mesh-size: tp·cp·dp·pp exceeds 2^40 ranks";
  if ((cp * dp) % ep != 0)
    return "ep-divides-dp-cp: ep=" + str(ep) + " does not divide dp·cp = " + str(dp * cp) +
           " (Megatron-LM carves the expert mesh out of the dp·cp ranks)";
  if (ep > 1)
    if (auto p = megatron_expert_problem(tp, cp, dp, pp, ep, order)) return p;
  return std::nullopt;
}

std::optional<std::string> RankMesh::violation(const Plan& plan, i64 gpus_per_node) {
  return violation(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.implementation.rank_order,
                   gpus_per_node);
}

RankMesh::RankMesh(const Plan& plan, i64 gpus_per_node)
    : RankMesh(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.implementation.rank_order,
               gpus_per_node) {}

RankMesh::RankMesh(i64 tp, i64 cp, i64 dp, i64 pp, i64 ep, const std::array<ParallelDim, 4>& order,
                   i64 gpus_per_node) {
  if (auto v = violation(tp, cp, dp, pp, ep, order, gpus_per_node)) throw Error(*v);
  world_ = tp * cp * dp * pp;
  gpus_per_node_ = gpus_per_node;
  const Strides s = strides(tp, cp, dp, ep, pp, order);
  const std::array<i64, 4> dense_size{tp, cp, dp, pp}, expert_size{tp, ep, cp * dp / ep, pp};
  std::array<Axis, 4> expert{};
  for (std::size_t i = 0; i < 4; ++i) {
    dense_[i] = {dense_size[i], s.dense[i]};
    expert[i] = {expert_size[i], s.expert[i]};
  }
  auto set = [&](MeshDim d, const std::array<Axis, 4>& axes, std::array<bool, 4> mask) {
    kinds_[static_cast<std::size_t>(d)] = make_kind(axes, mask);
  };
  set(MeshDim::TP, dense_, {true, false, false, false});
  set(MeshDim::CP, dense_, {false, true, false, false});
  set(MeshDim::DP, dense_, {false, false, true, false});
  set(MeshDim::PP, dense_, {false, false, false, true});
  set(MeshDim::DataWithContext, dense_, {false, true, true, false});
  set(MeshDim::ModelParallel, dense_, {true, false, false, true});
  if (!megatron_expert_problem(tp, cp, dp, pp, ep, order)) {
    set(MeshDim::ExpertTP, expert, {true, false, false, false});
    set(MeshDim::EP, expert, {false, true, false, false});
    set(MeshDim::ExpertDP, expert, {false, false, true, false});
  } else {  // ep = 1 here (violation() refused ep > 1): the dense meaning
    set(MeshDim::ExpertTP, dense_, {true, false, false, false});
    set(MeshDim::EP, dense_, {false, false, false, false});
    set(MeshDim::ExpertDP, dense_, {false, true, true, false});
  }
}

RankMesh::Kind RankMesh::make_kind(const std::array<Axis, 4>& axes,
                                   const std::array<bool, 4>& mask) {
  Kind k;
  for (std::size_t i = 0; i < 4; ++i) {
    if (axes[i].size == 1) continue;  // contributes nothing to either side
    if (mask[i]) {
      k.in[static_cast<std::size_t>(k.n_in++)] = axes[i];
      k.size *= axes[i].size;
    } else {
      k.out[static_cast<std::size_t>(k.n_out++)] = axes[i];
      k.groups *= axes[i].size;
    }
  }
  // Innermost first (insertion sort of at most four axes by stride).
  auto sort = [](std::array<Axis, 4>& axes, int n) {
    for (int i = 1; i < n; ++i)
      for (int j = i; j > 0 && axes[static_cast<std::size_t>(j)].stride <
                                   axes[static_cast<std::size_t>(j - 1)].stride;
           --j)
        std::swap(axes[static_cast<std::size_t>(j)], axes[static_cast<std::size_t>(j - 1)]);
  };
  sort(k.in, k.n_in);
  sort(k.out, k.n_out);
  return k;
}

const RankMesh::Kind& RankMesh::kind(MeshDim dim) const {
  const auto i = static_cast<std::size_t>(dim);
  if (i >= kinds_.size()) throw Error("rank mesh: unknown group dimension " + str(i64(i)));
  return kinds_[i];
}

void RankMesh::check_rank(i64 rank) const {
  if (rank < 0 || rank >= world_)
    throw Error("rank mesh: rank " + str(rank) + " is outside [0, " + str(world_) + ")");
}

i64 RankMesh::node_of(i64 rank) const {
  check_rank(rank);
  return rank / gpus_per_node_;
}

RankCoords RankMesh::coords(i64 rank) const {
  check_rank(rank);
  auto at = [&](const Axis& a) { return rank / a.stride % a.size; };
  return {at(dense_[0]), at(dense_[1]), at(dense_[2]), at(dense_[3])};
}

ExpertCoords RankMesh::expert_coords(i64 rank) const {
  return {index_in_group(rank, MeshDim::ExpertTP), index_in_group(rank, MeshDim::EP),
          index_in_group(rank, MeshDim::ExpertDP), coords(rank).pp};
}

namespace {
template <class Axes, class Values>
i64 compose(const Axes& axes, const Values& values, const char* what) {
  i64 r = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    if (values[i] < 0 || values[i] >= axes[i].size)
      throw Error(std::string("rank mesh: ") + what + " coordinate " + str(i64(i)) + " = " +
                  str(values[i]) + " is outside [0, " + str(axes[i].size) + ")");
    r += values[i] * axes[i].stride;
  }
  return r;
}
}  // namespace

i64 RankMesh::rank(const RankCoords& c) const {
  return compose(dense_, std::array<i64, 4>{c.tp, c.cp, c.dp, c.pp}, "dense");
}

// The expert groups of one rank share only that rank, so its rank is the sum of
// its offsets inside each of them plus its stage's offset.
i64 RankMesh::rank(const ExpertCoords& c) const {
  auto offset = [](const Kind& k, i64 index, const char* what) {
    if (index < 0 || index >= k.size)
      throw Error(std::string("rank mesh: expert ") + what + " coordinate " + str(index) +
                  " is outside [0, " + str(k.size) + ")");
    i64 off = 0;
    for (int a = 0; a < k.n_in; ++a) {
      off += index % k.in[a].size * k.in[a].stride;
      index /= k.in[a].size;
    }
    return off;
  };
  return offset(kind(MeshDim::ExpertTP), c.tp, "tp") + offset(kind(MeshDim::EP), c.ep, "ep") +
         offset(kind(MeshDim::ExpertDP), c.dp, "dp") + offset(kind(MeshDim::PP), c.pp, "pp");
}

i64 RankMesh::group_size(MeshDim dim) const { return kind(dim).size; }
i64 RankMesh::num_groups(MeshDim dim) const { return kind(dim).groups; }

i64 RankMesh::base_of(i64 rank, const Kind& k) const {
  i64 b = rank;
  for (int a = 0; a < k.n_in; ++a) b -= rank / k.in[a].stride % k.in[a].size * k.in[a].stride;
  return b;
}

i64 RankMesh::base_of_group(const Kind& k, i64 index) const {
  if (index < 0 || index >= k.groups)
    throw Error("rank mesh: group index " + str(index) + " is outside [0, " + str(k.groups) + ")");
  i64 b = 0;
  for (int a = 0; a < k.n_out; ++a) {
    b += index % k.out[a].size * k.out[a].stride;
    index /= k.out[a].size;
  }
  return b;
}

i64 RankMesh::group_index(i64 rank, MeshDim dim) const {
  check_rank(rank);
  const Kind& k = kind(dim);
  i64 g = 0, mult = 1;
  for (int a = 0; a < k.n_out; ++a) {
    g += rank / k.out[a].stride % k.out[a].size * mult;
    mult *= k.out[a].size;
  }
  return g;
}

i64 RankMesh::index_in_group(i64 rank, MeshDim dim) const {
  check_rank(rank);
  const Kind& k = kind(dim);
  i64 g = 0, mult = 1;
  for (int a = 0; a < k.n_in; ++a) {
    g += rank / k.in[a].stride % k.in[a].size * mult;
    mult *= k.in[a].size;
  }
  return g;
}

namespace {
// Visits base + offset for every member offset, ascending (odometer over the
// masked axes, innermost fastest).
template <class Axes, class F>
void for_each_offset(const Axes& in, int n_in, i64 count, F&& f) {
  std::array<i64, 4> idx{};
  i64 off = 0;
  for (i64 m = 0; m < count; ++m) {
    f(off);
    for (int a = 0; a < n_in; ++a) {
      if (++idx[static_cast<std::size_t>(a)] < in[static_cast<std::size_t>(a)].size) {
        off += in[static_cast<std::size_t>(a)].stride;
        break;
      }
      idx[static_cast<std::size_t>(a)] = 0;
      off -= (in[static_cast<std::size_t>(a)].size - 1) * in[static_cast<std::size_t>(a)].stride;
    }
  }
}
}  // namespace

std::vector<i64> RankMesh::group(MeshDim dim, i64 index) const {
  const Kind& k = kind(dim);
  const i64 base = base_of_group(k, index);
  std::vector<i64> out;
  out.reserve(static_cast<std::size_t>(k.size));
  for_each_offset(k.in, k.n_in, k.size, [&](i64 off) { out.push_back(base + off); });
  return out;
}

std::vector<i64> RankMesh::group_of(i64 rank, MeshDim dim) const {
  return group(dim, group_index(rank, dim));
}

void RankMesh::for_each_group(MeshDim dim,
                              const std::function<void(i64, std::span<const i64>)>& fn) const {
  const Kind& k = kind(dim);
  std::vector<i64> offsets;
  offsets.reserve(static_cast<std::size_t>(k.size));
  for_each_offset(k.in, k.n_in, k.size, [&](i64 off) { offsets.push_back(off); });
  std::vector<i64> members(offsets.size());
  i64 index = 0;
  for_each_offset(k.out, k.n_out, k.groups, [&](i64 base) {
    for (std::size_t m = 0; m < offsets.size(); ++m) members[m] = base + offsets[m];
    fn(index++, std::span<const i64>(members));
  });
}

i64 RankMesh::next_pp_rank(i64 rank) const {
  const RankCoords c = coords(rank);
  const Axis& pp = dense_[3];
  return c.pp + 1 < pp.size ? rank + pp.stride : rank - c.pp * pp.stride;
}

i64 RankMesh::prev_pp_rank(i64 rank) const {
  const RankCoords c = coords(rank);
  const Axis& pp = dense_[3];
  return c.pp > 0 ? rank - pp.stride : rank + (pp.size - 1) * pp.stride;
}

// Residues of group first members are taken modulo min(gpus_per_node, world):
// with one node every residue is the rank itself and every node index is 0.
i64 RankMesh::residue_modulus() const { return std::min(gpus_per_node_, world_); }

// Placement of the group whose first member is ≡ residue (mod gpus_per_node):
// node(base + off) = base / G + (residue + off) / G, so only the residue matters.
GroupPlacement RankMesh::placement_at(const Kind& k, i64 residue) const {
  const i64 g = gpus_per_node_;
  GroupPlacement p{k.size, 0, 0, true};
  i64 run = 0, boundary = -1;  // members on the current node; first rank past it
  auto close = [&] {
    if (run == 0) return;
    if (p.nodes > 0 && run != p.ranks_per_node) p.uniform = false;
    p.ranks_per_node = std::max(p.ranks_per_node, run);
    ++p.nodes;
  };
  for_each_offset(k.in, k.n_in, k.size, [&](i64 off) {
    const i64 m = residue + off;
    if (m >= boundary) {
      close();
      run = 0;
      boundary = (m / g + 1) * g;
    }
    ++run;
  });
  close();
  return p;
}

GroupPlacement RankMesh::placement(i64 rank, MeshDim dim) const {
  check_rank(rank);
  const Kind& k = kind(dim);
  return placement_at(k, base_of(rank, k) % residue_modulus());
}

std::vector<PlacementCount> RankMesh::placements(MeshDim dim) const {
  const Kind& k = kind(dim);
  const i64 m = residue_modulus();
  // Groups per first-member residue: convolve the per-axis residue histograms
  // when that is cheaper than visiting every group's first member.
  i64 conv_cost = 0;
  for (int a = 0; a < k.n_out; ++a) conv_cost += m * std::min(k.out[a].size, m);
  std::vector<i64> groups_at(static_cast<std::size_t>(m), 0);
  if (conv_cost < k.groups) {
    groups_at[0] = 1;
    for (int a = 0; a < k.n_out; ++a) {
      const std::vector<i64> h = residue_histogram(k.out[a].size, k.out[a].stride, m);
      std::vector<i64> next(static_cast<std::size_t>(m), 0);
      for (i64 x = 0; x < m; ++x) {
        if (groups_at[static_cast<std::size_t>(x)] == 0) continue;
        for (i64 y = 0; y < m; ++y)
          if (h[static_cast<std::size_t>(y)] != 0)
            next[static_cast<std::size_t>((x + y) % m)] +=
                groups_at[static_cast<std::size_t>(x)] * h[static_cast<std::size_t>(y)];
      }
      groups_at = std::move(next);
    }
  } else {
    for_each_offset(k.out, k.n_out, k.groups,
                    [&](i64 base) { ++groups_at[static_cast<std::size_t>(base % m)]; });
  }
  std::vector<PlacementCount> out;
  for (i64 r = 0; r < m; ++r) {
    const i64 n = groups_at[static_cast<std::size_t>(r)];
    if (n == 0) continue;
    const GroupPlacement p = placement_at(k, r);
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const PlacementCount& c) { return c.placement == p; });
    if (it == out.end())
      out.push_back({p, n});
    else
      it->groups += n;
  }
  std::stable_sort(out.begin(), out.end(), [](const PlacementCount& a, const PlacementCount& b) {
    if (a.groups != b.groups) return a.groups > b.groups;
    if (a.placement.nodes != b.placement.nodes) return a.placement.nodes < b.placement.nodes;
    return a.placement.ranks_per_node < b.placement.ranks_per_node;
  });
  return out;
}

namespace {
// What distinguishes one rank's work from another's: its stage, the placement
// of each of its groups (as an id per dimension), and whether its previous and
// next pipeline neighbours share its node.
struct Signature {
  std::array<i64, kMeshDims + 2> v{};
  friend bool operator==(const Signature&, const Signature&) = default;
};
struct SignatureHash {
  std::size_t operator()(const Signature& s) const {
    std::uint64_t h = 1469598103934665603ull;
    for (i64 x : s.v) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ull;
    return static_cast<std::size_t>(h);
  }
};
}  // namespace

std::vector<SymmetryClass> RankMesh::representatives() const {
  const i64 m = residue_modulus(), g = gpus_per_node_;
  // Every distinct masked axis (size, stride) of every dimension, with a
  // counter pair (rank mod stride, coordinate) advanced rank by rank, and a
  // table coordinate -> (coordinate · stride) mod m. Equal axes of the dense
  // and expert meshes are the same function of the rank, so they are shared.
  struct Counter {
    Axis axis;
    i64 below = 0, coord = 0;
    std::vector<i64> offset_mod;
  };
  std::vector<Counter> counters;
  struct Dim {
    std::array<std::size_t, 4> counter{};
    int n = 0;
    std::vector<int> pid;  // first-member residue -> placement id, -1 unknown
    std::vector<GroupPlacement> seen;
  };
  std::array<Dim, kMeshDims> dims;
  for (std::size_t d = 0; d < kinds_.size(); ++d) {
    const Kind& k = kinds_[d];
    Dim& dm = dims[d];
    dm.pid.assign(static_cast<std::size_t>(m), -1);
    for (int a = 0; a < k.n_in; ++a) {
      const Axis ax = k.in[static_cast<std::size_t>(a)];
      auto it = std::find_if(counters.begin(), counters.end(), [&](const Counter& c) {
        return c.axis.size == ax.size && c.axis.stride == ax.stride;
      });
      if (it == counters.end()) {
        Counter c{ax, 0, 0, {}};
        for (i64 i = 0; i < ax.size; ++i) c.offset_mod.push_back(i * ax.stride % m);
        counters.push_back(std::move(c));
        it = counters.end() - 1;
      }
      dm.counter[static_cast<std::size_t>(dm.n++)] =
          static_cast<std::size_t>(it - counters.begin());
    }
  }
  const Axis pp = dense_[3];
  i64 stage = 0, stage_below = 0;
  std::unordered_map<Signature, std::size_t, SignatureHash> index;
  std::vector<SymmetryClass> classes;
  Signature last;
  std::size_t last_class = 0;
  i64 rmod = 0;  // rank mod m
  for (i64 r = 0; r < world_; ++r) {
    Signature s;
    s.v[0] = stage;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      Dim& dm = dims[d];
      i64 res = rmod;  // first member of this rank's group, mod m
      for (int a = 0; a < dm.n; ++a) {
        const Counter& c = counters[dm.counter[static_cast<std::size_t>(a)]];
        res -= c.offset_mod[static_cast<std::size_t>(c.coord)];
      }
      while (res < 0) res += m;
      int& id = dm.pid[static_cast<std::size_t>(res)];
      if (id < 0) {
        const GroupPlacement p = placement_at(kinds_[d], res);
        auto it = std::find(dm.seen.begin(), dm.seen.end(), p);
        id = static_cast<int>(it - dm.seen.begin());
        if (it == dm.seen.end()) dm.seen.push_back(p);
      }
      s.v[d + 1] = id;
    }
    // Same node as the next / previous stage's rank (wrapping like Megatron).
    const i64 next = stage + 1 < pp.size ? pp.stride : -stage * pp.stride;
    const i64 prev = stage > 0 ? -pp.stride : (pp.size - 1) * pp.stride;
    s.v[kMeshDims + 1] = (rmod + next >= 0 && rmod + next < g ? 1 : 0) +
                         (rmod + prev >= 0 && rmod + prev < g ? 2 : 0);
    if (r > 0 && s == last) {
      ++classes[last_class].size;
    } else {
      auto [it, added] = index.try_emplace(s, classes.size());
      if (added) classes.push_back({r, 0, stage});
      last_class = it->second;
      ++classes[last_class].size;
      last = s;
    }
    for (Counter& c : counters)
      if (++c.below == c.axis.stride) {
        c.below = 0;
        if (++c.coord == c.axis.size) c.coord = 0;
      }
    if (++stage_below == pp.stride) {
      stage_below = 0;
      if (++stage == pp.size) stage = 0;
    }
    if (++rmod == m) rmod = 0;
  }
  std::sort(classes.begin(), classes.end(), [](const SymmetryClass& a, const SymmetryClass& b) {
    return a.stage != b.stage ? a.stage < b.stage : a.representative < b.representative;
  });
  return classes;
}

bool RankMesh::same_class(i64 a, i64 b) const {
  if (coords(a).pp != coords(b).pp) return false;
  for (std::size_t d = 0; d < kinds_.size(); ++d)
    if (!(placement(a, static_cast<MeshDim>(d)) == placement(b, static_cast<MeshDim>(d))))
      return false;
  auto same_node = [&](i64 x, i64 y) { return node_of(x) == node_of(y); };
  return same_node(a, next_pp_rank(a)) == same_node(b, next_pp_rank(b)) &&
         same_node(a, prev_pp_rank(a)) == same_node(b, prev_pp_rank(b));
}

std::vector<std::vector<std::size_t>> stage_groups(const Plan& plan, const cost::ClusterSpec& cluster) {
  const auto stages = static_cast<std::size_t>(plan.pp);
  if (!cluster.heterogeneous()) return std::vector<std::vector<std::size_t>>(stages, {0});
  std::vector<std::vector<char>> on(stages, std::vector<char>(cluster.groups.size(), 0));
  const std::int64_t per_node = cluster.node.gpus_per_node;
  const RankMesh mesh(plan, per_node);
  const std::int64_t ranks = std::min(plan.gpus(), cluster.gpus());
  for (std::int64_t r = 0; r < ranks; ++r)
    on[static_cast<std::size_t>(mesh.coords(r).pp)][cluster.group_of_node(r / per_node)] = 1;
  std::vector<std::vector<std::size_t>> out(stages);
  for (std::size_t s = 0; s < stages; ++s)
    for (std::size_t g = 0; g < on[s].size(); ++g)
      if (on[s][g]) out[s].push_back(g);
  return out;
}

std::string stage_gpus(const cost::ClusterSpec& cluster, const std::vector<std::size_t>& groups) {
  if (!cluster.heterogeneous()) return cluster.gpu.name;
  std::string out;
  for (std::size_t g : groups)
    out += (out.empty() ? "" : " + ") + cluster.groups[g].gpu.name + " (" + cluster.groups[g].name + ")";
  return out;
}

}  // namespace strata::strategies
