#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "costmodel/model_io.hpp"
#include "sim/limits.hpp"
#include "strategies/convergence_io.hpp"
#include "strategies/scenario.hpp"
#include "strategies/stage_split.hpp"
#include "strategies/stack.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {

namespace {

std::array<ParallelDim, 4> read_rank_order(const JsonReader& r) {
  std::vector<std::string> names;
  if (r.is_string()) {
    std::string s = r.as_string();
    for (auto& ch : s)
      if (ch == '-' || ch == ',') ch = ' ';
    std::istringstream in(s);
    for (std::string w; in >> w;) names.push_back(w);
  } else {
    for (const auto& e : r.elements()) names.push_back(e.as_string());
  }
  const std::string rule = "must be a permutation of tp, cp, dp, pp (innermost first)";
  if (names.size() != 4) r.fail(rule);
  std::array<ParallelDim, 4> order{};
  for (std::size_t i = 0; i < 4; ++i) {
    auto d = enum_from_name<ParallelDim>(names[i]);
    if (!d) r.fail(rule + "; \"" + names[i] + "\" is not one of them");
    for (std::size_t j = 0; j < i; ++j)
      if (order[j] == *d) r.fail(rule + "; \"" + names[i] + "\" appears twice");
    order[i] = *d;
  }
  return order;
}

Implementation read_implementation(const JsonReader& r) {
  Implementation im;
  im.attention = r.enum_or("attention", im.attention);
  im.fused_elementwise = r.bool_or("fused_elementwise", im.fused_elementwise);
  im.cross_entropy = r.enum_or("cross_entropy", im.cross_entropy);
  im.train_metric_passes = r.int_or("train_metric_passes", im.train_metric_passes, 0, kMaxTrainMetricPasses);
  im.overlap_grad_reduce = r.bool_or("overlap_grad_reduce", im.overlap_grad_reduce);
  im.overlap_param_gather = r.bool_or("overlap_param_gather", im.overlap_param_gather);
  im.fp8_param_gather = r.bool_or("fp8_param_gather", im.fp8_param_gather);
  im.allocator = r.enum_or("allocator", im.allocator);
  im.tp_comm_overlap = r.enum_or("tp_comm_overlap", im.tp_comm_overlap);
  im.cp_comm = r.enum_or("cp_comm", im.cp_comm);
  im.pp_scatter_gather = r.bool_or("pp_scatter_gather", im.pp_scatter_gather);
  im.overlap_p2p = r.bool_or("overlap_p2p", im.overlap_p2p);
  im.fp32_grad_accumulation = r.bool_or("fp32_grad_accumulation", im.fp32_grad_accumulation);
  im.grad_reduce_dtype = r.enum_or("grad_reduce_dtype", im.grad_reduce_dtype);
  im.tp_grad_overlap = r.bool_or("tp_grad_overlap", im.tp_grad_overlap);
  im.sp_regather_input = r.bool_or("sp_regather_input", im.sp_regather_input);
  im.grad_accumulation_fusion =
      r.bool_or("grad_accumulation_fusion", im.grad_accumulation_fusion);
  im.host_dispatch_us = r.number_or("host_dispatch_us", im.host_dispatch_us, 0, kMaxHostDispatchUs);
  im.zero3_gather_per_module = r.bool_or("zero3_gather_per_module", im.zero3_gather_per_module);
  im.zero3_root_unsharded = r.bool_or("zero3_root_unsharded", im.zero3_root_unsharded);
  im.zero3_flat_grads = r.bool_or("zero3_flat_grads", im.zero3_flat_grads);
  im.zero3_gather_copy_out = r.bool_or("zero3_gather_copy_out", im.zero3_gather_copy_out);
  im.zero3_persistence_threshold =
      r.int_or("zero3_persistence_threshold", im.zero3_persistence_threshold, 0, kMaxPersistenceThreshold);
  im.zero3_reduce_bucket = r.int_or("zero3_reduce_bucket", im.zero3_reduce_bucket, 0, kMaxReduceBucket);
  im.zero3_host_per_rank = r.bool_or("zero3_host_per_rank", im.zero3_host_per_rank);
  im.zero3_max_live = r.int_or("zero3_max_live", im.zero3_max_live, 0, kMaxReduceBucket);
  im.zero3_prefetch_bucket = r.int_or("zero3_prefetch_bucket", im.zero3_prefetch_bucket, 0, kMaxReduceBucket);
  im.zero3_reuse_distance = r.int_or("zero3_reuse_distance", im.zero3_reuse_distance, 0, kMaxReduceBucket);
  if (auto ro = r.get("rank_order")) im.rank_order = read_rank_order(*ro);
  r.reject_unknown_keys();
  return im;
}

Offload read_offload(const JsonReader& r) {
  Offload o;
  o.activations = r.bool_or("activations", o.activations);
  // true | false, or where they go: "cpu" (as true), "nvme", "none" (as false).
  if (auto w = r.get("weights")) {
    if (w->is_string()) {
      const auto t = w->as_enum<OffloadTarget>();
      o.weights = t != OffloadTarget::None;
      if (o.weights) o.weights_target = t;
    } else {
      o.weights = w->as_bool();
    }
  }
  o.optimizer = r.enum_or("optimizer", o.optimizer);
  o.prefetch_depth = r.int_or("prefetch_depth", o.prefetch_depth, 0, 1024);
  o.planner = r.enum_or("planner", o.planner);
  r.reject_unknown_keys();
  return o;
}

Compression read_compression(const JsonReader& r) {
  Compression c;
  c.method = r.at("method").as_enum<CompressionMethod>();
  using M = CompressionMethod;
  const bool sparse = c.method == M::TopK || c.method == M::RandomK;
  // Each key belongs to some methods; naming it with another is an error.
  auto only = [&](const char* key, bool applies, const char* methods) {
    if (r.has(key) && !applies)
      r.fail_at(key, std::string("applies only to method ") + methods + ", not \"" +
                         std::string(enum_name(c.method)) + "\"");
  };
  only("ratio", sparse, "topk|randomk");
  only("error_feedback", sparse, "topk|randomk");
  only("bits", c.method == M::Qsgd, "qsgd");
  only("rank", c.method == M::PowerSgd, "powersgd");
  if (sparse) {
    c.ratio = r.number_or("ratio", c.ratio, 1e-9, 1.0);
    if (c.ratio <= 0) r.fail_at("ratio", "must be > 0");
    c.error_feedback = r.bool_or("error_feedback", c.error_feedback);
  }
  if (c.method == M::Qsgd) c.bits = r.int_or("bits", c.bits, 1, 16);
  if (c.method == M::PowerSgd) c.rank = r.int_or("rank", c.rank, 1, 65536);
  c.bucketed = r.bool_or("bucketed", c.bucketed);
  r.reject_unknown_keys();
  return c;
}

MoeRouting read_moe_routing(const JsonReader& r) {
  MoeRouting m;
  if (auto c = r.get("capacity_factor")) m.capacity_factor = c->as_number(0.01, 1e3);
  m.pad_to_capacity = r.bool_or("pad_to_capacity", false);
  if (m.pad_to_capacity && !m.capacity_factor)
    r.fail_at("pad_to_capacity", "pads each expert's tokens to its capacity: needs capacity_factor");
  m.load_imbalance = r.number_or("load_imbalance", 1.0, 1.0, 1e3);
  r.reject_unknown_keys();
  return m;
}

Plan read_plan(const JsonReader& r, std::int64_t cluster_gpus) {
  Plan p;
  p.tp = r.int_or("tp", 1, 1, kMaxGpus);
  p.pp = r.int_or("pp", 1, 1, kMaxGpus);
  p.cp = r.int_or("cp", 1, 1, kMaxGpus);
  p.ep = r.int_or("ep", 1, 1, kMaxGpus);
  if (auto dp = r.get("dp")) {
    p.dp = dp->as_int(1, kMaxGpus);
  } else {
    // Each degree is at most kMaxGpus = 2^20: the product of three fits.
    const std::int64_t model_parallel = p.tp * p.pp * p.cp;
    if (cluster_gpus % model_parallel != 0)
      r.fail("cannot default dp: the cluster's " + std::to_string(cluster_gpus) +
             " GPUs are not divisible by tp·pp·cp = " + std::to_string(model_parallel));
    p.dp = cluster_gpus / model_parallel;
  }
  p.zero = r.int_or("zero", 0, 0, 3);
  p.schedule = r.enum_or("schedule", p.schedule);
  p.virtual_stages =
      r.int_or("virtual_stages", p.schedule == Schedule::Interleaved ? 2 : 1, 1, 4096);
  if (auto sl = r.get("stage_layers"))
    for (const auto& e : sl->elements()) p.stage_layers.push_back(e.as_int(0, 100'000));
  if (auto layout = r.get("pipeline_layout")) {
    p.pipeline_layout = layout->as_enum<PipelineLayout>();
    if (!p.stage_layers.empty() && p.pipeline_layout != PipelineLayout::Balanced)
      layout->fail("applies only without stage_layers (stage_layers gives every chunk's blocks)");
  }
  p.sequence_parallel = r.bool_or("sequence_parallel", false);
  p.recompute = r.enum_or("recompute", p.recompute);
  if (auto k = r.get("recompute_k")) {
    if (p.recompute != Recompute::EveryK && p.recompute != Recompute::EveryNth)
      k->fail("applies only to recompute \"every_k\" and \"every_nth\"");
    p.recompute_k = k->as_int(1, 100'000);
  }
  if (auto mods = r.get("recompute_modules")) {
    if (p.recompute != Recompute::Selective)
      mods->fail("applies only to recompute \"selective\" (Megatron-Core's recompute_modules)");
    if (!mods->is_array()) mods->fail("must be a list of module names (one of " + enum_choices<cost::RecomputeModule>() + ")");
    p.recompute_modules = 0;
    for (const auto& e : mods->elements()) {
      const auto m = e.as_enum<cost::RecomputeModule>();
      if (cost::has_module(p.recompute_modules, m)) e.fail("is listed twice");
      p.recompute_modules |= cost::module_bit(m);
    }
    if (p.recompute_modules == 0) mods->fail("lists no module: recompute \"none\" reruns nothing");
  }
  p.partition_activations = r.bool_or("partition_activations", false);
  if (auto m = r.get("moe")) p.moe = read_moe_routing(*m);
  if (auto o = r.get("offload")) p.offload = read_offload(*o);
  if (auto budget = r.get("memory_budget_GiB")) {
    if (p.recompute != Recompute::Optimal && p.offload.planner != OffloadPlanner::Joint &&
        p.offload.planner != OffloadPlanner::Priority)
      budget->fail("applies only to recompute \"optimal\" or offload planner \"priority\" or \"joint\"");
    p.memory_budget_GiB = budget->as_number(1e-6, 1e9);
  }
  if (auto c = r.get("compression")) p.compression = read_compression(*c);
  p.optimizer = r.enum_or("optimizer", p.optimizer);
  p.optimizer_states = r.enum_or("optimizer_states", p.optimizer_states);
  p.precision = r.enum_or("precision", p.precision);
  p.fp8_recipe = r.enum_or("fp8_recipe", p.fp8_recipe);
  if (auto b = r.get("bf16_layers")) {
    p.bf16_first_layers = b->int_or("first", 0, 0, 1'000'000);
    p.bf16_last_layers = b->int_or("last", 0, 0, 1'000'000);
    b->reject_unknown_keys();
  }
  p.dp_topology = r.enum_or("dp_topology", p.dp_topology);
  p.ps_staleness = r.int_or("ps_staleness", p.ps_staleness, 0, 1000);
  if (auto im = r.get("implementation")) p.implementation = read_implementation(*im);
  r.reject_unknown_keys();
  return p;
}

Batch read_batch(const JsonReader& r) {
  Batch b;
  b.global = r.at("global").as_int(1, kMaxTokensPerStep);
  b.micro = r.int_or("micro", 1, 1, kMaxTokensPerStep);
  r.reject_unknown_keys();
  return b;
}

Goal read_goal(const JsonReader& r) {
  Goal g;
  if (auto t = r.get("tokens")) g.tokens = t->as_number(1, 1e18);
  if (auto l = r.get("target_loss")) g.target_loss = l->as_number(1e-9, 1e6);
  r.reject_unknown_keys();
  if (g.tokens.has_value() == g.target_loss.has_value())
    r.fail("needs exactly one of \"tokens\" or \"target_loss\"");
  return g;
}

Scenario read_scenario(JsonReader r, const std::string& base_dir) {
  if (!r.is_object()) r.fail("a scenario must be a JSON object");
  Scenario s;
  s.file = r.file();
  r.files_read(&s.files);
  // Unknown keys first: a misspelt "model" is named as such (with the
  // closest key), not reported as a missing "model".
  r.allow({"name", "description", "model", "cluster", "batch", "plan", "stack", "space", "goal",
           "convergence", "lr", "calibration"});
  r.reject_unknown_keys();
  if (auto n = r.get("name")) n->as_string();
  if (auto d = r.get("description")) d->as_string();
  s.model = cost::read_model(r.at("model"), base_dir);
  s.cluster = cost::read_cluster(r.at("cluster"), base_dir);
  s.batch = read_batch(r.at("batch"));
  if (auto p = r.get("plan")) {
    s.plan = read_plan(*p, s.cluster.gpus());
  } else {
    s.plan.dp = s.cluster.gpus();
  }
  // The implementation keys the scenario sets itself: a stack (and an
  // export's engine defaults) fill only the others.
  if (auto p = r.get("plan"))
    if (auto im = p->get("implementation"); im && im->is_object())
      for (const auto& [key, _] : im->json().items())
        if (auto k = enum_from_name<ImplKey>(key)) s.implementation_keys.add(*k);
  if (auto st = r.get("stack")) {
    s.stack = read_stack(*st, base_dir);
    apply_stack(*s.stack, s.plan, s.implementation_keys);
  }
  if (auto sp = r.get("space")) s.space = read_space(*sp, s);
  if (auto g = r.get("goal")) {
    if (s.model.chain)
      g->fail("time to train is modelled for language models (tokens to a loss); a layer-chain model "
              "has step time and memory only");
    s.goal = read_goal(*g);
  }
  for (const char* key : {"convergence", "lr"})
    if (r.has(key) && !s.goal) r.fail_at(key, "applies only with a \"goal\"");
  if (s.goal) {
    s.convergence = std::make_shared<const ConvergenceModel>(
        r.has("convergence") ? read_scenario_convergence(r.at("convergence"), base_dir)
                             : bundled_convergence());
    // The rule's base rate is tuned at the scenario's own batch unless it
    // says otherwise (explore's batch.global axis then moves away from it).
    s.lr = r.has("lr") ? std::optional<LrRule>(read_lr_rule(r.at("lr"))) : s.convergence->lr;
    if (s.lr && !s.lr->reference_batch) s.lr->reference_batch = s.batch.global;
    if (s.goal->target_loss) {
      try {
        critical_batch_at(*s.convergence, *s.goal->target_loss);
      } catch (const InputError& e) {
        r.at("goal").fail_at("target_loss", e.rule() + " (convergence model " + e.file() + ")");
      }
    }
  }
  if (auto c = r.get("calibration")) {
    const std::string path = cost::resolve_path(c->as_string(), base_dir);
    if (!std::filesystem::exists(path))
      c->fail("calibration file \"" + c->as_string() + "\" not found");
    s.calibration = path;
  }
  r.files_read(nullptr);  // `s` is returned: no reader keeps its list
  r.reject_unknown_keys();
  if (s.cluster.heterogeneous())
    s.group_curves = std::make_shared<const std::vector<cost::Calibration>>(group_calibrations(s));
  resolve_stage_layers(s.plan, s.batch, s.model, s.cluster, s.group_curves.get());
  if (!s.space) {
    require_valid_plan(s);
  } else if (auto v = size_violation(s)) {
    // The template's sizes: the points check them again with their own batch.
    throw InputError(s.file, v->path, v->message);
  }
  return s;
}

}  // namespace

Scenario parse_scenario(std::string_view text, const std::string& source,
                        const std::string& base_dir) {
  const auto j = parse_json_text(text, source);
  return read_scenario(JsonReader(j, source), base_dir);
}

void require_valid_plan(const Scenario& s) {
  if (auto v = first_violation(s)) throw InputError(s.file, v->path, v->message);
}

std::vector<cost::Calibration> group_calibrations(const Scenario& sc) {
  std::vector<cost::Calibration> out;
  std::string measured = sc.cluster.gpu.chip();
  if (sc.calibration) {
    const cost::Calibration file = cost::load_calibration_file(*sc.calibration, cost::default_calibration(sc.cluster.gpu));
    if (!file.gpu.empty()) measured = file.gpu;
  }
  for (const auto& g : sc.cluster.groups)
    out.push_back(sc.calibration && g.gpu.chip() == measured
                      ? cost::load_calibration_file(*sc.calibration, cost::default_calibration(g.gpu))
                      : cost::default_calibration(g.gpu));
  return out;
}

cost::Calibration group_calibration(const Scenario& sc, std::size_t g) {
  if (sc.group_curves && g < sc.group_curves->size()) return (*sc.group_curves)[g];
  return group_calibrations(sc).at(g);
}

void require_transformer(const Scenario& s, const std::string& command) {
  if (s.model.chain)
    throw InputError(s.file, "model",
                     "\"" + s.model.name + "\" is a layer-chain model: strata " + command +
                         " needs a transformer's layers (a layer chain runs through simulate, explore, tradeoff and describe)");
}

bool is_scenario_file(const std::string& path) {
  const auto j = load_json_file(path);
  return j.is_object() && (j.contains("cluster") || j.contains("batch") || j.contains("plan"));
}

Scenario load_scenario(const std::string& path) {
  const auto j = load_json_file(path);
  return read_scenario(JsonReader(j, path),
                       std::filesystem::path(path).parent_path().string());
}

}  // namespace strata::strategies
