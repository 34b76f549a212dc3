#pragma once
// The rank mesh: which global rank holds which tensor/context/data/pipeline
// (and expert) coordinate, which ranks form each communication group, how a
// group spreads over nodes, and which ranks do identical work.
//
// Pure integer maths (no per-rank tables), following Megatron-LM
// megatron/core/parallel_state.py exactly:
//
// * Dense mesh: RankGenerator(tp, ep=1, dp, pp, cp, order) with
//   `plan.implementation.rank_order` as the order, innermost (fastest
//   varying) first: rank = Σ coordinate · stride, stride = product of the
//   sizes of the dimensions before it in the order. The default tp-cp-dp-pp
//   is Megatron's default "tp-cp-ep-dp-pp" (ep = 1 in the dense generator).
// * Groups are generate_masked_orthogonal_rank_groups(world, sizes, mask):
//   a group holds the ranks that differ only in the masked dimensions; its
//   members are listed with the innermost masked dimension varying fastest
//   (hence in ascending rank order), and groups are numbered by the unmasked
//   coordinates, innermost fastest (hence ascending by first member).
// * Expert mesh: initialize_model_parallel's expert_decoder_rank_generator,
//   RankGenerator(tp=etp, ep, dp=edp, pp, cp=1, order) over the same ranks,
//   with etp = tp (Megatron's default expert_tensor_parallel_size) and
//   edp = dp·cp/ep. Its order is the plan's order with cp dropped (size 1)
//   and "dp" read as "ep-dp", ep just inside the expert data dimension, as in
//   Megatron's "tp-cp-ep-dp-pp" and "tp-cp-pp-ep-dp". So ep is carved out of
//   the combined cp·dp block: with tp-cp-dp-pp an expert group holds ep
//   consecutive (cp, dp) positions of one tp index and one pipeline stage.
//   Megatron needs ep | dp·cp; Strata's validity rule (ep | dp) is stricter.
//   When ep > 1 the constructor also enforces Megatron's two asserts on the
//   expert generator: its pipeline groups equal the dense ones (cp = 1, or cp
//   and dp on the same side of pp in the order) and, unless pp is outermost or
//   pp = 1, edp = dp (i.e. ep = cp). With ep = 1 and an order Megatron would
//   refuse for those reasons, the expert groups fall back to their dense
//   meaning (ExpertTP = TP, EP = the rank alone, ExpertDP = DataWithContext).
//
// Nodes: node = rank / gpus_per_node (ranks fill nodes in order).
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "costmodel/hardware.hpp"
#include "sim/names.hpp"
#include "strategies/plan.hpp"

namespace strata::strategies {

// A kind of communication group; Megatron's get_ranks token in brackets.
enum class MeshDim {
  TP,               // tensor parallel ('tp')
  CP,               // context parallel ('cp')
  DP,               // data parallel without cp ('dp')
  PP,               // pipeline ('pp')
  DataWithContext,  // data parallel with cp, gradient reduction when cp > 1 ('dp-cp')
  ModelParallel,    // tensor × pipeline ('tp-pp')
  EP,               // expert model parallel, the all-to-all group (expert 'ep')
  ExpertTP,         // expert tensor parallel (expert 'tp')
  ExpertDP,         // expert data parallel, expert gradient reduction (expert 'dp')
};
inline constexpr int kMeshDims = 9;
inline constexpr std::array<MeshDim, kMeshDims> kAllMeshDims{MeshDim::TP,
                                                             MeshDim::CP,
                                                             MeshDim::DP,
                                                             MeshDim::PP,
                                                             MeshDim::DataWithContext,
                                                             MeshDim::ModelParallel,
                                                             MeshDim::EP,
                                                             MeshDim::ExpertTP,
                                                             MeshDim::ExpertDP};

// Dense coordinates of a rank.
struct RankCoords {
  std::int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  friend bool operator==(const RankCoords&, const RankCoords&) = default;
};

// Expert-mesh coordinates of a rank: expert tp, ep, expert dp, pipeline stage.
struct ExpertCoords {
  std::int64_t tp = 0, ep = 0, dp = 0, pp = 0;
  friend bool operator==(const ExpertCoords&, const ExpertCoords&) = default;
};

// How one group's members spread over nodes.
struct GroupPlacement {
  std::int64_t size = 0;            // members
  std::int64_t nodes = 0;           // nodes holding at least one member
  std::int64_t ranks_per_node = 0;  // most members on one node
  bool uniform = true;              // every such node holds ranks_per_node members
  bool intra_node() const { return nodes == 1; }
  friend bool operator==(const GroupPlacement&, const GroupPlacement&) = default;
};

// One distinct placement of a dimension's groups and how many groups have it.
struct PlacementCount {
  GroupPlacement placement;
  std::int64_t groups = 0;
};

// Ranks that do identical work: same pipeline stage, same placement of every
// group they belong to, same intra/inter-node links to the previous and next
// pipeline stage. `representative` is the lowest rank of the class.
struct SymmetryClass {
  std::int64_t representative = 0;
  std::int64_t size = 0;   // ranks in the class
  std::int64_t stage = 0;  // pipeline stage
};

class RankMesh {
 public:
  // Sizes from plan.tp/cp/dp/pp/ep, order from plan.implementation.rank_order.
  RankMesh(const Plan& plan, std::int64_t gpus_per_node);
  RankMesh(std::int64_t tp, std::int64_t cp, std::int64_t dp, std::int64_t pp, std::int64_t ep,
           const std::array<ParallelDim, 4>& order, std::int64_t gpus_per_node);

