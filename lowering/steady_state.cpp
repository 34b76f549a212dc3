#include "lowering/steady_state.hpp"

#include <cstdint>
#include <memory>

#include "sim/limits.hpp"
#include "lowering/memory_lowering.hpp"
#include "lowering/step_layout.hpp"

namespace strata::strategies {

namespace {

// The shorter program's microbatches m₁ and the block size c, or none where
// the steady state does not repeat memory (GPipe keeps every microbatch's
// activations until its backwards) or two short programs would cost about
// as much as the step's own.
struct Sizes {
  int m1 = 0, block = 0;
};
// The k-th try (0, 1, ...): m₁ doubles its distance past the warm-up from
// try to try, for pipelines whose stages settle slowly.
std::optional<Sizes> sizes(const Plan& plan, int m, int attempt) {
  const int pp = static_cast<int>(plan.pp);
  int block = 1, warmup = pp;
  switch (plan.schedule) {
    case Schedule::GPipe: return std::nullopt;
    case Schedule::Interleaved:
      // A block is one microbatch group (Megatron's default group, pp), and
      // m₁ keeps m's remainder so the last group is the same.
      block = pp;
      warmup = 2 * pp;
      break;
    case Schedule::OneFOneB:
    case Schedule::PipeDream:
    case Schedule::PipeDream2BW: break;
  }
  const int base = warmup + (block + 2) * (1 << attempt);
  const int m1 = base + ((m - base) % block + block) % block;
  return Sizes{m1, block};
}

struct Range {
  std::size_t lo = 0, hi = 0;
  std::size_t size() const { return hi - lo; }
};
Range stage_range(const StepProgram& p, int s) {
  const auto [lo, hi] = stage_tasks(p, s);
  return {lo, hi};
}

bool same_buffer(const ProgramBuffer& x, const ProgramBuffer& y) {
  return x.bytes == y.bytes && x.tag == y.tag && x.host == y.host && x.kind == y.kind;
}

// The same record: what runs, where, for how long, and what it allocates
// and frees (buffer indices differ from program to program; their contents
// must not).
bool same_task(const StepProgram& a, std::size_t i, const StepProgram& b, std::size_t k) {
  const ProgramTask& x = a.tasks[i];
  const ProgramTask& y = b.tasks[k];
  if (x.kind != y.kind || x.phase != y.phase || x.comm != y.comm || x.lane != y.lane || x.merged != y.merged ||
      x.duration != y.duration || x.allocs != y.allocs || x.frees != y.frees || x.nparts != y.nparts)
    return false;
  for (std::uint16_t q = 0; q < x.nparts; ++q)
    if (a.parts[x.parts + q] != b.parts[y.parts + q]) return false;
  for (std::uint32_t q = 0; q < static_cast<std::uint32_t>(x.allocs) + x.frees; ++q)
    if (!same_buffer(a.buffers[static_cast<std::size_t>(a.mem[x.mem + q])],
                     b.buffers[static_cast<std::size_t>(b.mem[y.mem + q])]))
      return false;
  return true;
}

bool same_peaks(const std::vector<StageMemoryPeak>& a, const std::vector<StageMemoryPeak>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t s = 0; s < a.size(); ++s)
    if (a[s].gpu_peak != b[s].gpu_peak || a[s].gpu_peak_by_tag != b[s].gpu_peak_by_tag ||
        a[s].host_peak != b[s].host_peak)
      return false;
  return true;
}

// Stage s of the longer program (B) holds two consecutive blocks, the
// second the first moved by Δ, and a block's allocations and frees cancel
// tag by tag in each pool.
bool periodic_stage(const StepProgram& a, const ProgramRun& ra, Range A, const StepProgram& b, const ProgramRun& rb,
                    Range B, Time delta) {
  const std::size_t n = A.size();
  if (B.size() <= n) return false;
  const std::size_t d = B.size() - n;
  std::size_t prefix = 0;
  while (prefix < n) {
    const std::size_t i = A.lo + prefix, k = B.lo + prefix;
    if (!same_task(a, i, b, k) || ra.tasks[i].start != rb.tasks[k].start || ra.tasks[i].end != rb.tasks[k].end)
      break;
    ++prefix;
  }
  std::size_t suffix = 0;
  while (suffix < n) {
    const std::size_t i = A.hi - 1 - suffix, k = B.hi - 1 - suffix;
    if (!same_task(a, i, b, k) || ra.tasks[i].start + delta != rb.tasks[k].start ||
        ra.tasks[i].end + delta != rb.tasks[k].end)
      break;
    ++suffix;
  }
  if (prefix + suffix < n + d) return false;
  // B's tasks [first, first + d) are a block (A's, unmoved); the next d are
  // the same moved by Δ.
  const std::size_t first = B.lo + (n - suffix);
  std::array<sim::TagBytes, 2> net{};  // GPU, host
  for (std::size_t k = first; k < first + d; ++k) {
    const ProgramTask& t = b.tasks[k];
    for (std::uint32_t q = 0; q < static_cast<std::uint32_t>(t.allocs) + t.frees; ++q) {
      const ProgramBuffer& buf = b.buffers[static_cast<std::size_t>(b.mem[t.mem + q])];
      auto& cell = net[buf.host ? 1 : 0][static_cast<std::size_t>(buf.tag)];
      cell += q < t.allocs ? buf.bytes : -buf.bytes;
    }
  }
  for (const auto& pool : net)
    for (Bytes v : pool)
      if (v != 0) return false;
  return true;
}

Time linear(Time a, Time b, std::int64_t j) { return a + j * (b - a); }

TimeBreakdown linear(const TimeBreakdown& a, const TimeBreakdown& b, std::int64_t j) {
  TimeBreakdown out;
  out.compute = linear(a.compute, b.compute, j);
  out.recompute = linear(a.recompute, b.recompute, j);
  for (std::size_t q = 0; q < kCommKinds; ++q) out.exposed_comm[q] = linear(a.exposed_comm[q], b.exposed_comm[q], j);
  out.bubble = linear(a.bubble, b.bubble, j);
  out.offload_stall = linear(a.offload_stall, b.offload_stall, j);
  out.optimizer = linear(a.optimizer, b.optimizer, j);
  out.beside_collectives = linear(a.beside_collectives, b.beside_collectives, j);
  return out;
}

}  // namespace

