// strata report DIR: the comparison report of an explore output directory.
#include <functional>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/html_report.hpp"

namespace strata::app {

namespace {

struct ReportArgs {
  std::string dir;
  std::string out;  // empty: DIR
  bool quiet = false;
};

std::string write_report(const ReportArgs& a) {
  PhaseLine line("report", a.quiet);
  try {
    std::string out = report::write_report(a.dir, a.out.empty() ? a.dir : a.out, std::ref(line));
    line.finish();
    return out;
  } catch (...) {
    line.finish();
    throw;
  }
}

}  // namespace

Command add_report(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  Subcommand cmd(app, "report",
                 "Compare the plans of an explore output directory: report.html (charts), "
                 "report.md and results.csv");
  cmd.option("DIR", a->dir, "An explore output directory").required();
  cmd.option("--out", a->out, "Write the files there instead of DIR").type_name("DIR2");
  cmd.flag("--quiet", a->quiet, "No progress lines on standard error");
  return {cmd.cli(), [a] { return write_report(*a); }};
}

}  // namespace strata::app
