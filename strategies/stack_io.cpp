// Reading software stacks (configs/stacks/*.json, docs/stacks.md):
//
//   {"description": "...",
//    "settings": {
//      "attention": {"value": "standard", "source": "..."},
//      "overlap_grad_reduce": {"by": "zero", "cases": {"3": true}, "otherwise": false,
//                              "source": "..."}}}
//
// Every setting names its source; "by" is "precision", "schedule" or "zero"
// and needs "otherwise" for the plans no case names. "engine" names the
// engine family; "capabilities" lists the plans it cannot launch
// (capability.hpp):
//
//   "capabilities": [{"rule": "sharded-grads-with-pp",
//                     "when": {"zero": [2, 3], "pp": {"at_least": 2}},
//                     "message": "...", "source": "..."}]
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "costmodel/model_io.hpp"
#include "costmodel/presets.hpp"
#include "sim/json_reader.hpp"
#include "strategies/stack.hpp"

namespace strata::strategies {

namespace {

std::int64_t read_value(const JsonReader& v, ImplKey k) {
  switch (k) {
    case ImplKey::Attention: return static_cast<std::int64_t>(v.as_enum<AttentionKernel>());
    case ImplKey::TpCommOverlap: return static_cast<std::int64_t>(v.as_enum<TpCommOverlap>());
    case ImplKey::CpComm: return static_cast<std::int64_t>(v.as_enum<CpComm>());
    case ImplKey::CrossEntropy: return static_cast<std::int64_t>(v.as_enum<CrossEntropy>());
    case ImplKey::Allocator: return static_cast<std::int64_t>(v.as_enum<sim::AllocatorMode>());
    case ImplKey::GradReduceDtype: return static_cast<std::int64_t>(v.as_enum<GradReduceDtype>());
    case ImplKey::HostDispatch: return std::llround(v.as_number(0, kMaxHostDispatchUs) * 1000.0);
    case ImplKey::Zero3PersistenceThreshold: return v.as_int(0, kMaxPersistenceThreshold);
    case ImplKey::Zero3ReduceBucket:
    case ImplKey::Zero3MaxLive:
    case ImplKey::Zero3PrefetchBucket:
    case ImplKey::Zero3ReuseDistance: return v.as_int(0, kMaxReduceBucket);
    case ImplKey::TrainMetricPasses: return v.as_int(0, kMaxTrainMetricPasses);
    default: return v.as_bool() ? 1 : 0;
  }
}

std::int64_t read_case(const JsonReader& c, StackSetting::By by, const std::string& key) {
  auto bad = [&](const std::string& what) -> std::int64_t {
    c.fail("\"" + key + "\" is not " + what);
  };
  switch (by) {
    case StackSetting::By::Precision:
      if (auto p = enum_from_name<Precision>(key)) return static_cast<std::int64_t>(*p);
      return bad("a precision (" + enum_choices<Precision>() + ")");
    case StackSetting::By::Schedule:
      if (auto s = enum_from_name<Schedule>(key)) return static_cast<std::int64_t>(*s);
      return bad("a schedule (" + enum_choices<Schedule>() + ")");
    case StackSetting::By::Zero:
      if (key.size() == 1 && key[0] >= '0' && key[0] <= '3') return key[0] - '0';
      return bad("a ZeRO stage (0|1|2|3)");
    case StackSetting::By::TensorParallel:
      if (key == "true" || key == "false") return key == "true" ? 1 : 0;
      return bad("whether the plan's tp is above 1 (true|false)");
    case StackSetting::By::Always: break;
  }
  return 0;
}

StackSetting read_setting(const JsonReader& r, ImplKey key) {
  if (!r.is_object()) r.fail("must be an object with \"source\" and \"value\" or \"by\"");
  StackSetting st;
  st.key = key;
  st.source = r.at("source").as_string();
  if (st.source.empty()) r.fail_at("source", "must say where the framework sets it");
  if (auto v = r.get("value")) {
    for (const char* k : {"by", "cases", "otherwise"})
      if (r.has(k)) r.fail_at(k, "a setting has either \"value\" or \"by\" with \"cases\"");
    st.otherwise = read_value(*v, key);
  } else {
    const auto by = r.at("by");
    const std::string b = by.as_string();
    if (b == "precision") st.by = StackSetting::By::Precision;
    else if (b == "schedule") st.by = StackSetting::By::Schedule;
    else if (b == "zero") st.by = StackSetting::By::Zero;
    else if (b == "tensor_parallel") st.by = StackSetting::By::TensorParallel;
    else by.fail("must be one of precision|schedule|zero|tensor_parallel (got \"" + b + "\")");
    const JsonReader cases = r.at("cases");
    if (!cases.is_object()) cases.fail("must be an object of values by the plan's setting");
    for (const auto& [name, _] : cases.json().items()) {
      const JsonReader c = cases.at(name);
      st.cases.emplace_back(read_case(c, st.by, name), read_value(c, key));
    }
    if (st.cases.empty()) cases.fail("needs at least one case");
    // Every plan gets a value, so re-resolving a setting for another point
    // of a space never keeps the previous point's.
    st.otherwise = read_value(r.at("otherwise"), key);
  }
  r.reject_unknown_keys();
  return st;
}

std::int64_t read_enum_value(const JsonReader& v, PlanField f) {
  auto num = [](auto e) { return static_cast<std::int64_t>(e); };
  switch (f) {
    case PlanField::Schedule: return num(v.as_enum<Schedule>());
    case PlanField::PipelineLayout: return num(v.as_enum<PipelineLayout>());
    case PlanField::Recompute: return num(v.as_enum<Recompute>());
    case PlanField::OffloadOptimizer: return num(v.as_enum<OffloadTarget>());
    case PlanField::OffloadPlanner: return num(v.as_enum<OffloadPlanner>());
    case PlanField::Compression: return num(v.as_enum<CompressionMethod>());
    case PlanField::Optimizer: return num(v.as_enum<Optimizer>());
    case PlanField::OptimizerStates: return num(v.as_enum<StateDtype>());
    case PlanField::Precision: return num(v.as_enum<Precision>());
    case PlanField::DpTopology: return num(v.as_enum<DpTopology>());
    default: break;
  }
  v.fail("is not an enum field");
}

// One field of a rule's "when": an integer, a list of them or {"at_least":
// n}; an enum's name or a list of names; a boolean.
FieldMatch read_match(const JsonReader& v, PlanField f) {
  FieldMatch m;
  m.field = f;
  switch (field_kind(f)) {
    case FieldKind::Integer:
      if (v.is_object()) {
        m.at_least = v.at("at_least").as_int(0, std::int64_t{1} << 40);
        v.reject_unknown_keys();
      } else if (v.is_array()) {
        for (const auto& e : v.elements()) m.values.push_back(e.as_int(0, std::int64_t{1} << 40));
        if (m.values.empty()) v.fail("needs at least one value");
      } else {
        m.values.push_back(v.as_int(0, std::int64_t{1} << 40));
      }
      break;
    case FieldKind::Enum:
      if (v.is_array()) {
        for (const auto& e : v.elements()) m.values.push_back(read_enum_value(e, f));
        if (m.values.empty()) v.fail("needs at least one value");
      } else {
        m.values.push_back(read_enum_value(v, f));
      }
      break;
    case FieldKind::Bool: m.values.push_back(v.as_bool() ? 1 : 0); break;
  }
  return m;
}

CapabilityRule read_rule(const JsonReader& r) {
  if (!r.is_object()) r.fail("must be an object with \"rule\", \"when\", \"message\" and \"source\"");
  CapabilityRule c;
  c.name = r.at("rule").as_string();
  if (c.name.empty()) r.fail_at("rule", "must name the rule");
  const JsonReader when = r.at("when");
  if (!when.is_object()) when.fail("must be an object of plan fields to match");
  for (const auto& [key, _] : when.json().items()) {
    const auto f = enum_from_name<PlanField>(key);
    if (!f) when.fail_at(key, "is not a plan field a rule can match (one of " + enum_choices<PlanField>() + ")");
    c.when.push_back(read_match(when.at(key), *f));
  }
  if (c.when.empty()) when.fail("needs at least one field: a rule without one would refuse every plan");
  std::sort(c.when.begin(), c.when.end(),
            [](const FieldMatch& a, const FieldMatch& b) { return a.field < b.field; });
  c.message = r.at("message").as_string();
  if (c.message.empty()) r.fail_at("message", "must say what the engine does instead");
  c.source = r.at("source").as_string();
  if (c.source.empty()) r.fail_at("source", "must say where the engine refuses it");
  r.reject_unknown_keys();
  return c;
}

Stack read_stack_file(const JsonReader& r, std::string name) {
  if (!r.is_object()) r.fail("a stack must be a JSON object");
  Stack s;
  s.name = std::move(name);
  s.description = r.at("description").as_string();
  const JsonReader settings = r.at("settings");
  if (!settings.is_object()) settings.fail("must be an object of settings by name");
  for (const auto& [key, _] : settings.json().items()) {
    const auto k = enum_from_name<ImplKey>(key);
    if (!k)
      settings.fail_at(key, "is not a stack setting (one of " + enum_choices<ImplKey>() + ")");
    s.settings.push_back(read_setting(settings.at(key), *k));
  }
  if (auto e = r.get("engine")) s.engine = e->as_string();
  if (auto caps = r.get("capabilities")) {
    const auto rules = caps->elements();
    for (std::size_t i = 0; i < rules.size(); ++i) {
      CapabilityRule c = read_rule(rules[i]);
      for (const auto& other : s.capabilities)
        if (other.name == c.name) rules[i].fail_at("rule", "\"" + c.name + "\" is given twice");
      s.capabilities.push_back(std::move(c));
    }
  }
  r.reject_unknown_keys();
  return s;
}

std::vector<std::string> known() {
  std::vector<std::string> out;
  for (const auto& f : cost::presets_of("stacks")) out.emplace_back(f.name);
  return out;
}

}  // namespace

std::vector<std::string> stack_names() { return known(); }

Stack bundled_stack(std::string_view name) {
  const auto* p = cost::find_preset("stacks", name);
  if (!p) throw InputError("", "", cost::unknown_preset_rule("stack", name, known()));
  const auto j = parse_json_text(p->text, std::string(p->path));
  return read_stack_file(JsonReader(j, std::string(p->path)), std::string(name));
}

Stack read_stack(const JsonReader& r, const std::string& base_dir) {
  const std::string s = r.as_string();
  if (cost::names_a_file(s)) {
    const std::string path = cost::resolve_path(s, base_dir);
    if (!std::filesystem::exists(path)) r.fail("stack file \"" + s + "\" not found");
    const auto j = load_json_file(path);
    r.read_file(path);
    return read_stack_file(JsonReader(j, path), s);
  }
  if (!cost::find_preset("stacks", s)) r.fail(cost::unknown_preset_rule("stack", s, known()));
  return bundled_stack(s);
}

}  // namespace strata::strategies
