// CPU emulation of the CUDA execution model, so the kernels in ../src run (slowly) on machines
// without a GPU: CI and development machines. It is force-included (-include emu.h) into the
// C++ that cu2cpp.py makes of each .cu file.
//
// Each thread block runs on the calling OS thread as blockDim fibers (user-space contexts);
// a fiber runs until it reaches __syncthreads, a warp shuffle, vote or __syncwarp, or a cluster
// barrier, then yields. Barriers release when every live thread of their scope has arrived, so
// the kernels' reductions, masks and indexing run exactly as written. Blocks of a grid run one
// after another (the blocks of a thread-block cluster together, each with its own dynamic shared
// memory, reachable from its peers through map_shared_rank), which makes `__shared__` plain
// static storage, shared by one block's fibers; so a clustered kernel must keep its shared state
// in dynamic shared memory (map_shared_rank refuses anything else). Atomics are plain
// read-modify-writes: every fiber runs on one OS thread.
//
// What it cannot show: races between blocks or within a warp outside the barriers, memory
// ordering, coalescing, bank conflicts, register or shared-memory limits, timing. Those need
// the GPU (scripts/device/cuda-kernels.sh, compute-sanitizer).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace strata::emu {

// The current fiber's coordinates, and the barriers (emu_runtime.cpp).
uint3 thread_idx();
uint3 block_idx();
dim3 block_dim();
dim3 grid_dim();
void* dynamic_shared();
void sync_threads();
void sync_warp();
void sync_cluster();
// The calling block's rank in its cluster, the cluster's size, and a peer block's copy of the
// dynamic shared memory byte at `offset`.
unsigned cluster_rank();
unsigned cluster_size();
void* peer_shared(const void* own, unsigned rank);
// Every lane of the warp publishes `bits`; returns lane `src_lane`'s.
uint64_t exchange(uint64_t bits, int src_lane);
// Every lane of the warp publishes `bits`; `out[i]` is lane i's, and bit i of the result is set
// where lane i took part (lanes that have exited do not).
uint32_t gather(uint64_t bits, uint64_t out[32]);

// Runs `body` once per thread of every block of the grid, `cluster` blocks along x at a time.
// Records cudaErrorInvalidConfiguration (cudaGetLastError) for a launch CUDA would refuse.
void run_grid(dim3 grid, dim3 block, size_t shared_bytes, unsigned cluster, const std::function<void()>& body);

// The calling lane's index in its warp.
int lane_id();

// Work for "the stream": run now, or, while a stream capture is open, recorded into the graph
// (so a kernel's arguments are the values at capture, and a copy reads its source at replay,
// as on a GPU).
void submit(std::function<void()> work);

template <typename... Params>
struct Launch {
  void (*kernel)(Params...);
  dim3 grid, block;
  size_t shared_bytes;
  unsigned cluster = 1;
  template <typename... Args>
  void operator()(Args&&... args) const {
    std::tuple<std::decay_t<Params>...> values(std::forward<Args>(args)...);
    submit([values = std::move(values), k = kernel, g = grid, b = block, bytes = shared_bytes, c = cluster] {
      run_grid(g, b, bytes, c, [&values, k] {
        std::tuple<std::decay_t<Params>...> own = values;  // each thread its own copy, as on a GPU
        std::apply(k, own);
      });
    });
  }
};

template <typename... Params>
Launch<Params...> launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes = 0,
                         cudaStream_t = nullptr) {
  return {kernel, grid, block, shared_bytes};
}

// cudaLaunchKernelEx (cu2cpp.py rewrites the calls): the config's grid, block, shared memory and
// cluster dimension (x only).
template <typename... Params, typename... Args>
cudaError_t launch_ex(const cudaLaunchConfig_t* config, void (*kernel)(Params...), Args&&... args) {
  unsigned cluster = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const cudaLaunchAttribute& a = config->attrs[i];
    if (a.id != cudaLaunchAttributeClusterDimension) continue;
    if (a.val.clusterDim.y != 1 || a.val.clusterDim.z != 1) return cudaErrorInvalidValue;
    cluster = a.val.clusterDim.x;
  }
  Launch<Params...>{kernel, config->gridDim, config->blockDim, config->dynamicSmemBytes, cluster}(
      std::forward<Args>(args)...);
  return cudaSuccess;
}

