#include "backend/cpu/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "backend/cpu/comm.hpp"
#include "backend/cpu/file_allocator.hpp"
#include "backend/cpu/compression.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/common/bucket_plan.hpp"
#include "backend/common/capabilities.hpp"
#include "backend/common/layer_keep.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/tensor.hpp"
#include "costmodel/ops.hpp"
#include "sim/error.hpp"
#include "lowering/memory.hpp"
#include "strategies/rank_mesh.hpp"
#include "lowering/step_costs.hpp"
#include "lowering/step_layout.hpp"

namespace strata::backend::cpu {

namespace {

using strategies::Part;
using strategies::TaskInfo;
using strategies::TaskOp;
using Clock = std::chrono::steady_clock;

// (layer or chunk, microbatch)
using Key = std::pair<int, int>;

// Tag of a pipeline message: activation or gradient, the sending model
// chunk, the microbatch.
std::int64_t p2p_tag(bool gradient, int chunk, int mb) {
  return (static_cast<std::int64_t>(gradient) << 48) | (static_cast<std::int64_t>(chunk) << 24) |
         static_cast<std::int64_t>(mb);
}
// Parameter server messages: a bucket's pushed gradients, the pulled weights.
std::int64_t push_tag(int bucket) { return (std::int64_t{2} << 48) | bucket; }
constexpr std::int64_t kPullTag = std::int64_t{3} << 48;

// A bucket of the bucket plan on one rank: its flat run of parameters and
// this rank's shard of it (ZeRO), whose tensors are plan->chunk long.
struct Bucket {
  const FlatBucket* plan = nullptr;
  ElementRange mine;  // this rank's elements of the flat bucket
  Tensor shard_param;  // ZeRO-3 layers: the persistent shard; else the chunk being stepped
  Tensor shard_grad;   // the reduced chunk (ZeRO >= 1)
  const std::vector<int>& params() const { return plan->params; }
  std::int64_t numel() const { return plan->numel; }
  std::int64_t chunk() const { return plan->chunk; }
  bool holds(int i) const { return plan->holds(i); }
};

struct Rank {
  // Allocators first: everything below returns its bytes to them.
  TrackingAllocator device;
  TrackingAllocator host;
  std::unique_ptr<FileAllocator> storage;  // optimizer offload to NVMe
  int rank = 0, stage = 0, dp_index = 0, tp_index = 0, cp_index = 0;
  // Communicators first: the model keeps pointers to `tp` and `cp`.
  std::unique_ptr<Comm> dp, pp, tie, tp, cp;
  // Context parallelism: the microbatch's tokens and targets at this
  // rank's positions.
  std::vector<std::int32_t> cp_tokens, cp_targets;
  std::unique_ptr<GptModel> model;
  std::unique_ptr<Optimizer> opt;
  std::vector<int> pp_members;  // global rank of each pipeline stage
  const StagePlan* plan = nullptr;  // the bucket plan's for this rank's stage
  std::vector<bool> owned;      // by parameter: on this rank's stage
  std::vector<Bucket> buckets;  // the stage plan's, in its order (with compression: one, the whole stage)
  std::unique_ptr<Compressor> compressor;  // the stage's compressed dp exchange
  int bucket_of(std::int32_t task) const { return plan->bucket_of_task.at(task); }
  int layer_bucket(int layer) const { return plan->layer_bucket[static_cast<std::size_t>(layer)]; }
  // Optimizer offload: fp32 master parameters and the step's gradients in
  // the host pool, in the optimizer's list order.
  std::vector<Tensor> host_params, host_grads;
  // Weight offload: each layer parameter's home, by parameter index (empty
  // for the embedding and head, which stay on the device).
  std::vector<Tensor> host_weights;
  // PipeDream-2BW: the newest weights W(t) by parameter index, while the
  // model computes with W(t − 1).
  std::vector<Tensor> newest;
  // One step's state.
  std::map<int, EmbeddingSaved> emb;
  std::map<Key, BlockSaved> saved;       // (layer, mb)
  std::map<int, HeadSaved> head;         // mb
  std::map<Key, Tensor> act;             // (chunk, mb): activation flowing forward
  std::map<Key, BackwardBuffers> grad;   // (chunk, mb): gradient flowing backward
  std::map<int, Tensor> recompute_carry; // mb: a segment's output being recomputed
  double loss_sum = 0;
  bool tie_done = false;
  std::vector<TaskTime> times;
  std::vector<TaskTime> receipts;  // StepResult::receipts
  Clock::time_point step_start;
  // Seconds since the step began (TaskTime's clock).
  double since_start(Clock::time_point t) const { return std::chrono::duration<double>(t - step_start).count(); }
  // When the running task's pipeline receive returned: its wait for the
  // other stage is the graph's dependency, not the task's own time, so the
  // task is timed from then (run_rank).
  std::optional<Clock::time_point> received;
  std::exception_ptr error;

  explicit Rank(Bytes device_capacity) : device(device_capacity) {}
};

template <class T>
void move_to(BasicTensor<T>& t, Allocator& to) {
  // A tensor already there stays (a segment's recompute brought its input
  // back before the layer's prefetch).
  if (!t.empty() && t.allocator() != &to) t = t.clone(to, t.tag());
}

void move_saved(BlockSaved& s, Allocator& to) {
  move_to(s.x, to);
  move_to(s.ln1, to);
  move_to(s.qkv, to);
  move_to(s.probs, to);
  move_to(s.attn_mask, to);
  move_to(s.dropped, to);
  move_to(s.attn, to);
  move_to(s.proj_mask, to);
  move_to(s.x1, to);
  move_to(s.ln2, to);
  move_to(s.up, to);
  move_to(s.act, to);
  move_to(s.mlp_mask, to);
}

// What a layer's offload moves to `to`: everything it keeps, or (vDNN) the
// inputs of its linear layers (qkv, attention projection, MLP up and down).
void move_swapped(BlockSaved& s, strategies::Swap swap, Allocator& to) {
  if (swap == strategies::Swap::Saved) return move_saved(s, to);
  move_to(s.ln1, to);
  move_to(s.attn, to);
  move_to(s.ln2, to);
  move_to(s.act, to);
}

}  // namespace

struct Executor::Impl {
  strategies::Scenario sc;
  ExecutorOptions opt;
  strategies::LoweredStep low;
  int dp = 1, pp = 1, tp = 1, cp = 1, m = 1, chunks = 1, zero = 0;
  bool compressed = false;  // the dp exchange is compressed (CompressEncode, rounds, decode)
  std::int64_t micro = 1, seq = 1, hidden = 1;
  strategies::ChunkMap chunk_map;
  bool core_recompute = false;  // the graph recomputes the attention core (selective)
  // Parameters, by GptModel index: what each is (the table both models
  // are built from), its names, this rank's shapes (alike on every rank of
  // a tensor-parallel group) and the whole parameters' sizes.
  ParamTable table;
  const std::vector<std::string>& names;
  // What each stage holds and reduces, each rank's shards, the seeds.
  std::unique_ptr<BucketPlan> bucket_plan;
  std::vector<std::int64_t> whole_numel;
  int tok = -1;  // the word embedding
  bool tie = false;  // tied word embedding on two stages
  // Pipeline messages between their send and their receive (before the
  // world, which may still hold some when a step fails).
  TrackingAllocator mailbox;
  std::unique_ptr<CommWorld> world;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::map<std::string, std::vector<float>> captured;
  bool broken = false;
  std::int64_t steps_done = 0;

