#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "costmodel/calibration.hpp"
#include "costmodel/model_io.hpp"
#include "costmodel/presets.hpp"

namespace strata::cost {

// ---------------------------------------------------------------- curves

EfficiencyCurve::EfficiencyCurve(const std::vector<std::pair<double, double>>& points) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto [size, value] = points[i];
    if (!(size > 0) || !std::isfinite(size))
      throw Error("efficiency curve: sizes must be finite and > 0");
    if (!(value > 0) || !std::isfinite(value))
      throw Error("efficiency curve: values must be finite and > 0");
    if (i > 0 && !(size > points[i - 1].first))
      throw Error("efficiency curve: sizes must increase strictly");
    log_size_.push_back(std::log(size));
    value_.push_back(value);
  }
  finish();
}

EfficiencyCurve EfficiencyCurve::constant(double value) { return EfficiencyCurve({{1.0, value}}); }

void EfficiencyCurve::finish() {
  slope_.assign(log_size_.size(), 0.0);
  for (std::size_t i = 0; i + 1 < log_size_.size(); ++i)
    slope_[i] = (value_[i + 1] - value_[i]) / (log_size_[i + 1] - log_size_[i]);
  size_lo_ = log_size_.empty() ? 0 : std::exp(log_size_.front());
  size_hi_ = log_size_.empty() ? 0 : std::exp(log_size_.back());
}

std::vector<std::pair<double, double>> EfficiencyCurve::points() const {
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < log_size_.size(); ++i)
    out.emplace_back(std::exp(log_size_[i]), value_[i]);
  return out;
}

EfficiencyCurve EfficiencyCurve::scaled_sizes(double factor) const {
  if (!(factor > 0) || !std::isfinite(factor))
    throw Error("efficiency curve: scale factor must be finite and > 0");
  EfficiencyCurve c = *this;
  const double shift = std::log(factor);
  for (double& x : c.log_size_) x += shift;
  c.finish();
  return c;
}

double peak_tflops(const GpuSpec& gpu, GemmDtype d) {
  switch (d) {
    case GemmDtype::FP32: return gpu.tflops.fp32;
    case GemmDtype::TF32: return gpu.tflops.tf32;
    case GemmDtype::FP16: return gpu.tflops.fp16;
    case GemmDtype::BF16: return gpu.tflops.bf16;
    case GemmDtype::FP8: return gpu.tflops.fp8;
    case GemmDtype::FP4: return gpu.tflops.fp4;
  }
  return 0;
}

Calibration ideal_calibration() {
  Calibration c;
  c.machine = "ideal";
  c.backend = "estimate";
  c.source = "datasheet peaks: every efficiency 1, no latency or overhead";
  c.overheads = Overheads{0, 0, 0, 0, 0};
  return c;
}

// ---------------------------------------------------------------- reading

