#include "lowering/step_program.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "sim/bandwidth.hpp"
#include "sim/event_queue.hpp"
#include "sim/error.hpp"
#include "sim/limits.hpp"

namespace strata::strategies {

namespace {

std::string layer_mb(std::int32_t layer, std::int32_t mb) {
  return "/L" + std::to_string(layer) + "/mb" + std::to_string(mb);
}
std::string chunk_mb(std::int32_t chunk, std::int32_t mb) {
  return "/c" + std::to_string(chunk) + "/mb" + std::to_string(mb);
}
// A bucketed compressed exchange's bucket ("/bucket3"); none for one exchange.
std::string bucket_tag(std::int32_t bucket) { return bucket < 0 ? "" : "/bucket" + std::to_string(bucket); }
const char* pass_tag(Pass p) { return p == Pass::Forward ? "fwd" : p == Pass::Backward ? "bwd" : "re"; }

std::string what(const ProgramTask& t, const TaskInfo& i) {
  const std::string mb = "/mb" + std::to_string(i.microbatch);
  auto part = [&](const char* pass) {
    if (t.merged) return pass + chunk_mb(i.chunk, i.microbatch);
    switch (i.part) {
      case Part::Embedding: return std::string(pass) + "/embedding" + mb;
      case Part::Head: return std::string(pass) + "/head" + mb;
      default: return pass + layer_mb(i.layer, i.microbatch);
    }
  };
  switch (i.op) {
    case TaskOp::Framework:
      return i.microbatch < 0 ? "framework/step"
                              : std::string("framework/") + pass_tag(i.pass) + chunk_mb(i.chunk, i.microbatch);
    case TaskOp::Forward: return part("fwd");
    case TaskOp::Backward: return part("bwd");
    case TaskOp::Recompute: return "recompute" + layer_mb(i.layer, i.microbatch);
    case TaskOp::LayerComm:
      // In the head: a multi-token prediction module's block (`layer`: the module).
      if (i.part == Part::Head)
        return std::string(enum_name(t.comm)) + "-" + pass_tag(i.pass) + "/mtp" + std::to_string(i.layer) + mb;
      return std::string(enum_name(t.comm)) + "-" + pass_tag(i.pass) + layer_mb(i.layer, i.microbatch);
    case TaskOp::InputGather: return "tp-gather-input" + layer_mb(i.layer, i.microbatch);
    case TaskOp::SendActivation: return "send-act" + chunk_mb(i.chunk, i.microbatch);
    case TaskOp::SendGradient: return "send-grad" + chunk_mb(i.chunk, i.microbatch);
    case TaskOp::DpReduce: return "dp-reduce/bucket" + std::to_string(i.bucket);
    case TaskOp::PsPush: return "ps-push/bucket" + std::to_string(i.bucket);
    case TaskOp::PsPull: return "ps-pull-weights";
    case TaskOp::EmbeddingTie: return "embedding-tie";
    case TaskOp::Zero3Gather:
      if (i.part == Part::Embedding || i.part == Part::Head)
        return std::string("zero3-gather-") + pass_tag(i.pass) + (i.part == Part::Embedding ? "/embedding" : "/head") + mb;
      return std::string("zero3-gather-") + pass_tag(i.pass) + layer_mb(i.layer, i.microbatch);
    case TaskOp::Zero3Reduce:
      return i.layer >= 0 ? "zero3-reduce" + layer_mb(i.layer, i.microbatch) : "zero3-reduce/embedding-head";
    case TaskOp::WeightFetch:
      return std::string("fetch-weights-") + pass_tag(i.pass) + layer_mb(i.layer, i.microbatch);
    case TaskOp::WeightFromNvme:
      return std::string("read-weights-") + pass_tag(i.pass) + layer_mb(i.layer, i.microbatch);
    case TaskOp::Offload: return "offload" + layer_mb(i.layer, i.microbatch);
    case TaskOp::Prefetch: return "prefetch" + layer_mb(i.layer, i.microbatch);
    case TaskOp::GradsToHost: return "grads-to-host";
    case TaskOp::StatesFromNvme: return "states-from-nvme";
    case TaskOp::OptimizerStep: return "optimizer-step";
    case TaskOp::StatesToNvme: return "states-to-nvme";
    case TaskOp::WeightsToDevice: return "weights-to-device";
    case TaskOp::WeightsToNvme: return "weights-to-nvme";
    case TaskOp::GatherWeights:
      // At the step's end all of them; in the first forward (overlap_param_gather) per part.
      if (i.part == Part::Layer) return "dp-gather-weights/L" + std::to_string(i.layer);
      if (i.part == Part::Embedding) return "dp-gather-weights/embedding";
      if (i.part == Part::Head) return "dp-gather-weights/head";
      return "dp-gather-weights";
    case TaskOp::CompressEncode: return "compress-encode" + bucket_tag(i.bucket);
    case TaskOp::CompressRound: return "dp-compressed" + bucket_tag(i.bucket) + "/round" + std::to_string(i.round);
    case TaskOp::CompressDecode: return "compress-decode" + bucket_tag(i.bucket);
  }
  return "?";
}

constexpr const char* kBufName[] = {"static", "act",      "act-host", "act-back", "recomputed", "grad",
                                    "core",   "act/head", "grad/head", "act/embedding", "act-kept", "working"};
static_assert(std::size(kBufName) == static_cast<std::size_t>(BufKind::Working) + 1);

int pool_slot(const ProgramBuffer& b) { return 2 * b.stage + (b.host ? 1 : 0); }

constexpr const char* kLinkName[] = {"nvlink-out", "nvlink-in", "network-out", "network-in", "pcie-out", "pcie-in"};
static_assert(std::size(kLinkName) == kStageLinks);

}  // namespace

double link_bytes_per_ns(const StepProgram& p, std::int32_t link) {
  const LinkRates& r = p.link_rates[static_cast<std::size_t>(link / kStageLinks)];
  switch (static_cast<StageLink>(link % kStageLinks)) {
    case StageLink::NvlinkOut:
    case StageLink::NvlinkIn: return r.nvlink_GBps;  // GB/s = bytes/ns
    case StageLink::NetworkOut:
    case StageLink::NetworkIn: return r.network_GBps;
    case StageLink::PcieOut:
    case StageLink::PcieIn: return r.pcie_GBps;
  }
  return 0;
}

namespace {
// A flow's rate alone: its slowest link's (what LinkSharing gives a flow
// with its links to itself).
double alone_rate(const StepProgram& p, std::span<const std::int32_t> links) {
  double rate = std::numeric_limits<double>::infinity();
  for (const std::int32_t l : links) rate = std::min(rate, link_bytes_per_ns(p, l));
  return rate;
}
}  // namespace

std::pair<std::int32_t, Time> add_flow(StepProgram& p, const Transfer& x, int from, int to) {
  const Time alone = x.total();
  if (x.path == Path::None || x.bandwidth <= 0 || p.link_rates.empty()) return {-1, alone};
  const auto id = [](int stage, StageLink l) { return stage * kStageLinks + static_cast<int>(l); };
  std::array<std::int32_t, 4> links{};
  std::size_t n = 0;
  switch (x.path) {
    case Path::None: break;
    case Path::NvLink:
      links = {id(from, StageLink::NvlinkOut), id(to, StageLink::NvlinkIn)};
      n = 2;
      break;
    case Path::Network:
      // GPUDirect RDMA: the bytes cross the GPU's PCIe link to its NIC at
      // each end, the link its host copies take (DGX A100: two GPUs and two
      // ConnectX-6 behind each PCIe switch; DGX H100: each GPU behind its
      // ConnectX-7's switch; docs/step-time.md, "Shared links").
      links = {id(from, StageLink::NetworkOut), id(from, StageLink::PcieOut), id(to, StageLink::NetworkIn),
               id(to, StageLink::PcieIn)};
      n = 4;
      break;
    case Path::HostOut:
      links = {id(from, StageLink::PcieOut)};
      n = 1;
      break;
    case Path::HostIn:
      links = {id(from, StageLink::PcieIn)};
      n = 1;
      break;
  }
  const double rate = alone_rate(p, std::span<const std::int32_t>(links.data(), n));
  if (!(rate > 0)) return {-1, alone};
  // The bytes that take the bandwidth-bound time at the slowest link's rate
  // (rounded down, so alone they take exactly that time: transfer_ns).
  const auto bytes = static_cast<Bytes>(std::floor(static_cast<double>(x.bandwidth) * rate));
  if (bytes <= 0) return {-1, alone};
  const Time moving = sim::transfer_ns(static_cast<double>(bytes), rate);
  if (moving <= 0) return {-1, alone};
  const ProgramFlow f{x.latency, bytes, static_cast<std::uint32_t>(p.flow_links.size()), static_cast<std::uint8_t>(n)};
  p.flow_links.insert(p.flow_links.end(), links.begin(), links.begin() + static_cast<std::ptrdiff_t>(n));
  p.flows.push_back(f);
  return {static_cast<std::int32_t>(p.flows.size() - 1), capped_sum(x.latency, moving)};
}

std::string lane_name(int stage, sim::Lane lane) {
  return "s" + std::to_string(stage) + "." + std::string(enum_name(lane));
}

std::string task_id(const StepProgram& p, std::size_t i) {
  const ProgramTask& t = p.tasks[i];
  if (p.info.size() != p.tasks.size()) throw Error("step program: task ids need the layer granularity's task descriptions");
  return "s" + std::to_string(t.stage) + ":" + what(t, p.info[i]);
}

std::string buffer_id(const StepProgram& p, std::size_t i) {
  const ProgramBuffer& b = p.buffers[i];
  std::string name;
  if (b.kind == BufKind::Static)
    name = std::string(enum_name(b.tag));
  else if (b.chunk >= 0)
    name = std::string(kBufName[static_cast<int>(b.kind)]) + chunk_mb(b.chunk, b.microbatch);
  else if (b.layer >= 0)
    name = kBufName[static_cast<int>(b.kind)] + layer_mb(b.layer, b.microbatch);
  else
    name = std::string(kBufName[static_cast<int>(b.kind)]) + "/mb" + std::to_string(b.microbatch);
  return "s" + std::to_string(b.stage) + ":" + name;
}

sim::TaskGraph to_task_graph(const StepProgram& p) {
  sim::TaskGraph g;
  g.reserve(p.tasks.size(), p.buffers.size());
  // Per stage, in this order: its lanes, then its GPU and host pools
  // (gpu_pool_of, host_pool_of); then the links the flows cross.
  std::vector<sim::ResourceId> lanes(static_cast<std::size_t>(p.stages) * sim::kLaneCount);
  for (int s = 0; s < p.stages; ++s) {
    auto at = [&](sim::Lane l) -> sim::ResourceId& {
      return lanes[static_cast<std::size_t>(s) * sim::kLaneCount + static_cast<std::size_t>(l)];
    };
    at(sim::Lane::Compute) = g.add_stream(lane_name(s, sim::Lane::Compute), {s, sim::Lane::Compute});
    at(sim::Lane::Comm) = g.add_stream(lane_name(s, sim::Lane::Comm), {s, sim::Lane::Comm});
    at(sim::Lane::P2P) = g.add_stream(lane_name(s, sim::Lane::P2P), {s, sim::Lane::P2P});
    at(sim::Lane::D2H) = g.add_copy_engine(lane_name(s, sim::Lane::D2H), {s, sim::Lane::D2H});
    at(sim::Lane::H2D) = g.add_copy_engine(lane_name(s, sim::Lane::H2D), {s, sim::Lane::H2D});
    at(sim::Lane::Cpu) = g.add_worker_pool(lane_name(s, sim::Lane::Cpu), 1, {s, sim::Lane::Cpu});
    const std::string n = "s" + std::to_string(s);
    g.add_pool(n + ".gpu", p.gpu_capacity[static_cast<std::size_t>(s)]);
    g.add_pool(n + ".host", p.host_capacity[static_cast<std::size_t>(s)]);
  }
  // The links some flow crosses (each with a rate: add_flow).
  std::vector<sim::ResourceId> links(p.flows.empty() ? 0 : static_cast<std::size_t>(p.stages) * kStageLinks);
  std::vector<char> used(links.size(), 0);
  for (const std::int32_t l : p.flow_links) used[static_cast<std::size_t>(l)] = 1;
  for (std::size_t l = 0; l < links.size(); ++l)
    if (used[l])
      links[l] = g.add_link("s" + std::to_string(l / kStageLinks) + "." + kLinkName[l % kStageLinks],
                            link_bytes_per_ns(p, static_cast<std::int32_t>(l)) * 1e9);
  for (std::size_t b = 0; b < p.buffers.size(); ++b) {
    const ProgramBuffer& pb = p.buffers[b];
    g.add_buffer({.id = buffer_id(p, b),
                  .pool = pb.host ? host_pool_of(pb.stage) : gpu_pool_of(pb.stage),
                  .bytes = pb.bytes,
                  .tag = pb.tag,
                  .live_at_start = pb.kind == BufKind::Static});
  }
  for (std::size_t i = 0; i < p.tasks.size(); ++i) {
    const ProgramTask& t = p.tasks[i];
    sim::Task task;
    task.id = task_id(p, i);
    task.kind = t.kind;
    task.resources = {lanes[static_cast<std::size_t>(t.stage) * sim::kLaneCount + static_cast<std::size_t>(t.lane)]};
    task.duration = t.duration;
    if (t.flow >= 0) {
      const ProgramFlow& f = p.flows[static_cast<std::size_t>(t.flow)];
      task.duration = f.latency;
      task.transfer_bytes = f.bytes;
      for (std::uint32_t k = f.first; k < f.first + f.count; ++k)
        task.resources.push_back(links[static_cast<std::size_t>(p.flow_links[k])]);
    }
    for (auto b : p.allocs(t)) task.allocs.push_back(sim::BufferId{b});
    for (auto b : p.frees(t)) task.frees.push_back(sim::BufferId{b});
    task.label.stage = t.stage;
    task.label.phase = t.phase;
    if (p.info[i].layer >= 0) task.label.layer = p.info[i].layer;
    if (p.info[i].microbatch >= 0) task.label.microbatch = p.info[i].microbatch;
    g.add_task(std::move(task));
  }
  for (const auto& [before, after] : p.deps) g.add_dep(sim::TaskId{before}, sim::TaskId{after});
  return g;
}

ProgramRun replay(const StepProgram& p) {
  ProgramWorkspace w;
  replay(p, w);
  return std::move(w.run);
}

void replay(const StepProgram& p, ProgramWorkspace& w) {
  const std::size_t n = p.tasks.size();
  // Predecessors: the dependencies and the previous task on the same lane,
  // as a compressed successor list.
  auto& npred = w.npred;
  auto& first = w.first;
  auto& succ = w.succ;
  auto& last = w.last;
  auto& lane_prev = w.lane_prev;
  npred.assign(n, 0);
  first.assign(n + 1, 0);
  last.assign(static_cast<std::size_t>(p.stages) * sim::kLaneCount, -1);
  lane_prev.assign(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    const ProgramTask& t = p.tasks[i];
    auto& l = last[static_cast<std::size_t>(t.stage) * sim::kLaneCount + static_cast<std::size_t>(t.lane)];
    if (l >= 0) {
      lane_prev[i] = l;
      ++first[static_cast<std::size_t>(l) + 1];
      ++npred[i];
    }
    l = static_cast<std::int32_t>(i);
  }
  for (const auto& [b, a] : p.deps) {
    ++first[static_cast<std::size_t>(b) + 1];
    ++npred[static_cast<std::size_t>(a)];
  }
  for (std::size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  succ.resize(static_cast<std::size_t>(first[n]));
  {
    auto& fill = w.fill;
    fill.assign(first.begin(), first.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      if (lane_prev[i] >= 0) succ[static_cast<std::size_t>(fill[static_cast<std::size_t>(lane_prev[i])]++)] =
          static_cast<std::int32_t>(i);
    for (const auto& [b, a] : p.deps) succ[static_cast<std::size_t>(fill[static_cast<std::size_t>(b)]++)] = a;
  }
  ProgramRun& run = w.run;
  run.makespan = 0;
  run.shared_links = false;
  run.tasks.assign(n, {});
  auto& ready = w.ready;
  ready.clear();
  ready.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (npred[i] == 0) ready.push_back(static_cast<std::int32_t>(i));
  // A task starts when its last predecessor (a dependency, or the task
  // before it on its lane) has ended: `run.tasks[i].start` holds the latest
  // end among i's predecessors until i runs. A task of fixed time ends at
  // once (start + duration), whatever time the flows have reached: nothing
  // it waits for is still unknown. Without flows this is the in-order
  // recurrence; flows are timed in time order (below).
  std::size_t done = 0;
  const auto end = [&](std::size_t t, Time at) {
    auto& tm = run.tasks[t];
    tm.end = at;
    run.makespan = std::max(run.makespan, at);
    for (std::int32_t e = first[t]; e < first[t + 1]; ++e) {
      const auto s = static_cast<std::size_t>(succ[static_cast<std::size_t>(e)]);
      run.tasks[s].start = std::max(run.tasks[s].start, at);
      if (--npred[s] == 0) ready.push_back(static_cast<std::int32_t>(s));
    }
  };
  sim::EventQueue& q = w.queue;
  q.clear();
  // Flows. Most never meet another on a link, and each of those is timed
  // alone with one event, its end: a flow is *registered* on its links
  // when its task is ready (its bytes begin at start + latency, no earlier
  // than the queue's time: everything not yet ready waits for a flow that
  // has not ended) and kept *alone* — [begin, start + duration) — unless its
  // interval meets one registered there. Where intervals meet, the flows
  // involved that have not begun become *pending*: their bytes begin at an
  // event in time order, where they and every flow then on their links move
  // into the link sharing (LinkSharing, max-min fair), an alone flow with
  // the state the sharing would have given it since it began
  // (LinkSharing::resume). A pending flow blocks every flow that would
  // begin on its links after it, as its end is unknown; a flow that finds
  // its links free when it begins is alone again. So the sharing sees
  // exactly the flows that meet, at the times they meet: equal to
  // sim::Engine on to_task_graph(p), task by task (tested): at each instant
  // every flow that begins or ends is handled before the shared rates are
  // recomputed, once, and the flows whose rate changed are rescheduled, as
  // the engine does (sim/engine.cpp).
  sim::LinkSharing* const links = p.flows.empty() ? nullptr : &w.links;
  auto& fs = w.flow_state;  // per task with a flow
  // Per link: the flows registered on it, in a fixed row of slots. A lane
  // runs one task at a time and a flow stays registered from its task's
  // start to its end, so a link holds at most one live flow per lane that
  // can reach it (its stage's communication, pipeline and copy lanes, its
  // neighbours' pipeline lanes); ended ones are dropped when a new one
  // comes.
  constexpr std::size_t kSlots = ProgramWorkspace::kLinkSlots;
  auto& on = w.registered;
  auto& count = w.registered_count;
  const auto row = [&](std::size_t l) { return std::span<std::int32_t>(on.data() + l * kSlots, count[l]); };
  constexpr Time kOpen = std::numeric_limits<Time>::max();  // an end not known yet
  if (links) {
    auto& cap = w.capacity;
    cap.resize(static_cast<std::size_t>(p.stages) * kStageLinks);
    for (std::size_t l = 0; l < cap.size(); ++l) {
      const double r = link_bytes_per_ns(p, static_cast<std::int32_t>(l));
      cap[l] = r > 0 ? r : 1.0;  // a link no flow crosses (add_flow): any rate
    }
    links->reset(cap);
    fs.resize(n);
    on.resize(cap.size() * kSlots);
    count.assign(cap.size(), 0);
  }
  const auto flow_links = [&](std::size_t t) {
    const ProgramFlow& f = p.flows[static_cast<std::size_t>(p.tasks[t].flow)];
    return std::span<const std::int32_t>(p.flow_links.data() + f.first, f.count);
  };
  using State = ProgramWorkspace::FlowState;
  Time now = 0;
  // Pending: its bytes begin at an event; its own end event, if any, is
  // stale (an end event counts only for a flow alone or shared).
  const auto make_pending = [&](std::size_t t) {
    fs[t].state = State::Pending;
    fs[t].until = kOpen;
    q.push(fs[t].begin, sim::EventKind::TransferBegin, static_cast<std::int32_t>(t));
  };
  const auto alone = [&](std::size_t t) {
    fs[t].state = State::Alone;
    fs[t].until = run.tasks[t].start + p.tasks[t].duration;
    fs[t].token = q.push(fs[t].until, sim::EventKind::TaskEnd, static_cast<std::int32_t>(t));
  };
  // Flows alone that have not begun and whose interval meets [from, ∞) on
  // t's links become pending, and so on from theirs.
  auto& work = w.work;
  const auto block_after = [&](std::size_t t0) {
    work.clear();
    work.push_back(static_cast<std::int32_t>(t0));
    while (!work.empty()) {
      const auto t = static_cast<std::size_t>(work.back());
      work.pop_back();
      for (const std::int32_t l : flow_links(t))
        for (const std::int32_t x : row(static_cast<std::size_t>(l))) {
          auto& f = fs[static_cast<std::size_t>(x)];
          if (f.state == State::Alone && f.begin > now && f.until > fs[t].begin) {
            make_pending(static_cast<std::size_t>(x));
            work.push_back(x);
          }
        }
    }
  };
  const auto ready_flow = [&](std::size_t t) {
    auto& f = fs[t];
    f.begin = run.tasks[t].start + p.flows[static_cast<std::size_t>(p.tasks[t].flow)].latency;
    const Time until = run.tasks[t].start + p.tasks[t].duration;
    bool meets = false;
    for (const std::int32_t l : flow_links(t)) {
      const auto k = static_cast<std::size_t>(l);
      // Drop the flows that have ended; does t meet one of the others?
      std::int32_t* v = on.data() + k * kSlots;
      std::uint8_t kept = 0;
      for (std::uint8_t i = 0; i < count[k]; ++i) {
        const auto& g = fs[static_cast<std::size_t>(v[i])];
        if (g.until <= now) continue;
        v[kept++] = v[i];
        meets = meets || (g.begin < until && f.begin < g.until);
      }
      if (kept == kSlots) throw Error("step program: more flows at once on a link than lanes reach it");
      v[kept++] = static_cast<std::int32_t>(t);
      count[k] = kept;
    }
    if (!meets) {
      alone(t);
      return;
    }
    make_pending(t);
    block_after(t);
  };
  std::size_t timed = 0;
  for (;;) {
    while (done < ready.size()) {
      const auto t = static_cast<std::size_t>(ready[done++]);
      if (p.tasks[t].flow < 0) {
        end(t, run.tasks[t].start + p.tasks[t].duration);
        ++timed;
      } else {
        ready_flow(t);
      }
    }
    // The instant is over when the queue's next event is later: the shared
    // flows' rates change, once.
    if ((q.empty() || q.top_time() > now) && links && links->pending()) {
      links->update(now);
      for (const std::int32_t f : links->changed())
        links->set_token(f, q.push(links->finish_time(f), sim::EventKind::FlowDone, f));
      continue;
    }
    if (q.empty()) break;
    const sim::Event e = q.pop();
    now = e.time;
    const auto t = static_cast<std::size_t>(e.kind == sim::EventKind::FlowDone ? links->owner(e.id) : e.id);
    switch (e.kind) {
      case sim::EventKind::TransferBegin: {  // a pending flow's bytes begin (a flow is pending once)
        // The flows moving on its links now: those alone join the sharing.
        bool shared = false;
        for (const std::int32_t l : flow_links(t))
          for (const std::int32_t x : row(static_cast<std::size_t>(l))) {
            auto& g = fs[static_cast<std::size_t>(x)];
            if (static_cast<std::size_t>(x) == t || g.begin > now || g.until <= now) continue;
            if (g.state == State::Alone) {
              const auto us = flow_links(static_cast<std::size_t>(x));
              const ProgramFlow& uf = p.flows[static_cast<std::size_t>(p.tasks[static_cast<std::size_t>(x)].flow)];
              g.id = links->resume(us.data(), static_cast<std::int32_t>(us.size()), static_cast<double>(uf.bytes),
                                   alone_rate(p, us), g.begin, x, g.token);
              g.state = State::Shared;
              g.until = kOpen;
              // Its end is not known any more: flows that would begin on
              // its links after now wait for the sharing.
              block_after(static_cast<std::size_t>(x));
            }
            shared = shared || g.state == State::Shared;
          }
        if (!shared) {
          alone(t);
          break;
        }
        run.shared_links = true;
        const auto ls = flow_links(t);
        fs[t].id = links->start(ls.data(), static_cast<std::int32_t>(ls.size()),
                                static_cast<double>(p.flows[static_cast<std::size_t>(p.tasks[t].flow)].bytes), now,
                                static_cast<std::int32_t>(t));
        fs[t].state = State::Shared;
        break;
      }
      case sim::EventKind::TaskEnd:  // an alone flow's end, unless it became pending or shared since
      case sim::EventKind::FlowDone: {  // a shared flow's end, unless its rate changed since
        // A flow that became shared keeps its alone end while its rate stays.
        const bool shared = fs[t].state == State::Shared;
        const bool live = shared ? links->token(fs[t].id) == e.seq
                                 : fs[t].state == State::Alone && fs[t].token == e.seq;
        if (!live) break;  // stale
        if (shared) {
          links->finish(fs[t].id);
          fs[t].until = now;
        }
        end(t, now);
        ++timed;
        break;
      }
    }
  }
  if (timed < n) throw Error("step program: its dependencies and lane order have a cycle");

  // Memory: each pool's allocations (at a task's start) and frees (at its
  // end); at one instant frees come first, as in the engine. Events go to
  // their pool in program order, where one lane (the compute lane) holds
  // most of them and they come in time order; a pool sorts only if not.
  using Event = ProgramWorkspace::MemEvent;
  const std::size_t pools = 2 * static_cast<std::size_t>(p.stages);
  auto& at = w.at;
  at.assign(pools + 1, 0);
  for (const ProgramTask& t : p.tasks)
    for (std::size_t k = t.mem; k < t.mem + t.allocs + t.frees; ++k)
      ++at[static_cast<std::size_t>(pool_slot(p.buffers[static_cast<std::size_t>(p.mem[k])])) + 1];
  for (std::size_t q = 0; q < pools; ++q) at[q + 1] += at[q];
  auto& ev = w.events;
  ev.resize(at[pools]);
  {
    auto& fill = w.at_fill;
    fill.assign(at.begin(), at.end() - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const ProgramTask& t = p.tasks[i];
      for (auto b : p.allocs(t))
        ev[fill[static_cast<std::size_t>(pool_slot(p.buffers[static_cast<std::size_t>(b)]))]++] = {
            run.tasks[i].start, true, b};
      for (auto b : p.frees(t))
        ev[fill[static_cast<std::size_t>(pool_slot(p.buffers[static_cast<std::size_t>(b)]))]++] = {
            run.tasks[i].end, false, b};
    }
  }
  const auto before = [](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    return a.alloc < b.alloc;
  };
  for (std::size_t q = 0; q < pools; ++q) {
    const auto lo = ev.begin() + static_cast<std::ptrdiff_t>(at[q]);
    const auto hi = ev.begin() + static_cast<std::ptrdiff_t>(at[q + 1]);
    if (!std::is_sorted(lo, hi, before)) std::sort(lo, hi, before);
  }
  std::vector<Bytes> live(pools, 0), peak(pools, 0);
  std::vector<sim::TagBytes> live_tag(pools), peak_tag(pools);
  for (const auto& b : p.buffers)
    if (b.kind == BufKind::Static) {
      const auto q = static_cast<std::size_t>(pool_slot(b));
      live[q] += b.bytes;
      live_tag[q][static_cast<std::size_t>(b.tag)] += b.bytes;
    }
  peak = live;
  peak_tag = live_tag;
  for (std::size_t q = 0; q < pools; ++q) {
    for (std::size_t k = at[q]; k < at[q + 1]; ++k) {
      const Event& e = ev[k];
      const ProgramBuffer& b = p.buffers[static_cast<std::size_t>(e.buffer)];
      const auto tag = static_cast<std::size_t>(b.tag);
      if (e.alloc) {
        live[q] += b.bytes;
        live_tag[q][tag] += b.bytes;
        if (live[q] > peak[q]) {
          peak[q] = live[q];
          peak_tag[q] = live_tag[q];
        }
      } else {
        live[q] -= b.bytes;
        live_tag[q][tag] -= b.bytes;
      }
    }
  }
  run.stages.resize(static_cast<std::size_t>(p.stages));
  for (std::size_t s = 0; s < run.stages.size(); ++s)
    run.stages[s] = {peak[2 * s], peak_tag[2 * s], peak[2 * s + 1]};
}

ProgramRun from_engine(const StepProgram& p, const sim::RunResult& r) {
  ProgramRun run;
  run.makespan = r.makespan;
  run.tasks = r.tasks;
  for (int s = 0; s < p.stages; ++s) {
    const auto& gpu = r.at(gpu_pool_of(s));
    run.stages.push_back({gpu.peak, gpu.peak_by_tag, r.at(host_pool_of(s)).peak});
  }
  return run;
}

int time_category(const ProgramTask& t) {
  const bool on_compute = t.lane == sim::Lane::Compute;
  if (t.phase == sim::Phase::Optim) return static_cast<int>(TimeCat::Optimizer);
  if (t.comm != CommKind::None) return comm_cat(t.comm);
  if (t.kind == sim::TaskKind::Copy) return static_cast<int>(TimeCat::OffloadStall);
  if (t.phase == sim::Phase::Recompute) return static_cast<int>(TimeCat::Recompute);
  if (t.phase == sim::Phase::Comm) return comm_cat(CommKind::DP);  // compression
  return on_compute ? static_cast<int>(TimeCat::Compute) : comm_cat(CommKind::DP);
}

std::pair<std::size_t, std::size_t> stage_tasks(const StepProgram& p, int stage) {
  const auto by_stage = [](const ProgramTask& t, int s) { return t.stage < s; };
  const auto lo = std::lower_bound(p.tasks.begin(), p.tasks.end(), stage, by_stage);
  const auto hi = std::lower_bound(lo, p.tasks.end(), stage + 1, by_stage);
  return {static_cast<std::size_t>(lo - p.tasks.begin()), static_cast<std::size_t>(hi - p.tasks.begin())};
}

TimeBreakdown attribute(const StepProgram& p, const ProgramRun& run, int stage) {
  struct Iv {
    Time a, b;
    int cat;
  };
  std::vector<Iv> busy, side;
  const auto [lo, hi] = stage_tasks(p, stage);
  busy.reserve(hi - lo);
  for (std::size_t i = lo; i < hi; ++i) {
    const ProgramTask& t = p.tasks[i];
    const auto& tm = run.tasks[i];
    if (tm.end <= tm.start) continue;
    if (t.lane != sim::Lane::Compute) {
      side.push_back({tm.start, tm.end, time_category(t)});
    } else if (t.merged) {
      // A merged pass's stretches in turn; which comes first does not
      // change the sums.
      Time a = tm.start;
      for (std::uint32_t k = t.parts; k < t.parts + t.nparts; ++k) {
        const auto& [cat, d] = p.parts[k];
        busy.push_back({a, a + d, cat});
        a += d;
      }
    } else {
      busy.push_back({tm.start, tm.end, time_category(t)});
    }
  }
  // The compute lane's intervals are in time order already (one lane, in
  // program order); only the other lanes' need sorting, then both merge.
  std::vector<Time> mine, others = {0, run.makespan};
  mine.reserve(2 * busy.size());
  others.reserve(2 * side.size() + 2);
  for (const auto& v : busy) mine.insert(mine.end(), {v.a, v.b});
  for (const auto& v : side) others.insert(others.end(), {v.a, v.b});
  if (!std::is_sorted(mine.begin(), mine.end())) std::sort(mine.begin(), mine.end());
  std::sort(others.begin(), others.end());
  std::vector<Time> cuts(mine.size() + others.size());
  std::merge(mine.begin(), mine.end(), others.begin(), others.end(), cuts.begin());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // Side activity per category as +1/−1 events.
  std::vector<std::pair<Time, int>> ev;  // (time, cat + 1 or −(cat + 1))
  ev.reserve(2 * side.size());
  for (const auto& v : side) {
    ev.push_back({v.a, v.cat + 1});
    ev.push_back({v.b, -(v.cat + 1)});
  }
  std::sort(ev.begin(), ev.end());
  const auto earlier = [](const Iv& x, const Iv& y) { return x.a < y.a; };
  if (!std::is_sorted(busy.begin(), busy.end(), earlier)) std::sort(busy.begin(), busy.end(), earlier);
  std::array<int, kTimeCats> active{};
  std::array<Time, kTimeCats + 1> total{};  // last slot: bubble
  Time beside = 0;  // the compute lane busy while a collective runs
  std::size_t e = 0, c = 0;
  const int bubble = kTimeCats;
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    const Time a = cuts[k], b = cuts[k + 1];
    while (e < ev.size() && ev[e].first <= a) {
      active[static_cast<std::size_t>(std::abs(ev[e].second) - 1)] += ev[e].second > 0 ? 1 : -1;
      ++e;
    }
    while (c < busy.size() && busy[c].b <= a) ++c;
    int cat = bubble;
    if (c < busy.size() && busy[c].a <= a) {
      cat = busy[c].cat;
      // Collectives hold SMs; offload copies run on the copy engines.
      for (std::size_t q = 0; q < kCommKinds; ++q)
        if (static_cast<CommKind>(q) != CommKind::Offload && static_cast<CommKind>(q) != CommKind::None &&
            active[static_cast<std::size_t>(comm_cat(static_cast<CommKind>(q)))] > 0) {
          beside += b - a;
          break;
        }
    } else {
      // What the compute lane waits for, in the order it wins a tie.
      for (int q : {static_cast<int>(TimeCat::Optimizer), static_cast<int>(TimeCat::OffloadStall)})
        if (cat == bubble && active[static_cast<std::size_t>(q)] > 0) cat = q;
      for (CommKind kind : {CommKind::DP, CommKind::PP, CommKind::Offload, CommKind::TP, CommKind::CP, CommKind::EP})
        if (cat == bubble && active[static_cast<std::size_t>(comm_cat(kind))] > 0) cat = comm_cat(kind);
    }
    total[static_cast<std::size_t>(cat)] += b - a;
  }
  TimeBreakdown out;
  out.compute = total[static_cast<std::size_t>(TimeCat::Compute)];
  out.recompute = total[static_cast<std::size_t>(TimeCat::Recompute)];
  out.optimizer = total[static_cast<std::size_t>(TimeCat::Optimizer)];
  out.offload_stall = total[static_cast<std::size_t>(TimeCat::OffloadStall)];
  for (std::size_t q = 0; q < kCommKinds; ++q)
    out.exposed_comm[q] = total[static_cast<std::size_t>(comm_cat(static_cast<CommKind>(q)))];
  out.bubble = total[static_cast<std::size_t>(bubble)];
  // Interference: the compute that ran beside a collective took longer by
  // the collective's share of the SMs, a first-order term on top of the
  // replay (which prices each task alone). Where the compute lane waited for
  // data-parallel communication (exposed, the gathers and reductions that
  // overlap by design), the slower compute ate into that wait instead.
  out.beside_collectives = beside;
  out.interference = interference_time(p.interference, out);
  return out;
}

Time interference_time(double fraction, const TimeBreakdown& b) {
  const auto slowed = static_cast<Time>(fraction * static_cast<double>(b.beside_collectives));
  return std::max<Time>(0, slowed - b.exposed_comm[static_cast<std::size_t>(CommKind::DP)]);
}

Time stage_compute_time(const StepProgram& p, int stage) {
  const auto counts = [](int cat) {
    return cat == static_cast<int>(TimeCat::Compute) || cat == static_cast<int>(TimeCat::Recompute);
  };
  const auto [lo, hi] = stage_tasks(p, stage);
  Time sum = 0;
  for (std::size_t i = lo; i < hi; ++i) {
    const ProgramTask& t = p.tasks[i];
    if (t.lane != sim::Lane::Compute) continue;
    if (t.merged) {
      for (std::uint32_t k = t.parts; k < t.parts + t.nparts; ++k)
        if (counts(p.parts[k].first)) sum += p.parts[k].second;
    } else if (counts(time_category(t))) {
      sum += t.duration;
    }
  }
  return sum;
}

StepPrediction prediction(const Scenario& sc, const StepProgram& p, const ProgramRun& run, bool every_stage) {
  StepPrediction pr;
  pr.step_time = run.makespan;
  pr.tasks = p.tasks.size();
  Time most = -1;
  for (int s = 0; s < p.stages; ++s) {
    if (every_stage) pr.per_stage.push_back(attribute(p, run, s));
    const Time c = every_stage ? pr.per_stage.back().compute + pr.per_stage.back().recompute
                               : stage_compute_time(p, s);
    if (c > most) {
      most = c;
      pr.critical_stage = s;
    }
  }
  pr.breakdown = every_stage ? pr.per_stage[static_cast<std::size_t>(pr.critical_stage)]
                             : attribute(p, run, pr.critical_stage);
  pr.step_time = capped_sum(pr.step_time, pr.breakdown.interference);
  finish_prediction(sc, p.layers.keeps, pr);
  return pr;
}

double serial_ns(const StepProgram& p) {
  double serial = 0;
  for (const auto& t : p.tasks) serial += static_cast<double>(t.duration) + 1;
  return serial;
}

}  // namespace strata::strategies
