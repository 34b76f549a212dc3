#include "strategies/lower.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>

#include "sim/limits.hpp"
#include "strategies/memory.hpp"
#include "strategies/schedule.hpp"
#include "strategies/step_layout.hpp"

namespace strata::strategies {

Time TimeBreakdown::total() const {
  Time t = compute + recompute + bubble + offload_stall + optimizer;
  for (Time c : exposed_comm) t += c;
  return t;
}

double StageGradients::params(const cost::OpChain& chain) const {
  return static_cast<double>(blocks) * static_cast<double>(chain.block.params()) +
         (embedding ? static_cast<double>(chain.embedding.params()) : 0.0) +
         (head ? static_cast<double>(chain.head.params()) : 0.0);
}

GradientExchange compressed_exchange(const Plan& plan, const cost::OpChain& chain,
                                     const StageGradients& stage, const StepCosts& costs) {
  const auto& c = plan.compression;
  const double grad_bytes = std::min(bytes_per_param(plan.optimizer, plan.precision,
                                                     plan.implementation.fp32_grad_accumulation)
                                         .grads,
                                     4.0);
  const double params = stage.params(chain);
  const auto n = static_cast<std::int64_t>(params);
  const std::int64_t dp = plan.dp;
  auto words = [](std::int64_t bits) { return 4.0 * static_cast<double>((bits + 31) / 32); };
  GradientExchange ex;
  ex.encode = ex.decode = costs.elementwise(static_cast<Bytes>(params * (grad_bytes + 4)));
  auto& rounds = ex.rounds;
  switch (c.method) {
    case CompressionMethod::TopK: {
      // Sparse vectors cannot be summed in a ring: every rank gathers every other's.
      const double sent = words(48 * sparse_k(c.ratio, n));
      rounds.push_back({Collective::AllGather, sent * static_cast<double>(dp)});
      ex.decode = costs.elementwise(static_cast<Bytes>(sent * static_cast<double>(dp) + params * grad_bytes));
      break;
    }
    case CompressionMethod::RandomK: {
      // The same indices on every rank: the k values add up in an all-reduce.
      const double sent = grad_bytes * static_cast<double>(sparse_k(c.ratio, n));
      rounds.push_back({Collective::AllReduce, sent});
      ex.decode = costs.elementwise(static_cast<Bytes>(sent + params * grad_bytes));
      break;
    }
    case CompressionMethod::Qsgd: {
      const double sent = 4.0 * static_cast<double>((n + kQsgdBucket - 1) / kQsgdBucket) +
                          words(n * (c.bits + 1));
      rounds.push_back({Collective::AllGather, sent * static_cast<double>(dp)});
      break;
    }
    case CompressionMethod::OneBit: {
      // 1-bit compressed all-reduce: a compressed reduce-scatter, then
      // all-gather; a block per rank: its chunk's scales and sign bits.
      const std::int64_t most = (n + dp - 1) / dp;
      const double block = 4.0 * static_cast<double>((most + kOneBitBucket - 1) / kOneBitBucket) + words(most);
      rounds.push_back({Collective::ReduceScatter, block * static_cast<double>(dp)});
      rounds.push_back({Collective::AllGather, block * static_cast<double>(dp)});
      break;
    }
    case CompressionMethod::PowerSgd: {
      // P = M·Q and Q = Mᵀ·P per matrix, each all-reduced in fp32; vectors
      // travel uncompressed with P.
      double p_elems = 0, q_elems = 0, vectors = 0;
      auto add = [&](const cost::Layer& layer, double copies) {
        for (const auto& op : layer.ops) {
          const double r = static_cast<double>(std::min({c.rank, op.rows, op.cols}));
          p_elems += copies * static_cast<double>(op.matrices * op.rows) * r;
          q_elems += copies * static_cast<double>(op.matrices * op.cols) * r;
          vectors += copies * static_cast<double>(op.vector_params());
        }
      };
      add(chain.block, static_cast<double>(stage.blocks));
      if (stage.embedding) add(chain.embedding, 1);
      if (stage.head) add(chain.head, 1);
      rounds.push_back({Collective::AllReduce, 4 * (p_elems + vectors)});
      rounds.push_back({Collective::AllReduce, 4 * q_elems});
      const double r = static_cast<double>(c.rank);
      ex.encode = costs.gemm(4 * params * r);
      ex.decode = costs.gemm(2 * params * r);
      break;
    }
    case CompressionMethod::None: break;
  }
  return ex;
}

namespace {

using sim::TaskId;
using sim::TaskKind;

constexpr std::int32_t kNone = -1;

class StepLowering : StepLayout {
 public:
  StepLowering(const Scenario& sc, const StepCosts& costs)
      : StepLayout(sc), sc_(sc), plan_(sc.plan), costs_(costs), statics_(estimate_memory(sc)) {
    const std::size_t slots = chunks_.size() * static_cast<std::size_t>(m_);
    fwd_first_.assign(slots, kNone);
    bwd_first_.assign(slots, kNone);
    fwd_send_.assign(slots, kNone);
    bwd_send_.assign(slots, kNone);
  }

  LoweredStep build() && {
    const auto sched = make_schedule(plan_.schedule, p_, v_, m_);
    // About six tasks and four buffers per layer and microbatch.
    const auto layer_steps = static_cast<std::size_t>(sc_.model.layers) * static_cast<std::size_t>(m_);
    g_.reserve(6 * layer_steps + 64 * static_cast<std::size_t>(p_), 4 * layer_steps);
    out_.comm_kind.reserve(6 * layer_steps);
    out_.info.reserve(6 * layer_steps);
    for (int s = 0; s < p_; ++s) lower_stage(sched, s);
    // Pipeline dependencies: a chunk's forward waits for the previous
    // chunk's activations, its backward for the next chunk's gradients.
    const int chunks = static_cast<int>(chunks_.size());
    for (int k = 0; k < chunks; ++k)
      for (int mb = 0; mb < m_; ++mb) {
        if (k > 0) dep(fwd_send_[slot(k - 1, mb)], fwd_first_[slot(k, mb)]);
        if (k + 1 < chunks) dep(bwd_send_[slot(k + 1, mb)], bwd_first_[slot(k, mb)]);
      }
    out_.stages = p_;
    out_.graph = std::move(g_);
    return std::move(out_);
  }

