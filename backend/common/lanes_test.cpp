#include "backend/common/lanes.hpp"

#include <doctest/doctest.h>

#include "strategies/step_costs.hpp"

namespace strata::backend {
namespace {

TEST_CASE("common/lanes: a queue resource's lane is its role's") {
  sim::TaskGraph g;
  // Names that say otherwise: the role decides.
  const auto c = g.add_stream("s0.comm", {0, sim::Lane::Compute});
  const auto k = g.add_stream("s0.compute", {0, sim::Lane::Comm});
  const auto d = g.add_copy_engine("s0.d2h", {0, sim::Lane::D2H});
  g.add_link("s0.link", 1e9);
  const Lanes lanes(g);
  CHECK(lanes.roles_set());
  CHECK(lanes(c) == sim::Lane::Compute);
  CHECK(lanes(k) == sim::Lane::Comm);
  CHECK(lanes(d) == sim::Lane::D2H);
}

TEST_CASE("common/lanes: a graph without roles gives compute and comm by name") {
  // TODO(roles): remove once lower.cpp sets roles.
  sim::TaskGraph g;
  const auto c = g.add_stream("s0.compute");
  const auto k = g.add_stream("s0.comm");
  const auto d = g.add_copy_engine("s0.d2h");
  const Lanes lanes(g);
  CHECK_FALSE(lanes.roles_set());
  CHECK(lanes(c) == sim::Lane::Compute);
  CHECK(lanes(k) == sim::Lane::Comm);
  CHECK(lanes(d) == sim::Lane::None);
}

}  // namespace
}  // namespace strata::backend
