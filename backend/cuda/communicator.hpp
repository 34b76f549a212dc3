#pragma once
// NCCL communicators over the processes of a ProcessGroup, one GPU each.
// Internal to backend/cuda (it names NCCL and CUDA types).
//
// The world communicator: rank 0 calls ncclGetUniqueId and broadcasts the
// 128-byte id over the process group (MPI), every process calls
// ncclCommInitRank(world, id, rank) on its current device. Groups (the
// plan's dp groups) are ncclCommSplit of the world with the mesh's colour
// and key (process_group.hpp: split_of), so every member of a group is the
// same member as in the CPU backend's CommWorld groups and the simulator.
//
// Collectives are enqueued on a stream and return at once; every process
// must issue the same collectives on a communicator in the same order (the
// executor does: each process walks the same task graph in the same order).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>

#include "backend/cuda/process_group.hpp"

namespace strata::backend::cuda {

class NcclComm {
 public:
  NcclComm() = default;
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept : comm_(o.comm_) { o.comm_ = nullptr; }
  NcclComm& operator=(NcclComm&& o) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Every process of `group`, on its current CUDA device.
  static NcclComm world(const ProcessGroup& group);
  // This communicator's members with the same colour, ordered by key
  // (a collective: every member calls it).
  NcclComm split(Split s) const;

  bool empty() const { return comm_ == nullptr; }
  int size() const;
  int rank() const;
  ncclComm_t get() const { return comm_; }

  // In place: buf (n floats) := the sum over members.
  void all_reduce(float* buf, std::int64_t n, cudaStream_t s) const;
  // in: size()·n floats; out: member rank()'s n-float chunk of the sum.
  void reduce_scatter(const float* in, float* out, std::int64_t n, cudaStream_t s) const;
  // in: n floats; out: size()·n floats, member r's at r·n.
  void all_gather(const float* in, float* out, std::int64_t n, cudaStream_t s) const;
  // The same for 32-bit words (compressed messages; in may be out + rank()·n).
  void all_gather_words(const void* in, void* out, std::int64_t n, cudaStream_t s) const;
  // in: size() blocks of n words, block j for member j; out: member j's
  // block for this member at j·n (ncclSend / ncclRecv pairs in one group).
  void all_to_all_words(const void* in, void* out, std::int64_t n, cudaStream_t s) const;

 private:
  explicit NcclComm(ncclComm_t c) : comm_(c) {}
  ncclComm_t comm_ = nullptr;
};

}  // namespace strata::backend::cuda
