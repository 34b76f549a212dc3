#include "costmodel/model_io.hpp"

#include <doctest/doctest.h>

#include "tests/testing.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "costmodel/ops.hpp"
#include "costmodel/presets.hpp"

namespace strata::cost {
namespace {

std::string error_of(auto&& fn) { return testing::input_error_of(fn); }

ModelSpec model_from(const std::string& text) {
  const auto j = parse_json_text(text, "m.json");
  return read_model(JsonReader(j, "m.json", "model"), "");
}

ClusterSpec cluster_from(const std::string& text) {
  const auto j = parse_json_text(text, "c.json");
  return read_cluster(JsonReader(j, "c.json", "cluster"), "");
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST_CASE("every bundled preset loads and names itself") {
  // The issue's preset list: 14 transformers and 4 layer chains, and 9
  // current open families (Llama 3.1, Qwen 2.5 and 3, DeepSeek-V3, Gemma 3,
  // Mixtral 8x22B, Phi-4); 8 GPUs, 5 clusters (+ 1x<gpu> each).
  const auto models = model_presets();
  CHECK(models.size() == 27);
  for (const auto& m : models) {
    CAPTURE(m.name);
    CHECK(!m.source.empty());
    CHECK(find_preset("models", m.name) != nullptr);
  }
  const auto gpus = gpu_presets();
  CHECK(gpus.size() == 8);
  for (const auto& g : gpus) {
    CAPTURE(g.name);
    CHECK(!g.source.empty());
    CHECK(g.peak_tflops(Precision::FP16) > 0);
    CHECK(g.server.gpus_per_node >= 8);
  }
  CHECK(cluster_presets().size() == 5 + 8);
  CHECK(model_preset("gpt3-175b").vocab == 51200);
}

TEST_CASE("an NVLink matrix: square, symmetric, no self links, with a bandwidth; a node of fewer GPUs keeps the first ones") {
  // The DGX-1 preset: eight GPUs, six links each (NV1 pairs count 1, NV2 2).
  const ClusterSpec d = cluster_from(R"({"preset": "dgx1-v100"})");
  REQUIRE(d.node.nvlinks.size() == 64);
  CHECK(d.node.nvlink_GBps == 25);
  for (int i = 0; i < 8; ++i) {
    int links = 0;
    for (int j = 0; j < 8; ++j) links += d.node.nvlinks[static_cast<std::size_t>(8 * i + j)];
    CHECK(links == 6);
  }
  // Four GPUs of the server: its leading 4 x 4.
  const ClusterSpec four = cluster_from(R"({"preset": "dgx1-v100", "gpus_per_node": 4})");
  CHECK(four.node.nvlinks == std::vector<int>{0, 1, 1, 2, 1, 0, 2, 1, 1, 2, 0, 2, 2, 1, 2, 0});
  // [] drops the preset's matrix.
  CHECK(cluster_from(R"({"preset": "dgx1-v100", "nvlinks": []})").node.nvlinks.empty());
  const std::string gpu = R"("gpu": "v100-32g", "gpus_per_node": 2, "intra_node_GBps": 50, )";
  CHECK(error_of([&] { cluster_from("{" + gpu + R"("nvlink_GBps": 25, "nvlinks": [[0, 1], [1]]})"); }) ==
        "c.json: cluster.nvlinks[1]: has 1 entries; the matrix lists 2 GPUs (a square: one row and one column per GPU)");
  CHECK(error_of([&] { cluster_from("{" + gpu + R"("nvlink_GBps": 25, "nvlinks": [[0, 1], [2, 0]]})"); }) ==
        "c.json: cluster.nvlinks[1][0]: must equal entry [0][1]: a link joins two GPUs both ways");
  CHECK(error_of([&] { cluster_from("{" + gpu + R"("nvlink_GBps": 25, "nvlinks": [[1, 1], [1, 0]]})"); }) ==
        "c.json: cluster.nvlinks[0][0]: must be 0: a GPU has no NVLink to itself");
  CHECK(error_of([&] { cluster_from("{" + gpu + R"("nvlinks": [[0, 1], [1, 0]]})"); }) ==
        "c.json: cluster.nvlink_GBps: must be > 0 with an nvlinks matrix");
  CHECK(error_of([&] {
          cluster_from(R"({"gpu": "v100-32g", "gpus_per_node": 4, "intra_node_GBps": 50, "nvlink_GBps": 25,
                           "nvlinks": [[0, 1], [1, 0]]})");
        }) == "c.json: cluster.nvlinks: lists 2 GPUs and the node holds 4 (gpus_per_node): one row and column per GPU");
}

TEST_CASE("current open-family presets have their published sizes") {
  // Total and active parameters against each preset's source: within 0.1 %
  // where the count is exact, within the last published digit otherwise.
  struct Expect {
    const char* name;
    double total, total_unit, active, active_unit;
  };
  const Expect cases[] = {
      {"llama3.1-70b", 70'553'706'496, 0, 0, 0},   // safetensors
      {"qwen2.5-72b", 72.7e9, 0.1e9, 0, 0},        // card
      {"qwen3-32b", 32.8e9, 0.1e9, 0, 0},          // card
      {"qwen3-30b-a3b", 30.5e9, 0.1e9, 3.3e9, 0.1e9},
      {"qwen3-235b-a22b", 235e9, 1e9, 22e9, 1e9},
      {"mixtral-8x22b", 141e9, 1e9, 39e9, 1e9},     // Mistral AI's announcement
      {"phi-4", 14.7e9, 0.1e9, 0, 0},              // safetensors, rounded
      {"gemma3-27b", 27.0e9, 0.1e9, 0, 0},         // text model of the 27B
      // DeepSeek's 37B activated leaves the token embedding out.
      {"deepseek-v3", 671e9, 1e9, 37e9 + 129280.0 * 7168.0, 1e9},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    // The published sizes are the main model's: DeepSeek-V3's 671B and 37B
    // leave out its multi-token prediction module (mtp_layers 1).
    ModelSpec m = model_preset(c.name);
    m.mtp_layers = 0;
    const double total = static_cast<double>(total_params(m));
    const double active = static_cast<double>(active_params(m));
    if (c.total_unit == 0)
      CHECK(std::abs(total - c.total) <= 0.001 * c.total);
    else
      CHECK(std::abs(total - c.total) <= c.total_unit);
    if (c.active > 0) CHECK(std::abs(active - c.active) <= c.active_unit);
    if (!m.moe) CHECK(active == total);
  }
}

TEST_CASE("cluster presets and overrides") {
  // dgx-h100: 8 H100s per node; the scenario sets nodes.
  const auto c = cluster_from(R"({"preset": "dgx-h100", "nodes": 16})");
  CHECK(c.gpus() == 128);
  CHECK(c.gpu.name == "h100-sxm");
  CHECK(c.node.inter_node_GBps_per_gpu == 50);
  // 1x<gpu>: one GPU of each preset.
  const auto one = cluster_preset("1xh200");
  CHECK(one.gpus() == 1);
  CHECK(one.gpu.memory_GiB == doctest::Approx(140.4));
  // A GPU alone takes its standard server's network.
  const auto a100 = cluster_from(R"({"gpu": "a100-80g", "nodes": 2})");
  CHECK(a100.gpus() == 16);
  CHECK(a100.node.intra_node_GBps == 300);
  // An inline GPU object overriding a preset's field.
  const auto custom =
      cluster_from(R"({"preset": "dgx-a100-80g", "gpu": {"preset": "a100-80g", "memory_GiB": 40}})");
  CHECK(custom.gpu.memory_GiB == 40);
  CHECK(custom.gpu.tflops.bf16 == 312);
  // Its GEMM tile: the preset's, another, or refused half given.
  CHECK(custom.gpu.gemm_tile.m == 256);
  CHECK(custom.gpu.gemm_tile.n == 128);
  CHECK(cluster_from(R"({"gpu": {"preset": "a100-80g", "gemm_tile": {"m": 128, "n": 64}}})").gpu.gemm_tile.n == 64);
  CHECK(cluster_from(R"({"gpu": "b200"})").gpu.gemm_tile.known() == false);
  CHECK(error_of([&] { cluster_from(R"({"gpu": {"preset": "a100-80g", "gemm_tile": {"m": 128}}})"); }) ==
        "c.json: cluster.gpu.gemm_tile: needs both m and n, the tile's rows and columns");
}

TEST_CASE("model objects: preset with overrides, inline with defaults") {
  const auto m = model_from(R"({"preset": "llama3-8b", "seq_len": 4096})");
  CHECK(m.seq_len == 4096);
  CHECK(m.kv_heads == 8);
  CHECK(m.mlp == MlpKind::Swiglu);
  // Inline: GPT-style defaults, kv_heads = heads, ffn = 4·hidden.
  const auto g = model_from(R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})");
  CHECK(g.kv_heads == 4);
  CHECK(g.ffn_hidden == 256);
  CHECK(g.mlp == MlpKind::Gelu);
  CHECK(g.norm == NormKind::LayerNorm);
  CHECK(g.bias);
  CHECK(g.tied_embeddings);
  CHECK(g.position_embedding == PositionEmbedding::Learned);
}

TEST_CASE("model errors name the path and the rule") {
  CHECK(error_of([] { model_from(R"("gpt5")"); }).find(
            "m.json: model: unknown model preset \"gpt5\" (known: deepseek-v3,") == 0);
  CHECK(error_of([] { model_from(R"({"layers": 2, "hidden": 64, "heads": 5, "vocab": 10, "seq_len": 8})"); }) ==
        "m.json: model.heads: 5 does not divide hidden=64");
  CHECK(error_of([] { model_from(R"({"preset": "llama3-8b", "kv_heads": 3})"); }) ==
        "m.json: model.kv_heads: 3 does not divide heads=32");
  CHECK(error_of([] { model_from(R"({"hidden": 64, "heads": 4, "vocab": 10, "seq_len": 8})"); }) ==
        "m.json: model.layers: missing required key");
  CHECK(error_of([] { model_from(R"({"preset": "gpt2-124m", "layer": 3})"); }) ==
        "m.json: model.layer: unknown key (did you mean \"layers\"?)");
  CHECK(error_of([] { model_from(R"({"preset": "gpt2-124m", "mlp": "relu"})"); }) ==
        "m.json: model.mlp: must be one of gelu|swiglu|geglu (got \"relu\")");
  CHECK(error_of([] { model_from(R"({"preset": "gpt2-124m", "layers": 0})"); }) ==
        "m.json: model.layers: must be in [1, 100000], got 0");
  CHECK(error_of([] { model_from(R"({"preset": "mixtral-8x7b", "moe": {"experts": 2, "top_k": 4}})"); }) ==
        "m.json: model.moe.top_k: 4 exceeds experts=2");
  CHECK(error_of([] { model_from(R"("no/such/file.json")"); }) ==
        "m.json: model: model file \"no/such/file.json\" not found");
}

TEST_CASE("layer-chain models: repeats expand, defaults fill in, presets check against their papers") {
  // Two repeats of a two-layer group between a stem and a head: 6 stages;
  // bwd_flops defaults to 2·fwd_flops; saved and workspace bytes to 0.
  const auto m = model_from(R"({"name": "toy", "chain": {"input_bytes": 12, "layers": [
      {"name": "stem", "fwd_flops": 10, "bwd_flops": 10, "params": 3, "output_bytes": 8},
      {"repeat": 2, "layers": [
        {"name": "a", "fwd_flops": 4, "params": 1, "output_bytes": 6, "saved_bytes": 2},
        {"name": "b", "fwd_flops": 5, "output_bytes": 4, "workspace_bytes": 1}]},
      {"name": "head", "fwd_flops": 1, "output_bytes": 1}]}})");
  REQUIRE(m.chain);
  CHECK(m.layers == 6);
  CHECK(m.hidden == 0);
  std::vector<std::string> names;
  for (const auto& l : m.chain->layers) names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"stem", "a.1", "b.1", "a.2", "b.2", "head"});
  CHECK(m.chain->params() == 3 + 2 * 1);
  CHECK(m.chain->fwd_flops() == 10 + 2 * (4 + 5) + 1);
  CHECK(m.chain->bwd_flops() == 10 + 2 * (8 + 10) + 2);
  CHECK(m.chain->layers[1].saved_bytes == 2);
  CHECK(m.chain->layers[2].workspace_bytes == 1);
  CHECK(m.chain->input_bytes == 12);
  // A preset keeps its chain under a new name.
  const auto r = model_from(R"({"preset": "resnet50", "name": "mine"})");
  CHECK(r.name == "mine");
  CHECK(r.layers == 18);
  // The presets' totals match their papers (scripts/gen_chain_presets.py):
  // ResNet-50 25.6 M parameters and 3.8 G multiply-adds (He et al. 2016,
  // Table 1), VGG-19 143.7 M and 19.6 G (Simonyan & Zisserman), U-Net
  // 31.0 M (23 conv layers); ResNet-1001 333 units + stem + head.
  auto macs = [](const ModelSpec& s) { return s.chain->fwd_flops() / 2e9; };
  CHECK(model_preset("resnet50").chain->params() / 1e6 == doctest::Approx(25.6).epsilon(0.01));
  CHECK(macs(model_preset("resnet50")) == doctest::Approx(3.86).epsilon(0.01));
  CHECK(model_preset("vgg19").chain->params() / 1e6 == doctest::Approx(143.7).epsilon(0.001));
  CHECK(macs(model_preset("vgg19")) == doctest::Approx(19.6).epsilon(0.01));
  CHECK(model_preset("unet").chain->params() / 1e6 == doctest::Approx(31.0).epsilon(0.01));
  CHECK(model_preset("unet").layers == 23);
  CHECK(model_preset("resnet1001").layers == 335);
}

