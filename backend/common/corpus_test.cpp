#include "backend/common/corpus.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/error.hpp"

namespace strata::backend {
namespace {

TEST_CASE("cpu/corpus: Markov corpus: stochastic rows, stationary π, entropy rate bounds") {
  // Rows sum to 1 and πP = π; 0 < H < log V; sharpness 0 is the uniform
  // chain with H = log V exactly.
  const MarkovCorpus c(11, 42);
  const auto& pi = c.stationary();
  for (std::int64_t i = 0; i < 11; ++i) {
    double row = 0.0, col = 0.0;
    for (std::int64_t j = 0; j < 11; ++j) {
      row += c.transition(i, j);
      col += pi[static_cast<std::size_t>(j)] * c.transition(j, i);
    }
    CHECK(row == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(col == doctest::Approx(pi[static_cast<std::size_t>(i)]).epsilon(1e-10));
  }
  CHECK(c.entropy_rate() > 0.0);
  CHECK(c.entropy_rate() < std::log(11.0) - 0.3);
  CHECK(MarkovCorpus(11, 42, 0.0).entropy_rate() == doctest::Approx(std::log(11.0)));
  CHECK_THROWS_AS(MarkovCorpus(1, 1), Error);
}

TEST_CASE("cpu/corpus: Markov corpus: the true model's mean loss on samples is the entropy rate") {
  // −mean log P(target | token) over 40 000 sampled pairs converges to H
  // (standard error about 0.005 here).
  const MarkovCorpus c(11, 42);
  Rng rng(9);
  const std::int64_t batch = 100, seq = 400;
  std::vector<std::int32_t> x(batch * seq), y(batch * seq);
  c.sample(x, y, batch, seq, rng);
  double nll = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) nll -= std::log(c.transition(x[i], y[i]));
  CHECK(nll / static_cast<double>(x.size()) == doctest::Approx(c.entropy_rate()).epsilon(0.02));
  // Targets are the tokens shifted by one within each sequence.
  CHECK(x[1] == y[0]);
  CHECK(x[seq + 5] == y[seq + 4]);
}

TEST_CASE("cpu/corpus: byte corpus: windows of consecutive bytes; unreadable or short files are input errors") {
  // "abcdefgh": every window of 4 tokens is 4 consecutive letters and its
  // targets are the next 4; a window longer than the file throws.
  const auto path = std::filesystem::temp_directory_path() /
                    ("strata_byte_corpus_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(path, std::ios::binary);
    out << "abcdefgh";
  }
  const auto c = ByteCorpus::from_file(path.string());
  std::filesystem::remove(path);
  CHECK(c.size() == 8);
  Rng rng(1);
  std::vector<std::int32_t> x(3 * 4), y(x.size());
  c.sample(x, y, 3, 4, rng);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(y[i] == x[i] + 1);
    if (i % 4 != 0) CHECK(x[i] == x[i - 1] + 1);
    CHECK(x[i] >= 'a');
    CHECK(y[i] <= 'h');
  }
  std::vector<std::int32_t> x8(8), y8(8);
  CHECK_THROWS_AS(c.sample(x8, y8, 1, 8, rng), Error);
  CHECK_THROWS_AS(ByteCorpus::from_file(path.string()), InputError);
  CHECK_THROWS_AS(ByteCorpus({std::uint8_t{1}}), Error);
}

}  // namespace
}  // namespace strata::backend
