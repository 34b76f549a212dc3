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

 private:
  const sim::TaskGraph* g_;
};

}  // namespace strata::backend
