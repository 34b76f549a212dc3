#pragma once
// Reading models, GPUs and clusters from JSON: presets by name, files by path
// (Strata's format or a Hugging Face config.json), inline objects with
// overrides. A string is a file path when it contains '/' or ends in ".json",
// otherwise a preset name. Relative paths resolve against `base_dir` (the
// directory of the file that names them) first, then the working directory.
#include <string>
#include <string_view>
#include <vector>

#include "costmodel/hardware.hpp"
#include "costmodel/model.hpp"
#include "sim/json_reader.hpp"

namespace strata::cost {

// A training scenario's model: a Hugging Face config.json needs the
// training sequence length, given as {"file": ..., "seq_len": N}.
ModelSpec read_model(const JsonReader& value, const std::string& base_dir);
// A model file to describe: a Hugging Face config without a sequence
// length gets Strata's default (4,096 tokens, or its context limit if
// shorter), which is said in `notes` when given.
ModelSpec load_model_file(const std::string& path, std::vector<std::string>* notes = nullptr);
// The same from the file's text (`source` names it in errors and is the
// directory relative paths in it resolve against).
ModelSpec parse_model_file_text(std::string_view text, const std::string& source,
                                std::vector<std::string>* notes = nullptr);
ModelSpec model_preset(std::string_view name);
std::vector<ModelSpec> model_presets();

GpuSpec read_gpu(const JsonReader& value);
GpuSpec gpu_preset(std::string_view name);
std::vector<GpuSpec> gpu_presets();

// Cluster presets: the bundled files plus "1x<gpu>" for every GPU preset.
ClusterSpec read_cluster(const JsonReader& value, const std::string& base_dir);
ClusterSpec cluster_preset(std::string_view name);
std::vector<ClusterSpec> cluster_presets();

// Resolves a path named inside a JSON file (see above); returns it unchanged
// when nothing exists, so the open fails with the name the user wrote.
std::string resolve_path(const std::string& path, const std::string& base_dir);
// Whether a model/cluster string names a file rather than a preset.
bool names_a_file(std::string_view s);

}  // namespace strata::cost
