#pragma once
// The engine's event queue: a binary min-heap of events ordered by
// (time, sequence number). Equal-time events pop in the order they were
// pushed, which makes runs deterministic. Cancellation is lazy: the owner of
// an event compares the event's sequence number with the one it expects and
// skips stale events, so the heap is never searched.
#include <cstdint>
#include <vector>

#include "sim/units.hpp"

namespace strata::sim {

enum class EventKind : std::uint32_t {
  TaskEnd,        // a task's last phase is over
  TransferBegin,  // a transfer's fixed latency is over: its bytes start moving
  FlowDone,       // a flow's bytes are through (stale if the flow's token differs)
};

struct Event {
  Time time = 0;
  std::uint64_t seq = 0;
  std::int32_t id = 0;  // task index, or flow id for FlowDone
  EventKind kind = EventKind::TaskEnd;
};

class EventQueue {
 public:
  void clear() {
    heap_.clear();
    next_seq_ = 0;
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  void reserve(std::size_t n) { heap_.reserve(n); }
  std::size_t state_bytes() const { return heap_.capacity() * sizeof(Event); }

  // Pushes an event and returns its sequence number.
  std::uint64_t push(Time time, EventKind kind, std::int32_t id) {
    const Event e{time, next_seq_++, id, kind};
    std::size_t hole = heap_.size();
    heap_.push_back(e);
    while (hole > 0) {
      const std::size_t parent = (hole - 1) / 2;
      if (!before(e, heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    heap_[hole] = e;
    return e.seq;
  }

  // Time of the earliest event. Precondition: !empty().
  Time top_time() const { return heap_.front().time; }

  // Removes and returns the earliest event. Precondition: !empty().
  Event pop() {
    const Event top = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n > 0) {
      std::size_t hole = 0;
      for (;;) {
        std::size_t child = 2 * hole + 1;
        if (child + 1 < n)
          child += static_cast<std::size_t>(before(heap_[child + 1], heap_[child]));
        else if (child >= n)
          break;
        if (!before(heap_[child], last)) break;
        heap_[hole] = heap_[child];
        hole = child;
      }
      heap_[hole] = last;
    }
    return top;
  }

 private:
  // Branch-free (time, seq) comparison: heap comparisons are unpredictable.
  static bool before(const Event& a, const Event& b) {
    return (a.time < b.time) | ((a.time == b.time) & (a.seq < b.seq));
  }

  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace strata::sim
