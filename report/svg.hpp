#pragma once
// Inline SVG charts for the HTML report (docs/report.md): a scatter plot,
// horizontal stacked bars and a timeline of lanes. Each chart is one <svg>
// element with an accessible <title> and <desc>, a legend, and numbers
// written with fixed decimals, so the same data gives the same bytes.
// Every string from the data is escaped with escape_xml.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::report::svg {

// Text and attribute values for HTML/SVG: & < > " ' as entities; control
// characters (other than tab and newline) as a visible "\xNN".
std::string escape_xml(std::string_view s);

// A number for coordinates: at most `decimals` decimals, trailing zeros cut.
std::string num(double v, int decimals = 1);

// The categorical palette (ten colours) and a colour by index (wraps).
const std::vector<std::string>& palette();
const std::string& colour(std::size_t i);

struct LegendEntry {
  std::string label;
  std::string colour;
};

// --- scatter ---------------------------------------------------------------

struct ScatterSeries {
  std::string label;
  std::string colour;
  std::vector<std::pair<double, double>> points;  // (x, y) in data units
  bool line = false;  // also join the points, in order (a curve, not plans)
  bool dots = true;   // false (with line): the line alone, left out of the legend
};

struct Scatter {
  std::string title, desc;
  std::string x_label, y_label;
  bool log_x = false;
  bool log_y = false;  // otherwise y starts at 0
  // Small dots; points on one half pixel are drawn once. The legend keeps
  // this order; the largest series is drawn first with the largest dots.
  std::vector<ScatterSeries> series;
  std::string noun = "plans";  // what a dot is, in each series' tooltip
  // Highlighted points (the Pareto front): larger, outlined, joined by a line.
  std::vector<std::pair<double, double>> front;
  std::vector<std::string> front_titles;  // tooltip per front point
  std::optional<double> y_limit;          // a horizontal line (GPU capacity)
  std::string y_limit_label;
  std::optional<double> x_limit;          // a vertical line (GPU capacity), drawn when in range
  std::string x_limit_label;
};
std::string scatter(const Scatter& s);

// --- stacked horizontal bars --------------------------------------------------

struct StackedBar {
  std::string label;        // left of the bar
  std::vector<double> parts;  // one per Stacked::parts, in data units
  std::string note;         // right of the bar (the total, formatted)
};

struct Stacked {
  std::string title, desc;
  std::string x_label;
  std::vector<LegendEntry> parts;
  std::vector<StackedBar> bars;
  std::optional<double> limit;  // a vertical line (GPU capacity)
  std::string limit_label;
  double scale = 1.0;           // data units per axis unit (1 GiB for bytes)
};
std::string stacked_bars(const Stacked& s);

// --- timeline ---------------------------------------------------------------

struct Span {
  std::int64_t start = 0, end = 0;  // ns
  int kind = 0;                     // index into Timeline::kinds
  std::uint32_t tasks = 1;          // tasks aggregated into the span
};
struct Lane {
  std::string label;
  bool group_start = false;  // first lane of a pipeline stage: a separator above
  std::vector<Span> spans;
};
struct TimelineChart {
  std::string title, desc;
  std::int64_t end_ns = 0;
  std::vector<LegendEntry> kinds;
  std::vector<Lane> lanes;
  bool span_titles = true;  // a tooltip per span (off for very many spans)
};
std::string timeline(const TimelineChart& t);

}  // namespace strata::report::svg
