#include "backend/common/lanes.hpp"

namespace strata::backend {

Lanes::Lanes(const sim::TaskGraph& g) : g_(&g) {}

sim::Lane Lanes::of(const sim::Resource& r) const { return r.role.lane; }

}  // namespace strata::backend
