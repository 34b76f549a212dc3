#include "backend/cpu/file_allocator.hpp"

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "backend/cpu/tensor.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

TEST_CASE("cpu/file allocator: buffers are files; written back, dropped from memory and read again intact") {
  // A tensor in the storage pool keeps its values across write_back (msync,
  // then its pages dropped from the mapping and the page cache) and
  // prefetch; the counts follow the tensors; the files leave no trace in
  // the directory (unlinked at once).
  const auto dir = std::filesystem::temp_directory_path() / "strata-file-alloc-test";
  std::filesystem::create_directories(dir);
  FileAllocator pool(dir.string());
  {
    Tensor t(pool, {1000}, MemTag::OptimizerStates);
    for (std::int64_t i = 0; i < 1000; ++i) t[i] = static_cast<float>(i) * 0.5f;
    CHECK(pool.stats().current[static_cast<std::size_t>(MemTag::OptimizerStates)] == 4000);
    pool.write_back();
    // After the drop, the first page is no longer resident (mincore), and
    // reading it brings the values back from the file.
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    unsigned char resident = 1;
    REQUIRE(::mincore(t.data(), page, &resident) == 0);
    CHECK((resident & 1) == 0);
    pool.prefetch();
    for (std::int64_t i = 0; i < 1000; ++i) REQUIRE(t[i] == static_cast<float>(i) * 0.5f);
    CHECK(pool.written() == static_cast<Bytes>(page));
    CHECK(pool.read() == static_cast<Bytes>(page));
    CHECK(std::filesystem::is_empty(dir));
  }
  CHECK(pool.stats().current_total == 0);
  CHECK(pool.stats().peak_total == 4000);
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(FileAllocator("/nonexistent/strata-dir"), Error);
}

}  // namespace
}  // namespace strata::backend::cpu
