#include "backend/common/lanes.hpp"

namespace strata::backend {

Lanes::Lanes(const sim::TaskGraph& g) : g_(&g) {
  for (const auto& r : g.resources())
    if (r.kind != sim::ResourceKind::Link && r.role.lane != sim::Lane::None) roles_set_ = true;
}

sim::Lane Lanes::of(const sim::Resource& r) const {
  if (roles_set_) return r.role.lane;
  // TODO(roles): remove once lower.cpp sets roles (until then every role of
  // a lowered graph is empty and the name's suffix gives the lane).
  if (r.name.ends_with(".compute")) return sim::Lane::Compute;
  if (r.name.ends_with(".comm")) return sim::Lane::Comm;
  return sim::Lane::None;
}

}  // namespace strata::backend
