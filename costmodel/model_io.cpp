#include "costmodel/model_io.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "costmodel/ops.hpp"
#include "costmodel/presets.hpp"

namespace strata::cost {

namespace {

constexpr std::int64_t kMaxLayers = 100'000;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
constexpr int kMaxIncludeDepth = 8;

ModelSpec read_model_object(const JsonReader& r, const std::string& base_dir, int depth);
ModelSpec load_model_file_at(const std::string& path, int depth);

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
  return read_model_object(JsonReader(j, file), "", depth + 1);
}

// The keys a model's cross-field rules name: Strata's, or those of the
// Hugging Face config the numbers came from.
struct ModelKeys {
  std::string heads = "heads", kv_heads = "kv_heads", top_k = "moe.top_k";
};

// Validates the cross-field rules of a complete model.
void check_model(const ModelSpec& m, const JsonReader& r, const ModelKeys& keys = {}) {
  if (m.hidden % m.heads != 0)
    throw InputError(r.file(), r.child_path(keys.heads),
                     std::to_string(m.heads) + " does not divide hidden=" + std::to_string(m.hidden));
  if (m.kv_heads < 1 || m.heads % m.kv_heads != 0)
    throw InputError(r.file(), r.child_path(keys.kv_heads),
                     std::to_string(m.kv_heads) + " does not divide heads=" + std::to_string(m.heads));
  if (m.moe && m.moe->top_k > m.moe->experts)
    throw InputError(r.file(), r.child_path(keys.top_k),
                     std::to_string(m.moe->top_k) + " exceeds experts=" +
                         std::to_string(m.moe->experts));
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
    "bias", "position_embedding", "tied_embeddings", "dropout", "moe"};

ModelSpec read_model_object(const JsonReader& r, const std::string& base_dir, int depth) {
  if (depth > kMaxIncludeDepth) r.fail("presets/files nest more than 8 deep");
  if (!r.is_object()) r.fail("must be a preset name, a file path or an object");
  ModelSpec m;
  bool based = false;
  if (auto p = r.get("preset")) {
    m = preset_at(p->as_string(), *p, depth);
    based = true;
  }
  if (auto f = r.get("file")) {
    if (based) f->fail("\"file\" and \"preset\" are exclusive");
    m = load_model_file_at(resolve_path(f->as_string(), base_dir), depth + 1);
    based = true;
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
  m.mlp = r.enum_or("mlp", m.mlp);
  m.norm = r.enum_or("norm", m.norm);
  m.bias = r.bool_or("bias", m.bias);
  m.position_embedding = r.enum_or("position_embedding", m.position_embedding);
  m.tied_embeddings = r.bool_or("tied_embeddings", m.tied_embeddings);
  m.dropout = r.bool_or("dropout", based ? m.dropout : true);
  if (auto moe = r.get("moe")) {
    MoeSpec s;
    s.experts = moe->at("experts").as_int(1, 65536);
    s.top_k = moe->int_or("top_k", 1, 1, 65536);
    moe->reject_unknown_keys();
    m.moe = s;
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
  return j.is_object() && (j.contains("num_hidden_layers") || j.contains("n_layer"));
}

// Reads the first of `keys` that is present.
std::optional<JsonReader> first_of(const JsonReader& r, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto v = r.get(k); v && !v->is_null()) return v;
  return std::nullopt;
}

ModelSpec read_hf_config(const JsonReader& r, const std::string& path) {
  // Hugging Face configs carry many keys Strata does not need: unknown keys
  // are ignored here, but the keys used are type- and range-checked.
  ModelSpec m;
  const std::string model_type = lower(r.string_or("model_type", ""));
  auto req = [&](std::initializer_list<const char*> keys, std::int64_t hi) {
    auto v = first_of(r, keys);
    if (!v) r.fail_at(*keys.begin(), "missing required key (Hugging Face config)");
    return v->as_int(1, hi);
  };
  m.layers = req({"num_hidden_layers", "n_layer"}, kMaxLayers);
  m.hidden = req({"hidden_size", "n_embd"}, kMaxDim);
  m.heads = req({"num_attention_heads", "n_head"}, kMaxDim);
  m.vocab = req({"vocab_size"}, kMaxDim);
  m.seq_len = req({"max_position_embeddings", "n_positions", "n_ctx"}, kMaxDim);
  auto kv = first_of(r, {"num_key_value_heads"});
  m.kv_heads = kv ? kv->as_int(1, kMaxDim) : m.heads;
  auto ffn = first_of(r, {"intermediate_size", "n_inner"});
  m.ffn_hidden = ffn ? ffn->as_int(1, kMaxDim) : 4 * m.hidden;

  const auto act_r = first_of(r, {"hidden_act", "activation_function"});
  const std::string act = act_r ? lower(act_r->as_string()) : "gelu";
  if (act == "silu" || act == "swish" || act == "swiglu")
    m.mlp = MlpKind::Swiglu;
  else if (act.rfind("gelu", 0) == 0)
    m.mlp = MlpKind::Gelu;
  else
    act_r->fail("unsupported activation \"" + act + "\" (Strata models gelu* and silu/swiglu)");

  const bool llama_like = model_type == "llama" || model_type == "mistral" ||
                          model_type == "mixtral" || model_type == "qwen2" ||
                          model_type == "gemma" || model_type == "qwen2_moe";
  if (r.has("rms_norm_eps"))
    m.norm = NormKind::RmsNorm;
  else if (r.has("layer_norm_eps") || r.has("layer_norm_epsilon"))
    m.norm = NormKind::LayerNorm;
  else
    m.norm = llama_like ? NormKind::RmsNorm : NormKind::LayerNorm;

  if (auto b = first_of(r, {"attention_bias", "bias"}))
    m.bias = b->as_bool();
  else
    m.bias = m.norm == NormKind::LayerNorm;

  if (auto alibi = first_of(r, {"alibi"}); alibi && alibi->as_bool())
    m.position_embedding = PositionEmbedding::Alibi;
  else if (r.has("rope_theta") || r.has("rope_scaling") || llama_like)
    m.position_embedding = PositionEmbedding::Rope;
  else
    m.position_embedding = PositionEmbedding::Learned;

  auto tie = first_of(r, {"tie_word_embeddings"});
  m.tied_embeddings = tie ? tie->as_bool() : true;  // Hugging Face's default

  m.dropout = false;
  for (const char* k : {"attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop",
                        "hidden_dropout_prob"})
    if (auto d = first_of(r, {k}); d && d->as_number(0, 1) > 0) m.dropout = true;

  if (auto e = first_of(r, {"num_local_experts", "num_experts"})) {
    MoeSpec s;
    s.experts = e->as_int(1, 65536);
    auto k = first_of(r, {"num_experts_per_tok"});
    s.top_k = k ? k->as_int(1, 65536) : 1;
    if (s.experts > 1) m.moe = s;
  }

  auto name = first_of(r, {"_name_or_path"});
  m.name = name ? name->as_string() : std::filesystem::path(path).stem().string();
  if (m.name.empty()) m.name = model_type.empty() ? "hf-model" : model_type;
  m.source = "Hugging Face config " + path;
  ModelKeys keys;
  keys.heads = r.json().contains("num_attention_heads") ? "num_attention_heads" : "n_head";
  keys.kv_heads = r.json().contains("num_key_value_heads") ? "num_key_value_heads" : keys.heads;
  keys.top_k = "num_experts_per_tok";
  check_model(m, r, keys);
  return m;
}

// A model file's JSON: Strata's format or a Hugging Face config.json.
ModelSpec model_from_file_json(const nlohmann::json& j, const std::string& path, int depth) {
  const JsonReader r(j, path);
  if (!j.is_object())
    r.fail("must be a JSON object (a model, a Hugging Face config.json or a scenario)");
  if (is_hf_config(j)) return read_hf_config(r, path);
  const auto dir = std::filesystem::path(path).parent_path().string();
  return read_model_object(r, dir, depth);
}

ModelSpec load_model_file_at(const std::string& path, int depth) {
  return model_from_file_json(load_json_file(path), path, depth);
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
      return load_model_file_at(path, 1);
    }
    return preset_at(s, value, 0);
  }
  return read_model_object(value, base_dir, 0);
}

ModelSpec load_model_file(const std::string& path) { return load_model_file_at(path, 0); }

ModelSpec parse_model_file_text(std::string_view text, const std::string& source) {
  return model_from_file_json(parse_json_text(text, source), source, 0);
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
