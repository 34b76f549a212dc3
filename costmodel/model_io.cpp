#include "costmodel/model_io.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "costmodel/ops.hpp"
#include "costmodel/presets.hpp"

namespace strata::cost {

namespace {

constexpr std::int64_t kMaxLayers = 100'000;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
constexpr int kMaxIncludeDepth = 8;

// How a model is being read: for a training scenario (a Hugging Face
// config's sequence length must then be given) or to describe it (Strata's
// default length is taken, and said in `notes`).
struct Ctx {
  bool training = false;
  std::vector<std::string>* notes = nullptr;
};

ModelSpec read_model_object(const JsonReader& r, const std::string& base_dir, int depth, const Ctx& ctx);
// `from`: the reader that names the file (its list of files read), or none.
ModelSpec model_from_file_json(const nlohmann::json& j, const std::string& path, int depth,
                               const Ctx& ctx, const JsonReader* from = nullptr);
bool is_hf_config(const nlohmann::json& j);
// A model read from a Hugging Face config, and the context limit it gives.
struct HfModel {
  ModelSpec model;
  std::int64_t max_position_embeddings = 0;
};
HfModel read_hf_config(const JsonReader& file_r, const std::string& path,
                       const std::vector<std::string>& ignore, const JsonReader* ignore_at);

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& p : presets_of("models")) names.emplace_back(p.name);
  return names;
}

ModelSpec preset_at(std::string_view name, const JsonReader& where, int depth) {
  const PresetFile* p = find_preset("models", name);
  if (!p) where.fail(unknown_preset_rule("model", name, model_names()));
  const std::string file(p->path);
  const auto j = parse_json_text(p->text, file);
  return read_model_object(JsonReader(j, file), "", depth + 1, Ctx{});
}

// The keys a model's cross-field rules name: Strata's, or those of the
// Hugging Face config the numbers came from.
struct ModelKeys {
  std::string heads = "heads", kv_heads = "kv_heads", top_k = "moe.top_k";
};

// A MoE layer pattern in its keys, for an error: "first_dense=3, every=2".
std::string moe_pattern_text(const MoeSpec& s) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (s.first_dense > 0) add("first_dense=" + std::to_string(s.first_dense));
  if (s.every > 1) add("every=" + std::to_string(s.every));
  if (s.offset > 0) add("offset=" + std::to_string(s.offset));
  if (!s.dense_layers.empty()) {
    std::string list;
    for (const std::int64_t i : s.dense_layers) list += (list.empty() ? "" : ",") + std::to_string(i);
    add("dense_layers=[" + list + "]");
  }
  return out.empty() ? "the pattern" : out;
}

// Validates the cross-field rules of a complete model.
void check_model(const ModelSpec& m, const JsonReader& r, const ModelKeys& keys = {}) {
  if (!m.head_size && !m.mla && m.hidden % m.heads != 0)
    throw InputError(r.file(), r.child_path(keys.heads),
                     std::to_string(m.heads) + " does not divide hidden=" + std::to_string(m.hidden));
  if (m.kv_heads < 1 || m.heads % m.kv_heads != 0)
    throw InputError(r.file(), r.child_path(keys.kv_heads),
                     std::to_string(m.kv_heads) + " does not divide heads=" + std::to_string(m.heads));
  if (m.moe && m.moe->top_k > m.moe->experts)
    throw InputError(r.file(), r.child_path(keys.top_k),
                     std::to_string(m.moe->top_k) + " exceeds experts=" +
                         std::to_string(m.moe->experts));
  // The layer pattern (MoeSpec): a base model's dense_layers must still
  // name blocks after `layers` changed, and some block must keep its experts.
  if (m.moe && !m.moe->dense_layers.empty() && m.moe->dense_layers.back() >= m.layers)
    r.fail_at("moe", "dense_layers names block " + std::to_string(m.moe->dense_layers.back()) +
                         " of layers=" + std::to_string(m.layers) + " (blocks are 0 … " +
                         std::to_string(m.layers - 1) + ")");
  if (m.moe && m.moe_blocks() == 0)
    r.fail_at("moe", moe_pattern_text(*m.moe) + " leaves no MoE block of layers=" +
                         std::to_string(m.layers));
  if (m.mla && m.qk_norm != QkNorm::None)
    r.fail_at("qk_norm", "applies to q/k/v attention; multi-head latent attention (\"mla\") "
                         "normalises its latents instead");
  if (m.block != BlockKind::Sequential && m.norm_placement != NormPlacement::Pre)
    r.fail_at("block", "a parallel block has its norms before attention and MLP "
                       "(norm_placement \"pre\")");
  if (m.position_embedding == PositionEmbedding::Learned && m.seq_len > m.position_rows())
    r.fail_at("seq_len", std::to_string(m.seq_len) + " exceeds the learned position table's " +
                             std::to_string(m.position_rows()) + " rows (max_positions)");
  // One sequence of seq_len tokens must be countable (scenarios check their
  // batch too: strategies/validate.cpp).
  if (const auto b = size_bound(m, 1, 1, 1, AttentionKernel::Flash); !b.countable())
    r.fail(b.rule("one sequence"));
}

constexpr std::int64_t kMaxChainBytes = std::int64_t{1} << 50;
constexpr double kMaxChainFlops = 1e18;

// Appends the layers of a `chain.layers` array to `out`, expanding
// {"repeat": N, "layers": [...]} groups (repeated names get ".1" … ".N").
void read_chain_layers(const JsonReader& arr, std::vector<ChainLayer>& out, int depth) {
  if (!arr.is_array()) arr.fail("must be an array of layers");
  const auto elems = arr.elements();
  if (elems.empty()) arr.fail("must hold at least one layer");
  for (const auto& e : elems) {
    if (!e.is_object()) e.fail("must be a layer object or a {\"repeat\", \"layers\"} group");
    if (e.has("repeat")) {
      if (depth >= kMaxIncludeDepth) e.fail("repeat groups nest more than 8 deep");
      const std::int64_t n = e.at("repeat").as_int(1, kMaxLayers);
      std::vector<ChainLayer> body;
      read_chain_layers(e.at("layers"), body, depth + 1);
      e.reject_unknown_keys();
      if (static_cast<std::int64_t>(out.size()) + n * static_cast<std::int64_t>(body.size()) >
          kMaxLayers)
        e.fail("the chain expands to more than " + std::to_string(kMaxLayers) + " layers");
      for (std::int64_t k = 1; k <= n; ++k)
        for (const auto& l : body) {
          out.push_back(l);
          if (n > 1) out.back().name += "." + std::to_string(k);
        }
      continue;
    }
    ChainLayer l;
    l.name = e.at("name").as_string();
    if (l.name.empty()) e.fail_at("name", "must not be empty");
    l.fwd_flops = e.at("fwd_flops").as_number(0, kMaxChainFlops);
    l.bwd_flops = e.number_or("bwd_flops", 2 * l.fwd_flops, 0, kMaxChainFlops);
    l.params = e.int_or("params", 0, 0, kMaxChainBytes);
    l.output_bytes = e.at("output_bytes").as_int(1, kMaxChainBytes);
    l.saved_bytes = e.int_or("saved_bytes", 0, 0, kMaxChainBytes);
    l.workspace_bytes = e.int_or("workspace_bytes", 0, 0, kMaxChainBytes);
    e.reject_unknown_keys();
    if (static_cast<std::int64_t>(out.size()) >= kMaxLayers)
      e.fail("the chain expands to more than " + std::to_string(kMaxLayers) + " layers");
    out.push_back(std::move(l));
  }
}

