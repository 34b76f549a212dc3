#include "costmodel/calibration.hpp"

#include <doctest/doctest.h>

#include "tests/testing.hpp"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "costmodel/model_io.hpp"
#include "sim/json_reader.hpp"

#include <nlohmann/json.hpp>
#include "costmodel/presets.hpp"

namespace strata::cost {
namespace {

std::string error_of(auto&& fn) { return testing::input_error_of(fn); }

const std::string kHeader =
    R"("machine": "test box", "backend": "cpu", "date": "2026-11-30", "source": "unit test")";

Calibration parse(const std::string& body) {
  return parse_calibration_text("{" + kHeader + (body.empty() ? "" : ", " + body) + "}",
                                "cal.json", ideal_calibration());
}

std::string parse_error(const std::string& body) {
  return error_of([&] { parse(body); });
}

constexpr double kGemm8192 = 2.0 * 8192.0 * 8192.0 * 8192.0;

TEST_CASE("efficiency curve: linear in log size between points, clamped outside") {
  // Points (1e3, 0.2) and (1e5, 0.6): 1e4 is halfway in log, so 0.4; below
  // 1e3 it stays 0.2, above 1e5 it stays 0.6; an empty curve is 1.
  const EfficiencyCurve c({{1e3, 0.2}, {1e5, 0.6}});
  CHECK(c.at(1e4) == doctest::Approx(0.4));
  CHECK(c.at(std::sqrt(1e3 * 1e4)) == doctest::Approx(0.3));
  CHECK(c.at(1e3) == doctest::Approx(0.2));
  CHECK(c.at(10) == doctest::Approx(0.2));
  CHECK(c.at(0) == doctest::Approx(0.2));
  CHECK(c.at(1e5) == doctest::Approx(0.6));
  CHECK(c.at(1e9) == doctest::Approx(0.6));
  CHECK(EfficiencyCurve().at(123) == 1.0);
  CHECK(EfficiencyCurve::constant(0.7).at(1e12) == doctest::Approx(0.7));
  // Three points: each segment is its own line.
  const EfficiencyCurve d({{1, 0.1}, {100, 0.5}, {10000, 0.5}});
  CHECK(d.at(10) == doctest::Approx(0.3));
  CHECK(d.at(1000) == doctest::Approx(0.5));
  // Scaling sizes by 10 moves the curve right by one decade.
  CHECK(c.scaled_sizes(10).at(1e5) == doctest::Approx(0.4));
  CHECK_THROWS_AS(EfficiencyCurve({{10, 0.5}, {10, 0.6}}), Error);
  CHECK_THROWS_AS(EfficiencyCurve({{10, 0.0}}), Error);
}

TEST_CASE("calibration reader: absolute values become fractions of the stated peak") {
  // 156 tflops measured on a 312-tflops peak is 0.5; 1800 GBps on 2000 is 0.9;
  // 230 busbw_GBps on a 300 GBps link is 0.7667.
  const Calibration c = parse(R"(
    "gemm": {"bf16": {"peak_tflops": 312, "points": [
        {"m": 1024, "n": 1024, "k": 1024, "tflops": 156},
        {"m": 8192, "n": 8192, "k": 8192, "efficiency": 0.8}]}},
    "memory": {"peak_GBps": 2000, "points": [{"bytes": 1048576, "GBps": 1800}]},
    "copies": {"h2d_pinned": {"link_GBps": 32, "points": [{"bytes": 1048576, "GBps": 24}]},
               "nvme_read": {"points": [{"bytes": 1048576, "efficiency": 0.5}]}},
    "collectives": {"intra_node": {"link_GBps": 300, "group": 8, "latency_us": 10,
        "step_latency_us": 0.5, "all_reduce": [{"bytes": 1073741824, "busbw_GBps": 230}]}},
    "overheads_us": {"kernel_launch": 3, "step": 100}
  )");
  CHECK(c.machine == "test box");
  CHECK(c.backend == "cpu");
  CHECK(c.gemm_curve(GemmDtype::BF16).at(2.0 * 1024 * 1024 * 1024) == doctest::Approx(0.5));
  CHECK(c.gemm_curve(GemmDtype::BF16).at(kGemm8192) == doctest::Approx(0.8));
  CHECK(c.gemm_curve(GemmDtype::FP16).empty());  // absent: the base's (ideal) curve
  CHECK(c.memory.at(1) == doctest::Approx(0.9));
  CHECK(c.copy_curve(CopyKind::H2D, true).at(1) == doctest::Approx(0.75));
  CHECK(c.copy_curve(CopyKind::H2D, false).empty());
  CHECK(c.copy_curve(CopyKind::NvmeRead, false).at(1) == doctest::Approx(0.5));
  CHECK(c.copy_curve(CopyKind::NvmeRead, true).at(1) == doctest::Approx(0.5));
  CHECK(c.busbw_curve(LinkScope::IntraNode, CollectiveOp::AllReduce).at(1) ==
        doctest::Approx(230.0 / 300.0));
  CHECK(c.scope(LinkScope::IntraNode).latency_us == 10);
  CHECK(c.scope(LinkScope::IntraNode).step_latency_us == 0.5);
  CHECK(c.scope(LinkScope::IntraNode).group == 8);
  CHECK(c.overheads.kernel_launch_us == 3);
  CHECK(c.overheads.step_us == 100);
  CHECK(c.overheads.microbatch_us == 0);  // the ideal base's
}

TEST_CASE("calibration reader: a partial file keeps the base's other tables") {
  // Only overheads given over the bundled a100-80g: its GEMM curve (0.81 at
  // 16384^3) survives.
  const Calibration base = calibration_preset("a100-80g");
  const Calibration c = parse_calibration_text(
      "{" + kHeader + R"(, "overheads_us": {"kernel_launch": 7}})", "cal.json", base);
  CHECK(c.overheads.kernel_launch_us == 7);
  CHECK(c.gemm_curve(GemmDtype::BF16).at(2.0 * 16384.0 * 16384 * 16384) ==
        doctest::Approx(0.81));
  CHECK(c.machine == "test box");
}

TEST_CASE("calibration reader: unknown keys and bad units are rejected with their path") {
  // Each broken input names file, JSON path and rule.
  CHECK(parse_error(R"("gemmm": {})") == "cal.json: gemmm: unknown key (did you mean \"gemm\"?)");
  CHECK(parse_error(R"("gemm": {"bf16": {"peak_tflops": 312, "points": [
          {"m": 1, "n": 1, "k": 1, "GBps": 3}]}})") ==
        "cal.json: gemm.bf16.points[0]: a point needs exactly one of \"tflops\" and \"efficiency\"");
  CHECK(parse_error(R"("gemm": {"bf16": {"peak_tflops": 312, "points": [
          {"m": 1, "n": 1, "k": 1, "tflops": 3, "GBps": 3}]}})") ==
        "cal.json: gemm.bf16.points[0].GBps: unknown key");
  CHECK(parse_error(R"("gemm": {"bf16": {"peak_tflop": 312, "points": []}})") ==
        "cal.json: gemm.bf16.points: must list at least one point");
  CHECK(parse_error(R"("gemm": {"bf16": {"peak_tflop": 312, "points": [
          {"m": 1, "n": 1, "k": 1, "efficiency": 0.5}]}})") ==
        "cal.json: gemm.bf16.peak_tflop: unknown key (did you mean \"peak_tflops\"?)");
  CHECK(parse_error(R"("gemm": {"bf17": {}})") ==
        "cal.json: gemm.bf17: unknown key (did you mean \"bf16\"?)");
  CHECK(parse_error(R"("memory": {"points": [{"bytes": 10, "GBps": 100}]})") ==
        "cal.json: memory.points[0].GBps: an absolute \"GBps\" needs \"peak_GBps\" (the peak it "
        "was measured against)");
  CHECK(parse_error(R"("memory": {"points": [{"bytes": 10, "efficiency": 1.5}]})") ==
        "cal.json: memory.points[0].efficiency: must be in [1e-06, 1], got 1.5");
  CHECK(parse_error(R"("memory": {"peak_GBps": 100, "points": [{"bytes": 10, "GBps": 150}]})") ==
        "cal.json: memory.points[0].GBps: 150 is 1.5x the peak peak_GBps = 100 (at most 1x)");
  CHECK(parse_error(R"("memory": {"points": [{"bytes": 100, "efficiency": 0.5},
          {"bytes": 10, "efficiency": 0.5}]})") ==
        "cal.json: memory.points[1]: sizes must increase strictly from point to point (got 10 "
        "after 100)");
  CHECK(parse_error(R"("memory": {"points": [{"bytes": 10, "efficiency": 0.1},
          {"bytes": 20, "efficiency": 0.9}]})")
            .find("memory.points[1]: efficiency 0.9 rises too fast") != std::string::npos);
  CHECK(parse_error(R"("memory": {"points": [{"MB": 10, "efficiency": 0.1}]})") ==
        "cal.json: memory.points[0].bytes: missing required key");
  CHECK(parse_error(R"("copies": {"h2d": {"points": []}})") ==
        "cal.json: copies.h2d: unknown key");
  CHECK(parse_error(R"("collectives": {"intra_node": {"allreduce": []}})") ==
        "cal.json: collectives.intra_node.allreduce: unknown key (did you mean \"all_reduce\"?)");
  CHECK(parse_error(R"("collectives": {"intra_node": {"latency_ms": 1}})") ==
        "cal.json: collectives.intra_node.latency_ms: unknown key (did you mean \"latency_us\"?)");
  CHECK(parse_error(R"("collectives": {"intra_node": {"all_reduce": [
          {"bytes": 10, "GBps": 100}]}})")
            .find("collectives.intra_node.all_reduce[0]") != std::string::npos);
  CHECK(parse_error(R"("overheads_us": {"kernel_launch": -1})") ==
        "cal.json: overheads_us.kernel_launch: must be in [0, 1e+09], got -1");
  CHECK(parse_error(R"("overheads": {})") ==
        "cal.json: overheads: unknown key");
  CHECK(error_of([] {
          parse_calibration_text(R"({"machine": "m", "backend": "gpu", "date": "d", "source": "s"})",
                                 "cal.json", ideal_calibration());
        }) == "cal.json: backend: must be one of cuda|cpu|estimate (got \"gpu\")");
  CHECK(error_of([] {
          parse_calibration_text(R"({"backend": "cpu", "date": "d", "source": "s"})", "cal.json",
                                 ideal_calibration());
        }) == "cal.json: machine: missing required key");
}

