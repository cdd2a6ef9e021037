// The CUDA backend's forward pass next to the GPU's own limits, measured in one run:
//   - the device-to-device copy bandwidth and cuBLAS's bf16 GEMM rate (8192³), the two ceilings;
//   - prefill of P sequences × C tokens in one step, as a fraction of that GEMM rate;
//   - decode steps at each batch size with C-token contexts (CUDA graphs, logits to the host
//     included), next to the roofline: the bytes a step must read (weights, plus every
//     sequence's K and V) over the measured copy bandwidth.
//   bench_cuda_forward <model dir> [out.json] [--context C] [--batches 1,8,32,64,128] [--prefill-seqs P]
//                      [--copy-mib 2048] [--gemm-n 8192]   (smaller ceilings: a smoke run, e.g. emulated)
// The model is any Hugging Face Llama directory (scripts/device/llama3_random.py writes a
// Llama-3-8B-shaped one with random weights). Prints a table last.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "check_util.h"
#include "strata/cuda_backend.h"
#include "strata/cuda_gemm.h"

using namespace strata;
using namespace strata::cuda::checks;

namespace {

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs.empty() ? 0.0 : xs[xs.size() / 2];
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Bytes per second of a device-to-device copy, counting bytes read and written.
double copy_bandwidth(size_t bytes) {
  DeviceBuffer<char> a(bytes), b(bytes);
  STRATA_CK(cudaMemset(a.ptr, 1, bytes));
  cudaEvent_t start, stop;
  STRATA_CK(cudaEventCreate(&start));
  STRATA_CK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    STRATA_CK(cudaEventRecord(start));
    STRATA_CK(cudaMemcpyAsync(i % 2 ? a.ptr : b.ptr, i % 2 ? b.ptr : a.ptr, bytes, cudaMemcpyDeviceToDevice));
    STRATA_CK(cudaEventRecord(stop));
    STRATA_CK(cudaEventSynchronize(stop));
    float t = 0;
    STRATA_CK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 3) ms.push_back(t);
  }
  return 2.0 * double(bytes) / (median(ms) / 1e3);
}

// FLOP/s of cuBLAS's bf16 n³ GEMM on random data.
double gemm_rate(int32_t n) {
  DeviceBuffer<__nv_bfloat16> x(size_t(n) * n), w(size_t(n) * n), y(size_t(n) * n);
  x.upload(convert<__nv_bfloat16>(random_floats(size_t(n) * n)));
  w.upload(convert<__nv_bfloat16>(random_floats(size_t(n) * n)));
  cuda::Gemm gemm;
  cudaEvent_t start, stop;
  STRATA_CK(cudaEventCreate(&start));
  STRATA_CK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    STRATA_CK(cudaEventRecord(start));
    gemm.matmul(cuda::DType::kBF16, x.ptr, n, w.ptr, y.ptr, n, n, n, n, nullptr);
    STRATA_CK(cudaEventRecord(stop));
    STRATA_CK(cudaEventSynchronize(stop));
    float t = 0;
    STRATA_CK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 3) ms.push_back(t);
  }
  return 2.0 * n * double(n) * n / (median(ms) / 1e3);
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
};