LayerChain read_chain(const JsonReader& r) {
  if (!r.is_object()) r.fail("must be an object {\"input_bytes\", \"layers\"}");
  LayerChain c;
  c.input_bytes = r.at("input_bytes").as_int(1, kMaxChainBytes);
  read_chain_layers(r.at("layers"), c.layers, 0);
  r.reject_unknown_keys();
  return c;
}

// Transformer dimensions, which a layer-chain model does not have.
constexpr const char* kTransformerKeys[] = {
    "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "mlp", "norm",
    "bias", "position_embedding", "tied_embeddings", "dropout", "moe", "head_dim", "qkv_bias",
    "norm_placement", "block", "qk_norm", "max_positions", "mla", "ignore_hf_keys", "rope_theta",
    "attention_window", "mtp_layers", "attn_softcap", "logit_softcap"};

// The model a "file" key names: Strata's format or a Hugging Face config
// (with the object's "ignore_hf_keys"); `hf_max_pos` is set for the latter.
ModelSpec model_file_at(const JsonReader& r, const JsonReader& f, const std::string& base_dir,
                        int depth, const Ctx& ctx, std::optional<std::int64_t>& hf_max_pos) {
  const std::string path = resolve_path(f.as_string(), base_dir);
  if (depth + 1 > kMaxIncludeDepth) f.fail("presets/files nest more than 8 deep");
  const auto j = load_json_file(path);
  f.read_file(path);
  const auto ig = r.get("ignore_hf_keys");
  if (!is_hf_config(j)) {
    if (ig) ig->fail("applies to a Hugging Face config.json; \"file\" names a Strata model");
    return model_from_file_json(j, path, depth + 1, ctx, &f);
  }
  std::vector<std::string> ignore;
  if (ig) {
    if (!ig->is_array()) ig->fail("must be an array of config.json keys");
    for (const auto& e : ig->elements()) ignore.push_back(e.as_string());
  }
  HfModel hf = read_hf_config(JsonReader(j, path), path, ignore, ig ? &*ig : nullptr);
  hf_max_pos = hf.max_position_embeddings;
  return hf.model;
}

// What a Hugging Face config's default sequence length becomes: an error
// for a training scenario, a note otherwise.
void hf_seq_len_default(const JsonReader& where, const std::string& what, const ModelSpec& m,
                        std::int64_t max_pos, const Ctx& ctx) {
  const std::string limit = "max_position_embeddings=" + std::to_string(max_pos) +
                            " is the context limit, not a training length";
  if (ctx.training)
    where.fail(what + " is a Hugging Face config, which gives no training sequence length (" +
               limit + "): write the model as {\"file\": ..., \"seq_len\": N}");
  if (ctx.notes)
    ctx.notes->push_back(m.source.substr(std::string("Hugging Face config ").size()) + ": seq_len " +
                         std::to_string(m.seq_len) + ", Strata's default for a Hugging Face config (" +
                         limit + "); a model object {\"file\": ..., \"seq_len\": N} sets it");
}

// A list of distinct 0-based indices below `layers` (`what`: "block" or
// "layer", as the file calls them), ascending. Duplicates are found after
// sorting, so a long list is read in O(n log n).
std::vector<std::int64_t> layer_list(const JsonReader& list, std::int64_t layers, const std::string& what) {
  if (!list.is_array()) list.fail("must be an array of " + what + " indices (0-based)");
  std::vector<std::pair<std::int64_t, std::size_t>> at;  // (index, position in the list)
  const auto elements = list.elements();
  for (std::size_t k = 0; k < elements.size(); ++k) at.push_back({elements[k].as_int(0, layers - 1), k});
  std::sort(at.begin(), at.end());
  for (std::size_t k = 1; k < at.size(); ++k)
    if (at[k].first == at[k - 1].first)
      elements[std::max(at[k].second, at[k - 1].second)].fail(std::to_string(at[k].first) + " is listed twice");
  std::vector<std::int64_t> out;
  out.reserve(at.size());
  for (const auto& [i, k] : at) out.push_back(i);
  return out;
}

