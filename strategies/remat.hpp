#pragma once
#include <functional>
// Rematerialization (checkpointing) of a chain of stages under a memory
// budget: which activations a training step keeps from forward to backward
// and which it recomputes. docs/remat.md states the model, the solvers and
// their sources.
//
// The model (Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova 2019, "Optimal
// checkpointing for heterogeneous chains", the rotor model): stage i
// (1 ≤ i ≤ n) maps activation a(i−1) to a(i) (a(0) is the chain's input).
// Its forward either keeps only its output a(i) (x_i bytes) or, to be
// differentiated next, all its saved tensors ā(i) (x_i + saved_i bytes),
// which hold on to its input a(i−1) until its backward (as a framework's
// saved tensors reference a layer's input).
// Its backward needs ā(i), a(i−1) and the gradient δ(i) (as large as a(i);
// the last stage computes the loss and needs none), frees ā(i) and δ(i) and
// produces δ(i−1) (none for the input).
//
// A schedule is a sequence of operations, replayed by `replay` (the checker,
// which knows nothing of the solvers). Every solver here returns a
// rotor-structured schedule as `Decisions`: for each sub-chain [s, t] it
// reaches, whether it keeps all of stage s (forward s keeping ā(s), solve
// [s+1, t], backward s) or checkpoints a(s'−1) (forward s..s'−1 keeping only
// a(s'−1), solve [s', t], then [s, s'−1] from a(s−1) again). `build` turns
// decisions into operations with their time and peak, computed by the
// recurrence's own accounting.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/units.hpp"

namespace strata::strategies::remat {

struct Stage {
  Time fwd = 0;         // forward time
  Time bwd = 0;         // backward time
  Bytes output = 0;     // x_i: the output a(i), the next stage's input
  Bytes saved = 0;      // what a keep-all forward keeps beyond input and output
  Bytes fwd_work = 0;   // transient bytes while the forward runs
  Bytes bwd_work = 0;   // transient bytes while the backward runs
};

struct Chain {
  Bytes input = 0;  // x_0
  std::vector<Stage> stages;