TEST_CASE("layer-chain errors name the path and the rule") {
  CHECK(error_of([] { model_from(R"({"chain": {"input_bytes": 4, "layers": []}})"); }) ==
        "m.json: model.chain.layers: must hold at least one layer");
  CHECK(error_of([] { model_from(R"({"chain": {"layers": [{"name": "a", "fwd_flops": 1, "output_bytes": 1}]}})"); }) ==
        "m.json: model.chain.input_bytes: missing required key");
  CHECK(error_of([] { model_from(R"({"chain": {"input_bytes": 4, "layers": [{"name": "a", "fwd_flops": 1}]}})"); }) ==
        "m.json: model.chain.layers[0].output_bytes: missing required key");
  CHECK(error_of([] { model_from(R"({"chain": {"input_bytes": 4, "layers": [{"name": "a", "fwd_flops": -1, "output_bytes": 1}]}})"); })
            .find("m.json: model.chain.layers[0].fwd_flops: must be in [0, ") == 0);
  CHECK(error_of([] { model_from(R"({"chain": {"input_bytes": 4, "layers": [{"name": "a", "fwd_flops": 1, "output_bytes": 1, "saved_byte": 2}]}})"); }) ==
        "m.json: model.chain.layers[0].saved_byte: unknown key (did you mean \"saved_bytes\"?)");
  CHECK(error_of([] { model_from(R"({"chain": {"input_bytes": 4, "layers": [{"repeat": 0, "layers": []}]}})"); }) ==
        "m.json: model.chain.layers[0].repeat: must be in [1, 100000], got 0");
  CHECK(error_of([] { model_from(R"({"chain": {"input_bytes": 4, "layers": [{"repeat": 100, "layers": [
      {"repeat": 1001, "layers": [{"name": "a", "fwd_flops": 1, "output_bytes": 1}]}]}]}})"); }) ==
        "m.json: model.chain.layers[0]: the chain expands to more than 100000 layers");
  CHECK(error_of([] { model_from(R"({"layers": 3, "chain": {"input_bytes": 4, "layers": [{"name": "a", "fwd_flops": 1, "output_bytes": 1}]}})"); }) ==
        "m.json: model.layers: applies to transformer models; this model is a layer chain (\"chain\")");
  CHECK(error_of([] { model_from(R"({"preset": "gpt2-124m", "chain": {"input_bytes": 4, "layers": [{"name": "a", "fwd_flops": 1, "output_bytes": 1}]}})"); }) ==
        "m.json: model.chain: the base model is a transformer; a layer chain cannot extend it");
  CHECK(error_of([] { model_from(R"({"preset": "vgg19", "hidden": 4})"); }) ==
        "m.json: model.hidden: applies to transformer models; this model is a layer chain (\"chain\")");
}