  Impl(const strategies::Scenario& s, ExecutorOptions o);
  void build_rank(Rank& R, const strategies::RankMesh& mesh, int r);
  void run_rank(Rank& R, std::span<const std::int32_t> tokens,
                std::span<const std::int32_t> targets, Clock::time_point t0);
  void run_task(Rank& R, std::int32_t index, std::span<const std::int32_t> tokens,
                std::span<const std::int32_t> targets);
  void forward(Rank& R, const TaskInfo& t, std::span<const std::int32_t> tokens,
               std::span<const std::int32_t> targets);
  void backward(Rank& R, const TaskInfo& t);
  void recompute(Rank& R, const TaskInfo& t);
  // The choices of the chunk that holds `layer` (the lowering's).
  Tensor take_activation(Rank& R, int chunk, int mb);
  BackwardBuffers& gradient_buffers(Rank& R, int chunk, int mb);
  // A pipeline receive into `into`, recorded as a receipt of its send task.
  void receive(Rank& R, int peer, std::int64_t tag, std::span<float> into);
  // Pipeline message tag -> the send task that posts it.
  std::map<std::int64_t, std::int32_t> send_task;
  void tie_embedding(Rank& R);
  void dp_reduce(Rank& R, int bucket);
  // Parameter server (Li et al. 2014), on the first rank of each dp group:
  // workers push each bucket's gradients to it, it sums them and steps, and
  // every worker pulls the updated weights.
  bool ps() const { return dp > 1 && sc.plan.dp_topology == strategies::DpTopology::ParameterServer; }
  int server(const Rank& R) const { return R.dp->members().front(); }
  void ps_push(Rank& R, int bucket);
  void ps_pull(Rank& R);
  void compress_encode(Rank& R);
  void compress_decode(Rank& R);
  void shards_from_grads(Rank& R);
  void zero3_reduce(Rank& R, int bucket, bool layer);
  // A layer's parameters live off this rank's device between its passes:
  // as a ZeRO-3 chunk, or in the host pool (weight offload).
  bool remote_layers() const { return zero >= 3 || sc.plan.offload.weights; }
  bool two_bw() const { return pp > 1 && sc.plan.schedule == strategies::Schedule::PipeDream2BW; }
  void ensure_layer_params(Rank& R, int layer);
  void release_layer_params(Rank& R, int layer);
  void ensure_layer_grads(Rank& R, int layer);
  void optimizer_step(Rank& R);
  void gather_whole_buckets(Rank& R);
  bool offload_optimizer() const { return sc.plan.offload.optimizer != strategies::OffloadTarget::None; }
  void grads_to_host(Rank& R);
  void weights_to_device(Rank& R);
  void gather_weights(Rank& R);
  void reduce_row_split_grads(Rank& R);
  // NaN or Inf in the gradients this rank steps stops the run, naming the
  // step, the layer and the tensor.
  void check_finite_grads(const Rank& R) const;
  std::string where(const Rank& R) const {
    return "step " + std::to_string(steps_done + 1) + ", rank " + std::to_string(R.rank) +
           " (stage " + std::to_string(R.stage) + ")";
  }
  // Copies `n` elements of parameter i's local tensor, from local element
  // `off`, into the whole tensor `whole` (whole and split parameters alike).
  void to_whole(const Rank& R, int i, std::int64_t off, const float* src, std::int64_t n,
                float* whole) const;
  // Whether this rank writes parameter i into a whole copy: its own slice of
  // a split one; a whole one from tensor-parallel rank 0 only.
  bool writes_whole(const Rank& R, int i) const {
    return R.tp_index == 0 || !R.model->slice(i).is_whole();
  }
  void capture(Rank& R);
  // Calls fn(param, offset in param, offset in range, count) for the pieces
  // of the bucket's flat elements [r.begin, r.end).
  template <class Fn>
  void for_each_piece(const Bucket& b, ElementRange r, Fn&& fn) const {
    b.plan->for_each_piece(r, fn);
  }
  // The bucket's gradients or parameters as one flat tensor: numel long,
  // or padded (zeros) to the dp group's equal shards for a reduce-scatter
  // or an all-gather.
  Tensor pack(Rank& R, const Bucket& b, bool grads, MemTag tag, bool padded = false) const;
  void unpack(Rank& R, const Bucket& b, const float* flat, bool grads) const;
  std::unique_ptr<Optimizer> make_optimizer(Allocator& a) const;
};

std::optional<std::string> Executor::unsupported(const strategies::Scenario& sc) {
  return refusal(sc, Backend::Cpu);
}

void Executor::declare_kernels(strategies::Scenario& sc) {
  sc.kernel_memory = strategies::KernelMemory::Cpu;
  if (!sc.implementation_keys.has(strategies::ImplKey::CpComm))
    sc.plan.implementation.cp_comm = strategies::CpComm::AllGather;
  if (!sc.implementation_keys.has(strategies::ImplKey::SpRegatherInput))
    sc.plan.implementation.sp_regather_input = true;
  if (!sc.implementation_keys.has(strategies::ImplKey::Zero3ReduceBucket))
    sc.plan.implementation.zero3_reduce_bucket = 0;
  if (!sc.implementation_keys.has(strategies::ImplKey::Zero3MaxLive)) sc.plan.implementation.zero3_max_live = 0;
  if (!sc.implementation_keys.has(strategies::ImplKey::Zero3HostPerRank))
    sc.plan.implementation.zero3_host_per_rank = false;
}

void Executor::require_host_memory(const strategies::Scenario& sc, Bytes host_memory) {
  if (host_memory <= 0) return;
  const auto est = strategies::estimate_memory(sc);
  // Every rank of a stage holds what its representative does (size_bound
  // keeps these products far below 2^63).
  const double ranks = static_cast<double>(sc.cluster.gpus() / sc.plan.pp);
  double total = 0;
  for (const auto& st : est.stages) total += ranks * static_cast<double>(st.total + st.host_bytes);
  if (total <= static_cast<double>(host_memory)) return;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "the CPU backend would allocate about %.1f GiB for its %lld ranks (their predicted "
                "peaks); this host has %.1f GiB",
                total / static_cast<double>(kGiB), static_cast<long long>(sc.cluster.gpus()),
                static_cast<double>(host_memory) / static_cast<double>(kGiB));
  throw InputError(sc.file, "model", buf);
}

