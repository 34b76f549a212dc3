#include "backend/cuda/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/common/bucket_plan.hpp"
#include "backend/common/capabilities.hpp"
#include "backend/common/lanes.hpp"
#include "backend/common/layer_keep.hpp"
#include "backend/cuda/blas.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/communicator.hpp"
#include "backend/cuda/compression.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gpt.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/cuda/optimizer.hpp"
#include "backend/cuda/process_group.hpp"
#include "costmodel/ops.hpp"
#include "sim/error.hpp"
#include "lowering/memory.hpp"
#include "strategies/rank_mesh.hpp"
#include "lowering/step_costs.hpp"

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

// A bucket of the bucket plan (backend/common/bucket_plan.hpp, the CPU
// executor's too) on this rank: its flat run of parameters and this rank's
// shard of it. NCCL's reduce-scatter and all-gather take equal chunks, as
// the plan's rule gives them: the flat buffer is padded to dp·chunk
// elements (chunk = ⌈numel/dp⌉, zeros beyond numel) and rank d holds
// elements [d·chunk, (d+1)·chunk) ∩ [0, numel); its shards are chunk long.
struct Bucket {
  const FlatBucket* plan = nullptr;
  ElementRange mine;         // this rank's elements of the flat bucket
  DeviceTensor shard_param;  // ZeRO-3 layers: the persistent shard; else the chunk being stepped
  DeviceTensor shard_grad;   // the reduced chunk (ZeRO >= 1)
  const std::vector<int>& params() const { return plan->params; }
  std::int64_t numel() const { return plan->numel; }
  std::int64_t chunk() const { return plan->chunk; }
};

// Plain values into bytes and back (a step's measurements between processes).
class Bytes_out {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
  }
  const std::vector<std::byte>& bytes() const { return b_; }

 private:
  std::vector<std::byte> b_;
};
class Bytes_in {
 public:
  explicit Bytes_in(const std::vector<std::byte>& b) : b_(b) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    if (at_ + sizeof(T) > b_.size()) throw Error("executor: a rank's measurements are truncated");
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }

 private:
  const std::vector<std::byte>& b_;
  std::size_t at_ = 0;
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
  strategies::ChunkMap chunk_map;
  bool core_recompute = false;
  // What each parameter is, and the bucket plan: the tasks in graph order
  // (one stage), the buckets of the graph's reduce tasks, this rank's
  // shards, the compressor's seed.
  ParamTable table;
  std::unique_ptr<BucketPlan> bucket_plan;
  const StagePlan* stage_plan = nullptr;
  const std::vector<std::int32_t>& order() const { return stage_plan->tasks; }
  // Declaration order is destruction order reversed: the allocators outlive
  // every tensor, streams and events outlive nothing that uses them.
  DeviceAllocator dev;
  PinnedHostPool host;
  std::vector<std::unique_ptr<Stream>> streams;  // one per queue resource used
  std::vector<int> stream_of;                    // by task index: into streams
  std::vector<std::vector<std::int32_t>> waits;  // by task index: tasks on other streams it waits for
  int compute = -1;                              // the compute stream's index
  int comm = -1;                                 // the communication stream's (-1: none)
  std::vector<std::unique_ptr<Event>> start, end;  // by task index
  Event step_start;
  Event handover;  // ad hoc: one stream waits for what another has enqueued so far
  // Multi-GPU: this process's place in the run and its dp group.
  const ProcessGroup* group = nullptr;
  int world = 1, rank = 0, dp = 1, dp_index = 0, zero = 0;
  NcclComm world_comm, dp_comm;
  // Gradient compression over dp: one bucket of every parameter, encoded,
  // exchanged in the lowering's rounds and decoded (as the CPU executor).
  bool compressed = false;
  std::unique_ptr<DeviceCompressor> compressor;
  std::vector<Bucket> buckets;  // the stage plan's, in its order
  int bucket_of(std::int32_t task) const { return stage_plan->bucket_of_task.at(task); }
  int layer_bucket(int layer) const { return stage_plan->layer_bucket[static_cast<std::size_t>(layer)]; }
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
  // The choices of the chunk that holds `layer` (the lowering's).
  void offload(const TaskInfo& t, cudaStream_t s);
  void prefetch(const TaskInfo& t, cudaStream_t s);
  void optimizer_step();
  ActTensor take_activation(int chunk, int mb);
  std::string id(std::int32_t i) const { return low.graph.tasks()[static_cast<std::size_t>(i)].id; }
  void clear_step_state();
  // Multi-GPU (data parallelism and ZeRO over NCCL).
  void build_buckets();
  template <class Fn>
  void for_each_piece(const Bucket& b, std::int64_t lo, std::int64_t hi, Fn&& fn) const {
    b.plan->for_each_piece(ElementRange{lo, hi}, fn);
  }
  DeviceTensor pack(const Bucket& b, bool grads, cudaStream_t s);
  void unpack(const Bucket& b, const float* flat, bool grads, cudaStream_t s);
  void dp_reduce(int bucket, cudaStream_t s);
  void build_compressor();
  void compress_encode(cudaStream_t s);
  void compress_round(int round, std::int32_t task);
  void compress_decode(cudaStream_t s);
  void zero3_reduce(int bucket, bool layer, cudaStream_t s);
  void gather_bucket(Bucket& b, cudaStream_t s);  // shards → the model's whole parameters
  void gather_weights(cudaStream_t s);
  bool zero3() const { return zero >= 3; }
  const Shape& shape_of(int i) const { return bucket_plan->shape(i); }
  void ensure_layer_params(int layer, cudaStream_t s);
  void release_layer_params(int layer);
  void ensure_layer_grads(int layer);
  // Enqueues fn(comm stream) on the communication stream after what the
  // compute stream holds so far, and makes compute wait for it: every NCCL
  // call of a process stays on one stream, in the order the host issues it.
  template <class Fn>
  void on_comm(Fn&& fn);
};

