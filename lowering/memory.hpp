#pragma once
// Analytical per-GPU memory: the fast bound the explorer prunes with, and the
// "does it fit?" answer of `strata simulate`. Every term is a free function
// of integers (byte counts per parameter, per layer, per microbatch); the
// rules and their sources are in docs/memory-model.md. The simulated memory
// timeline (memory_lowering.hpp) must agree with it where the formulas are
// exact.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/ops.hpp"
#include "sim/allocator_mode.hpp"
#include "sim/task_graph.hpp"
#include "lowering/layer_plan.hpp"
#include "strategies/scenario.hpp"

namespace strata::strategies {

// Bytes per parameter of weights, gradients and optimizer state for an
// element-wise optimizer (ZeRO Sec. 3.1: 2 + 2 + K with K = 12 for
// mixed-precision Adam). For factored optimizers (Adafactor, SM3),
// `optimizer` holds only the fp32 master copy; their statistics depend on
// matrix shapes (factored_state_bytes).
struct PerParam {
  double weights = 0;
  double grads = 0;
  double optimizer = 0;
  double total() const { return weights + grads + optimizer; }
};
PerParam bytes_per_param(Optimizer opt, Precision precision, bool fp32_grad_accumulation = false);
// The plan's: its optimizer, precision, gradient accumulation and the
// number type of its optimizer's statistics (bf16: half the bytes of fp32).
PerParam bytes_per_param(const Plan& plan);
// Bytes of one gradient element as the data-parallel reduction moves and sums
// it (every gradient reduce-scatter and all-reduce, its buckets and a
// compressed exchange's values): the accumulation dtype's — 4 in fp32 (fp32
// training or fp32_grad_accumulation), else 2 — unless
// implementation.grad_reduce_dtype sets it apart (fp32: 4, bf16 or fp16: 2).
double reduced_grad_bytes(const Plan& plan);
// Whether that dtype is not the accumulation's: a reduction a framework must
// be told apart (FSDP's reduce_dtype, DeepSpeed's communication_data_type).
bool reduces_apart(const Plan& plan);
// Adafactor (factored second moment) and SM3 (row and column covers): 4·(m +
// n) bytes per m×n matrix, 4 bytes per vector entry (no first moment).
double factored_state_bytes(const cost::Op& op);

// Model states of `psi` parameters on one of `dp` ranks under ZeRO stage
// `zero` (ZeRO Sec. 5): stage 1 shards optimizer state, 2 also gradients, 3
// also parameters.
struct ModelStates {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  double total() const { return params + grads + optimizer; }
};
ModelStates zero_model_states(double psi, const PerParam& b, int zero, std::int64_t dp);

// The op-chain options of a scenario's ranks (microbatch, tp, sp, cp, ep,
// precision, attention kernel).
cost::ExpandOptions expand_options(const Scenario& sc);

// A block's activation bytes per microbatch, and what each per-layer choice
// (layer_plan.hpp) keeps and holds. Every backward also holds the
// gradient of the op it differentiates (at most `grad` bytes).
struct ActivationRule {
  Bytes full = 0;       // a layer's saved bytes without recompute
  Bytes selective = 0;  // … under the plan's selective policy (selective_policy)
  Bytes input = 0;      // a layer's input: what a segment's first layer keeps
  Bytes grad = 0;       // the largest output gradient of a layer's ops
  Bytes linear_inputs = 0;  // of `full`: the inputs its linear layers keep (vDNN's)
  // What the attention's context-parallel algorithm holds beside the
  // gradient during the layer's backward (implementation.cp_comm; none at
  // cp 1, in a block without attention, or under the CPU kernels, which
  // declare their own): cp_exchange_bytes.
  Bytes exchange = 0;
  // ZeRO-3 (sharded over dp · cp > 1, GPU kernels): the layer's whole
  // gradient as autograd produces it (the 16-bit compute dtype, or fp32)
  // and its reduce-scatter input in the reduction's dtype, a copy (PyTorch
  // FSDP2's foreach_reduce: torch.empty(reduce_scatter_input_numel,
  // dtype=reduce_dtype), foreach_reduce_scatter_copy_in, "only after the
  // copy-in finishes can we free the gradients"; the input is released
  // when the next module's post-backward waits for its reduce-scatter):
  // params · (gradient bytes + reduced bytes), one layer's at a time,
  // held through each layer's backward. With a gradient bucket
  // (implementation.zero3_reduce_bucket, DeepSpeed) instead the largest
  // weight matrix's gradient before its copy into the bucket and a full
  // bucket's flattened copy for its reduce-scatter (the bucket's elements,
  // or the rank's parameters if fewer), in the gradients' dtype: a flush
  // may fall in any layer's backward. The bucket itself is a communication
  // buffer for the whole step (StageMemory::comm).
  Bytes staging = 0;
  // A Keep::Selective layer reruns part of its forward before its backward
  // (not so for Megatron-LM's policy under flash attention: no core).
  bool selective_reruns = false;
  // A segment's rerun starts from the input its first layer kept, the same
  // tensor (PyTorch's checkpoint reruns the function on the saved input
  // detached, which shares its storage); false with partition_activations,
  // where the rerun all-gathers a whole input of its own.
  bool input_shared = true;

