// How close the GEMM layer (cuda_gemm.h, bf16) comes to the two ceilings it is bounded by, both
// measured here rather than taken from a datasheet:
//   - memory: a 1 GiB device-to-device cudaMemcpyAsync, counting bytes read plus written;
//   - matrix math: cuBLAS's bf16 rate on 8192 x 8192 x 8192.
// Then the Llama-3-8B projections (qkv 6144x4096, o 4096x4096, gate_up 28672x4096,
// down 4096x14336, lm_head 128256x4096): decode batches m = 1..128, which should stream the
// weight at close to copy bandwidth, and prefill m = 8192, which should compute at close to the
// 8192^3 rate.
//
// Method: random (never zero) data; every shape rotates among enough input sets that together
// they are ten times the L2, so each launch reads DRAM; a warm-up run per set outside timing
// (plan, module load); each timed sample is one replay of a CUDA graph of back-to-back matmuls
// (what the engine replays in decode), timed with events; the median of 25 samples is reported,
// with the eager (uncaptured) launch time beside it.
//   bench_cuda_gemm [out.json]    (or STRATA_BENCH_JSON=out.json; STRATA_CUBLAS_DIR=dir for cuBLAS)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "check_util.h"
#include "strata/cuda_gemm.h"

using namespace strata::cuda;
using namespace strata::cuda::checks;
using namespace strata::cuda::bench;

