#include "backend/cpu/comm.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "sim/error.hpp"

namespace strata::backend::cpu {

ChunkRange chunk_range(std::int64_t count, int n, int i) {
  return {count * i / n, count * (i + 1) / n};
}

namespace {
void copy(float* dst, const float* src, std::int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}
}  // namespace

// ---- GroupState -------------------------------------------------------------

GroupState::GroupState(CommWorld& world, std::vector<int> members)
    : world_(&world),
      members_(std::move(members)),
      staging_(members_.size(), {nullptr, nullptr}),
      whole_(members_.size(), nullptr) {}

void GroupState::barrier() {
  std::unique_lock lock(mu_);
  if (world_->cancelled()) throw Cancelled("collective cancelled: another rank failed");
  const std::uint64_t gen = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || world_->cancelled(); });
  if (generation_ == gen) throw Cancelled("collective cancelled: another rank failed");
}

void GroupState::wake_all() {
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

// ---- CommWorld --------------------------------------------------------------

CommWorld::CommWorld(int ranks, Allocator* mailbox) : ranks_(ranks), mailbox_(mailbox) {
  if (ranks < 1) throw Error("CommWorld: needs at least one rank");
}

CommWorld::~CommWorld() = default;

GroupState& CommWorld::group(const std::vector<int>& members) {
  if (members.empty()) throw Error("CommWorld::group: a group needs members");
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= ranks_)
      throw Error("CommWorld::group: rank " + std::to_string(members[i]) + " outside a world of " +
                  std::to_string(ranks_));
    if (i > 0 && members[i] <= members[i - 1])
      throw Error("CommWorld::group: members must be ascending and distinct");
  }
  std::lock_guard lock(mu_);
  auto& g = groups_[members];
  if (!g) g = std::make_unique<GroupState>(*this, members);
  return *g;
}

void CommWorld::cancel() {
  std::vector<GroupState*> groups;
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    for (auto& [_, g] : groups_) groups.push_back(g.get());
    mail_cv_.notify_all();
  }
  for (auto* g : groups) g->wake_all();
}

bool CommWorld::cancelled() const { return cancelled_.load(); }

// ---- Comm -------------------------------------------------------------------

Comm::Comm(GroupState& group, int global_rank, Allocator& alloc)
    : group_(&group), world_(group.world_), global_(global_rank), alloc_(&alloc) {
  const auto& m = group.members();
  const auto it = std::find(m.begin(), m.end(), global_rank);
  if (it == m.end())
    throw Error("Comm: rank " + std::to_string(global_rank) + " is not a member of the group");
  me_ = static_cast<int>(it - m.begin());
}

float* Comm::next_staging(std::int64_t elements) {
  Tensor& t = stage_[phase_ % 2];
  if (t.numel() < elements) t = Tensor(*alloc_, {elements}, MemTag::CommBuffers);
  return t.data();
}

void Comm::reserve_staging(std::int64_t elements) {
  if (size() == 1) return;  // a group of one stages nothing
  for (Tensor& t : stage_)
    if (t.numel() < elements) t = Tensor(*alloc_, {elements}, MemTag::CommBuffers);
}

const float* Comm::ring_step(int from, std::int64_t elements_sent) {
  const std::size_t which = phase_ % 2;
  {
    std::lock_guard lock(group_->mu_);
    group_->staging_[static_cast<std::size_t>(me_)][which] = stage_[which].data();
  }
  group_->barrier();
  ++phase_;
  ++counters_.ring_steps;
  counters_.elements_sent += elements_sent;
  std::lock_guard lock(group_->mu_);
  return group_->staging_[static_cast<std::size_t>(from)][which];
}

void Comm::reduce_scatter(std::span<const float> in, std::span<float> out) {
  reduce_scatter_ring(in, out);
  finish();
}

void Comm::finish() {
  // Nobody leaves a collective while a neighbour may still read its staging
  // buffer (which a later collective could overwrite, or the handle free).
  if (size() > 1) group_->barrier();
}

void Comm::reduce_scatter_ring(std::span<const float> in, std::span<float> out) {
  const int n = size();
  const auto S = static_cast<std::int64_t>(in.size());
  const ChunkRange mine = chunk_range(S, n, me_);
  if (static_cast<std::int64_t>(out.size()) != mine.size())
    throw Error("reduce_scatter: output holds " + std::to_string(out.size()) +
                " elements, chunk " + std::to_string(me_) + " has " + std::to_string(mine.size()));
  ++counters_.collectives;
  if (n == 1) {
    if (out.data() != in.data()) copy(out.data(), in.data(), S);
    return;
  }
  const int left = (me_ + n - 1) % n;
  auto chunk = [&](int c) { return chunk_range(S, n, ((c % n) + n) % n); };
  const std::int64_t most = (S + n - 1) / n;  // the largest chunk
  // Step t sends chunk me−1−t (raw at t = 0, then what it accumulated).
  ChunkRange send = chunk(me_ - 1);
  copy(next_staging(most), in.data() + send.begin, send.size());
  for (int t = 0; t < n - 1; ++t) {
    const float* from_left = ring_step(left, send.size());
    const ChunkRange got = chunk(me_ - 2 - t);  // what the left neighbour sent
    const float* own = in.data() + got.begin;
    float* acc = t + 1 < n - 1 ? next_staging(most) : out.data();
    for (std::int64_t i = 0; i < got.size(); ++i) acc[i] = from_left[i] + own[i];
    send = got;
  }
}