std::optional<std::string> Executor::unsupported(const strategies::Scenario& sc, int processes) {
  // What the executor does not run: the capability table's refusals.
  if (auto why = refusal(sc, Backend::Cuda)) return why;
  // One process per GPU of the plan.
  const std::int64_t gpus = sc.plan.gpus() * sc.plan.ep;
  if (gpus != processes) {
    const std::string mesh = gpu_mesh_text(sc.plan);
    if (processes == 1) return mesh + ": one process per GPU, and this is one process; " + launch_hint(gpus);
    return mesh + ", but " + std::to_string(processes) + " processes were launched; " + launch_hint(gpus);
  }
  return std::nullopt;
}

Executor::Impl::Impl(const strategies::Scenario& s, ExecutorOptions o)
    : sc(s), opt(o), dev(o.device) {
  sc.executed = true;  // its steps run one after another
  const auto& plan = sc.plan;
  low = strategies::lower_step(sc, strategies::ModelStepCosts(sc));
  const auto& tasks = low.graph.tasks();
  if (low.info.size() != tasks.size()) throw Error("executor: the lowering gave no TaskInfo for some tasks");
  if (low.stages != 1) throw Error("executor: the CUDA executor runs one pipeline stage");
  table = ParamTable(sc.model);
  bucket_plan = std::make_unique<BucketPlan>(sc, low, table, opt.seed);
  stage_plan = &bucket_plan->stage(0);
  group = opt.group;
  if (group != nullptr) {
    world = group->size();
    rank = group->rank();
  }
  dp = static_cast<int>(plan.dp);
  zero = dp > 1 ? static_cast<int>(plan.zero) : 0;
  compressed = dp > 1 && plan.compression.method != strategies::CompressionMethod::None;
  if (world != dp)
    throw Error("executor: the plan runs on " + std::to_string(dp) + " GPUs, the run has " + std::to_string(world) +
                " processes");
  // This process is rank `rank` of the plan's mesh, as the CPU backend's
  // rank threads and the simulator number them.
  const strategies::RankMesh rank_mesh(plan, std::max<std::int64_t>(1, sc.cluster.node.gpus_per_node));
  dp_index = static_cast<int>(rank_mesh.coords(rank).dp);
  m = static_cast<int>(strategies::microbatches(plan, sc.batch));
  micro = sc.batch.micro;
  seq = sc.model.seq_len;
  chunk_map = strategies::ChunkMap(plan, sc.model.layers);
  chunks = chunk_map.chunks();

  // Every task's stream (one per queue resource) and what it runs. The
  // compute and communication streams are the resources whose role's lane
  // is Compute and Comm.
  const Lanes lanes(low.graph);
  std::map<std::int32_t, int> stream_of_resource;
  stream_of.assign(tasks.size(), -1);
  waits.assign(tasks.size(), {});
  for (std::size_t i = 0; i < tasks.size(); ++i) {
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
      case TaskOp::DpReduce:
      case TaskOp::Zero3Gather:
      case TaskOp::Zero3Reduce:
      case TaskOp::GatherWeights:
      case TaskOp::CompressEncode:
      case TaskOp::CompressRound:
      case TaskOp::CompressDecode:
        if (dp > 1) break;
        [[fallthrough]];
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
      if (lanes.of(res) == sim::Lane::Compute) compute = it->second;
      if (lanes.of(res) == sim::Lane::Comm) comm = it->second;
    }
    stream_of[i] = it->second;
    const bool layer_work = t.op == TaskOp::Forward || t.op == TaskOp::Backward ||
                            t.op == TaskOp::Recompute || t.op == TaskOp::OptimizerStep;
    if (layer_work && lanes.of(res) != sim::Lane::Compute)
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
    if (dp > 1) {
      if (comm < 0) throw Error("executor: the lowered step has no communication stream");
      // NCCL: the world from rank 0's unique id, the dp group split from it
      // with the mesh's colour and key (process_group.hpp).
      world_comm = NcclComm::world(*group);
      dp_comm = world_comm.split(split_of(rank_mesh, rank, strategies::MeshDim::DP));
      if (dp_comm.size() != dp || dp_comm.rank() != dp_index)
        throw Error("executor: NCCL's dp group gives rank " + std::to_string(dp_comm.rank()) + " of " +
                    std::to_string(dp_comm.size()) + ", the mesh " + std::to_string(dp_index) + " of " +
                    std::to_string(dp));
      build_buckets();
    }
    if (compressed) build_compressor();  // after build_buckets: its one bucket
    const std::int64_t n = sc.batch.global * seq;
    tokens = DeviceIndexTensor(dev, {n}, MemTag::Other, Fill::Uninitialised);
    targets = DeviceIndexTensor(dev, {n}, MemTag::Other, Fill::Uninitialised);
    losses = BasicDeviceTensor<double>(dev, {m}, MemTag::Other);
    flags = BasicDeviceTensor<int>(
        dev, {static_cast<std::int64_t>(std::max(model->params().size(), buckets.size())) + 1}, MemTag::Other);
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
    case TaskOp::DpReduce: return dp_reduce(bucket_of(index), s);
    case TaskOp::Zero3Gather: return ensure_layer_params(t.layer, s);
    case TaskOp::Zero3Reduce:
      if (t.part == Part::Layer) return zero3_reduce(layer_bucket(t.layer), true, s);
      return zero3_reduce(bucket_of(index), false, s);
    case TaskOp::GatherWeights: return gather_weights(s);
    case TaskOp::CompressEncode: return compress_encode(s);
    case TaskOp::CompressRound: return compress_round(t.round, index);
    case TaskOp::CompressDecode: return compress_decode(s);
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

void Executor::Impl::forward(const TaskInfo& t) {
  const int mb = t.microbatch, k = t.chunk;
  // Microbatch mb of dp rank d holds the global batch's sequences from
  // (d·m + mb)·micro, as on the CPU backend.
  const std::int64_t at = bucket_plan->first_sequence(dp_index, mb) * seq;
  switch (t.part) {
    case Part::Embedding:
      act[{k, mb}] = model->embedding_forward(tokens.data() + at, micro, emb[mb]);
      return;
    case Part::Layer: {
      ActTensor x = take_activation(k, mb);
      ensure_layer_params(t.layer, stream(compute));
      BlockSaved& s = saved[{t.layer, mb}];
      ActTensor y = model->block_forward(t.layer, std::move(x), s);
      keep_for_backward<GptModel>(low.layers.keeps[static_cast<std::size_t>(t.layer)], core_recompute, s);
      act[{k, mb}] = std::move(y);
      release_layer_params(t.layer);
      return;
    }
    case Part::Head:
      // Each rank adds the gradient of loss / (m·dp): the reduced gradient
      // is the global batch's mean.
      model->head_forward(take_activation(k, mb), targets.data() + at, bucket_plan->loss_scale(),
                          head[mb], losses.data() + mb);
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
      ensure_layer_params(t.layer, stream(compute));
      ensure_layer_grads(t.layer);
      model->block_backward(t.layer, it->second, grad.at({k, mb}));
      saved.erase(it);
      release_layer_params(t.layer);
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
  // A segment's earlier layers have no gather of their own before their
  // recompute (ZeRO-3): gathered here, kept until their backward.
  ensure_layer_params(L, stream(compute));
  // The layer's position in its chunk and its segment.
  const auto keeps = chunk_map.chunk_keeps(low.layers.keeps, L);
  const std::int64_t i = chunk_map.index_in_chunk(L);
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
  int* f = flags.data();
  int* any = f + flags.numel() - 1;  // the last flag: any of them
  if (zero == 0) {
    auto grads = model->grads();
    const auto P = static_cast<std::int64_t>(grads.size());
    for (std::int64_t i = 0; i < P; ++i)
      kernels::flag_non_finite(c, grads[static_cast<std::size_t>(i)].data(),
                               grads[static_cast<std::size_t>(i)].numel(), f + i, any);
    optimizer->step(c, model->params(), grads, any);
    // bf16: the working weights from the fp32 master weights just stepped.
    model->refresh_working();
    return;
  }
  // ZeRO: the step updates this rank's chunk of every bucket (flags by
  // bucket). A bucket's shard of the parameters comes from the whole ones
  // the first time (ZeRO-3 layers keep theirs).
  const auto B = static_cast<std::int64_t>(buckets.size());
  std::vector<DeviceTensor> P, G;
  for (std::int64_t j = 0; j < B; ++j) {
    Bucket& b = buckets[static_cast<std::size_t>(j)];
    if (b.shard_param.empty()) {
      b.shard_param = DeviceTensor(dev, {b.chunk()}, MemTag::Params);
      auto params = model->params();
      for_each_piece(b, b.mine.begin, b.mine.end, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
        STRATA_CUDA_CHECK(cudaMemcpyAsync(b.shard_param.data() + at, params[static_cast<std::size_t>(i)].data() + off,
                                          static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, c));
      });
    }
    if (b.shard_grad.empty()) b.shard_grad = DeviceTensor(dev, {b.chunk()}, MemTag::Grads);
    kernels::flag_non_finite(c, b.shard_grad.data(), b.chunk(), f + j, any);
    P.push_back(std::move(b.shard_param));
    G.push_back(std::move(b.shard_grad));
  }
  optimizer->step(c, P, G, any);
  for (std::int64_t j = 0; j < B; ++j)
    buckets[static_cast<std::size_t>(j)].shard_param = std::move(P[static_cast<std::size_t>(j)]);
  G.clear();  // the gradients' chunks die here
  if (zero3()) {
    // The embedding and head stay whole on every rank under ZeRO-3: their
    // updated chunks are all-gathered after the step (the lowering has no
    // task for it; the CPU executor does the same).
    on_comm([&](cudaStream_t s) {
      for (const auto& [task, bi] : stage_plan->bucket_of_task) gather_bucket(buckets[static_cast<std::size_t>(bi)], s);
    });
  }
}

// ---- data parallelism and ZeRO over NCCL -------------------------------------

// The bucket plan's buckets with this rank's shards. ZeRO-3: each layer's
// parameters then live as this rank's shard only.
void Executor::Impl::build_buckets() {
  for (const FlatBucket& fb : stage_plan->buckets) buckets.push_back({&fb, fb.shard(dp_index), {}, {}});
  if (!zero3()) return;
  const cudaStream_t c = stream(compute);
  dev.set_stream(c);
  for (const int bi : stage_plan->layer_bucket) {
    if (bi < 0) continue;
    Bucket& b = buckets[static_cast<std::size_t>(bi)];
    b.shard_param = DeviceTensor(dev, {b.chunk()}, MemTag::Params);
    auto params = model->params();
    for_each_piece(b, b.mine.begin, b.mine.end, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
      STRATA_CUDA_CHECK(cudaMemcpyAsync(b.shard_param.data() + at, params[static_cast<std::size_t>(i)].data() + off,
                                        static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, c));
    });
    for (int i : b.params()) {
      model->params()[static_cast<std::size_t>(i)].release();
      model->grads()[static_cast<std::size_t>(i)].release();
    }
  }
}

