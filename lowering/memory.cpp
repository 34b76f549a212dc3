#include "lowering/memory.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/error.hpp"
#include "sim/names.hpp"
#include "strategies/rank_mesh.hpp"
#include "lowering/schedule.hpp"
#include "lowering/step_costs.hpp"

namespace strata::strategies {

namespace {

using sim::MemTag;

Bytes whole(double x) { return static_cast<Bytes>(std::llround(x)); }

void add(sim::TagBytes& t, MemTag tag, double bytes) {
  t[static_cast<std::size_t>(tag)] += whole(bytes);
}

Bytes sum(const sim::TagBytes& t) {
  Bytes s = 0;
  for (Bytes b : t) s += b;
  return s;
}

// Parameters of some layers split the ways ZeRO and the optimizers treat them.
struct ParamSplit {
  double dense = 0;
  double expert = 0;
  double dense_factored = 0;   // Adafactor/SM3 statistics of dense weights
  double expert_factored = 0;  // … of expert weights
  double powersgd_rows_cols = 0;  // Σ matrices·(rows + cols), PowerSGD's P and Q

  ParamSplit& operator+=(const ParamSplit& o) {
    dense += o.dense;
    expert += o.expert;
    dense_factored += o.dense_factored;
    expert_factored += o.expert_factored;
    powersgd_rows_cols += o.powersgd_rows_cols;
    return *this;
  }
  ParamSplit operator*(double k) const {
    return {dense * k, expert * k, dense_factored * k, expert_factored * k, powersgd_rows_cols * k};
  }
  double params() const { return dense + expert; }
};

ParamSplit split_of(const cost::Op& op) {
  ParamSplit s;
  const double p = static_cast<double>(op.params);
  const double f = factored_state_bytes(op);
  (op.expert ? s.expert : s.dense) += p;
  (op.expert ? s.expert_factored : s.dense_factored) += f;
  s.powersgd_rows_cols = static_cast<double>(op.matrices * (op.rows + op.cols));
  return s;
}

ParamSplit split_of(const cost::Layer& l) {
  ParamSplit s;
  for (const auto& op : l.ops) s += split_of(op);
  return s;
}

// Bytes of compression state and buffers for `p` gradient parameters of
// `grad_bytes` each (the wire formats of compressed_exchange, lower.hpp).
double compression_bytes(const Compression& c, double p, double rows_cols, std::int64_t dp,
                         double grad_bytes) {
  const double d = static_cast<double>(dp);
  switch (c.method) {
    case CompressionMethod::None: return 0;
    case CompressionMethod::TopK:
      // fp32 residual for error feedback; (int32 index, fp16 value) pairs sent
      // and gathered from every rank.
      return (c.error_feedback ? 4 * p : 0) + 6 * c.ratio * p * (1 + d);
    case CompressionMethod::RandomK:
      // fp32 residual for error feedback; the k indices and the k values all-reduced.
      return (c.error_feedback ? 4 * p : 0) + (4 + grad_bytes) * c.ratio * p;
    case CompressionMethod::Qsgd:
      // norms and (bits + 1)-bit levels sent and gathered from every rank
      return (1 + d) * p * (static_cast<double>(c.bits + 1) / 8 + 4.0 / static_cast<double>(kQsgdBucket));
    case CompressionMethod::OneBit:
      // worker and server error feedback, two buffers of sign bits and scales
      return 4 * p + 4 * p / d + 2 * p * (1.0 / 8 + 4.0 / static_cast<double>(kOneBitBucket));
    case CompressionMethod::PowerSgd:
      // error feedback, and P (rows × r) and Q (cols × r) per matrix in fp32
      return 4 * p + 4 * rows_cols * static_cast<double>(c.rank);
  }
  return 0;
}

// Megatron-LM's interleaved schedule: the forwards stage `s` runs before its
// first backward, (p − s − 1)·2 + (v − 1)·p, at most all m·v of them.
std::int64_t interleaved_warmup(const Plan& plan, std::int64_t m, int s) {
  const std::int64_t p = plan.pp, v = plan.virtual_stages;
  return std::min(2 * (p - s - 1) + (v - 1) * p, m * v);
}

// The order of a stage's passes in Megatron-LM's schedules: forwards in
// groups of p microbatches through the stage's chunks 0, 1, …, v − 1,
// backwards through v − 1, …, 0 (one chunk: microbatch order).
struct ChunkOrder {
  std::int64_t p = 1, v = 1;
  // Of the first n forwards (backwards), those of local chunk c.
  std::int64_t forwards(std::int64_t n, std::int64_t c) const {
    return n / (p * v) * p + std::clamp<std::int64_t>(n % (p * v) - c * p, 0, p);
  }
  std::int64_t backwards(std::int64_t n, std::int64_t c) const { return forwards(n, v - 1 - c); }
  // The local chunk of forward (backward) n, counted from 0.
  std::size_t forward_chunk(std::int64_t n) const { return static_cast<std::size_t>(n % (p * v) / p); }
  std::size_t backward_chunk(std::int64_t n) const { return static_cast<std::size_t>(v - 1) - forward_chunk(n); }
};

// The embedding's and head's activations and one backward's working set w
// at their joint peak on a stage: max(fixed, with_working + w).
struct ExtrasPeak {
  double fixed = 0, with_working = 0;
  double at(double w) const { return std::max(fixed, with_working + w); }
};

// The most bytes of embedding and head activations, plus one backward's
// working set, alive at once on `stage` during the steady state. The first
// stage keeps embedding activations of its in-flight microbatches of model
// chunk 0; the last keeps head activations (fp32 logits) of model chunk
// p·v − 1, and each backward of that chunk starts with the loss's backward
// (holding `head_grad`, the logits' gradient) which frees one of them before
// the layers' backward (holding the working set). Megatron's steady state runs forward W + k,
// then backward k (W the warm-up); with interleaving, which chunks are in
// flight changes from step to step, with period p·v.
ExtrasPeak extras_peak(const Plan& plan, std::int64_t m, int stage, double emb, double head,
                       double head_grad) {
  const std::int64_t p = plan.pp, v = plan.virtual_stages, s = stage;
  const bool first = s == 0, last = s == p - 1;
  ExtrasPeak best;
  if (!first && !last) return best;
  const ChunkOrder order{p, v};
  std::int64_t warmup;
  switch (plan.schedule) {
    case Schedule::GPipe: warmup = m; break;
    case Schedule::Interleaved: warmup = interleaved_warmup(plan, m, stage); break;
    default: warmup = std::min(p - s - 1, m); break;
  }
  const std::int64_t steps = m * v;
  bool any = false;
  // The first and the last local chunk's microbatches in flight.
  const auto consider = [&](std::int64_t forwards, std::int64_t backwards, bool frees_head) {
    const double c_first = static_cast<double>(order.forwards(forwards, 0) - order.backwards(backwards, 0));
    const double c_last = static_cast<double>(order.forwards(forwards, v - 1) - order.backwards(backwards, v - 1));
    const double extras = (first ? emb * c_first : 0) + (last ? head * c_last : 0);
    const double with = last && frees_head ? extras - head : extras;
    if (last && frees_head) best.fixed = std::max(best.fixed, extras + head_grad);
    best.with_working = any ? std::max(best.with_working, with) : with;
    any = true;
  };
  if (warmup >= steps) {
    // Every forward runs before the first backward.
    consider(steps, 0, true);  // the first backward is of the last chunk
    return best;
  }
  // Steady steps k: forward warmup + k has run, backward k starts.
  const std::int64_t period = v == 1 ? 1 : p * v;
  for (std::int64_t k = 0; k < std::min(period, steps - warmup); ++k)
    consider(warmup + k + 1, k, order.backward_chunk(k) == static_cast<std::size_t>(v - 1));
  return best;
}

// The peak of a stage of Megatron-LM's interleaved schedule whose chunks
// keep different bytes, backward start by backward start: at each, the
// chunk-microbatches in flight per virtual chunk, the working set of the
// chunk whose backward starts, and the embedding's and head's bytes as
// extras_peak holds them. The starts where the peak can be: the steady
// state's, one period of p·v steps (forward warmup + k + 1 has run when
// backward k starts), and the cool-down's first period (every forward has
// run; later periods hold p fewer of every chunk), in ChunkOrder.
// `resident`: with activation offload, what the blocks keep of the swapped
// bytes (the layer being copied and those prefetched). Returns the blocks'
// bytes on the GPU at the peak and the rest of it (working set and extras).
std::pair<double, double> interleaved_peak(const Plan& plan, std::int64_t m, int stage, double emb, double head,
                                           double head_grad, const MemoryModel::Blocks& blocks, double resident) {
  const std::int64_t p = plan.pp, v = plan.virtual_stages, s = stage, pv = p * v;
  const bool first = s == 0, last = s == p - 1;
  const auto& chunks = blocks.chunks;
  const ChunkOrder order{p, v};
  // The blocks' bytes and swapped bytes in flight, and the chunk-microbatches
  // of the first and last chunk (the embedding's and head's), kept as
  // forwards and backwards run.
  double stored = 0, swapped = 0, lead = 0, tail = 0;
  const auto reset = [&](std::int64_t done_forwards, std::int64_t done_backwards) {
    stored = swapped = 0;
    for (std::int64_t c = 0; c < v; ++c) {
      const auto n = static_cast<double>(order.forwards(done_forwards, c) - order.backwards(done_backwards, c));
      stored += n * chunks[static_cast<std::size_t>(c)].stored;
      swapped += n * chunks[static_cast<std::size_t>(c)].swapped;
      if (c == 0) lead = n;
      if (c == v - 1) tail = n;
    }
  };
  const auto move = [&](std::size_t c, double n) {
    stored += n * chunks[c].stored;
    swapped += n * chunks[c].swapped;
    if (c == 0) lead += n;
    if (c == static_cast<std::size_t>(v - 1)) tail += n;
  };
  double best = -1, best_stored = 0;
  // Backward `n` starts now.
  const auto consider = [&](std::int64_t n) {
    const double on_gpu = swapped > 0 ? std::min(stored, stored - swapped + resident) : stored;
    const double extras = (first ? emb * lead : 0) + (last ? head * tail : 0);
    const std::size_t starting = order.backward_chunk(n);
    const double w = chunks[starting].working;
    // On the last stage the last chunk's backward starts with the loss's,
    // which frees one microbatch's head bytes before the layers' backward.
    const double rest = last && starting == static_cast<std::size_t>(v - 1)
                            ? std::max(extras + head_grad, extras - head + w)
                            : extras + w;
    if (on_gpu + rest > best) {
      best = on_gpu + rest;
      best_stored = on_gpu;
    }
  };
  const std::int64_t steps = m * v;
  const std::int64_t warmup = interleaved_warmup(plan, m, stage);
  const std::int64_t steady = steps - warmup;  // backwards with a forward just before them
  const std::int64_t steady_end = std::min(pv, steady);
  if (steady_end > 0) reset(warmup + 1, 0);
  for (std::int64_t k = 0; k < steady_end; ++k) {
    if (k > 0) {  // forward warmup + k, then backward k − 1 ended
      move(order.forward_chunk(warmup + k), 1);
      move(order.backward_chunk(k - 1), -1);
    }
    consider(k);
  }
  const std::int64_t cool_end = std::min(steady + pv, steps);
  if (steady < cool_end) reset(steps, steady);
  for (std::int64_t k = steady; k < cool_end; ++k) {
    if (k > steady) move(order.backward_chunk(k - 1), -1);
    consider(k);
  }
  return {best_stored, best - best_stored};
}

}  // namespace

PerParam bytes_per_param(Optimizer opt, Precision precision, bool fp32_grad_accumulation) {
  const bool mixed = precision != Precision::FP32;
  PerParam b;
  b.weights = mixed ? 2 : 4;
  if (!mixed)
    b.grads = 4;
  else if (fp32_grad_accumulation)
    b.grads = precision == Precision::FP16 ? 2 + 4 : 4;
  else
    b.grads = 2;
  double states = 0;  // optimizer statistics, fp32 unless quantized
  switch (opt) {
    case Optimizer::Sgd: states = 0; break;
    case Optimizer::Momentum:
    case Optimizer::Lars: states = 4; break;
    case Optimizer::Adam:
    case Optimizer::AdamW:
    case Optimizer::Lamb: states = 8; break;
    // Block-wise quantized moments with one fp32 absmax per block and moment:
    // 8-bit blocks of 2048 (Dettmers et al. 2022), 4-bit blocks of 128 (Li et
    // al. 2023).
    case Optimizer::Adam8bit: states = 2 + 2 * 4.0 / 2048; break;
    case Optimizer::Adam4bit: states = 1 + 2 * 4.0 / 128; break;
    case Optimizer::Adafactor:
    case Optimizer::Sm3: states = 0; break;  // by shape: factored_state_bytes
  }
  b.optimizer = states + (mixed ? 4 : 0);  // fp32 master weights
  return b;
}

PerParam bytes_per_param(const Plan& plan) {
  PerParam b = bytes_per_param(plan.optimizer, plan.precision, plan.implementation.fp32_grad_accumulation);
  if (plan.optimizer_states == StateDtype::BF16) {
    // Halves the statistics, not the fp32 master weights (mixed precision).
    const double master = plan.precision != Precision::FP32 ? 4.0 : 0.0;
    b.optimizer = master + (b.optimizer - master) / 2;
  }
  return b;
}

namespace {
// One accumulated gradient element as a reduction of its buffer moves it:
// fp16 with an fp32 buffer keeps both (6 bytes) and reduces the fp32 one.
double accumulated_grad_bytes(const Plan& plan) { return std::min(bytes_per_param(plan).grads, 4.0); }
}  // namespace

double reduced_grad_bytes(const Plan& plan) {
  switch (plan.implementation.grad_reduce_dtype) {
    case GradReduceDtype::FP32: return 4;
    case GradReduceDtype::BF16:
    case GradReduceDtype::FP16: return 2;
    case GradReduceDtype::Accumulation: break;
  }
  return accumulated_grad_bytes(plan);
}

bool reduces_apart(const Plan& plan) { return reduced_grad_bytes(plan) != accumulated_grad_bytes(plan); }

double factored_state_bytes(const cost::Op& op) {
  return 4.0 * static_cast<double>(op.matrices * (op.rows + op.cols)) +
         4.0 * static_cast<double>(op.vector_params());
}

ModelStates zero_model_states(double psi, const PerParam& b, int zero, std::int64_t dp) {
  const double d = static_cast<double>(dp);
  return {b.weights * psi / (zero >= 3 ? d : 1.0), b.grads * psi / (zero >= 2 ? d : 1.0),
          b.optimizer * psi / (zero >= 1 ? d : 1.0)};
}

std::vector<std::int64_t> in_flight_per_chunk(const Plan& plan, std::int64_t m, int stage) {
  const std::int64_t p = plan.pp, v = plan.virtual_stages, s = stage;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(v), 0);
  if (plan.schedule == Schedule::Interleaved) {
    std::int64_t n = std::min(interleaved_warmup(plan, m, stage) + 1, m * v);
    // Forward order: groups of p microbatches, each through chunk 0, 1, …
    for (std::int64_t g = 0; n > 0 && g < m; g += p) {
      const std::int64_t group = std::min(p, m - g);
      for (std::int64_t c = 0; c < v && n > 0; ++c) {
        const std::int64_t take = std::min(group, n);
        counts[static_cast<std::size_t>(c)] += take;
        n -= take;
      }
    }
  } else {
    counts[0] = plan.schedule == Schedule::GPipe ? m : std::min(p - s, m);
  }
  return counts;
}