TEST_CASE("attention_window: every layer, or all but every global_every-th") {
  // {"size": 4096}: every layer windowed; with global_every 6, layer i is
  // global when (i + 1) % 6 == 0 (layers 5 and 11 of 12).
  const auto all = model_from(R"({"layers": 12, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32,
                                  "attention_window": {"size": 4096}})");
  REQUIRE(all.attention_window);
  CHECK(all.window_size() == 4096);
  CHECK_FALSE(all.attention_window->global_every);
  for (std::int64_t i = 0; i < 12; ++i) CHECK(all.windowed_at(i));
  const auto five_one = model_from(R"({"layers": 12, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32,
                                       "attention_window": {"size": 1024, "global_every": 6}})");
  CHECK(five_one.window_size() == 1024);
  for (std::int64_t i = 0; i < 12; ++i) {
    CAPTURE(i);
    CHECK(five_one.windowed_at(i) == (i != 5 && i != 11));
  }
  // Without a window no layer is windowed.
  const auto none = model_from(R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})");
  CHECK_FALSE(none.windowed_at(0));
  CHECK(none.window_size() == 0);
  // Gemma 3 27B's preset: 1024-token windows, every sixth layer global; null
  // drops a base model's window.
  const auto gemma = model_preset("gemma3-27b");
  REQUIRE(gemma.attention_window);
  CHECK(gemma.window_size() == 1024);
  CHECK(gemma.attention_window->global_every == 6);
  CHECK_FALSE(model_from(R"({"preset": "gemma3-27b", "attention_window": null})").attention_window);
}

