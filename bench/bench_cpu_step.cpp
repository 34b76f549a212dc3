// One single-rank training step of the CPU backend on one thread: forward and
// backward of a 4-layer, hidden-256 GPT (4 heads, ffn 1024, seq 128, batch 4,
// vocab 1024), and the same with an Adam update. Figures in
// docs/cpu-backend.md.
#include <benchmark/benchmark.h>

#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/rng.hpp"

namespace {

using namespace strata::backend::cpu;

strata::cost::ModelSpec bench_model(strata::cost::MlpKind mlp) {
  strata::cost::ModelSpec m;
  m.name = "gpt-4x256";
  m.layers = 4;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 1024;
  m.vocab = 1024;
  m.seq_len = 128;
  m.mlp = mlp;
  return m;
}

void run_step(benchmark::State& state, strata::cost::MlpKind mlp, bool adam_step) {
  set_blas_threads(1);
  const auto spec = bench_model(mlp);
  const std::int64_t batch = 4;
  TrackingAllocator alloc;
  GptModel model(spec, alloc, 1);
  Adam adam(alloc, {.lr = 1e-4f});
  Rng rng(2);
  std::vector<std::int32_t> x(static_cast<std::size_t>(batch * spec.seq_len)), y(x.size());
  for (auto& v : x) v = static_cast<std::int32_t>(rng.below(spec.vocab));
  for (auto& v : y) v = static_cast<std::int32_t>(rng.below(spec.vocab));
  for (auto _ : state) {
    model.zero_grads();
    benchmark::DoNotOptimize(model.forward_backward(x, y, batch));
    if (adam_step) adam.step(model.params(), model.grads());
  }
  // Model FLOPs: 6·tokens·(L·(4h² + h·up + f·h) + V·h) plus attention
  // 12·L·b·s²·h (up = f for GeLU, 2f for SwiGLU; 12·L·h² for GeLU, f = 4h).
  const double tokens = static_cast<double>(batch * spec.seq_len);
  const double h = 256, L = 4, s = 128, V = 1024, f = 1024;
  const double up = mlp == strata::cost::MlpKind::Swiglu ? 2 * f : f;
  const double flops =
      6 * tokens * (L * (4 * h * h + h * up + f * h) + V * h) + 12 * L * batch * s * s * h;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_MiB"] = static_cast<double>(alloc.stats().peak_total) / (1 << 20);
}

void BM_CpuStepGelu(benchmark::State& s) { run_step(s, strata::cost::MlpKind::Gelu, false); }
void BM_CpuStepGeluAdam(benchmark::State& s) { run_step(s, strata::cost::MlpKind::Gelu, true); }
void BM_CpuStepSwiglu(benchmark::State& s) { run_step(s, strata::cost::MlpKind::Swiglu, false); }

}  // namespace

BENCHMARK(BM_CpuStepGelu)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuStepGeluAdam)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuStepSwiglu)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
