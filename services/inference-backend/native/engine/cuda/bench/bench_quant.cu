// The quantized GEMM (cuda_quant.h) on Llama-3-8B shapes, next to the two ceilings measured in
// the same run: memory bandwidth (a 1 GiB device-to-device cudaMemcpyAsync, bytes read plus
// written) and cuBLAS's bf16 GEMM of the same (m, n, k) (cuda_gemm.h). Shapes: k = 4096 with
// n = 4096 (o), 14336 (gate or up), 1024 (k or v), and k = 14336 with n = 4096 (down); m = 1, 8
// (decode: the weights should stream at close to copy bandwidth), 64, 256, 512 (toward prefill:
// compared with cuBLAS's TFLOP/s); Q4_0, Q4_1 and Q8_0 with bf16 activations. Then the decode
// GEMV's warps a block (QuantGemmArgs::gemv_warps: the k split) swept for Q4_0 at m = 1 on the
// backend's q/k/v, o, fused gate/up and down shapes, each with one and with two chunks a warp in
// flight (QuantGemmArgs::gemv_prefetch).
//
// Method (as bench_gemm.cu): random weights (random quant bytes, fp16 scales in [-0.05, 0.05])
// generated on the device in the GPU layout; each shape rotates among enough weight/x/y sets
// that together they are ten times the L2, so each launch reads DRAM; a warm-up pass per set; a
// timed sample is one replay of a CUDA graph of back-to-back launches (as the engine replays
// decode), timed with events; the median of 25 samples, with the eager launch time beside it.
// Weight GB/s counts the quantized matrix's bytes once per GEMM; "% copy" divides that by the
// copy's rate (a read-only stream can come out slightly above 100%).
//   bench_cuda_quant [out.json]   (or STRATA_BENCH_JSON=out.json; STRATA_CUBLAS_DIR=dir for cuBLAS;
//                                  STRATA_BENCH_SMOKE=1: tiny shapes, a smoke run of this code)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "check_util.h"
#include "strata/cuda_gemm.h"
#include "strata/cuda_quant.h"

using namespace strata;
using namespace strata::cuda;
using namespace strata::cuda::checks;
using namespace strata::cuda::bench;

namespace {

struct Settings {
  size_t copy_bytes = size_t{1} << 30;
  size_t rotate_bytes = size_t{512} << 20;  // H100 L2 is 50 MiB
  int samples = 25;
  int eager_samples = 10;
  double graph_target_us = 2000.0;
  int max_graph_iters = 256;
};
Settings settings;

// Random words (the quant bytes), and fp16 values uniform in [-scale, scale) (the scales).
__global__ void fill_words(uint32_t* out, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    out[i] = uint32_t(random_bits(seed, i));
  }
}
__global__ void fill_halves(__half* out, size_t n, float scale, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    out[i] = __float2half_rn(scale * (2.0f * random_unit(seed, i) - 1.0f));
  }
}

// A quantized (n, k) matrix of random blocks, written straight in the GPU layout.
void fill_quant(QuantType type, int32_t n, int32_t k, uint8_t* p, uint64_t salt) {
  const int64_t total = quant_gpu_bytes(type, n, k);
  const int64_t rows = (n + kQuantTileRows - 1) / kQuantTileRows * kQuantTileRows;
  const int64_t scale_bytes = rows * (k / 32) * 2 * (type == QuantType::Q4_1 ? 2 : 1);
  fill_words<<<1024, 256>>>(reinterpret_cast<uint32_t*>(p), size_t(total - scale_bytes) / 4, bench_seed() ^ salt);
  STRATA_CK(cudaGetLastError());
  fill_halves<<<1024, 256>>>(reinterpret_cast<__half*>(p + total - scale_bytes), size_t(scale_bytes) / 2, 0.05f,
                             bench_seed() ^ salt ^ 0x5555);
  STRATA_CK(cudaGetLastError());
}

struct Timing {
  double graph_us = 0, eager_us = 0;
  int iters = 0;
};

