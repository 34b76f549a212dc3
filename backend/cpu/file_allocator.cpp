#include "backend/cpu/file_allocator.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "sim/error.hpp"

namespace strata::backend::cpu {

namespace {
std::string why() { return std::strerror(errno); }
}  // namespace

FileAllocator::FileAllocator(std::string dir) : dir_(std::move(dir)) {
  struct stat st {};
  if (dir_.empty() || ::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      ::access(dir_.c_str(), W_OK) != 0)
    throw Error("offload to storage: '" + dir_ + "' is not a writable directory");
}

FileAllocator::~FileAllocator() {
  for (auto& [p, m] : maps_) {
    ::munmap(p, m.length);
    ::close(m.fd);
  }
}

void* FileAllocator::allocate(Bytes bytes, MemTag tag) {
  counts_.add(bytes, tag);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t length = (static_cast<std::size_t>(std::max<Bytes>(bytes, 1)) + page - 1) / page * page;
  std::string path = dir_ + "/strata-offload-XXXXXX";
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    counts_.remove(bytes, tag);
    throw Error("offload to storage: cannot create a file in '" + dir_ + "': " + why());
  }
  ::unlink(name.data());
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    const std::string e = why();
    ::close(fd);
    counts_.remove(bytes, tag);
    throw Error("offload to storage: cannot size a file of " + std::to_string(length) + " bytes in '" +
                dir_ + "': " + e);
  }
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const std::string e = why();
    ::close(fd);
    counts_.remove(bytes, tag);
    throw Error("offload to storage: cannot map a file in '" + dir_ + "': " + e);
  }
  std::lock_guard lock(mu_);
  maps_[p] = {fd, length};
  return p;
}

void FileAllocator::deallocate(void* p, Bytes bytes, MemTag tag) noexcept {
  {
    std::lock_guard lock(mu_);
    const auto it = maps_.find(p);
    if (it != maps_.end()) {
      ::munmap(p, it->second.length);
      ::close(it->second.fd);
      maps_.erase(it);
    }
  }
  counts_.remove(bytes, tag);
}

void FileAllocator::write_back() {
  std::lock_guard lock(mu_);
  for (auto& [p, m] : maps_) {
    if (::msync(p, m.length, MS_SYNC) != 0)
      throw Error("offload to storage: writing a buffer to '" + dir_ + "' failed: " + why());
    // Clean pages can now leave memory: the mapping's and the page cache's.
    ::madvise(p, m.length, MADV_DONTNEED);
    ::posix_fadvise(m.fd, 0, static_cast<off_t>(m.length), POSIX_FADV_DONTNEED);
    written_ += static_cast<Bytes>(m.length);
  }
}

void FileAllocator::prefetch() {
  std::lock_guard lock(mu_);
  for (auto& [p, m] : maps_) {
    ::posix_fadvise(m.fd, 0, static_cast<off_t>(m.length), POSIX_FADV_WILLNEED);
    ::madvise(p, m.length, MADV_WILLNEED);
    read_ += static_cast<Bytes>(m.length);
  }
}

Bytes FileAllocator::written() const {
  std::lock_guard lock(mu_);
  return written_;
}

Bytes FileAllocator::read() const {
  std::lock_guard lock(mu_);
  return read_;
}

}  // namespace strata::backend::cpu
