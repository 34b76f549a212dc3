#pragma once
// Files Strata writes appear whole or not at all, and only where a regular
// file is (or none): a write never follows a symbolic link, never replaces a
// directory, a device, a FIFO or a socket, and never reuses a temporary name
// another process could have planted.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::report {

// Throws InputError naming `path` when something other than a regular file
// is there (a symbolic link, even a dangling one, a directory, a device, a
// FIFO, a socket): Strata writes over regular files only. Nothing there is
// fine.
void require_regular_or_missing(const std::string& path);

// A whole file written under a temporary name and renamed over its path at
// commit(): the temporary is created beside the target, under a fresh
// random name, with O_CREAT | O_EXCL | O_NOFOLLOW (so nothing planted there
// is followed or reused), written, fsync'd and renamed. The target is
// checked with require_regular_or_missing first. Every failure throws
// InputError naming the target and the system's reason (strerror); the
// temporary is removed on any failure and when the writer is destroyed
// uncommitted.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view bytes);
  // fsync, rename over the target, fsync its directory.
  void commit();
  const std::string& path() const { return path_; }

 private:
  void fail(const std::string& what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
};

// Writes `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& text);

// Several files written as one set: every temporary is created and written
// first, then each is renamed over its target, so a target refused or a
// write that fails leaves none of them changed.
void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files);

// What AtomicFile checks of a target, checked before any work is done (a
// command's outputs are all checked up front, so none is refused after
// minutes of work or after another was written): require_regular_or_missing,
// and a directory to put it in that exists and is writable. InputError
// naming the path and the reason otherwise.
void check_output_target(const std::string& path);

// Refuses (InputError naming `out` and `option`) an output that is one of
// `inputs` (the same file, fs::equivalent) or a file directly in one of them
// that is a directory (an explore directory read): writing it would replace
// what the command reads. Empty paths are skipped.
void require_output_apart(const std::string& out, const std::string& option, const std::vector<std::string>& inputs);

// A file appended to (results.jsonl): opened with O_APPEND | O_NOFOLLOW and
// created when missing; refused (InputError) unless it is a regular file.
// Writes are whole (retried on short writes) and throw InputError with the
// reason.
class AppendFile {
 public:
  explicit AppendFile(std::string path);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Cuts the file to `size` bytes (a torn last line).
  void truncate(std::uint64_t size);
  void write(std::string_view bytes);
  void close();  // throws when the data cannot be flushed

 private:
  std::string path_;
  int fd_ = -1;
};

// Removes the temporaries an AtomicFile of DIR/NAME leaves when its process
// is killed (".NAME.<16 hex digits>.tmp", regular files only), for each
// name; call it holding the directory's DirLock, so no live writer owns
// them. Returns how many it removed.
int remove_stale_temporaries(const std::string& dir, const std::vector<std::string>& names);

// An exclusive lock on an output directory, held while the object lives
// (flock on DIR/strata.lock, so it is released when the process ends,
// however it ends). A directory another Strata holds is an InputError naming
// that process (its pid and command, as it wrote them in the lock file).
class DirLock {
 public:
  DirLock(const std::string& dir, const std::string& command);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

// A shared lock on a directory that is read, not written (`strata report
// DIR --out DIR2`): flock(LOCK_SH) on DIR/strata.lock while the object
// lives, so no explore or merge writes DIR while it is read; a directory one
// of them holds is an InputError naming the holder, as DirLock's. Nothing is
// created: a directory without a lock file (or whose lock file cannot be
// opened for reading) is read without one.
class DirReadLock {
 public:
  explicit DirReadLock(const std::string& dir);
  ~DirReadLock();
  DirReadLock(const DirReadLock&) = delete;
  DirReadLock& operator=(const DirReadLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace strata::report
