// Speed of expanding a model into its op chain (the first step of every
// memory or time estimate), for a dense and a MoE preset.
#include <benchmark/benchmark.h>

#include "costmodel/model_io.hpp"
#include "costmodel/ops.hpp"

namespace {

void BM_ExpandModel(benchmark::State& state, const char* preset) {
  const auto model = strata::cost::model_preset(preset);
  strata::cost::ExpandOptions o;
  o.tp = 8;
  o.sequence_parallel = true;
  for (auto _ : state) {
    auto chain = strata::cost::expand(model, o);
    benchmark::DoNotOptimize(chain.main_block().saved_bytes());
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_CAPTURE(BM_ExpandModel, llama3_70b, "llama3-70b");
BENCHMARK_CAPTURE(BM_ExpandModel, mixtral_8x7b, "mixtral-8x7b");

}  // namespace

BENCHMARK_MAIN();