std::optional<ChunkPrediction> predict_steady(const Scenario& sc, const StepCosts& costs, Granularity g,
                                              const ReplayOptions& o, ProgramWorkspace& w, SteadyStats* stats) {
  const int m = static_cast<int>(microbatches(sc.plan, sc.batch));
  if (stats) *stats = {m, 0, 0, false, ""};
  // The plan's own layer choices for every short program.
  std::optional<LayerPlan> own;
  const LayerPlan* layers = o.layers;
  if (!w.second) w.second = std::make_unique<ProgramWorkspace>();
  ProgramWorkspace& wa = *w.second;  // m₁
  ProgramWorkspace& wb = w;          // m₁ + c
  const StepProgram& a = wa.program;
  const StepProgram& b = wb.program;
  const ProgramRun& ra = wa.run;
  const ProgramRun& rb = wb.run;
  std::optional<Sizes> size;
  // The short programs' microbatches, all tries together, stay within half
  // the step's: a plan that never settles costs at most 1.5 replays.
  int spent = 0;
  for (int attempt = 0;; ++attempt) {
    size = sizes(sc.plan, m, attempt);
    if (size) spent += 2 * size->m1 + size->block;
    if (!size || 2 * spent > m) {
      if (stats && attempt == 0) stats->declined = size ? "short" : "schedule";
      return std::nullopt;
    }
    if (stats) {
      stats->m1 = size->m1;
      stats->block = size->block;
    }
    if (!layers) layers = &own.emplace(plan_layers(sc, costs));
    const std::int64_t per_mb = sc.plan.dp * sc.batch.micro;
    Scenario shorter = sc;
    for (auto [ws, mb] : {std::pair<ProgramWorkspace*, int>{&wa, size->m1}, {&wb, size->m1 + size->block}}) {
      shorter.batch.global = mb * per_mb;
      const PipelineSchedule sched = make_schedule(sc.plan.schedule, static_cast<int>(sc.plan.pp),
                                                   static_cast<int>(sc.plan.virtual_stages), mb);
      build_step_program(shorter, costs, g, layers, &sched, *ws);
      replay(ws->program, *ws);
    }
    const Time delta = rb.makespan - ra.makespan;
    if (delta <= 0 || a.stages != b.stages || !same_peaks(ra.stages, rb.stages)) {
      if (stats) stats->declined = "peaks";
      return std::nullopt;
    }
    bool periodic = true;
    for (int s = 0; s < a.stages && periodic; ++s)
      periodic = periodic_stage(a, ra, stage_range(a, s), b, rb, stage_range(b, s), delta);
    if (periodic) break;
    if (stats) stats->declined = "stage";
  }

  const std::int64_t j = (m - size->m1) / size->block;
  const double serial = serial_ns(a) + static_cast<double>(j) * (serial_ns(b) - serial_ns(a));
  const auto tasks = static_cast<std::uint64_t>(linear(static_cast<Time>(a.tasks.size()),
                                                       static_cast<Time>(b.tasks.size()), j));
  require_countable_step(sc, serial, tasks);

  StepPrediction pr;
  pr.step_time = linear(ra.makespan, rb.makespan, j);
  pr.tasks = tasks;
  // The critical stage: the most compute and recompute at m.
  Time most = -1;
  for (int s = 0; s < a.stages; ++s) {
    const Time c = linear(stage_compute_time(a, s), stage_compute_time(b, s), j);
    if (c > most) {
      most = c;
      pr.critical_stage = s;
    }
  }
  if (o.every_stage) {
    for (int s = 0; s < a.stages; ++s) pr.per_stage.push_back(linear(attribute(a, ra, s), attribute(b, rb, s), j));
    pr.breakdown = pr.per_stage[static_cast<std::size_t>(pr.critical_stage)];
  } else {
    pr.breakdown = linear(attribute(a, ra, pr.critical_stage), attribute(b, rb, pr.critical_stage), j);
  }
  // Priced from the extrapolated times, as attribute prices a whole program.
  for (auto& st : pr.per_stage) st.interference = interference_time(a.interference, st);
  pr.breakdown.interference = interference_time(a.interference, pr.breakdown);
  pr.step_time = capped_sum(pr.step_time, pr.breakdown.interference);
  finish_prediction(sc, layers->keeps, pr);
  if (stats) {
    stats->used = true;
    stats->declined = "";
  }
  return ChunkPrediction{std::move(pr), memory_from_peaks(sc, *layers, ra.stages), a.exact};
}

}  // namespace strata::strategies
