#include "report/table.hpp"

#include <doctest/doctest.h>

namespace strata::report {
namespace {

Table sample() {
  Table t;
  t.columns = {"name", "value"};
  t.align = {Align::Left, Align::Right};
  t.add_row({"a", "1"});
  t.add_row({"long name", "12345"});
  return t;
}

TEST_CASE("text tables align columns") {
  // Widest cell sets each column's width; numbers right-aligned.
  CHECK(to_text(sample()) ==
        "name       value\n"
        "---------  -----\n"
        "a              1\n"
        "long name  12345\n");
}

TEST_CASE("CSV quotes separators, quotes and formula starts") {
  Table t;
  t.columns = {"x"};
  t.add_row({"a,b"});
  t.add_row({"say \"hi\""});
  t.add_row({"=HYPERLINK(1)"});
  t.add_row({"-1.5"});  // a number stays a number
  CHECK(to_csv(t) == "x\r\n\"a,b\"\r\n\"say \"\"hi\"\"\"\r\n\"'=HYPERLINK(1)\"\r\n-1.5\r\n");
}

TEST_CASE("Markdown escapes pipes and HTML") {
  Table t;
  t.columns = {"m"};
  t.add_row({"<script>a|b</script>"});
  CHECK(to_markdown(t) == "| m |\n|---|\n| &lt;script&gt;a\\|b&lt;/script&gt; |\n");
}

TEST_CASE("control characters never reach the terminal raw") {
  Table t;
  t.columns = {"m"};
  t.add_row({"a\x1b[31mb"});
  CHECK(to_text(t).find('\x1b') == std::string::npos);
}

TEST_CASE("printable: names in terminal text keep to one line and cannot recolour it") {
  CHECK(printable("m\x1b[31mred\nline2\x01 \xc3\x97") == "m\\x1b[31mred\\x0aline2\\x01 \xc3\x97");
}

TEST_CASE("CSV: only a real number is left bare; arithmetic and controls are neutralised") {
  // `-2+3` matches no number's grammar: a spreadsheet would compute it, so
  // it is text, prefixed. Control and bidirectional characters in text
  // cells are escaped as on a terminal (a right-to-left override would
  // make a cell read backwards).
  Table t;
  t.columns = {"x"};
  t.add_row({"-2+3"});
  t.add_row({"+1"});
  t.add_row({"2e-07"});
  t.add_row({"a\x1b[31m\nb"});
  t.add_row({"evil\xe2\x80\xaetxt.exe"});
  CHECK(to_csv(t) == "x\r\n\"'-2+3\"\r\n\"'+1\"\r\n2e-07\r\na\\x1b[31m\\x0ab\r\nevil\\u{202e}txt.exe\r\n");
}

TEST_CASE("printable: C1 controls, bidirectional controls and stray bytes are escaped") {
  // U+009B is a one-character CSI for terminals that take C1 controls; the
  // isolates and overrides reorder what follows; a byte that is not UTF-8
  // is shown as its value. Other characters pass (× is U+00D7).
  CHECK(printable("a\xc2\x9b" "31mb") == "a\\u{009b}31mb");
  CHECK(printable("x\xe2\x81\xa6y\xe2\x80\x8fz") == "x\\u{2066}y\\u{200f}z");
  CHECK(printable("\x9b" "2J \xc3") == "\\x9b2J \\xc3");
  CHECK(printable("\xc3\x97 \xe6\x97\xa5") == "\xc3\x97 \xe6\x97\xa5");
}

TEST_CASE("number formats") {
  CHECK(si(174.6e9) == "175G");
  CHECK(si(1.2345e9) == "1.23G");
  CHECK(si(12.34e6) == "12.3M");
  CHECK(si(42) == "42");
  CHECK(count(174.6e9) == "174.6B");
  CHECK(count(70.55e9) == "70.55B");
  CHECK(count(8.0302e9) == "8.030B");
  CHECK(count(124.4e6) == "124.4M");
  CHECK(count(999) == "999");
  CHECK(bytes_iec(512) == "512 B");
  CHECK(bytes_iec(1.5 * 1024 * 1024 * 1024) == "1.50 GiB");
  CHECK(fixed(3.14159, 2) == "3.14");
}

}  // namespace
}  // namespace strata::report
