#include "report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "report/table.hpp"

namespace strata::report::svg {

namespace {

constexpr double kWidth = 880;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) near range / target.
double nice_step(double range, int target) {
  if (!(range > 0) || !std::isfinite(range)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double m = r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10;
  return m * mag;
}

// A tick label with as many decimals as the step needs.
std::string tick_label(double v, double step) {
  int decimals = 0;
  if (step < 1) decimals = std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  if (std::fabs(v) < step * 1e-6) v = 0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::vector<double> linear_ticks(double lo, double hi, int target, double* step_out) {
  const double step = nice_step(hi - lo, target);
  *step_out = step;
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string open_svg(double height, const std::string& title, const std::string& desc,
                     const std::string& id) {
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" viewBox=\"0 0 " +
                    num(kWidth, 0) + " " + num(height, 0) + "\" width=\"" + num(kWidth, 0) +
                    "\" height=\"" + num(height, 0) + "\" aria-labelledby=\"" + id + "-t " + id +
                    "-d\">";
  out += "<title id=\"" + id + "-t\">" + escape_xml(title) + "</title>";
  out += "<desc id=\"" + id + "-d\">" + escape_xml(desc) + "</desc>";
  return out;
}

// A chart id from its title: letters and digits only (ids need not be
// unique for the chart to render, but are kept distinct by title).
std::string chart_id(const std::string& title) {
  std::string id = "c";
  for (char c : title)
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) id += c;
  return id.substr(0, 40);
}

std::string text(double x, double y, const std::string& s, const char* anchor = "start",
                 const std::string& extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\"" + extra +
         ">" + escape_xml(s) + "</text>";
}

// Legend entries in rows from (x0, y); returns the height used.
double legend(std::string& out, const std::vector<LegendEntry>& entries, double x0, double y,
              double item_width = 170) {
  if (entries.empty()) return 0;
  const int per_row = std::max(1, static_cast<int>((kWidth - x0 - 10) / item_width));
  out += "<g class=\"legend\" font-size=\"12\">";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const double x = x0 + static_cast<double>(i % per_row) * item_width;
    const double yy = y + static_cast<double>(i / per_row) * 18;
    out += "<rect x=\"" + num(x) + "\" y=\"" + num(yy - 10) + "\" width=\"12\" height=\"12\" fill=\"" +
           escape_xml(entries[i].colour) + "\"/>";
    out += text(x + 17, yy, entries[i].label);
  }
  out += "</g>";
  const std::size_t rows = (entries.size() + per_row - 1) / per_row;
  return static_cast<double>(rows) * 18;
}

}  // namespace

std::string escape_xml(std::string_view s) {
  // Controls, bidirectional controls and bytes that are not UTF-8 shown as
  // the terminal output shows them (printable); tabs and newlines kept.
  std::string out;
  out.reserve(s.size());
  for (std::size_t at = 0;;) {
    const std::size_t ws = s.find_first_of("\t\n", at);
    for (const char c : printable(s.substr(at, ws == std::string_view::npos ? ws : ws - at))) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    if (ws == std::string_view::npos) return out;
    out += s[ws];
    at = ws + 1;
  }
}

std::string num(double v, int decimals) {
  if (!std::isfinite(v)) v = 0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

const std::vector<std::string>& palette() {
  static const std::vector<std::string> p = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                             "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                             "#9c755f", "#bab0ac"};
  return p;
}

const std::string& colour(std::size_t i) { return palette()[i % palette().size()]; }

namespace {
// 1, 2, 5 times powers of ten between 10^lo and 10^hi (only the powers over
// more than three decades).
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  for (int d = static_cast<int>(std::floor(lo)); d <= static_cast<int>(std::ceil(hi)); ++d)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, d);
      if (std::log10(v) < lo || std::log10(v) > hi) continue;
      if (hi - lo > 3 && m != 1.0) continue;
      t.push_back(v);
    }
  return t;
}
}  // namespace

