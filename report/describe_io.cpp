#include <algorithm>

#include <nlohmann/json.hpp>

#include "report/describe.hpp"
#include "report/fields_io.hpp"
#include "report/table.hpp"

namespace strata::report {

namespace {

using nlohmann::ordered_json;

std::string dump(const ordered_json& j) { return j.dump(2) + "\n"; }

std::string render(const Table& t, Format f) {
  return f == Format::Csv ? to_csv(t) : to_text(t);
}

std::string num(double v) {
  // Shortest round-tripping form for CSV and tables of exact values.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

ordered_json model_json(const cost::ModelSpec& m) {
  ordered_json j;
  j["name"] = m.name;
  if (m.chain) {
    j["params"] = m.chain->params();
    j["layers"] = m.layers;
    j["chain"] = {{"input_bytes", m.chain->input_bytes},
                  {"fwd_flops", m.chain->fwd_flops()},
                  {"bwd_flops", m.chain->bwd_flops()}};
    j["source"] = m.source;
    return j;
  }
  j["params"] = cost::total_params(m);
  // Per token: every parameter but the routed experts it does not visit.
  j["active_params"] = cost::active_params(m);
  j["layers"] = m.layers;
  j["hidden"] = m.hidden;
  j["heads"] = m.heads;
  j["kv_heads"] = m.kv_heads;
  j["head_dim"] = m.head_dim();
  j["ffn_hidden"] = m.ffn_hidden;
  j["vocab"] = m.vocab;
  j["seq_len"] = m.seq_len;
  j["mlp"] = enum_name(m.mlp);
  j["norm"] = enum_name(m.norm);
  j["norm_placement"] = enum_name(m.norm_placement);
  j["block"] = enum_name(m.block);
  j["qk_norm"] = enum_name(m.qk_norm);
  j["bias"] = m.bias;
  j["qkv_bias"] = m.has_qkv_bias();
  j["position_embedding"] = enum_name(m.position_embedding);
  if (m.position_embedding == cost::PositionEmbedding::Learned) j["max_positions"] = m.position_rows();
  j["tied_embeddings"] = m.tied_embeddings;
  j["dropout"] = m.dropout;
  if (m.moe) {
    ordered_json moe = {{"experts", m.moe->experts},
                        {"top_k", m.moe->top_k},
                        {"expert_ffn", m.expert_ffn()}};
    if (m.moe->shared_experts > 0) {
      moe["shared_experts"] = m.moe->shared_experts;
      moe["shared_ffn"] = m.shared_ffn();
      moe["shared_gate"] = m.moe->shared_gate;
    }
    moe["first_dense"] = m.moe->first_dense;
    // The rest of the layer pattern where it is not the default.
    if (m.moe->every > 1) {
      moe["every"] = m.moe->every;
      moe["offset"] = m.moe->offset;
    }
    if (!m.moe->dense_layers.empty()) moe["dense_layers"] = m.moe->dense_layers;
    moe["moe_blocks"] = m.moe_blocks();
    j["moe"] = moe;
  }
  if (m.mla) {
    ordered_json mla;
    mla["q_lora_rank"] = m.mla->q_lora_rank ? ordered_json(*m.mla->q_lora_rank) : ordered_json(nullptr);
    mla["kv_lora_rank"] = m.mla->kv_lora_rank;
    mla["qk_nope_head_dim"] = m.mla->qk_nope_head_dim;
    mla["qk_rope_head_dim"] = m.mla->qk_rope_head_dim;
    mla["v_head_dim"] = m.mla->v_head_dim;
    j["mla"] = mla;
  }
  if (m.mtp_layers > 0) j["mtp_layers"] = m.mtp_layers;
  if (m.attn_softcap) j["attn_softcap"] = *m.attn_softcap;
  if (m.logit_softcap) j["logit_softcap"] = *m.logit_softcap;
  if (m.attention_window) {
    ordered_json w;
    w["size"] = m.attention_window->size;
    if (m.attention_window->global_every) w["global_every"] = *m.attention_window->global_every;
    j["attention_window"] = w;
  }
  j["source"] = m.source;
  return j;
}

ordered_json node_json(const cost::NodeSpec& n) {
  ordered_json j{{"name", n.name}};
  j.update(node_links_json(n));
  return j;
}

ordered_json gpu_json(const cost::GpuSpec& g) {
  ordered_json j;
  j["name"] = g.name;
  j["memory_GiB"] = g.memory_GiB;
  j["hbm_GBps"] = g.hbm_GBps;
  j["tflops"] = tflops_json(g.tflops);
  j["sms"] = g.sms;
  j["gemm_tile"] = g.gemm_tile.known() ? ordered_json{{"m", g.gemm_tile.m}, {"n", g.gemm_tile.n}} : ordered_json();
  j["fp8_block_scaling"] = std::string(enum_name(g.fp8_block_scaling));
  j["server"] = node_json(g.server);
  j["source"] = g.source;
  return j;
}

// A peak, or "-" when the GPU lacks the format.
std::string peak(double v) { return v > 0 ? fixed(v, 1) : "-"; }

}  // namespace

std::string list_models(const std::vector<cost::ModelSpec>& models, Format f) {
  if (f == Format::Json) {
    ordered_json arr = ordered_json::array();
    for (const auto& m : models) arr.push_back(model_json(m));
    return dump(arr);
  }
  Table t;
  t.columns = {"name", "params", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
               "vocab", "seq_len", "mlp", "norm", "moe", "kind"};
  t.align = {Align::Left, Align::Right, Align::Right, Align::Right, Align::Right, Align::Right,
             Align::Right, Align::Right, Align::Right};
  for (const auto& m : models) {
    if (m.chain) {  // a layer chain has none of the transformer's dimensions
      const double p = static_cast<double>(m.chain->params());
      std::vector<std::string> row{m.name, f == Format::Csv ? num(p) : count(p),
                                   std::to_string(m.layers)};
      row.resize(t.columns.size() - 1, "-");
      row.push_back("chain");
      t.add_row(row);
      continue;
    }
    const double p = static_cast<double>(cost::total_params(m));
    t.add_row({m.name, f == Format::Csv ? num(p) : count(p), std::to_string(m.layers),
               std::to_string(m.hidden), std::to_string(m.heads), std::to_string(m.kv_heads),
               std::to_string(m.ffn_hidden), std::to_string(m.vocab), std::to_string(m.seq_len),
               std::string(enum_name(m.mlp)), std::string(enum_name(m.norm)),
               m.moe ? std::to_string(m.moe->experts) + "x top" + std::to_string(m.moe->top_k)
                     : "-",
               "transformer"});
  }
  return render(t, f);
}

std::string list_gpus(const std::vector<cost::GpuSpec>& gpus, Format f) {
  if (f == Format::Json) {
    ordered_json arr = ordered_json::array();
    for (const auto& g : gpus) arr.push_back(gpu_json(g));
    return dump(arr);
  }
  Table t;
  t.columns = {"name", "memory_GiB", "hbm_GBps", "fp32_tflops", "tf32_tflops", "fp16_tflops",
               "bf16_tflops", "fp8_tflops", "fp4_tflops", "fp8_block_scaling", "sms", "gemm_tile", "server"};
  t.align = {Align::Left, Align::Right, Align::Right, Align::Right, Align::Right, Align::Right, Align::Right,
             Align::Right, Align::Right, Align::Left, Align::Right, Align::Right, Align::Left};
  for (const auto& g : gpus)
    t.add_row({g.name, fixed(g.memory_GiB, 1), fixed(g.hbm_GBps, 0), peak(g.tflops.fp32),
               peak(g.tflops.tf32), peak(g.tflops.fp16), peak(g.tflops.bf16), peak(g.tflops.fp8),
               peak(g.tflops.fp4), std::string(enum_name(g.fp8_block_scaling)),
               g.sms > 0 ? std::to_string(g.sms) : "-",
               g.gemm_tile.known() ? std::to_string(g.gemm_tile.m) + "x" + std::to_string(g.gemm_tile.n) : "-",
               g.server.name});
  return render(t, f);
}

std::string list_clusters(const std::vector<cost::ClusterSpec>& clusters, Format f) {
  if (f == Format::Json) {
    ordered_json arr = ordered_json::array();
    for (const auto& c : clusters) {
      ordered_json j = node_json(c.node);
      j["name"] = c.name;
      j["gpu"] = c.gpu.name;
      j["nodes"] = c.nodes;
      j["source"] = c.source;
      arr.push_back(j);
    }
    return dump(arr);
  }
  Table t;
  t.columns = {"name", "gpu", "gpus_per_node", "intra_node_GBps", "inter_node_GBps_per_gpu",
               "pcie_GBps", "host_memory_GiB", "nvme_GBps", "nvme_GiB"};
  t.align = {Align::Left, Align::Left, Align::Right, Align::Right, Align::Right,
             Align::Right, Align::Right, Align::Right, Align::Right};
  for (const auto& c : clusters)
    t.add_row({c.name, c.gpu.name, std::to_string(c.node.gpus_per_node),
               fixed(c.node.intra_node_GBps, 0), fixed(c.node.inter_node_GBps_per_gpu, 2),
               fixed(c.node.pcie_GBps, 0), fixed(c.node.host_memory_GiB, 0),
               fixed(c.node.nvme_GBps, 0), fixed(c.node.nvme_GiB, 0)});
  return render(t, f);
}

std::string list_stacks(const std::vector<strategies::Stack>& stacks, Format f) {
  if (f == Format::Json) {
    ordered_json arr = ordered_json::array();
    for (const auto& s : stacks) {
      ordered_json settings = ordered_json::object();
      for (const auto& st : s.settings)
        settings[std::string(enum_name(st.key))] = {{"value", strategies::setting_text(st)},
                                                    {"source", st.source}};
      arr.push_back({{"name", s.name}, {"description", s.description}, {"settings", settings}});
    }
    return dump(arr);
  }
  Table t;
  t.columns = {"stack", "setting", "value", "source"};
  t.align = {Align::Left, Align::Left, Align::Left, Align::Left};
  for (const auto& s : stacks)
    for (const auto& st : s.settings)
      t.add_row({s.name, std::string(enum_name(st.key)), strategies::setting_text(st), st.source});
  return render(t, f);
}

namespace {

// A layer-chain model: one row per stage, for one microbatch of
// `micro_batch` samples; the terminal table folds runs of alike stages.
std::string describe_chain(const cost::ModelSpec& model, std::int64_t micro_batch, Format f) {
  const cost::LayerChain& c = *model.chain;
  const auto b = static_cast<double>(micro_batch);
  if (f == Format::Json) {
    ordered_json j;
    j["model"] = model_json(model);
    j["params"] = c.params();
    j["flops_per_sample"] = c.fwd_flops() + c.bwd_flops();
    j["basis"] = {{"micro_batch", micro_batch},
                  {"note", "per-layer values for one microbatch; FLOPs count matrix products"}};
    j["input_bytes"] = c.input_bytes * micro_batch;
    ordered_json arr = ordered_json::array();
    for (const auto& l : c.layers)
      arr.push_back({{"name", l.name},
                     {"params", l.params},
                     {"fwd_flops", l.fwd_flops * b},
                     {"bwd_flops", l.bwd_flops * b},
                     {"output_bytes", l.output_bytes * micro_batch},
                     {"saved_bytes", l.saved_bytes * micro_batch},
                     {"workspace_bytes", l.workspace_bytes * micro_batch}});
    j["layers"] = arr;
    return dump(j);
  }
  Table t;
  t.columns = {"layer", "params", "fwd_flops", "bwd_flops", "output_bytes", "saved_bytes",
               "workspace_bytes"};
  t.align = {Align::Left, Align::Right, Align::Right, Align::Right, Align::Right, Align::Right,
             Align::Right};
  if (f == Format::Csv) {
    for (const auto& l : c.layers)
      t.add_row({l.name, std::to_string(l.params), num(l.fwd_flops * b), num(l.bwd_flops * b),
                 std::to_string(l.output_bytes * micro_batch),
                 std::to_string(l.saved_bytes * micro_batch),
                 std::to_string(l.workspace_bytes * micro_batch)});
    return to_csv(t);
  }
  auto alike = [](const cost::ChainLayer& x, const cost::ChainLayer& y) {
    return x.fwd_flops == y.fwd_flops && x.bwd_flops == y.bwd_flops && x.params == y.params &&
           x.output_bytes == y.output_bytes && x.saved_bytes == y.saved_bytes &&
           x.workspace_bytes == y.workspace_bytes;
  };
  for (std::size_t i = 0; i < c.layers.size();) {
    std::size_t j = i + 1;
    while (j < c.layers.size() && alike(c.layers[j], c.layers[i])) ++j;
    const auto& l = c.layers[i];
    const std::string name =
        j - i > 1 ? l.name + " … " + c.layers[j - 1].name + " (x" + std::to_string(j - i) + ")"
                  : l.name;
    t.add_row({name, count(static_cast<double>(l.params)), si(l.fwd_flops * b),
               si(l.bwd_flops * b), bytes_iec(static_cast<double>(l.output_bytes) * b),
               bytes_iec(static_cast<double>(l.saved_bytes) * b),
               bytes_iec(static_cast<double>(l.workspace_bytes) * b)});
    i = j;
  }
  std::string out;
  out += "model            " + printable(model.name) + " (layer chain)\n";
  out += "parameters       " + count(static_cast<double>(c.params())) + " (" +
         std::to_string(c.params()) + ")\n";
  out += "FLOPs per sample " + si(c.fwd_flops() + c.bwd_flops()) +
         " (forward + backward, matrix products)\n";
  out += "layers           " + std::to_string(model.layers) + ", input " +
         bytes_iec(static_cast<double>(c.input_bytes) * b) + "\n";
  out += "per layer        one microbatch of " + std::to_string(micro_batch) + " sample(s)\n";
  out += "source           " + printable(model.source) + "\n\n";
  return out + to_text(t);
}

}  // namespace

namespace {

// "1st", "2nd", "3rd", "4th", "11th", "22nd".
std::string ordinal(std::int64_t n) {
  const std::int64_t units = n % 10;
  const bool teen = n % 100 >= 11 && n % 100 <= 13;
  return std::to_string(n) + (teen ? "th" : units == 1 ? "st" : units == 2 ? "nd" : units == 3 ? "rd" : "th");
}

// The features line's account of a MoE model's dense blocks: "experts in 30
// of 61 blocks: first 3 dense, then every 2nd from block 0, blocks 7, 9
// dense" (MoeSpec's rule, each part only where it applies).
std::string moe_pattern_feature(const cost::ModelSpec& m) {
  if (!m.moe) return "";
  const cost::MoeSpec& x = *m.moe;
  std::string parts;
  auto add = [&](const std::string& p) { parts += (parts.empty() ? "" : ", ") + p; };
  if (x.first_dense > 0) add("first " + std::to_string(x.first_dense) + " dense");
  if (x.every > 1) add("every " + ordinal(x.every) + " block from block " + std::to_string(x.offset));
  if (!x.dense_layers.empty()) {
    std::string list;
    for (const std::int64_t i : x.dense_layers) list += (list.empty() ? "" : ", ") + std::to_string(i);
    add((x.dense_layers.size() == 1 ? "block " : "blocks ") + list + " dense");
  }
  return "experts in " + std::to_string(m.moe_blocks()) + " of " + std::to_string(m.layers) + " blocks (" +
         parts + ")";
}

}  // namespace

std::string describe(const cost::ModelSpec& model, const cost::ExpandOptions& options,
                     const strategies::Scenario* scenario, Format f) {
  if (model.chain) return describe_chain(model, options.micro_batch, f);
  const cost::OpChain chain = cost::expand(model, options);
  const double tokens = static_cast<double>(options.micro_batch * model.seq_len);
  const double flops_per_token = chain.model_flops() / tokens;
  // Layers in order: embedding, block.0 … block.(L-1), head.
  std::vector<std::pair<std::string, const cost::Layer*>> layers;
  layers.emplace_back(std::string(chain.embedding.name), &chain.embedding);
  for (std::int64_t i = 0; i < chain.blocks; ++i)
    layers.emplace_back("block." + std::to_string(i), &chain.block_at(i));
  layers.emplace_back(std::string(chain.head.name), &chain.head);

  if (f == Format::Json) {
    ordered_json j;
    j["model"] = model_json(model);
    j["params"] = chain.params();
    j["active_params"] = cost::active_params(model);
    j["flops_per_token"] = flops_per_token;
    j["tokens"] = tokens;
    j["basis"] = {{"micro_batch", options.micro_batch},
                  {"seq_len", model.seq_len},
                  {"precision", enum_name(options.precision)},
                  {"attention", enum_name(options.attention)},
                  {"note", "per-op values for one microbatch of the whole model (no "
                           "parallelism); FLOPs count matrix products (model FLOPs)"}};
    if (scenario)
      j["scenario"] = {{"gpus", scenario->cluster.gpus()},
                       {"dp", scenario->plan.dp},
                       {"tp", scenario->plan.tp},
                       {"pp", scenario->plan.pp},
                       {"cp", scenario->plan.cp},
                       {"ep", scenario->plan.ep},
                       {"global_batch", scenario->batch.global},
                       {"micro_batch", scenario->batch.micro},
                       {"microbatches", strategies::microbatches(scenario->plan, scenario->batch)}};
    ordered_json arr = ordered_json::array();
    for (const auto& [name, layer] : layers) {
      ordered_json ops = ordered_json::array();
      for (const auto& op : layer->ops)
        ops.push_back({{"op", op.name},
                       {"params", op.params},
                       {"fwd_flops", op.fwd_flops},
                       {"bwd_flops", op.bwd_flops},
                       {"saved_bytes", op.saved_bytes}});
      arr.push_back({{"name", name}, {"ops", ops}});
    }
    j["layers"] = arr;
    return dump(j);
  }

  Table t;
  t.columns = {"layer", "op", "params", "fwd_flops", "bwd_flops", "saved_bytes"};
  t.align = {Align::Left, Align::Left, Align::Right, Align::Right, Align::Right, Align::Right};
  if (f == Format::Csv) {
    for (const auto& [name, layer] : layers)
      for (const auto& op : layer->ops)
        t.add_row({name, std::string(op.name), std::to_string(op.params), num(op.fwd_flops),
                   num(op.bwd_flops), std::to_string(op.saved_bytes)});
    return to_csv(t);
  }
  // Terminal: a summary, then the embedding, each kind of block once (with
  // how many blocks have it) and the head.
  auto add = [&](const std::string& name, const cost::Layer& layer) {
    for (const auto& op : layer.ops)
      t.add_row({name, std::string(op.name), count(static_cast<double>(op.params)), si(op.fwd_flops),
                 si(op.bwd_flops), bytes_iec(static_cast<double>(op.saved_bytes))});
  };
  add(std::string(chain.embedding.name), chain.embedding);
  // Each kind of block once, with how many blocks have it.
  const std::vector<std::int64_t> counts = chain.kind_counts(0, chain.blocks);
  for (std::size_t k = 0; k < chain.kinds.size(); ++k) {
    const cost::Layer& kind = chain.kinds[k];
    const bool experts = std::any_of(kind.ops.begin(), kind.ops.end(), [](const cost::Op& op) { return op.expert; });
    std::string name = "block";
    if (chain.kinds.size() > 1) {
      // The first block of this kind says what it is.
      const auto at = std::find(chain.kind_of.begin(), chain.kind_of.end(), static_cast<std::int32_t>(k));
      const bool windowed = model.windowed_at(at - chain.kind_of.begin());
      name = std::string(model.moe ? (experts ? "moe " : "dense ") : "") + (windowed ? "local " : model.attention_window ? "global " : "") + "block";
    }
    add(name + " (x" + std::to_string(counts[k]) + ")", kind);
  }
  add(std::string(chain.head.name), chain.head);
  std::string out;
  out += "model            " + printable(model.name) + "\n";
  out += "parameters       " + count(static_cast<double>(chain.params())) + " (" +
         std::to_string(chain.params()) + ")\n";
  if (model.moe) {
    const auto active = cost::active_params(model);
    out += "active params    " + count(static_cast<double>(active)) + " (" + std::to_string(active) +
           ") per token: top-" + std::to_string(model.moe->top_k) + " of " +
           std::to_string(model.moe->experts) + " routed experts" +
           (model.moe->shared_experts > 0
                ? " + " + std::to_string(model.moe->shared_experts) + " shared"
                : "") +
           "\n";
  }
  out += "FLOPs per token  " + si(flops_per_token) + " (forward + backward, model FLOPs)\n";
  out += "architecture     " + std::to_string(model.layers) + " layers, hidden " +
         std::to_string(model.hidden) + ", " + std::to_string(model.heads) + " heads (" +
         (model.mla ? std::string("latent kv") : std::to_string(model.kv_heads) + " kv") +
         (model.head_size ? ", head_dim " + std::to_string(model.head_dim()) : "") + "), ffn " +
         std::to_string(model.ffn_hidden) + ", vocab " + std::to_string(model.vocab) + ", seq " +
         std::to_string(model.seq_len) + ", " + std::string(enum_name(model.mlp)) + ", " +
         std::string(enum_name(model.norm)) +
         (model.moe ? ", " + std::to_string(model.moe->experts) + " experts top-" +
                          std::to_string(model.moe->top_k)
                    : "") +
         "\n";
  // The options that differ from a GPT/Llama block, one line.
  std::string features;
  auto feature = [&](bool on, const std::string& what) {
    if (on) features += (features.empty() ? "" : ", ") + what;
  };
  feature(model.mla.has_value(),
          model.mla ? "latent attention (kv rank " + std::to_string(model.mla->kv_lora_rank) +
                          (model.mla->q_lora_rank ? ", q rank " + std::to_string(*model.mla->q_lora_rank) : "") +
                          ", qk " + std::to_string(model.mla->qk_nope_head_dim) + "+" +
                          std::to_string(model.mla->qk_rope_head_dim) + " rope, v " +
                          std::to_string(model.mla->v_head_dim) + ")"
                    : "");
  feature(model.moe && model.moe->expert_ffn.has_value(), "expert ffn " + std::to_string(model.expert_ffn()));
  feature(model.moe && model.moe->shared_experts > 0,
          model.moe ? std::to_string(model.moe->shared_experts) + " shared expert(s) of " +
                          std::to_string(model.shared_ffn()) + (model.moe->shared_gate ? ", gated" : "")
                    : "");
  feature(model.attention_window.has_value(),
          model.attention_window
              ? "sliding window " + std::to_string(model.window_size()) +
                    (model.attention_window->global_every
                         ? ", every " + ordinal(*model.attention_window->global_every) + " layer global"
                         : " in every layer")
              : "");
  feature(model.moe && model.moe_blocks() < model.layers, moe_pattern_feature(model));
  // The modules' ops are the head's ("mtp_…" in the table).
  feature(model.mtp_layers > 0, std::to_string(model.mtp_layers) + " multi-token prediction module" +
                                    (model.mtp_layers > 1 ? "s" : "") + " in the head");
  feature(model.has_qkv_bias() != model.bias, model.has_qkv_bias() ? "q/k/v bias only" : "no q/k/v bias");
  feature(model.attn_softcap.has_value(), model.attn_softcap ? "scores soft-capped at " + num(*model.attn_softcap) : "");
  feature(model.logit_softcap.has_value(), model.logit_softcap ? "logits soft-capped at " + num(*model.logit_softcap) : "");
  feature(model.qk_norm != cost::QkNorm::None, "qk_norm " + std::string(enum_name(model.qk_norm)));
  feature(model.norm_placement != cost::NormPlacement::Pre,
          std::string(enum_name(model.norm_placement)) + " norms");
  feature(model.block != cost::BlockKind::Sequential, std::string(enum_name(model.block)) + " block");
  if (!features.empty()) out += "features         " + features + "\n";
  if (scenario) {
    const auto& p = scenario->plan;
    out += "scenario         " + printable(scenario->cluster.gpus_text()) + ": dp " + std::to_string(p.dp) + ", tp " +
           std::to_string(p.tp) + ", pp " + std::to_string(p.pp) + ", cp " +
           std::to_string(p.cp) + "; " +
           std::to_string(strategies::microbatches(p, scenario->batch)) + " microbatch(es) of " +
           std::to_string(scenario->batch.micro) + " sequence(s) per step\n";
  }
  out += "per op           one microbatch of " + std::to_string(options.micro_batch) +
         " sequence(s), " + std::string(enum_name(options.precision)) + ", " +
         std::string(enum_name(options.attention)) + " attention, whole model\n\n";
  return out + to_text(t);
}

}  // namespace strata::report
