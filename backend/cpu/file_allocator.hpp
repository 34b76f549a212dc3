#pragma once
// A pool on storage: every buffer is a file in a directory (an NVMe drive's
// mount, or the system's temporary directory), mapped into memory. What is
// written reaches the file; `write_back` flushes the buffers and drops
// their pages from memory, so the next use reads them from the drive
// (ZeRO-Infinity's optimizer states between steps); `prefetch` asks for
// them ahead of use.
#include <map>
#include <mutex>
#include <string>

#include "backend/cpu/allocator.hpp"

namespace strata::backend::cpu {

class FileAllocator final : public Allocator {
 public:
  // Throws Error when `dir` is not a writable directory.
  explicit FileAllocator(std::string dir);
  ~FileAllocator() override;
  FileAllocator(const FileAllocator&) = delete;
  FileAllocator& operator=(const FileAllocator&) = delete;

  // A new file of `bytes` (at least one page), mapped shared and unlinked at
  // once (its storage lives while it is mapped). Throws Error naming the
  // directory when the file cannot be made.
  void* allocate(Bytes bytes, MemTag tag) override;
  void deallocate(void* p, Bytes bytes, MemTag tag) noexcept override;

  // Every live buffer: written to its file (msync) and its pages dropped
  // from memory and from the page cache. Throws Error on an I/O failure.
  void write_back();
  // Every live buffer: read ahead (its pages requested from the drive).
  void prefetch();
  // Bytes written back and prefetched so far.
  Bytes written() const;
  Bytes read() const;

  MemoryStats stats() const { return counts_.stats(); }
  void reset_peaks() { counts_.reset_peaks(); }
  const std::string& dir() const { return dir_; }

 private:
  struct Mapping {
    int fd = -1;
    std::size_t length = 0;
  };
  std::string dir_;
  ByteCounter counts_;
  mutable std::mutex mu_;
  std::map<void*, Mapping> maps_;
  Bytes written_ = 0, read_ = 0;
};

}  // namespace strata::backend::cpu
