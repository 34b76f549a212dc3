#include "sim/bandwidth.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/error.hpp"

namespace strata::sim {

std::vector<double> max_min_rates(std::span<const double> capacity,
                                  const std::vector<std::vector<std::int32_t>>& flow_links) {
  const std::size_t nl = capacity.size(), nf = flow_links.size();
  std::vector<double> cap(capacity.begin(), capacity.end()), rate(nf, 0.0);
  std::vector<int> users(nl, 0);
  std::vector<bool> frozen(nf, false);
  for (const auto& links : flow_links) {
    if (links.empty()) throw Error("max_min_rates: a flow must cross at least one link");
    for (auto l : links) ++users[static_cast<std::size_t>(l)];
  }
  for (std::size_t left = nf; left > 0;) {
    double share = std::numeric_limits<double>::infinity();
    for (std::size_t l = 0; l < nl; ++l)
      if (users[l] > 0) share = std::min(share, cap[l] / users[l]);
    std::vector<bool> bottleneck(nl, false);
    for (std::size_t l = 0; l < nl; ++l) bottleneck[l] = users[l] > 0 && cap[l] / users[l] <= share;
    for (std::size_t f = 0; f < nf; ++f) {
      if (frozen[f]) continue;
      const auto& links = flow_links[f];
      if (std::none_of(links.begin(), links.end(), [&](auto l) { return bottleneck[l]; })) continue;
      frozen[f] = true;
      rate[f] = share;
      --left;
      for (auto l : links) {
        cap[l] = std::max(0.0, cap[l] - share);
        --users[l];
      }
    }
  }
  return rate;
}

LinkSharing::LinkSharing(std::vector<double> capacity) { reset(capacity); }

void LinkSharing::reset(std::span<const double> capacity) {
  for (double c : capacity)
    if (!(c > 0.0)) throw Error("LinkSharing: link capacity must be > 0");
  capacity_.assign(capacity.begin(), capacity.end());
  const std::size_t n = capacity_.size();
  on_link_.resize(n);  // these three are cleared by reset()
  multi_on_link_.resize(n);
  link_dirty_.resize(n);
  link_mark_.assign(n, 0);
  cap_left_.assign(n, 0.0);
  share_.assign(n, 0.0);
  nun_.assign(n, 0);
  reset();
}

void LinkSharing::reset() {
  flows_.clear();
  free_flows_.clear();
  for (auto& v : on_link_) v.clear();
  std::fill(multi_on_link_.begin(), multi_on_link_.end(), 0);
  std::fill(link_dirty_.begin(), link_dirty_.end(), 0);
  dirty_links_.clear();
  changed_.clear();
}

std::int32_t LinkSharing::start(const std::int32_t* links, std::int32_t nlinks, double bytes,
                                Time now, std::int32_t owner) {
  std::int32_t id;
  if (!free_flows_.empty()) {
    id = free_flows_.back();
    free_flows_.pop_back();
  } else {
    id = static_cast<std::int32_t>(flows_.size());
    flows_.emplace_back();
    flow_mark_.push_back(0);
    new_rate_.push_back(0.0);
  }
  Flow& f = flows_[id];
  f = Flow{bytes, 0.0, now, links, nlinks, owner, kNoToken, true};
  for (std::int32_t i = 0; i < nlinks; ++i) {
    on_link_[links[i]].push_back(id);
    if (nlinks > 1) ++multi_on_link_[links[i]];
    mark(links[i]);
  }
  return id;
}

std::int32_t LinkSharing::resume(const std::int32_t* links, std::int32_t nlinks, double bytes, double rate,
                                 Time since, std::int32_t owner, std::uint64_t token) {
  const std::int32_t id = start(links, nlinks, bytes, since, owner);
  Flow& f = flows_[id];
  f.rate = rate;
  f.token = token;
  f.fresh = false;
  return id;
}

void LinkSharing::finish(std::int32_t id) {
  Flow& f = flows_[id];
  for (std::int32_t i = 0; i < f.nlinks; ++i) {
    auto& v = on_link_[f.links[i]];
    auto it = std::find(v.begin(), v.end(), id);
    *it = v.back();
    v.pop_back();
    if (f.nlinks > 1) --multi_on_link_[f.links[i]];
    mark(f.links[i]);
  }
  f.remaining = 0;
  f.rate = 0;
  f.token = kNoToken;
  free_flows_.push_back(id);
}

void LinkSharing::mark(std::int32_t link) {
  if (link_dirty_[link]) return;
  link_dirty_[link] = 1;
  dirty_links_.push_back(link);
}

void LinkSharing::update(Time now) {
  changed_.clear();
  // Fresh stamps for this update: epoch_ marks links and flows "in the
  // component", epoch_ + 1 marks flows "rate fixed".
  if (epoch_ >= ~std::uint32_t{0} - 2) {  // about to wrap: clear stamps
    std::fill(link_mark_.begin(), link_mark_.end(), 0);
    std::fill(flow_mark_.begin(), flow_mark_.end(), 0);
    epoch_ = 0;
  }
  epoch_ += 2;
  // Links whose flows all cross only them form their own component: equal
  // split. The others seed one progressive filling over their components.
  comp_links_.clear();
  for (std::int32_t l : dirty_links_) {
    link_dirty_[l] = 0;
    if (multi_on_link_[l] == 0) {
      recompute_single(l, now);
    } else {
      link_mark_[l] = epoch_;
      comp_links_.push_back(l);
    }
  }
  dirty_links_.clear();
  if (!comp_links_.empty()) recompute(now);
}

Time transfer_ns(double bytes, double rate) {
  return std::max<Time>(0, static_cast<Time>(std::ceil(bytes / rate - 1e-6)));
}

Time LinkSharing::finish_time(std::int32_t id) const {
  const Flow& f = flows_[id];
  return f.last + transfer_ns(f.remaining, f.rate);
}

void LinkSharing::recompute(Time now) {
  // Components reachable from the seed links already in comp_links_.
  comp_flows_.clear();
  for (std::size_t li = 0; li < comp_links_.size(); ++li) {
    for (std::int32_t fid : on_link_[comp_links_[li]]) {
      if (flow_mark_[fid] == epoch_) continue;
      flow_mark_[fid] = epoch_;
      comp_flows_.push_back(fid);
      const Flow& f = flows_[fid];
      for (std::int32_t k = 0; k < f.nlinks; ++k)
        if (link_mark_[f.links[k]] != epoch_) {
          link_mark_[f.links[k]] = epoch_;
          comp_links_.push_back(f.links[k]);
        }
    }
  }
  if (comp_flows_.empty()) return;

  // Progressive filling over the component. Shares only grow as flows are
  // frozen, so each round takes the smallest share, freezes the unfrozen flows
  // of the links at that share, and drops links left without unfrozen flows.
  for (std::int32_t l : comp_links_) {
    cap_left_[l] = capacity_[l];
    nun_[l] = static_cast<std::int32_t>(on_link_[l].size());
  }
  const std::uint32_t frozen = epoch_ + 1;
  std::size_t left = comp_flows_.size();
  while (left > 0) {
    double share = std::numeric_limits<double>::infinity();
    std::size_t keep = 0;
    for (std::int32_t l : comp_links_) {
      if (nun_[l] == 0) continue;
      comp_links_[keep++] = l;
      share_[l] = cap_left_[l] / nun_[l];
      share = std::min(share, share_[l]);
    }
    comp_links_.resize(keep);
    bottlenecks_.clear();
    for (std::int32_t l : comp_links_)
      if (share_[l] <= share) bottlenecks_.push_back(l);
    for (std::int32_t l : bottlenecks_) {
      for (std::int32_t fid : on_link_[l]) {
        if (flow_mark_[fid] == frozen) continue;
        flow_mark_[fid] = frozen;
        new_rate_[fid] = share;
        --left;
        const Flow& f = flows_[fid];
        for (std::int32_t k = 0; k < f.nlinks; ++k) {
          const std::int32_t fl = f.links[k];
          cap_left_[fl] = std::max(0.0, cap_left_[fl] - share);
          --nun_[fl];
        }
      }
    }
  }

  for (std::int32_t fid : comp_flows_) apply(fid, new_rate_[fid], now);
}

void LinkSharing::recompute_single(std::int32_t link, Time now) {
  const auto& on = on_link_[link];
  if (on.empty()) return;
  const double share = capacity_[link] / static_cast<double>(on.size());
  for (std::int32_t fid : on) apply(fid, share, now);
}

// Advances remaining bytes at the old rate, then switches rate; a flow whose
// rate is unchanged keeps its completion event.
void LinkSharing::apply(std::int32_t fid, double r, Time now) {
  Flow& f = flows_[fid];
  if (f.fresh) {
    f.fresh = false;
  } else {
    if (r == f.rate) return;
    f.remaining = std::max(0.0, f.remaining - f.rate * static_cast<double>(now - f.last));
  }
  f.last = now;
  f.rate = r;
  changed_.push_back(fid);
}

std::size_t LinkSharing::state_bytes() const {
  std::size_t b = capacity_.capacity() * sizeof(double) + flows_.capacity() * sizeof(Flow) +
                  free_flows_.capacity() * 4 + on_link_.capacity() * sizeof(on_link_[0]) +
                  link_mark_.capacity() * 4 + flow_mark_.capacity() * 4 +
                  comp_links_.capacity() * 4 + comp_flows_.capacity() * 4 +
                  bottlenecks_.capacity() * 4 + cap_left_.capacity() * 8 + share_.capacity() * 8 +
                  nun_.capacity() * 4 + new_rate_.capacity() * 8 +
                  changed_.capacity() * 4 + multi_on_link_.capacity() * 4;
  for (const auto& v : on_link_) b += v.capacity() * 4;
  return b;
}

}  // namespace strata::sim
