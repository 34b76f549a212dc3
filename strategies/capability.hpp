#pragma once
// Engine capabilities as data (docs/stacks.md "Capabilities"): the plans the
// framework a stack describes cannot launch, as rules read from the stack
// file, each with its source in the framework's code or documentation.
//
// A rule is a conjunction of matches on the plan's fields — "zero is 2 or 3
// and pp is at least 2" — with a name and a message. It is deliberately not
// a language: a fixed list of fields (PlanField), each matched by a set of
// values or a lower bound, all of which must hold for the rule to refuse the
// plan. What one rule cannot say (an "or") is two rules. Defined in
// stack.cpp; read in stack_io.cpp; validate.hpp's launch_violation applies
// a stack's rules.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/names.hpp"
#include "strategies/plan.hpp"

namespace strata::strategies {

// The plan's fields a rule can match, by their JSON path under "plan".
// The plan's fields a rule can match, by their JSON path under "plan". A
// rule's matches are kept in this order (what an engine refuses first, the
// degrees last), which is the order messages name them in and whose first
// gives the error's JSON path.
enum class PlanField : std::uint8_t {
  Zero,
  Schedule,
  VirtualStages,
  PipelineLayout,
  OffloadActivations,
  OffloadWeights,
  OffloadOptimizer,
  OffloadPlanner,
  Recompute,
  // Selective recompute with modules other than the attention core alone
  // (a boolean: Megatron-Core's recompute_modules).
  RecomputeModules,
  Precision,
  Optimizer,
  OptimizerStates,
  Compression,
  DpTopology,
  SequenceParallel,
  Dp,
  Tp,
  Pp,
  Cp,
  Ep,
};

}  // namespace strata::strategies

namespace strata {
template <>
struct EnumNames<strategies::PlanField> {
  using F = strategies::PlanField;
  static constexpr std::array<std::pair<F, std::string_view>, 21> table{{
      {F::Zero, "zero"},
      {F::Schedule, "schedule"},
      {F::VirtualStages, "virtual_stages"},
      {F::PipelineLayout, "pipeline_layout"},
      {F::OffloadActivations, "offload.activations"},
      {F::OffloadWeights, "offload.weights"},
      {F::OffloadOptimizer, "offload.optimizer"},
      {F::OffloadPlanner, "offload.planner"},
      {F::Recompute, "recompute"},
      {F::RecomputeModules, "recompute_modules"},
      {F::Precision, "precision"},
      {F::Optimizer, "optimizer"},
      {F::OptimizerStates, "optimizer_states"},
      {F::Compression, "compression.method"},
      {F::DpTopology, "dp_topology"},
      {F::SequenceParallel, "sequence_parallel"},
      {F::Dp, "dp"},
      {F::Tp, "tp"},
      {F::Pp, "pp"},
      {F::Cp, "cp"},
      {F::Ep, "ep"},
  }};
};
}  // namespace strata

namespace strata::strategies {

// What kind of value a field holds, which decides how a rule writes it.
enum class FieldKind : std::uint8_t { Integer, Enum, Bool };
FieldKind field_kind(PlanField f);

// One field's match: its value is one of `values` (enums by their number,
// booleans as 0/1), or at least `at_least`.
struct FieldMatch {
  PlanField field = PlanField::Dp;
  std::vector<std::int64_t> values;    // empty with at_least
  std::optional<std::int64_t> at_least;
};

struct CapabilityRule {
  std::string name;              // stable id within its stack: "sharded-grads-with-pp"
  std::vector<FieldMatch> when;  // all must match for the rule to refuse a plan
  std::string message;           // what the engine does instead
  std::string source;            // where the engine says so
};

// The plan's value of a field, as FieldMatch compares it.
std::int64_t plan_field(const Plan& p, PlanField f);
bool refuses(const CapabilityRule& rule, const Plan& p);
// "zero 2|3, pp >= 2": the rule's condition as a person reads it.
std::string when_text(const CapabilityRule& rule);

}  // namespace strata::strategies
