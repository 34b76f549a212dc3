#include "strategies/coarse.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "sim/error.hpp"
#include "sim/limits.hpp"
#include "strategies/memory.hpp"
#include "strategies/schedule.hpp"
#include "strategies/step_layout.hpp"

namespace strata::strategies {

bool coarse_is_exact(const Plan& plan) {
  const bool zero3 = plan.zero >= 3 && plan.dp > 1;
  return !zero3 && !plan.offload.weights && !plan.offload.activations;
}

namespace {

constexpr Time kPending = -1;  // a send not timed yet
constexpr Time kNoSend = -2;   // the chunk has no neighbour on that side

// One (model chunk, pass) over one microbatch, as one compute task: its
// duration and where that time goes.
struct ChunkPass {
  Time duration = 0;
  Time compute = 0, recompute = 0;
  std::array<Time, kCommKinds> comm{};  // blocking tp/cp/ep; ZeRO-3 waits under dp
  Time stall = 0;                       // waiting for offloaded bytes
  // Backward only: end of each layer's backward (after its blocking
  // communication) from the task's start, by layer index in the chunk; the
  // head's and the whole chunk's.
  std::vector<Time> layer_end;
  Time head_end = 0;
  // Activation offload. Forward: when its first and last layers end, from
  // the task's start, and the device-to-host copies of what they keep (all,
  // and the last layer's). Backward: the prefetch of the first layer it
  // runs (the chunk's last), which waits for that layer's copy to the host.
  Time first_layer_end = 0, last_layer_end = 0, copies_out = 0, last_copy_out = 0;
  Time first_prefetch = 0;
};

class CoarseStep : StepLayout {
 public:
  CoarseStep(const Scenario& sc, const StepCosts& costs)
      : StepLayout(sc), sc_(sc), plan_(sc.plan), costs_(costs) {
    price_layers();
    require_countable_step(sc, serial_ns(), static_cast<std::uint64_t>(m_) * 2 * chunks_.size());
    const int chunks = static_cast<int>(chunks_.size());
    fwd_.resize(chunks_.size());
    bwd_.resize(chunks_.size());
    for (int k = 0; k < chunks; ++k) {
      fwd_[static_cast<std::size_t>(k)] = forward(k);
      bwd_[static_cast<std::size_t>(k)] = backward(k);
    }
  }

