#include "backend/cuda/communicator.hpp"

#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "backend/cuda/check.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    comm_ = std::exchange(o.comm_, nullptr);
  }
  return *this;
}

NcclComm NcclComm::world(const ProcessGroup& group) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (group.rank() == 0) STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
  group.broadcast(std::as_writable_bytes(std::span(&id, 1)), 0);
  ncclComm_t c = nullptr;
  STRATA_NCCL_CHECK(ncclCommInitRank(&c, group.size(), id, group.rank()));
  return NcclComm(c);
}

NcclComm NcclComm::split(Split s) const {
  ncclComm_t c = nullptr;
  STRATA_NCCL_CHECK(ncclCommSplit(comm_, s.color, s.key, &c, nullptr));
  if (c == nullptr) throw Error("nccl: ncclCommSplit(colour " + std::to_string(s.color) + ") gave no communicator");
  return NcclComm(c);
}

int NcclComm::size() const {
  int n = 0;
  STRATA_NCCL_CHECK(ncclCommCount(comm_, &n));
  return n;
}

int NcclComm::rank() const {
  int r = 0;
  STRATA_NCCL_CHECK(ncclCommUserRank(comm_, &r));
  return r;
}

void NcclComm::all_reduce(float* buf, std::int64_t n, cudaStream_t s) const {
  STRATA_NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<std::size_t>(n), ncclFloat32, ncclSum, comm_, s));
}

void NcclComm::reduce_scatter(const float* in, float* out, std::int64_t n, cudaStream_t s) const {
  STRATA_NCCL_CHECK(ncclReduceScatter(in, out, static_cast<std::size_t>(n), ncclFloat32, ncclSum, comm_, s));
}

void NcclComm::all_gather(const float* in, float* out, std::int64_t n, cudaStream_t s) const {
  STRATA_NCCL_CHECK(ncclAllGather(in, out, static_cast<std::size_t>(n), ncclFloat32, comm_, s));
}

void NcclComm::all_gather_words(const void* in, void* out, std::int64_t n, cudaStream_t s) const {
  STRATA_NCCL_CHECK(ncclAllGather(in, out, static_cast<std::size_t>(n), ncclUint32, comm_, s));
}

void NcclComm::all_to_all_words(const void* in, void* out, std::int64_t n, cudaStream_t s) const {
  const auto* src = static_cast<const std::uint32_t*>(in);
  auto* dst = static_cast<std::uint32_t*>(out);
  const auto count = static_cast<std::size_t>(n);
  STRATA_NCCL_CHECK(ncclGroupStart());
  for (int j = 0; j < size(); ++j) {
    STRATA_NCCL_CHECK(ncclSend(src + static_cast<std::size_t>(j) * count, count, ncclUint32, j, comm_, s));
    STRATA_NCCL_CHECK(ncclRecv(dst + static_cast<std::size_t>(j) * count, count, ncclUint32, j, comm_, s));
  }
  STRATA_NCCL_CHECK(ncclGroupEnd());
}

}  // namespace strata::backend::cuda