  // What the layer's backward holds beyond what it and the layers before it
  // kept: the gradient, the context-parallel exchange and ZeRO-3's
  // gradient staging.
  Bytes backward_holds() const { return grad + exchange + staging; }

  // What layer's rerun holds for its backward: everything it saves, less,
  // at a segment's start, the input it shares with what it kept.
  Bytes rerun(bool segment_start) const { return segment_start && input_shared ? full - input : full; }

  // What a Keep::Selective layer's backward rebuilds beyond what it stored:
  // the saved set less the stored bytes (torchtitan's op policy may store
  // outputs the backward never reads, more than that set: then nothing).
  Bytes selective_rebuilt() const { return std::max<Bytes>(0, full - selective); }

  // `selective`: the policy a Keep::Selective layer follows. Of one kind of
  // block, and of each kind of the chain's (indexed as chain.kinds).
  static ActivationRule of(const cost::Layer& block, Recompute selective);
  static std::vector<ActivationRule> of(const cost::OpChain& chain, Recompute selective);
  // … under the scenario's plan: its selective policy (selective_policy),
  // with partition_activations the input a recomputed segment keeps split
  // over the tp ranks (each keeps ⌈input / tp⌉), under context
  // parallelism each attention block's exchange, and under ZeRO-3 each
  // block's gradient staging.
  static std::vector<ActivationRule> of(const cost::OpChain& chain, const Scenario& sc);
  // Each field the most of any of `rules`: a block at least as large as each
  // (every byte count above grows with each field).
  static ActivationRule largest(std::span<const ActivationRule> rules);
  // What a layer keeps from its forward to its backward, and of that what
  // goes to host memory.
  Bytes stored(Keep k) const;
  Bytes swapped(Keep k, Swap s) const;
  // A chunk's layers in forward order: what one microbatch's forward keeps,
  // the most one of its backwards holds beyond what the microbatches in
  // flight keep when the chunk's backward starts, what goes to host memory
  // and the most one layer moves there. Layer i's backward holds the gradient, plus (Selective) the
  // attention core or (a segment) the layers of its segment up to i, rerun
  // from the segment's input; by then the layers after i have freed what
  // they kept, so the working set is max over i of (what i's backward holds
  // − what layers i+1… kept). Throws Error for Nothing outside a segment.
  struct Chunk {
    Bytes stored = 0, working = 0, swapped = 0, largest_swapped = 0;
  };
  Chunk chunk(std::span<const Keep> keeps, std::span<const Swap> swaps) const;
  // The same for a chunk of blocks of several kinds: layer i follows
  // rules[kinds[i]].
  static Chunk chunk(std::span<const ActivationRule> rules, std::span<const std::int32_t> kinds,
                     std::span<const Keep> keeps, std::span<const Swap> swaps);
};

// What a Keep::Selective layer of the plan follows: torchtitan's op-level
// policy for recompute "selective_op", else Megatron-LM's (its
// recompute_modules, the attention core by default; the optimal solver's
// selective choice too).
Recompute selective_policy(const Plan& plan);

// What an attention block's backward holds for context parallelism beside
// its gradient, by implementation.cp_comm, with kv one rank's K and V and q
// its queries: ring attention (p2p) a neighbour's K and V, double-buffered
// (2·kv); Transformer Engine's all-gather the group's K and V and their
// gradients (2·cp·kv: k_ag, v_ag, dk, dv); PyTorch's all-gather rotation
// (all_gather_ring) the group's K | V (cp·kv) and, in fp32, the K/V
// gradient it accumulates, the one it sends and the one it receives
// (3 · 4/e · kv) and the query gradient it accumulates (4/e · q). 0 at cp 1
// and under the CPU kernels (they declare their own copies).
Bytes cp_exchange_bytes(const Scenario& sc);
// One context-parallel rank's keys and values of a microbatch, bytes: what
// every algorithm above moves and holds multiples of.
double cp_rank_kv_bytes(const Scenario& sc);

// One pipeline message across the boundary after model chunk `boundary`
// (whose chunks start at first_layer[k]): a microbatch's activations
// forward, their gradient backward. A transformer's is b·s/cp·h elements,
// split over tp with sequence parallelism or scatter-gather; a layer
// chain's is the input of the block after the boundary (the head's after
// the last block).
Bytes p2p_message_bytes(const Scenario& sc, const cost::OpChain& chain, std::span<const std::int64_t> first_layer,
                        int boundary);

// ZeRO-3's gathers outside the blocks of a model chunk (or a stage) that
// holds the embedding (`first`) and/or the output layer (`last`), in
// parameters on this rank: the embedding's; the output layer's with the
// tied word embedding it multiplies by; and FSDP's root module's
// (implementation.zero3_root_unsharded), both at once, the tied embedding
// counted once where one chunk holds both. Shared by the step program's
// gathers and the memory model's buffers.
struct EndGathers {
  double embedding = 0, head = 0, root = 0;
};
EndGathers end_gathers(const cost::OpChain& chain, bool tied, bool first, bool last);

// The elements a ZeRO-3 gather of one op's parameters moves where each
// module is gathered on its own (implementation.zero3_gather_per_module):
// its weight matrices and its vectors, each only if it has at least `keep`
// elements (zero3_persistence_threshold: smaller tensors stay whole on
// every rank; an op's vectors count as one tensor).
double zero3_module_elems(const cost::Op& op, std::int64_t keep);
// ... and how many parameter tensors: each weight matrix (each of the
// separate products a Linear op stands for its own), the vectors as one.
std::int64_t zero3_module_tensors(const cost::Op& op, std::int64_t keep);

// One use of a gathered unit (a module's or a layer's parameters) in a
// microbatch's trace: which unit, and its elements.
struct GatherUse {
  std::int64_t unit = 0;
  double elems = 0;
};

// DeepSpeed's ZeRO-3 parameter coordinator (deepspeed/runtime/zero/
// partitioned_param_coordinator.py, PartitionedParameterCoordinator) over
// one microbatch's trace of uses, in the order its hooks fetch them: the
// most elements gathered at once. At each use it gathers the unit if it is
// not gathered, then prefetches the units next in the trace that are not,
// up to `prefetch` more elements while fewer than `max_live` are gathered
// (fetch_sub_module); after the use it releases the unit unless the
// prefetch already passed a later use of it or the trace uses it again
// before `reuse` more elements go by (release_sub_module,
// __params_to_release).
double coordinator_peak(std::span<const GatherUse> trace, double prefetch, double max_live, double reuse);

// Constants of the memory rules (docs/memory-model.md says why each).
struct MemoryRules {
  Bytes runtime_bytes = 512 * kMiB;          // CUDA context and library handles
  Bytes cublas_workspace_bytes = 32 * kMiB;  // cuBLAS workspace on Hopper
  Bytes grad_bucket_bytes = 25 * kMiB;       // PyTorch DDP bucket_cap_mb = 25
  // The caching allocator holds freed blocks of the buffers that come and go
  // within a step; reserve = this fraction of those transient bytes.
  double allocator_reserve_fraction = 0.2;
  // Optimal recompute and the priority and joint offload planners without
  // memory_budget_GiB plan within the GPU's memory less this fraction:
  // headroom for what the model does not see.
  double budget_margin_fraction = 0.05;
};

// One pipeline stage's representative rank at its peak.
struct StageMemory {
  int stage = 0;
  std::int64_t params = 0;     // parameters of this rank's layers (before ZeRO-3)
  sim::TagBytes bytes{};       // by tag, at the peak
  Bytes total = 0;
  std::int64_t in_flight = 0;  // chunk-microbatches whose activations are alive
  Bytes activations_stored = 0;   // kept from forward for backward
  Bytes activations_working = 0;  // recomputed for one layer's backward
  Bytes host_bytes = 0;        // this rank's bytes in host memory
  Bytes host_activation_bytes = 0;  // of host_bytes: offloaded activations
  Bytes nvme_bytes = 0;        // this rank's bytes on NVMe
  Bytes capacity = 0;          // its GPU's memory (the smallest, on several groups)
  // The caching allocator replayed over the stage's allocations (simulate's
  // layer-level timeline; absent elsewhere). Reported beside the
  // AllocatorReserve tag, which follows MemoryRules' rule.
  std::optional<sim::AllocatorReplay> allocator;
  // What must fit its GPU: every tag but the allocator's reserve. When
  // cudaMalloc fails, PyTorch's caching allocator frees its cached blocks
  // that hold no tensor and retries (c10/cuda/CUDACachingAllocator.cpp), so
  // the reserve beyond the tensors shrinks under pressure instead of
  // stopping the run: a stage fits when its tensors and the CUDA context do
  // (docs/memory-model.md, "Fits").
  Bytes required() const { return total - bytes[static_cast<std::size_t>(sim::MemTag::AllocatorReserve)]; }
};

struct Infeasible {
  std::string pool;  // "gpu", "host" or "nvme"
  Bytes needs = 0;
  Bytes has = 0;
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;  // one per pipeline stage
  int peak_stage = 0;
  Bytes peak_bytes = 0;
  sim::TagBytes breakdown{};  // the peak stage's bytes by tag (they sum to peak_bytes)
  Bytes gpu_capacity = 0;  // the peak stage's GPU memory
  Bytes required_bytes = 0;  // the largest stage's required(): what decides the fit
  Bytes host_bytes_per_node = 0;
  Bytes host_capacity_per_node = 0;
  Bytes nvme_bytes_per_node = 0;
  Bytes nvme_capacity_per_node = 0;
  std::optional<Infeasible> infeasible;
  std::string source = "analytical";  // or "timeline" (simulate_memory)
  LayerPlan layers;                   // what each layer keeps, and where (the plan's policies, resolved)
  std::optional<Bytes> budget;        // a searched plan's (needs_solver): the budget it planned within
  bool feasible() const { return !infeasible.has_value(); }
};

// The peak as PyTorch and nvidia-smi name its figures: `allocated`, the
// tensors (every tag but the allocator's reserve and the runtime:
// torch.cuda.max_memory_allocated); `reserved`, with the allocator's reserve
// (max_memory_reserved, torchtitan's logged "memory"); the device's total
// is peak_bytes, with the CUDA context (what nvidia-smi shows).
struct MemoryFigures {
  Bytes allocated = 0, reserved = 0;
};
MemoryFigures memory_figures(const MemoryEstimate& m);

// Sets peak_stage, peak_bytes, breakdown, required_bytes and infeasible from
// the stages and capacities (shared by the analytical and the timeline
// estimates): a stage is over when its required() passes its GPU.
void finish_estimate(MemoryEstimate& est);

// The analytical estimate of a plan. With recompute "optimal" or an offload
// planner that weighs times, the layers' choices are timed by the cost model
// (ModelStepCosts, plan_layers); pass the lowering's `layers` to estimate
// the step it lowered.
MemoryEstimate estimate_memory(const Scenario& s, const MemoryRules& rules = {});
MemoryEstimate estimate_memory(const Scenario& s, const MemoryRules& rules, const LayerPlan& layers);

// The analytical model of one plan, stage by stage: everything but the
// blocks' activations follows from the plan and is computed once; `stage`
// adds the activations of the layers' choices (what the planners search).
class MemoryModel {
 public:
  MemoryModel(const Scenario& sc, const MemoryRules& rules);
  ~MemoryModel();

