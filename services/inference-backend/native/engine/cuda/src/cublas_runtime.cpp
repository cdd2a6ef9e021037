// cuBLAS / cuBLASLt loaded with dlopen, and the Gemm built on them.
//
// Row-major to column-major. cuBLAS is column-major, and a row-major (r, c) matrix with row
// stride ld is, byte for byte, the column-major (c, r) matrix with leading dimension ld: its
// transpose. So the row-major y = x · wᵀ, read column-major, is yᵀ = w · xᵀ, which cuBLAS
// computes as D = op(A) · op(B) (+ beta · C) with
//   A = w's memory, column-major (k, n), ld = k         op(A) = Aᵀ, (n, k)   TRANSA = T
//   B = x's memory, column-major (k, m), ld = x_stride  op(B) = B,  (k, m)   TRANSB = N
//   C = D = y's memory, column-major (n, m), ld = y_stride.
// Then D(j, i) = sum_kk A(kk, j) · B(kk, i) = sum_kk w[j·k + kk] · x[i·x_stride + kk], stored at
// y[i·y_stride + j]: exactly y[i, j], and columns j >= n of y are never addressed. Both operands
// are K-contiguous (the "TN" form, cuBLAS's fastest). cublasGemmEx takes the same roles with
// (m', n', k') = (n, m, k), lda = k, ldb = x_stride, ldc = y_stride.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <compare>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cublas_runtime.h"
#include "strata/cuda_gemm.h"

