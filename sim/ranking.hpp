#pragma once
// Rank statistics, shared by the backends (validation, calibration) and
// report/ (validate-published's plans of one model, the HTML report):
// Kendall's rank correlation and the median.
#include <span>
#include <vector>

namespace strata {

// Kendall's rank correlation τ-b of two equally long series (ties counted
// per Kendall 1945); 1 when they order every pair alike, −1 when opposite.
// Throws Error for fewer than two values, different lengths, or a series
// whose values are all equal (it has no ranking).
double kendall_tau(std::span<const double> a, std::span<const double> b);

// The median (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> v);

}  // namespace strata
