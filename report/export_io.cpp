// `strata export`: the renderers for Megatron-LM, DeepSpeed and torchtitan,
// and the reading of a scenario or an explore directory. Every name written
// here is checked against the engine's own source or docs; docs/export.md
// lists them with their sources, and export_io_test.cpp asserts them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "report/explore.hpp"
#include "report/export.hpp"
#include "report/files.hpp"
#include "sim/json_reader.hpp"
#include "sim/units.hpp"
#include "lowering/memory.hpp"
#include "strategies/stack.hpp"
#include "strategies/validate.hpp"

namespace strata::report {

namespace {

using strategies::CompressionMethod;
using strategies::DpTopology;
using strategies::OffloadPlanner;
using strategies::OffloadTarget;
using strategies::Optimizer;
using strategies::ParallelDim;
using strategies::Plan;
using strategies::Scenario;
using strategies::Schedule;
using strategies::TpCommOverlap;
using cost::AttentionKernel;
using cost::Precision;
using cost::Recompute;

// Text from input (model and cluster names) in a comment line: no control
// characters, so it cannot end the comment and start a command.
std::string comment_safe(std::string_view s) {
  std::string out(s);
  for (auto& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return out;
}

std::string str(std::int64_t v) { return std::to_string(v); }
// The shortest text that reads back as `v` ("1.25").
std::string real(double v) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s;
}

// What every export says about the plan in its header.
std::string plan_summary(const Scenario& sc) {
  const auto& p = sc.plan;
  std::string s = comment_safe(sc.model.name) + " on " + comment_safe(sc.cluster.gpus_text()) + ": dp " + str(p.dp) + ", tp " + str(p.tp) +
                  ", pp " + str(p.pp) + ", cp " + str(p.cp);
  if (p.ep > 1) s += ", ep " + str(p.ep);
  s += ", zero " + str(p.zero) + ", global batch " + str(sc.batch.global) + ", micro " +
       str(sc.batch.micro);
  return s;
}

std::vector<std::int64_t> chunks(const Scenario& sc) {
  return strategies::chunk_layers(sc.plan, sc.model.layers);
}

// Megatron-Core's --pipeline-model-parallel-layout for the chunks, in
// pipeline order: "E" the embedding, "t" a transformer layer ("t*3" three),
// "L" the output layer and loss, chunks split by "|" (Megatron-LM
// docs/api-guide/pipeline_parallel_layout.md; arguments.py's help: "E, L, t,
// m denotes embedding, loss, transformer decoder layer, and mtp layer ...
// Stages are split by '|'"). The virtual stages follow from the chunk count.
std::string megatron_layout(const std::vector<std::int64_t>& c) {
  std::string s;
  for (std::size_t k = 0; k < c.size(); ++k) {
    if (k > 0) s += '|';
    if (k == 0) s += 'E';
    if (c[k] == 1) s += 't';
    if (c[k] > 1) s += "t*" + str(c[k]);
    if (k + 1 == c.size()) s += 'L';
  }
  return s;
}

bool all_equal(const std::vector<std::int64_t>& v, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; ++i)
    if (v[i] != v[from]) return false;
  return true;
}

// Layers per recompute segment of every_k and sqrt over the largest chunk,
// the unit Megatron-LM's `uniform` method checkpoints.
std::int64_t recompute_segment(const Scenario& sc) {
  const auto c = chunks(sc);
  return strategies::recompute_segment(sc.plan, *std::max_element(c.begin(), c.end()));
}

bool is_mixed(const Plan& p) { return p.precision != Precision::FP32; }

std::string rank_order_text(const Plan& p) {
  std::string s;
  for (std::size_t i = 0; i < p.implementation.rank_order.size(); ++i)
    s += (i ? "-" : "") + std::string(enum_name(p.implementation.rank_order[i]));
  return s;
}

// torchtitan's flavors, matched by shape (torchtitan names a model by
// flavor, not by its dimensions): torchtitan/models/llama3/__init__.py
// llama3_configs, flavors 8B, 70B and 405B (RoPE theta 500000).
struct KnownModel {
  std::int64_t layers, hidden, heads, kv_heads, ffn, vocab;
  double rope_theta;
  const char* torchtitan_name;
  const char* torchtitan_flavor;
};
constexpr KnownModel kKnownModels[] = {
    {32, 4096, 32, 8, 14336, 128256, 500000, "llama3", "8B"},
    {80, 8192, 64, 8, 28672, 128256, 500000, "llama3", "70B"},
    {126, 16384, 128, 8, 53248, 128256, 500000, "llama3", "405B"},
};

const KnownModel* known_model(const cost::ModelSpec& m) {
  if (m.position_embedding != cost::PositionEmbedding::Rope || m.moe) return nullptr;
  for (const auto& k : kKnownModels)
    if (k.layers == m.layers && k.hidden == m.hidden && k.heads == m.heads && k.kv_heads == m.kv_heads &&
        k.ffn == m.ffn_hidden && k.vocab == m.vocab && m.rope_theta.value_or(k.rope_theta) == k.rope_theta)
      return &k;
  return nullptr;
}

// The unsupported items every engine shares: plan axes none of the three
// engines has.
void common_unsupported(const Plan& p, std::string_view engine, std::vector<std::string>& out) {
  const std::string e(engine);
  if (p.dp_topology == DpTopology::ParameterServer)
    out.push_back("dp_topology=parameter_server (" + e +
                  " reduces gradients with collectives only)");
  if (p.compression.method != CompressionMethod::None)
    out.push_back("compression=" + std::string(enum_name(p.compression.method)) + " (" + e +
                  " sends uncompressed gradients)");
  if (p.schedule == Schedule::PipeDream || p.schedule == Schedule::PipeDream2BW)
    out.push_back("schedule=" + std::string(enum_name(p.schedule)) + " (" + e +
                  " has no asynchronous pipeline with weight stashing; flush-based 1F1B comes "
                  "nearest)");
}

// ---------------------------------------------------------------- Megatron-LM

}  // namespace

std::string megatron_moe_layer_freq(const cost::ModelSpec& m) {
  if (!m.moe || m.moe_blocks() == m.layers) return "";
  const cost::MoeSpec& x = *m.moe;
  // Megatron-Core's own integer rule (gpt_layer_specs.py,
  // get_gpt_decoder_layer_specs: block i has experts when i % N == 0).
  if (x.first_dense == 0 && x.offset == 0 && x.dense_layers.empty()) return str(x.every);
  // Otherwise the list, as runs of one value ("[0]*3" or "[1]"), and a group
  // of runs repeated ("([0]+[1])*12") where the pattern repeats.
  struct Run {
    int bit;
    std::int64_t n;
    bool operator==(const Run&) const = default;
  };
  std::vector<Run> runs;
  for (std::int64_t i = 0; i < m.layers; ++i) {
    const int bit = m.moe_at(i) ? 1 : 0;
    if (!runs.empty() && runs.back().bit == bit) ++runs.back().n;
    else runs.push_back({bit, 1});
  }
  auto term = [](const Run& r) { return "[" + str(r.bit) + "]" + (r.n > 1 ? "*" + str(r.n) : ""); };
  std::string out;
  auto add = [&](const std::string& t) { out += (out.empty() ? "" : "+") + t; };
  const std::size_t n = runs.size();
  for (std::size_t i = 0; i < n;) {
    // The group of q runs from i repeated most often in a row (q even: a
    // group of odd length cannot follow itself, its ends having one value;
    // at most 16 runs, which keeps this linear in the layers).
    std::size_t best_q = 0, best_reps = 1;
    for (std::size_t q = 2; q <= 16 && i + 2 * q <= n; q += 2) {
      std::size_t reps = 1;
      while (i + (reps + 1) * q <= n &&
             std::equal(runs.begin() + static_cast<std::ptrdiff_t>(i),
                        runs.begin() + static_cast<std::ptrdiff_t>(i + q),
                        runs.begin() + static_cast<std::ptrdiff_t>(i + reps * q)))
        ++reps;
      if (reps >= 2 && reps * q > best_reps * best_q) best_q = q, best_reps = reps;
    }
    if (best_q == 0) {
      add(term(runs[i]));
      ++i;
      continue;
    }
    std::string group;
    for (std::size_t k = i; k < i + best_q; ++k) group += (group.empty() ? "" : "+") + term(runs[k]);
    add("(" + group + ")*" + str(static_cast<std::int64_t>(best_reps)));
    i += best_q * best_reps;
  }
  return out;
}

std::string megatron_window_size(const cost::ModelSpec& m) {
  if (!m.attention_window || m.window_size() >= m.seq_len) return "";
  return str(m.window_size() - 1) + ",0";
}