TEST_CASE("attention_window errors name the path and the rule") {
  const std::string base = R"({"layers": 12, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32, )";
  auto err = [&](const std::string& window) {
    return error_of([&] { model_from(base + R"("attention_window": )" + window + "}"); });
  };
  CHECK(err(R"({"size": 0})") == "m.json: model.attention_window.size: must be in [1, 16777216], got 0");
  CHECK(err(R"({"global_every": 6})") == "m.json: model.attention_window.size: missing required key");
  CHECK(err(R"({"size": 8, "global_every": 0})") ==
        "m.json: model.attention_window.global_every: must be in [1, 100000], got 0");
  CHECK(err(R"({"size": 8, "global_every": -6})") ==
        "m.json: model.attention_window.global_every: must be in [1, 100000], got -6");
  CHECK(err(R"({"size": 8, "global_every": 1})") ==
        "m.json: model.attention_window.global_every: 1 makes every layer global (full attention): leave "
        "attention_window out instead");
  CHECK(err(R"({"size": 8, "every": 6})").rfind("m.json: model.attention_window.every: unknown key", 0) == 0);
  CHECK(err("4096") == "m.json: model.attention_window: must be an object {\"size\", \"global_every\"} or null");
  // A layer chain has no attention.
  CHECK(error_of([] {
          model_from(R"({"preset": "resnet50", "attention_window": {"size": 8}})");
        }) == "m.json: model.attention_window: applies to transformer models; this model is a layer chain "
              "(\"chain\")");
}

