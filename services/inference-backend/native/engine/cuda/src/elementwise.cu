// The memory-bound kernels around the GEMMs: embedding gather, residual add fused with RMSNorm,
// SiLU-and-multiply, and whole-block KV copies. Each reads its inputs once and writes its
// outputs once; the row kernels use one thread block per token.
#include <algorithm>
#include <string>

#include "device_common.cuh"

namespace strata::cuda {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "unknown";
}

void check(int err, const char* what) {
  if (err != cudaSuccess) {
    throw CudaError(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(err)));
  }
}

namespace {
thread_local bool t_programmatic = false;
thread_local uint32_t t_programmatic_flags = kPdlPrefetch | kPdlEarlyTrigger;
}  // namespace

ProgrammaticLaunch::ProgrammaticLaunch(bool on, bool prefetch, bool early_trigger)
    : previous_(t_programmatic), previous_flags_(t_programmatic_flags) {
  t_programmatic = on;
  t_programmatic_flags = (prefetch ? kPdlPrefetch : 0u) | (early_trigger ? kPdlEarlyTrigger : 0u);
}
ProgrammaticLaunch::~ProgrammaticLaunch() {
  t_programmatic = previous_;
  t_programmatic_flags = previous_flags_;
}
bool programmatic_launch() { return t_programmatic; }
uint32_t programmatic_flags() { return t_programmatic_flags; }

void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw CudaError(std::string("launching ") + kernel + ": " + cudaGetErrorString(err));
}

namespace {

constexpr int kRowThreads = 256;

template <typename T>
__global__ void embedding_gather_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids, int32_t hidden,
                                        float* __restrict__ residual) {
  const int64_t row = blockIdx.x;
  const T* src = table + static_cast<int64_t>(ids[row]) * hidden;
  float* dst = residual + row * hidden;
  for (int32_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = to_float(src[i]);
}

// One block per token: residual += x, then the sum of squares, then the normalised row. A
// decode step has one row per sequence, so the row's latency is the kernel's: each thread
// issues kNormUnroll loads before it uses the first (an H200 ran one 4096-row in 15 us with
// one load in flight per thread, 256 threads), and the launch gives a row hidden / 4 threads.
// The second pass re-reads the row from L1/L2 (16 KB at hidden 4096).
constexpr int kNormUnroll = 4;

// This thread's kNormUnroll elements of a row from `base`, blockDim.x apart, as floats, all
// loaded before any is used; 0 past the row's end or for a null row.
template <typename S>
__device__ __forceinline__ void load_strided(const S* row, int32_t base, int32_t n, float (&out)[kNormUnroll]) {
#pragma unroll
  for (int u = 0; u < kNormUnroll; ++u) {
    const int32_t i = base + u * static_cast<int32_t>(blockDim.x);
    out[u] = row != nullptr && i < n ? to_float(row[i]) : 0.0f;
  }
}

template <typename T>
__global__ void add_rms_norm_kernel(float* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ weight,
                                    T* __restrict__ out, int32_t hidden, float eps, uint32_t pdl) {
  __shared__ float scratch[32];
  grid_dependency_sync(pdl);
  const int64_t row = blockIdx.x;
  float* r = residual + row * hidden;
  const T* xr = x != nullptr ? x + row * hidden : nullptr;
  const int32_t step = static_cast<int32_t>(blockDim.x) * kNormUnroll;
  float sum_sq = 0.0f;
  for (int32_t base = threadIdx.x; base < hidden; base += step) {
    float v[kNormUnroll], add[kNormUnroll];
    load_strided(r, base, hidden, v);
    load_strided(xr, base, hidden, add);
#pragma unroll
    for (int u = 0; u < kNormUnroll; ++u) {
      const int32_t i = base + u * static_cast<int32_t>(blockDim.x);
      if (xr != nullptr) v[u] += add[u];
      if (i < hidden) {
        if (xr != nullptr) r[i] = v[u];
        sum_sq += v[u] * v[u];
      }
    }
  }
  const float total = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(hidden) + eps);
  T* o = out + row * hidden;
  for (int32_t base = threadIdx.x; base < hidden; base += step) {
    float v[kNormUnroll], w[kNormUnroll];
    load_strided(r, base, hidden, v);
    load_strided(weight, base, hidden, w);
#pragma unroll
    for (int u = 0; u < kNormUnroll; ++u) {
      const int32_t i = base + u * static_cast<int32_t>(blockDim.x);
      // transformers: weight * hidden_states.to(input_dtype), the product in the weight's dtype.
      const float normalised = to_float(from_float<T>(v[u] * inv_rms));
      if (i < hidden) o[i] = from_float<T>(normalised * w[u]);
    }
  }
}

