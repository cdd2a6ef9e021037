// Checks Gemm::matmul (cuda_gemm.h) against a float64 reference on fresh random inputs, for f32,
// bf16 and f16: m from 1 to 129, odd n and k, x as a slice of wider rows, y written into wider
// rows whose padding must stay untouched, beta = 1 accumulation, m = 0, a Llama-3-8B projection,
// and matmuls replayed from a captured CUDA graph. Every case runs through the default route
// (cuBLASLt, per-shape fallback to cublasGemmEx) and through cublasGemmEx alone. f32 must land
// under 1e-5, which TF32 (about 3e-4) cannot. Outputs are poisoned (NaN) first.
//   check_cuda_gemm   (STRATA_CHECK_SEED=N replays a run, STRATA_CHECK_JSON=path writes the rows,
//                      STRATA_CUBLAS_DIR=dir names where libcublasLt.so.13 / libcublas.so.13 are)
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "check_util.h"
#include "strata/cuda_gemm.h"

using namespace strata::cuda;
using namespace strata::cuda::checks;

namespace {

Report report;

struct Case {
  int32_t m, n, k;
  int64_t x_stride, y_stride;
  float beta;
};

std::string case_text(const Case& c) {
  std::string s = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
  if (c.x_stride != c.k) s += " xs=" + std::to_string(c.x_stride);
  if (c.y_stride != c.n) s += " ys=" + std::to_string(c.y_stride);
  if (c.beta != 0.0f) s += " beta=1";
  return s;
}

// Captures one matmul on `stream` into a graph and launches it once. The capture is always
// ended, so a throwing matmul leaves the stream usable.
void run_in_graph(Gemm& gemm, DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride,
                  const Case& c, cudaStream_t stream) {
  STRATA_CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  std::exception_ptr failure;
  try {
    gemm.matmul(dtype, x, x_stride, w, y, y_stride, c.m, c.n, c.k, stream, c.beta);
  } catch (...) {
    failure = std::current_exception();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (failure) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    std::rethrow_exception(failure);
  }
  if (end != cudaSuccess) throw CudaError(std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end));
  cudaGraphExec_t exec = nullptr;
  STRATA_CK(cudaGraphInstantiate(&exec, graph, 0));
  STRATA_CK(cudaGraphLaunch(exec, stream));
  STRATA_CK(cudaStreamSynchronize(stream));
  STRATA_CK(cudaGraphExecDestroy(exec));
  STRATA_CK(cudaGraphDestroy(graph));
}

