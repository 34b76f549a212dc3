#include "backend/cuda/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "backend/cuda/blas.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gpt.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/cuda/optimizer.hpp"
#include "costmodel/ops.hpp"
#include "sim/error.hpp"
#include "strategies/memory.hpp"
#include "strategies/step_costs.hpp"

namespace strata::backend::cuda {

namespace {

using strategies::Part;
using strategies::TaskInfo;
using strategies::TaskOp;
using Clock = std::chrono::steady_clock;
using Key = std::pair<int, int>;  // (layer or chunk, microbatch)

// A device tensor's contents in the pinned host pool (an offloaded
// activation). Released on the pool's current stream, like DeviceTensor.
class PinnedTensor {
 public:
  PinnedTensor() = default;
  PinnedTensor(PinnedHostPool& pool, Shape shape, Bytes bytes, MemTag tag)
      : pool_(&pool), p_(pool.allocate(bytes, tag)), bytes_(bytes), shape_(shape), tag_(tag) {}
  ~PinnedTensor() { release(); }
  PinnedTensor(PinnedTensor&& o) noexcept { *this = std::move(o); }
  PinnedTensor& operator=(PinnedTensor&& o) noexcept {
    if (this != &o) {
      release();
      std::swap(pool_, o.pool_);
      std::swap(p_, o.p_);
      std::swap(bytes_, o.bytes_);
      std::swap(shape_, o.shape_);
      std::swap(tag_, o.tag_);
    }
    return *this;
  }
  void release() noexcept {
    if (pool_ != nullptr && p_ != nullptr) pool_->deallocate(p_, bytes_, tag_);
    pool_ = nullptr;
    p_ = nullptr;
  }
  bool empty() const { return p_ == nullptr; }
  void* data() const { return p_; }
  Bytes bytes() const { return bytes_; }
  const Shape& shape() const { return shape_; }
  MemTag tag() const { return tag_; }

 private:
  PinnedHostPool* pool_ = nullptr;
  void* p_ = nullptr;
  Bytes bytes_ = 0;
  Shape shape_;
  MemTag tag_ = MemTag::Other;
};

// Owns one CUDA event or stream (destroyed with it).
struct Event {
  cudaEvent_t e = nullptr;
  explicit Event(unsigned flags = cudaEventDefault) { STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags)); }
  ~Event() {
    if (e != nullptr) cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// The simulator's peak of stage 0's device pool for the plan (runtime
// included), to put beside an out-of-memory error.
std::string predicted_peak(const strategies::Scenario& sc) {
  try {
    sim::RunResult run;
    strategies::LoweredStep low;
    strategies::predict_step(sc, strategies::ModelStepCosts(sc), &run, &low);
    return "the simulator predicts a device peak of " + gib_text(run.at(low.graph.pool("s0.gpu")).peak) +
           " for this plan (CUDA runtime and workspace included)";
  } catch (const std::exception& e) {
    return std::string("no prediction: ") + e.what();
  }
}

}  // namespace

struct Executor::Impl {
  strategies::Scenario sc;
  ExecutorOptions opt;
  strategies::LoweredStep low;
  int m = 1, chunks = 1;
  std::int64_t micro = 1, seq = 1;
  std::vector<std::int64_t> chunk_size, first_layer;
  std::vector<int> chunk_of_layer;
  bool core_recompute = false;
  std::vector<std::int32_t> order;  // the tasks, in graph order
  // Declaration order is destruction order reversed: the allocators outlive
  // every tensor, streams and events outlive nothing that uses them.
  DeviceAllocator dev;
  PinnedHostPool host;
  std::vector<std::unique_ptr<Stream>> streams;  // one per queue resource used
  std::vector<int> stream_of;                    // by task index: into streams
  std::vector<std::vector<std::int32_t>> waits;  // by task index: tasks on other streams it waits for
  int compute = -1;                              // the compute stream's index
  std::vector<std::unique_ptr<Event>> start, end;  // by task index
  Event step_start;
  std::unique_ptr<Blas> blas;
  std::unique_ptr<GptModel> model;
  std::unique_ptr<Optimizer> optimizer;
  DeviceIndexTensor tokens, targets;  // the step's ids
  BasicDeviceTensor<double> losses;   // per microbatch
  BasicDeviceTensor<int> flags;       // per parameter: a non-finite gradient; last: any
  // One step's state.
  std::map<int, EmbeddingSaved> emb;
  std::map<Key, BlockSaved> saved;
  std::map<Key, std::vector<PinnedTensor>> offloaded;
  std::map<int, HeadSaved> head;
  std::map<Key, ActTensor> act;
  std::map<Key, BackwardBuffers> grad;
  std::map<int, ActTensor> recompute_carry;
  bool broken = false;
  std::int64_t steps_done = 0;
  std::vector<StepGemm> gemms;  // the last step's, with profile_gemms