// Threads for one row of `width` elements handled kNormUnroll per thread: whole warps, 32 to 1024.
int row_threads(int32_t width) {
  const int32_t want = (width + kNormUnroll - 1) / kNormUnroll;
  return std::clamp((want + 31) / 32 * 32, 32, 1024);
}

// kVec (16 bytes of T) outputs a thread when `vec`, else one: a prefill step's 8,192 x 14,336
// took 574 us with one 2-byte element a thread on an H200, 3.5x its bytes at copy speed.
template <typename T, bool vec>
__global__ void silu_mul_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int32_t intermediate,
                                int64_t total) {
  constexpr int kVec = vec ? 16 / static_cast<int>(sizeof(T)) : 1;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (i >= total) return;
  const int64_t row = i / intermediate, col = i % intermediate;  // a vector never straddles rows
  const T* in = gate_up + row * 2 * intermediate;
  Pack<T, kVec> gate, up, result;
  gate.load(in + col);
  up.load(in + intermediate + col);
#pragma unroll
  for (int k = 0; k < kVec; ++k) result.v[k] = silu_times(gate.v[k], up.v[k]);
  result.store(out + i);
}

// One thread block per (pair, K or V): a plain copy of block_elems elements, 16 bytes a thread.
__global__ void copy_blocks_kernel(char* __restrict__ k_cache, char* __restrict__ v_cache, const int32_t* __restrict__ src,
                                   const int32_t* __restrict__ dst, int64_t block_bytes) {
  char* base = blockIdx.y == 0 ? k_cache : v_cache;
  const char* from = base + static_cast<int64_t>(src[blockIdx.x]) * block_bytes;
  char* to = base + static_cast<int64_t>(dst[blockIdx.x]) * block_bytes;
  if (block_bytes % 16 == 0) {
    for (int64_t i = threadIdx.x; i < block_bytes / 16; i += blockDim.x) {
      reinterpret_cast<int4*>(to)[i] = reinterpret_cast<const int4*>(from)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < block_bytes; i += blockDim.x) to[i] = from[i];
  }
}

template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_float<D>(to_float(src[i]));
  }
}

template <typename T>
__global__ void add_bias_kernel(T* __restrict__ y, int64_t y_stride, const T* __restrict__ bias, int32_t n) {
  T* row = y + static_cast<int64_t>(blockIdx.x) * y_stride;
  for (int32_t j = threadIdx.x; j < n; j += blockDim.x) row[j] = from_float<T>(to_float(row[j]) + to_float(bias[j]));
}

template <typename T>
__global__ void gather_rows_kernel(const T* __restrict__ src, int64_t src_stride, const int32_t* __restrict__ rows,
                                   int32_t width, T* __restrict__ dst) {
  const T* from = src + static_cast<int64_t>(rows[blockIdx.x]) * src_stride;
  T* to = dst + static_cast<int64_t>(blockIdx.x) * width;
  for (int32_t j = threadIdx.x; j < width; j += blockDim.x) to[j] = from[j];
}

void require(bool ok, const std::string& what) {
  if (!ok) throw CudaError(what);
}

}  // namespace

void embedding_gather(DType dtype, const void* table, const int32_t* ids, int32_t n_tokens, int32_t hidden,
                      float* residual, Stream stream) {
  require(hidden > 0 && n_tokens >= 0, "embedding_gather: hidden must be > 0 and n_tokens >= 0");
  if (n_tokens == 0) return;
  dispatch_dtype(dtype, [&]<typename T>() {
    embedding_gather_kernel<T><<<n_tokens, kRowThreads, 0, stream>>>(static_cast<const T*>(table), ids, hidden, residual);
  });
  check_launch("embedding_gather");
}

