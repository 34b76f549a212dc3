#pragma once
// Analytical per-GPU memory: the fast bound the explorer prunes with, and the
// "does it fit?" answer of `strata simulate`. Every term is a free function
// of integers (byte counts per parameter, per layer, per microbatch); the
// rules and their sources are in docs/memory-model.md. The simulated memory
// timeline (memory_lowering.hpp) must agree with it where the formulas are
// exact.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/ops.hpp"
#include "sim/task_graph.hpp"
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
bool is_factored(Optimizer opt);
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

// Activation bytes per microbatch under the plan's recompute policy, for a
// chunk of `n` layers: what forward keeps (`stored`) and what one backward
// recomputes at once (`working`). none keeps every layer's saved bytes;
// selective drops the attention core and recomputes it per layer; full keeps
// each layer's input and recomputes one layer; every_k and sqrt keep one
// input per segment of k (or ⌈√n⌉) layers and recompute a segment at once.
// Every backward also holds the gradient of the op it differentiates (at
// most `grad` bytes).
struct ActivationRule {
  Recompute policy = Recompute::None;
  std::int64_t k = 1;   // every_k segment length
  Bytes full = 0;       // a layer's saved bytes without recompute
  Bytes selective = 0;  // … with selective recompute
  Bytes input = 0;      // a layer's input: what a checkpoint keeps
  Bytes grad = 0;       // the largest output gradient of a layer's ops

  static ActivationRule of(const Plan& plan, const cost::OpChain& chain);
  std::int64_t segment(std::int64_t n) const;
  double stored(std::int64_t n) const;
  double working(std::int64_t n) const;
};

// Constants of the memory rules (docs/memory-model.md says why each).
struct MemoryRules {
  Bytes runtime_bytes = 512 * kMiB;          // CUDA context and library handles
  Bytes cublas_workspace_bytes = 32 * kMiB;  // cuBLAS workspace on Hopper
  Bytes grad_bucket_bytes = 25 * kMiB;       // PyTorch DDP bucket_cap_mb = 25
  // The caching allocator holds freed blocks of the buffers that come and go
  // within a step; reserve = this fraction of those transient bytes.
  double allocator_reserve_fraction = 0.2;
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
  Bytes gpu_capacity = 0;
  Bytes host_bytes_per_node = 0;
  Bytes host_capacity_per_node = 0;
  Bytes nvme_bytes_per_node = 0;
  Bytes nvme_capacity_per_node = 0;
  std::optional<Infeasible> infeasible;
  std::string source = "analytical";  // or "timeline" (simulate_memory)
  bool feasible() const { return !infeasible.has_value(); }
};

// Sets peak_stage, peak_bytes, breakdown and infeasible from the stages and
// capacities (shared by the analytical and the timeline estimates).
void finish_estimate(MemoryEstimate& est);

// Throws InputError for plan choices the memory model does not cover yet
// (recompute "optimal", offload planners other than "all").
MemoryEstimate estimate_memory(const Scenario& s, const MemoryRules& rules = {});

// Chunk-microbatches alive on `stage` at its peak, per virtual chunk of the
// stage (index 0..v−1), from the schedules' closed forms: GPipe m; 1F1B and
// PipeDream min(p − s, m); interleaved Megatron's warm-up (p − s − 1)·2 +
// (v − 1)·p plus one, taken in forward order (groups of p microbatches, chunk
// by chunk).
std::vector<std::int64_t> in_flight_per_chunk(const Plan& plan, std::int64_t microbatches,
                                              int stage);

}  // namespace strata::strategies
