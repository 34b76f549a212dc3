#pragma once
// Test support for the step lowerings (lower_test.cpp, coarse_test.cpp):
// closed-form costs and a small scenario to lower with them.
#include <string>

#include "lowering/lower.hpp"
#include "strategies/scenario.hpp"

namespace strata::strategies {

// Per layer and microbatch: forward tf, backward tb, a full recompute tf,
// selective recompute tc; embedding and head free; communication priced by
// the fields below (0 = free).
struct UnitCosts : StepCosts {
  Time tf = 1000, tb = 2000, tc = 100;
  Time tp = 0, cp = 0, ep = 0, p2p_t = 0, collective_t = 0, copy_t = 0, optimizer = 0;
  Time layer(const cost::Layer& l, Pass pass, bool core) const override {
    if (l.kind != cost::LayerKind::Block) return 0;
    if (pass == Pass::Backward) return tb;
    if (pass == Pass::Recompute && core) return tc;
    return tf;
  }
  Time layer_comm(const cost::Layer& l, CommKind k, Pass) const override {
    if (l.kind != cost::LayerKind::Block) return 0;
    return k == CommKind::TP ? tp : k == CommKind::CP ? cp : ep;
  }
  Transfer collective(Collective, Group, Bytes) const override { return collective_t; }
  Transfer p2p(Bytes) const override { return p2p_t; }
  Transfer copy(Bytes, CopyDir) const override { return copy_t; }
  Time elementwise(Bytes) const override { return 0; }
  Time gemm(Flops) const override { return 0; }
  Time optimizer_step(double, bool) const override { return optimizer; }
};

// A 16-layer model (4 heads, 128 tokens) on one DGX H100 node with `plan`
// (a JSON object) and a global batch of `global` sequences.
inline Scenario unit_scenario(const std::string& plan, int global = 16, int hidden = 256) {
  return parse_scenario(
      "{\"model\": {\"layers\": 16, \"hidden\": " + std::to_string(hidden) +
          ", \"heads\": 4, \"seq_len\": 128, \"vocab\": 1000},"
          " \"cluster\": {\"preset\": \"dgx-h100\", \"nodes\": 1}, \"batch\": {\"global\": " +
          std::to_string(global) + "}, \"plan\": " + plan + "}",
      "t.json");
}

}  // namespace strata::strategies
