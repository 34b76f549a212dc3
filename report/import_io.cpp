// `strata import`: the inverse of export_io.cpp's renderers. Every flag or
// key read here is one those renderers write (docs/export.md gives their
// sources); export_io_test.cpp holds the two to a round trip.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "report/export.hpp"
#include "sim/error.hpp"
#include "sim/json_reader.hpp"
#include "sim/limits.hpp"
#include "strategies/space.hpp"
#include "strategies/stack.hpp"
#include "strategies/validate.hpp"

namespace strata::report {

namespace {

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

std::string str(std::int64_t v) { return std::to_string(v); }

// The chunks' layers as the plan writes them: empty stage_layers where the
// balanced split (or the embedding-and-head-as-layers one) gives them.
void set_chunks(Plan& p, const std::vector<std::int64_t>& c, std::int64_t layers) {
  p.stage_layers.clear();
  for (auto layout : {strategies::PipelineLayout::Balanced, strategies::PipelineLayout::EmbeddingHeadAsLayers}) {
    p.pipeline_layout = layout;
    if (strategies::chunk_layers(p, layers) == c) return;
  }
  p.pipeline_layout = strategies::PipelineLayout::Balanced;
  p.stage_layers = c;
}

// dp from the scenario's GPU count over the degrees the file gives.
std::int64_t data_parallel(const Scenario& base, const Plan& p, const std::string& file,
                           const std::string& path) {
  const std::int64_t gpus = base.cluster.gpus();
  const std::int64_t model = p.tp * p.pp * p.cp;
  if (model <= 0 || gpus % model != 0)
    throw InputError(file, path,
                     "tp x pp x cp = " + str(model) + " does not divide the scenario's " + str(gpus) +
                         " GPUs [import-world]");
  return gpus / model;
}

void require_model(bool same, const std::string& file, const std::string& path, const std::string& read,
                   const std::string& model) {
  if (!same)
    throw InputError(file, path,
                     "is " + read + ", the scenario's model has " + model + " [import-model]");
}

std::int64_t to_int(const std::string& v, const std::string& file, const std::string& path) {
  std::int64_t out = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  if (r.ec != std::errc() || r.ptr != v.data() + v.size() || out < 0)
    throw InputError(file, path, "'" + v + "' is not a non-negative integer [import-value]");
  return out;
}

double to_number(const std::string& v, const std::string& file, const std::string& path) {
  char* end = nullptr;
  const double out = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(out))
    throw InputError(file, path, "'" + v + "' is not a number [import-value]");
  return out;
}

// A value the scenario reader would refuse is refused here, named by the
// flag or key, so an accepted import always writes a scenario that reads
// back (the scenario reader's bounds, strategies/scenario_io.cpp).
std::int64_t bounded(std::int64_t v, std::int64_t lo, std::int64_t hi, const std::string& file,
                     const std::string& path) {
  if (v < lo || v > hi)
    throw InputError(file, path,
                     str(v) + " is not in [" + str(lo) + ", " + str(hi) + "] [import-value]");
  return v;
}
constexpr std::int64_t kMaxLayers = 100'000;    // stage_layers, recompute_k
constexpr std::int64_t kMaxChunks = 1 << 20;    // pp x virtual stages
constexpr std::int64_t kMaxVirtualStages = 4096;

// ---------------------------------------------------------------- Megatron-LM

// The flags of a command line: comments and line continuations dropped,
// single and double quotes kept together. Words before the first flag (the
// launcher and script) are skipped.
std::map<std::string, std::optional<std::string>> megatron_flags(std::string_view text,
                                                                 const std::string& file) {
  std::vector<std::string> words;
  std::string w;
  bool in_word = false, comment = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (comment) {
      if (ch == '\n') comment = false;
      continue;
    }
    if (quote) {
      if (ch == quote) quote = 0;
      else w += ch;
      continue;
    }
    if (ch == '\'' || ch == '"') {
      quote = ch;
      in_word = true;
      continue;
    }
    if (ch == '#' && !in_word) {
      comment = true;
      continue;
    }
    if (ch == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(ch))) {
      if (in_word) words.push_back(std::move(w));
      w.clear();
      in_word = false;
      continue;
    }
    w += ch;
    in_word = true;
  }
  if (quote) throw InputError(file, "", "a quote is not closed [import-syntax]");
  if (in_word) words.push_back(std::move(w));
  std::map<std::string, std::optional<std::string>> flags;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i].rfind("--", 0) != 0) continue;
    const std::string flag = words[i];
    std::optional<std::string> value;
    if (i + 1 < words.size() && words[i + 1].rfind("--", 0) != 0) value = words[++i];
    // A list flag (nargs='*') takes every word up to the next flag.
    if (flag == "--recompute-modules" || flag == "--cp-comm-type")
      while (value && i + 1 < words.size() && words[i + 1].rfind("--", 0) != 0) *value += " " + words[++i];
    if (!flags.emplace(flag, value).second) throw InputError(file, flag, "is given twice [import-syntax]");
  }
  return flags;
}

// Chunks of a --pipeline-model-parallel-layout: "E|t*3|tt|tL".
std::vector<std::int64_t> megatron_layout_chunks(const std::string& layout, const std::string& file) {
  const std::string path = "--pipeline-model-parallel-layout";
  std::vector<std::int64_t> c{0};
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const char ch = layout[i];
    if (ch == '|') {
      if (static_cast<std::int64_t>(c.size()) >= kMaxChunks)
        throw InputError(file, path, "more than " + str(kMaxChunks) + " chunks [import-value]");
      c.push_back(0);
    } else if (ch == 't') {
      std::int64_t n = 1;
      if (i + 1 < layout.size() && layout[i + 1] == '*') {
        std::size_t j = i + 2;
        while (j < layout.size() && std::isdigit(static_cast<unsigned char>(layout[j]))) ++j;
        n = bounded(to_int(layout.substr(i + 2, j - i - 2), file, path), 0, kMaxLayers, file, path);
        i = j - 1;
      }
      c.back() = bounded(c.back() + n, 0, kMaxLayers, file, path);
    } else if (ch == 'E' || ch == 'L') {
      // The embedding (first chunk) and the loss (last): no layers.
    } else {
      throw InputError(file, path,
                       std::string("'") + ch + "' is not a layout Strata reads (E, t, t*N, L and |) [import-value]");
    }
  }
  return c;
}

