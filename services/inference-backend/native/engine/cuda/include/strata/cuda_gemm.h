// Dense GEMM of the CUDA backend: y = x · wᵀ (+ beta·y) for every Linear layer, through
// cuBLASLt, or cublasGemmEx where Lt cannot serve a shape. Both libraries are loaded with
// dlopen on first use (libcublasLt.so.13 / libcublas.so.13, else .so.12), so nothing here needs
// cuBLAS to build, and a process without it fails only when it constructs a Gemm. Set
// STRATA_CUBLAS_DIR to the directory holding them when they are not on the loader's path (for
// NVIDIA's cu13 wheels: <venv>/lib/python3.X/site-packages/nvidia/cu13/lib).
//
// Numerics: products accumulate in fp32, and split-K partial sums are reduced in fp32, for every
// dtype. kF32 uses the pedantic fp32 compute type (no TF32, no reduced-precision emulation),
// because fp32 mode is compared token for token with the CPU backend.
//
// CUDA graphs: the first matmul for a shape (dtype, m, n, k, strides, and the 2^i alignment of
// each pointer up to 256 bytes) picks and caches an algorithm; that is host work (heuristic
// query, descriptor allocation) but no device allocation or synchronisation. Every later matmul
// with the same shape only enqueues one cuBLAS launch on `stream`, with alpha/beta passed by
// value and the Gemm's own workspace, so it can be captured. Before capturing, run each shape
// once outside the capture (a warm-up step), which also loads the kernel's module; prepare()
// does only the host part, e.g. for shapes that capture but never run eagerly.
//
// A Gemm belongs to the device current when it was made. It is not thread-safe, and its one
// workspace is shared by all its calls: use it from one thread, and either one stream or
// streams ordered with each other (one Gemm per concurrently running stream otherwise).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "strata/cuda_kernels.h"

namespace strata::cuda {

enum class GemmBackend : int32_t {
  kAuto = 0,    // cuBLASLt, falling back per shape to cublasGemmEx
  kLt = 1,      // cuBLASLt only (a shape it cannot serve throws)
  kGemmEx = 2,  // cublasGemmEx only (the fallback, on its own for checks)
};

struct GemmOptions {
  GemmBackend backend = GemmBackend::kAuto;
  // cuBLAS recommends 32 MiB on Hopper (4 MiB before); split-K needs it for fp32 partials.
  size_t workspace_bytes = size_t{32} << 20;
};

// Which cuBLAS files were loaded, and cuBLASLt's version. Loads them if needed; throws CudaError
// (naming every file tried and dlerror()'s text) when neither can be loaded.
std::string cublas_library_info();

class Gemm {
 public:
  // Loads cuBLAS, creates the handle(s) and allocates the workspace (cudaMalloc: before capture).
  explicit Gemm(const GemmOptions& options = GemmOptions{});
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[i, j] = sum_k x[i, k] · w[j, k] (+ beta · y[i, j]), i < m, j < n, all row-major:
  // x (m, k) with row stride x_stride >= k, w (n, k) contiguous (a Hugging Face Linear weight,
  // (out_features, in_features)), y (m, n) with row stride y_stride >= n. Elements of y past n
  // in a row are not touched. With beta = 0, y's old contents are not read (NaN there is fine).
  // m = 0 does nothing. Throws CudaError on bad arguments or a failed cuBLAS call.
  void matmul(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m,
              int32_t n, int32_t k, Stream stream, float beta = 0.0f);

  // The host half of matmul for these arguments: picks and caches the algorithm, launches
  // nothing. Returns how the shape will run, e.g. "cublasLt 32F_PEDANTIC ws=0", with the
  // reasons of any route tried and refused before it.
  std::string prepare(DType dtype, const void* x, int64_t x_stride, const void* w, const void* y, int64_t y_stride,
                      int32_t m, int32_t n, int32_t k);

  size_t cached_shapes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::cuda
