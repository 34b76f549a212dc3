#include "lowering/step_costs.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "costmodel/time_model.hpp"
#include "sim/limits.hpp"
#include "lowering/memory.hpp"

namespace strata::strategies {

namespace {

cost::Calibration calibration_of(const Scenario& sc) {
  const cost::Calibration base = cost::default_calibration(sc.cluster.gpu);
  return sc.calibration ? cost::load_calibration_file(*sc.calibration, base) : base;
}

cost::CollectiveOp op_of(Collective c) {
  switch (c) {
    case Collective::AllReduce: return cost::CollectiveOp::AllReduce;
    case Collective::AllGather: return cost::CollectiveOp::AllGather;
    case Collective::ReduceScatter: return cost::CollectiveOp::ReduceScatter;
    case Collective::AllToAll: return cost::CollectiveOp::AllToAll;
    case Collective::SendRecv: return cost::CollectiveOp::SendRecv;
  }
  return cost::CollectiveOp::AllReduce;
}

// A collective priced by the cost model as the step program's transfer: its
// bandwidth-bound term on the network once the group spans nodes.
Transfer transfer_of(const cost::CollectiveCost& c) {
  return {c.latency, c.time - c.latency, c.spans ? Path::Network : Path::NvLink};
}

// A stage whose GPUs sit on several groups: each task at the pace of the
// slowest group's (tensor- and context-parallel groups synchronise every
// layer; a collective waits for its slowest member), each link at the
// slowest's.
class SlowestOf final : public StepCosts {
 public:
  explicit SlowestOf(std::vector<const StepCosts*> of) : of_(std::move(of)) {}
  Time layer(const cost::Layer& l, Pass pass, bool selective_only) const override {
    return most([&](const StepCosts& c) { return c.layer(l, pass, selective_only); });
  }
  Time layer_comm(const cost::Layer& l, CommKind kind, Pass pass) const override {
    return most([&](const StepCosts& c) { return c.layer_comm(l, kind, pass); });
  }
  Transfer collective(Collective op, Group group, Bytes bytes) const override {
    return longest([&](const StepCosts& c) { return c.collective(op, group, bytes); });
  }
  Transfer p2p(Bytes bytes) const override {
    return longest([&](const StepCosts& c) { return c.p2p(bytes); });
  }
  Transfer copy(Bytes bytes, CopyDir dir) const override {
    return longest([&](const StepCosts& c) { return c.copy(bytes, dir); });
  }
  LinkRates link_rates() const override {
    LinkRates r = of_.front()->link_rates();
    for (const StepCosts* c : of_) {
      const LinkRates o = c->link_rates();
      r.nvlink_GBps = std::min(r.nvlink_GBps, o.nvlink_GBps);
      r.network_GBps = std::min(r.network_GBps, o.network_GBps);
      r.pcie_GBps = std::min(r.pcie_GBps, o.pcie_GBps);
    }
    return r;
  }
  Time elementwise(Bytes bytes) const override {
    return most([&](const StepCosts& c) { return c.elementwise(bytes); });
  }
  Time gemm(Flops flops) const override {
    return most([&](const StepCosts& c) { return c.gemm(flops); });
  }
  Time optimizer_step(double params, bool on_host) const override {
    return most([&](const StepCosts& c) { return c.optimizer_step(params, on_host); });
  }
  Time overhead_per_microbatch() const override {
    return most([](const StepCosts& c) { return c.overhead_per_microbatch(); });
  }
  Time overhead_per_step() const override {
    return most([](const StepCosts& c) { return c.overhead_per_step(); });
  }
  double interference_fraction() const override {
    double f = 0;
    for (const StepCosts* c : of_) f = std::max(f, c->interference_fraction());
    return f;
  }