 private:
  struct StageRes {
    sim::ResourceId compute, comm, p2p, d2h, h2d, cpu;
  };

  std::size_t slot(int k, int mb) const {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(m_) + static_cast<std::size_t>(mb);
  }
  void dep(std::int32_t before, std::int32_t after) {
    if (before != kNone && after != kNone) g_.add_dep(TaskId{before}, TaskId{after});
  }

  // Buffers a task allocates when it starts and frees when it ends.
  struct Mem {
    std::vector<sim::BufferId> allocs, frees;
  };

  TaskId task(std::string id, TaskKind kind, sim::ResourceId on, Time duration, sim::Phase phase,
              CommKind comm, std::optional<std::int64_t> layer, std::optional<int> mb,
              Mem mem = {}, TaskInfo info = {}) {
    sim::Task t;
    t.allocs = std::move(mem.allocs);
    t.frees = std::move(mem.frees);
    t.id = "s" + std::to_string(stage_) + ":" + std::move(id);
    t.kind = kind;
    t.resources = {on};
    t.duration = std::max<Time>(0, duration);
    t.label.stage = stage_;
    t.label.phase = phase;
    if (layer) t.label.layer = static_cast<int>(*layer);
    if (mb) t.label.microbatch = *mb;
    const TaskId id_ = g_.add_task(std::move(t));
    out_.comm_kind.push_back(comm);
    if (info.chunk < 0) info.chunk = chunk_;
    out_.info.push_back(std::move(info));
    return id_;
  }
  // A task on the compute stream; remembers the first of the current step.
  TaskId compute(std::string id, Time d, sim::Phase phase, std::optional<std::int64_t> layer,
                 int mb, CommKind comm = CommKind::None, Mem mem = {}, TaskInfo info = {}) {
    const TaskId t = task(std::move(id), comm == CommKind::None ? TaskKind::Compute : TaskKind::Collective,
                          r_.compute, d, phase, comm, layer, mb, std::move(mem), std::move(info));
    if (step_first_ == kNone) step_first_ = t.index;
    last_compute_ = t.index;
    return t;
  }

  static TaskInfo info(TaskOp op, Part part, std::int64_t layer = -1, int mb = -1) {
    TaskInfo i;
    i.op = op;
    i.part = part;
    i.layer = static_cast<std::int32_t>(layer);
    i.microbatch = mb;
    return i;
  }

  static std::string key(const char* what, std::int64_t layer, int mb) {
    return std::string(what) + "/L" + std::to_string(layer) + "/mb" + std::to_string(mb);
  }

  // Activation buffers of this stage, by kind, layer (−1 for the embedding
  // and head) and microbatch; ids are per stage: "s3:act/L7/mb2".
  enum class Buf : std::uint8_t { Act, ActHost, ActBack, Recomputed, Grad, Core, Head, HeadGrad, Embedding };
  static constexpr const char* kBufName[] = {"act",  "act-host", "act-back", "recomputed", "grad",
                                             "core", "act/head", "grad/head", "act/embedding"};
  static std::uint64_t code(Buf b, std::int64_t layer, int mb) {
    return (static_cast<std::uint64_t>(b) << 56) | (static_cast<std::uint64_t>(layer + 1) << 28) |
           static_cast<std::uint64_t>(mb);
  }
  sim::BufferId buffer(Buf kind, std::int64_t layer, int mb, Bytes bytes, bool host = false) {
    const std::string name = layer >= 0 ? key(kBufName[static_cast<int>(kind)], layer, mb)
                                        : std::string(kBufName[static_cast<int>(kind)]) + "/mb" +
                                              std::to_string(mb);
    const sim::BufferId id = g_.add_buffer({.id = "s" + std::to_string(stage_) + ":" + name,
                                            .pool = host ? host_pool_ : gpu_pool_,
                                            .bytes = bytes,
                                            .tag = sim::MemTag::Activations});
    buffers_[code(kind, layer, mb)] = id;
    return id;
  }
  sim::BufferId existing(Buf kind, std::int64_t layer, int mb) const {
    return buffers_.at(code(kind, layer, mb));
  }

  // Blocking tensor-, context- and expert-parallel communication of a layer.
  void layer_comm(std::int64_t layer, int mb, Pass pass) {
    const sim::Phase ph = pass == Pass::Backward ? sim::Phase::Bwd
                          : pass == Pass::Forward ? sim::Phase::Fwd
                                                  : sim::Phase::Recompute;
    const char* tag = pass == Pass::Backward ? "bwd" : pass == Pass::Forward ? "fwd" : "re";
    auto one = [&](CommKind kind, bool on, const char* name) {
      if (!on) return;
      const Time d = costs_.layer_comm(kind, pass == Pass::Recompute ? Pass::Forward : pass);
      if (d <= 0) return;
      TaskInfo i = info(TaskOp::LayerComm, Part::Layer, layer, mb);
      i.pass = pass;
      compute(std::string(name) + "-" + tag + key("", layer, mb), d, ph, layer, mb, kind, {},
              std::move(i));
    };
    one(CommKind::TP, plan_.tp > 1, "tp");
    one(CommKind::CP, plan_.cp > 1, "cp");
    one(CommKind::EP, plan_.ep > 1, "ep");
  }

