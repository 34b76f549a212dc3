// Hugging Face config.json import against the models' published parameter
// counts: the configs under tests/hf/ are the models' own config.json files.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "costmodel/model_io.hpp"
#include "costmodel/ops.hpp"
#include "tests/testing.hpp"

namespace strata::cost {
namespace {

std::string hf_path(const std::string& file) { return std::string(STRATA_SOURCE_DIR) + "/tests/hf/" + file; }

// The model a training scenario would read: {"file", "seq_len",
// "ignore_hf_keys"}; 1,024 tokens fit every context here (GPT-2's is 1,024)
// and parameters do not depend on it.
ModelSpec import(const std::string& file, const std::vector<std::string>& ignore) {
  nlohmann::json j = {{"file", hf_path(file)}, {"seq_len", 1024}};
  if (!ignore.empty()) j["ignore_hf_keys"] = ignore;
  return read_model(JsonReader(j, "scenario.json", "model"), "");
}

struct Published {
  const char* file;
  std::vector<std::string> ignore;  // architecture keys Strata does not model
  double total;                     // parameters
  const char* total_source;
  // Active parameters per token, as published (MoE only), and the unit of
  // the published figure's last digit: the cards round to two or three
  // significant figures, so a figure within one unit matches.
  double active = 0, active_unit = 0;
  const char* active_source = "";
  // The card counts active parameters without the token embedding
  // (DeepSeek's convention); Strata's active_params includes it.
  bool active_without_embedding = false;
  // The figures are the main model's, without its multi-token prediction
  // modules (checked on their own below).
  bool main_model = false;
};

// Totals are exact sums of the checkpoint's tensors (Hugging Face's
// safetensors metadata, "Model size" on each repository page) unless said.
const std::vector<Published> kPublished = {
    {"llama-3.1-8b.json", {}, 8'030'261'248, "meta-llama/Llama-3.1-8B safetensors: 8,030,261,248"},
    {"llama-3.1-70b.json", {}, 70'553'706'496, "meta-llama/Llama-3.1-70B safetensors: 70,553,706,496"},
    {"mistral-7b-v0.1.json", {}, 7'241'732'096,
     "mistralai/Mistral-7B-v0.1 safetensors: 7,241,732,096"},
    {"mistral-nemo-base-2407.json", {}, 12'247'782'400,
     "mistralai/Mistral-Nemo-Base-2407 safetensors: 12,247,782,400 (card: 12B)"},
    {"mixtral-8x7b-v0.1.json", {}, 46'702'792'704,
     "mistralai/Mixtral-8x7B-v0.1 safetensors: 46,702,792,704", 12.9e9, 0.1e9,
     "Mistral AI, \"Mixtral of experts\" (2023-12-11): 12.9B active parameters"},
    {"qwen2-72b.json", {}, 72'706'203'648, "Qwen/Qwen2-72B safetensors: 72,706,203,648 (card: 72.7B)"},
    {"qwen2.5-7b.json", {}, 7'615'616'512, "Qwen/Qwen2.5-7B safetensors: 7,615,616,512 (card: 7.61B)"},
    {"qwen1.5-moe-a2.7b.json", {}, 14'315'784'192,
     "Qwen/Qwen1.5-MoE-A2.7B safetensors: 14,315,784,192 (card: 14.3B)", 2.7e9, 0.1e9,
     "Qwen/Qwen1.5-MoE-A2.7B card: 2.7B activated"},
    {"qwen3-8b.json", {}, 8'190'735'360, "Qwen/Qwen3-8B safetensors: 8,190,735,360 (card: 8.2B)"},
    {"qwen3-30b-a3b.json", {}, 30'532'122'624,
     "Qwen/Qwen3-30B-A3B safetensors: 30,532,122,624 (card: 30.5B)", 3.3e9, 0.1e9,
     "Qwen/Qwen3-30B-A3B card: 3.3B activated"},
    {"gemma-7b.json", {}, 8'537'680'896, "google/gemma-7b safetensors: 8,537,680,896 (card: 8.54B)"},
    {"gemma-2-9b.json", {},
     9'241'705'984, "google/gemma-2-9b safetensors: 9,241,705,984"},
    {"gemma-3-1b-pt.json", {}, 999'885'952,
     "google/gemma-3-1b-pt safetensors: 999,885,952 (card: 1B)"},
    {"phi-3-mini-4k-instruct.json", {}, 3'821'079'552,
     "microsoft/Phi-3-mini-4k-instruct safetensors: 3,821,079,552 (card: 3.8B)"},
    {"deepseek-v2-lite.json", {}, 15'706'484'224,
     "deepseek-ai/DeepSeek-V2-Lite safetensors: 15,706,484,224 (card: 15.7B)", 2.4e9, 0.1e9,
     "deepseek-ai/DeepSeek-V2-Lite card: 2.4B activated", true},
    // The card: "685B ... includes 671B of the Main Model weights and 14B of
    // the Multi-Token Prediction (MTP) Module weights"; the main model's
    // 671B and 37B activated are the figures (main_model), the MTP module is
    // checked in its own test case.
    {"deepseek-v3.json", {}, 671e9,
     "deepseek-ai/DeepSeek-V3 card: 671B main model (685B with the 14B MTP module)", 37e9, 1e9,
     "deepseek-ai/DeepSeek-V3 card: 37B activated", true, true},
    {"gpt2.json", {}, 124'439'808,
     "openai-community/gpt2: GPT2LMHeadModel's 124,439,808 parameters (the checkpoint's 137M "
     "counts its causal-mask buffers attn.bias too)"},
    {"pythia-1.4b.json", {}, 1'414'647'808,
     "EleutherAI/pythia README, model table: 1,414,647,808 total parameters"},
    {"olmo-2-1124-7b.json", {}, 7'298'617'344,
     "allenai/OLMo-2-1124-7B safetensors: 7,298,617,344 (card: 7B)"},
    {"falcon-7b.json", {}, 6'921'720'704, "tiiuae/falcon-7b safetensors: 6,921,720,704 (card: 7B)"},
};

TEST_CASE("Hugging Face configs import with their published parameter counts") {
  // Total parameters within 0.1 % of the checkpoint's (the target); dense
  // models' active count is their total.
  CHECK(kPublished.size() >= 15);
  for (const auto& p : kPublished) {
    ModelSpec m = import(p.file, p.ignore);
    if (p.main_model) m.mtp_layers = 0;
    const double total = static_cast<double>(total_params(m));
    const double active = static_cast<double>(active_params(m));
    INFO(p.file << " (" << p.total_source << "): total " << std::llround(total) << ", active "
                << std::llround(active));
    CHECK(std::abs(total - p.total) <= 0.001 * p.total);
    if (!m.moe) {
      CHECK(active == total);
      continue;
    }
    INFO("active: " << p.active_source);
    REQUIRE(p.active > 0);
    const double embedding = static_cast<double>(m.vocab) * static_cast<double>(m.hidden);
    const double counted = p.active_without_embedding ? active - embedding : active;
    CHECK(std::abs(counted - p.active) <= p.active_unit);
  }
}

TEST_CASE("each family's rules come from its model_type") {
  // Qwen2 always has q/k/v biases (and no other); Gemma's MLP is gated GELU
  // with tied embeddings and head_dim 256 (q width 4096 > hidden 3072).
  const ModelSpec qwen = import("qwen2-72b.json", {});
  CHECK(qwen.has_qkv_bias());
  CHECK_FALSE(qwen.bias);
  const ModelSpec gemma = import("gemma-7b.json", {});
  CHECK(gemma.mlp == MlpKind::Geglu);
  CHECK(gemma.tied_embeddings);
  CHECK(gemma.head_dim() == 256);
  CHECK(gemma.q_hidden() == 4096);
  // Mistral-Nemo: head_dim 128 with hidden 5120 and 32 heads.
  CHECK(import("mistral-nemo-base-2407.json", {}).q_hidden() == 4096);
  // DeepSeek-V3: MLA, 256 routed + 1 shared expert of 2048, first 3 dense.
  const ModelSpec v3 = import("deepseek-v3.json", {});
  REQUIRE(v3.mla);
  CHECK(v3.mla->q_lora_rank == 1536);
  REQUIRE(v3.moe);
  CHECK(v3.moe->first_dense == 3);
  CHECK(v3.moe->shared_experts == 1);
  CHECK(v3.expert_ffn() == 2048);
  CHECK(v3.ffn_hidden == 18432);
  // Its num_nextn_predict_layers: one multi-token prediction module.
  CHECK(v3.mtp_layers == 1);
  // Falcon-7B: multi-query attention, one norm shared by the parallel
  // attention and MLP; Pythia: parallel with two norms; OLMo 2: post-norms
  // and q/k norms over all heads.
  const ModelSpec falcon = import("falcon-7b.json", {});
  CHECK(falcon.kv_heads == 1);
  CHECK(falcon.block == BlockKind::Parallel);
  CHECK(import("pythia-1.4b.json", {}).block == BlockKind::Parallel2Norm);
  const ModelSpec olmo = import("olmo-2-1124-7b.json", {});
  CHECK(olmo.norm_placement == NormPlacement::Post);
  CHECK(olmo.qk_norm == QkNorm::Full);
  // GPT-2's learned position table has n_positions rows whatever seq_len is.
  CHECK(import("gpt2.json", {}).position_rows() == 1024);
}

TEST_CASE("unmodelled architecture keys and unknown model types are errors") {
  // Gemma 2's soft-capped scores and logits are read (ModelSpec::
  // attn_softcap, logit_softcap: 50 and 30 in google/gemma-2-9b's config).
  const std::string gemma2 = hf_path("gemma-2-9b.json");
  const ModelSpec g2 = load_model_file(gemma2);
  CHECK(g2.attn_softcap == 50.0);
  CHECK(g2.logit_softcap == 30.0);
  // A modelled window is not ignored: attention_window null drops it.
  CHECK(testing::input_error_of([&] { import("gemma-2-9b.json", {"sliding_window"}); }) == "scenario.json: model.ignore_hf_keys[0]: \"sliding_window\" is modelled for gemma2 (the model's "
              "attention_window); to price full attention instead, give \"attention_window\": null beside "
              "\"file\"");
  // A family whose window pattern Strata does not know keeps sliding_window
  // unmodelled (here a config without model_type).
  CHECK(testing::input_error_of([] {
          parse_model_file_text(R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                    "vocab_size": 10, "max_position_embeddings": 8, "sliding_window": 4})",
                                "w.json");
        }).rfind("w.json: sliding_window: 4 changes the architecture and Strata does not model it", 0) == 0);
  // An ignore entry must name a key the config sets.
  CHECK(testing::input_error_of([&] { import("llama-3.1-8b.json", {"sliding_window"}); }) ==
        "scenario.json: model.ignore_hf_keys[0]: \"sliding_window\" is not an unmodelled key this "
        "config sets (it sets: none)");
  // Qwen2's sliding_window is off (use_sliding_window false): no error.
  CHECK_NOTHROW(import("qwen2.5-7b.json", {}));
  CHECK(testing::input_error_of([] {
          parse_model_file_text(R"({"model_type": "bloom", "n_layer": 2, "hidden_size": 64,
                                    "n_head": 4, "vocab_size": 10})",
                                "b.json");
        }).rfind("b.json: model_type: unknown Hugging Face model_type \"bloom\" (Strata reads llama, ", 0) == 0);
}

// A config under tests/hf/ with `edit` applied, read as a model to describe.
ModelSpec edited(const std::string& file, const nlohmann::json& edit) {
  nlohmann::json j = load_json_file(hf_path(file));
  j.merge_patch(edit);
  return parse_model_file_text(j.dump(), file);
}

TEST_CASE("sliding windows from Hugging Face configs, per family") {
  // Mistral-7B-v0.1 and Phi-3-mini: every layer (4096 and 2047 keys).
  const ModelSpec mistral = import("mistral-7b-v0.1.json", {});
  REQUIRE(mistral.attention_window);
  CHECK(mistral.window_size() == 4096);
  CHECK_FALSE(mistral.attention_window->global_every);
  const ModelSpec phi3 = import("phi-3-mini-4k-instruct.json", {});
  REQUIRE(phi3.attention_window);
  CHECK(phi3.window_size() == 2047);
  CHECK_FALSE(phi3.attention_window->global_every);
  // Gemma 2: sliding in even layers (0-based), global in odd: global_every 2.
  const ModelSpec gemma2 = import("gemma-2-9b.json", {});
  REQUIRE(gemma2.attention_window);
  CHECK(gemma2.window_size() == 4096);
  CHECK(gemma2.attention_window->global_every == 2);
  CHECK(gemma2.windowed_at(0));
  CHECK_FALSE(gemma2.windowed_at(1));
  // Gemma 3 1B: sliding_window_pattern 6, a 512-token window; layers 5, 11,
  // 17 and 23 of 26 global.
  const ModelSpec gemma3 = import("gemma-3-1b-pt.json", {});
  REQUIRE(gemma3.attention_window);
  CHECK(gemma3.window_size() == 512);
  CHECK(gemma3.attention_window->global_every == 6);
  CHECK(expand(gemma3).kinds.size() == 2);
  // Without sliding_window_pattern, Gemma3TextConfig's default of 6.
  CHECK(edited("gemma-3-1b-pt.json", {{"sliding_window_pattern", nullptr}}).attention_window->global_every == 6);
  // No window: Mixtral's sliding_window null, Qwen2.5's use_sliding_window
  // false, a Llama.
  CHECK_FALSE(import("mixtral-8x7b-v0.1.json", {}).attention_window);
  CHECK_FALSE(import("qwen2.5-7b.json", {}).attention_window);
  CHECK_FALSE(import("llama-3.1-8b.json", {}).attention_window);
}

TEST_CASE("layer_types and max_window_layers: a pattern Strata models, or an error naming the key") {
  // Gemma 3's layer_types as transformers >= 4.53 writes it (the 1B config
  // with its 26 layers listed): the same pattern as sliding_window_pattern 6.
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < 26; ++i) types.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  const ModelSpec listed = edited("gemma-3-1b-pt.json", {{"layer_types", types}});
  REQUIRE(listed.attention_window);
  CHECK(listed.attention_window->global_every == 6);
  // All sliding: every layer windowed, whatever sliding_window_pattern says.
  nlohmann::json sliding = nlohmann::json::array();
  for (int i = 0; i < 26; ++i) sliding.push_back("sliding_attention");
  CHECK_FALSE(edited("gemma-3-1b-pt.json", {{"layer_types", sliding}}).attention_window->global_every);
  // Two global layers next to each other are no global_every pattern.
  nlohmann::json odd = types;
  odd[4] = "full_attention";
  CHECK(testing::input_error_of([&] { edited("gemma-3-1b-pt.json", {{"layer_types", odd}}); })
            .rfind("gemma-3-1b-pt.json: layer_types: gives its sliding_attention layers (21 of 26 layers "
                   "sliding-window): Strata models a window in every layer or in all but every k-th layer",
                   0) == 0);
  CHECK(testing::input_error_of([&] {
          edited("gemma-3-1b-pt.json", {{"layer_types", nlohmann::json::array({"sliding_attention"})}});
        }) == "gemma-3-1b-pt.json: layer_types: has 1 entries for num_hidden_layers=26");
  odd[0] = "chunked_attention";
  CHECK(testing::input_error_of([&] { edited("gemma-3-1b-pt.json", {{"layer_types", odd}}); }) ==
        "gemma-3-1b-pt.json: layer_types[0]: \"chunked_attention\": Strata models \"sliding_attention\" and "
        "\"full_attention\" layers");
  // Qwen with use_sliding_window: layers i >= max_window_layers slide. 0:
  // every layer; 28 of 28: none; 21 of 28 (the first 21 full) is no
  // pattern Strata models.
  const nlohmann::json on = {{"use_sliding_window", true}, {"sliding_window", 4096}};
  nlohmann::json all = on, none = on, some = on;
  all["max_window_layers"] = 0;
  none["max_window_layers"] = 28;
  some["max_window_layers"] = 21;
  const ModelSpec q_all = edited("qwen2.5-7b.json", all);
  REQUIRE(q_all.attention_window);
  CHECK(q_all.window_size() == 4096);
  CHECK_FALSE(q_all.attention_window->global_every);
  CHECK_FALSE(edited("qwen2.5-7b.json", none).attention_window);
  CHECK(testing::input_error_of([&] { edited("qwen2.5-7b.json", some); }) ==
        "qwen2.5-7b.json: max_window_layers: gives layers 21 and above sliding, the first 21 full (7 of 28 "
        "layers sliding-window): Strata models a window in every layer or in all but every k-th layer "
        "counting from 1 (attention_window.global_every)");
  // A bad window names its key.
  CHECK(testing::input_error_of([] { edited("mistral-7b-v0.1.json", {{"sliding_window", 0}}); }) ==
        "mistral-7b-v0.1.json: sliding_window: must be in [1, 16777216], got 0");
}

TEST_CASE("DeepSeek-V3's multi-token prediction module: its parameters in closed form") {
  // num_nextn_predict_layers 1: one module of (h = 7168, untied, no biases)
  // enorm and hnorm (h each), eh_proj 2h·h, a block with routed experts as
  // the last main block (MLA: q_down h·1536, its norm 1536, q_up
  // 1536·128·192, kv_down h·576, its norm 512, kv_up 512·128·256,
  // projection 128·128·h; router h·256, 256 experts and 1 shared of
  // 3·h·2048; two norms 2h) and a final norm h: 11,610,067,968 parameters.
  // The card's 14B counts the module's copies of the shared embedding and
  // output head (2·129280·h = 1,853,358,080) too: 13,463,426,048 here.
  const ModelSpec v3 = import("deepseek-v3.json", {});
  ModelSpec main = v3;
  main.mtp_layers = 0;
  const std::int64_t h = 7168;
  const std::int64_t block = h + h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 +
                             128 * 128 * h + h + h * 256 + 257 * 3 * h * 2048;
  const std::int64_t module = 2 * h + 2 * h * h + block + h;
  CHECK(module == 11'610'067'968);
  CHECK(total_params(v3) - total_params(main) == module);
  CHECK(module + 2 * 129280 * h == 13'463'426'048);
  // A token visits 8 of the module's 256 routed experts.
  CHECK(active_params(v3) - active_params(main) == module - (256 - 8) * 3 * h * 2048);
  // The bundled preset carries the same module.
  CHECK(total_params(model_preset("deepseek-v3")) == total_params(v3));
}

TEST_CASE("MoE layer patterns from Hugging Face configs: Qwen's and DeepSeek's rules") {
  // Qwen1.5-MoE-A2.7B's config (tests/hf, the model's own) with
  // decoder_sparse_step 2 and mlp_only_layers [0]: transformers'
  // Qwen2MoeDecoderLayer makes layer i sparse when i is not in
  // mlp_only_layers and (i + 1) % 2 == 0, so the 12 odd layers of 24 keep
  // their experts (layer 0 is even: dense by the step alone).
  const ModelSpec all = import("qwen1.5-moe-a2.7b.json", {});
  const ModelSpec q = edited("qwen1.5-moe-a2.7b.json", {{"decoder_sparse_step", 2}, {"mlp_only_layers", {0}}});
  REQUIRE(q.moe);
  CHECK(q.moe->every == 2);
  CHECK(q.moe->offset == 1);
  CHECK(q.moe->dense_layers == std::vector<std::int64_t>{0});
  CHECK(q.moe_blocks() == 12);
  const OpChain c = expand(q);
  for (std::int64_t i = 0; i < q.layers; ++i) CHECK(c.kind_of[static_cast<std::size_t>(i)] == (i % 2 == 1 ? 0 : 1));
  // Each of the 12 dense layers trades its MoE MLP (router h·60, 60 experts
  // of 3·h·1408, the shared expert 3·h·5632 and its gate h) for a dense
  // MLP of intermediate_size 5632 (3·h·5632); a token visited top-4 of the
  // experts, the shared expert and the gate.
  const std::int64_t h = 2048;
  CHECK(total_params(q) == total_params(all) - 12 * (60 * h + 60 * 3 * h * 1408 + h));
  CHECK(active_params(q) == active_params(all) - 12 * (60 * h + 4 * 3 * h * 1408 + h));
  // mlp_only_layers alone (decoder_sparse_step 1): layer 0 dense, 23 sparse.
  const ModelSpec q0 = edited("qwen1.5-moe-a2.7b.json", {{"mlp_only_layers", {0}}});
  CHECK(q0.moe_blocks() == 23);
  CHECK_FALSE(q0.moe_at(0));
  // DeepSeek-V2-Lite (first_k_dense_replace 1) with moe_layer_freq 2: the
  // remote code's layer_idx >= 1 and layer_idx % 2 == 0, experts in layers
  // 2, 4, …, 26 of 27 (13).
  const ModelSpec ds = edited("deepseek-v2-lite.json", {{"moe_layer_freq", 2}});
  REQUIRE(ds.moe);
  CHECK(ds.moe->first_dense == 1);
  CHECK(ds.moe->every == 2);
  CHECK(ds.moe->offset == 0);
  CHECK(ds.moe_blocks() == 13);
  CHECK(ds.moe_at(2));
  CHECK_FALSE(ds.moe_at(3));
}

TEST_CASE("MoE layer pattern errors name the config's key") {
  CHECK(testing::input_error_of([] { edited("qwen1.5-moe-a2.7b.json", {{"mlp_only_layers", {3, 24}}}); }) ==
        "qwen1.5-moe-a2.7b.json: mlp_only_layers[1]: must be in [0, 23], got 24");
  CHECK(testing::input_error_of([] { edited("qwen1.5-moe-a2.7b.json", {{"mlp_only_layers", {3, 3}}}); }) ==
        "qwen1.5-moe-a2.7b.json: mlp_only_layers[1]: 3 is listed twice");
  CHECK(testing::input_error_of([] { edited("qwen1.5-moe-a2.7b.json", {{"decoder_sparse_step", 0}}); }) ==
        "qwen1.5-moe-a2.7b.json: decoder_sparse_step: must be in [1, 24], got 0");
  // Every layer dense: step 25 > 24 layers is out of range; step 24 leaves
  // layer 23 sparse, and listing it leaves none.
  CHECK(testing::input_error_of([] {
          edited("qwen1.5-moe-a2.7b.json", {{"decoder_sparse_step", 24}, {"mlp_only_layers", {23}}});
        }) == "qwen1.5-moe-a2.7b.json: mlp_only_layers: makes every layer dense (as Strata's moe every=24, "
              "offset=23, dense_layers=[23], with num_hidden_layers=24); drop the MoE keys instead");
  CHECK(testing::input_error_of([] { edited("deepseek-v2-lite.json", {{"first_k_dense_replace", 27}}); }) ==
        "deepseek-v2-lite.json: first_k_dense_replace: makes every layer dense (as Strata's moe first_dense=27, "
        "with num_hidden_layers=27); drop the MoE keys instead");
  // Without a model_type the rule is not known: the keys stay unmodelled.
  CHECK(testing::input_error_of([] {
          parse_model_file_text(R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                    "vocab_size": 10, "max_position_embeddings": 8, "num_experts": 4,
                                    "decoder_sparse_step": 2})",
                                "s.json");
        }).rfind("s.json: decoder_sparse_step: 2 changes the architecture and Strata does not model it", 0) == 0);
}

TEST_CASE("a Hugging Face config's sequence length") {
  // Describing a config takes 4,096 tokens (or the context limit if
  // shorter) and says so; a training scenario must give seq_len.
  std::vector<std::string> notes;
  const ModelSpec m = load_model_file(hf_path("llama-3.1-8b.json"), &notes);
  CHECK(m.seq_len == 4096);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("seq_len 4096, Strata's default for a Hugging Face config "
                      "(max_position_embeddings=131072 is the context limit") != std::string::npos);
  CHECK(load_model_file(hf_path("gpt2.json")).seq_len == 1024);
  const nlohmann::json s = hf_path("llama-3.1-8b.json");
  CHECK(testing::input_error_of([&] { read_model(JsonReader(s, "sc.json", "model"), ""); })
            .find("sc.json: model: \"" + hf_path("llama-3.1-8b.json") +
                  "\" is a Hugging Face config, which gives no training sequence length") == 0);
  const nlohmann::json o = {{"file", hf_path("llama-3.1-8b.json")}};
  CHECK(testing::input_error_of([&] { read_model(JsonReader(o, "sc.json", "model"), ""); }) ==
        "sc.json: model.seq_len: required with a Hugging Face config as \"file\" (its "
        "max_position_embeddings=131072 is the context limit, not a training length)");
}

}  // namespace
}  // namespace strata::cost