  Impl(const strategies::Scenario& s, ExecutorOptions o);
  cudaStream_t stream(int i) const { return streams[static_cast<std::size_t>(i)]->s; }
  void run_task(std::int32_t index);
  void forward(const TaskInfo& t);
  void backward(const TaskInfo& t);
  void recompute(const TaskInfo& t);
  void keep_for_backward(int layer, BlockSaved& s) const;
  // The choices of the chunk that holds `layer` (the lowering's).
  std::span<const strategies::Keep> chunk_keeps(int layer) const;
  void offload(const TaskInfo& t, cudaStream_t s);
  void prefetch(const TaskInfo& t, cudaStream_t s);
  void optimizer_step();
  ActTensor take_activation(int chunk, int mb);
  std::string id(std::int32_t i) const { return low.graph.tasks()[static_cast<std::size_t>(i)].id; }
  void clear_step_state();
};

std::optional<std::string> Executor::unsupported(const strategies::Scenario& sc) {
  const auto& p = sc.plan;
  const auto& md = sc.model;
  if (p.gpus() * p.ep > 1)
    return "the plan runs on " + std::to_string(p.gpus() * p.ep) + " GPUs (dp " + std::to_string(p.dp) +
           " x tp " + std::to_string(p.tp) + " x pp " + std::to_string(p.pp) + " x cp " + std::to_string(p.cp) +
           " x ep " + std::to_string(p.ep) +
           "); the CUDA executor runs one process on one GPU (dp = tp = pp = cp = ep = 1): "
           "multi-GPU execution over NCCL (one process per GPU under mpirun or srun) is not "
           "implemented yet; the CPU backend executes such plans with rank threads";
  if (md.moe) return "mixture-of-experts models are not implemented by the CUDA backend";
  if (md.kv_heads != 0 && md.kv_heads != md.heads)
    return "grouped-query attention (kv_heads != heads) is not implemented by the CUDA backend";
  if (md.position_embedding != cost::PositionEmbedding::Learned &&
      md.position_embedding != cost::PositionEmbedding::None)
    return "only learned positions (or none) are implemented by the CUDA backend";
  if (md.dropout) return "dropout is not implemented by the CUDA backend (set the model's dropout to false)";
  if (p.precision == cost::Precision::FP16)
    return "fp16 mixed precision is not implemented by the CUDA backend: fp16's 5-bit exponent needs loss "
           "scaling (dynamic scale, overflow checks and skipped steps), which it does not do; set "
           "plan.precision to bf16 or fp32";
  if (p.precision == cost::Precision::FP8)
    return "fp8 is not implemented by the CUDA backend (no per-tensor scaling nor fp8 products): set "
           "plan.precision to bf16 or fp32";
  if (p.precision == cost::Precision::BF16 && !p.implementation.fp32_grad_accumulation)
    return "bf16 with bf16 gradients is not implemented by the CUDA backend: it accumulates bf16 models' "
           "gradients in fp32, as Megatron-LM does for bf16; set plan.implementation.fp32_grad_accumulation "
           "to true (4 bytes a gradient in the memory model)";
  if (p.implementation.attention != cost::AttentionKernel::Standard)
    return "the CUDA backend computes standard attention (scores materialised) only; flash "
           "attention is not implemented yet: set plan.implementation.attention to standard";
  if (p.offload.weights) return "weight offload is not executed by the CUDA backend yet";
  if (p.offload.optimizer != strategies::OffloadTarget::None)
    return "optimizer offload (ZeRO-Offload, ZeRO-Infinity) is not executed by the CUDA backend yet";
  if (p.compression.method != strategies::CompressionMethod::None)
    return "gradient compression needs data parallelism, which the CUDA backend does not execute yet";
  return unsupported_optimizer(p.optimizer);
}

Executor::Impl::Impl(const strategies::Scenario& s, ExecutorOptions o)
    : sc(s), opt(o), dev(o.device) {
  const auto& plan = sc.plan;
  low = strategies::lower_step(sc, strategies::ModelStepCosts(sc));
  const auto& tasks = low.graph.tasks();
  if (low.info.size() != tasks.size()) throw Error("executor: the lowering gave no TaskInfo for some tasks");
  if (low.stages != 1) throw Error("executor: the CUDA executor runs one pipeline stage");
  m = static_cast<int>(strategies::microbatches(plan, sc.batch));
  micro = sc.batch.micro;
  seq = sc.model.seq_len;
  chunk_size = strategies::chunk_layers(plan, sc.model.layers);
  chunks = static_cast<int>(chunk_size.size());
  first_layer.assign(chunk_size.size() + 1, 0);
  for (std::size_t k = 0; k < chunk_size.size(); ++k) first_layer[k + 1] = first_layer[k] + chunk_size[k];
  chunk_of_layer.assign(static_cast<std::size_t>(sc.model.layers), 0);
  for (int k = 0; k < chunks; ++k)
    for (auto l = first_layer[static_cast<std::size_t>(k)]; l < first_layer[static_cast<std::size_t>(k) + 1]; ++l)
      chunk_of_layer[static_cast<std::size_t>(l)] = k;

  // Every task's stream (one per queue resource) and what it runs.
  std::map<std::int32_t, int> stream_of_resource;
  stream_of.assign(tasks.size(), -1);
  waits.assign(tasks.size(), {});
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    order.push_back(static_cast<std::int32_t>(i));
    const TaskInfo& t = low.info[i];
    const sim::Task& task = tasks[i];
    switch (t.op) {
      case TaskOp::Framework:
      case TaskOp::Forward:
      case TaskOp::Backward:
      case TaskOp::Recompute:
      case TaskOp::Offload:
      case TaskOp::Prefetch:
      case TaskOp::OptimizerStep: break;
      default: throw Error("executor: task " + task.id + " is not executed by the CUDA backend");
    }
    if (t.op == TaskOp::Recompute && t.core_only) core_recompute = true;
    std::optional<sim::ResourceId> queue;
    for (const auto r : task.resources)
      if (low.graph.at(r).kind != sim::ResourceKind::Link) queue = r;
    if (!queue) throw Error("executor: task " + task.id + " runs on no stream");
    const auto& res = low.graph.at(*queue);
    if (res.kind == sim::ResourceKind::WorkerPool)
      throw Error("executor: task " + task.id + " runs on the host (" + res.name +
                  "), which the CUDA executor does not execute");
    auto [it, added] = stream_of_resource.emplace(queue->index, static_cast<int>(streams.size()));
    if (added) {
      streams.push_back(std::make_unique<Stream>());
      if (res.name.ends_with(".compute")) compute = it->second;
    }
    stream_of[i] = it->second;
    const bool layer_work = t.op == TaskOp::Forward || t.op == TaskOp::Backward ||
                            t.op == TaskOp::Recompute || t.op == TaskOp::OptimizerStep;
    if (layer_work && !res.name.ends_with(".compute"))
      throw Error("executor: task " + task.id + " computes on " + res.name + ", not a compute stream");
  }
  low.graph.for_each_edge([&](sim::TaskId a, sim::TaskId b, sim::EdgeKind) {
    if (a.index > b.index)
      throw Error("executor: " + tasks[static_cast<std::size_t>(b.index)].id + " depends on the later task " +
                  tasks[static_cast<std::size_t>(a.index)].id);
    if (stream_of[static_cast<std::size_t>(a.index)] != stream_of[static_cast<std::size_t>(b.index)])
      waits[static_cast<std::size_t>(b.index)].push_back(a.index);
  });
  if (compute < 0) throw Error("executor: the lowered step has no compute stream");
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    start.push_back(std::make_unique<Event>());
    end.push_back(std::make_unique<Event>());
  }

  const cudaStream_t c = stream(compute);
  dev.set_stream(c);
  host.set_stream(c);
  try {
    blas = std::make_unique<Blas>(dev);
    blas->profile(opt.profile_gemms);
    model = std::make_unique<GptModel>(sc.model, dev, Ctx{c, blas.get()}, opt.seed, plan.precision);
    optimizer = make_optimizer(plan.optimizer, opt.lr, opt.weight_decay, dev);
    const std::int64_t n = sc.batch.global * seq;
    tokens = DeviceIndexTensor(dev, {n}, MemTag::Other, Fill::Uninitialised);
    targets = DeviceIndexTensor(dev, {n}, MemTag::Other, Fill::Uninitialised);
    losses = BasicDeviceTensor<double>(dev, {m}, MemTag::Other);
    flags = BasicDeviceTensor<int>(dev, {static_cast<std::int64_t>(model->params().size()) + 1}, MemTag::Other);
    STRATA_CUDA_CHECK(cudaStreamSynchronize(c));
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(std::string(e.what()) + "; " + predicted_peak(sc), e.requested, e.live, e.device_free,
                      e.device_total);
  }
}

