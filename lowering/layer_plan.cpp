#include "lowering/layer_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <queue>
#include <tuple>
#include <utility>

#include "sim/error.hpp"
#include "lowering/lower.hpp"
#include "lowering/memory.hpp"
#include "strategies/remat.hpp"

namespace strata::strategies {

ChunkMap::ChunkMap(const Plan& plan, std::int64_t layers) : size(chunk_layers(plan, layers)) {
  first.assign(size.size() + 1, 0);
  for (std::size_t k = 0; k < size.size(); ++k) first[k + 1] = first[k] + size[k];
  of_layer.assign(static_cast<std::size_t>(layers), 0);
  for (int k = 0; k < chunks(); ++k)
    for (auto l = first[static_cast<std::size_t>(k)]; l < first[static_cast<std::size_t>(k) + 1]; ++l)
      of_layer[static_cast<std::size_t>(l)] = k;
}

std::int64_t segment_start(std::span<const Keep> chunk, std::int64_t i) {
  for (std::int64_t j = i; j >= 0; --j) {
    const Keep k = chunk[static_cast<std::size_t>(j)];
    if (k == Keep::Input) return j;
    if (k != Keep::Nothing) break;
  }
  throw Error("layer " + std::to_string(i) + " of a chunk keeps nothing and follows no segment start");
}

bool segment_end(std::span<const Keep> chunk, std::int64_t i) {
  const Keep k = chunk[static_cast<std::size_t>(i)];
  if (k != Keep::Input && k != Keep::Nothing) return false;
  return static_cast<std::size_t>(i) + 1 == chunk.size() ||
         chunk[static_cast<std::size_t>(i) + 1] != Keep::Nothing;
}

std::int64_t recompute_segment(const Plan& plan, std::int64_t n) {
  if (plan.recompute == Recompute::Sqrt) return remat::sqrt_segment(n);
  return std::min(plan.recompute_k, n);
}

Keeps fixed_keeps(const Plan& plan, const std::vector<std::int64_t>& chunk_layers) {
  Keeps out;
  std::int64_t layers = 0;
  for (const std::int64_t n : chunk_layers) layers += n;
  out.reserve(static_cast<std::size_t>(layers));
  for (const std::int64_t n : chunk_layers) {
    const auto all = [&](Keep k) { out.insert(out.end(), static_cast<std::size_t>(n), k); };
    switch (plan.recompute) {
      case Recompute::None: all(Keep::All); break;
      case Recompute::Selective:
      case Recompute::SelectiveOp: all(Keep::Selective); break;
      case Recompute::Full: all(Keep::Input); break;
      case Recompute::EveryK:
      case Recompute::Sqrt: {
        const std::int64_t k = recompute_segment(plan, n);
        for (std::int64_t i = 0; i < n; ++i) out.push_back(i % k == 0 ? Keep::Input : Keep::Nothing);
        break;
      }
      case Recompute::EveryNth:
        // torchtitan's _apply_layer_sac counts each model part's blocks from
        // 1 and wraps those whose count is a multiple of n.
        for (std::int64_t i = 1; i <= n; ++i) out.push_back(i % plan.recompute_k == 0 ? Keep::Input : Keep::All);
        break;
      case Recompute::Optimal:
        throw Error("fixed_keeps: optimal recompute is searched (plan_layers)");
    }
  }
  return out;
}

std::string keeps_pattern(std::span<const Keep> keeps) {
  std::string s;
  s.reserve(keeps.size());
  for (Keep k : keeps) s += "ASIN"[static_cast<int>(k)];
  return s;
}

std::string swaps_pattern(std::span<const Swap> swaps) {
  std::string s;
  s.reserve(swaps.size());
  for (Swap x : swaps) s += "-HL"[static_cast<int>(x)];
  return s;
}

KeepCounts count_keeps(std::span<const Keep> keeps) {
  KeepCounts c;
  for (Keep k : keeps) {
    switch (k) {
      case Keep::All: ++c.all; break;
      case Keep::Selective: ++c.selective; break;
      case Keep::Input: ++c.input; break;
      case Keep::Nothing: ++c.nothing; break;
    }
  }
  return c;
}

namespace {

// The least working set of β recomputed layers in q segments, beyond the
// gradient and what the layers after the segments keep: segment j (1…q, in
// forward order) of L_j layers ends with L_j layers rerun while the q − j
// later segments still keep their inputs, so it needs L_j·F − (q − j)·I;
// the lengths minimise the largest of these. With caps c_t(W) = ⌊(W +
// t·I)/F⌋ on the length of the segment t places from the last, W is
// reachable with β layers when every cap is ≥ 1 and they sum to ≥ β; the
// least such W for β = 1, 2, … is read off the caps' breakpoints in order.
class SegmentTable {
 public:
  SegmentTable(Bytes full, Bytes input, std::int64_t n) : full_(full), input_(input), n_(n) {
    least_.assign(static_cast<std::size_t>((n + 1) * (n + 1)), 0);
    for (std::int64_t q = 1; q <= n; ++q) {
      // (breakpoint, t): cap t grows by one at that W.
      using Next = std::pair<Bytes, std::int64_t>;
      std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
      std::int64_t reach = 0;
      for (std::int64_t t = 0; t < q; ++t) {
        const std::int64_t cap = cap_at(full_, t);
        reach += cap;
        next.push({(cap + 1) * full_ - t * input_, t});
      }
      Bytes w = full_;
      for (std::int64_t beta = q; beta <= n; ++beta) {
        while (reach < beta) {
          const auto [at, t] = next.top();
          next.pop();
          w = at;
          ++reach;
          next.push({at + full_, t});
        }
        least_[index(beta, q)] = w;
      }
    }
  }

