// strata report DIR: the comparison report of an explore output directory.
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/html_report.hpp"

namespace strata::app {

namespace {

struct ReportArgs {
  std::string dir;
  std::string out;  // empty: DIR
};

std::string write_report(const ReportArgs& a) { return report::write_report(a.dir, a.out.empty() ? a.dir : a.out); }

}  // namespace

Command add_report(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  Subcommand cmd(app, "report",
                 "Compare the plans of an explore output directory: report.html (charts), "
                 "report.md and results.csv");
  cmd.option("DIR", a->dir, "An explore output directory").required();
  cmd.option("--out", a->out, "Write the files there instead of DIR").type_name("DIR2");
  return {cmd.cli(), [a] { return write_report(*a); }};
}

}  // namespace strata::app