  void forward(int k, int mb) {
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    const std::int64_t first = first_layer_[static_cast<std::size_t>(k)];
    const std::string m = std::to_string(mb);
    if (k == 0)
      compute("fwd/embedding/mb" + m, costs_.layer(chain_.embedding, Pass::Forward),
              sim::Phase::Fwd, std::nullopt, mb, CommKind::None,
              {{buffer(Buf::Embedding, -1, mb, chain_.embedding.saved_bytes())}, {}},
              info(TaskOp::Forward, Part::Embedding, -1, mb));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t layer = first + i;
      std::int32_t gather = kNone, fetch = kNone;
      if (zero3()) gather = param_gather(layer, mb, "fwd");
      if (plan_.offload.weights) fetch = weight_fetch(layer, mb, "fwd");
      const Bytes stored = layer_stored(i, n);
      Mem mem;
      if (stored > 0) mem.allocs.push_back(buffer(Buf::Act, layer, mb, stored));
      const TaskId f = compute(key("fwd", layer, mb), costs_.layer(chain_.block, Pass::Forward),
                               sim::Phase::Fwd, layer, mb, CommKind::None, std::move(mem),
                               info(TaskOp::Forward, Part::Layer, layer, mb));
      dep(gather, f.index);
      dep(fetch, f.index);
      layer_comm(layer, mb, Pass::Forward);
      if (plan_.offload.activations && stored > 0) {
        // The saved activations move to the host pool once the layer is done.
        const TaskId c = task(key("offload", layer, mb), TaskKind::Copy, r_.d2h,
                              costs_.copy(stored, CopyDir::ToHost), sim::Phase::None, CommKind::None,
                              layer, mb,
                              {{buffer(Buf::ActHost, layer, mb, stored, true)},
                               {existing(Buf::Act, layer, mb)}},
                              info(TaskOp::Offload, Part::Layer, layer, mb));
        dep(last_compute_, c.index);
        offloaded_[code(Buf::ActHost, layer, mb)] = c.index;
      }
    }
    if (k + 1 == static_cast<int>(chunks_.size()))
      compute("fwd/head/mb" + m, costs_.layer(chain_.head, Pass::Forward), sim::Phase::Fwd,
              std::nullopt, mb, CommKind::None,
              {{buffer(Buf::Head, -1, mb, chain_.head.saved_bytes())}, {}},
              info(TaskOp::Forward, Part::Head, -1, mb));
  }

  void backward(int k, int mb) {
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    const std::int64_t first = first_layer_[static_cast<std::size_t>(k)];
    const std::string m = std::to_string(mb);
    if (k + 1 == static_cast<int>(chunks_.size())) {
      // The loss's backward holds the logits' gradient and frees the head's
      // saved bytes.
      const auto grad = buffer(Buf::HeadGrad, -1, mb, chain_.head.max_grad_bytes());
      compute("bwd/head/mb" + m, costs_.layer(chain_.head, Pass::Backward), sim::Phase::Bwd,
              std::nullopt, mb, CommKind::None, {{grad}, {grad, existing(Buf::Head, -1, mb)}},
              info(TaskOp::Backward, Part::Head, -1, mb));
      head_bwd_ = last_compute_;
    }
    const Recompute policy = rule_.policy;
    std::vector<std::int32_t> bwd_of(static_cast<std::size_t>(n), kNone);
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const std::int64_t layer = first + i;
      const Bytes stored = layer_stored(i, n);
      // What the layer's backward waits for off the compute stream.
      std::vector<std::int32_t> ready;
      Buf saved = Buf::Act;  // where its saved bytes are on the GPU
      if (plan_.offload.activations && stored > 0) {
        ready.push_back(prefetch_activations(layer, mb, i, n, stored, bwd_of));
        saved = Buf::ActBack;
      }
      if (zero3()) ready.push_back(param_gather(layer, mb, "bwd"));
      if (plan_.offload.weights) ready.push_back(weight_fetch(layer, mb, "bwd"));
      auto wait = [&](TaskId t) {
        for (auto r : ready) dep(r, t.index);
      };
      const bool segment_end = i == n - 1 || (i + 1) % rule_.segment(n) == 0;
      const bool segmented = policy == Recompute::EveryK || policy == Recompute::Sqrt;
      const bool recomputes = policy == Recompute::Full || segmented;
      if (policy == Recompute::Full || (segmented && segment_end)) {
        // Recompute the segment ending at layer i (one layer for full): its
        // layers' saved bytes live until their backward.
        const std::int64_t start = policy == Recompute::Full ? i : i - i % rule_.segment(n);
        for (std::int64_t j = start; j <= i; ++j) {
          const TaskId r = compute(key("recompute", first + j, mb),
                                   costs_.layer(chain_.block, Pass::Recompute), sim::Phase::Recompute,
                                   first + j, mb, CommKind::None,
                                   {{buffer(Buf::Recomputed, first + j, mb, rule_.full)}, {}},
                                   info(TaskOp::Recompute, Part::Layer, first + j, mb));
          wait(r);
          layer_comm(first + j, mb, Pass::Recompute);
        }
      } else if (policy == Recompute::Selective && rule_.full != rule_.selective) {
        TaskInfo core = info(TaskOp::Recompute, Part::Layer, layer, mb);
        core.core_only = true;
        const TaskId r = compute(key("recompute", layer, mb),
                                 costs_.layer(chain_.block, Pass::Recompute, true),
                                 sim::Phase::Recompute, layer, mb, CommKind::None, {},
                                 std::move(core));
        wait(r);
      }
      Mem mem;
      // The gradient flowing through the layer's ops, and (selective) the
      // attention core recomputed for it.
      mem.allocs.push_back(buffer(Buf::Grad, layer, mb, rule_.grad));
      if (policy == Recompute::Selective)
        mem.allocs.push_back(buffer(Buf::Core, layer, mb, rule_.full - rule_.selective));
      mem.frees = mem.allocs;
      if (recomputes) mem.frees.push_back(existing(Buf::Recomputed, layer, mb));
      if (stored > 0) mem.frees.push_back(existing(saved, layer, mb));
      const TaskId b = compute(key("bwd", layer, mb), costs_.layer(chain_.block, Pass::Backward),
                               sim::Phase::Bwd, layer, mb, CommKind::None, std::move(mem),
                               info(TaskOp::Backward, Part::Layer, layer, mb));
      wait(b);
      bwd_of[static_cast<std::size_t>(i)] = b.index;
      layer_comm(layer, mb, Pass::Backward);
      last_bwd_of_layer_[static_cast<std::size_t>(layer)] = last_compute_;
      if (zero3()) {
        // ZeRO-3 (DeepSpeed, PyTorch FSDP) reduce-scatters each layer's
        // gradients after every microbatch's backward, overlapped with the
        // next layer's backward.
        const Bytes bytes = static_cast<Bytes>(static_cast<double>(chain_.block.params()) *
                                               std::min(per_.grads, 4.0));
        TaskInfo ri = info(TaskOp::Zero3Reduce, Part::Layer, layer, mb);
        ri.layers = {static_cast<std::int32_t>(layer)};
        const TaskId rs = task(key("zero3-reduce", layer, mb), TaskKind::Collective, r_.comm,
                               costs_.collective(Collective::ReduceScatter, Group::DP, bytes),
                               sim::Phase::Comm, CommKind::DP, layer, mb, {}, std::move(ri));
        dep(last_compute_, rs.index);
        zero3_reduced_.push_back(rs.index);
      }
    }
    if (k == 0) {
      compute("bwd/embedding/mb" + m, costs_.layer(chain_.embedding, Pass::Backward),
              sim::Phase::Bwd, std::nullopt, mb, CommKind::None,
              {{}, {existing(Buf::Embedding, -1, mb)}},
              info(TaskOp::Backward, Part::Embedding, -1, mb));
      embedding_bwd_ = last_compute_;
    }
  }

