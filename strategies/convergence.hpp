#pragma once
// Time to train: how many optimizer steps a plan needs to reach a training
// goal, so plans are compared by time to train rather than step time
// (docs/time-to-train.md).
//
// Steps to a target loss at a global batch of B tokens follow the
// critical-batch-size model of McCandlish et al. 2018 ("An Empirical Model of
// Large-Batch Training"):
//   S(B) = S_min · (1 + B_noise / B)      steps
//   E(B) = E_min · (1 + B / B_noise)      tokens, E_min = S_min · B_noise
// (S_min and B_noise may depend on the target loss, as Kaplan et al. 2020
// measure for language models: LossScaling). They assume the learning rate is
// tuned at every batch. A learning-rate rule that gives another rate ε than
// the best one ε_opt(B) = ε_max / (1 + B_noise / B) makes each step do
// 2r − r² of the best step's progress (r = ε / ε_opt, McCandlish et al.'s
// quadratic model of the loss), so it multiplies the steps by
// 1 / (2r − r²) and never reaches the target for r ≥ 2. Lossy techniques
// (gradient compression, low-precision optimizer state, stale weights of
// asynchronous pipelines) multiply the steps by a penalty each; a warmup adds
// its steps.
//
// Pure functions of numbers: the JSON reader is convergence_io.cpp.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "strategies/plan.hpp"