void Executor::Impl::clear_step_state() {
  // Nothing enqueued may still use what is freed here.
  for (auto& st : streams)
    if (cudaStreamSynchronize(st->s) != cudaSuccess) cudaGetLastError();
  emb.clear();
  saved.clear();
  offloaded.clear();
  head.clear();
  act.clear();
  grad.clear();
  recompute_carry.clear();
}

void Executor::Impl::run_task(std::int32_t index) {
  const TaskInfo& t = low.info[static_cast<std::size_t>(index)];
  const cudaStream_t s = stream(stream_of[static_cast<std::size_t>(index)]);
  switch (t.op) {
    case TaskOp::Framework: return;
    case TaskOp::Forward: return forward(t);
    case TaskOp::Backward: return backward(t);
    case TaskOp::Recompute: return recompute(t);
    case TaskOp::Offload: return offload(t, s);
    case TaskOp::Prefetch: return prefetch(t, s);
    case TaskOp::OptimizerStep: return optimizer_step();
    default: break;
  }
  throw Error("executor: task " + id(index) + " is not executed by the CUDA backend");
}

ActTensor Executor::Impl::take_activation(int chunk, int mb) {
  const auto it = act.find({chunk, mb});
  if (it == act.end())
    throw Error("executor: no input for model chunk " + std::to_string(chunk) + ", microbatch " + std::to_string(mb));
  ActTensor x = std::move(it->second);
  act.erase(it);
  return x;
}

