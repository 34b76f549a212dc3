// Its own test binary: it replaces the process's malloc family to count
// heap requests made outside the tracking allocator.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backend/cpu/allocator.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/rng.hpp"

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
thread_local bool t_in_tracker = false;  // requests the tracking allocator makes

void note(std::size_t n) {
  if (!g_watch.load(std::memory_order_relaxed) || t_in_tracker) return;
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
