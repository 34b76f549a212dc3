#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "costmodel/model_io.hpp"
#include "costmodel/presets.hpp"
#include "strategies/convergence_io.hpp"

namespace strata::strategies {

namespace {

using nlohmann::ordered_json;

constexpr double kBig = 1e30;

// A number, or {"value": number, "source": string}. A bare number's source
// says where it was given.
Sourced read_sourced(const JsonReader& r, double lo, double hi) {
  Sourced s;
  if (r.is_object()) {
    s.value = r.at("value").as_number(lo, hi);
    s.source = r.at("source").as_string();
    r.reject_unknown_keys();
  } else {
    s.value = r.as_number(lo, hi);
    s.source = "given in " + r.file() + " (" + r.path() + ")";
  }
  return s;
}

// The key of an entry's parameter for each method, with its range.
struct ParamKey {
  const char* key;
  double lo, hi;
};
std::optional<ParamKey> param_key(CompressionMethod m) {
  switch (m) {
    case CompressionMethod::TopK:
    case CompressionMethod::RandomK: return ParamKey{"ratio", 1e-9, 1.0};
    case CompressionMethod::Qsgd: return ParamKey{"bits", 1, 16};
    case CompressionMethod::PowerSgd: return ParamKey{"rank", 1, 65536};
    default: return std::nullopt;
  }
}

// "factor", "noise_factor" and "bias_factor" (optional) and "source"
// of an object.
Penalty read_penalty_fields(const JsonReader& e) {
  Penalty p;
  p.factor = e.at("factor").as_number(1e-3, 1e6);
  if (auto n = e.get("noise_factor")) p.noise_factor = n->as_number(1e-3, 1e6);
  if (auto c = e.get("bias_factor")) p.bias_factor = c->as_number(0, 1e6);
  p.source = e.at("source").as_string();
  return p;
}

// An optimizer's penalty: a number (the same at every batch) or an object
// {"factor", "noise_factor", "source"}.
Penalty read_penalty(const JsonReader& e) {
  if (!e.is_object()) {
    Penalty p;
    p.factor = e.as_number(1e-3, 1e6);
    p.source = "given in " + e.file() + " (" + e.path() + ")";
    return p;
  }
  Penalty p = read_penalty_fields(e);
  e.reject_unknown_keys();
  return p;
}

std::vector<CompressionPenalty> read_compression_penalties(const JsonReader& r) {
  std::vector<CompressionPenalty> out;
  for (const auto& e : r.elements()) {
    const auto method = e.at("method").as_enum<CompressionMethod>();
    if (method == CompressionMethod::None) e.fail_at("method", "\"none\" has no penalty (it is 1)");
    const bool sparse = sparse_compression(method);
    bool ef = true;
    if (sparse) {
      ef = e.at("error_feedback").as_bool();
    } else if (e.has("error_feedback")) {
      e.fail_at("error_feedback", "applies only to methods topk and randomk");
    }
    PenaltyPoint pt;
    const auto key = param_key(method);
    for (const char* k : {"ratio", "bits", "rank"})
      if (e.has(k) && (!key || std::string(k) != key->key))
        e.fail_at(k, "does not apply to method \"" + std::string(enum_name(method)) + "\"");
    if (key) {
      const auto v = e.at(key->key);
      pt.at = sparse
                  ? v.as_number(key->lo, key->hi)
                  : static_cast<double>(v.as_int(static_cast<std::int64_t>(key->lo),
                                                 static_cast<std::int64_t>(key->hi)));
    }
    pt.penalty = read_penalty_fields(e);
    e.reject_unknown_keys();
    auto it = std::find_if(out.begin(), out.end(), [&](const CompressionPenalty& p) {
      return p.method == method && p.error_feedback == ef;
    });
    if (it == out.end()) {
      out.push_back({method, ef, {}});
      it = std::prev(out.end());
    }
    for (const auto& q : it->points)
      if (q.at == pt.at) e.fail("a second entry for the same method and parameter");
    it->points.push_back(pt);
    std::sort(it->points.begin(), it->points.end(),
              [](const PenaltyPoint& a, const PenaltyPoint& b) { return a.at < b.at; });
  }
  return out;
}

// Reads the keys present into `m`; with `complete`, the required ones must be.
void read_fields(const JsonReader& r, ConvergenceModel& m, bool complete) {
  if (!r.is_object()) r.fail("a convergence model must be a JSON object");
  r.allow({"fit", "measurements"});  // what fit-convergence records beside the model
  auto required = [&](const char* key) {
    if (complete && !r.has(key)) r.fail_at(key, "missing required key");
  };
  if (auto d = r.get("description")) m.description = d->as_string();
  required("target_loss");
  if (auto t = r.get("target_loss")) m.target_loss = t->as_number(1e-9, 1e6);
  required("S_min_steps");
  if (auto s = r.get("S_min_steps")) m.s_min_steps = read_sourced(*s, 1e-9, kBig);
  required("B_noise_tokens");
  if (auto b = r.get("B_noise_tokens")) m.b_noise_tokens = read_sourced(*b, 0, kBig);
  if (auto ls = r.get("loss_scaling")) {
    if (ls->is_null()) {
      m.loss_scaling.reset();
    } else {
      LossScaling s;
      s.loss_floor = read_sourced(ls->at("loss_floor"), 0, 1e6);
      s.s_min_exponent = read_sourced(ls->at("S_min_exponent"), -1e3, 1e3);
      s.b_noise_exponent = read_sourced(ls->at("B_noise_exponent"), -1e3, 1e3);
      ls->reject_unknown_keys();
      m.loss_scaling = s;
    }
  }
  if (m.loss_scaling && !(m.target_loss > m.loss_scaling->loss_floor.value))
    r.fail_at("target_loss", "must be above loss_scaling.loss_floor");
  if (auto lr = r.get("lr")) {
    if (lr->is_null())
      m.lr.reset();
    else
      m.lr = read_lr_rule(*lr);
  }
  required("penalties");
  if (auto p = r.get("penalties")) {
    if (!p->is_object()) p->fail("must be an object");
    if (complete)
      for (const char* k : {"compression", "optimizer", "staleness_per_step"})
        if (!p->has(k)) p->fail_at(k, "missing required key");
    if (auto c = p->get("compression")) m.compression = read_compression_penalties(*c);
    if (auto o = p->get("optimizer")) {
      if (!o->is_object()) o->fail("must be an object of factors by optimizer");
      for (const auto& item : o->json().items()) {
        const JsonReader e(item.value(), o->file(), o->child_path(item.key()));
        const auto opt = enum_from_name<Optimizer>(item.key());
        if (!opt) e.fail("unknown optimizer (one of " + enum_choices<Optimizer>() + ")");
        // {"lr_reach": R or {"value", "source"}}: how much further the
        // learning-rate rule holds (effective_lr_ratio).
        // An entry replaces the whole of the one it overrides.
        m.lr_reach.erase(*opt);
        if (e.is_object())
          if (auto reach = e.get("lr_reach")) m.lr_reach[*opt] = read_sourced(*reach, 1, 1e3);
        m.optimizer[*opt] = read_penalty(e);
      }
    }
    if (auto s = p->get("staleness_per_step")) {
      // A number, or {"value", "noise_value" (optional), "source"}.
      Staleness st;
      if (s->is_object()) {
        st.per_step = s->at("value").as_number(-0.999, 1e3);
        if (auto n = s->get("noise_value")) st.noise_per_step = n->as_number(-0.999, 1e3);
        st.source = s->at("source").as_string();
        s->reject_unknown_keys();
      } else {
        st.per_step = s->as_number(-0.999, 1e3);
        st.source = "given in " + s->file() + " (" + s->path() + ")";
      }
      m.staleness_per_step = st;
    }
    p->reject_unknown_keys();
  }
  r.reject_unknown_keys();
}

ConvergenceModel read_file_model(const JsonReader& r) {
  ConvergenceModel m;
  m.file = r.file();
  read_fields(r, m, true);
  return m;
}

ordered_json sourced_json(const Sourced& s) { return {{"value", s.value}, {"source", s.source}}; }

ordered_json staleness_json(const Staleness& s) {
  ordered_json j{{"value", s.per_step}};
  if (s.noise_per_step) j["noise_value"] = *s.noise_per_step;
  j["source"] = s.source;
  return j;
}

void add_penalty_json(ordered_json& j, const Penalty& p) {
  j["factor"] = p.factor;
  if (p.noise_factor) j["noise_factor"] = *p.noise_factor;
  if (p.bias_factor) j["bias_factor"] = *p.bias_factor;
  j["source"] = p.source;
}

}  // namespace

LrRule read_lr_rule(const JsonReader& r) {
  if (!r.is_object()) r.fail("must be an object {\"base\", \"scaling\", \"warmup_steps\", \"reference_batch\"}");
  LrRule lr;
  lr.base = r.at("base").as_number(1e-12, 1e3);
  lr.scaling = r.enum_or("scaling", lr.scaling);
  lr.warmup_steps = r.int_or("warmup_steps", 0, 0, std::int64_t{1} << 40);
  if (auto b = r.get("reference_batch")) lr.reference_batch = b->as_int(1, std::int64_t{1} << 40);
  r.reject_unknown_keys();
  return lr;
}

ConvergenceModel parse_convergence(std::string_view text, const std::string& source) {
  const auto j = parse_json_text(text, source);
  return read_file_model(JsonReader(j, source));
}

ConvergenceModel load_convergence_file(const std::string& path) {
  const auto j = load_json_file(path);
  return read_file_model(JsonReader(j, path));
}

ConvergenceModel bundled_convergence(std::string_view name) {
  const auto* p = cost::find_preset("convergence", name);
  if (!p) {
    std::vector<std::string> known;
    for (const auto& f : cost::presets_of("convergence")) known.emplace_back(f.name);
    throw InputError("", "", cost::unknown_preset_rule("convergence", name, known));
  }
  return parse_convergence(p->text, std::string(p->path));
}

ConvergenceModel read_scenario_convergence(const JsonReader& r, const std::string& base_dir) {
  auto named = [&](const JsonReader& v) {
    const std::string s = v.as_string();
    if (cost::names_a_file(s)) {
      const std::string path = cost::resolve_path(s, base_dir);
      if (!std::filesystem::exists(path)) v.fail("convergence file \"" + s + "\" not found");
      v.read_file(path);
      return load_convergence_file(path);
    }
    if (!cost::find_preset("convergence", s)) {
      std::vector<std::string> known;
      for (const auto& f : cost::presets_of("convergence")) known.emplace_back(f.name);
      v.fail(cost::unknown_preset_rule("convergence", s, known));
    }
    return bundled_convergence(s);
  };
  if (r.is_string()) return named(r);
  if (!r.is_object()) r.fail("must be a bundled name, a file path or an object");
  ConvergenceModel m = r.has("file") ? named(r.at("file")) : bundled_convergence();
  read_fields(r, m, false);
  return m;
}

std::string convergence_json(const ConvergenceModel& m) {
  ordered_json j;
  j["description"] = m.description;
  j["target_loss"] = m.target_loss;
  j["S_min_steps"] = sourced_json(m.s_min_steps);
  j["B_noise_tokens"] = sourced_json(m.b_noise_tokens);
  if (m.loss_scaling)
    j["loss_scaling"] = {{"loss_floor", sourced_json(m.loss_scaling->loss_floor)},
                         {"S_min_exponent", sourced_json(m.loss_scaling->s_min_exponent)},
                         {"B_noise_exponent", sourced_json(m.loss_scaling->b_noise_exponent)}};
  if (m.lr) {
    ordered_json lr{{"base", m.lr->base},
                    {"scaling", enum_name(m.lr->scaling)},
                    {"warmup_steps", m.lr->warmup_steps}};
    if (m.lr->reference_batch) lr["reference_batch"] = *m.lr->reference_batch;
    j["lr"] = lr;
  }
  ordered_json comp = ordered_json::array();
  for (const auto& p : m.compression)
    for (const auto& pt : p.points) {
      ordered_json e{{"method", enum_name(p.method)}};
      const bool sparse = sparse_compression(p.method);
      if (sparse) e["error_feedback"] = p.error_feedback;
      if (const auto key = param_key(p.method)) {
        if (sparse)
          e[key->key] = pt.at;
        else
          e[key->key] = static_cast<std::int64_t>(pt.at);
      }
      add_penalty_json(e, pt.penalty);
      comp.push_back(e);
    }
  ordered_json opt = ordered_json::object();
  for (const auto& [o, p] : m.optimizer) {
    ordered_json e = ordered_json::object();
    add_penalty_json(e, p);
    if (const auto it = m.lr_reach.find(o); it != m.lr_reach.end())
      e["lr_reach"] = {{"value", it->second.value}, {"source", it->second.source}};
    opt[std::string(enum_name(o))] = e;
  }
  j["penalties"] = {{"compression", comp},
                    {"optimizer", opt},
                    {"staleness_per_step", staleness_json(m.staleness_per_step)}};
  return j.dump(2) + "\n";
}

}  // namespace strata::strategies
