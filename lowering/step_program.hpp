#pragma once
// The step program: one training step of every pipeline stage's
// representative rank as typed records, built by one builder (lower.cpp's
// build_step_program) and read by everything that needs the step:
//
//   build_step_program(sc, costs, Layer) ─► to_task_graph ─► sim::Engine / executors
//   build_step_program(sc, costs, Chunk) ─► replay (the in-order recurrence)
//
// Each task is one record — what it does (TaskInfo: kind of work, pass,
// layer or chunk, microbatch, the gradients a bucket holds), the stage and
// lane it runs on, its duration, the buffers it allocates when it starts and
// frees when it ends — and dependencies are pairs of task indices. Task and
// buffer ids ("s0:fwd/L3/mb2") are rendered from the records on demand; no
// code recovers structure from them.
//
// The two granularities are one program: at Chunk granularity a pass of a
// model chunk over one microbatch is one task — the sum of its layers'
// passes and blocking communication, allocating at its start the bytes its
// layers hold at their highest — wherever no other task waits on a layer
// inside it (no ZeRO-3 gathers or reduce-scatters, no weight or activation
// offload, not the chunk's last backward, whose layer ends the gradient
// buckets wait for). Everything else, the end of the step included, is the
// same records at both granularities, so a technique is written once.
//
// Every lane runs its tasks in the order they were emitted and nothing is
// shared between lanes but dependencies and links, so a task starts exactly
// when its lane is free and what it waits for has ended: `replay` computes
// that directly (no strings) for tasks of fixed time, and times the flows in
// time order with an event queue — each alone at its slowest link's rate
// until another meets it on a link, then the flows that meet through
// sim::LinkSharing, max-min fair. It equals sim::Engine on the program's
// task graph to the nanosecond and to the byte (tested).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sim/allocator_mode.hpp"
#include "sim/bandwidth.hpp"
#include "sim/engine.hpp"
#include "sim/event_queue.hpp"
#include "sim/names.hpp"
#include "sim/task_graph.hpp"
#include "lowering/lower.hpp"
#include "lowering/schedule.hpp"

namespace strata::strategies {

enum class Granularity : std::uint8_t { Layer, Chunk };

// What a buffer of the step holds. Static buffers (weights, gradients,
// optimizer state, buffers, workspace: the analytical model's bytes by tag)
// are live from the start; the rest are activations made and consumed by
// tasks. `Working` is a merged backward's highest transient bytes.
enum class BufKind : std::uint8_t {
  Static, Act, ActHost, ActBack, Recomputed, Grad, Core, Head, HeadGrad, Embedding, ActKept, Working
};

struct ProgramBuffer {
  std::int32_t stage = 0;
  BufKind kind = BufKind::Static;
  sim::MemTag tag = sim::MemTag::Activations;
  bool host = false;  // in the stage's host pool (offloaded activations)
  std::int32_t layer = -1;       // −1: none (embedding, head, statics)
  std::int32_t microbatch = -1;  // −1: none (statics)
  std::int32_t chunk = -1;       // merged passes' buffers: their model chunk
  Bytes bytes = 0;
};

// Where a stretch of a task's time goes when nothing else runs on the
// compute lane (lower.hpp's TimeBreakdown, by category).
enum class TimeCat : std::uint8_t { Compute, Recompute, Optimizer, OffloadStall, Comm0 };
inline constexpr int kTimeCats = static_cast<int>(TimeCat::Comm0) + static_cast<int>(kCommKinds);
inline int comm_cat(CommKind k) { return static_cast<int>(TimeCat::Comm0) + static_cast<int>(k); }

// Each stage's links, its rank's both ways: NVLink, the network (NIC), the
// PCIe link of its GPU (to the host, and to the NIC: GPUDirect traffic
// crosses it). Link id = stage · kStageLinks + StageLink.
enum class StageLink : std::uint8_t { NvlinkOut, NvlinkIn, NetworkOut, NetworkIn, PcieOut, PcieIn };
inline constexpr int kStageLinks = 6;

// A task's bandwidth-bound part as a flow (docs/step-time.md, "Shared
// links"): after `latency`, `bytes` across links flow_links[first, first +
// count) at the max-min fair share of each (sim/bandwidth.hpp). Alone it
// runs at its slowest link's rate and takes what its Transfer said: the
// task's duration is that alone time.
struct ProgramFlow {
  Time latency = 0;
  Bytes bytes = 0;
  std::uint32_t first = 0;
  std::uint8_t count = 0;
};

struct ProgramTask {
  sim::TaskKind kind = sim::TaskKind::Compute;
  sim::Phase phase = sim::Phase::None;
  CommKind comm = CommKind::None;  // what a communication task is for
  std::int32_t stage = 0;
  sim::Lane lane = sim::Lane::Compute;
  bool merged = false;  // a whole chunk pass (Chunk granularity)
  std::int32_t flow = -1;  // StepProgram::flows index; −1: all of `duration` is fixed
  Time duration = 0;
  // Buffers: StepProgram::mem[mem, mem + allocs) allocated at the start,
  // the next `frees` freed at the end.
  std::uint32_t mem = 0;
  std::uint16_t allocs = 0, frees = 0;
  // A merged pass: StepProgram::parts[parts, parts + nparts) split its
  // duration by category, in the order its layers ran.
  std::uint32_t parts = 0;
  std::uint16_t nparts = 0;
};
static_assert(sizeof(ProgramTask) == 40, "a task's record stays in 40 bytes: replay reads one per task");

struct ProgramTask;
// The TimeCat index of a task's time when nothing else runs on its stage's
// compute lane.
int time_category(const ProgramTask& t);

struct StepProgram {
  Granularity granularity = Granularity::Layer;
  // False when some merged pass is folded (ZeRO-3 gathers or offload copies
  // inside it): its time is its own layers replayed with every lane idle at
  // its start, its memory the analytical rule's (offloaded bytes leave at
  // once). The layer level and an exact chunk program are equal.
  bool exact = true;
  int stages = 0;
  std::vector<ProgramTask> tasks;
  // What each task does, by task index: at Layer granularity only (ids,
  // executors); the chunk level needs only times and bytes.
  std::vector<TaskInfo> info;
  std::vector<ProgramBuffer> buffers;
  // Buffers that a framework allocates as several tensors (a layer's saved
  // activations, op by op; Layer granularity, the GPU rule): buffer `buffer`
  // is tensors[first, first + count), in allocation order. The others are
  // one tensor each. Read by the caching allocator's replay only.
  struct TensorSplit {
    std::int32_t buffer = 0;
    std::uint32_t first = 0, count = 0;
  };
  std::vector<TensorSplit> splits;
  std::vector<Bytes> tensors;
  std::vector<std::int32_t> mem;                           // buffer indices (see ProgramTask)
  std::vector<std::pair<std::int32_t, std::int32_t>> deps;  // (before, after) task indices
  std::vector<std::pair<std::int32_t, Time>> parts;         // (TimeCat index, duration)
  std::vector<Bytes> gpu_capacity, host_capacity;          // per stage
  std::vector<LinkRates> link_rates;                       // per stage
  std::vector<ProgramFlow> flows;
  std::vector<std::int32_t> flow_links;  // link ids (StageLink)
  LayerPlan layers;  // what each layer keeps for its backward, and where
  // StepCosts::interference_fraction: compute beside a collective is slowed
  // by this fraction of the time both run (attribute).
  double interference = 0;

