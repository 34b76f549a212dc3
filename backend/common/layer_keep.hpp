#pragma once
// What a layer's forward keeps for its backward under the lowering's choice
// (strategies::Keep, docs/remat.md), for either backend's GPT model: the CPU
// one (gpt.hpp) and the CUDA one (backend/cuda/gpt.hpp) share the rule, each
// with its own BlockSaved and drop_for_recompute.
#include "costmodel/ops.hpp"
#include "lowering/layer_plan.hpp"

namespace strata::backend {

// core_recompute: the step reruns the attention core (no flash attention),
// so a Selective layer drops it; otherwise Selective keeps everything.
template <class Model, class Saved>
void keep_for_backward(strategies::Keep keep, bool core_recompute, Saved& s) {
  switch (keep) {
    case strategies::Keep::All: return;
    case strategies::Keep::Selective:
      if (core_recompute) Model::drop_for_recompute(s, cost::Recompute::Selective);
      return;
    case strategies::Keep::Input: Model::drop_for_recompute(s, cost::Recompute::Full); return;
    case strategies::Keep::Nothing: s = Saved{}; return;
  }
}

}  // namespace strata::backend