  bool zero3() const { return plan_.zero >= 3 && plan_.dp > 1; }

  // ZeRO-3: all-gather a layer's parameters on the communication stream,
  // one layer ahead of its use (prefetch depth 1).
  std::int32_t param_gather(std::int64_t layer, int mb, const char* pass) {
    const Bytes bytes = static_cast<Bytes>(static_cast<double>(chain_.block.params()) * per_.weights);
    TaskInfo gi = info(TaskOp::Zero3Gather, Part::Layer, layer, mb);
    gi.pass = pass[0] == 'f' ? Pass::Forward : Pass::Backward;
    const TaskId g = task(key((std::string("zero3-gather-") + pass).c_str(), layer, mb),
                          TaskKind::Collective, r_.comm,
                          costs_.collective(Collective::AllGather, Group::DP, bytes), sim::Phase::Comm,
                          CommKind::DP, layer, mb, {}, std::move(gi));
    // It may start once the compute stream reached the layer before the previous one.
    if (recent_.size() >= 2) dep(recent_[recent_.size() - 2], g.index);
    recent_.push_back(last_compute_);
    return g.index;
  }

  // Weight offload: bring a layer's weights to the device ahead of use.
  std::int32_t weight_fetch(std::int64_t layer, int mb, const char* pass) {
    const Bytes bytes = static_cast<Bytes>(static_cast<double>(chain_.block.params()) * per_.weights);
    TaskInfo fi = info(TaskOp::WeightFetch, Part::Layer, layer, mb);
    fi.pass = pass[0] == 'f' ? Pass::Forward : Pass::Backward;
    const TaskId c = task(key((std::string("fetch-weights-") + pass).c_str(), layer, mb),
                          TaskKind::Copy, r_.h2d, costs_.copy(bytes, CopyDir::ToDevice),
                          sim::Phase::None, CommKind::None, layer, mb, {}, std::move(fi));
    const std::size_t depth = static_cast<std::size_t>(plan_.offload.prefetch_depth);
    if (recent_fetch_.size() > depth) dep(recent_fetch_[recent_fetch_.size() - 1 - depth], c.index);
    recent_fetch_.push_back(last_compute_);
    return c.index;
  }

  // Activation offload: bring layer i's saved activations back before its
  // backward, prefetch_depth layers ahead.
  std::int32_t prefetch_activations(std::int64_t layer, int mb, std::int64_t i, std::int64_t n,
                                    Bytes stored, const std::vector<std::int32_t>& bwd_of) {
    const TaskId c = task(key("prefetch", layer, mb), TaskKind::Copy, r_.h2d,
                          costs_.copy(stored, CopyDir::ToDevice), sim::Phase::None, CommKind::None,
                          layer, mb,
                          {{buffer(Buf::ActBack, layer, mb, stored)},
                           {existing(Buf::ActHost, layer, mb)}},
                          info(TaskOp::Prefetch, Part::Layer, layer, mb));
    dep(offloaded_.at(code(Buf::ActHost, layer, mb)), c.index);
    const std::int64_t ahead = i + 1 + plan_.offload.prefetch_depth;
    if (ahead < n) dep(bwd_of[static_cast<std::size_t>(ahead)], c.index);
    return c.index;
  }