std::span<const strategies::Keep> Executor::Impl::chunk_keeps(int layer) const {
  const auto k = static_cast<std::size_t>(chunk_of_layer[static_cast<std::size_t>(layer)]);
  return {low.layers.keeps.data() + first_layer[k], static_cast<std::size_t>(chunk_size[k])};
}

// What the lowering's choice for the layer keeps (docs/remat.md).
void Executor::Impl::keep_for_backward(int layer, BlockSaved& s) const {
  using strategies::Keep;
  switch (low.layers.keeps[static_cast<std::size_t>(layer)]) {
    case Keep::All: return;
    case Keep::Selective:
      if (core_recompute) GptModel::drop_for_recompute(s, cost::Recompute::Selective);
      return;
    case Keep::Input: GptModel::drop_for_recompute(s, cost::Recompute::Full); return;
    case Keep::Nothing: s = BlockSaved{}; return;
  }
}

void Executor::Impl::forward(const TaskInfo& t) {
  const int mb = t.microbatch, k = t.chunk;
  const std::int64_t at = static_cast<std::int64_t>(mb) * micro * seq;
  switch (t.part) {
    case Part::Embedding:
      act[{k, mb}] = model->embedding_forward(tokens.data() + at, micro, emb[mb]);
      return;
    case Part::Layer: {
      ActTensor x = take_activation(k, mb);
      BlockSaved& s = saved[{t.layer, mb}];
      ActTensor y = model->block_forward(t.layer, std::move(x), s);
      keep_for_backward(t.layer, s);
      act[{k, mb}] = std::move(y);
      return;
    }
    case Part::Head:
      model->head_forward(take_activation(k, mb), targets.data() + at, 1.0f / static_cast<float>(m), head[mb],
                          losses.data() + mb);
      return;
    case Part::None: break;
  }
  throw Error("executor: a forward task names no part");
}