namespace {

constexpr size_t kCopyBytes = size_t{1} << 30;
constexpr size_t kRotateBytes = size_t{512} << 20;  // H100 L2 is 50 MiB
constexpr int kSamples = 25;
constexpr int kEagerSamples = 10;
constexpr double kGraphTargetUs = 2000.0;  // matmuls per graph: enough to make event resolution negligible
constexpr int kMaxGraphIters = 256;

struct GemmResult {
  std::string name, route;
  int32_t m = 0, n = 0, k = 0;
  int sets = 0, graph_iters = 0;
  double graph_us = 0, graph_min_us = 0, eager_us = 0;
  double weight_gbps = 0, total_gbps = 0, tflops = 0;
};

// One shape, y = x · wᵀ in bf16, timed as described at the top.
GemmResult measure_gemm(Gemm& gemm, const std::string& name, int32_t m, int32_t n, int32_t k, cudaStream_t stream) {
  const DType dt = DType::kBF16;
  const size_t x_elems = size_t(m) * k, w_elems = size_t(n) * k, y_elems = size_t(m) * n;
  const size_t x_bytes = round256(x_elems * 2), w_bytes = round256(w_elems * 2), y_bytes = round256(y_elems * 2);
  const size_t set_bytes = x_bytes + w_bytes + y_bytes;
  const int sets = int(std::clamp<size_t>((kRotateBytes + set_bytes - 1) / set_bytes, 2, 64));
  DeviceBuffer<char> pool(set_bytes * sets);
  std::vector<__nv_bfloat16*> xs(sets), ws(sets), ys(sets);
  for (int s = 0; s < sets; ++s) {
    char* base = pool.ptr + set_bytes * s;
    xs[s] = reinterpret_cast<__nv_bfloat16*>(base);
    ws[s] = reinterpret_cast<__nv_bfloat16*>(base + x_bytes);
    ys[s] = reinterpret_cast<__nv_bfloat16*>(base + x_bytes + w_bytes);
    fill(xs[s], x_elems, 2 * s + 1);
    fill(ws[s], w_elems, 2 * s + 2);
  }
  STRATA_CK(cudaDeviceSynchronize());

  GemmResult r;
  r.name = name;
  r.m = m, r.n = n, r.k = k, r.sets = sets;
  r.route = gemm.prepare(dt, xs[0], k, ws[0], ys[0], n, m, n, k);
  const auto launch = [&](int i) { gemm.matmul(dt, xs[i % sets], k, ws[i % sets], ys[i % sets], n, m, n, k, stream); };

  // Warm-up, and a first estimate from an eager pass over every set.
  for (int s = 0; s < sets; ++s) launch(s);
  Events ev;
  STRATA_CK(cudaEventRecord(ev.start, stream));
  for (int s = 0; s < sets; ++s) launch(s);
  STRATA_CK(cudaEventRecord(ev.stop, stream));
  const double estimate_us = std::max(1.0, 1e3 * ev.ms() / sets);
  const int iters = int(std::clamp(std::ceil(kGraphTargetUs / estimate_us), 1.0, double(kMaxGraphIters)));
  r.graph_iters = iters;

  std::vector<double> eager;
  for (int rep = 0; rep < kEagerSamples; ++rep) {
    STRATA_CK(cudaEventRecord(ev.start, stream));
    for (int i = 0; i < iters; ++i) launch(rep * iters + i);
    STRATA_CK(cudaEventRecord(ev.stop, stream));
    eager.push_back(1e3 * ev.ms() / iters);
  }
  r.eager_us = median(eager);

  cudaGraphExec_t exec = capture_graph(launch, iters, stream);
  for (int i = 0; i < 2; ++i) STRATA_CK(cudaGraphLaunch(exec, stream));
  std::vector<double> replay;
  for (int rep = 0; rep < kSamples; ++rep) {
    STRATA_CK(cudaEventRecord(ev.start, stream));
    STRATA_CK(cudaGraphLaunch(exec, stream));
    STRATA_CK(cudaEventRecord(ev.stop, stream));
    replay.push_back(1e3 * ev.ms() / iters);
  }
  STRATA_CK(cudaGraphExecDestroy(exec));
  STRATA_CK(cudaStreamSynchronize(stream));

  r.graph_us = median(replay);
  r.graph_min_us = *std::min_element(replay.begin(), replay.end());
  const double seconds = r.graph_us * 1e-6;
  r.weight_gbps = double(w_elems) * 2 / seconds / 1e9;
  r.total_gbps = double(x_elems + w_elems + y_elems) * 2 / seconds / 1e9;
  r.tflops = 2.0 * m * double(n) * k / seconds / 1e12;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  require_device();
  cudaDeviceProp prop{};
  STRATA_CK(cudaGetDeviceProperties(&prop, 0));
  const char* json_path = argc > 1 ? argv[1] : std::getenv("STRATA_BENCH_JSON");
  std::printf("bench seed %llu\n", static_cast<unsigned long long>(bench_seed()));

  struct Weight {
    const char* name;
    int32_t n, k;
  };
  const Weight weights[] = {{"qkv", 6144, 4096},
                            {"o", 4096, 4096},
                            {"gate_up", 28672, 4096},
                            {"down", 4096, 14336},
                            {"lm_head", 128256, 4096}};
  const int32_t decode_ms[] = {1, 8, 32, 64, 128};
  constexpr int32_t kPrefillM = 8192;

  CopyResult copy;
  GemmResult peak;
  std::vector<GemmResult> rows;
  std::string library;
  try {
    library = cublas_library_info();
    std::printf("%s\n", library.c_str());
    cudaStream_t stream = nullptr;
    STRATA_CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Gemm gemm;
    copy = measure_copy(stream, kCopyBytes, kSamples);
    std::printf("copy: %.1f GB/s (median %.3f ms for %zu MiB read + written)\n", copy.gbps, copy.median_ms,
                2 * kCopyBytes >> 20);
    peak = measure_gemm(gemm, "square", 8192, 8192, 8192, stream);
    std::printf("bf16 8192^3: %.1f TFLOP/s (%s)\n", peak.tflops, peak.route.c_str());
    for (const Weight& w : weights) {
      for (const int32_t m : decode_ms) {
        rows.push_back(measure_gemm(gemm, w.name, m, w.n, w.k, stream));
        std::printf("  %-8s m=%-5d %9.2f us  route %s\n", w.name, m, rows.back().graph_us, rows.back().route.c_str());
      }
      rows.push_back(measure_gemm(gemm, w.name, kPrefillM, w.n, w.k, stream));
      std::printf("  %-8s m=%-5d %9.2f us  route %s\n", w.name, kPrefillM, rows.back().graph_us,
                  rows.back().route.c_str());
    }
    STRATA_CK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_gemm: %s\n", e.what());
    return 1;
  }

  if (json_path != nullptr) {
    std::ofstream out(json_path);
    out << "{\"program\":\"bench_cuda_gemm\",\"device\":\"" << json_escape(prop.name) << "\",\"sms\":"
        << prop.multiProcessorCount << ",\"cublas\":\"" << json_escape(library) << "\",\"seed\":" << bench_seed()
        << ",\"copy\":{\"bytes_moved\":" << 2 * kCopyBytes << ",\"median_ms\":" << copy.median_ms
        << ",\"min_ms\":" << copy.min_ms << ",\"gbps\":" << copy.gbps << "},\"peak\":{\"m\":" << peak.m
        << ",\"n\":" << peak.n << ",\"k\":" << peak.k << ",\"us\":" << peak.graph_us << ",\"tflops\":" << peak.tflops
        << ",\"route\":\"" << json_escape(peak.route) << "\"},\"rows\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const GemmResult& r = rows[i];
      const bool prefill = r.m == kPrefillM;
      out << (i ? "," : "") << "{\"weight\":\"" << r.name << "\",\"phase\":\"" << (prefill ? "prefill" : "decode")
          << "\",\"m\":" << r.m << ",\"n\":" << r.n << ",\"k\":" << r.k << ",\"us\":" << r.graph_us
          << ",\"min_us\":" << r.graph_min_us << ",\"eager_us\":" << r.eager_us << ",\"graph_iters\":" << r.graph_iters
          << ",\"sets\":" << r.sets << ",\"weight_gbps\":" << r.weight_gbps << ",\"total_gbps\":" << r.total_gbps
          << ",\"frac_copy\":" << r.weight_gbps / copy.gbps << ",\"tflops\":" << r.tflops
          << ",\"frac_peak\":" << r.tflops / peak.tflops << ",\"route\":\"" << json_escape(r.route) << "\"}";
    }
    out << "]}\n";
    std::printf("wrote %s\n", json_path);
  }