namespace {

struct Flags {
  std::vector<std::string> items;  // "--flag" or "--flag value"
  void add(std::string flag) { items.push_back(std::move(flag)); }
  void add(const std::string& flag, std::int64_t v) { items.push_back(flag + " " + str(v)); }
  void add(const std::string& flag, const std::string& v) { items.push_back(flag + " " + v); }
};

// None of the three engines computes metrics over the logits while it
// trains (each logs the loss alone).
void no_train_metrics(const strategies::Implementation& im, std::string_view engine,
                      std::vector<std::string>& un) {
  if (im.train_metric_passes > 0)
    un.push_back("implementation.train_metric_passes=" + str(im.train_metric_passes) + " (" +
                 std::string(engine) + " computes no metrics over the logits while it trains, only the loss: "
                 "train_metric_passes=0)");
}

}  // namespace

Exported export_megatron(const Scenario& sc) {
  const Plan& p = sc.plan;
  const auto& m = sc.model;
  const auto& im = p.implementation;
  Exported ex;
  auto& un = ex.unsupported;
  auto& notes = ex.notes;
  Flags f;
  const std::string E = "Megatron-LM";

  // --- parallelism ---
  f.add("--tensor-model-parallel-size", p.tp);
  f.add("--pipeline-model-parallel-size", p.pp);
  f.add("--context-parallel-size", p.cp);
  if (p.cp > 1 && im.cp_comm == strategies::CpComm::AllGather) f.add("--cp-comm-type", "all_gather");
  if (p.cp > 1 && im.cp_comm == strategies::CpComm::AllGatherRing)
    un.push_back("implementation.cp_comm=all_gather_ring (PyTorch's context parallelism; Megatron-Core's "
                 "--cp-comm-type is p2p, all_gather, a2a or a2a+p2p: the flags give p2p, the ring)");
  if (m.moe || p.ep > 1) f.add("--expert-model-parallel-size", p.ep);
  const auto c = chunks(sc);
  if (p.schedule == Schedule::GPipe && p.pp > 1)
    un.push_back("schedule=gpipe (Megatron-LM runs 1F1B: all forwards then all backwards is "
                 "not a schedule it offers; the flags below give 1F1B)");
  // Chunks Megatron-LM's even split and its first/last-stage flags do not
  // give, the embedding or the head alone among them: the layout flag.
  const bool layout = p.pp > 1 && !all_equal(c, 0, c.size()) &&
                      (p.schedule == Schedule::Interleaved || c.front() == 0 || c.back() == 0 ||
                       !(c.size() == 2 || all_equal(c, 1, c.size() - 1)));
  if (layout) {
    // Quoted: "|" and "*" are the shell's.
    f.add("--pipeline-model-parallel-layout", "'" + megatron_layout(c) + "'");
    notes.push_back("--pipeline-model-parallel-layout gives each of the " + str(static_cast<std::int64_t>(c.size())) +
                    " chunks its layers (an experimental Megatron-Core flag of 2025; older releases split "
                    "the layers evenly)");
  }
  if (p.schedule == Schedule::Interleaved) {
    if (all_equal(c, 0, c.size())) f.add("--num-layers-per-virtual-pipeline-stage", c[0]);
    if (!im.overlap_p2p) {
      // Megatron-LM overlaps pipeline sends by default in the interleaved
      // schedule and needs pp > 2 without it.
      if (p.pp > 2)
        f.add("--no-overlap-p2p-communication");
      else
        un.push_back("implementation.overlap_p2p=false with pp=" + str(p.pp) +
                     " (Megatron-LM's interleaved schedule needs pp > 2 without p2p overlap; "
                     "emitted with its default overlap)");
    }
  } else if (p.pp > 1) {
    if (!all_equal(c, 0, c.size()) && !layout) {
      f.add("--decoder-first-pipeline-num-layers", c.front());
      f.add("--decoder-last-pipeline-num-layers", c.back());
    }
    if (im.overlap_p2p)
      un.push_back("implementation.overlap_p2p=true (Megatron-LM overlaps pipeline sends only "
                   "in the interleaved schedule)");
  }
  if (p.sequence_parallel) f.add("--sequence-parallel");
  if (im.rank_order == std::array{ParallelDim::TP, ParallelDim::CP, ParallelDim::PP,
                                  ParallelDim::DP})
    f.add("--use-tp-pp-dp-mapping");
  else if (im.rank_order != std::array{ParallelDim::TP, ParallelDim::CP, ParallelDim::DP,
                                       ParallelDim::PP})
    un.push_back("implementation.rank_order=" + rank_order_text(p) +
                 " (Megatron-LM lays ranks out tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with "
                 "--use-tp-pp-dp-mapping)");
  if (p.pp > 1 && p.tp > 1 && !im.pp_scatter_gather)
    f.add("--no-scatter-gather-tensors-in-pipeline");

  // --- ZeRO: the distributed optimizer, or Megatron-FSDP ---
  bool sharded_optimizer = false;
  if (p.zero == 1) {
    f.add("--use-distributed-optimizer");
    sharded_optimizer = true;
  } else if (p.zero >= 2 && p.pp == 1) {
    f.add("--use-megatron-fsdp");
    f.add("--data-parallel-sharding-strategy",
          std::string(p.zero == 2 ? "optim_grads" : "optim_grads_params"));
    f.add("--use-distributed-optimizer");
    f.add("--no-gradient-accumulation-fusion");
    f.add("--ckpt-format", std::string("fsdp_dtensor"));
    notes.push_back("zero=" + str(p.zero) + ": Megatron-FSDP (--use-megatron-fsdp), which "
                    "needs CUDA_DEVICE_MAX_CONNECTIONS unset or > 1");
    sharded_optimizer = true;
  } else if (p.zero == 2) {
    f.add("--use-distributed-optimizer");
    notes.push_back("zero=2 with pp=" + str(p.pp) +
                    ": the distributed optimizer reduce-scatters gradients but keeps the whole "
                    "gradient buffer on every rank (ZeRO-1 memory); Megatron-FSDP, which "
                    "shards it, is documented with tp, cp and ep, not pipeline parallelism");
    sharded_optimizer = true;
  } else if (p.zero == 3) {
    un.push_back("zero=3 with pp=" + str(p.pp) +
                 " (Megatron-LM shards parameters only in Megatron-FSDP, "
                 "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params, "
                 "documented with tp, cp and ep, not pipeline parallelism; nearest: "
                 "--use-distributed-optimizer, ZeRO-1)");
  }
  // Fused gradient accumulation is Megatron-LM's default (Megatron-FSDP,
  // above, already turns it off).
  if (!im.grad_accumulation_fusion && !(p.zero >= 2 && p.pp == 1))
    f.add("--no-gradient-accumulation-fusion");
  no_train_metrics(im, "Megatron-LM", un);
  if (im.cross_entropy != strategies::CrossEntropy::InPlace)
    un.push_back("implementation.cross_entropy=" + std::string(enum_name(im.cross_entropy)) +
                 " (Megatron-LM's loss is its vocabulary-parallel cross-entropy, which computes the "
                 "softmax in place and turns it into the gradient in place: cross_entropy=in_place)");
  if (!im.sp_regather_input && strategies::implementation_acts(strategies::ImplKey::SpRegatherInput, p))
    un.push_back("implementation.sp_regather_input=false (Megatron-LM's linears keep the sequence shard of "
                 "their input and gather it again in the backward)");
  if (im.zero3_reduce_bucket > 0 && strategies::implementation_acts(strategies::ImplKey::Zero3ReduceBucket, p))
    un.push_back("implementation.zero3_reduce_bucket=" + str(im.zero3_reduce_bucket) +
                 " (Megatron-LM has no flag for a ZeRO-3 gradient bucket of its own size: zero3_reduce_bucket=0)");
  if (im.zero3_max_live > 0 && strategies::implementation_acts(strategies::ImplKey::Zero3MaxLive, p))
    un.push_back("implementation.zero3_max_live=" + str(im.zero3_max_live) +
                 " (Megatron-LM has no DeepSpeed-style parameter coordinator: zero3_max_live=0)");
  if (im.zero3_host_per_rank && strategies::implementation_acts(strategies::ImplKey::Zero3HostPerRank, p))
    un.push_back("implementation.zero3_host_per_rank=true (Megatron-FSDP does not split its gathers rank by "
                 "rank on the host: zero3_host_per_rank=false)");
  if (!im.tp_grad_overlap && p.tp > 1)
    un.push_back("implementation.tp_grad_overlap=false (Megatron-LM always launches the "
                 "tensor-parallel input-gradient all-reduce beside the weight-gradient GEMM; "
                 "--no-async-tensor-model-parallel-allreduce is deprecated and ignored)");
  if (im.overlap_grad_reduce) f.add("--overlap-grad-reduce");
  if (im.fp8_param_gather) f.add("--fp8-param-gather");
  if (im.overlap_param_gather && sharded_optimizer) {
    if (im.overlap_grad_reduce)
      f.add("--overlap-param-gather");
    else
      un.push_back("implementation.overlap_param_gather=true without overlap_grad_reduce "
                   "(Megatron-LM needs --overlap-grad-reduce for --overlap-param-gather)");
  }
  if (im.tp_comm_overlap != TpCommOverlap::None) {
    if (!p.sequence_parallel) {
      un.push_back("implementation.tp_comm_overlap=" +
                   std::string(enum_name(im.tp_comm_overlap)) +
                   " without sequence parallelism (Megatron-LM's --tp-comm-overlap needs "
                   "--sequence-parallel)");
    } else {
      f.add("--tp-comm-overlap");
      if (im.tp_comm_overlap == TpCommOverlap::Bulk) {
        // Keep the bulk overlaps of the backward GEMMs only.
        f.add("--disable-tp-comm-overlap-ag");
        f.add("--disable-tp-comm-overlap-rs");
        f.add("--disable-tp-comm-split-ag");
        f.add("--disable-tp-comm-split-rs");
      }
    }
  }

  // --- recompute ---
  switch (p.recompute) {
    case Recompute::None: break;
    case Recompute::Selective:
      f.add("--recompute-granularity", std::string("selective"));
      if (p.recompute_modules != cost::kDefaultRecomputeModules) {
        f.add("--recompute-modules", cost::module_list(p.recompute_modules));
      }
      break;
    case Recompute::Full:
    case Recompute::EveryK:
    case Recompute::Sqrt: {
      const std::int64_t k = p.recompute == Recompute::Full ? 1 : recompute_segment(sc);
      f.add("--recompute-granularity", std::string("full"));
      f.add("--recompute-method", std::string("uniform"));
      f.add("--recompute-num-layers", k);
      if (p.recompute == Recompute::Sqrt)
        notes.push_back("recompute=sqrt: checkpoints every " + str(k) +
                        " layers (ceil(sqrt(layers per chunk)))");
      break;
    }
    case Recompute::EveryNth:
      un.push_back("recompute=every_nth (Megatron-LM recomputes uniform segments or the first N "
                   "layers of a stage, --recompute-method uniform|block, not every n-th layer)");
      break;
    case Recompute::SelectiveOp:
      un.push_back("recompute=selective_op (torchtitan's op-level save list; Megatron-LM's "
                   "--recompute-granularity selective reruns the attention core only)");
      break;
    case Recompute::Optimal:
      un.push_back("recompute=optimal (Megatron-LM has no memory-budget solver; "
                   "--recompute-method block --recompute-num-layers N recomputes the first N "
                   "layers of each stage)");
      break;
  }
  // The kept inputs split over tp (Megatron-LM's CheckpointFunction, used
  // by --recompute-granularity full).
  if (p.partition_activations) {
    if (p.recompute == Recompute::Full || p.recompute == Recompute::EveryK || p.recompute == Recompute::Sqrt)
      f.add("--distribute-saved-activations");
    else
      un.push_back("partition_activations with recompute=" + std::string(enum_name(p.recompute)) +
                   " (Megatron-LM splits the inputs of --recompute-granularity full only)");
  }

  // --- offload ---
  if (p.offload.activations) {
    if (p.pp > 1 || p.recompute != Recompute::None) {
      un.push_back("offload.activations=true with " +
                   std::string(p.pp > 1 ? "pp > 1" : "recompute") +
                   " (Megatron-LM's --cpu-offloading-num-layers takes neither pipeline "
                   "parallelism nor recompute)");
    } else if (p.offload.planner != OffloadPlanner::All) {
      un.push_back("offload.planner=" + std::string(enum_name(p.offload.planner)) +
                   " (Megatron-LM offloads the activations of the first N layers, "
                   "--cpu-offloading-num-layers N)");
    } else if (m.layers < 2) {
      un.push_back("offload.activations=true with 1 layer (Megatron-LM offloads fewer layers "
                   "than the model has)");
    } else {
      f.add("--cpu-offloading-num-layers", m.layers - 1);
      notes.push_back("offload.activations: Megatron-LM offloads at most num_layers - 1 = " +
                      str(m.layers - 1) + " layers; the last layer's activations stay on the GPU");
    }
  }
  if (p.offload.weights)
    un.push_back(std::string("offload.weights=") +
                 (p.offload.weights_target == OffloadTarget::Nvme ? "nvme" : "true") +
                 " (Megatron-LM keeps parameters on the GPU)");
  if (p.offload.optimizer == OffloadTarget::Nvme)
    un.push_back("offload.optimizer=nvme (Megatron-LM offloads optimizer state to CPU memory "
                 "only, --optimizer-cpu-offload)");
  if (p.offload.optimizer == OffloadTarget::Cpu) {
    if (p.zero == 0 || (p.zero == 3 && p.pp > 1)) {
      un.push_back("offload.optimizer=cpu without the distributed optimizer (Megatron-LM's "
                   "--optimizer-cpu-offload needs --use-distributed-optimizer)");
    } else {
      f.add("--optimizer-cpu-offload");
      f.add("--use-precision-aware-optimizer");
    }
  }
  // bf16 moments: the precision-aware optimizer's exp_avg and exp_avg_sq types.
  if (p.optimizer_states == strategies::StateDtype::BF16) {
    if (p.offload.optimizer != OffloadTarget::Cpu || p.zero == 0 || (p.zero == 3 && p.pp > 1))
      f.add("--use-precision-aware-optimizer");
    f.add("--exp-avg-dtype", std::string("bf16"));
    f.add("--exp-avg-sq-dtype", std::string("bf16"));
  }

  // --- optimizer and precision ---
  switch (p.optimizer) {
    case Optimizer::Adam:
    case Optimizer::AdamW:
      f.add("--optimizer", std::string("adam"));
      // Megatron-LM's adam decouples weight decay (AdamW, --weight-decay
      // 0.01 by default); without decay it is plain Adam.
      if (p.optimizer == Optimizer::Adam) f.add("--weight-decay", std::string("0"));
      break;
    case Optimizer::Sgd:
      f.add("--optimizer", std::string("sgd"));
      f.add("--sgd-momentum", std::string("0"));
      break;
    case Optimizer::Momentum:
      f.add("--optimizer", std::string("sgd"));
      f.add("--sgd-momentum", std::string("0.9"));
      break;
    default:
      un.push_back("optimizer=" + std::string(enum_name(p.optimizer)) +
                   " (Megatron-LM's --optimizer is adam, sgd or muon)");
  }
  switch (p.precision) {
    case Precision::BF16: f.add("--bf16"); break;
    case Precision::FP16: f.add("--fp16"); break;
    case Precision::FP8: {
      f.add("--bf16");
      // Block-scaled recipes quantize in E4M3 both ways (Transformer
      // Engine's Float8BlockScaling and MXFP8BlockScaling default format;
      // Megatron-LM's low_precision_training.md: "--fp8-format e4m3
      // --fp8-recipe mxfp8" on B200), the per-tensor ones E4M3 forward and
      // E5M2 backward.
      const bool blocks = p.fp8_recipe == cost::Fp8Recipe::Blockwise || p.fp8_recipe == cost::Fp8Recipe::Mxfp8;
      f.add("--fp8-format", std::string(blocks ? "e4m3" : "hybrid"));
      if (p.fp8_recipe == cost::Fp8Recipe::Rowwise)
        un.push_back("fp8_recipe=rowwise (torchao's; Megatron-Core's --fp8-recipe is delayed, tensorwise, "
                     "blockwise or mxfp8: its default, delayed, emitted)");
      else if (p.fp8_recipe != cost::Fp8Recipe::Delayed)  // Megatron-Core's default is delayed
        f.add("--fp8-recipe", std::string(enum_name(p.fp8_recipe)));
      break;
    }
    case Precision::FP4:  // Megatron-Core's FP4: E2M1 with its one recipe, NVFP4
      f.add("--bf16");
      f.add("--fp4-format", std::string("e2m1"));
      f.add("--fp4-recipe", std::string("nvfp4"));
      break;
    case Precision::FP32: break;
  }
  // Blocks kept in bf16 (arguments.py: --first-last-layers-bf16, and the
  // counts, each 1 by default; written out whatever they are).
  if (p.bf16_first_layers > 0 || p.bf16_last_layers > 0) {
    f.add("--first-last-layers-bf16");
    f.add("--num-layers-at-start-in-bf16", p.bf16_first_layers);
    f.add("--num-layers-at-end-in-bf16", p.bf16_last_layers);
  }
  // Megatron-LM accumulates bf16 gradients in fp32 unless told otherwise,
  // and fp16 gradients in fp16 unless told otherwise.
  if (p.precision == Precision::FP16 && im.fp32_grad_accumulation)
    f.add("--accumulate-allreduce-grads-in-fp32");
  if ((p.precision == Precision::BF16 || cost::quantized_gemms(p.precision)) &&
      !im.fp32_grad_accumulation)
    f.add("--grad-reduce-in-bf16");
  if (strategies::reduces_apart(p))
    un.push_back("implementation.grad_reduce_dtype=" + std::string(enum_name(im.grad_reduce_dtype)) +
                 " (Megatron-LM reduces gradients in the dtype of its main_grad buffer, which "
                 "--accumulate-allreduce-grads-in-fp32 and --grad-reduce-in-bf16 set for both)");

  // --- batch ---
  f.add("--micro-batch-size", sc.batch.micro);
  f.add("--global-batch-size", sc.batch.global);

  // --- model ---
  f.add("--num-layers", m.layers);
  f.add("--hidden-size", m.hidden);
  f.add("--ffn-hidden-size", m.ffn_hidden);
  f.add("--num-attention-heads", m.heads);
  if (m.kv_heads != m.heads) {
    f.add("--group-query-attention");
    f.add("--num-query-groups", m.kv_heads);
  }
  f.add("--seq-length", m.seq_len);
  f.add("--max-position-embeddings", m.seq_len);
  if (m.mlp == cost::MlpKind::Swiglu) f.add("--swiglu");
  f.add("--normalization",
        std::string(m.norm == cost::NormKind::RmsNorm ? "RMSNorm" : "LayerNorm"));
  switch (m.position_embedding) {
    case cost::PositionEmbedding::Learned:
      f.add("--position-embedding-type", std::string("learned_absolute"));
      break;
    case cost::PositionEmbedding::Rope:
      f.add("--position-embedding-type", std::string("rope"));
      // --rotary-base is an int, default 10000.
      if (!m.rope_theta) {
        notes.push_back("rope base: the model gives no rope_theta; Megatron-LM's --rotary-base "
                        "defaults to 10000: set it to the model's (Llama 3: 500000)");
      } else if (*m.rope_theta != std::round(*m.rope_theta)) {
        un.push_back("rope_theta=" + std::to_string(*m.rope_theta) + " (--rotary-base takes an integer)");
      } else if (*m.rope_theta != 10000) {
        f.add("--rotary-base", static_cast<std::int64_t>(*m.rope_theta));
      }
      break;
    case cost::PositionEmbedding::None:
      f.add("--position-embedding-type", std::string("none"));
      break;
    case cost::PositionEmbedding::Alibi:
      un.push_back("position_embedding=alibi (Megatron-LM's --position-embedding-type is "
                   "learned_absolute, rope, mrope, relative or none)");
      break;
  }
  if (!m.tied_embeddings) f.add("--untie-embeddings-and-output-weights");
  if (!m.bias) f.add("--disable-bias-linear");
  if (!m.dropout) {
    f.add("--attention-dropout", std::string("0"));
    f.add("--hidden-dropout", std::string("0"));
  }
  if (m.moe) {
    f.add("--num-experts", m.moe->experts);
    f.add("--moe-router-topk", m.moe->top_k);
    // Token dropping (arguments.py: "The capacity factor for each expert,
    // None means no token will be dropped"; padding "effective only after
    // the --moe-expert-capacity-factor is set").
    if (p.moe.capacity_factor) f.add("--moe-expert-capacity-factor", real(*p.moe.capacity_factor));
    if (p.moe.pad_to_capacity) f.add("--moe-pad-expert-input-to-capacity");
    if (p.moe.load_imbalance != 1.0)
      notes.push_back("moe.load_imbalance=" + real(p.moe.load_imbalance) +
                      ": how the router spreads tokens in the run, not a setting Megatron-LM takes");
  }
  if (const std::string freq = megatron_moe_layer_freq(m); !freq.empty()) f.add("--moe-layer-freq", "'" + freq + "'");
  // arguments.py, _add_mtp_args: --mtp-num-layers, "D sequential modules
  // to predict D additional tokens" (default None: none).
  if (m.mtp_layers > 0) f.add("--mtp-num-layers", m.mtp_layers);
  if (const std::string w = megatron_window_size(m); !w.empty()) {
    f.add("--window-size", w);
    if (m.attention_window->global_every) f.add("--window-attn-skip-freq", *m.attention_window->global_every);
  }
  // arguments.py's --attention-backend: flash (FlashAttention through
  // Transformer Engine), fused (cuDNN's), unfused.
  f.add("--attention-backend", std::string(im.attention == AttentionKernel::Flash   ? "flash"
                                           : im.attention == AttentionKernel::Cudnn ? "fused"
                                                                                    : "unfused"));
  if (!im.fused_elementwise) {
    f.add(m.mlp == cost::MlpKind::Swiglu ? "--no-bias-swiglu-fusion" : "--no-bias-gelu-fusion");
    f.add("--no-bias-dropout-fusion");
    f.add("--no-masked-softmax-fusion");
    if (m.position_embedding == cost::PositionEmbedding::Rope) f.add("--no-rope-fusion");
  }
  notes.push_back("vocabulary " + str(m.vocab) +
                  ": comes from the tokenizer (--tokenizer-type, --vocab-size with "
                  "NullTokenizer; padded to --make-vocab-size-divisible-by)");
  common_unsupported(p, E, un);

  std::string out = "# Megatron-LM pretrain_gpt.py flags: " + plan_summary(sc) + "\n";
  out += "# world size " + str(p.gpus()) + " = dp " + str(p.dp) + " x tp " + str(p.tp) + " x pp " +
         str(p.pp) + " x cp " + str(p.cp) +
         "; add data, tokenizer, learning-rate and checkpoint flags (not part of a plan)\n";
  for (const auto& n : notes) out += "# note: " + comment_safe(n) + "\n";
  for (const auto& u : un) out += "# not expressible in Megatron-LM: " + comment_safe(u) + "\n";
  for (std::size_t i = 0; i < f.items.size(); ++i)
    out += f.items[i] + (i + 1 < f.items.size() ? " \\\n" : "\n");
  ex.text = std::move(out);
  return ex;
}