  // The rule a plan's degrees and order break for the mesh (the constructor
  // throws strata::Error with this text), or nothing.
  static std::optional<std::string> violation(std::int64_t tp, std::int64_t cp, std::int64_t dp,
                                              std::int64_t pp, std::int64_t ep,
                                              const std::array<ParallelDim, 4>& order,
                                              std::int64_t gpus_per_node);
  static std::optional<std::string> violation(const Plan& plan, std::int64_t gpus_per_node);

  std::int64_t world() const { return world_; }
  std::int64_t gpus_per_node() const { return gpus_per_node_; }
  std::int64_t nodes() const { return (world_ + gpus_per_node_ - 1) / gpus_per_node_; }
  std::int64_t node_of(std::int64_t rank) const;

  // Rank <-> coordinates (throw on out-of-range input).
  RankCoords coords(std::int64_t rank) const;
  std::int64_t rank(const RankCoords& c) const;
  ExpertCoords expert_coords(std::int64_t rank) const;
  std::int64_t rank(const ExpertCoords& c) const;

  // Groups, as Megatron's get_ranks(token) lists them.
  std::int64_t group_size(MeshDim dim) const;
  std::int64_t num_groups(MeshDim dim) const;
  std::int64_t group_index(std::int64_t rank, MeshDim dim) const;  // position in get_ranks
  std::int64_t index_in_group(std::int64_t rank, MeshDim dim) const;
  std::vector<std::int64_t> group(MeshDim dim, std::int64_t index) const;  // ascending
  std::vector<std::int64_t> group_of(std::int64_t rank, MeshDim dim) const;
  // Calls fn(index, members) for every group in index order, reusing one buffer.
  void for_each_group(
      MeshDim dim,
      const std::function<void(std::int64_t, std::span<const std::int64_t>)>& fn) const;

  // Pipeline neighbours, wrapping around like Megatron's
  // get_pipeline_model_parallel_next_rank / _prev_rank.
  std::int64_t next_pp_rank(std::int64_t rank) const;
  std::int64_t prev_pp_rank(std::int64_t rank) const;

  // Placement of the group of `dim` holding `rank`: O(group size).
  GroupPlacement placement(std::int64_t rank, MeshDim dim) const;
  // The distinct placements of a dimension's groups with their group counts,
  // most frequent first. A group's placement depends only on its first member
  // modulo gpus_per_node, so this costs O(distinct residues · group size) plus
  // the residue count: a histogram convolution when nodes are small, a pass
  // over the groups' first members otherwise — never more than O(world).
  std::vector<PlacementCount> placements(MeshDim dim) const;
  bool uniform_placement(MeshDim dim) const { return placements(dim).size() == 1; }

  // One class per kind of work, ordered by (stage, representative); the sizes
  // sum to world(). With tp innermost and nodes holding whole tp groups there
  // is one class per pipeline stage. One O(world) pass of additions and table
  // look-ups (about 3 ms for 131,072 ranks, bench/bench_mesh.cpp).
  std::vector<SymmetryClass> representatives() const;
  bool same_class(std::int64_t a, std::int64_t b) const;

 private:
  struct Axis {
    std::int64_t size = 1, stride = 1;
  };
  // One group kind: the masked axes (members) and the unmasked axes (group
  // index), each innermost first.
  struct Kind {
    std::array<Axis, 4> in{}, out{};
    int n_in = 0, n_out = 0;
    std::int64_t size = 1, groups = 1;
  };
  static Kind make_kind(const std::array<Axis, 4>& axes, const std::array<bool, 4>& mask);

  const Kind& kind(MeshDim dim) const;
  void check_rank(std::int64_t rank) const;
  std::int64_t base_of(std::int64_t rank, const Kind& k) const;
  std::int64_t base_of_group(const Kind& k, std::int64_t index) const;
  GroupPlacement placement_at(const Kind& k, std::int64_t residue) const;
  std::int64_t residue_modulus() const;

  std::int64_t world_ = 1, gpus_per_node_ = 1;
  std::array<Axis, 4> dense_{};  // indexed TP, CP, DP, PP
  std::array<Kind, kMeshDims> kinds_{};
};

// The node groups (ClusterSpec::groups) each pipeline stage's GPUs sit on,
// ascending, by the plan's rank order; {0} for every stage of a cluster of
// one kind of node.
std::vector<std::vector<std::size_t>> stage_groups(const Plan& plan, const cost::ClusterSpec& cluster);
// The GPUs stage s runs on, for people: the GPU's name, or on a cluster of
// groups each group's GPU and group name ("v100-32g (dgx-1)"), joined by " + ".
std::string stage_gpus(const cost::ClusterSpec& cluster, const std::vector<std::size_t>& groups);

}  // namespace strata::strategies

namespace strata {
template <>
struct EnumNames<strategies::MeshDim> {
  static constexpr std::array<std::pair<strategies::MeshDim, std::string_view>, 9> table{{
      {strategies::MeshDim::TP, "tp"},
      {strategies::MeshDim::CP, "cp"},
      {strategies::MeshDim::DP, "dp"},
      {strategies::MeshDim::PP, "pp"},
      {strategies::MeshDim::DataWithContext, "dp-cp"},
      {strategies::MeshDim::ModelParallel, "tp-pp"},
      {strategies::MeshDim::EP, "ep"},
      {strategies::MeshDim::ExpertTP, "expert-tp"},
      {strategies::MeshDim::ExpertDP, "expert-dp"},
  }};
};
}  // namespace strata