 private:
  template <class F>
  Time most(F&& f) const {
    Time t = 0;
    for (const StepCosts* c : of_) t = std::max(t, f(*c));
    return t;
  }
  template <class F>
  Transfer longest(F&& f) const {
    Transfer t;
    for (const StepCosts* c : of_) {
      const Transfer x = f(*c);
      if (x.total() > t.total()) t = x;
    }
    return t;
  }
  std::vector<const StepCosts*> of_;
};

}  // namespace

// A cluster of node groups: the scenario seen from each group (its GPU and
// server everywhere), the costs of each, and each stage's.
struct ModelStepCosts::Stages {
  std::vector<std::unique_ptr<Scenario>> views;        // by group
  std::vector<std::unique_ptr<ModelStepCosts>> group;  // by group
  std::vector<std::unique_ptr<SlowestOf>> mixed;       // stages on several groups
  std::vector<const StepCosts*> by_stage;
};

const StepCosts& ModelStepCosts::stage(int s) const {
  if (!stages_) return *this;
  return *stages_->by_stage.at(static_cast<std::size_t>(s));
}

ModelStepCosts::ModelStepCosts(const Scenario& sc) : ModelStepCosts(sc, calibration_of(sc)) {}

ModelStepCosts::ModelStepCosts(const Scenario& sc, cost::Calibration calibration)
    : sc_(sc),
      cal_(std::move(calibration)),
      // Strata's own executors (executed) launch from C++ without a
      // framework: their cost per kernel is the calibration's kernel_launch,
      // already in every kernel's time.
      host_dispatch_us_(sc.executed ? 0.0 : sc.plan.implementation.host_dispatch_us),
      mesh_(sc.plan, sc.cluster.node.gpus_per_node),
      chain_(cost::expand(sc.model, expand_options(sc))) {
  const auto& gpu = sc.cluster.gpu;
  const auto precision = sc.plan.precision;
  const auto recipe = sc.plan.fp8_recipe;
  const auto block = cost::LayerKind::Block;
  // The layers priced: the embedding, the head, then each kind of block
  // (priced_index).
  std::vector<const cost::Layer*> layers{&chain_.embedding, &chain_.head};
  for (const auto& k : chain_.kinds) layers.push_back(&k);
  const std::size_t n = layers.size();
  pass_.assign(n, {});
  // Per kind of block, the forward from its last Linear op on (layer_tail).
  tail_.assign(chain_.kinds.size(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    Time f = 0, b = 0, tail = 0;
    bool linear = false;  // one seen: tail runs from the last
    for (const auto& op : layers[i]->ops) {
      const Time op_f = cost::op_time(gpu, cal_, precision, op, false, layers[i]->kind, recipe);
      f += op_f;
      b += cost::op_time(gpu, cal_, precision, op, true, layers[i]->kind, recipe);
      if (op.kind == cost::OpKind::Linear) tail = 0, linear = true;
      if (linear) tail += op_f;
    }
    pass_[i] = {f, b, f};
    if (i >= 2) tail_[i - 2] = tail;
  }
  // Kernels each layer's passes launch (forward, backward, recompute), for
  // the host's dispatch bound below.
  std::vector<std::array<std::int64_t, 3>> launches(n);
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& op : layers[i]->ops) {
      const std::int64_t f = cost::op_kernels(op, false).kernels;
      launches[i][0] += f;
      launches[i][1] += cost::op_kernels(op, true).kernels;
      launches[i][2] += f;
    }
  // A selectively kept block reruns its policy's share of each op: the
  // attention core (Megatron-LM), or all off torchtitan's save list.
  // Not priced: the sequence-parallel all-gathers torchtitan's rerun of wk
  // and w3 repeats with tp > 1 (its list stores reduce-scatters only).
  const std::size_t kinds = chain_.kinds.size();
  selective_.assign(kinds, 0);
  std::vector<std::int64_t> selective_launches(kinds, 0);
  const cost::Recompute policy = selective_policy(sc.plan);
  for (std::size_t k = 0; k < kinds; ++k)
    for (const auto& op : chain_.kinds[k].ops)
      if (const double share = cost::rerun_share(op, policy); share > 0) {
        selective_[k] += share * cost::op_time(gpu, cal_, precision, op, false, block, recipe);
        selective_launches[k] += cost::op_kernels(op, false).kernels;
      }

  // Gradient accumulation without fusion (implementation.grad_accumulation_
  // fusion false): after each layer's backward of a microbatch, a separate
  // memory-bound kernel per weight matrix adds the new gradient into the
  // gradient buffer (Megatron-LM's DDP hook, main_grad.add_(grad); PyTorch's
  // AccumulateGrad without one). Bytes per parameter: read the new gradient
  // (16-bit with mixed precision, else 4), read and write the buffer — fp32
  // when gradients accumulate in fp32 (fp32_grad_accumulation, or fp32
  // training), else 16-bit as the gradient: 2 + 4 + 4 = 10 or 2 + 2 + 2 = 6.
  // The pass is charged whatever the buffer's precision because the kernel
  // runs whatever it is; fused, the weight-gradient GEMM accumulates in its
  // epilogue and the pass is free (Megatron-LM fuses only into an fp32
  // buffer: a plan that accumulates in 16 bits on Megatron-LM says false).
  // Only the linear layers' weight matrices: that is what the GEMM fusion
  // covers; biases, norms and the embedding lookup's gradient are accumulated
  // by small separate kernels either way (not charged).
  if (!sc.plan.implementation.grad_accumulation_fusion) {
    const bool mixed = precision != Precision::FP32;
    const bool fp32_buffer = !mixed || sc.plan.implementation.fp32_grad_accumulation;
    const double per_param = (mixed ? 2.0 : 4.0) + 2.0 * (fp32_buffer ? 4.0 : 2.0);
    for (std::size_t i = 0; i < n; ++i) {
      double params = 0;
      cost::KernelShape shape;
      shape.kernels = 0;
      for (const auto& op : layers[i]->ops)
        if (op.kind == cost::OpKind::Linear && op.matrices > 0) {
          params += static_cast<double>(op.matrix_params());
          shape.kernels += op.matrices;
        }
      if (shape.kernels == 0) continue;
      launches[i][1] += shape.kernels;
      pass_[i][1] += cost::compute_time(gpu, cal_, precision, 0, static_cast<Bytes>(params * per_param), shape);
    }
  }

  // How a ZeRO-3 framework lays out what it gathers and reduces: each copy
  // below reads and writes every parameter (or gradient) of a layer once in
  // the compute dtype — one memory-bound kernel, 2 × 2 bytes a parameter in
  // 16 bits, 2 × 4 in fp32 — added to a pass. Strata's own executors
  // (executed) make neither copy.
  const double compute_bytes = bytes_per_param(sc.plan).weights;
  const auto copy_pass = [&](std::size_t i, std::size_t pass) {
    const auto params = static_cast<double>(layers[i]->params());
    if (params <= 0) return;
    ++launches[i][pass];
    pass_[i][pass] += cost::compute_time(gpu, cal_, precision, 0, static_cast<Bytes>(2.0 * compute_bytes * params));
  };
  const bool zero3 = sc.plan.zero >= 3 && !sc.executed;
  // Flat parameters (implementation.zero3_flat_grads, PyTorch FSDP1): a
  // unit's parameters are views of its flat parameter (FlatParamHandle), so
  // autograd's backward of that split concatenates their gradients into the
  // flat gradient, per layer and microbatch.
  if (zero3 && sc.plan.implementation.zero3_flat_grads)
    for (std::size_t i = 0; i < n; ++i) copy_pass(i, 1);

  // Per-parameter shards gathered into one buffer
  // (implementation.zero3_gather_copy_out, PyTorch FSDP2): wait_for_unshard
  // copies every parameter out of the all-gather output on the compute
  // stream (foreach_all_gather_copy_out, one split_with_sizes_copy) before
  // each layer's forward and its backward's re-gather; the root module
  // (embedding, head) held from its forward to its backward
  // (zero3_root_unsharded) is copied out once.
  if (zero3 && sc.plan.implementation.zero3_gather_copy_out)
    for (std::size_t i = 0; i < n; ++i) {
      copy_pass(i, 0);
      const bool held_root = layers[i]->kind != cost::LayerKind::Block && sc.plan.implementation.zero3_root_unsharded;
      if (!held_root) copy_pass(i, 1);
    }

  // Rank-by-rank host work on each parameter (implementation.
  // zero3_host_per_rank, DeepSpeed): each gather splits every gathered
  // tensor out of the flat buffer with a narrow per rank
  // (AllGatherCoalescedHandle.wait), in the forward and again in the
  // backward; each reduce-scatter bucket slices every gradient into a chunk
  // per rank (reduce_scatter_coalesced), in the backward. dp × cp eager
  // host operations per tensor each time, in the dispatch bound below.
  if (const std::int64_t ranks = zero_shards(sc.plan); zero3 && sc.plan.implementation.zero3_host_per_rank && ranks > 1) {
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t tensors = 0;
      for (const auto& op : layers[i]->ops)
        tensors += zero3_module_tensors(op, sc.plan.implementation.zero3_persistence_threshold);
      launches[i][0] += ranks * tensors;
      launches[i][1] += 2 * ranks * tensors;
    }
  }

