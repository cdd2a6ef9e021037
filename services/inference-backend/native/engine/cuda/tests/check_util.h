// Shared by the GPU checks (check_*.cu): device buffers, fresh random inputs, poisoned outputs,
// float64 references compared by relative L2 error, and a report printed as a table and
// written as JSON. The checks need a GPU: without one they print why and exit 2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "strata/cuda_kernels.h"

namespace strata::cuda::checks {

#define STRATA_CK(call)                                                                          \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Exits 2 with the reason when there is no usable device, so a script can tell "no GPU" from
// "a check failed" (exit 1).
inline void require_device() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it happens, also into a log file
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr, "no CUDA device: %s\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    std::exit(2);
  }
  cudaDeviceProp prop{};
  STRATA_CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) { STRATA_CK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr); }
  void upload(const std::vector<T>& host) {
    STRATA_CK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count);
    STRATA_CK(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bits set: NaN in fp32, bf16 and fp16, so an element a kernel never wrote fails the check.
  void poison() { STRATA_CK(cudaMemset(ptr, 0xFF, std::max<size_t>(count, 1) * sizeof(T))); }
};

// Still the poison() pattern: an element nothing wrote.
template <typename T>
bool is_poison(T x) {
  T poison;
  std::memset(&poison, 0xFF, sizeof(T));
  return std::memcmp(&x, &poison, sizeof(T)) == 0;
}

// A fresh seed per run (printed, and settable with STRATA_CHECK_SEED to replay a failure).
inline uint64_t run_seed() {
  static const uint64_t seed = [] {
    const char* fixed = std::getenv("STRATA_CHECK_SEED");
    uint64_t s = fixed ? std::strtoull(fixed, nullptr, 10) : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    std::printf("seed: %llu (STRATA_CHECK_SEED=%llu replays this run)\n", static_cast<unsigned long long>(s),
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen(run_seed());
  return gen;
}

inline std::vector<float> random_floats(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng());
  return out;
}

inline int32_t random_int(int32_t lo, int32_t hi) {  // inclusive
  return std::uniform_int_distribution<int32_t>(lo, hi)(rng());
}

// Host values in a kernel dtype, and back: the reference is computed from the values the
// kernel actually sees (already rounded to the dtype).
template <typename T>
inline T to_dtype(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(x);
  else return __float2half(x);
}
template <typename T>
inline double to_double(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return __half2float(x);
}
template <typename T>
inline std::vector<T> convert(const std::vector<float>& xs) {
  std::vector<T> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) out[i] = to_dtype<T>(xs[i]);
  return out;
}
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::kBF16;
  else return DType::kF16;
}

// Where the kernel's result must land: float32 arithmetic far under 1e-3; a result stored in
// bf16 carries its rounding (2^-9 relative per element), fp16 2^-12.
template <typename T>
constexpr double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return 8e-3;
  else return 1e-3;
}

struct Comparison {
  double rel_l2 = 0.0;
  double max_abs = 0.0;
  size_t non_finite = 0;  // NaN/Inf in the result where the reference is finite: unwritten or broken
};

// ||got - ref|| / ||ref|| over the elements where `mask` is absent or true.
template <typename T>
Comparison compare(const std::vector<double>& ref, const std::vector<T>& got, const std::vector<bool>* mask = nullptr) {
  Comparison c;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (mask && !(*mask)[i]) continue;
    const double g = to_double(got[i]);
    if (!std::isfinite(g)) {
      ++c.non_finite;
      continue;
    }
    const double d = g - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    c.max_abs = std::max(c.max_abs, std::fabs(d));
  }
  c.rel_l2 = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

// A string as a JSON string's contents (the checks' and benchmarks' JSON name GPUs, models and shapes).
inline std::string json_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

struct Row {
  std::string check, dtype, shape;
  Comparison cmp;
  double tolerance;
  bool pass;
};

class Report {
 public:
  void add(const std::string& check, const std::string& dtype, const std::string& shape, const Comparison& cmp,
           double tol) {
    const bool pass = cmp.non_finite == 0 && cmp.rel_l2 <= tol;
    rows_.push_back({check, dtype, shape, cmp, tol, pass});
    std::printf("%-4s %-22s %-5s %-52s rel_l2 %.3e (tol %.0e) max_abs %.3e%s\n", pass ? "ok" : "FAIL", check.c_str(),
                dtype.c_str(), shape.c_str(), cmp.rel_l2, tol, cmp.max_abs,
                cmp.non_finite ? (" non-finite " + std::to_string(cmp.non_finite)).c_str() : "");
  }
  // Exact checks (token ids, copies): pass or fail with a note.
  void add_exact(const std::string& check, const std::string& dtype, const std::string& shape, bool pass) {
    rows_.push_back({check, dtype, shape, {}, 0.0, pass});
    std::printf("%-4s %-22s %-5s %-52s exact\n", pass ? "ok" : "FAIL", check.c_str(), dtype.c_str(), shape.c_str());
  }
  int failures() const {
    int n = 0;
    for (const Row& r : rows_) n += r.pass ? 0 : 1;
    return n;
  }
  // Summary line plus the JSON file named by STRATA_CHECK_JSON (if set). Returns the exit code.
  int finish(const char* program) const {
    std::printf("%s: %zu checks, %d failed, seed %llu\n", program, rows_.size(), failures(),
                static_cast<unsigned long long>(run_seed()));
    if (const char* path = std::getenv("STRATA_CHECK_JSON")) {
      std::ofstream out(path);
      out << "{\"program\":\"" << program << "\",\"seed\":" << run_seed() << ",\"rows\":[";
      for (size_t i = 0; i < rows_.size(); ++i) {
        const Row& r = rows_[i];
        out << (i ? "," : "") << "{\"check\":\"" << json_escape(r.check) << "\",\"dtype\":\"" << r.dtype
            << "\",\"shape\":\"" << json_escape(r.shape) << "\",\"rel_l2\":" << r.cmp.rel_l2 << ",\"max_abs\":" << r.cmp.max_abs
            << ",\"non_finite\":" << r.cmp.non_finite << ",\"tolerance\":" << r.tolerance
            << ",\"pass\":" << (r.pass ? "true" : "false") << "}";
      }
      out << "]}\n";
    }
    return failures() == 0 ? 0 : 1;
  }

 private:
  std::vector<Row> rows_;
};

// A benchmark's main: run(argc, argv), with an exception reported as "error: ..." and exit 1.
inline int main_reporting_errors(int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace strata::cuda::checks
