#include "sim/json_reader.hpp"

#include <doctest/doctest.h>

#include "tests/testing.hpp"

#include <nlohmann/json.hpp>

namespace strata {
namespace {

enum class Color { Red, Green };

}  // namespace

template <>
struct EnumNames<Color> {
  static constexpr std::array<std::pair<Color, std::string_view>, 2> table{
      {{Color::Red, "red"}, {Color::Green, "green"}}};
};

namespace {

std::string error_of(auto&& fn) { return testing::input_error_of(fn); }

TEST_CASE("comments are accepted and syntax errors name line and column") {
  // `//` comments are part of Strata's JSON input contract.
  auto j = parse_json_text("{\n // a comment\n \"a\": 1 /* block */\n}", "x.json");
  CHECK(j.at("a") == 1);
  const std::string msg = error_of([] { parse_json_text("{\n  \"a\": 1,\n  \"b\": }", "bad.json"); });
  CHECK(msg.find("bad.json: invalid JSON at line 3, column") == 0);
}

TEST_CASE("a key given twice is an error naming its path") {
  // nlohmann keeps the last value of a repeated key silently: a scenario
  // with "tp" twice would run with whichever came last.
  CHECK(error_of([] { parse_json_text(R"({"tp": 2, "tp": 4})", "s.json"); }) ==
        "s.json: tp: duplicate key (JSON objects name each key once)");
  CHECK(error_of([] { parse_json_text(R"({"plan": {"stage_layers": [1], "zero": 1, "zero": 2}})", "s.json"); }) ==
        "s.json: plan.zero: duplicate key (JSON objects name each key once)");
  CHECK(error_of([] { parse_json_text(R"({"a": [1, {"b": 1}, {"c": 1, "c": 2}]})", "s.json"); }) ==
        "s.json: a[2].c: duplicate key (JSON objects name each key once)");
  // The same key in sibling objects is fine.
  CHECK(parse_json_text(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}]})", "s.json")["c"][1]["x"] == 4);
}

TEST_CASE("a document of many objects is built whole, with nesting, numbers and comments kept") {
  // Built by the reader's own SAX handler, linear in the document (nlohmann's
  // callback parser took 11 s for these 200,000 objects: docs/reliability.md).
  std::string text = "[";
  for (int i = 0; i < 200000; ++i) text += i ? ",{}" : "{}";
  text += "]";
  const auto big = parse_json_text(text, "w.json");
  CHECK(big.size() == 200000);
  CHECK(big[199999].is_object());
  const auto j = parse_json_text(R"(// c
    {"a": [1, -2, 3.5, 18446744073709551615, true, null, "s", {"b": [[], {}]}], /* c */ "z": {}})", "j.json");
  CHECK(j.dump() == R"({"a":[1,-2,3.5,18446744073709551615,true,null,"s",{"b":[[],{}]}],"z":{}})");
  CHECK(parse_json_text("7", "n.json") == 7);
  CHECK(error_of([] { parse_json_text("{} x", "t.json"); }).find("t.json: invalid JSON at line 1, column") == 0);
  CHECK(error_of([] { parse_json_text("[1e400]", "o.json"); }) == "o.json: invalid JSON: number overflow parsing '1e400'");
}

TEST_CASE("bytes after a NUL are not ignored") {
  // The parser takes a NUL byte for the end of input, so anything after it
  // was accepted unseen.
  using namespace std::string_literals;
  CHECK(error_of([] { parse_json_text("{\"a\": 1}\n\0{\"b\": 2}"s, "n.json"); }) ==
        "n.json: invalid JSON: a NUL byte at line 2 (byte 9); JSON text has none");
  CHECK(error_of([] { parse_json_text(R"({"a": 1} trailing)", "t.json"); }).find("t.json: invalid JSON at line 1") == 0);
}

TEST_CASE("a number beyond double's range is a syntax error, not a crash") {
  // Found by fuzz_calibration: nlohmann throws out_of_range (not parse_error) for 1e3080.
  CHECK(error_of([] { parse_json_text(R"({"a": 1e3080})", "big.json"); }) ==
        "big.json: invalid JSON: number overflow parsing '1e3080'");
  CHECK(error_of([] { parse_json_text("[-1e400]", "big.json"); }) ==
        "big.json: invalid JSON: number overflow parsing '-1e400'");
}

TEST_CASE("only regular files of bounded size are read") {
  // /dev/zero or a FIFO named as a model file once hung the reader.
  CHECK(error_of([] { load_json_file("/dev/null"); }) ==
        "/dev/null: is not a regular file (a FIFO, socket or device)");
  CHECK(error_of([] { load_json_file("/"); }) == "/: is a directory, not a file");
  CHECK(error_of([] { load_json_file("/no/such/file.json"); }) == "/no/such/file.json: cannot open file");
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/configs/models/gpt2-124m.json";
  CHECK(read_input_file(path, 1 << 20).find("gpt2-124m") != std::string::npos);
  CHECK(error_of([&] { read_input_file(path, 16); }).find("bytes; Strata reads at most 16") !=
        std::string::npos);
}

TEST_CASE("paths are dotted and indexed") {
  auto j = parse_json_text(R"({"plan": {"stage_layers": [1, 2, -3]}})", "s.json");
  JsonReader r(j, "s.json");
  auto layers = r.at("plan").at("stage_layers").elements();
  REQUIRE(layers.size() == 3);
  CHECK(layers[1].as_int(1, 10) == 2);
  CHECK(error_of([&] { layers[2].as_int(1, 10); }) ==
        "s.json: plan.stage_layers[2]: must be in [1, 10], got -3");
}

TEST_CASE("unknown keys are rejected with a suggestion") {
  auto j = parse_json_text(R"({"layers": 2, "hiden": 3})", "m.json");
  JsonReader r(j, "m.json", "model");
  CHECK(r.int_or("layers", 1, 1, 100) == 2);
  CHECK(r.int_or("hidden", 64, 1, 100) == 64);
  CHECK(error_of([&] { r.reject_unknown_keys(); }) ==
        "m.json: model.hiden: unknown key (did you mean \"hidden\"?)");
}

TEST_CASE("types are checked") {
  auto j = parse_json_text(R"({"a": "x", "b": 1.5, "c": 2e3, "d": "blue", "e": "red"})", "t.json");
  JsonReader r(j, "t.json");
  CHECK(error_of([&] { r.at("a").as_int(0, 10); }) == "t.json: a: must be an integer, got a string");
  CHECK(error_of([&] { r.at("b").as_int(0, 10); }) == "t.json: b: must be an integer, got 1.5");
  CHECK(r.at("c").as_int(0, 5000) == 2000);  // whole floats are integers
  CHECK(error_of([&] { r.at("d").as_enum<Color>(); }) ==
        "t.json: d: must be one of red|green (got \"blue\")");
  CHECK(r.at("e").as_enum<Color>() == Color::Red);
  CHECK(error_of([&] { r.at("zzz"); }) == "t.json: zzz: missing required key");
  CHECK(error_of([&] { r.at("a").as_bool(); }) == "t.json: a: must be true or false, got a string");
}

}  // namespace
}  // namespace strata