void Comm::all_gather_in_place(std::span<float> out) {
  const int n = size();
  if (n == 1) return;
  const auto S = static_cast<std::int64_t>(out.size());
  const int left = (me_ + n - 1) % n;
  auto chunk = [&](int c) { return chunk_range(S, n, ((c % n) + n) % n); };
  const std::int64_t most = (S + n - 1) / n;
  ChunkRange send = chunk(me_);
  copy(next_staging(most), out.data() + send.begin, send.size());
  for (int t = 0; t < n - 1; ++t) {
    const float* from_left = ring_step(left, send.size());
    const ChunkRange got = chunk(me_ - 1 - t);
    copy(out.data() + got.begin, from_left, got.size());
    if (t + 1 < n - 1) copy(next_staging(most), from_left, got.size());
    send = got;
  }
}

void Comm::all_gather(std::span<const float> mine, std::span<float> out) {
  const auto S = static_cast<std::int64_t>(out.size());
  const ChunkRange r = chunk_range(S, size(), me_);
  if (static_cast<std::int64_t>(mine.size()) != r.size())
    throw Error("all_gather: input holds " + std::to_string(mine.size()) + " elements, chunk " +
                std::to_string(me_) + " of " + std::to_string(S) + " has " +
                std::to_string(r.size()));
  ++counters_.collectives;
  if (mine.data() != out.data() + r.begin) copy(out.data() + r.begin, mine.data(), r.size());
  all_gather_in_place(out);
  finish();
}

void Comm::all_reduce(std::span<float> data) {
  const auto S = static_cast<std::int64_t>(data.size());
  const ChunkRange r = chunk_range(S, size(), me_);
  // The reduce-scatter reads only chunks other than `me_` before its last
  // step, which reads and writes chunk `me_` element by element: in place is safe.
  reduce_scatter_ring(data, data.subspan(static_cast<std::size_t>(r.begin),
                                         static_cast<std::size_t>(r.size())));
  all_gather_in_place(data);
  finish();
}

void Comm::broadcast(std::span<float> data, int root) {
  const int n = size();
  if (root < 0 || root >= n) throw Error("broadcast: root " + std::to_string(root) + " outside the group");
  ++counters_.collectives;
  if (n == 1) return;
  const auto S = static_cast<std::int64_t>(data.size());
  // Scatter: every member takes its chunk from the root's copy; then a ring
  // all-gather.
  {
    std::lock_guard lock(group_->mu_);
    if (me_ == root) {
      if (whole_.numel() < S) whole_ = Tensor(*alloc_, {std::max<std::int64_t>(S, 1)}, MemTag::CommBuffers);
      copy(whole_.data(), data.data(), S);
      counters_.elements_sent += S;
      group_->whole_[static_cast<std::size_t>(me_)] = whole_.data();
    }
  }
  group_->barrier();
  ++counters_.ring_steps;
  const float* src = nullptr;
  {
    std::lock_guard lock(group_->mu_);
    src = group_->whole_[static_cast<std::size_t>(root)];
  }
  const ChunkRange r = chunk_range(S, n, me_);
  if (me_ != root) copy(data.data() + r.begin, src + r.begin, r.size());
  all_gather_in_place(data);
  finish();
}

void Comm::all_to_all(std::span<const float> in, std::span<float> out) {
  const int n = size();
  if (in.size() != out.size() || in.size() % static_cast<std::size_t>(n) != 0)
    throw Error("all_to_all: input and output must hold the same multiple of the group size");
  ++counters_.collectives;
  const auto B = static_cast<std::int64_t>(in.size()) / n;
  copy(out.data() + me_ * B, in.data() + me_ * B, B);
  // Step t: send block me+t to member me+t, receive member me−t's block me.
  for (int t = 1; t < n; ++t) {
    const int to = (me_ + t) % n, from = (me_ + n - t) % n;
    copy(next_staging(B), in.data() + to * B, B);
    const float* got = ring_step(from, B);
    copy(out.data() + from * B, got, B);
  }
  finish();
}

void Comm::send(int peer, std::int64_t tag, std::span<const float> data) {
  if (peer < 0 || peer >= world_->size()) throw Error("send: peer " + std::to_string(peer) + " outside the world");
  CommWorld::Message m;
  m.tag = tag;
  m.data = Tensor(world_->mailbox_ != nullptr ? *world_->mailbox_ : *alloc_,
                  {static_cast<std::int64_t>(data.size())}, MemTag::CommBuffers);
  copy(m.data.data(), data.data(), static_cast<std::int64_t>(data.size()));
  ++counters_.messages_sent;
  counters_.elements_sent += static_cast<std::int64_t>(data.size());
  std::lock_guard lock(world_->mu_);
  world_->mail_[{global_, peer}].push_back(std::move(m));
  world_->mail_cv_.notify_all();
}

void Comm::recv(int peer, std::int64_t tag, std::span<float> data) {
  CommWorld::Message m;
  {
    std::unique_lock lock(world_->mu_);
    auto& box = world_->mail_[{peer, global_}];
    auto find = [&] {
      return std::find_if(box.begin(), box.end(), [&](const auto& x) { return x.tag == tag; });
    };
    world_->mail_cv_.wait(lock, [&] { return world_->cancelled() || find() != box.end(); });
    const auto it = find();
    if (it == box.end()) throw Cancelled("recv: cancelled: another rank failed");
    m = std::move(*it);
    box.erase(it);
  }
  if (m.data.numel() != static_cast<std::int64_t>(data.size()))
    throw Error("recv: message " + std::to_string(tag) + " from rank " + std::to_string(peer) +
                " holds " + std::to_string(m.data.numel()) + " elements, expected " +
                std::to_string(data.size()));
  copy(data.data(), m.data.data(), m.data.numel());
}

}  // namespace strata::backend::cpu
