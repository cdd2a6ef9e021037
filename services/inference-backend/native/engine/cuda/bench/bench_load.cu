// Loading a model onto the GPU, again and again: each run constructs a CudaBackend on the model
// (a safetensors directory or a GGUF file; the KV cache is not allocated) and reports its load
// time, its rate (the checkpoint's bytes over the whole load), and for a GGUF file the load's
// three parts as CudaLoadStats splits them: reading the file's tensors, the host's work on them
// (repacking blocks, dequantizing), and the rest (copying and converting on the device, and
// waiting for it). Prints every run, then the median and range of each column; the file should
// be in the page cache (the first run reads it in, and its row says so when it is slower).
//   bench_cuda_load <model dir or .gguf> [out.json] [--runs 5] [--dtype bf16|f16|f32]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "check_util.h"
#include "strata/cuda_backend.h"

using namespace strata;
using namespace strata::cuda::checks;

namespace {

struct Run {
  double seconds, read, host, rest, gbps;
};

int run(int argc, char** argv) {
  require_device();
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_cuda_load <model dir or .gguf> [out.json] [--runs N] [--dtype bf16|f16|f32]\n");
    return 2;
  }
  std::string model = argv[1], out_json, dtype_name = "bf16";
  int runs = 5;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--dtype" && i + 1 < argc) dtype_name = argv[++i];
    else if (out_json.empty() && a.rfind("--", 0) != 0) out_json = a;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (runs < 1 || (dtype_name != "bf16" && dtype_name != "f16" && dtype_name != "f32")) {
    std::fprintf(stderr, "--runs must be >= 1 and --dtype one of bf16, f16, f32\n");
    return 2;
  }
  CudaBackendOptions options;
  options.dtype = dtype_name == "bf16" ? cuda::DType::kBF16 : dtype_name == "f16" ? cuda::DType::kF16 : cuda::DType::kF32;
  // The smallest step buffers: the load is what is timed.
  options.max_seqs = 1;
  options.max_batch_tokens = 16;
  options.max_model_len = 64;
  options.cuda_graphs = false;

  std::vector<Run> rows;
  std::string device, format;
  int64_t bytes = 0;
  std::printf("%4s %9s %9s %9s %9s %8s\n", "run", "load s", "read s", "host s", "rest s", "GB/s");
  for (int r = 0; r < runs; ++r) {
    const auto started = std::chrono::steady_clock::now();
    CudaBackend backend(model, options);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const CudaLoadStats& s = backend.load_stats();
    rows.push_back({s.seconds, s.read_seconds, s.host_seconds, s.seconds - s.read_seconds - s.host_seconds, s.gb_per_s()});
    device = backend.device_name();
    format = backend.weights_format();
    bytes = s.bytes;
    std::printf("%4d %9.3f %9.3f %9.3f %9.3f %8.2f   (constructor %.3f s)\n", r + 1, s.seconds, s.read_seconds,
                s.host_seconds, rows.back().rest, s.gb_per_s(), wall);
  }
  const auto column = [&](double Run::* field) {
    std::vector<double> xs;
    for (const Run& row : rows) xs.push_back(row.*field);
    return xs;
  };
  const auto stats = [&](double Run::* field) {
    const std::vector<double> xs = column(field);
    return std::vector<double>{cuda::bench::median(xs), *std::min_element(xs.begin(), xs.end()),
                               *std::max_element(xs.begin(), xs.end())};
  };
  const std::pair<const char*, double Run::*> columns[] = {
      {"load_s", &Run::seconds}, {"read_s", &Run::read}, {"host_s", &Run::host}, {"rest_s", &Run::rest}, {"gb_per_s", &Run::gbps}};
  std::printf("%s: %.2f GB (%s) on %s, %d runs; median (min - max):\n", model.c_str(), double(bytes) / 1e9, format.c_str(),
              device.c_str(), runs);
  for (const auto& [name, field] : columns) {
    const std::vector<double> s = stats(field);
    std::printf("  %-9s %8.3f  (%.3f - %.3f)\n", name, s[0], s[1], s[2]);
  }
  if (!out_json.empty()) {
    std::ofstream out(out_json);
    out << "{\"benchmark\":\"cuda-load\",\"device\":\"" << device << "\",\"model\":\"" << model << "\",\"weights\":\""
        << format << "\",\"bytes\":" << bytes << ",\"runs\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << (i ? "," : "") << "{\"load_s\":" << rows[i].seconds << ",\"read_s\":" << rows[i].read
          << ",\"host_s\":" << rows[i].host << ",\"rest_s\":" << rows[i].rest << ",\"gb_per_s\":" << rows[i].gbps << "}";
    }
    out << "]";
    for (const auto& [name, field] : columns) {
      const std::vector<double> s = stats(field);
      out << ",\"" << name << "\":{\"median\":" << s[0] << ",\"min\":" << s[1] << ",\"max\":" << s[2] << "}";
    }
    out << "}\n";
    std::printf("wrote %s\n", out_json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return main_reporting_errors(run, argc, argv); }
