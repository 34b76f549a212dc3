#include "strategies/memory_lowering.hpp"

#include <cmath>
#include <string>

#include "sim/engine.hpp"
#include "strategies/schedule.hpp"

namespace strata::strategies {

namespace {

using sim::MemTag;

// Builds one stage's graph: a compute stream running the schedule's steps
// layer by layer. Durations are nominal (forward 1 µs, backward 2 µs,
// recompute 1 µs): on one stream the order, not the time, decides the peak.
class StageLowering {
 public:
  StageLowering(const Scenario& sc, int stage, const StageMemory& statics)
      : sc_(sc),
        stage_(stage),
        chain_(cost::expand(sc.model, expand_options(sc))),
        rule_(ActivationRule::of(sc.plan, chain_)),
        chunks_(chunk_layers(sc.plan, sc.model.layers)) {
    const std::string r = "s" + std::to_string(stage);
    stream_ = g_.add_stream(r + ".compute");
    pool_ = g_.add_pool(r + ".gpu", sc.cluster.gpu.memory_bytes());
    // Static bytes: everything but activations and the allocator reserve.
    for (std::size_t t = 0; t < sim::kMemTagCount; ++t) {
      const auto tag = static_cast<MemTag>(t);
      if (tag == MemTag::Activations || tag == MemTag::AllocatorReserve || statics.bytes[t] == 0)
        continue;
      g_.add_buffer({.id = std::string(enum_name(tag)), .pool = pool_, .bytes = statics.bytes[t],
                     .tag = tag, .live_at_start = true});
    }
    // Layers before each model chunk: global layer indices for labels and ids.
    first_layer_.assign(chunks_.size() + 1, 0);
    for (std::size_t k = 0; k < chunks_.size(); ++k) first_layer_[k + 1] = first_layer_[k] + chunks_[k];
  }

  sim::TaskGraph build() && {
    const auto sched =
        make_schedule(sc_.plan.schedule, static_cast<int>(sc_.plan.pp),
                      static_cast<int>(sc_.plan.virtual_stages),
                      static_cast<int>(microbatches(sc_.plan, sc_.batch)));
    for (const Step& st : sched.stages[static_cast<std::size_t>(stage_)]) {
      const int k = model_chunk(sched, stage_, st.chunk);
      if (st.phase == Phase::Forward)
        forward(k, st.microbatch);
      else
        backward(k, st.microbatch);
    }
    return std::move(g_);
  }

 private:
  bool first_chunk(int k) const { return k == 0; }
  bool last_chunk(int k) const { return k + 1 == static_cast<int>(chunks_.size()); }

  std::string key(const char* what, std::int64_t layer, int mb) const {
    return std::string(what) + "/L" + std::to_string(layer) + "/mb" + std::to_string(mb);
  }

  sim::BufferId buffer(std::string id, Bytes bytes) {
    return g_.add_buffer({.id = std::move(id), .pool = pool_, .bytes = bytes,
                          .tag = MemTag::Activations});
  }

  void task(std::string id, sim::Phase phase, Time duration, std::optional<std::int64_t> layer,
            int mb, std::vector<sim::BufferId> allocs, std::vector<sim::BufferId> frees) {
    sim::Task t;
    t.id = "s" + std::to_string(stage_) + ":" + std::move(id);
    t.kind = sim::TaskKind::Compute;
    t.resources = {stream_};
    t.duration = duration;
    t.allocs = std::move(allocs);
    t.frees = std::move(frees);
    t.label.stage = stage_;
    t.label.microbatch = mb;
    if (layer) t.label.layer = static_cast<int>(*layer);
    t.label.phase = phase;
    g_.add_task(std::move(t));
  }

  // Whether layer i (0-based within a chunk of n) starts a recompute segment.
  bool segment_start(std::int64_t i, std::int64_t n) const { return i % rule_.segment(n) == 0; }

  Bytes stored_bytes(std::int64_t i, std::int64_t n) const {
    switch (rule_.policy) {
      case Recompute::None: return rule_.full;
      case Recompute::Selective: return rule_.selective;
      case Recompute::Full: return rule_.input;
      default: return segment_start(i, n) ? rule_.input : 0;
    }
  }

  void forward(int k, int mb) {
    if (first_chunk(k)) {
      auto a = buffer("act/embedding/mb" + std::to_string(mb), chain_.embedding.saved_bytes());
      task("fwd/embedding/mb" + std::to_string(mb), sim::Phase::Fwd, kMicrosecond, std::nullopt,
           mb, {a}, {});
    }
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t layer = first_layer_[static_cast<std::size_t>(k)] + i;
      std::vector<sim::BufferId> allocs;
      if (const Bytes b = stored_bytes(i, n); b > 0) allocs.push_back(buffer(key("act", layer, mb), b));
      task(key("fwd", layer, mb), sim::Phase::Fwd, kMicrosecond, layer, mb, std::move(allocs), {});
    }
    if (last_chunk(k)) {
      auto a = buffer("act/head/mb" + std::to_string(mb), chain_.head.saved_bytes());
      task("fwd/head/mb" + std::to_string(mb), sim::Phase::Fwd, kMicrosecond, std::nullopt, mb,
           {a}, {});
    }
  }