void Executor::Impl::backward(const TaskInfo& t) {
  const int mb = t.microbatch, k = t.chunk;
  switch (t.part) {
    case Part::Head: {
      BackwardBuffers b = model->backward_buffers(micro);
      model->head_backward(head.at(mb), b);
      head.erase(mb);
      grad[{k, mb}] = std::move(b);
      return;
    }
    case Part::Layer: {
      const auto it = saved.find({t.layer, mb});
      if (it == saved.end()) throw Error("executor: layer " + std::to_string(t.layer) + " kept nothing");
      model->block_backward(t.layer, it->second, grad.at({k, mb}));
      saved.erase(it);
      return;
    }
    case Part::Embedding: {
      model->embedding_backward(emb.at(mb), grad.at({k, mb}));
      emb.erase(mb);
      grad.erase({k, mb});
      return;
    }
    case Part::None: break;
  }
  throw Error("executor: a backward task names no part");
}

void Executor::Impl::recompute(const TaskInfo& t) {
  const int L = t.layer, mb = t.microbatch;
  BlockSaved& s = saved.at({L, mb});
  // The layer's position in its chunk and its segment.
  const auto keeps = chunk_keeps(L);
  const std::int64_t i = L - first_layer[static_cast<std::size_t>(chunk_of_layer[static_cast<std::size_t>(L)])];
  const bool last = strategies::segment_end(keeps, i);
  const bool first = t.core_only || strategies::segment_start(keeps, i) == i;
  if (t.core_only || (first && last)) {  // the attention core, or a one-layer segment
    model->recompute(L, s);
    return;
  }
  // A longer segment reruns from its first layer's kept input, layer by
  // layer, each recompute task one layer.
  ActTensor in;
  if (first) {
    in = s.x.clone(MemTag::Activations);
  } else {
    in = std::move(recompute_carry.at(mb));
    recompute_carry.erase(mb);
  }
  ActTensor out = model->block_forward(L, std::move(in), s);
  if (!last) recompute_carry[mb] = std::move(out);
}

// The layer's saved tensors to pinned host memory, on the d2h stream; the
// device copies are freed in that stream's order (after the copies). With
// the vdnn planner only the inputs of its linear layers go.
void Executor::Impl::offload(const TaskInfo& t, cudaStream_t s) {
  BlockSaved& b = saved.at({t.layer, t.microbatch});
  auto& out = offloaded[{t.layer, t.microbatch}];
  out.clear();
  const bool linear_only = low.layers.swaps[static_cast<std::size_t>(t.layer)] == strategies::Swap::LinearInputs;
  for (ActTensor* d : b.tensors()) {
    const bool linear_input = d == &b.ln1 || d == &b.attn || d == &b.ln2 || d == &b.act;
    if (d->empty() || (linear_only && !linear_input)) {
      out.emplace_back();
      continue;
    }
    PinnedTensor h(host, d->shape(), d->bytes(), d->tag());
    STRATA_CUDA_CHECK(cudaMemcpyAsync(h.data(), d->data(), static_cast<std::size_t>(d->bytes()),
                                      cudaMemcpyDeviceToHost, s));
    d->release();
    out.push_back(std::move(h));
  }
}

// ... and back before the layer's backward, on the h2d stream.
void Executor::Impl::prefetch(const TaskInfo& t, cudaStream_t s) {
  BlockSaved& b = saved.at({t.layer, t.microbatch});
  const auto it = offloaded.find({t.layer, t.microbatch});
  if (it == offloaded.end()) throw Error("executor: layer " + std::to_string(t.layer) + " was not offloaded");
  const auto slots = b.tensors();
  for (std::size_t j = 0; j < slots.size(); ++j) {
    PinnedTensor& h = it->second.at(j);
    if (h.empty()) continue;
    ActTensor d(dev, h.shape(), model->dtype(), h.tag(), Fill::Uninitialised);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(d.data(), h.data(), static_cast<std::size_t>(h.bytes()),
                                      cudaMemcpyHostToDevice, s));
    h.release();
    *slots[j] = std::move(d);
  }
  offloaded.erase(it);
}