namespace {

constexpr double kMaxPeak = 1e7;      // tflops or GBps: far above any device
constexpr double kMaxSize = 1e21;     // FLOPs or bytes
constexpr double kMaxUs = 1e9;        // a thousand seconds
constexpr double kMaxEfficiency = 1.0;
// Collective bus bandwidth may exceed the link's line rate when the switch
// reduces in-network (NVLink SHARP: ~480 GB/s busbw on 450 GB/s links).
constexpr double kMaxBusbwEfficiency = 2.0;

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// One table of points. Each point has its size key(s) and exactly one of
// `value_key` (absolute, divided by `peak`) or "efficiency".
struct TableSpec {
  const char* value_key;  // "tflops", "GBps", "busbw_GBps"
  const char* peak_key;   // where the peak is named, for messages
  double max_efficiency;
  bool gemm;              // size from m, n, k (2mnk FLOPs), else "bytes"
};

EfficiencyCurve read_points(const JsonReader& arr, const TableSpec& spec, double peak) {
  std::vector<std::pair<double, double>> pts;
  const auto elems = arr.elements();
  if (elems.empty()) arr.fail("must list at least one point");
  for (const auto& p : elems) {
    double size = 0;
    if (spec.gemm) {
      const double m = static_cast<double>(p.at("m").as_int(1, 1'000'000'000));
      const double n = static_cast<double>(p.at("n").as_int(1, 1'000'000'000));
      const double k = static_cast<double>(p.at("k").as_int(1, 1'000'000'000));
      size = 2.0 * m * n * k;
    } else {
      size = static_cast<double>(p.at("bytes").as_int(1, INT64_MAX));
    }
    const auto abs = p.get(spec.value_key);
    const auto eff = p.get("efficiency");
    if (abs.has_value() == eff.has_value())
      p.fail(std::string("a point needs exactly one of \"") + spec.value_key +
             "\" and \"efficiency\"");
    double value = 0;
    if (eff) {
      value = eff->as_number(1e-6, spec.max_efficiency);
    } else {
      if (peak <= 0)
        abs->fail(std::string("an absolute \"") + spec.value_key + "\" needs \"" +
                  spec.peak_key + "\" (the peak it was measured against)");
      const double v = abs->as_number(1e-9, kMaxPeak);
      value = v / peak;
      if (value > spec.max_efficiency)
        abs->fail(fmt(v) + " is " + fmt(value) + "x the peak " + spec.peak_key + " = " +
                  fmt(peak) + " (at most " + fmt(spec.max_efficiency) + "x)");
    }
    if (!pts.empty() && !(size > pts.back().first))
      p.fail("sizes must increase strictly from point to point (got " + fmt(size) +
             " after " + fmt(pts.back().first) + ")");
    if (size > kMaxSize) p.fail("size " + fmt(size) + " is out of range");
    // time = size / (peak · eff(size)) with eff linear in log(size) grows
    // with size only while eff rises by at most eff · Δlog(size): otherwise a
    // bigger GEMM or message would finish sooner.
    if (!pts.empty()) {
      const auto [s0, v0] = pts.back();
      const double most = v0 * (1.0 + std::log(size / s0));
      if (value > most * (1.0 + 1e-9))
        p.fail("efficiency " + fmt(value) + " rises too fast from " + fmt(v0) + " at size " +
               fmt(s0) + ": a bigger size would take less time (at most " + fmt(most) +
               " here; raise the smaller size's efficiency)");
    }
    p.reject_unknown_keys();
    pts.emplace_back(size, value);
  }
  return EfficiencyCurve(pts);
}

// {"<peak_key>": x, "points": [...]}.
EfficiencyCurve read_table(const JsonReader& t, const TableSpec& spec) {
  const double peak = t.number_or(spec.peak_key, 0, 1e-9, kMaxPeak);
  EfficiencyCurve c = read_points(t.at("points"), spec, peak);
  t.reject_unknown_keys();
  return c;
}

void read_gemm(const JsonReader& r, Calibration& c) {
  const TableSpec spec{"tflops", "peak_tflops", kMaxEfficiency, true};
  for (const auto& [d, name] : EnumNames<GemmDtype>::table)
    if (auto t = r.get(name)) c.gemm[static_cast<std::size_t>(d)] = read_table(*t, spec);
  r.reject_unknown_keys();
}

void read_copies(const JsonReader& r, Calibration& c) {
  const TableSpec spec{"GBps", "link_GBps", kMaxEfficiency, false};
  for (const auto& [k, name] : EnumNames<CopyKind>::table) {
    auto& slot = c.copy[static_cast<std::size_t>(k)];
    if (k == CopyKind::H2D || k == CopyKind::D2H) {
      const std::string n(name);
      if (auto t = r.get(n + "_pinned")) slot[1] = read_table(*t, spec);
      if (auto t = r.get(n + "_pageable")) slot[0] = read_table(*t, spec);
    } else if (auto t = r.get(name)) {
      slot[0] = slot[1] = read_table(*t, spec);
    }
  }
  r.reject_unknown_keys();
}

void read_scope(const JsonReader& r, CollectiveScope& s) {
  const TableSpec spec{"busbw_GBps", "link_GBps", kMaxBusbwEfficiency, false};
  const double link = r.number_or("link_GBps", 0, 1e-9, kMaxPeak);
  s.group = r.int_or("group", s.group, 2, 100'000'000);
  s.latency_us = r.number_or("latency_us", s.latency_us, 0, kMaxUs);
  s.step_latency_us = r.number_or("step_latency_us", s.step_latency_us, 0, kMaxUs);
  for (const auto& [op, name] : EnumNames<CollectiveOp>::table)
    if (auto t = r.get(name)) s.busbw[static_cast<std::size_t>(op)] = read_points(*t, spec, link);
  r.reject_unknown_keys();
}

HopLatency read_hops(const JsonReader& r) {
  HopLatency h;
  h.base_us = r.at("base_us").as_number(0, kMaxUs);
  h.intra_us = r.at("intra_hop_us").as_number(0, kMaxUs);
  h.inter_us = r.at("inter_hop_us").as_number(0, kMaxUs);
  r.reject_unknown_keys();
  return h;
}

std::vector<CollectiveProtocol> read_protocols(const JsonReader& r) {
  std::vector<CollectiveProtocol> out;
  for (const JsonReader& p : r.elements()) {
    CollectiveProtocol c;
    c.name = p.at("name").as_string();
    for (const auto& seen : out)
      if (seen.name == c.name) p.at("name").fail("protocol '" + c.name + "' is listed twice");
    c.bandwidth_fraction = p.at("bandwidth_fraction").as_number(1e-3, 1.0);
    c.ring = read_hops(p.at("ring"));
    c.tree = read_hops(p.at("tree"));
    p.allow({"source"});
    if (auto src = p.get("source")) src->as_string();
    p.reject_unknown_keys();
    out.push_back(std::move(c));
  }
  if (out.empty()) r.fail("must list at least one protocol (leave the key out for none)");
  return out;
}

void read_overheads(const JsonReader& r, Overheads& o) {
  o.kernel_launch_us = r.number_or("kernel_launch", o.kernel_launch_us, 0, kMaxUs);
  o.copy_launch_us = r.number_or("copy_launch", o.copy_launch_us, 0, kMaxUs);
  o.microbatch_us = r.number_or("microbatch", o.microbatch_us, 0, kMaxUs);
  o.step_us = r.number_or("step", o.step_us, 0, kMaxUs);
  o.optimizer_step_us = r.number_or("optimizer_step", o.optimizer_step_us, 0, kMaxUs);
  r.reject_unknown_keys();
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets_of("calibration")) out.emplace_back(p.name);
  return out;
}

}  // namespace

Calibration read_calibration(const JsonReader& r, const Calibration& base) {
  if (!r.is_object()) r.fail("a calibration must be an object");
  Calibration c = base;
  c.machine = r.at("machine").as_string();
  c.backend = r.at("backend").as_string();
  if (c.backend != "cuda" && c.backend != "cpu" && c.backend != "estimate")
    r.at("backend").fail("must be one of cuda|cpu|estimate (got \"" + c.backend + "\")");
  c.date = r.at("date").as_string();
  c.source = r.at("source").as_string();
  c.gpu = r.string_or("gpu", "");
  if (auto g = r.get("gemm")) read_gemm(*g, c);
  if (auto m = r.get("memory"))
    c.memory = read_table(*m, TableSpec{"GBps", "peak_GBps", kMaxEfficiency, false});
  if (auto o = r.get("optimizer"))
    c.optimizer = read_table(*o, TableSpec{"GBps", "peak_GBps", kMaxEfficiency, false});
  if (auto cp = r.get("copies")) read_copies(*cp, c);
  if (auto col = r.get("collectives")) {
    for (const auto& [s, name] : EnumNames<LinkScope>::table)
      if (auto sc = col->get(name)) read_scope(*sc, c.collective[static_cast<std::size_t>(s)]);
    // Protocols belong to the curves they were written with: curves
    // measured with their own small-size regime (a file without protocols)
    // must not pay the base's protocol latencies on top.
    if (auto p = col->get("protocols"))
      c.protocols = read_protocols(*p);
    else
      c.protocols.clear();
    col->reject_unknown_keys();
  }
  if (auto o = r.get("overheads_us")) read_overheads(*o, c.overheads);
  if (auto i = r.get("interference")) {
    c.collective_sms = i->at("collective_sms").as_number(0, 1 << 20);
    i->allow({"source"});
    if (auto src = i->get("source")) src->as_string();
    i->reject_unknown_keys();
  }
  if (auto a = r.get("attention")) {
    c.attention_fraction = a->at("fraction_of_gemm").as_number(0.01, 1.0);
    c.cudnn_attention_fraction = a->number_or("cudnn_fraction_of_gemm", 0, 0.01, 1.0);
    a->allow({"source"});
    if (auto src = a->get("source")) src->as_string();
    a->reject_unknown_keys();
  }
  r.reject_unknown_keys();
  return c;
}

Calibration parse_calibration_text(std::string_view text, const std::string& source,
                                   const Calibration& base) {
  const auto j = parse_json_text(text, source);
  return read_calibration(JsonReader(j, source), base);
}

Calibration load_calibration_file(const std::string& path, const Calibration& base) {
  const auto j = load_json_file(path);
  return read_calibration(JsonReader(j, path), base);
}

std::vector<std::string> calibration_preset_names() { return preset_names(); }

Calibration calibration_preset(std::string_view name) {
  const PresetFile* p = find_preset("calibration", name);
  if (!p) {
    const nlohmann::json j = std::string(name);
    JsonReader(j, "", "calibration").fail(unknown_preset_rule("calibration", name, preset_names()));
  }
  return parse_calibration_text(p->text, std::string(p->path), ideal_calibration());
}

Calibration default_calibration(const GpuSpec& gpu) {
  // A GPU built from a preset keeps the preset's curves under another name.
  for (const std::string* key : {&gpu.preset, &gpu.name})
    if (!key->empty() && find_preset("calibration", *key)) return calibration_preset(*key);
  // Generic: the A100-80G curves, sizes scaled by this GPU's peaks.
  const GpuSpec ref = gpu_preset("a100-80g");
  Calibration c = calibration_preset("a100-80g");
  auto ratio = [](double mine, double theirs) {
    return mine > 0 && theirs > 0 ? mine / theirs : 1.0;
  };
  const auto ref_gemm = c.gemm;
  for (const auto& [d, name] : EnumNames<GemmDtype>::table) {
    // A dtype the A100 lacks (fp8, fp4) takes its 16-bit tensor-core curve.
    const GemmDtype from = peak_tflops(ref, d) > 0 ? d : GemmDtype::BF16;
    c.gemm[static_cast<std::size_t>(d)] =
        ref_gemm[static_cast<std::size_t>(from)].scaled_sizes(
            ratio(peak_tflops(gpu, d), peak_tflops(ref, from)));
  }
  c.memory = c.memory.scaled_sizes(ratio(gpu.hbm_GBps, ref.hbm_GBps));
  c.optimizer = c.optimizer.scaled_sizes(ratio(gpu.hbm_GBps, ref.hbm_GBps));
  for (auto& kind : c.copy) {
    const bool nvme = &kind == &c.copy[static_cast<std::size_t>(CopyKind::NvmeRead)] ||
                      &kind == &c.copy[static_cast<std::size_t>(CopyKind::NvmeWrite)];
    const double f = nvme ? ratio(gpu.server.nvme_GBps, ref.server.nvme_GBps)
                          : ratio(gpu.server.pcie_GBps, ref.server.pcie_GBps);
    for (auto& curve : kind) curve = curve.scaled_sizes(f);
  }
  const double intra = ratio(gpu.server.intra_node_GBps, ref.server.intra_node_GBps);
  const double inter = ratio(gpu.server.inter_node_GBps_per_gpu, ref.server.inter_node_GBps_per_gpu);
  for (auto& curve : c.collective[0].busbw) curve = curve.scaled_sizes(intra);
  for (auto& curve : c.collective[1].busbw) curve = curve.scaled_sizes(inter);
  c.machine = gpu.name + " (generic: a100-80g curves scaled by peaks)";
  c.source = "Generic curves for " + gpu.name +
             ": the a100-80g calibration with each size axis multiplied by this GPU's peak "
             "over the A100's (GEMM per dtype, HBM, PCIe, NVMe, intra- and inter-node links). "
             "a100-80g provenance: " +
             c.source;
  return c;
}

}  // namespace strata::cost