  // The least working set of β layers in q ≤ β segments (β ≥ 1).
  Bytes least(std::int64_t beta, std::int64_t q) const { return least_[index(beta, q)]; }

  // Segment lengths in forward order reaching least(β, q): each as long as
  // its cap allows, leaving one layer for every later segment.
  std::vector<std::int64_t> lengths(std::int64_t beta, std::int64_t q) const {
    const Bytes w = least(beta, q);
    std::vector<std::int64_t> out;
    std::int64_t left = beta;
    for (std::int64_t j = 1; j <= q; ++j) {
      const std::int64_t len = std::max<std::int64_t>(1, std::min(cap_at(w, q - j), left - (q - j)));
      out.push_back(len);
      left -= len;
    }
    if (left != 0) throw Error("optimal recompute: segment lengths do not add up");
    return out;
  }

 private:
  std::int64_t cap_at(Bytes w, std::int64_t t) const { return (w + t * input_) / full_; }
  std::size_t index(std::int64_t beta, std::int64_t q) const {
    return static_cast<std::size_t>(beta * (n_ + 1) + q);
  }
  Bytes full_, input_;
  std::int64_t n_;
  std::vector<Bytes> least_;
};

// One choice of counts for every chunk of a stage, each capped by the
// chunk's size, in the chunk's forward order: `swap` layers that keep all
// and go to host memory (joint), β layers recomputed in q segments, α
// selective layers; the rest keep all.
struct Counts {
  std::int64_t swap = 0, alpha = 0, beta = 0, q = 0;
  static Counts in_chunk(std::int64_t o, std::int64_t a, std::int64_t b, std::int64_t q,
                         std::int64_t n) {
    Counts c;
    c.swap = std::min(o, n);
    c.alpha = std::min(a, n - c.swap);
    c.beta = std::min(b, n - c.swap - c.alpha);
    c.q = std::min(q, c.beta);
    return c;
  }
};

// The chunks of stage s: (model chunk, layers) per virtual chunk.
std::vector<std::pair<std::size_t, std::int64_t>> stage_chunks(const MemoryModel& model, int s) {
  const auto& chunks = model.chunks();
  const auto p = static_cast<std::size_t>(model.scenario().plan.pp);
  std::vector<std::pair<std::size_t, std::int64_t>> out;
  for (std::size_t k = static_cast<std::size_t>(s); k < chunks.size(); k += p) out.push_back({k, chunks[k]});
  return out;
}

// The search of optimal recompute (and, `joint`, of swapped layers): per
// stage, counts by time, the first whose peak fits. With `swap_all`
// (offload planner all) every layer's saved tensors go to host memory.
LayerPlan search(const MemoryModel& model, Bytes budget, const LayerTimes& t, bool joint,
                 bool swap_all) {
  const Plan& plan = model.scenario().plan;
  const ActivationRule& r = model.largest_rule();
  const auto layers = static_cast<std::size_t>(model.scenario().model.layers);
  LayerPlan out{Keeps(layers, Keep::All), Swaps(layers, swap_all ? Swap::Saved : Swap::None)};
  if (r.full <= 0) return out;
  const std::int64_t most = *std::max_element(model.chunks().begin(), model.chunks().end());
  // The table is (n + 1)² bytes counts for the n layers of the largest
  // chunk: refused before it is allocated where it would pass 1 GiB (about
  // 11,600 layers in one chunk; the deepest models have a few hundred).
  constexpr double kMaxTableBytes = static_cast<double>(kGiB);
  const double table_bytes = static_cast<double>(most + 1) * static_cast<double>(most + 1) * sizeof(Bytes);
  if (table_bytes > kMaxTableBytes) {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "the optimal search over the %lld layers of one pipeline chunk needs a %.1f GiB table "
                  "(Strata allows 1 GiB, about 11,600 layers): use more pipeline stages or a fixed "
                  "policy (every_k, selective, full)",
                  static_cast<long long>(most), table_bytes / static_cast<double>(kGiB));
    throw InputError(model.scenario().file, joint ? "plan.offload.planner" : "plan.recompute", buf);
  }
  const SegmentTable table(r.full, r.input, most);
  // Selective recompute saves nothing when the attention kernel keeps no
  // scores (flash attention): then it is not a choice.
  const bool selective = r.selective < r.full;
  const double F = static_cast<double>(r.full), S = static_cast<double>(r.selective),
               I = static_cast<double>(r.input), g = static_cast<double>(r.backward_holds());
  // Every segment's rerun shares its first layer's kept input
  // (ActivationRule::rerun), so each segment's hold, and their most, is that
  // much below the table's.
  const double shared = r.input_shared ? I : 0.0;
  // A swapped layer's copies beyond the compute beside them: its prefetch
  // runs during the backward of the layer after it (none without prefetch
  // depth), one at a time on the host-to-device engine.
  const Time stall = plan.offload.prefetch_depth > 0 ? std::max<Time>(0, t.copy_in - t.bwd) : t.copy_in;