Executor::Impl::Impl(const strategies::Scenario& s, ExecutorOptions o)
    : sc(s), opt(o), table(s.model), names(table.names()) {
  if (auto why = Executor::unsupported(sc)) throw Error("executor: " + *why);
  strategies::require_valid_plan(sc);
  // The lowering declares what this backend's kernels hold and do.
  declare_kernels(sc);
  sc.executed = true;
  sc.serial_ranks = true;
  const auto& plan = sc.plan;
  low = strategies::lower_step(sc, strategies::ModelStepCosts(sc));
  if (low.info.size() != low.graph.num_tasks())
    throw Error("executor: the lowering gave no TaskInfo for some tasks");
  for (std::size_t i = 0; i < low.info.size(); ++i) {
    const TaskInfo& t = low.info[i];
    if (t.op == TaskOp::SendActivation || t.op == TaskOp::SendGradient)
      send_task[p2p_tag(t.op == TaskOp::SendGradient, t.chunk, t.microbatch)] = static_cast<std::int32_t>(i);
  }
  dp = static_cast<int>(plan.dp);
  pp = static_cast<int>(plan.pp);
  tp = static_cast<int>(plan.tp);
  cp = static_cast<int>(plan.cp);
  m = static_cast<int>(strategies::microbatches(plan, sc.batch));
  // ZeRO shards over every rank the gradients are reduced over, dp × cp
  // (strategies::zero_shards), in the dp × cp group's order.
  zero = strategies::zero_shards(plan) > 1 ? static_cast<int>(plan.zero) : 0;
  compressed = dp > 1 && plan.compression.method != strategies::CompressionMethod::None;
  micro = sc.batch.micro;
  seq = sc.model.seq_len;
  hidden = sc.model.hidden;
  chunk_map = strategies::ChunkMap(plan, sc.model.layers);
  chunks = chunk_map.chunks();
  tok = table.word_embedding();
  tie = sc.model.tied_embeddings && pp > 1;

  // Each stage's tasks in graph order (every dependency inside a stage
  // points forward in it: the plan checks), what it holds, its buckets.
  bucket_plan = std::make_unique<BucketPlan>(sc, low, table, opt.seed);
  for (const auto& t : low.info)
    if (t.op == TaskOp::Recompute && t.core_only) core_recompute = true;
  for (int i = 0; i < table.size(); ++i) whole_numel.push_back(table[i].shape.numel());

  const int world_size = dp * pp * tp * cp;
  world = std::make_unique<CommWorld>(world_size, &mailbox);
  const strategies::RankMesh mesh(plan, std::max<std::int64_t>(1, sc.cluster.node.gpus_per_node));
  for (int r = 0; r < world_size; ++r) {
    // The device pool holds what the cluster's GPU holds: beyond it a step
    // fails with OutOfMemory, as a device would.
    ranks.push_back(std::make_unique<Rank>(sc.cluster.gpu.memory_bytes()));
    try {
      build_rank(*ranks.back(), mesh, r);
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(e.requested(), e.live(), e.capacity(), e.tag(),
                        "rank " + std::to_string(r) + ", device pool, placing the model");
    }
  }
  if (opt.capture_gradients)
    for (std::size_t i = 0; i < names.size(); ++i)
      captured[names[i]].assign(static_cast<std::size_t>(whole_numel[i]), 0.0f);
}

void Executor::Impl::build_rank(Rank& R, const strategies::RankMesh& mesh, int r) {
  const auto c = mesh.coords(r);
  R.rank = r;
  R.stage = static_cast<int>(c.pp);
  R.dp_index = static_cast<int>(c.dp);
  R.tp_index = static_cast<int>(c.tp);
  R.cp_index = static_cast<int>(c.cp);
  auto members = [&](strategies::MeshDim dim) {
    std::vector<int> v;
    for (auto x : mesh.group_of(r, dim)) v.push_back(static_cast<int>(x));
    return v;
  };
  if (tp > 1) R.tp = std::make_unique<Comm>(world->group(members(strategies::MeshDim::TP)), r, R.device);
  if (cp > 1) R.cp = std::make_unique<Comm>(world->group(members(strategies::MeshDim::CP)), r, R.device);
  // Only this stage's parameters get storage (the bucket plan's rule: its
  // chunks' layers, the embedding on the first stage, the head and a tied
  // word embedding on the last).
  R.plan = &bucket_plan->stage(R.stage);
  R.owned = R.plan->holds;
  R.model = std::make_unique<GptModel>(sc.model, R.device, opt.seed,
                                       TensorParallel{R.tp.get(), sc.plan.sequence_parallel},
                                       ContextParallel{R.cp.get()},
                                       [&](int i) { return R.owned[static_cast<std::size_t>(i)]; });
  GptModel& model = *R.model;
  for (int i = 0; i < table.size(); ++i)
    if (!(model.slice(i).local_shape() == bucket_plan->shape(i)))
      throw Error("executor: parameter '" + names[static_cast<std::size_t>(i)] + "' is " +
                  model.slice(i).local_shape().str() + " on a rank, the bucket plan says " + bucket_plan->shape(i).str());

  // Communicators.
  // Gradients are reduced over dp × cp (each cp rank saw its tokens).
  R.dp = std::make_unique<Comm>(
      world->group(members(cp > 1 ? strategies::MeshDim::DataWithContext : strategies::MeshDim::DP)), r,
      R.device);
  R.pp_members = members(strategies::MeshDim::PP);
  R.pp = std::make_unique<Comm>(world->group(R.pp_members), r, R.device);
  if (tie && (R.stage == 0 || R.stage == pp - 1))
    R.tie = std::make_unique<Comm>(
        world->group({R.pp_members.front(), R.pp_members.back()}), r, R.device);

  // Buckets: the plan's (the lowering's, by task), with this rank's shards.
  for (const FlatBucket& fb : R.plan->buckets) R.buckets.push_back({&fb, fb.shard(R.dp->rank()), {}, {}});
  // The ring staging the lowering declares for the step: the dp ring's
  // (dp x cp ranks) largest chunk of what it reduces (a bucket, padded to
  // equal shards under ZeRO), the tie's half of the word embedding.
  std::int64_t most = 0;
  for (const FlatBucket& fb : R.plan->buckets) {
    const std::int64_t reduced = zero > 0 ? fb.padded() : fb.numel;
    most = std::max(most, (reduced + R.dp->size() - 1) / R.dp->size());
  }
  R.dp->reserve_staging(most);
  if (R.tie) R.tie->reserve_staging((model.grads()[static_cast<std::size_t>(tok)].numel() + 1) / 2);
  // The tp ring's largest step, a share of the b·s·h activation (the
  // lowering's cpu_tp_chunk): its staging from the step's start.
  if (R.tp) {
    const std::int64_t n = sc.batch.micro * (sc.model.seq_len / cp) * sc.model.hidden;
    R.tp->reserve_staging((n + tp - 1) / tp);
  }
  // The cp ring's largest step, one rank's keys and values of a
  // microbatch (the attention's all-gather and its gradients'
  // reduce-scatter; the lowering's cpu_kernel_bytes): from the step's start.
  if (R.cp) R.cp->reserve_staging(model.kv_elements(sc.batch.micro));
  if (compressed) {
    // The stage's gradients are compressed as one flat vector, in parameter
    // order; a ZeRO-1 rank steps its shard of it.
    std::vector<Shape> stage_shapes;
    for (const int i : R.buckets.front().params()) stage_shapes.push_back(bucket_plan->shape(i));
    R.compressor = make_compressor(
        {.method = sc.plan.compression, .ranks = dp, .rank = R.dp_index, .seed = R.plan->compressor_seed},
        flat_layout(stage_shapes), R.device);
    if (R.plan->compressed_rounds != R.compressor->rounds())
      throw Error("executor: the lowering gives " + std::to_string(R.plan->compressed_rounds) +
                  " compressed rounds, " + std::string(enum_name(sc.plan.compression.method)) + " runs " +
                  std::to_string(R.compressor->rounds()));
  }
  if (zero >= 3) {
    // ZeRO-3: each layer's parameters live as this rank's shard only.
    for (int l = 0; l < table.layers(); ++l) {
      const int bi = R.layer_bucket(l);
      if (bi < 0) continue;
      Bucket& b = R.buckets[static_cast<std::size_t>(bi)];
      Tensor flat = pack(R, b, false, MemTag::CommBuffers, true);
      b.shard_param = Tensor(R.device, {b.chunk()}, MemTag::Params);
      std::memcpy(b.shard_param.data(), flat.data() + static_cast<std::int64_t>(R.dp->rank()) * b.chunk(),
                  static_cast<std::size_t>(b.chunk()) * sizeof(float));
      for (int i : b.params()) {
        model.params()[static_cast<std::size_t>(i)].release();
        model.grads()[static_cast<std::size_t>(i)].release();
      }
    }
  }
  if (sc.plan.offload.weights) {
    // Weight offload: every layer's parameters live in the host pool and
    // come to the device for each pass (`fetch-weights-*`).
    R.host_weights.resize(names.size());
    for (int l = 0; l < table.layers(); ++l)
      for (int i : table.layer(l)) {
        const auto ii = static_cast<std::size_t>(i);
        if (!R.owned[ii]) continue;
        R.host_weights[ii] = model.params()[ii].clone(R.host, MemTag::Params);
        model.params()[ii].release();
      }
  }
  // ZeRO-Offload keeps the optimizer's states in the host pool; to NVMe,
  // in files (ZeRO-Infinity).
  if (sc.plan.offload.optimizer == strategies::OffloadTarget::Nvme) {
    R.storage = std::make_unique<FileAllocator>(
        opt.storage_dir.empty() ? std::filesystem::temp_directory_path().string() : opt.storage_dir);
    R.opt = make_optimizer(*R.storage);
  } else {
    R.opt = make_optimizer(offload_optimizer() ? R.host : R.device);
  }
}