// ------------------------------------------------------------------ DeepSpeed

Exported export_deepspeed(const Scenario& sc) {
  const Plan& p = sc.plan;
  const auto& im = p.implementation;
  Exported ex;
  auto& un = ex.unsupported;
  auto& notes = ex.notes;
  const std::string E = "DeepSpeed";
  no_train_metrics(im, E, un);
  if (p.moe.capacity_factor)
    un.push_back("moe.capacity_factor (DeepSpeed's MoE layer takes capacity_factor in the model code, "
                 "deepspeed.moe.layer.MoE; ds_config.json has no key for it)");
  nlohmann::ordered_json j;

  j["train_batch_size"] = sc.batch.global;
  j["train_micro_batch_size_per_gpu"] = sc.batch.micro;
  j["gradient_accumulation_steps"] = strategies::microbatches(p, sc.batch);

  switch (p.precision) {
    case Precision::BF16: j["bf16"] = {{"enabled", true}}; break;
    case Precision::FP16: j["fp16"] = {{"enabled", true}}; break;
    case Precision::FP8:
    case Precision::FP4:
      j["bf16"] = {{"enabled", true}};
      un.push_back("precision=" + std::string(enum_name(p.precision)) +
                   " (DeepSpeed's config has no FP8 or FP4 training mode; such GEMMs come "
                   "from Transformer Engine layers in the model code; bf16 emitted)");
      break;
    case Precision::FP32: break;
  }
  if (is_mixed(p)) {
    const char* dtype = im.fp32_grad_accumulation ? "fp32"
                        : p.precision == Precision::FP16 ? "fp16"
                                                         : "bf16";
    j["data_types"] = {{"grad_accum_dtype", dtype}};
    // The dtype of the gradients' reduction where the plan sets it
    // (deepspeed/runtime/config.py get_communication_data_type; left out,
    // DeepSpeed derives it from the other settings).
    if (im.grad_reduce_dtype != strategies::GradReduceDtype::Accumulation)
      j["communication_data_type"] = std::string(enum_name(im.grad_reduce_dtype));
  }

  // Buckets are counted in elements: Strata's 25 MiB gradient bucket over
  // the bytes of one reduced gradient (and, for the parameter all-gather,
  // one 16- or 32-bit parameter).
  const Bytes bucket = strategies::MemoryRules{}.grad_bucket_bytes;
  const Bytes param_bytes = is_mixed(p) ? 2 : 4;
  nlohmann::ordered_json z;
  z["stage"] = p.zero;
  z["overlap_comm"] = im.overlap_grad_reduce;
  z["contiguous_gradients"] = true;
  z["reduce_scatter"] = true;
  z["reduce_bucket_size"] = bucket / static_cast<Bytes>(strategies::reduced_grad_bytes(p));
  // ZeRO-3 copies every gradient into its reduce bucket (stage3.py's
  // __ipg_bucket_flat_buffer); staging each module's gradient whole is
  // FSDP's, which DeepSpeed cannot do.
  if (strategies::implementation_acts(strategies::ImplKey::Zero3ReduceBucket, p)) {
    if (im.zero3_reduce_bucket > 0)
      z["reduce_bucket_size"] = im.zero3_reduce_bucket;
    else
      un.push_back("implementation.zero3_reduce_bucket=0 (each module's gradient staged whole for its own "
                   "reduce-scatter, as PyTorch FSDP does; DeepSpeed's ZeRO-3 copies every gradient into a "
                   "reduce_bucket_size bucket: set zero3_reduce_bucket to the bucket's elements)");
  }
  // ... handles each parameter rank by rank, copying it out of the gather's
  // flat buffer (partition_parameters.py AllGatherCoalescedHandle.wait) ...
  if (strategies::implementation_acts(strategies::ImplKey::Zero3HostPerRank, p)) {
    if (!im.zero3_host_per_rank)
      un.push_back("implementation.zero3_host_per_rank=false (DeepSpeed's ZeRO-3 splits every gathered parameter "
                   "out of its all-gather with a narrow per rank and slices every gradient per rank for its "
                   "reduce-scatter: zero3_host_per_rank=true)");
    if (!im.zero3_gather_copy_out)
      un.push_back("implementation.zero3_gather_copy_out=false (DeepSpeed's ZeRO-3 copies every gathered "
                   "parameter out of the all-gather's flat buffer, torch.cat: zero3_gather_copy_out=true)");
  }
  // ... and gathers parameters through its coordinator.
  if (strategies::implementation_acts(strategies::ImplKey::Zero3MaxLive, p)) {
    if (im.zero3_max_live > 0) {
      z["stage3_max_live_parameters"] = im.zero3_max_live;
      z["stage3_prefetch_bucket_size"] = im.zero3_prefetch_bucket;
      z["stage3_max_reuse_distance"] = im.zero3_reuse_distance;
    } else {
      un.push_back("implementation.zero3_max_live=0 (a layer gathered and the next prefetched, as PyTorch FSDP "
                   "does; DeepSpeed's ZeRO-3 gathers through its parameter coordinator: set zero3_max_live, "
                   "zero3_prefetch_bucket and zero3_reuse_distance)");
    }
  }
  z["allgather_partitions"] = true;
  z["allgather_bucket_size"] = bucket / param_bytes;
  if (p.offload.optimizer != OffloadTarget::None) {
    if (p.zero == 0) {
      un.push_back("offload.optimizer=" + std::string(enum_name(p.offload.optimizer)) +
                   " with zero=0 (DeepSpeed offloads the optimizer with ZeRO stage 1, 2 or 3)");
    } else {
      nlohmann::ordered_json o;
      o["device"] = p.offload.optimizer == OffloadTarget::Nvme ? "nvme" : "cpu";
      if (p.offload.optimizer == OffloadTarget::Nvme) o["nvme_path"] = "/local_nvme";
      o["pin_memory"] = true;
      z["offload_optimizer"] = o;
      if (p.offload.optimizer == OffloadTarget::Nvme)
        notes.push_back("offload_optimizer.nvme_path is DeepSpeed's default /local_nvme: set "
                        "it to the NVMe mount");
    }
  }
  if (p.offload.weights) {
    if (p.zero != 3) {
      un.push_back("offload.weights=true with zero=" + str(p.zero) +
                   " (DeepSpeed offloads parameters with ZeRO stage 3 only, offload_param)");
    } else {
      nlohmann::ordered_json o;
      const bool nvme = p.offload.weights_target == OffloadTarget::Nvme;
      o["device"] = nvme ? "nvme" : "cpu";
      if (nvme) o["nvme_path"] = "/local_nvme";
      o["pin_memory"] = true;
      z["offload_param"] = o;
    }
  }
  j["zero_optimization"] = z;

  if (p.recompute != Recompute::None) {
    if (p.recompute == Recompute::Optimal) {
      un.push_back("recompute=optimal (DeepSpeed checkpoints what the model code wraps in "
                   "deepspeed.checkpointing.checkpoint; it has no memory-budget solver)");
    } else if (p.recompute == Recompute::SelectiveOp) {
      un.push_back("recompute=selective_op (torchtitan's op-level save list; "
                   "deepspeed.checkpointing.checkpoint reruns whole wrapped modules)");
    } else {
      j["activation_checkpointing"] = {
          {"partition_activations", p.partition_activations},
          {"cpu_checkpointing", p.offload.activations},
          {"contiguous_memory_optimization", false}};
      std::string what = p.recompute == Recompute::Selective ? "the attention core of each layer"
                         : p.recompute == Recompute::Full     ? "each transformer layer"
                         : p.recompute == Recompute::EveryNth ? "every " + str(p.recompute_k) + "-th layer"
                                                              : "segments of " +
                                                                    str(recompute_segment(sc)) +
                                                                    " layers";
      notes.push_back("recompute=" + std::string(enum_name(p.recompute)) +
                      ": the model code wraps " + what +
                      " in deepspeed.checkpointing.checkpoint; activation_checkpointing only "
                      "tunes it");
    }
  }
  if (p.offload.activations && (p.recompute == Recompute::None || p.recompute == Recompute::Optimal))
    un.push_back("offload.activations=true without recompute (DeepSpeed moves activation "
                 "checkpoints to the CPU, cpu_checkpointing, not every saved activation)");
  if (p.offload.activations && p.offload.planner != OffloadPlanner::All)
    un.push_back("offload.planner=" + std::string(enum_name(p.offload.planner)) +
                 " (DeepSpeed moves every checkpoint or none)");

  nlohmann::ordered_json opt;
  switch (p.optimizer) {
    case Optimizer::Adam:
      // DeepSpeed's Adam decouples weight decay unless adam_w_mode is false.
      opt = {{"type", "Adam"}, {"params", {{"adam_w_mode", false}}}};
      break;
    case Optimizer::AdamW: opt = {{"type", "AdamW"}, {"params", nlohmann::ordered_json::object()}}; break;
    case Optimizer::Lamb: opt = {{"type", "Lamb"}, {"params", nlohmann::ordered_json::object()}}; break;
    case Optimizer::Sgd: opt = {{"type", "SGD"}, {"params", {{"momentum", 0.0}}}}; break;
    case Optimizer::Momentum: opt = {{"type", "SGD"}, {"params", {{"momentum", 0.9}}}}; break;
    default:
      un.push_back("optimizer=" + std::string(enum_name(p.optimizer)) +
                   " (DeepSpeed's optimizer types are Adam, AdamW, Lamb, Muon and torch.optim's; "
                   "pass a client optimizer to deepspeed.initialize instead)");
  }
  if (!opt.is_null()) j["optimizer"] = opt;
  if (!opt.is_null())
    notes.push_back("optimizer.params holds what the plan fixes; add the learning rate, betas "
                    "and weight decay");

  // Model parallelism lives in the model code, not in ds_config.json.
  if (p.tp > 1)
    notes.push_back("tp=" + str(p.tp) + (p.sequence_parallel ? " with sequence parallelism" : "") +
                    ": tensor parallelism comes from the model code (a Megatron-style model "
                    "passed as mpu to deepspeed.initialize)");
  if (p.pp > 1) {
    notes.push_back("pp=" + str(p.pp) +
                    ": pipeline parallelism comes from deepspeed.pipe.PipelineModule(layers, "
                    "num_stages=" + str(p.pp) + "), not from ds_config.json");
    if (p.schedule == Schedule::GPipe || p.schedule == Schedule::Interleaved)
      un.push_back("schedule=" + std::string(enum_name(p.schedule)) +
                   " (DeepSpeed's pipeline engine runs its own 1F1B TrainSchedule)");
    if (!p.stage_layers.empty())
      notes.push_back("stage_layers [" + join(p.stage_layers) +
                      "]: give PipelineModule partition_method=\"type:...\" or split by hand");
    else if (p.pipeline_layout == strategies::PipelineLayout::EmbeddingHeadAsLayers)
      notes.push_back("pipeline_layout embedding_head_as_layers: PipelineModule(partition_method=\"uniform\") "
                      "over a layer list holding the embedding and the head as layers of their own");
  }
  if (p.cp > 1)
    un.push_back("cp=" + str(p.cp) + " (DeepSpeed's sequence parallelism is Ulysses all-to-all, "
                 "not ring attention)");
  if (p.ep > 1)
    notes.push_back("ep=" + str(p.ep) + ": expert parallelism comes from deepspeed.moe.layer.MoE("
                    "ep_size=" + str(p.ep) + ") in the model code");
  if (im.rank_order != std::array{ParallelDim::TP, ParallelDim::CP, ParallelDim::DP,
                                  ParallelDim::PP})
    notes.push_back("implementation.rank_order=" + rank_order_text(p) +
                    ": the rank layout is the model code's process-group setup");
  common_unsupported(p, E, un);
  ex.text = j.dump(2) + "\n";
  return ex;
}

