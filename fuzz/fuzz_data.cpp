// libFuzzer target: a `strata run --data FILE` training file, read as the
// run does. Byte 0 picks the model's sequence length (1..64), byte 1 the
// global batch (1..8); the rest is the file, written to a temporary path.
//
// Bad input must end in strata::InputError. A file check_train_options
// accepts must then read (ByteCorpus::from_file) and yield windows: every
// token a byte, each target the next byte of its window, which lies in the
// file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/common/corpus.hpp"
#include "backend/common/rng.hpp"
#include "backend/common/train.hpp"
#include "sim/error.hpp"
#include "strategies/scenario.hpp"

namespace {

using namespace strata;

strategies::Scenario byte_model(std::int64_t seq, std::int64_t batch) {
  const std::string text = R"({"model": {"name": "fuzz-bytes", "layers": 1, "hidden": 16, "heads": 2,
    "ffn_hidden": 32, "vocab": 256, "seq_len": )" + std::to_string(seq) +
                           R"(, "mlp": "gelu", "norm": "layernorm", "bias": true,
    "position_embedding": "learned", "tied_embeddings": true, "dropout": false, "source": "fuzz"},
    "cluster": {"preset": "cpu-local", "gpus_per_node": 1}, "batch": {"global": )" + std::to_string(batch) +
                           R"(, "micro": 1}, "plan": {"dp": 1, "precision": "fp32"}})";
  return strategies::parse_scenario(text, "fuzz-data-scenario.json");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::int64_t seq = 1 + data[0] % 64, batch = 1 + data[1] % 8;
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("strata-fuzz-data-" + std::to_string(::getpid()))).string();
  const std::string_view file(reinterpret_cast<const char*>(data + 2), size - 2);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  const auto sc = byte_model(seq, batch);
  backend::TrainOptions opts;
  opts.data = path;
  try {
    backend::check_train_options(sc, opts);
  } catch (const InputError&) {
    std::remove(path.c_str());
    return 0;
  }
  // Accepted: the run reads it and samples windows from it.
  try {
    const auto corpus = backend::ByteCorpus::from_file(path);
    if (corpus.size() != static_cast<std::int64_t>(file.size())) throw Error("the corpus is not the file");
    const auto n = static_cast<std::size_t>(batch * seq);
    std::vector<std::int32_t> tokens(n), targets(n);
    backend::Rng rng(data[0] ^ (std::uint64_t{data[1]} << 8));
    corpus.sample(tokens, targets, batch, seq, rng);
    for (std::size_t k = 0; k < n; ++k) {
      if (tokens[k] < 0 || tokens[k] > 255 || targets[k] < 0 || targets[k] > 255) throw Error("not a byte");
      if ((k + 1) % static_cast<std::size_t>(seq) != 0 && targets[k] != tokens[k + 1])
        throw Error("a target is not the next token of its window");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_data: accepted, but: %s\n", e.what());
    __builtin_trap();
  }
  std::remove(path.c_str());
  return 0;
}
