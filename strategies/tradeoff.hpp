#pragma once
// Step time against memory for each recompute policy (`strata tradeoff`,
// docs/remat.md): the scenario's model as a chain of stages for one
// microbatch on one GPU, and each policy's fastest schedule within a sweep of
// activation budgets from no savings down to the least feasible budget.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/names.hpp"
#include "strategies/remat.hpp"
#include "strategies/scenario.hpp"

namespace strata::strategies {

// The model's rematerialization chain for one microbatch on one GPU.
//   A layer chain: its layers, each timed by the cost model from its matrix
//   FLOPs and memory traffic (forward: reads its input, writes its output
//   and saved tensors; backward: twice that), sizes × the microbatch.
//   A transformer (pp = 1): embedding, each block and the head as stages,
//   timed like the layer-level lowering (tensor-parallel communication
//   included), saved bytes from the op chain under no recompute.
// Throws InputError for what it does not model (pipeline parallelism).
remat::Chain remat_chain(const Scenario& sc);

enum class RematPolicy { None, EveryK, Sqrt, Revolve, Optimal };

struct TradeoffOptions {
  int budgets = 16;   // activation budgets in the sweep (≥ 2)
  int levels = 100;   // memory levels of the dynamic programme's tables
};

struct TradeoffPoint {
  Bytes peak = 0;       // the schedule's activation peak
  Time time = 0;        // forward and backward of one microbatch
  std::string setting;  // "k=4", "snaps=3", "levels=200", or ""
};

struct TradeoffCurve {
  RematPolicy policy = RematPolicy::None;
  // Per budget of Tradeoff::budgets: the policy's fastest schedule within
  // it, or nothing when none fits.
  std::vector<std::optional<TradeoffPoint>> best;
};

struct Tradeoff {
  std::string model;
  int stages = 0;
  std::int64_t microbatches = 1;  // per step, run one after the other
  // Bytes beside the activations: weights, gradients and optimizer state
  // (ZeRO-sharded), the runtime and the GEMM workspace.
  Bytes fixed_bytes = 0;
  Time optimizer_time = 0;  // once per step
  // The framework's overheads the GPU waits on: once per step and per
  // forward and backward of each microbatch (as the lowering charges them).
  Time framework_time = 0;
  Time compute = 0;         // one microbatch without recompute
  Bytes gpu_bytes = 0;      // the GPU's memory
  std::vector<Bytes> budgets;  // activation budgets, from no savings down to the least
  std::vector<TradeoffCurve> curves;

  Time step_time(Time microbatch) const {
    return microbatches * microbatch + optimizer_time + framework_time;
  }
};

Tradeoff tradeoff(const Scenario& sc, const TradeoffOptions& options = {});

}  // namespace strata::strategies

namespace strata {

template <>
struct EnumNames<strategies::RematPolicy> {
  static constexpr std::array<std::pair<strategies::RematPolicy, std::string_view>, 5> table{
      {{strategies::RematPolicy::None, "none"},
       {strategies::RematPolicy::EveryK, "every_k"},
       {strategies::RematPolicy::Sqrt, "sqrt"},
       {strategies::RematPolicy::Revolve, "revolve"},
       {strategies::RematPolicy::Optimal, "optimal"}}};
};

}  // namespace strata
