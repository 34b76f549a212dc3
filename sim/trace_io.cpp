#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "sim/trace.hpp"

namespace strata::sim {

namespace {
using nlohmann::json;

std::string process_of(const std::string& name) { return name.substr(0, name.find('.')); }
std::string thread_of(const std::string& name) {
  const auto dot = name.find('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}
double micros(Time ns) { return static_cast<double>(ns) / 1000.0; }

json label_args(const Task& t, const TaskTiming& timing) {
  json a = json::object();
  a["id"] = t.id;
  a["kind"] = enum_name(t.kind);
  a["start_ns"] = timing.start;
  a["end_ns"] = timing.end;
  if (t.label.phase != Phase::None) a["phase"] = enum_name(t.label.phase);
  if (t.label.rank) a["rank"] = *t.label.rank;
  if (t.label.stage) a["stage"] = *t.label.stage;
  if (t.label.microbatch) a["microbatch"] = *t.label.microbatch;
  if (t.label.layer) a["layer"] = *t.label.layer;
  if (t.flops > 0) a["flops"] = t.flops;
  if (t.mem_bytes > 0) a["mem_bytes"] = t.mem_bytes;
  if (t.transfer_bytes > 0) a["transfer_bytes"] = t.transfer_bytes;
  return a;
}

// Produces the trace events one at a time through `emit` (so a large trace
// is streamed, never held as one JSON value): task events resource by
// resource, then memory counters, then the process and thread metadata.
class TraceBuilder {
 public:
  using Emit = std::function<void(json&&)>;
  TraceBuilder(const TaskGraph& g, const RunResult& r, Emit emit)
      : g_(g), r_(r), emit_(std::move(emit)) {}

  void build() {
    // Processes in order of first appearance: resources, then pools.
    for (const Resource& res : g_.resources()) pid(process_of(res.name));
    for (const MemoryPool& p : g_.pools()) pid(process_of(p.name));

    // Which tasks show on which resource.
    std::vector<std::vector<std::int32_t>> on(g_.num_resources());
    std::vector<std::int32_t> unassigned;
    for (std::size_t t = 0; t < g_.num_tasks(); ++t) {
      const Task& task = g_.tasks()[t];
      for (ResourceId res : task.resources) on[res.index].push_back(static_cast<std::int32_t>(t));
      if (task.resources.empty()) unassigned.push_back(static_cast<std::int32_t>(t));
    }
    for (std::size_t i = 0; i < g_.num_resources(); ++i) {
      const Resource& res = g_.resources()[i];
      const int p = pid(process_of(res.name));
      if (res.kind == ResourceKind::Stream || res.kind == ResourceKind::CopyEngine) {
        const int tid = thread(p, thread_of(res.name));
        for (std::int32_t t : on[i]) task_event(t, p, tid);
      } else {
        lanes(on[i], p, thread_of(res.name));
      }
    }
    if (!unassigned.empty()) lanes(unassigned, pid("unassigned"), "tasks");
    counters();

    for (std::size_t i = 0; i < processes_.size(); ++i) {
      const int p = static_cast<int>(i) + 1;
      emit_({{"ph", "M"}, {"name", "process_name"}, {"pid", p}, {"tid", 0},
             {"args", {{"name", processes_[i]}}}});
      emit_({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", p}, {"tid", 0},
             {"args", {{"sort_index", p}}}});
    }
    for (const auto& [p, tid, name] : threads_) {
      emit_({{"ph", "M"}, {"name", "thread_name"}, {"pid", p}, {"tid", tid},
             {"args", {{"name", name}}}});
      emit_({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", p}, {"tid", tid},
             {"args", {{"sort_index", tid}}}});
    }
  }

 private:
  int pid(const std::string& process) {
    auto [it, inserted] = pid_of_.emplace(process, static_cast<int>(processes_.size()) + 1);
    if (inserted) processes_.push_back(process);
    return it->second;
  }
  int thread(int p, const std::string& name) {
    const int tid = ++last_tid_;
    threads_.emplace_back(p, tid, name);
    return tid;
  }
  void task_event(std::int32_t t, int p, int tid) {
    const Task& task = g_.tasks()[t];
    const TaskTiming& tm = r_.tasks[t];
    emit_({{"ph", "X"}, {"name", task.id}, {"cat", enum_name(task.kind)}, {"pid", p},
           {"tid", tid}, {"ts", micros(tm.start)}, {"dur", micros(tm.end - tm.start)},
           {"args", label_args(task, tm)}});
  }
  // Packs possibly overlapping tasks into lanes (first lane free at start).
  void lanes(std::vector<std::int32_t> tasks, int p, const std::string& name) {
    std::stable_sort(tasks.begin(), tasks.end(), [&](std::int32_t a, std::int32_t b) {
      return r_.tasks[a].start < r_.tasks[b].start;
    });
    std::vector<Time> lane_end;
    std::vector<int> lane_tid;
    for (std::int32_t t : tasks) {
      const TaskTiming& tm = r_.tasks[t];
      std::size_t lane = 0;
      while (lane < lane_end.size() && lane_end[lane] > tm.start) ++lane;
      if (lane == lane_end.size()) {
        lane_end.push_back(0);
        lane_tid.push_back(thread(p, lane == 0 ? name : name + " #" + std::to_string(lane)));
      }
      lane_end[lane] = std::max(tm.end, tm.start + 1);  // zero-length events still take a lane
      task_event(t, p, lane_tid[lane]);
    }
    if (tasks.empty()) thread(p, name);
  }
  void counters() {
    for (std::size_t i = 0; i < r_.pools.size(); ++i) {
      const std::string& name = g_.pools()[i].name;
      const int p = pid(process_of(name));
      for (const TagPoint& pt : tag_timeline(g_, PoolId{static_cast<std::int32_t>(i)}, r_.pools[i])) {
        json args = json::object();
        for (std::size_t k = 0; k < kMemTagCount; ++k)
          args[std::string(enum_name(static_cast<MemTag>(k)))] = pt.by_tag[k];
        emit_({{"ph", "C"}, {"name", "memory " + name}, {"pid", p}, {"tid", 0},
               {"ts", micros(pt.time)}, {"args", std::move(args)}});
      }
    }
  }

  const TaskGraph& g_;
  const RunResult& r_;
  std::map<std::string, int> pid_of_;
  std::vector<std::string> processes_;
  std::vector<std::tuple<int, int, std::string>> threads_;
  int last_tid_ = 0;
  Emit emit_;
};

json tag_bytes(const TagBytes& b) {
  json o = json::object();
  for (std::size_t k = 0; k < kMemTagCount; ++k)
    o[std::string(enum_name(static_cast<MemTag>(k)))] = b[k];
  return o;
}
}  // namespace

json chrome_trace_json(const TaskGraph& graph, const RunResult& result) {
  json events = json::array();
  TraceBuilder(graph, result, [&](json&& e) { events.push_back(std::move(e)); }).build();
  return json{{"displayTimeUnit", "ns"}, {"traceEvents", std::move(events)}};
}

void write_chrome_trace(std::ostream& out, const TaskGraph& graph, const RunResult& result) {
  // One event per line, streamed.
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  bool first = true;
  TraceBuilder(graph, result, [&](json&& e) {
    out << (first ? "\n" : ",\n") << e.dump();
    first = false;
  }).build();
  out << "\n]}\n";
}

std::string chrome_trace(const TaskGraph& graph, const RunResult& result) {
  std::ostringstream s;
  write_chrome_trace(s, graph, result);
  return s.str();
}

json summary_json(const TaskGraph& graph, const RunResult& result) {
  json j = json::object();
  j["makespan_ns"] = result.makespan;
  j["tasks"] = graph.num_tasks();
  j["events"] = result.events;
  j["fits"] = result.fits();
  json resources = json::array();
  for (std::size_t i = 0; i < graph.num_resources(); ++i) {
    const Resource& res = graph.resources()[i];
    const ResourceUsage& u = result.resources[i];
    json o = {{"name", res.name},
              {"kind", enum_name(res.kind)},
              {"busy_ns", u.busy},
              {"utilization", result.makespan > 0 ? static_cast<double>(u.busy) /
                                                        static_cast<double>(result.makespan)
                                                  : 0.0},
              {"tasks", u.tasks}};
    if (res.kind == ResourceKind::Link) o["bytes"] = u.bytes;
    resources.push_back(std::move(o));
  }
  j["resources"] = std::move(resources);
  json pools = json::array();
  for (std::size_t i = 0; i < graph.num_pools(); ++i) {
    const PoolUsage& u = result.pools[i];
    pools.push_back({{"name", graph.pools()[i].name},
                     {"capacity_bytes", u.capacity},
                     {"peak_bytes", u.peak},
                     {"peak_time_ns", u.peak_time},
                     {"peak_by_tag", tag_bytes(u.peak_by_tag)},
                     {"end_live_bytes", u.end_live},
                     {"bytes_short", u.bytes_short}});
  }
  j["pools"] = std::move(pools);
  if (result.oom) {
    const OutOfMemory& o = *result.oom;
    j["oom"] = {{"task", o.task ? json(graph.at(*o.task).id) : json(nullptr)},
                {"buffer", o.buffer ? json(graph.at(*o.buffer).id) : json(nullptr)},
                {"pool", graph.at(o.pool).name},
                {"time_ns", o.time},
                {"capacity_bytes", o.capacity},
                {"needed_bytes", o.needed},
                {"bytes_short", o.bytes_short}};
  } else {
    j["oom"] = nullptr;
  }
  return j;
}

void write_summary(std::ostream& out, const TaskGraph& graph, const RunResult& result) {
  out << summary_json(graph, result).dump(2) << '\n';
}

}  // namespace strata::sim
