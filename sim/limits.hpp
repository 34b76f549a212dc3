#pragma once
// The largest inputs Strata models, and checked 64-bit arithmetic for the
// products it forms from input (docs/input-format.md, Limits). Byte counts
// and times are signed 64-bit integers (units.hpp); these limits keep every
// figure computed from a scenario well inside them, so an absurd input is an
// InputError naming the rule instead of a wrapped number, an OOM or a hang.
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "sim/units.hpp"

namespace strata {

// GPUs in a cluster (nodes × gpus_per_node) and in a plan (dp·tp·pp·cp).
inline constexpr std::int64_t kMaxGpus = std::int64_t{1} << 20;  // 1,048,576
// Tokens in one training step (batch.global × seq_len).
inline constexpr std::int64_t kMaxTokensPerStep = std::int64_t{1} << 40;
// Bytes of a scenario's model states and activations, counted without any
// sharding or freeing (an upper bound of every byte count Strata forms).
inline constexpr Bytes kMaxBytes = Bytes{1} << 60;  // 1 EiB
// Layer passes in one step: microbatches per pipeline × (layers + 2, the
// embedding and the head). The layer-level task graph holds a few tasks per
// pass (about 2.4 KiB of memory each), the coarse level one per chunk.
inline constexpr std::int64_t kMaxLayerPasses = std::int64_t{1} << 20;
// A training step, and so every task in it: about 2.3 years. A modelled
// duration saturates here (capped_*), and a step that reaches it is refused,
// so sums of a few thousand durations never leave 64 bits.
inline constexpr Time kMaxStepTime = Time{1} << 56;

// a·b, or nothing when it does not fit in 64 bits.
inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of the factors, or nothing when it does not fit in 64 bits.
inline std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t r = 1;
  for (std::int64_t f : factors)
    if (__builtin_mul_overflow(r, f, &r)) return std::nullopt;
  return r;
}

// Durations that saturate at kMaxStepTime instead of overflowing.
inline Time capped(Time t) { return t < kMaxStepTime ? t : kMaxStepTime; }
inline Time capped_sum(Time a, Time b) {
  Time r = 0;
  return __builtin_add_overflow(a, b, &r) ? kMaxStepTime : capped(r);
}
inline Time capped_product(std::int64_t n, Time t) {
  Time r = 0;
  return __builtin_mul_overflow(n, t, &r) ? kMaxStepTime : capped(r);
}

}  // namespace strata