  // A stage's blocks under some choices: Σ over its chunks of the
  // microbatches in flight × what one keeps, the largest working set of one
  // backward (ActivationRule::chunk), Σ of the microbatches in flight × what
  // goes to host memory, and the most one layer moves there.
  struct Blocks {
    double stored = 0, working = 0, swapped = 0, largest_swapped = 0;
    // Per virtual chunk of the stage: what one microbatch in flight keeps
    // and moves to the host, and its backward's working set. Where the
    // chunks differ (interleaved, with optimal recompute, offload planners
    // or uneven chunks) the peak is found backward by backward: the chunk
    // whose backward starts brings its own working set, at the moment's mix
    // of chunks in flight.
    struct Chunk {
      double stored = 0, working = 0, swapped = 0;
      bool operator==(const Chunk&) const = default;
    };
    // Every chunk, in order, once two differ; empty while all are alike
    // (nothing allocated for the common case).
    std::vector<Chunk> chunks;
    // The stage's next chunk, with `in_flight` of its microbatches at the
    // warm-up's end: into the sums and the list (largest_swapped is the
    // caller's).
    void add(const Chunk& c, double in_flight) {
      stored += in_flight * c.stored;
      working = std::max(working, c.working);
      swapped += in_flight * c.swapped;
      if (added_ == 0) first_ = c;
      else if (chunks.empty() && !(c == first_)) chunks.assign(added_, first_);
      if (!chunks.empty()) chunks.push_back(c);
      ++added_;
    }

