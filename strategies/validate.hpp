#pragma once
// Validity rules relating a plan to its model, cluster and batch. Each rule
// has a stable id (for counting rejections in a search) and a message naming
// the numbers. A plan read from JSON turns the first violation into an
// InputError; the explorer counts them.
#include <optional>
#include <string>

#include "strategies/scenario.hpp"

namespace strata::strategies {

struct Violation {
  std::string rule;     // stable id, e.g. "tp-divides-heads"
  std::string path;     // JSON path, e.g. "plan.tp"
  std::string message;  // e.g. "3 does not divide heads=32"
};

// The first rule the scenario breaks, in a fixed order, or nothing.
std::optional<Violation> first_violation(const Scenario& s);

// The first of the rules that keep a scenario's sizes countable
// (sim/limits.hpp): tokens per step, and the bytes of its model states and
// activations (cost::size_bound). They depend on the model, the cluster's
// GPUs per node, the batch and the attention kernel only, so a space's
// template is checked with them when it is read; first_violation checks
// them first.
std::optional<Violation> size_violation(const Scenario& s);

// Whether a plan training in `p` may reduce its gradients in `d` (rule
// grad-reduce-dtype): a 16-bit reduction is the training's own 16-bit
// dtype — fp16 under fp16, bf16 under bf16, fp8 and fp4; none under fp32.
bool grad_reduce_dtype_allowed(GradReduceDtype d, Precision p);

// The first of the stack's capability rules (capability.hpp) the plan
// breaks: rule "STACK/NAME", path the rule's first field, a message naming
// the stack and the rule. first_violation checks the scenario's stack last,
// so explore counts these plans per rule like the others.
std::optional<Violation> launch_violation(const Stack& stack, const Plan& p);

}  // namespace strata::strategies
