#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "costmodel/model_io.hpp"
#include "costmodel/presets.hpp"
#include "sim/limits.hpp"

namespace strata::cost {

namespace {

constexpr double kMaxTflops = 1e6;
constexpr double kMaxGBps = 1e6;
// A pebibyte per GPU, host or NVMe array: far beyond any device, and its
// bytes (2^50) leave room for sums in 64 bits.
constexpr double kMaxGiB = 1e6;
constexpr std::int64_t kMaxGpusPerNode = 1024;
constexpr std::int64_t kMaxNodes = 1'000'000;

std::vector<std::string> names_of(std::string_view kind) {
  std::vector<std::string> names;
  for (const auto& p : presets_of(kind)) names.emplace_back(p.name);
  return names;
}

// Reads the node fields present in `r` over `n`.
void read_node_fields(const JsonReader& r, NodeSpec& n) {
  n.gpus_per_node = r.int_or("gpus_per_node", n.gpus_per_node, 1, kMaxGpusPerNode);
  n.intra_node_GBps = r.number_or("intra_node_GBps", n.intra_node_GBps, 0, kMaxGBps);
  n.inter_node_GBps_per_gpu =
      r.number_or("inter_node_GBps_per_gpu", n.inter_node_GBps_per_gpu, 0, kMaxGBps);
  n.pcie_GBps = r.number_or("pcie_GBps", n.pcie_GBps, 0, kMaxGBps);
  n.host_memory_GiB = r.number_or("host_memory_GiB", n.host_memory_GiB, 0, kMaxGiB);
  n.nvme_GBps = r.number_or("nvme_GBps", n.nvme_GBps, 0, kMaxGBps);
  n.nvme_GiB = r.number_or("nvme_GiB", n.nvme_GiB, 0, kMaxGiB);
  n.nvlink_GBps = r.number_or("nvlink_GBps", n.nvlink_GBps, 0, kMaxGBps);
  if (auto m = r.get("nvlinks")) {
    // A square of NVLink counts, symmetric, nothing on the diagonal; []
    // drops a preset's (every pair at intra_node_GBps).
    const auto rows = m->elements();
    const std::size_t side = rows.size();
    if (side > static_cast<std::size_t>(kMaxGpusPerNode)) m->fail("lists more GPUs than a node holds (1024)");
    n.nvlinks.assign(side * side, 0);
    for (std::size_t i = 0; i < side; ++i) {
      const auto cols = rows[i].elements();
      if (cols.size() != side)
        rows[i].fail("has " + std::to_string(cols.size()) + " entries; the matrix lists " + std::to_string(side) +
                     " GPUs (a square: one row and one column per GPU)");
      for (std::size_t j = 0; j < side; ++j) n.nvlinks[i * side + j] = static_cast<int>(cols[j].as_int(0, 64));
    }
    for (std::size_t i = 0; i < side; ++i) {
      if (n.nvlinks[i * side + i] != 0) rows[i].elements()[i].fail("must be 0: a GPU has no NVLink to itself");
      for (std::size_t j = 0; j < i; ++j)
        if (n.nvlinks[i * side + j] != n.nvlinks[j * side + i])
          rows[i].elements()[j].fail("must equal entry [" + std::to_string(j) + "][" + std::to_string(i) +
                                     "]: a link joins two GPUs both ways");
    }
  }
}

// A node's NVLink matrix against its GPUs: a node using the first g GPUs of
// a server keeps their links (the matrix's leading g × g); a matrix of
// fewer GPUs than the node holds, or links without a bandwidth, are errors.
void fit_nvlinks(const JsonReader& r, NodeSpec& n) {
  if (n.nvlinks.empty()) return;
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(n.nvlinks.size()))));
  if (side < n.gpus_per_node)
    r.fail_at("nvlinks", "lists " + std::to_string(side) + " GPUs and the node holds " +
                             std::to_string(n.gpus_per_node) + " (gpus_per_node): one row and column per GPU");
  if (n.nvlink_GBps <= 0) r.fail_at("nvlink_GBps", "must be > 0 with an nvlinks matrix");
  if (side == n.gpus_per_node) return;
  const auto g = static_cast<std::size_t>(n.gpus_per_node);
  std::vector<int> lead(g * g);
  for (std::size_t i = 0; i < g; ++i)
    for (std::size_t j = 0; j < g; ++j) lead[i * g + j] = n.nvlinks[i * static_cast<std::size_t>(side) + j];
  n.nvlinks = std::move(lead);
}

GpuSpec gpu_preset_at(std::string_view name, const JsonReader& where);

constexpr double kMaxSlowdown = 1000;

