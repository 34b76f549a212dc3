#include "sim/json_reader.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace strata {

namespace {

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Builds the document from the parser's SAX events. nlohmann's callback
// parser scans the enclosing container at every object's end (quadratic
// in its elements: 200,000 objects in an array took 11 s); this one is
// linear. A key given twice would keep its last value silently: refused,
// with its path, found in the object being built (a map: logarithmic).
class Builder {
 public:
  Builder(nlohmann::json& root, const std::string& source) : root_(root), source_(source) {}
  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(nlohmann::json::number_integer_t v) { return put(v); }
  bool number_unsigned(nlohmann::json::number_unsigned_t v) { return put(v); }
  bool number_float(nlohmann::json::number_float_t v, const std::string&) { return put(v); }
  bool string(nlohmann::json::string_t& v) { return put(std::move(v)); }
  bool binary(nlohmann::json::binary_t& v) { return put(nlohmann::json::binary(std::move(v))); }
  bool start_object(std::size_t) {
    open_.push_back(place(nlohmann::json::object()));
    keys_.emplace_back();
    return true;
  }
  bool key(nlohmann::json::string_t& k) {
    nlohmann::json& obj = *open_.back();
    if (obj.contains(k)) throw InputError(source_, path_to(k), "duplicate key (JSON objects name each key once)");
    slot_ = &obj[k];
    keys_.back() = std::move(k);
    return true;
  }
  bool end_object() {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    open_.push_back(place(nlohmann::json::array()));
    keys_.emplace_back();
    return true;
  }
  bool end_array() { return end_object(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& ex) {
    // Thrown as nlohmann::json::parse throws it, handled by the caller.
    if (const auto* e = dynamic_cast<const nlohmann::json::parse_error*>(&ex)) throw *e;
    if (const auto* e = dynamic_cast<const nlohmann::json::out_of_range*>(&ex)) throw *e;
    throw std::runtime_error(ex.what());
  }

 private:
  template <class V>
  bool put(V&& v) {
    place(nlohmann::json(std::forward<V>(v)));
    return true;
  }
  // Where a new value goes: the root, the end of the open array, or the
  // slot of the open object's last key.
  nlohmann::json* place(nlohmann::json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    nlohmann::json& c = *open_.back();
    if (c.is_array()) {
      c.push_back(std::move(v));
      return &c.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  // The dotted path of key `k` of the innermost open object.
  std::string path_to(const std::string& k) const {
    std::string p;
    for (std::size_t i = 0; i + 1 < open_.size(); ++i) {
      if (open_[i]->is_object()) {
        p += (p.empty() ? "" : ".") + keys_[i];
      } else {
        p += "[" + std::to_string(open_[i]->size() - 1) + "]";
      }
    }
    return p + (p.empty() ? "" : ".") + k;
  }
  nlohmann::json& root_;
  const std::string& source_;
  std::vector<nlohmann::json*> open_;  // the objects and arrays open at this point
  std::vector<std::string> keys_;      // each open object's last key
  nlohmann::json* slot_ = nullptr;     // the value of the last key read
};
}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& source) {
  // The parser stops at a NUL byte as at the end: whatever follows it would
  // be ignored unseen.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
    throw InputError(source, "",
                     "invalid JSON: a NUL byte at line " + std::to_string(line) + " (byte " + std::to_string(nul) +
                         "); JSON text has none");
  }
  try {
    nlohmann::json root;
    Builder b(root, source);
    nlohmann::json::sax_parse(text, &b, nlohmann::json::input_format_t::json, /*strict=*/true,
                              /*ignore_comments=*/true);
    return root;
  } catch (const nlohmann::json::parse_error& e) {
    // Turn the byte offset into line:column.
    std::size_t line = 1, col = 1;
    const std::size_t end = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at
    // line 3, column 5: syntax error while parsing ..."; keep the part after ": ".
    if (auto p = what.find(": "); p != std::string::npos) what = what.substr(p + 2);
    throw InputError(source, "",
                     "invalid JSON at line " + std::to_string(line) + ", column " +
                         std::to_string(col) + ": " + what);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond double's range (1e400): nlohmann reports it without a
    // position ("[json.exception.out_of_range.406] number overflow parsing '1e400'").
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw InputError(source, "", "invalid JSON: " + what);
  }
}

std::uint64_t require_input_file(const std::string& path, std::uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError(path, "", "cannot open file");
  if (fs::is_directory(st)) throw InputError(path, "", "is a directory, not a file");
  if (!fs::is_regular_file(st)) throw InputError(path, "", "is not a regular file (a FIFO, socket or device)");
  const auto size = fs::file_size(path, ec);
  if (ec) throw InputError(path, "", "cannot read its size: " + ec.message());
  if (size > max_bytes)
    throw InputError(path, "", "is " + std::to_string(size) + " bytes; Strata reads at most " +
                                   std::to_string(max_bytes));
  return size;
}

std::string read_input_file(const std::string& path, std::uint64_t max_bytes) {
  require_input_file(path, max_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  if (bytes.size() > max_bytes)  // it grew while being read
    throw InputError(path, "", "is over " + std::to_string(max_bytes) + " bytes");
  return bytes;
}

nlohmann::json load_json_file(const std::string& path) {
  return parse_json_text(read_input_file(path, kMaxJsonFileBytes), path);
}

JsonReader::JsonReader(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

bool JsonReader::is_object() const { return value_->is_object(); }
bool JsonReader::is_array() const { return value_->is_array(); }
bool JsonReader::is_string() const { return value_->is_string(); }
bool JsonReader::is_null() const { return value_->is_null(); }

std::string JsonReader::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

std::string JsonReader::type_name() const {
  if (value_->is_number_integer()) return "an integer";
  if (value_->is_number()) return "a number";
  return std::string(value_->is_array() ? "an " : "a ") + value_->type_name();
}

void JsonReader::require_object() const {
  if (!value_->is_object()) fail("must be an object, got " + type_name());
}

bool JsonReader::has(std::string_view key) const {
  require_object();
  allowed_.emplace_back(key);
  return value_->contains(key);
}

JsonReader JsonReader::at(std::string_view key) const {
  if (!has(key)) fail_at(key, "missing required key");
  JsonReader r(value_->at(std::string(key)), file_, child_path(key));
  r.files_ = files_;
  return r;
}

std::optional<JsonReader> JsonReader::get(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  JsonReader r(value_->at(std::string(key)), file_, child_path(key));
  r.files_ = files_;
  return r;
}

void JsonReader::allow(std::initializer_list<std::string_view> keys) const {
  for (auto k : keys) allowed_.emplace_back(k);
}

void JsonReader::reject_unknown_keys() const {
  require_object();
  for (const auto& item : value_->items()) {
    const std::string& key = item.key();
    if (std::find(allowed_.begin(), allowed_.end(), key) != allowed_.end()) continue;
    std::string rule = "unknown key";
    std::string best;
    std::size_t best_d = 3;  // suggest only close matches
    for (const auto& a : allowed_) {
      const std::size_t d = edit_distance(key, a);
      if (d < best_d) {
        best_d = d;
        best = a;
      }
    }
    if (!best.empty()) rule += " (did you mean " + quote(best) + "?)";
    throw InputError(file_, child_path(key), rule);
  }
}

std::int64_t JsonReader::as_int(std::int64_t lo, std::int64_t hi) const {
  std::int64_t v = 0;
  if (value_->is_number_integer()) {
    if (value_->is_number_unsigned() &&
        value_->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail("must be at most " + std::to_string(hi));
    v = value_->get<std::int64_t>();
  } else if (value_->is_number_float()) {
    // Accept 1e3 style integers written as floats when they are whole.
    const double d = value_->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
      fail("must be an integer, got " + value_->dump());
    v = static_cast<std::int64_t>(d);
  } else {
    fail("must be an integer, got " + type_name());
  }
  if (v < lo || v > hi)
    fail("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
         std::to_string(v));
  return v;
}

double JsonReader::as_number(double lo, double hi) const {
  if (!value_->is_number()) fail("must be a number, got " + type_name());
  const double v = value_->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    std::ostringstream os;
    os << "must be in [" << lo << ", " << hi << "], got " << value_->dump();
    fail(os.str());
  }
  return v;
}

bool JsonReader::as_bool() const {
  if (!value_->is_boolean()) fail("must be true or false, got " + type_name());
  return value_->get<bool>();
}

std::string JsonReader::as_string() const {
  if (!value_->is_string()) fail("must be a string, got " + type_name());
  return value_->get<std::string>();
}

std::int64_t JsonReader::int_or(std::string_view key, std::int64_t dflt, std::int64_t lo,
                                std::int64_t hi) const {
  auto r = get(key);
  return r ? r->as_int(lo, hi) : dflt;
}

double JsonReader::number_or(std::string_view key, double dflt, double lo, double hi) const {
  auto r = get(key);
  return r ? r->as_number(lo, hi) : dflt;
}

bool JsonReader::bool_or(std::string_view key, bool dflt) const {
  auto r = get(key);
  return r ? r->as_bool() : dflt;
}

std::string JsonReader::string_or(std::string_view key, std::string dflt) const {
  auto r = get(key);
  return r ? r->as_string() : dflt;
}

std::vector<JsonReader> JsonReader::elements() const {
  if (!value_->is_array()) fail("must be an array, got " + type_name());
  std::vector<JsonReader> out;
  out.reserve(value_->size());
  for (std::size_t i = 0; i < value_->size(); ++i) {
    out.emplace_back((*value_)[i], file_, path_ + "[" + std::to_string(i) + "]");
    out.back().files_ = files_;
  }
  return out;
}

void JsonReader::fail(const std::string& rule) const { throw InputError(file_, path_, rule); }

void JsonReader::fail_at(std::string_view key, const std::string& rule) const {
  throw InputError(file_, child_path(key), rule);
}

}  // namespace strata
