#include "lowering/lower.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>
#include <tuple>
#include <utility>

#include "sim/limits.hpp"
#include "lowering/memory.hpp"
#include "lowering/schedule.hpp"
#include "lowering/step_layout.hpp"
#include "lowering/step_program.hpp"
#include "lowering/stragglers.hpp"

namespace strata::strategies {

Time TimeBreakdown::total() const {
  Time t = compute + recompute + bubble + offload_stall + optimizer + interference;
  for (Time c : exposed_comm) t += c;
  return t;
}

std::int64_t StageGradients::block_count() const {
  std::int64_t n = 0;
  for (const std::int64_t b : blocks) n += b;
  return n;
}

double StageGradients::block_params(const cost::OpChain& chain) const {
  double n = 0;
  for (std::size_t k = 0; k < blocks.size(); ++k)
    n += static_cast<double>(blocks[k]) * static_cast<double>(chain.kinds[k].params());
  return n;
}

double StageGradients::params(const cost::OpChain& chain) const {
  return block_params(chain) + (embedding ? static_cast<double>(chain.embedding.params()) : 0.0) +
         (head ? static_cast<double>(chain.head.params()) : 0.0);
}

GradientExchange compressed_exchange(const Plan& plan, const cost::OpChain& chain,
                                     const StageGradients& stage, const StepCosts& costs) {
  const auto& c = plan.compression;
  const double grad_bytes = reduced_grad_bytes(plan);
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
      for (std::size_t k = 0; k < stage.blocks.size(); ++k) add(chain.kinds[k], static_cast<double>(stage.blocks[k]));
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

constexpr std::int32_t kNone = -1;

class StepBuilder : StepLayout {
 public:
  // `recycled`: a program whose vectors' capacity the new one reuses.
  StepBuilder(const Scenario& sc, const StepCosts& costs, Granularity g, const LayerPlan* layers,
              StepProgram recycled = {})
      : StepLayout(sc, costs, layers), sc_(sc), plan_(sc.plan), costs_(costs), stage_costs_(&costs),
        out_(std::move(recycled)), statics_(estimate_memory(sc, {}, layers_)) {
    out_.clear();
    const std::size_t slots = chunks_.size() * static_cast<std::size_t>(m_);
    fwd_first_.assign(slots, kNone);
    bwd_first_.assign(slots, kNone);
    fwd_send_.assign(slots, kNone);
    bwd_send_.assign(slots, kNone);
    out_.granularity = g;
    cpu_ = sc.kernel_memory == KernelMemory::Cpu && g == Granularity::Layer;
    if (cpu_) {
      back_set_.assign(slots, kNone);
      back_scratch_.assign(slots, kNone);
      chunk_out_.assign(slots, kNone);
      cpu_bytes_ = cpu_kernel_bytes(sc);
    }
    // At Chunk granularity a chunk pass is one task. It is exact when no
    // other task waits on a layer inside it; with ZeRO-3 gathers or offload
    // copies it is the pass's own layers replayed alone (fold_pass).
    bool swaps = false;
    for (Swap w : layers_.swaps) swaps = swaps || w != Swap::None;
    merge_ = g == Granularity::Chunk;
    out_.exact = !merge_ || (!zero3() && !plan_.offload.weights && !swaps);
    if (merge_) chunk_act_.assign(slots, kNone);
    if (merge_ && !out_.exact) chunk_host_.assign(slots, kNone);
    if (merge_) folded_.resize(2 * chunks_.size());
    if (merge_) merged_.resize(2 * chunks_.size());
  }

  StepProgram build(const PipelineSchedule& sched) && {
    const auto layer_steps = static_cast<std::size_t>(sc_.model.layers) * static_cast<std::size_t>(m_);
    const std::size_t per_step = merge_ ? 4 * chunks_.size() * static_cast<std::size_t>(m_) : 6 * layer_steps;
    out_.tasks.reserve(per_step + 64 * static_cast<std::size_t>(p_));
    out_.buffers.reserve(merge_ ? per_step : 4 * layer_steps);
    out_.mem.reserve(2 * per_step);
    out_.deps.reserve(per_step);
    for (int s = 0; s < p_; ++s) out_.link_rates.push_back(costs_.stage(s).link_rates());
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
    out_.layers = layers_;
    return std::move(out_);
  }

 private:
  std::size_t slot(int k, int mb) const {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(m_) + static_cast<std::size_t>(mb);
  }
  void dep(std::int32_t before, std::int32_t after) {
    if (before != kNone && after != kNone) out_.deps.emplace_back(before, after);
  }

  // Buffers a task allocates when it starts and frees when it ends.
  struct Mem {
    std::initializer_list<std::int32_t> allocs, frees;
  };

  // `peer`: a pipeline send's receiving stage (its links' other end).
  std::int32_t task(sim::TaskKind kind, sim::Lane lane, const Transfer& duration, sim::Phase phase, CommKind comm,
                    TaskInfo info, Mem mem = {}, int peer = -1) {
    ProgramTask t;
    t.kind = kind;
    t.lane = lane;
    t.stage = stage_;
    const auto [flow, alone] = flow_of(duration, peer < 0 ? stage_ : peer);
    t.flow = flow;
    t.duration = std::max<Time>(0, alone);
    t.phase = phase;
    t.comm = comm;
    t.mem = static_cast<std::uint32_t>(out_.mem.size());
    t.allocs = static_cast<std::uint16_t>(mem.allocs.size());
    t.frees = static_cast<std::uint16_t>(mem.frees.size());
    for (const std::int32_t b : mem.allocs) out_.mem.push_back(b);
    for (const std::int32_t b : mem.frees) out_.mem.push_back(b);
    if (out_.granularity == Granularity::Layer) {
      if (info.chunk < 0) info.chunk = chunk_;
      out_.info.push_back(std::move(info));
    }
    const auto index = static_cast<std::int32_t>(out_.tasks.size());
    out_.tasks.push_back(t);
    return index;
  }
  // The program's flow for a transfer from this stage to `to` (add_flow):
  // tasks moving the same transfer over the same links (a boundary's sends,
  // a kind of layer's gathers) share one record, found among the last few.
  std::pair<std::int32_t, Time> flow_of(const Transfer& x, int to) {
    if (x.path == Path::None || x.bandwidth <= 0) return {-1, x.total()};
    for (const FlowMemo& m : flow_memo_)
      if (m.flow >= 0 && m.x == x && m.from == stage_ && m.to == to)
        return {m.flow, m.alone};
    const auto [flow, alone] = add_flow(out_, x, stage_, to);
    flow_memo_[flow_memo_next_++ % flow_memo_.size()] = {x, stage_, to, flow, alone};
    return {flow, alone};
  }
  // A task on the compute lane; remembers the first of the current step.
  std::int32_t compute(Time d, sim::Phase phase, TaskInfo info, CommKind comm = CommKind::None, Mem mem = {}) {
    const std::int32_t t = task(comm == CommKind::None ? sim::TaskKind::Compute : sim::TaskKind::Collective,
                                sim::Lane::Compute, d, phase, comm, std::move(info), mem);
    if (step_first_ == kNone) step_first_ = t;
    last_compute_ = t;
    return t;
  }
  // Gives the task just emitted (with no buffers yet) lists known only at
  // run time.
  void add_mem(const std::vector<std::int32_t>& allocs, const std::vector<std::int32_t>& frees) {
    ProgramTask& t = out_.tasks.back();
    if (t.allocs + t.frees != 0 || t.mem != out_.mem.size()) throw Error("step program: buffers added twice");
    out_.mem.insert(out_.mem.end(), allocs.begin(), allocs.end());
    out_.mem.insert(out_.mem.end(), frees.begin(), frees.end());
    t.allocs = static_cast<std::uint16_t>(allocs.size());
    t.frees = static_cast<std::uint16_t>(frees.size());
  }

  static TaskInfo info(TaskOp op, Part part, std::int64_t layer = -1, int mb = -1, Pass pass = Pass::Forward) {
    TaskInfo i;
    i.op = op;
    i.part = part;
    i.layer = static_cast<std::int32_t>(layer);
    i.microbatch = mb;
    i.pass = pass;
    return i;
  }

  static std::uint64_t code(BufKind b, std::int64_t layer, int mb) {
    return (static_cast<std::uint64_t>(b) << 56) | (static_cast<std::uint64_t>(layer + 1) << 28) |
           static_cast<std::uint64_t>(mb);
  }
  std::int32_t buffer(BufKind kind, std::int64_t layer, int mb, Bytes bytes, bool host = false) {
    const auto id = static_cast<std::int32_t>(out_.buffers.size());
    out_.buffers.push_back({.stage = stage_, .kind = kind, .tag = sim::MemTag::Activations, .host = host,
                            .layer = static_cast<std::int32_t>(layer), .microbatch = mb,
                            .chunk = -1, .bytes = bytes});
    buffers_[code(kind, layer, mb)] = id;
    return id;
  }
  // Buffer b, a layer's saved bytes under `keep`, as the tensors its ops
  // save (StepProgram::splits: what the caching allocator's replay sees);
  // left whole when they do not add up to it (part moved to the host).
  void split_saved(std::int32_t b, std::int64_t layer, Keep keep) {
    // Only the layer level's program is replayed through the allocator.
    if (cpu_ || merge_ || folding_ || (keep != Keep::All && keep != Keep::Selective)) return;
    const std::vector<Bytes> t =
        chain_.block_at(layer).saved_tensors(keep == Keep::All ? Recompute::None : selective_policy(plan_));
    Bytes sum = 0;
    for (Bytes x : t) sum += x;
    if (t.size() < 2 || sum != out_.buffers[static_cast<std::size_t>(b)].bytes) return;
    out_.splits.push_back({b, static_cast<std::uint32_t>(out_.tensors.size()), static_cast<std::uint32_t>(t.size())});
    out_.tensors.insert(out_.tensors.end(), t.begin(), t.end());
  }
  std::int32_t existing(BufKind kind, std::int64_t layer, int mb) const {
    return buffers_.at(code(kind, layer, mb));
  }
  // A buffer of model chunk k's pass over microbatch mb.
  std::int32_t chunk_buffer(BufKind kind, int k, int mb, Bytes bytes, sim::MemTag tag = sim::MemTag::Activations) {
    const auto id = static_cast<std::int32_t>(out_.buffers.size());
    out_.buffers.push_back({.stage = stage_, .kind = kind, .tag = tag, .host = false, .layer = -1,
                            .microbatch = mb, .chunk = k, .bytes = bytes});
    return id;
  }

  // --- the CPU backend's kernels (Scenario::kernel_memory Cpu) -------------
  // What backend/cpu/gpt.cpp holds beside the saved tensors, fp32: one
  // microbatch's backward buffers (BackwardBuffers: the residual stream's
  // gradient, a norm's, the attention output's, qkv's, the MLP
  // activation's, SwiGLU's input's; under sequence parallelism a gathered
  // and a reduced copy) from the chunk's first backward to its last, and
  // the attention backward's seq × seq scratch beside them (Workspace).
  //
  // Under context parallelism (cp > 1) the attention core gathers the
  // group's keys and values (n floats: one rank's K | V of the
  // microbatch): while it runs the gathered copy and the same in position
  // order, 2·cp·n (GptModel::gather_kv), on top of what the forward holds
  // when its core starts (input, norm, qkv, scores, attention output); the
  // backward gathers them again and adds their gradients in position and
  // in gather order and this rank's reduced part, (3·cp + 1)·n
  // (scatter_kv_grads); the cp ring stages two steps of n.
  struct CpuKernelBytes {
    Bytes back = 0, scratch = 0;
    Bytes kv_core = 0, kv_backward = 0, before_core = 0, scores = 0, cp_staging = 0;
  };
  static CpuKernelBytes cpu_kernel_bytes(const Scenario& sc) {
    const auto& m = sc.model;
    const std::int64_t t = sc.plan.tp;
    const std::int64_t S = m.seq_len / sc.plan.cp, N = sc.batch.micro * S;
    const bool split = sc.plan.sequence_parallel && t > 1;
    const std::int64_t rows = split ? N / t : N;
    const std::int64_t h = m.hidden, aw = m.heads / t * m.head_dim();
    const std::int64_t f = (m.ffn_hidden > 0 ? m.ffn_hidden : 4 * h) / t;
    const bool swiglu = m.mlp == cost::MlpKind::Swiglu;
    const std::int64_t floats = rows * h + N * h + N * aw + 3 * N * aw + N * f + (swiglu ? N * 2 * f : 0) +
                                (split ? N * h + rows * h : 0);
    CpuKernelBytes k{.back = 4 * floats, .scratch = 4 * S * m.seq_len};
    if (const std::int64_t cp = sc.plan.cp; cp > 1) {
      const std::int64_t kv = N * 2 * aw, scores = N * (m.heads / t) * m.seq_len;
      k.kv_core = 4 * 2 * cp * kv;
      k.kv_backward = 4 * (3 * cp + 1) * kv;
      k.before_core = 4 * (2 * rows * h + 3 * N * aw + scores + N * aw);
      k.scores = 4 * scores;
      k.cp_staging = 4 * 2 * kv;
    }
    return k;
  }
  // A pass's buffer for the attention core's gathered keys and values, as
  // far as they exceed what the pass declares (`declared`) beside what it
  // holds when the core starts (`before`); none without context parallelism.
  std::vector<std::int32_t> cpu_kv_transient(Bytes before, Bytes declared) {
    const Bytes extra = plan_.cp > 1 ? before + cpu_bytes_.kv_core - declared : 0;
    if (extra <= 0) return {};
    return {cpu_buffer(BufKind::Working, extra, sim::MemTag::Activations)};
  }
  // A layer's forward under the CPU kernels holds, at its end, everything
  // the layer saves (its input included) and its output; then it drops
  // what its choice does not keep. Beyond what it keeps: full − stored,
  // and the output (I), which the next layer keeps as its input, the head
  // as its own, or the chunk's send (`out`: held until then).
  Bytes cpu_forward_transient(const ActivationRule& rule, Bytes stored, bool to_send) const {
    return rule.full - stored + (to_send ? 0 : rule.input);
  }
  // The chunk's first backward task allocates its backward buffers.
  std::vector<std::int32_t> cpu_backward_start(int k, int mb) {
    const std::size_t at = slot(k, mb);
    back_set_[at] = chunk_buffer(BufKind::Grad, k, mb, cpu_bytes_.back);
    back_scratch_[at] = chunk_buffer(BufKind::Working, k, mb, cpu_bytes_.scratch, sim::MemTag::Workspace);
    return {back_set_[at], back_scratch_[at]};
  }
  std::vector<std::int32_t> cpu_backward_end(int k, int mb) const {
    const std::size_t at = slot(k, mb);
    return {back_set_[at], back_scratch_[at]};
  }
  // A buffer only the CPU kernels' declarations have (gathered or fetched
  // layer weights, flat bucket copies, shards, host copies): named by its
  // kind and a serial number ("s0:working/c12/mb-1"), since no layer,
  // microbatch or chunk alone tells it apart.
  std::int32_t cpu_buffer(BufKind kind, Bytes bytes, sim::MemTag tag, bool host = false) {
    const auto id = static_cast<std::int32_t>(out_.buffers.size());
    out_.buffers.push_back({.stage = stage_, .kind = kind, .tag = tag, .host = host, .layer = -1,
                            .microbatch = -1, .chunk = cpu_serial_++, .bytes = bytes});
    return id;
  }
  // Adds buffers to task t's lists wherever it is in the program (its
  // lists move to the end of StepProgram::mem).
  void append_mem(std::int32_t t, const std::vector<std::int32_t>& allocs, const std::vector<std::int32_t>& frees) {
    ProgramTask& pt = out_.tasks[static_cast<std::size_t>(t)];
    std::vector<std::int32_t> a(out_.mem.begin() + pt.mem, out_.mem.begin() + pt.mem + pt.allocs);
    std::vector<std::int32_t> f(out_.mem.begin() + pt.mem + pt.allocs, out_.mem.begin() + pt.mem + pt.allocs + pt.frees);
    a.insert(a.end(), allocs.begin(), allocs.end());
    f.insert(f.end(), frees.begin(), frees.end());
    pt.mem = static_cast<std::uint32_t>(out_.mem.size());
    pt.allocs = static_cast<std::uint16_t>(a.size());
    pt.frees = static_cast<std::uint16_t>(f.size());
    out_.mem.insert(out_.mem.end(), a.begin(), a.end());
    out_.mem.insert(out_.mem.end(), f.begin(), f.end());
  }
  // ZeRO-3's or weight offload's layers under the CPU kernels: a layer's
  // whole weights are on the device from the first task that needs them
  // (its gather or fetch, or a segment's recompute before those) to the end
  // of its pass; a ZeRO-3 gather also holds the flat gathered copy.
  bool cpu_remote_layers() const { return cpu_ && (zero3() || plan_.offload.weights); }
  // ZeRO's shards: every rank the gradients are reduced over, dp × cp.
  std::int64_t shards() const { return zero_shards(plan_); }
  std::int64_t cpu_layer_chunk(std::int64_t layer) const {
    return (chain_.block_at(layer).params() + shards() - 1) / shards();
  }
  // The CPU kernels' largest tensor-parallel message: a ring step of the
  // b·s·h activation (all-reduce, or sequence parallelism's all-gather and
  // reduce-scatter), ⌈b·s·h / tp⌉ floats; the tp communicator keeps two
  // (backend/cpu/executor.cpp reserves them at start).
  std::int64_t cpu_tp_chunk() const {
    const std::int64_t n = sc_.batch.micro * (sc_.model.seq_len / plan_.cp) * sc_.model.hidden;
    return (n + plan_.tp - 1) / plan_.tp;
  }
  std::vector<std::int32_t> cpu_bring_layer(std::int64_t layer, std::vector<std::int32_t>& frees) {
    auto& present = cpu_layer_params_[static_cast<std::size_t>(layer)];
    if (present != kNone) return {};
    present = cpu_buffer(BufKind::Working, 4 * chain_.block_at(layer).params(), sim::MemTag::Params);
    std::vector<std::int32_t> allocs{present};
    if (zero3()) {
      allocs.push_back(cpu_buffer(BufKind::Working, 4 * shards() * cpu_layer_chunk(layer), sim::MemTag::CommBuffers));
      frees.push_back(allocs.back());
    }
    return allocs;
  }
  void cpu_drop_layer(std::int64_t layer, std::vector<std::int32_t>& frees) {
    auto& present = cpu_layer_params_[static_cast<std::size_t>(layer)];
    if (present != kNone) frees.push_back(present);
    present = kNone;
  }

  // ZeRO shards over dp · cp (zero_shards; the CPU executor's too).
  bool zero3() const { return plan_.zero >= 3 && shards() > 1; }
  // ZeRO-1/2 with implementation.overlap_param_gather (Megatron-LM's
  // --overlap-param-gather): the all-gather of the weights the optimizer
  // updated runs during the next step's first forward, each layer's
  // forward waiting for its own weights (distributed_data_parallel.py's
  // forward pre-hooks). In the steady state that is the first forward of
  // each model chunk waiting for gathers issued at the step's start. An
  // executor's steps do not overlap (Scenario::executed): its program keeps
  // the gather at the step's end.
  bool gather_in_forward() const {
    return !sc_.executed && zero_shards(plan_) > 1 && plan_.zero >= 1 && plan_.zero <= 2 &&
           plan_.implementation.overlap_param_gather;
  }
  // Bytes of `params` weights the distributed optimizer gathers, `fp8` of
  // them the blocks' GEMM weights: a byte each when they are FP8
  // parameters (implementation.fp8_param_gather).
  Bytes gathered_weight_bytes(double params, double fp8) const {
    if (!plan_.implementation.fp8_param_gather) fp8 = 0;
    return static_cast<Bytes>((params - fp8) * per_.weights + fp8);
  }
  // The previous step's gather of a layer's weights, for the first forward
  // of a chunk: on the communication lane from the step's start.
  std::int32_t weight_gather(const cost::Layer& l, Part part, std::int64_t layer) {
    const double fp8 = l.kind == cost::LayerKind::Block ? static_cast<double>(l.gemm_weight_params()) : 0.0;
    return task(sim::TaskKind::Collective, sim::Lane::Comm,
                costs().collective(Collective::AllGather, Group::DP,
                                   gathered_weight_bytes(static_cast<double>(l.params()), fp8)),
                sim::Phase::Comm, CommKind::DP, info(TaskOp::GatherWeights, part, layer));
  }

  // One block of each kind on this stage, priced once per stage
  // (price_kinds): its passes (forward, backward, recompute) and its
  // attention core's rerun, the tensor-, context- and expert-parallel
  // communication each pass blocks on (a recompute reruns the forward's),
  // its ZeRO-3 all-gather (layer_gather_time) and, with
  // partition_activations, the all-gather over tp of the input it keeps as
  // a segment's start (each rank kept 1/tp of it).
  struct KindTimes {
    std::array<Time, 3> pass{};
    Time core = 0;
    // The rerun of a recomputed segment's last layer: the CPU kernels refill
    // its saved tensors and make no output, skipping its last linear layer
    // and what follows (layer_tail); every other executor reruns it whole.
    Time rerun_last = 0;
    std::array<std::array<Time, 3>, 3> comm{};  // [pass][TP, CP, EP]
    Transfer zero3_gather;
    Time input_gather = 0;
  };
  static constexpr std::array<CommKind, 3> kLayerComm{CommKind::TP, CommKind::CP, CommKind::EP};
  void price_kinds() {
    kind_times_.assign(chain_.kinds.size(), {});
    const bool on[] = {plan_.tp > 1, plan_.cp > 1, plan_.ep > 1};
    for (std::size_t k = 0; k < chain_.kinds.size(); ++k) {
      const cost::Layer& block = chain_.kinds[k];
      KindTimes& t = kind_times_[k];
      for (const Pass pass : {Pass::Forward, Pass::Backward, Pass::Recompute}) {
        const auto p = static_cast<std::size_t>(pass);
        t.pass[p] = costs().layer(block, pass);
        const Pass priced = pass == Pass::Recompute ? Pass::Forward : pass;
        for (std::size_t c = 0; c < kLayerComm.size(); ++c)
          if (on[c]) t.comm[p][c] = costs().layer_comm(block, kLayerComm[c], priced);
      }
      t.core = costs().layer(block, Pass::Recompute, true);
      t.rerun_last = cpu_ ? std::max<Time>(0, t.pass[static_cast<std::size_t>(Pass::Recompute)] - costs().layer_tail(block))
                          : t.pass[static_cast<std::size_t>(Pass::Recompute)];
      if (zero3()) t.zero3_gather = layer_gather_time(block);  // on this stage's links
      if (plan_.partition_activations)
        t.input_gather = costs().collective(Collective::AllGather, Group::TP, block.input_bytes).total();
    }
  }
  // A layer's rerun in a recomputed segment: whole, or as its last layer.
  Time rerun_time(std::int64_t layer, bool last) const {
    const KindTimes& t = kind_times(layer);
    return last ? t.rerun_last : t.pass[static_cast<std::size_t>(Pass::Recompute)];
  }
  const KindTimes& kind_times(std::int64_t layer) const {
    return kind_times_[static_cast<std::size_t>(chain_.kind_of[static_cast<std::size_t>(layer)])];
  }
  template <class Fn>
  void for_layer_comm(const KindTimes& t, Pass pass, Fn&& fn) const {
    const auto& comm = t.comm[static_cast<std::size_t>(pass)];
    for (std::size_t c = 0; c < kLayerComm.size(); ++c)
      if (comm[c] > 0) fn(kLayerComm[c], comm[c]);
  }
  // DeepSeek-V3's multi-token prediction modules run in the head (ops.cpp
  // Builder::head), each with a block of the last block's kind: its
  // blocking tensor-, context- and expert-parallel communication follows
  // the head's pass, one task per module (TaskInfo::layer: the module).
  const KindTimes& mtp_block() const { return kind_times(chain_.blocks - 1); }
  void head_comm(int mb, Pass pass) {
    for (std::int64_t d = 0; d < sc_.model.mtp_layers; ++d)
      for_layer_comm(mtp_block(), pass, [&](CommKind kind, Time t) {
        compute(t, phase_of(pass), info(TaskOp::LayerComm, Part::Head, d, mb, pass), kind);
      });
  }
  static sim::Phase phase_of(Pass pass) {
    return pass == Pass::Backward ? sim::Phase::Bwd : pass == Pass::Forward ? sim::Phase::Fwd : sim::Phase::Recompute;
  }
  void layer_comm(std::int64_t layer, int mb, Pass pass) {
    for_layer_comm(kind_times(layer), pass, [&](CommKind kind, Time d) {
      compute(d, phase_of(pass), info(TaskOp::LayerComm, Part::Layer, layer, mb, pass), kind);
    });
  }

  // --- a chunk pass as one task (Chunk granularity) -----------------------

  // Sums a merged pass's time by category.
  struct Split {
    std::array<Time, kTimeCats> by{};
    Time total = 0;
    void add(int cat, Time d) {
      d = std::max<Time>(0, d);
      by[static_cast<std::size_t>(cat)] += d;
      total += d;
    }
  };
  void add_comm(Split& sp, const KindTimes& block, Pass pass) const {
    for_layer_comm(block, pass, [&](CommKind kind, Time d) { sp.add(comm_cat(kind), d); });
  }
  // A chunk's pass is the same for every microbatch that runs it merged:
  // its time by category (StepProgram::parts, written once and shared by
  // those tasks) and its bytes.
  struct MergedPass {
    Time total = 0;
    std::uint32_t parts = 0;
    std::uint16_t nparts = 0;
    Bytes saved = 0, host = 0;  // forward: kept on the GPU, moved to the host
    Bytes working = 0;          // backward: the most it holds above its start
  };
  MergedPass finish_merged(const Split& sp) {
    MergedPass m;
    m.total = sp.total;
    m.parts = static_cast<std::uint32_t>(out_.parts.size());
    for (int c = 0; c < kTimeCats; ++c)
      if (sp.by[static_cast<std::size_t>(c)] > 0) out_.parts.emplace_back(c, sp.by[static_cast<std::size_t>(c)]);
    m.nparts = static_cast<std::uint16_t>(out_.parts.size() - m.parts);
    return m;
  }
  std::int32_t merged(const MergedPass& m, sim::Phase phase, TaskInfo inf, Mem mem) {
    const std::int32_t t = compute(m.total, phase, std::move(inf), CommKind::None, mem);
    ProgramTask& pt = out_.tasks[static_cast<std::size_t>(t)];
    pt.merged = true;
    pt.parts = m.parts;
    pt.nparts = m.nparts;
    // A later layer-by-layer pass's gathers and fetches wait for the compute
    // lane some layers back (param_gather, weight_fetch): a merged pass is
    // one entry there, so the first ones of that pass wait for the pass
    // before it instead of running at the start of the step.
    if (zero3()) recent_.push_back(t);
    if (plan_.offload.weights) recent_fetch_.push_back(t);
    return t;
  }

  // A pass whose layers wait on other lanes (ZeRO-3 gathers, offload
  // copies), folded into one task: its own layer-level tasks emitted into a
  // scratch program with every lane idle at its start and replayed; the
  // compute lane's span, split by category (its idle time goes to what it
  // waited for). Transfers queued behind other passes' are not waited for,
  // so a folded pass is never slower than in the step: the explorer treats
  // folded figures as bounds and replays the plans it keeps per layer. The
  // same for every microbatch of the chunk, so done once.
  const Split& fold_pass(int k, bool fwd) {
    auto& cached = folded_[static_cast<std::size_t>(2 * k + (fwd ? 0 : 1))];
    if (cached) return *cached;
    // The step's program and per-stage lists are swapped with the fold's
    // scratch ones (which keep their capacity from one fold to the next)
    // and swapped back at the end.
    const auto swap_state = [&] {
      flow_memo_.fill({});
      std::swap(out_, fold_.program);
      std::swap(recent_, fold_.recent);
      std::swap(recent_fetch_, fold_.recent_fetch);
      std::swap(zero3_reduced_, fold_.zero3_reduced);
      std::swap(offloaded_, fold_.offloaded);
      std::swap(buffers_, fold_.buffers);
      std::swap(last_bwd_of_layer_, fold_.last_bwd_of_layer);
    };
    swap_state();
    const auto keep_state = std::make_tuple(stage_, step_first_, last_compute_, embedding_bwd_, head_bwd_);
    const bool was_merging = merge_;
    merge_ = false;
    folding_ = true;
    stage_ = 0;
    out_.clear();
    out_.granularity = Granularity::Layer;
    out_.stages = 1;
    out_.gpu_capacity = {0};
    out_.host_capacity = {0};
    out_.link_rates = {costs().link_rates()};
    recent_.clear();
    recent_fetch_.clear();
    zero3_reduced_.clear();
    offloaded_.clear();
    buffers_.clear();
    last_bwd_of_layer_.assign(static_cast<std::size_t>(sc_.model.layers), kNone);
    last_compute_ = kNone;
    // ZeRO-3: a pass's first gather is prefetched during the pass before
    // (param_gather), so the folded pass starts with it done.
    std::size_t from = 0;
    const bool layers = chunks_[static_cast<std::size_t>(k)] > 0;  // not an embedding- or head-only chunk
    if (zero3() && layers) {
      prefetched_gather_ = param_gather(first_layer_[static_cast<std::size_t>(k)], 0, Pass::Forward);
      const auto ready = compute(0, sim::Phase::None, info(TaskOp::Framework, Part::None));
      dep(prefetched_gather_, ready);
      from = static_cast<std::size_t>(ready) + 1;
    }
    forward(k, 0);
    if (!fwd) {
      // The backward's first gather, during the forward.
      if (zero3() && layers)
        prefetched_gather_ = param_gather(first_layer_[static_cast<std::size_t>(k)] + chunks_[static_cast<std::size_t>(k)] - 1,
                                          0, Pass::Backward);
      // Everything the forward started has ended before the backward begins.
      const auto barrier = compute(0, sim::Phase::None, info(TaskOp::Framework, Part::None));
      for (std::int32_t t = 0; t < barrier; ++t) dep(t, barrier);
      recent_.clear();
      recent_fetch_.clear();
      from = static_cast<std::size_t>(barrier) + 1;
      backward(k, 0);
      for (std::size_t t = from; t < out_.tasks.size(); ++t) dep(barrier, static_cast<std::int32_t>(t));
    }
    replay(out_, fold_.workspace);
    const ProgramRun& run = fold_.workspace.run;
    Split sp;
    Time begin = -1, end = 0, busy = 0;
    for (std::size_t t = from; t < out_.tasks.size(); ++t) {
      const ProgramTask& pt = out_.tasks[t];
      if (pt.lane != sim::Lane::Compute) continue;
      const Time d = run.tasks[t].end - run.tasks[t].start;
      if (begin < 0) begin = run.tasks[t].start;
      end = std::max(end, run.tasks[t].end);
      sp.add(time_category(pt), d);
      busy += d;
    }
    const Time idle = std::max<Time>(0, end - std::max<Time>(begin, 0) - busy);
    sp.add(zero3() ? comm_cat(CommKind::DP) : static_cast<int>(TimeCat::OffloadStall), idle);
    swap_state();
    std::tie(stage_, step_first_, last_compute_, embedding_bwd_, head_bwd_) = keep_state;
    merge_ = was_merging;
    folding_ = false;
    cached = sp;
    return *cached;
  }

  const MergedPass& forward_pass(int k, Time framework) {
    auto& cached = merged_[static_cast<std::size_t>(2 * k)];
    if (cached) return *cached;
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    const bool last = k + 1 == static_cast<int>(chunks_.size());
    Split sp;
    Bytes saved = 0, host = 0;
    if (k == 0) {
      sp.add(0, costs().layer(chain_.embedding, Pass::Forward));
      saved += chain_.embedding.saved_bytes();
    }
    const std::int64_t first = first_layer_[static_cast<std::size_t>(k)];
    for (std::int64_t i = 0; i < n; ++i) {
      const KindTimes& block = kind_times(first + i);
      sp.add(0, block.pass[static_cast<std::size_t>(Pass::Forward)]);
      add_comm(sp, block, Pass::Forward);
      // Folded: what goes to host memory leaves as the pass ends.
      const Bytes swapped = layer_swapped(k, i);
      saved += layer_stored(k, i) - swapped;
      host += swapped;
    }
    if (last) {
      sp.add(0, costs().layer(chain_.head, Pass::Forward));
      for (std::int64_t d = 0; d < sc_.model.mtp_layers; ++d) add_comm(sp, mtp_block(), Pass::Forward);
      saved += chain_.head.saved_bytes();
    }
    if (!out_.exact) sp = fold_pass(k, true);
    sp.add(0, framework);
    MergedPass m = finish_merged(sp);
    m.saved = saved;
    m.host = host;
    return *(cached = m);
  }

  void forward_merged(int k, int mb, Time framework) {
    const MergedPass& m = forward_pass(k, framework);
    const auto act = static_cast<std::int32_t>(out_.buffers.size());
    out_.buffers.push_back({.stage = stage_, .kind = BufKind::Act, .tag = sim::MemTag::Activations,
                            .host = false, .layer = -1, .microbatch = mb, .chunk = k, .bytes = m.saved});
    chunk_act_[slot(k, mb)] = act;
    TaskInfo i = info(TaskOp::Forward, Part::None, -1, mb, Pass::Forward);
    if (m.host == 0) {
      merged(m, sim::Phase::Fwd, std::move(i), {{act}, {}});
      return;
    }
    const auto moved = static_cast<std::int32_t>(out_.buffers.size());
    out_.buffers.push_back({.stage = stage_, .kind = BufKind::ActHost, .tag = sim::MemTag::Activations,
                            .host = true, .layer = -1, .microbatch = mb, .chunk = k, .bytes = m.host});
    chunk_host_[slot(k, mb)] = moved;
    merged(m, sim::Phase::Fwd, std::move(i), {{act, moved}, {}});
  }

  // The layer level's allocations and frees in order, as levels: the most a
  // chunk's backward holds above what it started with is its working set.
  const MergedPass& backward_pass(int k, Time framework) {
    auto& cached = merged_[static_cast<std::size_t>(2 * k + 1)];
    if (cached) return *cached;
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    const bool last = k + 1 == static_cast<int>(chunks_.size());
    const std::span<const Keep> keeps = chunk_keeps(k);
    Split sp;
    Bytes level = 0, peak = 0;
    auto hold = [&](Bytes b) {
      level += b;
      peak = std::max(peak, level);
    };
    if (last) {
      sp.add(0, costs().layer(chain_.head, Pass::Backward));
      for (std::int64_t d = 0; d < sc_.model.mtp_layers; ++d) add_comm(sp, mtp_block(), Pass::Backward);
      const Bytes g = chain_.head.max_grad_bytes();
      hold(g);
      level -= g + chain_.head.saved_bytes();
    }
    const std::int64_t first = first_layer_[static_cast<std::size_t>(k)];
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const Keep keep = keeps[static_cast<std::size_t>(i)];
      const KindTimes& block = kind_times(first + i);
      const ActivationRule& rule = StepLayout::rule(first + i);
      if (segment_end(keeps, i)) {
        const std::int64_t start = segment_start(keeps, i);
        if (plan_.partition_activations) sp.add(comm_cat(CommKind::TP), kind_times(first + start).input_gather);
        for (std::int64_t j = start; j <= i; ++j) {
          const KindTimes& rerun = kind_times(first + j);
          sp.add(static_cast<int>(TimeCat::Recompute), rerun_time(first + j, j == i));
          hold(StepLayout::rule(first + j).rerun(j == start));
          add_comm(sp, rerun, Pass::Recompute);
        }
      } else if (keep == Keep::Selective && rule.selective_reruns) {
        sp.add(static_cast<int>(TimeCat::Recompute), block.core);
      }
      // Folded offload: the layer's swapped bytes are back for its backward.
      const Bytes swapped = layer_swapped(k, i);
      const Bytes working = rule.backward_holds() + (keep == Keep::Selective ? rule.selective_rebuilt() : 0) + swapped;
      hold(working);
      level -= working + layer_stored(k, i) - swapped;
      if (keep == Keep::Input || keep == Keep::Nothing) level -= rule.rerun(keep == Keep::Input);
      sp.add(0, block.pass[static_cast<std::size_t>(Pass::Backward)]);
      add_comm(sp, block, Pass::Backward);
    }
    if (k == 0) sp.add(0, costs().layer(chain_.embedding, Pass::Backward));
    if (!out_.exact) sp = fold_pass(k, false);
    sp.add(0, framework);
    MergedPass m = finish_merged(sp);
    m.working = peak;
    return *(cached = m);
  }

  void backward_merged(int k, int mb, Time framework) {
    const MergedPass& m = backward_pass(k, framework);
    const auto work = static_cast<std::int32_t>(out_.buffers.size());
    out_.buffers.push_back({.stage = stage_, .kind = BufKind::Working, .tag = sim::MemTag::Activations,
                            .host = false, .layer = -1, .microbatch = mb, .chunk = k, .bytes = m.working});
    const std::int32_t host = chunk_host_.empty() ? kNone : chunk_host_[slot(k, mb)];
    if (host == kNone)
      merged(m, sim::Phase::Bwd, info(TaskOp::Backward, Part::None, -1, mb, Pass::Backward),
             {{work}, {work, chunk_act_[slot(k, mb)]}});
    else
      merged(m, sim::Phase::Bwd, info(TaskOp::Backward, Part::None, -1, mb, Pass::Backward),
             {{work}, {work, chunk_act_[slot(k, mb)], host}});
  }

  // --- a chunk pass layer by layer ----------------------------------------

  void forward(int k, int mb) {
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    const std::int64_t first = first_layer_[static_cast<std::size_t>(k)];
    // The chunk's first forward of the step waits for its weights.
    const bool gathers = gather_in_forward() && !folding_ && mb == gather_mb_[static_cast<std::size_t>(k)];
    std::int32_t embedding_weights =
        k == 0 && gathers ? weight_gather(chain_.embedding, Part::Embedding, -1) : kNone;
    // ZeRO-3: the chunk's root module at its forward's start (FSDP), or the
    // embedding before its use.
    if (k == 0 && gathers_ends()) embedding_weights = end_gather(Part::Embedding, mb, Pass::Forward, k);
    const bool last_chunk = k + 1 == static_cast<int>(chunks_.size());
    const std::int32_t root_head = last_chunk && k > 0 && gathers_ends() && plan_.implementation.zero3_root_unsharded
                                       ? end_gather(Part::Head, mb, Pass::Forward, k)
                                       : kNone;
    if (k == 0 && !cpu_)
      compute(costs().layer(chain_.embedding, Pass::Forward), sim::Phase::Fwd,
              info(TaskOp::Forward, Part::Embedding, -1, mb), CommKind::None,
              {{buffer(BufKind::Embedding, -1, mb, chain_.embedding.saved_bytes())}, {}});
    const bool sends = k + 1 < static_cast<int>(chunks_.size());
    if (k == 0 && cpu_) {
      // The token ids it keeps and its output (the first layer's input, or
      // an embedding-only chunk's send, held until then).
      const bool to_send = sends && n == 0;
      const Bytes input = StepLayout::rule(0).input;
      const std::int32_t out = to_send ? (chunk_out_[slot(k, mb)] = chunk_buffer(BufKind::Act, k, mb, input))
                                       : buffer(BufKind::Working, -1, mb, input);
      compute(costs().layer(chain_.embedding, Pass::Forward), sim::Phase::Fwd,
              info(TaskOp::Forward, Part::Embedding, -1, mb));
      add_mem({buffer(BufKind::Embedding, -1, mb, chain_.embedding.saved_bytes()), out},
              to_send ? std::vector<std::int32_t>{} : std::vector<std::int32_t>{out});
    }
    if (k == 0) dep(embedding_weights, last_compute_);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t layer = first + i;
      std::int32_t gather = kNone, fetch = kNone;
      if (zero3())
        gather = i == 0 && prefetched_gather_ != kNone ? std::exchange(prefetched_gather_, kNone)
                                                       : param_gather(layer, mb, Pass::Forward);
      const cost::Layer& block = chain_.block_at(layer);
      const ActivationRule& rule = StepLayout::rule(layer);
      if (gathers) gather = weight_gather(block, Part::Layer, layer);
      if (plan_.offload.weights) fetch = weight_fetch(layer, mb, Pass::Forward);
      const Bytes stored = layer_stored(k, i), swapped = layer_swapped(k, i);
      const std::int32_t f = compute(kind_times(layer).pass[static_cast<std::size_t>(Pass::Forward)], sim::Phase::Fwd,
                                     info(TaskOp::Forward, Part::Layer, layer, mb));
      std::vector<std::int32_t> allocs, frees;
      if (swapped > 0 && swapped < stored) allocs.push_back(buffer(BufKind::ActKept, layer, mb, stored - swapped));
      if (stored > 0) {
        allocs.push_back(buffer(BufKind::Act, layer, mb, swapped > 0 ? swapped : stored));
        split_saved(allocs.back(), layer, chunk_keeps(k)[static_cast<std::size_t>(i)]);
      }
      if (cpu_) {
        const bool to_send = sends && i + 1 == n;
        const Bytes extra = cpu_forward_transient(rule, stored, to_send);
        if (extra > 0) {
          allocs.push_back(buffer(BufKind::Working, layer, mb, extra));
          frees.push_back(allocs.back());
        }
        // The forward declares its saved bytes and its output.
        for (std::int32_t b : cpu_kv_transient(cpu_bytes_.before_core, rule.full + rule.input)) {
          allocs.push_back(b);
          frees.push_back(b);
        }
        if (to_send) allocs.push_back(chunk_out_[slot(k, mb)] = chunk_buffer(BufKind::Act, k, mb, rule.input));
        if (cpu_remote_layers()) cpu_drop_layer(layer, frees);
      }
      if (!allocs.empty()) add_mem(allocs, frees);
      dep(gather, f);
      dep(fetch, f);
      layer_comm(layer, mb, Pass::Forward);
      if (swapped > 0) {
        // The swapped activations move to the host pool once the layer is done.
        const std::int32_t act = existing(BufKind::Act, layer, mb);
        const std::int32_t c = task(sim::TaskKind::Copy, sim::Lane::D2H, costs().copy(swapped, CopyDir::ToHost),
                                    sim::Phase::None, CommKind::None, info(TaskOp::Offload, Part::Layer, layer, mb),
                                    {{buffer(BufKind::ActHost, layer, mb, swapped, true)}, {act}});
        dep(last_compute_, c);
        offloaded_[code(BufKind::ActHost, layer, mb)] = c;
      }
    }
    if (last_chunk) {
      const std::int32_t head_weights =
          gathers ? weight_gather(chain_.head, Part::Head, -1) : kNone;
      const std::int32_t head_gather = root_head != kNone ? root_head : use_gather(Part::Head, mb, Pass::Forward, k);
      const std::int32_t h = compute(costs().layer(chain_.head, Pass::Forward), sim::Phase::Fwd,
                                     info(TaskOp::Forward, Part::Head, -1, mb), CommKind::None,
                                     {{buffer(BufKind::Head, -1, mb, chain_.head.saved_bytes())}, {}});
      dep(head_weights, h);
      dep(head_gather, h);
      head_comm(mb, Pass::Forward);
    }
  }