std::unique_ptr<Optimizer> Executor::Impl::make_optimizer(Allocator& a) const {
  using strategies::Optimizer;
  const float lr = opt.lr, wd = opt.weight_decay;
  switch (sc.plan.optimizer) {
    case Optimizer::Sgd: return std::make_unique<Sgd>(a, SgdOptions{.lr = lr, .weight_decay = wd});
    case Optimizer::Momentum:
      return std::make_unique<Sgd>(a, SgdOptions{.lr = lr, .momentum = 0.9f, .weight_decay = wd});
    case Optimizer::Adam: return std::make_unique<Adam>(a, AdamOptions{.lr = lr, .weight_decay = wd});
    case Optimizer::AdamW:
      return std::make_unique<Adam>(a, AdamOptions{.lr = lr, .weight_decay = wd, .decoupled = true});
    case Optimizer::Adam8bit:
      return std::make_unique<Adam8bit>(a, Adam8bitOptions{.lr = lr, .weight_decay = wd});
    case Optimizer::Lars: return std::make_unique<Lars>(a, LarsOptions{.lr = lr, .weight_decay = wd});
    case Optimizer::Lamb: return std::make_unique<Lamb>(a, LambOptions{.lr = lr, .weight_decay = wd});
    case Optimizer::Adafactor: return std::make_unique<Adafactor>(a, AdafactorOptions{.lr = lr});
    case Optimizer::Sm3: return std::make_unique<Sm3>(a, Sm3Options{.lr = lr});
    case Optimizer::Adam4bit: break;
  }
  throw Error("executor: optimizer '" + std::string(enum_name(sc.plan.optimizer)) + "' is not implemented");
}

Tensor Executor::Impl::pack(Rank& R, const Bucket& b, bool grads, MemTag tag, bool padded) const {
  Tensor flat(R.device, {padded ? b.plan->padded() : b.numel()}, tag);
  auto src = grads ? R.model->grads() : R.model->params();
  for_each_piece(b, {0, b.numel()}, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
    std::memcpy(flat.data() + at, src[static_cast<std::size_t>(i)].data() + off,
                static_cast<std::size_t>(n) * sizeof(float));
  });
  return flat;
}

void Executor::Impl::unpack(Rank& R, const Bucket& b, const float* flat, bool grads) const {
  auto dst = grads ? R.model->grads() : R.model->params();
  for_each_piece(b, {0, b.numel()}, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
    std::memcpy(dst[static_cast<std::size_t>(i)].data() + off, flat + at,
                static_cast<std::size_t>(n) * sizeof(float));
  });
}

void Executor::Impl::run_rank(Rank& R, std::span<const std::int32_t> tokens,
                              std::span<const std::int32_t> targets, Clock::time_point t0) {
  R.loss_sum = 0;
  R.tie_done = false;
  R.times.clear();
  R.receipts.clear();
  R.step_start = t0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto& g = R.model->grads()[i];
    if (!g.empty()) g.zero();
  }
  for (const std::int32_t i : R.plan->tasks) {
    R.received.reset();
    const auto a = Clock::now();
    run_task(R, i, tokens, targets);
    const auto start = R.received ? std::max(a, *R.received) : a;
    R.times.push_back({i, R.rank, R.since_start(start), R.since_start(Clock::now()),
                       R.device.stats().current[static_cast<std::size_t>(MemTag::Activations)]});
  }
  if (!R.saved.empty() || !R.act.empty() || !R.grad.empty() || !R.emb.empty() || !R.head.empty())
    throw Error("executor: rank " + std::to_string(R.rank) + " ended the step holding activations");
}

void Executor::Impl::run_task(Rank& R, std::int32_t index, std::span<const std::int32_t> tokens,
                              std::span<const std::int32_t> targets) {
  const TaskInfo& t = low.info[static_cast<std::size_t>(index)];
  switch (t.op) {
    case TaskOp::Framework: return;
    case TaskOp::Forward: return forward(R, t, tokens, targets);
    case TaskOp::Backward: return backward(R, t);
    case TaskOp::Recompute: return recompute(R, t);
    case TaskOp::SendActivation: {
      const auto it = R.act.find({t.chunk, t.microbatch});
      if (it == R.act.end()) throw Error("executor: nothing to send for " + low.graph.tasks()[static_cast<std::size_t>(index)].id);
      R.pp->send(R.pp_members[static_cast<std::size_t>((t.chunk + 1) % pp)], p2p_tag(false, t.chunk, t.microbatch),
                 it->second.span());
      R.act.erase(it);
      return;
    }
    case TaskOp::SendGradient: {
      const auto it = R.grad.find({t.chunk, t.microbatch});
      if (it == R.grad.end()) throw Error("executor: nothing to send for " + low.graph.tasks()[static_cast<std::size_t>(index)].id);
      R.pp->send(R.pp_members[static_cast<std::size_t>((t.chunk - 1 + pp) % pp)],
                 p2p_tag(true, t.chunk, t.microbatch), it->second.dres.span());
      R.grad.erase(it);
      return;
    }
    // Tensor-parallel communication sits between a layer's ops: the forward,
    // backward and recompute tasks run it (GptModel), so their measured
    // times include it and this task's is nothing.
    case TaskOp::LayerComm: return;
    case TaskOp::EmbeddingTie: return tie_embedding(R);
    case TaskOp::DpReduce: return dp_reduce(R, R.bucket_of(index));
    case TaskOp::PsPush: return ps_push(R, R.bucket_of(index));
    case TaskOp::PsPull: return ps_pull(R);
    case TaskOp::CompressEncode: return compress_encode(R);
    case TaskOp::CompressRound: return R.compressor->round(t.round, *R.dp);
    case TaskOp::CompressDecode: return compress_decode(R);
    case TaskOp::Zero3Gather:
    case TaskOp::WeightFetch: return ensure_layer_params(R, t.layer);
    case TaskOp::Zero3Reduce:
      if (t.part == Part::Layer)
        return zero3_reduce(R, R.layer_bucket(t.layer), true);
      return zero3_reduce(R, R.bucket_of(index), false);
    case TaskOp::Offload:
    case TaskOp::Prefetch:
      return move_swapped(R.saved.at({t.layer, t.microbatch}),
                          low.layers.swaps[static_cast<std::size_t>(t.layer)],
                          t.op == TaskOp::Offload ? static_cast<Allocator&>(R.host) : R.device);
    case TaskOp::OptimizerStep: return optimizer_step(R);
    case TaskOp::GatherWeights: return gather_weights(R);
    case TaskOp::GradsToHost: return grads_to_host(R);
    case TaskOp::WeightsToDevice: return weights_to_device(R);
    // The states' pages come back from their files before the step and are
    // written out and dropped from memory after it (nothing to read before
    // the first step: the optimizer makes its states then).
    case TaskOp::StatesFromNvme: return R.storage->prefetch();
    case TaskOp::StatesToNvme: return R.storage->write_back();
    default: break;
  }
  throw Error("executor: task " + low.graph.tasks()[static_cast<std::size_t>(index)].id +
              " is not executed by the CPU backend");
}