  const std::int64_t rep = 0;  // stage 0's first rank represents every stage's groups
  const bool nvlink_mesh = !sc.cluster.node.nvlinks.empty();  // members matter only there
  const auto group = [&](MeshDim dim) {
    return priced(mesh_.placement(rep, dim), nvlink_mesh ? mesh_.group_of(rep, dim) : std::vector<std::int64_t>{});
  };
  tp_g_ = group(MeshDim::TP);
  cp_g_ = group(MeshDim::CP);
  dp_g_ = group(sc.plan.cp > 1 ? MeshDim::DataWithContext : MeshDim::DP);
  ep_g_ = group(MeshDim::EP);
  edp_g_ = group(MeshDim::ExpertDP);
  // Pipeline sends go between neighbouring stages: the representative and
  // the next stage's rank.
  const GroupPlacement pipeline = mesh_.placement(rep, MeshDim::PP);
  const std::int64_t next[] = {rep, mesh_.next_pp_rank(rep)};
  pp_g_ = priced(pipeline, next);
  // The tied embedding's all-reduce: the first and last stages, on one node
  // only if the whole pipeline group is.
  const std::int64_t ends[] = {rep, nvlink_mesh ? mesh_.group_of(rep, MeshDim::PP).back() : rep};
  tie_g_ = priced({2, pipeline.intra_node() ? 1 : 2, pipeline.intra_node() ? 2 : 1, true}, ends);

