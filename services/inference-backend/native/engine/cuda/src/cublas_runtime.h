// cuBLAS and cuBLASLt reached through dlopen: the handful of types, constants and entry points
// the GEMM uses, declared here so that the engine builds without any cuBLAS header or library
// and still loads on a machine that has none.
//
// Every value below was checked against NVIDIA's own headers and binding docs (the enums are
// part of the stable C ABI; none of these changed between cuBLAS 12 and 13):
//   - cublas_api.h of CUDA 13.0 (CUBLAS_VER 13.0.0.19, as vendored in the public repository
//     leomaxwell972/CU13ToolKit_Includes): cublasStatus_t, cublasOperation_t, cublasGemmAlgo_t,
//     cublasMath_t, cublasComputeType_t, and the prototypes of cublasCreate_v2,
//     cublasDestroy_v2, cublasSetStream_v2, cublasSetWorkspace_v2, cublasSetMathMode,
//     cublasGemmEx.
//   - cublasLt.h of CUDA 12.6 (zspace/system.cuda-12.6): the cublasLt* prototypes, the
//     descriptor, layout, preference and reduction-scheme enums, the numerical-impl flags and
//     the layout of cublasLtMatmulHeuristicResult_t / cublasLtMatmulAlgo_t.
//   - nvmath-python's generated cuBLASLt bindings (docs.nvidia.com/cuda/nvmath-python/latest,
//     built against cuBLAS 13): MatmulDescAttribute, MatrixLayoutAttribute,
//     MatmulPreferenceAttribute and ReductionScheme give the same values as that header.
//   - library_types.h of the toolkit used to build (cudaDataType_t: CUDA_R_32F = 0,
//     CUDA_R_16F = 2, CUDA_R_16BF = 14), included rather than restated.
//   - Cross-checked once, outside the build, against NVIDIA's nvidia-cublas 13.4.1 wheel: every
//     constant, both structs (size and field offsets) and each prototype's parameter sizes
//     static_assert-ed equal to cublasLt.h / cublas_api.h, and the descriptor and preference
//     attributes set through libcublasLt.so.13 with these sizes (all accepted; a wrong size is
//     refused with CUBLAS_STATUS_INVALID_VALUE, so the sizes are right too).
// C enums are passed and returned as 32-bit integers on x86-64 and aarch64, so the prototypes
// use int32_t where the headers name an enum.
#pragma once

#include <library_types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/cuda_kernels.h"

namespace strata::cuda::blas {

using Status = int32_t;  // cublasStatus_t
inline constexpr Status kStatusSuccess = 0;        // CUBLAS_STATUS_SUCCESS
inline constexpr Status kStatusNotSupported = 15;  // CUBLAS_STATUS_NOT_SUPPORTED

inline constexpr int32_t kOpN = 0;  // CUBLAS_OP_N
inline constexpr int32_t kOpT = 1;  // CUBLAS_OP_T

// cublasComputeType_t. The _PEDANTIC type forbids anything that loses precision (TF32, BF16x9
// emulation, down-converted inputs); plain 32F may use them only when asked (FAST_* types or a
// math mode), which this code never does.
inline constexpr int32_t kCompute32F = 68;           // CUBLAS_COMPUTE_32F
inline constexpr int32_t kCompute32FPedantic = 69;   // CUBLAS_COMPUTE_32F_PEDANTIC

inline constexpr int32_t kGemmDefault = -1;  // CUBLAS_GEMM_DEFAULT
// cublasMath_t: CUBLAS_DEFAULT_MATH (0) | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (16):
// split-K partial sums of a bf16/fp16 GEMM are reduced in fp32, not in the output type.
inline constexpr int32_t kMathDefaultFullPrecisionReduction = 16;

// cublasLtMatmulDescAttributes_t (values are int32_t cublasOperation_t).
inline constexpr int32_t kDescTransA = 3;  // CUBLASLT_MATMUL_DESC_TRANSA
inline constexpr int32_t kDescTransB = 4;  // CUBLASLT_MATMUL_DESC_TRANSB

// cublasLtMatmulPreferenceAttributes_t, with the type each value is passed as.
inline constexpr int32_t kPrefMaxWorkspaceBytes = 1;    // uint64_t
inline constexpr int32_t kPrefReductionSchemeMask = 3;  // uint32_t
inline constexpr int32_t kPrefMinAlignmentA = 5;        // uint32_t, default 256
inline constexpr int32_t kPrefMinAlignmentB = 6;
inline constexpr int32_t kPrefMinAlignmentC = 7;
inline constexpr int32_t kPrefMinAlignmentD = 8;
inline constexpr int32_t kPrefImplMask = 12;            // uint64_t, default all ones

// cublasLtReductionScheme_t: NONE = 0 (always allowed), INPLACE = 1 (adds into D in the output
// type), COMPUTE_TYPE = 2 (fp32 partials in the workspace), OUTPUT_TYPE = 4.
inline constexpr uint32_t kReductionComputeType = 2;

// cublasLtNumericalImplFlags_t: the input conversions a float32 GEMM must never do.
inline constexpr uint64_t kImplInput16F = 0x01ull << 16;   // CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16F
inline constexpr uint64_t kImplInput16BF = 0x02ull << 16;  // CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16BF
inline constexpr uint64_t kImplInputTF32 = 0x04ull << 16;  // CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_TF32

// Opaque handles and descriptors: only ever held as pointers.
struct Context;
struct LtContext;
struct LtMatmulDescOpaque;
struct LtMatrixLayoutOpaque;
struct LtPreferenceOpaque;
using Handle = Context*;                        // cublasHandle_t
using LtHandle = LtContext*;                    // cublasLtHandle_t
using LtMatmulDesc = LtMatmulDescOpaque*;       // cublasLtMatmulDesc_t
using LtMatrixLayout = LtMatrixLayoutOpaque*;   // cublasLtMatrixLayout_t
using LtPreference = LtPreferenceOpaque*;       // cublasLtMatmulPreference_t

struct LtAlgo {  // cublasLtMatmulAlgo_t
  uint64_t data[8];
};
struct LtHeuristicResult {  // cublasLtMatmulHeuristicResult_t
  LtAlgo algo;
  size_t workspace_size;
  Status state;
  float waves_count;
  int32_t reserved[4];
};
static_assert(sizeof(LtAlgo) == 64 && sizeof(LtHeuristicResult) == 96, "cuBLASLt ABI layout");

// The entry points, resolved once per process. A library that is absent leaves its group null.
struct Api {
  std::string lt_path, blas_path;  // what dlopen loaded ("" when that library is absent)
  size_t lt_version = 0;           // cublasLtGetVersion(), e.g. 130001; 0 when unknown