  void lower_stage(const PipelineSchedule& sched, int s) {
    stage_ = s;
    const std::string n = "s" + std::to_string(s);
    r_.compute = g_.add_stream(n + ".compute");
    r_.comm = g_.add_stream(n + ".comm");
    r_.p2p = g_.add_stream(n + ".p2p");
    r_.d2h = g_.add_copy_engine(n + ".d2h");
    r_.h2d = g_.add_copy_engine(n + ".h2d");
    r_.cpu = g_.add_worker_pool(n + ".cpu", 1);
    // Memory: the GPU pool holds this stage's static bytes from the start
    // (weights, gradients, optimizer state, buffers, workspace, runtime:
    // the analytical model's) and the activations the tasks allocate; the
    // host pool the offloaded activations.
    gpu_pool_ = g_.add_pool(n + ".gpu", sc_.cluster.gpu.memory_bytes());
    host_pool_ = g_.add_pool(n + ".host", statics_.host_capacity_per_node /
                                              std::max<std::int64_t>(1, sc_.cluster.node.gpus_per_node));
    const StageMemory& st = statics_.stages[static_cast<std::size_t>(s)];
    for (std::size_t t = 0; t < sim::kMemTagCount; ++t) {
      const auto tag = static_cast<sim::MemTag>(t);
      if (tag == sim::MemTag::Activations || tag == sim::MemTag::AllocatorReserve ||
          st.bytes[t] == 0)
        continue;
      g_.add_buffer({.id = n + ":" + std::string(enum_name(tag)), .pool = gpu_pool_,
                     .bytes = st.bytes[t], .tag = tag, .live_at_start = true});
    }
    last_bwd_of_layer_.assign(static_cast<std::size_t>(sc_.model.layers), kNone);
    embedding_bwd_ = head_bwd_ = kNone;
    last_compute_ = kNone;
    pending_send_ = kNone;
    recent_.clear();
    recent_fetch_.clear();
    zero3_reduced_.clear();
    offloaded_.clear();
    buffers_.clear();
    const int chunks = static_cast<int>(chunks_.size());
    const Bytes p2p_bytes = StepLayout::p2p_bytes(sc_);
    chunk_ = -1;
    if (const Time t = costs_.overhead_per_step(); t > 0)
      compute("framework/step", t, sim::Phase::None, std::nullopt, 0);
    for (const Step& st : sched.stages[static_cast<std::size_t>(s)]) {
      const int k = model_chunk(sched, s, st.chunk);
      chunk_ = k;
      step_first_ = kNone;
      // Without p2p overlap (Megatron-LM's default) a stage waits for its
      // last send before its next step.
      const std::int32_t blocking_send = plan_.implementation.overlap_p2p ? kNone : pending_send_;
      pending_send_ = kNone;
      if (const Time t = costs_.overhead_per_microbatch(); t > 0)
        compute(std::string(st.phase == Phase::Forward ? "framework/fwd" : "framework/bwd") +
                    "/c" + std::to_string(k) + "/mb" + std::to_string(st.microbatch),
                t, sim::Phase::None, std::nullopt, st.microbatch);
      const bool fwd = st.phase == Phase::Forward;
      const std::size_t at = slot(k, st.microbatch);
      if (fwd)
        forward(k, st.microbatch);
      else
        backward(k, st.microbatch);
      dep(blocking_send, step_first_);
      (fwd ? fwd_first_ : bwd_first_)[at] = step_first_;
      // Activations go to the next chunk, gradients to the previous one.
      if (fwd ? k + 1 < chunks : k > 0) {
        const TaskId t = task(std::string(fwd ? "send-act" : "send-grad") + "/c" + std::to_string(k) +
                                  "/mb" + std::to_string(st.microbatch),
                              TaskKind::P2PSend, r_.p2p, costs_.p2p(p2p_bytes), sim::Phase::Comm,
                              CommKind::PP, std::nullopt, st.microbatch, {},
                              info(fwd ? TaskOp::SendActivation : TaskOp::SendGradient, Part::None,
                                   -1, st.microbatch));
        dep(last_compute_, t.index);
        (fwd ? fwd_send_ : bwd_send_)[at] = t.index;
        pending_send_ = t.index;
      }
    }
    chunk_ = -1;
    reduce_and_step();
  }

