#include "sim/ranking.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "sim/error.hpp"

namespace strata {

double kendall_tau(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) throw Error("kendall_tau: series of different lengths");
  if (a.size() < 2) throw Error("kendall_tau: needs at least two values");
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0, pairs = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = i + 1; j < a.size(); ++j) {
      ++pairs;
      const double da = a[i] - a[j], db = b[i] - b[j];
      if (da == 0) ++ties_a;
      if (db == 0) ++ties_b;
      if (da == 0 || db == 0) continue;
      if ((da > 0) == (db > 0))
        ++concordant;
      else
        ++discordant;
    }
  const double denom = std::sqrt((pairs - ties_a) * (pairs - ties_b));
  if (!(denom > 0)) throw Error("kendall_tau: a series with every value equal has no ranking");
  return (concordant - discordant) / denom;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace strata
