#include "report/svg.hpp"

#include <doctest/doctest.h>

namespace strata::report::svg {
namespace {

std::size_t occurrences(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

TEST_CASE("escape_xml turns markup, quotes and control characters into inert text") {
  // The five XML specials become entities; a control character (BEL) becomes
  // visible text, since it is not allowed in HTML or XML at all.
  CHECK(escape_xml("<script>alert('x')</script> & \"q\"\x07") ==
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;\\x07");
  CHECK(escape_xml("tab\tand\nnewline") == "tab\tand\nnewline");
  CHECK(escape_xml("") == "");
  // Bidirectional controls would show a name in another order than it is
  // (U+202E RIGHT-TO-LEFT OVERRIDE, U+2066 LEFT-TO-RIGHT ISOLATE), C1
  // controls and bytes that are not UTF-8 are not text: each is shown as
  // the terminal output shows it (printable, report/table.hpp). Other
  // non-ASCII text stays as it is.
  CHECK(escape_xml("plan\u202E<b>\u2066x") == "plan\\u{202e}&lt;b&gt;\\u{2066}x");
  CHECK(escape_xml("\xff\xc2\x9b" "1") == "\\xff\\u{009b}1");
  CHECK(escape_xml("Zürich — 東京") == "Zürich — 東京");
}

TEST_CASE("num prints coordinates without trailing zeros") {
  CHECK(num(1.5) == "1.5");
  CHECK(num(2.0) == "2");
  CHECK(num(-0.01) == "0");  // rounds to -0.0, printed as 0
  CHECK(num(3.14159, 2) == "3.14");
}

TEST_CASE("scatter draws one dot per distinct pixel, the front and a legend") {
  // Three points, two of them on the same spot: two dots ("h0" segments).
  Scatter s;
  s.title = "t <1>";
  s.desc = "d";
  s.x_label = "x";
  s.y_label = "y";
  s.series.push_back({"a", "#111111", {{1, 1}, {1, 1}, {2, 3}}});
  s.front = {{1, 1}, {2, 3}};
  s.front_titles = {"p1", "p2"};
  s.y_limit = 4;
  s.y_limit_label = "cap";
  const std::string out = scatter(s);
  CHECK(out.rfind("<svg", 0) == 0);
  CHECK(out.find("<title id=\"ct1-t\">t &lt;1&gt;</title>") != std::string::npos);
  CHECK(out.find("<desc") != std::string::npos);
  CHECK(occurrences(out, "h0") == 2);
  CHECK(occurrences(out, "<circle") == 3);  // two front points and the legend's marker
  CHECK(out.find("stroke-dasharray") != std::string::npos);  // the capacity line
  CHECK(out.find("</svg>") == out.size() - 6);
}

TEST_CASE("stacked bars draw a rectangle per non-zero part") {
  // Bars {1, 0, 2} and {3, 1, 0}: four non-zero parts, plus three legend swatches.
  Stacked s;
  s.title = "m";
  s.parts = {{"a", "#1"}, {"b", "#2"}, {"c", "#3"}};
  s.bars = {{"p1", {1, 0, 2}, "3"}, {"p2", {3, 1, 0}, "4"}};
  const std::string out = stacked_bars(s);
  CHECK(occurrences(out, "<rect") == 4 + 3);
  CHECK(occurrences(out, "<title>p1: ") == 2);
}

TEST_CASE("timeline draws a rectangle per span, grouped by kind") {
  // Two lanes with 2 and 1 spans; one background rectangle per lane; two
  // legend swatches.
  TimelineChart t;
  t.title = "tl";
  t.end_ns = 1000;
  t.kinds = {{"fwd", "#a"}, {"bwd", "#b"}};
  t.lanes = {{"s0 compute", true, {{0, 400, 0, 2}, {400, 1000, 1, 1}}},
             {"s1 compute", true, {{100, 500, 0, 1}}}};
  const std::string out = timeline(t);
  CHECK(occurrences(out, "<rect") == 3 + 2 + 2);
  CHECK(out.find("(2 tasks)") != std::string::npos);
  CHECK(out.find("time in the step (ms)") != std::string::npos);
}


TEST_CASE("scatter on log-log axes with a fitted curve") {
  // Points at y = 10 and 1000 on a log y axis, with y = 100 a gridline; a
  // line-only series is one polyline with its label, not in the legend.
  Scatter s;
  s.title = "fit";
  s.x_label = "batch";
  s.y_label = "steps";
  s.log_x = s.log_y = true;
  s.series.push_back({"none", "#222222", {{10, 10}, {1000, 1000}}});
  s.series.push_back({"none: fitted", "#222222", {{10, 10}, {100, 100}, {1000, 1000}}, true, false});
  const std::string out = scatter(s);
  CHECK(out.find("steps (log scale)") != std::string::npos);
  CHECK(out.find(">100<") != std::string::npos);  // a 1-2-5 tick on the log y axis
  CHECK(occurrences(out, "<polyline") == 1);
  CHECK(out.find("stroke-opacity=\"0.8\"><title>none: fitted</title>") != std::string::npos);
  CHECK(occurrences(out, "none: fitted") == 1);
}

}  // namespace
}  // namespace strata::report::svg