// The bucket's parameters or gradients as one flat, padded buffer (the
// graph's bucket: DDP's and the CPU executor's comm_buffers), on stream s.
DeviceTensor Executor::Impl::pack(const Bucket& b, bool grads, cudaStream_t s) {
  dev.set_stream(s);
  DeviceTensor flat(dev, {b.plan->padded()}, MemTag::CommBuffers);
  auto src = grads ? model->grads() : model->params();
  for_each_piece(b, 0, b.numel(), [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(flat.data() + at, src[static_cast<std::size_t>(i)].data() + off,
                                      static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s));
  });
  return flat;
}

void Executor::Impl::unpack(const Bucket& b, const float* flat, bool grads, cudaStream_t s) {
  auto dst = grads ? model->grads() : model->params();
  for_each_piece(b, 0, b.numel(), [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst[static_cast<std::size_t>(i)].data() + off, flat + at,
                                      static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s));
  });
}

void Executor::Impl::dp_reduce(int bi, cudaStream_t s) {
  Bucket& b = buckets[static_cast<std::size_t>(bi)];
  DeviceTensor flat = pack(b, true, s);
  if (zero == 0) {
    dp_comm.all_reduce(flat.data(), flat.numel(), s);
    unpack(b, flat.data(), true, s);
    return;
  }
  b.shard_grad = DeviceTensor(dev, {b.chunk()}, MemTag::Grads, Fill::Uninitialised);
  dp_comm.reduce_scatter(flat.data(), b.shard_grad.data(), b.chunk(), s);
}