template <typename T>
T shfl_from(T value, int src_lane) {
  static_assert(sizeof(T) <= 8, "shuffles move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = exchange(bits, src_lane);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

template <typename T>
T shfl_xor(T value, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffles move up to 8 bytes");
  return shfl_from(value, lane_id() ^ (lane_mask & 31));
}

}  // namespace strata::emu

// Qualifiers: kernels become plain functions; __shared__ storage is static (one block at a time).
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#undef __grid_constant__
#undef __align__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) alignas(n)

inline void __syncthreads() { ::strata::emu::sync_threads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::strata::emu::sync_warp(); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T value, int lane_mask, int = 32) {
  return ::strata::emu::shfl_xor(value, lane_mask);
}
template <typename T>
inline T __shfl_sync(unsigned, T value, int src_lane, int width = 32) {
  const int lane = ::strata::emu::lane_id();
  return ::strata::emu::shfl_from(value, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
template <typename T>
inline T __shfl_up_sync(unsigned, T value, unsigned delta, int width = 32) {
  const int lane = ::strata::emu::lane_id();
  return ::strata::emu::shfl_from(value, (lane & (width - 1)) >= int(delta) ? lane - int(delta) : lane);
}
template <typename T>
inline T __shfl_down_sync(unsigned, T value, unsigned delta, int width = 32) {
  const int lane = ::strata::emu::lane_id();
  return ::strata::emu::shfl_from(value, (lane & (width - 1)) + int(delta) < width ? lane + int(delta) : lane);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  uint64_t values[32];
  const uint32_t took_part = ::strata::emu::gather(predicate != 0, values);
  unsigned bits = 0;
  for (int i = 0; i < 32; ++i) bits |= (took_part >> i & 1u) && values[i] ? 1u << i : 0u;
  return bits;
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned, int predicate) {
  uint64_t values[32];
  const uint32_t took_part = ::strata::emu::gather(predicate != 0, values);
  for (int i = 0; i < 32; ++i)
    if ((took_part >> i & 1u) && !values[i]) return 0;
  return 1;
}
inline unsigned __reduce_add_sync(unsigned, unsigned value) {
  uint64_t values[32];
  const uint32_t took_part = ::strata::emu::gather(value, values);
  unsigned sum = 0;
  for (int i = 0; i < 32; ++i) sum += (took_part >> i & 1u) ? unsigned(values[i]) : 0u;
  return sum;
}

// Memory fences order nothing here: the blocks of a grid run one after another.
inline void __threadfence() {}

// Atomics: the fibers share one OS thread, so a read-modify-write is atomic as written.
template <typename T>
inline T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
template <typename T>
inline T atomicMin(T* address, T value) {
  const T old = *address;
  if (value < old) *address = value;
  return old;
}
template <typename T>
inline T atomicMax(T* address, T value) {
  const T old = *address;
  if (value > old) *address = value;
  return old;
}

// Thread-block clusters (<cooperative_groups.h> is empty outside nvcc).
namespace cooperative_groups {
struct cluster_group {
  void sync() const { ::strata::emu::sync_cluster(); }
  unsigned block_rank() const { return ::strata::emu::cluster_rank(); }
  unsigned num_blocks() const { return ::strata::emu::cluster_size(); }
  template <typename T>
  T* map_shared_rank(T* address, int rank) const {
    return static_cast<T*>(::strata::emu::peer_shared(address, unsigned(rank)));
  }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups

// Rounding intrinsics: the emulation is built with -ffp-contract=off, so a product or sum
// is rounded on its own as the _rn forms promise.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline int __clz(unsigned x) { return x != 0 ? __builtin_clz(x) : 32; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(int(x)); }
template <typename T>
inline T __ldcs(const T* address) { return *address; }
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __uint_as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}
// Device min/max: CUDA overloads them for every integer and floating type.
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
inline T min(T a, T b) { return a < b ? a : b; }
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
inline T max(T a, T b) { return a > b ? a : b; }

// WMMA (the warp-level matrix API of <mma.h>). Each lane's fragment holds the whole tile (the
// hardware's per-lane layout is opaque to a correct kernel, which only loads, stores, fills and
// multiplies fragments); lane 0 multiplies and the warp reads its result, with warp barriers
// around, so a kernel that writes shared memory and loads a fragment without __syncwarp in
// between reads what the emulation's schedule happens to have written.
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];  // (rows, cols) row-major, whatever the memory layout it came from
};

template <typename Use, int M, int N, int K, typename T, typename Layout, typename V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& value) {
  for (T& e : f.x) e = static_cast<T>(value);
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  constexpr bool col = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c) f.x[r * F::cols + c] = col ? p[size_t(c) * ldm + r] : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, typename T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout) {
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] = layout == mem_col_major ? p[size_t(c) * ldm + r] : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, typename T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_col_major ? p[size_t(c) * ldm + r] : p[size_t(r) * ldm + c]) = f.x[r * N + c];
}

template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c) {
  static TC result[M * N];  // one warp multiplies at a time: the fibers of a block share one OS thread
  ::strata::emu::sync_warp();
  if (::strata::emu::lane_id() == 0) {
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        float acc = static_cast<float>(c.x[i * N + j]);
        for (int k = 0; k < K; ++k) acc += static_cast<float>(a.x[i * K + k]) * static_cast<float>(b.x[k * N + j]);
        result[i * N + j] = static_cast<TC>(acc);
      }
  }
  ::strata::emu::sync_warp();
  for (int e = 0; e < M * N; ++e) d.x[e] = result[e];
  ::strata::emu::sync_warp();  // every lane has its copy before the next product overwrites it
}
}  // namespace nvcuda::wmma