// cluster.slow: [{"rank" | "node": i, "factor": f}, ...], each device once.
// Read after nodes and gpus_per_node, which bound the indices.
std::vector<SlowDevice> read_slow_devices(const JsonReader& r, const ClusterSpec& c) {
  std::vector<SlowDevice> out;
  std::unordered_set<std::int64_t> ranks, nodes;  // linear in the list, however long
  const auto items = r.elements();
  for (const JsonReader& e : items) {
    if (!e.is_object()) e.fail("must be an object {\"rank\" or \"node\", \"factor\"}");
    SlowDevice d;
    const bool by_rank = e.has("rank"), by_node = e.has("node");
    if (by_rank == by_node) e.fail("needs exactly one of \"rank\" and \"node\"");
    if (by_rank) d.rank = e.at("rank").as_int(0, std::max<std::int64_t>(c.gpus(), 1) - 1);
    if (by_node) d.node = e.at("node").as_int(0, c.nodes - 1);
    d.factor = e.at("factor").as_number(1, kMaxSlowdown);
    e.reject_unknown_keys();
    if (!(by_rank ? ranks.insert(d.rank) : nodes.insert(d.node)).second)
      e.fail(std::string("the same ") + (by_rank ? "rank" : "node") + " is listed twice");
    out.push_back(d);
  }
  return out;
}