TEST_CASE("calibration reader: collective protocols, and curves without them drop the base's") {
  const std::string protocols = R"("collectives": {"protocols": [
      {"name": "simple", "bandwidth_fraction": 1,
       "ring": {"base_us": 8.4, "intra_hop_us": 3.4, "inter_hop_us": 14},
       "tree": {"base_us": 0, "intra_hop_us": 28, "inter_hop_us": 28}, "source": "NCCL"},
      {"name": "ll", "bandwidth_fraction": 0.25,
       "ring": {"base_us": 6.6, "intra_hop_us": 0.6, "inter_hop_us": 2.7},
       "tree": {"base_us": 6.8, "intra_hop_us": 0.6, "inter_hop_us": 5}}]})";
  const Calibration c = parse(protocols);
  REQUIRE(c.protocols.size() == 2);
  CHECK(c.protocols[0].name == "simple");
  CHECK(c.protocols[0].ring.inter_us == 14);
  CHECK(c.protocols[1].bandwidth_fraction == 0.25);
  CHECK(c.protocols[1].tree.base_us == 6.8);
  // A file over that base with its own collective curves and no protocols
  // (what `strata calibrate` writes: measured curves carry their own
  // small-size regime) has none; a file without a collectives table keeps them.
  const Calibration measured = parse_calibration_text(
      "{" + kHeader + R"(, "collectives": {"intra_node": {"link_GBps": 300, "all_reduce": [
          {"bytes": 1048576, "busbw_GBps": 100}]}}})",
      "m.json", c);
  CHECK(measured.protocols.empty());
  CHECK(parse_calibration_text("{" + kHeader + R"(, "overheads_us": {"step": 1}})", "m.json", c)
            .protocols.size() == 2);
  // The bundled GPU calibrations carry NCCL's protocols.
  CHECK(calibration_preset("a100-80g").protocols.size() == 3);
  CHECK(parse_error(R"("collectives": {"protocols": []})") ==
        "cal.json: collectives.protocols: must list at least one protocol (leave the key out for none)");
  CHECK(parse_error(R"("collectives": {"protocols": [
      {"name": "ll", "bandwidth_fraction": 0, "ring": {}, "tree": {}}]})") ==
        "cal.json: collectives.protocols[0].bandwidth_fraction: must be in [0.001, 1], got 0");
}

