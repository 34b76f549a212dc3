// Its own test binary: it replaces the process's malloc family to count
// heap requests made outside the tracking allocator.
#include <doctest/doctest.h>

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backend/cpu/allocator.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/common/corpus.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/test_scenario.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/common/rng.hpp"

extern "C" {
void* __libc_malloc(std::size_t);
void __libc_free(void*);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}

namespace {
constexpr std::size_t kLarge = 4096;  // "large": a page or more
std::atomic<bool> g_watch{false};
std::atomic<std::int64_t> g_large{0}, g_large_bytes{0}, g_small_bytes{0};
// aligned_alloc(64, ·): what TrackingAllocator calls (kAlignment), counted
// apart so a test can match them against the trackers' own counts.
std::atomic<std::int64_t> g_aligned64{0};
// With g_split_main: requests on the test's own thread (an executor step's
// caller, which assembles the step's result records) are counted apart.
std::atomic<bool> g_split_main{false};
pthread_t g_main_thread;
std::atomic<std::int64_t> g_main_large_bytes{0};
thread_local bool t_in_tracker = false;  // requests the tracking allocator makes

void note(std::size_t n) {
  if (!g_watch.load(std::memory_order_relaxed) || t_in_tracker) return;
  if (g_split_main.load(std::memory_order_relaxed) && pthread_equal(pthread_self(), g_main_thread)) {
    if (n >= kLarge) g_main_large_bytes.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    return;
  }
  if (n >= kLarge) {
    g_large.fetch_add(1, std::memory_order_relaxed);
    g_large_bytes.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  } else {
    g_small_bytes.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  }
}
}  // namespace

