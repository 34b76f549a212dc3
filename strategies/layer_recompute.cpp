#include "strategies/layer_recompute.hpp"

#include <algorithm>
#include <optional>
#include <queue>
#include <tuple>
#include <utility>

#include "sim/error.hpp"
#include "strategies/memory.hpp"
#include "strategies/remat.hpp"

namespace strata::strategies {

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
      case Recompute::Selective: all(Keep::Selective); break;
      case Recompute::Full: all(Keep::Input); break;
      case Recompute::EveryK:
      case Recompute::Sqrt: {
        const std::int64_t k = recompute_segment(plan, n);
        for (std::int64_t i = 0; i < n; ++i) out.push_back(i % k == 0 ? Keep::Input : Keep::Nothing);
        break;
      }
      case Recompute::Optimal:
        throw Error("fixed_keeps: optimal recompute is decided by optimal_keeps");
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

// One choice of counts for every chunk of a stage: α selective layers, β
// recomputed in q segments (each capped by the chunk's size), the rest kept.
struct Counts {
  std::int64_t alpha = 0, beta = 0, q = 0;
  static Counts in_chunk(std::int64_t a, std::int64_t b, std::int64_t q, std::int64_t n) {
    Counts c;
    c.alpha = std::min(a, n);
    c.beta = std::min(b, n - c.alpha);
    c.q = std::min(q, c.beta);
    return c;
  }
};

}  // namespace

Keeps optimal_keeps(const MemoryModel& model, Bytes budget, const RecomputeTimes& times) {
  const Plan& plan = model.scenario().plan;
  const ActivationRule& r = model.rule();
  const auto& chunks = model.chunks();
  const int p = static_cast<int>(plan.pp);
  const std::size_t v = static_cast<std::size_t>(plan.virtual_stages);
  const std::int64_t most = *std::max_element(chunks.begin(), chunks.end());
  if (r.full <= 0) return Keeps(static_cast<std::size_t>(model.scenario().model.layers), Keep::All);
  const SegmentTable table(r.full, r.input, most);
  // Selective recompute saves nothing when the attention kernel keeps no
  // scores (flash attention): then it is not a choice.
  const bool selective = r.selective < r.full;
  const double F = static_cast<double>(r.full), S = static_cast<double>(r.selective),
               I = static_cast<double>(r.input), g = static_cast<double>(r.grad);

  Keeps keeps(static_cast<std::size_t>(model.scenario().model.layers), Keep::All);
  for (int s = 0; s < p; ++s) {
    const auto& in_flight = model.in_flight(s);
    // A stage's blocks under one choice of counts, from the closed forms of
    // ActivationRule::stored and ::working for the order segments,
    // selective, all (a test holds them equal).
    const auto blocks = [&](std::int64_t a, std::int64_t b, std::int64_t q) {
      MemoryModel::Blocks out;
      for (std::size_t c = 0; c < v; ++c) {
        const std::int64_t n = chunks[c * static_cast<std::size_t>(p) + static_cast<std::size_t>(s)];
        const Counts k = Counts::in_chunk(a, b, q, n);
        const double rest = static_cast<double>(n - k.alpha - k.beta);
        const double stored = static_cast<double>(k.q) * I + static_cast<double>(k.alpha) * S + rest * F;
        double w = rest > 0 ? g : 0;
        if (k.alpha > 0) w = std::max(w, F - S + g - rest * F);
        if (k.beta > 0)
          w = std::max(w, static_cast<double>(table.least(k.beta, k.q)) + g -
                              static_cast<double>(k.alpha) * S - rest * F);
        out.stored += static_cast<double>(in_flight[c]) * stored;
        out.working = std::max(out.working, w);
        out.largest = std::max({out.largest, rest > 0 ? F : 0.0, k.alpha > 0 ? S : 0.0,
                                k.beta > 0 ? I : 0.0});
      }
      return out;
    };
    const auto time = [&](std::int64_t a, std::int64_t b) {
      Time t = 0;
      for (std::size_t c = 0; c < v; ++c) {
        const Counts k = Counts::in_chunk(
            a, b, b, chunks[c * static_cast<std::size_t>(p) + static_cast<std::size_t>(s)]);
        t += k.alpha * times.core + k.beta * times.layer;
      }
      return t;
    };
    // Per (α, β): the segment count with the fewest activation bytes on the
    // GPU (the stage's peak grows with them), then candidates by time.
    struct Candidate {
      Time time;
      double activations;
      std::int64_t alpha, beta, q;
    };
    std::vector<Candidate> cands;
    for (std::int64_t a = 0; a <= (selective ? most : 0); ++a) {
      for (std::int64_t b = 0; a + b <= most; ++b) {
        Candidate best{time(a, b), 0, a, b, 0};
        for (std::int64_t q = b > 0 ? 1 : 0; q <= b; ++q) {
          const double act = model.activations(s, blocks(a, b, q));
          if (q <= 1 || act < best.activations) {
            best.activations = act;
            best.q = q;
          }
        }
        cands.push_back(best);
      }
    }
    std::sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
      return std::tie(x.time, x.activations, x.alpha, x.beta) <
             std::tie(y.time, y.activations, y.alpha, y.beta);
    });
    const auto fits = [&](const Candidate& c, std::int64_t q) {
      return model.stage(s, blocks(c.alpha, c.beta, q)).total <= budget;
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
    // Each chunk in forward order: segments (longest first), selective, all.
    for (std::size_t c = 0; c < v; ++c) {
      const std::size_t k = c * static_cast<std::size_t>(p) + static_cast<std::size_t>(s);
      const Counts n = Counts::in_chunk(chosen->alpha, chosen->beta, chosen->q, chunks[k]);
      auto at = keeps.begin() + model.first_layer(k);
      if (n.beta > 0)
        for (const std::int64_t len : table.lengths(n.beta, n.q)) {
          *at++ = Keep::Input;
          at = std::fill_n(at, len - 1, Keep::Nothing);
        }
      std::fill_n(at, n.alpha, Keep::Selective);
    }
  }
  return keeps;
}

}  // namespace strata::strategies