// Compression replaces the buckets' all-reduce (the lowering emits no
// dp-reduce tasks then): the stage's gradients, one flat bucket of every
// parameter in the model's order, are encoded on the compute stream,
// exchanged in the method's rounds on the communication stream (NCCL) and
// decoded into the sum over dp. The seed is the CPU executor's for stage 0,
// so both backends draw the same random-k indices and QSGD roundings.
void Executor::Impl::build_compressor() {
  // The plan refuses reductions beside the compressed exchange.
  dev.set_stream(stream(compute));
  std::vector<Shape> shapes;
  for (const int i : buckets[static_cast<std::size_t>(stage_plan->compressed_bucket)].params())
    shapes.push_back(shape_of(i));
  compressor = make_device_compressor(
      {.method = sc.plan.compression, .ranks = dp, .rank = dp_index, .seed = stage_plan->compressor_seed},
      flat_layout(shapes), dev, *blas);
  if (stage_plan->compressed_rounds != compressor->rounds())
    throw Error("executor: the lowering gives " + std::to_string(stage_plan->compressed_rounds) +
                " compressed rounds, " + std::string(enum_name(sc.plan.compression.method)) + " runs " +
                std::to_string(compressor->rounds()));
}

void Executor::Impl::compress_encode(cudaStream_t s) {
  DeviceTensor flat = pack(buckets[static_cast<std::size_t>(stage_plan->compressed_bucket)], true, s);
  compressor->encode(flat.data());  // enqueued on s; flat's release is ordered after it
}