namespace strata::cuda {

namespace blas {
namespace {

std::string join_path(const std::string& dir, const std::string& file) {
  if (dir.empty()) return file;  // the dynamic loader's own search (LD_LIBRARY_PATH, RUNPATH, ld.so.cache)
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

// Directories in the order they are tried: STRATA_CUBLAS_DIR, the loader's search, then the
// toolkit's usual home (not always in ld.so.conf).
std::vector<std::string> search_dirs() {
  std::vector<std::string> dirs;
  if (const char* dir = std::getenv("STRATA_CUBLAS_DIR"); dir != nullptr && *dir != '\0') dirs.emplace_back(dir);
  dirs.emplace_back("");
  dirs.emplace_back("/usr/local/cuda/lib64");
  return dirs;
}

void* open_first(const std::vector<std::string>& dirs, const std::string& name, std::string& opened,
                 std::vector<std::string>& tried) {
  for (const std::string& dir : dirs) {
    const std::string file = join_path(dir, name);
    dlerror();
    if (void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      opened = file;
      return lib;
    }
    const char* why = dlerror();
    tried.push_back(file + " (" + (why != nullptr ? why : "dlopen failed") + ")");
  }
  return nullptr;
}

// dlsym into a typed function pointer; memcpy because C++ has no cast from void* to one.
template <typename Fn>
void resolve(void* lib, const char* name, Fn& fn, std::string& missing) {
  void* symbol = dlsym(lib, name);
  if (symbol == nullptr) {
    missing += missing.empty() ? name : std::string(", ") + name;
    return;
  }
  static_assert(sizeof(Fn) == sizeof(void*));
  std::memcpy(&fn, &symbol, sizeof(fn));
}

std::string resolve_lt(void* lib, Api& out) {
  std::string missing;
  resolve(lib, "cublasLtCreate", out.lt_create, missing);
  resolve(lib, "cublasLtDestroy", out.lt_destroy, missing);
  resolve(lib, "cublasLtMatmulDescCreate", out.lt_matmul_desc_create, missing);
  resolve(lib, "cublasLtMatmulDescDestroy", out.lt_matmul_desc_destroy, missing);
  resolve(lib, "cublasLtMatmulDescSetAttribute", out.lt_matmul_desc_set_attribute, missing);
  resolve(lib, "cublasLtMatrixLayoutCreate", out.lt_matrix_layout_create, missing);
  resolve(lib, "cublasLtMatrixLayoutDestroy", out.lt_matrix_layout_destroy, missing);
  resolve(lib, "cublasLtMatmulPreferenceCreate", out.lt_preference_create, missing);
  resolve(lib, "cublasLtMatmulPreferenceDestroy", out.lt_preference_destroy, missing);
  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", out.lt_preference_set_attribute, missing);
  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", out.lt_algo_get_heuristic, missing);
  resolve(lib, "cublasLtMatmul", out.lt_matmul, missing);
  if (missing.empty()) {
    size_t (*get_version)() = nullptr;
    std::string optional;
    resolve(lib, "cublasLtGetVersion", get_version, optional);
    if (get_version != nullptr) out.lt_version = get_version();
  }
  return missing;
}

std::string resolve_blas(void* lib, Api& out) {
  std::string missing;
  resolve(lib, "cublasCreate_v2", out.create, missing);
  resolve(lib, "cublasDestroy_v2", out.destroy, missing);
  resolve(lib, "cublasSetStream_v2", out.set_stream, missing);
  resolve(lib, "cublasSetWorkspace_v2", out.set_workspace, missing);
  resolve(lib, "cublasSetMathMode", out.set_math_mode, missing);
  resolve(lib, "cublasGemmEx", out.gemm_ex, missing);
  return missing;
}

// One major version at a time, cuBLASLt first: libcublas needs libcublasLt of its own version,
// and the loader satisfies that dependency by soname with the one already loaded here.
std::unique_ptr<Api> load() {
  auto api = std::make_unique<Api>();
  const std::vector<std::string> dirs = search_dirs();
  std::vector<std::string> tried;
  for (const char* major : {"13", "12"}) {
    std::string lt_file, blas_file;
    void* lt = open_first(dirs, std::string("libcublasLt.so.") + major, lt_file, tried);
    if (lt != nullptr) {
      Api candidate = *api;
      if (const std::string missing = resolve_lt(lt, candidate); missing.empty()) {
        *api = candidate;
        api->lt_path = lt_file;
      } else {
        tried.push_back(lt_file + " (loaded, but lacks " + missing + ")");
        dlclose(lt);
      }
    }
    void* blas = open_first(dirs, std::string("libcublas.so.") + major, blas_file, tried);
    if (blas != nullptr) {
      Api candidate = *api;
      if (const std::string missing = resolve_blas(blas, candidate); missing.empty()) {
        *api = candidate;
        api->blas_path = blas_file;
      } else {
        tried.push_back(blas_file + " (loaded, but lacks " + missing + ")");
        dlclose(blas);
      }
    }
    if (api->has_lt() || api->has_blas()) return api;  // the libraries stay loaded for the process
  }
  std::string message = "cuBLAS not found; tried:";
  for (const std::string& attempt : tried) message += "\n  " + attempt;
  message +=
      "\nSet STRATA_CUBLAS_DIR to the directory holding libcublasLt.so.13 and libcublas.so.13 "
      "(NVIDIA's cu13 wheels: <venv>/lib/python3.X/site-packages/nvidia/cu13/lib; a toolkit: <cuda>/lib64).";
  throw CudaError(message);
}

}  // namespace

const Api& api() {
  static std::mutex mutex;
  static std::unique_ptr<Api> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) loaded = load();
  return *loaded;
}

std::string status_name(Status status) {
  const char* name = "CUBLAS_STATUS_UNKNOWN";
  switch (status) {
    case 0: name = "CUBLAS_STATUS_SUCCESS"; break;
    case 1: name = "CUBLAS_STATUS_NOT_INITIALIZED"; break;
    case 3: name = "CUBLAS_STATUS_ALLOC_FAILED"; break;
    case 7: name = "CUBLAS_STATUS_INVALID_VALUE"; break;
    case 8: name = "CUBLAS_STATUS_ARCH_MISMATCH"; break;
    case 11: name = "CUBLAS_STATUS_MAPPING_ERROR"; break;
    case 13: name = "CUBLAS_STATUS_EXECUTION_FAILED"; break;
    case 14: name = "CUBLAS_STATUS_INTERNAL_ERROR"; break;
    case 15: name = "CUBLAS_STATUS_NOT_SUPPORTED"; break;
    case 16: name = "CUBLAS_STATUS_LICENSE_ERROR"; break;
    default: break;
  }
  return std::string(name) + " (" + std::to_string(status) + ")";
}

}  // namespace blas

std::string cublas_library_info() {
  const blas::Api& a = blas::api();
  std::string info = "cublasLt: " + (a.has_lt() ? a.lt_path : std::string("not loaded"));
  if (a.lt_version != 0) info += " (version " + std::to_string(a.lt_version) + ")";
  info += "; cublas: " + (a.has_blas() ? a.blas_path : std::string("not loaded"));
  return info;
}

namespace {

void check_status(blas::Status status, const std::string& what) {
  if (status != blas::kStatusSuccess) throw CudaError(what + ": " + blas::status_name(status));
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
  }
  throw CudaError("gemm: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address
// and the row pitch in bytes: every row of the operand starts at least this aligned.
uint32_t alignment(const void* p, int64_t ld, size_t elem_bytes) {
  const uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) |
                        (static_cast<uint64_t>(ld) * elem_bytes) | uint64_t{256};
  return static_cast<uint32_t>(bits & (~bits + 1));
}

struct ShapeKey {
  int32_t dtype, m, n, k;
  int64_t x_stride, y_stride;
  uint32_t align_x, align_w, align_y;
  auto operator<=>(const ShapeKey&) const = default;
};

std::string shape_text(const ShapeKey& s) {
  return std::string(dtype_name(static_cast<DType>(s.dtype))) + " m=" + std::to_string(s.m) +
         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " x_stride=" + std::to_string(s.x_stride) +
         " y_stride=" + std::to_string(s.y_stride) + " align(x,w,y)=" + std::to_string(s.align_x) + "," +
         std::to_string(s.align_w) + "," + std::to_string(s.align_y);
}

struct Plan {
  bool lt = false;
  std::string description;
  blas::LtMatmulDesc desc = nullptr;
  blas::LtMatrixLayout a = nullptr, b = nullptr, c = nullptr;  // C and D share one layout
  blas::LtAlgo algo{};
  int32_t compute = 0;  // cublasGemmEx's compute type
};

// One cuBLASLt attempt: a compute type, and input conversions to exclude from the heuristic.
struct LtRoute {
  int32_t compute;
  uint64_t impl_mask;  // 0: no filter
  const char* name;
};

void validate(DType dtype, const void* x, int64_t x_stride, const void* w, const void* y, int64_t y_stride,
              int32_t m, int32_t n, int32_t k) {
  (void)data_type(dtype);
  const auto shape = [&] {
    return " (m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           " x_stride=" + std::to_string(x_stride) + " y_stride=" + std::to_string(y_stride) + ")";
  };
  if (m < 0 || n <= 0 || k <= 0) throw CudaError("gemm: need m >= 0, n > 0, k > 0" + shape());
  constexpr int64_t kMaxStride = std::numeric_limits<int32_t>::max();  // cublasGemmEx's lda/ldb/ldc are int
  if (x_stride < k || x_stride > kMaxStride) throw CudaError("gemm: need k <= x_stride <= 2^31-1" + shape());
  if (y_stride < n || y_stride > kMaxStride) throw CudaError("gemm: need n <= y_stride <= 2^31-1" + shape());
  if (m > 0 && (x == nullptr || w == nullptr || y == nullptr)) throw CudaError("gemm: null operand" + shape());
}

}  // namespace