// ----------------------------------------------------------------- torchtitan

Exported export_torchtitan(const Scenario& sc) {
  const Plan& p = sc.plan;
  const auto& im = p.implementation;
  Exported ex;
  auto& un = ex.unsupported;
  auto& notes = ex.notes;
  const std::string E = "torchtitan";
  std::ostringstream par, train, ac, model, opt;
  auto q = [](std::string_view s) { return "\"" + std::string(s) + "\""; };
  if (p.moe.capacity_factor)
    un.push_back("moe.capacity_factor (torchtitan's MoE routes without dropping tokens)");
  if (p.partition_activations)
    un.push_back("partition_activations (torchtitan's checkpointing keeps each wrapped block's input whole; its "
                 "tensor parallelism splits it by sequence instead)");

  // --- [parallelism] ---
  // torchtitan applies FSDP over dp_shard x cp (the flattened "dp_shard_cp"
  // mesh) whenever either is above 1 (torchtitan/distributed/parallel_dims.py
  // fsdp_enabled; models/llama3/infra/parallelize.py apply_fsdp), so with
  // context parallelism the state is always sharded.
  std::int64_t replicate = 1, shard = 1;
  switch (p.zero) {
    case 0:
      replicate = p.dp;
      if (p.cp > 1)
        un.push_back("zero=0 with cp=" + str(p.cp) +
                     " (torchtitan shards parameters, gradients and optimizer state over "
                     "data_parallel_shard_degree x context_parallel_degree whenever context "
                     "parallelism is on: zero 2 or 3)");
      break;
    case 1:
      shard = p.dp;
      if (p.dp * p.cp > 1)
        un.push_back("zero=1 (torchtitan's FSDP shards parameters and gradients too; "
                     "data_parallel_shard_degree with fsdp_reshard_after_forward = \"never\", "
                     "ZeRO-2, comes nearest and is emitted)");
      break;
    default: shard = p.dp;
  }
  if (p.zero >= 2 && p.dp * p.cp == 1)
    notes.push_back("zero=" + str(p.zero) + " with one data-parallel rank: torchtitan applies no FSDP "
                    "(nothing to shard), as zero 0");
  par << "data_parallel_replicate_degree = " << replicate << "\n";
  par << "data_parallel_shard_degree = " << shard << "\n";
  if (p.zero >= 1 && shard * p.cp > 1)
    par << "fsdp_reshard_after_forward = " << q(p.zero == 3 ? "always" : "never") << "\n";
  par << "tensor_parallel_degree = " << p.tp << "\n";
  if (p.tp > 1 && !p.sequence_parallel)
    un.push_back("sequence_parallel=false with tp=" + str(p.tp) +
                 " (torchtitan's tensor-parallel plan always shards the sequence between "
                 "blocks)");
  if (im.tp_comm_overlap != TpCommOverlap::None) {
    par << "enable_async_tensor_parallel = true\n";
    notes.push_back("implementation.tp_comm_overlap: async tensor parallel works with "
                    "[training] compile = true only");
  }
  par << "pipeline_parallel_degree = " << p.pp << "\n";
  if (p.pp > 1) {
    const char* schedule = p.schedule == Schedule::GPipe         ? "GPipe"
                           : p.schedule == Schedule::Interleaved ? "Interleaved1F1B"
                                                                 : "1F1B";
    par << "pipeline_parallel_schedule = " << q(schedule) << "\n";
    const auto c = chunks(sc);
    if (c.back() > 0) {
      // Split points: the first layer of every chunk but the first.
      par << "pipeline_parallel_split_points = [";
      std::int64_t at = 0;
      for (std::size_t i = 0; i + 1 < c.size(); ++i) {
        at += c[i];
        par << (i ? ", " : "") << q("layers." + str(at));
      }
      par << "]\n";
    } else {
      // The output layer alone in the last chunk has no layer to split
      // before: every chunk's modules by name (ParallelismConfig's
      // module_fqns_per_model_part; torchtitan's Llama modules
      // tok_embeddings, layers.<i>, norm, output).
      par << "module_fqns_per_model_part = [";
      std::int64_t at = 0;
      for (std::size_t k = 0; k < c.size(); ++k) {
        par << (k ? ", " : "") << "[";
        std::vector<std::string> names;
        if (k == 0) names.push_back("tok_embeddings");
        for (std::int64_t i = 0; i < c[k]; ++i) names.push_back("layers." + str(at + i));
        at += c[k];
        if (k + 1 == c.size()) {
          names.push_back("norm");
          names.push_back("output");
        }
        for (std::size_t i = 0; i < names.size(); ++i) par << (i ? ", " : "") << q(names[i]);
        par << "]";
      }
      par << "]\n";
    }
    par << "pipeline_parallel_microbatch_size = " << sc.batch.micro << "\n";
  }
  par << "context_parallel_degree = " << p.cp << "\n";
  if (p.cp > 1) {
    // torch.distributed's context parallelism: "allgather" (_AllGatherRotater,
    // cp_comm all_gather_ring) or "alltoall", the ring (_AllToAllRotater,
    // as cp_comm p2p prices it). Transformer Engine's exposed all-gather
    // and reduce-scatter (all_gather) is neither: the closer, allgather,
    // is written and the plan's value listed.
    par << "context_parallel_rotate_method = " << q(im.cp_comm == strategies::CpComm::P2p ? "alltoall" : "allgather")
        << "\n";
    if (im.cp_comm == strategies::CpComm::AllGather)
      un.push_back("implementation.cp_comm=all_gather (Transformer Engine's exposed K/V all-gather and gradient "
                   "reduce-scatter; torchtitan's allgather rotation, written, gathers beside the first "
                   "sub-attention and passes the gradients round the ring: cp_comm all_gather_ring)");
  }
  if (sc.model.moe || p.ep > 1) par << "expert_parallel_degree = " << p.ep << "\n";
  if (im.rank_order != std::array{ParallelDim::TP, ParallelDim::CP, ParallelDim::DP,
                                  ParallelDim::PP})
    un.push_back("implementation.rank_order=" + rank_order_text(p) +
                 " (torchtitan's device mesh is pp, dp_replicate, dp_shard, cp, tp from "
                 "outermost to innermost)");
  if (im.fp8_param_gather)
    un.push_back("implementation.fp8_param_gather=true (Megatron-Core's FP8 parameters; torchtitan's float8 "
                 "all-gather is FSDP's, enable_fsdp_float8_all_gather, for zero 3)");
  if (!im.overlap_grad_reduce)
    un.push_back("implementation.overlap_grad_reduce=false (torchtitan's FSDP and DDP always "
                 "overlap gradient reduction with backward)");
  if (im.sp_regather_input && strategies::implementation_acts(strategies::ImplKey::SpRegatherInput, p))
    un.push_back("implementation.sp_regather_input=true (torchtitan's DTensor linears keep their all-gathered "
                 "input: sp_regather_input=false)");
  if (im.zero3_reduce_bucket > 0 && strategies::implementation_acts(strategies::ImplKey::Zero3ReduceBucket, p))
    un.push_back("implementation.zero3_reduce_bucket=" + str(im.zero3_reduce_bucket) +
                 " (torchtitan's FSDP2 stages each module's gradient whole for its own reduce-scatter: "
                 "zero3_reduce_bucket=0)");
  if (im.zero3_max_live > 0 && strategies::implementation_acts(strategies::ImplKey::Zero3MaxLive, p))
    un.push_back("implementation.zero3_max_live=" + str(im.zero3_max_live) +
                 " (torchtitan's FSDP2 gathers a block and prefetches the next: zero3_max_live=0)");
  if (im.zero3_host_per_rank && strategies::implementation_acts(strategies::ImplKey::Zero3HostPerRank, p))
    un.push_back("implementation.zero3_host_per_rank=true (torchtitan's FSDP2 splits a gather with one "
                 "split_with_sizes_copy whatever the ranks: zero3_host_per_rank=false)");
  if (p.tp > 1 && im.tp_grad_overlap)
    un.push_back("implementation.tp_grad_overlap=true (DTensor reduce-scatters a linear's input gradient after "
                 "the backward that also computes its weight gradient: tp_grad_overlap=false)");
  if (p.zero >= 1 && !im.overlap_param_gather)
    un.push_back("implementation.overlap_param_gather=false (torchtitan's FSDP always "
                 "prefetches parameters)");
  if (p.pp > 1 && im.overlap_p2p)
    notes.push_back("implementation.overlap_p2p: torch.distributed.pipelining overlaps its "
                    "sends by itself; there is no key for it");

  // --- [training] ---
  // Without pipelining, local_batch_size is one microbatch per data-parallel
  // rank and the rest of the global batch is gradient accumulation; with
  // pipelining it is the rank's whole share, cut into microbatches.
  const std::int64_t local = p.pp > 1 ? sc.batch.global / p.dp : sc.batch.micro;
  train << "local_batch_size = " << local << "\n";
  train << "global_batch_size = " << sc.batch.global << "\n";
  train << "seq_len = " << sc.model.seq_len << "\n";
  switch (p.precision) {
    case Precision::BF16:
    case Precision::FP8: train << "mixed_precision_param = " << q("bfloat16") << "\n"; break;
    case Precision::FP4:
      train << "mixed_precision_param = " << q("bfloat16") << "\n";
      un.push_back("precision=fp4 (torchtitan's converters are float8 and mx's MXFP8, not NVFP4; "
                   "bfloat16 emitted)");
      break;
    case Precision::FP32: train << "mixed_precision_param = " << q("float32") << "\n"; break;
    case Precision::FP16:
      train << "mixed_precision_param = " << q("bfloat16") << "\n";
      un.push_back("precision=fp16 (torchtitan's mixed_precision_param is bfloat16 or float32; "
                   "bfloat16 emitted)");
      break;
  }
  // FSDP2's MixedPrecisionPolicy(reduce_dtype): the reduction's dtype; the
  // sharded gradients keep the sharded parameters' fp32 whatever it is.
  if (is_mixed(p))
    train << "mixed_precision_reduce = " << q(strategies::reduced_grad_bytes(p) == 4 ? "float32" : "bfloat16")
          << "\n";
  if (is_mixed(p) && !im.fp32_grad_accumulation)
    notes.push_back("implementation.fp32_grad_accumulation=false: torchtitan keeps the sharded gradients "
                    "in float32, its sharded parameters' dtype (FSDP2)");
  if (p.offload.weights && p.offload.weights_target == OffloadTarget::Nvme) {
    un.push_back("offload.weights=nvme (torchtitan's enable_cpu_offload keeps parameters in CPU memory, "
                 "not on NVMe)");
  } else if (p.offload.weights && p.offload.optimizer == OffloadTarget::Cpu && p.zero >= 1) {
    train << "enable_cpu_offload = true\n";
  } else if (p.offload.weights || p.offload.optimizer != OffloadTarget::None) {
    un.push_back("offload.weights=" + std::string(p.offload.weights ? "true" : "false") +
                 " with offload.optimizer=" + std::string(enum_name(p.offload.optimizer)) +
                 " and zero=" + str(p.zero) +
                 " (torchtitan's enable_cpu_offload moves parameters, gradients and optimizer "
                 "state to CPU memory together, with FSDP)");
  }
  // Fused elementwise ops are what torch.compile makes of the blocks; eager
  // (compile off, torchtitan's default) runs the reference composites.
  if (im.tp_comm_overlap != TpCommOverlap::None || im.fused_elementwise)
    train << "compile = true\n";

  // --- [activation_checkpoint] ---
  switch (p.recompute) {
    case Recompute::None: ac << "mode = " << q("none") << "\n"; break;
    case Recompute::Full: ac << "mode = " << q("full") << "\n"; break;
    case Recompute::EveryNth:
      ac << "mode = " << q("selective") << "\n";
      ac << "selective_ac_option = " << q(std::to_string(p.recompute_k)) << "\n";
      break;
    case Recompute::SelectiveOp:
      ac << "mode = " << q("selective") << "\n";
      ac << "selective_ac_option = " << q("op") << "\n";
      break;
    case Recompute::Selective:
      ac << "mode = " << q("none") << "\n";
      // Megatron-LM's policy drops the attention scores; under flash
      // attention there are none and it keeps everything, as mode none.
      if (cost::fused_attention(p.implementation.attention))
        notes.push_back("recompute=selective: Megatron-LM's attention-core policy keeps "
                        "everything under flash attention, as mode = \"none\" (torchtitan's "
                        "op-level policy is recompute selective_op)");
      else
        un.push_back("recompute=selective with standard attention (torchtitan reruns no "
                     "attention core alone; its op-level policy is recompute selective_op)");
      break;
    default:
      ac << "mode = " << q("none") << "\n";
      un.push_back("recompute=" + std::string(enum_name(p.recompute)) +
                   " (torchtitan checkpoints every layer, every n-th layer or chosen ops, not "
                   "segments of several layers; mode = \"full\" comes nearest; \"none\" emitted)");
  }
  if (p.offload.activations)
    un.push_back("offload.activations=true (torchtitan's config has no activation offload)");

  // --- [model], [optimizer] ---
  std::ostringstream converters, float8;
  if (p.precision == Precision::FP8) {
    converters << "converters = [" << q("float8") << "]\n";
    // torchao's Float8Linear scales dynamically, per tensor by default
    // (torchtitan's [float8] recipe_name: "tensorwise", "rowwise",
    // "rowwise_with_gw_hp" or none); Transformer Engine's delayed, block
    // and MXFP8 recipes are not its.
    if (p.fp8_recipe == cost::Fp8Recipe::Rowwise)
      float8 << "recipe_name = " << q("rowwise") << "\n";
    else if (p.fp8_recipe != cost::Fp8Recipe::Tensorwise)
      un.push_back("fp8_recipe=" + std::string(enum_name(p.fp8_recipe)) +
                   " (torchtitan's float8 converter is torchao's, which scales each tensor or each row from "
                   "itself: fp8_recipe \"tensorwise\", emitted)");
    if (p.bf16_first_layers > 0 || p.bf16_last_layers > 0)
      un.push_back("bf16_layers (torchtitan's float8 converter skips modules by name, filter_fqns, not the first "
                   "and last blocks by number: every block converted)");
  }
  switch (p.optimizer) {
    case Optimizer::Adam: opt << "name = " << q("Adam") << "\n"; break;
    case Optimizer::AdamW: opt << "name = " << q("AdamW") << "\n"; break;
    default:
      un.push_back("optimizer=" + std::string(enum_name(p.optimizer)) +
                   " (torchtitan builds Adam or AdamW)");
  }
  if (!cost::fused_attention(im.attention))
    un.push_back("implementation.attention=standard (torchtitan's models use fused scaled "
                 "dot-product attention)");
  no_train_metrics(im, E, un);
  // torchtitan's loss is PyTorch's cross_entropy of the fp32 logits, under
  // loss_parallel whenever tp > 1 unless disable_loss_parallel is set
  // (torchtitan ParallelDims.loss_parallel_enabled).
  const bool loss_parallel = im.cross_entropy == strategies::CrossEntropy::Parallel;
  if (p.tp > 1 && im.cross_entropy == strategies::CrossEntropy::Unfused)
    par << "disable_loss_parallel = true\n";
  else if (p.tp > 1 ? !loss_parallel : im.cross_entropy != strategies::CrossEntropy::Unfused)
    un.push_back("implementation.cross_entropy=" + std::string(enum_name(im.cross_entropy)) +
                 " (torchtitan's loss is PyTorch's cross_entropy of the fp32 logits: cross_entropy=unfused, "
                 "under loss_parallel with tensor parallelism: cross_entropy=parallel)");
  if (p.zero == 0 && (p.tp > 1 || p.pp > 1 || p.cp > 1) && p.dp > 1)
    notes.push_back("zero=0 with tp, pp or cp: torchtitan's DDP is one-dimensional; with other "
                    "parallelisms use zero 2 or 3 (FSDP)");
  common_unsupported(p, E, un);

  std::string out = "# torchtitan JobConfig (torchtitan/config/job_config.py): " +
                    plan_summary(sc) + "\n";
  const auto* known = known_model(sc.model);
  if (known && *known->torchtitan_name) {
    // torchtitan/models/llama3/__init__.py: model_registry(flavor), name "llama3".
    model << "name = " << q(known->torchtitan_name) << "\n";
    model << "flavor = " << q(known->torchtitan_flavor) << "\n";
  } else {
    out += "# [model] name and flavor: the torchtitan flavor with " + str(sc.model.layers) +
           " layers, hidden " + str(sc.model.hidden) + ", " + str(sc.model.heads) + " heads (" +
           str(sc.model.kv_heads) + " kv heads), ffn " + str(sc.model.ffn_hidden) + ", vocabulary " +
           str(sc.model.vocab) + "\n";
  }
  for (const auto& n : notes) out += "# note: " + comment_safe(n) + "\n";
  for (const auto& u : un) out += "# not expressible in torchtitan: " + comment_safe(u) + "\n";
  out += "\n[parallelism]\n" + par.str();
  out += "\n[training]\n" + train.str();
  out += "\n[activation_checkpoint]\n" + ac.str();
  model << converters.str();
  if (!model.str().empty()) out += "\n[model]\n" + model.str();
  if (!opt.str().empty()) out += "\n[optimizer]\n" + opt.str();
  if (!float8.str().empty()) out += "\n[float8]\n" + float8.str();
  ex.text = std::move(out);
  return ex;
}