// launch(i) enqueues one GEMM on input set i % sets; timed as described at the top.
Timing time_launches(const std::function<void(int)>& launch, int sets, cudaStream_t stream) {
  for (int s = 0; s < sets; ++s) launch(s);  // warm-up: module load, cuBLAS plans
  Events ev;
  STRATA_CK(cudaEventRecord(ev.start, stream));
  for (int s = 0; s < sets; ++s) launch(s);
  STRATA_CK(cudaEventRecord(ev.stop, stream));
  const double estimate_us = std::max(1.0, 1e3 * ev.ms() / sets);
  Timing t;
  t.iters = int(std::clamp(std::ceil(settings.graph_target_us / estimate_us), 1.0, double(settings.max_graph_iters)));
  std::vector<double> eager;
  for (int rep = 0; rep < settings.eager_samples; ++rep) {
    STRATA_CK(cudaEventRecord(ev.start, stream));
    for (int i = 0; i < t.iters; ++i) launch(rep * t.iters + i);
    STRATA_CK(cudaEventRecord(ev.stop, stream));
    eager.push_back(1e3 * ev.ms() / t.iters);
  }
  t.eager_us = median(eager);
  cudaGraphExec_t exec = capture_graph(launch, t.iters, stream);
  for (int i = 0; i < 2; ++i) STRATA_CK(cudaGraphLaunch(exec, stream));
  std::vector<double> replay;
  for (int rep = 0; rep < settings.samples; ++rep) {
    STRATA_CK(cudaEventRecord(ev.start, stream));
    STRATA_CK(cudaGraphLaunch(exec, stream));
    STRATA_CK(cudaEventRecord(ev.stop, stream));
    replay.push_back(1e3 * ev.ms() / t.iters);
  }
  STRATA_CK(cudaGraphExecDestroy(exec));
  STRATA_CK(cudaStreamSynchronize(stream));
  t.graph_us = median(replay);
  return t;
}

int sets_for(size_t set_bytes) {
  return int(std::clamp<size_t>((settings.rotate_bytes + set_bytes - 1) / set_bytes, 2, 64));
}

struct Row {
  std::string shape, kind, route;  // kind: Q4_0 / Q4_1 / Q8_0 / "bf16" (cuBLAS)
  int32_t m = 0, n = 0, k = 0;
  Timing t;
  double weight_bytes = 0, weight_gbps = 0, tflops = 0;
  double cublas_us = 0, cublas_tflops = 0;  // the bf16 cuBLAS row of the same shape (0 when absent)
};

Row measure_quant(QuantType type, const std::string& shape, int32_t m, int32_t n, int32_t k, cudaStream_t stream,
                  int32_t warps = 0, int32_t prefetch = 0) {
  const size_t w_bytes = round256(size_t(quant_gpu_bytes(type, n, k)));
  const size_t x_bytes = round256(size_t(m) * k * 2), y_bytes = round256(size_t(m) * n * 2);
  const size_t set_bytes = w_bytes + x_bytes + y_bytes;
  const int sets = sets_for(set_bytes);
  DeviceBuffer<char> pool(set_bytes * sets);
  for (int s = 0; s < sets; ++s) {
    char* base = pool.ptr + set_bytes * s;
    fill_quant(type, n, k, reinterpret_cast<uint8_t*>(base), 2 * s + 1);
    fill(reinterpret_cast<__nv_bfloat16*>(base + w_bytes), size_t(m) * k, 2 * s + 2);
  }
  const int64_t ws_floats = quant_gemm_workspace_floats(m, n, k);
  DeviceBuffer<float> ws(size_t(std::max<int64_t>(ws_floats, 1)));
  STRATA_CK(cudaDeviceSynchronize());
  QuantGemmArgs a;
  a.dtype = DType::kBF16;
  a.x_stride = k;
  a.w = QuantWeight{type, n, k, nullptr};
  a.y_stride = n;
  a.m = m;
  a.workspace = ws_floats > 0 ? ws.ptr : nullptr;
  a.workspace_floats = ws_floats;
  a.gemv_warps = warps;
  a.gemv_prefetch = prefetch;
  auto args_for = [&](int i) {
    QuantGemmArgs b = a;
    char* base = pool.ptr + set_bytes * (i % sets);
    b.w.data = base;
    b.x = base + w_bytes;
    b.y = base + w_bytes + x_bytes;
    return b;
  };
  Row r;
  r.shape = shape;
  r.kind = [&] {
    switch (type) {
      case QuantType::Q4_0: return "Q4_0";
      case QuantType::Q4_1: return "Q4_1";
      case QuantType::Q8_0: return "Q8_0";
    }
    return "?";
  }();
  r.m = m, r.n = n, r.k = k;
  const std::string described = quant_gemm_describe(args_for(0));
  r.route = described.substr(described.find(' ', described.find(' ') + 1) + 1);
  r.t = time_launches([&](int i) { quant_gemm(args_for(i), stream); }, sets, stream);
  r.weight_bytes = double(quant_gpu_bytes(type, n, k));
  r.weight_gbps = r.weight_bytes / (r.t.graph_us * 1e-6) / 1e9;
  r.tflops = 2.0 * m * double(n) * k / (r.t.graph_us * 1e-6) / 1e12;
  return r;
}

