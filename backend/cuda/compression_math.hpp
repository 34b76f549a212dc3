#pragma once
// The arithmetic of gradient compression on the GPU, one entry, one bucket
// or one random draw at a time, in functions both nvcc (inside the kernels
// of compression_kernels.cu) and g++ (the host, and the unit test
// compression_math_test.cpp) compile. The kernels call these and nothing
// else that computes, so the test that runs them over whole gradients on
// the host and compares the messages byte for byte with
// backend/cpu/compression.cpp checks the device's arithmetic without a GPU;
// only the launch (which thread runs which bucket) is left to the GPU tests.
//
// Byte-identical results need the same operations in the same order with
// the same rounding: sums run in the CPU's order (one thread per bucket,
// sequentially), and on the device every floating-point operation that
// could be fused or approximated goes through an _rn intrinsic (nvcc
// contracts a·b + c into an FMA by default; the host x86-64 build has no
// FMA to contract into).
//
// Plain C++17 (nvcc compiles .cu files as C++17), no other Strata header.
#include <cstdint>
#include <cstring>
#include <vector>

#if !defined(__CUDACC__)
#include <cmath>
#endif

#ifndef STRATA_HD
#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif
#endif

namespace strata::backend::cuda::compression {

// The buckets of both formats (strategies::kQsgdBucket, kOneBitBucket; the
// unit test checks they agree). 512 entries of w bits fill 16·w whole
// words, so every full bucket's codes start on a word boundary and one
// thread can write a bucket without touching its neighbours' words.
inline constexpr std::int64_t kQsgdBucket = 512;
inline constexpr std::int64_t kOneBitBucket = 512;

// ---- exact arithmetic ---------------------------------------------------------

STRATA_HD inline double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
STRATA_HD inline double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
STRATA_HD inline double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
STRATA_HD inline double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
STRATA_HD inline float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
STRATA_HD inline float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
STRATA_HD inline float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
STRATA_HD inline std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
STRATA_HD inline float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
STRATA_HD inline float fabs_(float a) { return float_of(bits_of(a) & 0x7fffffffu); }
// double → float, round to nearest even (the C++ conversion on the host).
STRATA_HD inline float to_float(double x) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(x);
#else
  return static_cast<float>(x);
#endif
}

// ---- fp16 (backend/cpu/compression.cpp's to_half / from_half) ------------------

// IEEE binary16, round to nearest even; overflow gives infinity.
STRATA_HD inline std::uint16_t to_half(float x) {
  const std::uint32_t bits = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t a = bits & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  const int e = static_cast<int>(a >> 23);
  auto round_shift = [](std::uint32_t m, int shift) {
    const std::uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  };
  if (e >= 113) {
    const std::uint32_t h = round_shift(a - (112u << 23), 13);
    return static_cast<std::uint16_t>(sign | (h < 0x7c00u ? h : 0x7c00u));
  }
  if (e < 102) return sign;
  return static_cast<std::uint16_t>(sign | round_shift((a & 0x7fffffu) | 0x800000u, 126 - e));
}
STRATA_HD inline float from_half(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = fmul(static_cast<float>(m), 5.9604644775390625e-8f);  // m·2^-24, exact
    return sign ? -v : v;
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

// ---- deterministic randomness (backend/common/rng.hpp's Rng) ------------------------

// The seed of a stream: backend/cpu/compression.cpp's mix(seed, salt).
STRATA_HD inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
}
inline constexpr std::uint64_t kRandomKSalt = 0x52414e444bULL;
inline constexpr std::uint64_t kQsgdSalt = 0x51534744ULL;  // + the rank
inline constexpr std::uint64_t kPowerSgdSalt = 0x504f574552ULL;

// xoshiro256** seeded by splitmix64, draw for draw the CPU's Rng. Its
// state moves by a linear map over GF(2) (the ** scrambler only shapes the
// output), so a thread can jump ahead to where its bucket's draws start
// (Jump below) instead of drawing everything before them.
struct Xoshiro {
  std::uint64_t s[4];