  StepPrediction run(const PipelineSchedule* given) {
    std::optional<PipelineSchedule> own;
    if (!given) own = make_schedule(plan_.schedule, p_, v_, m_);
    const PipelineSchedule& sched = given ? *given : *own;
    const int chunks = static_cast<int>(chunks_.size());
    const std::size_t slots = chunks_.size() * static_cast<std::size_t>(m_);
    // End of the send of each (model chunk, microbatch)'s activations
    // (forward) and gradients (backward).
    std::vector<Time> fwd_sent(slots, kPending), bwd_sent(slots, kPending);
    // When the device-to-host engine has copied out what each (model
    // chunk, microbatch)'s forward keeps (activation offload).
    std::vector<Time> offloaded(plan_.offload.activations ? slots : 0, 0);
    for (int mb = 0; mb < m_; ++mb) {
      fwd_sent[slot(chunks - 1, mb)] = kNoSend;
      bwd_sent[slot(0, mb)] = kNoSend;
    }
    stages_.assign(static_cast<std::size_t>(p_), Stage{});
    for (auto& st : stages_) {
      st.compute_free = costs_.overhead_per_step();
      st.acc.compute += st.compute_free;
      st.last_bwd_start.assign(chunks_.size(), 0);
    }
    std::uint64_t tasks = 0;
    // Model chunk of each (stage, virtual chunk).
    std::vector<int> chunk_of(static_cast<std::size_t>(p_ * v_));
    for (int s = 0; s < p_; ++s)
      for (int c = 0; c < v_; ++c) chunk_of[static_cast<std::size_t>(s * v_ + c)] = model_chunk(sched, s, c);
    // Each stage runs its steps in order; a step whose neighbour's send is
    // not timed yet waits for the next round. Schedules are deadlock-free,
    // so every round times at least one step. Rounds alternate direction so
    // that activations (downstream) and gradients (upstream) both travel
    // the whole pipeline in one round.
    std::size_t left = 0;
    for (const auto& steps : sched.stages) left += steps.size();
    for (bool down = true; left > 0; down = !down) {
      std::size_t timed = 0;
      for (int i = 0; i < p_; ++i) {
        const int s = down ? i : p_ - 1 - i;
        Stage& st = stages_[static_cast<std::size_t>(s)];
        const auto& steps = sched.stages[static_cast<std::size_t>(s)];
        while (st.next < steps.size()) {
          const Step& step = steps[st.next];
          const int k = chunk_of[static_cast<std::size_t>(s * v_ + step.chunk)];
          const bool fwd = step.phase == Phase::Forward;
          Time ready = st.compute_free;
          if (fwd ? k > 0 : k + 1 < chunks) {
            const Time sent = fwd ? fwd_sent[slot(k - 1, step.microbatch)]
                                  : bwd_sent[slot(k + 1, step.microbatch)];
            if (sent == kPending) break;
            ready = std::max(ready, sent);
          }
          if (!plan_.implementation.overlap_p2p && st.pending_send != kNoSend)
            ready = std::max(ready, st.pending_send);
          const ChunkPass& pass = (fwd ? fwd_ : bwd_)[static_cast<std::size_t>(k)];
          if (!offloaded.empty() && !fwd && pass.first_prefetch > 0) {
            // The backward's first layer waits for its activations to have
            // gone out (behind the copies queued before them) and come back.
            const Time back = offloaded[slot(k, step.microbatch)] + pass.first_prefetch - pass.head_end;
            if (back > ready) {
              st.acc.stall += back - ready;
              ready = back;
            }
          }
          // Idle on the compute stream while this stage's own send is in
          // flight is exposed pipeline communication; the rest is bubble.
          st.acc.comm[static_cast<std::size_t>(CommKind::PP)] +=
              std::max<Time>(0, std::min(ready, st.send_end) - std::max(st.compute_free, st.send_start));
          if (fwd && pass.copies_out > 0) {
            st.d2h_free = std::max(std::max(st.d2h_free, ready + pass.first_layer_end) + pass.copies_out,
                                   ready + pass.last_layer_end + pass.last_copy_out);
            offloaded[slot(k, step.microbatch)] = st.d2h_free;
          }
          if (!fwd) st.last_bwd_start[static_cast<std::size_t>(k)] = ready;
          st.compute_free = ready + pass.duration;
          ++tasks;
          st.pending_send = kNoSend;
          if (fwd ? k + 1 < chunks : k > 0) {
            st.send_start = std::max(st.compute_free, st.p2p_free);
            st.send_end = st.p2p_free = st.send_start + p2p_;
            st.pending_send = st.send_end;
            (fwd ? fwd_sent : bwd_sent)[slot(k, step.microbatch)] = st.send_end;
            ++tasks;
          }
          ++st.next;
          ++timed;
        }
      }
      if (timed == 0) throw Error("coarse step: the pipeline schedule does not progress");
      left -= timed;
    }
    // Every stage runs each of its chunks' passes once per microbatch.
    for (int k = 0; k < chunks; ++k) {
      Acc& a = stages_[static_cast<std::size_t>(k % p_)].acc;
      add(a, fwd_[static_cast<std::size_t>(k)], m_);
      add(a, bwd_[static_cast<std::size_t>(k)], m_);
    }
    Time step_time = 0;
    for (int s = 0; s < p_; ++s) {
      tasks += tail(s);
      step_time = std::max(step_time, stages_[static_cast<std::size_t>(s)].end);
    }
    // The tail's durations saturate (capped_sum): a step that reaches the
    // cap is refused.
    require_countable_step(sc_, static_cast<double>(step_time), tasks);
    StepPrediction pr;
    pr.step_time = step_time;
    pr.tasks = tasks;
    Time most = -1;
    for (int s = 0; s < p_; ++s) {
      const Acc& a = stages_[static_cast<std::size_t>(s)].acc;
      TimeBreakdown b;
      b.compute = a.compute;
      b.recompute = a.recompute;
      b.exposed_comm = a.comm;
      b.offload_stall = a.stall;
      b.optimizer = a.optimizer;
      b.bubble = std::max<Time>(0, step_time - b.total());
      pr.per_stage.push_back(b);
      if (b.compute + b.recompute > most) {
        most = b.compute + b.recompute;
        pr.critical_stage = s;
      }
    }
    pr.breakdown = pr.per_stage[static_cast<std::size_t>(pr.critical_stage)];
    pr.bubble_fraction =
        step_time > 0 ? static_cast<double>(pr.breakdown.bubble) / static_cast<double>(step_time) : 0;
    add_step_flops(sc_, pr);
    return pr;
  }