   private:
    Chunk first_;
    std::size_t added_ = 0;
  };
  Blocks blocks(int stage, const LayerPlan& layers) const;
  StageMemory stage(int stage, const Blocks& blocks) const;
  // The activation bytes on the GPU at the stage's peak (blocks, embedding,
  // head, working set): the stage's total grows with them, all else fixed.
  double activations(int stage, const Blocks& blocks) const;

  const Scenario& scenario() const { return sc_; }
  const MemoryRules& rules() const { return rules_; }
  const cost::OpChain& chain() const { return chain_; }
  // What block `layer` keeps under each choice (its kind's rule), and a
  // rule at least as large as every kind's (ActivationRule::largest): the
  // searches of layer_plan.cpp price every layer of a stage as it, so that
  // what they choose fits when each layer is counted as its own.
  const ActivationRule& rule(std::int64_t layer) const {
    return acts_[static_cast<std::size_t>(chain_.kind_of[static_cast<std::size_t>(layer)])];
  }
  const ActivationRule& largest_rule() const { return largest_; }
  const std::vector<std::int64_t>& chunks() const { return chunks_; }  // layers per model chunk
  std::int64_t first_layer(std::size_t chunk) const { return first_[chunk]; }
  // Chunk-microbatches in flight at the stage's peak, per virtual chunk.
  const std::vector<std::int64_t>& in_flight(int stage) const;