  // Blocking communication per layer and microbatch, for each kind of block.
  comm_.assign(kinds, {});
  const auto& p = sc.plan;
  const double e = static_cast<double>(cost::activation_bytes(precision));
  const double b = static_cast<double>(sc.batch.micro);
  const double s = static_cast<double>(sc.model.seq_len / p.cp);
  const double h = static_cast<double>(sc.model.hidden);
  const Bytes act = static_cast<Bytes>(b * s * h * e);
  if (p.tp > 1) {
    // Megatron: two all-reduces forward and two backward; with sequence
    // parallelism two all-gathers and two reduce-scatters each way (the same
    // volume; Korthikanti et al. Sec. 4.2.2).
    const Time ag = ring(cost::CollectiveOp::AllGather, act, tp_g_).total();
    const Time rs = ring(cost::CollectiveOp::ReduceScatter, act, tp_g_).total();
    const Time ar = ring(cost::CollectiveOp::AllReduce, act, tp_g_).total();
    const Time one = p.sequence_parallel ? 2 * (ag + rs) : 2 * ar;
    // Current per-tensor scaling of a tensor that sequence parallelism
    // gathers takes its amax over the tensor-parallel group first (Transformer
    // Engine: "Tensors that are gathered across nodes (e.g. input and gradient
    // in sequence parallelism) require amax synchronization before
    // quantization", fp8_current_scaling.rst; the column-parallel input and
    // the row-parallel output gradient quantizers reduce over tp_group): an
    // all-reduce of one fp32 before each of the two gathers each way, blocking.
    // NVFP4's per-tensor scale is current too (NVFP4Quantizer's
    // with_amax_reduction over amax_reduction_group).
    const bool current = (precision == Precision::FP8 && recipe == cost::Fp8Recipe::Tensorwise) ||
                         precision == Precision::FP4;
    const Time amax_sync = 2 * ring(cost::CollectiveOp::AllReduce, 4, tp_g_).total();
    for (std::size_t k = 0; k < kinds; ++k) {
      const bool amax = current && p.sequence_parallel && !chain_.kinds[k].unquantized;  // a bf16 block casts nothing
      // Transformer Engine's overlap (tp_comm_overlap) also hides forward
      // communication behind the layer's GEMMs: bulk behind half of them, ring
      // behind all.
      Time gemm = 0;
      std::vector<Time> col_half;  // column-parallel linears' backward GEMM (dgrad = wgrad)
      for (const auto& op : chain_.kinds[k].ops) {
        if (op.kind != cost::OpKind::Linear) continue;
        gemm += cost::op_time(gpu, cal_, precision, op, false, block, recipe);
        if (op.name == "qkv" || op.name == "mlp_up" || op.name == "mlp_up_gate")
          col_half.push_back(cost::op_time(gpu, cal_, precision, op, true, block, recipe) / 2);
      }
      const Time hide = p.implementation.tp_comm_overlap == TpCommOverlap::Ring   ? gemm
                        : p.implementation.tp_comm_overlap == TpCommOverlap::Bulk ? gemm / 2
                                                                                  : 0;
      auto& tp = comm_[k].tp;
      const Time amax_k = amax ? amax_sync : 0;
      tp[0] = std::max<Time>(0, one - hide) + amax_k;
      // Backward as Megatron-LM runs it (LinearWithGradAccumulationAndAsync-
      // Communication). Without sequence parallelism both backward all-reduces
      // are the column-parallel linears' (QKV, MLP up) input gradients, each
      // launched beside that linear's weight-gradient GEMM (Korthikanti et al.
      // 2022, Table 4's note); the row-parallel linears have none. With sequence
      // parallelism the row-parallel linears' output gradients are all-gathered
      // before their GEMMs (exposed), and each column-parallel linear gathers
      // its input again for its weight gradient ("an extra all-gather in the
      // back-propagation", Sec. 4.2.2) beside its input-gradient GEMM, then
      // reduce-scatters the input gradient beside its weight-gradient GEMM.
      // Without that overlap (implementation.tp_grad_overlap false: Megatron-LM
      // of 2021, before --async-tensor-model-parallel-allreduce) each
      // communication waits for the GEMM before it: all of it is exposed.
      // A linear that saved its gathered input (sp_regather_input false:
      // PyTorch DTensor) gathers nothing again.
      const bool overlap = p.implementation.tp_grad_overlap;
      const bool regather = p.implementation.sp_regather_input;
      Time bwd = p.sequence_parallel ? 2 * ag : 0;
      for (const Time col : col_half) {
        const Time half = overlap ? col : 0;
        bwd += p.sequence_parallel ? (regather ? std::max<Time>(0, ag - half) : 0) + std::max<Time>(0, rs - half)
                                   : std::max<Time>(0, ar - half);
      }
      // A chain without recognised column-parallel linears keeps its backward
      // communication exposed.
      if (col_half.empty()) bwd = one;
      tp[1] = std::max<Time>(0, bwd - hide) + amax_k;
      // The collectives each block pass launches.
      const auto cols = static_cast<std::int64_t>(col_half.size());
      const std::int64_t fwd_launches = (p.sequence_parallel ? 4 : 2) + (amax ? 2 : 0);
      auto& l = launches[priced_index(chain_.kinds[k])];
      l[0] += fwd_launches;
      l[2] += fwd_launches;
      l[1] += (cols == 0 ? fwd_launches : p.sequence_parallel ? 2 + (regather ? 2 : 1) * cols : cols) +
              (amax && cols != 0 ? 2 : 0);
    }
    // Vocabulary-parallel embedding and logits (Megatron-LM): forward, the
    // embedding's partial lookups are summed over the group (reduce-scattered
    // with sequence parallelism) and, with sequence parallelism, the logits'
    // input is all-gathered; backward, the logits' input gradient is
    // all-reduced (reduce-scattered). Blocking, before and after the head's
    // and embedding's own kernels.
    auto& emb = pass_[priced_index(chain_.embedding)];
    auto& head = pass_[priced_index(chain_.head)];
    emb[0] += p.sequence_parallel ? rs : ar;
    emb[2] = emb[0];
    head[0] += p.sequence_parallel ? ag : 0;
    head[2] = head[0];
    head[1] += p.sequence_parallel ? rs : ar;
    auto& emb_l = launches[priced_index(chain_.embedding)];
    auto& head_l = launches[priced_index(chain_.head)];
    ++emb_l[0], ++emb_l[2], ++head_l[1];
    if (p.sequence_parallel) ++head_l[0], ++head_l[2];
  }
  if (p.cp > 1) {
    const double kv = cp_rank_kv_bytes(sc);
    const auto exchange = [&](double bytes) {
      return cost::collective_time(cost::CollectiveOp::SendRecv, static_cast<Bytes>(bytes), 2,
                                   cp_g_.at.intra_node() ? 2 : 1, cp_g_.node, cal_);
    };
    // A block kind's attention forward and backward: what the ring and
    // PyTorch's rotation hide their exchanges behind.
    const auto attention = [&](std::size_t k) {
      std::pair<Time, Time> t{0, 0};
      for (const auto& op : chain_.kinds[k].ops)
        if (cost::is_attention_product(op.kind)) {
          t.first += cost::op_time(gpu, cal_, precision, op, false, block, recipe);
          t.second += cost::op_time(gpu, cal_, precision, op, true, block, recipe);
        }
      return t;
    };
    switch (p.implementation.cp_comm) {
      case CpComm::AllGather: {
        // K/V all-gather: forward, an all-gather of the group's keys and
        // values (cp times this rank's); backward, the same again and a
        // reduce-scatter of their gradients; all of it exposed. Transformer
        // Engine gathers K and V as two collectives each way and
        // reduce-scatters dK and dV as two (AttnFuncWithCPAndKVAllGather:
        // gather_along_first_dim(k), (v), reduce_scatter_along_first_dim(dk),
        // (dv)); the CPU backend's kernels move K | V as one
        // (GptModel::gather_kv, scatter_kv_grads).
        const int parts = sc.kernel_memory == KernelMemory::Cpu ? 1 : 2;
        const Bytes gathered = static_cast<Bytes>(kv * static_cast<double>(p.cp) / parts);
        const Time ag = capped_product(parts, ring(cost::CollectiveOp::AllGather, gathered, cp_g_).total());
        const Time rs = capped_product(parts, ring(cost::CollectiveOp::ReduceScatter, gathered, cp_g_).total());
        for (std::size_t k = 0; k < kinds; ++k) {
          comm_[k].cp = {ag, capped_sum(ag, rs)};
          auto& l = launches[priced_index(chain_.kinds[k])];
          l[0] += parts, l[2] += parts, l[1] += 2 * parts;
        }
        break;
      }
      case CpComm::P2p: {
        // Ring attention: cp − 1 exchanges of a K/V chunk forward (K, V and
        // their gradients backward), each overlapped with the attention of
        // the chunk in hand; only what exceeds it is exposed.
        const Time exch = capped_product(p.cp - 1, exchange(kv));
        for (std::size_t k = 0; k < kinds; ++k) {
          const auto [attn_f, attn_b] = attention(k);
          comm_[k].cp = {std::max<Time>(0, exch - attn_f), std::max<Time>(0, 2 * exch - attn_b)};
          auto& l = launches[priced_index(chain_.kinds[k])];
          l[0] += p.cp - 1, l[2] += p.cp - 1, l[1] += 2 * (p.cp - 1);
        }
        break;
      }
      case CpComm::AllGatherRing: {
        // PyTorch's all-gather rotation (torch.distributed.tensor.
        // experimental._attention, _AllGatherRotater, torchtitan's default):
        // forward, one all-gather of K | V issued before the first
        // (diagonal) sub-attention and awaited after it; backward, the same
        // gather, then the K/V gradients passed on after every sub-step (an
        // all-to-all permute, dkv_rotater, in fp32: convert_to_f32), each
        // awaited after the next sub-step and the last after the loop.
        // Load-balanced causal chunks give each of the cp sub-steps 1/cp of
        // the rank's attention (the diagonal's two causal halves and one
        // full quarter, the others one full half of the queries or of the
        // keys).
        const Time ag =
            ring(cost::CollectiveOp::AllGather, static_cast<Bytes>(kv * static_cast<double>(p.cp)), cp_g_).total();
        const Time dkv = exchange(kv / e * 4);
        for (std::size_t k = 0; k < kinds; ++k) {
          const auto [attn_f, attn_b] = attention(k);
          const Time sub_f = attn_f / p.cp, sub_b = attn_b / p.cp;
          const Time ring_b = capped_sum(capped_product(p.cp - 1, std::max<Time>(0, dkv - sub_b)), dkv);
          comm_[k].cp = {std::max<Time>(0, ag - sub_f), capped_sum(std::max<Time>(0, ag - sub_b), ring_b)};
          auto& l = launches[priced_index(chain_.kinds[k])];
          l[0] += 1, l[2] += 1, l[1] += 1 + p.cp;
        }
        break;
      }
    }
  }
  if (p.ep > 1 && sc.model.moe) {
    // Dispatch and combine all-to-alls forward, and their gradients
    // backward, in the blocks with routed experts (not a MoE model's dense
    // blocks).
    // The busiest rank receives (and sends back) MoeRouting::load() times
    // its balanced share.
    const Bytes tokens = static_cast<Bytes>(static_cast<double>(sc.model.moe->top_k) * p.moe.load() * b * s * h * e /
                                            (p.sequence_parallel ? static_cast<double>(p.tp) : 1.0));
    const Time a2a = ring(cost::CollectiveOp::AllToAll, tokens, ep_g_).total();
    for (std::size_t k = 0; k < kinds; ++k) {
      const auto& ops = chain_.kinds[k].ops;
      if (std::none_of(ops.begin(), ops.end(), [](const cost::Op& op) { return op.expert; })) continue;
      comm_[k].ep = {2 * a2a, 2 * a2a};
      for (auto& l : launches[priced_index(chain_.kinds[k])]) l += 2;
    }
  }

