#include "backend/common/bucket_plan.hpp"

#include <algorithm>
#include <string>

#include "sim/error.hpp"

namespace strata::backend {

using strategies::Part;
using strategies::TaskInfo;
using strategies::TaskOp;

ElementRange FlatBucket::shard(int r) const {
  const std::int64_t begin = std::min(numel, static_cast<std::int64_t>(r) * chunk);
  return {begin, std::min(numel, begin + chunk)};
}

bool FlatBucket::holds(int param) const { return std::find(params.begin(), params.end(), param) != params.end(); }

BucketPlan::BucketPlan(const strategies::Scenario& sc, const strategies::LoweredStep& low, const ParamTable& table,
                       std::uint64_t seed) {
  const auto& plan = sc.plan;
  dp_ = static_cast<int>(plan.dp);
  cp_ = static_cast<int>(plan.cp);
  zero_ = strategies::zero_shards(plan) > 1 ? static_cast<int>(plan.zero) : 0;
  compressed_ = dp_ > 1 && plan.compression.method != strategies::CompressionMethod::None;
  m_ = static_cast<int>(strategies::microbatches(plan, sc.batch));
  micro_ = sc.batch.micro;
  const int pp = static_cast<int>(plan.pp);
  const int tp = static_cast<int>(plan.tp);
  tie_ = sc.model.tied_embeddings && pp > 1;
  if (low.info.size() != low.graph.num_tasks()) throw Error("executor: the lowering gave no TaskInfo for some tasks");
  for (int i = 0; i < table.size(); ++i) shapes_.push_back(table.local_shape(i, tp));
  const int tok = table.word_embedding();
  const strategies::ChunkMap chunk_map(plan, sc.model.layers);

  // Each stage's tasks in graph order; every dependency inside a stage must
  // point forward in that order (cross-stage ones are pipeline messages).
  const auto& tasks = low.graph.tasks();
  stages_.assign(static_cast<std::size_t>(pp), {});
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i].label.stage) throw Error("executor: task " + tasks[i].id + " has no stage");
    const auto s = static_cast<std::size_t>(*tasks[i].label.stage);
    if (s >= stages_.size()) throw Error("executor: task " + tasks[i].id + " is on no stage of the plan");
    stages_[s].tasks.push_back(static_cast<std::int32_t>(i));
  }
  low.graph.for_each_edge([&](sim::TaskId a, sim::TaskId b, sim::EdgeKind) {
    const auto& ta = tasks[static_cast<std::size_t>(a.index)];
    const auto& tb = tasks[static_cast<std::size_t>(b.index)];
    if (ta.label.stage == tb.label.stage && a.index > b.index)
      throw Error("executor: " + tb.id + " depends on the later task " + ta.id);
  });

  for (int s = 0; s < pp; ++s) {
    StagePlan& st = stages_[static_cast<std::size_t>(s)];
    st.holds.assign(static_cast<std::size_t>(table.size()), false);
    for (int i = 0; i < table.size(); ++i) {
      const ParamSpec& p = table[i];
      bool on = s == pp - 1;  // the head: final_norm.*, logits.weight
      if (p.part == Part::Layer)
        on = chunk_map.of_layer[static_cast<std::size_t>(p.layer)] % pp == s;
      else if (p.role == ParamRole::WordEmbedding)
        on = s == 0 || (s == pp - 1 && sc.model.tied_embeddings);
      else if (p.part == Part::Embedding)
        on = s == 0;
      st.holds[static_cast<std::size_t>(i)] = on;
    }
    st.layer_bucket.assign(static_cast<std::size_t>(table.layers()), -1);

    auto add = [&](BucketKind kind, int layer, std::vector<int> params) {
      FlatBucket b;
      b.kind = kind;
      b.layer = layer;
      b.params = std::move(params);
      for (const int i : b.params) {
        const std::int64_t n = shapes_[static_cast<std::size_t>(i)].numel();
        b.offsets.push_back(b.numel);
        b.sizes.push_back(n);
        b.numel += n;
      }
      // Reduced (and under ZeRO sharded) over dp × cp.
      b.ranks = static_cast<int>(strategies::zero_shards(plan));
      b.chunk = (b.numel + b.ranks - 1) / b.ranks;
      st.buckets.push_back(std::move(b));
      return static_cast<int>(st.buckets.size()) - 1;
    };
    // A reduce task's gradients: its layers', the head's (and, on the last
    // stage, a tied word embedding's copy), the embedding's.
    auto params_of = [&](const TaskInfo& t) {
      std::vector<int> v;
      for (const auto l : t.layers) {
        const auto& lp = table.layer(l);
        v.insert(v.end(), lp.begin(), lp.end());
      }
      if (t.head) {
        v.insert(v.end(), table.head().begin(), table.head().end());
        if (tie_ && s == pp - 1) v.push_back(tok);
      }
      if (t.embedding) v.insert(v.end(), table.embedding().begin(), table.embedding().end());
      return v;
    };

    for (const std::int32_t i : st.tasks) {
      const TaskInfo& t = low.info[static_cast<std::size_t>(i)];
      if (t.op == TaskOp::CompressRound) ++st.compressed_rounds;
    }
    if (dp_ * cp_ <= 1) continue;
    if (compressed_) {
      // The stage's gradients are compressed as one flat vector, in
      // parameter order; a ZeRO-1 rank steps its shard of it.
      std::vector<int> mine;
      for (int i = 0; i < table.size(); ++i)
        if (st.holds[static_cast<std::size_t>(i)]) mine.push_back(i);
      st.compressed_bucket = add(BucketKind::Compressed, -1, std::move(mine));
      st.compressor_seed = seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(s);
    }
    for (const std::int32_t i : st.tasks) {
      const TaskInfo& t = low.info[static_cast<std::size_t>(i)];
      const bool reduces = t.op == TaskOp::DpReduce || t.op == TaskOp::PsPush || t.op == TaskOp::Zero3Reduce;
      if (reduces && compressed_)
        throw Error("executor: a compressed plan's step also reduces buckets (" + tasks[static_cast<std::size_t>(i)].id +
                    ")");
      if (t.op == TaskOp::DpReduce || t.op == TaskOp::PsPush) {
        st.bucket_of_task[i] = add(BucketKind::Reduce, -1, params_of(t));
      } else if (t.op == TaskOp::Zero3Reduce) {
        if (t.part == Part::Layer) {
          auto& lb = st.layer_bucket[static_cast<std::size_t>(t.layer)];
          if (lb < 0) lb = add(BucketKind::Zero3Layer, t.layer, table.layer(t.layer));
        } else {
          st.bucket_of_task[i] = add(BucketKind::Zero3Whole, -1, params_of(t));
        }
      }
    }
    // Every parameter of the stage is reduced exactly once.
    std::vector<int> seen(static_cast<std::size_t>(table.size()), 0);
    for (const auto& b : st.buckets)
      for (const int i : b.params) ++seen[static_cast<std::size_t>(i)];
    for (int i = 0; i < table.size(); ++i)
      if (seen[static_cast<std::size_t>(i)] != (st.holds[static_cast<std::size_t>(i)] ? 1 : 0))
        throw Error("executor: stage " + std::to_string(s) + " reduces parameter '" + table[i].name + "' " +
                    std::to_string(seen[static_cast<std::size_t>(i)]) + " times");
  }
}

std::int64_t BucketPlan::first_sequence(int dp_index, int mb) const {
  return (static_cast<std::int64_t>(dp_index) * m_ + mb) * micro_;
}

float BucketPlan::loss_scale() const { return 1.0f / static_cast<float>(m_ * dp_ * cp_); }

}  // namespace strata::backend