 private:
  struct Acc {
    Time compute = 0, recompute = 0, optimizer = 0, stall = 0;
    std::array<Time, kCommKinds> comm{};
  };
  struct Stage {
    std::size_t next = 0;  // next step of the schedule
    Time compute_free = 0, p2p_free = 0, d2h_free = 0;
    Time pending_send = kNoSend;  // end of the last step's send
    Time send_start = 0, send_end = 0;
    std::vector<Time> last_bwd_start;  // by model chunk
    Time end = 0;
    Acc acc;
  };

  std::size_t slot(int k, int mb) const {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(m_) + static_cast<std::size_t>(mb);
  }
  static void add(Acc& a, const ChunkPass& p, Time times) {
    a.compute += times * p.compute;
    a.recompute += times * p.recompute;
    a.stall += times * p.stall;
    for (std::size_t i = 0; i < kCommKinds; ++i) a.comm[i] += times * p.comm[i];
  }
  bool zero3() const { return plan_.zero >= 3 && plan_.dp > 1; }

  // The per-layer prices every chunk shares (all blocks are alike).
  void price_layers() {
    f_ = costs_.layer(chain_.block, Pass::Forward);
    b_ = costs_.layer(chain_.block, Pass::Backward);
    r_ = costs_.layer(chain_.block, Pass::Recompute);
    core_ = costs_.layer(chain_.block, Pass::Recompute, true);
    for (CommKind kind : {CommKind::TP, CommKind::CP, CommKind::EP}) {
      const bool on = kind == CommKind::TP ? plan_.tp > 1 : kind == CommKind::CP ? plan_.cp > 1 : plan_.ep > 1;
      if (!on) continue;
      comm_f_[static_cast<std::size_t>(kind)] = std::max<Time>(0, costs_.layer_comm(kind, Pass::Forward));
      comm_b_[static_cast<std::size_t>(kind)] = std::max<Time>(0, costs_.layer_comm(kind, Pass::Backward));
    }
    for (std::size_t i = 0; i < kCommKinds; ++i) {
      comm_f_sum_ += comm_f_[i];
      comm_b_sum_ += comm_b_[i];
    }
    const double params = static_cast<double>(chain_.block.params());
    if (zero3()) {
      gather_ = costs_.collective(Collective::AllGather, Group::DP,
                                  static_cast<Bytes>(params * per_.weights));
      reduce_ = costs_.collective(Collective::ReduceScatter, Group::DP,
                                  static_cast<Bytes>(params * std::min(per_.grads, 4.0)));
    }
    if (plan_.offload.weights)
      fetch_ = costs_.copy(static_cast<Bytes>(params * per_.weights), CopyDir::ToDevice);
    overhead_mb_ = costs_.overhead_per_microbatch();
    // One pipeline send; without a pipeline there is no neighbour (and, on
    // a cluster without an inter-node link, no link to price one on).
    p2p_ = p_ > 1 ? costs_.p2p(p2p_bytes(sc_)) : 0;
  }

  // Every chunk pass of every microbatch, and its sends, one after another
  // (double: no overflow): the recurrence's times stay below it. A
  // layer's recompute is at most one forward; its copies at most what it keeps.
  double serial_ns() const {
    const auto d = [](Time t) { return static_cast<double>(t); };
    const Bytes kept = plan_.offload.activations ? std::max({rule_.full, rule_.selective, rule_.input}) : 0;
    const double copies = kept > 0 ? d(costs_.copy(kept, CopyDir::ToHost)) + d(costs_.copy(kept, CopyDir::ToDevice)) : 0;
    const double layer = d(f_) + d(b_) + std::max(d(r_), d(core_)) + 2 * d(comm_f_sum_) + d(comm_b_sum_) +
                         2 * (d(gather_) + d(reduce_) + d(fetch_)) + copies;
    const double ends = d(costs_.layer(chain_.embedding, Pass::Forward)) +
                        d(costs_.layer(chain_.embedding, Pass::Backward)) +
                        d(costs_.layer(chain_.head, Pass::Forward)) +
                        d(costs_.layer(chain_.head, Pass::Backward));
    const double per_chunk = 2 * (d(overhead_mb_) + d(p2p_));
    const double per_mb = static_cast<double>(first_layer_.back()) * layer + ends +
                          static_cast<double>(chunks_.size()) * per_chunk;
    return static_cast<double>(m_) * per_mb + d(costs_.overhead_per_step());
  }