std::vector<std::string> plan_notes(const Scenario& sc) {
  std::vector<std::string> notes;
  if (sc.plan.recompute == Recompute::Selective && !sc.model.chain) {
    const std::vector<ActivationRule> rules =
        ActivationRule::of(cost::expand(sc.model, expand_options(sc)), Recompute::Selective);
    if (std::all_of(rules.begin(), rules.end(), [](const ActivationRule& r) { return r.full == r.selective; }))
      notes.push_back("recompute \"selective\" is \"none\" here: the " +
                      std::string(enum_name(sc.plan.implementation.attention)) +
                      " attention kernel saves no attention scores, so there is no attention core to drop or "
                      "rerun (the same memory and step time as recompute \"none\")");
  }
  return notes;
}

cost::ExpandOptions expand_options(const Scenario& sc) { return expand_options(sc.plan, sc.batch); }

Recompute selective_policy(const Plan& plan) {
  return plan.recompute == Recompute::SelectiveOp ? Recompute::SelectiveOp : Recompute::Selective;
}

ActivationRule ActivationRule::of(const cost::Layer& block, Recompute selective) {
  Bytes linear = 0;
  for (const auto& op : block.ops)
    if (op.kind == cost::OpKind::Linear) linear += op.saved_bytes;
  ActivationRule r{block.saved_bytes(Recompute::None), block.saved_bytes(selective), block.input_bytes,
                   block.max_grad_bytes(), linear};
  for (const auto& op : block.ops) r.selective_reruns |= cost::rerun_share(op, selective) > 0;
  return r;
}

