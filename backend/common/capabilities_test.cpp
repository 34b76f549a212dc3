#include "backend/common/capabilities.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "costmodel/model_io.hpp"

namespace strata::backend {
namespace {

using strategies::Plan;
using strategies::Scenario;

Scenario tiny() {
  Scenario sc;
  sc.model.name = "tiny-capabilities";
  sc.model.layers = 2;
  sc.model.hidden = 32;
  sc.model.heads = 2;
  sc.model.kv_heads = 2;
  sc.model.ffn_hidden = 128;
  sc.model.vocab = 16;
  sc.model.seq_len = 8;
  sc.model.dropout = false;
  sc.cluster = cost::cluster_preset("cpu-local");
  sc.batch = {8, 2};
  sc.plan.precision = cost::Precision::FP32;
  sc.plan.implementation.attention = cost::AttentionKernel::Standard;
  return sc;
}

std::string why(const Scenario& sc, Backend b) {
  const auto w = refusal(sc, b);
  return w ? *w : std::string();
}

TEST_CASE("common/capabilities: what a backend runs otherwise than planned is listed, once per thing") {
  // fp32 with standard attention runs as planned on the CPU backend; bf16
  // is computed in fp32 and flash attention as standard attention, one
  // note each (bf16 with ZeRO adds none: the bf16 row says it).
  Scenario sc = tiny();
  CHECK(differences(sc, Backend::Cpu).empty());
  sc.plan.precision = cost::Precision::BF16;
  sc.plan.implementation.attention = cost::AttentionKernel::Flash;
  sc.plan.dp = 2;
  sc.plan.zero = 1;
  const auto d = differences(sc, Backend::Cpu);
  REQUIRE(d.size() == 2);
  CHECK(d[0].find("bf16") != std::string::npos);
  CHECK(d[0].find("computed in fp32") != std::string::npos);
  CHECK(d[1].find("flash attention") != std::string::npos);
  CHECK(d[1].find("computed as standard attention") != std::string::npos);
  // The CUDA backend's ZeRO with LAMB steps each shard with its own norms.
  Scenario lamb = tiny();
  lamb.plan.dp = 2;
  lamb.plan.zero = 1;
  lamb.plan.optimizer = strategies::Optimizer::Lamb;
  const auto c = differences(lamb, Backend::Cuda);
  REQUIRE(c.size() == 1);
  CHECK(c[0].find("norms and factors of its shards") != std::string::npos);
}

TEST_CASE("common/capabilities: every row has an id, a feature and a reason for each refusal") {
  std::set<std::string_view> ids;
  for (const auto& c : capabilities()) {
    CAPTURE(c.id);
    CHECK(ids.insert(c.id).second);
    CHECK_FALSE(c.feature.empty());
    CHECK(static_cast<bool>(c.uses));
    for (const Backend b : {Backend::Cpu, Backend::Cuda}) {
      const Support& s = c.on(b);
      if (s.status != Status::Runs) CHECK_FALSE(s.note.empty());
      CHECK(s.note.find('\n') == std::string_view::npos);
    }
    CHECK(find_capability(c.id) == &c);
  }
  CHECK(find_capability("no such row") == nullptr);
}

TEST_CASE("common/capabilities: the refusals are the executors' reasons") {
  Scenario sc = tiny();
  CHECK(why(sc, Backend::Cpu).empty());
  CHECK(why(sc, Backend::Cuda).empty());
  sc.plan.ep = 2;
  CHECK(why(sc, Backend::Cpu).find("expert parallelism") != std::string::npos);
  sc = tiny();
  sc.plan.pp = 2;
  sc.plan.dp = 2;
  CHECK(why(sc, Backend::Cpu).empty());
  // The CUDA backend's parallelism refusals name the plan's GPUs.
  CHECK(why(sc, Backend::Cuda).find("the plan runs on 4 GPUs") == 0);
  CHECK(why(sc, Backend::Cuda).find("not pipeline parallelism") != std::string::npos);
  sc.plan.schedule = strategies::Schedule::PipeDream;
  CHECK(why(sc, Backend::Cpu).find("pipedream") != std::string::npos);
  sc = tiny();
  sc.plan.dp = 2;
  sc.plan.zero = 1;
  sc.plan.optimizer = strategies::Optimizer::Lamb;
  CHECK(why(sc, Backend::Cpu).find("elementwise") != std::string::npos);
  CHECK(why(sc, Backend::Cuda).empty());
  sc.plan.optimizer = strategies::Optimizer::Adam;
  sc.plan.compression.method = strategies::CompressionMethod::TopK;
  CHECK(why(sc, Backend::Cpu).empty());
  CHECK(why(sc, Backend::Cuda).find("gradient compression with ZeRO") != std::string::npos);
  sc = tiny();
  sc.plan.tp = 2;
  sc.model.dropout = true;
  CHECK(why(sc, Backend::Cpu).find("dropout") != std::string::npos);
  sc = tiny();
  sc.plan.optimizer = strategies::Optimizer::Adam4bit;
  CHECK(why(sc, Backend::Cpu).find("4-bit Adam") != std::string::npos);
  CHECK(refusal(sc, Backend::Cuda, "optimizer")->find("no CUDA kernels") != std::string::npos);
  sc = tiny();
  sc.plan.precision = cost::Precision::FP16;
  CHECK(why(sc, Backend::Cpu).empty());
  CHECK(why(sc, Backend::Cuda).find("loss scaling") != std::string::npos);
  CHECK_FALSE(refusal(sc, Backend::Cuda, "optimizer"));
  // Recompute modules beyond the attention core are refused where the plan
  // reruns them (selective), not on a plan of another policy that carries
  // them, as an explored point of a selective template does.
  sc = tiny();
  sc.plan.recompute = cost::Recompute::Selective;
  sc.plan.recompute_modules = cost::kDefaultRecomputeModules | cost::module_bit(cost::RecomputeModule::Layernorm);
  CHECK(why(sc, Backend::Cpu).find("recompute_modules other than core_attn") != std::string::npos);
  sc.plan.recompute = cost::Recompute::Full;
  CHECK(why(sc, Backend::Cpu).empty());
  // A reduction dtype apart from the accumulation's: the CUDA backend
  // reduces its fp32 gradient buffer; the same dtype named is no change.
  sc = tiny();
  sc.plan.precision = cost::Precision::BF16;
  sc.plan.implementation.fp32_grad_accumulation = true;
  sc.plan.implementation.grad_reduce_dtype = strategies::GradReduceDtype::FP32;
  CHECK(why(sc, Backend::Cuda).empty());
  sc.plan.implementation.grad_reduce_dtype = strategies::GradReduceDtype::BF16;
  CHECK(why(sc, Backend::Cuda).find("grad_reduce_dtype") != std::string::npos);
  CHECK(why(sc, Backend::Cpu).empty());
  // Context parallelism: the CPU backend all-gathers K and V. A plan that
  // leaves cp_comm to the default runs (its prediction is declared
  // all_gather: cpu::Executor::declare_kernels); one that states ring
  // attention or PyTorch's rotation is refused; one that states all_gather
  // runs.
  sc = tiny();
  sc.plan.cp = 2;
  CHECK(why(sc, Backend::Cpu).empty());
  sc.implementation_keys.add(strategies::ImplKey::CpComm);
  CHECK(why(sc, Backend::Cpu).find("implementation.cp_comm p2p, all_gather_ring") != std::string::npos);
  sc.plan.implementation.cp_comm = strategies::CpComm::AllGatherRing;
  CHECK(why(sc, Backend::Cpu).find("implementation.cp_comm p2p, all_gather_ring") != std::string::npos);
  sc.plan.implementation.cp_comm = strategies::CpComm::AllGather;
  CHECK(why(sc, Backend::Cpu).empty());
  // Sequence parallelism: the CPU kernels gather a linear's input again in
  // the backward; a plan stating that it keeps the gathered input
  // (PyTorch DTensor's) is refused, one leaving it to the default runs.
  sc = tiny();
  sc.plan.tp = 2;
  sc.plan.sequence_parallel = true;
  sc.plan.implementation.sp_regather_input = false;
  CHECK(why(sc, Backend::Cpu).empty());
  sc.implementation_keys.add(strategies::ImplKey::SpRegatherInput);
  CHECK(why(sc, Backend::Cpu).find("implementation.sp_regather_input true") != std::string::npos);
  sc.plan.implementation.sp_regather_input = true;
  CHECK(why(sc, Backend::Cpu).empty());
}

TEST_CASE("common/capabilities: a combination marked not applicable is refused by another row") {
  // Every pair of these edits: where a row the scenario uses is
  // NotApplicable for a backend, that backend refuses the scenario anyway.
  using Edit = std::function<void(Scenario&)>;
  const std::vector<Edit> edits{
      [](Scenario& s) { s.plan.dp = 2; },
      [](Scenario& s) { s.plan.dp = 2, s.plan.zero = 1; },
      [](Scenario& s) { s.plan.dp = 2, s.plan.zero = 3; },
      [](Scenario& s) { s.plan.tp = 2; },
      [](Scenario& s) { s.plan.tp = 2, s.plan.sequence_parallel = true; },
      [](Scenario& s) { s.plan.cp = 2; },
      [](Scenario& s) { s.plan.pp = 2; },
      [](Scenario& s) { s.plan.pp = 2, s.plan.schedule = strategies::Schedule::PipeDream; },
      [](Scenario& s) { s.plan.pp = 2, s.plan.schedule = strategies::Schedule::PipeDream2BW; },
      [](Scenario& s) { s.plan.dp = 2, s.plan.dp_topology = strategies::DpTopology::ParameterServer; },
      [](Scenario& s) { s.plan.dp = 2, s.plan.compression.method = strategies::CompressionMethod::RandomK; },
      [](Scenario& s) { s.model.dropout = true; },
      [](Scenario& s) { s.plan.offload.weights = true; },
      [](Scenario& s) { s.plan.offload.optimizer = strategies::OffloadTarget::Cpu; },
      [](Scenario& s) { s.plan.precision = cost::Precision::BF16; },
      [](Scenario& s) { s.plan.optimizer = strategies::Optimizer::Lamb; },
  };
  int checked = 0;
  for (std::size_t i = 0; i < edits.size(); ++i)
    for (std::size_t j = i; j < edits.size(); ++j) {
      Scenario sc = tiny();
      edits[i](sc);
      edits[j](sc);
      for (const Backend b : {Backend::Cpu, Backend::Cuda})
        for (const auto& c : capabilities())
          if (c.on(b).status == Status::NotApplicable && c.uses(sc)) {
            CAPTURE(c.id);
            CAPTURE(i);
            CAPTURE(j);
            CHECK(refusal(sc, b).has_value());
            ++checked;
          }
    }
  CHECK(checked > 20);
}

TEST_CASE("common/capabilities: docs/cpu-backend.md's feature matrix is the table's") {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/docs/cpu-backend.md";
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string expected = with_capability_matrix(text);
  INFO("regenerate it: strata_capability_matrix --update docs/cpu-backend.md (in the build's backend/ folder)");
  CHECK(text == expected);
  CHECK(capability_matrix_markdown().find("| parallelism | tensor parallelism") != std::string::npos);
}

}  // namespace
}  // namespace strata::backend
