#pragma once
#include <functional>
// Step time against memory for each recompute policy (`strata tradeoff`,
// docs/remat.md): either the scenario's model as a chain of stages for one
// microbatch on one GPU (layer chains, and transformers with pp = 1), or a
// transformer plan's own steps at any pipeline depth (plan_tradeoff); each
// policy's fastest schedule within a sweep of activation budgets from no
// savings down to the least feasible budget.
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
//   A layer chain: its layers, each timed as the step times its block (one
//   Stage op: its matrix FLOPs and memory traffic; forward reads its input
//   and writes its output and saved tensors, backward twice that), sizes ×
//   the microbatch.
//   A transformer (pp = 1): embedding, each block and the head as stages,
//   timed like the layer-level lowering (tensor-parallel communication
//   included), saved bytes from the op chain under no recompute.
// Throws InputError for what it does not model (pipeline parallelism).
remat::Chain remat_chain(const Scenario& sc);

enum class RematPolicy { None, Selective, Full, EveryK, Sqrt, Revolve, Optimal };

struct TradeoffOptions {
  int budgets = 16;   // activation budgets in the sweep (≥ 2)
  int levels = 100;   // memory levels of the dynamic programme's tables
  // What the sweep is doing, for a progress line: `phase` ("solving optimal
  // recompute's tables"), `done` of `total` (the solver's inner steps, or
  // plans timed). Called from the calling thread; the caller paces output.
  std::function<void(const std::string& phase, std::uint64_t done, std::uint64_t total)> progress;
};

struct TradeoffPoint {
  Bytes peak = 0;       // the schedule's activation peak (the memory beside fixed_bytes)
  Time time = 0;        // the step with it
  std::string setting;  // "k=4", "snaps=3", or ""
};

struct TradeoffCurve {
  RematPolicy policy = RematPolicy::None;
  // Per budget of Tradeoff::budgets: the policy's fastest schedule within
  // it, or nothing when none fits.
  std::vector<std::optional<TradeoffPoint>> best;
};

struct Tradeoff {
  std::string model;
  // How the step is modelled: "a chain of 14 stages" or "24 layers over 4
  // pipeline stages"; the sweep of a pipeline plan times its whole step.
  std::string shape;
  int stages = 0;
  std::int64_t microbatches = 1;  // per step, run one after the other
  // Bytes beside the activations: weights, gradients and optimizer state
  // (ZeRO-sharded), the runtime and the GEMM workspace.
  Bytes fixed_bytes = 0;
  Time optimizer_time = 0;  // once per step
  // The framework's overheads the GPU waits on: once per step and per
  // forward and backward of each microbatch (as the lowering charges them).
  Time framework_time = 0;
  Time compute = 0;         // one microbatch without recompute (a chain)
  Time no_savings = 0;      // the step without savings
  Bytes gpu_bytes = 0;      // the GPU's memory
  std::vector<Bytes> budgets;  // activation budgets, from no savings down to the least
  std::vector<TradeoffCurve> curves;

  Time step_time(Time microbatch) const {
    return microbatches * microbatch + optimizer_time + framework_time;
  }
};

// A chain's sweep; a transformer plan with pp > 1 takes plan_tradeoff's.
Tradeoff tradeoff(const Scenario& sc, const TradeoffOptions& options = {});

// A transformer plan's own steps (any pipeline depth, the plan's other
// choices kept): none, selective and full recompute, every_k for each k up
// to a chunk's layers, sqrt, and optimal recompute (per-layer choices,
// layer_plan.hpp) within each budget; steps from the coarse level (the
// layer level's to the nanosecond for recompute), peaks from the memory
// model, without the allocator's reserve as the fit counts them.
// fixed_bytes is what no savings' peak stage holds beside its activations;
// a point's peak is its plan's peak stage less its reserve and that. Throws InputError for layer chains and for the
// joint offload planner (it decides recompute itself).
Tradeoff plan_tradeoff(const Scenario& sc, const TradeoffOptions& options = {});

}  // namespace strata::strategies

namespace strata {

template <>
struct EnumNames<strategies::RematPolicy> {
  static constexpr std::array<std::pair<strategies::RematPolicy, std::string_view>, 7> table{
      {{strategies::RematPolicy::None, "none"},
       {strategies::RematPolicy::Selective, "selective"},
       {strategies::RematPolicy::Full, "full"},
       {strategies::RematPolicy::EveryK, "every_k"},
       {strategies::RematPolicy::Sqrt, "sqrt"},
       {strategies::RematPolicy::Revolve, "revolve"},
       {strategies::RematPolicy::Optimal, "optimal"}}};
};

}  // namespace strata