  // Gradient reduction over dp (bucketed, overlapped with backward when the
  // plan says so), optional compression, the optimizer step and, with ZeRO,
  // the all-gather of updated parameters.
  void reduce_and_step() {
    const int s = stage_;
    std::int64_t layers = 0;
    std::vector<std::int64_t> mine;  // this stage's layers, in backward order
    for (int k = static_cast<int>(chunks_.size()) - 1; k >= 0; --k) {
      if (k % p_ != s) continue;
      for (std::int64_t l = first_layer_[static_cast<std::size_t>(k) + 1] - 1;
           l >= first_layer_[static_cast<std::size_t>(k)]; --l)
        mine.push_back(l);
      layers += chunks_[static_cast<std::size_t>(k)];
    }
    const StageGradients stage{layers, s == 0, s == p_ - 1};
    const double params = stage.params(chain_);
    const std::int32_t end_of_backward = last_compute_;
    std::vector<std::int32_t> reduced;  // what the optimizer waits for
    const bool dp = plan_.dp > 1;
    const auto method = plan_.compression.method;
    if (dp && method != CompressionMethod::None) {
      compress_and_reduce(stage, end_of_backward, reduced);
    } else if (zero3()) {
      // Reduced layer by layer during backward; the embedding and head here.
      reduced = zero3_reduced_;
      const double other = (s == 0 ? static_cast<double>(chain_.embedding.params()) : 0.0) +
                           (s == p_ - 1 ? static_cast<double>(chain_.head.params()) : 0.0);
      if (other > 0) {
        TaskInfo i = info(TaskOp::Zero3Reduce, Part::None);
        i.embedding = s == 0;
        i.head = s == p_ - 1;
        const TaskId t = task("zero3-reduce/embedding-head", TaskKind::Collective, r_.comm,
                              costs_.collective(Collective::ReduceScatter, Group::DP,
                                                static_cast<Bytes>(other * std::min(per_.grads, 4.0))),
                              sim::Phase::Comm, CommKind::DP, std::nullopt, std::nullopt, {},
                              std::move(i));
        dep(end_of_backward, t.index);
        reduced.push_back(t.index);
      }
    } else if (dp || plan_.cp > 1) {
      // Buckets of about 25 MiB of gradients, filled in backward order
      // (reduced over dp × cp: each context-parallel rank saw its tokens).
      const double grad_bytes = std::min(per_.grads, 4.0);  // the reduced (fp32 or 16-bit) copy
      const double layer_bytes = static_cast<double>(chain_.block.params()) * grad_bytes;
      const double bucket = static_cast<double>(MemoryRules{}.grad_bucket_bytes);
      // A parameter server takes pushed gradients per bucket and serves the
      // updated weights after its step; all-reduce sums them among workers.
      const bool ps = plan_.dp_topology == DpTopology::ParameterServer;
      const Collective op = ps                ? Collective::SendRecv
                            : plan_.zero == 0 ? Collective::AllReduce
                                              : Collective::ReduceScatter;
      double fill = 0;
      std::int32_t last_dep = kNone;
      int bucket_index = 0;
      TaskInfo contents = info(ps ? TaskOp::PsPush : TaskOp::DpReduce, Part::None);
      auto flush = [&](double bytes, std::int32_t after) {
        const TaskId t = task(std::string(ps ? "ps-push" : "dp-reduce") + "/bucket" + std::to_string(bucket_index++),
                              TaskKind::Collective, r_.comm,
                              costs_.collective(op, Group::DP, static_cast<Bytes>(bytes)),
                              sim::Phase::Comm, CommKind::DP, std::nullopt, std::nullopt, {},
                              std::exchange(contents, info(contents.op, Part::None)));
        dep(plan_.implementation.overlap_grad_reduce ? after : end_of_backward, t.index);
        reduced.push_back(t.index);
      };
      if (s == p_ - 1 && chain_.head.params() > 0) {
        contents.head = true;
        flush(static_cast<double>(chain_.head.params()) * grad_bytes, head_bwd_);
      }
      for (std::int64_t l : mine) {
        fill += layer_bytes;
        contents.layers.push_back(static_cast<std::int32_t>(l));
        last_dep = last_bwd_of_layer_[static_cast<std::size_t>(l)];
        if (fill >= bucket) {
          flush(fill, last_dep);
          fill = 0;
        }
      }
      if (s == 0) {
        contents.embedding = true;
        fill += static_cast<double>(chain_.embedding.params()) * grad_bytes;
        last_dep = embedding_bwd_;
      }
      if (fill > 0) flush(fill, last_dep);
    }
    // Tied embeddings across the pipeline: first and last stage all-reduce
    // the word embedding's gradient.
    if (p_ > 1 && sc_.model.tied_embeddings && (s == 0 || s == p_ - 1)) {
      const double bytes = static_cast<double>(chain_.embedding.ops.front().params) * per_.grads;
      const TaskId t = task("embedding-tie", TaskKind::Collective, r_.comm,
                            costs_.collective(Collective::AllReduce, Group::EmbeddingTie,
                                              static_cast<Bytes>(bytes)),
                            sim::Phase::Comm, CommKind::PP, std::nullopt, std::nullopt, {},
                            [] {
                              TaskInfo i = info(TaskOp::EmbeddingTie, Part::Embedding);
                              i.embedding = true;
                              return i;
                            }());
      dep(end_of_backward, t.index);
      reduced.push_back(t.index);
    }
    const double shard = plan_.zero >= 1 ? static_cast<double>(plan_.dp) : 1.0;
    const double local = params / shard;
    const bool on_host = plan_.offload.optimizer != OffloadTarget::None;
    std::int32_t stepped;
    if (on_host) {
      // ZeRO-Offload: gradients to the host, the step on the CPU, updated
      // 16-bit weights back.
      const TaskId down = task("grads-to-host", TaskKind::Copy, r_.d2h,
                               costs_.copy(static_cast<Bytes>(local * 4), CopyDir::ToHost),
                               sim::Phase::Comm, CommKind::Offload, std::nullopt, std::nullopt, {},
                               info(TaskOp::GradsToHost, Part::None));
      dep(end_of_backward, down.index);
      for (auto r : reduced) dep(r, down.index);
      std::int32_t before_step = down.index;
      if (plan_.offload.optimizer == OffloadTarget::Nvme) {
        const Bytes states = static_cast<Bytes>(local * per_.optimizer);
        const TaskId rd = task("states-from-nvme", TaskKind::Host, r_.cpu,
                               costs_.copy(states, CopyDir::NvmeRead), sim::Phase::Comm,
                               CommKind::Offload, std::nullopt, std::nullopt, {},
                               info(TaskOp::StatesFromNvme, Part::None));
        dep(down.index, rd.index);
        before_step = rd.index;
      }
      const TaskId step = task("optimizer-step", TaskKind::Host, r_.cpu,
                               costs_.optimizer_step(local, true), sim::Phase::Optim, CommKind::None,
                               std::nullopt, std::nullopt, {}, info(TaskOp::OptimizerStep, Part::None));
      dep(before_step, step.index);
      std::int32_t after_step = step.index;
      if (plan_.offload.optimizer == OffloadTarget::Nvme) {
        const TaskId wr = task("states-to-nvme", TaskKind::Host, r_.cpu,
                               costs_.copy(static_cast<Bytes>(local * per_.optimizer), CopyDir::NvmeWrite),
                               sim::Phase::Comm, CommKind::Offload, std::nullopt, std::nullopt, {},
                               info(TaskOp::StatesToNvme, Part::None));
        dep(step.index, wr.index);
      }
      const TaskId up = task("weights-to-device", TaskKind::Copy, r_.h2d,
                             costs_.copy(static_cast<Bytes>(local * per_.weights), CopyDir::ToDevice),
                             sim::Phase::Comm, CommKind::Offload, std::nullopt, std::nullopt, {},
                             info(TaskOp::WeightsToDevice, Part::None));
      dep(after_step, up.index);
      stepped = up.index;
    } else {
      const TaskId step = task("optimizer-step", TaskKind::Compute, r_.compute,
                               costs_.optimizer_step(local, false), sim::Phase::Optim, CommKind::None,
                               std::nullopt, std::nullopt, {}, info(TaskOp::OptimizerStep, Part::None));
      for (auto r : reduced) dep(r, step.index);
      stepped = step.index;
    }
    if (dp && plan_.dp_topology == DpTopology::ParameterServer) {
      const TaskId pull = task("ps-pull-weights", TaskKind::Collective, r_.comm,
                               costs_.collective(Collective::SendRecv, Group::DP,
                                                 static_cast<Bytes>(params * per_.weights)),
                               sim::Phase::Comm, CommKind::DP, std::nullopt, std::nullopt, {},
                               info(TaskOp::PsPull, Part::None));
      dep(stepped, pull.index);
    }
    if (dp && plan_.zero >= 1 && plan_.zero <= 2) {
      // The distributed optimizer's all-gather of updated weights.
      const TaskId ag = task("dp-gather-weights", TaskKind::Collective, r_.comm,
                             costs_.collective(Collective::AllGather, Group::DP,
                                               static_cast<Bytes>(params * per_.weights)),
                             sim::Phase::Comm, CommKind::DP, std::nullopt, std::nullopt, {},
                             info(TaskOp::GatherWeights, Part::None));
      dep(stepped, ag.index);
    }
  }