std::string scatter(const Scatter& s) {
  const double x0 = 80, x1 = kWidth - 20, y0 = 20, y1 = 400;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = s.log_y ? -INFINITY : 0;
  auto see = [&](double x, double y) {
    if (!std::isfinite(x) || !std::isfinite(y) || (s.log_x && x <= 0) || (s.log_y && y <= 0)) return;
    xmin = std::min(xmin, x);
    xmax = std::max(xmax, x);
    ymin = std::min(ymin, y);
    ymax = std::max(ymax, y);
  };
  for (const auto& ser : s.series)
    for (const auto& [x, y] : ser.points) see(x, y);
  for (const auto& [x, y] : s.front) see(x, y);
  // The limit joins the axis when it is near the data; far above, it is named only.
  const bool limit_drawn = s.y_limit && (ymax <= 0 || *s.y_limit <= 2 * ymax);
  if (limit_drawn) ymax = std::max(ymax, *s.y_limit);
  if (!(xmin <= xmax)) xmin = 0, xmax = 1;
  double ylo = 0, yhi = 1;  // in axis units (log10 with log_y)
  if (s.log_y) {
    if (!(ymin <= ymax)) ymin = 1, ymax = 10;
    ylo = std::log10(ymin);
    yhi = std::log10(ymax);
    if (yhi - ylo < 1e-12) ylo -= 0.05, yhi += 0.05;
    const double ypad = (yhi - ylo) * 0.05;
    ylo -= ypad;
    yhi += ypad;
  } else {
    if (ymax <= 0) ymax = 1;
    yhi = ymax * 1.05;
  }
  std::vector<double> xticks;
  double xstep = 1;
  auto tx = [&](double x) { return s.log_x ? std::log10(x) : x; };
  double lo = tx(xmin), hi = tx(xmax);
  if (hi - lo < 1e-12) {
    lo -= s.log_x ? 0.05 : std::max(std::fabs(lo) * 0.05, 1e-9);
    hi += s.log_x ? 0.05 : std::max(std::fabs(hi) * 0.05, 1e-9);
  }
  const double pad = (hi - lo) * 0.04;
  lo -= pad;
  hi += pad;
  if (!s.log_x && xmin >= 0) lo = std::max(lo, 0.0);
  auto px = [&](double x) { return x0 + (tx(x) - lo) / (hi - lo) * (x1 - x0); };
  auto py = [&](double y) {
    const double v = s.log_y ? std::log10(y) : y;
    return y1 - (v - ylo) / (yhi - ylo) * (y1 - y0);
  };

  std::vector<LegendEntry> entries;
  for (const auto& ser : s.series)
    if (ser.dots) entries.push_back({ser.label, ser.colour});
  const std::size_t per_row = static_cast<std::size_t>((kWidth - x0 - 10) / 170);
  const double legend_h = entries.empty() ? 0 : static_cast<double>((entries.size() + per_row - 1) / per_row) * 18;
  const double height = y1 + 60 + legend_h + (s.front.empty() ? 0 : 18);
  std::string out = open_svg(height, s.title, s.desc, chart_id(s.title));
  out += "<g font-size=\"12\" fill=\"#333\">";
  // Axes and grid.
  double ystep = 1;
  for (double v : s.log_y ? log_ticks(ylo, yhi) : linear_ticks(0, yhi, 6, &ystep)) {
    out += "<line x1=\"" + num(x0) + "\" x2=\"" + num(x1) + "\" y1=\"" + num(py(v)) + "\" y2=\"" +
           num(py(v)) + "\" stroke=\"#e4e4e4\"/>";
    out += text(x0 - 6, py(v) + 4, s.log_y ? tick_label(v, v) : tick_label(v, ystep), "end");
  }
  if (s.log_x) {
    xticks = log_ticks(lo, hi);
    xstep = xticks.empty() ? 1 : std::min(1.0, xticks.front());
  } else {
    xticks = linear_ticks(lo, hi, 8, &xstep);
  }
  for (double v : xticks) {
    out += "<line x1=\"" + num(px(v)) + "\" x2=\"" + num(px(v)) + "\" y1=\"" + num(y0) +
           "\" y2=\"" + num(y1) + "\" stroke=\"#e4e4e4\"/>";
    out += text(px(v), y1 + 16, s.log_x ? tick_label(v, v) : tick_label(v, xstep), "middle");
  }
  out += "<line x1=\"" + num(x0) + "\" x2=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" y2=\"" + num(y1) +
         "\" stroke=\"#555\"/>";
  out += "<line x1=\"" + num(x0) + "\" x2=\"" + num(x0) + "\" y1=\"" + num(y0) + "\" y2=\"" + num(y1) +
         "\" stroke=\"#555\"/>";
  out += text((x0 + x1) / 2, y1 + 36, s.x_label + (s.log_x ? " (log scale)" : ""), "middle");
  out += "<text transform=\"translate(16 " + num((y0 + y1) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape_xml(s.y_label + (s.log_y ? " (log scale)" : "")) +
         "</text>";
  out += "</g>";
  if (limit_drawn) {
    const double y = py(*s.y_limit);
    out += "<line x1=\"" + num(x0) + "\" x2=\"" + num(x1) + "\" y1=\"" + num(y) + "\" y2=\"" + num(y) +
           "\" stroke=\"#c00\" stroke-dasharray=\"6 4\"/>";
    out += text(x1 - 4, y - 5, s.y_limit_label, "end", " font-size=\"12\" fill=\"#c00\"");
  } else if (s.y_limit) {
    out += text(x1 - 4, y0 + 12, s.y_limit_label + " (above the chart)", "end",
                " font-size=\"12\" fill=\"#c00\"");
  }
  if (s.x_limit && px(*s.x_limit) >= x0 && px(*s.x_limit) <= x1) {
    const double x = px(*s.x_limit);
    out += "<line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(y0) + "\" y2=\"" + num(y1) +
           "\" stroke=\"#c00\" stroke-dasharray=\"6 4\"/>";
    out += text(x - 4, y0 + 12, s.x_limit_label, "end", " font-size=\"12\" fill=\"#c00\"");
  }
  // Curves under the dots; a line alone carries its label as a tooltip.
  for (const auto& ser : s.series) {
    if (!ser.line) continue;
    std::string pts;
    for (const auto& [x, y] : ser.points)
      if (std::isfinite(x) && std::isfinite(y) && !(s.log_x && x <= 0) && !(s.log_y && y <= 0))
        pts += (pts.empty() ? "" : " ") + num(px(x)) + "," + num(py(y));
    if (pts.empty()) continue;
    out += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + escape_xml(ser.colour) +
           "\" stroke-width=\"1.5\" stroke-opacity=\"0.8\"";
    out += ser.dots ? "/>" : "><title>" + escape_xml(ser.label) + "</title></polyline>";
  }
  // Points: one path per series of zero-length segments with round caps (a
  // dot each); points falling on the same half pixel are drawn once. Each
  // series is drawn with smaller dots than the one before, so plans of two
  // series at the same spot show as a dot in a ring.
  // Larger series first, so small ones stay visible on top.
  std::vector<std::size_t> draw(s.series.size());
  for (std::size_t i = 0; i < draw.size(); ++i) draw[i] = i;
  std::stable_sort(draw.begin(), draw.end(), [&](std::size_t a, std::size_t b) {
    return s.series[a].points.size() > s.series[b].points.size();
  });
  for (std::size_t si = 0; si < draw.size(); ++si) {
    const auto& ser = s.series[draw[si]];
    if (!ser.dots) continue;
    const double dot = std::max(2.5, 6.0 - 1.3 * static_cast<double>(si));
    std::unordered_set<std::int64_t> seen;
    std::string d;
    for (const auto& [x, y] : ser.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || (s.log_x && x <= 0) || (s.log_y && y <= 0)) continue;
      const double X = px(x), Y = py(y);
      const std::int64_t key = static_cast<std::int64_t>(std::lround(X * 2)) * 100000 +
                               static_cast<std::int64_t>(std::lround(Y * 2));
      if (!seen.insert(key).second) continue;
      d += "M" + num(X) + " " + num(Y) + "h0";
    }
    if (d.empty()) continue;
    out += "<path class=\"dots\" d=\"" + d + "\" stroke=\"" + escape_xml(ser.colour) +
           "\" stroke-width=\"" + num(dot) + "\" stroke-linecap=\"round\" stroke-opacity=\"0.75\" fill=\"none\"><title>" +
           escape_xml(ser.label) + " (" + std::to_string(ser.points.size()) +
           (ser.line ? " points" : " " + escape_xml(s.noun)) + ")</title></path>";
  }
  if (!s.front.empty()) {
    std::string pts;
    for (const auto& [x, y] : s.front) pts += (pts.empty() ? "" : " ") + num(px(x)) + "," + num(py(y));
    out += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"#111\" stroke-width=\"1.2\"/>";
    out += "<g class=\"front\">";
    for (std::size_t i = 0; i < s.front.size(); ++i) {
      out += "<circle cx=\"" + num(px(s.front[i].first)) + "\" cy=\"" + num(py(s.front[i].second)) +
             "\" r=\"5\" fill=\"none\" stroke=\"#111\" stroke-width=\"1.6\">";
      if (i < s.front_titles.size()) out += "<title>" + escape_xml(s.front_titles[i]) + "</title>";
      out += "</circle>";
    }
    out += "</g>";
  }
  double ly = y1 + 58;
  if (!s.front.empty()) {
    out += "<g font-size=\"12\"><circle cx=\"" + num(x0 + 6) + "\" cy=\"" + num(ly - 4) +
           "\" r=\"5\" fill=\"none\" stroke=\"#111\" stroke-width=\"1.6\"/>" +
           text(x0 + 17, ly, "Pareto front (no plan is both faster and smaller)") + "</g>";
    ly += 18;
  }
  legend(out, entries, x0, ly);
  out += "</svg>";
  return out;
}

