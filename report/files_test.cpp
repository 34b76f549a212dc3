#include "report/files.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "sim/error.hpp"
#include "tests/testing.hpp"

namespace strata::report {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("strata-files-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& sub) const { return (path / sub).string(); }
};

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The names in a directory, sorted.
std::string listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  std::string out;
  for (const auto& n : names) out += n + " ";
  return out;
}

TEST_CASE("remove_stale_temporaries: only a killed writer's temporaries of the named files go") {
  // A killed AtomicFile of DIR/summary.json leaves ".summary.json.<16 hex>.tmp";
  // other files, other names, a malformed suffix and a link stay.
  TempDir t("stale");
  for (const char* f : {".summary.json.0123456789abcdef.tmp", "summary.json", ".summary.json.0123.tmp",
                        ".other.json.0123456789abcdef.tmp", ".summary.json.0123456789ABCDEF.tmp"})
    std::ofstream(t / f) << "x";
  fs::create_directory_symlink(t.path, t / ".report.md.0123456789abcdef.tmp");
  CHECK(remove_stale_temporaries(t.path.string(), {"summary.json", "report.md"}) == 1);
  CHECK(listing(t.path) ==
        ".other.json.0123456789abcdef.tmp .report.md.0123456789abcdef.tmp .summary.json.0123.tmp "
        ".summary.json.0123456789ABCDEF.tmp summary.json ");
}

TEST_CASE("write_file_atomically: a regular file is replaced whole, no temporary is left") {
  TempDir t("plain");
  write_file_atomically(t / "out.json", "first");
  write_file_atomically(t / "out.json", "second");
  CHECK(read(t / "out.json") == "second");
  CHECK(listing(t.path) == "out.json ");
}

