#include "sim/trace.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>

namespace strata::sim {
namespace {

TaskGraph small_graph() {
  TaskGraph g;
  auto s = g.add_stream("r0.compute");
  auto c = g.add_stream("r0.comm");
  auto l = g.add_link("nvlink", 10e9);
  auto p = g.add_pool("r0", 1000);
  auto act = g.add_buffer({.id = "act/L0/mb0", .pool = p, .bytes = 100, .tag = MemTag::Activations});
  auto f = g.add_task({.id = "r0:fwd/L0/mb0", .resources = {s}, .duration = 10, .allocs = {act},
                       .label = {.rank = 0, .microbatch = 0, .layer = 0, .phase = Phase::Fwd}});
  auto x = g.add_task({.id = "r0:send/mb0", .kind = TaskKind::P2PSend, .resources = {c, l},
                       .transfer_bytes = 100, .label = {.rank = 0, .phase = Phase::Comm}});
  auto y = g.add_task({.id = "r0:send/mb1", .kind = TaskKind::P2PSend, .resources = {l},
                       .transfer_bytes = 200});
  auto b = g.add_task({.id = "r0:bwd/L0/mb0", .resources = {s}, .duration = 20, .frees = {act}});
  g.add_dep(f, x);
  g.add_dep(x, b);
  (void)y;
  return g;
}

TEST_CASE("sim/trace: chrome trace parses and has one track per stream, lanes per link, pool counters") {
  // Streams r0.compute and r0.comm are threads of process r0; the link has two
  // overlapping transfers (0-30 and 10-30), so two lanes; the pool gives 2
  // counter points (t=0 and the free at t=50).
  const TaskGraph g = small_graph();
  const RunResult r = simulate(g);
  const auto j = nlohmann::json::parse(chrome_trace(g, r));
  std::set<std::string> processes, threads;
  int x_events = 0, counters = 0;
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name") processes.insert(e.at("args").at("name"));
    if (ph == "M" && e.at("name") == "thread_name") threads.insert(e.at("args").at("name"));
    if (ph == "X") ++x_events;
    if (ph == "C") {
      ++counters;
      CHECK(e.at("args").contains("activations"));
    }
  }
  CHECK(processes == std::set<std::string>{"r0", "nvlink"});
  CHECK(threads == std::set<std::string>{"compute", "comm", "nvlink", "nvlink #1"});
  CHECK(x_events == 5);  // fwd, bwd, send mb0 on comm and on the link, send mb1
  CHECK(counters == 2);
  const auto fwd = std::find_if(j["traceEvents"].begin(), j["traceEvents"].end(),
                                [](const auto& e) { return e.value("name", "") == "r0:fwd/L0/mb0"; });
  REQUIRE(fwd != j["traceEvents"].end());
  CHECK((*fwd)["args"]["phase"] == "fwd");
  CHECK((*fwd)["dur"] == 0.01);  // 10 ns in microseconds
}

TEST_CASE("sim/trace: trace and summary bytes are identical for identical graphs") {
  // Two separately built copies of the same graph give byte-identical output.
  const TaskGraph g1 = small_graph(), g2 = small_graph();
  const RunResult r1 = simulate(g1), r2 = simulate(g2);
  CHECK(chrome_trace(g1, r1) == chrome_trace(g2, r2));
  std::ostringstream a, b;
  write_summary(a, g1, r1);
  write_summary(b, g2, r2);
  CHECK(a.str() == b.str());
}

TEST_CASE("sim/trace: summary holds makespan, busy time, peak breakdown and OOM") {
  // send mb1 alone 0-10 (100 B), then both sends share 5 B/ns each until 30;
  // fwd 0-10, send mb0 10-30, bwd 30-50: makespan 50; link carried 300 B;
  // peak 100 activations at t=0; no OOM.
  const TaskGraph g = small_graph();
  const RunResult r = simulate(g);
  std::ostringstream s;
  write_summary(s, g, r);
  const auto j = nlohmann::json::parse(s.str());
  CHECK(j["makespan_ns"] == 50);
  CHECK(j["oom"].is_null());
  CHECK(j["fits"] == true);
  CHECK(j["resources"][0]["name"] == "r0.compute");
  CHECK(j["resources"][0]["busy_ns"] == 30);
  CHECK(j["resources"][2]["bytes"] == 300);
  CHECK(j["resources"][2]["busy_ns"] == 30);
  CHECK(j["pools"][0]["peak_bytes"] == 100);
  CHECK(j["pools"][0]["peak_by_tag"]["activations"] == 100);
}

TEST_CASE("sim/trace: worker pool tasks get one lane per overlapping task; OOM is in the summary") {
  // Two 10 ns host tasks run at once on a 2-slot pool (lanes "cpu", "cpu #1");
  // each allocates 60 B in a 100 B pool: 20 B short at t=0, blamed on the second.
  TaskGraph g;
  auto cpu = g.add_worker_pool("host.cpu", 2);
  auto p = g.add_pool("host", 100);
  auto a = g.add_buffer({.id = "a", .pool = p, .bytes = 60, .tag = MemTag::OptimizerStates});
  auto b = g.add_buffer({.id = "b", .pool = p, .bytes = 60, .tag = MemTag::OptimizerStates});
  g.add_task({.id = "opt/0", .kind = TaskKind::Host, .resources = {cpu}, .duration = 10,
              .allocs = {a}, .frees = {a}, .label = {.phase = Phase::Optim}});
  g.add_task({.id = "opt/1", .kind = TaskKind::Host, .resources = {cpu}, .duration = 10,
              .allocs = {b}, .frees = {b}, .label = {.phase = Phase::Optim}});
  const RunResult r = simulate(g);
  const auto trace = nlohmann::json::parse(chrome_trace(g, r));
  std::set<std::string> threads;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") threads.insert(e.at("args").at("name"));
  CHECK(threads == std::set<std::string>{"cpu", "cpu #1"});
  const auto j = summary_json(g, r);
  CHECK(j["fits"] == false);
  CHECK(j["oom"]["task"] == "opt/1");
  CHECK(j["oom"]["buffer"] == "b");
  CHECK(j["oom"]["pool"] == "host");
  CHECK(j["oom"]["bytes_short"] == 20);
  CHECK(j["pools"][0]["peak_by_tag"]["optimizer_states"] == 120);
}

TEST_CASE("sim/trace: the streamed trace equals the in-memory one") {
  // write_chrome_trace (streamed) parses to exactly chrome_trace_json.
  const TaskGraph g = small_graph();
  const RunResult r = simulate(g);
  CHECK(nlohmann::json::parse(chrome_trace(g, r)) == chrome_trace_json(g, r));
}

}  // namespace
}  // namespace strata::sim
