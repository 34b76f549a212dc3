#pragma once
// A synthetic corpus whose best achievable loss is known: a first-order
// Markov chain over the vocabulary with a seeded random transition matrix.
//
// Row i of P is a softmax of `sharpness`·z_ij with z_ij standard normal, so a
// larger sharpness concentrates each row on fewer successors. The entropy
// rate H = −Σ_i π_i Σ_j P_ij log P_ij (nats per token, π the stationary
// distribution, πP = π) is the cross-entropy of the true next-token
// distribution: no model of the sequence can do better on average. Sequences
// start from π, so every position of every sequence has expected best loss H.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/common/rng.hpp"

namespace strata::backend {

class MarkovCorpus {
 public:
  // Throws Error when vocab < 2 or sharpness < 0.
  MarkovCorpus(std::int64_t vocab, std::uint64_t seed, double sharpness = 2.0);

  std::int64_t vocab() const { return vocab_; }
  // P_ij: probability that token j follows token i (row-major vocab × vocab).
  double transition(std::int64_t i, std::int64_t j) const {
    return p_[static_cast<std::size_t>(i * vocab_ + j)];
  }
  const std::vector<double>& stationary() const { return pi_; }
  // Nats per token; log(vocab) is the loss of a uniform guess.
  double entropy_rate() const { return entropy_; }

  // `batch` sequences of seq+1 consecutive tokens x₀…x_seq each, x₀ drawn
  // from π: tokens get x₀…x_{seq−1}, targets x₁…x_seq (next-token pairs).
  void sample(std::span<std::int32_t> tokens, std::span<std::int32_t> targets,
              std::int64_t batch, std::int64_t seq, Rng& rng) const;

 private:
  std::int64_t draw(const double* probs, Rng& rng) const;

  std::int64_t vocab_;
  std::vector<double> p_;
  std::vector<double> pi_;
  double entropy_ = 0.0;
};

// Any file as byte-level tokens (vocabulary 256): training windows are
// seq+1 consecutive bytes at uniformly drawn offsets.
class ByteCorpus {
 public:
  static constexpr std::int64_t kVocab = 256;
  // The largest --data file read (1 GiB): the whole corpus is held in memory.
  static constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 30;
  // Reads the whole file; throws InputError (with the path) when it cannot
  // be read or holds fewer than 2 bytes.
  static ByteCorpus from_file(const std::string& path);
  // Throws Error with fewer than 2 bytes.
  explicit ByteCorpus(std::vector<std::uint8_t> bytes);

  std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size()); }
  // As MarkovCorpus::sample; throws Error when seq + 1 exceeds the corpus.
  void sample(std::span<std::int32_t> tokens, std::span<std::int32_t> targets,
              std::int64_t batch, std::int64_t seq, Rng& rng) const;

 private:
  std::vector<std::uint8_t> bytes_;
};

}  // namespace strata::backend