  int size() const { return static_cast<int>(stages.size()); }
  const Stage& stage(int i) const { return stages[static_cast<std::size_t>(i - 1)]; }
  // x_i for 0 ≤ i ≤ n.
  Bytes act(int i) const { return i == 0 ? input : stage(i).output; }
  // |ā(i)| = x_i + saved_i for 1 ≤ i ≤ n.
  Bytes full(int i) const { return stage(i).output + stage(i).saved; }
  // |δ(i)|: x_i for 0 < i < n; the input needs no gradient, the loss makes its own.
  Bytes grad(int i) const { return i == 0 || i == size() ? 0 : act(i); }
  Time compute() const;  // Σ forward + backward: the time without recomputation
};

enum class OpKind {
  ForwardNone,        // F∅(i): a(i) from a(i−1), then frees a(i−1) (which must be plain)
  ForwardCheckpoint,  // Fck(i): a(i) from a(i−1), keeping a(i−1)
  ForwardAll,         // Fall(i): ā(i) from a(i−1), keeping a(i−1)
  Backward,           // B(i)
  Free,               // frees plain a(index), unless ā(index+1) holds it
};

struct Op {
  OpKind kind = OpKind::ForwardAll;
  int index = 0;  // the stage (1..n); for Free, the activation (0..n)
  bool operator==(const Op&) const = default;
};

// Pre-order decisions of a rotor-structured schedule: for sub-chain [s, t],
// 0 = keep all of stage s; s' with s < s' ≤ t = checkpoint a(s'−1). The
// keep-all child [s+1, t] (when s < t) follows its parent; a checkpoint's
// right part [s', t] comes before its left part [s, s'−1].
using Decisions = std::vector<int>;

struct Schedule {
  std::vector<Op> ops;
  Time time = 0;       // Σ of the operations' times
  Time recompute = 0;  // of which forwards beyond the first of each stage
  Bytes peak = 0;      // highest live bytes, transients included
};

// The operations of `d` with their time and peak (the recurrence's
// accounting, not a replay). Throws Error when `d` is not a complete,
// well-formed decision list for the chain.
Schedule build(const Chain& chain, const Decisions& d);

// The checker: replays `ops` from a(0) alone, enforcing every operation's
// needs (a backward has ā(i), a(i−1) and δ(i), in order n..1; a forward has
// its input and does not overwrite a live activation), and measures time and
// peak. `error` is empty when the schedule is valid and complete (every
// backward done, nothing left allocated).
struct Replay {
  std::string error;
  Time time = 0;
  Time recompute = 0;
  Bytes peak = 0;
  bool ok() const { return error.empty(); }
};
Replay replay(const Chain& chain, const std::vector<Op>& ops);

// --- solvers ----------------------------------------------------------------

// No recomputation: every forward keeps all.
Decisions store_all(const Chain& chain);
// Checkpoint every k-th activation (a(0), a(k), a(2k), …); each segment of k
// stages is recomputed once in backward, the last one is kept from the
// forward (Chen et al. 2016, Sec. 4.1). k = 1 recomputes every stage from
// its stored input (full recompute); k ≥ n is store_all.
Decisions segments(const Chain& chain, int k);
// Chen et al.'s √n plan: segments of ⌈√n⌉ stages.
Decisions sqrt_segments(const Chain& chain);
// ⌈√n⌉ (at least 1): the √n plan's segment length.
int sqrt_segment(std::int64_t n);

// Griewank's binomial checkpointing (Revolve; Griewank & Walther 2000,
// Algorithm 799) with `snaps` ≥ 1 stored activations (a(0) included) beside
// the current one. Optimal in forward steps for homogeneous chains; on
// others it counts steps and ignores costs.
Decisions revolve(const Chain& chain, int snaps);
// β(s, t) = C(s + t, s).
std::int64_t binomial_beta(std::int64_t s, std::int64_t t);
// Griewank's minimal count of forward steps beyond the taping ones to
// reverse `steps` steps with `snaps` snapshots: t(l, s) = r·l − β(s+1, r−1),
// r the repetition number with β(s, r−1) < l ≤ β(s, r).
std::int64_t revolve_forwards(std::int64_t steps, std::int64_t snaps);

// The rotor dynamic programme: the fastest rotor-structured schedule whose
// peak fits `budget`. Memory is discretised into `levels` levels of
// ⌈budget / levels⌉ bytes. Sizes are first rounded to the nearest level by
// error diffusion (a run of consecutive buffers is off by less than a
// level) and the fastest schedule of the table whose measured peak fits is
// returned; when none fits (the programme favours buffers rounded down to
// nothing), every size is rounded up, over a table spanning twice the
// budget, measured the same way. With one-byte levels (levels ≥ budget) it
// is exact.
// O(n³·levels) time, O(n²·levels) memory, per table.
struct Optimal {
  std::optional<Decisions> decisions;  // empty: nothing fits the budget
  Time time = 0;                       // the schedule's time (when feasible)
  Bytes unit = 1;                      // bytes per memory level
  int tables = 0;                      // tables solved (1, or 2 with the rounded-up one)
  std::string infeasible;              // why, when empty
  bool feasible() const { return decisions.has_value(); }
};
Optimal optimal(const Chain& chain, Bytes budget, int levels);

// The programme's schedules over all budgets: tables at store_all's peak,
// half of it, a quarter, … down to the least peak any schedule can have
// (every backward holds a(0), a(i−1), ā(i), δ(i) and δ(i−1)), each with
// `levels` levels; every corner of each table's top row, measured in bytes,
// kept when faster than all smaller ones (ascending peak, descending time).
struct FrontierPoint {
  Bytes peak = 0;
  Time time = 0;
  Decisions decisions;
};
// `progress(done, total)`, when given, is called after each table with the
// inner steps done of frontier_steps' total.
std::vector<FrontierPoint> optimal_frontier(const Chain& chain, int levels,
                                            const std::function<void(double done, double total)>& progress = {});
// The inner steps optimal_frontier takes (each table's segments × split
// points × levels, about n³/6 · levels per table): what its time grows with.
double frontier_steps(const Chain& chain, int levels);

// The least peak on the frontier: the lowest budget the programme reaches.
Bytes lowest_budget(const Chain& chain, int levels);

}  // namespace strata::strategies::remat