namespace strata::strategies {

enum class LrScaling { Linear, Sqrt, None };

// A number and where it comes from.
struct Sourced {
  double value = 0;
  std::string source;
};

// How S_min and B_noise move with the target loss L (Kaplan et al. 2020,
// §5: S_min ∝ (L − L_floor)^(−1/α_S), B_crit ∝ L^(−1/α_B)):
//   S_min(L)   = S_min(L_ref)   · ((L_ref − floor) / (L − floor))^s_min_exponent
//   B_noise(L) = B_noise(L_ref) · (L_ref / L)^b_noise_exponent
struct LossScaling {
  Sourced loss_floor;
  Sourced s_min_exponent;
  Sourced b_noise_exponent;
};

// The steps multiplier of a lossy setting. Well above the critical batch it
// multiplies S_min (`factor`), well below it E_min (`noise_factor`; the same
// when unset): the setting's steps are S_min (factor + noise_factor ·
// B_noise/B), so at a batch of B tokens the multiplier is
//   (factor · B + noise_factor · B_noise) / (B + B_noise).
// A technique that only adds gradient noise raises noise_factor; one that
// slows every step alike raises both (McCandlish et al.'s noise model).
// A biased compressor without error feedback also loses part of each
// step's descent, the more the smaller the batch (at small batches the
// coordinates it keeps are mostly noise): `bias_factor` b, when set,
// multiplies the steps by (1 + b·B_noise/B) on top — the descent kept is
// B/(B + b·B_noise) of the full gradient's (Karimireddy et al. 2019:
// without error feedback a biased compressor's progress shrinks by the
// fraction of the gradient it keeps). Relative to B_noise, as the other
// two factors are relative to S_min and E_min, so a fit on one model
// reads on another.
struct Penalty {
  double factor = 1;
  std::optional<double> noise_factor;
  std::string source;
  std::optional<double> bias_factor;
  double at_batch(double batch_tokens, double b_noise_tokens) const;
};

// A compression setting's penalty at one value of its parameter: the ratio
// of entries sent (topk, randomk), the bits (qsgd), the rank (powersgd);
// onebit has none (0).
struct PenaltyPoint {
  double at = 0;
  Penalty penalty;
};
// Asynchronous pipelines: each weight version of lag adds `per_step` to the
// factor on S_min and `noise_per_step` (default: per_step) to the one on
// E_min, so a lag of L costs Penalty{1 + L·per_step, 1 + L·noise_per_step}.
struct Staleness {
  double per_step = 0;
  std::optional<double> noise_per_step;
  std::string source;
  Penalty at_lag(double lag) const;
};

struct CompressionPenalty {
  CompressionMethod method = CompressionMethod::None;
  bool error_feedback = true;  // topk and randomk only
  std::vector<PenaltyPoint> points;  // ascending `at`
};

// The learning rate of a batch: base at the reference batch, scaled by
// (B / B_ref) (linear, Goyal et al. 2017), its square root (sqrt), or not at
// all (none); warmup_steps of gradual warmup first.
struct LrRule {
  double base = 0;
  LrScaling scaling = LrScaling::Linear;
  std::int64_t warmup_steps = 0;
  // Sequences; unset: the scenario's batch.global (the base rate is tuned there).
  std::optional<std::int64_t> reference_batch;
};

struct ConvergenceModel {
  std::string file;          // where it was read from (a bundled file's path in the source tree)
  std::string description;
  double target_loss = 0;    // the loss S_min and B_noise are for
  Sourced s_min_steps;       // steps at a very large batch
  Sourced b_noise_tokens;    // the critical batch, tokens
  std::optional<LossScaling> loss_scaling;  // unset: only target_loss can be asked for
  std::optional<LrRule> lr;  // unset: the learning rate is tuned at every batch
  std::vector<CompressionPenalty> compression;
  std::map<Optimizer, Penalty> optimizer;  // per optimizer
  // How much further a learning-rate rule holds with the optimizer
  // (layer-wise adaptive rates: LAMB, LARS): effective_lr_ratio. Absent: 1.
  std::map<Optimizer, Sourced> lr_reach;
  Staleness staleness_per_step;
};

// S_min and B_noise at `target_loss`. Throws InputError (the model's file)
// when the loss is not the model's own and it has no loss_scaling, or is at
// or below the loss floor.
struct CriticalBatch {
  double s_min_steps = 0;
  double b_noise_tokens = 0;
};
CriticalBatch critical_batch_at(const ConvergenceModel& m, double target_loss);

// McCandlish et al.'s steps and tokens to the target at a batch of B tokens.
double steps_at_batch(const CriticalBatch& c, double batch_tokens);
double tokens_at_batch(const CriticalBatch& c, double batch_tokens);

// The learning rate a rule gives at a batch of `batch_seqs` sequences, with
// the reference batch `reference_seqs`.
double lr_at_batch(const LrRule& rule, double batch_seqs, double reference_seqs);
// r = ε / ε_opt at batch B (tokens) for a rule whose base rate is the best one
// at the reference batch B_ref (tokens): scale(B / B_ref) · (1 + B_noise/B) /
// (1 + B_noise/B_ref).
double lr_ratio(LrScaling scaling, double batch_tokens, double reference_tokens,
                double b_noise_tokens);
// Steps multiplier of a learning rate r times the best one: 1 / (2r − r²);
// nullopt for r ≤ 0 or r ≥ 2 (the quadratic model diverges).
std::optional<double> lr_steps_factor(double r);
// The ratio an optimizer of reach R acts at when a rule gives r times the
// best rate: 1 + (r − 1)/R above the best, r at or below it. A layer-wise
// trust ratio (LARS: You et al. 2017; LAMB: You et al. 2020) sets each
// layer's step from its weights' norm over its update's, so a rate the rule
// overshoots by (r − 1) moves a layer R times less past its best step: the
// rule holds R times further past its reference batch before it diverges
// (r_eff = 2 at r = 1 + R). R is read from the largest batches the papers
// train at without losing accuracy against the optimizer they replace.
double effective_lr_ratio(double r, double reach);

// Steps multipliers of the plan's lossy techniques at a batch of B tokens.
// Throws InputError (the model's file, path penalties.…) when the model has
// no entry for the plan's compression method or optimizer.
struct Penalties {
  double compression = 1, optimizer = 1, staleness = 1;
  double staleness_steps = 0;  // weight versions behind: PipeDream pp − 1, PipeDream-2BW 1, + ps_staleness
  double total() const { return compression * optimizer * staleness; }
};
Penalties penalties_for(const ConvergenceModel& m, const Plan& plan, double batch_tokens,
                        double b_noise_tokens);
// A compression setting's penalty: the points of its method (and error
// feedback), both factors interpolated linearly in log(parameter) and held
// at the ends; none: 1.
Penalty compression_penalty(const ConvergenceModel& m, const Compression& c);
// Whether a method's penalty depends on error feedback (top-k, random-k).
bool sparse_compression(CompressionMethod m);
// What a setting's penalty points are indexed by: the ratio (top-k,
// random-k), the bits (QSGD), the rank (PowerSGD); 0 otherwise.
double penalty_parameter(const Compression& c);

// A training goal reached by one plan.
struct GoalEstimate {
  bool reachable = true;          // false: the learning rate is too high to converge (r ≥ 2)
  std::string unreachable_reason;
  std::int64_t steps = 0;         // optimizer steps, warmup included, rounded up
  double tokens = 0;              // steps · batch tokens
  double batch_tokens = 0;
  std::optional<CriticalBatch> critical;  // loss goals
  double base_steps = 0;          // before the factors: S(B), or tokens / batch tokens
  std::optional<double> lr = {};  // the rule's rate at this batch (with an lr rule)
  double lr_ratio = 1;            // ε / ε_opt (1 without an lr rule)
  double lr_reach = 1;            // the optimizer's (ConvergenceModel::lr_reach)
  double lr_ratio_effective = 1;  // effective_lr_ratio(lr_ratio, lr_reach)
  double lr_factor = 1;
  Penalties penalties;
  std::int64_t warmup_steps = 0;
};

// Steps to the goal (exactly one of tokens and target_loss) for a plan
// training `batch_seqs` sequences of `seq_len` tokens per step; `lr`
// overrides the model's rule. A tokens goal counts the tokens an exact run
// with a tuned learning rate needs; the factors and the warmup apply to both.
GoalEstimate estimate_goal(const ConvergenceModel& m, const std::optional<LrRule>& lr,
                           std::optional<double> goal_tokens, std::optional<double> goal_loss,
                           const Plan& plan, std::int64_t batch_seqs, std::int64_t seq_len);

}  // namespace strata::strategies

namespace strata {
template <>
struct EnumNames<strategies::LrScaling> {
  static constexpr std::array<std::pair<strategies::LrScaling, std::string_view>, 3> table{
      {{strategies::LrScaling::Linear, "linear"},
       {strategies::LrScaling::Sqrt, "sqrt"},
       {strategies::LrScaling::None, "none"}}};
};
}  // namespace strata
