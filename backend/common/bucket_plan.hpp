#pragma once
// What every rank of a lowered step holds and exchanges, as a pure function
// of the scenario, its lowered step and the parameter table: which stage
// holds which parameter, the flat buckets each stage reduces (the
// lowering's, by task), each parameter's offset in its bucket, each dp
// rank's shard of every bucket under ZeRO 1/2/3, the compressed exchange's
// one bucket and its seed, and which sequences each rank's microbatch
// reads. The CPU executor (rank threads) and the CUDA executor (one process
// per GPU) both build their buckets from it, so they pack, shard and seed
// alike.
//
// Sharding (ZeRO 1/2/3, DeepSpeed's and FSDP's flat-parameter rule): a
// bucket of n elements over a dp group of d ranks is padded to d·c
// elements, c = ⌈n/d⌉, and rank r holds elements [r·c, (r+1)·c) ∩ [0, n):
// every shard is c long (the last ones end in padding, or are padding
// only), so reduce-scatter and all-gather move equal chunks, as NCCL's take
// them. The padding's parameters and gradients are zeros, and every
// elementwise update leaves them zero.
#include <cstdint>
#include <map>
#include <vector>

#include "backend/common/param_table.hpp"
#include "backend/common/shape.hpp"
#include "lowering/layer_plan.hpp"
#include "lowering/lower.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend {

// Elements [begin, end) of a flat buffer.
struct ElementRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

enum class BucketKind : std::uint8_t {
  Reduce,      // a dp-reduce or ps-push task's gradients (ZeRO 0/1/2)
  Zero3Layer,  // ZeRO-3: one layer's parameters, sharded between its passes
  Zero3Whole,  // ZeRO-3: the embedding's or head's, kept whole, gradients reduce-scattered
  Compressed,  // the stage's every parameter, one compressed exchange
};

// A flat run of parameters reduced (and, with ZeRO, sharded) together.
struct FlatBucket {
  BucketKind kind = BucketKind::Reduce;
  int layer = -1;                     // Zero3Layer: the layer
  std::vector<int> params;            // parameter table indices, in flat order
  std::vector<std::int64_t> offsets;  // each one's first element in the bucket
  std::vector<std::int64_t> sizes;    // each one's elements on this rank (tensor-parallel slice)
  std::int64_t numel = 0;
  int ranks = 1;                      // the dp group
  std::int64_t chunk = 0;             // ⌈numel / ranks⌉: every rank's shard length

  std::int64_t padded() const { return chunk * ranks; }
  // Dp rank `r`'s elements: [r·chunk, (r+1)·chunk) ∩ [0, numel).
  ElementRange shard(int r) const;
  bool holds(int param) const;
  // Calls fn(param, offset in param, offset in range, count) for the pieces
  // of the bucket's elements [r.begin, r.end), in flat order.
  template <class Fn>
  void for_each_piece(ElementRange r, Fn&& fn) const {
    for (std::size_t j = 0; j < params.size(); ++j) {
      const std::int64_t at = offsets[j], n = sizes[j];
      const std::int64_t lo = at > r.begin ? at : r.begin, hi = at + n < r.end ? at + n : r.end;
      if (lo < hi) fn(params[j], lo - at, lo - r.begin, hi - lo);
    }
  }
  template <class Fn>
  void for_each_piece(Fn&& fn) const {
    for_each_piece(ElementRange{0, numel}, fn);
  }
};

// One pipeline stage: its tasks, what it holds and the buckets it reduces.
struct StagePlan {
  std::vector<std::int32_t> tasks;  // the stage's tasks in graph order
  std::vector<bool> holds;          // by parameter: whether this stage holds it
  std::vector<FlatBucket> buckets;
  std::map<std::int32_t, int> bucket_of_task;  // DpReduce, PsPush, Zero3Reduce of the embedding or head
  std::vector<int> layer_bucket;               // ZeRO-3: by layer, −1 off this stage
  int compressed_bucket = -1;                  // with compression: the one bucket
  int compressed_rounds = 0;                   // the lowering's CompressRound tasks
  std::uint64_t compressor_seed = 0;           // the compressed exchange's random streams
};

class BucketPlan {
 public:
  // `tp`: the tensor-parallel degree the parameters are split by (the
  // plan's). `seed`: the executor's (weights; the compressor's streams mix
  // it with the stage). Throws Error when the lowering's tasks do not fit:
  // a task without a stage, a dependency on a later task of the same stage,
  // a parameter reduced other than once, reductions beside a compressed
  // exchange.
  BucketPlan(const strategies::Scenario& sc, const strategies::LoweredStep& low, const ParamTable& table,
             std::uint64_t seed);

  int stages() const { return static_cast<int>(stages_.size()); }
  const StagePlan& stage(int s) const { return stages_[static_cast<std::size_t>(s)]; }

  int dp() const { return dp_; }
  int zero() const { return zero_; }  // the plan's ZeRO stage with dp > 1, else 0
  bool compressed() const { return compressed_; }
  int microbatches() const { return m_; }
  // A tied word embedding on two stages (the first and the last), whose
  // gradients the embedding tie sums.
  bool tied_across_stages() const { return tie_; }
  // The parameter's shape on each rank (its tensor-parallel slice).
  const Shape& shape(int i) const { return shapes_[static_cast<std::size_t>(i)]; }
  // Whether stage `s` holds parameter i: its chunks' layers, the embedding
  // on the first stage, the head (and a tied word embedding) on the last.
  bool held(int i, int s) const { return stage(s).holds[static_cast<std::size_t>(i)]; }

  // The first of the global batch's sequences that microbatch mb of dp rank
  // d reads: (d·m + mb)·micro. Each rank adds the gradient of its loss
  // times loss_scale() = 1/(m·dp·cp), so the reduced gradient is the global
  // batch's mean.
  std::int64_t first_sequence(int dp_index, int mb) const;
  float loss_scale() const;

 private:
  std::vector<StagePlan> stages_;
  std::vector<Shape> shapes_;
  int dp_ = 1, cp_ = 1, zero_ = 0, m_ = 1;
  std::int64_t micro_ = 1;
  bool compressed_ = false, tie_ = false;
};

}  // namespace strata::backend
