#pragma once
// A scenario: one model on one cluster with a batch and a plan, optionally a
// training goal and a calibration file (DESIGN.md, docs/input-format.md).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/hardware.hpp"
#include "costmodel/model.hpp"
#include "strategies/convergence.hpp"
#include "strategies/plan.hpp"
#include "strategies/space.hpp"
#include "strategies/stack.hpp"

namespace strata::strategies {

struct Goal {
  std::optional<double> tokens;
  std::optional<double> target_loss;
};

// Whose kernels' buffers the step program declares (lower.cpp). `Gpu`: the
// GPU stacks' rule (flash attention, fused kernels, cuBLAS's workspace, the
// CUDA runtime; each backward holds the gradient of the op it
// differentiates), the one simulate and explore use. `Cpu`: what the CPU
// backend's fp32 kernels (backend/cpu/gpt.cpp) allocate and free, task by
// task, so its executor's measured peak checks the declarations
// (docs/memory-model.md, "The CPU backend's declarations"). Set by the CPU
// executor and its validate, never read from a file.
enum class KernelMemory : std::uint8_t { Gpu, Cpu };

struct Scenario {
  std::string file;  // where it was read from ("" when built in code)
  cost::ModelSpec model;
  cost::ClusterSpec cluster;
  Batch batch;
  Plan plan;
  std::optional<Goal> goal;
  // With a goal: the convergence model ("convergence": the file it names with
  // its overrides, else the bundled default) and the learning-rate rule
  // ("lr", else the model's; none: tuned at every batch), its reference
  // batch resolved (default: this scenario's batch.global).
  std::shared_ptr<const ConvergenceModel> convergence;
  std::optional<LrRule> lr;
  std::optional<std::string> calibration;  // resolved path
  // A cluster of node groups: each group's calibration, read once (the
  // calibration file where it measured that group's GPU, else the GPU's
  // bundled curves: group_calibration); empty otherwise.
  std::shared_ptr<const std::vector<cost::Calibration>> group_curves;
  // The files the scenario named and read, besides itself: its model's,
  // cluster's, stack's and convergence model's, nested ones included
  // (outputs must not replace them).
  std::vector<std::string> files;
  KernelMemory kernel_memory = KernelMemory::Gpu;
  // Lowered for an executor (set by the executors and the predictions
  // beside their measurements, never read from a file): its steps run one
  // after another, so nothing of a step overlaps the next, and ZeRO-1/2's
  // weight gather stays at the step's end under
  // implementation.overlap_param_gather; and no framework issues its
  // kernels (implementation.host_dispatch_us does not apply).
  bool executed = false;
  // Lowered for an executor that runs each rank's tasks one after another,
  // in the program's order, on one thread (the CPU backend): nothing of a
  // rank overlaps, so the program chains each stage's tasks in that order.
  // Set with `executed` from the executor (StepExecutor::serial_ranks).
  bool serial_ranks = false;
  // The software stack that runs the plan ("stack", stack.hpp): its
  // settings are in plan.implementation wherever the scenario's own
  // plan.implementation keys (`implementation_keys`) do not set them.
  std::optional<Stack> stack;
  ImplKeys implementation_keys;
  // The space `strata explore` searches; `plan` and `batch` are then the
  // template for the axes it does not list.
  std::optional<Space> space;
};

// Point `index` of `space` (the scenario's, or a copy of it): the
// scenario's plan and batch with the point's values, the stack's settings
// resolved for them (stack.cpp).
void space_point(const Scenario& base, const Space& space, std::uint64_t index, Plan& plan, Batch& batch);

// Reads and validates a scenario file. With a `space`, the plan is a
// template: it is validated point by point when explored, and by
// require_valid_plan before it is simulated on its own. Throws InputError naming the file, the
// JSON path and the rule.
Scenario load_scenario(const std::string& path);
// The same from JSON text (`source` names it in errors; relative paths
// resolve against `base_dir`).
Scenario parse_scenario(std::string_view text, const std::string& source,
                        const std::string& base_dir = "");

// Whether a JSON file holds a scenario (it has "cluster", "batch" or "plan")
// rather than a model. Throws InputError when it cannot be read or parsed.
bool is_scenario_file(const std::string& path);

// Throws InputError (file, JSON path, rule) for the first validity rule the
// scenario's plan breaks (validate.hpp).
void require_valid_plan(const Scenario& s);

// Steps, tokens and factors to the scenario's goal for its plan and batch
// (convergence.hpp); nothing without a goal. Throws InputError when the
// convergence model has no penalty for the plan's compression or optimizer.
std::optional<GoalEstimate> estimate_goal(const Scenario& s);
// Steps times the step time, and the GPU-hours that takes on the scenario's
// GPUs; nothing when the goal is unreachable.
struct TimeToTrain {
  double seconds = 0;
  double gpu_hours = 0;
};
std::optional<TimeToTrain> time_to_train(const Scenario& s, const GoalEstimate& g,
                                         double step_time_s);

// The curves that price group g's GPUs (cluster.groups): the scenario's
// calibration file where it measured that GPU (its `gpu`, else the first
// group's), else the GPU's bundled curves (cost::default_calibration). Read
// from group_curves when the scenario holds them.
cost::Calibration group_calibration(const Scenario& sc, std::size_t g);
// The same for every group, in order: what group_curves holds.
std::vector<cost::Calibration> group_calibrations(const Scenario& sc);

// Throws InputError naming the scenario's model when it is a layer chain:
// `command` (simulate, explore, run, …) lowers transformers only; chains go
// to `strata tradeoff` and `strata describe`.
void require_transformer(const Scenario& s, const std::string& command);

}  // namespace strata::strategies