struct Gemm::Impl {
  const blas::Api& api;
  GemmOptions options;
  blas::LtHandle lt = nullptr;
  blas::Handle handle = nullptr;
  void* workspace = nullptr;
  Stream bound_stream = nullptr;
  bool stream_bound = false;
  std::map<ShapeKey, Plan> plans;

  explicit Impl(const GemmOptions& o) : api(blas::api()), options(o) {}

  // Separate from the constructor so that ~Impl releases whatever a failed init made.
  void init() {
    if (options.workspace_bytes == 0) throw CudaError("Gemm: workspace_bytes must be > 0");
    int device = 0;
    check(cudaGetDevice(&device), "Gemm: cudaGetDevice");  // says "no device" plainly, before cuBLAS would
    const bool use_lt = options.backend != GemmBackend::kGemmEx && api.has_lt();
    const bool use_ex = options.backend != GemmBackend::kLt && api.has_blas();
    if (!use_lt && !use_ex) {
      throw CudaError(std::string("Gemm: the requested cuBLAS library is not loaded (") + cublas_library_info() + ")");
    }
    if (use_lt) check_status(api.lt_create(&lt), "cublasLtCreate");
    if (use_ex) {
      check_status(api.create(&handle), "cublasCreate_v2");
      check_status(api.set_math_mode(handle, blas::kMathDefaultFullPrecisionReduction), "cublasSetMathMode");
    }
    check(cudaMalloc(&workspace, options.workspace_bytes), "cudaMalloc (Gemm workspace)");
  }