TEST_CASE("calibration reader: fused attention's fraction of the GEMM efficiency") {
  // Absent: 1 (attention priced as a GEMM of its FLOPs); present: (0, 1].
  CHECK(parse("").attention_fraction == 1.0);
  CHECK(parse(R"("attention": {"fraction_of_gemm": 0.45, "source": "paper"})").attention_fraction == 0.45);
  // cuDNN's: absent 0 (as flash); the Hopper presets' 0.45 × 1.61, none for the A100.
  CHECK(parse(R"("attention": {"fraction_of_gemm": 0.45})").cudnn_attention_fraction == 0);
  CHECK(parse(R"("attention": {"fraction_of_gemm": 0.45, "cudnn_fraction_of_gemm": 0.72})").cudnn_attention_fraction ==
        0.72);
  CHECK(calibration_preset("h100-sxm").cudnn_attention_fraction == 0.72);
  CHECK(calibration_preset("a100-80g").cudnn_attention_fraction == 0);
  CHECK(parse_error(R"("attention": {"fraction_of_gemm": 1.5})") ==
        "cal.json: attention.fraction_of_gemm: must be in [0.01, 1], got 1.5");
  CHECK(parse_error(R"("attention": {"fraction": 0.5})") ==
        "cal.json: attention.fraction_of_gemm: missing required key");
  // The bundled Hopper files carry FlashAttention-2's lower share of peak.
  CHECK(calibration_preset("h100-sxm").attention_fraction < calibration_preset("a100-80g").attention_fraction);
}