// Non-finite gradients are flagged per tensor (and in the last flag); the
// update kernels skip themselves when it is set, and step() reports it.
void Executor::Impl::optimizer_step() {
  const cudaStream_t c = stream(compute);
  auto grads = model->grads();
  int* f = flags.data();
  const auto P = static_cast<std::int64_t>(grads.size());
  for (std::int64_t i = 0; i < P; ++i)
    kernels::flag_non_finite(c, grads[static_cast<std::size_t>(i)].data(), grads[static_cast<std::size_t>(i)].numel(),
                             f + i, f + P);
  optimizer->step(c, model->params(), grads, f + P);
  // bf16: the working weights from the fp32 master weights just stepped.
  model->refresh_working();
}

Executor::Executor(const strategies::Scenario& sc, ExecutorOptions opts) {
  if (auto why = unsupported(sc)) throw Error("executor: " + *why);
  strategies::require_valid_plan(sc);
  const auto devs = devices();
  if (devs.empty()) throw Error("executor: no CUDA device is visible (no GPU, or no driver)");
  if (opts.device < 0 || opts.device >= static_cast<int>(devs.size()))
    throw Error("executor: CUDA device " + std::to_string(opts.device) + " does not exist (" +
                std::to_string(devs.size()) + " visible)");
  impl_ = std::make_unique<Impl>(sc, opts);
}

Executor::~Executor() {
  if (impl_) impl_->clear_step_state();
}

const strategies::LoweredStep& Executor::lowered() const { return impl_->low; }