Row measure_cublas(Gemm& gemm, const std::string& shape, int32_t m, int32_t n, int32_t k, cudaStream_t stream) {
  const size_t x_bytes = round256(size_t(m) * k * 2), w_bytes = round256(size_t(n) * k * 2),
               y_bytes = round256(size_t(m) * n * 2);
  const size_t set_bytes = x_bytes + w_bytes + y_bytes;
  const int sets = sets_for(set_bytes);
  DeviceBuffer<char> pool(set_bytes * sets);
  std::vector<__nv_bfloat16*> xs(sets), ws(sets), ys(sets);
  for (int s = 0; s < sets; ++s) {
    char* base = pool.ptr + set_bytes * s;
    xs[s] = reinterpret_cast<__nv_bfloat16*>(base);
    ws[s] = reinterpret_cast<__nv_bfloat16*>(base + x_bytes);
    ys[s] = reinterpret_cast<__nv_bfloat16*>(base + x_bytes + w_bytes);
    fill(xs[s], size_t(m) * k, 2 * s + 1);
    fill(ws[s], size_t(n) * k, 2 * s + 2);
  }
  STRATA_CK(cudaDeviceSynchronize());
  Row r;
  r.shape = shape;
  r.kind = "bf16";
  r.m = m, r.n = n, r.k = k;
  r.route = gemm.prepare(DType::kBF16, xs[0], k, ws[0], ys[0], n, m, n, k);
  r.t = time_launches(
      [&](int i) { gemm.matmul(DType::kBF16, xs[i % sets], k, ws[i % sets], ys[i % sets], n, m, n, k, stream); }, sets,
      stream);
  r.weight_bytes = 2.0 * n * double(k);
  r.weight_gbps = r.weight_bytes / (r.t.graph_us * 1e-6) / 1e9;
  r.tflops = 2.0 * m * double(n) * k / (r.t.graph_us * 1e-6) / 1e12;
  return r;
}