TEST_CASE("calibration reader: the SMs a running collective holds (interference)") {
  // Absent: 0 (collectives slow nothing); the bundled GPU files: NCCL's 24
  // channels of an 8-GPU NVSwitch node, against the presets' SM counts.
  CHECK(parse("").collective_sms == 0);
  CHECK(parse(R"("interference": {"collective_sms": 16, "source": "nccl"})").collective_sms == 16);
  CHECK(parse_error(R"("interference": {"sms": 16})") ==
        "cal.json: interference.collective_sms: missing required key");
  for (const char* g : {"a100-80g", "h100-sxm", "h200"}) CHECK(calibration_preset(g).collective_sms == 24);
  CHECK(gpu_preset("a100-80g").sms == 108);
  CHECK(gpu_preset("h100-sxm").sms == 132);
}

TEST_CASE("the schema example in docs/cost-model.md reads") {
  // The first json block of the document parses over the ideal base: 171 of
  // 312 tflops at 1024^3 is 0.548, 231 of 300 GB/s all-reduce busbw 0.77.
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/docs/cost-model.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const auto begin = doc.find("```json\n");
  REQUIRE(begin != std::string::npos);
  const auto end = doc.find("```", begin + 8);
  const Calibration c = parse_calibration_text(doc.substr(begin + 8, end - begin - 8),
                                               "docs/cost-model.md", ideal_calibration());
  CHECK(c.backend == "cuda");
  CHECK(c.gemm_curve(GemmDtype::BF16).at(2.0 * 1024 * 1024 * 1024) ==
        doctest::Approx(171.0 / 312.0));
  CHECK(c.busbw_curve(LinkScope::IntraNode, CollectiveOp::AllReduce).at(1e12) ==
        doctest::Approx(231.0 / 300.0));
  CHECK(c.overheads.step_us == 200);
}

