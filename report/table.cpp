#include "report/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "sim/text.hpp"

namespace strata::report {

namespace {

// Display width in terminal columns: counts UTF-8 code points, not bytes.
std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

Align align_of(const Table& t, std::size_t col) {
  return col < t.align.size() ? t.align[col] : Align::Left;
}

}  // namespace

namespace {

// Characters that change how a terminal or an editor shows the text after
// them: C0 and C1 controls, DEL, and the bidirectional overrides, embeddings,
// isolates and marks (which can make text read in another order than it is).
bool is_control(char32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E ||
         cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (std::size_t i = 0; i < s.size();) {
    const auto [cp, n] = sim::utf8_at(s, i);
    if (n == 0) {  // not UTF-8: the byte, escaped (a raw 0x9B is a terminal's CSI)
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
      continue;
    }
    if (is_control(cp)) {
      if (cp < 0x80)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      else
        std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string to_text(const Table& t) {
  const std::size_t ncol = t.columns.size();
  std::vector<std::vector<std::string>> cells;
  cells.reserve(t.rows.size() + 1);
  cells.push_back({});
  for (const auto& c : t.columns) cells.back().push_back(printable(c));
  for (const auto& r : t.rows) {
    cells.push_back({});
    for (std::size_t i = 0; i < ncol; ++i) cells.back().push_back(i < r.size() ? printable(r[i]) : "");
  }
  std::vector<std::size_t> w(ncol, 0);
  for (const auto& r : cells)
    for (std::size_t i = 0; i < ncol; ++i) w[i] = std::max(w[i], width(r[i]));
  std::string out;
  auto emit = [&](const std::vector<std::string>& r) {
    std::string line;
    for (std::size_t i = 0; i < ncol; ++i) {
      const std::string pad(w[i] - width(r[i]), ' ');
      if (i) line += "  ";
      line += align_of(t, i) == Align::Right ? pad + r[i] : r[i] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(cells[0]);
  std::string rule;
  for (std::size_t i = 0; i < ncol; ++i) rule += (i ? "  " : "") + std::string(w[i], '-');
  out += rule + "\n";
  for (std::size_t r = 1; r < cells.size(); ++r) emit(cells[r]);
  return out;
}

namespace {

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool is_number(std::string_view v) {
  std::size_t i = 0;
  auto digits = [&] {
    const std::size_t from = i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    return i > from;
  };
  if (i < v.size() && v[i] == '-') ++i;
  if (i < v.size() && v[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < v.size() && v[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == v.size();
}

}  // namespace

std::string to_csv(const Table& t) {
  auto cell = [](const std::string& s) {
    // Quote when needed; a leading =, +, - or @ would run as a formula in a
    // spreadsheet, so such text cells are quoted and prefixed with '.
    // A number is a JSON number (-1.5, 2e-07): `-2+3` or `+1` is text.
    const bool numeric = is_number(s);
    // Text cells as on a terminal: no control or bidirectional character raw.
    std::string v = numeric ? s : printable(s);
    bool quote = v.find_first_of(",\"\n\r") != std::string::npos;
    if (!numeric && !v.empty() && std::string("=+-@\t\r").find(v[0]) != std::string::npos) {
      v = "'" + v;
      quote = true;
    }
    if (!quote) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::string out;
  auto emit = [&](const std::vector<std::string>& r) {
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
      if (i) out += ',';
      out += cell(i < r.size() ? r[i] : "");
    }
    out += "\r\n";
  };
  emit(t.columns);
  for (const auto& r : t.rows) emit(r);
  return out;
}

std::string to_markdown(const Table& t) {
  auto cell = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      switch (c) {
        case '|': out += "\\|"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '&': out += "&amp;"; break;
        case '\n': out += "<br>"; break;
        case '\\': case '`': case '*': case '_': case '[': case ']':
          out += '\\';
          out += c;
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) break;
          out += c;
      }
    }
    return out;
  };
  std::string out = "|";
  for (const auto& c : t.columns) out += " " + cell(c) + " |";
  out += "\n|";
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    out += align_of(t, i) == Align::Right ? "---:|" : "---|";
  out += "\n";
  for (const auto& r : t.rows) {
    out += "|";
    for (std::size_t i = 0; i < t.columns.size(); ++i) out += " " + cell(i < r.size() ? r[i] : "") + " |";
    out += "\n";
  }
  return out;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string si(double v) {
  static const char* suffix[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
  if (!std::isfinite(v)) return v > 0 ? "inf" : (v < 0 ? "-inf" : "nan");
  int i = 0;
  double a = std::fabs(v);
  while (a >= 999.5 && i < 7) {
    a /= 1000;
    v /= 1000;
    ++i;
  }
  char buf[64];
  if (i == 0 && a == std::floor(a))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, a >= 99.95 ? "%.0f%s" : a >= 9.995 ? "%.1f%s" : "%.2f%s", v, suffix[i]);
  return buf;
}

std::string count(double v) {
  static const char* suffix[] = {"", "K", "M", "B", "T", "Q"};
  int i = 0;
  while (std::fabs(v) >= 999.95 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, std::fabs(v) >= 99.995 ? "%.1f%s" : std::fabs(v) >= 9.9995 ? "%.2f%s" : "%.3f%s", v, suffix[i]);
  return buf;
}

std::string bytes_iec(double b) {
  static const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int i = 0;
  while (std::fabs(b) >= 1024 && i < 6) {
    b /= 1024;
    ++i;
  }
  char buf[64];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", b, unit[i]);
  return buf;
}

std::string duration_text(double seconds) {
  if (seconds >= 86400) return fixed(seconds / 86400, 2) + " days";
  if (seconds >= 3600) return fixed(seconds / 3600, 2) + " h";
  if (seconds >= 60) return fixed(seconds / 60, 1) + " min";
  return fixed(seconds, 1) + " s";
}

}  // namespace strata::report
