#pragma once
// Units shared by every layer of Strata. Time is an integer count of
// nanoseconds so simulations are bit-for-bit deterministic; byte counts are
// 64-bit and FLOP counts are doubles (they exceed 2^63 for large runs).
#include <cstdint>

namespace strata {

using Time = std::int64_t;   // nanoseconds
using Bytes = std::int64_t;  // bytes (signed: frees are negative deltas)
using Flops = double;        // floating-point operations

inline constexpr Time kNanosecond = 1;
inline constexpr Time kMicrosecond = 1'000;
inline constexpr Time kMillisecond = 1'000'000;
inline constexpr Time kSecond = 1'000'000'000;

inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;

inline constexpr double kGB = 1e9;  // decimal gigabyte, for bandwidths (GB/s)

constexpr double to_seconds(Time t) { return static_cast<double>(t) * 1e-9; }
constexpr double to_GiB(Bytes b) { return static_cast<double>(b) / static_cast<double>(kGiB); }

}  // namespace strata
