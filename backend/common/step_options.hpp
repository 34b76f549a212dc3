#pragma once
// Options of one single-rank training step (GptModel::forward_backward) and
// the dropout of one microbatch's forward: what both backends' models take.
#include <cstdint>
#include <vector>

#include "costmodel/techniques.hpp"

namespace strata::backend {

// Dropout of one microbatch's forward: probability and the seed its masks
// derive from (with the layer and the site), so a recompute regenerates them.
struct Dropout {
  float p = 0.0f;
  std::uint64_t seed = 0;
};

// Options of one forward_backward.
struct StepOptions {
  // The step adds the gradient of loss_scale × the mean loss (1/k over k
  // microbatches gives the mean over all of them).
  float loss_scale = 1.0f;
  // Per-block recompute: None keeps everything; Selective drops the
  // attention core (softmax output) and recomputes it from Q, K, V in
  // backward; Full keeps only the block's input and reruns its forward.
  // Schedules over layers (EveryK, Sqrt, Optimal) are given per layer in
  // `layer_recompute` instead (one entry per block; overrides `recompute`).
  cost::Recompute recompute = cost::Recompute::None;
  std::vector<cost::Recompute> layer_recompute;
  // Dropout for models with spec.dropout (Megatron-LM trains GPT with 0.1);
  // vary the seed between steps and microbatches. A model without dropout
  // refuses p > 0.
  Dropout dropout;
};

}  // namespace strata::backend
