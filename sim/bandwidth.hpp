#pragma once
// Max-min fair sharing of link bandwidth between concurrent flows.
//
// A flow crosses one or more links (a point-to-point path, or every link of a
// collective's group) and moves the same bytes across each. Its rate is set by
// progressive filling: all rates grow together until a link is saturated;
// the flows crossing a saturated link are frozen at that rate and the others
// keep growing over the remaining capacity (SimGrid's LMM without weights).
//
// LinkSharing keeps the flows of one run. Starting or finishing a flow only
// marks its links; update() then recomputes rates exactly — once per instant,
// and only for the connected components of flows that share links,
// transitively, with a marked link — and reports the flows whose rate
// changed; the engine reschedules their completion (lazily cancelling the
// old completion event through the flow's token). Rates computed this way
// are bit-identical to max_min_rates() over all flows: within a round every
// frozen flow subtracts the same share, and rounds run in increasing share.
#include <cstdint>
#include <span>
#include <vector>

#include "sim/units.hpp"

namespace strata::sim {

// Reference max-min rates by progressive filling. capacity[l] in bytes per
// unit time; flow_links[f] lists the links flow f crosses (non-empty).
// Returns one rate per flow. Used by tests and as documentation.
std::vector<double> max_min_rates(std::span<const double> capacity,
                                  const std::vector<std::vector<std::int32_t>>& flow_links);

// Nanoseconds `bytes` take at `rate` bytes per nanosecond: the earliest
// integer by which they are through (within a millionth of a nanosecond of
// an integer counts as that integer, so exact answers are not pushed one
// nanosecond late by rounding). A flow alone on its links takes this at its
// slowest link's rate.
Time transfer_ns(double bytes, double rate);

class LinkSharing {
 public:
  // capacity[l]: bytes per nanosecond of link l (> 0).
  explicit LinkSharing(std::vector<double> capacity);

  LinkSharing() = default;
  // Drops every flow (start of a run). Keeps allocated storage.
  void reset();
  // Drops every flow and takes these links instead, keeping storage.
  void reset(std::span<const double> capacity);

  // Starts a flow of `bytes` (> 0) across `links` at time `now`; `links` must
  // stay valid until the flow finishes. Returns the flow id. Its rate is set
  // by the next update().
  std::int32_t start(const std::int32_t* links, std::int32_t nlinks, double bytes, Time now,
                     std::int32_t owner);
  // A flow that has been moving alone on its links since `since` at `rate`
  // (their slowest capacity: what update() gave it), `bytes` then left,
  // with its completion event `token` pending: the state start() and
  // update() would have given it, for a caller that times lone flows
  // itself until another flow joins one of their links.
  std::int32_t resume(const std::int32_t* links, std::int32_t nlinks, double bytes, double rate, Time since,
                      std::int32_t owner, std::uint64_t token);
  // Removes a flow whose completion has come.
  void finish(std::int32_t flow);
  // Whether a start or finish awaits update().
  bool pending() const { return !dirty_links_.empty(); }
  // Recomputes the rates of the flows on links touched since the last update;
  // changed() then lists every flow whose rate changed (new flows included).
  void update(Time now);
  const std::vector<std::int32_t>& changed() const { return changed_; }

  // Completion time of a flow at its current rate: the earliest integer
  // nanosecond by which its remaining bytes are through.
  Time finish_time(std::int32_t flow) const;
  double rate(std::int32_t flow) const { return flows_[flow].rate; }
  std::int32_t owner(std::int32_t flow) const { return flows_[flow].owner; }
  // Token of the flow's live completion event (engine's sequence number);
  // an event whose token differs is stale.
  std::uint64_t token(std::int32_t flow) const { return flows_[flow].token; }
  void set_token(std::int32_t flow, std::uint64_t token) { flows_[flow].token = token; }

  std::size_t active_flows(std::int32_t link) const { return on_link_[link].size(); }
  // Bytes held by this object's containers (capacities, not sizes).
  std::size_t state_bytes() const;

 private:
  struct Flow {
    double remaining = 0;  // bytes left as of `last`
    double rate = 0;       // bytes per ns since `last`
    Time last = 0;
    const std::int32_t* links = nullptr;
    std::int32_t nlinks = 0;
    std::int32_t owner = -1;
    std::uint64_t token = 0;
    bool fresh = false;  // started since the last update; no rate yet
  };
  static constexpr std::uint64_t kNoToken = ~std::uint64_t{0};

  void mark(std::int32_t link);
  // Progressive filling over the components reachable from comp_links_.
  void recompute(Time now);
  // Fast path: every flow on `link` crosses only that link, so each gets an
  // equal share.
  void recompute_single(std::int32_t link, Time now);
  void apply(std::int32_t fid, double rate, Time now);

  std::vector<double> capacity_;
  std::vector<Flow> flows_;
  std::vector<std::int32_t> free_flows_;
  std::vector<std::vector<std::int32_t>> on_link_;  // active flows per link
  std::vector<std::int32_t> multi_on_link_;         // of those, flows crossing 2+ links
  std::vector<std::uint8_t> link_dirty_;
  std::vector<std::int32_t> dirty_links_;
  // Scratch for recompute, kept to avoid allocation per event.
  std::vector<std::uint32_t> link_mark_, flow_mark_;
  std::uint32_t epoch_ = 0;
  std::vector<std::int32_t> comp_links_, comp_flows_, bottlenecks_;
  std::vector<double> cap_left_, share_;
  std::vector<std::int32_t> nun_;
  std::vector<double> new_rate_;
  std::vector<std::int32_t> changed_;
};

}  // namespace strata::sim