std::string_view export_stack_name(ExportTarget target) {
  switch (target) {
    // The versions the renderers' names were checked against (docs/export.md).
    case ExportTarget::Megatron: return "megatron-lm-2025";
    case ExportTarget::DeepSpeed: return "deepspeed";
    case ExportTarget::TorchTitan: return "torchtitan";
  }
  return "";
}

strategies::Stack engine_stack(const Scenario& sc, ExportTarget target) {
  if (sc.stack && sc.stack->engine == enum_name(target)) return *sc.stack;
  return strategies::bundled_stack(export_stack_name(target));
}

Exported export_plan(const Scenario& sc, ExportTarget target) {
  const strategies::Stack st = engine_stack(sc, target);
  if (auto v = strategies::launch_violation(st, sc.plan))
    throw InputError(sc.file, v->path,
                     v->message + " [" + v->rule + "; strata export --to " +
                         std::string(enum_name(target)) + " refuses what the engine cannot run]");
  // The engine's own defaults for what the scenario does not set itself:
  // Strata's defaults (or another engine's stack) are not this engine's.
  Scenario run = sc;
  std::vector<std::string> defaults;
  if (!sc.stack || sc.stack->name != st.name) {
    strategies::apply_stack(st, run.plan, sc.implementation_keys);
    for (const auto& [key, name] : EnumNames<strategies::ImplKey>::table) {
      const auto before = strategies::implementation_value(sc.plan.implementation, key);
      const auto after = strategies::implementation_value(run.plan.implementation, key);
      if (before != after && strategies::implementation_acts(key, sc.plan))
        defaults.push_back("implementation." + std::string(name) + " = " +
                           strategies::implementation_text(key, after) + ", " +
                           std::string(engine_name(target)) + "'s default (the plan had " +
                           strategies::implementation_text(key, before) +
                           (sc.stack ? " from stack " + sc.stack->name : std::string(", Strata's default")) +
                           // The host's dispatch cost, the loss kernel (but
                           // torchtitan's disable_loss_parallel with tp), the
                           // trainer's metrics, what FSDP keeps of its root module, how it lays out
                           // what it gathers and reduces, and what a
                           // tensor-parallel linear keeps and overlaps are
                           // the framework's own, not flags.
                           (key == strategies::ImplKey::HostDispatch ||
                                    (key == strategies::ImplKey::CrossEntropy &&
                                     !(target == ExportTarget::TorchTitan && sc.plan.tp > 1)) ||
                                    key == strategies::ImplKey::Zero3RootUnsharded ||
                                    key == strategies::ImplKey::SpRegatherInput ||
                                    (key == strategies::ImplKey::TpGradOverlap && target == ExportTarget::TorchTitan) ||
                                    key == strategies::ImplKey::Zero3FlatGrads ||
                                    key == strategies::ImplKey::Zero3HostPerRank ||
                                    key == strategies::ImplKey::Zero3GatherCopyOut ||
                                    key == strategies::ImplKey::TrainMetricPasses
                                ? "; no flag sets it: simulate with \"stack\": \""
                            : key == strategies::ImplKey::Allocator
                                ? "; the launch's environment sets it (below): simulate with \"stack\": \""
                                : "; set it in plan.implementation to export it, or simulate with \"stack\": \"") +
                           st.name + "\" to predict what the engine runs)");
    }
  }
  Exported ex;
  switch (target) {
    case ExportTarget::Megatron: ex = export_megatron(run); break;
    case ExportTarget::DeepSpeed: ex = export_deepspeed(run); break;
    case ExportTarget::TorchTitan: ex = export_torchtitan(run); break;
  }
  ex.rendered = run.plan;
  // The allocator is configured by the launch's environment, not a flag.
  if (run.plan.implementation.allocator == sim::AllocatorMode::ExpandableSegments)
    defaults.push_back("launch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (implementation.allocator)");
  if (!defaults.empty()) {
    // Notes first in the text's comment header as in `notes`.
    std::string header;
    if (target != ExportTarget::DeepSpeed)
      for (const auto& d : defaults) header += "# note: " + comment_safe(d) + "\n";
    const auto nl = ex.text.find('\n');
    if (target != ExportTarget::DeepSpeed && nl != std::string::npos)
      ex.text.insert(nl + 1, header);
    ex.notes.insert(ex.notes.begin(), defaults.begin(), defaults.end());
  }
  return ex;
}