  void backward(int k, int mb) {
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    const std::int64_t first = first_layer_[static_cast<std::size_t>(k)];
    const bool last_chunk = k + 1 == static_cast<int>(chunks_.size());
    if (last_chunk && !cpu_) {
      // The loss's backward holds the logits' gradient and frees the head's
      // saved bytes.
      const auto grad = buffer(BufKind::HeadGrad, -1, mb, chain_.head.max_grad_bytes());
      const std::int32_t weights = use_gather(Part::Head, mb, Pass::Backward, k);
      compute(costs().layer(chain_.head, Pass::Backward), sim::Phase::Bwd, info(TaskOp::Backward, Part::Head, -1, mb),
              CommKind::None, {{grad}, {grad, existing(BufKind::Head, -1, mb)}});
      dep(weights, last_compute_);
      head_comm(mb, Pass::Backward);
      head_bwd_ = last_compute_;
      if (hook_head_ >= 0 && completes(k, mb)) hook_send(hook_head_, head_bwd_);
    }
    if (last_chunk && cpu_) {
      // The CPU kernels turn the logits into their gradient in place in the
      // forward; the head's backward starts the chunk's backward buffers.
      compute(costs().layer(chain_.head, Pass::Backward), sim::Phase::Bwd, info(TaskOp::Backward, Part::Head, -1, mb));
      add_mem(cpu_backward_start(k, mb), {existing(BufKind::Head, -1, mb)});
      head_bwd_ = last_compute_;
    }
    const std::span<const Keep> keeps = chunk_keeps(k);
    std::vector<std::int32_t> bwd_of(static_cast<std::size_t>(n), kNone);
    // ZeRO-3: the gather of the layer whose backward comes next is issued
    // after this layer's backward and before its reduce-scatter (FSDP and
    // DeepSpeed prefetch ahead of the reduction), so on the in-order
    // communication lane it does not queue behind this layer's reduction.
    std::int32_t next_gather = kNone;
    if (zero3() && n > 0)
      next_gather = prefetched_gather_ != kNone ? std::exchange(prefetched_gather_, kNone)
                                                : param_gather(first + n - 1, mb, Pass::Backward);
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const std::int64_t layer = first + i;
      const Keep keep = keeps[static_cast<std::size_t>(i)];
      const cost::Layer& block = chain_.block_at(layer);
      const ActivationRule& rule = StepLayout::rule(layer);
      const Bytes stored = layer_stored(k, i), swapped = layer_swapped(k, i);
      // What the layer's backward waits for off the compute lane.
      std::int32_t ready[3] = {kNone, kNone, kNone};
      BufKind saved = BufKind::Act;  // where its saved bytes are on the GPU
      if (swapped > 0) {
        ready[0] = prefetch_activations(layer, mb, i, n, swapped, bwd_of);
        saved = BufKind::ActBack;
      }
      if (zero3()) ready[1] = next_gather;
      if (plan_.offload.weights) ready[2] = weight_fetch(layer, mb, Pass::Backward);
      auto wait = [&](std::int32_t t) {
        for (auto r : ready) dep(r, t);
      };
      const bool recomputes = keep == Keep::Input || keep == Keep::Nothing;
      if (segment_end(keeps, i)) {
        // Rerun the segment ending at layer i (one layer for full recompute)
        // from its first layer's input: its layers' saved bytes live until
        // their backward. With partition_activations that input is first
        // all-gathered over tp, blocking (Megatron-LM's CheckpointFunction.
        // backward calls gather_split_1d_tensor before it reruns).
        const std::int64_t start = segment_start(keeps, i);
        if (plan_.partition_activations)
          wait(compute(kind_times(first + start).input_gather, sim::Phase::Recompute,
                       info(TaskOp::InputGather, Part::Layer, first + start, mb, Pass::Recompute), CommKind::TP));
        for (std::int64_t j = start; j <= i; ++j) {
          // The CPU kernels: a layer before the segment's last keeps its
          // output as the next one's input; the last one refills its saved
          // tensors around the input it has (no output).
          const ActivationRule& rerun = StepLayout::rule(first + j);
          const Bytes bytes = cpu_ ? (j == i ? rerun.full - rerun.input : rerun.full) : rerun.rerun(j == start);
          const std::int32_t r = compute(rerun_time(first + j, j == i), sim::Phase::Recompute,
                                         info(TaskOp::Recompute, Part::Layer, first + j, mb, Pass::Recompute));
          std::vector<std::int32_t> re_frees, re_allocs{buffer(BufKind::Recomputed, first + j, mb, bytes)};
          split_saved(re_allocs.front(), first + j, Keep::All);
          // The CPU kernels: a segment's first layer reruns from its input
          // wherever it is, copying it to the device when it was offloaded
          // (its prefetch, later, then moves nothing).
          if (cpu_ && j != i && layer_swapped(k, j) > 0) {
            re_allocs.push_back(buffer(BufKind::ActBack, first + j, mb, layer_swapped(k, j)));
            re_frees.push_back(existing(BufKind::ActHost, first + j, mb));
          }
          if (cpu_remote_layers())
            for (std::int32_t b : cpu_bring_layer(first + j, re_frees)) re_allocs.push_back(b);
          // A rerun starts from its input, which it holds already.
          if (cpu_)
            for (std::int32_t b : cpu_kv_transient(cpu_bytes_.before_core - rerun.input, bytes)) {
              re_allocs.push_back(b);
              re_frees.push_back(b);
            }
          add_mem(re_allocs, re_frees);
          wait(r);
          layer_comm(first + j, mb, Pass::Recompute);
        }
      } else if (keep == Keep::Selective && rule.selective_reruns) {
        TaskInfo core = info(TaskOp::Recompute, Part::Layer, layer, mb, Pass::Recompute);
        core.core_only = true;
        wait(compute(kind_times(layer).core, sim::Phase::Recompute, std::move(core)));
        // The CPU kernels under context parallelism: the core reruns into
        // its scores (declared from the backward on) beside the gathered
        // keys and values.
        if (cpu_) {
          const std::vector<std::int32_t> kv = cpu_kv_transient(cpu_bytes_.scores, 0);
          add_mem(kv, kv);
        }
      }
      // The gradient flowing through the layer's ops, and (selective) the
      // attention core recomputed for it.
      std::vector<std::int32_t> allocs;
      if (!cpu_) allocs.push_back(buffer(BufKind::Grad, layer, mb, rule.grad));
      // ... what the attention's context-parallel exchange holds, and
      // ZeRO-3's staging of the layer's gradient for its reduce-scatter.
      if (rule.exchange + rule.staging > 0)
        allocs.push_back(buffer(BufKind::Working, layer, mb, rule.exchange + rule.staging));
      if (keep == Keep::Selective) allocs.push_back(buffer(BufKind::Core, layer, mb, rule.selective_rebuilt()));
      std::vector<std::int32_t> frees = allocs;
      // The CPU kernels: the chunk's first backward task starts its
      // backward buffers (the last chunk's: the head's).
      if (cpu_ && !last_chunk && i == n - 1)
        for (std::int32_t b : cpu_backward_start(k, mb)) allocs.push_back(b);
      // ... and under context parallelism the keys and values gathered
      // again, their gradients and this rank's part of them.
      if (cpu_ && plan_.cp > 1) {
        allocs.push_back(cpu_buffer(BufKind::Working, cpu_bytes_.kv_backward, sim::MemTag::Activations));
        frees.push_back(allocs.back());
      }
      if (cpu_remote_layers()) cpu_drop_layer(layer, frees);
      // ZeRO-3: the layer's whole gradients from its backward to its
      // reduce-scatter.
      std::int32_t layer_grads = kNone;
      if (cpu_ && zero3())
        allocs.push_back(layer_grads = cpu_buffer(BufKind::Grad, 4 * block.params(), sim::MemTag::Grads));
      if (recomputes) frees.push_back(existing(BufKind::Recomputed, layer, mb));
      if (stored > 0) frees.push_back(existing(saved, layer, mb));
      if (swapped > 0 && swapped < stored) frees.push_back(existing(BufKind::ActKept, layer, mb));
      const std::int32_t b = compute(kind_times(layer).pass[static_cast<std::size_t>(Pass::Backward)], sim::Phase::Bwd,
                                     info(TaskOp::Backward, Part::Layer, layer, mb));
      add_mem(allocs, frees);
      wait(b);
      bwd_of[static_cast<std::size_t>(i)] = b;
      layer_comm(layer, mb, Pass::Backward);
      last_bwd_of_layer_[static_cast<std::size_t>(layer)] = last_compute_;
      if (const std::int32_t b = hook_closes_.empty() ? -1 : hook_closes_[static_cast<std::size_t>(layer)];
          b >= 0 && completes(k, mb))
        hook_send(b, last_compute_);
      if (zero3() && i > 0) next_gather = param_gather(layer - 1, mb, Pass::Backward);
      if (zero3()) {
        // ZeRO-3 (DeepSpeed, PyTorch FSDP) reduce-scatters each layer's
        // gradients after every microbatch's backward, overlapped with the
        // next layer's backward.
        const Bytes bytes = static_cast<Bytes>(static_cast<double>(block.params()) * reduced_grad_bytes_);
        TaskInfo ri = info(TaskOp::Zero3Reduce, Part::Layer, layer, mb);
        ri.layers = {static_cast<std::int32_t>(layer)};
        const std::int32_t rs = task(sim::TaskKind::Collective, sim::Lane::Comm,
                                     costs().collective(Collective::ReduceScatter, Group::DP, bytes),
                                     sim::Phase::Comm, CommKind::DP, std::move(ri));
        if (cpu_) {
          // The flat padded copy and the reduced part, added into the
          // layer's gradient chunk (made by its first microbatch).
          const std::int64_t c = cpu_layer_chunk(layer);
          std::vector<std::int32_t> z{cpu_buffer(BufKind::Working, 4 * shards() * c, sim::MemTag::CommBuffers),
                                      cpu_buffer(BufKind::Working, 4 * c, sim::MemTag::CommBuffers)};
          std::vector<std::int32_t> zf = z;
          zf.push_back(layer_grads);
          auto& shard = cpu_layer_shard_grad_[static_cast<std::size_t>(layer)];
          if (shard == kNone) z.push_back(shard = cpu_buffer(BufKind::Grad, 4 * c, sim::MemTag::Grads));
          add_mem(z, zf);
        }
        dep(last_compute_, rs);
        zero3_reduced_.push_back(rs);
      }
    }
    if (k == 0) {
      const std::int32_t weights = use_gather(Part::Embedding, mb, Pass::Backward, k);
      // The CPU kernels: an embedding-only chunk's backward buffers (the
      // gradient it receives) are made by the embedding's backward.
      compute(costs().layer(chain_.embedding, Pass::Backward), sim::Phase::Bwd,
              info(TaskOp::Backward, Part::Embedding, -1, mb));
      dep(weights, last_compute_);
      add_mem(cpu_ && n == 0 && !last_chunk ? cpu_backward_start(k, mb) : std::vector<std::int32_t>{},
              {existing(BufKind::Embedding, -1, mb)});
      // The CPU kernels: the chunk's backward buffers die with it.
      if (cpu_) append_mem(last_compute_, {}, cpu_backward_end(k, mb));
      embedding_bwd_ = last_compute_;
    }
  }

  // ZeRO-3's all-gathers of the embedding and the output layer (the word
  // embedding when tied), whose weights the memory model holds in
  // comm_buffers. Gathered for each use (DeepSpeed), prefetched as a layer
  // is; or, with zero3_root_unsharded, FSDP's root module once per
  // microbatch at its chunk's forward start, after the compute before it
  // (FSDP resharded it at the previous backward's end, and its pre-forward
  // unshard is the first thing the forward does): exposed. Strata's
  // executors keep both whole and gather neither.
  bool gathers_ends() const { return zero3() && !cpu_ && !sc_.executed; }
  std::int32_t end_gather(Part part, int mb, Pass pass, int k) {
    const bool root = plan_.implementation.zero3_root_unsharded;
    const EndGathers ends =
        end_gathers(chain_, sc_.model.tied_embeddings, k == 0, k + 1 == static_cast<int>(chunks_.size()));
    const double params = root ? ends.root : part == Part::Embedding ? ends.embedding : ends.head;
    const std::int32_t g =
        task(sim::TaskKind::Collective, sim::Lane::Comm,
             costs().collective(Collective::AllGather, Group::DP, static_cast<Bytes>(params * per_.weights)),
             sim::Phase::Comm, CommKind::DP, info(TaskOp::Zero3Gather, part, -1, mb, pass));
    if (root || !plan_.implementation.overlap_param_gather) {
      dep(last_compute_, g);
    } else if (recent_.size() >= 2) {
      dep(recent_[recent_.size() - 2], g);
    }
    return g;
  }
  // A gather for one use (DeepSpeed's); none where FSDP's root holds them.
  std::int32_t use_gather(Part part, int mb, Pass pass, int k) {
    return gathers_ends() && !plan_.implementation.zero3_root_unsharded ? end_gather(part, mb, pass, k) : kNone;
  }

  // ZeRO-3: all-gather a layer's parameters on the communication lane, one
  // layer ahead of its use (prefetch depth 1) with
  // implementation.overlap_param_gather; without it (no prefetch: FSDP's
  // forward_prefetch/backward_prefetch off, DeepSpeed's
  // stage3_prefetch_bucket_size 0) once the compute lane finished the layer
  // before, so the gather is exposed.
  std::int32_t param_gather(std::int64_t layer, int mb, Pass pass) {
    const std::int32_t g = task(sim::TaskKind::Collective, sim::Lane::Comm, kind_times(layer).zero3_gather,
                                sim::Phase::Comm, CommKind::DP, info(TaskOp::Zero3Gather, Part::Layer, layer, mb, pass));
    if (cpu_) {
      std::vector<std::int32_t> frees;
      const auto allocs = cpu_bring_layer(layer, frees);
      add_mem(allocs, frees);
    }
    // It may start once the compute lane reached the layer before the previous one.
    if (recent_.size() >= 2) dep(recent_[recent_.size() - 2], g);
    if (!plan_.implementation.overlap_param_gather) dep(last_compute_, g);
    recent_.push_back(last_compute_);
    return g;
  }

  // One layer's ZeRO-3 all-gather: the whole layer at once (FSDP), or with
  // implementation.zero3_gather_per_module one collective per module, one
  // after another on the lane (DeepSpeed: each linear layer's weight, each
  // norm's), skipping the tensors below zero3_persistence_threshold, which
  // every rank keeps whole (an op's vectors count as one tensor). Strata's
  // executors gather by layer.
  Transfer layer_gather_time(const cost::Layer& block) const {
    const auto& im = plan_.implementation;
    if (!im.zero3_gather_per_module || sc_.executed)
      return costs().collective(Collective::AllGather, Group::DP,
                               static_cast<Bytes>(static_cast<double>(block.params()) * per_.weights));
    Transfer t;
    for (const cost::Op& op : block.ops)
      if (const double gathered = zero3_module_elems(op, im.zero3_persistence_threshold); gathered > 0)
        t = t.then(costs().collective(Collective::AllGather, Group::DP, static_cast<Bytes>(gathered * per_.weights)));
    return t;
  }

  // Weight offload: bring a layer's weights to the device ahead of use.
  std::int32_t weight_fetch(std::int64_t layer, int mb, Pass pass) {
    const Bytes bytes = static_cast<Bytes>(static_cast<double>(chain_.block_at(layer).params()) * per_.weights);
    // Weights on NVMe (ZeRO-Infinity's offload_param device nvme): read
    // into a host staging buffer on the host's lane, then copied as from
    // host memory; the prefetch window holds the read back.
    std::int32_t first = kNone;
    if (plan_.offload.weights_target == OffloadTarget::Nvme)
      first = task(sim::TaskKind::Host, sim::Lane::Cpu, costs().copy(bytes, CopyDir::NvmeRead), sim::Phase::None,
                   CommKind::None, info(TaskOp::WeightFromNvme, Part::Layer, layer, mb, pass));
    const std::int32_t c = task(sim::TaskKind::Copy, sim::Lane::H2D, costs().copy(bytes, CopyDir::ToDevice),
                                sim::Phase::None, CommKind::None,
                                info(TaskOp::WeightFetch, Part::Layer, layer, mb, pass));
    if (first == kNone) first = c;
    else dep(first, c);
    if (cpu_) {
      std::vector<std::int32_t> frees;
      const auto allocs = cpu_bring_layer(layer, frees);
      add_mem(allocs, frees);
    }
    const std::size_t depth = static_cast<std::size_t>(plan_.offload.prefetch_depth);
    if (recent_fetch_.size() > depth) dep(recent_fetch_[recent_fetch_.size() - 1 - depth], first);
    recent_fetch_.push_back(last_compute_);
    return c;
  }

  // Activation offload: bring layer i's saved activations back before its
  // backward, prefetch_depth layers ahead.
  std::int32_t prefetch_activations(std::int64_t layer, int mb, std::int64_t i, std::int64_t n,
                                    Bytes stored, const std::vector<std::int32_t>& bwd_of) {
    const std::int32_t host = existing(BufKind::ActHost, layer, mb);
    // Already back (the CPU kernels' segment recompute brought it): the
    // copy moves nothing.
    const bool back = cpu_ && buffers_.count(code(BufKind::ActBack, layer, mb)) > 0;
    const std::int32_t c =
        back ? task(sim::TaskKind::Copy, sim::Lane::H2D, costs().copy(stored, CopyDir::ToDevice), sim::Phase::None,
                    CommKind::None, info(TaskOp::Prefetch, Part::Layer, layer, mb))
             : task(sim::TaskKind::Copy, sim::Lane::H2D, costs().copy(stored, CopyDir::ToDevice), sim::Phase::None,
                    CommKind::None, info(TaskOp::Prefetch, Part::Layer, layer, mb),
                    {{buffer(BufKind::ActBack, layer, mb, stored)}, {host}});
    dep(offloaded_.at(code(BufKind::ActHost, layer, mb)), c);
    const std::int64_t ahead = i + 1 + plan_.offload.prefetch_depth;
    if (ahead < n) dep(bwd_of[static_cast<std::size_t>(ahead)], c);
    return c;
  }

  void lower_stage(const PipelineSchedule& sched, int s) {
    stage_ = s;
    stage_costs_ = &costs_.stage(s);
    collect_stage_layers();
    price_kinds();  // on this stage's GPUs and links
    // Memory: the GPU pool holds this stage's static bytes from the start
    // (weights, gradients, optimizer state, buffers, workspace, runtime:
    // the analytical model's) and the activations the tasks allocate; the
    // host pool the offloaded activations.
    out_.gpu_capacity.push_back(statics_.stages[static_cast<std::size_t>(s)].capacity);
    out_.host_capacity.push_back(statics_.host_capacity_per_node /
                                 std::max<std::int64_t>(1, sc_.cluster.node.gpus_per_node));
    const StageMemory& st = statics_.stages[static_cast<std::size_t>(s)];
    cpu_static_.fill(kNone);
    for (std::size_t t = 0; t < sim::kMemTagCount; ++t) {
      const auto tag = static_cast<sim::MemTag>(t);
      if (tag == sim::MemTag::Activations || tag == sim::MemTag::AllocatorReserve) continue;
      Bytes bytes = st.bytes[t];
      if (cpu_) {
        // The CPU backend has no CUDA runtime and no cuBLAS workspace; its
        // pipeline messages wait in the rank threads' shared mailbox, not
        // in either stage's pool. The end of the step sets what it
        // declares otherwise (cpu_statics).
        if (tag == sim::MemTag::Runtime || tag == sim::MemTag::Workspace) continue;
        if (tag == sim::MemTag::CommBuffers && p_ > 1) bytes -= 2 * StepLayout::p2p_bytes(sc_, 0);
        cpu_static_[t] = static_cast<std::int32_t>(out_.buffers.size());
      } else if (bytes == 0) {
        continue;
      }
      out_.buffers.push_back({.stage = s, .kind = BufKind::Static, .tag = tag, .bytes = std::max<Bytes>(0, bytes)});
    }
    last_bwd_of_layer_.assign(static_cast<std::size_t>(sc_.model.layers), kNone);
    if (cpu_) {
      cpu_layer_params_.assign(static_cast<std::size_t>(sc_.model.layers), kNone);
      cpu_layer_shard_grad_.assign(static_cast<std::size_t>(sc_.model.layers), kNone);
      cpu_first_task_ = static_cast<std::int32_t>(out_.tasks.size());
    }
    embedding_bwd_ = head_bwd_ = kNone;
    last_compute_ = kNone;
    pending_send_ = kNone;
    recent_.clear();
    recent_fetch_.clear();
    zero3_reduced_.clear();
    offloaded_.clear();
    buffers_.clear();
    const int chunks = static_cast<int>(chunks_.size());
    // One pipeline send across each chunk boundary, priced when the stage
    // has one.
    std::vector<std::optional<Transfer>> p2p_time(chunks_.size());
    const auto& steps = sched.stages[static_cast<std::size_t>(s)];
    // The model chunk of each of the stage's virtual stages.
    stage_chunks_.clear();
    for (int c = 0; c < sched.v; ++c) stage_chunks_.push_back(model_chunk(sched, s, c));
    const auto chunk_of = [&](const Step& st) { return stage_chunks_.at(static_cast<std::size_t>(st.chunk)); };
    // The microbatch whose backward of each model chunk comes last runs
    // layer by layer, forward and backward: the gradient buckets wait for
    // its layers.
    last_bwd_mb_.assign(chunks_.size(), -1);
    for (const Step& st : steps)
      if (st.pass == Pass::Backward) last_bwd_mb_[static_cast<std::size_t>(chunk_of(st))] = st.microbatch;
    plan_hook_buckets();
    std::vector<int> fine_mb(chunks_.size(), -1);
    if (merge_)
      for (const Step& st : steps)
        if (st.pass == Pass::Backward)
          fine_mb[static_cast<std::size_t>(chunk_of(st))] = st.microbatch;
    // So does the microbatch of each chunk's first forward when its layers
    // wait for their weights (gather_in_forward), forward and backward.
    gather_mb_.assign(chunks_.size(), -1);
    if (gather_in_forward())
      for (const Step& st : steps) {
        int& mb = gather_mb_[static_cast<std::size_t>(chunk_of(st))];
        if (st.pass == Pass::Forward && mb < 0) mb = st.microbatch;
      }
    chunk_ = -1;
    // A parameter server with bounded staleness: the previous step's pull
    // runs under this step, which does not wait for it (the weights it
    // brings are for a later step).
    if (plan_.dp > 1 && plan_.dp_topology == DpTopology::ParameterServer && plan_.ps_staleness > 0)
      ps_pull(StageGradients{chain_.kind_counts(mine_), s == 0, s == p_ - 1}.params(chain_));
    if (const Time t = costs().overhead_per_step(); t > 0) compute(t, sim::Phase::None, info(TaskOp::Framework, Part::None));
    for (const Step& st : steps) {
      const int k = chunk_of(st);
      chunk_ = k;
      step_first_ = kNone;
      const bool fwd = st.pass == Pass::Forward;
      // Without p2p overlap (Megatron-LM's default) a stage waits for its
      // last send before its next step.
      const std::int32_t blocking_send = plan_.implementation.overlap_p2p ? kNone : pending_send_;
      pending_send_ = kNone;
      const std::size_t at = slot(k, st.microbatch);
      const bool whole = merge_ && st.microbatch != fine_mb[static_cast<std::size_t>(k)] &&
                         st.microbatch != gather_mb_[static_cast<std::size_t>(k)];
      // The framework's work before the pass (a merged pass holds it).
      const Time framework = std::max<Time>(0, costs().overhead_per_microbatch());
      if (framework > 0 && !whole)
        compute(framework, sim::Phase::None,
                info(TaskOp::Framework, Part::None, -1, st.microbatch, fwd ? Pass::Forward : Pass::Backward));
      if (fwd)
        whole ? forward_merged(k, st.microbatch, framework) : forward(k, st.microbatch);
      else
        whole ? backward_merged(k, st.microbatch, framework) : backward(k, st.microbatch);
      dep(blocking_send, step_first_);
      (fwd ? fwd_first_ : bwd_first_)[at] = step_first_;
      // Activations go to the next chunk, gradients to the previous one.
      if (fwd ? k + 1 < chunks : k > 0) {
        // A send between stages on different GPUs runs at the slower end's link.
        const int to = (fwd ? k + 1 : k - 1) % p_;
        const int boundary = fwd ? k : k - 1;
        auto& sent = p2p_time[static_cast<std::size_t>(boundary)];
        if (!sent) {
          const Bytes msg = StepLayout::p2p_bytes(sc_, boundary);
          const Transfer mine = costs().p2p(msg), theirs = costs_.stage(to).p2p(msg);
          sent = theirs.total() > mine.total() ? theirs : mine;
        }
        const std::int32_t t =
            task(sim::TaskKind::P2PSend, sim::Lane::P2P, *sent, sim::Phase::Comm, CommKind::PP,
                 info(fwd ? TaskOp::SendActivation : TaskOp::SendGradient, Part::None, -1, st.microbatch), {}, to);
        // The CPU kernels: the send frees what it sent (the chunk's output,
        // or its backward buffers, whose input gradient it sends).
        if (cpu_) add_mem({}, fwd ? std::vector<std::int32_t>{chunk_out_[at]} : cpu_backward_end(k, st.microbatch));
        dep(last_compute_, t);
        (fwd ? fwd_send_ : bwd_send_)[at] = t;
        pending_send_ = t;
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
    const std::vector<std::int64_t>& mine = mine_;
    const StageGradients stage{chain_.kind_counts(mine), s == 0, s == p_ - 1};
    const double params = stage.params(chain_);
    const std::int32_t end_of_backward = last_compute_;
    std::vector<std::int32_t> reduced;  // what the optimizer waits for
    const bool dp = plan_.dp > 1;
    // The CPU kernels' buffers of the gradients' reduction and the step:
    // declared for plain, ZeRO-1/2 and ZeRO-3 reductions over dp × cp (not
    // for compression or parameter servers, which keep the GPU rule's).
    const bool cpu_dp = cpu_ && plan_.compression.method == CompressionMethod::None &&
                        plan_.dp_topology != DpTopology::ParameterServer;
    cpu_buckets_.clear();
    auto comm = [&](const Transfer& d, CommKind kind, TaskInfo i) {
      return task(sim::TaskKind::Collective, sim::Lane::Comm, d, sim::Phase::Comm, kind, std::move(i));
    };
    if (hooked()) {
      hook_finish(end_of_backward, reduced);
    } else if (dp && plan_.compression.method != CompressionMethod::None) {
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
        const std::int32_t t = comm(costs().collective(Collective::ReduceScatter, Group::DP,
                                                      static_cast<Bytes>(other * reduced_grad_bytes_)),
                                    CommKind::DP, std::move(i));
        if (cpu_) {
          std::int64_t numel = static_cast<std::int64_t>(other);
          if (s == p_ - 1 && sc_.model.tied_embeddings && p_ > 1) numel += chain_.embedding.ops.front().params;
          CpuBucket b;
          b.numel = numel;
          b.chunk = (numel + shards() - 1) / shards();
          b.padded = shards() * b.chunk;
          const std::int32_t flat = cpu_buffer(BufKind::Working, 4 * b.padded, sim::MemTag::CommBuffers);
          const std::int32_t part = cpu_buffer(BufKind::Working, 4 * b.chunk, sim::MemTag::CommBuffers);
          b.shard_grad = cpu_buffer(BufKind::Grad, 4 * b.chunk, sim::MemTag::Grads);
          add_mem({flat, part, b.shard_grad}, {flat, part});
          cpu_buckets_.push_back(b);
        }
        dep(end_of_backward, t);
        reduced.push_back(t);
      }
    } else if (dp || plan_.cp > 1) {
      // Buckets of about 25 MiB of gradients, filled in backward order
      // (reduced over dp × cp: each context-parallel rank saw its tokens).
      const double grad_bytes = reduced_grad_bytes_;  // the reduced (fp32 or 16-bit) copy
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
      const TaskOp what = ps ? TaskOp::PsPush : TaskOp::DpReduce;
      TaskInfo contents = info(what, Part::None);
      auto flush = [&](double bytes, std::int32_t after) {
        TaskInfo i = std::exchange(contents, info(what, Part::None));
        const bool head_bucket = i.head;
        i.bucket = bucket_index++;
        const std::int32_t t = comm(costs().collective(op, Group::DP, static_cast<Bytes>(bytes)), CommKind::DP,
                                    std::move(i));
        if (cpu_dp) cpu_bucket(static_cast<std::int64_t>(std::llround(bytes / grad_bytes)), head_bucket);
        dep(plan_.implementation.overlap_grad_reduce ? after : end_of_backward, t);
        reduced.push_back(t);
      };
      if (s == p_ - 1 && chain_.head.params() > 0) {
        contents.head = true;
        flush(static_cast<double>(chain_.head.params()) * grad_bytes, head_bwd_);
      }
      for (std::int64_t l : mine) {
        fill += static_cast<double>(chain_.block_at(l).params()) * grad_bytes;
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
    // The word embedding's copy on the last stage (tied embeddings,
    // multi-token prediction): first and last stage all-reduce its gradient.
    if (sc_.model.embedding_on_last_stage(p_) && (s == 0 || s == p_ - 1)) {
      const double bytes = static_cast<double>(chain_.embedding.ops.front().params) * reduced_grad_bytes_;
      TaskInfo i = info(TaskOp::EmbeddingTie, Part::Embedding);
      i.embedding = true;
      const std::int32_t t = comm(costs().collective(Collective::AllReduce, Group::EmbeddingTie,
                                                    static_cast<Bytes>(bytes)),
                                  CommKind::PP, std::move(i));
      dep(end_of_backward, t);
      reduced.push_back(t);
    }
    const double shard = plan_.zero >= 1 ? static_cast<double>(zero_shards(plan_)) : 1.0;
    const double local = params / shard;
    const bool on_host = plan_.offload.optimizer != OffloadTarget::None;
    std::int32_t stepped;
    if (on_host) {
      // ZeRO-Offload: gradients to the host, the step on the CPU, updated
      // 16-bit weights back.
      const bool nvme = plan_.offload.optimizer == OffloadTarget::Nvme;
      const std::int32_t down = task(sim::TaskKind::Copy, sim::Lane::D2H,
                                     costs().copy(static_cast<Bytes>(local * 4), CopyDir::ToHost), sim::Phase::Comm,
                                     CommKind::Offload, info(TaskOp::GradsToHost, Part::None));
      std::int32_t host_grads = kNone;
      if (cpu_dp && !nvme) {
        // The gradients the rank steps, copied to the host pool (its
        // device chunks die).
        host_grads = cpu_buffer(BufKind::Grad, 4 * cpu_stepped(), sim::MemTag::Grads, true);
        std::vector<std::int32_t> frees;
        for (const CpuBucket& b : cpu_buckets_)
          if (b.shard_grad != kNone) frees.push_back(b.shard_grad);
        add_mem({host_grads}, frees);
      }
      dep(end_of_backward, down);
      for (auto r : reduced) dep(r, down);
      std::int32_t before_step = down;
      const Bytes states = static_cast<Bytes>(local * per_.optimizer);
      if (nvme) {
        const std::int32_t rd = task(sim::TaskKind::Host, sim::Lane::Cpu, costs().copy(states, CopyDir::NvmeRead),
                                     sim::Phase::Comm, CommKind::Offload, info(TaskOp::StatesFromNvme, Part::None));
        dep(down, rd);
        before_step = rd;
      }
      const std::int32_t step = task(sim::TaskKind::Host, sim::Lane::Cpu, costs().optimizer_step(local, true),
                                     sim::Phase::Optim, CommKind::None, info(TaskOp::OptimizerStep, Part::None));
      if (host_grads != kNone) add_mem({}, {host_grads});
      dep(before_step, step);
      if (nvme) {
        const std::int32_t wr = task(sim::TaskKind::Host, sim::Lane::Cpu, costs().copy(states, CopyDir::NvmeWrite),
                                     sim::Phase::Comm, CommKind::Offload, info(TaskOp::StatesToNvme, Part::None));
        dep(step, wr);
      }
      if (plan_.offload.weights && plan_.offload.weights_target == OffloadTarget::Nvme) {
        // The stepped 16-bit weights go back to their NVMe home, read from
        // there by the next step's fetches.
        const std::int32_t wr =
            task(sim::TaskKind::Host, sim::Lane::Cpu,
                 costs().copy(static_cast<Bytes>(local * per_.weights), CopyDir::NvmeWrite), sim::Phase::Comm,
                 CommKind::Offload, info(TaskOp::WeightsToNvme, Part::None));
        dep(step, wr);
      }
      const std::int32_t up = task(sim::TaskKind::Copy, sim::Lane::H2D,
                                   costs().copy(static_cast<Bytes>(local * per_.weights), CopyDir::ToDevice),
                                   sim::Phase::Comm, CommKind::Offload, info(TaskOp::WeightsToDevice, Part::None));
      if (cpu_dp && !nvme && shards() > 1 && plan_.zero >= 1) {
        // The updated chunks come back as device chunks, gathered next.
        std::vector<std::int32_t> allocs;
        for (CpuBucket& b : cpu_buckets_)
          allocs.push_back(b.shard_param = cpu_buffer(BufKind::Working, 4 * b.chunk, sim::MemTag::Params));
        add_mem(allocs, {});
      }
      dep(step, up);
      stepped = up;
    } else {
      const std::int32_t step = task(sim::TaskKind::Compute, sim::Lane::Compute, costs().optimizer_step(local, false),
                                     sim::Phase::Optim, CommKind::None, info(TaskOp::OptimizerStep, Part::None));
      if (cpu_dp && shards() > 1 && plan_.zero >= 1) {
        // The step updates a copy of this rank's chunk of each bucket (under
        // ZeRO-3 the layers' chunks are the parameters; the embedding's and
        // head's chunk is gathered back whole within the step); the
        // gradient chunks die with it.
        std::vector<std::int32_t> allocs, frees;
        for (CpuBucket& b : cpu_buckets_) {
          allocs.push_back(b.shard_param = cpu_buffer(BufKind::Working, 4 * b.chunk, sim::MemTag::Params));
          frees.push_back(b.shard_grad);
          if (zero3()) {
            frees.push_back(b.shard_param);
            allocs.push_back(cpu_buffer(BufKind::Working, 4 * b.padded, sim::MemTag::CommBuffers));
            frees.push_back(allocs.back());
          }
        }
        if (zero3())
          for (std::int32_t g : cpu_layer_shard_grad_)
            if (g != kNone) frees.push_back(g);
        add_mem(allocs, frees);
      }
      for (auto r : reduced) dep(r, step);
      stepped = step;
    }
    if (dp && plan_.dp_topology == DpTopology::ParameterServer && plan_.ps_staleness == 0)
      dep(stepped, ps_pull(params));
    if (zero_shards(plan_) > 1 && plan_.zero >= 1 && plan_.zero <= 2 && !gather_in_forward()) {
      // The distributed optimizer's all-gather of updated weights (with
      // overlap_param_gather, in the next step's first forward instead).
      double fp8 = 0;
      for (std::size_t k = 0; k < stage.blocks.size(); ++k)
        fp8 += static_cast<double>(stage.blocks[k]) * static_cast<double>(chain_.kinds[k].gemm_weight_params());
      const std::int32_t ag = comm(costs().collective(Collective::AllGather, Group::DP,
                                                     gathered_weight_bytes(params, fp8)),
                                   CommKind::DP, info(TaskOp::GatherWeights, Part::None));
      if (cpu_dp && plan_.offload.optimizer != OffloadTarget::Nvme) {
        // One flat buffer of the largest bucket; the chunks die after.
        std::int64_t most = 0;
        std::vector<std::int32_t> frees;
        for (const CpuBucket& b : cpu_buckets_) {
          most = std::max(most, b.padded);
          frees.push_back(b.shard_param);
        }
        const std::int32_t flat = cpu_buffer(BufKind::Working, 4 * most, sim::MemTag::CommBuffers);
        frees.push_back(flat);
        add_mem({flat}, frees);
      }
      dep(stepped, ag);
    }
    if (cpu_dp) cpu_statics(stage, cpu_dp);
  }

  // --- the CPU kernels' buffers of the step's end ---------------------------
  // A bucket as the CPU executor reduces it: packed into a flat copy
  // (padded to dp equal chunks under ZeRO) for the task, a ring staging
  // buffer pair of its chunk, and under ZeRO-1/2 the reduced gradient chunk
  // until the optimizer step (which updates a copy of the parameters'
  // chunk, freed when the updated chunks are gathered).
  struct CpuBucket {
    std::int64_t numel = 0, chunk = 0, padded = 0;
    std::int32_t shard_grad = kNone, shard_param = kNone;
  };
  void cpu_bucket(std::int64_t numel, bool head) {
    // The last stage's head bucket carries a tied word embedding's copy
    // (the bucket plan's rule; the lowering's time omits those bytes).
    if (head && sc_.model.tied_embeddings && p_ > 1 && stage_ == p_ - 1)
      numel += chain_.embedding.ops.front().params;
    CpuBucket b;
    b.numel = numel;
    b.chunk = (numel + shards() - 1) / shards();
    const bool zero = plan_.zero >= 1 && shards() > 1;
    b.padded = zero ? shards() * b.chunk : numel;
    const std::int32_t flat = cpu_buffer(BufKind::Working, 4 * b.padded, sim::MemTag::CommBuffers);
    std::vector<std::int32_t> allocs{flat};
    if (zero) allocs.push_back(b.shard_grad = cpu_buffer(BufKind::Grad, 4 * b.chunk, sim::MemTag::Grads));
    add_mem(allocs, {flat});
    cpu_buckets_.push_back(b);
  }
  // Elements of the optimizer's step on this rank: its chunks under ZeRO,
  // else the stage's parameters.
  std::int64_t cpu_stepped() const {
    if (plan_.zero >= 1 && shards() > 1) {
      std::int64_t chunks = 0;
      for (const CpuBucket& b : cpu_buckets_) chunks += b.chunk;
      if (zero3())
        for (std::size_t l = 0; l < cpu_layer_shard_grad_.size(); ++l)
          if (cpu_layer_shard_grad_[l] != kNone) chunks += cpu_layer_chunk(static_cast<std::int64_t>(l));
      return chunks;
    }
    return statics_.stages[static_cast<std::size_t>(stage_)].params;
  }
  // The stage's static bytes as the CPU executor holds them: every
  // gradient whole through the step (ZeRO-1 and -2 alike); under ZeRO-3 the
  // layers' weight chunks and the embedding's and head's whole weights and
  // gradients; the optimizer's states on what it steps (padded chunks
  // under ZeRO), in the host pool with optimizer offload beside the fp32
  // master copy; with weight offload the layers' weights in the host pool;
  // the dp × cp ring's staging pair sized for its largest step, the tied
  // embedding ring's for half of the word embedding, the tp ring's and the
  // cp ring's.
  void cpu_statics(const StageGradients& stage, bool exact) {
    if (!exact) return;
    auto set = [&](sim::MemTag tag, double bytes) {
      const std::int32_t b = cpu_static_[static_cast<std::size_t>(tag)];
      if (b != kNone) out_.buffers[static_cast<std::size_t>(b)].bytes = static_cast<Bytes>(std::llround(bytes));
    };
    const StageMemory& st = statics_.stages[static_cast<std::size_t>(stage_)];
    const double all = static_cast<double>(st.params);
    const double layers = stage.block_params(chain_);
    const double stepped = static_cast<double>(cpu_stepped());
    const bool zero = plan_.zero >= 1 && shards() > 1;
    const bool host_states = plan_.offload.optimizer == OffloadTarget::Cpu;
    double params = per_.weights * all, grads = per_.grads * all;
    if (zero3()) {
      double chunks = 0;
      for (const std::int64_t l : mine_) chunks += static_cast<double>(cpu_layer_chunk(l));
      params = per_.weights * (all - layers) + 4.0 * chunks;
      grads = per_.grads * (all - layers);
    }
    if (plan_.offload.weights) params = per_.weights * (all - layers);
    set(sim::MemTag::Params, params);
    set(sim::MemTag::Grads, grads);
    const double states = is_factored(plan_.optimizer) ? 0.0 : per_.optimizer * stepped;
    if (!is_factored(plan_.optimizer) && plan_.offload.optimizer == OffloadTarget::None && (zero || zero3()))
      set(sim::MemTag::OptimizerStates, states);
    Bytes comm = 0;
    if (const std::int64_t ring = shards(); ring > 1) {
      // The ring over dp × cp steps a ring-th of what it reduces (a bucket,
      // padded to dp chunks under ZeRO); under ZeRO-3 a layer's chunk too
      // (none on a stage without layers).
      std::int64_t most = 0;
      if (zero3())
        for (const std::int64_t l : mine_) most = std::max(most, cpu_layer_chunk(l));
      for (const CpuBucket& b : cpu_buckets_) most = std::max(most, (b.padded + ring - 1) / ring);
      comm += 2 * 4 * most;
    }
    comm += cpu_bytes_.cp_staging;
    if (p_ > 1 && sc_.model.tied_embeddings && (stage_ == 0 || stage_ == p_ - 1))
      comm += 2 * 4 * ((chain_.embedding.ops.front().params + 1) / 2);
    if (plan_.tp > 1) comm += 2 * 4 * cpu_tp_chunk();
    set(sim::MemTag::CommBuffers, static_cast<double>(comm));
    // Host statics, from the stage's first task on (they outlive the step).
    std::vector<std::int32_t> host;
    if (plan_.offload.weights && layers > 0)
      host.push_back(cpu_buffer(BufKind::Working, static_cast<Bytes>(std::llround(4.0 * layers)), sim::MemTag::Params, true));
    if (host_states && !is_factored(plan_.optimizer)) {
      host.push_back(cpu_buffer(BufKind::Working, static_cast<Bytes>(std::llround(4.0 * stepped)), sim::MemTag::Params, true));
      host.push_back(cpu_buffer(BufKind::Working, static_cast<Bytes>(std::llround(states)),
                                sim::MemTag::OptimizerStates, true));
    }
    if (!host.empty() && cpu_first_task_ < static_cast<std::int32_t>(out_.tasks.size()))
      append_mem(cpu_first_task_, host, {});
  }

  // Compressed gradient exchange: encode on the compute lane, the
  // collective rounds the method needs, decode.
  void compress_and_reduce(const StageGradients& stage, std::int32_t after, std::vector<std::int32_t>& reduced) {
    const GradientExchange ex = compressed_exchange(plan_, chain_, stage, costs());
    reduced.push_back(decode(ex, -1, encode_and_send(ex, -1, after)));
  }
  // A compressed exchange's encode (on the compute lane, after `after`) and
  // its rounds (on the communication lane); the last round. `bucket` −1:
  // the stage's one exchange.
  std::int32_t encode_and_send(const GradientExchange& ex, std::int32_t bucket, std::int32_t after) {
    std::int32_t prev = codec(TaskOp::CompressEncode, ex.encode, bucket, after);
    int i = 0;
    for (const auto& [op, bytes] : ex.rounds) {
      TaskInfo ri = info(TaskOp::CompressRound, Part::None);
      ri.round = i++;
      ri.bucket = bucket;
      const std::int32_t t = task(sim::TaskKind::Collective, sim::Lane::Comm,
                                  costs().collective(op, Group::DP, static_cast<Bytes>(bytes)), sim::Phase::Comm,
                                  CommKind::DP, std::move(ri));
      dep(prev, t);
      prev = t;
    }
    return prev;
  }
  std::int32_t decode(const GradientExchange& ex, std::int32_t bucket, std::int32_t after) {
    return codec(TaskOp::CompressDecode, ex.decode, bucket, after);
  }
  // An encode or decode kernel on the compute lane, after `after`.
  std::int32_t codec(TaskOp op, Time d, std::int32_t bucket, std::int32_t after) {
    TaskInfo i = info(op, Part::None);
    i.bucket = bucket;
    const std::int32_t t = task(sim::TaskKind::Compute, sim::Lane::Compute, d, sim::Phase::Comm, CommKind::None, std::move(i));
    dep(after, t);
    return t;
  }

  // A parameter-server worker's pull of the stage's updated weights.
  std::int32_t ps_pull(double params) {
    return task(sim::TaskKind::Collective, sim::Lane::Comm,
                costs().collective(Collective::SendRecv, Group::DP, static_cast<Bytes>(params * per_.weights)),
                sim::Phase::Comm, CommKind::DP, info(TaskOp::PsPull, Part::None));
  }

  // --- compression.bucketed: a DDP communication hook per bucket ----------
  bool hooked() const {
    return plan_.dp > 1 && plan_.compression.method != CompressionMethod::None && plan_.compression.bucketed;
  }
  // The stage's layers, in the order their gradients complete (model
  // chunks from the last, each layer from its last): mine_.
  void collect_stage_layers() {
    mine_.clear();
    for (int k = static_cast<int>(chunks_.size()) - 1; k >= 0; --k) {
      if (k % p_ != stage_) continue;
      for (std::int64_t l = first_layer_[static_cast<std::size_t>(k) + 1] - 1;
           l >= first_layer_[static_cast<std::size_t>(k)]; --l)
        mine_.push_back(l);
    }
  }
  // The stage's buckets, as DDP fills them in backward order (25 MiB of
  // gradients, the head's alone first): which layer's last backward
  // completes each, and the rest (the last blocks and the embedding)
  // exchanged after the backward.
  void plan_hook_buckets() {
    hook_.clear();
    hook_closes_.assign(static_cast<std::size_t>(sc_.model.layers), -1);
    hook_head_ = -1;
    hook_rest_ = {};
    if (!hooked()) return;
    const double grad_bytes = reduced_grad_bytes_;
    const double cap = static_cast<double>(MemoryRules{}.grad_bucket_bytes);
    if (stage_ == p_ - 1 && chain_.head.params() > 0) {
      hook_head_ = 0;
      hook_.push_back({StageGradients{{}, false, true}, {}, kNone});
    }
    const std::vector<std::int64_t> none(chain_.kinds.size(), 0);
    hook_rest_.blocks = none;
    double fill = 0;
    for (std::int64_t l : mine_) {
      fill += static_cast<double>(chain_.block_at(l).params()) * grad_bytes;
      ++hook_rest_.blocks[static_cast<std::size_t>(chain_.kind_of[static_cast<std::size_t>(l)])];
      if (fill >= cap) {
        hook_closes_[static_cast<std::size_t>(l)] = static_cast<std::int32_t>(hook_.size());
        hook_.push_back({hook_rest_, {}, kNone});
        hook_rest_ = {};
        hook_rest_.blocks = none;
        fill = 0;
      }
    }
    hook_rest_.embedding = stage_ == 0;
  }
  // Bucket b is complete (after task `after`): its encode and rounds.
  void hook_send(std::int32_t b, std::int32_t after) {
    HookBucket& h = hook_[static_cast<std::size_t>(b)];
    h.exchange = compressed_exchange(plan_, chain_, h.grads, costs());
    h.last = encode_and_send(h.exchange, b, after);
  }
  // Whether a backward of model chunk k over microbatch mb completes its
  // layers' gradients (the chunk's last backward on the stage; not a pass
  // replayed alone).
  bool completes(int k, int mb) const {
    return hooked() && !folding_ && mb == last_bwd_mb_[static_cast<std::size_t>(k)];
  }
  // After the backward: the rest's exchange, then every bucket's decode.
  void hook_finish(std::int32_t after, std::vector<std::int32_t>& reduced) {
    if (hook_rest_.block_count() > 0 || hook_rest_.embedding) {
      hook_.push_back({hook_rest_, {}, kNone});
      hook_send(static_cast<std::int32_t>(hook_.size()) - 1, after);
    }
    for (std::size_t b = 0; b < hook_.size(); ++b)
      reduced.push_back(decode(hook_[b].exchange, static_cast<std::int32_t>(b), hook_[b].last));
  }

  struct HookBucket {
    StageGradients grads;
    GradientExchange exchange;  // priced when sent
    std::int32_t last = kNone;  // its last round
  };
  std::vector<HookBucket> hook_;          // compression.bucketed: the stage's buckets
  std::vector<std::int32_t> hook_closes_;  // by layer: the bucket its gradients complete, else −1
  std::int32_t hook_head_ = -1;           // the head's bucket, else −1
  StageGradients hook_rest_;              // exchanged after the backward
  std::vector<int> last_bwd_mb_;          // by model chunk: the microbatch of its last backward on the stage
  std::vector<int> stage_chunks_;         // by virtual stage: the stage's model chunk
  std::vector<std::int64_t> mine_;        // the stage's layers in backward order (collect_stage_layers)

  const Scenario& sc_;
  const Plan& plan_;
  const StepCosts& costs_;
  // The stage being lowered's costs (StepCosts::stage: its GPUs' where
  // stages run on different ones).
  const StepCosts* stage_costs_;
  const StepCosts& costs() const { return *stage_costs_; }
  StepProgram out_;
  // flow_of's recent flows of out_ (cleared whenever out_ changes).
  struct FlowMemo {
    Transfer x;
    int from = 0, to = 0;
    std::int32_t flow = -1;
    Time alone = 0;
  };
  std::array<FlowMemo, 8> flow_memo_{};
  std::size_t flow_memo_next_ = 0;
  MemoryEstimate statics_;  // the analytical model's static bytes per stage
  bool merge_ = false;      // chunk passes as one task where nothing waits inside
  std::vector<KindTimes> kind_times_;  // per kind of block, this stage's (price_kinds)
  bool folding_ = false;    // fold_pass is replaying a pass alone
  std::int32_t prefetched_gather_ = kNone;  // fold_pass: a pass's first ZeRO-3 gather, issued before it
  std::vector<int> gather_mb_;  // by model chunk: the microbatch of its first forward on the stage (gather_in_forward), else -1
  bool cpu_ = false;        // the CPU backend's kernels' buffers (Scenario::kernel_memory)
  std::array<std::int32_t, sim::kMemTagCount> cpu_static_{};  // the stage's static buffers by tag (CPU)
  std::vector<CpuBucket> cpu_buckets_;                        // the stage's buckets (CPU)
  std::int32_t cpu_serial_ = 0;       // cpu_buffer's numbers
  std::int32_t cpu_first_task_ = 0;   // the stage's first task (CPU host statics)
  std::vector<std::int32_t> cpu_layer_params_;      // by layer: its whole weights on the device (CPU)
  std::vector<std::int32_t> cpu_layer_shard_grad_;  // by layer: its ZeRO-3 gradient chunk (CPU)
  CpuKernelBytes cpu_bytes_;
  // The CPU kernels' buffers by (model chunk, microbatch): the backward
  // buffers and scratch, and a chunk's output until its send.
  std::vector<std::int32_t> back_set_, back_scratch_, chunk_out_;
  // Per stage state.
  std::int32_t stage_ = 0;
  int chunk_ = -1;  // model chunk of the schedule step being lowered, −1 outside one
  std::int32_t step_first_ = kNone;
  std::int32_t pending_send_ = kNone;
  std::int32_t last_compute_ = kNone;
  std::vector<std::int32_t> last_bwd_of_layer_;
  std::int32_t embedding_bwd_ = kNone, head_bwd_ = kNone;
  std::vector<std::int32_t> recent_, recent_fetch_, zero3_reduced_;
  std::unordered_map<std::uint64_t, std::int32_t> offloaded_;  // offload copy by buffer code
  std::unordered_map<std::uint64_t, std::int32_t> buffers_;
  std::vector<std::int32_t> chunk_act_;   // merged forward's buffer by (model chunk, microbatch)
  std::vector<std::int32_t> chunk_host_;  // ... and what it moved to host memory (folded offload)
  std::vector<std::optional<Split>> folded_;  // fold_pass by (model chunk, pass)
  // fold_pass's scratch program, replay storage and per-stage lists.
  struct FoldScratch {
    StepProgram program;
    ProgramWorkspace workspace;
    std::vector<std::int32_t> recent, recent_fetch, zero3_reduced, last_bwd_of_layer;
    std::unordered_map<std::uint64_t, std::int32_t> offloaded, buffers;
  } fold_;
  std::vector<std::optional<MergedPass>> merged_;  // forward_pass, backward_pass by (model chunk, pass)
  // Cross-stage: first compute task and send of each (model chunk, microbatch).
  std::vector<std::int32_t> fwd_first_, bwd_first_, fwd_send_, bwd_send_;
};

}  // namespace

namespace {
// Scenario::serial_ranks: each stage's tasks run in program order, one at a
// time, as the executor's thread runs them. The program adds a task only
// after the tasks it depends on within its stage (BucketPlan checks the
// same order), so the chain adds no cycle.
void chain_stages(StepProgram& p) {
  std::vector<std::int32_t> last(static_cast<std::size_t>(p.stages), -1);
  for (std::size_t i = 0; i < p.tasks.size(); ++i) {
    auto& prev = last[static_cast<std::size_t>(p.tasks[i].stage)];
    if (prev >= 0) p.deps.emplace_back(prev, static_cast<std::int32_t>(i));
    prev = static_cast<std::int32_t>(i);
  }
}

StepProgram build(const Scenario& sc, const StepCosts& costs, Granularity g, const LayerPlan* layers,
                  const PipelineSchedule* schedule, StepProgram recycled) {
  StepBuilder b(sc, costs, g, layers, std::move(recycled));
  StepProgram p;
  if (schedule) {
    p = std::move(b).build(*schedule);
  } else {
    const PipelineSchedule own = make_schedule(sc.plan.schedule, static_cast<int>(sc.plan.pp),
                                               static_cast<int>(sc.plan.virtual_stages),
                                               static_cast<int>(microbatches(sc.plan, sc.batch)));
    p = std::move(b).build(own);
  }
  if (sc.serial_ranks) chain_stages(p);
  if (!sc.cluster.slow.empty()) slow_down(p, fixed_stage_slowdown(sc));
  p.interference = 0;
  for (int s = 0; s < p.stages; ++s) p.interference = std::max(p.interference, costs.stage(s).interference_fraction());
  return p;
}
}  // namespace

StepProgram build_step_program(const Scenario& sc, const StepCosts& costs, Granularity g, const LayerPlan* layers,
                               const PipelineSchedule* schedule) {
  return build(sc, costs, g, layers, schedule, {});
}

void build_step_program(const Scenario& sc, const StepCosts& costs, Granularity g, const LayerPlan* layers,
                        const PipelineSchedule* schedule, ProgramWorkspace& w) {
  w.program = build(sc, costs, g, layers, schedule, std::move(w.program));
}

LoweredStep lower_step(const Scenario& sc, const StepCosts& costs, const LayerPlan* layers) {
  const StepProgram p = build_step_program(sc, costs, Granularity::Layer, layers);
  return lowered_step(p);
}

LoweredStep lowered_step(const StepProgram& p) {
  LoweredStep low;
  low.graph = to_task_graph(p);
  low.stages = p.stages;
  low.layers = p.layers;
  low.comm_kind.reserve(p.tasks.size());
  low.info = p.info;
  if (!p.splits.empty()) {
    std::vector<std::uint32_t> count(p.buffers.size() + 1, 0);
    for (const auto& s : p.splits) count[static_cast<std::size_t>(s.buffer)] = s.count;
    low.tensors_at.assign(p.buffers.size() + 1, 0);
    for (std::size_t b = 0; b < p.buffers.size(); ++b) low.tensors_at[b + 1] = low.tensors_at[b] + count[b];
    low.tensors.resize(low.tensors_at.back());
    for (const auto& s : p.splits)
      std::copy_n(p.tensors.begin() + s.first, s.count,
                  low.tensors.begin() + low.tensors_at[static_cast<std::size_t>(s.buffer)]);
  }
  for (const auto& t : p.tasks) low.comm_kind.push_back(t.comm);
  for (int s = 0; s < p.stages; ++s) {
    low.gpu_pool.push_back(gpu_pool_of(s));
    low.host_pool.push_back(host_pool_of(s));
  }
  return low;
}

namespace {

void add_step_flops(const Scenario& sc, const Keeps& keeps, StepPrediction& pr) {
  // FLOPs of the whole model for the global batch: model FLOPs count each
  // matrix product once (Korthikanti Eq. 7); hardware FLOPs add recompute.
  cost::ExpandOptions one;
  one.attention = sc.plan.implementation.attention;
  const cost::OpChain whole = cost::expand(sc.model, one);
  const double seqs = static_cast<double>(sc.batch.global);
  pr.model_flops_per_step = whole.model_flops() * seqs;
  // The matrix products a selectively kept block reruns (Megatron-LM's
  // attention core, or all off torchtitan's save list).
  std::vector<double> rerun(whole.kinds.size(), 0);  // per kind of block
  for (std::size_t k = 0; k < whole.kinds.size(); ++k)
    for (const auto& op : whole.kinds[k].ops)
      rerun[k] += cost::rerun_share(op, selective_policy(sc.plan)) * op.fwd_flops;
  double recompute = 0;
  for (std::size_t l = 0; l < keeps.size(); ++l) {
    const auto kind = static_cast<std::size_t>(whole.kind_of[l]);
    if (keeps[l] == Keep::Input || keeps[l] == Keep::Nothing) recompute += whole.kinds[kind].fwd_flops();
    else if (keeps[l] == Keep::Selective) recompute += rerun[kind];
  }
  pr.hardware_flops_per_step = pr.model_flops_per_step + recompute * seqs;
}

}  // namespace

void finish_prediction(const Scenario& sc, const Keeps& keeps, StepPrediction& pr) {
  // PipeDream (Narayanan et al. 2019, Sec. 3.2: 1F1B in steady state, no
  // flush) and PipeDream-2BW (Narayanan et al. 2021, Sec. 3.1: weight
  // updates double-buffered so the pipeline is never flushed) run step
  // after step through a full pipeline: in the steady state the critical
  // stage never waits for the fill and drain that one flushed step shows
  // as its bubble. The step is what remains; every stage's idle shrinks by
  // as much. Strata's executors flush (their steps run one after another),
  // so their predictions keep it.
  const bool flushless = sc.plan.schedule == Schedule::PipeDream || sc.plan.schedule == Schedule::PipeDream2BW;
  if (flushless && sc.plan.pp > 1 && !sc.executed) {
    const Time fill = pr.breakdown.bubble;
    pr.pipeline_fill = fill;
    pr.step_time -= fill;
    pr.breakdown.bubble = 0;
    for (auto& st : pr.per_stage) st.bubble = std::max<Time>(0, st.bubble - fill);
  }
  pr.bubble_fraction =
      pr.step_time > 0 ? static_cast<double>(pr.breakdown.bubble) / static_cast<double>(pr.step_time) : 0;
  add_step_flops(sc, keeps, pr);
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
                            LoweredStep* lowered_out, const LayerPlan* layers) {
  const StepProgram p = build_step_program(sc, costs, Granularity::Layer, layers);
  require_countable_step(sc, serial_ns(p), p.tasks.size());
  // Without a caller for the graph or the engine's run, the program's own
  // replay gives the same figures (step_program_test.cpp holds them equal
  // task by task) without building either.
  if (!run_out && !lowered_out) return prediction(sc, p, replay(p));
  LoweredStep low = lowered_step(p);
  sim::RunResult run = sim::simulate(low.graph);
  const StepPrediction pr = prediction(sc, p, from_engine(p, run));
  if (run_out) *run_out = std::move(run);
  if (lowered_out) *lowered_out = std::move(low);
  return pr;
}

}  // namespace strata::strategies