StragglerModel read_stragglers(const JsonReader& r) {
  if (!r.is_object()) r.fail("must be an object (docs/input-format.md, stragglers)");
  StragglerModel m;
  m.rank_sigma = r.number_or("rank_sigma", 0, 0, 1);
  m.node_probability = r.number_or("node_probability", 0, 0, 1);
  m.node_factor = r.number_or("node_factor", 1, 1, kMaxSlowdown);
  m.samples = r.int_or("samples", m.samples, 1, 100'000);
  m.seed = static_cast<std::uint64_t>(r.int_or("seed", 1, 0, std::int64_t{1} << 62));
  m.backup_replicas = r.int_or("backup_replicas", 0, 0, kMaxGpus);
  r.reject_unknown_keys();
  if (m.rank_sigma == 0 && (m.node_probability == 0 || m.node_factor == 1))
    r.fail("slows nothing: set rank_sigma > 0, or node_probability > 0 with node_factor > 1");
  return m;
}

GpuSpec read_gpu_object(const JsonReader& r) {
  GpuSpec g;
  bool based = false;
  if (auto p = r.get("preset")) {
    g = gpu_preset_at(p->as_string(), *p);
    based = true;
  }
  g.name = r.string_or("name", based ? g.name : "custom-gpu");
  auto required = [&](const char* key, double& field, double lo, double hi) {
    if (auto v = r.get(key))
      field = v->as_number(lo, hi);
    else if (!based)
      r.fail_at(key, "missing required key");
  };
  required("memory_GiB", g.memory_GiB, 1e-3, kMaxGiB);
  required("hbm_GBps", g.hbm_GBps, 1e-3, kMaxGBps);
  if (auto t = r.get("tflops")) {
    auto& f = g.tflops;
    f.fp32 = t->number_or("fp32", f.fp32, 0, kMaxTflops);
    f.tf32 = t->number_or("tf32", f.tf32, 0, kMaxTflops);
    f.fp16 = t->number_or("fp16", f.fp16, 0, kMaxTflops);
    f.bf16 = t->number_or("bf16", f.bf16, 0, kMaxTflops);
    f.fp8 = t->number_or("fp8", f.fp8, 0, kMaxTflops);
    f.fp4 = t->number_or("fp4", f.fp4, 0, kMaxTflops);
    t->reject_unknown_keys();
  } else if (!based) {
    r.fail_at("tflops", "missing required key");
  }
  g.sms = r.int_or("sms", g.sms, 0, 1 << 20);
  if (auto t = r.get("gemm_tile")) {
    g.gemm_tile.m = t->int_or("m", 0, 1, 1 << 16);
    g.gemm_tile.n = t->int_or("n", 0, 1, 1 << 16);
    if (!g.gemm_tile.known()) t->fail("needs both m and n, the tile's rows and columns");
    t->reject_unknown_keys();
  }
  g.fp8_block_scaling = r.enum_or("fp8_block_scaling", g.fp8_block_scaling);
  if (auto s = r.get("server")) {
    s->allow({"source"});
    g.server.name = s->string_or("name", g.server.name);
    g.server.source = s->string_or("source", g.server.source);
    read_node_fields(*s, g.server);
    s->reject_unknown_keys();
  }
  g.source = r.string_or("source", g.source);
  r.reject_unknown_keys();
  return g;
}

GpuSpec gpu_preset_at(std::string_view name, const JsonReader& where) {
  const PresetFile* p = find_preset("gpus", name);
  if (!p) where.fail(unknown_preset_rule("GPU", name, names_of("gpus")));
  const std::string file(p->path);
  const auto j = parse_json_text(p->text, file);
  GpuSpec g = read_gpu_object(JsonReader(j, file));
  // A preset built on another (h800 on h100-sxm) keeps that chip's.
  if (g.preset.empty()) g.preset = std::string(name);
  return g;
}

ClusterSpec cluster_from_gpu(const GpuSpec& g) {
  ClusterSpec c;
  c.gpu = g;
  c.node = g.server;
  c.nodes = 1;
  c.name = g.server.name.empty() ? g.name + "-cluster" : g.server.name;
  c.source = g.server.source;
  return c;
}

ClusterSpec cluster_preset_at(std::string_view name, const JsonReader& where, int depth);

// Refuses a cluster of more GPUs than Strata models.
void check_cluster_size(const JsonReader& r, const ClusterSpec& c) {
  // nodes ≤ 10^6 and gpus_per_node ≤ 1,024: the product fits; the limit is on it.
  if (c.gpus() > kMaxGpus)
    r.fail_at("nodes", "nodes × gpus_per_node = " + std::to_string(c.nodes) + " × " +
                           std::to_string(c.node.gpus_per_node) + " = " + std::to_string(c.gpus()) +
                           " GPUs; Strata models at most 2^20 (1,048,576)");
}

ClusterSpec read_cluster_at(const JsonReader& value, const std::string& base_dir, int depth);

// A cluster of node groups: {"groups": [cluster, cluster, ...], "name",
// "source", "slow", "stragglers"}. Each group is a cluster (preset, file or
// object) of one kind of node; the GPUs are ranked group by group.
ClusterSpec read_grouped_cluster(const JsonReader& r, const JsonReader& groups, const std::string& base_dir,
                                 int depth) {
  for (const char* key : {"preset", "file", "gpu", "gpus_per_node", "nodes", "intra_node_GBps",
                          "inter_node_GBps_per_gpu", "pcie_GBps", "host_memory_GiB", "nvme_GBps", "nvme_GiB",
                          "nvlinks", "nvlink_GBps"})
    if (r.has(key)) r.fail_at(key, "with \"groups\", each group names its own GPU, server and nodes");
  const auto items = groups.elements();
  if (items.size() < 2)
    groups.fail("needs at least two groups (a cluster of one kind of node is a plain cluster object)");
  if (items.size() > 64) groups.fail("at most 64 groups");
  ClusterSpec c;
  c.nodes = 0;
  std::string names;
  for (const JsonReader& e : items) {
    if (e.is_object())
      for (const char* key : {"groups", "slow", "stragglers"})
        if (e.has(key)) e.fail_at(key, "belongs to the whole cluster, not to one of its groups");
    ClusterSpec g = read_cluster_at(e, base_dir, depth + 1);
    if (g.heterogeneous() || !g.slow.empty() || g.stragglers)
      e.fail("a group is one kind of node: its cluster may not have groups, slow GPUs or stragglers");
    if (!c.groups.empty() && g.node.gpus_per_node != c.groups.front().node.gpus_per_node)
      e.fail("has " + std::to_string(g.node.gpus_per_node) + " GPUs per node; every group needs the first's " +
             std::to_string(c.groups.front().node.gpus_per_node) + " (ranks are numbered node by node)");
    c.nodes += g.nodes;
    if (c.nodes > kMaxNodes) e.fail("the groups hold more than 10^6 nodes");
    names += (names.empty() ? "" : "+") + std::to_string(g.nodes) + "x" + g.name;
    c.groups.push_back({g.name, std::move(g.gpu), std::move(g.node), g.nodes});
  }
  c.gpu = c.groups.front().gpu;
  c.node = c.groups.front().node;
  c.name = r.string_or("name", names);
  c.source = r.string_or("source", "");
  check_cluster_size(r, c);
  // Collectives and sends may leave any node: every group's network is priced.
  if (c.nodes > 1)
    for (std::size_t i = 0; i < c.groups.size(); ++i)
      if (c.groups[i].node.inter_node_GBps_per_gpu <= 0)
        items[i].fail("inter_node_GBps_per_gpu must be > 0: the cluster has more than one node");
  if (auto sl = r.get("slow")) c.slow = read_slow_devices(*sl, c);
  if (auto st = r.get("stragglers")) c.stragglers = read_stragglers(*st);
  r.reject_unknown_keys();
  return c;
}

ClusterSpec read_cluster_object(const JsonReader& r, const std::string& base_dir, int depth) {
  if (depth > 8) r.fail("presets/files nest more than 8 deep");
  if (!r.is_object()) r.fail("must be a preset name, a file path or an object");
  if (auto groups = r.get("groups")) return read_grouped_cluster(r, *groups, base_dir, depth);
  ClusterSpec c;
  bool based = false;
  if (auto p = r.get("preset")) {
    c = cluster_preset_at(p->as_string(), *p, depth);
    based = true;
  }
  if (auto f = r.get("file")) {
    if (based) f->fail("\"file\" and \"preset\" are exclusive");
    const std::string path = resolve_path(f->as_string(), base_dir);
    const auto j = load_json_file(path);
    f->read_file(path);
    c = read_cluster_object(f->reading(j, path),
                            std::filesystem::path(path).parent_path().string(), depth + 1);
    based = true;
  }
  if (auto g = r.get("gpu")) {
    const GpuSpec gpu = read_gpu(*g);
    if (based) {
      c.gpu = gpu;  // keep the preset's network
    } else {
      c = cluster_from_gpu(gpu);
      based = true;
    }
  }
  if (!based) r.fail("a cluster needs \"preset\", \"file\" or \"gpu\"");
  c.name = r.string_or("name", c.name);
  read_node_fields(r, c.node);
  fit_nvlinks(r, c.node);
  c.nodes = r.int_or("nodes", c.nodes, 1, kMaxNodes);
  c.source = r.string_or("source", c.source);
  if (auto sl = r.get("slow")) c.slow = read_slow_devices(*sl, c);
  if (auto st = r.get("stragglers")) c.stragglers = read_stragglers(*st);
  r.reject_unknown_keys();
  check_cluster_size(r, c);
  if (c.node.gpus_per_node > 1 && c.node.intra_node_GBps <= 0)
    r.fail_at("intra_node_GBps", "must be > 0 when gpus_per_node > 1");
  if (c.nodes > 1 && c.node.inter_node_GBps_per_gpu <= 0)
    r.fail_at("inter_node_GBps_per_gpu", "must be > 0 when nodes > 1");
  return c;
}

ClusterSpec cluster_preset_at(std::string_view name, const JsonReader& where, int depth) {
  if (const PresetFile* p = find_preset("clusters", name)) {
    const std::string file(p->path);
    const auto j = parse_json_text(p->text, file);
    return read_cluster_object(JsonReader(j, file), "", depth + 1);
  }
  // "1x<gpu>": one GPU in the GPU's standard server.
  if (name.size() > 2 && name.substr(0, 2) == "1x" && find_preset("gpus", name.substr(2))) {
    ClusterSpec c = cluster_from_gpu(gpu_preset_at(name.substr(2), where));
    c.name = std::string(name);
    c.node.gpus_per_node = 1;
    c.nodes = 1;
    c.source = "one " + c.gpu.name + " in its standard server (" + c.gpu.server.name + ")";
    return c;
  }
  std::vector<std::string> known = names_of("clusters");
  for (const auto& g : names_of("gpus")) known.push_back("1x" + g);
  where.fail(unknown_preset_rule("cluster", name, known));
}

ClusterSpec read_cluster_at(const JsonReader& value, const std::string& base_dir, int depth) {
  if (value.is_string()) {
    const std::string s = value.as_string();
    if (names_a_file(s)) {
      const std::string path = resolve_path(s, base_dir);
      if (!std::filesystem::exists(path)) value.fail("cluster file \"" + s + "\" not found");
      const auto j = load_json_file(path);
      value.read_file(path);
      return read_cluster_object(value.reading(j, path),
                                 std::filesystem::path(path).parent_path().string(), depth + 1);
    }
    return cluster_preset_at(s, value, depth);
  }
  return read_cluster_object(value, base_dir, depth);
}

}  // namespace

GpuSpec read_gpu(const JsonReader& value) {
  if (value.is_string()) return gpu_preset_at(value.as_string(), value);
  return read_gpu_object(value);
}

GpuSpec gpu_preset(std::string_view name) {
  const nlohmann::json j = std::string(name);
  return gpu_preset_at(name, JsonReader(j, "", "gpu"));
}

std::vector<GpuSpec> gpu_presets() {
  std::vector<GpuSpec> out;
  for (const auto& n : names_of("gpus")) out.push_back(gpu_preset(n));
  return out;
}

ClusterSpec read_cluster(const JsonReader& value, const std::string& base_dir) {
  return read_cluster_at(value, base_dir, 0);
}

ClusterSpec cluster_preset(std::string_view name) {
  const nlohmann::json j = std::string(name);
  return cluster_preset_at(name, JsonReader(j, "", "cluster"), 0);
}

std::vector<ClusterSpec> cluster_presets() {
  std::vector<ClusterSpec> out;
  for (const auto& n : names_of("clusters")) out.push_back(cluster_preset(n));
  for (const auto& n : names_of("gpus")) out.push_back(cluster_preset("1x" + n));
  return out;
}

}  // namespace strata::cost