  ~Impl() {
    for (auto& entry : plans) release(entry.second);
    if (lt != nullptr) api.lt_destroy(lt);
    if (handle != nullptr) api.destroy(handle);
    if (workspace != nullptr) cudaFree(workspace);  // synchronises: no queued GEMM still uses it
  }

  void release(Plan& plan) const {
    if (plan.a != nullptr) api.lt_matrix_layout_destroy(plan.a);
    if (plan.b != nullptr) api.lt_matrix_layout_destroy(plan.b);
    if (plan.c != nullptr) api.lt_matrix_layout_destroy(plan.c);
    if (plan.desc != nullptr) api.lt_matmul_desc_destroy(plan.desc);
    plan.a = plan.b = plan.c = nullptr;
    plan.desc = nullptr;
  }

  ShapeKey key(DType dtype, const void* x, int64_t x_stride, const void* w, const void* y, int64_t y_stride,
               int32_t m, int32_t n, int32_t k) const {
    const size_t elem = dtype_size(dtype);
    return ShapeKey{static_cast<int32_t>(dtype), m,  n, k, x_stride, y_stride, alignment(x, x_stride, elem),
                    alignment(w, k, elem),       alignment(y, y_stride, elem)};
  }

  const Plan& plan_for(const ShapeKey& key) {
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan plan = make_plan(key);
    return plans.emplace(key, plan).first->second;
  }

  Plan make_plan(const ShapeKey& key) {
    const DType dtype = static_cast<DType>(key.dtype);
    std::string refused;
    if (lt != nullptr) {
      std::vector<LtRoute> routes;
      if (dtype == DType::kF32) {
        routes.push_back({blas::kCompute32FPedantic, 0, "32F_PEDANTIC"});
        // Should a cuBLASLt build not offer the pedantic type, plain 32F with every algorithm
        // that converts inputs (TF32, bf16, fp16) filtered out computes the same fp32 products.
        routes.push_back({blas::kCompute32F, ~(blas::kImplInputTF32 | blas::kImplInput16BF | blas::kImplInput16F),
                          "32F(no TF32/16BF/16F inputs)"});
      } else {
        routes.push_back({blas::kCompute32F, 0, "32F"});
      }
      for (const LtRoute& route : routes) {
        Plan plan;
        std::string why;
        if (try_lt(key, route, plan, why)) {
          if (!refused.empty()) plan.description += " [after " + refused + "]";
          return plan;
        }
        refused += (refused.empty() ? "" : "; ") + std::string("cublasLt ") + route.name + ": " + why;
      }
    }
    if (handle != nullptr) {
      Plan plan;
      plan.compute = dtype == DType::kF32 ? blas::kCompute32FPedantic : blas::kCompute32F;
      plan.description = dtype == DType::kF32 ? "cublasGemmEx 32F_PEDANTIC" : "cublasGemmEx 32F";
      if (!refused.empty()) plan.description += " [after " + refused + "]";
      return plan;
    }
    throw CudaError("gemm: no cuBLAS route for " + shape_text(key) + ": " + refused);
  }

