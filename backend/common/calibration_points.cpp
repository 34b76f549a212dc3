#include "backend/common/calibration_points.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "costmodel/calibration.hpp"
#include "sim/error.hpp"

namespace strata::backend::calib {

std::string num(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

double round6(double v) { return std::stod(num(v)); }

void legalise(std::vector<Point>& pts, double cap, const std::string& what,
              std::vector<std::string>& notes) {
  int capped = 0, raised = 0;
  for (auto& p : pts) {
    if (!std::isfinite(p.eff) || p.eff > cap) {
      p.eff = cap;
      ++capped;
    }
    p.eff = std::max(p.eff, kMinEff);
  }
  for (std::size_t i = pts.size(); i-- > 1;) {
    // 1e-4 above the bound: the file's 6 significant digits stay inside it.
    const double least = pts[i].eff / (1.0 + std::log(pts[i].size / pts[i - 1].size)) * (1 + 1e-4);
    if (pts[i - 1].eff < least) {
      pts[i - 1].eff = std::min(cap, least);
      ++raised;
    }
  }
  if (capped > 0)
    notes.push_back(what + ": " + std::to_string(capped) + " point(s) above the peak clamped to " +
                    num(cap) + " of it");
  if (raised > 0)
    notes.push_back(what + ": " + std::to_string(raised) +
                    " smaller size(s) raised so that time grows with size");
}

std::vector<Point> increasing(std::vector<Point> pts) {
  std::vector<Point> out;
  for (const auto& p : pts)
    if (out.empty() || p.size > out.back().size) out.push_back(p);
  return out;
}

nlohmann::ordered_json table_points(const std::vector<Point>& pts, const char* key, double peak,
                                    bool gemm) {
  auto arr = nlohmann::ordered_json::array();
  for (const auto& p : pts) {
    nlohmann::ordered_json o;
    if (gemm && p.m > 0) {
      o["m"] = p.m;
      o["n"] = p.n;
      o["k"] = p.k;
    } else if (gemm) {
      // Square GEMMs: size = 2 n^3.
      const auto n = static_cast<std::int64_t>(std::llround(std::cbrt(p.size / 2.0)));
      o["m"] = n;
      o["n"] = n;
      o["k"] = n;
    } else {
      o["bytes"] = static_cast<std::int64_t>(std::llround(p.size));
    }
    o[key] = round6(p.eff * peak);
    arr.push_back(o);
  }
  return arr;
}

std::string checked_text(const nlohmann::ordered_json& j) {
  std::string text = j.dump(2) + "\n";
  // What we write must read back; if not, it is a bug here, not bad input.
  try {
    cost::parse_calibration_text(text, "calibrate output", cost::ideal_calibration());
  } catch (const InputError& e) {
    throw Error(std::string("calibrate: the calibration written does not read back: ") + e.what());
  }
  return text;
}

std::string cache_path(const std::string& file) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  std::filesystem::path base;
  if (xdg != nullptr && *xdg != '\0') {
    base = xdg;
  } else {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0')
      throw InputError("--calibration", "",
                       "no calibration file given and neither XDG_CACHE_HOME nor HOME is set for "
                       "the cached one");
    base = std::filesystem::path(home) / ".cache";
  }
  return (base / "strata" / file).string();
}

}  // namespace strata::backend::calib