cpu::StepResult Executor::step(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
  Impl& I = *impl_;
  if (I.broken) throw Error("executor: an earlier step failed; make a new executor");
  const auto n = static_cast<std::size_t>(I.sc.batch.global * I.seq);
  if (tokens.size() != n || targets.size() != n)
    throw Error("executor: a step needs global batch × seq_len = " + std::to_string(n) +
                " tokens and targets (got " + std::to_string(tokens.size()) + " and " +
                std::to_string(targets.size()) + ")");
  check_ids(tokens, I.sc.model.vocab, "token");
  check_ids(targets, I.sc.model.vocab, "target");
  const cudaStream_t c = I.stream(I.compute);
  const auto t0 = Clock::now();
  std::vector<double> loss;
  std::vector<int> flags;
  try {
    I.dev.set_stream(c);
    I.host.set_stream(c);
    // Everything the last step enqueued is done (step() synchronises at its
    // end), so the peaks restart from the bytes alive between steps.
    I.dev.reset_peaks();
    I.host.reset_peaks();
    if (I.opt.profile_gemms) I.blas->profile(true);  // restart the records
    I.tokens.upload(tokens);
    I.targets.upload(targets);
    I.losses.zero();
    I.flags.zero();
    I.model->zero_grads();
    STRATA_CUDA_CHECK(cudaEventRecord(I.step_start.e, c));
    for (std::size_t k = 0; k < I.streams.size(); ++k)
      if (static_cast<int>(k) != I.compute) STRATA_CUDA_CHECK(cudaStreamWaitEvent(I.stream(static_cast<int>(k)), I.step_start.e, 0));
    for (const std::int32_t i : I.order) {
      const auto ii = static_cast<std::size_t>(i);
      const cudaStream_t s = I.stream(I.stream_of[ii]);
      for (const std::int32_t j : I.waits[ii]) STRATA_CUDA_CHECK(cudaStreamWaitEvent(s, I.end[static_cast<std::size_t>(j)]->e, 0));
      I.dev.set_stream(s);
      I.host.set_stream(s);
      STRATA_CUDA_CHECK(cudaEventRecord(I.start[ii]->e, s));
      I.run_task(i);
      STRATA_CUDA_CHECK(cudaEventRecord(I.end[ii]->e, s));
    }
    I.dev.set_stream(c);
    I.host.set_stream(c);
    if (!I.saved.empty() || !I.act.empty() || !I.grad.empty() || !I.emb.empty() || !I.head.empty() ||
        !I.offloaded.empty())
      throw Error("executor: the step ended holding activations");
    for (auto& s : I.streams) STRATA_CUDA_CHECK(cudaStreamSynchronize(s->s));
    loss = I.losses.download();
    flags = I.flags.download();
    if (I.opt.profile_gemms) {
      I.gemms.clear();
      for (const auto& g : I.blas->profiled()) I.gemms.push_back({g.m, g.n, g.k, g.batch, g.seconds});
    }
  } catch (const OutOfMemory& e) {
    I.broken = true;
    I.clear_step_state();
    throw OutOfMemory(std::string(e.what()) + "; " + predicted_peak(I.sc), e.requested, e.live, e.device_free,
                      e.device_total);
  } catch (...) {
    I.broken = true;
    I.clear_step_state();
    throw;
  }
  cpu::StepResult out;
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ++I.steps_done;
  const std::string where = "executor: step " + std::to_string(I.steps_done) + ", rank 0 (stage 0)";
  for (int mb = 0; mb < I.m; ++mb)
    if (!std::isfinite(loss[static_cast<std::size_t>(mb)])) {
      I.broken = true;
      throw Error(where + ": the loss of microbatch " + std::to_string(mb) + " is " +
                  std::to_string(loss[static_cast<std::size_t>(mb)]) +
                  " (the run diverged: lower the learning rate)");
    }
  if (flags.back() != 0) {
    I.broken = true;
    std::string names;
    for (std::size_t i = 0; i + 1 < flags.size(); ++i)
      if (flags[i] != 0) names += (names.empty() ? "" : ", ") + I.model->names()[i];
    throw Error(where + ": the gradients of " + names +
                " hold NaN or Inf (the run diverged or overflowed); the optimizer step was skipped");
  }
  for (const double l : loss) out.loss += l;
  out.loss /= static_cast<double>(I.m);
  out.memory.push_back({0, 0, I.dev.stats(), I.host.stats()});
  for (const std::int32_t i : I.order) {
    float a = 0, b = 0;
    const auto ii = static_cast<std::size_t>(i);
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&a, I.step_start.e, I.start[ii]->e));
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&b, I.step_start.e, I.end[ii]->e));
    out.tasks.push_back({i, 0, a * 1e-3, std::max(a, b) * 1e-3});
  }
  return out;
}

sim::RunResult Executor::measured(const cpu::StepResult& r) const {
  sim::RunResult run;
  run.tasks.assign(impl_->low.graph.num_tasks(), {});
  for (const auto& t : r.tasks) {
    auto& tm = run.tasks[static_cast<std::size_t>(t.task)];
    tm.start = static_cast<Time>(t.start * 1e9);
    tm.end = std::max(tm.start, static_cast<Time>(t.end * 1e9));
    run.makespan = std::max(run.makespan, tm.end);
  }
  return run;
}

Bytes Executor::reserved_peak() const { return impl_->dev.reserved_peak(); }

const std::vector<StepGemm>& Executor::gemms() const { return impl_->gemms; }

std::map<std::string, std::vector<float>> Executor::parameters() const {
  std::map<std::string, std::vector<float>> out;
  auto params = impl_->model->params();
  for (std::size_t i = 0; i < params.size(); ++i) out[impl_->model->names()[i]] = params[i].download();
  return out;
}

std::map<std::string, std::vector<float>> Executor::gradients() const {
  std::map<std::string, std::vector<float>> out;
  auto grads = impl_->model->grads();
  for (std::size_t i = 0; i < grads.size(); ++i) out[impl_->model->names()[i]] = grads[i].download();
  return out;
}

void Executor::set_parameters(const std::map<std::string, std::vector<float>>& values) {
  const auto& names = impl_->model->names();
  for (const auto& [name, v] : values) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) throw Error("executor: no parameter named '" + name + "'");
    impl_->model->set_parameter(static_cast<int>(it - names.begin()), v);
  }
}

}  // namespace strata::backend::cuda