Imported import_megatron(const Scenario& base, std::string_view text, const std::string& file) {
  const auto flags = megatron_flags(text, file);
  std::set<std::string> used;
  auto has = [&](const std::string& f) {
    used.insert(f);
    return flags.count(f) > 0;
  };
  auto value = [&](const std::string& f) -> std::optional<std::string> {
    used.insert(f);
    const auto it = flags.find(f);
    if (it == flags.end()) return std::nullopt;
    if (!it->second) throw InputError(file, f, "needs a value [import-value]");
    return it->second;
  };
  auto integer = [&](const std::string& f, std::int64_t dflt) {
    const auto v = value(f);
    return v ? to_int(*v, file, f) : dflt;
  };
  const auto& m = base.model;
  Imported out{base, {}, {}};
  Plan p;
  auto degree = [&](const std::string& f) { return bounded(integer(f, 1), 1, kMaxGpus, file, f); };
  p.tp = degree("--tensor-model-parallel-size");
  p.pp = degree("--pipeline-model-parallel-size");
  p.cp = degree("--context-parallel-size");
  p.ep = degree("--expert-model-parallel-size");
  p.dp = data_parallel(base, p, file, "--tensor-model-parallel-size");
  p.sequence_parallel = has("--sequence-parallel");
  p.schedule = Schedule::OneFOneB;

  // --- the model: must be the scenario's ---
  auto same_int = [&](const std::string& f, std::int64_t model_value) {
    const auto v = value(f);
    if (v) require_model(to_int(*v, file, f) == model_value, file, f, *v, str(model_value));
  };
  same_int("--num-layers", m.layers);
  same_int("--hidden-size", m.hidden);
  same_int("--ffn-hidden-size", m.ffn_hidden);
  same_int("--num-attention-heads", m.heads);
  same_int("--num-query-groups", has("--group-query-attention") ? m.kv_heads : m.heads);
  same_int("--seq-length", m.seq_len);
  used.insert("--max-position-embeddings");
  require_model(has("--swiglu") == (m.mlp == cost::MlpKind::Swiglu), file, "--swiglu",
                has("--swiglu") ? "given" : "absent", m.mlp == cost::MlpKind::Swiglu ? "swiglu" : "no swiglu");
  if (const auto v = value("--normalization"))
    require_model((*v == "RMSNorm") == (m.norm == cost::NormKind::RmsNorm), file, "--normalization", *v,
                  m.norm == cost::NormKind::RmsNorm ? "RMSNorm" : "LayerNorm");
  require_model(has("--untie-embeddings-and-output-weights") == !m.tied_embeddings, file,
                "--untie-embeddings-and-output-weights",
                has("--untie-embeddings-and-output-weights") ? "given" : "absent",
                m.tied_embeddings ? "tied embeddings" : "untied embeddings");
  if (m.moe) {
    same_int("--num-experts", m.moe->experts);
    same_int("--moe-router-topk", m.moe->top_k);
  }
  if (const auto cf = value("--moe-expert-capacity-factor"))
    p.moe.capacity_factor = to_number(*cf, file, "--moe-expert-capacity-factor");
  p.moe.pad_to_capacity = has("--moe-pad-expert-input-to-capacity");
  // How evenly the router spreads tokens is the run's, not a flag: the base's.
  p.moe.load_imbalance = base.plan.moe.load_imbalance;
  if (p.moe.load_imbalance != 1.0) out.from_base.push_back("plan.moe.load_imbalance");
  // Per-layer choices (export's megatron_moe_layer_freq and
  // megatron_window_size): as the model has them, or absent where it has none.
  auto same_text = [&](const std::string& f, const std::string& model_value, const std::string& none) {
    const auto v = value(f);
    require_model(v.value_or("") == model_value, file, f, v.value_or("absent"),
                  model_value.empty() ? none : model_value);
  };
  same_text("--moe-layer-freq", megatron_moe_layer_freq(m), "no dense blocks among its expert blocks");
  same_text("--mtp-num-layers", m.mtp_layers > 0 ? str(m.mtp_layers) : "", "no multi-token prediction modules");
  same_text("--window-size", megatron_window_size(m), "no sliding window");
  same_text("--window-attn-skip-freq",
            m.attention_window && m.attention_window->global_every && !megatron_window_size(m).empty()
                ? str(*m.attention_window->global_every)
                : "",
            "no full-attention layers among windowed ones");
  for (const char* f : {"--position-embedding-type", "--rotary-base", "--disable-bias-linear",
                        "--attention-dropout", "--hidden-dropout", "--group-query-attention"})
    used.insert(f);

  // --- pipeline chunks and schedule ---
  std::vector<std::int64_t> chunks;
  if (const auto layout = value("--pipeline-model-parallel-layout")) {
    chunks = megatron_layout_chunks(*layout, file);
  } else if (const auto per = value("--num-layers-per-virtual-pipeline-stage")) {
    const std::int64_t k = to_int(*per, file, "--num-layers-per-virtual-pipeline-stage");
    if (k < 1 || m.layers % (k * p.pp) != 0)
      throw InputError(file, "--num-layers-per-virtual-pipeline-stage",
                       "layers " + str(m.layers) + " are not whole chunks of " + *per + " on " + str(p.pp) +
                           " stages [import-value]");
    chunks.assign(static_cast<std::size_t>(m.layers / k), k);
  } else if (p.pp > 1 && (flags.count("--decoder-first-pipeline-num-layers") ||
                          flags.count("--decoder-last-pipeline-num-layers"))) {
    const std::int64_t first = std::min(integer("--decoder-first-pipeline-num-layers", -1), kMaxLayers + 1);
    const std::int64_t last = std::min(integer("--decoder-last-pipeline-num-layers", -1), kMaxLayers + 1);
    const std::int64_t rest = m.layers - std::max<std::int64_t>(first, 0) - std::max<std::int64_t>(last, 0);
    const std::int64_t middle = p.pp - (first >= 0) - (last >= 0);
    if (rest < 0 || (middle > 0 ? rest % middle != 0 : rest != 0))
      throw InputError(file, "--decoder-first-pipeline-num-layers",
                       "the other stages' layers do not split evenly [import-value]");
    chunks.assign(static_cast<std::size_t>(p.pp), middle > 0 ? rest / middle : 0);
    if (first >= 0) chunks.front() = first;
    if (last >= 0) chunks.back() = last;
  } else {
    chunks = strategies::chunk_layers(p, m.layers);
  }
  std::int64_t total = 0;
  for (auto c : chunks) total += c;
  if (total != m.layers || chunks.size() % static_cast<std::size_t>(p.pp) != 0)
    throw InputError(file, "--pipeline-model-parallel-size",
                     str(static_cast<std::int64_t>(chunks.size())) + " chunks of " + str(total) +
                         " layers do not fit " + str(p.pp) + " stages of the model's " + str(m.layers) +
                         " layers [import-value]");
  p.virtual_stages = bounded(static_cast<std::int64_t>(chunks.size()) / p.pp, 1, kMaxVirtualStages, file,
                             "--pipeline-model-parallel-size");
  if (p.virtual_stages > 1) p.schedule = Schedule::Interleaved;
  set_chunks(p, chunks, m.layers);

  // --- ZeRO ---
  const bool dist_opt = has("--use-distributed-optimizer");
  if (has("--use-megatron-fsdp")) {
    const auto s = value("--data-parallel-sharding-strategy").value_or("no_shard");
    if (s == "optim_grads") p.zero = 2;
    else if (s == "optim_grads_params") p.zero = 3;
    else if (s == "optim") p.zero = 1;
    else p.zero = 0;
  } else {
    p.zero = dist_opt ? 1 : 0;
  }
  used.insert("--ckpt-format");

  // --- recompute ---
  if (const auto g = value("--recompute-granularity")) {
    if (*g == "selective") {
      p.recompute = Recompute::Selective;
      if (const auto mods = value("--recompute-modules")) {
        p.recompute_modules = 0;
        std::size_t at = 0;
        while (at < mods->size()) {
          const std::size_t end = std::min(mods->find(' ', at), mods->size());
          const std::string name = mods->substr(at, end - at);
          at = end + 1;
          const auto m = enum_from_name<cost::RecomputeModule>(name);
          if (!m)
            throw InputError(file, "--recompute-modules",
                             "'" + name + "' is not a module (one of " + enum_choices<cost::RecomputeModule>() +
                                 ") [import-value]");
          p.recompute_modules |= cost::module_bit(*m);
        }
      }
    } else if (*g == "full") {
      const auto method = value("--recompute-method").value_or("uniform");
      if (method != "uniform")
        throw InputError(file, "--recompute-method",
                         "'" + method + "' is not a method Strata models (uniform) [import-value]");
      const std::int64_t k = bounded(integer("--recompute-num-layers", 1), 1, kMaxLayers, file, "--recompute-num-layers");
      p.recompute = k == 1 ? Recompute::Full : Recompute::EveryK;
      p.recompute_k = k;
    } else {
      throw InputError(file, "--recompute-granularity", "'" + *g + "' is not full or selective [import-value]");
    }
  }
  p.partition_activations = has("--distribute-saved-activations");
  // --- offload ---
  if (has("--cpu-offloading-num-layers")) p.offload.activations = true;
  if (has("--optimizer-cpu-offload")) p.offload.optimizer = OffloadTarget::Cpu;
  used.insert("--use-precision-aware-optimizer");
  if (const auto avg = value("--exp-avg-dtype"), sq = value("--exp-avg-sq-dtype"); avg || sq) {
    if (!has("--use-precision-aware-optimizer"))
      throw InputError(file, avg ? "--exp-avg-dtype" : "--exp-avg-sq-dtype",
                       "applies only with --use-precision-aware-optimizer [import-value]");
    const std::string a = avg.value_or("fp32"), q = sq.value_or("fp32");
    if (a != q)
      throw InputError(file, "--exp-avg-sq-dtype",
                       "'" + q + "' differs from --exp-avg-dtype '" + a +
                           "': Strata keeps both moments in one number type [import-value]");
    if (a == "bf16") p.optimizer_states = strategies::StateDtype::BF16;
    else if (a != "fp32")
      throw InputError(file, "--exp-avg-dtype", "'" + a + "' is not fp32 or bf16 [import-value]");
  }

  // --- optimizer and precision ---
  const auto opt = value("--optimizer").value_or("adam");
  if (opt == "adam") {
    const auto wd = value("--weight-decay");
    p.optimizer = wd && to_number(*wd, file, "--weight-decay") == 0 ? Optimizer::Adam : Optimizer::AdamW;
  } else if (opt == "sgd") {
    const auto mom = value("--sgd-momentum").value_or("0.9");
    p.optimizer = to_number(mom, file, "--sgd-momentum") == 0 ? Optimizer::Sgd : Optimizer::Momentum;
  } else {
    throw InputError(file, "--optimizer", "'" + opt + "' is not adam or sgd [import-value]");
  }
  // Megatron-Core's FP4 training (--fp4-format e2m1, its one recipe nvfp4)
  // is Transformer Engine's NVFP4BlockScaling over bf16.
  if (const auto f = value("--fp4-format"); f && *f != "e2m1")
    throw InputError(file, "--fp4-format", "'" + *f + "' is not e2m1 [import-value]");
  if (const auto r = value("--fp4-recipe"); r && *r != "nvfp4")
    throw InputError(file, "--fp4-recipe", "'" + *r + "' is not nvfp4 [import-value]");
  if (has("--fp4-format") && has("--fp8-format"))
    throw InputError(file, "--fp4-format", "FP4 and FP8 training are exclusive: --fp8-format is given too [import-value]");
  p.precision = has("--fp4-format")   ? Precision::FP4
                : has("--fp8-format") ? Precision::FP8
                : has("--bf16")       ? Precision::BF16
                : has("--fp16")       ? Precision::FP16
                                      : Precision::FP32;
  if (has("--first-last-layers-bf16")) {  // the counts default to 1 (arguments.py)
    p.bf16_first_layers = bounded(integer("--num-layers-at-start-in-bf16", 1), 0, kMaxLayers, file,
                                  "--num-layers-at-start-in-bf16");
    p.bf16_last_layers = bounded(integer("--num-layers-at-end-in-bf16", 1), 0, kMaxLayers, file,
                                 "--num-layers-at-end-in-bf16");
  }
  if (const auto recipe = value("--fp8-recipe")) {
    const auto r = enum_from_name<cost::Fp8Recipe>(*recipe);
    if (!r || *r == cost::Fp8Recipe::Rowwise)
      throw InputError(file, "--fp8-recipe",
                       "'" + *recipe + "' is not delayed, tensorwise, blockwise or mxfp8 [import-value]");
    p.fp8_recipe = *r;
  }

  // --- the engine's defaults, then the implementation flags ---
  strategies::apply_stack(strategies::bundled_stack(export_stack_name(ExportTarget::Megatron)), p, {});
  auto& im = p.implementation;
  if (p.schedule == Schedule::Interleaved) im.overlap_p2p = !has("--no-overlap-p2p-communication");
  else if (p.pp > 1) im.overlap_p2p = false;
  im.rank_order = has("--use-tp-pp-dp-mapping")
                      ? std::array{ParallelDim::TP, ParallelDim::CP, ParallelDim::PP, ParallelDim::DP}
                      : std::array{ParallelDim::TP, ParallelDim::CP, ParallelDim::DP, ParallelDim::PP};
  if (p.pp > 1 && p.tp > 1) im.pp_scatter_gather = !has("--no-scatter-gather-tensors-in-pipeline");
  // Megatron-FSDP turns fused accumulation off itself.
  if (!(p.zero >= 2 && p.pp == 1)) im.grad_accumulation_fusion = !has("--no-gradient-accumulation-fusion");
  im.overlap_grad_reduce = has("--overlap-grad-reduce");
  if (p.zero >= 1) im.overlap_param_gather = has("--overlap-param-gather");
  im.fp8_param_gather = has("--fp8-param-gather");
  if (has("--tp-comm-overlap"))
    im.tp_comm_overlap = has("--disable-tp-comm-overlap-ag") && has("--disable-tp-comm-overlap-rs")
                             ? TpCommOverlap::Bulk
                             : TpCommOverlap::Ring;
  else
    im.tp_comm_overlap = TpCommOverlap::None;
  for (const char* f : {"--disable-tp-comm-split-ag", "--disable-tp-comm-split-rs"}) used.insert(f);
  if (p.precision == Precision::FP16) im.fp32_grad_accumulation = has("--accumulate-allreduce-grads-in-fp32");
  if (p.precision == Precision::BF16 || cost::quantized_gemms(p.precision))
    im.fp32_grad_accumulation = !has("--grad-reduce-in-bf16");
  // flash, fused (cuDNN), unfused and local (Megatron's own, unfused);
  // auto leaves the engine's default (Transformer Engine's choice).
  if (const auto a = value("--attention-backend"); a && *a != "auto")
    im.attention = *a == "fused"                     ? AttentionKernel::Cudnn
                   : *a == "unfused" || *a == "local" ? AttentionKernel::Standard
                                                      : AttentionKernel::Flash;
  // Context parallelism's K/V exchange, one type for every layer
  // (Megatron-Core's --cp-comm-type, nargs='+', per layer where several).
  if (const auto c = value("--cp-comm-type")) {
    std::istringstream words(*c);
    std::string w, first;
    while (words >> w) {
      if (w != "p2p" && w != "all_gather")
        throw InputError(file, "--cp-comm-type",
                         "'" + w + "' is not p2p or all_gather (all-to-all context parallelism is not modelled) "
                         "[import-value]");
      if (first.empty()) first = w;
      if (w != first)
        throw InputError(file, "--cp-comm-type",
                         "'" + *c + "' gives layers different types; Strata prices one for every layer [import-value]");
    }
    im.cp_comm = first == "all_gather" ? strategies::CpComm::AllGather : strategies::CpComm::P2p;
  }
  const bool unfused = has("--no-bias-swiglu-fusion") || has("--no-bias-gelu-fusion") ||
                       has("--no-bias-dropout-fusion") || has("--no-masked-softmax-fusion");
  used.insert("--no-rope-fusion");
  if (unfused) im.fused_elementwise = false;

  // --- batch ---
  out.scenario.batch.micro = bounded(integer("--micro-batch-size", 1), 1, kMaxTokensPerStep, file, "--micro-batch-size");
  out.scenario.batch.global = bounded(integer("--global-batch-size", out.scenario.batch.micro * p.dp), 1,
                                      kMaxTokensPerStep, file, "--global-batch-size");
  out.scenario.plan = p;
  for (const auto& [f, v] : flags)
    if (!used.count(f)) out.ignored.push_back(f);
  out.from_base.push_back("data-parallel size " + str(p.dp) + ": the scenario's " + str(base.cluster.gpus()) +
                          " GPUs over tp x pp x cp (Megatron-LM takes the world size from the launcher)");
  return out;
}