void Executor::Impl::receive(Rank& R, int peer, std::int64_t tag, std::span<float> into) {
  const auto asked = Clock::now();
  R.pp->recv(peer, tag, into);
  R.received = Clock::now();
  const auto send = send_task.find(tag);
  if (send == send_task.end()) throw Error("executor: no send task for a pipeline message to rank " + std::to_string(R.rank));
  R.receipts.push_back({send->second, R.rank, R.since_start(asked), R.since_start(*R.received), 0});
}

Tensor Executor::Impl::take_activation(Rank& R, int chunk, int mb) {
  const auto it = R.act.find({chunk, mb});
  if (it != R.act.end()) {
    Tensor x = std::move(it->second);
    R.act.erase(it);
    return x;
  }
  if (chunk == 0) throw Error("executor: no input for model chunk 0");
  Tensor x(R.device, {R.model->rows(micro), hidden}, MemTag::Activations);
  receive(R, R.pp_members[static_cast<std::size_t>((chunk - 1) % pp)], p2p_tag(false, chunk - 1, mb), x.span());
  return x;
}

BackwardBuffers& Executor::Impl::gradient_buffers(Rank& R, int chunk, int mb) {
  const auto it = R.grad.find({chunk, mb});
  if (it != R.grad.end()) return it->second;
  if (chunk + 1 >= chunks) throw Error("executor: no gradient for the last model chunk");
  BackwardBuffers b = R.model->backward_buffers(micro);
  receive(R, R.pp_members[static_cast<std::size_t>((chunk + 1) % pp)], p2p_tag(true, chunk + 1, mb),
          b.dres.span());
  return R.grad.emplace(Key{chunk, mb}, std::move(b)).first->second;
}

void Executor::Impl::forward(Rank& R, const TaskInfo& t, std::span<const std::int32_t> tokens,
                             std::span<const std::int32_t> targets) {
  const int mb = t.microbatch, k = t.chunk;
  const auto at = static_cast<std::size_t>(bucket_plan->first_sequence(R.dp_index, mb) * seq);
  const auto n = static_cast<std::size_t>(micro * seq);
  GptModel& model = *R.model;
  // The microbatch's ids at this rank's positions of each sequence (all of
  // them without context parallelism).
  auto local = [&](std::span<const std::int32_t> ids, std::vector<std::int32_t>& out) {
    ids = ids.subspan(at, n);
    if (cp == 1) return ids;
    out.clear();
    for (std::int64_t b = 0; b < micro; ++b)
      for (const std::int32_t p : model.positions()) out.push_back(ids[static_cast<std::size_t>(b * seq + p)]);
    return std::span<const std::int32_t>(out);
  };
  switch (t.part) {
    case Part::Embedding:
      R.act[{k, mb}] = model.embedding_forward(local(tokens, R.cp_tokens), micro, R.emb[mb]);
      return;
    case Part::Layer: {
      Tensor x = take_activation(R, k, mb);
      ensure_layer_params(R, t.layer);
      BlockSaved& s = R.saved[{t.layer, mb}];
      Tensor y = model.block_forward(t.layer, std::move(x), s);
      keep_for_backward<GptModel>(low.layers.keeps[static_cast<std::size_t>(t.layer)], core_recompute, s);
      R.act[{k, mb}] = std::move(y);
      release_layer_params(R, t.layer);
      return;
    }
    case Part::Head: {
      Tensor x = take_activation(R, k, mb);
      // Each rank's loss is the mean over its tokens: 1/(m·dp·cp) of each
      // makes the mean over the global batch.
      const double loss = model.head_forward(std::move(x), local(targets, R.cp_targets),
                                             bucket_plan->loss_scale(), R.head[mb]);
      if (!std::isfinite(loss))
        throw Error("executor: " + where(R) + ": the loss of microbatch " + std::to_string(mb) +
                    " is " + std::to_string(loss) + " (the run diverged: lower the learning rate)");
      R.loss_sum += loss;
      return;
    }
    case Part::None: break;
  }
  throw Error("executor: a forward task names no part");
}

void Executor::Impl::backward(Rank& R, const TaskInfo& t) {
  const int mb = t.microbatch, k = t.chunk;
  GptModel& model = *R.model;
  switch (t.part) {
    case Part::Head: {
      BackwardBuffers b = model.backward_buffers(micro);
      model.head_backward(R.head.at(mb), b);
      R.head.erase(mb);
      R.grad[{k, mb}] = std::move(b);
      return;
    }
    case Part::Layer: {
      BackwardBuffers& b = gradient_buffers(R, k, mb);
      ensure_layer_params(R, t.layer);
      if (zero >= 3) ensure_layer_grads(R, t.layer);
      const auto it = R.saved.find({t.layer, mb});
      if (it == R.saved.end()) throw Error("executor: layer " + std::to_string(t.layer) + " kept nothing");
      model.block_backward(t.layer, it->second, b);
      R.saved.erase(it);
      release_layer_params(R, t.layer);
      return;
    }
    case Part::Embedding: {
      BackwardBuffers& b = gradient_buffers(R, k, mb);
      model.embedding_backward(R.emb.at(mb), b);
      R.emb.erase(mb);
      R.grad.erase({k, mb});
      return;
    }
    case Part::None: break;
  }
  throw Error("executor: a backward task names no part");
}

void Executor::Impl::recompute(Rank& R, const TaskInfo& t) {
  const int L = t.layer, mb = t.microbatch;
  BlockSaved& s = R.saved.at({L, mb});
  ensure_layer_params(R, L);
  // The layer's position in its chunk and its segment.
  const auto keeps = chunk_map.chunk_keeps(low.layers.keeps, L);
  const std::int64_t i = chunk_map.index_in_chunk(L);
  const bool last = strategies::segment_end(keeps, i);
  const bool first = t.core_only || strategies::segment_start(keeps, i) == i;
  if (t.core_only || (first && last)) {  // the attention core, or a one-layer segment
    R.model->recompute(L, s);
    return;
  }
  // A longer segment reruns from its first layer's kept input, layer by
  // layer, each recompute task one layer.
  Tensor in;
  if (first) {
    in = s.x.clone(R.device, MemTag::Activations);
  } else {
    in = std::move(R.recompute_carry.at(mb));
    R.recompute_carry.erase(mb);
  }
  if (!last) {
    R.recompute_carry[mb] = R.model->block_forward(L, std::move(in), s);
    return;
  }
  // The segment's last layer: its saved tensors around the carried input,
  // without the output nothing reads.
  s = BlockSaved{};
  s.x = std::move(in);
  R.model->recompute(L, s);
}