TEST_CASE("bundled calibrations load and state their provenance") {
  // configs/calibration holds a100-80g, h100-sxm, h200 and v100-32g; each
  // is an estimate with a source, monotone tables and a 16-bit plateau
  // between Hopper's sustained matmul rate at 700 W (0.71, MSMF) and the
  // best published A100 burst (0.86). fp16: the V100 has no bf16.
  const auto names = calibration_preset_names();
  CHECK(names == std::vector<std::string>{"a100-80g", "h100-sxm", "h200", "v100-32g"});
  for (const auto& n : names) {
    CAPTURE(n);
    const Calibration c = calibration_preset(n);
    CHECK(c.backend == "estimate");
    CHECK(c.source.size() > 200);
    CHECK(!c.date.empty());
    CHECK(!c.machine.empty());
    const double plateau = c.gemm_curve(GemmDtype::FP16).at(1e16);
    CHECK(plateau >= 0.70);
    CHECK(plateau <= 0.86);
    CHECK(!c.memory.empty());
    CHECK(c.scope(LinkScope::IntraNode).latency_us > 0);
    CHECK(c.scope(LinkScope::InterNode).latency_us > 0);
    for (std::size_t op = 0; op < kCollectiveOps; ++op) {
      CHECK(!c.collective[0].busbw[op].empty());
      CHECK(!c.collective[1].busbw[op].empty());
    }
    CHECK(c.overheads.kernel_launch_us > 0);
  }
  CHECK(error_of([] { calibration_preset("tpu"); }) ==
        "<input>: calibration: unknown calibration preset \"tpu\" (known: a100-80g, h100-sxm, h200, v100-32g)");
}

