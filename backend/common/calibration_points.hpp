#pragma once
// Writing measured points into a calibration file (docs/cost-model.md's
// schema) so that the reader accepts them: efficiencies clamped to its
// limits, sizes strictly increasing, time never falling as the size grows.
// Shared by `strata calibrate --backend cpu` (backend/cpu/calibrate.cpp) and
// the CUDA backend's calibration (backend/cuda/calibrate.cpp).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace strata::backend::calib {

// The reader's limits (costmodel/calibration_io.cpp), with a margin so a
// value written with 6 significant digits stays inside them.
inline constexpr double kMaxEff = 0.999;
inline constexpr double kMaxBusbwEff = 1.99;
inline constexpr double kMinEff = 1e-5;

// v with 6 significant digits, and its value read back.
std::string num(double v);
double round6(double v);

struct Point {
  double size = 0;  // the reader's size: 2mnk FLOPs or bytes
  double eff = 0;   // fraction of the table's peak
  // A GEMM point's shape; 0: a square one, m = n = k = cbrt(size / 2).
  std::int64_t m = 0, n = 0, k = 0;
};

// Clamps efficiencies into [kMinEff, cap] and then raises smaller sizes
// where the reader's rule e1 <= e0 (1 + ln(s1/s0)) would be broken (a bigger
// size may not take less time). Appends what it changed to `notes`.
void legalise(std::vector<Point>& pts, double cap, const std::string& what,
              std::vector<std::string>& notes);
// Keeps the points with strictly increasing sizes (sizes given in order).
std::vector<Point> increasing(std::vector<Point> pts);
// The points as the table's list: {"m","n","k", key} for GEMMs, else
// {"bytes", key}, each value eff·peak.
nlohmann::ordered_json table_points(const std::vector<Point>& pts, const char* key, double peak,
                                    bool gemm);
// Where `strata calibrate` caches a backend's file without --out:
// ${XDG_CACHE_HOME:-$HOME/.cache}/strata/<file>. Throws InputError when
// neither variable is set.
std::string cache_path(const std::string& file);

// The file's text; throws Error when it would not read back (a bug of the
// writer, not bad input).
std::string checked_text(const nlohmann::ordered_json& j);

}  // namespace strata::backend::calib
