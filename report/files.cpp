#include "report/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <system_error>

#include "sim/error.hpp"

namespace strata::report {

namespace {

namespace fs = std::filesystem;

std::string reason(int err) { return std::generic_category().message(err); }

// What sits at a path that is not a regular file, in words.
const char* kind_of(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void not_regular(const std::string& path, mode_t m) {
  throw InputError(path, "",
                   std::string("is ") + kind_of(m) +
                       ", not a regular file: Strata writes only over regular files (remove it or "
                       "choose another path)");
}

// The directory a file of `path` goes in ("." for a bare name).
std::string dir_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Writes all of `bytes` to `fd`, retrying short writes and interruptions;
// the errno of a failure, else 0.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

// Opens an existing-or-new regular file without following a link and
// without blocking on a FIFO; refuses anything else.
int open_regular(const std::string& path, int flags, const char* what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) not_regular(path, S_IFLNK);
    throw InputError(path, "", std::string("cannot ") + what + ": " + reason(err));
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t m = st.st_mode;
    ::close(fd);
    not_regular(path, m);
  }
  // Blocking from here on (O_NONBLOCK only kept a FIFO from hanging the open).
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

}  // namespace

void require_regular_or_missing(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw InputError(path, "", "cannot write file: " + reason(errno));
  }
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
}

int remove_stale_temporaries(const std::string& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string f = entry.path().filename().string();
    for (const auto& name : names) {
      // "." + name + "." + 16 hex digits + ".tmp"
      const std::size_t want = 1 + name.size() + 1 + 16 + 4;
      if (f.size() != want || f[0] != '.' || f.compare(1, name.size(), name) != 0 || f[1 + name.size()] != '.' ||
          f.compare(want - 4, 4, ".tmp") != 0)
        continue;
      const std::string hex = f.substr(name.size() + 2, 16);
      if (hex.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
      if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) continue;
      if (fs::remove(entry.path(), ec)) ++removed;
    }
  }
  return removed;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  require_regular_or_missing(path_);
  const std::string dir = dir_of(path_);
  const std::string name = fs::path(path_).filename().string();
  std::random_device rd;
  for (int attempt = 0; attempt < 64; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, "%08x%08x", rd(), rd());
    std::string tmp = (fs::path(dir) / ("." + name + "." + suffix + ".tmp")).string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      fd_ = fd;
      tmp_ = std::move(tmp);
      // A file replaced keeps its permission bits (a new one gets the umask's).
      struct stat st {};
      if (::lstat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::fchmod(fd_, st.st_mode & 07777) != 0)
        fail("cannot write file", errno);
      return;
    }
    if (errno != EEXIST) throw InputError(path_, "", "cannot write file: " + reason(errno));
  }
  throw InputError(path_, "", "cannot write file: no free temporary name in " + dir);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  throw InputError(path_, "", what + ": " + reason(err));
}

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0) throw InputError(path_, "", "cannot write file: already committed or failed");
  if (const int err = write_all(fd_, bytes)) fail("cannot write file", err);
}

void AtomicFile::commit() {
  if (fd_ < 0) throw InputError(path_, "", "cannot write file: already committed or failed");
  if (::fsync(fd_) != 0) fail("cannot write file", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot write file", errno);
  // Checked again just before the rename: what appeared meanwhile is not replaced.
  try {
    require_regular_or_missing(path_);
  } catch (...) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
    throw;
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot write file", errno);
  tmp_.clear();
  // The rename itself durable: best effort (some file systems refuse it).
  const int d = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files) {
  for (const auto& [path, text] : files) check_output_target(path);
  std::vector<std::unique_ptr<AtomicFile>> open;
  for (const auto& [path, text] : files) {
    open.push_back(std::make_unique<AtomicFile>(path));
    open.back()->write(text);
  }
  for (auto& f : open) f->commit();
}

void check_output_target(const std::string& path) {
  if (path.empty()) throw InputError(path, "", "cannot write file: an empty path");
  require_regular_or_missing(path);
  const std::string dir = dir_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw InputError(path, "", "cannot write file: " + reason(errno));
  if (!S_ISDIR(st.st_mode)) throw InputError(path, "", "cannot write file: " + reason(ENOTDIR));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw InputError(path, "", "cannot write file: " + reason(errno));
}

void require_output_apart(const std::string& out, const std::string& option, const std::vector<std::string>& inputs) {
  if (out.empty()) return;
  std::error_code ec;
  const fs::path parent = fs::absolute(fs::path(dir_of(out)), ec);
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    ec.clear();
    if (fs::equivalent(out, in, ec))
      throw InputError(out, "",
                       option + " is the input " + in + ": writing it would replace what is read; choose another path");
    ec.clear();
    if (fs::is_directory(in, ec) && fs::equivalent(parent, in, ec))
      throw InputError(out, "",
                       option + " is a file in the directory " + in +
                           " that is read: writing there would change its files; choose a path outside it");
  }
}

AppendFile::AppendFile(std::string path) : path_(std::move(path)) {
  fd_ = open_regular(path_, O_WRONLY | O_APPEND | O_CREAT, "write file");
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::truncate(std::uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
    throw InputError(path_, "", "cannot cut the torn last line: " + reason(errno));
}

void AppendFile::write(std::string_view bytes) {
  if (fd_ < 0) throw InputError(path_, "", "cannot write file: closed");
  if (const int err = write_all(fd_, bytes)) throw InputError(path_, "", "cannot write file: " + reason(err));
}

void AppendFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw InputError(path_, "", "cannot write file: " + reason(err));
  }
  if (::close(fd) != 0) throw InputError(path_, "", "cannot write file: " + reason(errno));
}

namespace {

// flock(`op` | LOCK_NB) on the open lock file `fd` of `dir`; when another
// process holds it, closes `fd` and throws naming the holder (what an
// exclusive holder wrote in the file; a reader writes nothing).
void lock_or_name_holder(int& fd, const std::string& dir, const std::string& path, int op) {
  if (::flock(fd, op | LOCK_NB) == 0) return;
  const int err = errno;
  std::string holder;
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n > 0) holder.assign(buf, static_cast<std::size_t>(n));
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  ::close(fd);
  fd = -1;
  if (err != EWOULDBLOCK) throw InputError(path, "", "cannot lock the directory: " + reason(err));
  throw InputError(dir, "",
                   "is in use by another strata (" +
                       (holder.empty() ? std::string("holder unknown: a strata report reading it, or one that did "
                                                     "not say")
                                       : holder) +
                       "); wait for it to finish, or choose another directory");
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& command) {
  const std::string path = (fs::path(dir) / "strata.lock").string();
  fd_ = open_regular(path, O_RDWR | O_CREAT, "lock the directory");
  lock_or_name_holder(fd_, dir, path, LOCK_EX);
  const std::string me = "pid " + std::to_string(::getpid()) + ", " + command + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw InputError(path, "", "cannot write file: " + reason(err));
  }
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // The holder's name goes with the lock, so a reader holding it next is not
  // taken for this process; the file stays (unlinking it would race a waiter).
  [[maybe_unused]] const int cut = ::ftruncate(fd_, 0);
  ::close(fd_);  // releases the flock
}

DirReadLock::DirReadLock(const std::string& dir) {
  const std::string path = (fs::path(dir) / "strata.lock").string();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // none there: nothing to wait for
  fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) return;  // not readable by us: read unlocked
  lock_or_name_holder(fd_, dir, path, LOCK_SH);
}

DirReadLock::~DirReadLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace strata::report