int run(int argc, char** argv) {
  require_device();
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_cuda_forward <model dir> [out.json] [--context C] [--batches 1,8,...] "
                         "[--prefill-seqs P]\n");
    return 2;
  }
  std::string model_dir = argv[1], out_json;
  int32_t context = 1024, prefill_seqs = 8, gemm_n = 8192;
  size_t copy_mib = 2048;
  std::vector<int32_t> batches = {1, 8, 32, 64, 128};
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--context" && i + 1 < argc) context = std::atoi(argv[++i]);
    else if (a == "--prefill-seqs" && i + 1 < argc) prefill_seqs = std::atoi(argv[++i]);
    else if (a == "--gemm-n" && i + 1 < argc) gemm_n = std::atoi(argv[++i]);
    else if (a == "--copy-mib" && i + 1 < argc) copy_mib = size_t(std::atoll(argv[++i]));
    else if (a == "--batches" && i + 1 < argc) {
      batches.clear();
      for (std::string list = argv[++i]; !list.empty();) {
        const size_t comma = list.find(',');
        batches.push_back(std::atoi(list.substr(0, comma).c_str()));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    } else if (out_json.empty() && a.rfind("--", 0) != 0) out_json = a;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (context < 1 || prefill_seqs < 1 || gemm_n < 16 || copy_mib < 1 || batches.empty() ||
      *std::min_element(batches.begin(), batches.end()) < 1) {
    std::fprintf(stderr, "context, prefill seqs, batches and copy MiB must be >= 1, gemm n >= 16\n");
    return 2;
  }
  const int32_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int32_t steps = 40, warm = 8, block = 16;

  const double bandwidth = copy_bandwidth(copy_mib << 20);
  const double peak = gemm_rate(gemm_n);
  std::printf("copy bandwidth %.0f GB/s (read + written), cuBLAS bf16 %d^3 %.1f TFLOP/s\n", bandwidth / 1e9, gemm_n,
              peak / 1e12);

  CudaBackendOptions options;
  options.dtype = cuda::DType::kBF16;
  options.max_seqs = std::max(max_batch, prefill_seqs);
  options.max_batch_tokens = std::max(prefill_seqs * context, max_batch);
  options.max_model_len = context + steps + warm + 1;
  CudaBackend backend(model_dir, options);
  const ModelConfig& c = backend.config();
  std::printf("%s: %d layers, hidden %d, vocab %d; loaded %.2f GB in %.2f s (%.2f GB/s) on %s\n", model_dir.c_str(),
              c.num_layers, c.hidden_size, c.vocab_size, backend.load_stats().bytes / 1e9, backend.load_stats().seconds,
              backend.load_stats().gb_per_s(), backend.device_name().c_str());

  const int32_t n_seqs = std::max(max_batch, prefill_seqs);
  const int32_t per_seq = (options.max_model_len + block - 1) / block;
  backend.allocate_kv(n_seqs * per_seq, block);
  std::vector<Seq> seqs(n_seqs);
  for (int32_t i = 0; i < n_seqs; ++i) {
    seqs[i].tokens.resize(context);
    for (int32_t& t : seqs[i].tokens) t = random_int(0, c.vocab_size - 1);
    seqs[i].table.resize(per_seq);
    std::iota(seqs[i].table.begin(), seqs[i].table.end(), i * per_seq);
  }
  std::vector<float> logits(size_t(n_seqs) * c.vocab_size);

  // Prefill: prefill_seqs prompts of `context` tokens per step, until every sequence has its
  // context cached; the first such steps are timed.
  std::vector<double> prefill_ms;
  for (int32_t first = 0; first < n_seqs; first += prefill_seqs) {
    StepBatch batch;
    for (int32_t i = first; i < std::min(n_seqs, first + prefill_seqs); ++i) {
      SeqSlice s;
      s.tokens = seqs[i].tokens.data();
      s.n_tokens = context;
      s.start_pos = 0;
      s.block_table = seqs[i].table.data();
      s.n_blocks = per_seq;
      s.want_logits = true;
      batch.seqs.push_back(s);
    }
    const double t0 = now_ms();
    backend.forward(batch, logits.data());
    if (int32_t(batch.seqs.size()) == prefill_seqs) prefill_ms.push_back(now_ms() - t0);
  }
  if (prefill_ms.size() > 1) prefill_ms.erase(prefill_ms.begin());  // the first step loads kernels
  const double layer_params = double(c.hidden_size) * (double(c.num_heads + 2 * c.num_kv_heads) * c.head_dim +
                                                       double(c.num_heads) * c.head_dim + 3.0 * c.intermediate_size);
  const double prefill_tokens = double(prefill_seqs) * context;
  const double prefill_flops = 2.0 * prefill_tokens * layer_params * c.num_layers +
                               2.0 * prefill_seqs * 2.0 * c.hidden_size * c.vocab_size +
                               4.0 * prefill_seqs * (double(context) * context / 2) * c.num_heads * c.head_dim * c.num_layers;
  const double prefill_median = median(prefill_ms);
  const double prefill_rate = prefill_flops / (prefill_median / 1e3);

  // Decode: each batch size runs `steps` timed steps after `warm`, every sequence one token on.
  const double weight_bytes = (layer_params * c.num_layers + double(c.vocab_size) * c.hidden_size + c.hidden_size) * 2.0;
  const double kv_bytes_per_token = 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * 2.0;
  struct Row {
    int32_t batch;
    double ms, roofline_ms;
  };
  std::vector<Row> rows;
  for (int32_t b : batches) {
    std::vector<int32_t> next(b);
    std::vector<double> ms;
    for (int32_t step = 0; step < warm + steps; ++step) {
      StepBatch batch;
      for (int32_t i = 0; i < b; ++i) {
        SeqSlice s;
        next[i] = seqs[i].tokens[(step * 7 + i) % context];
        s.tokens = &next[i];
        s.n_tokens = 1;
        s.start_pos = context + step;
        s.block_table = seqs[i].table.data();
        s.n_blocks = per_seq;
        s.want_logits = true;
        batch.seqs.push_back(s);
      }
      const double t0 = now_ms();
      backend.forward(batch, logits.data());
      if (step >= warm) ms.push_back(now_ms() - t0);
    }
    const double bytes = weight_bytes + double(b) * (context + warm + steps / 2) * kv_bytes_per_token;
    rows.push_back({b, median(ms), bytes / bandwidth * 1e3});
  }

  if (!out_json.empty()) {
    std::ofstream out(out_json);
    out << "{\"benchmark\":\"cuda-forward\",\"device\":\"" << backend.device_name() << "\",\"model\":\"" << model_dir
        << "\",\"dtype\":\"bf16\",\"context\":" << context << ",\"copy_bandwidth_gb_s\":" << bandwidth / 1e9
        << ",\"gemm_bf16_tflops\":" << peak / 1e12 << ",\"load_gb_s\":" << backend.load_stats().gb_per_s()
        << ",\"prefill\":{\"seqs\":" << prefill_seqs << ",\"tokens\":" << prefill_tokens << ",\"ms\":" << prefill_median
        << ",\"tflops\":" << prefill_rate / 1e12 << ",\"fraction_of_gemm\":" << prefill_rate / peak << "},\"decode\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << (i ? "," : "") << "{\"batch\":" << rows[i].batch << ",\"ms\":" << rows[i].ms
          << ",\"roofline_ms\":" << rows[i].roofline_ms << ",\"fraction_of_roofline\":" << rows[i].roofline_ms / rows[i].ms
          << ",\"tokens_per_s\":" << rows[i].batch / (rows[i].ms / 1e3) << "}";
    }
    out << "],\"graph_steps\":" << backend.graph_steps() << ",\"eager_steps\":" << backend.eager_steps() << "}\n";
  }

  std::printf("\n%s, bf16, context %d\n", backend.device_name().c_str(), context);
  std::printf("prefill %d x %d: %.1f ms, %.0f TFLOP/s = %.0f%% of the GEMM rate (target >= 60%%)\n", prefill_seqs,
              context, prefill_median, prefill_rate / 1e12, 100.0 * prefill_rate / peak);
  std::printf("%6s %10s %12s %10s %10s\n", "batch", "step ms", "roofline ms", "fraction", "tok/s");
  for (const Row& r : rows)
    std::printf("%6d %10.3f %12.3f %9.0f%% %10.0f\n", r.batch, r.ms, r.roofline_ms, 100.0 * r.roofline_ms / r.ms,
                r.batch / (r.ms / 1e3));
  std::printf("(targets: >= 85%% of the roofline at batch 1, >= 70%% at batch 64; %lld graph / %lld eager steps)\n",
              static_cast<long long>(backend.graph_steps()), static_cast<long long>(backend.eager_steps()));
  return 0;
}
}  // namespace

int main(int argc, char** argv) { return main_reporting_errors(run, argc, argv); }