ModelSpec read_model_object(const JsonReader& r, const std::string& base_dir, int depth, const Ctx& ctx) {
  if (depth > kMaxIncludeDepth) r.fail("presets/files nest more than 8 deep");
  if (!r.is_object()) r.fail("must be a preset name, a file path or an object");
  ModelSpec m;
  bool based = false;
  std::optional<std::int64_t> hf_max_pos;  // the base is a Hugging Face config
  if (auto p = r.get("preset")) {
    m = preset_at(p->as_string(), *p, depth);
    based = true;
  }
  if (auto f = r.get("file")) {
    if (based) f->fail("\"file\" and \"preset\" are exclusive");
    m = model_file_at(r, *f, base_dir, depth, ctx, hf_max_pos);
    based = true;
  } else if (auto ig = r.get("ignore_hf_keys")) {
    ig->fail("applies with \"file\" naming a Hugging Face config.json");
  }
  if (auto c = r.get("chain")) {
    if (based && !m.chain)
      c->fail("the base model is a transformer; a layer chain cannot extend it");
    m.chain = read_chain(*c);
  }
  if (m.chain) {
    for (const char* key : kTransformerKeys)
      if (r.has(key))
        r.fail_at(key, "applies to transformer models; this model is a layer chain (\"chain\")");
    m = ModelSpec{.name = r.string_or("name", based ? m.name : "custom"),
                  .layers = static_cast<std::int64_t>(m.chain->layers.size()),
                  .chain = std::move(m.chain),
                  .source = r.string_or("source", m.source)};
    r.reject_unknown_keys();
    return m;
  }
  const ModelSpec base = m;
  m.name = r.string_or("name", based ? m.name : "custom");
  auto dim = [&](const char* key, std::int64_t& field, std::int64_t hi) {
    if (auto v = r.get(key))
      field = v->as_int(1, hi);
    else if (!based)
      r.fail_at(key, "missing required key");
  };
  dim("layers", m.layers, kMaxLayers);
  dim("hidden", m.hidden, kMaxDim);
  dim("heads", m.heads, kMaxDim);
  dim("vocab", m.vocab, kMaxDim);
  dim("seq_len", m.seq_len, kMaxDim);
  if (hf_max_pos && !r.has("seq_len")) {
    if (ctx.training)
      r.fail_at("seq_len", "required with a Hugging Face config as \"file\" (its max_position_embeddings=" +
                               std::to_string(*hf_max_pos) + " is the context limit, not a training length)");
    hf_seq_len_default(r, "", m, *hf_max_pos, ctx);
  }
  // kv_heads and ffn_hidden follow heads and hidden unless given (or unless
  // the base model set them apart).
  if (auto v = r.get("kv_heads"))
    m.kv_heads = v->as_int(1, kMaxDim);
  else if (!based || base.kv_heads == base.heads)
    m.kv_heads = m.heads;
  if (auto v = r.get("ffn_hidden"))
    m.ffn_hidden = v->as_int(1, kMaxDim);
  else if (!based || base.ffn_hidden == 4 * base.hidden)
    m.ffn_hidden = 4 * m.hidden;
  if (auto v = r.get("head_dim")) m.head_size = v->as_int(1, kMaxDim);
  m.mlp = r.enum_or("mlp", m.mlp);
  m.norm = r.enum_or("norm", m.norm);
  m.norm_placement = r.enum_or("norm_placement", m.norm_placement);
  m.block = r.enum_or("block", m.block);
  m.qk_norm = r.enum_or("qk_norm", m.qk_norm);
  m.bias = r.bool_or("bias", m.bias);
  if (auto v = r.get("qkv_bias")) m.qkv_bias = v->as_bool();
  m.position_embedding = r.enum_or("position_embedding", m.position_embedding);
  if (auto v = r.get("rope_theta")) {
    if (m.position_embedding != PositionEmbedding::Rope)
      v->fail("is the base of rope positions, and position_embedding is " +
              std::string(enum_name(m.position_embedding)));
    m.rope_theta = v->as_number(1, 1e12);
  }
  if (auto v = r.get("max_positions")) m.max_positions = v->as_int(1, kMaxDim);
  m.tied_embeddings = r.bool_or("tied_embeddings", m.tied_embeddings);
  m.dropout = r.bool_or("dropout", based ? m.dropout : true);
  if (auto moe = r.get("moe")) {
    MoeSpec s;
    s.experts = moe->at("experts").as_int(1, 65536);
    s.top_k = moe->int_or("top_k", 1, 1, 65536);
    if (auto v = moe->get("expert_ffn")) s.expert_ffn = v->as_int(1, kMaxDim);
    s.shared_experts = moe->int_or("shared_experts", 0, 0, 65536);
    if (auto v = moe->get("shared_ffn")) {
      if (s.shared_experts == 0) v->fail("applies with shared_experts >= 1");
      s.shared_ffn = v->as_int(1, kMaxDim);
    }
    s.shared_gate = moe->bool_or("shared_gate", false);
    if (s.shared_gate && s.shared_experts == 0) moe->fail_at("shared_gate", "applies with shared_experts >= 1");
    s.first_dense = moe->int_or("first_dense", 0, 0, kMaxLayers);
    // The layer pattern (MoeSpec): every `every`-th block from `offset`,
    // less the listed dense ones.
    s.every = moe->int_or("every", 1, 1, kMaxLayers);
    if (auto v = moe->get("offset")) s.offset = v->as_int(0, s.every - 1);
    if (auto d = moe->get("dense_layers")) s.dense_layers = layer_list(*d, m.layers, "block");
    moe->reject_unknown_keys();
    m.moe = s;
  }
  if (auto mla = r.get("mla")) {
    MlaSpec l;
    if (auto q = mla->get("q_lora_rank"); q && !q->is_null()) l.q_lora_rank = q->as_int(1, kMaxDim);
    l.kv_lora_rank = mla->at("kv_lora_rank").as_int(1, kMaxDim);
    l.qk_nope_head_dim = mla->at("qk_nope_head_dim").as_int(0, kMaxDim);
    l.qk_rope_head_dim = mla->at("qk_rope_head_dim").as_int(0, kMaxDim);
    l.v_head_dim = mla->at("v_head_dim").as_int(1, kMaxDim);
    if (l.qk_head_dim() < 1) mla->fail("qk_nope_head_dim + qk_rope_head_dim must be >= 1");
    mla->reject_unknown_keys();
    m.mla = l;
  }
  // null drops a base model's window: every layer attends to the whole
  // sequence.
  if (auto w = r.get("attention_window")) {
    if (w->is_null()) {
      m.attention_window.reset();
    } else {
      if (!w->is_object()) w->fail("must be an object {\"size\", \"global_every\"} or null");
      AttentionWindow aw;
      aw.size = w->at("size").as_int(1, kMaxDim);
      if (auto g = w->get("global_every")) {
        aw.global_every = g->as_int(1, kMaxLayers);
        if (*aw.global_every == 1)
          g->fail("1 makes every layer global (full attention): leave attention_window out instead");
      }
      w->reject_unknown_keys();
      m.attention_window = aw;
    }
  }
  // Multi-token prediction modules (ModelSpec::mtp_layers).
  m.mtp_layers = r.int_or("mtp_layers", m.mtp_layers, 0, kMaxLayers);
  // Soft-capped scores and logits (ModelSpec::attn_softcap, logit_softcap);
  // null drops a base model's.
  for (const auto& [key, cap] : {std::pair{"attn_softcap", &m.attn_softcap}, std::pair{"logit_softcap", &m.logit_softcap}})
    if (auto v = r.get(key)) {
      if (v->is_null()) cap->reset();
      else *cap = v->as_number(1e-6, 1e9);
    }
  m.source = r.string_or("source", m.source);
  r.reject_unknown_keys();
  check_model(m, r);
  return m;
}

