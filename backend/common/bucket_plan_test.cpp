#include "backend/common/bucket_plan.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "costmodel/model_io.hpp"
#include "lowering/step_costs.hpp"

namespace strata::backend {
namespace {

using strategies::Part;
using strategies::Plan;
using strategies::Scenario;

Scenario tiny(Plan plan, std::int64_t layers = 4, std::int64_t global = 8, std::int64_t micro = 2) {
  Scenario sc;
  sc.model.name = "tiny-plan";
  sc.model.layers = layers;
  sc.model.hidden = 32;
  sc.model.heads = 2;
  sc.model.kv_heads = 2;
  sc.model.ffn_hidden = 128;
  sc.model.vocab = 16;
  sc.model.seq_len = 8;
  sc.model.dropout = false;
  sc.cluster = cost::cluster_preset("cpu-local");
  sc.batch = {global, micro};
  plan.precision = cost::Precision::FP32;
  plan.implementation.attention = cost::AttentionKernel::Standard;
  sc.plan = plan;
  sc.cluster.node.gpus_per_node = plan.gpus();
  return sc;
}

struct Built {
  Scenario sc;
  strategies::LoweredStep low;
  ParamTable table;
  BucketPlan plan;
};

Built build(const Scenario& sc, std::uint64_t seed = 1) {
  auto low = strategies::lower_step(sc, strategies::ModelStepCosts(sc));
  ParamTable table(sc.model);
  BucketPlan plan(sc, low, table, seed);
  return {sc, std::move(low), std::move(table), std::move(plan)};
}

TEST_CASE("common/bucket_plan: DeepSpeed's and FSDP's flat shards: padded to dp equal chunks of ceil(n/dp)") {
  FlatBucket b;
  b.numel = 10;
  b.ranks = 4;
  b.chunk = 3;
  CHECK(b.padded() == 12);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want{{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  for (int r = 0; r < 4; ++r) {
    CHECK(b.shard(r).begin == want[static_cast<std::size_t>(r)].first);
    CHECK(b.shard(r).end == want[static_cast<std::size_t>(r)].second);
  }
  // Fewer elements than ranks: the last shards are padding only.
  b.numel = 5;
  b.chunk = 2;
  CHECK(b.shard(2).size() == 1);
  CHECK(b.shard(3).size() == 0);
  // Pieces of a range: each parameter's part, in flat order.
  b.params = {7, 8};
  b.offsets = {0, 3};
  b.sizes = {3, 2};
  std::vector<std::vector<std::int64_t>> pieces;
  b.for_each_piece(ElementRange{2, 5}, [&](int i, std::int64_t off, std::int64_t at, std::int64_t n) {
    pieces.push_back({i, off, at, n});
  });
  CHECK(pieces == std::vector<std::vector<std::int64_t>>{{7, 2, 0, 1}, {8, 0, 1, 2}});
}

TEST_CASE("common/bucket_plan: each stage reduces what it holds once; shards cover every bucket") {
  for (const int zero : {0, 1, 3}) {
    CAPTURE(zero);
    Plan p;
    p.dp = 2;
    p.pp = 2;
    p.zero = zero;
    p.schedule = strategies::Schedule::OneFOneB;
    const Built b = build(tiny(p));
    const auto& plan = b.plan;
    REQUIRE(plan.stages() == 2);
    CHECK(plan.zero() == zero);
    CHECK(plan.tied_across_stages());
    const int tok = b.table.word_embedding();
    // Stage 0: the embedding and its layers; stage 1: its layers, the head, the tied embedding.
    CHECK(plan.held(tok, 0));
    CHECK(plan.held(tok, 1));
    CHECK(plan.held(b.table.find("position_embedding"), 0));
    CHECK_FALSE(plan.held(b.table.find("position_embedding"), 1));
    CHECK_FALSE(plan.held(b.table.find("final_norm.gain"), 0));
    CHECK(plan.held(b.table.find("final_norm.gain"), 1));
    std::size_t tasks = 0;
    for (int s = 0; s < 2; ++s) {
      const StagePlan& st = plan.stage(s);
      tasks += st.tasks.size();
      for (std::size_t k = 1; k < st.tasks.size(); ++k) CHECK(st.tasks[k - 1] < st.tasks[k]);
      std::vector<int> seen(static_cast<std::size_t>(b.table.size()), 0);
      for (const FlatBucket& fb : st.buckets) {
        std::int64_t at = 0;
        for (std::size_t j = 0; j < fb.params.size(); ++j) {
          ++seen[static_cast<std::size_t>(fb.params[j])];
          CHECK(fb.offsets[j] == at);
          CHECK(fb.sizes[j] == plan.shape(fb.params[j]).numel());
          at += fb.sizes[j];
        }
        CHECK(fb.numel == at);
        CHECK(fb.chunk == (fb.numel + 1) / 2);
        CHECK(fb.shard(0).end == fb.shard(1).begin);
        CHECK(fb.shard(1).end == fb.numel);
        if (fb.kind == BucketKind::Zero3Layer) CHECK(st.layer_bucket[static_cast<std::size_t>(fb.layer)] >= 0);
      }
      for (int i = 0; i < b.table.size(); ++i) CHECK(seen[static_cast<std::size_t>(i)] == (plan.held(i, s) ? 1 : 0));
      // ZeRO-3: every layer of the stage has its bucket, the others none.
      for (int l = 0; l < b.table.layers(); ++l) {
        const bool here = plan.held(b.table.layer(l).front(), s);
        CHECK((st.layer_bucket[static_cast<std::size_t>(l)] >= 0) == (zero == 3 && here));
      }
      // The last stage reduces its copy of the tied word embedding with the head.
      if (s == 1)
        for (const auto& [task, bi] : st.bucket_of_task)
          if (b.low.info[static_cast<std::size_t>(task)].head) CHECK(st.buckets[static_cast<std::size_t>(bi)].holds(tok));
    }
    CHECK(tasks == b.low.graph.num_tasks());
  }
}

TEST_CASE("common/bucket_plan: a compressed exchange is one bucket of the stage, seeded per stage") {
  Plan p;
  p.dp = 2;
  p.pp = 2;
  p.zero = 1;
  p.schedule = strategies::Schedule::OneFOneB;
  p.compression.method = strategies::CompressionMethod::RandomK;
  p.compression.ratio = 0.1;
  const Built b = build(tiny(p), 5);
  for (int s = 0; s < 2; ++s) {
    const StagePlan& st = b.plan.stage(s);
    REQUIRE(st.buckets.size() == 1);
    CHECK(st.compressed_bucket == 0);
    CHECK(st.buckets[0].kind == BucketKind::Compressed);
    CHECK(st.compressed_rounds == 1);
    CHECK(st.compressor_seed == 5 * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(s));
    for (int i = 0; i < b.table.size(); ++i) CHECK(st.buckets[0].holds(i) == b.plan.held(i, s));
  }
}

TEST_CASE("common/bucket_plan: microbatch mb of dp rank d reads sequences from (d·m + mb)·micro") {
  Plan p;
  p.dp = 2;
  const Built b = build(tiny(p, 2, 8, 2));  // m = 2 microbatches of 2 per rank
  CHECK(b.plan.microbatches() == 2);
  CHECK(b.plan.first_sequence(0, 1) == 2);
  CHECK(b.plan.first_sequence(1, 0) == 4);
  CHECK(b.plan.first_sequence(1, 1) == 6);
  CHECK(b.plan.loss_scale() == doctest::Approx(0.25));
  // One rank: no buckets at all.
  const Built one = build(tiny(Plan{}, 2, 4, 2));
  CHECK(one.plan.stage(0).buckets.empty());
  CHECK(one.plan.zero() == 0);
}

}  // namespace
}  // namespace strata::backend