  // Compressed gradient exchange: encode on the compute stream, the
  // collective the method needs, decode.
  void compress_and_reduce(const StageGradients& stage, std::int32_t after,
                           std::vector<std::int32_t>& reduced) {
    const GradientExchange ex = compressed_exchange(plan_, chain_, stage, costs_);
    const Time encode = ex.encode, decode = ex.decode;
    const auto& rounds = ex.rounds;
    const TaskId enc = task("compress-encode", TaskKind::Compute, r_.compute, encode,
                            sim::Phase::Comm, CommKind::None, std::nullopt, std::nullopt, {},
                            info(TaskOp::CompressEncode, Part::None));
    dep(after, enc.index);
    std::int32_t prev = enc.index;
    int i = 0;
    for (const auto& [op, bytes] : rounds) {
      TaskInfo ri = info(TaskOp::CompressRound, Part::None);
      ri.round = i;
      const TaskId t = task("dp-compressed/round" + std::to_string(i++), TaskKind::Collective,
                            r_.comm, costs_.collective(op, Group::DP, static_cast<Bytes>(bytes)),
                            sim::Phase::Comm, CommKind::DP, std::nullopt, std::nullopt, {},
                            std::move(ri));
      dep(prev, t.index);
      prev = t.index;
    }
    const TaskId dec = task("compress-decode", TaskKind::Compute, r_.compute, decode,
                            sim::Phase::Comm, CommKind::None, std::nullopt, std::nullopt, {},
                            info(TaskOp::CompressDecode, Part::None));
    dep(prev, dec.index);
    reduced.push_back(dec.index);
  }

  const Scenario& sc_;
  const Plan& plan_;
  const StepCosts& costs_;
  sim::TaskGraph g_;
  LoweredStep out_;
  MemoryEstimate statics_;  // the analytical model's static bytes per stage
  // Per stage state.
  int stage_ = 0;
  int chunk_ = -1;  // model chunk of the schedule step being lowered, −1 outside one
  sim::PoolId gpu_pool_, host_pool_;
  StageRes r_{};
  std::int32_t step_first_ = kNone;
  std::int32_t pending_send_ = kNone;
  std::int32_t last_compute_ = kNone;
  std::vector<std::int32_t> last_bwd_of_layer_;
  std::int32_t embedding_bwd_ = kNone, head_bwd_ = kNone;
  std::vector<std::int32_t> recent_, recent_fetch_, zero3_reduced_;
  std::unordered_map<std::uint64_t, std::int32_t> offloaded_;  // offload copy by buffer code
  std::unordered_map<std::uint64_t, sim::BufferId> buffers_;
  // Cross-stage: first compute task and send of each (model chunk, microbatch).
  std::vector<std::int32_t> fwd_first_, bwd_first_, fwd_send_, bwd_send_;
};

}  // namespace

LoweredStep lower_step(const Scenario& sc, const StepCosts& costs) {
  return StepLowering(sc, costs).build();
}

namespace {

// Categories of a stage's time, in the order they win a tie when nothing
// runs on the compute stream.
enum Cat : int { kCompute, kRecompute, kOptimizer, kOffloadStall, kComm0 };
constexpr int kCats = kComm0 + static_cast<int>(kCommKinds);

int category(const sim::Task& t, CommKind kind, bool on_compute) {
  if (t.label.phase == sim::Phase::Optim) return kOptimizer;
  if (kind != CommKind::None) return kComm0 + static_cast<int>(kind);
  if (t.kind == sim::TaskKind::Copy) return kOffloadStall;
  if (t.label.phase == sim::Phase::Recompute) return kRecompute;
  if (t.label.phase == sim::Phase::Comm) return kComm0 + static_cast<int>(CommKind::DP);  // compression
  return on_compute ? kCompute : kComm0 + static_cast<int>(CommKind::DP);
}

// Attributes every instant of [0, makespan] of one stage: what the compute
// stream runs, else the exposed communication or copy it waits for, else
// pipeline bubble.
TimeBreakdown attribute(const LoweredStep& low, const sim::RunResult& run, int stage,
                        const std::vector<std::int32_t>& stage_tasks) {
  struct Iv {
    Time a, b;
    int cat;
  };
  std::vector<Iv> busy, side;
  const std::string compute_name = "s" + std::to_string(stage) + ".compute";
  const auto compute_res = low.graph.resource(compute_name);
  const auto& tasks = low.graph.tasks();
  busy.reserve(stage_tasks.size());
  for (const std::int32_t index : stage_tasks) {
    const auto i = static_cast<std::size_t>(index);
    const auto& t = tasks[i];
    const auto& tm = run.tasks[i];
    if (tm.end <= tm.start) continue;
    const bool on_compute = !t.resources.empty() && t.resources.front() == compute_res;
    (on_compute ? busy : side).push_back({tm.start, tm.end, category(t, low.comm_kind[i], on_compute)});
  }
  std::vector<Time> cuts = {0, run.makespan};
  for (const auto& v : busy) cuts.insert(cuts.end(), {v.a, v.b});
  for (const auto& v : side) cuts.insert(cuts.end(), {v.a, v.b});
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // Side activity per category as +1/−1 events.
  std::vector<std::pair<Time, int>> ev;  // (time, cat + 1 or −(cat + 1))
  for (const auto& v : side) {
    ev.push_back({v.a, v.cat + 1});
    ev.push_back({v.b, -(v.cat + 1)});
  }
  std::sort(ev.begin(), ev.end());
  std::sort(busy.begin(), busy.end(), [](const Iv& x, const Iv& y) { return x.a < y.a; });
  std::array<int, kCats> active{};
  std::array<Time, kCats + 1> total{};  // last slot: bubble
  std::size_t e = 0, c = 0;
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    const Time a = cuts[k], b = cuts[k + 1];
    while (e < ev.size() && ev[e].first <= a) {
      active[static_cast<std::size_t>(std::abs(ev[e].second) - 1)] += ev[e].second > 0 ? 1 : -1;
      ++e;
    }
    while (c < busy.size() && busy[c].b <= a) ++c;
    int cat = kCats;  // bubble
    if (c < busy.size() && busy[c].a <= a) {
      cat = busy[c].cat;
    } else {
      for (int q : {kOptimizer, kOffloadStall}) if (active[static_cast<std::size_t>(q)] > 0 && cat == kCats) cat = q;
      for (CommKind kind : {CommKind::DP, CommKind::PP, CommKind::Offload, CommKind::TP,
                            CommKind::CP, CommKind::EP}) {
        const int q = kComm0 + static_cast<int>(kind);
        if (cat == kCats && active[static_cast<std::size_t>(q)] > 0) cat = q;
      }
    }
    total[static_cast<std::size_t>(cat)] += b - a;
  }
  TimeBreakdown out;
  out.compute = total[kCompute];
  out.recompute = total[kRecompute];
  out.optimizer = total[kOptimizer];
  out.offload_stall = total[kOffloadStall];
  for (std::size_t q = 0; q < kCommKinds; ++q) out.exposed_comm[q] = total[kComm0 + q];
  out.bubble = total[kCats];
  return out;
}

}  // namespace