TEST_CASE("moe layer patterns: every, offset and dense_layers read as MoeSpec's rule") {
  // 8 layers; every 3 from block 2 less block 5: experts in block 2 only
  // (2 % 3 == 2, 5 listed dense): moe_blocks 1. dense_layers come sorted.
  const ModelSpec m = model_from(R"({"layers": 8, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32,
      "moe": {"experts": 4, "top_k": 2, "every": 3, "offset": 2, "dense_layers": [5, 0]}})");
  REQUIRE(m.moe);
  CHECK(m.moe->every == 3);
  CHECK(m.moe->offset == 2);
  CHECK(m.moe->dense_layers == std::vector<std::int64_t>{0, 5});
  CHECK(m.moe_blocks() == 1);
  CHECK(m.moe_at(2));
  CHECK_FALSE(m.moe_at(5));
  // Without the keys every block has experts, as before.
  CHECK(model_from(R"({"preset": "mixtral-8x7b"})").moe_blocks() == 32);
}

TEST_CASE("moe layer pattern errors name the path and the rule") {
  const std::string base = R"({"layers": 4, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32, "moe": )";
  auto err = [&](const std::string& moe) { return error_of([&] { model_from(base + moe + "}"); }); };
  CHECK(err(R"({"experts": 4, "every": 0})") == "m.json: model.moe.every: must be in [1, 100000], got 0");
  // offset counts within one period of `every`.
  CHECK(err(R"({"experts": 4, "every": 2, "offset": 2})") == "m.json: model.moe.offset: must be in [0, 1], got 2");
  CHECK(err(R"({"experts": 4, "offset": 1})") == "m.json: model.moe.offset: must be in [0, 0], got 1");
  // dense_layers: block indices of this model, each once.
  CHECK(err(R"({"experts": 4, "dense_layers": [4]})") ==
        "m.json: model.moe.dense_layers[0]: must be in [0, 3], got 4");
  CHECK(err(R"({"experts": 4, "dense_layers": [1, 1]})") == "m.json: model.moe.dense_layers[1]: 1 is listed twice");
  CHECK(err(R"({"experts": 4, "dense_layers": 1})") ==
        "m.json: model.moe.dense_layers: must be an array of block indices (0-based)");
  // A pattern that leaves every block dense is refused at the moe object:
  // every 8 from block 5 of 4 blocks has none; first_dense 2 with every 2
  // from 1 leaves block 3, which dense_layers takes.
  CHECK(err(R"({"experts": 4, "every": 8, "offset": 5})") ==
        "m.json: model.moe: every=8, offset=5 leaves no MoE block of layers=4");
  CHECK(err(R"({"experts": 4, "first_dense": 2, "every": 2, "offset": 1, "dense_layers": [3]})") ==
        "m.json: model.moe: first_dense=2, every=2, offset=1, dense_layers=[3] leaves no MoE block of layers=4");
  CHECK(err(R"({"experts": 4, "first_dense": 4})") ==
        "m.json: model.moe: first_dense=4 leaves no MoE block of layers=4");
  CHECK(err(R"({"experts": 4, "every_k": 2})").rfind("m.json: model.moe.every_k: unknown key", 0) == 0);
  // A base model's dense_layers must still name blocks when an object
  // over it sets fewer layers.
  const std::string file = write_temp("strata_moe_pattern.json", R"({"layers": 8, "hidden": 64, "heads": 4,
      "vocab": 100, "seq_len": 32, "moe": {"experts": 4, "dense_layers": [6]}})");
  CHECK(error_of([&] { model_from(R"({"file": ")" + file + R"(", "layers": 4})"); }) ==
        "m.json: model.moe: dense_layers names block 6 of layers=4 (blocks are 0 … 3)");
}

