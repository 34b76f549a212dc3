#include "backend/cpu/tensor.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

std::size_t idx(MemTag t) { return static_cast<std::size_t>(t); }

TEST_CASE("cpu/tensor: tracking allocator: live and peak bytes by tag follow tensor lifetimes") {
  // 2×3 floats = 24 bytes of activations and 4 int32 = 16 bytes of
  // workspace; freeing the first leaves the peaks at 40 total, 24 and 16.
  TrackingAllocator alloc;
  {
    Tensor a(alloc, {2, 3}, MemTag::Activations);
    CHECK(a.numel() == 6);
    CHECK(a.bytes() == 24);
    CHECK(a[5] == 0.0f);  // zero-filled
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % kAlignment == 0);
    IndexTensor w(alloc, {4}, MemTag::Workspace);
    CHECK(alloc.stats().current_total == 40);
    Tensor moved = std::move(a);  // ownership moves, bytes do not double
    CHECK(a.empty());
    CHECK(a.bytes() == 0);
    CHECK(alloc.stats().current[idx(MemTag::Activations)] == 24);
    moved.release();
    CHECK(alloc.stats().current_total == 16);
  }
  const auto s = alloc.stats();
  CHECK(s.current_total == 0);
  CHECK(s.peak_total == 40);
  CHECK(s.peak[idx(MemTag::Activations)] == 24);
  CHECK(s.peak[idx(MemTag::Workspace)] == 16);
  CHECK(s.allocations == 2);
  alloc.reset_peaks();
  CHECK(alloc.stats().peak_total == 0);
}

TEST_CASE("cpu/tensor: tracking allocator keeps freed blocks for the next request of their size") {
  // A freed block of 100 bytes (128 rounded) serves the next request of 100
  // or 128 bytes; one of 200 gets another block. The counts are of live
  // bytes: reuse changes none of them.
  TrackingAllocator alloc;
  void* a = alloc.allocate(100, MemTag::Activations);
  alloc.deallocate(a, 100, MemTag::Activations);
  CHECK(alloc.stats().current_total == 0);
  void* b = alloc.allocate(128, MemTag::Grads);
  void* c = alloc.allocate(200, MemTag::Grads);
  // Under AddressSanitizer every block is freed at once (use after free
  // stays detectable), so only a caching build reuses it.
  if (TrackingAllocator::kCachesBlocks) CHECK(b == a);
  CHECK(c != b);
  const auto s = alloc.stats();
  CHECK(s.current_total == 328);
  CHECK(s.current[idx(MemTag::Grads)] == 328);
  CHECK(s.peak_total == 328);
  CHECK(s.allocations == 3);
  alloc.deallocate(b, 128, MemTag::Grads);
  alloc.deallocate(c, 200, MemTag::Grads);
  CHECK(alloc.stats().current_total == 0);
}

TEST_CASE("cpu/tensor: tracking allocator staggers blocks of a page or more within their first page") {
  // Large blocks of the same size start at different offsets into a page
  // (multiples of 64 from 64 to 4032, in turn), so loops streaming several
  // of them do not meet 4K aliasing; every block stays 64-byte aligned and
  // its bytes are usable to the end; small blocks are as the heap gives them.
  TrackingAllocator alloc;
  constexpr Bytes kBig = 1 << 20;
  std::vector<void*> big;
  std::vector<std::uintptr_t> offsets;
  for (int i = 0; i < 4; ++i) {
    big.push_back(alloc.allocate(kBig, MemTag::Params));
    const auto at = reinterpret_cast<std::uintptr_t>(big.back());
    CHECK(at % kAlignment == 0);
    offsets.push_back(at % 4096);
    std::memset(big.back(), 0xab, static_cast<std::size_t>(kBig));  // the whole block is writable
  }
  std::sort(offsets.begin(), offsets.end());
  CHECK(std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end());  // four offsets, all different
  for (auto o : offsets) CHECK(o != 0);
  // The counts are of the bytes asked for, the offset not included.
  CHECK(alloc.stats().current_total == 4 * kBig);
  for (void* p : big) alloc.deallocate(p, kBig, MemTag::Params);
  CHECK(alloc.stats().current_total == 0);
  // A freed large block comes back for the next request of its size.
  void* again = alloc.allocate(kBig, MemTag::Grads);
  if (TrackingAllocator::kCachesBlocks) CHECK(again == big.back());
  alloc.deallocate(again, kBig, MemTag::Grads);
  void* small = alloc.allocate(100, MemTag::Other);
  CHECK(reinterpret_cast<std::uintptr_t>(small) % kAlignment == 0);
  alloc.deallocate(small, 100, MemTag::Other);
}

TEST_CASE("cpu/tensor: tracking allocator with a capacity refuses to go beyond it") {
  // A 100-byte pool holds 24 bytes twice (48) but not a further 64.
  TrackingAllocator pool(100);
  Tensor a(pool, {6}, MemTag::Params), b(pool, {6}, MemTag::Grads);
  CHECK_THROWS_AS(Tensor(pool, {16}, MemTag::Activations), Error);
  CHECK(pool.stats().current_total == 48);
}

}  // namespace
}  // namespace strata::backend::cpu