std::vector<ActivationRule> ActivationRule::of(const cost::OpChain& chain, Recompute selective) {
  std::vector<ActivationRule> out;
  out.reserve(chain.kinds.size());
  for (const auto& k : chain.kinds) out.push_back(of(k, selective));
  return out;
}

std::vector<ActivationRule> ActivationRule::of(const cost::OpChain& chain, const Scenario& sc) {
  const Plan& plan = sc.plan;
  std::vector<ActivationRule> out = of(chain, selective_policy(plan));
  if (plan.partition_activations)
    for (ActivationRule& r : out) {
      r.input = (r.input + plan.tp - 1) / plan.tp;
      r.input_shared = false;
    }
  if (const Bytes exchange = cp_exchange_bytes(sc); exchange > 0)
    for (std::size_t k = 0; k < out.size(); ++k)
      if (std::any_of(chain.kinds[k].ops.begin(), chain.kinds[k].ops.end(),
                      [](const cost::Op& op) { return cost::is_attention_product(op.kind); }))
        out[k].exchange = exchange;
  if (plan.zero >= 3 && zero_shards(plan) > 1 && sc.kernel_memory != KernelMemory::Cpu) {
    const double e = static_cast<double>(cost::activation_bytes(plan.precision));
    const std::int64_t bucket = plan.implementation.zero3_reduce_bucket;
    for (std::size_t k = 0; k < out.size(); ++k) {
      double staged = static_cast<double>(chain.kinds[k].params()) * (e + reduced_grad_bytes(plan));
      if (bucket > 0) {
        // The largest weight tensor: a matrix, or the largest of the
        // separate products one Linear op stands for.
        double largest = 0;
        for (const cost::Op& op : chain.kinds[k].ops) {
          const double share = *std::max_element(op.products.begin(), op.products.end());
          largest = std::max(largest, static_cast<double>(op.rows * op.cols) * (share > 0 ? share : 1.0));
        }
        staged = (largest + static_cast<double>(std::min(bucket, chain.params()))) * e;
      }
      out[k].staging = static_cast<Bytes>(std::llround(staged));
    }
  }
  return out;
}

double cp_rank_kv_bytes(const Scenario& sc) {
  const Plan& plan = sc.plan;
  return 2.0 * static_cast<double>(sc.batch.micro) * static_cast<double>(sc.model.seq_len / plan.cp) *
         static_cast<double>(sc.model.kv_hidden()) / static_cast<double>(plan.tp) *
         static_cast<double>(cost::activation_bytes(plan.precision));
}