  std::printf("\n%s, %d SMs: copy %.0f GB/s (read + write), bf16 8192^3 %.1f TFLOP/s (%.1f us)\n", prop.name,
              prop.multiProcessorCount, copy.gbps, peak.tflops, peak.graph_us);
  std::printf("%-8s %5s %6s %6s %10s %10s %11s %7s %8s %7s\n", "weight", "m", "n", "k", "graph_us", "eager_us",
              "weight_GB/s", "%copy", "TFLOP/s", "%peak");
  for (const GemmResult& r : rows) {
    std::printf("%-8s %5d %6d %6d %10.2f %10.2f %11.1f %6.1f%% %8.1f %6.1f%%\n", r.name.c_str(), r.m, r.n, r.k,
                r.graph_us, r.eager_us, r.weight_gbps, 100.0 * r.weight_gbps / copy.gbps, r.tflops,
                100.0 * r.tflops / peak.tflops);
  }

  // The same, one line per weight, short enough to survive a log tail.
  std::printf("\nsummary: decode = us per GEMM (graph) and weight bytes/s as %% of copy; prefill = %% of 8192^3\n");
  std::printf("%-8s %13s", "weight", "n x k");
  for (const int32_t m : decode_ms) std::printf(" %14s", ("m=" + std::to_string(m)).c_str());
  std::printf(" | prefill m=%d\n", kPrefillM);
  const size_t per_weight = std::size(decode_ms) + 1;
  for (size_t wi = 0; wi < std::size(weights); ++wi) {
    std::printf("%-8s %6dx%-6d", weights[wi].name, weights[wi].n, weights[wi].k);
    for (size_t j = 0; j < std::size(decode_ms); ++j) {
      const GemmResult& r = rows[wi * per_weight + j];
      std::printf(" %7.1fus %3.0f%%", r.graph_us, 100.0 * r.weight_gbps / copy.gbps);
    }
    const GemmResult& p = rows[wi * per_weight + std::size(decode_ms)];
    std::printf(" | %6.1f TFLOP/s %3.0f%%\n", p.tflops, 100.0 * p.tflops / peak.tflops);
  }
  std::printf("ceilings: copy %.0f GB/s, bf16 8192^3 %.1f TFLOP/s\n", copy.gbps, peak.tflops);
  return 0;
}
