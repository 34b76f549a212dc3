#pragma once
// Helpers for the CPU backend's tests: rank threads over one world, seeded
// random buffers and a central-difference gradient check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/comm.hpp"
#include "backend/common/rng.hpp"

namespace strata::backend::cpu::test {

// Runs fn(rank) on one thread per rank of `world`; a rank that throws
// cancels the world (so the others leave their collectives), and the first
// exception is rethrown here once every thread has ended.
inline void run_ranks(CommWorld& world, const std::function<void(int)>& fn) {
  const int n = world.size();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        world.cancel();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

inline std::vector<float> random_vec(std::size_t n, Rng& rng, double sd = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(sd * rng.normal());
  return v;
}

// Σ w·y in double: a scalar whose gradient with respect to y is w.
inline double dot(const std::vector<float>& w, const std::vector<float>& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) s += static_cast<double>(w[i]) * y[i];
  return s;
}

// Compares analytic[i] with the central difference (f(x+h) − f(x−h))/2h of
// the scalar f() for the entries `idx` of x (all when empty). fp32 forward
// passes: |a − n| <= atol + rtol·max(|a|, |n|).
template <class F>
void check_grad(const std::string& what, std::vector<float>& x,
                const std::vector<float>& analytic, F f, float h = 1e-2f, double atol = 2e-3,
                double rtol = 1e-2, std::vector<std::size_t> idx = {}) {
  REQUIRE(analytic.size() == x.size());
  if (idx.empty())
    for (std::size_t i = 0; i < x.size(); ++i) idx.push_back(i);
  int bad = 0;
  for (std::size_t i : idx) {
    const float v = x[i];
    x[i] = v + h;
    const double fp = f();
    x[i] = v - h;
    const double fm = f();
    x[i] = v;
    const double num = (fp - fm) / (2.0 * static_cast<double>(h));
    const double a = analytic[i];
    if (std::abs(a - num) > atol + rtol * std::max(std::abs(a), std::abs(num))) {
      if (++bad <= 5) FAIL_CHECK(what << "[" << i << "]: analytic " << a << ", numeric " << num);
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << idx.size() << " entries disagree");
}

// Largest |a − b| over the largest |b| of each tensor, over all tensors (by
// name; `where` gets the worst one's): how far an executor's gradients or
// parameters are from a reference's.
inline double worst_relative(const std::map<std::string, std::vector<float>>& a,
                             const std::map<std::string, std::vector<float>>& b, std::string* where) {
  double worst = 0;
  for (const auto& [name, ref] : b) {
    const auto& got = a.at(name);
    REQUIRE(got.size() == ref.size());
    double diff = 0, scale = 1e-6;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(got[i] - ref[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
    }
    if (diff / scale > worst) {
      worst = diff / scale;
      *where = name;
    }
  }
  return worst;
}

}  // namespace strata::backend::cpu::test
