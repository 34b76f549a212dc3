#include "report/fields_io.hpp"

namespace strata::report {

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
                                {"optimizer", to_seconds(b.optimizer)}};
}

}  // namespace strata::report