extern "C" {
void* malloc(std::size_t n) {
  note(n);
  return __libc_malloc(n);
}
void free(void* p) { __libc_free(p); }
void* calloc(std::size_t a, std::size_t b) {
  note(a * b);
  return __libc_calloc(a, b);
}
void* realloc(void* p, std::size_t n) {
  note(n);
  return __libc_realloc(p, n);
}
void* memalign(std::size_t align, std::size_t n) {
  note(n);
  return __libc_memalign(align, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  if (align == 64 && g_watch.load(std::memory_order_relaxed))
    g_aligned64.fetch_add(1, std::memory_order_relaxed);
  else
    note(n);
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  note(n);
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace strata::backend::cpu {
namespace {

// Forwards to a tracking allocator, marking its heap requests as tracked.
class MarkedAllocator final : public Allocator {
 public:
  void* allocate(Bytes bytes, MemTag tag) override {
    t_in_tracker = true;
    void* p = inner.allocate(bytes, tag);
    t_in_tracker = false;
    return p;
  }
  void deallocate(void* p, Bytes bytes, MemTag tag) noexcept override {
    inner.deallocate(p, bytes, tag);
  }
  TrackingAllocator inner;
};

TEST_CASE("cpu/malloc: an executor step on 4 rank threads allocates nothing large outside the ranks' trackers") {
  // dp 2 x tp 2 with sequence parallelism, ZeRO-1, selective recompute and
  // activation offload (every rank's device and host trackers): after two
  // warm-up steps the third step's tracker allocations all reuse blocks
  // the trackers keep (no aligned_alloc(64) at all: the step allocates the
  // same buffers every time), and no other heap request of a page or more
  // happens on any rank thread. The calling thread only
  // assembles the step's result (the per-task times): bounded by twice
  // their size.
  static_assert(kAlignment == 64);
  set_blas_threads(1);
  strategies::Plan plan;
  plan.dp = 2;
  plan.tp = 2;
  plan.sequence_parallel = true;
  plan.zero = 1;
  plan.recompute = cost::Recompute::Selective;
  plan.offload.activations = true;
  const strategies::Scenario sc = test::small_gpt({}, plan, 8, 2);
  Executor ex(sc, {.seed = 1});
  const MarkovCorpus corpus(sc.model.vocab, 7);
  Rng rng(5);
  std::vector<std::int32_t> x(static_cast<std::size_t>(sc.batch.global * sc.model.seq_len)), y(x.size());
  corpus.sample(x, y, sc.batch.global, sc.model.seq_len, rng);
  auto tracked = [](const StepResult& r) {
    std::int64_t n = 0;
    for (const auto& m : r.memory) n += m.device.allocations + m.host.allocations;
    return n;
  };
  std::int64_t before = 0;
  g_main_thread = pthread_self();
  g_split_main = true;
  for (int step = 0; step < 3; ++step) {
    if (step == 2) g_watch = true;
    const StepResult r = ex.step(x, y);
    if (step == 2) {
      g_watch = false;
      MESSAGE("executor step: " << g_large.load() << " large requests on rank threads outside the "
                                << "trackers, " << g_aligned64.load() << " aligned_alloc(64) calls, "
                                << tracked(r) - before << " tracker allocations; the caller: "
                                << g_main_large_bytes.load() << " bytes for " << r.tasks.size()
                                << " task times");
      CHECK(g_large.load() == 0);
      CHECK(tracked(r) - before > 0);
      CHECK(g_aligned64.load() == 0);
      CHECK(g_main_large_bytes.load() <=
            2 * static_cast<std::int64_t>(r.tasks.size() * sizeof(TaskTime)));
    }
    before = tracked(r);
  }
  g_split_main = false;
  g_large = 0;
  g_large_bytes = 0;
  g_small_bytes = 0;
  g_aligned64 = 0;
}

TEST_CASE("cpu/malloc: a pipeline step allocates nothing outside the ranks' pools but its messages") {
  // dp 2 x pp 2 (1F1B), ZeRO-3, every_k recompute and activation offload,
  // whose declared buffers the memory matrix checks against the ranks'
  // trackers: after two warm-up steps, the third step's allocations reuse
  // blocks the trackers keep — the ranks' all of them; the run's mailbox
  // (one block per pipeline message) may need a new one when more messages
  // are in transit at once than in the steps before, which thread timing
  // decides — and nothing else of a page or more is requested on a rank
  // thread. So the trackers' peaks are all the memory a step uses.
  set_blas_threads(1);
  strategies::Plan plan;
  plan.dp = 2;
  plan.pp = 2;
  plan.zero = 3;
  plan.schedule = strategies::Schedule::OneFOneB;
  plan.recompute = cost::Recompute::EveryK;
  plan.recompute_k = 2;
  plan.offload.activations = true;
  const strategies::Scenario sc = test::small_gpt({.layers = 4}, plan, 8, 2);
  Executor ex(sc, {.seed = 1});
  const MarkovCorpus corpus(sc.model.vocab, 7);
  Rng rng(5);
  std::vector<std::int32_t> x(static_cast<std::size_t>(sc.batch.global * sc.model.seq_len)), y(x.size());
  corpus.sample(x, y, sc.batch.global, sc.model.seq_len, rng);
  auto tracked = [](const StepResult& r) {
    std::int64_t n = 0;
    for (const auto& m : r.memory) n += m.device.allocations + m.host.allocations;
    return n;
  };
  std::int64_t before = 0;
  g_main_thread = pthread_self();
  g_split_main = true;
  for (int step = 0; step < 3; ++step) {
    if (step == 2) g_watch = true;
    const StepResult r = ex.step(x, y);
    if (step == 2) {
      g_watch = false;
      std::int64_t messages = 0;
      for (const auto& t : r.tasks) {
        const auto op = ex.lowered().info[static_cast<std::size_t>(t.task)].op;
        if (op == strategies::TaskOp::SendActivation || op == strategies::TaskOp::SendGradient) ++messages;
      }
      MESSAGE("pipeline step: " << g_aligned64.load() << " aligned_alloc(64) calls, " << tracked(r) - before
                                << " tracker allocations, " << messages << " messages, " << g_large.load()
                                << " other large requests");
      CHECK(messages == 2 * 2 * 2);  // 2 dp ranks x (activation + gradient) x 2 microbatches
      CHECK(g_large.load() == 0);
      CHECK(tracked(r) - before > 0);
      CHECK(g_aligned64.load() <= messages);
    }
    before = tracked(r);
  }
  g_split_main = false;
  g_large = 0;
  g_large_bytes = 0;
  g_small_bytes = 0;
  g_aligned64 = 0;
}

TEST_CASE("cpu/malloc: a training step allocates nothing large outside the tracking allocator") {
  // With malloc, calloc, realloc and the aligned variants counted, a step
  // (forward, backward with recompute and dropout, AdamW) after a warm-up
  // makes no heap request of a page or more except through the tracker.
  set_blas_threads(1);
  cost::ModelSpec m;
  m.name = "small";
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 256;
  m.vocab = 97;
  m.seq_len = 32;
  m.dropout = true;
  MarkedAllocator alloc;
  GptModel model(m, alloc, 1);
  Adam adam(alloc, {.lr = 1e-3f, .weight_decay = 0.1f, .decoupled = true});
  Rng rng(3);
  const std::int64_t batch = 2;
  std::vector<std::int32_t> x(static_cast<std::size_t>(batch * m.seq_len)), y(x.size());
  for (auto& v : x) v = static_cast<std::int32_t>(rng.below(m.vocab));
  for (auto& v : y) v = static_cast<std::int32_t>(rng.below(m.vocab));
  const StepOptions opts{.recompute = cost::Recompute::Selective, .dropout = {.p = 0.1f, .seed = 4}};
  for (int step = 0; step < 3; ++step) {
    if (step == 2) g_watch = true;  // steps 0 and 1 warm up OpenBLAS and the state
    model.zero_grads();
    model.forward_backward(x, y, batch, opts);
    adam.step(model.params(), model.grads());
  }
  g_watch = false;
  MESSAGE("outside the tracker: " << g_large.load() << " large requests ("
                                  << g_large_bytes.load() << " bytes), "
                                  << g_small_bytes.load() << " bytes in small ones; tracked peak "
                                  << alloc.inner.stats().peak_total << " bytes");
  CHECK(g_large.load() == 0);
  // The hook is live: a large request outside the tracker is counted.
  g_watch = true;
  void* volatile probe = std::malloc(2 * kLarge);
  g_watch = false;
  std::free(probe);
  CHECK(g_large.load() == 1);
}

}  // namespace
}  // namespace strata::backend::cpu