// The round's local work and its collective, both on the communication
// stream (the lowering's round tasks run there; on_comm otherwise).
void Executor::Impl::compress_round(int round, std::int32_t task) {
  auto run = [&](cudaStream_t cs) {
    dev.set_stream(cs);
    const CompressRound x = compressor->round(round);
    switch (x.op) {
      case CompressCollective::AllGather: return dp_comm.all_gather_words(x.send, x.recv, x.count, cs);
      case CompressCollective::AllReduce: return dp_comm.all_reduce(static_cast<float*>(x.recv), x.count, cs);
      case CompressCollective::AllToAll: return dp_comm.all_to_all_words(x.send, x.recv, x.count, cs);
    }
  };
  if (stream_of[static_cast<std::size_t>(task)] == comm) return run(stream(comm));
  on_comm(run);
}

void Executor::Impl::compress_decode(cudaStream_t s) {
  const Bucket& b = buckets[static_cast<std::size_t>(stage_plan->compressed_bucket)];
  dev.set_stream(s);
  DeviceTensor flat(dev, {b.numel()}, MemTag::CommBuffers, Fill::Uninitialised);
  compressor->decode(flat.data());
  unpack(b, flat.data(), true, s);
}

// ZeRO-3: a layer's gradients are reduce-scattered after every microbatch's
// backward and summed into the shard; its whole gradients live from its
// backward to here.
void Executor::Impl::zero3_reduce(int bi, bool layer, cudaStream_t s) {
  Bucket& b = buckets[static_cast<std::size_t>(bi)];
  DeviceTensor flat = pack(b, true, s);
  DeviceTensor part(dev, {b.chunk()}, MemTag::CommBuffers, Fill::Uninitialised);
  dp_comm.reduce_scatter(flat.data(), part.data(), b.chunk(), s);
  if (b.shard_grad.empty()) b.shard_grad = DeviceTensor(dev, {b.chunk()}, MemTag::Grads);
  kernels::add(s, part.data(), b.shard_grad.data(), b.chunk());
  if (layer)
    for (int i : b.params()) model->grads()[static_cast<std::size_t>(i)].release();
}

