// libFuzzer target: explore output directories as `strata explore --resume`,
// `strata merge` and `strata report` read them. Once per process it explores
// a small space (8 plans of GPT-2 124M on a DGX H100) as two shards, 0/2 and
// 1/2; each input copies the two directories, changes one of their files and
// then resumes shard 0, merges both or loads shard 0's report data.
//
// Input: byte 0 picks the file (results.jsonl, manifest.json, summary.json,
// scenario.json, refined.jsonl of shard 0 or 1), byte 1 the change (replace
// the file with the payload, insert it at the offset, cut the file there and
// append it, overwrite from the offset), bytes 2-3 the offset (little
// endian, modulo the file's size + 1), byte 4 the command; the rest is the
// payload.
//
// Bad input must end in strata::InputError. What a command accepts must be
// whole: a resumed shard 0 reads back, checked against the scenario, with
// its 4 plans; a merge reads back with at most the space's 8 plans and no
// record outside it. With STRATA_FUZZ_VERBOSE set, each input's outcome
// goes to stderr.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "report/explore.hpp"
#include "report/html_report.hpp"
#include "sim/error.hpp"
#include "strategies/scenario.hpp"

namespace {

namespace fs = std::filesystem;
using namespace strata;

constexpr std::string_view kScenario = R"({
  "model": "gpt2-124m", "cluster": "dgx-h100",
  "batch": {"global": 64, "micro": 1},
  "plan": {"optimizer": "adamw", "precision": "bf16"},
  "space": {"tp": [1, 2], "zero": [0, 1], "recompute": ["none", "full"]}
})";
constexpr std::uint64_t kSpace = 8;

struct Template {
  fs::path root;
  strategies::Scenario sc;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

report::ExploreRunOptions shard_options(const fs::path& dir, std::uint64_t index, bool resume) {
  report::ExploreRunOptions o;
  o.out_dir = dir.string();
  o.resume = resume;
  o.jobs = 1;
  o.shard_index = index;
  o.shard_count = 2;
  return o;
}

// The two shard directories, explored once; removed when the process ends.
const Template& explored() {
  static const Template t = [] {
    Template t;
    t.root = fs::temp_directory_path() / ("strata-fuzz-explore-" + std::to_string(::getpid()));
    fs::remove_all(t.root);
    fs::create_directories(t.root / "template");
    const fs::path scenario = t.root / "template" / "scenario-in.json";
    spit(scenario, kScenario);
    t.sc = strategies::load_scenario(scenario.string());
    for (std::uint64_t i = 0; i < 2; ++i)
      (void)report::run_explore(t.sc, shard_options(t.root / "template" / ("shard" + std::to_string(i)), i, false));
    std::atexit([] { fs::remove_all(explored().root); });
    return t;
  }();
  return t;
}

std::uint64_t plans_in(const fs::path& results, const strategies::Scenario& sc,
                       std::vector<std::uint64_t> shards, std::uint64_t count) {
  const report::RecordCheck check{&sc, count, std::move(shards)};
  return report::read_results(results.string(), {}, &check).plans.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  const Template& t = explored();
  const fs::path work = t.root / "work";
  fs::remove_all(work);
  fs::create_directories(work);
  for (const char* shard : {"shard0", "shard1"})
    fs::copy(t.root / "template" / shard, work / shard, fs::copy_options::recursive);

  static constexpr const char* kFiles[] = {"results.jsonl", "manifest.json", "summary.json", "scenario.json",
                                           "refined.jsonl"};
  constexpr std::size_t kFileCount = std::size(kFiles);
  const fs::path target = work / (data[0] % (2 * kFileCount) < kFileCount ? "shard0" : "shard1") /
                          kFiles[data[0] % kFileCount];
  const std::string_view payload(reinterpret_cast<const char*>(data + 5), size - 5);
  std::string text = slurp(target);
  const std::size_t at = (data[2] | (std::size_t{data[3]} << 8)) % (text.size() + 1);
  switch (data[1] % 4) {
    case 0: text.assign(payload); break;
    case 1: text.insert(at, payload); break;
    case 2: text.resize(at); text.append(payload); break;
    default: text.replace(at, std::min(payload.size(), text.size() - at), payload); break;
  }
  spit(target, text);

  const int command = data[4] % 3;
  // STRATA_FUZZ_VERBOSE set: each input's outcome on stderr (for replays).
  static const bool verbose = std::getenv("STRATA_FUZZ_VERBOSE") != nullptr;
  try {
    if (command == 0) (void)report::run_explore(t.sc, shard_options(work / "shard0", 0, true));
    if (command == 1)
      (void)report::merge_explore({(work / "shard0").string(), (work / "shard1").string()},
                                  (work / "merged").string());
    if (command == 2) (void)report::load_report_data((work / "shard0").string());
  } catch (const InputError& e) {
    if (verbose) std::fprintf(stderr, "fuzz_explore_dir: refused: %s\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_explore_dir: not an InputError: %s\n", e.what());
    __builtin_trap();
  }
  // Accepted: what was written holds the plans it must, every one in the space.
  try {
    if (command == 0 && plans_in(work / "shard0" / "results.jsonl", t.sc, {0}, 2) != kSpace / 2)
      throw Error("the resumed shard 0 does not hold its 4 plans");
    if (command == 1 && plans_in(work / "merged" / "results.jsonl", t.sc, {0}, 1) > kSpace)
      throw Error("the merge holds more plans than the space");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_explore_dir: accepted, but: %s\n", e.what());
    __builtin_trap();
  }
  if (verbose) std::fprintf(stderr, "fuzz_explore_dir: accepted\n");
  return 0;
}