template <typename T>
void check_case(Gemm& gemm, const std::string& name, const Case& c, bool graph, cudaStream_t stream,
                std::string& last_route) {
  const DType dtype = dtype_of<T>();
  const std::string dtype_text = dtype_name(dtype);
  const std::string shape = case_text(c) + (graph ? " graph" : "");
  const size_t rows = c.m > 0 ? size_t(c.m) : 1;  // m = 0 still gets a (poisoned) row to watch
  try {
    // x: real values in the first k columns, a large finite sentinel past them, so a kernel that
    // reads the wrong stride gets a visibly wrong answer (NaN could hide behind masked loads).
    std::vector<T> x(rows * size_t(c.x_stride), to_dtype<T>(1000.0f));
    const std::vector<T> x_vals = convert<T>(random_floats(rows * size_t(c.k)));
    for (size_t i = 0; i < rows; ++i)
      for (int32_t kk = 0; kk < c.k; ++kk) x[i * c.x_stride + kk] = x_vals[i * c.k + kk];
    const std::vector<T> w = convert<T>(random_floats(size_t(c.n) * c.k));
    // y: NaN everywhere; with beta = 1 the real columns start from random values instead.
    std::vector<T> y0(rows * size_t(c.y_stride));
    std::memset(y0.data(), 0xFF, y0.size() * sizeof(T));
    if (c.beta != 0.0f) {
      const std::vector<T> y_vals = convert<T>(random_floats(rows * size_t(c.n)));
      for (size_t i = 0; i < rows; ++i)
        for (int32_t j = 0; j < c.n; ++j) y0[i * c.y_stride + j] = y_vals[i * c.n + j];
    }

    DeviceBuffer<T> d_x(x.size()), d_w(w.size()), d_y(y0.size());
    d_x.upload(x);
    d_w.upload(w);
    d_y.upload(y0);

    const std::string route = gemm.prepare(dtype, d_x.ptr, c.x_stride, d_w.ptr, d_y.ptr, c.y_stride, c.m, c.n, c.k);
    if (route != last_route) {
      std::printf("     route %s %s: %s\n", name.c_str(), dtype_text.c_str(), route.c_str());
      last_route = route;
    }
    STRATA_CK(cudaDeviceSynchronize());  // uploads (legacy stream) before work on `stream`
    if (graph) {
      // Warm outside the capture (plan cached, kernel module loaded), then restore y and replay.
      const size_t shapes = gemm.cached_shapes();
      gemm.matmul(dtype, d_x.ptr, c.x_stride, d_w.ptr, d_y.ptr, c.y_stride, c.m, c.n, c.k, stream, c.beta);
      STRATA_CK(cudaStreamSynchronize(stream));
      d_y.upload(y0);
      STRATA_CK(cudaDeviceSynchronize());
      run_in_graph(gemm, dtype, d_x.ptr, c.x_stride, d_w.ptr, d_y.ptr, c.y_stride, c, stream);
      report.add_exact(name + " no new plan", dtype_text, shape, gemm.cached_shapes() == shapes);
    } else {
      gemm.matmul(dtype, d_x.ptr, c.x_stride, d_w.ptr, d_y.ptr, c.y_stride, c.m, c.n, c.k, stream, c.beta);
      STRATA_CK(cudaStreamSynchronize(stream));
    }
    STRATA_CK(cudaGetLastError());
    const std::vector<T> y = d_y.download();

    std::vector<double> xd(size_t(c.m) * c.k), wd(w.size());
    for (size_t i = 0; i < xd.size(); ++i) xd[i] = to_double(x_vals[i]);
    for (size_t i = 0; i < wd.size(); ++i) wd[i] = to_double(w[i]);
    std::vector<double> ref(size_t(c.m) * c.n);
    std::vector<T> got(ref.size());
    for (int32_t i = 0; i < c.m; ++i) {
      const double* xr = &xd[size_t(i) * c.k];
      for (int32_t j = 0; j < c.n; ++j) {
        const double* wr = &wd[size_t(j) * c.k];
        double sum = 0.0;
        for (int32_t kk = 0; kk < c.k; ++kk) sum += xr[kk] * wr[kk];
        if (c.beta != 0.0f) sum += double(c.beta) * to_double(y0[size_t(i) * c.y_stride + j]);
        ref[size_t(i) * c.n + j] = sum;
        got[size_t(i) * c.n + j] = y[size_t(i) * c.y_stride + j];
      }
    }
    report.add(name, dtype_text, shape, compare(ref, got), tolerance<T>());
    if (c.y_stride != c.n || c.m == 0) {
      bool untouched = true;
      for (size_t i = 0; i < rows; ++i)
        for (int64_t j = c.m == 0 ? 0 : c.n; j < c.y_stride; ++j) untouched = untouched && is_poison(y[i * c.y_stride + j]);
      report.add_exact(name + " y padding kept", dtype_text, shape, untouched);
    }
  } catch (const std::exception& e) {
    std::printf("FAIL %s %s %s: %s\n", name.c_str(), dtype_text.c_str(), shape.c_str(), e.what());
    report.add_exact(name + " threw", dtype_text, shape, false);
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // m across the tile sizes, odd n and k (no vectorised path fits them exactly).
      {1, 257, 193, 193, 257, 0.0f},
      {3, 257, 193, 193, 257, 0.0f},
      {17, 257, 193, 193, 257, 0.0f},
      {64, 257, 193, 193, 257, 0.0f},
      {129, 257, 193, 193, 257, 0.0f},
      {17, 512, 256, 256, 512, 0.0f},
      // x as a slice of wider rows: odd pitch, then an aligned one (q read out of a fused qkv row).
      {33, 257, 193, 301, 257, 0.0f},
      {16, 512, 256, 768, 512, 0.0f},
      // y written into wider rows: odd pitch, then an aligned slice.
      {17, 257, 193, 193, 300, 0.0f},
      {16, 512, 256, 256, 1536, 0.0f},
      // Accumulation into y (a residual add folded into the GEMM).
      {17, 257, 193, 193, 257, 1.0f},
      {64, 512, 256, 256, 512, 1.0f},
      {0, 257, 193, 193, 257, 0.0f},
      // Llama-3-8B o_proj / decode batch of 8.
      {8, 4096, 4096, 4096, 4096, 0.0f},
  };
  return all;
}

