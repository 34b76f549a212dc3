#include "backend/common/lanes.hpp"

#include <doctest/doctest.h>

#include "lowering/step_costs.hpp"

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
  CHECK(lanes(c) == sim::Lane::Compute);
  CHECK(lanes(k) == sim::Lane::Comm);
  CHECK(lanes(d) == sim::Lane::D2H);
}

TEST_CASE("common/lanes: every lane of a lowered step carries its stage's role") {
  // Two stages, dp 2: each stage has its compute and comm lanes, found by role.
  const auto sc = strategies::parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
      "batch": {"global": 8, "micro": 1}, "plan": {"pp": 2, "dp": 4}})", "t.json");
  const auto low = strategies::lower_step(sc, strategies::ModelStepCosts(sc));
  const Lanes lanes(low.graph);
  int compute = 0, comm = 0;
  for (const auto& r : low.graph.resources()) {
    if (r.kind == sim::ResourceKind::Link) continue;  // the links the flows share carry no lane
    CHECK(r.role.stage >= 0);
    CHECK(r.role.stage < 2);
    compute += lanes.of(r) == sim::Lane::Compute;
    comm += lanes.of(r) == sim::Lane::Comm;
  }
  CHECK(compute == 2);
  CHECK(comm == 2);
}

}  // namespace
}  // namespace strata::backend