// ------------------------------------------------------------------ DeepSpeed

Imported import_deepspeed(const Scenario& base, std::string_view text, const std::string& file) {
  // The strict reader every JSON input goes through (duplicate keys and
  // bytes after the document are errors).
  const nlohmann::json j = parse_json_text(text, file);
  if (!j.is_object()) throw InputError(file, "", "must be a JSON object [import-syntax]");
  auto join = [](const std::string& path, const char* key) { return path.empty() ? std::string(key) : path + "." + key; };
  auto get_int = [&](const nlohmann::json& o, const char* key, const std::string& path,
                     std::int64_t dflt) -> std::int64_t {
    if (!o.contains(key)) return dflt;
    if (!o[key].is_number_integer() || o[key].get<std::int64_t>() < 0)
      throw InputError(file, join(path, key), "must be a non-negative integer [import-value]");
    return o[key].get<std::int64_t>();
  };
  auto get_bool = [&](const nlohmann::json& o, const char* key, const std::string& path, bool dflt) {
    if (!o.contains(key)) return dflt;
    if (!o[key].is_boolean()) throw InputError(file, join(path, key), "must be true or false [import-value]");
    return o[key].get<bool>();
  };
  auto object = [&](const nlohmann::json& o, const char* key, const std::string& path) -> const nlohmann::json* {
    if (!o.contains(key)) return nullptr;
    if (!o[key].is_object()) throw InputError(file, join(path, key), "must be an object [import-value]");
    return &o[key];
  };
  Imported out{base, {}, {}};
  // The model code's parallelism and layers: the scenario's.
  Plan p = base.plan;
  p.offload = {};
  const bool bf16 = object(j, "bf16", "") && get_bool(j["bf16"], "enabled", "bf16", false);
  const bool fp16 = object(j, "fp16", "") && get_bool(j["fp16"], "enabled", "fp16", false);
  p.precision = bf16 ? Precision::BF16 : fp16 ? Precision::FP16 : Precision::FP32;
  std::int64_t zero = 0;
  bool overlap = false;
  std::optional<std::int64_t> reduce_bucket, max_live, prefetch, reuse;
  if (const auto* z = object(j, "zero_optimization", "")) {
    zero = get_int(*z, "stage", "zero_optimization", 0);
    if (zero > 3) throw InputError(file, "zero_optimization.stage", "must be 0 to 3 [import-value]");
    overlap = get_bool(*z, "overlap_comm", "zero_optimization", false);
    auto elements = [&](const char* key, std::optional<std::int64_t>& to) {
      if (z->contains(key))
        to = bounded(get_int(*z, key, "zero_optimization", 0), 0, strategies::kMaxReduceBucket, file,
                     std::string("zero_optimization.") + key);
    };
    elements("reduce_bucket_size", reduce_bucket);
    elements("stage3_max_live_parameters", max_live);
    elements("stage3_prefetch_bucket_size", prefetch);
    elements("stage3_max_reuse_distance", reuse);
    auto device = [&](const char* key) -> std::optional<std::string> {
      const auto* o = object(*z, key, "zero_optimization");
      if (!o || !o->contains("device")) return std::nullopt;
      if (!(*o)["device"].is_string())
        throw InputError(file, std::string("zero_optimization.") + key + ".device", "must be a string [import-value]");
      return (*o)["device"].get<std::string>();
    };
    if (const auto d = device("offload_optimizer"); d && *d != "none")
      p.offload.optimizer = *d == "nvme" ? OffloadTarget::Nvme : OffloadTarget::Cpu;
    if (const auto d = device("offload_param"); d && *d != "none") {
      p.offload.weights = true;
      p.offload.weights_target = *d == "nvme" ? OffloadTarget::Nvme : OffloadTarget::Cpu;
    }
  }
  p.zero = zero;
  if (const auto* ac = object(j, "activation_checkpointing", "")) {
    if (p.recompute == Recompute::None)
      throw InputError(file, "activation_checkpointing",
                       "is given, but which layers the model code checkpoints is not in ds_config.json: "
                       "set plan.recompute in the scenario [import-base]");
    p.offload.activations = get_bool(*ac, "cpu_checkpointing", "activation_checkpointing", false);
    p.partition_activations = get_bool(*ac, "partition_activations", "activation_checkpointing", false);
  } else {
    p.offload.activations = false;
  }
  if (const auto* o = object(j, "optimizer", "")) {
    std::string type = "Adam";
    if (o->contains("type")) {
      if (!(*o)["type"].is_string()) throw InputError(file, "optimizer.type", "must be a string [import-value]");
      type = (*o)["type"].get<std::string>();
    }
    static const nlohmann::json none = nlohmann::json::object();
    const nlohmann::json* params = object(*o, "params", "optimizer");
    if (!params) params = &none;
    if (type == "Adam") {
      p.optimizer = get_bool(*params, "adam_w_mode", "optimizer.params", true) ? Optimizer::AdamW : Optimizer::Adam;
    } else if (type == "AdamW") {
      p.optimizer = Optimizer::AdamW;
    } else if (type == "Lamb") {
      p.optimizer = Optimizer::Lamb;
    } else if (type == "SGD") {
      double momentum = 0;
      if (params->contains("momentum")) {
        if (!(*params)["momentum"].is_number())
          throw InputError(file, "optimizer.params.momentum", "must be a number [import-value]");
        momentum = (*params)["momentum"].get<double>();
      }
      p.optimizer = momentum == 0 ? Optimizer::Sgd : Optimizer::Momentum;
    } else {
      throw InputError(file, "optimizer.type", "'" + type + "' is not Adam, AdamW, Lamb or SGD [import-value]");
    }
  }
  // The kernels and the rank layout are the model code's too: the
  // scenario's settings, DeepSpeed's defaults for those it leaves open.
  const auto st = strategies::bundled_stack(export_stack_name(ExportTarget::DeepSpeed));
  if (!base.stack || base.stack->name != st.name) strategies::apply_stack(st, p, base.implementation_keys);
  p.implementation.overlap_grad_reduce = overlap;
  // ZeRO-3's gradient bucket and parameter coordinator: the config's
  // values, else DeepSpeed's defaults (its stack's values for stage 3).
  if (zero == 3) {
    Plan defaults = p;
    strategies::apply_stack(st, defaults, {});
    auto& im = p.implementation;
    const auto& d = defaults.implementation;
    im.zero3_reduce_bucket = reduce_bucket.value_or(d.zero3_reduce_bucket);
    im.zero3_max_live = max_live.value_or(d.zero3_max_live);
    im.zero3_prefetch_bucket = prefetch.value_or(d.zero3_prefetch_bucket);
    im.zero3_reuse_distance = reuse.value_or(d.zero3_reuse_distance);
  }
  if (const auto* d = object(j, "data_types", ""); d && d->contains("grad_accum_dtype")) {
    const auto& dtype = (*d)["grad_accum_dtype"];
    if (!dtype.is_string() || (dtype != "fp32" && dtype != "fp16" && dtype != "bf16"))
      throw InputError(file, "data_types.grad_accum_dtype", "must be \"fp32\", \"fp16\" or \"bf16\" [import-value]");
    p.implementation.fp32_grad_accumulation = dtype == "fp32";
  }
  // The reduction's own dtype (deepspeed/runtime/config.py
  // get_communication_data_type), where the config sets it.
  if (j.contains("communication_data_type")) {
    const auto& dtype = j["communication_data_type"];
    if (!dtype.is_string() || (dtype != "fp32" && dtype != "fp16" && dtype != "bf16"))
      throw InputError(file, "communication_data_type", "must be \"fp32\", \"fp16\" or \"bf16\" [import-value]");
    p.implementation.grad_reduce_dtype = dtype == "fp32"   ? strategies::GradReduceDtype::FP32
                                         : dtype == "fp16" ? strategies::GradReduceDtype::FP16
                                                           : strategies::GradReduceDtype::BF16;
    if (!strategies::grad_reduce_dtype_allowed(p.implementation.grad_reduce_dtype, p.precision))
      throw InputError(file, "communication_data_type",
                       "is " + dtype.get<std::string>() + " while the config trains in " +
                           std::string(enum_name(p.precision)) +
                           ": a 16-bit reduction is the training's own 16-bit dtype [import-value]");
  }
  // Batch: global = micro x accumulation x dp.
  auto& b = out.scenario.batch;
  b.micro = bounded(get_int(j, "train_micro_batch_size_per_gpu", "", base.batch.micro), 1, kMaxTokensPerStep, file,
                    "train_micro_batch_size_per_gpu");
  const std::int64_t steps =
      bounded(get_int(j, "gradient_accumulation_steps", "", 0), 0, kMaxTokensPerStep, file, "gradient_accumulation_steps");
  b.global = get_int(j, "train_batch_size", "", 0);
  if (b.global == 0) {  // absent: micro x accumulation x dp, in range
    const double g = static_cast<double>(steps) * static_cast<double>(b.micro) * static_cast<double>(p.dp);
    b.global = g <= static_cast<double>(kMaxTokensPerStep) ? static_cast<std::int64_t>(g) : 0;
  }
  bounded(b.global, 1, kMaxTokensPerStep, file, "train_batch_size");
  if (b.global % (b.micro * p.dp) != 0 || (steps && b.global / (b.micro * p.dp) != steps))
    throw InputError(file, "train_batch_size",
                     str(b.global) + " is not train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
                     "the data-parallel size " + str(p.dp) + " [import-value]");
  out.scenario.plan = p;
  for (const auto& [key, v] : j.items())
    if (!std::set<std::string>{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                               "bf16", "fp16", "data_types", "zero_optimization", "activation_checkpointing",
                               "optimizer", "communication_data_type"}
             .count(key))
      out.ignored.push_back(key);
  out.from_base.push_back(
      "dp " + str(p.dp) + ", tp " + str(p.tp) + ", pp " + str(p.pp) + ", cp " + str(p.cp) + ", ep " + str(p.ep) +
      ", the schedule, the pipeline split, sequence parallelism, the recompute policy and the kernels: the "
      "scenario's (DeepSpeed takes them from the model code, not from ds_config.json)");
  return out;
}