void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n, Stream stream) {
  require(n >= 0, "convert: n must be >= 0");
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(n, 256), 65536));
  dispatch_dtype(src_dtype, [&]<typename S>() {
    dispatch_dtype(dst_dtype, [&]<typename D>() {
      convert_kernel<S, D><<<blocks, 256, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
  check_launch("convert");
}

void add_bias(DType dtype, void* y, int64_t y_stride, const void* bias, int32_t m, int32_t n, Stream stream) {
  require(m >= 0 && n > 0 && y_stride >= n, "add_bias: m >= 0, n > 0 and y_stride >= n");
  if (m == 0) return;
  dispatch_dtype(dtype, [&]<typename T>() {
    add_bias_kernel<T><<<m, kRowThreads, 0, stream>>>(static_cast<T*>(y), y_stride, static_cast<const T*>(bias), n);
  });
  check_launch("add_bias");
}

void gather_rows(DType dtype, const void* src, int64_t src_stride, const int32_t* rows, int32_t n_rows, int32_t width,
                 void* dst, Stream stream) {
  require(n_rows >= 0 && width > 0 && src_stride >= width, "gather_rows: n_rows >= 0, width > 0, src_stride >= width");
  if (n_rows == 0) return;
  dispatch_dtype(dtype, [&]<typename T>() {
    gather_rows_kernel<T><<<n_rows, kRowThreads, 0, stream>>>(static_cast<const T*>(src), src_stride, rows, width,
                                                              static_cast<T*>(dst));
  });
  check_launch("gather_rows");
}

void add_rms_norm(DType dtype, float* residual, const void* x, const void* weight, void* out, int32_t n_tokens,
                  int32_t hidden, float eps, Stream stream) {
  require(hidden > 0 && n_tokens >= 0, "add_rms_norm: hidden must be > 0 and n_tokens >= 0");
  if (n_tokens == 0) return;
  dispatch_dtype(dtype, [&]<typename T>() {
    launch_programmatic("add_rms_norm", add_rms_norm_kernel<T>, dim3(n_tokens), dim3(row_threads(hidden)), 0, stream,
                        residual, static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(out), hidden,
                        eps);
  });
}

void silu_mul(DType dtype, const void* gate_up, void* out, int32_t n_tokens, int32_t intermediate, Stream stream) {
  require(intermediate > 0 && n_tokens >= 0, "silu_mul: intermediate must be > 0 and n_tokens >= 0");
  const int64_t total = int64_t{n_tokens} * intermediate;
  if (total == 0) return;
  dispatch_dtype(dtype, [&]<typename T>() {
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    const bool aligned = reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
    if (intermediate % kVec == 0 && aligned) {
      silu_mul_kernel<T, true><<<blocks_for(total / kVec, 256), 256, 0, stream>>>(
          static_cast<const T*>(gate_up), static_cast<T*>(out), intermediate, total);
    } else {
      silu_mul_kernel<T, false><<<blocks_for(total, 256), 256, 0, stream>>>(static_cast<const T*>(gate_up),
                                                                            static_cast<T*>(out), intermediate, total);
    }
  });
  check_launch("silu_mul");
}

void copy_blocks(DType dtype, void* k_cache, void* v_cache, const int32_t* src, const int32_t* dst, int32_t n_pairs,
                 int64_t block_elems, Stream stream) {
  require(n_pairs >= 0 && block_elems > 0, "copy_blocks: n_pairs must be >= 0 and block_elems > 0");
  if (n_pairs == 0) return;
  copy_blocks_kernel<<<dim3(n_pairs, 2), 256, 0, stream>>>(static_cast<char*>(k_cache), static_cast<char*>(v_cache),
                                                           src, dst, block_elems * int64_t(dtype_size(dtype)));
  check_launch("copy_blocks");
}

}  // namespace strata::cuda