// Every rank's chunk of the bucket into the model's whole parameters; the
// shard is dropped (ZeRO 1/2 and ZeRO-3's embedding and head make it again
// from the whole parameters at the next step).
void Executor::Impl::gather_bucket(Bucket& b, cudaStream_t s) {
  dev.set_stream(s);
  DeviceTensor flat(dev, {b.plan->padded()}, MemTag::CommBuffers, Fill::Uninitialised);
  dp_comm.all_gather(b.shard_param.data(), flat.data(), b.chunk(), s);
  unpack(b, flat.data(), false, s);
  b.shard_param.release();
}

void Executor::Impl::gather_weights(cudaStream_t s) {
  for (auto& b : buckets) gather_bucket(b, s);
}

// ZeRO-3: a layer's whole parameters, all-gathered from the shards when
// they are not on the device (its gather task brought them, or this is the
// gather task), on stream s if it is the communication stream, else
// through it.
void Executor::Impl::ensure_layer_params(int layer, cudaStream_t s) {
  if (!zero3()) return;
  const auto& lp = table.layer(layer);
  if (!model->params()[static_cast<std::size_t>(lp.front())].empty()) return;
  auto gather = [&](cudaStream_t cs) {
    dev.set_stream(cs);
    Bucket& b = buckets[static_cast<std::size_t>(layer_bucket(layer))];
    const auto params = model->params();
    for (int i : lp) {
      auto& p = params[static_cast<std::size_t>(i)];
      p = DeviceTensor(dev, shape_of(i), MemTag::Params, Fill::Uninitialised);
    }
    DeviceTensor flat(dev, {b.plan->padded()}, MemTag::CommBuffers, Fill::Uninitialised);
    dp_comm.all_gather(b.shard_param.data(), flat.data(), b.chunk(), cs);
    unpack(b, flat.data(), false, cs);
  };
  if (s == stream(comm)) {
    gather(s);
    return;
  }
  on_comm(gather);
}

void Executor::Impl::release_layer_params(int layer) {
  if (!zero3()) return;
  for (int i : table.layer(layer)) model->params()[static_cast<std::size_t>(i)].release();
}

void Executor::Impl::ensure_layer_grads(int layer) {
  if (!zero3()) return;
  auto grads = model->grads();
  for (int i : table.layer(layer))
    if (grads[static_cast<std::size_t>(i)].empty())
      grads[static_cast<std::size_t>(i)] = DeviceTensor(dev, shape_of(i), MemTag::Grads);
}

template <class Fn>
void Executor::Impl::on_comm(Fn&& fn) {
  const cudaStream_t c = stream(compute), k = stream(comm);
  STRATA_CUDA_CHECK(cudaEventRecord(handover.e, c));
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(k, handover.e, 0));
  fn(k);
  STRATA_CUDA_CHECK(cudaEventRecord(handover.e, k));
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(c, handover.e, 0));
  dev.set_stream(c);
}