  // libcublasLt
  Status (*lt_create)(LtHandle*) = nullptr;
  Status (*lt_destroy)(LtHandle) = nullptr;
  Status (*lt_matmul_desc_create)(LtMatmulDesc*, int32_t compute_type, cudaDataType_t scale_type) = nullptr;
  Status (*lt_matmul_desc_destroy)(LtMatmulDesc) = nullptr;
  Status (*lt_matmul_desc_set_attribute)(LtMatmulDesc, int32_t attr, const void* buf, size_t size) = nullptr;
  Status (*lt_matrix_layout_create)(LtMatrixLayout*, cudaDataType_t type, uint64_t rows, uint64_t cols,
                                    int64_t ld) = nullptr;
  Status (*lt_matrix_layout_destroy)(LtMatrixLayout) = nullptr;
  Status (*lt_preference_create)(LtPreference*) = nullptr;
  Status (*lt_preference_destroy)(LtPreference) = nullptr;
  Status (*lt_preference_set_attribute)(LtPreference, int32_t attr, const void* buf, size_t size) = nullptr;
  Status (*lt_algo_get_heuristic)(LtHandle, LtMatmulDesc, LtMatrixLayout a, LtMatrixLayout b, LtMatrixLayout c,
                                  LtMatrixLayout d, LtPreference, int32_t requested, LtHeuristicResult* results,
                                  int32_t* returned) = nullptr;
  Status (*lt_matmul)(LtHandle, LtMatmulDesc, const void* alpha, const void* a, LtMatrixLayout a_desc, const void* b,
                      LtMatrixLayout b_desc, const void* beta, const void* c, LtMatrixLayout c_desc, void* d,
                      LtMatrixLayout d_desc, const LtAlgo* algo, void* workspace, size_t workspace_size,
                      Stream stream) = nullptr;

  // libcublas
  Status (*create)(Handle*) = nullptr;                                    // cublasCreate_v2
  Status (*destroy)(Handle) = nullptr;                                    // cublasDestroy_v2
  Status (*set_stream)(Handle, Stream) = nullptr;                         // cublasSetStream_v2
  Status (*set_workspace)(Handle, void* workspace, size_t size) = nullptr;  // cublasSetWorkspace_v2
  Status (*set_math_mode)(Handle, int32_t mode) = nullptr;                // cublasSetMathMode
  Status (*gemm_ex)(Handle, int32_t transa, int32_t transb, int32_t m, int32_t n, int32_t k, const void* alpha,
                    const void* a, cudaDataType_t a_type, int32_t lda, const void* b, cudaDataType_t b_type,
                    int32_t ldb, const void* beta, void* c, cudaDataType_t c_type, int32_t ldc,
                    int32_t compute_type, int32_t algo) = nullptr;        // cublasGemmEx

  bool has_lt() const { return lt_matmul != nullptr; }
  bool has_blas() const { return gemm_ex != nullptr; }
};

// Loads the libraries on first use (thread-safe). Throws CudaError naming every file tried and
// dlopen's reason when neither library can be loaded; a later call tries again.
const Api& api();

// "CUBLAS_STATUS_NOT_SUPPORTED (15)".
std::string status_name(Status status);

}  // namespace strata::cuda::blas