// ----------------------------------------------------------------- torchtitan

// The TOML that export_torchtitan writes: [tables] of `key = value`, values
// strings, integers, booleans and (nested) arrays of them.
class Toml {
 public:
  Toml(std::string_view text, std::string file) : s_(text), file_(std::move(file)) {}

  nlohmann::json parse() {
    nlohmann::json root = nlohmann::json::object();
    std::string table;
    while (skip_blank(), i_ < s_.size()) {
      if (s_[i_] == '[') {
        const auto end = s_.find(']', i_);
        if (end == std::string_view::npos) fail("a table header is not closed");
        table = std::string(s_.substr(i_ + 1, end - i_ - 1));
        if (root.contains(table)) fail("table [" + table + "] is given twice");
        root[table] = nlohmann::json::object();
        i_ = end + 1;
      } else {
        std::size_t k = i_;
        while (k < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[k])) || s_[k] == '_')) ++k;
        const std::string key(s_.substr(i_, k - i_));
        if (key.empty()) fail("expected a key");
        i_ = k;
        skip_space();
        if (i_ >= s_.size() || s_[i_] != '=') fail("expected '=' after " + key);
        ++i_;
        auto& t = table.empty() ? root : root[table];
        if (t.contains(key)) fail(key + " is given twice");
        t[key] = value();
      }
      skip_space();
      if (i_ < s_.size() && s_[i_] == '#') skip_comment();
      if (i_ < s_.size() && s_[i_] != '\n') fail("expected the end of the line");
    }
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    const auto line = std::count(s_.begin(), s_.begin() + static_cast<std::ptrdiff_t>(std::min(i_, s_.size())), '\n') + 1;
    throw InputError(file_, "line " + std::to_string(line), why + " [import-syntax]");
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void skip_comment() {
    while (i_ < s_.size() && s_[i_] != '\n') ++i_;
  }
  void skip_blank() {
    while (i_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
      else if (s_[i_] == '#') skip_comment();
      else break;
    }
  }
  nlohmann::json value() {
    skip_space();
    if (i_ >= s_.size()) fail("expected a value");
    const char ch = s_[i_];
    if (ch == '"') {
      const auto end = s_.find('"', i_ + 1);
      if (end == std::string_view::npos || s_.substr(i_, end - i_).find('\n') != std::string_view::npos)
        fail("a string is not closed");
      std::string v(s_.substr(i_ + 1, end - i_ - 1));
      i_ = end + 1;
      return v;
    }
    if (ch == '[') {
      if (++depth_ > kMaxDepth) fail("arrays nested deeper than " + std::to_string(kMaxDepth));
      ++i_;
      nlohmann::json a = nlohmann::json::array();
      while (true) {
        skip_blank();
        if (i_ < s_.size() && s_[i_] == ']') {
          ++i_;
          --depth_;
          return a;
        }
        a.push_back(value());
        skip_blank();
        if (i_ < s_.size() && s_[i_] == ',') ++i_;
        else if (i_ >= s_.size() || s_[i_] != ']') fail("expected ',' or ']' in an array");
      }
    }
    std::size_t k = i_;
    while (k < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[k])) || s_[k] == '-' || s_[k] == '.')) ++k;
    const std::string word(s_.substr(i_, k - i_));
    i_ = k;
    if (word == "true") return true;
    if (word == "false") return false;
    std::int64_t v = 0;
    const auto r = std::from_chars(word.data(), word.data() + word.size(), v);
    if (word.empty() || r.ec != std::errc() || r.ptr != word.data() + word.size())
      fail("'" + word + "' is not a string, an integer, a boolean or an array");
    return v;
  }

  static constexpr int kMaxDepth = 64;
  std::string_view s_;
  std::string file_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