  // The host's dispatch bound (implementation.host_dispatch_us): an eager
  // framework issues every kernel from Python, one after another, so a pass
  // takes at least its launches times the host's time per kernel — the GPU
  // runs ahead only while its kernels are longer. A block's blocking
  // communication is a task of its own after the pass (layer_comm), issued
  // by the same host: the pass and that communication together take
  // max(compute + communication, host), so the pass is charged
  // max(compute, host − communication). The embedding's and head's passes
  // hold their communication already.
  if (host_dispatch_us_ > 0) {
    for (std::size_t i = 0; i < n; ++i) {
      const BlockComm* c = layers[i]->kind == cost::LayerKind::Block
                               ? &comm_[static_cast<std::size_t>(layers[i]->block_kind)]
                               : nullptr;
      for (std::size_t j = 0; j < 3; ++j) {
        const std::size_t way = j == 1 ? 1 : 0;
        const Time comm = c ? c->tp[way] + c->cp[way] + c->ep[way] : 0;
        pass_[i][j] = std::max(pass_[i][j], host_time(launches[i][j]) - comm);
      }
    }
    for (std::size_t k = 0; k < kinds; ++k) selective_[k] = std::max(selective_[k], host_time(selective_launches[k]));
  }

  if (!sc.cluster.heterogeneous()) return;
  // Each group's GPUs are priced on their own curves: the given calibration
  // where it measured that chip (its `gpu`, else the first group's), the
  // scenario's for the group elsewhere (group_calibration).
  auto st = std::make_shared<Stages>();
  const std::string& measured = cal_.gpu.empty() ? sc.cluster.gpu.chip() : cal_.gpu;
  for (std::size_t g = 0; g < sc.cluster.groups.size(); ++g) {
    auto view = std::make_unique<Scenario>(sc);
    view->cluster = sc.cluster.group_view(g);
    const cost::GpuSpec& gpu = view->cluster.gpu;
    cost::Calibration c = gpu.chip() == measured ? cal_ : group_calibration(sc, g);
    st->group.push_back(std::make_unique<ModelStepCosts>(*view, std::move(c)));
    st->views.push_back(std::move(view));
  }
  for (const auto& on : stage_groups(sc.plan, sc.cluster)) {
    if (on.size() == 1) {
      st->by_stage.push_back(st->group[on.front()].get());
      continue;
    }
    std::vector<const StepCosts*> of;
    for (std::size_t g : on) of.push_back(st->group[g].get());
    st->mixed.push_back(std::make_unique<SlowestOf>(std::move(of)));
    st->by_stage.push_back(st->mixed.back().get());
  }
  stages_ = std::move(st);
}