TEST_CASE("write_file_atomically: a replaced file keeps its permission bits") {
  // 0640 before, 0640 after (not the umask's 0644); a new file the umask's.
  TempDir t("mode");
  write_file_atomically(t / "out.json", "first");
  REQUIRE(::chmod((t / "out.json").c_str(), 0640) == 0);
  write_file_atomically(t / "out.json", "second");
  struct stat st {};
  REQUIRE(::stat((t / "out.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  const mode_t mask = ::umask(022);
  write_file_atomically(t / "new.json", "x");
  ::umask(mask);
  REQUIRE(::stat((t / "new.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  CHECK(read(t / "out.json") == "second");
}

TEST_CASE("write_file_atomically: a symbolic link is refused, its target untouched") {
  // Renaming over PATH would replace the link; writing through it would
  // overwrite whatever it points to. Either is refused before any byte.
  TempDir t("link");
  std::ofstream(t / "victim") << "precious";
  fs::create_symlink(t / "victim", t / "out.json");
  CHECK(testing::input_error_of([&] { write_file_atomically(t / "out.json", "x"); }) ==
        t / "out.json" + ": is a symbolic link, not a regular file: Strata writes only over regular files "
                         "(remove it or choose another path)");
  CHECK(read(t / "victim") == "precious");
  CHECK(fs::is_symlink(t / "out.json"));
  CHECK(listing(t.path) == "out.json victim ");
  // A dangling link too: nothing is created where it points.
  fs::create_symlink(t / "nowhere", t / "dangling");
  CHECK(testing::input_error_of([&] { write_file_atomically(t / "dangling", "x"); })
            .find("is a symbolic link") != std::string::npos);
  CHECK(!fs::exists(t / "nowhere"));
}

TEST_CASE("write_file_atomically: a directory, a FIFO and a device are refused") {
  // A FIFO would hang a writer that opened it; a device (/dev/full,
  // /dev/null) would be replaced by a regular file when renamed over.
  TempDir t("special");
  fs::create_directories(t / "dir");
  REQUIRE(::mkfifo((t / "fifo").c_str(), 0600) == 0);
  CHECK(testing::input_error_of([&] { write_file_atomically(t / "dir", "x"); }).find("is a directory, not a regular file") !=
        std::string::npos);
  CHECK(testing::input_error_of([&] { write_file_atomically(t / "fifo", "x"); }).find("is a FIFO, not a regular file") !=
        std::string::npos);
  CHECK(testing::input_error_of([] { write_file_atomically("/dev/null", "x"); }) ==
        "/dev/null: is a character device, not a regular file: Strata writes only over regular files (remove it "
        "or choose another path)");
  CHECK(fs::is_character_file("/dev/null"));
  CHECK(listing(t.path) == "dir fifo ");
}

TEST_CASE("write_file_atomically: a planted PATH.tmp link is not followed") {
  // The temporary name is fresh and opened with O_EXCL | O_NOFOLLOW, so a
  // link another user planted at the old fixed name leads nowhere.
  TempDir t("planted");
  std::ofstream(t / "victim") << "precious";
  fs::create_symlink(t / "victim", t / "summary.json.tmp");
  write_file_atomically(t / "summary.json", "mine");
  CHECK(read(t / "victim") == "precious");
  CHECK(read(t / "summary.json") == "mine");
}

TEST_CASE("write_file_atomically: a failed write says why and leaves nothing") {
  // The system's reason is in the message (here ENOENT for a missing directory).
  TempDir t("fail");
  CHECK(testing::input_error_of([&] { write_file_atomically(t / "missing/out.json", "x"); }) ==
        t / "missing/out.json" + ": cannot write file: No such file or directory");
  // Dropped before commit: the temporary goes with it.
  {
    AtomicFile f(t / "out.json");
    f.write("half");
  }
  CHECK(listing(t.path) == "");
}

TEST_CASE("AppendFile: appends to a regular file, refuses a link or a FIFO") {
  // results.jsonl is appended to; a link (even dangling) must not make
  // explore create or extend a file outside its directory.
  TempDir t("append");
  {
    AppendFile f(t / "results.jsonl");
    f.write("a\n");
    f.close();
  }
  {
    AppendFile f(t / "results.jsonl");
    f.write("bc");
    f.truncate(2);
    f.write("d\n");
    f.close();
  }
  CHECK(read(t / "results.jsonl") == "a\nd\n");
  fs::create_symlink(t / "outside", t / "dangling.jsonl");
  CHECK(testing::input_error_of([&] { AppendFile f(t / "dangling.jsonl"); }).find("is a symbolic link") !=
        std::string::npos);
  CHECK(!fs::exists(t / "outside"));
  REQUIRE(::mkfifo((t / "fifo").c_str(), 0600) == 0);
  CHECK(testing::input_error_of([&] { AppendFile f(t / "fifo"); }).find("is a FIFO") != std::string::npos);
}

TEST_CASE("DirLock: a second holder is refused, naming the first; released with it") {
  // flock on DIR/strata.lock: two explores (or merges) on one directory
  // would write every plan twice and race on the same files.
  TempDir t("lock");
  {
    const DirLock first(t.path.string(), "explore");
    const std::string err = testing::input_error_of([&] { DirLock second(t.path.string(), "merge"); });
    CHECK(err == t.path.string() + ": is in use by another strata (pid " + std::to_string(::getpid()) +
                     ", explore); wait for it to finish, or choose another directory");
  }
  CHECK(testing::input_error_of([&] { DirLock again(t.path.string(), "merge"); }) == "no error");
}

TEST_CASE("check_output_target: what the writer would refuse is refused before any work") {
  TempDir t("target");
  CHECK_NOTHROW(check_output_target(t / "new.json"));
  std::ofstream(t / "f.json") << "x";
  CHECK_NOTHROW(check_output_target(t / "f.json"));
  fs::create_symlink(t / "f.json", t / "link");
  CHECK(testing::input_error_of([&] { check_output_target(t / "link"); }).find("is a symbolic link") !=
        std::string::npos);
  CHECK(testing::input_error_of([&] { check_output_target(t / "missing/x.json"); }) ==
        t / "missing/x.json" + ": cannot write file: No such file or directory");
  CHECK(testing::input_error_of([&] { check_output_target(t / "f.json/x"); }) ==
        t / "f.json/x" + ": cannot write file: Not a directory");
  CHECK(read(t / "f.json") == "x");
}

TEST_CASE("write_files_atomically: one refused target leaves every file unwritten") {
  TempDir t("set");
  std::ofstream(t / "a") << "old";
  fs::create_symlink(t / "a", t / "b");
  CHECK(testing::input_error_of([&] { write_files_atomically({{t / "a", "new"}, {t / "b", "new"}}); })
            .find("is a symbolic link") != std::string::npos);
  CHECK(read(t / "a") == "old");
  CHECK(listing(t.path) == "a b ");
  write_files_atomically({{t / "a", "new"}, {t / "c", "c"}});
  CHECK(read(t / "a") == "new");
  CHECK(read(t / "c") == "c");
}

TEST_CASE("require_output_apart: an output that is an input, or in a directory read, is refused") {
  TempDir t("apart");
  std::ofstream(t / "in.json") << "{}";
  fs::create_directories(t / "d");
  CHECK(testing::input_error_of([&] { require_output_apart(t / "in.json", "--trace", {t / "in.json"}); }) ==
        t / "in.json" + ": --trace is the input " + t / "in.json" +
            ": writing it would replace what is read; choose another path");
  CHECK(testing::input_error_of([&] { require_output_apart(t / "d/summary.json", "--out", {t / "d"}); })
            .find("--out is a file in the directory " + t / "d" + " that is read") != std::string::npos);
  CHECK_NOTHROW(require_output_apart(t / "out.json", "--out", {t / "in.json", t / "d", ""}));
  CHECK_NOTHROW(require_output_apart("", "--out", {t / "in.json"}));
}

}  // namespace
}  // namespace strata::report
