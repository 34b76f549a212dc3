#include "backend/common/validate.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sim/error.hpp"

namespace strata::backend {
namespace {

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