std::string_view engine_name(ExportTarget target) {
  switch (target) {
    case ExportTarget::Megatron: return "Megatron-LM";
    case ExportTarget::DeepSpeed: return "DeepSpeed";
    case ExportTarget::TorchTitan: return "torchtitan";
  }
  return "";
}

// ------------------------------------------------------------------ reading

strategies::Scenario load_export_scenario(const std::string& path, std::size_t rank,
                                          const std::string& scenario_override) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) throw InputError(path, "", "file not found");
  if (!fs::is_directory(path)) {
    if (!scenario_override.empty())
      throw InputError(path, "", "--scenario applies to an explore directory, not a scenario file");
    if (rank != 1)
      throw InputError(path, "", "--rank applies to an explore directory, not a scenario file");
    auto sc = strategies::load_scenario(path);
    if (sc.space) strategies::require_valid_plan(sc);
    return sc;
  }

  const std::string summary_path = (fs::path(path) / "summary.json").string();
  if (!fs::exists(summary_path))
    throw InputError(summary_path, "",
                     "file not found: " + path + " is neither a scenario file nor an explore "
                     "output directory");
  const auto summary = load_json_file(summary_path);
  const JsonReader s(summary, summary_path);
  if (!s.is_object()) s.fail("an explore summary must be a JSON object");
  const JsonReader top = s.at("top");
  const auto records = top.elements();
  if (rank < 1) top.fail("--rank counts from 1 (the best plan by throughput)");
  if (records.empty()) top.fail("no plan was scored: there is nothing to export");
  if (rank > records.size())
    top.fail("holds " + std::to_string(records.size()) + " plans; --rank " +
             std::to_string(rank) + " asks for plan " + std::to_string(rank) +
             " (explore --top K keeps more)");
  // The directory is checked as `strata report` checks it (manifest,
  // scenario copy, records, the shown plans re-scored), under a shared lock,
  // and the summary's top list must be the one its records give: a plan
  // edited into summary.json is not exported.
  const DirReadLock lock(path);
  const CheckedDir checked = check_explore_dir(path, {});
  for (std::size_t i = 0; i < records.size(); ++i) {
    const JsonReader id_at = records[i].at("plan_id");
    const std::string id_text = id_at.as_string();
    const auto id = strategies::parse_plan_id(id_text);
    const nlohmann::json& b = records[i].at("batch").json();
    const nlohmann::json& p = records[i].at("plan").json();
    if (!id || strategies::fnv1a64(nlohmann::json{{"batch", b}, {"plan", p}}.dump()) != *id)
      id_at.fail("is not the id of the record's batch and plan: the summary was not written by strata explore");
    if (i >= checked.top.size() || checked.top[i].plan_id != *id)
      id_at.fail("is " + id_text + ", and the directory's records rank " +
                 (i < checked.top.size() ? "plan " + strategies::plan_id_hex(checked.top[i].plan_id)
                                         : std::string("no plan")) +
                 " there: the summary is not of the records beside it");
  }
  if (records.size() != checked.top.size())
    top.fail("holds " + std::to_string(records.size()) + " plans, and the directory's records give " +
             std::to_string(checked.top.size()) + ": the summary is not of the records beside it");
  const JsonReader record = records[rank - 1];
  const JsonReader plan = record.at("plan");
  const JsonReader batch = record.at("batch");
  if (!plan.is_object()) plan.fail("must be a JSON object");
  if (!batch.is_object()) batch.fail("must be a JSON object");

  // The explored scenario: --scenario, else the copy explore keeps in DIR,
  // else the path the summary records. Relative paths inside it resolve
  // against the original scenario's directory when that is still there (as
  // `strata report` does), else against the file read.
  std::string scenario_path = scenario_override;
  std::string base_dir;
  if (!scenario_path.empty()) {
    if (!fs::exists(scenario_path))
      throw InputError(scenario_path, "", "file not found (--scenario)");
  } else {
    const JsonReader recorded_at = s.at("scenario");
    const std::string recorded = recorded_at.as_string();
    const std::string copy = (fs::path(path) / "scenario.json").string();
    if (fs::exists(copy)) {
      scenario_path = copy;
      const auto original_dir = fs::path(recorded).parent_path();
      if (!recorded.empty() && fs::is_directory(original_dir)) base_dir = original_dir.string();
    } else if (!recorded.empty() && fs::exists(recorded)) {
      scenario_path = recorded;
    } else {
      recorded_at.fail("neither " + copy + " nor the explored scenario \"" + recorded +
                       "\" is found from here, and the summary holds no model or cluster: "
                       "pass --scenario FILE (the explored scenario)");
    }
  }
  if (base_dir.empty()) base_dir = fs::path(scenario_path).parent_path().string();

  // The explored scenario with the record's plan and batch in place of its
  // own and of its space: read and validated as any scenario.
  auto j = load_json_file(scenario_path);
  if (!j.is_object()) throw InputError(scenario_path, "", "a scenario must be a JSON object");
  j.erase("space");
  j["plan"] = plan.json();
  j["batch"] = batch.json();
  const std::string source = summary_path + " top[" + std::to_string(rank - 1) + "] on " +
                             scenario_path;
  auto sc = strategies::parse_scenario(j.dump(), source, base_dir);
  if (auto m = s.get("model"); m && m->as_string() != sc.model.name)
    m->fail("the directory explored model \"" + m->as_string() + "\", but " + scenario_path +
            " has \"" + sc.model.name + "\"");
  if (auto g = s.get("gpus"); g && g->as_int(0, std::int64_t{1} << 40) != sc.cluster.gpus())
    g->fail("the directory explored " + std::to_string(g->as_int(0, std::int64_t{1} << 40)) +
            " GPUs, but " + scenario_path + " has " + std::to_string(sc.cluster.gpus()));
  return sc;
}

}  // namespace strata::report
