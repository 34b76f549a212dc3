#include "backend/common/validate.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sim/error.hpp"

namespace strata::backend {
namespace {

TEST_CASE("cpu/validate: Kendall's tau on known rankings") {
  // Same order: every pair concordant. Reversed: every pair discordant. One
  // adjacent swap among four: 5 concordant, 1 discordant of 6 pairs.
  const std::vector<double> a{1, 2, 3, 4};
  CHECK(kendall_tau(a, std::vector<double>{10, 20, 30, 40}) == doctest::Approx(1.0));
  CHECK(kendall_tau(a, std::vector<double>{4, 3, 2, 1}) == doctest::Approx(-1.0));
  CHECK(kendall_tau(a, std::vector<double>{1, 3, 2, 4}) == doctest::Approx(4.0 / 6.0));
  // tau-b with a tie in the first series: 5 concordant of 6 pairs, one tied
  // in a: 5 / sqrt(5 · 6).
  CHECK(kendall_tau(std::vector<double>{1, 2, 2, 3}, a) == doctest::Approx(5.0 / std::sqrt(30.0)));
  CHECK_THROWS_AS(kendall_tau(std::vector<double>{1}, std::vector<double>{1}), Error);
  CHECK_THROWS_AS(kendall_tau(a, std::vector<double>{1, 2}), Error);
  CHECK_THROWS_AS(kendall_tau(a, std::vector<double>{5, 5, 5, 5}), Error);
}

TEST_CASE("cpu/validate: task operations fall into the kinds the comparison sums") {
  using strategies::TaskOp;
  CHECK(work_kind(TaskOp::Forward) == WorkKind::Forward);
  CHECK(work_kind(TaskOp::Backward) == WorkKind::Backward);
  CHECK(work_kind(TaskOp::Recompute) == WorkKind::Recompute);
  CHECK(work_kind(TaskOp::DpReduce) == WorkKind::Collective);
  CHECK(work_kind(TaskOp::Zero3Gather) == WorkKind::Collective);
  CHECK(work_kind(TaskOp::GatherWeights) == WorkKind::Collective);
  CHECK(work_kind(TaskOp::SendActivation) == WorkKind::P2p);
  CHECK(work_kind(TaskOp::SendGradient) == WorkKind::P2p);
  CHECK(work_kind(TaskOp::Offload) == WorkKind::Copy);
  CHECK(work_kind(TaskOp::Prefetch) == WorkKind::Copy);
  CHECK(work_kind(TaskOp::OptimizerStep) == WorkKind::Optimizer);
  CHECK(work_kind(TaskOp::CompressEncode) == WorkKind::Compression);
  CHECK(work_kind(TaskOp::CompressRound) == WorkKind::Collective);
  CHECK(work_kind(TaskOp::CompressDecode) == WorkKind::Compression);
  CHECK(work_kind_name(WorkKind::P2p) == "p2p");
}

}  // namespace
}  // namespace strata::backend