Bytes cp_exchange_bytes(const Scenario& sc) {
  const Plan& plan = sc.plan;
  if (plan.cp <= 1 || sc.kernel_memory == KernelMemory::Cpu) return 0;
  const double e = static_cast<double>(cost::activation_bytes(plan.precision));
  const double kv = cp_rank_kv_bytes(sc);
  // The queries: q_hidden features a token where K and V have kv_hidden each.
  const double q = kv / 2.0 * static_cast<double>(sc.model.q_hidden()) / static_cast<double>(sc.model.kv_hidden());
  const double cp = static_cast<double>(plan.cp);
  double bytes = 0;
  switch (plan.implementation.cp_comm) {
    case CpComm::P2p: bytes = 2.0 * kv; break;
    case CpComm::AllGather: bytes = 2.0 * cp * kv; break;
    case CpComm::AllGatherRing: bytes = cp * kv + 4.0 / e * (3.0 * kv + q); break;
  }
  return static_cast<Bytes>(std::llround(bytes));
}

ActivationRule ActivationRule::largest(std::span<const ActivationRule> rules) {
  ActivationRule r;
  for (const auto& x : rules) {
    r.full = std::max(r.full, x.full);
    r.selective = std::max(r.selective, x.selective);
    r.input = std::max(r.input, x.input);
    r.grad = std::max(r.grad, x.grad);
    r.exchange = std::max(r.exchange, x.exchange);
    r.staging = std::max(r.staging, x.staging);
    r.linear_inputs = std::max(r.linear_inputs, x.linear_inputs);
    r.selective_reruns |= x.selective_reruns;
    r.input_shared = r.input_shared && x.input_shared;
  }
  return r;
}

Bytes ActivationRule::stored(Keep k) const {
  switch (k) {
    case Keep::All: return full;
    case Keep::Selective: return selective;
    case Keep::Input: return input;
    case Keep::Nothing: return 0;
  }
  return 0;
}

Bytes ActivationRule::swapped(Keep k, Swap s) const {
  switch (s) {
    case Swap::None: return 0;
    case Swap::Saved: return stored(k);
    // Selective drops only the attention core: every linear input stays.
    case Swap::LinearInputs: return k == Keep::All || k == Keep::Selective ? linear_inputs : 0;
  }
  return 0;
}

ActivationRule::Chunk ActivationRule::chunk(std::span<const Keep> keeps,
                                            std::span<const Swap> swaps) const {
  const std::vector<std::int32_t> one(keeps.size(), 0);
  return chunk({this, 1}, one, keeps, swaps);
}

ActivationRule::Chunk ActivationRule::chunk(std::span<const ActivationRule> rules,
                                            std::span<const std::int32_t> kinds, std::span<const Keep> keeps,
                                            std::span<const Swap> swaps) {
  // Layer i's backward holds `holds` while what layers i+1… kept is freed:
  // with `before` kept by layers 0…i, its excess over what the microbatch
  // kept in all is holds + before − total, so one forward pass suffices.
  Chunk c;
  Bytes before = 0, most = 0;
  Bytes rerun = 0;  // what the layers of the current segment up to i save when rerun
  for (std::size_t i = 0; i < keeps.size(); ++i) {
    const ActivationRule& r = rules[static_cast<std::size_t>(kinds[i])];
    const Keep k = keeps[i];
    Bytes holds = r.backward_holds();
    if (k == Keep::Selective) holds += r.selective_rebuilt();
    if (k == Keep::Input || k == Keep::Nothing) {
      if (k == Keep::Input) rerun = 0;
      else if (rerun == 0) throw Error("a layer keeps nothing and follows no segment start");
      rerun += r.rerun(k == Keep::Input);
      holds += rerun;
    }
    before += r.stored(k);
    most = std::max(most, holds + before);
    const Bytes out = r.swapped(k, swaps[i]);
    c.swapped += out;
    c.largest_swapped = std::max(c.largest_swapped, out);
  }
  c.stored = before;
  c.working = most - before;
  return c;
}

double zero3_module_elems(const cost::Op& op, std::int64_t keep) {
  double gathered = 0;
  if (op.matrices > 0 && op.rows * op.cols >= keep) gathered += static_cast<double>(op.matrix_params());
  if (op.vector_params() > 0 && op.vector_params() >= keep) gathered += static_cast<double>(op.vector_params());
  return gathered;
}

std::int64_t zero3_module_tensors(const cost::Op& op, std::int64_t keep) {
  std::int64_t tensors = 0;
  if (op.matrices > 0 && op.rows * op.cols >= keep) {
    const auto products = std::count_if(op.products.begin(), op.products.end(), [](double p) { return p > 0; });
    tensors += op.matrices * std::max<std::int64_t>(1, products);
  }
  if (op.vector_params() > 0 && op.vector_params() >= keep) ++tensors;
  return tensors;
}

double coordinator_peak(std::span<const GatherUse> trace, double prefetch, double max_live, double reuse) {
  const std::size_t n = trace.size();
  std::int64_t units = 0;
  for (const GatherUse& u : trace) units = std::max(units, u.unit + 1);
  // The elements of the trace before each use, and each use's next use of
  // its unit (n: none).
  std::vector<double> before(n + 1, 0.0);
  for (std::size_t t = 0; t < n; ++t) before[t + 1] = before[t] + trace[t].elems;
  std::vector<std::size_t> next(n, n), last_seen(static_cast<std::size_t>(units), n);
  for (std::size_t t = n; t-- > 0;) {
    auto& seen = last_seen[static_cast<std::size_t>(trace[t].unit)];
    next[t] = seen;
    seen = t;
  }
  std::vector<bool> gathered(static_cast<std::size_t>(units), false);
  std::vector<std::size_t> held_for(static_cast<std::size_t>(units), 0);  // the last use the prefetch passed
  double live = 0, peak = 0;
  std::size_t queue = 0;  // the trace's next use the prefetch has not passed
  auto gather = [&](std::int64_t u, double elems) {
    if (gathered[static_cast<std::size_t>(u)]) return 0.0;
    gathered[static_cast<std::size_t>(u)] = true;
    live += elems;
    return elems;
  };
  for (std::size_t t = 0; t < n; ++t) {
    const auto u = static_cast<std::size_t>(trace[t].unit);
    gather(trace[t].unit, trace[t].elems);
    queue = std::max(queue, t + 1);
    held_for[u] = std::max(held_for[u], t);
    const double budget = std::min(max_live - live, prefetch);
    for (double fetched = 0; queue < n && fetched < budget; ++queue) {
      const GatherUse& q = trace[queue];
      fetched += gather(q.unit, q.elems);
      auto& h = held_for[static_cast<std::size_t>(q.unit)];
      h = std::max(h, queue);
    }
    peak = std::max(peak, live);
    // (DeepSpeed releases after the use, when its step counter has moved
    // on to t + 1.)
    const bool prefetched_again = held_for[u] > t + 1;
    const bool reused = next[t] < n && before[next[t]] - before[t + 1] < reuse;
    if (!prefetched_again && !reused) {
      gathered[u] = false;
      live -= trace[t].elems;
    }
  }
  return peak;
}