// --- Hugging Face config.json ----------------------------------------------

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_hf_config(const nlohmann::json& j) {
  return j.is_object() && (j.contains("num_hidden_layers") || j.contains("n_layer") ||
                           (j.contains("text_config") && j.contains("model_type")));
}

// Reads the first of `keys` that is present and not null.
std::optional<JsonReader> first_of(const JsonReader& r, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto v = r.get(k); v && !v->is_null()) return v;
  return std::nullopt;
}

// Strata's training sequence length for a Hugging Face config, which gives
// only the context limit (max_position_embeddings): 4,096 tokens, the
// pre-training length of Llama 2 (Touvron et al. 2023, Sec. 2.2) and OLMo 2
// (OLMo et al. 2024, "2 OLMo 2 Furious", Sec. 2), or the limit if shorter.
constexpr std::int64_t kHfTrainingSeqLen = 4096;

// The families Strata reads (transformers' model_type) and the defaults of
// their configuration classes (transformers v4.51, models/<type>/
// configuration_<type>.py) for the keys Strata reads, which a config.json
// may leave out.
struct HfFamily {
  std::string_view type;
  const char* defaults;  // JSON object
};
constexpr HfFamily kHfFamilies[] = {
    {"llama", R"({"hidden_act": "silu", "tie_word_embeddings": false, "attention_bias": false,
                 "mlp_bias": false})"},
    {"mistral", R"({"hidden_act": "silu", "tie_word_embeddings": false, "sliding_window": 4096})"},
    {"mixtral", R"({"hidden_act": "silu", "tie_word_embeddings": false, "num_local_experts": 8,
                   "num_experts_per_tok": 2})"},
    {"qwen2", R"({"hidden_act": "silu", "tie_word_embeddings": false, "use_sliding_window": false,
                 "sliding_window": 4096, "max_window_layers": 28})"},
    {"qwen2_moe", R"({"hidden_act": "silu", "tie_word_embeddings": false, "use_sliding_window": false,
                     "sliding_window": 4096, "max_window_layers": 28,
                     "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
                     "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4,
                     "num_experts": 60, "mlp_only_layers": []})"},
    {"qwen3", R"({"hidden_act": "silu", "tie_word_embeddings": false, "head_dim": 128,
                 "attention_bias": false, "use_sliding_window": false, "sliding_window": 4096,
                 "max_window_layers": 28})"},
    {"qwen3_moe", R"({"hidden_act": "silu", "tie_word_embeddings": false, "head_dim": 128,
                     "attention_bias": false, "use_sliding_window": false, "sliding_window": 4096,
                     "max_window_layers": 28,
                     "decoder_sparse_step": 1, "moe_intermediate_size": 768,
                     "num_experts_per_tok": 8, "num_experts": 128, "mlp_only_layers": []})"},
    {"gemma", R"({"hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": true, "head_dim": 256,
                 "attention_bias": false})"},
    {"gemma2", R"({"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
                  "head_dim": 256, "attention_bias": false, "sliding_window": 4096,
                  "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0})"},
    {"gemma3_text", R"({"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
                       "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                       "num_hidden_layers": 26, "num_attention_heads": 8,
                       "num_key_value_heads": 4, "head_dim": 256, "attention_bias": false,
                       "max_position_embeddings": 131072, "sliding_window": 4096,
                       "sliding_window_pattern": 6})"},
    {"phi3", R"({"hidden_act": "silu", "tie_word_embeddings": false})"},
    {"deepseek_v2", R"({"hidden_act": "silu", "tie_word_embeddings": false, "attention_bias": false,
                       "first_k_dense_replace": 0, "moe_layer_freq": 1, "kv_lora_rank": 512,
                       "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                       "v_head_dim": 128, "n_shared_experts": 2, "n_routed_experts": 64,
                       "moe_intermediate_size": 1407})"},
    {"deepseek_v3", R"({"hidden_act": "silu", "tie_word_embeddings": false, "attention_bias": false,
                       "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512,
                       "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                       "v_head_dim": 128, "n_shared_experts": 1, "n_routed_experts": 256,
                       "moe_intermediate_size": 2048, "num_experts_per_tok": 8})"},
    {"gpt2", R"({"activation_function": "gelu_new", "tie_word_embeddings": true, "n_positions": 1024})"},
    {"gpt_neox", R"({"hidden_act": "gelu", "tie_word_embeddings": false, "use_parallel_residual": true,
                    "attention_bias": true})"},
    {"falcon", R"({"tie_word_embeddings": true, "multi_query": true, "parallel_attn": true,
                  "bias": false, "alibi": false, "new_decoder_architecture": false,
                  "max_position_embeddings": 2048})"},
    {"olmo2", R"({"hidden_act": "silu", "tie_word_embeddings": false, "attention_bias": false})"},
};

std::string hf_family_list() {
  std::string out;
  for (const auto& f : kHfFamilies) out += (out.empty() ? "" : ", ") + std::string(f.type);
  return out;
}

// Keys that change the architecture and that Strata does not model: an
// error when the config sets them (not null, not off), unless the model
// object lists them in "ignore_hf_keys".
struct Unmodelled {
  const char* key;
  const char* what;
};
constexpr Unmodelled kUnmodelled[] = {
    {"sliding_window", "sliding-window attention in a family whose layer pattern Strata does not know "
                       "(it reads mistral's, mixtral's, phi3's, gemma2's, gemma3's and qwen's); priced "
                       "without it, attention is over the whole sequence, exact when seq_len is at most "
                       "the window"},
    // Read for deepseek_v3 (mtp_layers), whose modules Strata models.
    {"num_nextn_predict_layers", "multi-token prediction modules, read for deepseek_v3"},
    // MoE layer patterns: read for the families that define them (qwen2_moe
    // and qwen3_moe, deepseek_v2 and deepseek_v3: moe_pattern_family);
    // unmodelled in a config without a model_type, whose rule is not known.
    {"decoder_sparse_step", "MoE blocks only every k-th layer, by a rule Strata reads for qwen2_moe and qwen3_moe"},
    {"mlp_only_layers", "dense MLPs in chosen layers of a MoE model, read for qwen2_moe and qwen3_moe"},
    {"moe_layer_freq", "MoE blocks only every k-th layer, by a rule Strata reads for deepseek_v2 and deepseek_v3"},
};

