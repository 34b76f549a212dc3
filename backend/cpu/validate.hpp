#pragma once
// `strata validate SCENARIO --backend cpu`: the shared driver
// (backend/common/validate.hpp) on the CPU executor.
#include "backend/common/validate.hpp"
#include "backend/cpu/executor.hpp"

namespace strata::backend::cpu {

// The shared driver's names, as the application spells them (cpu::).
using backend::check_validate_options;
using backend::kendall_tau;
using backend::render_validate_json;
using backend::render_validate_table;
using backend::validate;
using backend::ValidateOptions;
using backend::ValidateReport;
using backend::WorkKind;
using backend::work_kind;
using backend::work_kind_name;

// Runs the prediction and the measurement on a CPU executor built with
// opts.seed. Throws Error for what the executor refuses, and when its task
// graph differs from the prediction's.
ValidateReport validate(const strategies::Scenario& sc, const ValidateOptions& opts = {});

}  // namespace strata::backend::cpu