  // A layer pass of `busy` on the compute stream that also waits for
  // transfers of `comm` on the communication stream (ZeRO-3) and `copy` on
  // the host-to-device engine, each overlapped with the previous layer.
  void overlapped(ChunkPass& c, Time busy, Time comm, Time copy) const {
    const Time t = std::max({busy, comm, copy});
    c.duration += t;
    if (t == busy) return;
    if (comm >= copy)
      c.comm[static_cast<std::size_t>(CommKind::DP)] += t - busy;
    else
      c.stall += t - busy;
  }
  void blocking_comm(ChunkPass& c, const std::array<Time, kCommKinds>& comm) const {
    for (std::size_t i = 0; i < kCommKinds; ++i) c.comm[i] += comm[i];
  }

  ChunkPass forward(int k) const {
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    ChunkPass c;
    c.duration = c.compute = overhead_mb_;
    auto plain = [&](Time t) {
      c.duration += t;
      c.compute += t;
    };
    if (k == 0) plain(costs_.layer(chain_.embedding, Pass::Forward));
    for (std::int64_t i = 0; i < n; ++i) {
      overlapped(c, f_ + comm_f_sum_, gather_, fetch_);
      c.compute += f_;
      blocking_comm(c, comm_f_);
      if (i == 0) c.first_layer_end = c.duration;
      c.last_layer_end = c.duration;
      if (const Bytes stored = plan_.offload.activations ? layer_stored(i, n) : 0; stored > 0) {
        c.last_copy_out = costs_.copy(stored, CopyDir::ToHost);
        c.copies_out += c.last_copy_out;
      }
    }
    if (k + 1 == static_cast<int>(chunks_.size())) plain(costs_.layer(chain_.head, Pass::Forward));
    return c;
  }

  ChunkPass backward(int k) const {
    const std::int64_t n = chunks_[static_cast<std::size_t>(k)];
    ChunkPass c;
    c.duration = c.compute = overhead_mb_;
    if (k + 1 == static_cast<int>(chunks_.size())) {
      const Time t = costs_.layer(chain_.head, Pass::Backward);
      c.duration += t;
      c.compute += t;
    }
    c.head_end = c.duration;
    c.layer_end.assign(static_cast<std::size_t>(n), 0);
    const Recompute policy = rule_.policy;
    const bool segmented = policy == Recompute::EveryK || policy == Recompute::Sqrt;
    for (std::int64_t i = n - 1; i >= 0; --i) {
      Time recompute = 0;
      std::int64_t redone = 0;  // layers recomputed before this backward
      const bool segment_end = i == n - 1 || (i + 1) % rule_.segment(n) == 0;
      if (policy == Recompute::Full)
        redone = 1;
      else if (segmented && segment_end)
        redone = i % rule_.segment(n) + 1;  // the segment ending at layer i
      else if (policy == Recompute::Selective && rule_.full != rule_.selective)
        recompute = core_;
      recompute += static_cast<Time>(redone) * r_;
      const Time comm = static_cast<Time>(redone) * comm_f_sum_ + comm_b_sum_;
      // Offloaded activations come back on the host-to-device engine, one
      // layer ahead.
      const Bytes stored = plan_.offload.activations ? layer_stored(i, n) : 0;
      const Time prefetch = stored > 0 ? costs_.copy(stored, CopyDir::ToDevice) : 0;
      if (i == n - 1) c.first_prefetch = prefetch;
      // ZeRO-3: the layer's gather queues on the communication stream
      // behind the previous layer's reduce-scatter, which waits for that
      // layer's backward (the layer level's order, FSDP's BACKWARD_POST
      // prefetch): both are exposed.
      const Time zero3 = gather_ + reduce_;
      c.comm[static_cast<std::size_t>(CommKind::DP)] += zero3;
      overlapped(c, recompute + b_ + comm + zero3, 0, fetch_ + prefetch);
      c.compute += b_;
      c.recompute += recompute;
      for (std::size_t q = 0; q < kCommKinds; ++q)
        c.comm[q] += static_cast<Time>(redone) * comm_f_[q] + comm_b_[q];
      c.layer_end[static_cast<std::size_t>(i)] = c.duration;
    }
    if (k == 0) {
      const Time t = costs_.layer(chain_.embedding, Pass::Backward);
      c.duration += t;
      c.compute += t;
    }
    return c;
  }