// Whether a family's MoE layer-pattern key is read (read_hf_config).
bool moe_pattern_family(std::string_view key, std::string_view type) {
  if (key == "moe_layer_freq") return type == "deepseek_v2" || type == "deepseek_v3";
  return type == "qwen2_moe" || type == "qwen3_moe";
}

// The family whose multi-token prediction modules Strata reads
// (transformers' DeepseekV3Config keeps num_nextn_predict_layers).
bool mtp_family(std::string_view type) { return type == "deepseek_v3"; }

// The families whose sliding-window layers Strata reads (read_hf_window).
bool hf_window_family(std::string_view type) {
  for (std::string_view t : {"mistral", "mixtral", "phi3", "gemma2", "gemma3_text", "qwen2", "qwen2_moe",
                             "qwen3", "qwen3_moe"})
    if (t == type) return true;
  return false;
}

// Whether an unmodelled key is in effect in `c` (the config with its
// family's defaults) of model_type `type`.
bool unmodelled_active(const nlohmann::json& c, std::string_view key, std::string_view type) {
  const auto it = c.find(std::string(key));
  if (it == c.end() || it->is_null()) return false;
  if (key == "sliding_window") {
    if (hf_window_family(type)) return false;  // read: read_hf_window
    const auto use = c.find("use_sliding_window");
    return !(use != c.end() && use->is_boolean() && !use->get<bool>());
  }
  if (key == "decoder_sparse_step" || key == "moe_layer_freq" || key == "mlp_only_layers") {
    if (moe_pattern_family(key, type)) return false;  // read: read_hf_config
    if (key == "mlp_only_layers") return !(it->is_array() && it->empty());
    return !(it->is_number_integer() && it->get<std::int64_t>() == 1);
  }
  if (key == "num_nextn_predict_layers")
    return !mtp_family(type) && !(it->is_number_integer() && it->get<std::int64_t>() == 0);
  return true;
}

// The sliding-window attention of a window family's config (none for the
// other families, whose sliding_window is in kUnmodelled): the window, and
// which layers have it, from `layer_types` where the config gives it (the
// list transformers builds since v4.53, one "sliding_attention" or
// "full_attention" per layer) or else the family's rule, each as its
// configuration class applies it:
// - mistral, mixtral, phi3: every layer (Phi3Attention in modular_phi3.py
//   passes sliding_window=getattr(config, "sliding_window", None) in every
//   layer, as Mistral's and Mixtral's attention, which Phi-3's derives
//   from, do);
// - gemma2: layer i slides when (i + 1) % 2 != 0 (configuration_gemma2.py,
//   layer_types default; modeling_gemma2.py before it: is_sliding = not
//   bool(layer_idx % 2)), so global_every 2;
// - gemma3_text: (i + 1) % sliding_window_pattern != 0, the pattern 6 by
//   default (modular_gemma3.py, Gemma3TextConfig: _sliding_window_pattern =
//   kwargs.get("sliding_window_pattern", 6));
// - qwen2, qwen2_moe, qwen3, qwen3_moe: with use_sliding_window only (else
//   their config sets sliding_window to None), layer i slides when
//   i >= max_window_layers (configuration_qwen2.py: the first
//   max_window_layers layers have full attention, 28 by default).
// Strata models a window in every layer or in all but every k-th
// (AttentionWindow): another pattern is an error naming the key.
std::optional<AttentionWindow> read_hf_window(const JsonReader& r, std::string_view type, std::int64_t layers) {
  if (!hf_window_family(type)) return std::nullopt;
  const bool qwen = type.substr(0, 4) == "qwen";
  if (qwen && !r.bool_or("use_sliding_window", false)) return std::nullopt;
  const auto w_r = first_of(r, {"sliding_window"});
  if (!w_r) return std::nullopt;  // null: no window, whatever layer_types says
  AttentionWindow w;
  w.size = w_r->as_int(1, kMaxDim);
  std::vector<char> sliding(static_cast<std::size_t>(layers), 1);
  const auto set = [&](auto&& slides) {
    for (std::int64_t i = 0; i < layers; ++i) sliding[static_cast<std::size_t>(i)] = slides(i) ? 1 : 0;
  };
  // What the pattern came from, for its error.
  std::optional<JsonReader> from;
  std::string rule = "its family's sliding layers";
  if (auto lt = first_of(r, {"layer_types"})) {
    if (!lt->is_array()) lt->fail("must be an array of \"sliding_attention\" or \"full_attention\", one a layer");
    const auto el = lt->elements();
    if (static_cast<std::int64_t>(el.size()) != layers)
      lt->fail("has " + std::to_string(el.size()) + " entries for num_hidden_layers=" + std::to_string(layers));
    for (std::size_t i = 0; i < el.size(); ++i) {
      const std::string t = el[i].as_string();
      if (t != "sliding_attention" && t != "full_attention")
        el[i].fail("\"" + t + "\": Strata models \"sliding_attention\" and \"full_attention\" layers");
      sliding[i] = t == "sliding_attention" ? 1 : 0;
    }
    from = lt;
    rule = "its sliding_attention layers";
  } else if (type == "gemma2") {
    set([](std::int64_t i) { return (i + 1) % 2 != 0; });
  } else if (type == "gemma3_text") {
    const auto p_r = r.at("sliding_window_pattern");
    const std::int64_t p = p_r.as_int(1, kMaxLayers);
    set([p](std::int64_t i) { return (i + 1) % p != 0; });
    from = p_r;
  } else if (qwen) {
    const auto n_r = r.at("max_window_layers");
    const std::int64_t n = n_r.as_int(0, kMaxLayers);
    set([n](std::int64_t i) { return i >= n; });
    from = n_r;
    rule = "layers " + std::to_string(n) + " and above sliding, the first " + std::to_string(n) + " full";
  }
  const auto windowed = static_cast<std::int64_t>(std::count(sliding.begin(), sliding.end(), 1));
  if (windowed == 0) return std::nullopt;
  if (windowed == layers) return w;
  // All but every k-th: k is one past the first full layer.
  const auto first_full = static_cast<std::int64_t>(std::find(sliding.begin(), sliding.end(), 0) - sliding.begin());
  const std::int64_t k = first_full + 1;
  bool pattern = k >= 2;
  for (std::int64_t i = 0; pattern && i < layers; ++i)
    pattern = (sliding[static_cast<std::size_t>(i)] != 0) == ((i + 1) % k != 0);
  if (!pattern) {
    const JsonReader& at = from ? *from : r;
    at.fail("gives " + rule + " (" + std::to_string(windowed) + " of " + std::to_string(layers) +
            " layers sliding-window): Strata models a window in every layer or in all but every k-th "
            "layer counting from 1 (attention_window.global_every)");
  }
  w.global_every = k;
  return w;
}

