#pragma once
// What a lowered graph's queue resource is for: its role's lane (compute,
// comm, p2p, d2h, h2d, cpu), as sim::Resource carries it. An executor maps
// the resources of its stage to its streams by lane, never by name.
#include "sim/task_graph.hpp"

namespace strata::backend {

class Lanes {
 public:
  explicit Lanes(const sim::TaskGraph& g);
  sim::Lane operator()(sim::ResourceId r) const { return of(g_->at(r)); }
  sim::Lane of(const sim::Resource& r) const;
  // Whether the graph's resources carry roles (else the lanes are read
  // from the names: see of()).
  bool roles_set() const { return roles_set_; }

 private:
  const sim::TaskGraph* g_;
  bool roles_set_ = false;
};

}  // namespace strata::backend
