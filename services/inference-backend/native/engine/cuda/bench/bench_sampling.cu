// Time per sampling step (strata/cuda_sampling.h) at vocab 128,256 for batch 1, 8, 64, 256:
// greedy; top-k 50 + top-p 0.9 at temperature 0.8; and top-p 0.9 alone, the path without a small
// top-k. Next to it, the floor of reading the logits once: batch * vocab * 4 bytes over the
// device-to-device copy bandwidth measured in the same run (bytes read + written per second).
//
// Logits: N(0, 2) with ten tokens per row raised by 6..14, so that top-p keeps a few tokens as it
// does on a language model's output. Each launch reads another window of a pool four times the
// L2 size, so small batches are not timed out of the cache. Median of per-launch cudaEvent times,
// the launches queued behind a 5 ms spin so that they run back to back.
// The table is printed last; JSON goes to argv[1] when given.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "check_util.h"
#include "strata/cuda_sampling.h"

using namespace strata::cuda;
using namespace strata::cuda::checks;

namespace {

constexpr int32_t kVocab = 128256;
constexpr int kWarmup = 3;
constexpr int kRepeats = 60;

struct Config {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
};

struct Result {
  std::string config;
  int32_t batch;
  SamplingLaunch launch;
  double median_us, min_us, floor_us;
};

// Holds the stream while the host enqueues the timed launches, so that the GPU runs them back to
// back and the events time the kernels, not the host's launch latency.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy bandwidth, bytes read plus bytes written per second.
double copy_bandwidth() {
  constexpr size_t kBytes = size_t{1} << 30;
  DeviceBuffer<unsigned char> src(kBytes), dst(kBytes);
  STRATA_CK(cudaMemset(src.ptr, 1, kBytes));
  cudaEvent_t a, b;
  STRATA_CK(cudaEventCreate(&a));
  STRATA_CK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    STRATA_CK(cudaEventRecord(a));
    STRATA_CK(cudaMemcpyAsync(dst.ptr, src.ptr, kBytes, cudaMemcpyDeviceToDevice));
    STRATA_CK(cudaEventRecord(b));
    STRATA_CK(cudaEventSynchronize(b));
    float t = 0.0f;
    STRATA_CK(cudaEventElapsedTime(&t, a, b));
    if (i >= 2) ms.push_back(t);
  }
  STRATA_CK(cudaEventDestroy(a));
  STRATA_CK(cudaEventDestroy(b));
  return 2.0 * static_cast<double>(kBytes) / (median(ms) * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  require_device();
  const uint64_t seed = run_seed();
  int l2 = 0;
  STRATA_CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  int clock_khz = 0;
  STRATA_CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const long long spin_cycles = 5LL * clock_khz;  // 5 ms
  const double bw = copy_bandwidth();
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", bw * 1e-9);

  // A pool of rows, four L2 sizes and at least two batches of 256.
  const size_t row_bytes = size_t{kVocab} * sizeof(float);
  const size_t pool_rows = std::max<size_t>(512, (4 * static_cast<size_t>(l2) + row_bytes - 1) / row_bytes);
  std::vector<float> host = random_floats(pool_rows * kVocab, 2.0f);
  for (size_t r = 0; r < pool_rows; ++r) {
    for (int i = 0; i < 10; ++i) {
      host[r * kVocab + static_cast<size_t>(random_int(0, kVocab - 1))] += 6.0f + 8.0f * static_cast<float>(random_int(0, 1000)) / 1000.0f;
    }
  }
  DeviceBuffer<float> pool(host.size());
  pool.upload(host);
  host = {};

  const Config configs[] = {
      {"greedy", 0.0f, 0, 1.0f},
      {"top-k 50, top-p 0.9, T 0.8", 0.8f, 50, 0.9f},
      {"top-p 0.9, T 0.8", 0.8f, 0, 0.9f},
  };
  const int32_t batches[] = {1, 8, 64, 256};
  std::vector<Result> results;
  cudaEvent_t ev[2 * kRepeats];
  for (cudaEvent_t& e : ev) STRATA_CK(cudaEventCreate(&e));
  for (const Config& cfg : configs) {
    for (int32_t batch : batches) {
      std::vector<SeqSamplingParams> params(static_cast<size_t>(batch));
      for (SeqSamplingParams& p : params) {
        p.uniform = static_cast<double>(random_int(0, (1 << 30) - 1)) / (1 << 30);
        p.temperature = cfg.temperature;
        p.top_k = cfg.top_k;
        p.top_p = cfg.top_p;
      }
      DeviceBuffer<SeqSamplingParams> d_params(params.size());
      d_params.upload(params);
      DeviceBuffer<int32_t> tokens(params.size());
      DeviceBuffer<float> logprobs(params.size());
      SamplingArgs a;
      a.n_seqs = batch;
      a.vocab = kVocab;
      a.params = d_params.ptr;
      a.tokens = tokens.ptr;
      a.logprobs = logprobs.ptr;
      const size_t windows = pool_rows / static_cast<size_t>(batch);
      auto window = [&](int i) { return pool.ptr + (static_cast<size_t>(i) % windows) * batch * kVocab; };
      for (int i = 0; i < kWarmup; ++i) {
        a.logits = window(i);
        sample(a, nullptr);
      }
      STRATA_CK(cudaDeviceSynchronize());
      spin<<<1, 1>>>(spin_cycles);
      STRATA_CK(cudaGetLastError());
      for (int i = 0; i < kRepeats; ++i) {
        a.logits = window(kWarmup + i);
        STRATA_CK(cudaEventRecord(ev[2 * i]));
        sample(a, nullptr);
        STRATA_CK(cudaEventRecord(ev[2 * i + 1]));
      }
      STRATA_CK(cudaDeviceSynchronize());
      std::vector<double> us;
      for (int i = 0; i < kRepeats; ++i) {
        float ms = 0.0f;
        STRATA_CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us.push_back(ms * 1e3);
      }
      const double floor_us = static_cast<double>(batch) * row_bytes / bw * 1e6;
      results.push_back({cfg.name, batch, sampling_launch(batch, kVocab), median(us), *std::min_element(us.begin(), us.end()),
                         floor_us});
    }
  }
  for (cudaEvent_t& e : ev) STRATA_CK(cudaEventDestroy(e));

  if (argc > 1) {
    std::ofstream out(argv[1]);
    out << "{\"program\":\"bench_cuda_sampling\",\"seed\":" << seed << ",\"vocab\":" << kVocab
        << ",\"copy_bytes_per_s\":" << bw << ",\"rows\":[";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      out << (i ? "," : "") << "{\"config\":\"" << r.config << "\",\"batch\":" << r.batch
          << ",\"cluster\":" << r.launch.cluster << ",\"smem_bytes\":" << r.launch.smem_bytes
          << ",\"median_us\":" << r.median_us << ",\"min_us\":" << r.min_us << ",\"floor_us\":" << r.floor_us << "}";
    }
    out << "]}\n";
  }
  std::printf("\nsampling step, vocab %d, median of %d launches (floor: logits read once at copy bandwidth)\n", kVocab,
              kRepeats);
  std::printf("%-28s %6s %8s %11s %11s %11s %8s\n", "config", "batch", "cluster", "median us", "min us", "floor us",
              "x floor");
  for (const Result& r : results) {
    std::printf("%-28s %6d %8d %11.1f %11.1f %11.2f %8.1f\n", r.config.c_str(), r.batch, r.launch.cluster, r.median_us,
                r.min_us, r.floor_us, r.median_us / r.floor_us);
  }
  return 0;
}