// `ignore`: the keys of kUnmodelled the user accepts pricing without
// (ignore_hf_keys), read at `ignore_at`.
HfModel read_hf_config(const JsonReader& file_r, const std::string& path,
                       const std::vector<std::string>& ignore, const JsonReader* ignore_at) {
  // A config.json carries many keys that do not change the architecture
  // (token ids, initialisation, rope scaling, quantization of the stored
  // weights): those are not read. Every key that does is either read,
  // type- and range-checked, or in kUnmodelled.
  const nlohmann::json* cfg = &file_r.json();
  std::string prefix;
  std::string model_type = lower(file_r.string_or("model_type", ""));
  // Gemma 3's multimodal configs hold the language model in text_config;
  // Strata reads the language model only.
  if (model_type == "gemma3") {
    const JsonReader tc = file_r.at("text_config");
    if (!tc.is_object()) tc.fail("must be an object (Gemma 3's language model)");
    cfg = &tc.json();
    prefix = "text_config";
    model_type = "gemma3_text";
  }
  const HfFamily* fam = nullptr;
  for (const auto& f : kHfFamilies)
    if (f.type == model_type) fam = &f;
  if (!fam && !model_type.empty())
    file_r.fail_at("model_type", "unknown Hugging Face model_type \"" + model_type +
                                     "\" (Strata reads " + hf_family_list() + ")");
  // The config over its family's defaults.
  nlohmann::json merged = fam ? nlohmann::json::parse(fam->defaults) : nlohmann::json::object();
  for (const auto& [k, v] : cfg->items()) merged[k] = v;
  const JsonReader r(merged, path, prefix);
  const std::string_view type = model_type;
  auto is = [&](std::initializer_list<std::string_view> types) {
    for (auto t : types)
      if (t == type) return true;
    return false;
  };

  // Unmodelled keys in effect: errors unless ignored.
  std::vector<std::string> active;
  for (const auto& u : kUnmodelled) {
    if (!unmodelled_active(merged, u.key, type)) continue;
    active.emplace_back(u.key);
    if (std::find(ignore.begin(), ignore.end(), u.key) != ignore.end()) continue;
    r.fail_at(u.key, std::string(merged.at(u.key).dump()) + " changes the architecture and Strata does not model it (" +
                         u.what + "); to price the model without it, name it in a model object's "
                         "\"ignore_hf_keys\": {\"file\": \"" + path + "\", \"ignore_hf_keys\": [\"" + u.key + "\"]}");
  }
  for (std::size_t i = 0; i < ignore.size(); ++i)
    if (ignore[i] == "sliding_window" && hf_window_family(type))
      ignore_at->elements()[i].fail("\"sliding_window\" is modelled for " + std::string(type) +
                                    " (the model's attention_window); to price full attention instead, "
                                    "give \"attention_window\": null beside \"file\"");
    else if (std::find(active.begin(), active.end(), ignore[i]) == active.end()) {
      std::string set;
      for (const auto& a : active) set += (set.empty() ? "" : ", ") + a;
      ignore_at->elements()[i].fail("\"" + ignore[i] + "\" is not an unmodelled key this config sets (it sets: " +
                                    (set.empty() ? "none" : set) + ")");
    }

  ModelSpec m;
  auto req = [&](std::initializer_list<const char*> keys, std::int64_t hi) {
    auto v = first_of(r, keys);
    if (!v) r.fail_at(*keys.begin(), "missing required key (Hugging Face config)");
    return v->as_int(1, hi);
  };
  m.layers = req({"num_hidden_layers", "n_layer"}, kMaxLayers);
  m.hidden = req({"hidden_size", "n_embd"}, kMaxDim);
  m.heads = req({"num_attention_heads", "n_head"}, kMaxDim);
  m.vocab = req({"vocab_size"}, kMaxDim);
  const std::int64_t max_pos = req({"max_position_embeddings", "n_positions", "n_ctx"}, kMaxDim);
  m.seq_len = std::min(max_pos, kHfTrainingSeqLen);

  // Key-value heads: Falcon's multi_query (one) or num_kv_heads (its new
  // decoder architecture); elsewhere num_key_value_heads, all heads if absent.
  const bool falcon_new = is({"falcon"}) && r.bool_or("new_decoder_architecture", false);
  if (is({"falcon"})) {
    if (falcon_new)
      m.kv_heads = req({"num_kv_heads"}, kMaxDim);
    else
      m.kv_heads = r.bool_or("multi_query", true) ? 1 : m.heads;
  } else {
    auto kv = first_of(r, {"num_key_value_heads"});
    m.kv_heads = kv ? kv->as_int(1, kMaxDim) : m.heads;
  }
  if (auto hd = first_of(r, {"head_dim"})) m.head_size = hd->as_int(1, kMaxDim);
  auto ffn = first_of(r, {"intermediate_size", "n_inner", "ffn_hidden_size"});
  m.ffn_hidden = ffn ? ffn->as_int(1, kMaxDim) : 4 * m.hidden;

  // Gated MLP families (three matrices, gate_proj/up_proj or phi3's fused
  // gate_up_proj, a layout only) versus GPT-2/NeoX/Falcon's two.
  const bool gated = fam && !is({"gpt2", "gpt_neox", "falcon"});
  const auto act_r = first_of(r, {"hidden_activation", "hidden_act", "activation_function"});
  const std::string act = act_r ? lower(act_r->as_string()) : "gelu";
  const bool silu = act == "silu" || act == "swish" || act == "swiglu";
  const bool gelu = act.rfind("gelu", 0) == 0;
  if (!silu && !gelu)
    act_r->fail("unsupported activation \"" + act + "\" (Strata models gelu* and silu/swiglu)");
  if (!fam)  // no model_type: as the activation says
    m.mlp = silu ? MlpKind::Swiglu : MlpKind::Gelu;
  else if (gated)
    m.mlp = silu ? MlpKind::Swiglu : MlpKind::Geglu;
  else if (gelu)
    m.mlp = MlpKind::Gelu;
  else
    act_r->fail("\"" + act + "\" in a " + std::string(type) + " model: Strata models its MLP with gelu* only");

  if (fam)
    m.norm = is({"gpt2", "gpt_neox", "falcon"}) ? NormKind::LayerNorm : NormKind::RmsNorm;
  else if (r.has("rms_norm_eps"))
    m.norm = NormKind::RmsNorm;
  else
    m.norm = NormKind::LayerNorm;

  // Biases: q/k/v, the attention output, the MLP.
  bool qkv_bias = false, out_bias = false, mlp_bias = false;
  std::string out_key = "attention_bias";
  if (!fam) {
    auto b = first_of(r, {"attention_bias", "bias"});
    qkv_bias = out_bias = mlp_bias = b ? b->as_bool() : m.norm == NormKind::LayerNorm;
    out_key = r.has("attention_bias") ? "attention_bias" : "bias";
  } else if (is({"gpt2"})) {
    qkv_bias = out_bias = mlp_bias = true;  // Conv1D layers with biases
  } else if (is({"qwen2", "qwen2_moe"})) {
    qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without; MLPs without
  } else if (is({"falcon"})) {
    qkv_bias = out_bias = mlp_bias = r.bool_or("bias", false);
    out_key = "bias";
  } else if (is({"gpt_neox"})) {
    qkv_bias = out_bias = r.bool_or("attention_bias", true);
    mlp_bias = true;  // GPTNeoXMLP's dense_h_to_4h and dense_4h_to_h
  } else if (is({"phi3"})) {
    // Phi3: no biases (qkv_proj, o_proj, gate_up_proj, down_proj).
  } else if (is({"deepseek_v2", "deepseek_v3"})) {
    qkv_bias = out_bias = r.bool_or("attention_bias", false);  // q_a/q, kv_a, o
  } else {
    // Llama-like attention: attention_bias for q, k, v and o (default false).
    qkv_bias = out_bias = r.bool_or("attention_bias", false);
    if (is({"llama"})) mlp_bias = r.bool_or("mlp_bias", false);
  }
  if (out_bias != mlp_bias)
    r.fail_at(out_key, "the attention output has " + std::string(out_bias ? "a bias" : "no bias") +
                           " and the MLP " + (mlp_bias ? "has" : "has not") +
                           ": Strata models one bias switch for both (\"bias\")");
  m.bias = out_bias;
  if (qkv_bias != out_bias) m.qkv_bias = qkv_bias;

  // Positions: ALiBi when asked (Falcon, BLOOM-style), GPT-2's learned
  // table, rotary for every other family; without a model_type, rotary when
  // the config has rope keys.
  if (auto alibi = first_of(r, {"alibi"}); alibi && alibi->as_bool())
    m.position_embedding = PositionEmbedding::Alibi;
  else if (is({"gpt2"}) || (!fam && !r.has("rope_theta") && !r.has("rope_scaling")))
    m.position_embedding = PositionEmbedding::Learned;
  else
    m.position_embedding = PositionEmbedding::Rope;
  if (m.position_embedding == PositionEmbedding::Learned) m.max_positions = max_pos;
  // The config's rotary base (rope_theta; GPT-NeoX: rotary_emb_base). Where
  // it is absent the family's config class sets it (10000 for Llama, 1e6 for
  // Mixtral and Gemma 3): not known here, so unset.
  if (m.position_embedding == PositionEmbedding::Rope)
    if (auto theta = first_of(r, {"rope_theta", "rotary_emb_base"})) m.rope_theta = theta->as_number(1, 1e12);

  auto tie = first_of(r, {"tie_word_embeddings"});
  m.tied_embeddings = tie ? tie->as_bool() : true;  // PretrainedConfig's default

  m.dropout = false;
  for (const char* k : {"attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop",
                        "embd_pdrop", "hidden_dropout_prob"})
    if (auto d = first_of(r, {k}); d && d->as_number(0, 1) > 0) m.dropout = true;

  // Block structure.
  if (is({"gemma2", "gemma3_text"})) m.norm_placement = NormPlacement::Sandwich;
  if (is({"olmo2"})) m.norm_placement = NormPlacement::Post;
  if (is({"qwen3", "qwen3_moe", "gemma3_text"})) m.qk_norm = QkNorm::Head;
  if (is({"olmo2"})) m.qk_norm = QkNorm::Full;
  m.attention_window = read_hf_window(r, type, m.layers);
  if (is({"gpt_neox"}) && r.at("use_parallel_residual").as_bool()) m.block = BlockKind::Parallel2Norm;
  if (is({"falcon"}) && r.at("parallel_attn").as_bool()) {
    const std::int64_t norms =
        falcon_new ? r.int_or("num_ln_in_parallel_attn", 2, 1, 2) : 1;
    m.block = norms == 2 ? BlockKind::Parallel2Norm : BlockKind::Parallel;
  }

  // Mixture of experts.
  if (auto e = first_of(r, {"num_local_experts", "num_experts", "n_routed_experts"})) {
    MoeSpec s;
    s.experts = e->as_int(1, 65536);
    auto k = first_of(r, {"num_experts_per_tok"});
    s.top_k = k ? k->as_int(1, 65536) : 1;
    if (auto w = first_of(r, {"moe_intermediate_size"})) s.expert_ffn = w->as_int(1, kMaxDim);
    if (is({"qwen2_moe"})) {
      if (auto w = first_of(r, {"shared_expert_intermediate_size"}); w && w->as_int(0, kMaxDim) > 0) {
        s.shared_experts = 1;
        s.shared_ffn = w->as_int(1, kMaxDim);
        s.shared_gate = true;  // Qwen2MoeSparseMoeBlock.shared_expert_gate
      }
    }
    // Which layers have the experts (MoeSpec, each family's rule there):
    // DeepSeek's first_k_dense_replace and moe_layer_freq; Qwen's
    // decoder_sparse_step (layer i sparse when (i + 1) % step == 0, so
    // offset step − 1) and mlp_only_layers. `pattern_key`: where an error
    // about the pattern points.
    std::optional<JsonReader> pattern_key;
    if (is({"deepseek_v2", "deepseek_v3"})) {
      if (auto n = first_of(r, {"n_shared_experts"})) s.shared_experts = n->as_int(0, 65536);
      if (auto k0 = first_of(r, {"first_k_dense_replace"})) {
        s.first_dense = k0->as_int(0, m.layers);
        pattern_key = k0;
      }
      if (auto fq = first_of(r, {"moe_layer_freq"})) {
        s.every = fq->as_int(1, m.layers);
        if (s.every > 1) pattern_key = fq;
      }
    }
    if (is({"qwen2_moe", "qwen3_moe"})) {
      if (auto st = first_of(r, {"decoder_sparse_step"})) {
        s.every = st->as_int(1, m.layers);
        s.offset = s.every - 1;
        if (s.every > 1) pattern_key = st;
      }
      if (auto d = first_of(r, {"mlp_only_layers"})) {
        s.dense_layers = layer_list(*d, m.layers, "layer");
        if (!s.dense_layers.empty()) pattern_key = d;
      }
    }
    if (s.experts > 1 || s.shared_experts > 0) {
      m.moe = s;
      if (m.moe_blocks() == 0)
        (pattern_key ? *pattern_key : r).fail("makes every layer dense (as Strata's moe " + moe_pattern_text(s) +
                                              ", with num_hidden_layers=" + std::to_string(m.layers) +
                                              "); drop the MoE keys instead");
    }
  }

  // Multi-head latent attention.
  if (is({"deepseek_v2", "deepseek_v3"})) {
    MlaSpec l;
    if (auto q = first_of(r, {"q_lora_rank"})) l.q_lora_rank = q->as_int(1, kMaxDim);
    l.kv_lora_rank = r.at("kv_lora_rank").as_int(1, kMaxDim);
    l.qk_nope_head_dim = r.at("qk_nope_head_dim").as_int(0, kMaxDim);
    l.qk_rope_head_dim = r.at("qk_rope_head_dim").as_int(0, kMaxDim);
    l.v_head_dim = r.at("v_head_dim").as_int(1, kMaxDim);
    if (l.qk_head_dim() < 1) r.fail_at("qk_nope_head_dim", "qk_nope_head_dim + qk_rope_head_dim must be >= 1");
    m.mla = l;
    m.kv_heads = m.heads;
    m.head_size.reset();
  }

  // Gemma 2's soft-capping (null, as in Gemma 3's configs, is none).
  if (auto v = first_of(r, {"attn_logit_softcapping"}); v && !v->is_null()) m.attn_softcap = v->as_number(1e-6, 1e9);
  if (auto v = first_of(r, {"final_logit_softcapping"}); v && !v->is_null()) m.logit_softcap = v->as_number(1e-6, 1e9);

  // DeepSeek-V3's multi-token prediction modules (its config: 1), stored
  // in the checkpoint after the main layers (model.layers.61).
  if (mtp_family(type))
    if (auto n = first_of(r, {"num_nextn_predict_layers"})) m.mtp_layers = n->as_int(0, kMaxLayers);

  auto name = first_of(r, {"_name_or_path"});
  m.name = name ? name->as_string() : std::filesystem::path(path).stem().string();
  if (m.name.empty()) m.name = model_type.empty() ? "hf-model" : model_type;
  m.source = "Hugging Face config " + path;
  ModelKeys keys;
  keys.heads = merged.contains("num_attention_heads") ? "num_attention_heads" : "n_head";
  keys.kv_heads = merged.contains("num_key_value_heads") ? "num_key_value_heads" : keys.heads;
  keys.top_k = "num_experts_per_tok";
  if (!prefix.empty()) {
    keys.heads = prefix + "." + keys.heads;
    keys.kv_heads = prefix + "." + keys.kv_heads;
    keys.top_k = prefix + "." + keys.top_k;
  }
  check_model(m, JsonReader(file_r.json(), path), keys);
  return {m, max_pos};
}

