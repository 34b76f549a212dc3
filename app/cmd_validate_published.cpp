// strata validate-published FILE: predictions of published runs and their errors.
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/published.hpp"

namespace strata::app {

namespace {

struct PublishedArgs {
  std::string cases;  // published_cases.json
  bool markdown = false;
  report::Format format = report::Format::Table;
};

std::string validate_published(const PublishedArgs& a) {
  const auto r = report::validate_published(a.cases);
  return a.markdown ? report::published_markdown(r) : report::render_published(r, a.format);
}

}  // namespace

Command add_validate_published(CLI::App& app) {
  auto a = std::make_shared<PublishedArgs>();
  Subcommand cmd(app, "validate-published", "Predict the published runs of a cases file and report the errors");
  cmd.option("FILE", a->cases, "published_cases.json").required();
  cmd.flag("--markdown", a->markdown, "Print the table as Markdown (docs/accuracy.md)");
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a] { return validate_published(*a); }};
}

}  // namespace strata::app