EndGathers end_gathers(const cost::OpChain& chain, bool tied, bool first, bool last) {
  const double word = tied && !chain.embedding.ops.empty() ? static_cast<double>(chain.embedding.ops.front().params) : 0;
  EndGathers g;
  if (first) g.embedding = static_cast<double>(chain.embedding.params());
  if (last) g.head = static_cast<double>(chain.head.params()) + word;
  g.root = g.embedding + g.head - (first && last ? word : 0.0);
  return g;
}

Bytes p2p_message_bytes(const Scenario& sc, const cost::OpChain& chain, std::span<const std::int64_t> first_layer,
                        int boundary) {
  if (sc.model.chain) {
    const std::int64_t next = first_layer[static_cast<std::size_t>(boundary) + 1];
    return next < chain.blocks ? chain.block_at(next).input_bytes : chain.head.input_bytes;
  }
  const auto& plan = sc.plan;
  const double e = static_cast<double>(cost::activation_bytes(plan.precision));
  const double split =
      (plan.sequence_parallel || plan.implementation.pp_scatter_gather) ? static_cast<double>(plan.tp) : 1.0;
  return static_cast<Bytes>(static_cast<double>(sc.batch.micro) * static_cast<double>(sc.model.seq_len / plan.cp) *
                            static_cast<double>(sc.model.hidden) * e / split);
}

MemoryFigures memory_figures(const MemoryEstimate& m) {
  const auto at = [&](sim::MemTag t) { return m.breakdown[static_cast<std::size_t>(t)]; };
  const Bytes reserved = m.peak_bytes - at(sim::MemTag::Runtime);
  return {reserved - at(sim::MemTag::AllocatorReserve), reserved};
}

void finish_estimate(MemoryEstimate& out) {
  out.peak_bytes = 0;
  out.required_bytes = 0;
  out.infeasible.reset();
  for (const auto& st : out.stages) {
    if (st.total > out.peak_bytes) {
      out.peak_bytes = st.total;
      out.peak_stage = st.stage;
      out.breakdown = st.bytes;
    }
    out.required_bytes = std::max(out.required_bytes, st.required());
  }
  // Each stage's required bytes against its own GPU (on a cluster of groups
  // they differ): the one furthest over.
  const StageMemory* over = nullptr;
  const auto excess = [](const StageMemory& st) { return st.required() - st.capacity; };
  for (const auto& st : out.stages) {
    if (st.stage == out.peak_stage) out.gpu_capacity = st.capacity;
    if (st.required() > st.capacity && (!over || excess(st) > excess(*over))) over = &st;
  }
  if (over)
    out.infeasible = Infeasible{"gpu", over->required(), over->capacity};
  else if (out.host_bytes_per_node > out.host_capacity_per_node)
    out.infeasible = Infeasible{"host", out.host_bytes_per_node, out.host_capacity_per_node};
  else if (out.nvme_bytes_per_node > out.nvme_capacity_per_node)
    out.infeasible = Infeasible{"nvme", out.nvme_bytes_per_node, out.nvme_capacity_per_node};
}

std::vector<GatherUse> MemoryModel::gather_trace(int stage) const {
  // Units: each op's parameters where modules are gathered one by one (its
  // tensors below the persistence threshold stay whole), else each block's;
  // the embedding's and the head's ops either way, the word embedding one
  // unit where the head multiplies by it (tied). Forward: the embedding on
  // the first stage, the chunks' blocks in order, the head on the last;
  // backward the reverse, each recomputed block's forward again before its
  // backward (a rerun reruns its modules' hooks).
  const Plan& plan = sc_.plan;
  const auto& im = plan.implementation;
  const int p = static_cast<int>(plan.pp);
  const bool first = stage == 0, last = stage == p - 1;
  const std::int64_t keep = im.zero3_persistence_threshold;
  // Unit ids: a part's base plus its op's index.
  std::size_t most_ops = std::max(chain_.embedding.ops.size(), chain_.head.ops.size());
  for (const auto& k : chain_.kinds) most_ops = std::max(most_ops, k.ops.size());
  const auto per_layer = static_cast<std::int64_t>(most_ops) + 1;
  const std::int64_t word = 0, embedding_base = 1, head_base = embedding_base + per_layer,
                     layer_base = head_base + per_layer;
  std::vector<GatherUse> trace;
  auto add = [](std::vector<GatherUse>& to, std::int64_t unit, double elems) {
    if (elems > 0) to.push_back({unit, elems});
  };
  auto block = [&](std::int64_t layer, std::vector<GatherUse>& to, bool reverse) {
    const cost::Layer& b = chain_.block_at(layer);
    const std::int64_t base = layer_base + layer * per_layer;
    if (!im.zero3_gather_per_module) return add(to, base, static_cast<double>(b.params()));
    std::vector<GatherUse> ops;
    for (std::size_t i = 0; i < b.ops.size(); ++i)
      add(ops, base + static_cast<std::int64_t>(i), zero3_module_elems(b.ops[i], keep));
    if (reverse) std::reverse(ops.begin(), ops.end());
    to.insert(to.end(), ops.begin(), ops.end());
  };
  std::vector<std::int64_t> layers;
  for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
    const auto k = static_cast<std::size_t>(c * p + stage);
    for (std::int64_t l = first_[k]; l < first_[k] + chunks_[k]; ++l) layers.push_back(l);
  }
  // The word embedding is its own unit (0) so a tied head finds it.
  std::vector<GatherUse> emb;
  for (std::size_t i = 0; i < chain_.embedding.ops.size(); ++i)
    add(emb, i == 0 ? word : embedding_base + static_cast<std::int64_t>(i), zero3_module_elems(chain_.embedding.ops[i], keep));
  if (first) trace.insert(trace.end(), emb.begin(), emb.end());
  for (const std::int64_t l : layers) block(l, trace, false);
  std::vector<GatherUse> head;
  if (last) {
    for (std::size_t i = 0; i < chain_.head.ops.size(); ++i)
      add(head, head_base + static_cast<std::int64_t>(i), zero3_module_elems(chain_.head.ops[i], keep));
    if (sc_.model.tied_embeddings && !chain_.embedding.ops.empty())
      add(head, word, zero3_module_elems(chain_.embedding.ops.front(), keep));
  }
  trace.insert(trace.end(), head.begin(), head.end());
  trace.insert(trace.end(), head.rbegin(), head.rend());
  const bool rerun = plan.recompute != Recompute::None && plan.recompute != Recompute::Selective &&
                     plan.recompute != Recompute::SelectiveOp;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (rerun) block(*it, trace, false);
    block(*it, trace, true);
  }
  if (first) trace.insert(trace.end(), emb.rbegin(), emb.rend());
  return trace;
}