std::string stacked_bars(const Stacked& s) {
  const double label_w = 230, x0 = label_w + 8, x1 = kWidth - 110, y0 = 24, bar_h = 18, gap = 8;
  double max_total = 0;
  for (const auto& b : s.bars) {
    double t = 0;
    for (double p : b.parts) t += std::max(0.0, p);
    max_total = std::max(max_total, t);
  }
  const bool limit_drawn = s.limit && (max_total <= 0 || *s.limit <= 2 * max_total);
  if (limit_drawn) max_total = std::max(max_total, *s.limit);
  double xmax = max_total / s.scale * 1.05;
  if (!(xmax > 0)) xmax = 1;
  auto px = [&](double v) { return x0 + v / s.scale / xmax * (x1 - x0); };
  const double y1 = y0 + static_cast<double>(s.bars.size()) * (bar_h + gap);
  const std::size_t per_row = static_cast<std::size_t>((kWidth - 10 - 10) / 170);
  const double legend_h = static_cast<double>((s.parts.size() + per_row - 1) / per_row) * 18;
  const double height = y1 + 46 + legend_h + 10;
  std::string out = open_svg(height, s.title, s.desc, chart_id(s.title));
  out += "<g font-size=\"12\" fill=\"#333\">";
  double step = 1;
  for (double v : linear_ticks(0, xmax, 8, &step)) {
    const double x = x0 + v / xmax * (x1 - x0);
    out += "<line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(y0 - 6) + "\" y2=\"" +
           num(y1) + "\" stroke=\"#e4e4e4\"/>";
    out += text(x, y1 + 16, tick_label(v, step), "middle");
  }
  out += text((x0 + x1) / 2, y1 + 34, s.x_label, "middle");
  out += "</g>";
  for (std::size_t i = 0; i < s.bars.size(); ++i) {
    const auto& b = s.bars[i];
    const double y = y0 + static_cast<double>(i) * (bar_h + gap);
    out += "<g class=\"bar\">";
    out += text(label_w, y + 13, b.label, "end", " font-size=\"12\"");
    double acc = 0;
    for (std::size_t p = 0; p < b.parts.size() && p < s.parts.size(); ++p) {
      const double v = std::max(0.0, b.parts[p]);
      if (v <= 0) continue;
      const double xa = px(acc), xb = px(acc + v);
      out += "<rect x=\"" + num(xa, 2) + "\" y=\"" + num(y) + "\" width=\"" +
             num(std::max(xb - xa, 0.0), 2) + "\" height=\"" + num(bar_h) + "\" fill=\"" +
             escape_xml(s.parts[p].colour) + "\"><title>" + escape_xml(b.label) + ": " +
             escape_xml(s.parts[p].label) + " " + tick_label(v / s.scale, 0.001) + "</title></rect>";
      acc += v;
    }
    out += text(px(acc) + 6, y + 13, b.note, "start", " font-size=\"12\"");
    out += "</g>";
  }
  if (s.limit && !limit_drawn) {
    out += text(x1 + 100, y0 - 12, s.limit_label + " (beyond the axis)", "end",
                " font-size=\"12\" fill=\"#c00\"");
  } else if (s.limit) {
    const double x = px(*s.limit);
    out += "<line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(y0 - 10) + "\" y2=\"" +
           num(y1) + "\" stroke=\"#c00\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>";
    out += text(x, y0 - 12, s.limit_label, "middle", " font-size=\"12\" fill=\"#c00\"");
  }
  legend(out, s.parts, 10, y1 + 56);
  out += "</svg>";
  return out;
}