Executor::Executor(const strategies::Scenario& sc, ExecutorOptions opts) {
  const int processes = opts.group != nullptr ? opts.group->size() : 1;
  if (auto why = unsupported(sc, processes)) throw Error("executor: " + *why);
  strategies::require_valid_plan(sc);
  const auto devs = devices();
  const std::string who = processes > 1 ? "rank " + std::to_string(opts.group->rank()) + ": " : "";
  if (devs.empty()) throw Error("executor: " + who + "no CUDA device is visible (no GPU, or no driver)");
  if (opts.device < 0 || opts.device >= static_cast<int>(devs.size()))
    throw Error("executor: " + who + "CUDA device " + std::to_string(opts.device) + " does not exist (" +
                std::to_string(devs.size()) + " visible" +
                (processes > 1 ? "; a process uses the GPU of its local rank: start at most one process per GPU of a node" : "") +
                ")");
  impl_ = std::make_unique<Impl>(sc, opts);
}

Executor::~Executor() {
  if (impl_) impl_->clear_step_state();
}

const strategies::LoweredStep& Executor::lowered() const { return impl_->low; }

int Executor::ranks() const { return impl_->world; }

StepResult Executor::step(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
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
    I.model->zero_grads();  // ZeRO-3 layers have none until their backward
    STRATA_CUDA_CHECK(cudaStreamSynchronize(c));
    // The processes start their steps together, so their task times line up.
    if (I.group != nullptr) I.group->barrier();
    STRATA_CUDA_CHECK(cudaEventRecord(I.step_start.e, c));
    for (std::size_t k = 0; k < I.streams.size(); ++k)
      if (static_cast<int>(k) != I.compute) STRATA_CUDA_CHECK(cudaStreamWaitEvent(I.stream(static_cast<int>(k)), I.step_start.e, 0));
    for (const std::int32_t i : I.order()) {
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
  StepResult out;
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ++I.steps_done;
  // What stops the run on this rank: a non-finite loss or gradient.
  std::string failure;
  const std::string where = "executor: step " + std::to_string(I.steps_done) + ", rank " + std::to_string(I.rank) +
                            " (stage 0)";
  for (int mb = 0; mb < I.m && failure.empty(); ++mb)
    if (!std::isfinite(loss[static_cast<std::size_t>(mb)]))
      failure = where + ": the loss of microbatch " + std::to_string(mb) + " is " +
                std::to_string(loss[static_cast<std::size_t>(mb)]) + " (the run diverged: lower the learning rate)";
  if (failure.empty() && flags.back() != 0) {
    std::string names;
    for (std::size_t i = 0; i + 1 < flags.size(); ++i) {
      if (flags[i] == 0) continue;
      if (I.zero == 0) {
        if (i < I.model->names().size()) names += (names.empty() ? "" : ", ") + I.model->names()[i];
      } else if (i < I.buckets.size()) {  // ZeRO: flags by bucket
        std::string in;
        for (int p : I.buckets[i].params()) in += (in.empty() ? "" : " ") + I.model->names()[static_cast<std::size_t>(p)];
        names += (names.empty() ? "" : ", ") + ("one of {" + in + "}");
      }
    }
    failure = where + ": the gradients of " + names +
              " hold NaN or Inf (the run diverged or overflowed); the optimizer step was skipped";
  }
  double my_loss = 0;
  for (const double l : loss) my_loss += l;
  my_loss /= static_cast<double>(I.m);
  RankMemory mine{I.rank, 0, I.dev.stats(), I.host.stats()};
  std::vector<TaskTime> my_tasks;
  for (const std::int32_t i : I.order()) {
    float a = 0, b = 0;
    const auto ii = static_cast<std::size_t>(i);
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&a, I.step_start.e, I.start[ii]->e));
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&b, I.step_start.e, I.end[ii]->e));
    my_tasks.push_back({i, I.rank, a * 1e-3, std::max(a, b) * 1e-3});
  }
  if (I.group == nullptr || I.world == 1) {
    if (!failure.empty()) {
      I.broken = true;
      throw Error(failure);
    }
    out.loss = my_loss;
    out.memory.push_back(mine);
    out.tasks = std::move(my_tasks);
    return out;
  }
  // Every rank's measurements to every rank (MPI), so each returns the whole
  // run's result and all stop together when one fails: a rank that threw
  // alone would leave the others waiting in the next step's collectives.
  Bytes_out w;
  w.put(static_cast<std::int32_t>(failure.size()));
  for (const char ch : failure) w.put(ch);
  w.put(my_loss);
  w.put(out.seconds);
  w.put(mine.device);
  w.put(mine.host);
  w.put(static_cast<std::int64_t>(my_tasks.size()));
  for (const auto& t : my_tasks) w.put(t);
  const auto all = I.group->all_gather(w.bytes());
  std::string first_failure;
  double loss_sum = 0, slowest = 0;
  for (int r = 0; r < I.world; ++r) {
    Bytes_in in(all[static_cast<std::size_t>(r)]);
    const auto n = in.get<std::int32_t>();
    std::string f;
    for (std::int32_t k = 0; k < n; ++k) f.push_back(in.get<char>());
    if (first_failure.empty()) first_failure = f;
    loss_sum += in.get<double>();
    slowest = std::max(slowest, in.get<double>());
    RankMemory rm;
    rm.rank = r;
    rm.device = in.get<MemoryStats>();
    rm.host = in.get<MemoryStats>();
    out.memory.push_back(rm);
    const auto tasks_n = in.get<std::int64_t>();
    for (std::int64_t k = 0; k < tasks_n; ++k) out.tasks.push_back(in.get<TaskTime>());
  }
  if (!first_failure.empty()) {
    I.broken = true;
    throw Error(first_failure);
  }
  // Every rank's loss is the mean over its m microbatches; the global
  // batch's mean is their mean over dp. The step took as long as its slowest rank.
  out.loss = loss_sum / static_cast<double>(I.world);
  out.seconds = slowest;
  return out;
}