  for (int s = 0; s < static_cast<int>(plan.pp); ++s) {
    const auto chunks = stage_chunks(model, s);
    const auto& in_flight = model.in_flight(s);
    // A stage's blocks under one choice of counts, from the closed forms of
    // ActivationRule::chunk for the order swapped, segments, selective, all
    // (the brute-force test holds them to it).
    const auto blocks = [&](std::int64_t o, std::int64_t a, std::int64_t b, std::int64_t q) {
      MemoryModel::Blocks bl;
      for (std::size_t c = 0; c < chunks.size(); ++c) {
        const Counts k = Counts::in_chunk(o, a, b, q, chunks[c].second);
        const double rest = static_cast<double>(chunks[c].second - k.swap - k.alpha - k.beta);
        const double sw = static_cast<double>(k.swap) * F;
        const double later_seg = static_cast<double>(k.alpha) * S + rest * F;  // after the segments
        const double stored = sw + static_cast<double>(k.q) * I + later_seg;
        double w = rest > 0 ? g : 0;
        if (k.alpha > 0) w = std::max(w, F - S + g - rest * F);
        if (k.beta > 0) w = std::max(w, static_cast<double>(table.least(k.beta, k.q)) - shared + g - later_seg);
        if (k.swap > 0) w = std::max(w, g - (stored - sw));
        double swapped = 0;
        if (swap_all) {
          swapped = stored;
          bl.largest_swapped = std::max({bl.largest_swapped, rest > 0 || k.swap > 0 ? F : 0.0,
                                         k.alpha > 0 ? S : 0.0, k.beta > 0 ? I : 0.0});
        } else if (k.swap > 0) {
          swapped = sw;
          bl.largest_swapped = F;
        }
        bl.add({stored, w, swapped}, static_cast<double>(in_flight[c]));
      }
      return bl;
    };
    struct Candidate {
      Time time;
      double activations;
      std::int64_t swap, alpha, beta, q;
    };
    std::vector<Candidate> cands;
    for (std::int64_t o = 0; o <= (joint ? most : 0); ++o)
      for (std::int64_t a = 0; o + a <= (selective ? most : o); ++a)
        for (std::int64_t b = 0; o + a + b <= most; ++b) {
          Time time = 0;
          for (const auto& [k, n] : chunks) {
            const Counts c = Counts::in_chunk(o, a, b, b, n);
            time += c.alpha * t.core + c.beta * t.recompute + c.swap * stall;
          }
          Candidate best{time, 0, o, a, b, 0};
          // The segment count with the fewest activation bytes on the GPU
          // (the stage's peak grows with them).
          for (std::int64_t q = b > 0 ? 1 : 0; q <= b; ++q) {
            const double act = model.activations(s, blocks(o, a, b, q));
            if (q <= 1 || act < best.activations) {
              best.activations = act;
              best.q = q;
            }
          }
          cands.push_back(best);
        }
    // Fastest first; among equals the fewest swapped layers, then the least memory.
    std::sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
      return std::tie(x.time, x.swap, x.activations, x.alpha, x.beta) <
             std::tie(y.time, y.swap, y.activations, y.alpha, y.beta);
    });
    const auto fits = [&](const Candidate& c, std::int64_t q) {
      return model.stage(s, blocks(c.swap, c.alpha, c.beta, q)).required() <= budget;
    };
    std::optional<Candidate> chosen;
    for (const auto& c : cands) {
      if (!fits(c, c.q)) continue;
      // The fastest counts that fit, with the most segments that fit: as
      // many layers as possible rerun from their own input (the same
      // recompute time, the least regrouping).
      chosen = c;
      for (std::int64_t q = c.beta; q > c.q; --q)
        if (fits(c, q)) {
          chosen->q = q;
          break;
        }
      break;
    }
    if (!chosen)  // nothing fits: the least memory
      chosen = *std::min_element(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
        return std::tie(x.activations, x.time) < std::tie(y.activations, y.time);
      });
    for (const auto& [k, n] : chunks) {
      const Counts c = Counts::in_chunk(chosen->swap, chosen->alpha, chosen->beta, chosen->q, n);
      const auto first = static_cast<std::ptrdiff_t>(model.first_layer(k));
      std::fill_n(out.swaps.begin() + first, c.swap, Swap::Saved);
      auto at = out.keeps.begin() + first + c.swap;
      if (c.beta > 0)
        for (const std::int64_t len : table.lengths(c.beta, c.q)) {
          *at++ = Keep::Input;
          at = std::fill_n(at, len - 1, Keep::Nothing);
        }
      std::fill_n(at, c.alpha, Keep::Selective);
    }
  }
  return out;
}

