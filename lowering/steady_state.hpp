#pragma once
// A long step from two short ones: the pipeline's periodic steady state.
//
// With identical microbatches every stage repeats one block of tasks per
// round (1F1B: a forward and a backward; interleaved: a microbatch group's
// chunk passes). The step is a max-plus linear system: once the tasks of one
// block start exactly Δ after those of the block before them, on every stage
// and lane, every later block does the same, so a step of m microbatches is
// one of m₁ with (m − m₁)/c blocks inserted and everything after them moved
// by Δ per block.
//
// predict_steady builds and replays the programs of m₁ and m₁ + c
// microbatches (the real plan's layer choices, so memory-budget solvers
// decide as for m) and accepts the extrapolation only when it can check, on
// each stage, that
//   * the short program's tasks are the long one's up to a point (same
//     records, same times) and from a later point the long one's moved by Δ
//     (same records, times + Δ), the two matches overlapping by at least one
//     block — so the long program holds two consecutive blocks, the second
//     the first moved by Δ;
//   * the inserted block allocates and frees as many bytes of each tag in
//     each pool (so the memory peaks do not grow with m) and both programs
//     have the same peaks.
// Then step time, task count, every stage's breakdown and compute sums are
// linear in the number of blocks, and the peaks are the short programs'. It
// declines (std::nullopt) otherwise, and where the two short programs are
// not much shorter than the step — the caller replays the whole program.
// Tests hold the extrapolation equal to the full replay over sampled auto
// spaces, to the nanosecond and to the byte.
#include <optional>

#include "lowering/coarse.hpp"

namespace strata::strategies {

struct SteadyStats {
  int m = 0;       // the step's microbatches
  int m1 = 0;      // the shorter program's
  int block = 0;   // c: microbatches per block
  bool used = false;
  // Why not, when not used: "schedule" (GPipe), "short" (m too close to m₁),
  // "peaks" (the short programs' memory peaks differ), "stage" (a stage's
  // blocks do not repeat).
  const char* declined = "";
};

std::optional<ChunkPrediction> predict_steady(const Scenario& sc, const StepCosts& costs, Granularity g,
                                              const ReplayOptions& o, ProgramWorkspace& w,
                                              SteadyStats* stats = nullptr);

}  // namespace strata::strategies
