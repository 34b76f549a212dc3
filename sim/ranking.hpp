#pragma once
// Rank correlation, shared by the CPU backend's validation (predicted
// against measured step times of a plan matrix) and validate-published
// (plans of one model ranked by prediction and by measurement).
#include <span>

namespace strata {

// Kendall's rank correlation τ-b of two equally long series (ties counted
// per Kendall 1945); 1 when they order every pair alike, −1 when opposite.
// Throws Error for fewer than two values, different lengths, or a series
// whose values are all equal (it has no ranking).
double kendall_tau(std::span<const double> a, std::span<const double> b);

}  // namespace strata