// A model file's JSON: Strata's format or a Hugging Face config.json.
ModelSpec model_from_file_json(const nlohmann::json& j, const std::string& path, int depth,
                               const Ctx& ctx, const JsonReader* from) {
  const JsonReader r = from ? from->reading(j, path) : JsonReader(j, path);
  if (!j.is_object())
    r.fail("must be a JSON object (a model, a Hugging Face config.json or a scenario)");
  if (is_hf_config(j)) {
    HfModel hf = read_hf_config(r, path, {}, nullptr);
    hf_seq_len_default(r, "\"" + path + "\"", hf.model, hf.max_position_embeddings, ctx);
    return hf.model;
  }
  const auto dir = std::filesystem::path(path).parent_path().string();
  return read_model_object(r, dir, depth, ctx);
}

}  // namespace

bool names_a_file(std::string_view s) {
  return s.find('/') != std::string_view::npos ||
         (s.size() >= 5 && s.substr(s.size() - 5) == ".json");
}

std::string resolve_path(const std::string& path, const std::string& base_dir) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.is_absolute()) return path;
  if (!base_dir.empty()) {
    const fs::path candidate = fs::path(base_dir) / p;
    std::error_code ec;
    if (fs::exists(candidate, ec)) return candidate.lexically_normal().string();
  }
  return path;
}