TEST_CASE("Hugging Face config.json imports as a model") {
  // meta-llama/Meta-Llama-3-70B's config.json keys; the result has the
  // preset's parameter count (70.55 B).
  const std::string path = write_temp("strata_hf_llama3_70b.json", R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 28672,
    "max_position_embeddings": 8192, "num_attention_heads": 64,
    "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "vocab_size": 128256, "attention_bias": false})");
  const auto hf = load_model_file(path);
  const auto preset = model_preset("llama3-70b");
  CHECK(hf.mlp == MlpKind::Swiglu);
  CHECK(hf.norm == NormKind::RmsNorm);
  CHECK(hf.position_embedding == PositionEmbedding::Rope);
  CHECK_FALSE(hf.bias);
  CHECK_FALSE(hf.tied_embeddings);
  CHECK(expand(hf).params() == expand(preset).params());
  // The rotary base is the config's, and the preset's (from the same file).
  CHECK(hf.rope_theta == 500000.0);
  CHECK(preset.rope_theta == 500000.0);

  // Mixtral's MoE keys.
  const std::string mix = write_temp("strata_hf_mixtral.json", R"({
    "model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "num_experts_per_tok": 2, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": false, "vocab_size": 32000})");
  CHECK(expand(load_model_file(mix)).params() == expand(model_preset("mixtral-8x7b")).params());
  // No rope_theta in the file: the family's config class would set it
  // (1e6 for Mixtral), so it is not guessed.
  CHECK_FALSE(load_model_file(mix).rope_theta.has_value());
  // A learned-position model has no rotary base; Strata's format refuses one.
  CHECK_FALSE(model_preset("gpt2-124m").rope_theta.has_value());
  CHECK(error_of([] {
          parse_model_file_text(R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 10, "seq_len": 8,
                                    "position_embedding": "learned", "rope_theta": 10000})",
                                "r.json");
        }) == "r.json: rope_theta: is the base of rope positions, and position_embedding is learned");

  // GPT-2's older key names.
  const std::string g2 = write_temp("strata_hf_gpt2.json", R"({
    "model_type": "gpt2", "activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
    "layer_norm_epsilon": 1e-05, "resid_pdrop": 0.1})");
  CHECK(expand(load_model_file(g2)).params() == expand(model_preset("gpt2-124m")).params());

  const std::string bad = write_temp("strata_hf_bad.json", R"({"num_hidden_layers": 2,
    "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10,
    "max_position_embeddings": 8, "hidden_act": "relu"})");
  CHECK(error_of([&] { load_model_file(bad); }) ==
        bad + ": hidden_act: unsupported activation \"relu\" (Strata models gelu* and silu/swiglu)");

  // Cross-field rules name the config's own keys.
  CHECK(error_of([] {
          parse_model_file_text(R"({"n_layer": 2, "n_embd": 64, "n_head": 5, "vocab_size": 10, "n_positions": 8})",
                                "g.json");
        }) == "g.json: n_head: 5 does not divide hidden=64");
  CHECK(error_of([] {
          parse_model_file_text(R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                    "num_key_value_heads": 3, "vocab_size": 10, "max_position_embeddings": 8})",
                                "l.json");
        }) == "l.json: num_key_value_heads: 3 does not divide heads=4");
  CHECK(error_of([] {
          parse_model_file_text(R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                    "num_local_experts": 2, "num_experts_per_tok": 3, "vocab_size": 10,
                                    "max_position_embeddings": 8})",
                                "m.json");
        }) == "m.json: num_experts_per_tok: 3 exceeds experts=2");
}

}  // namespace
}  // namespace strata::cost
