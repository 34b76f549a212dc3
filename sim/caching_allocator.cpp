#include "sim/caching_allocator.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace strata::sim {

namespace {
// Virtual address space given to an expandable segment: the source reserves
// more than the GPU's memory; any range larger than a device will do.
constexpr Bytes kExpandableSpan = Bytes{1} << 46;
Bytes round_up(Bytes v, Bytes to) { return (v + to - 1) / to * to; }
}  // namespace

Bytes allocator_round(Bytes bytes) { return bytes < kAllocMinBlock ? kAllocMinBlock : round_up(bytes, kAllocMinBlock); }

Bytes allocator_segment(Bytes rounded) {
  if (rounded <= kAllocSmallSize) return kAllocSmallBuffer;
  if (rounded < kAllocMinLargeAlloc) return kAllocLargeBuffer;
  return round_up(rounded, kAllocRoundLarge);
}

CachingAllocator::CachingAllocator(AllocatorConfig config) : config_(config) {}

void CachingAllocator::link(std::int32_t b, std::int32_t next) {
  at(b).next = next;
  if (next >= 0)
    at(next).prev = b;
  else
    segments_[static_cast<std::size_t>(at(b).segment)].last = b;
}

std::int32_t CachingAllocator::new_block(std::int32_t segment, Bytes address, Bytes size) {
  std::int32_t b;
  if (!spare_.empty()) {
    b = spare_.back();
    spare_.pop_back();
  } else {
    b = static_cast<std::int32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  blocks_[static_cast<std::size_t>(b)] = Block{segment, address, size, -1, -1, true};
  return b;
}

void CachingAllocator::mark_free(std::int32_t b) {
  Block& k = blocks_[static_cast<std::size_t>(b)];
  k.free = true;
  const Segment& seg = segments_[static_cast<std::size_t>(k.segment)];
  pool(seg.small).insert({seg.stream, k.size, k.address, b});
}

void CachingAllocator::unmark_free(std::int32_t b) {
  const Block& k = blocks_[static_cast<std::size_t>(b)];
  const Segment& seg = segments_[static_cast<std::size_t>(k.segment)];
  pool(seg.small).erase({seg.stream, k.size, k.address, b});
}

std::int32_t CachingAllocator::take_free(std::int32_t stream, bool small, Bytes rounded) {
  auto& set = pool(small);
  const auto it = set.lower_bound({stream, rounded, 0, 0});
  if (it == set.end() || std::get<0>(*it) != stream) return -1;
  const std::int32_t b = std::get<3>(*it);
  set.erase(it);
  return b;
}

void CachingAllocator::reserve(Bytes bytes) {
  if (reserved_ + bytes > config_.limit && config_.mode == AllocatorMode::Native) {
    release_cached();
    ++releases_;
  }
  if (reserved_ + bytes > config_.limit && overflow_ == 0) overflow_ = reserved_ + bytes - config_.limit;
  reserved_ += bytes;
  reserved_peak_ = std::max(reserved_peak_, reserved_);
  ++segments_made_;
}

void CachingAllocator::release_cached() {
  for (Segment& s : segments_) {
    if (!s.live || s.first != s.last) continue;
    const std::int32_t b = s.first;
    if (!blocks_[static_cast<std::size_t>(b)].free) continue;
    unmark_free(b);
    spare_.push_back(b);
    s.live = false;
    reserved_ -= s.size;
  }
}

std::int32_t CachingAllocator::grow(std::int32_t stream, bool small, Bytes rounded) {
  if (config_.mode == AllocatorMode::Native) {
    const Bytes size = allocator_segment(rounded);
    reserve(size);
    const auto s = static_cast<std::int32_t>(segments_.size());
    const std::int32_t b = new_block(s, next_address_, size);
    segments_.push_back({stream, small, next_address_, size, b, b, true});
    next_address_ += size;
    return b;
  }
  const auto [at, made] = expandable_.try_emplace({stream, small}, static_cast<std::int32_t>(segments_.size()));
  const std::int32_t es = at->second;
  if (made) {
    segments_.push_back({stream, small, next_address_, 0, -1, -1, true});
    next_address_ += kExpandableSpan;
  }
  Segment& seg = segments_[static_cast<std::size_t>(es)];
  // A free block at the mapped end is extended; else new pages start a block.
  std::int32_t tail = seg.last;
  Bytes have = 0;
  if (tail >= 0 && blocks_[static_cast<std::size_t>(tail)].free) {
    unmark_free(tail);
    have = blocks_[static_cast<std::size_t>(tail)].size;
  } else {
    tail = -1;
  }
  const Bytes pages = round_up(rounded - have, small ? kAllocSmallBuffer : kAllocLargeBuffer);
  reserve(pages);
  const Bytes end = seg.address + seg.size;
  seg.size += pages;
  if (tail >= 0) {
    blocks_[static_cast<std::size_t>(tail)].size += pages;
    return tail;
  }
  const std::int32_t b = new_block(es, end, pages);
  if (seg.last >= 0)
    link(seg.last, b);
  else
    seg.first = b;
  link(b, -1);
  return b;
}

void CachingAllocator::malloc(std::int64_t id, Bytes bytes, std::int32_t stream) {
  if (bytes <= 0) throw std::logic_error("caching allocator: request of " + std::to_string(bytes) + " bytes");
  if (live_.count(id)) throw std::logic_error("caching allocator: id " + std::to_string(id) + " is live");
  const Bytes r = allocator_round(bytes);
  const bool small = r <= kAllocSmallSize;
  std::int32_t b = take_free(stream, small, r);
  if (b < 0) b = grow(stream, small, r);
  // Split off the rest when it is worth keeping (should_split).
  const Bytes rest = blocks_[static_cast<std::size_t>(b)].size - r;
  const bool split =
      (small || config_.mode == AllocatorMode::ExpandableSegments) ? rest >= kAllocMinBlock : rest > kAllocSmallSize;
  if (split) {
    const Block cur = at(b);
    const std::int32_t n = new_block(cur.segment, cur.address + r, rest);
    link(n, cur.next);
    link(b, n);
    at(b).size = r;
    mark_free(n);
  }
  blocks_[static_cast<std::size_t>(b)].free = false;
  live_.emplace(id, std::pair{b, bytes});
  allocated_ += bytes;
  allocated_peak_ = std::max(allocated_peak_, allocated_);
}

void CachingAllocator::free(std::int64_t id) {
  const auto it = live_.find(id);
  if (it == live_.end()) throw std::logic_error("caching allocator: id " + std::to_string(id) + " is not live");
  std::int32_t b = it->second.first;
  allocated_ -= it->second.second;
  live_.erase(it);
  // Merge with free neighbours (try_merge_blocks).
  auto absorb_next = [&](std::int32_t into) {
    const std::int32_t n = at(into).next;
    at(into).size += at(n).size;
    link(into, at(n).next);
    spare_.push_back(n);
  };
  const std::int32_t next = blocks_[static_cast<std::size_t>(b)].next;
  if (next >= 0 && blocks_[static_cast<std::size_t>(next)].free) {
    unmark_free(next);
    absorb_next(b);
  }
  const std::int32_t prev = blocks_[static_cast<std::size_t>(b)].prev;
  if (prev >= 0 && blocks_[static_cast<std::size_t>(prev)].free) {
    unmark_free(prev);
    absorb_next(prev);
    b = prev;
  }
  mark_free(b);
}

AllocatorReplay replay_allocator(const TaskGraph& graph, PoolId pool, const PoolUsage& usage, AllocatorConfig config,
                                 int max_steps, const std::function<std::span<const Bytes>(BufferId)>& tensors) {
  const auto& buffers = graph.buffers();
  auto request = [&](BufferId id) {
    const Buffer& b = buffers[static_cast<std::size_t>(id.index)];
    return b.pool == pool && b.bytes > 0 && b.tag != MemTag::Runtime && b.tag != MemTag::AllocatorReserve;
  };
  CachingAllocator a(config);
  // Each buffer's stream: the lane of the task that allocates it (stream
  // 0, the first resource's index + 1 otherwise, so 0 is the start's).
  std::vector<std::int32_t> stream(buffers.size(), 0);
  for (const Task& t : graph.tasks())
    if (!t.resources.empty())
      for (BufferId b : t.allocs) stream[static_cast<std::size_t>(b.index)] = t.resources.front().index + 1;
  // A buffer's tensors have ids buffer · 2^20 + j.
  constexpr int kShift = 20;
  auto tensors_of = [&](std::size_t i) {
    return tensors ? tensors(BufferId{static_cast<std::int32_t>(i)}) : std::span<const Bytes>{};
  };
  auto take = [&](std::size_t i) {
    const std::span<const Bytes> t = tensors_of(i);
    const auto id = static_cast<std::int64_t>(i) << kShift;
    if (t.empty()) return a.malloc(id, buffers[i].bytes, stream[i]);
    if (t.size() >= (std::size_t{1} << kShift)) throw std::logic_error("caching allocator: too many tensors in a buffer");
    for (std::size_t j = 0; j < t.size(); ++j) a.malloc(id + static_cast<std::int64_t>(j), t[j], stream[i]);
  };
  auto give = [&](std::size_t i) {
    const std::span<const Bytes> t = tensors_of(i);
    const auto id = static_cast<std::int64_t>(i) << kShift;
    if (t.empty()) return a.free(id);
    for (std::size_t j = t.size(); j-- > 0;) a.free(id + static_cast<std::int64_t>(j));
  };
  std::vector<char> live(buffers.size(), 0), at_start(buffers.size(), 0);
  for (std::size_t i = 0; i < buffers.size(); ++i)
    at_start[i] = buffers[i].live_at_start && request(BufferId{static_cast<std::int32_t>(i)});
  AllocatorReplay out;
  Bytes before = -1;
  for (int step = 0; step < std::max(1, max_steps); ++step) {
    // The step starts with the buffers live at start, and only them, live:
    // the others freed, then those allocated (in buffer order).
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (live[i] && !at_start[i]) {
        give(i);
        live[i] = 0;
      }
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (at_start[i] && !live[i]) {
        take(i);
        live[i] = 1;
      }
    for (const MemChange& c : usage.changes) {
      if (!request(c.buffer)) continue;
      const auto i = static_cast<std::size_t>(c.buffer.index);
      if (c.alloc) {
        take(i);
        live[i] = 1;
      } else if (live[i]) {
        give(i);
        live[i] = 0;
      }
    }
    out.steps = step + 1;
    if (a.reserved_peak() == before) break;
    before = a.reserved_peak();
  }
  out.reserved_peak = a.reserved_peak();
  out.allocated_peak = a.allocated_peak();
  out.segments_made = a.segments_made();
  out.releases = a.releases();
  out.overflow = a.overflow();
  return out;
}

}  // namespace strata::sim