// What a stage holds beside its blocks' activations.
struct MemoryModel::Statics {
  std::int64_t params = 0;
  double weights = 0, grads = 0, optimizer = 0, comm = 0, workspace = 0, host = 0, nvme = 0;
  std::vector<std::int64_t> in_flight;  // per virtual chunk
  std::int64_t in_flight_total = 0;
  ExtrasPeak extras;
};

MemoryModel::MemoryModel(const Scenario& sc, const MemoryRules& rules)
    : sc_(sc), rules_(rules), chain_(cost::expand(sc.model, expand_options(sc))),
      acts_(ActivationRule::of(chain_, sc)),
      largest_(ActivationRule::largest(acts_)),
      chunks_(chunk_layers(sc.plan, sc.model.layers)) {
  const Plan& plan = sc.plan;
  const auto& model = sc.model;
  first_.assign(chunks_.size() + 1, 0);
  for (std::size_t k = 0; k < chunks_.size(); ++k) first_[k + 1] = first_[k] + chunks_[k];

  const int p = static_cast<int>(plan.pp);
  const std::int64_t v = plan.virtual_stages;
  const std::int64_t m = microbatches(plan, sc.batch);
  const PerParam per = bytes_per_param(plan);
  const bool factored = is_factored(plan.optimizer);

  std::vector<ParamSplit> kinds;  // per kind of block
  for (const auto& k : chain_.kinds) kinds.push_back(split_of(k));
  const ParamSplit embedding = split_of(chain_.embedding);
  const ParamSplit head = split_of(chain_.head);
  const ParamSplit word_embedding = chain_.embedding.ops.empty() ? ParamSplit{} : split_of(chain_.embedding.ops.front());

  const double e = static_cast<double>(cost::activation_bytes(plan.precision));
  const double b = static_cast<double>(sc.batch.micro);
  const double s_local = static_cast<double>(model.seq_len / plan.cp);
  const double h = static_cast<double>(model.hidden);
  const double t = static_cast<double>(plan.tp);

  const std::int64_t dp_dense = zero_shards(plan);
  const std::int64_t dp_expert = std::max<std::int64_t>(1, zero_shards(plan) / plan.ep);
  const bool opt_offload = plan.offload.optimizer != OffloadTarget::None;

  statics_.reserve(static_cast<std::size_t>(p));
  for (int s = 0; s < p; ++s) {
    Statics st;
    // The stage's blocks, each of its kind; the largest of them bounds what
    // one layer's weights take in flight (gathered, fetched or staged): none
    // on a stage without blocks (an embedding- or head-only chunk).
    ParamSplit ps;
    ParamSplit block;
    std::vector<std::int64_t> count(kinds.size(), 0);
    for (std::int64_t c = 0; c < v; ++c) {
      const auto k = static_cast<std::size_t>(c * p + s);
      const std::vector<std::int64_t> n = chain_.kind_counts(first_[k], chunks_[k]);
      for (std::size_t i = 0; i < n.size(); ++i) count[i] += n[i];
    }
    double quantized_matrices = 0;  // weights of the stage's quantized GEMMs (its blocks' Linear ops)
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (count[i] == 0) continue;
      ps += kinds[i] * static_cast<double>(count[i]);
      quantized_matrices += static_cast<double>(chain_.kinds[i].gemm_weight_params()) * static_cast<double>(count[i]);
      if (kinds[i].params() > block.params()) block = kinds[i];
    }
    if (s == 0) ps += embedding;
    if (s == p - 1) ps += head;
    // Tied embeddings or multi-token prediction: the last stage keeps its
    // own copy of the word embedding, synchronised by an all-reduce.
    if (model.embedding_on_last_stage(p) && s == p - 1) ps += word_embedding;
    st.params = whole(ps.params());

    // --- model states, ZeRO-sharded over dp · cp (experts over dp · cp / ep) ---
    const ModelStates dense = zero_model_states(ps.dense, per, static_cast<int>(plan.zero), dp_dense);
    const ModelStates expert = zero_model_states(ps.expert, per, static_cast<int>(plan.zero), dp_expert);
    double weights = dense.params + expert.params;
    double grads = dense.grads + expert.grads;
    double optimizer = dense.optimizer + expert.optimizer;
    if (factored) {
      const double shard_d = plan.zero >= 1 ? static_cast<double>(dp_dense) : 1.0;
      const double shard_e = plan.zero >= 1 ? static_cast<double>(dp_expert) : 1.0;
      optimizer += ps.dense_factored / shard_d + ps.expert_factored / shard_e;
    }
    // PipeDream keeps p − s weight versions, PipeDream-2BW two.
    weights *= weight_versions(plan.schedule, p, s);
    // FP8 and FP4: the blocks' GEMM weights quantized for the step
    // (quantized_weight_bytes), kept beside the 16-bit ones. Not under ZeRO-3
    // or weight offload, where a layer's weights are on the GPU only while it
    // runs. With FP8 parameters (fp8_param_gather) they replace the 16-bit ones.
    if (cost::quantized_gemms(plan.precision) && plan.zero < 3 && !plan.offload.weights)
      weights += quantized_matrices * (cost::quantized_weight_bytes(plan.precision, plan.fp8_recipe) -
                                 (plan.implementation.fp8_param_gather ? per.weights : 0.0));

    double host = 0, nvme = 0;
    if (opt_offload) {
      // ZeRO-Offload: fp32 master weights, statistics and fp32 gradients live
      // off the GPU; with ZeRO-2/3 reduced gradient partitions stream out too.
      const double shard = plan.zero >= 1 ? static_cast<double>(dp_dense) : 1.0;
      const double off = optimizer + 4.0 * ps.params() / shard;
      (plan.offload.optimizer == OffloadTarget::Cpu ? host : nvme) += off;
      if (plan.offload.optimizer == OffloadTarget::Nvme)
        host += 2.0 * (block.params() * (per.optimizer + 4.0)) / shard;  // staging: two layers
      optimizer = 0;
      if (plan.zero >= 2) grads = 0;
    }
    if (plan.offload.weights) {
      // Weights stream in per layer: the current one plus prefetch_depth more.
      const double window =
          std::min(weights, static_cast<double>(1 + plan.offload.prefetch_depth) * block.params() * per.weights);
      if (plan.offload.weights_target == OffloadTarget::Nvme) {
        // On NVMe, read through host staging buffers of the same window
        // (ZeRO-Infinity's pinned buffer pool).
        nvme += weights;
        host += window;
      } else {
        host += weights;
      }
      weights = window;
    }
    st.weights = weights;
    st.grads = grads;
    st.optimizer = optimizer;
    st.host = host;
    st.nvme = nvme;

    // --- activations in flight, and the embedding's and head's ---
    st.in_flight = in_flight_per_chunk(plan, m, s);
    for (std::int64_t k : st.in_flight) st.in_flight_total += k;
    st.extras = extras_peak(plan, m, s, static_cast<double>(chain_.embedding.saved_bytes()),
                            static_cast<double>(chain_.head.saved_bytes()),
                            static_cast<double>(chain_.head.max_grad_bytes()));

    // --- communication buffers ---
    double comm = 0;
    if (plan.dp * plan.cp > 1) {  // gradients reduced over dp × cp
      // Two gradient buckets; ZeRO-3 reduces layer by layer instead (its
      // staging is held in each layer's backward: ActivationRule::staging),
      // bar the CPU kernels, which declare their own buffers.
      const double grad_full = per.grads * ps.params();
      if (plan.zero < 3 || sc.kernel_memory == KernelMemory::Cpu)
        comm += 2.0 * std::min(grad_full, static_cast<double>(rules.grad_bucket_bytes));
      if (plan.zero >= 3) {
        // ZeRO-3's gathered weights: a layer's and the next one's (prefetch),
        // and the stage's embedding and output layer (the head multiplies by
        // the word embedding when tied). FSDP holds the latter from their
        // forward to their backward's end (zero3_root_unsharded), so they
        // sit beside two layers; gathered per use, the larger of them takes
        // the second layer's place while it runs.
        const EndGathers ends = end_gathers(chain_, model.tied_embeddings, s == 0, s == p - 1);
        const double layer = block.params();
        double gathered = plan.implementation.zero3_root_unsharded ? 2.0 * layer + ends.root
                                                                   : layer + std::max({layer, ends.embedding, ends.head});
        // DeepSpeed's coordinator: what its trace holds gathered at most.
        if (plan.implementation.zero3_max_live > 0 && sc.kernel_memory != KernelMemory::Cpu) {
          const auto& im = plan.implementation;
          gathered = coordinator_peak(gather_trace(s), im.overlap_param_gather ? static_cast<double>(im.zero3_prefetch_bucket) : 0.0,
                                      static_cast<double>(im.zero3_max_live), static_cast<double>(im.zero3_reuse_distance));
        }
        comm += gathered * per.weights;
        // FSDP's root module reduce-scatters its gradients in the final
        // callback of the backward (FSDP2's _root_post_backward_final_callback:
        // the root's forward inputs, token ids, carry no gradient to hook), so
        // the output layer's unsharded gradient, in the compute dtype, is held
        // from its backward, right after the loss's, to the backward's end:
        // counted for the step, as the root's gathered weights are. The
        // embedding's, made last, falls after the activations are freed.
        if (plan.implementation.zero3_root_unsharded && sc.kernel_memory != KernelMemory::Cpu)
          comm += ends.head * static_cast<double>(cost::activation_bytes(plan.precision));
        // A gradient bucket allocated once (DeepSpeed's __ipg_bucket_flat_buffer
        // of reduce_bucket_size elements in the model's dtype), on GPU kernels.
        if (sc.kernel_memory != KernelMemory::Cpu)
          comm += static_cast<double>(plan.implementation.zero3_reduce_bucket) *
                  static_cast<double>(cost::activation_bytes(plan.precision));
      }
      comm += compression_bytes(plan.compression, ps.params(), ps.powersgd_rows_cols, plan.dp,
                                reduced_grad_bytes(plan));
    }
    if (p > 1) {  // p2p send and receive buffers: the stage's largest message
      Bytes msg = 0;
      for (std::int64_t c = 0; c < v; ++c) {
        const auto k = static_cast<int>(c * p + s);
        if (k > 0) msg = std::max(msg, p2p_message_bytes(sc, chain_, first_, k - 1));
        if (k + 1 < static_cast<int>(chunks_.size())) msg = std::max(msg, p2p_message_bytes(sc, chain_, first_, k));
      }
      comm += 2.0 * static_cast<double>(msg);
    }
    if (plan.cp > 1 && sc.kernel_memory == KernelMemory::Cpu) {
      // The CPU kernels' K/V all-gather: the group's K and V and their
      // gradients (2·cp × one rank's). On GPU kernels the exchange is held
      // in each attention block's backward (ActivationRule::exchange).
      comm += 2.0 * static_cast<double>(plan.cp) * cp_rank_kv_bytes(sc);
    }
    if (plan.ep > 1)  // all-to-all dispatch and combine
      comm += 2.0 * static_cast<double>(model.moe->top_k) * b * s_local * h * e /
              (plan.sequence_parallel ? t : 1.0);
    st.comm = comm;

    // --- workspace ---
    st.workspace = static_cast<double>(rules.cublas_workspace_bytes);
    if (plan.sequence_parallel) st.workspace += b * s_local * h * e;  // all-gathered layer input
    statics_.push_back(std::move(st));
  }
}

