#pragma once
// Strict, path-aware reading of JSON input. Every accessor knows the file and
// the dotted JSON path of the value it reads, so every error names both and the
// rule that was broken. Objects reject keys nobody asked for.
//
// Only `*_io.cpp` files use this header (it needs nlohmann's full header to
// be useful); it includes only json_fwd.hpp so it stays cheap.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/error.hpp"
#include "sim/names.hpp"

namespace strata {

// The largest JSON file Strata reads (a scenario, model, cluster or
// calibration file is a few KiB).
inline constexpr std::uint64_t kMaxJsonFileBytes = std::uint64_t{64} << 20;

// The bytes of a regular file of at most `max_bytes`. Throws InputError for a
// missing file, a directory, a FIFO or device (/dev/zero would never end) and
// a file over the limit.
std::string read_input_file(const std::string& path, std::uint64_t max_bytes);
// The same checks without reading: the size of a regular file of at most
// `max_bytes` (for a file read later, checked before the work it feeds).
std::uint64_t require_input_file(const std::string& path, std::uint64_t max_bytes);

// Reads a JSON file (read_input_file, at most kMaxJsonFileBytes); `//` and
// `/* */` comments are accepted. Throws InputError naming the file and the
// line/column of a syntax error.
nlohmann::json load_json_file(const std::string& path);
// Parses JSON text; `source` names it in errors.
nlohmann::json parse_json_text(std::string_view text, const std::string& source);

class JsonReader {
 public:
  JsonReader(const nlohmann::json& value, std::string file, std::string path = {});

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // The files a document read through this reader names (a model, cluster,
  // stack or convergence file), for outputs to stay apart from them: a
  // list the caller owns, shared by every reader made from this one.
  // `files_read` sets it; `read_file` records one (nothing without a list);
  // `reading` gives a reader of a loaded file the same list.
  JsonReader& files_read(std::vector<std::string>* list) {
    files_ = list;
    return *this;
  }
  void read_file(const std::string& path) const {
    if (files_) files_->push_back(path);
  }
  JsonReader reading(const nlohmann::json& value, std::string file) const {
    JsonReader r(value, std::move(file));
    r.files_ = files_;
    return r;
  }
  const nlohmann::json& json() const { return *value_; }

  bool is_object() const;
  bool is_array() const;
  bool is_string() const;
  bool is_null() const;

  // --- object members (this value must be an object) ---
  // Whether `key` is present. Registers `key` as allowed.
  bool has(std::string_view key) const;
  // Required member; a clear error when absent.
  JsonReader at(std::string_view key) const;
  // Optional member.
  std::optional<JsonReader> get(std::string_view key) const;
  // Registers keys that are allowed without being read (e.g. `source`).
  void allow(std::initializer_list<std::string_view> keys) const;
  // Fails on the first member that was never asked for, suggesting the
  // closest allowed key.
  void reject_unknown_keys() const;

  // --- scalars ---
  std::int64_t as_int(std::int64_t lo, std::int64_t hi) const;
  double as_number(double lo, double hi) const;  // finite, in [lo, hi]
  bool as_bool() const;
  std::string as_string() const;
  template <class E>
  E as_enum() const {
    const std::string s = as_string();
    if (auto e = enum_from_name<E>(s)) return *e;
    fail("must be one of " + enum_choices<E>() + " (got \"" + s + "\")");
  }

  // Shorthands for optional members with a default.
  std::int64_t int_or(std::string_view key, std::int64_t dflt, std::int64_t lo,
                      std::int64_t hi) const;
  double number_or(std::string_view key, double dflt, double lo, double hi) const;
  bool bool_or(std::string_view key, bool dflt) const;
  std::string string_or(std::string_view key, std::string dflt) const;
  template <class E>
  E enum_or(std::string_view key, E dflt) const {
    auto r = get(key);
    return r ? r->as_enum<E>() : dflt;
  }

  // --- arrays ---
  std::vector<JsonReader> elements() const;

  [[noreturn]] void fail(const std::string& rule) const;
  // Error for a member that is absent or sits at this object's level.
  [[noreturn]] void fail_at(std::string_view key, const std::string& rule) const;

  std::string child_path(std::string_view key) const;

 private:
  void require_object() const;
  std::string type_name() const;

  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
  mutable std::vector<std::string> allowed_;
  std::vector<std::string>* files_ = nullptr;
};

}  // namespace strata