  bool try_lt(const ShapeKey& key, const LtRoute& route, Plan& plan, std::string& why) {
    const DType dtype = static_cast<DType>(key.dtype);
    const cudaDataType_t type = data_type(dtype);
    Plan made;
    blas::LtPreference pref = nullptr;
    const auto fail = [&](const char* what, blas::Status status) {
      why = std::string(what) + ": " + blas::status_name(status);
      if (pref != nullptr) api.lt_preference_destroy(pref);
      release(made);
      return false;
    };
    blas::Status s = api.lt_matmul_desc_create(&made.desc, route.compute, CUDA_R_32F);
    if (s != blas::kStatusSuccess) return fail("cublasLtMatmulDescCreate", s);
    const int32_t trans_a = blas::kOpT, trans_b = blas::kOpN;
    s = api.lt_matmul_desc_set_attribute(made.desc, blas::kDescTransA, &trans_a, sizeof(trans_a));
    if (s != blas::kStatusSuccess) return fail("cublasLtMatmulDescSetAttribute(TRANSA)", s);
    s = api.lt_matmul_desc_set_attribute(made.desc, blas::kDescTransB, &trans_b, sizeof(trans_b));
    if (s != blas::kStatusSuccess) return fail("cublasLtMatmulDescSetAttribute(TRANSB)", s);

    const auto u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
    s = api.lt_matrix_layout_create(&made.a, type, u64(key.k), u64(key.n), key.k);
    if (s != blas::kStatusSuccess) return fail("cublasLtMatrixLayoutCreate(A = w)", s);
    s = api.lt_matrix_layout_create(&made.b, type, u64(key.k), u64(key.m), key.x_stride);
    if (s != blas::kStatusSuccess) return fail("cublasLtMatrixLayoutCreate(B = x)", s);
    s = api.lt_matrix_layout_create(&made.c, type, u64(key.n), u64(key.m), key.y_stride);
    if (s != blas::kStatusSuccess) return fail("cublasLtMatrixLayoutCreate(C = D = y)", s);

    s = api.lt_preference_create(&pref);
    if (s != blas::kStatusSuccess) return fail("cublasLtMatmulPreferenceCreate", s);
    const uint64_t max_workspace = options.workspace_bytes;
    s = api.lt_preference_set_attribute(pref, blas::kPrefMaxWorkspaceBytes, &max_workspace, sizeof(max_workspace));
    if (s != blas::kStatusSuccess) return fail("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", s);
    // The heuristic assumes 256-byte aligned operands unless told otherwise, and its pick may
    // then fault or fail on a row slice or an odd k; tell it what these pointers guarantee.
    const struct {
      int32_t attr;
      uint32_t bytes;
      const char* name;
    } aligns[] = {{blas::kPrefMinAlignmentA, key.align_w, "MIN_ALIGNMENT_A_BYTES"},
                  {blas::kPrefMinAlignmentB, key.align_x, "MIN_ALIGNMENT_B_BYTES"},
                  {blas::kPrefMinAlignmentC, key.align_y, "MIN_ALIGNMENT_C_BYTES"},
                  {blas::kPrefMinAlignmentD, key.align_y, "MIN_ALIGNMENT_D_BYTES"}};
    for (const auto& a : aligns) {
      s = api.lt_preference_set_attribute(pref, a.attr, &a.bytes, sizeof(a.bytes));
      if (s != blas::kStatusSuccess) {
        const std::string what = std::string("cublasLtMatmulPreferenceSetAttribute(") + a.name + ")";
        return fail(what.c_str(), s);
      }
    }
    if (dtype != DType::kF32) {
      // Split-K partials of a 16-bit GEMM in fp32 only; INPLACE and OUTPUT_TYPE add them in bf16/fp16.
      const uint32_t mask = blas::kReductionComputeType;
      s = api.lt_preference_set_attribute(pref, blas::kPrefReductionSchemeMask, &mask, sizeof(mask));
      if (s != blas::kStatusSuccess) return fail("cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)", s);
    }
    if (route.impl_mask != 0) {
      s = api.lt_preference_set_attribute(pref, blas::kPrefImplMask, &route.impl_mask, sizeof(route.impl_mask));
      if (s != blas::kStatusSuccess) return fail("cublasLtMatmulPreferenceSetAttribute(IMPL_MASK)", s);
    }

    // One result requested, so the library writes one struct of its own size; the slack keeps a
    // future, longer cublasLtMatmulHeuristicResult_t inside this buffer.
    struct {
      blas::LtHeuristicResult result;
      unsigned char slack[256];
    } out{};
    int32_t returned = 0;
    s = api.lt_algo_get_heuristic(lt, made.desc, made.a, made.b, made.c, made.c, pref, 1, &out.result, &returned);
    if (s != blas::kStatusSuccess) return fail("cublasLtMatmulAlgoGetHeuristic", s);
    if (returned < 1) return fail("cublasLtMatmulAlgoGetHeuristic returned no algorithm", blas::kStatusNotSupported);
    if (out.result.state != blas::kStatusSuccess) return fail("heuristic result state", out.result.state);
    if (out.result.workspace_size > options.workspace_bytes) {
      return fail("heuristic result needs more workspace than allowed", blas::kStatusNotSupported);
    }
    api.lt_preference_destroy(pref);

    made.lt = true;
    made.algo = out.result.algo;
    made.description = std::string("cublasLt ") + route.name + " ws=" + std::to_string(out.result.workspace_size);
    plan = made;
    return true;
  }