  // Stage s after its last step: gradient reduction, the optimizer step
  // and what follows it, on the streams the layer level uses. Returns the
  // tasks timed.
  std::uint64_t tail(int s) {
    Stage& st = stages_[static_cast<std::size_t>(s)];
    Acc& a = st.acc;
    const Time end_of_backward = st.compute_free;
    Time compute_free = st.compute_free, comm_free = 0;
    std::uint64_t tasks = 0;
    std::int64_t layers = 0;
    for (int k = 0; k < static_cast<int>(chunks_.size()); ++k)
      if (k % p_ == s) layers += chunks_[static_cast<std::size_t>(k)];
    const StageGradients stage{layers, s == 0, s == p_ - 1};
    const double params = stage.params(chain_);
    Time reduced = 0;  // when every gradient this stage steps on is reduced
    // Below: tail durations, each at most kMaxStepTime, summed saturating.
    auto on_comm = [&](Time ready, Time d) {
      comm_free = capped_sum(std::max(ready, comm_free), d);
      ++tasks;
      return comm_free;
    };
    const bool dp = plan_.dp > 1;
    if (dp && plan_.compression.method != CompressionMethod::None) {
      const GradientExchange ex = compressed_exchange(plan_, chain_, stage, costs_);
      const Time enc_end = capped_sum(end_of_backward, ex.encode);
      Time prev = enc_end;
      for (const auto& [op, bytes] : ex.rounds)
        prev = on_comm(prev, costs_.collective(op, Group::DP, static_cast<Bytes>(bytes)));
      const Time dec_start = std::max(enc_end, prev);
      compute_free = capped_sum(dec_start, ex.decode);
      tasks += 2;
      a.comm[static_cast<std::size_t>(CommKind::DP)] += compute_free - end_of_backward;
      reduced = compute_free;
    } else if (zero3()) {
      // The last layer's reduce-scatter follows the end of backward (the
      // per-layer ones are folded into the chunk passes).
      comm_free = capped_sum(end_of_backward, reduce_);
      reduced = comm_free;
      const double other = (s == 0 ? static_cast<double>(chain_.embedding.params()) : 0.0) +
                           (s == p_ - 1 ? static_cast<double>(chain_.head.params()) : 0.0);
      if (other > 0)
        reduced = on_comm(end_of_backward,
                          costs_.collective(Collective::ReduceScatter, Group::DP,
                                            static_cast<Bytes>(other * std::min(per_.grads, 4.0))));
    } else if (dp || plan_.cp > 1) {
      // Buckets of about 25 MiB in backward order, each ready when its last
      // layer's last backward ends (lower.cpp's reduce_and_step).
      const double grad_bytes = std::min(per_.grads, 4.0);
      const double layer_bytes = static_cast<double>(chain_.block.params()) * grad_bytes;
      const double bucket = static_cast<double>(MemoryRules{}.grad_bucket_bytes);
      const bool ps = plan_.dp_topology == DpTopology::ParameterServer;
      const Collective op = ps ? Collective::SendRecv
                               : plan_.zero == 0 ? Collective::AllReduce
                                                 : Collective::ReduceScatter;
      const bool overlap = plan_.implementation.overlap_grad_reduce;
      auto flush = [&](double bytes, Time ready) {
        reduced = on_comm(overlap ? ready : end_of_backward,
                          costs_.collective(op, Group::DP, static_cast<Bytes>(bytes)));
      };
      const int last = static_cast<int>(chunks_.size()) - 1;
      if (s == p_ - 1 && chain_.head.params() > 0)
        flush(static_cast<double>(chain_.head.params()) * grad_bytes,
              st.last_bwd_start[static_cast<std::size_t>(last)] +
                  bwd_[static_cast<std::size_t>(last)].head_end);
      double fill = 0;
      Time ready = 0;
      for (int k = last; k >= 0; --k) {
        if (k % p_ != s) continue;
        const ChunkPass& c = bwd_[static_cast<std::size_t>(k)];
        const Time start = st.last_bwd_start[static_cast<std::size_t>(k)];
        for (std::int64_t i = chunks_[static_cast<std::size_t>(k)] - 1; i >= 0; --i) {
          fill += layer_bytes;
          ready = start + c.layer_end[static_cast<std::size_t>(i)];
          if (fill >= bucket) {
            flush(fill, ready);
            fill = 0;
          }
        }
      }
      if (s == 0) {
        fill += static_cast<double>(chain_.embedding.params()) * grad_bytes;
        ready = st.last_bwd_start[0] + bwd_[0].duration;
      }
      if (fill > 0) flush(fill, ready);
    }
    if (p_ > 1 && sc_.model.tied_embeddings && (s == 0 || s == p_ - 1)) {
      const double bytes = static_cast<double>(chain_.embedding.ops.front().params) * per_.grads;
      const Time t = on_comm(end_of_backward, costs_.collective(Collective::AllReduce, Group::EmbeddingTie,
                                                                static_cast<Bytes>(bytes)));
      reduced = std::max(reduced, t);
    }
    const double shard = plan_.zero >= 1 ? static_cast<double>(plan_.dp) : 1.0;
    const double local = params / shard;
    Time stepped = 0, end = 0;
    if (plan_.offload.optimizer != OffloadTarget::None) {
      // ZeRO-Offload: gradients down, the step (and NVMe state traffic) on
      // the host CPU, updated weights up; the GPU idles meanwhile.
      const Time down = costs_.copy(static_cast<Bytes>(local * 4), CopyDir::ToHost);
      Time t = capped_sum(std::max(end_of_backward, reduced), down);
      Time offload = down;
      const bool nvme = plan_.offload.optimizer == OffloadTarget::Nvme;
      const Bytes states = static_cast<Bytes>(local * per_.optimizer);
      if (nvme) {
        const Time rd = costs_.copy(states, CopyDir::NvmeRead);
        t = capped_sum(t, rd);
        offload = capped_sum(offload, rd);
      }
      const Time opt = costs_.optimizer_step(local, true);
      t = capped_sum(t, opt);
      Time after = t;
      if (nvme) {
        const Time wr = costs_.copy(states, CopyDir::NvmeWrite);
        end = capped_sum(t, wr);
        offload = capped_sum(offload, wr);
      }
      const Time up = costs_.copy(static_cast<Bytes>(local * per_.weights), CopyDir::ToDevice);
      stepped = capped_sum(after, up);
      offload = capped_sum(offload, up);
      end = std::max(end, stepped);
      a.optimizer += opt;
      a.comm[static_cast<std::size_t>(CommKind::Offload)] += offload;
      a.comm[static_cast<std::size_t>(CommKind::DP)] += std::max<Time>(0, reduced - end_of_backward);
      tasks += nvme ? 5 : 3;
    } else {
      const Time start = std::max(compute_free, reduced);
      a.comm[static_cast<std::size_t>(CommKind::DP)] += start - compute_free;
      const Time opt = costs_.optimizer_step(local, false);
      stepped = capped_sum(start, opt);
      a.optimizer += opt;
      end = compute_free = stepped;
      ++tasks;
    }
    if (dp && plan_.dp_topology == DpTopology::ParameterServer)
      on_comm(stepped, costs_.collective(Collective::SendRecv, Group::DP,
                                         static_cast<Bytes>(params * per_.weights)));
    if (dp && plan_.zero >= 1 && plan_.zero <= 2)
      on_comm(stepped, costs_.collective(Collective::AllGather, Group::DP,
                                         static_cast<Bytes>(params * per_.weights)));
    if (comm_free > end) a.comm[static_cast<std::size_t>(CommKind::DP)] += comm_free - std::max(end, stepped);
    st.end = std::max({end, compute_free, comm_free, st.p2p_free});
    return tasks;
  }

  const Scenario& sc_;
  const Plan& plan_;
  const StepCosts& costs_;
  Time f_ = 0, b_ = 0, r_ = 0, core_ = 0, overhead_mb_ = 0;
  std::array<Time, kCommKinds> comm_f_{}, comm_b_{};
  Time comm_f_sum_ = 0, comm_b_sum_ = 0;
  Time gather_ = 0, reduce_ = 0, fetch_ = 0, p2p_ = 0;
  std::vector<ChunkPass> fwd_, bwd_;
  std::vector<Stage> stages_;
};

}  // namespace

StepPrediction predict_step_coarse(const Scenario& sc, const StepCosts& costs,
                                   const PipelineSchedule* schedule) {
  return CoarseStep(sc, costs).run(schedule);
}

}  // namespace strata::strategies