ModelStepCosts::PricedGroup ModelStepCosts::priced(const GroupPlacement& at,
                                                   std::span<const std::int64_t> members) const {
  PricedGroup g{at, sc_.cluster.node};
  if (g.node.nvlinks.empty()) return g;
  // The members on rank 0's node (every group here holds rank 0), as GPU
  // indices within it.
  const std::int64_t per = g.node.gpus_per_node;
  std::vector<std::int64_t> local;
  for (const std::int64_t m : members)
    if (m / per == 0) local.push_back(m % per);
  if (local.size() >= 2) g.node.intra_node_GBps = cost::intra_ring_GBps(g.node, local);
  return g;
}

Transfer ModelStepCosts::ring(cost::CollectiveOp op, Bytes bytes, const PricedGroup& g) const {
  if (g.at.size <= 1) return {};
  return transfer_of(cost::collective_cost(op, bytes, g.at.size, g.at.ranks_per_node, g.node, cal_));
}

std::size_t ModelStepCosts::priced_index(const cost::Layer& l) {
  switch (l.kind) {
    case cost::LayerKind::Embedding: return 0;
    case cost::LayerKind::Head: return 1;
    case cost::LayerKind::Block: break;
  }
  return 2 + static_cast<std::size_t>(l.block_kind);
}