template <typename T>
void check_dtype(Gemm& gemm, const std::string& name, cudaStream_t stream, bool expect_lt) {
  std::string last_route;
  for (const Case& c : cases()) check_case<T>(gemm, name, c, false, stream, last_route);
  check_case<T>(gemm, name + " graph", {3, 257, 193, 193, 257, 0.0f}, true, stream, last_route);
  check_case<T>(gemm, name + " graph", {8, 4096, 4096, 4096, 4096, 1.0f}, true, stream, last_route);
  if (expect_lt) {
    // The default route must serve an aligned Llama shape with cuBLASLt (for f32, either of its two
    // fp32 routes); cublasGemmEx there means cuBLASLt refused something (the line printed says what).
    DeviceBuffer<T> x(size_t(8) * 4096), w(size_t(4096) * 4096), y(size_t(8) * 4096);
    std::string route;
    try {
      route = gemm.prepare(dtype_of<T>(), x.ptr, 4096, w.ptr, y.ptr, 4096, 8, 4096, 4096);
    } catch (const std::exception& e) {
      route = e.what();
    }
    const bool lt = route.rfind("cublasLt", 0) == 0;
    if (!lt || dtype_of<T>() == DType::kF32) std::printf("     llama route %s: %s\n", dtype_name(dtype_of<T>()), route.c_str());
    report.add_exact(name + " uses cublasLt", dtype_name(dtype_of<T>()), "m=8 n=4096 k=4096", lt);
  }
}

void check_backend(GemmBackend backend, const std::string& name, cudaStream_t stream) {
  std::unique_ptr<Gemm> gemm;
  try {
    gemm = std::make_unique<Gemm>(GemmOptions{backend, size_t{32} << 20});
  } catch (const std::exception& e) {
    if (backend == GemmBackend::kGemmEx) {  // libcublas absent but cuBLASLt present: the fallback cannot exist
      std::printf("skip %s: %s\n", name.c_str(), e.what());
      return;
    }
    std::printf("FAIL %s: %s\n", name.c_str(), e.what());
    report.add_exact(name + " construct", "-", "-", false);
    return;
  }
  const bool expect_lt = backend == GemmBackend::kAuto;
  check_dtype<float>(*gemm, name, stream, expect_lt);
  check_dtype<__nv_bfloat16>(*gemm, name, stream, expect_lt);
  check_dtype<__half>(*gemm, name, stream, expect_lt);
}

}  // namespace

int main() {
  require_device();
  run_seed();
  try {
    std::printf("%s\n", cublas_library_info().c_str());
  } catch (const std::exception& e) {
    std::printf("FAIL loading cuBLAS: %s\n", e.what());
    report.add_exact("load cuBLAS", "-", "-", false);
    return report.finish("check_cuda_gemm");
  }
  cudaStream_t stream = nullptr;
  STRATA_CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));  // capturable, unlike the legacy stream
  check_backend(GemmBackend::kAuto, "gemm", stream);
  check_backend(GemmBackend::kGemmEx, "gemm/ex", stream);
  STRATA_CK(cudaStreamDestroy(stream));
  return report.finish("check_cuda_gemm");
}