void add_step_flops(const Scenario& sc, StepPrediction& pr) {
  // FLOPs of the whole model for the global batch: model FLOPs count each
  // matrix product once (Korthikanti Eq. 7); hardware FLOPs add recompute.
  cost::ExpandOptions one;
  one.attention = sc.plan.implementation.attention;
  const cost::OpChain whole = cost::expand(sc.model, one);
  const double seqs = static_cast<double>(sc.batch.global);
  pr.model_flops_per_step = whole.model_flops() * seqs;
  double recompute = 0;
  switch (sc.plan.recompute) {
    case Recompute::None: break;
    case Recompute::Selective:
      // The attention core's matrix products, when the kernel saved it (flash
      // attention saves no scores: nothing to recompute).
      if (whole.block.saved_bytes(Recompute::None) != whole.block.saved_bytes(Recompute::Selective))
        for (const auto& op : whole.block.ops)
          if (op.kind == cost::OpKind::AttnScores || op.kind == cost::OpKind::AttnValues)
            recompute += op.fwd_flops;
      break;
    default: recompute = whole.block.fwd_flops(); break;
  }
  pr.hardware_flops_per_step =
      pr.model_flops_per_step + recompute * static_cast<double>(whole.blocks) * seqs;
}

void require_countable_step(const Scenario& sc, double serial_ns, std::uint64_t tasks) {
  if (serial_ns < static_cast<double>(kMaxStepTime)) return;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "the step's %llu tasks take %.3g s one after another; Strata models steps "
                "shorter than 2^56 ns (about 2.3 years): check the model's size, the batch "
                "and the cluster's rates (tflops, GBps, calibration)",
                static_cast<unsigned long long>(tasks), serial_ns * 1e-9);
  throw InputError(sc.file, "", buf);
}

StepPrediction predict_step(const Scenario& sc, const StepCosts& costs, sim::RunResult* run_out,
                            LoweredStep* lowered_out) {
  LoweredStep low = lower_step(sc, costs);
  // Each task alone (a transfer at its slowest link's full rate): the engine
  // never idles while a task can run, and shared links stay busy.
  double serial = 0;
  for (const auto& t : low.graph.tasks()) {
    serial += static_cast<double>(t.duration.value_or(0)) + static_cast<double>(t.latency_after) + 1;
    double rate = std::numeric_limits<double>::infinity();
    for (const auto r : t.resources)
      if (low.graph.at(r).kind == sim::ResourceKind::Link) rate = std::min(rate, low.graph.at(r).bytes_per_ns());
    if (t.transfer_bytes > 0) serial += static_cast<double>(t.transfer_bytes) / rate;
  }
  require_countable_step(sc, serial, low.graph.num_tasks());
  const sim::RunResult run = sim::simulate(low.graph);
  StepPrediction pr;
  pr.step_time = run.makespan;
  pr.tasks = low.graph.num_tasks();
  Time most = -1;
  std::vector<std::vector<std::int32_t>> by_stage(static_cast<std::size_t>(low.stages));
  const auto& tasks = low.graph.tasks();
  for (std::size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].label.stage)
      by_stage[static_cast<std::size_t>(*tasks[i].label.stage)].push_back(static_cast<std::int32_t>(i));
  for (int s = 0; s < low.stages; ++s) {
    pr.per_stage.push_back(attribute(low, run, s, by_stage[static_cast<std::size_t>(s)]));
    const auto& b = pr.per_stage.back();
    if (b.compute + b.recompute > most) {
      most = b.compute + b.recompute;
      pr.critical_stage = s;
    }
  }
  pr.breakdown = pr.per_stage[static_cast<std::size_t>(pr.critical_stage)];
  pr.bubble_fraction =
      pr.step_time > 0 ? static_cast<double>(pr.breakdown.bubble) / static_cast<double>(pr.step_time) : 0;
  add_step_flops(sc, pr);
  if (run_out) *run_out = run;
  if (lowered_out) *lowered_out = std::move(low);
  return pr;
}

}  // namespace strata::strategies