void Executor::Impl::tie_embedding(Rank& R) {
  if (!R.tie || R.tie_done) return;
  R.tie_done = true;
  R.tie->all_reduce(R.model->grads()[static_cast<std::size_t>(tok)].span());
}

void Executor::Impl::dp_reduce(Rank& R, int bi) {
  Bucket& b = R.buckets[static_cast<std::size_t>(bi)];
  if (tie && b.holds(tok)) tie_embedding(R);
  Tensor flat = pack(R, b, true, MemTag::CommBuffers, zero > 0);
  if (zero == 0) {
    R.dp->all_reduce(flat.span());
    unpack(R, b, flat.data(), true);
    return;
  }
  b.shard_grad = Tensor(R.device, {b.chunk()}, MemTag::Grads);
  R.dp->reduce_scatter(flat.span(), b.shard_grad.span());
}

void Executor::Impl::ps_push(Rank& R, int bi) {
  Bucket& b = R.buckets[static_cast<std::size_t>(bi)];
  if (tie && b.holds(tok)) tie_embedding(R);
  Tensor flat = pack(R, b, true, MemTag::CommBuffers);
  if (R.dp_index != 0) {
    R.dp->send(server(R), push_tag(bi), flat.span());
    return;
  }
  Tensor in(R.device, {b.numel()}, MemTag::CommBuffers);
  for (std::size_t w = 1; w < R.dp->members().size(); ++w) {
    R.dp->recv(R.dp->members()[w], push_tag(bi), in.span());
    for (std::int64_t i = 0; i < b.numel(); ++i) flat[i] += in[i];
  }
  unpack(R, b, flat.data(), true);
}

void Executor::Impl::ps_pull(Rank& R) {
  // The stage's parameters, in the buckets' order.
  for (const auto& b : R.buckets) {
    if (R.dp_index == 0) {
      const Tensor flat = pack(R, b, false, MemTag::CommBuffers);
      for (std::size_t w = 1; w < R.dp->members().size(); ++w)
        R.dp->send(R.dp->members()[w], kPullTag, flat.span());
    } else {
      Tensor flat(R.device, {b.numel()}, MemTag::CommBuffers);
      R.dp->recv(server(R), kPullTag, flat.span());
      unpack(R, b, flat.data(), false);
    }
  }
}

// Compression replaces the buckets' all-reduce: the stage's gradients are
// encoded, exchanged in the lowering's rounds and decoded into the sum over
// dp. A tied word embedding is exchanged on the first and the last stage
// (each its own part of the gradient) and tied after the decode
// (`embedding-tie` follows it), so both copies get the same sum.
void Executor::Impl::compress_encode(Rank& R) {
  Tensor flat = pack(R, R.buckets.front(), true, MemTag::CommBuffers);
  R.compressor->encode(flat.span());
}

void Executor::Impl::compress_decode(Rank& R) {
  const Bucket& b = R.buckets.front();
  Tensor flat(R.device, {b.numel()}, MemTag::CommBuffers);
  R.compressor->decode(flat.span());
  unpack(R, b, flat.data(), true);
}

// ZeRO-1 with compression: every rank holds the whole decoded gradient; it
// steps its chunk.
void Executor::Impl::shards_from_grads(Rank& R) {
  if (!compressed || zero == 0) return;
  for (auto& b : R.buckets) {
    b.shard_grad = Tensor(R.device, {b.chunk()}, MemTag::Grads);
    for_each_piece(b, b.mine, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
      std::memcpy(b.shard_grad.data() + at, R.model->grads()[static_cast<std::size_t>(i)].data() + off,
                  static_cast<std::size_t>(n) * sizeof(float));
    });
  }
}

void Executor::Impl::zero3_reduce(Rank& R, int bi, bool layer) {
  Bucket& b = R.buckets[static_cast<std::size_t>(bi)];
  if (tie && b.holds(tok)) tie_embedding(R);
  Tensor flat = pack(R, b, true, MemTag::CommBuffers, true);
  Tensor part(R.device, {b.chunk()}, MemTag::CommBuffers);
  R.dp->reduce_scatter(flat.span(), part.span());
  if (b.shard_grad.empty()) b.shard_grad = Tensor(R.device, {b.chunk()}, MemTag::Grads);
  for (std::int64_t i = 0; i < part.numel(); ++i) b.shard_grad[i] += part[i];
  // A layer's full gradients live from its backward to this reduce-scatter.
  if (layer)
    for (int i : b.params()) R.model->grads()[static_cast<std::size_t>(i)].release();
}

void Executor::Impl::ensure_layer_params(Rank& R, int layer) {
  if (!remote_layers()) return;
  const auto& lp = table.layer(layer);
  auto params = R.model->params();
  if (!params[static_cast<std::size_t>(lp.front())].empty()) return;
  if (zero < 3) {
    // Weight offload: the layer's weights come from the host pool.
    for (int i : lp)
      params[static_cast<std::size_t>(i)] =
          R.host_weights[static_cast<std::size_t>(i)].clone(R.device, MemTag::Params);
    return;
  }
  Bucket& b = R.buckets[static_cast<std::size_t>(R.layer_bucket(layer))];
  for (int i : lp) params[static_cast<std::size_t>(i)] = Tensor(R.device, bucket_plan->shape(i), MemTag::Params);
  Tensor flat(R.device, {b.plan->padded()}, MemTag::CommBuffers);
  R.dp->all_gather(b.shard_param.span(), flat.span());
  unpack(R, b, flat.data(), false);
}

void Executor::Impl::release_layer_params(Rank& R, int layer) {
  if (!remote_layers()) return;
  for (int i : table.layer(layer)) R.model->params()[static_cast<std::size_t>(i)].release();
}

void Executor::Impl::ensure_layer_grads(Rank& R, int layer) {
  auto grads = R.model->grads();
  for (int i : table.layer(layer))
    if (grads[static_cast<std::size_t>(i)].empty())
      grads[static_cast<std::size_t>(i)] = Tensor(R.device, bucket_plan->shape(i), MemTag::Grads);
}

void Executor::Impl::capture(Rank& R) {
  // One copy of each gradient: dp rank 0's (or every rank's shard), the
  // word embedding from the first stage.
  auto skip = [&](int i) { return (tie && i == tok && R.stage != 0) || !writes_whole(R, i); };
  if (zero == 0) {
    if (R.dp_index != 0 || R.cp_index != 0) return;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const int ii = static_cast<int>(i);
      if (!R.owned[i] || skip(ii)) continue;
      const auto& g = R.model->grads()[i];
      to_whole(R, ii, 0, g.data(), g.numel(), captured.at(names[i]).data());
    }
    return;
  }
  for (const auto& b : R.buckets)
    for_each_piece(b, b.mine, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
      if (skip(i)) return;
      to_whole(R, i, off, b.shard_grad.data() + at, n, captured.at(names[static_cast<std::size_t>(i)]).data());
    });
}