sim::RunResult Executor::measured(const StepResult& r) const {
  sim::RunResult run;
  run.tasks.assign(impl_->low.graph.num_tasks(), {});
  for (const auto& t : r.tasks) {
    if (t.rank != 0) continue;  // dp rank 0 is the lowering's representative
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
  Impl& I = *impl_;
  std::map<std::string, std::vector<float>> out;
  const cudaStream_t c = I.stream(I.compute);
  I.dev.set_stream(c);
  for (int l = 0; l < I.table.layers(); ++l)
    if (I.zero3() && I.layer_bucket(l) >= 0) I.ensure_layer_params(l, c);  // a collective
  auto params = I.model->params();
  for (std::size_t i = 0; i < params.size(); ++i) out[I.model->names()[i]] = params[i].download();
  for (int l = 0; l < I.table.layers(); ++l) I.release_layer_params(l);
  return out;
}

std::map<std::string, std::vector<float>> Executor::gradients() const {
  std::map<std::string, std::vector<float>> out;
  auto grads = impl_->model->grads();
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].empty()) out[impl_->model->names()[i]] = grads[i].download();
  return out;
}

void Executor::set_parameters(const std::map<std::string, std::vector<float>>& values) {
  const auto& names = impl_->model->names();
  for (const auto& [name, v] : values) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) throw Error("executor: no parameter named '" + name + "'");
    const int i = static_cast<int>(it - names.begin());
    Impl& I = *impl_;
    if (!I.zero3() || !I.model->params()[static_cast<std::size_t>(i)].empty()) {
      I.model->set_parameter(i, v);
      continue;
    }
    // A ZeRO-3 layer's parameter: this rank's part of it, into its shard.
    if (static_cast<std::int64_t>(v.size()) != I.shape_of(i).numel())
      throw Error("executor: parameter '" + name + "' has " + std::to_string(I.shape_of(i).numel()) +
                  " elements, " + std::to_string(v.size()) + " given");
    const cudaStream_t c = I.stream(I.compute);
    I.dev.set_stream(c);
    {
      const int l = I.table[i].layer;
      Bucket& b = I.buckets[static_cast<std::size_t>(I.layer_bucket(l))];
      DeviceTensor whole(I.dev, I.shape_of(i), MemTag::Other, Fill::Uninitialised);
      whole.upload(v);
      I.for_each_piece(b, b.mine.begin, b.mine.end, [&](int j, std::int64_t off, std::int64_t at, std::int64_t n) {
        if (j != i) return;
        STRATA_CUDA_CHECK(cudaMemcpyAsync(b.shard_param.data() + at, whole.data() + off,
                                          static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, c));
      });
      STRATA_CUDA_CHECK(cudaStreamSynchronize(c));
    }
  }
}

}  // namespace strata::backend::cuda
