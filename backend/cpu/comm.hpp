#pragma once
// Collectives between rank threads over shared memory: the CPU executor's
// NCCL. A CommWorld holds the state every rank of one run shares (groups,
// point-to-point mailboxes, a cancel flag); each rank talks to a group
// through a Comm handle that owns its staging buffers, allocated from that
// rank's Allocator under MemTag::CommBuffers.
//
// Algorithms are the ring algorithms the cost model prices (costmodel
// collectives, Patarasuk & Yuan 2009; NCCL's ring): with n members and S
// elements, a reduce-scatter or an all-gather takes n−1 steps moving S/n per
// step and rank, an all-reduce is the two (2(n−1) steps), a broadcast
// scatters from the root then all-gathers (n steps), an all-to-all takes n−1
// pairwise steps. One step is one "send to the right neighbour, receive
// from the left": the sender copies its chunk into its staging buffer, a
// group barrier, the receiver reads the left neighbour's staging buffer.
// Staging buffers are double-buffered, so one barrier per step suffices;
// one more barrier ends each collective, so no member leaves while another
// still reads its staging buffer.
//
// Chunks: element range [⌊S·i/n⌋, ⌊S·(i+1)/n⌋) is chunk i (chunk_range);
// sizes need not divide. Reduce-scatter leaves chunk `rank` of the sum on
// member `rank`.
//
// Determinism: chunk c is summed in ring order starting at member c+1
// (((x[c+1] + x[c+2]) + ...) + x[c]), the same every run whatever the
// thread timing; an all-reduce hands every member the same bits.
//
// Failure: a rank that throws calls CommWorld::cancel(); every rank blocked
// in (or later entering) a collective or a receive of that world then
// throws Cancelled (a strata::Error) instead of waiting for ever.
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/allocator.hpp"
#include "backend/cpu/tensor.hpp"

namespace strata::backend::cpu {

// What a rank blocked in a cancelled world throws: another rank's failure,
// not its own.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// Element range [begin, end) of chunk i when `count` elements are split
// into n chunks.
struct ChunkRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
ChunkRange chunk_range(std::int64_t count, int n, int i);

// What one member's handle has done, for tests and reports.
struct CommCounters {
  std::int64_t ring_steps = 0;     // barrier-separated steps of collectives
  std::int64_t elements_sent = 0;  // floats copied into this rank's staging buffers
  std::int64_t collectives = 0;
  std::int64_t messages_sent = 0;  // point-to-point
};

class CommWorld;

// State one group's members share. Made by CommWorld::group.
class GroupState {
 public:
  GroupState(CommWorld& world, std::vector<int> members);
  const std::vector<int>& members() const { return members_; }
  int size() const { return static_cast<int>(members_.size()); }

 private:
  friend class Comm;
  friend class CommWorld;
  // Waits until every member arrived; throws Cancelled when the world was cancelled.
  void barrier();
  void wake_all();

  CommWorld* world_;
  std::vector<int> members_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  // Each member's published staging buffers (two, for double buffering) and
  // its whole buffer (broadcast, all-to-all), valid between barriers.
  std::vector<std::array<const float*, 2>> staging_;
  std::vector<const float*> whole_;
};

// Shared by the ranks of one run; thread-safe.
class CommWorld {
 public:
  // `mailbox`, when given, holds every message between its send and its
  // receive (else the sender's allocator does): an executor that keeps
  // messages in transit out of the ranks' pools, whose peaks would
  // otherwise depend on when each receiver takes them.
  explicit CommWorld(int ranks, Allocator* mailbox = nullptr);
  CommWorld(const CommWorld&) = delete;
  CommWorld& operator=(const CommWorld&) = delete;
  ~CommWorld();

  int size() const { return ranks_; }
  // The group of these global ranks (ascending, distinct, in range): the
  // same object for the same list, whichever rank asks first.
  GroupState& group(const std::vector<int>& members);

  // Makes every waiting and future collective or receive throw Cancelled.
  void cancel();
  bool cancelled() const;

 private:
  friend class Comm;
  friend class GroupState;
  struct Message {
    std::int64_t tag = 0;
    Tensor data;  // staged in the mailbox or the sender's allocator (CommBuffers)
  };
  int ranks_;
  Allocator* mailbox_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable mail_cv_;
  std::atomic<bool> cancelled_{false};
  std::map<std::vector<int>, std::unique_ptr<GroupState>> groups_;
  // (sender, receiver) -> messages in the order sent.
  std::map<std::pair<int, int>, std::vector<Message>> mail_;
};

// One rank's handle to one group. Not thread-safe: one thread per handle.
// Every member must call the same collectives in the same order with the
// same sizes.
class Comm {
 public:
  // `global_rank` must be a member of `group`; staging comes from `alloc`.
  Comm(GroupState& group, int global_rank, Allocator& alloc);

  int size() const { return group_->size(); }
  int rank() const { return me_; }  // position in the group
  int global_rank() const { return global_; }
  const std::vector<int>& members() const { return group_->members(); }

  // In place: every member ends with the elementwise sum.
  void all_reduce(std::span<float> data);
  // `in`: every member's S elements; `out`: chunk rank() of the sum
  // (chunk_range(S, size, rank).size() elements).
  void reduce_scatter(std::span<const float> in, std::span<float> out);
  // `mine`: this member's chunk rank() of `out` (chunk_range sizes); `out`:
  // all chunks, in member order.
  void all_gather(std::span<const float> mine, std::span<float> out);
  // `data` on `root` (a position in the group) copied to every member.
  void broadcast(std::span<float> data, int root);
  // `in` and `out` hold size() equal blocks: block j of `in` goes to member
  // j, which stores it as block rank() of its `out`.
  void all_to_all(std::span<const float> in, std::span<float> out);

  // Point to point within the world (peers are global ranks). A send copies
  // `data` into a staging tensor of this rank's allocator and returns; the
  // matching receive (same peer pair and tag, in send order) copies it out
  // and frees it. Receive waits; throws Cancelled when the world is cancelled or the
  // size differs.
  void send(int peer, std::int64_t tag, std::span<const float> data);
  void recv(int peer, std::int64_t tag, std::span<float> data);

  // Both staging buffers with room for `elements` floats from now on (the
  // ring's chunks of every collective the caller will run, so none grows
  // one later: what an executor declares for the whole step). Only before
  // this handle's first collective: a neighbour may read a buffer after.
  void reserve_staging(std::int64_t elements);

  const CommCounters& counters() const { return counters_; }

 private:
  // The staging buffer of the next ring step, with room for `elements`.
  float* next_staging(std::int64_t elements);
  // One step: publish the staging buffer just filled (`elements_sent`
  // floats), wait for every member, return member `from`'s.
  const float* ring_step(int from, std::int64_t elements_sent);
  void reduce_scatter_ring(std::span<const float> in, std::span<float> out);
  void all_gather_in_place(std::span<float> out);
  void finish();

  GroupState* group_;
  CommWorld* world_;
  int me_ = 0, global_ = 0;
  Allocator* alloc_;
  std::array<Tensor, 2> stage_;  // ring steps, double-buffered
  Tensor whole_;                 // broadcast root's copy
  std::uint64_t phase_ = 0;      // ring steps so far on this group: picks the staging buffer
  CommCounters counters_;
};

}  // namespace strata::backend::cpu