  void backward(int k, int mb) {
    if (last_chunk(k)) {
      const std::string m = std::to_string(mb);
      const auto grad = buffer("grad/head/mb" + m, chain_.head.max_grad_bytes());
      task("bwd/head/mb" + m, sim::Phase::Bwd, 2 * kMicrosecond, std::nullopt, mb, {grad},
           {grad, g_.buffer("act/head/mb" + m)});
    }
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    const std::int64_t first = first_layer_[static_cast<std::size_t>(k)];
    const Recompute policy = rule_.policy;
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const std::int64_t layer = first + i;
      std::vector<sim::BufferId> allocs, frees;
      if (policy == Recompute::Full ||
          ((policy == Recompute::EveryK || policy == Recompute::Sqrt) &&
           (i == n - 1 || segment_start(i + 1, n)))) {
        // Recompute the segment ending at layer i (one layer for full).
        const std::int64_t start =
            policy == Recompute::Full ? i : i - i % rule_.segment(n);
        std::vector<sim::BufferId> full;
        for (std::int64_t j = start; j <= i; ++j)
          full.push_back(buffer(key("recomputed", first + j, mb), rule_.full));
        task(key("recompute", layer, mb), sim::Phase::Recompute, kMicrosecond, layer, mb,
             std::move(full), {});
      }
      // The gradient flowing through the layer's ops.
      allocs.push_back(buffer(key("grad", layer, mb), rule_.grad));
      frees.push_back(allocs.back());
      if (policy == Recompute::Selective) {
        // The attention core is recomputed inside the layer's backward.
        allocs.push_back(buffer(key("core", layer, mb), rule_.full - rule_.selective));
        frees.push_back(allocs.back());
      }
      if (policy != Recompute::None && policy != Recompute::Selective)
        frees.push_back(g_.buffer(key("recomputed", layer, mb)));
      if (stored_bytes(i, n) > 0) frees.push_back(g_.buffer(key("act", layer, mb)));
      task(key("bwd", layer, mb), sim::Phase::Bwd, 2 * kMicrosecond, layer, mb, std::move(allocs),
           std::move(frees));
    }
    if (first_chunk(k))
      task("bwd/embedding/mb" + std::to_string(mb), sim::Phase::Bwd, 2 * kMicrosecond,
           std::nullopt, mb, {}, {g_.buffer("act/embedding/mb" + std::to_string(mb))});
  }

  const Scenario& sc_;
  int stage_;
  cost::OpChain chain_;
  ActivationRule rule_;
  std::vector<std::int64_t> chunks_;
  std::vector<std::int64_t> first_layer_;
  sim::TaskGraph g_;
  sim::ResourceId stream_;
  sim::PoolId pool_;
};

}  // namespace

sim::TaskGraph lower_stage_memory(const Scenario& sc, int stage, const StageMemory& statics) {
  return StageLowering(sc, stage, statics).build();
}

MemoryEstimate simulate_memory(const Scenario& sc, const MemoryRules& rules) {
  MemoryEstimate est = estimate_memory(sc, rules);
  if (sc.plan.offload.activations) return est;  // copies need the time model
  for (auto& st : est.stages) {
    const sim::TaskGraph g = lower_stage_memory(sc, st.stage, st);
    const sim::RunResult r = sim::simulate(g);
    const sim::PoolUsage& pool = r.pools.front();
    sim::TagBytes bytes = pool.peak_by_tag;
    // The reserve follows the same rule as the analytical model, applied to
    // the timeline's transient bytes at the peak.
    const auto at = [&](MemTag t) { return static_cast<double>(bytes[static_cast<std::size_t>(t)]); };
    const double transient = at(MemTag::Activations) + at(MemTag::CommBuffers) + at(MemTag::Workspace);
    bytes[static_cast<std::size_t>(MemTag::AllocatorReserve)] =
        static_cast<Bytes>(std::llround(rules.allocator_reserve_fraction * transient));
    st.bytes = bytes;
    st.total = 0;
    for (Bytes b : bytes) st.total += b;
    st.activations_stored = 0;  // the timeline does not split stored from working
    st.activations_working = 0;
  }
  est.source = "timeline";
  finish_estimate(est);
  return est;
}

}  // namespace strata::strategies