void Executor::Impl::to_whole(const Rank& R, int i, std::int64_t off, const float* src,
                              std::int64_t n, float* whole) const {
  const ParamSlice& sl = R.model->slice(i);
  if (sl.is_whole()) {
    std::memcpy(whole + off, src, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  for (std::int64_t k = 0; k < n; ++k) whole[sl.whole_index(off + k)] = src[k];
}

// Sequence parallelism: a norm's gradient holds only this rank's rows; the
// tensor-parallel group sums it before the step (Megatron-LM does the same
// before its optimizer). Every rank of the group holds the same buckets, so
// the pieces line up.
void Executor::Impl::reduce_row_split_grads(Rank& R) {
  if (!R.tp) return;
  GptModel& model = *R.model;
  if (zero == 0) {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (R.owned[i] && model.grad_split_by_rows(static_cast<int>(i)))
        R.tp->all_reduce(model.grads()[i].span());
    return;
  }
  for (auto& b : R.buckets) {
    if (b.shard_grad.empty()) continue;
    for_each_piece(b, b.mine, [&](int i, std::int64_t, std::int64_t at, std::int64_t n) {
      if (model.grad_split_by_rows(i))
        R.tp->all_reduce({b.shard_grad.data() + at, static_cast<std::size_t>(n)});
    });
  }
}

void Executor::Impl::check_finite_grads(const Rank& R) const {
  auto fail = [&](int i, std::int64_t element, float value) {
    const std::string& name = names[static_cast<std::size_t>(i)];
    const std::string layer = table.where(i);
    throw Error("executor: " + where(R) + ": the gradient of " + name + " (" + layer + ") holds " +
                std::to_string(value) + " at element " + std::to_string(element) +
                " of this rank's part (the run diverged or overflowed)");
  };
  if (zero == 0) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (!R.owned[i]) continue;
      const Tensor& g = R.model->grads()[i];
      if (const auto k = first_non_finite(g.data(), g.numel()); k >= 0)
        fail(static_cast<int>(i), k, g.data()[k]);
    }
    return;
  }
  for (const auto& b : R.buckets) {
    if (b.shard_grad.empty()) continue;
    for_each_piece(b, b.mine, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
      if (const auto k = first_non_finite(b.shard_grad.data() + at, n); k >= 0)
        fail(i, off + k, b.shard_grad.data()[at + k]);
    });
  }
}

void Executor::Impl::grads_to_host(Rank& R) {
  // ZeRO-Offload: the gradients this rank steps (its stage's, or its chunks
  // with ZeRO) go to the host pool; the fp32 master parameters live there
  // from the first step on.
  shards_from_grads(R);
  reduce_row_split_grads(R);
  check_finite_grads(R);
  if (opt.capture_gradients) capture(R);
  GptModel& model = *R.model;
  const bool first = R.host_params.empty();
  R.host_grads.clear();
  if (zero == 0) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (!R.owned[i]) continue;
      R.host_grads.push_back(model.grads()[i].clone(R.host, MemTag::Grads));
      if (first) R.host_params.push_back(model.params()[i].clone(R.host, MemTag::Params));
    }
    return;
  }
  for (auto& b : R.buckets) {
    if (b.shard_grad.empty()) b.shard_grad = Tensor(R.device, {b.chunk()}, MemTag::Grads);
    R.host_grads.push_back(b.shard_grad.clone(R.host, MemTag::Grads));
    b.shard_grad.release();
    if (!first) continue;
    Tensor master(R.host, {b.chunk()}, MemTag::Params);
    if (!b.shard_param.empty()) {
      std::memcpy(master.data(), b.shard_param.data(), static_cast<std::size_t>(b.shard_param.bytes()));
    } else {
      for_each_piece(b, b.mine, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
        std::memcpy(master.data() + at, model.params()[static_cast<std::size_t>(i)].data() + off,
                    static_cast<std::size_t>(n) * sizeof(float));
      });
    }
    R.host_params.push_back(std::move(master));
  }
}

void Executor::Impl::weights_to_device(Rank& R) {
  GptModel& model = *R.model;
  if (zero == 0) {
    std::size_t j = 0;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (R.owned[i]) {
        const Tensor& h = R.host_params[j++];
        std::memcpy(model.params()[i].data(), h.data(), static_cast<std::size_t>(h.bytes()));
      }
    return;
  }
  for (std::size_t j = 0; j < R.buckets.size(); ++j) {
    Bucket& b = R.buckets[j];
    if (b.shard_param.empty()) b.shard_param = Tensor(R.device, {b.chunk()}, MemTag::Params);
    std::memcpy(b.shard_param.data(), R.host_params[j].data(), static_cast<std::size_t>(R.host_params[j].bytes()));
  }
  if (zero >= 3) gather_whole_buckets(R);  // as optimizer_step does on the device
}

void Executor::Impl::optimizer_step(Rank& R) {
  if (offload_optimizer()) {
    R.opt->step(R.host_params, R.host_grads);
    R.host_grads.clear();
    return;
  }
  shards_from_grads(R);
  reduce_row_split_grads(R);
  if (ps() && R.dp_index != 0) return;  // the server steps; workers pull its weights
  check_finite_grads(R);
  if (opt.capture_gradients) capture(R);
  GptModel& model = *R.model;
  std::vector<Tensor> P, G;
  if (zero == 0) {
    // The stage's parameters, moved out of the model for the step and back.
    // With weight offload the layers' parameters are stepped in the host
    // pool, where they live.
    std::vector<std::size_t> idx;
    std::vector<Tensor*> home;
    if (two_bw()) {
      // PipeDream-2BW (Narayanan et al. 2021): the step's gradients were
      // computed with W(t − 1); they update W(t), and the next step computes
      // with W(t): W(t + 1) = W(t) − lr·∇f(W(t − 1)).
      if (R.newest.empty()) {
        R.newest.resize(names.size());
        for (std::size_t i = 0; i < names.size(); ++i)
          if (R.owned[i]) R.newest[i] = model.params()[i].clone(R.device, MemTag::Params);
      }
      for (std::size_t i = 0; i < names.size(); ++i)
        if (R.owned[i])
          std::memcpy(model.params()[i].data(), R.newest[i].data(),
                      static_cast<std::size_t>(R.newest[i].bytes()));
    }
    for (std::size_t i = 0; i < names.size(); ++i)
      if (R.owned[i]) {
        const bool on_host = !R.host_weights.empty() && !R.host_weights[i].empty();
        idx.push_back(i);
        home.push_back(two_bw()  ? &R.newest[i]
                       : on_host ? &R.host_weights[i]
                                 : &model.params()[i]);
        P.push_back(std::move(*home.back()));
        G.push_back(std::move(model.grads()[i]));
      }
    R.opt->step(P, G);
    for (std::size_t j = 0; j < idx.size(); ++j) {
      *home[j] = std::move(P[j]);
      model.grads()[idx[j]] = std::move(G[j]);
    }
    return;
  }
  // ZeRO: the step updates this rank's chunk of every bucket.
  for (auto& b : R.buckets) {
    if (b.shard_param.empty()) {
      b.shard_param = Tensor(R.device, {b.chunk()}, MemTag::Params);
      for_each_piece(b, b.mine, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
        std::memcpy(b.shard_param.data() + at, model.params()[static_cast<std::size_t>(i)].data() + off,
                    static_cast<std::size_t>(n) * sizeof(float));
      });
    }
    if (b.shard_grad.empty()) b.shard_grad = Tensor(R.device, {b.chunk()}, MemTag::Grads);
    P.push_back(std::move(b.shard_param));
    G.push_back(std::move(b.shard_grad));
  }
  R.opt->step(P, G);
  for (std::size_t j = 0; j < R.buckets.size(); ++j) {
    R.buckets[j].shard_param = std::move(P[j]);  // gradients die here
  }
  if (zero >= 3) gather_whole_buckets(R);
}