  // Empty, as a new program, with the vectors' capacity kept (a builder
  // reusing a ProgramWorkspace's program sets the granularity itself).
  void clear() {
    exact = true;
    interference = 0;
    stages = 0;
    tasks.clear();
    info.clear();
    buffers.clear();
    splits.clear();
    tensors.clear();
    mem.clear();
    deps.clear();
    parts.clear();
    gpu_capacity.clear();
    host_capacity.clear();
    link_rates.clear();
    flows.clear();
    flow_links.clear();
    layers = {};
  }

  std::span<const std::int32_t> allocs(const ProgramTask& t) const { return {mem.data() + t.mem, t.allocs}; }
  std::span<const std::int32_t> frees(const ProgramTask& t) const {
    return {mem.data() + t.mem + t.allocs, t.frees};
  }
};

// A link's rate, bytes per nanosecond (0: not modelled).
double link_bytes_per_ns(const StepProgram& p, std::int32_t link);
// The flow of a transfer from stage `from` (to stage `to`: a pipeline send;
// else to itself) added to p, and the task's duration alone. No flow (−1)
// where the transfer has no path, no bandwidth-bound time, or a link of its
// path is not modelled: then the duration is its whole time, fixed.
std::pair<std::int32_t, Time> add_flow(StepProgram& p, const Transfer& x, int from, int to);

// The program's ids, for people and for matching measurements:
// "s<stage>:<what>", e.g. "s0:fwd/L3/mb2", "s1:dp-reduce/bucket4".
std::string task_id(const StepProgram& p, std::size_t task);
std::string buffer_id(const StepProgram& p, std::size_t buffer);
std::string lane_name(int stage, sim::Lane lane);

// The program as the simulator's and executors' task graph: per stage the
// lanes (with their roles), a GPU and a host pool, the buffers and tasks in
// program order (task i of the program is task i of the graph), the
// dependencies.
sim::TaskGraph to_task_graph(const StepProgram& p);
// The pools to_task_graph gives stage s.
inline sim::PoolId gpu_pool_of(int s) { return sim::PoolId{2 * s}; }
inline sim::PoolId host_pool_of(int s) { return sim::PoolId{2 * s + 1}; }
// to_task_graph with the tasks' descriptions beside it (lower.hpp).
LoweredStep lowered_step(const StepProgram& p);

// Every task one after another, plus 1 ns each (double: no overflow): no
// schedule of the program is longer. require_countable_step refuses it at
// kMaxStepTime, so below that every time a replay sums stays in 64 bits.
double serial_ns(const StepProgram& p);

// Each stage's memory at its highest (the engine's PoolUsage figures).
struct StageMemoryPeak {
  Bytes gpu_peak = 0;
  sim::TagBytes gpu_peak_by_tag{};
  Bytes host_peak = 0;
  // The caching allocator replayed over the GPU pool's allocations (the
  // layer level's, memory_from_run); absent elsewhere.
  std::optional<sim::AllocatorReplay> allocator;
};

struct ProgramRun {
  Time makespan = 0;
  // Some flow started on a link another flow was crossing: they shared it
  // (max-min); false: every flow ran alone, at its slowest link's rate.
  bool shared_links = false;
  std::vector<sim::TaskTiming> tasks;  // by task index
  std::vector<StageMemoryPeak> stages;
};

// Times every task (start: its lane free and its dependencies ended) and
// sweeps each pool's allocations and frees (at one instant, frees first).
// Throws Error when the dependencies and lane order have a cycle.
ProgramRun replay(const StepProgram& p);

// Storage for a caller that builds and replays many programs one after
// another (each of the explorer's scoring threads holds one): the program,
// its run and replay's working arrays keep their capacity from one plan to
// the next instead of being allocated and faulted in afresh.
struct ProgramWorkspace {
  StepProgram program;
  ProgramRun run;
  struct MemEvent {
    Time time;
    bool alloc;
    std::int32_t buffer;
  };
  std::vector<std::int32_t> npred, first, succ, last, lane_prev, ready, fill;
  std::vector<std::size_t> at, at_fill;
  // A program with flows: its flows timed in time order (replay).
  sim::EventQueue queue;
  sim::LinkSharing links;
  std::vector<double> capacity;
  // Per task with a flow: alone (its end an event), pending (its bytes'
  // beginning an event) or in the link sharing.
  struct FlowState {
    enum : std::uint8_t { Alone, Pending, Shared } state = Alone;
    std::int32_t id = -1;   // LinkSharing's, when shared
    Time begin = 0, until = 0;  // its bytes' interval; until: its end, or open
    std::uint64_t token = 0;    // its end event, when alone
  };
  std::vector<FlowState> flow_state;
  static constexpr std::size_t kLinkSlots = 8;
  std::vector<std::int32_t> registered;  // kLinkSlots per link
  std::vector<std::uint8_t> registered_count;
  std::vector<std::int32_t> work;
  std::vector<MemEvent> events;
  // A second program and run, for callers that replay two at once
  // (steady_state.hpp); made on first use.
  std::unique_ptr<ProgramWorkspace> second;
};
// replay(p) into w.run, with w's arrays.
void replay(const StepProgram& p, ProgramWorkspace& w);
// The same figures from the engine's replay of to_task_graph(p).
ProgramRun from_engine(const StepProgram& p, const sim::RunResult& run);

// Where one stage's time went: every instant of [0, makespan] goes to what
// the compute lane runs, else to the exposed communication or copy it waits
// for, else to the pipeline bubble.
TimeBreakdown attribute(const StepProgram& p, const ProgramRun& run, int stage);
// The interference line from a breakdown's beside_collectives: `fraction`
// of it, less the exposed data-parallel communication it ate into.
Time interference_time(double fraction, const TimeBreakdown& b);
// The tasks [first, last) of stage s (a stage's tasks are contiguous).
std::pair<std::size_t, std::size_t> stage_tasks(const StepProgram& p, int stage);
// Stage s's compute and recompute time: what attribute gives them, the sum
// of those tasks on its compute lane (one lane runs one task at a time).
Time stage_compute_time(const StepProgram& p, int stage);

// The step's prediction from a replayed program: step time, critical stage
// and its breakdown, FLOPs; with `every_stage` each stage's breakdown too
// (per_stage), else the critical stage (the most compute and recompute) is
// found from the compute lanes' sums and only it is attributed.
StepPrediction prediction(const Scenario& sc, const StepProgram& p, const ProgramRun& run,
                          bool every_stage = true);

// The builder (lower.cpp). `layers`, when given, replaces what plan_layers
// decides for the plan; `schedule`, when given, is make_schedule's for it
// (the explorer shares one among the plans that run it).
StepProgram build_step_program(const Scenario& sc, const StepCosts& costs, Granularity g,
                               const LayerPlan* layers = nullptr, const PipelineSchedule* schedule = nullptr);
// The same, built into w.program (its vectors cleared, their capacity kept).
void build_step_program(const Scenario& sc, const StepCosts& costs, Granularity g, const LayerPlan* layers,
                        const PipelineSchedule* schedule, ProgramWorkspace& w);

}  // namespace strata::strategies

namespace strata {
template <>
struct EnumNames<strategies::Granularity> {
  static constexpr std::array<std::pair<strategies::Granularity, std::string_view>, 2> table{{
      {strategies::Granularity::Layer, "layer"},
      {strategies::Granularity::Chunk, "chunk"},
  }};
};
}  // namespace strata
