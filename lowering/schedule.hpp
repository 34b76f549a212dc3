#pragma once
// Pipeline schedules as data (STYLE.md practice 6): for every pipeline stage,
// the ordered list of (microbatch, chunk, pass) steps it runs in one training
// step. The simulator lowers these lists to tasks and the executors run them,
// so both follow the same order.
//
// Chunks: with v virtual stages the model is cut into pp·v chunks; model chunk
// k sits on stage k % pp as that stage's (k / pp)-th virtual chunk (Megatron's
// interleaved placement, as in chunk_layers()). A Step names the virtual chunk
// on its own stage (0..v-1); model_chunk() turns it into the model chunk.
//
// Orders (one synchronous step, no optimizer):
//   GPipe         all forwards, microbatch 0..m-1, then all backwards in
//                 reverse, m-1..0 (the order autograd unwinds them in GPipe
//                 and torchgpipe; Huang et al. 2019).
//   1F1B          PipeDream-Flush (Narayanan et al. 2021): stage s runs
//                 min(pp-s-1, m) warm-up forwards, then one forward and one
//                 backward in turn, then the remaining backwards. Megatron's
//                 forward_backward_pipelining_without_interleaving.
//   Interleaved   Megatron-LM's forward_backward_pipelining_with_interleaving:
//                 the forward order comes from get_schedule_table (microbatches
//                 in groups of `microbatch_group` — default pp — each group
//                 runs chunk 0 for all its microbatches, then chunk 1, ...; a
//                 last group takes whatever is left); the k-th backward is the
//                 k-th table entry with its chunk mirrored (v-1-chunk). Stage s
//                 runs min((pp-s-1)·2 + (v-1)·group, m·v) warm-up forwards,
//                 then 1F1B, then the cool-down backwards. Megatron's rules on
//                 the group size hold: pp <= group <= m, and m % group is 0 or
//                 at least pp; so with the default group m must be a multiple
//                 of pp. Other inputs throw. v = 1 and pp = 1 are accepted here
//                 (the algorithm is defined for them); the plan rules in
//                 validate.cpp ask interleaved plans for v >= 2 and pp > 1.
//   PipeDream,    asynchronous; in steady state every stage runs 1F1B, so one
//   PipeDream2BW  step is modelled with the 1F1B order. What sets them apart
//                 (no flush; stashed weight versions and their staleness) is
//                 memory and convergence, not order: see weight_versions().
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strategies/plan.hpp"

namespace strata::strategies {

// A pass over a layer or chunk: the one enum for what a step, a task and a
// cost ask about. A schedule's steps are forwards and backwards; a
// recompute is a forward the lowering adds before a backward.
enum class Pass : std::uint8_t { Forward, Backward, Recompute };

struct Step {
  std::int32_t microbatch = 0;  // 0..m-1
  std::int32_t chunk = 0;       // virtual chunk on this stage, 0..v-1
  Pass pass = Pass::Forward;

  friend bool operator==(const Step&, const Step&) = default;
};

struct PipelineSchedule {
  Schedule kind = Schedule::OneFOneB;
  int pp = 1;                             // stages
  int v = 1;                              // virtual chunks per stage
  int m = 1;                              // microbatches per step
  std::vector<std::vector<Step>> stages;  // per stage, in execution order
};

// The schedule of `kind` for pp stages, `virtual_stages` chunks per stage and
// `microbatches` microbatches. Only Interleaved takes virtual_stages != 1;
// `microbatch_group` is Megatron's microbatch_group_size_per_vp_stage
// (Interleaved only; default pp). Throws strata::Error on invalid input.
PipelineSchedule make_schedule(Schedule kind, int pp, int virtual_stages, int microbatches,
                               std::optional<int> microbatch_group = std::nullopt);

// Model chunk (0..pp·v-1, pipeline order) of virtual chunk `chunk` on `stage`.
int model_chunk(const PipelineSchedule& s, int stage, int chunk);

// Weight versions a stage keeps: PipeDream stashes one per in-flight
// microbatch, pp - stage (Narayanan et al. 2019); PipeDream-2BW double-buffers,
// 2 on every stage when pp > 1 (Narayanan et al. 2021a); synchronous
// schedules (and any schedule with pp == 1) keep 1.
int weight_versions(Schedule kind, int pp, int stage);

// Most (microbatch, chunk) forward activations alive at once on `stage`: a
// forward adds one, its backward removes it.
int max_in_flight(const PipelineSchedule& s, int stage);

// The forward steps alive on `stage` the first time max_in_flight is reached,
// in the order they ran, so a memory model can sum unequal chunk sizes.
std::vector<Step> in_flight_at_peak(const PipelineSchedule& s, int stage);

// Throws strata::Error unless every stage runs exactly one forward and one
// backward of every (microbatch, chunk), each backward after its forward, and
// the per-stage orders together are deadlock-free under the cross-stage
// dependencies: forward of model chunk k needs the forward of k-1 (previous
// stage), backward of k needs the backward of k+1 (next stage) and its own
// forward. Deadlock is checked by a unit-time list simulation.
void validate(const PipelineSchedule& s);

// Makespan of one step with every stage running its steps in order, a step
// starting once its stage is free and its dependencies are done, and free
// communication. t_fwd and t_bwd are one stage's forward and backward time for
// one microbatch over all its v chunks; one chunk step takes t / v. Validates
// first (throws as validate does).
double simulate_makespan(const PipelineSchedule& s, double t_fwd, double t_bwd);

// One line per stage: "stage 0: F0.0 F1.0 B0.0 ..." (F/B, microbatch.chunk).
std::string to_string(const PipelineSchedule& s);

}  // namespace strata::strategies