MemoryModel::~MemoryModel() = default;

const std::vector<std::int64_t>& MemoryModel::in_flight(int stage) const {
  return statics_[static_cast<std::size_t>(stage)].in_flight;
}

MemoryModel::Blocks MemoryModel::blocks(int s, const LayerPlan& layers) const {
  const std::size_t p = statics_.size();
  const auto& counts = in_flight(s);
  Blocks out;
  for (std::size_t c = 0; c < counts.size(); ++c) {
    const std::size_t k = c * p + static_cast<std::size_t>(s);
    const auto n = static_cast<std::size_t>(chunks_[k]);
    const auto at = static_cast<std::size_t>(first_[k]);
    const auto chunk = ActivationRule::chunk(acts_, {chain_.kind_of.data() + at, n}, {layers.keeps.data() + at, n},
                                             {layers.swaps.data() + at, n});
    out.add({static_cast<double>(chunk.stored), static_cast<double>(chunk.working),
             static_cast<double>(chunk.swapped)},
            static_cast<double>(counts[c]));
    out.largest_swapped = std::max(out.largest_swapped, static_cast<double>(chunk.largest_swapped));
  }
  return out;
}

std::pair<double, double> MemoryModel::on_gpu(int s, const Blocks& blocks) const {
  const Plan& plan = sc_.plan;
  // Chunks that keep different bytes: backward by backward (alike, the
  // warm-up's mix and any chunk's working set are the peak's).
  if (plan.schedule == Schedule::Interleaved &&
      blocks.chunks.size() == static_cast<std::size_t>(plan.virtual_stages) && plan.virtual_stages > 1)
    return interleaved_peak(plan, microbatches(plan, sc_.batch), s, static_cast<double>(chain_.embedding.saved_bytes()),
                            static_cast<double>(chain_.head.saved_bytes()),
                            static_cast<double>(chain_.head.max_grad_bytes()), blocks,
                            static_cast<double>(1 + plan.offload.prefetch_depth) * blocks.largest_swapped);
  // What stays, and what was swapped for the layers in flight: the one
  // being copied and prefetch_depth brought back (the copies assumed to keep
  // pace; the timeline knows better).
  const double stored =
      blocks.swapped > 0
          ? std::min(blocks.stored,
                     (blocks.stored - blocks.swapped) +
                         static_cast<double>(1 + plan.offload.prefetch_depth) * blocks.largest_swapped)
          : blocks.stored;
  return {stored, statics_[static_cast<std::size_t>(s)].extras.at(blocks.working)};
}

