#include "sim/ranking.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sim/error.hpp"

namespace strata {
namespace {

TEST_CASE("Kendall's tau on known rankings") {
  // Same order: every pair concordant. Reversed: every pair discordant. One
  // adjacent swap among four: 5 concordant, 1 discordant of 6 pairs.
  const std::vector<double> a{1, 2, 3, 4};
  CHECK(kendall_tau(a, std::vector<double>{10, 20, 30, 40}) == doctest::Approx(1.0));
  CHECK(kendall_tau(a, std::vector<double>{4, 3, 2, 1}) == doctest::Approx(-1.0));
  CHECK(kendall_tau(a, std::vector<double>{1, 3, 2, 4}) == doctest::Approx(4.0 / 6.0));
  // tau-b with a tie in the first series: 5 concordant of 6 pairs, one tied
  // in a: 5 / sqrt(5 · 6).
  CHECK(kendall_tau(std::vector<double>{1, 2, 2, 3}, a) == doctest::Approx(5.0 / std::sqrt(30.0)));
  CHECK_THROWS_AS(kendall_tau(std::vector<double>{1}, std::vector<double>{1}), Error);
  CHECK_THROWS_AS(kendall_tau(a, std::vector<double>{1, 2}), Error);
  CHECK_THROWS_AS(kendall_tau(a, std::vector<double>{5, 5, 5, 5}), Error);
}

}  // namespace
}  // namespace strata