// Each kind of block's times, and the layers' kinds (MemoryModel::chain).
struct KindTimes {
  const MemoryModel& model;
  std::vector<LayerTimes> times;  // per kind
  const LayerTimes& at(std::int64_t layer) const {
    return times[static_cast<std::size_t>(model.chain().kind_of[static_cast<std::size_t>(layer)])];
  }
};

// The time layer i (of the chunk starting at model layer `first`) needs in
// its backward beyond the plain backward: its segment's rerun (at the
// segment's end) or its attention core.
Time rerun(std::span<const Keep> chunk, std::int64_t first, std::int64_t i, const KindTimes& t) {
  if (segment_end(chunk, i)) {
    Time sum = 0;
    for (std::int64_t j = segment_start(chunk, i); j <= i; ++j) sum += t.at(first + j).recompute;
    return sum;
  }
  if (chunk[static_cast<std::size_t>(i)] == Keep::Selective && t.model.rule(first + i).selective_reruns)
    return t.at(first + i).core;
  return 0;
}

// Lifetime-based offload (Le et al. 2018), chunk by chunk: in forward
// order, layer i's copy out starts when its forward ends and the
// device-to-host engine is free and must end before the chunk's forward
// does; in backward order, its prefetch starts when the backward
// prefetch_depth + 1 layers ahead ends (the lowering's rule) and the
// host-to-device engine is free, and must end before its backward starts.
Swaps lifetime_swaps(const MemoryModel& model, const Keeps& keeps, const KindTimes& t,
                     const StepCosts& costs) {
  const std::int64_t depth = model.scenario().plan.offload.prefetch_depth;
  Swaps out(keeps.size(), Swap::None);
  for (std::size_t k = 0; k < model.chunks().size(); ++k) {
    const std::int64_t n = model.chunks()[k];
    const std::int64_t first = model.first_layer(k);
    const std::span<const Keep> chunk(keeps.data() + first, static_cast<std::size_t>(n));
    const auto bytes = [&](std::int64_t i) { return model.rule(first + i).stored(chunk[static_cast<std::size_t>(i)]); };
    // The ends of the chunk's forwards, layer by layer.
    std::vector<Time> fwd_end(static_cast<std::size_t>(n), 0);
    for (std::int64_t i = 0; i < n; ++i)
      fwd_end[static_cast<std::size_t>(i)] = (i > 0 ? fwd_end[static_cast<std::size_t>(i) - 1] : 0) + t.at(first + i).fwd;
    const Time forward = n > 0 ? fwd_end.back() : 0;
    std::vector<bool> out_ok(static_cast<std::size_t>(n), false);
    Time d2h = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (bytes(i) == 0) continue;
      const Time end = std::max(fwd_end[static_cast<std::size_t>(i)], d2h) + costs.copy(bytes(i), CopyDir::ToHost).total();
      if (end > forward) continue;
      out_ok[static_cast<std::size_t>(i)] = true;
      d2h = end;
    }
    // Backward: layer i's backward starts at start[i] and takes its rerun and backward.
    const auto back = [&](std::int64_t i) { return rerun(chunk, first, i, t) + t.at(first + i).bwd; };
    std::vector<Time> start(static_cast<std::size_t>(n) + 1, 0);
    for (std::int64_t i = n - 1; i >= 0; --i)
      start[static_cast<std::size_t>(i)] = start[static_cast<std::size_t>(i) + 1] + (i + 1 < n ? back(i + 1) : 0);
    const auto end_of = [&](std::int64_t i) {  // end of layer i's backward
      return start[static_cast<std::size_t>(i)] + back(i);
    };
    Time h2d = 0;
    for (std::int64_t i = n - 1; i >= 0; --i) {
      if (!out_ok[static_cast<std::size_t>(i)]) continue;
      const Time ready = i + 1 + depth < n ? end_of(i + 1 + depth) : 0;
      const Time end = std::max(ready, h2d) + costs.copy(bytes(i), CopyDir::ToDevice).total();
      if (end > start[static_cast<std::size_t>(i)]) continue;
      out[static_cast<std::size_t>(first + i)] = Swap::Saved;
      h2d = end;
    }
  }
  return out;
}

