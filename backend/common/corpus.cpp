#include "backend/common/corpus.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "sim/error.hpp"
#include "sim/json_reader.hpp"

namespace strata::backend {

MarkovCorpus::MarkovCorpus(std::int64_t vocab, std::uint64_t seed, double sharpness)
    : vocab_(vocab) {
  if (vocab < 2) throw Error("MarkovCorpus: vocab must be >= 2");
  if (!(sharpness >= 0.0)) throw Error("MarkovCorpus: sharpness must be >= 0");
  const auto V = static_cast<std::size_t>(vocab);
  Rng rng(seed);
  p_.resize(V * V);
  for (std::size_t i = 0; i < V; ++i) {
    double* row = &p_[i * V];
    double sum = 0.0;
    for (std::size_t j = 0; j < V; ++j) sum += row[j] = std::exp(sharpness * rng.normal());
    for (std::size_t j = 0; j < V; ++j) row[j] /= sum;
  }
  // Stationary distribution by power iteration (every P_ij > 0, so the chain
  // is ergodic and aperiodic and the iteration converges).
  pi_.assign(V, 1.0 / static_cast<double>(V));
  std::vector<double> next(V);
  for (int it = 0; it < 100000; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (std::size_t i = 0; i < V; ++i)
      for (std::size_t j = 0; j < V; ++j) next[j] += pi_[i] * p_[i * V + j];
    double diff = 0.0;
    for (std::size_t j = 0; j < V; ++j) diff += std::abs(next[j] - pi_[j]);
    pi_.swap(next);
    if (diff < 1e-15) break;
  }
  for (std::size_t i = 0; i < V; ++i) {
    double h = 0.0;
    for (std::size_t j = 0; j < V; ++j) {
      const double q = p_[i * V + j];
      if (q > 0.0) h -= q * std::log(q);
    }
    entropy_ += pi_[i] * h;
  }
}

std::int64_t MarkovCorpus::draw(const double* probs, Rng& rng) const {
  const double u = rng.uniform();
  double c = 0.0;
  for (std::int64_t j = 0; j < vocab_; ++j) {
    c += probs[j];
    if (u < c) return j;
  }
  return vocab_ - 1;  // rounding left a sliver above the last cumulative sum
}

void MarkovCorpus::sample(std::span<std::int32_t> tokens, std::span<std::int32_t> targets,
                          std::int64_t batch, std::int64_t seq, Rng& rng) const {
  const auto n = static_cast<std::size_t>(batch * seq);
  if (batch < 1 || seq < 1 || tokens.size() != n || targets.size() != n)
    throw Error("MarkovCorpus::sample: tokens and targets must hold batch·seq = " +
                std::to_string(batch * seq) + " ids");
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int64_t x = draw(pi_.data(), rng);
    for (std::int64_t s = 0; s < seq; ++s) {
      const std::int64_t y = draw(&p_[static_cast<std::size_t>(x * vocab_)], rng);
      tokens[static_cast<std::size_t>(b * seq + s)] = static_cast<std::int32_t>(x);
      targets[static_cast<std::size_t>(b * seq + s)] = static_cast<std::int32_t>(y);
      x = y;
    }
  }
}

ByteCorpus ByteCorpus::from_file(const std::string& path) {
  // A regular file of at most kMaxBytes: a FIFO would hang, /dev/zero or a
  // huge sparse file would fill memory (read_input_file refuses them).
  const std::string text = read_input_file(path, kMaxBytes);
  if (text.size() < 2) throw InputError(path, "", "training data needs at least 2 bytes");
  return ByteCorpus(std::vector<std::uint8_t>(text.begin(), text.end()));
}

ByteCorpus::ByteCorpus(std::vector<std::uint8_t> bytes) : bytes_(std::move(bytes)) {
  if (bytes_.size() < 2) throw Error("ByteCorpus: needs at least 2 bytes");
}

void ByteCorpus::sample(std::span<std::int32_t> tokens, std::span<std::int32_t> targets,
                        std::int64_t batch, std::int64_t seq, Rng& rng) const {
  const auto n = static_cast<std::size_t>(batch * seq);
  if (batch < 1 || seq < 1 || tokens.size() != n || targets.size() != n)
    throw Error("ByteCorpus::sample: tokens and targets must hold batch·seq = " +
                std::to_string(batch * seq) + " ids");
  if (seq + 1 > size())
    throw Error("ByteCorpus::sample: windows of " + std::to_string(seq + 1) +
                " bytes do not fit a corpus of " + std::to_string(size()));
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto start = static_cast<std::size_t>(rng.below(size() - seq));
    for (std::int64_t s = 0; s < seq; ++s) {
      const auto k = static_cast<std::size_t>(b * seq + s);
      tokens[k] = bytes_[start + static_cast<std::size_t>(s)];
      targets[k] = bytes_[start + static_cast<std::size_t>(s) + 1];
    }
  }
}

}  // namespace strata::backend