  void bind_stream(Stream stream) {
    if (stream_bound && stream == bound_stream) return;
    check_status(api.set_stream(handle, stream), "cublasSetStream_v2");
    // cublasSetStream also resets the handle to cuBLAS's own workspace pool, which allocates
    // (not allowed during graph capture): point it back at ours every time.
    check_status(api.set_workspace(handle, workspace, options.workspace_bytes), "cublasSetWorkspace_v2");
    bound_stream = stream;
    stream_bound = true;
  }
};

Gemm::Gemm(const GemmOptions& options) : impl_(std::make_unique<Impl>(options)) { impl_->init(); }

Gemm::~Gemm() = default;

size_t Gemm::cached_shapes() const { return impl_->plans.size(); }

std::string Gemm::prepare(DType dtype, const void* x, int64_t x_stride, const void* w, const void* y,
                          int64_t y_stride, int32_t m, int32_t n, int32_t k) {
  validate(dtype, x, x_stride, w, y, y_stride, m, n, k);
  if (m == 0) return "nothing to do (m = 0)";
  return impl_->plan_for(impl_->key(dtype, x, x_stride, w, y, y_stride, m, n, k)).description;
}

void Gemm::matmul(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m,
                  int32_t n, int32_t k, Stream stream, float beta) {
  validate(dtype, x, x_stride, w, y, y_stride, m, n, k);
  if (m == 0) return;
  Impl& im = *impl_;
  const ShapeKey key = im.key(dtype, x, x_stride, w, y, y_stride, m, n, k);
  const Plan& plan = im.plan_for(key);
  const float alpha = 1.0f;  // host pointer mode: both scalars are read during the call, so locals are fine
  blas::Status s;
  if (plan.lt) {
    s = im.api.lt_matmul(im.lt, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c, &plan.algo,
                         im.workspace, im.options.workspace_bytes, stream);
  } else {
    im.bind_stream(stream);
    const cudaDataType_t type = data_type(dtype);
    s = im.api.gemm_ex(im.handle, blas::kOpT, blas::kOpN, n, m, k, &alpha, w, type, k, x, type,
                       static_cast<int32_t>(x_stride), &beta, y, type, static_cast<int32_t>(y_stride), plan.compute,
                       blas::kGemmDefault);
  }
  if (s != blas::kStatusSuccess) {
    throw CudaError(std::string(plan.lt ? "cublasLtMatmul" : "cublasGemmEx") + " (" + shape_text(key) + ", " +
                    plan.description + "): " + blas::status_name(s));
  }
}

}  // namespace strata::cuda