// Priority-based offload (AutoSwap), stage by stage: each layer's score is
// the bytes it keeps × its idle time, from the end of its forward to the
// start of its backward (the rest of the chunk's forward, the backward of
// the layers after it, and the passes of the other microbatches in flight);
// the best are swapped, one at a time, until the stage fits the budget.
Swaps priority_swaps(const MemoryModel& model, const Keeps& keeps, Bytes budget, const KindTimes& t) {
  LayerPlan plan{keeps, Swaps(keeps.size(), Swap::None)};
  for (int s = 0; s < static_cast<int>(model.scenario().plan.pp); ++s) {
    const auto chunks = stage_chunks(model, s);
    struct Scored {
      double score;
      std::size_t layer;
    };
    std::vector<Scored> order;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const auto [k, n] = chunks[c];
      const std::int64_t first = model.first_layer(k);
      const std::span<const Keep> chunk(keeps.data() + first, static_cast<std::size_t>(n));
      Time fwd_pass = 0, bwd_pass = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        fwd_pass += t.at(first + i).fwd;
        bwd_pass += rerun(chunk, first, i, t) + t.at(first + i).bwd;
      }
      const Time others = (model.in_flight(s)[c] - 1) * (fwd_pass + bwd_pass);
      Time after = 0, fwd_after = 0;  // backward and forward of the layers after i
      for (std::int64_t i = n - 1; i >= 0; --i) {
        const Bytes b = model.rule(first + i).stored(chunk[static_cast<std::size_t>(i)]);
        const Time idle = fwd_after + after + others;
        if (b > 0)
          order.push_back({static_cast<double>(b) * static_cast<double>(idle), static_cast<std::size_t>(first + i)});
        after += rerun(chunk, first, i, t) + t.at(first + i).bwd;
        fwd_after += t.at(first + i).fwd;
      }
    }
    std::stable_sort(order.begin(), order.end(), [](const Scored& x, const Scored& y) {
      return std::tie(y.score, x.layer) < std::tie(x.score, y.layer);
    });
    for (const Scored& x : order) {
      if (model.stage(s, model.blocks(s, plan)).required() <= budget) break;
      plan.swaps[x.layer] = Swap::Saved;
    }
  }
  return plan.swaps;
}

}  // namespace

