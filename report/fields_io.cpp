#include "report/fields_io.hpp"
#include "sim/text.hpp"

namespace strata::report {

nlohmann::ordered_json tflops_json(const cost::PeakTflops& t) {
  return {{"fp32", t.fp32}, {"tf32", t.tf32}, {"fp16", t.fp16}, {"bf16", t.bf16}, {"fp8", t.fp8}, {"fp4", t.fp4}};
}

nlohmann::ordered_json node_links_json(const cost::NodeSpec& n) {
  nlohmann::ordered_json j = {{"gpus_per_node", n.gpus_per_node},     {"intra_node_GBps", n.intra_node_GBps},
                              {"inter_node_GBps_per_gpu", n.inter_node_GBps_per_gpu}, {"pcie_GBps", n.pcie_GBps},
                              {"host_memory_GiB", n.host_memory_GiB}, {"nvme_GBps", n.nvme_GBps},
                              {"nvme_GiB", n.nvme_GiB}};
  if (!n.nvlinks.empty()) {
    // The NVLink mesh as the input gives it: one row per GPU.
    const auto side = static_cast<std::size_t>(n.gpus_per_node);
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < side; ++i)
      rows.push_back(std::vector<int>(n.nvlinks.begin() + static_cast<std::ptrdiff_t>(i * side),
                                      n.nvlinks.begin() + static_cast<std::ptrdiff_t>((i + 1) * side)));
    j["nvlink_GBps"] = n.nvlink_GBps;
    j["nvlinks"] = rows;
  }
  return j;
}

nlohmann::ordered_json tags_json(const sim::TagBytes& bytes) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (sim::MemTag t : kPrintedTags) {
    const Bytes b = bytes[static_cast<std::size_t>(t)];
    if (t == sim::MemTag::Other && b == 0) continue;
    j[std::string(enum_name(t))] = b;
  }
  return j;
}

nlohmann::ordered_json breakdown_json(const strategies::TimeBreakdown& b) {
  nlohmann::ordered_json comm = nlohmann::ordered_json::object();
  for (std::size_t k = 1; k < strategies::kCommKinds; ++k)
    comm[std::string(enum_name(static_cast<strategies::CommKind>(k)))] =
        to_seconds(b.exposed_comm[k]);
  return nlohmann::ordered_json{{"compute", to_seconds(b.compute)},
                                {"recompute", to_seconds(b.recompute)},
                                {"exposed_comm", comm},
                                {"bubble", to_seconds(b.bubble)},
                                {"offload_stall", to_seconds(b.offload_stall)},
                                {"optimizer", to_seconds(b.optimizer)},
                                {"interference", to_seconds(b.interference)}};
}

void add_goal_fields(nlohmann::ordered_json& j, const strategies::Scenario& sc,
                     const strategies::GoalEstimate& g, double step_time_s) {
  using nlohmann::ordered_json;
  const auto t = strategies::time_to_train(sc, g, step_time_s);
  j["time_to_train_s"] = t ? ordered_json(t->seconds) : ordered_json(nullptr);
  j["gpu_hours"] = t ? ordered_json(t->gpu_hours) : ordered_json(nullptr);
  const bool loss = sc.goal->target_loss.has_value();
  if (loss) j["steps_to_target"] = g.reachable ? ordered_json(g.steps) : ordered_json(nullptr);
  ordered_json tr;
  tr["goal"] = loss ? ordered_json{{"target_loss", *sc.goal->target_loss}}
                    : ordered_json{{"tokens", *sc.goal->tokens}};
  tr["reachable"] = g.reachable;
  if (!g.reachable) tr["unreachable_reason"] = g.unreachable_reason;
  tr["steps"] = g.reachable ? ordered_json(g.steps) : ordered_json(nullptr);
  tr["tokens"] = g.reachable ? ordered_json(g.tokens) : ordered_json(nullptr);
  tr["batch_tokens"] = g.batch_tokens;
  if (g.critical) {
    tr["S_min_steps"] = g.critical->s_min_steps;
    tr["B_noise_tokens"] = g.critical->b_noise_tokens;
  }
  tr["base_steps"] = g.base_steps;
  if (g.lr) tr["lr"] = *g.lr;
  tr["lr_ratio"] = g.lr_ratio;
  // A layer-wise adaptive optimizer (LAMB, LARS) takes the rule's rate
  // closer to the best one.
  if (g.lr_reach != 1) {
    tr["lr_reach"] = g.lr_reach;
    tr["lr_ratio_effective"] = g.lr_ratio_effective;
  }
  tr["lr_factor"] = g.lr_factor;
  tr["warmup_steps"] = g.warmup_steps;
  tr["penalty"] = {{"compression", g.penalties.compression},
                   {"optimizer", g.penalties.optimizer},
                   {"staleness", g.penalties.staleness},
                   {"total", g.penalties.total()}};
  tr["convergence"] = sim::utf8_escaped(sc.convergence->file);
  j["training"] = tr;
}

}  // namespace strata::report
