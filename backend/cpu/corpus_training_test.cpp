#include "backend/common/corpus.hpp"

#include <doctest/doctest.h>

#include "tests/testing.hpp"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/optimizer.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

// Held-out loss of the tiny GPT (2 layers, hidden 16, vocab 11) after 200
// steps of `opt` on 32 sequences of 8 tokens from the corpus, and before.
template <class MakeOpt>
std::pair<double, double> train_tiny(const MarkovCorpus& corpus, MakeOpt make_opt) {
  cost::ModelSpec m = testing::tiny_gpt();
  TrackingAllocator alloc;
  GptModel model(m, alloc, 1);
  auto opt = make_opt(alloc);
  Rng rng(7);
  const std::int64_t batch = 32, eval_batch = 256;
  std::vector<std::int32_t> x(batch * m.seq_len), y(x.size());
  std::vector<std::int32_t> ex(eval_batch * m.seq_len), ey(ex.size());
  corpus.sample(ex, ey, eval_batch, m.seq_len, rng);
  const double initial = model.loss(ex, ey, eval_batch);
  for (int step = 0; step < 200; ++step) {
    corpus.sample(x, y, batch, m.seq_len, rng);
    model.zero_grads();
    model.forward_backward(x, y, batch);
    opt.step(model.params(), model.grads());
  }
  return {initial, model.loss(ex, ey, eval_batch)};
}

TEST_CASE("cpu/corpus: training the tiny GPT with Adam brings the loss from log V to near the entropy rate") {
  // 200 Adam steps (lr 0.01): held-out loss from ≈ log 11 to within 0.15
  // nats of the entropy rate H; 8-bit Adam ends within 0.05 of Adam.
  set_blas_threads(1);
  const MarkovCorpus corpus(11, 42);
  const auto [initial, final_loss] =
      train_tiny(corpus, [](Allocator& a) { return Adam(a, {.lr = 1e-2f}); });
  MESSAGE("loss " << initial << " -> " << final_loss << ", entropy rate "
                  << corpus.entropy_rate());
  CHECK(initial == doctest::Approx(std::log(11.0)).epsilon(0.03));
  CHECK(final_loss < corpus.entropy_rate() + 0.15);
  const double final_8bit =
      train_tiny(corpus, [](Allocator& a) { return Adam8bit(a, {.lr = 1e-2f}); }).second;
  MESSAGE("8-bit Adam: " << final_8bit);
  CHECK(std::abs(final_8bit - final_loss) < 0.05);
}

}  // namespace
}  // namespace strata::backend::cpu