 private:
  struct Statics;
  // What the blocks keep on the GPU (activation offload leaves the layer in
  // flight and prefetch_depth more) and the working set with the embedding
  // and head activations.
  std::pair<double, double> on_gpu(int stage, const Blocks& blocks) const;
  // ZeRO-3's gathers of one microbatch on `stage`, in the order DeepSpeed's
  // hooks fetch them (coordinator_peak).
  std::vector<GatherUse> gather_trace(int stage) const;
  const Scenario& sc_;
  MemoryRules rules_;
  cost::OpChain chain_;
  std::vector<ActivationRule> acts_;  // per kind of block
  ActivationRule largest_;
  std::vector<std::int64_t> chunks_, first_;
  std::vector<Statics> statics_;
};

// The budget that optimal recompute and the priority and joint offload
// planners plan within: memory_budget_GiB, or the GPU's memory (the
// smallest group's on a cluster of groups) less rules.budget_margin_fraction
// of it.
Bytes memory_budget(const Scenario& sc, const MemoryRules& rules);
// The GPU memory of a stage whose GPUs sit on `groups` (stage_groups): the
// smallest of theirs; the cluster's GPU's without groups.
Bytes stage_gpu_memory(const cost::ClusterSpec& c, std::span<const std::size_t> groups);

// Where two of a plan's names mean one thing, what it amounts to, for the
// reader (`strata simulate` prints them). Selective recompute drops and
// reruns the attention core (Korthikanti et al. 2022: the softmax's output
// and its dropout); an attention kernel that saves no core (flash
// attention keeps only the softmax's row statistics) leaves it nothing to
// drop or rerun, so the plan is recompute "none" in memory and in time.
std::vector<std::string> plan_notes(const Scenario& sc);

// Chunk-microbatches alive on `stage` at its peak, per virtual chunk of the
// stage (index 0..v−1), from the schedules' closed forms: GPipe m; 1F1B and
// PipeDream min(p − s, m); interleaved Megatron's warm-up (p − s − 1)·2 +
// (v − 1)·p plus one, taken in forward order (groups of p microbatches, chunk
// by chunk).
std::vector<std::int64_t> in_flight_per_chunk(const Plan& plan, std::int64_t microbatches,
                                              int stage);

}  // namespace strata::strategies