TEST_CASE("default calibration: bundled curves per GPU preset, generic scaled curves otherwise") {
  // a100-80g, h100-sxm, h200 get their own files; b200 gets the A100 curves
  // with the bf16 size axis stretched by 2250/312, so its efficiency at
  // F·2250/312 equals the A100's at F.
  CHECK(default_calibration(gpu_preset("h100-sxm")).machine ==
        calibration_preset("h100-sxm").machine);
  CHECK(default_calibration(gpu_preset("h200")).machine == calibration_preset("h200").machine);
  const Calibration a100 = default_calibration(gpu_preset("a100-80g"));
  const Calibration b200 = default_calibration(gpu_preset("b200"));
  CHECK(b200.machine.find("generic") != std::string::npos);
  CHECK(b200.source.find("a100-80g provenance") != std::string::npos);
  for (double f : {1e8, 1e10, 1e12}) {
    CHECK(b200.gemm_curve(GemmDtype::BF16).at(f * 2250.0 / 312.0) ==
          doctest::Approx(a100.gemm_curve(GemmDtype::BF16).at(f)));
    CHECK(b200.memory.at(f * 8000.0 / 2039.0) == doctest::Approx(a100.memory.at(f)));
    CHECK(b200.busbw_curve(LinkScope::IntraNode, CollectiveOp::AllReduce).at(f * 3.0) ==
          doctest::Approx(a100.busbw_curve(LinkScope::IntraNode, CollectiveOp::AllReduce).at(f)));
  }
  // fp8 (the A100 has none) takes the 16-bit curve, scaled by 4500/312.
  CHECK(b200.gemm_curve(GemmDtype::FP8).at(1e12 * 4500.0 / 312.0) ==
        doctest::Approx(a100.gemm_curve(GemmDtype::BF16).at(1e12)));
  // A GPU object built from a preset keeps the preset's curves under its own
  // name and changed figures (an H100 with HBM2e is still an H100); one
  // without a preset gets the generic curves.
  const auto gpu_of = [](const char* text) {
    const auto j = nlohmann::json::parse(text);
    return read_cluster(JsonReader(j, "test.json"), ".").gpu;
  };
  const GpuSpec renamed =
      gpu_of(R"({"gpu": {"preset": "h100-sxm", "name": "h100-96g", "memory_GiB": 89.4, "hbm_GBps": 2400}})");
  CHECK(renamed.name == "h100-96g");
  CHECK(default_calibration(renamed).machine == calibration_preset("h100-sxm").machine);
  CHECK(default_calibration(renamed).attention_fraction == calibration_preset("h100-sxm").attention_fraction);
  const GpuSpec custom = gpu_of(
      R"({"gpu": {"name": "h100-sxm-like", "memory_GiB": 80, "hbm_GBps": 3350, "tflops": {"bf16": 989.4}}})");
  CHECK(custom.preset.empty());
  CHECK(default_calibration(custom).machine.find("generic") != std::string::npos);
  // The V100's own file: the generic curves with the fp16 GEMM efficiencies
  // scaled to the mean of three published V100 matmul rates, (95 + 91.75 +
  // 83) / 3 = 89.9 TFLOPS, 0.719 of 125 where the A100's curve stands at its
  // 0.80 plateau (the file's source names each).
  const Calibration v100 = default_calibration(gpu_preset("v100-32g"));
  CHECK(v100.machine == calibration_preset("v100-32g").machine);
  const GpuSpec v100_like = gpu_of(
      R"({"gpu": {"name": "v100-like", "memory_GiB": 32, "hbm_GBps": 900, "tflops": {"fp16": 125, "fp32": 15.7}}})");
  const Calibration generic = default_calibration(v100_like);
  for (double f : {1e9, 1e11, 1e13}) {
    CAPTURE(f);
    // Sizes rounded to whole m = n = k move the points by under 0.2 %.
    CHECK(v100.gemm_curve(GemmDtype::FP16).at(f) ==
          doctest::Approx(0.8992 * generic.gemm_curve(GemmDtype::FP16).at(f)).epsilon(0.005));
    CHECK(v100.gemm_curve(GemmDtype::FP32).at(f) ==
          doctest::Approx(generic.gemm_curve(GemmDtype::FP32).at(f)).epsilon(0.005));
    CHECK(v100.memory.at(f / 1e3) == doctest::Approx(generic.memory.at(f / 1e3)).epsilon(0.001));
  }
  CHECK(v100.gemm_curve(GemmDtype::FP16).at(2.0 * 6048 * 6048 * 6048) ==
        doctest::Approx((95 + 91.75 + 83) / 3 / 125).epsilon(0.001));
  // A preset built on another keeps the chip's calibration: the H800 is an
  // H100 with less NVLink.
  const GpuSpec h800 = gpu_preset("h800");
  CHECK(h800.name == "h800");
  CHECK(h800.preset == "h100-sxm");
  CHECK(h800.server.intra_node_GBps == 200);
  CHECK(h800.tflops.bf16 == gpu_preset("h100-sxm").tflops.bf16);
  CHECK(default_calibration(h800).machine == calibration_preset("h100-sxm").machine);
  // Every GPU preset gets a usable calibration.
  for (const auto& g : gpu_presets()) {
    CAPTURE(g.name);
    const Calibration c = default_calibration(g);
    CHECK(c.gemm_curve(GemmDtype::FP16).at(1e13) > 0.5);
  }
}

}  // namespace
}  // namespace strata::cost