Time ModelStepCosts::layer(const cost::Layer& l, Pass pass, bool selective_only) const {
  // Sums of a layer's op times (each at most kMaxStepTime): capped, so the
  // levels' sums stay in 64 bits until the step is refused.
  if (pass == Pass::Recompute && selective_only)
    return l.kind == cost::LayerKind::Block ? capped(selective_[static_cast<std::size_t>(l.block_kind)]) : 0;
  return capped(pass_[priced_index(l)][static_cast<std::size_t>(pass)]);
}

Time ModelStepCosts::layer_tail(const cost::Layer& l) const {
  return l.kind == cost::LayerKind::Block ? capped(tail_[static_cast<std::size_t>(l.block_kind)]) : 0;
}

Time ModelStepCosts::layer_comm(const cost::Layer& l, CommKind kind, Pass pass) const {
  if (l.kind != cost::LayerKind::Block) return 0;
  const BlockComm& c = comm_[static_cast<std::size_t>(l.block_kind)];
  const std::size_t i = pass == Pass::Backward ? 1 : 0;
  switch (kind) {
    case CommKind::TP: return capped(c.tp[i]);
    case CommKind::CP: return capped(c.cp[i]);
    case CommKind::EP: return capped(c.ep[i]);
    default: return 0;
  }
}

Transfer ModelStepCosts::collective(Collective op, Group group, Bytes bytes) const {
  switch (group) {
    case Group::TP: return ring(op_of(op), bytes, tp_g_);
    case Group::CP: return ring(op_of(op), bytes, cp_g_);
    case Group::DP: return ring(op_of(op), bytes, dp_g_);
    case Group::EP: return ring(op_of(op), bytes, ep_g_);
    case Group::ExpertDP: return ring(op_of(op), bytes, edp_g_);
    case Group::EmbeddingTie: return ring(op_of(op), bytes, tie_g_);
  }
  return {};
}

Transfer ModelStepCosts::p2p(Bytes bytes) const {
  // Neighbouring stages share a node when the pipeline group does.
  const Transfer send = transfer_of(cost::collective_cost(cost::CollectiveOp::SendRecv, bytes, 2,
                                                         pp_g_.at.ranks_per_node >= 2 ? 2 : 1, pp_g_.node, cal_));
  // Scatter/gather (Narayanan et al. 2021, Sec. 4.1): each tensor-parallel
  // rank sends 1/t of the activation and the receivers all-gather it over
  // NVLink before use. With sequence parallelism the tensor is already
  // split by sequence and stays so.
  const auto& p = sc_.plan;
  if (p.implementation.pp_scatter_gather && !p.sequence_parallel && p.tp > 1)
    return send.then(ring(cost::CollectiveOp::AllGather, bytes * p.tp, tp_g_));
  return send;
}

