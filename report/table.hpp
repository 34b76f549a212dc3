#pragma once
// A plain table of strings and its renderings: aligned text for terminals,
// CSV (RFC 4180) and Markdown. Every cell is escaped for its format.
#include <string>
#include <string_view>
#include <vector>

namespace strata::report {

enum class Align { Left, Right };

struct Table {
  std::vector<std::string> columns;
  std::vector<Align> align;  // per column; missing entries are Left
  std::vector<std::vector<std::string>> rows;

  void add_row(std::vector<std::string> row) { rows.push_back(std::move(row)); }
};

std::string to_text(const Table& t);
// Text for a terminal: control characters (ESC, newlines, …, DEL) and bytes
// that are not UTF-8 shown as \xNN, C1 controls and bidirectional controls
// (overrides, embeddings, isolates, marks) as \u{XXXX}, so a name from the
// input cannot move the cursor, recolour, add lines or reorder what follows.
std::string printable(std::string_view s);
// RFC 4180; a cell is bare only when it is a number by JSON's grammar. Text
// cells go through printable and, starting with = + - @ (a formula to a
// spreadsheet), get a leading '.
std::string to_csv(const Table& t);
std::string to_markdown(const Table& t);

// Number formatting shared by every report.
std::string fixed(double v, int decimals);
// 3 significant digits with an SI suffix: 1.23k, 45.6M, 7.89G, 1.02T, 3.4P.
std::string si(double v);
// A count (parameters) with K/M/B/T and four significant digits: 174.6B.
std::string count(double v);
// Bytes in binary units: 512 B, 1.50 KiB, 2.25 GiB.
std::string bytes_iec(double bytes);
// A duration in the largest unit that keeps it >= 1: 45.0 s, 12.5 min, 3.20 h, 9.81 days.
std::string duration_text(double seconds);

}  // namespace strata::report