// The embedding and head stay whole on every rank under ZeRO-3: their
// updated chunks are all-gathered after the step (the lowering has no task
// for it).
void Executor::Impl::gather_whole_buckets(Rank& R) {
  for (auto& [task, bi] : R.plan->bucket_of_task) {
    Bucket& b = R.buckets[static_cast<std::size_t>(bi)];
    Tensor flat(R.device, {b.plan->padded()}, MemTag::CommBuffers);
    R.dp->all_gather(b.shard_param.span(), flat.span());
    unpack(R, b, flat.data(), false);
    b.shard_param.release();
  }
}

void Executor::Impl::gather_weights(Rank& R) {
  // One flat buffer of the largest bucket for every bucket's gather, the
  // shards freed once all are gathered: the buffers the lowering declares
  // for this task.
  std::int64_t most = 0;
  for (const auto& b : R.buckets) most = std::max(most, b.plan->padded());
  Tensor flat(R.device, {most}, MemTag::CommBuffers);
  for (auto& b : R.buckets) {
    R.dp->all_gather(b.shard_param.span(), {flat.data(), static_cast<std::size_t>(b.plan->padded())});
    unpack(R, b, flat.data(), false);
  }
  for (auto& b : R.buckets) b.shard_param.release();
}

// ---- Executor ---------------------------------------------------------------

Executor::Executor(const strategies::Scenario& sc, ExecutorOptions opts)
    : impl_(std::make_unique<Impl>(sc, opts)) {}
Executor::~Executor() = default;

int Executor::ranks() const { return static_cast<int>(impl_->ranks.size()); }
std::int64_t Executor::global_batch() const { return impl_->sc.batch.global; }
std::int64_t Executor::seq_len() const { return impl_->seq; }
const strategies::LoweredStep& Executor::lowered() const { return impl_->low; }
const std::map<std::string, std::vector<float>>& Executor::gradients() const { return impl_->captured; }

StepResult Executor::step(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
  Impl& I = *impl_;
  if (I.broken) throw Error("executor: an earlier step failed; make a new executor");
  const auto n = static_cast<std::size_t>(I.sc.batch.global * I.seq);
  if (tokens.size() != n || targets.size() != n)
    throw Error("executor: a step needs global batch × seq_len = " + std::to_string(n) +
                " tokens and targets (got " + std::to_string(tokens.size()) + " and " +
                std::to_string(targets.size()) + ")");
  for (auto& R : I.ranks) {
    R->device.reset_peaks();
    R->host.reset_peaks();
    if (R->storage) R->storage->reset_peaks();
    R->error = nullptr;
  }
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(I.ranks.size());
  for (auto& R : I.ranks)
    threads.emplace_back([&I, &R, tokens, targets, t0] {
      try {
        I.run_rank(*R, tokens, targets, t0);
      } catch (const OutOfMemory& e) {
        R->error = std::make_exception_ptr(
            OutOfMemory(e.requested(), e.live(), e.capacity(), e.tag(),
                        "rank " + std::to_string(R->rank) + " (stage " + std::to_string(R->stage) +
                            "), device pool"));
        I.world->cancel();
      } catch (...) {
        R->error = std::current_exception();
        I.world->cancel();
      }
    });
  for (auto& t : threads) t.join();
  StepResult out;
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The first failure, preferring a rank's own to another's cancellation.
  std::exception_ptr first;
  for (auto& R : I.ranks)
    if (R->error) {
      try {
        std::rethrow_exception(R->error);
      } catch (const Cancelled&) {
        if (!first) first = R->error;
      } catch (...) {
        first = R->error;
        break;
      }
    }
  if (first) {
    I.broken = true;
    std::rethrow_exception(first);
  }
  ++I.steps_done;
  double loss = 0;
  for (auto& R : I.ranks) {
    if (R->tp_index == 0) loss += R->loss_sum;  // every tensor-parallel rank has the loss
    out.memory.push_back({R->rank, R->stage, R->device.stats(), R->host.stats(),
                          R->storage ? R->storage->stats() : MemoryStats{}});
    out.tasks.insert(out.tasks.end(), R->times.begin(), R->times.end());
    out.receipts.insert(out.receipts.end(), R->receipts.begin(), R->receipts.end());
  }
  out.loss = loss / static_cast<double>(I.m * I.dp * I.cp);
  return out;
}

sim::RunResult Executor::measured(const StepResult& r) const {
  const Impl& I = *impl_;
  sim::RunResult run;
  run.tasks.assign(I.low.graph.num_tasks(), {});
  std::vector<bool> representative(I.ranks.size(), false);
  for (const auto& R : I.ranks) representative[static_cast<std::size_t>(R->rank)] = R->dp_index == 0 && R->tp_index == 0 && R->cp_index == 0;
  for (const TaskTime& t : r.tasks) {
    if (!representative[static_cast<std::size_t>(t.rank)]) continue;
    auto& tm = run.tasks[static_cast<std::size_t>(t.task)];
    tm.start = static_cast<Time>(t.start * 1e9);
    tm.end = std::max(tm.start, static_cast<Time>(t.end * 1e9));
    run.makespan = std::max(run.makespan, tm.end);
  }
  return run;
}

std::map<std::string, std::vector<float>> Executor::parameters() const {
  const Impl& I = *impl_;
  std::map<std::string, std::vector<float>> out;
  for (std::size_t i = 0; i < I.names.size(); ++i) {
    const int ii = static_cast<int>(i);
    auto& v = out[I.names[i]];
    v.assign(static_cast<std::size_t>(I.whole_numel[i]), 0.0f);
    for (const auto& R : I.ranks) {
      if (!R->owned[i] || !I.writes_whole(*R, ii)) continue;
      const bool offloaded = !R->host_weights.empty() && !R->host_weights[i].empty();
      const bool two_bw = !R->newest.empty() && !R->newest[i].empty();  // the newest version
      const auto& p = two_bw      ? R->newest[i]
                      : offloaded ? R->host_weights[i]
                                  : R->model->params()[i];
      if (!p.empty()) {
        if (R->dp_index == 0 && R->cp_index == 0) I.to_whole(*R, ii, 0, p.data(), p.numel(), v.data());
        continue;
      }
      // ZeRO-3 layer: every dp rank of the stage holds a chunk.
      for (const auto& b : R->buckets)
        if (b.holds(ii))
          I.for_each_piece(b, b.mine, [&](int j, std::int64_t off, std::int64_t at, std::int64_t n) {
            if (j == ii) I.to_whole(*R, ii, off, b.shard_param.data() + at, n, v.data());
          });
    }
  }
  return out;
}

}  // namespace strata::backend::cpu