Transfer ModelStepCosts::copy(Bytes bytes, CopyDir dir) const {
  const cost::CopyKind kind = dir == CopyDir::ToHost     ? cost::CopyKind::D2H
                              : dir == CopyDir::ToDevice ? cost::CopyKind::H2D
                              : dir == CopyDir::NvmeRead ? cost::CopyKind::NvmeRead
                                                         : cost::CopyKind::NvmeWrite;
  const Time t = cost::copy_time(bytes, kind, /*pinned=*/true, sc_.cluster.node, cal_);
  // NVMe traffic is not put on links (the host pool's CPU lane runs it).
  if (dir == CopyDir::NvmeRead || dir == CopyDir::NvmeWrite || t == 0) return t;
  const Time launch = std::min(t, cost::seconds_to_time(cal_.overheads.copy_launch_us * 1e-6));
  return {launch, t - launch, dir == CopyDir::ToHost ? Path::HostOut : Path::HostIn};
}

LinkRates ModelStepCosts::link_rates() const {
  // Strata's executors run their steps as priced, one transfer at a time
  // on each lane; their links are not shared in the model.
  if (sc_.executed) return {};
  const cost::NodeSpec& n = sc_.cluster.node;
  return {n.intra_node_GBps, n.inter_node_GBps_per_gpu, n.pcie_GBps};
}

Time ModelStepCosts::elementwise(Bytes bytes) const {
  return cost::compute_time(sc_.cluster.gpu, cal_, sc_.plan.precision, 0, bytes);
}

Time ModelStepCosts::gemm(Flops flops) const {
  return cost::compute_time(sc_.cluster.gpu, cal_, sc_.plan.precision, flops, 0);
}

Time ModelStepCosts::optimizer_step(double params, bool on_host) const {
  const PerParam per = bytes_per_param(sc_.plan);
  const Time launch = cost::seconds_to_time(cal_.overheads.optimizer_step_us * 1e-6);
  if (on_host) {
    // Memory-bound: read gradients, weights and state, write weights and
    // state; the host's memory bandwidth shared by the node's GPUs' steps.
    const double bytes = params * (per.grads + 2 * (per.weights + per.optimizer));
    const double per_gpu = kHostOptimizerGBps * kGB /
                           static_cast<double>(sc_.cluster.node.gpus_per_node);
    return capped_sum(launch, cost::seconds_to_time(bytes / per_gpu));
  }
  // On the GPU, the passes over the parameters a mixed-precision step makes
  // (Micikevicius et al. 2018; Megatron-LM's Float16OptimizerWithFloat16Params
  // .step and zero_grad), each memory-bound, in bytes per parameter:
  const Precision prec = sc_.plan.precision;
  const bool mixed = prec != Precision::FP32;
  const bool grads16 = mixed && !sc_.plan.implementation.fp32_grad_accumulation;
  double per_param = 0;
  int passes = 0;
  auto pass = [&](double b) { per_param += b, ++passes; };
  pass(per.grads);  // zero the gradient buffer(s) for the next step
  if (grads16) pass(2 + 4);  // 16-bit gradients into the fp32 main gradients
  if (prec == Precision::FP16 || prec == Precision::FP8)
    pass(4 + 4);  // loss scaling: unscale the main gradients, check for inf/NaN
  pass(mixed ? 4 : per.grads);  // gradient norm (clipping)
  // The update: read the gradient, read and write weights (master) and state.
  pass((mixed ? 4 : per.grads) + 2 * (per.optimizer + (mixed ? 0 : per.weights)));
  if (mixed) pass(4 + per.weights);  // fp32 master weights to the model's copy
  // One fused multi-tensor kernel per pass when fused, else one per layer.
  cost::KernelShape shape;
  shape.memory = cost::MemoryKernel::Optimizer;
  shape.kernels = passes * (sc_.plan.implementation.fused_elementwise
                                ? 1
                                : std::max<std::int64_t>(1, sc_.model.layers));
  const Time gpu = cost::compute_time(sc_.cluster.gpu, cal_, prec, 0,
                                      static_cast<Bytes>(params * per_param), shape);
  return capped_sum(launch, std::max(gpu, host_time(shape.kernels)));
}

Time ModelStepCosts::overhead_per_microbatch() const {
  return cost::seconds_to_time(cal_.overheads.microbatch_us * 1e-6);
}

Time ModelStepCosts::host_time(std::int64_t kernels) const {
  return cost::seconds_to_time(static_cast<double>(kernels) * host_dispatch_us_ * 1e-6);
}

double ModelStepCosts::interference_fraction() const {
  const auto sms = static_cast<double>(sc_.cluster.gpu.sms);
  if (sc_.executed || sms <= 0) return 0;
  return std::min(cal_.collective_sms, sms) / sms;
}

Time ModelStepCosts::overhead_per_step() const {
  return cost::seconds_to_time(cal_.overheads.step_us * 1e-6);
}

StepPrediction predict_step(const Scenario& sc, sim::RunResult* run, LoweredStep* lowered) {
  const ModelStepCosts costs(sc);
  return predict_step(sc, costs, run, lowered);
}

}  // namespace strata::strategies