std::string timeline(const TimelineChart& t) {
  const double label_w = 120, x0 = label_w + 6, x1 = kWidth - 14, y0 = 10, lane_h = 12, gap = 3;
  const double end = t.end_ns > 0 ? static_cast<double>(t.end_ns) : 1;
  const bool in_s = end >= 2e9;
  const double unit = in_s ? 1e9 : 1e6;
  auto px = [&](double ns) { return x0 + ns / end * (x1 - x0); };
  double y = y0;
  std::vector<double> lane_y;
  for (const auto& l : t.lanes) {
    if (l.group_start && y > y0) y += 6;
    lane_y.push_back(y);
    y += lane_h + gap;
  }
  const double y1 = y;
  const std::size_t per_row = static_cast<std::size_t>((kWidth - 10 - 10) / 150);
  const double legend_h = static_cast<double>((t.kinds.size() + per_row - 1) / per_row) * 18;
  const double height = y1 + 44 + legend_h + 10;
  std::string out = open_svg(height, t.title, t.desc, chart_id(t.title));
  out += "<g font-size=\"11\" fill=\"#333\">";
  double step = 1;
  for (double v : linear_ticks(0, end / unit, 10, &step)) {
    const double x = px(v * unit);
    out += "<line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(y0) + "\" y2=\"" +
           num(y1) + "\" stroke=\"#e4e4e4\"/>";
    out += text(x, y1 + 14, tick_label(v, step), "middle");
  }
  out += text((x0 + x1) / 2, y1 + 30, in_s ? "time in the step (s)" : "time in the step (ms)",
              "middle", " font-size=\"12\"");
  out += "</g>";
  for (std::size_t i = 0; i < t.lanes.size(); ++i) {
    const auto& l = t.lanes[i];
    const double ly = lane_y[i];
    if (l.group_start && i > 0)
      out += "<line x1=\"0\" x2=\"" + num(x1) + "\" y1=\"" + num(ly - 4.5) + "\" y2=\"" + num(ly - 4.5) +
             "\" stroke=\"#bbb\"/>";
    out += text(label_w, ly + 10, l.label, "end", " font-size=\"11\"");
    out += "<rect x=\"" + num(x0) + "\" y=\"" + num(ly) + "\" width=\"" + num(x1 - x0) +
           "\" height=\"" + num(lane_h) + "\" fill=\"#f4f4f4\"/>";
    // One group per kind keeps the fill attribute out of every rectangle.
    for (std::size_t k = 0; k < t.kinds.size(); ++k) {
      std::string rects;
      for (const auto& sp : l.spans) {
        if (sp.kind != static_cast<int>(k)) continue;
        const double xa = px(static_cast<double>(sp.start));
        const double w = std::max(px(static_cast<double>(sp.end)) - xa, 0.3);
        rects += "<rect x=\"" + num(xa, 2) + "\" y=\"" + num(ly) + "\" width=\"" + num(w, 2) +
                 "\" height=\"" + num(lane_h) + "\"";
        if (t.span_titles) {
          rects += "><title>" + escape_xml(l.label) + ": " + escape_xml(t.kinds[k].label) + " " +
                   fmt("%.3f", static_cast<double>(sp.start) / 1e6) + "–" +
                   fmt("%.3f", static_cast<double>(sp.end) / 1e6) + " ms (" +
                   std::to_string(sp.tasks) + (sp.tasks == 1 ? " task" : " tasks") + ")</title></rect>";
        } else {
          rects += "/>";
        }
      }
      if (!rects.empty())
        out += "<g fill=\"" + escape_xml(t.kinds[k].colour) + "\">" + rects + "</g>";
    }
  }
  legend(out, t.kinds, 10, y1 + 54, 150);
  out += "</svg>";
  return out;
}

}  // namespace strata::report::svg