  STRATA_HD static Xoshiro seeded(std::uint64_t seed) {
    Xoshiro x{};
    for (auto& w : x.s) {
      std::uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      w = z ^ (z >> 31);
    }
    return x;
  }
  STRATA_HD static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  // The state's linear step, without the output.
  STRATA_HD void advance() {
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
  }
  STRATA_HD std::uint64_t next() {
    const std::uint64_t r = rotl(s[1] * 5, 7) * 9;
    advance();
    return r;
  }
  // Uniform in [0, 1) with 53 random bits (exact: an integer below 2^53 times 2^-53).
  STRATA_HD double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

// A linear map of the 256-bit state: column j (4 words) is the image of
// state bit j (word j / 64, bit j % 64).
inline constexpr int kStateBits = 256;
inline constexpr int kMatrixWords = kStateBits * 4;

STRATA_HD inline Xoshiro apply(const std::uint64_t* m, const Xoshiro& x) {
  Xoshiro r{};
  for (int j = 0; j < kStateBits; ++j)
    if ((x.s[j / 64] >> (j % 64)) & 1u)
      for (int w = 0; w < 4; ++w) r.s[w] ^= m[4 * j + w];
  return r;
}

// The state `b` buckets of `per_bucket` draws on from `x`, with
// jumps[l] = the map of per_bucket·2^l draws (l = 0, 1, …; enough of them
// for b's bits).
STRATA_HD inline Xoshiro jump_buckets(const std::uint64_t* jumps, std::int64_t b, Xoshiro x) {
  for (int l = 0; b != 0; ++l, b >>= 1)
    if (b & 1) x = apply(jumps + static_cast<std::int64_t>(l) * kMatrixWords, x);
  return x;
}

// Host only: the maps themselves.
using Gf2Map = std::vector<std::uint64_t>;  // kMatrixWords words
inline Gf2Map step_map() {
  Gf2Map m(kMatrixWords);
  for (int j = 0; j < kStateBits; ++j) {
    Xoshiro x{};
    x.s[j / 64] = std::uint64_t{1} << (j % 64);
    x.advance();
    for (int w = 0; w < 4; ++w) m[static_cast<std::size_t>(4 * j + w)] = x.s[w];
  }
  return m;
}
// a∘b: b first, then a.
inline Gf2Map compose(const Gf2Map& a, const Gf2Map& b) {
  Gf2Map m(kMatrixWords);
  for (int j = 0; j < kStateBits; ++j) {
    Xoshiro col{};
    for (int w = 0; w < 4; ++w) col.s[w] = b[static_cast<std::size_t>(4 * j + w)];
    const Xoshiro r = apply(a.data(), col);
    for (int w = 0; w < 4; ++w) m[static_cast<std::size_t>(4 * j + w)] = r.s[w];
  }
  return m;
}
// The map of `draws` draws (square and multiply).
inline Gf2Map draws_map(std::uint64_t draws) {
  Gf2Map result(kMatrixWords, 0), base = step_map();
  for (int j = 0; j < kStateBits; ++j) result[static_cast<std::size_t>(4 * j + j / 64)] = std::uint64_t{1} << (j % 64);
  for (; draws != 0; draws >>= 1) {
    if (draws & 1) result = compose(base, result);
    if (draws > 1) base = compose(base, base);
  }
  return result;
}
// jumps[l] = draws_map(per_bucket·2^l) for l < levels, one after another.
inline std::vector<std::uint64_t> bucket_jumps(std::uint64_t per_bucket, int levels) {
  std::vector<std::uint64_t> out;
  Gf2Map m = draws_map(per_bucket);
  for (int l = 0; l < levels; ++l) {
    out.insert(out.end(), m.begin(), m.end());
    m = compose(m, m);
  }
  return out;
}
// Levels bucket_jumps needs for bucket indices below `buckets`.
inline int jump_levels(std::int64_t buckets) {
  int l = 1;
  while ((std::int64_t{1} << l) < buckets) ++l;
  return l;
}

// ---- packed bits --------------------------------------------------------------

// `width` bits (width <= 32) at bit `at` of `words`, lowest bits first.
STRATA_HD inline std::uint32_t read_bits(const std::uint32_t* words, std::int64_t at, int width) {
  const std::int64_t w = at / 32;
  const int shift = static_cast<int>(at % 32);
  std::uint64_t acc = words[w] >> shift;
  if (shift + width > 32) acc |= static_cast<std::uint64_t>(words[w + 1]) << (32 - shift);
  return static_cast<std::uint32_t>(acc & ((std::uint64_t{1} << width) - 1));
}

// Codes appended lowest bits first into words that start at zero (the
// CPU's BitWriter; flush() writes a last, partial word).
struct BitWriter {
  std::uint32_t* w;
  std::uint64_t acc = 0;
  int fill = 0;
  STRATA_HD explicit BitWriter(std::uint32_t* words) : w(words) {}
  STRATA_HD void put(std::uint32_t v, int width) {
    acc |= static_cast<std::uint64_t>(v) << fill;
    fill += width;
    while (fill >= 32) {
      *w++ = static_cast<std::uint32_t>(acc);
      acc >>= 32;
      fill -= 32;
    }
  }
  STRATA_HD void flush() {
    if (fill > 0) *w++ = static_cast<std::uint32_t>(acc);
    acc = 0;
    fill = 0;
  }
};

// ---- message sizes (words of 32 bits) -----------------------------------------

STRATA_HD inline std::int64_t words_for_bits(std::int64_t bits) { return (bits + 31) / 32; }
// top-k: k int32 indices, then k fp16 values two to a word.
STRATA_HD inline std::int64_t topk_words(std::int64_t k) { return k + (k + 1) / 2; }
// QSGD: one fp32 norm per bucket, then n (bits+1)-bit codes.
STRATA_HD inline std::int64_t qsgd_buckets(std::int64_t n) { return (n + kQsgdBucket - 1) / kQsgdBucket; }
STRATA_HD inline std::int64_t qsgd_words(std::int64_t n, int bits) {
  return qsgd_buckets(n) + words_for_bits(n * (bits + 1));
}
// Chunk j of n entries over `ranks` (backend/cpu/comm.hpp's chunk_range).
STRATA_HD inline std::int64_t chunk_begin(std::int64_t n, int ranks, int j) { return n * j / ranks; }

// ---- top-k --------------------------------------------------------------------

// The sort key of x: its |x| as bits, which order as |x| does for every
// finite x (and ±0 alike). Sorting these in descending order, stably over
// increasing indices, keeps the CPU's rule: larger |x| first, ties to the
// lower index. (NaN sorts above infinity; the CPU's heap leaves NaN's
// place unspecified. A step with a non-finite gradient is skipped anyway.)
STRATA_HD inline std::uint32_t magnitude_key(float x) { return bits_of(x) & 0x7fffffffu; }

// Value word w of a top-k message: the fp16 values of chosen entries 2w
// and 2w + 1 (the second only when 2w + 1 < k), each clamped to ±65504
// (more stays in the residual); residual (may be null) loses what went.
STRATA_HD inline std::uint32_t topk_value_word(const float* x, const std::int32_t* chosen, std::int64_t k,
                                                 std::int64_t w, float* residual) {
  constexpr float kMax = 65504.0f;
  std::uint32_t word = 0;
  for (std::int64_t j = 2 * w; j < 2 * w + 2 && j < k; ++j) {
    const std::int32_t i = chosen[j];
    const float v = x[i];
    const std::uint16_t h = to_half(v < -kMax ? -kMax : (v > kMax ? kMax : v));
    word |= static_cast<std::uint32_t>(h) << (16 * (j % 2));
    if (residual != nullptr) residual[i] = fsub(residual[i], from_half(h));
  }
  return word;
}
// Entry j's fp16 value in a message of k entries.
STRATA_HD inline float topk_value(const std::uint32_t* msg, std::int64_t k, std::int64_t j) {
  return from_half(static_cast<std::uint16_t>(msg[k + j / 2] >> (16 * (j % 2))));
}

// ---- random-k -----------------------------------------------------------------

// Selection sampling (Knuth's Algorithm S) as the CPU draws it: exactly k
// of n indices, in order, from the group's shared stream. Sequential by
// nature (each draw's threshold depends on how many are still needed) and
// independent of the gradient, so it runs on the host.
inline void select_indices(Xoshiro& shared, std::int64_t n, std::int64_t k, std::int32_t* out) {
  std::int64_t need = k, j = 0;
  for (std::int64_t i = 0; i < n && need > 0; ++i)
    if (shared.uniform() * static_cast<double>(n - i) < static_cast<double>(need)) {
      out[j++] = static_cast<std::int32_t>(i);
      --need;
    }
}

// ---- QSGD ---------------------------------------------------------------------

// Bucket [lo, hi) of x into norms[b] and its codes from `codes` (the word
// of bit lo·width): the fp32 norm (a double sum of squares, in order), and
// per entry sign | level << 1 with level = ⌊r⌋ or ⌊r⌋ + 1, the latter with
// probability r − ⌊r⌋ (r = |v|/norm·s, one uniform draw each, from `rng`
// placed at the bucket's first draw), so that E[norm·level/s] = |v|
// (Alistarh et al. 2017).
STRATA_HD inline void qsgd_encode_bucket(const float* x, std::int64_t lo, std::int64_t hi, Xoshiro rng,
                                         double levels, int width, std::uint32_t* norm_word,
                                         std::uint32_t* codes) {
  double sq = 0;
  for (std::int64_t i = lo; i < hi; ++i) {
    const double v = x[i];
    sq = dadd(sq, dmul(v, v));
  }
  const float norm = to_float(dsqrt(sq));
  *norm_word = bits_of(norm);
  BitWriter out(codes);
  for (std::int64_t i = lo; i < hi; ++i) {
    const float v = x[i];
    const double r = norm > 0 ? dmul(ddiv(static_cast<double>(fabs_(v)), static_cast<double>(norm)), levels) : 0.0;
    auto level = static_cast<std::uint32_t>(r);
    if (rng.uniform() < r - static_cast<double>(level)) ++level;
    const auto top = static_cast<std::uint32_t>(levels);
    level = level < top ? level : top;
    out.put((level << 1) | (v < 0 ? 1u : 0u), width);
  }
  out.flush();
}
// Entry i of one rank's QSGD message (norms, then codes) dequantized.
STRATA_HD inline float qsgd_value(const std::uint32_t* msg, std::int64_t buckets, std::int64_t i, int width,
                                  double levels) {
  const double norm = float_of(msg[i / kQsgdBucket]);
  const std::uint32_t c = read_bits(msg + buckets, i * width, width);
  const float v = to_float(ddiv(dmul(norm, static_cast<double>(c >> 1)), levels));
  return (c & 1u) ? -v : v;
}

// ---- 1-bit --------------------------------------------------------------------

// Bucket [lo, hi) of a chunk x into its block: scales[lo / 512] = the mean
// |x| (a double sum, in order), one sign bit per entry from `signs` (the
// word of bit lo; 1: x >= 0), and e = x − scale·sign (e may be x).
STRATA_HD inline void onebit_compress_bucket(const float* x, std::int64_t lo, std::int64_t hi,
                                             std::uint32_t* scales, std::uint32_t* signs, float* e) {
  double sum = 0;
  for (std::int64_t i = lo; i < hi; ++i) sum = dadd(sum, static_cast<double>(fabs_(x[i])));
  const float scale = to_float(ddiv(sum, static_cast<double>(hi - lo)));
  scales[lo / kOneBitBucket] = bits_of(scale);
  BitWriter out(signs);
  for (std::int64_t i = lo; i < hi; ++i) {
    const float v = x[i];
    out.put(v >= 0 ? 1u : 0u, 1);
    e[i] = fsub(v, v >= 0 ? scale : -scale);
  }
  out.flush();
}
// Entry i of a block (`scales` scale words, then sign bits): ±scale.
STRATA_HD inline float onebit_value(const std::uint32_t* block, std::int64_t scales, std::int64_t i) {
  const float scale = float_of(block[i / kOneBitBucket]);
  return read_bits(block + scales, i, 1) ? scale : -scale;
}

}  // namespace strata::backend::cuda::compression