LayerTimes LayerTimes::largest(std::span<const LayerTimes> times) {
  LayerTimes t;
  for (const LayerTimes& x : times) {
    t.fwd = std::max(t.fwd, x.fwd);
    t.bwd = std::max(t.bwd, x.bwd);
    t.recompute = std::max(t.recompute, x.recompute);
    t.core = std::max(t.core, x.core);
    t.copy_in = std::max(t.copy_in, x.copy_in);
  }
  return t;
}

LayerTimes layer_times(const Plan& plan, const cost::Layer& block, const StepCosts& costs) {
  LayerTimes t;
  Time fwd_comm = 0, bwd_comm = 0;
  for (const auto& [kind, on] : {std::pair{CommKind::TP, plan.tp > 1}, std::pair{CommKind::CP, plan.cp > 1},
                                 std::pair{CommKind::EP, plan.ep > 1}})
    if (on) {
      fwd_comm += std::max<Time>(0, costs.layer_comm(block, kind, Pass::Forward));
      bwd_comm += std::max<Time>(0, costs.layer_comm(block, kind, Pass::Backward));
    }
  t.fwd = costs.layer(block, Pass::Forward) + fwd_comm;
  t.bwd = costs.layer(block, Pass::Backward) + bwd_comm;
  t.recompute = costs.layer(block, Pass::Recompute) + fwd_comm;
  t.core = costs.layer(block, Pass::Recompute, true);
  t.copy_in = costs.copy(block.saved_bytes(Recompute::None), CopyDir::ToDevice).total();
  return t;
}

bool needs_solver(const Plan& plan) {
  const OffloadPlanner planner = plan.offload.planner;
  return plan.recompute == Recompute::Optimal ||
         (plan.offload.activations &&
          (planner == OffloadPlanner::Lifetime || planner == OffloadPlanner::Priority ||
           planner == OffloadPlanner::Joint));
}

LayerPlan fixed_layers(const Plan& plan, const std::vector<std::int64_t>& chunk_layers) {
  if (needs_solver(plan)) throw Error("fixed_layers: the plan's choices are searched (plan_layers)");
  LayerPlan out;
  out.keeps = fixed_keeps(plan, chunk_layers);
  Swap swap = Swap::None;
  if (plan.offload.activations)
    swap = plan.offload.planner == OffloadPlanner::Vdnn ? Swap::LinearInputs : Swap::Saved;
  out.swaps.assign(out.keeps.size(), swap);
  return out;
}

