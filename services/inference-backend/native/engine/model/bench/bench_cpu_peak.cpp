// The CPU's arithmetic peak, as the GEMM kernels' ceiling: independent fmadd chains in 256-bit
// (AVX2+FMA) and 512-bit (AVX-512F) vectors, and AMX bf16 tile multiplies (TDPBF16PS on tiles
// held in the tile registers), each on 1..N threads at once. Nothing is read from memory, so
// this is what the execution units give, not what a GEMM can reach. Prints a table; --json adds
// one JSON object on the last line.
//
//   bench_cpu_peak [--threads N] [--seconds S] [--json]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "amx.h"

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Independent fmadd chains, `iters` times each: 12 of 256 bits (the AVX2 GEMM's 6 x 2 tile) or
// 24 of 512 (the AVX-512 one's 8 x 3); the flops done.
__attribute__((target("avx2,fma"))) double fmadd_256(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(a, acc[i], b);
  }
  float sink = 0.0f;
  for (int i = 0; i < 12; ++i) sink += _mm256_cvtss_f32(acc[i]);
  if (sink == 1234.5f) std::puts("");
  return static_cast<double>(iters) * 12 * 8 * 2;
}

__attribute__((target("avx512f"))) double fmadd_512(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(a, acc[i], b);
  }
  float sink = 0.0f;
  for (int i = 0; i < 24; ++i) sink += _mm512_cvtss_f32(acc[i]);
  if (sink == 1234.5f) std::puts("");
  return static_cast<double>(iters) * 24 * 16 * 2;
}

// 2 A x 2 B tiles into 4 C tiles, as the AMX GEMM's step: 4 x 16 x 16 x 32 multiply-adds.
__attribute__((target("amx-tile,amx-bf16"))) double amx_bf16(int64_t iters) {
  const strata::AmxTileConfig config;
  _tile_loadconfig(&config);
  alignas(64) uint16_t ones[16 * 32];
  std::fill(ones, ones + 16 * 32, uint16_t{0x3F80});
  _tile_loadd(0, ones, 64);
  _tile_loadd(1, ones, 64);
  _tile_loadd(2, ones, 64);
  _tile_loadd(3, ones, 64);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(4, 0, 2);
    _tile_dpbf16ps(5, 0, 3);
    _tile_dpbf16ps(6, 1, 2);
    _tile_dpbf16ps(7, 1, 3);
  }
  alignas(64) float sums[16 * 16];
  _tile_stored(4, sums, 64);
  _tile_release();
  if (sums[0] == 1234.5f) std::puts("");
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

struct Row {
  std::string unit;
  int threads;
  double gflops;  // all threads together
};

// `threads` threads each running `fn` for about `seconds`; the total GFLOP/s.
double measure(double (*fn)(int64_t), int threads, double seconds) {
  int64_t iters = 1 << 16;  // grown until one call takes a tenth of the time
  for (;;) {
    const double start = now_seconds();
    fn(iters);
    if (now_seconds() - start > seconds / 10) break;
    iters *= 2;
  }
  const int64_t calls = 10;
  std::vector<double> flops(static_cast<size_t>(threads), 0.0);
  std::vector<std::thread> pool;
  const double start = now_seconds();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t c = 0; c < calls; ++c) flops[static_cast<size_t>(t)] += fn(iters);
    });
  for (std::thread& th : pool) th.join();
  const double elapsed = now_seconds() - start;
  double total = 0.0;
  for (double f : flops) total += f;
  return total / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  double seconds = 1.0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--seconds" && i + 1 < argc) seconds = std::max(0.1, std::atof(argv[++i]));
    else if (arg == "--json") json = true;
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--seconds S] [--json]\n", argv[0]);
      return 2;
    }
  }
  std::vector<Row> rows;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool amx = strata::amx_bf16_usable();
  for (int t = 1; t <= threads; ++t) {
    if (avx2) rows.push_back({"fp32 fmadd, 256-bit", t, measure(fmadd_256, t, seconds)});
    if (avx512) rows.push_back({"fp32 fmadd, 512-bit", t, measure(fmadd_512, t, seconds)});
    if (amx) rows.push_back({"AMX bf16 (TDPBF16PS)", t, measure(amx_bf16, t, seconds)});
  }
  std::printf("CPU arithmetic peak (no memory traffic), up to %d threads\n", threads);
  std::printf("| unit                 | threads | GFLOP/s |\n|----------------------|--------:|--------:|\n");
  for (const Row& r : rows) std::printf("| %-20s | %7d | %7.0f |\n", r.unit.c_str(), r.threads, r.gflops);
  if (!avx2 && !avx512 && !amx) std::printf("(this CPU has none of AVX2+FMA, AVX-512F or AMX)\n");
  if (json) {
    std::printf("{\"benchmark\": \"cpu-peak\", \"rows\": [");
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf("%s{\"unit\": \"%s\", \"threads\": %d, \"gflops\": %.1f}", i ? ", " : "", rows[i].unit.c_str(), rows[i].threads,
                  rows[i].gflops);
    std::printf("]}\n");
  }
  return 0;
}
