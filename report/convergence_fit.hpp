#pragma once
// What `strata fit-convergence` writes and prints (docs/time-to-train.md):
// the fitted convergence file, the steps-to-target table with the held-out
// errors, and the plot of measured steps against the fitted S(B).
#include <string>

#include "report/format.hpp"
#include "strategies/convergence_fit.hpp"

namespace strata::report {

// The fitted model (strategies::convergence_json's keys), then "fit" (what
// was trained, the held-out errors, the rates) and "measurements" (every
// run). A function of the record only: the same runs give the same bytes.
std::string fitted_convergence_json(const strategies::FitRecord& r);

// The measurements of a fitted file (its "fit" and "measurements"), ready
// for backend::cpu::refit: every field of the record's input but the
// optimizer, the base model and the source, and no outcome. Throws
// InputError naming the file and the JSON path.
strategies::FitRecord load_fit_record(const std::string& path);

// The steps-to-target table: per setting and batch the rate, the runs that
// reached the target, the mean (min–max) steps, the model's prediction and
// its error, held-out rows marked; then the fitted values and the held-out
// errors. Table (text), Markdown (for docs/accuracy.md) or CSV.
std::string render_fit(const strategies::FitRecord& r, Format f, bool markdown = false);

// Measured steps against the global batch (tokens), log-log, one colour per
// setting, with the fitted S(B) (times each setting's penalty) as lines.
std::string fit_plot_svg(const strategies::FitRecord& r);

}  // namespace strata::report