double MemoryModel::activations(int s, const Blocks& blocks) const {
  const auto [stored, working] = on_gpu(s, blocks);
  return stored + working;
}

StageMemory MemoryModel::stage(int s, const Blocks& blocks) const {
  const Statics& x = statics_[static_cast<std::size_t>(s)];
  StageMemory st;
  st.stage = s;
  st.params = x.params;
  st.in_flight = x.in_flight_total;
  // Embedding and head activations, and the working set, peak together;
  // reported as the part beyond the blocks' stored bytes.
  const auto [stored, working] = on_gpu(s, blocks);
  double host = x.host;
  if (sc_.plan.offload.activations) {
    // Swapped activations go to the host as they are produced.
    host += blocks.swapped;
    st.host_activation_bytes = whole(blocks.swapped);
  }
  st.activations_stored = whole(stored);
  st.activations_working = whole(working);
  const double transient = stored + working + x.comm + x.workspace;

  add(st.bytes, MemTag::Params, x.weights);
  add(st.bytes, MemTag::Grads, x.grads);
  add(st.bytes, MemTag::OptimizerStates, x.optimizer);
  add(st.bytes, MemTag::Activations, stored + working);
  add(st.bytes, MemTag::CommBuffers, x.comm);
  add(st.bytes, MemTag::Workspace, x.workspace);
  add(st.bytes, MemTag::AllocatorReserve, rules_.allocator_reserve_fraction * transient);
  add(st.bytes, MemTag::Runtime, static_cast<double>(rules_.runtime_bytes));
  st.total = sum(st.bytes);
  st.host_bytes = whole(host);
  st.nvme_bytes = whole(x.nvme);
  return st;
}

Bytes stage_gpu_memory(const cost::ClusterSpec& c, std::span<const std::size_t> groups) {
  if (!c.heterogeneous()) return c.gpu.memory_bytes();
  Bytes least = std::numeric_limits<Bytes>::max();
  for (std::size_t g : groups) least = std::min(least, c.groups[g].gpu.memory_bytes());
  return least;
}

Bytes memory_budget(const Scenario& sc, const MemoryRules& rules) {
  if (sc.plan.memory_budget_GiB)
    return static_cast<Bytes>(*sc.plan.memory_budget_GiB * static_cast<double>(kGiB));
  // One budget for every layer: on a cluster of groups, the smallest GPU's.
  Bytes smallest = sc.cluster.gpu.memory_bytes();
  for (const auto& g : sc.cluster.groups) smallest = std::min(smallest, g.gpu.memory_bytes());
  const double gpu = static_cast<double>(smallest);
  return static_cast<Bytes>(gpu * (1.0 - rules.budget_margin_fraction));
}

namespace {

MemoryEstimate estimate(const MemoryModel& model, LayerPlan layers) {
  const Scenario& sc = model.scenario();
  const auto n = static_cast<std::size_t>(sc.model.layers);
  if (layers.keeps.size() != n || layers.swaps.size() != n)
    throw Error("estimate_memory: " + std::to_string(layers.keeps.size()) + " layer choices for " +
                std::to_string(n) + " layers");
  MemoryEstimate out;
  out.gpu_capacity = sc.cluster.gpu.memory_bytes();
  const int p = static_cast<int>(sc.plan.pp);
  out.stages.reserve(static_cast<std::size_t>(p));
  const auto groups = stage_groups(sc.plan, sc.cluster);
  for (int s = 0; s < p; ++s) {
    out.stages.push_back(model.stage(s, model.blocks(s, layers)));
    out.stages.back().capacity = stage_gpu_memory(sc.cluster, groups[static_cast<std::size_t>(s)]);
  }
  out.layers = std::move(layers);
  if (needs_solver(sc.plan)) out.budget = memory_budget(sc, model.rules());

  const auto& node = sc.cluster.node;
  // On a cluster of groups the busiest rank may sit on the smallest node.
  double host_GiB = node.host_memory_GiB, nvme_GiB = node.nvme_GiB;
  for (const auto& g : sc.cluster.groups) {
    host_GiB = std::min(host_GiB, g.node.host_memory_GiB);
    nvme_GiB = std::min(nvme_GiB, g.node.nvme_GiB);
  }
  out.host_capacity_per_node = static_cast<Bytes>(host_GiB * static_cast<double>(kGiB));
  out.nvme_capacity_per_node = static_cast<Bytes>(nvme_GiB * static_cast<double>(kGiB));
  // Host and NVMe per node are bounded by the busiest rank times the node's GPUs.
  Bytes host_rank = 0, nvme_rank = 0;
  for (const auto& st : out.stages) {
    host_rank = std::max(host_rank, st.host_bytes);
    nvme_rank = std::max(nvme_rank, st.nvme_bytes);
  }
  out.host_bytes_per_node = host_rank * node.gpus_per_node;
  out.nvme_bytes_per_node = nvme_rank * node.gpus_per_node;
  finish_estimate(out);
  return out;
}

}  // namespace

MemoryEstimate estimate_memory(const Scenario& sc, const MemoryRules& rules) {
  const MemoryModel model(sc, rules);
  if (!needs_solver(sc.plan)) return estimate(model, fixed_layers(sc.plan, model.chunks()));
  return estimate(model, plan_layers(model, ModelStepCosts(sc)));
}

MemoryEstimate estimate_memory(const Scenario& sc, const MemoryRules& rules, const LayerPlan& layers) {
  return estimate(MemoryModel(sc, rules), layers);
}

}  // namespace strata::strategies
