// How fast a GGUF file's tensors come out of the file: GgufFile::open, the metadata, then
// load_gguf_weights (quantized matrices copied out row by row, the rest widened to fp32). The
// backends no longer copy the blocks (they pack them from the file's mapping: bench_cpu_load
// and bench_cuda_load time their loads); this times the reader and the copy alone. Runs it N
// times on a file in the page cache and prints each run, then the median;
// --out writes the runs as JSON (docs/benchmarks/gguf-load.json).
//
//   bench_gguf_load FILE.gguf [--runs N] [--out FILE.json]
//   (any GGUF model; scripts/device/llama3_gguf.py writes one from a Hugging Face Llama folder)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "strata/gguf.h"
#include "strata/model_error.h"
#include "strata/model_weights.h"

using namespace strata;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_gguf_load FILE.gguf [--runs N] [--out FILE.json]\n");
    return 2;
  }
  int runs = 5;
  std::string out_json;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out_json = argv[++i];
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (runs < 1) {
    std::fprintf(stderr, "--runs must be >= 1\n");
    return 2;
  }
  try {
    std::vector<double> seconds;
    int64_t bytes = 0;
    for (int r = 0; r < runs; ++r) {
      const auto started = std::chrono::steady_clock::now();
      const GgufFile file = GgufFile::open(argv[1]);
      const ModelWeights weights = load_gguf_weights(file, gguf_model_config(file));
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      bytes = 0;
      for (const GgufTensor& t : file.tensors()) bytes += int64_t(t.nbytes);
      std::printf("run %d: %.3f s, %.2f GB/s\n", r + 1, seconds.back(), bytes / seconds.back() / 1e9);
    }
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::printf("%s: %.2f GB of tensors, median %.3f s (%.2f GB/s), min %.3f, max %.3f over %d runs\n", argv[1],
                bytes / 1e9, median, bytes / median / 1e9, sorted.front(), sorted.back(), runs);
    if (!out_json.empty()) {
      std::ofstream out(out_json);
      const std::string name = std::filesystem::path(argv[1]).filename().string();  // no folder: no machine's paths
      out << "{\"benchmark\":\"gguf-load\",\"file\":\"" << name << "\",\"bytes\":" << bytes << ",\"median_s\":" << median
          << ",\"median_gb_s\":" << bytes / median / 1e9 << ",\"seconds\":[";
      for (size_t i = 0; i < seconds.size(); ++i) out << (i ? "," : "") << seconds[i];
      out << "]}\n";
      if (!out) {
        std::fprintf(stderr, "bench_gguf_load: cannot write %s\n", out_json.c_str());
        return 1;
      }
    }
  } catch (const ModelError& e) {
    std::fprintf(stderr, "bench_gguf_load: %s\n", e.what());
    return 1;
  }
  return 0;
}
