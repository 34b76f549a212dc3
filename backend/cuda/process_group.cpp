#include "backend/cuda/process_group.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>

#include "sim/error.hpp"

#if STRATA_HAVE_MPI
// The C API only: OpenMPI's (and MPICH's) deprecated C++ bindings would need
// their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace strata::backend::cuda {

namespace {

// A non-negative integer variable, or nothing when unset.
std::optional<int> int_var(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr) return std::nullopt;
  const std::string s(v);
  int x = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || x < 0)
    throw Error("launch: " + std::string(name) + "='" + s + "' is not a non-negative integer");
  return x;
}

// One launcher's three variables, or nothing when none is set.
std::optional<Launch> from_vars(const EnvLookup& env, const char* launcher, const char* rank,
                                const char* size, const char* local) {
  const auto r = int_var(env, rank), n = int_var(env, size), l = int_var(env, local);
  if (!r && !n && !l) return std::nullopt;
  for (const auto& [name, v] : {std::pair{rank, r}, std::pair{size, n}, std::pair{local, l}})
    if (!v)
      throw Error(std::string("launch: ") + launcher + " sets " + rank + ", " + size + " and " + local +
                  ", but " + name + " is unset");
  if (*n < 1) throw Error(std::string("launch: ") + size + "=0: a world of no process");
  if (*r >= *n)
    throw Error(std::string("launch: ") + rank + "=" + std::to_string(*r) + " is not below " + size + "=" +
                std::to_string(*n));
  if (*l >= *n)
    throw Error(std::string("launch: ") + local + "=" + std::to_string(*l) + " is not below " + size + "=" +
                std::to_string(*n));
  return Launch{*r, *n, *l, launcher};
}

#if STRATA_HAVE_MPI
void check_mpi(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(status, text, &len);
  throw Error(std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}
#define STRATA_MPI_CHECK(call) check_mpi((call), #call)
#endif

}  // namespace

Launch launch_from_env(const EnvLookup& env) {
  if (auto l = from_vars(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK"))
    return *l;
  if (auto l = from_vars(env, "srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")) return *l;
  return Launch{};
}

Launch launch_from_env() {
  return launch_from_env([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

bool built_with_mpi() { return STRATA_HAVE_MPI != 0; }

std::string launch_hint(std::int64_t processes) {
  const std::string n = std::to_string(processes);
  return "launch one process per GPU: `mpirun -n " + n + " strata run|validate SCENARIO --backend cuda` (OpenMPI), or `srun --ntasks=" +
         n + " --gpus-per-task=1 strata …` (Slurm)";
}

Split split_of(const strategies::RankMesh& mesh, std::int64_t rank, strategies::MeshDim dim) {
  return {static_cast<int>(mesh.group_index(rank, dim)), static_cast<int>(mesh.index_in_group(rank, dim))};
}

ProcessGroup::ProcessGroup(const Launch& launch) : launch_(launch) {
  if (launch_.world <= 1) return;
#if STRATA_HAVE_MPI
  int initialised = 0;
  STRATA_MPI_CHECK(MPI_Initialized(&initialised));
  if (!initialised) {
    STRATA_MPI_CHECK(MPI_Init(nullptr, nullptr));
    initialised_mpi_ = true;
  }
  // Errors come back as codes (and become Error here), not an abort inside MPI.
  STRATA_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = -1, size = -1;
  STRATA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  STRATA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (rank != launch_.rank || size != launch_.world)
    throw Error("launch: MPI gives rank " + std::to_string(rank) + " of " + std::to_string(size) + ", " +
                launch_.launcher + "'s variables rank " + std::to_string(launch_.rank) + " of " +
                std::to_string(launch_.world) + " (an MPI library other than the one the launcher belongs to?)");
#else
  throw Error("launch: " + launch_.launcher + " started " + std::to_string(launch_.world) +
              " processes, but this strata was built without MPI, which a multi-GPU run needs to "
              "share NCCL's unique id and gather measurements (install libopenmpi-dev openmpi-bin and "
              "reconfigure; -DSTRATA_MPI=ON makes its absence an error)");
#endif
}

ProcessGroup::~ProcessGroup() {
#if STRATA_HAVE_MPI
  if (initialised_mpi_) {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
  }
#endif
}

void ProcessGroup::broadcast(std::span<std::byte> data, int root) const {
  if (root < 0 || root >= launch_.world) throw Error("process group: no rank " + std::to_string(root));
  if (launch_.world <= 1) return;
#if STRATA_HAVE_MPI
  STRATA_MPI_CHECK(MPI_Bcast(data.data(), static_cast<int>(data.size()), MPI_BYTE, root, MPI_COMM_WORLD));
#endif
}

std::vector<std::vector<std::byte>> ProcessGroup::all_gather(std::span<const std::byte> mine) const {
  std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(launch_.world));
  if (launch_.world <= 1) {
    out[0].assign(mine.begin(), mine.end());
    return out;
  }
#if STRATA_HAVE_MPI
  const int n = launch_.world;
  int size = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<std::size_t>(n)), at(static_cast<std::size_t>(n));
  STRATA_MPI_CHECK(MPI_Allgather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD));
  long long total = 0;
  for (int r = 0; r < n; ++r) {
    at[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += sizes[static_cast<std::size_t>(r)];
  }
  if (total > 0x7fffffffLL) throw Error("process group: all_gather of more than 2 GiB");
  std::vector<std::byte> all(static_cast<std::size_t>(total));
  STRATA_MPI_CHECK(MPI_Allgatherv(mine.data(), size, MPI_BYTE, all.data(), sizes.data(), at.data(), MPI_BYTE,
                                  MPI_COMM_WORLD));
  for (int r = 0; r < n; ++r) {
    const auto b = all.begin() + at[static_cast<std::size_t>(r)];
    out[static_cast<std::size_t>(r)].assign(b, b + sizes[static_cast<std::size_t>(r)]);
  }
#endif
  return out;
}

double ProcessGroup::all_reduce_max(double value) const {
#if STRATA_HAVE_MPI
  if (launch_.world > 1) {
    double out = 0;
    STRATA_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return out;
  }
#endif
  return value;
}

double ProcessGroup::all_reduce_sum(double value) const {
#if STRATA_HAVE_MPI
  if (launch_.world > 1) {
    double out = 0;
    STRATA_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return out;
  }
#endif
  return value;
}

void ProcessGroup::barrier() const {
#if STRATA_HAVE_MPI
  if (launch_.world > 1) STRATA_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
#endif
}

void ProcessGroup::abort_peers(int code) const {
#if STRATA_HAVE_MPI
  if (launch_.world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)code;
#endif
}

}  // namespace strata::backend::cuda