Imported import_torchtitan(const Scenario& base, std::string_view text, const std::string& file) {
  const nlohmann::json root = Toml(text, file).parse();
  const auto& m = base.model;
  Imported out{base, {}, {}};
  std::set<std::string> used;
  auto table = [&](const std::string& t) -> const nlohmann::json& {
    static const nlohmann::json empty = nlohmann::json::object();
    used.insert(t);
    return root.contains(t) ? root[t] : empty;
  };
  auto get = [&](const std::string& t, const std::string& key) -> const nlohmann::json* {
    const auto& tb = table(t);
    used.insert(t + "." + key);
    return tb.contains(key) ? &tb[key] : nullptr;
  };
  auto integer = [&](const std::string& t, const std::string& key, std::int64_t dflt) {
    const auto* v = get(t, key);
    if (!v) return dflt;
    if (!v->is_number_integer() || v->get<std::int64_t>() < 1 || v->get<std::int64_t>() > kMaxTokensPerStep)
      throw InputError(file, t + "." + key,
                       "must be an integer in [1, " + str(kMaxTokensPerStep) + "] [import-value]");
    return v->get<std::int64_t>();
  };
  auto text_of = [&](const std::string& t, const std::string& key, const std::string& dflt) {
    const auto* v = get(t, key);
    if (!v) return dflt;
    if (!v->is_string()) throw InputError(file, t + "." + key, "must be a string [import-value]");
    return v->get<std::string>();
  };
  auto boolean = [&](const std::string& t, const std::string& key, bool dflt) {
    const auto* v = get(t, key);
    if (!v) return dflt;
    if (!v->is_boolean()) throw InputError(file, t + "." + key, "must be true or false [import-value]");
    return v->get<bool>();
  };

  Plan p;
  const std::int64_t replicate = integer("parallelism", "data_parallel_replicate_degree", 1);
  const std::int64_t shard = integer("parallelism", "data_parallel_shard_degree", 1);
  if (replicate > 1 && shard > 1)
    throw InputError(file, "parallelism.data_parallel_replicate_degree",
                     "HSDP (replicate and shard both above 1) is not a plan Strata models [import-value]");
  p.tp = integer("parallelism", "tensor_parallel_degree", 1);
  p.pp = integer("parallelism", "pipeline_parallel_degree", 1);
  p.cp = integer("parallelism", "context_parallel_degree", 1);
  p.ep = integer("parallelism", "expert_parallel_degree", 1);
  for (auto [d, key] : {std::pair{replicate, "data_parallel_replicate_degree"}, {shard, "data_parallel_shard_degree"},
                        {p.tp, "tensor_parallel_degree"}, {p.pp, "pipeline_parallel_degree"},
                        {p.cp, "context_parallel_degree"}, {p.ep, "expert_parallel_degree"}})
    bounded(d, 1, kMaxGpus, file, std::string("parallelism.") + key);
  p.dp = replicate * shard;
  if (p.dp * p.tp * p.pp * p.cp != base.cluster.gpus())
    throw InputError(file, "parallelism",
                     "the degrees multiply to " + str(p.dp * p.tp * p.pp * p.cp) + " GPUs, the scenario has " +
                         str(base.cluster.gpus()) + " [import-world]");
  // FSDP over dp_shard x cp whenever either is above 1; "default" reshards
  // after forward except under pipelining (torchtitan apply_fsdp:
  // reshard_after_forward = not pp_enabled).
  const std::string reshard = text_of("parallelism", "fsdp_reshard_after_forward", "default");
  if (reshard != "default" && reshard != "always" && reshard != "never")
    throw InputError(file, "parallelism.fsdp_reshard_after_forward",
                     "'" + reshard + "' is not default, always or never [import-value]");
  const bool resharded = reshard == "always" || (reshard == "default" && p.pp == 1);
  p.zero = shard * p.cp > 1 ? (resharded ? 3 : 2) : 0;
  p.sequence_parallel = p.tp > 1;
  if (p.pp > 1) {
    const std::string s = text_of("parallelism", "pipeline_parallel_schedule", "1F1B");
    p.schedule = s == "GPipe" ? Schedule::GPipe : s == "Interleaved1F1B" ? Schedule::Interleaved : Schedule::OneFOneB;
    if (s != "GPipe" && s != "Interleaved1F1B" && s != "1F1B")
      throw InputError(file, "parallelism.pipeline_parallel_schedule",
                       "'" + s + "' is not GPipe, 1F1B or Interleaved1F1B [import-value]");
    std::vector<std::int64_t> chunks;
    if (const auto* sp = get("parallelism", "pipeline_parallel_split_points")) {
      std::int64_t at = 0;
      for (const auto& v : *sp) {
        const std::string name = v.is_string() ? v.get<std::string>() : "";
        if (name.rfind("layers.", 0) != 0)
          throw InputError(file, "parallelism.pipeline_parallel_split_points",
                           "'" + name + "' is not layers.<i> [import-value]");
        const std::int64_t next = bounded(to_int(name.substr(7), file, "parallelism.pipeline_parallel_split_points"),
                                          0, kMaxLayers, file, "parallelism.pipeline_parallel_split_points");
        if (static_cast<std::int64_t>(chunks.size()) >= kMaxChunks)
          throw InputError(file, "parallelism.pipeline_parallel_split_points",
                           "more than " + str(kMaxChunks) + " chunks [import-value]");
        chunks.push_back(next - at);
        at = next;
      }
      chunks.push_back(m.layers - at);
    } else if (const auto* parts = get("parallelism", "module_fqns_per_model_part")) {
      for (const auto& part : *parts) {
        std::int64_t n = 0;
        for (const auto& name : part)
          if (name.is_string() && name.get<std::string>().rfind("layers.", 0) == 0) ++n;
        chunks.push_back(n);
      }
    } else {
      p.virtual_stages = p.schedule == Schedule::Interleaved ? 2 : 1;
      chunks = strategies::chunk_layers(p, m.layers);
    }
    std::int64_t total = 0;
    for (auto c : chunks) total += c;
    if (total != m.layers || chunks.size() % static_cast<std::size_t>(p.pp) != 0 ||
        std::any_of(chunks.begin(), chunks.end(), [](auto c) { return c < 0; }))
      throw InputError(file, "parallelism.pipeline_parallel_split_points",
                       "the split does not give " + str(p.pp) + " stages the model's " + str(m.layers) +
                           " layers [import-value]");
    p.virtual_stages = bounded(static_cast<std::int64_t>(chunks.size()) / p.pp, 1, kMaxVirtualStages, file,
                               "parallelism.pipeline_parallel_degree");
    set_chunks(p, chunks, m.layers);
  }
  // Batch.
  const std::int64_t local = integer("training", "local_batch_size", 8);
  auto& b = out.scenario.batch;
  b.micro = p.pp > 1 ? integer("parallelism", "pipeline_parallel_microbatch_size", 1) : local;
  b.global = integer("training", "global_batch_size", local * p.dp);
  if (p.pp > 1 && local * p.dp != b.global)
    throw InputError(file, "training.local_batch_size",
                     str(local) + " per data-parallel rank is not global_batch_size / " + str(p.dp) + " [import-value]");
  if (b.global % (b.micro * p.dp) != 0)
    throw InputError(file, "training.global_batch_size",
                     str(b.global) + " is not whole microbatches of " + str(b.micro) + " on " + str(p.dp) +
                         " data-parallel ranks [import-value]");
  if (const auto* seq = get("training", "seq_len"))
    require_model(seq->is_number_integer() && seq->get<std::int64_t>() == m.seq_len, file, "training.seq_len",
                  seq->dump(), str(m.seq_len));
  const std::string param = text_of("training", "mixed_precision_param", "bfloat16");
  const bool fp8 = [&] {
    const auto* conv = get("model", "converters");
    return conv && conv->is_array() && std::find(conv->begin(), conv->end(), "float8") != conv->end();
  }();
  p.precision = param == "float32" ? Precision::FP32 : fp8 ? Precision::FP8 : Precision::BF16;
  // torchao's float8 converter scales each tensor dynamically (its default
  // recipe), or each row ([float8] recipe_name "rowwise").
  if (fp8) {
    const std::string recipe = text_of("float8", "recipe_name", "tensorwise");
    if (recipe == "tensorwise")
      p.fp8_recipe = cost::Fp8Recipe::Tensorwise;
    else if (recipe == "rowwise")
      p.fp8_recipe = cost::Fp8Recipe::Rowwise;
    else
      throw InputError(file, "float8.recipe_name",
                       "'" + recipe + "' is not tensorwise or rowwise (rowwise_with_gw_hp keeps the weight "
                       "gradient in 16 bits, which Strata does not price) [import-value]");
  }
  if (boolean("training", "enable_cpu_offload", false)) {
    p.offload.weights = true;
    p.offload.optimizer = OffloadTarget::Cpu;
  }
  // Recompute.
  const std::string mode = text_of("activation_checkpoint", "mode", "selective");
  if (mode == "full") {
    p.recompute = Recompute::Full;
  } else if (mode == "selective") {
    const std::string option = text_of("activation_checkpoint", "selective_ac_option", "2");
    if (option == "op") {
      p.recompute = Recompute::SelectiveOp;
    } else {
      p.recompute = Recompute::EveryNth;
      p.recompute_k = bounded(to_int(option, file, "activation_checkpoint.selective_ac_option"), 1, kMaxLayers, file,
                              "activation_checkpoint.selective_ac_option");
    }
  } else if (mode != "none") {
    throw InputError(file, "activation_checkpoint.mode", "'" + mode + "' is not none, full or selective [import-value]");
  }
  // Optimizer.
  const std::string name = text_of("optimizer", "name", "AdamW");
  if (name == "Adam") p.optimizer = Optimizer::Adam;
  else if (name == "AdamW") p.optimizer = Optimizer::AdamW;
  else throw InputError(file, "optimizer.name", "'" + name + "' is not Adam or AdamW [import-value]");
  // The engine's defaults, then its keys.
  strategies::apply_stack(strategies::bundled_stack(export_stack_name(ExportTarget::TorchTitan)), p, {});
  auto& im = p.implementation;
  im.tp_comm_overlap = boolean("parallelism", "enable_async_tensor_parallel", false) ? TpCommOverlap::Ring
                                                                                     : TpCommOverlap::None;
  im.fused_elementwise = boolean("training", "compile", false);
  // The loss under loss_parallel when tp > 1 (the stack's), unless disabled.
  if (boolean("parallelism", "disable_loss_parallel", false)) im.cross_entropy = strategies::CrossEntropy::Unfused;
  // torch.distributed's context parallelism: "allgather" (torchtitan's
  // default, the stack's all_gather_ring) or "alltoall", the ring.
  if (const std::string rotate = text_of("parallelism", "context_parallel_rotate_method", "allgather");
      rotate == "alltoall")
    im.cp_comm = strategies::CpComm::P2p;
  else if (rotate == "allgather")
    im.cp_comm = strategies::CpComm::AllGatherRing;
  else
    throw InputError(file, "parallelism.context_parallel_rotate_method",
                     "must be \"allgather\" or \"alltoall\" [import-value]");
  // FSDP2's MixedPrecisionPolicy(reduce_dtype): the reduction's dtype; the
  // sharded gradients stay in the sharded parameters' fp32 (the stack's
  // fp32_grad_accumulation), so a float32 reduction is the accumulation's.
  if (p.precision != Precision::FP32) {
    const std::string reduce = text_of("training", "mixed_precision_reduce", "float32");
    if (reduce != "float32" && reduce != "bfloat16")
      throw InputError(file, "training.mixed_precision_reduce", "must be \"float32\" or \"bfloat16\" [import-value]");
    im.grad_reduce_dtype = reduce == "bfloat16"           ? strategies::GradReduceDtype::BF16
                           : im.fp32_grad_accumulation ? strategies::GradReduceDtype::Accumulation
                                                       : strategies::GradReduceDtype::FP32;
  }
  for (const char* k : {"name", "flavor"}) used.insert(std::string("model.") + k);
  // Keys not part of a plan (data, checkpoint, learning rate, ...).
  for (const auto& [t, tb] : root.items()) {
    if (!tb.is_object()) {
      out.ignored.push_back(t);
      continue;
    }
    for (const auto& [k, v] : tb.items())
      if (!used.count(t + "." + k)) out.ignored.push_back(t + "." + k);
  }
  out.scenario.plan = p;
  return out;
}

}  // namespace

Imported import_plan(const Scenario& base, ExportTarget from, std::string_view text, const std::string& file) {
  Imported out;
  switch (from) {
    case ExportTarget::Megatron: out = import_megatron(base, text, file); break;
    case ExportTarget::DeepSpeed: out = import_deepspeed(base, text, file); break;
    case ExportTarget::TorchTitan: out = import_torchtitan(base, text, file); break;
  }
  // Priced as the engine runs it: its stack, with every implementation
  // setting the file gave (or the stack's default, applied above) fixed.
  out.scenario.space.reset();
  out.scenario.stack = strategies::bundled_stack(export_stack_name(from));
  for (const auto& [key, name] : EnumNames<strategies::ImplKey>::table) out.scenario.implementation_keys.add(key);
  return out;
}

std::string imported_scenario_json(std::string_view base_text, const Imported& im, ExportTarget from) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(base_text, nullptr, true, true);
  const auto plan = nlohmann::ordered_json::parse(strategies::canonical_json(im.scenario.plan, im.scenario.batch));
  j.erase("space");
  j["batch"] = plan["batch"];
  j["plan"] = plan["plan"];
  j["stack"] = std::string(export_stack_name(from));
  return j.dump(2) + "\n";
}

}  // namespace strata::report
