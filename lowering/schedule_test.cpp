#include "lowering/schedule.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/error.hpp"

namespace strata::strategies {
namespace {

std::string error_of(const PipelineSchedule& s) {
  try {
    validate(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Stage lists in to_string's notation, one string per stage.
std::vector<std::string> orders(const PipelineSchedule& s) {
  std::vector<std::string> out;
  std::string text = to_string(s);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t eol = text.find('\n', pos);
    const std::string line = text.substr(pos, eol - pos);
    out.push_back(line.substr(line.find(": ") + 2));
    pos = eol + 1;
  }
  return out;
}

TEST_CASE("golden: 1F1B pp=3 m=4 and GPipe pp=2 m=3") {
  // 1F1B stage s: min(pp-s-1, m) warm-up F, F/B pairs, cool-down B; GPipe: F0..F(m-1), B(m-1)..B0.
  const PipelineSchedule a = make_schedule(Schedule::OneFOneB, 3, 1, 4);
  CHECK(orders(a) == std::vector<std::string>{"F0.0 F1.0 F2.0 B0.0 F3.0 B1.0 B2.0 B3.0",
                                              "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 B3.0",
                                              "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0"});
  const PipelineSchedule g = make_schedule(Schedule::GPipe, 2, 1, 3);
  CHECK(orders(g) ==
        std::vector<std::string>{"F0.0 F1.0 F2.0 B2.0 B1.0 B0.0", "F0.0 F1.0 F2.0 B2.0 B1.0 B0.0"});
  // Fewer microbatches than warm-up slots: stage 0 of pp=4, m=2 runs both forwards first.
  CHECK(orders(make_schedule(Schedule::OneFOneB, 4, 1, 2))[0] == "F0.0 F1.0 B0.0 B1.0");
}

TEST_CASE("golden: Megatron interleaved pp=2 v=2 m=4") {
  // Table (mb,chunk): 0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1; warm-up (pp-s-1)*2 + (v-1)*pp = 4, 2.
  const PipelineSchedule s = make_schedule(Schedule::Interleaved, 2, 2, 4);
  INFO(to_string(s));
  CHECK(orders(s) ==
        std::vector<std::string>{
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0",
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"});
}

TEST_CASE("golden: Megatron interleaved pp=2 v=2 m=5, microbatch group 3") {
  // Megatron's table PP2 N3M5: mb 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1 0 0 1 1; warm-up 5, 3.
  const PipelineSchedule s = make_schedule(Schedule::Interleaved, 2, 2, 5, 3);
  INFO(to_string(s));
  CHECK(orders(s) == std::vector<std::string>{
                         "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 B0.1 F3.0 B1.1 F4.0 B2.1 F3.1 B0.0 F4.1 "
                         "B1.0 B2.0 B3.1 B4.1 B3.0 B4.0",
                         "F0.0 F1.0 F2.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.0 B0.0 F4.0 B1.0 F3.1 "
                         "B2.0 F4.1 B3.1 B4.1 B3.0 B4.0"});
  CHECK_NOTHROW(validate(s));
}

TEST_CASE("every generated schedule validates") {
  // For pp 1..8, v 1..4, m 1..16 each schedule is complete, ordered and deadlock-free.
  const Schedule kinds[] = {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved,
                            Schedule::PipeDream, Schedule::PipeDream2BW};
  int checked = 0;
  for (Schedule kind : kinds)
    for (int pp = 1; pp <= 8; ++pp)
      for (int v = 1; v <= 4; ++v)
        for (int m = 1; m <= 16; ++m) {
          if (kind != Schedule::Interleaved && v != 1) continue;
          const bool megatron_ok = m % pp == 0;
          if (kind == Schedule::Interleaved && !megatron_ok) {
            CHECK_THROWS_AS(make_schedule(kind, pp, v, m), Error);
            continue;
          }
          const PipelineSchedule s = make_schedule(kind, pp, v, m);
          INFO("pp=" << pp << " v=" << v << " m=" << m << "\n" << to_string(s));
          CHECK(error_of(s) == "no error");
          for (const auto& stage : s.stages) CHECK(stage.size() == std::size_t(2 * m * v));
          ++checked;
        }
  // Interleaved with groups other than pp: every legal group from pp to m.
  for (int pp = 1; pp <= 8; ++pp)
    for (int v = 1; v <= 4; ++v)
      for (int m = pp; m <= 16; ++m)
        for (int g = pp; g <= m; ++g) {
          if (m % g != 0 && m % g < pp) {
            CHECK_THROWS_AS(make_schedule(Schedule::Interleaved, pp, v, m, g), Error);
            continue;
          }
          const PipelineSchedule s = make_schedule(Schedule::Interleaved, pp, v, m, g);
          INFO("pp=" << pp << " v=" << v << " m=" << m << " group=" << g);
          CHECK(error_of(s) == "no error");
          ++checked;
        }
  CHECK(checked > 1000);
}

TEST_CASE("GPipe and 1F1B makespan") {
  // Balanced stages, free communication: (m + pp - 1)(t_f + t_b), bubble (pp-1)/(m+pp-1).
  for (Schedule kind :
       {Schedule::GPipe, Schedule::OneFOneB, Schedule::PipeDream, Schedule::PipeDream2BW})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 16; ++m) {
        const PipelineSchedule s = make_schedule(kind, pp, 1, m);
        INFO("pp=" << pp << " m=" << m);
        CHECK(simulate_makespan(s, 1.0, 2.0) == doctest::Approx((m + pp - 1) * 3.0));
        CHECK(simulate_makespan(s, 2.0, 2.0) == doctest::Approx((m + pp - 1) * 4.0));
      }
}

TEST_CASE("interleaved makespan") {
  // m(t_f + t_b) + (pp-1)(t_f + t_b)/v for m a multiple of pp (Megatron-LM 2021 Sec 2.2.2).
  for (int pp = 1; pp <= 8; ++pp)
    for (int v = 1; v <= 4; ++v)
      for (int m = pp; m <= 16; m += pp) {
        const PipelineSchedule s = make_schedule(Schedule::Interleaved, pp, v, m);
        INFO("pp=" << pp << " v=" << v << " m=" << m);
        for (auto [tf, tb] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}, std::pair{3.0, 1.0}})
          CHECK(simulate_makespan(s, tf, tb) ==
                doctest::Approx(m * (tf + tb) + (pp - 1) * (tf + tb) / v));
      }
}

TEST_CASE("activations in flight") {
  // 1F1B, PipeDream: min(pp-s, m); GPipe: m; interleaved: min((pp-s-1)·2 + (v-1)·pp + 1, m·v).
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m)
      for (int s = 0; s < pp; ++s) {
        CHECK(max_in_flight(make_schedule(Schedule::OneFOneB, pp, 1, m), s) == std::min(pp - s, m));
        CHECK(max_in_flight(make_schedule(Schedule::PipeDream, pp, 1, m), s) ==
              std::min(pp - s, m));
        CHECK(max_in_flight(make_schedule(Schedule::GPipe, pp, 1, m), s) == m);
      }
  for (int pp = 1; pp <= 8; ++pp)
    for (int v = 1; v <= 4; ++v)
      for (int m = pp; m <= 16; m += pp) {
        const PipelineSchedule sch = make_schedule(Schedule::Interleaved, pp, v, m);
        for (int s = 0; s < pp; ++s)
          CHECK(max_in_flight(sch, s) == std::min((pp - s - 1) * 2 + (v - 1) * pp + 1, m * v));
      }
}

TEST_CASE("interleaved stage 0 holds pp·v + pp - 1 chunk activations") {
  // Korthikanti et al. 2022 Sec 4.2.3: activation memory is 1 + (pp-1)/(pp·v) times 1F1B's.
  for (auto [pp, v, m] : {std::tuple{4, 2, 8}, std::tuple{4, 3, 16}, std::tuple{8, 4, 16}}) {
    const PipelineSchedule s = make_schedule(Schedule::Interleaved, pp, v, m);
    const int peak = max_in_flight(s, 0);
    CHECK(peak == pp * v + pp - 1);
    // Chunks hold L/(pp·v) layers each; 1F1B stage 0 holds pp microbatches of L/pp layers.
    const int one_f_one_b = max_in_flight(make_schedule(Schedule::OneFOneB, pp, 1, m), 0);
    const double ratio = (double(peak) / (pp * v)) / (double(one_f_one_b) / pp);
    CHECK(ratio == doctest::Approx(1.0 + double(pp - 1) / (pp * v)));
  }
}

TEST_CASE("in_flight_at_peak names the live (microbatch, chunk) pairs") {
  // pp=2 v=2 m=4 stage 0 peaks after F2.0 with 0.0 1.0 0.1 1.1 2.0 alive (5 = pp·v + pp - 1).
  const PipelineSchedule s = make_schedule(Schedule::Interleaved, 2, 2, 4);
  const std::vector<Step> peak = in_flight_at_peak(s, 0);
  const std::vector<Step> want = {{0, 0, Pass::Forward},
                                  {1, 0, Pass::Forward},
                                  {0, 1, Pass::Forward},
                                  {1, 1, Pass::Forward},
                                  {2, 0, Pass::Forward}};
  CHECK(peak == want);
  CHECK(model_chunk(s, 0, 1) == 2);
  CHECK(model_chunk(s, 1, 1) == 3);
  // Stage 1 of 1F1B pp=3 m=4 peaks at 2 with microbatches 0 and 1 alive.
  CHECK(in_flight_at_peak(make_schedule(Schedule::OneFOneB, 3, 1, 4), 1) ==
        std::vector<Step>{{0, 0, Pass::Forward}, {1, 0, Pass::Forward}});
}

TEST_CASE("weight versions") {
  // PipeDream stage s stashes pp - s versions; 2BW 2 (1 when pp = 1); synchronous schedules 1.
  for (int pp = 1; pp <= 8; ++pp)
    for (int s = 0; s < pp; ++s) {
      CHECK(weight_versions(Schedule::PipeDream, pp, s) == pp - s);
      CHECK(weight_versions(Schedule::PipeDream2BW, pp, s) == (pp > 1 ? 2 : 1));
      CHECK(weight_versions(Schedule::GPipe, pp, s) == 1);
      CHECK(weight_versions(Schedule::OneFOneB, pp, s) == 1);
      CHECK(weight_versions(Schedule::Interleaved, pp, s) == 1);
    }
  CHECK_THROWS_AS(weight_versions(Schedule::PipeDream, 4, 4), Error);
}

TEST_CASE("validate rejects broken schedules") {
  // Missing, repeated, early backwards and cross-stage deadlocks each throw with the rule named.
  PipelineSchedule s = make_schedule(Schedule::OneFOneB, 2, 1, 2);
  PipelineSchedule missing = s;
  missing.stages[1].pop_back();
  CHECK(error_of(missing) ==
        "pipeline schedule: stage 1: (microbatch 1, chunk 0) lacks a backward");
  PipelineSchedule twice = s;
  twice.stages[0][1] = {0, 0, Pass::Forward};
  CHECK(error_of(twice) == "pipeline schedule: stage 0: F0.0 runs twice");
  PipelineSchedule early = s;
  std::swap(early.stages[1][0], early.stages[1][1]);  // B0 before F0 on the last stage
  CHECK(error_of(early) == "pipeline schedule: stage 1: B0.0 runs before its forward");
  // Stage 0 runs B0 before F1; stage 1 runs F1 before B0: each waits for the other.
  PipelineSchedule cycle = s;
  cycle.stages[0] = {{0, 0, Pass::Forward},
                     {0, 0, Pass::Backward},
                     {1, 0, Pass::Forward},
                     {1, 0, Pass::Backward}};
  cycle.stages[1] = {{0, 0, Pass::Forward},
                     {1, 0, Pass::Forward},
                     {0, 0, Pass::Backward},
                     {1, 0, Pass::Backward}};
  CHECK(error_of(cycle) ==
        "pipeline schedule deadlocks: stage 0 waits at B0.0; stage 1 waits at F1.0;");
  PipelineSchedule range = s;
  range.stages[0][0].chunk = 1;
  CHECK(error_of(range) == "pipeline schedule: stage 0: F0.1 is out of range (m=2, v=1)");
}

TEST_CASE("make_schedule rejects invalid input") {
  // Each rule throws strata::Error naming it; Megatron's group rules hold for interleaved.
  CHECK_THROWS_WITH_AS(make_schedule(Schedule::Interleaved, 4, 2, 6),
                       doctest::Contains("multiple of pp"), Error);
  CHECK_THROWS_WITH_AS(make_schedule(Schedule::Interleaved, 4, 2, 2),
                       doctest::Contains("microbatches must be at least pp"), Error);
  CHECK_THROWS_WITH_AS(make_schedule(Schedule::OneFOneB, 4, 2, 8),
                       doctest::Contains("needs the interleaved schedule"), Error);
  CHECK_THROWS_AS(make_schedule(Schedule::GPipe, 0, 1, 8), Error);
  CHECK_THROWS_AS(make_schedule(Schedule::GPipe, 2, 1, 0), Error);
  CHECK_THROWS_AS(make_schedule(Schedule::Interleaved, 2, 2, 8, 9), Error);
  CHECK_THROWS_AS(make_schedule(Schedule::OneFOneB, 2, 1, 8, 2), Error);
  CHECK_THROWS_AS(simulate_makespan(make_schedule(Schedule::GPipe, 2, 1, 2), -1.0, 1.0), Error);
  CHECK_THROWS_AS(max_in_flight(make_schedule(Schedule::GPipe, 2, 1, 2), 2), Error);
}

}  // namespace
}  // namespace strata::strategies