ModelSpec read_model(const JsonReader& value, const std::string& base_dir) {
  if (value.is_string()) {
    const std::string s = value.as_string();
    if (names_a_file(s)) {
      const std::string path = resolve_path(s, base_dir);
      if (!std::filesystem::exists(path)) value.fail("model file \"" + s + "\" not found");
      const auto j = load_json_file(path);
      value.read_file(path);
      // A training scenario needs the sequence length a Hugging Face config
      // does not give: named at the scenario's value.
      if (is_hf_config(j)) {
        HfModel hf = read_hf_config(JsonReader(j, path), path, {}, nullptr);
        hf_seq_len_default(value, "\"" + s + "\"", hf.model, hf.max_position_embeddings,
                           Ctx{.training = true});
      }
      return model_from_file_json(j, path, 1, Ctx{.training = true}, &value);
    }
    return preset_at(s, value, 0);
  }
  return read_model_object(value, base_dir, 0, Ctx{.training = true});
}

ModelSpec load_model_file(const std::string& path, std::vector<std::string>* notes) {
  return model_from_file_json(load_json_file(path), path, 0, Ctx{.notes = notes});
}

ModelSpec parse_model_file_text(std::string_view text, const std::string& source,
                                std::vector<std::string>* notes) {
  return model_from_file_json(parse_json_text(text, source), source, 0, Ctx{.notes = notes});
}

ModelSpec model_preset(std::string_view name) {
  const nlohmann::json j = std::string(name);
  return preset_at(name, JsonReader(j, "", "model"), 0);
}

std::vector<ModelSpec> model_presets() {
  std::vector<ModelSpec> out;
  for (const auto& name : model_names()) out.push_back(model_preset(name));
  return out;
}

}  // namespace strata::cost
