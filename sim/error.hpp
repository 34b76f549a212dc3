#pragma once
// Typed exceptions thrown by library code. Only app/ turns them into exit codes.
#include <stdexcept>
#include <string>

namespace strata {

// Base of every error Strata throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input: broken JSON, unknown keys, wrong types, out-of-range values,
// unknown presets, invalid combinations. Carries the file, the JSON path in
// dotted form (`plan.offload.optimizer`, `plan.stage_layers[3]`) and the rule.
class InputError : public Error {
 public:
  InputError(std::string file, std::string path, std::string rule)
      : Error(format(file, path, rule)),
        file_(std::move(file)),
        path_(std::move(path)),
        rule_(std::move(rule)) {}

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const std::string& rule() const { return rule_; }

 private:
  static std::string format(const std::string& file, const std::string& path,
                            const std::string& rule) {
    std::string s = file.empty() ? std::string("<input>") : file;
    if (!path.empty()) s += ": " + path;
    return s + ": " + rule;
  }

  std::string file_, path_, rule_;
};

}  // namespace strata