int run(int argc, char** argv) {
  require_device();
  cudaDeviceProp prop{};
  STRATA_CK(cudaGetDeviceProperties(&prop, 0));
  const char* json_path = argc > 1 ? argv[1] : std::getenv("STRATA_BENCH_JSON");
  const char* smoke_env = std::getenv("STRATA_BENCH_SMOKE");
  const bool smoke = smoke_env != nullptr && std::string(smoke_env) == "1";
  struct Shape {
    const char* name;
    int32_t n, k;
  };
  std::vector<Shape> shapes = {{"o", 4096, 4096}, {"gate|up", 14336, 4096}, {"k|v", 1024, 4096}, {"down", 4096, 14336}};
  std::vector<int32_t> ms = {1, 8, 64, 256, 512};
  if (smoke) {
    settings = Settings{size_t{4} << 20, size_t{1} << 20, 3, 2, 50.0, 4};
    shapes = {{"smoke", 200, 256}};
    ms = {1, 8, 64};
  }
  const QuantType types[] = {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0};
  std::printf("bench seed %llu%s\n", static_cast<unsigned long long>(bench_seed()), smoke ? " (smoke)" : "");

  cudaStream_t stream = nullptr;
  STRATA_CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy_gbps = measure_copy(stream, settings.copy_bytes, settings.samples).gbps;
  std::printf("copy: %.1f GB/s (read + written)\n", copy_gbps);
  std::unique_ptr<Gemm> gemm;
  std::string library;
  try {
    library = cublas_library_info();
    gemm = std::make_unique<Gemm>();
  } catch (const std::exception& e) {
    library = std::string("none: ") + e.what();
    std::printf("cuBLAS unavailable (%s): quantized rows only\n", e.what());
  }
  std::printf("cuBLAS: %s\n", library.c_str());

  std::vector<Row> rows;
  for (const Shape& s : shapes) {
    for (const int32_t m : ms) {
      Row dense;
      if (gemm) {
        dense = measure_cublas(*gemm, s.name, m, s.n, s.k, stream);
        std::printf("  %-8s m=%-4d %-5s %9.2f us  %7.1f TFLOP/s  %s\n", s.name, m, "bf16", dense.t.graph_us,
                    dense.tflops, dense.route.c_str());
      }
      for (const QuantType type : types) {
        Row r = measure_quant(type, s.name, m, s.n, s.k, stream);
        if (gemm) r.cublas_us = dense.t.graph_us, r.cublas_tflops = dense.tflops;
        std::printf("  %-8s m=%-4d %-5s %9.2f us  %7.1f GB/s %5.1f%% copy  %7.1f TFLOP/s  %s\n", s.name, m,
                    r.kind.c_str(), r.t.graph_us, r.weight_gbps, 100.0 * r.weight_gbps / copy_gbps, r.tflops,
                    r.route.c_str());
        rows.push_back(r);
      }
      if (gemm) rows.push_back(dense);
    }
  }
  // The decode GEMV's k split: Q4_0 at m = 1 on the backend's own weights (q/k/v and gate/up
  // fused), with the warps a block chosen (0: about 16 an SM) and forced to 2 .. 16, each with
  // one and two chunks a warp in flight.
  const std::vector<Shape> sweep_shapes =
      smoke ? std::vector<Shape>{{"smoke", 200, 256}}
            : std::vector<Shape>{{"q/k/v", 6144, 4096}, {"o", 4096, 4096}, {"gate+up", 28672, 4096}, {"down", 4096, 14336}};
  const std::vector<int32_t> sweep_warps = {0, 2, 4, 8, 12, 16}, sweep_prefetch = {1, 2};
  std::vector<Row> sweep;  // per shape, per prefetch, per warps
  for (const Shape& s : sweep_shapes) {
    for (const int32_t prefetch : sweep_prefetch) {
      for (const int32_t warps : sweep_warps) {
        Row r = measure_quant(QuantType::Q4_0, s.name, 1, s.n, s.k, stream, warps, prefetch);
        std::printf("  sweep %-8s warps=%-2d %9.2f us  %7.1f GB/s %5.1f%% copy  %s\n", s.name, warps, r.t.graph_us,
                    r.weight_gbps, 100.0 * r.weight_gbps / copy_gbps, r.route.c_str());
        sweep.push_back(r);
      }
    }
  }
  STRATA_CK(cudaStreamDestroy(stream));

  if (json_path != nullptr) {
    std::ofstream out(json_path);
    out << "{\"program\":\"bench_cuda_quant\",\"device\":\"" << json_escape(prop.name) << "\",\"sms\":"
        << prop.multiProcessorCount << ",\"cublas\":\"" << json_escape(library) << "\",\"seed\":" << bench_seed()
        << ",\"copy_gbps\":" << copy_gbps << ",\"rows\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << (i ? "," : "") << "{\"shape\":\"" << json_escape(r.shape) << "\",\"kind\":\"" << r.kind
          << "\",\"m\":" << r.m << ",\"n\":" << r.n << ",\"k\":" << r.k << ",\"us\":" << r.t.graph_us
          << ",\"eager_us\":" << r.t.eager_us
          << ",\"graph_iters\":" << r.t.iters << ",\"weight_bytes\":" << r.weight_bytes
          << ",\"weight_gbps\":" << r.weight_gbps << ",\"frac_copy\":" << r.weight_gbps / copy_gbps
          << ",\"tflops\":" << r.tflops << ",\"cublas_us\":" << r.cublas_us << ",\"cublas_tflops\":" << r.cublas_tflops
          << ",\"route\":\"" << json_escape(r.route) << "\"}";
    }
    out << "],\"gemv_warp_sweep\":[";
    for (size_t i = 0; i < sweep.size(); ++i) {
      const Row& r = sweep[i];
      out << (i ? "," : "") << "{\"shape\":\"" << json_escape(r.shape) << "\",\"kind\":\"" << r.kind
          << "\",\"m\":" << r.m << ",\"n\":" << r.n << ",\"k\":" << r.k << ",\"warps_asked\":"
          << sweep_warps[i % sweep_warps.size()] << ",\"prefetch_asked\":"
          << sweep_prefetch[(i / sweep_warps.size()) % sweep_prefetch.size()] << ",\"us\":" << r.t.graph_us
          << ",\"weight_gbps\":" << r.weight_gbps
          << ",\"frac_copy\":" << r.weight_gbps / copy_gbps << ",\"route\":\"" << json_escape(r.route) << "\"}";
    }
    out << "]}\n";
    std::printf("wrote %s\n", json_path);
  }

  // Last, short enough for a log tail: per shape and kind, us per GEMM at each m, then the
  // weight stream as % of copy (m <= 8) or the TFLOP/s as % of cuBLAS bf16 (m >= 64; for the
  // bf16 row itself, its TFLOP/s).
  std::printf("\n%s, %d SMs: copy %.0f GB/s; quantized x bf16 activations vs cuBLAS bf16\n", prop.name,
              prop.multiProcessorCount, copy_gbps);
  std::printf("%-8s %11s %-5s", "shape", "n x k", "kind");
  for (const int32_t m : ms) std::printf(" %16s", ("m=" + std::to_string(m)).c_str());
  std::printf("\n");
  for (const Shape& s : shapes) {
    for (const char* kind : {"Q4_0", "Q4_1", "Q8_0", "bf16"}) {
      bool any = false;
      std::string line;
      char cell[64];
      for (const int32_t m : ms) {
        const Row* r = nullptr;
        for (const Row& x : rows)
          if (x.shape == s.name && x.kind == kind && x.m == m) r = &x;
        if (r == nullptr) {
          std::snprintf(cell, sizeof cell, " %16s", "-");
        } else if (std::string(kind) == "bf16") {
          any = true;
          std::snprintf(cell, sizeof cell, " %7.1fus %5.0fTF", r->t.graph_us, r->tflops);
        } else {
          any = true;
          const double pct = m <= 8 ? 100.0 * r->weight_gbps / copy_gbps
                                    : (r->cublas_tflops > 0 ? 100.0 * r->tflops / r->cublas_tflops : 0.0);
          std::snprintf(cell, sizeof cell, " %7.1fus %4.0f%%%s", r->t.graph_us, pct, m <= 8 ? "c" : "b");
        }
        line += cell;
      }
      if (any) std::printf("%-8s %5dx%-5d %-5s%s\n", s.name, s.n, s.k, kind, line.c_str());
    }
  }
  std::printf("c: weight GB/s as %% of copy; b: TFLOP/s as %% of cuBLAS bf16 on the same shape\n");
  std::printf("\nQ4_0 GEMV at m=1 by warps a block (0: chosen) and chunks a warp in flight (pf), us and weight "
              "GB/s as %% of copy\n%-8s %11s %3s",
              "shape", "n x k", "pf");
  for (const int32_t w : sweep_warps) std::printf(" %14s", ("warps=" + std::to_string(w)).c_str());
  std::printf("\n");
  for (size_t i = 0; i < sweep.size(); i += sweep_warps.size()) {
    std::printf("%-8s %5dx%-5d %3d", sweep[i].shape.c_str(), sweep[i].n, sweep[i].k,
                sweep_prefetch[(i / sweep_warps.size()) % sweep_prefetch.size()]);
    for (size_t j = 0; j < sweep_warps.size(); ++j)
      std::printf(" %7.1fus %4.0f%%", sweep[i + j].t.graph_us, 100.0 * sweep[i + j].weight_gbps / copy_gbps);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return main_reporting_errors(run, argc, argv); }