namespace {

// An offload planner's swaps over the layers' keeps.
Swaps planner_swaps(OffloadPlanner planner, const MemoryModel& model, const Keeps& keeps,
                    Bytes budget, const KindTimes& t, const StepCosts& costs) {
  switch (planner) {
    case OffloadPlanner::All: return Swaps(keeps.size(), Swap::Saved);
    case OffloadPlanner::Vdnn: return Swaps(keeps.size(), Swap::LinearInputs);
    case OffloadPlanner::Lifetime: return lifetime_swaps(model, keeps, t, costs);
    case OffloadPlanner::Priority: return priority_swaps(model, keeps, budget, t);
    case OffloadPlanner::Joint: break;
  }
  throw Error("planner_swaps: the joint planner plans keeps and swaps together");
}

bool fits(const MemoryModel& model, const LayerPlan& layers, Bytes budget) {
  for (int s = 0; s < static_cast<int>(model.scenario().plan.pp); ++s)
    if (model.stage(s, model.blocks(s, layers)).required() > budget) return false;
  return true;
}

// The joint planner: candidates from the search over swapped, recomputed
// and kept layers (with the copies' stall as modelled, and with copies
// assumed hidden), from optimal and fixed recompute alone, and from each
// offload planner alone; the fastest of those whose peak fits, each step
// lowered and replayed (the stall the model can only estimate: a pipeline
// stage waiting for its neighbour hides copies). When none fits, the
// search's least peak.
LayerPlan joint_layers(const MemoryModel& model, Bytes budget, const KindTimes& kinds,
                       const StepCosts& costs) {
  const Scenario& sc = model.scenario();
  const LayerTimes t = LayerTimes::largest(kinds.times);
  std::vector<LayerPlan> cands;
  cands.push_back(search(model, budget, t, true, false));
  LayerTimes hidden = t;
  hidden.copy_in = 0;
  cands.push_back(search(model, budget, hidden, true, false));
  cands.push_back(search(model, budget, t, false, false));
  Plan fixed = sc.plan;
  for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    fixed.recompute = r;
    const Keeps keeps = fixed_keeps(fixed, model.chunks());
    cands.push_back({keeps, Swaps(keeps.size(), Swap::None)});
  }
  const Keeps all(cands.front().keeps.size(), Keep::All);
  for (const OffloadPlanner p : {OffloadPlanner::All, OffloadPlanner::Vdnn, OffloadPlanner::Lifetime,
                                 OffloadPlanner::Priority})
    cands.push_back({all, planner_swaps(p, model, all, budget, kinds, costs)});
  // Fastest first; among equals the fewest layers swapped (no copies for nothing).
  std::optional<std::tuple<Time, std::ptrdiff_t, std::size_t>> best;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    const auto& c = cands[i];
    if (!fits(model, c, budget) ||
        std::find(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(i), c) !=
            cands.begin() + static_cast<std::ptrdiff_t>(i))
      continue;
    const std::tuple<Time, std::ptrdiff_t, std::size_t> key{
        predict_step(sc, costs, nullptr, nullptr, &c).step_time,
        static_cast<std::ptrdiff_t>(c.swaps.size()) - std::count(c.swaps.begin(), c.swaps.end(), Swap::None),
        i};
    if (!best || key < *best) best = key;
  }
  return cands[best ? std::get<2>(*best) : 0];
}

}  // namespace

LayerPlan plan_layers(const MemoryModel& model, const StepCosts& costs) {
  const Scenario& sc = model.scenario();
  const Plan& plan = sc.plan;
  if (!needs_solver(plan)) return fixed_layers(plan, model.chunks());
  const Bytes budget = memory_budget(sc, model.rules());
  // Each kind of block's times; the search prices every layer as the
  // largest (MemoryModel::largest_rule), the offload planners each layer as
  // its own kind.
  KindTimes kinds{model, {}};
  for (const auto& block : model.chain().kinds) kinds.times.push_back(layer_times(plan, block, costs));
  const LayerTimes t = LayerTimes::largest(kinds.times);
  const OffloadPlanner planner = plan.offload.activations ? plan.offload.planner : OffloadPlanner::All;
  if (planner == OffloadPlanner::Joint) return joint_layers(model, budget, kinds, costs);
  LayerPlan out;
  if (plan.recompute == Recompute::Optimal) {
    // Planner all swaps whatever the layers keep, so it is planned with
    // them; the other planners after them (docs/remat.md).
    out = search(model, budget, t, false, plan.offload.activations && planner == OffloadPlanner::All);
  } else {
    Plan fixed = plan;
    fixed.offload.activations = false;
    out = fixed_layers(fixed, model.chunks());
  }
  if (plan.offload.activations) out.swaps = planner_swaps(planner, model, out.keeps, budget, kinds, costs);
  return out;
}

}  // namespace strata::strategies
