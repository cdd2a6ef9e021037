// End to end on the CUDA backend: N requests of P random prompt tokens and O output tokens
// (greedy, no early stop) submitted at once to the engine (scheduler, block manager, sampler)
// and stepped to completion, as vLLM's offline throughput benchmark does. Reports output and
// total tokens per second, TTFT p50/p99 (from submission, queueing included) and ITL p50/p99
// (the gaps between a request's tokens, as the engine hands them over), next to
// transformers' generate() when its timing is given (scripts/device/hf_generate.py, same GPU).
// --sampling cpu samples with the core's CPU Sampler from logits copied to the host, for the
// side-by-side with the default, sampling on the GPU.
// Before the run it measures the two ceilings (the device-to-device copy's bandwidth and cuBLAS's
// sustained bf16 GEMM rate, bench_util.cuh) and reports the workload's floor at them, and
// Strata's time as a fraction of it: every request's prompt (its GEMM and attention FLOPs) at the
// GEMM rate, then each decode step (all requests of a wave of up to 256 one token on) at the
// longer of its bytes (weights, K and V) at the copy bandwidth and its FLOPs at the GEMM rate,
// one after the other. A lower bound on any schedule that does not overlap prefill and decode.
// Beside it, the run's own steps in two kinds: those that carried prompt tokens (mixed with
// decodes, as the scheduler batches them) and decode-only ones, with their wall time.
//   bench_cuda_e2e <model dir> [out.json] [--requests 256] [--prompt 1024] [--output 128]
//                  [--hf hf_generate.json] [--utilization 0.9] [--sampling gpu|cpu]
//                  [--copy-mib 2048] [--gemm-n 8192]   (smaller ceilings: a smoke run, e.g. emulated)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_util.cuh"
#include "check_util.h"
#include "strata/cuda_backend.h"
#include "strata/engine.h"

using namespace strata;
using namespace strata::cuda::checks;

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> xs, double q) {
  if (xs.empty()) return 0.0;
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<size_t>(q * double(xs.size())))];
}

// The one number bench needs from hf_generate.py's JSON: {"seconds": S, "output_tokens": N, ...}.
double json_number(const std::string& text, const std::string& key) {
  const size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return 0.0;
  return std::atof(text.c_str() + text.find(':', at) + 1);
}

int run(int argc, char** argv) {
  require_device();
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_cuda_e2e <model dir> [out.json] [--requests N] [--prompt P] [--output O] "
                         "[--hf hf_generate.json] [--utilization U] [--sampling gpu|cpu]\n");
    return 2;
  }
  std::string model_dir = argv[1], out_json, hf_json, sampling = "gpu";
  int32_t requests = 256, prompt = 1024, output = 128, gemm_n = 8192;
  size_t copy_mib = 2048;
  double utilization = 0.9;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--requests" && i + 1 < argc) requests = std::atoi(argv[++i]);
    else if (a == "--prompt" && i + 1 < argc) prompt = std::atoi(argv[++i]);
    else if (a == "--output" && i + 1 < argc) output = std::atoi(argv[++i]);
    else if (a == "--hf" && i + 1 < argc) hf_json = argv[++i];
    else if (a == "--utilization" && i + 1 < argc) utilization = std::atof(argv[++i]);
    else if (a == "--sampling" && i + 1 < argc) sampling = argv[++i];
    else if (a == "--copy-mib" && i + 1 < argc) copy_mib = size_t(std::atoll(argv[++i]));
    else if (a == "--gemm-n" && i + 1 < argc) gemm_n = std::atoi(argv[++i]);
    else if (out_json.empty() && a.rfind("--", 0) != 0) out_json = a;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (requests < 1 || prompt < 1 || output < 1 || !(utilization > 0.0 && utilization <= 1.0) ||
      (sampling != "gpu" && sampling != "cpu") || copy_mib < 1 || gemm_n < 16) {
    std::fprintf(stderr, "requests, prompt, output and copy MiB must be >= 1, utilization in (0, 1], sampling gpu "
                         "or cpu, gemm n >= 16\n");
    return 2;
  }
  const double bandwidth = cuda::bench::measure_copy(nullptr, copy_mib << 20, 10).gbps * 1e9;
  const cuda::bench::GemmRates gemm = cuda::bench::measure_gemm(gemm_n, 200);
  std::printf("copy bandwidth %.0f GB/s (read + written), cuBLAS bf16 %d^3 %.1f TFLOP/s sustained (%.1f in 10 calls)\n",
              bandwidth / 1e9, gemm_n, gemm.sustained / 1e12, gemm.peak / 1e12);

  EngineConfig config;
  config.block_size = 16;
  config.max_num_seqs = std::min(requests, 256);
  config.max_num_batched_tokens = std::max(8192, prompt);
  config.max_model_len = prompt + output;
  CudaBackendOptions options;
  options.dtype = cuda::DType::kBF16;
  options.max_seqs = config.max_num_seqs;
  options.max_batch_tokens = config.max_num_batched_tokens;
  options.max_model_len = config.max_model_len;
  options.sample_on_device = sampling == "gpu";
  CudaBackend backend(model_dir, options);
  if (backend.samples_on_device() != (sampling == "gpu")) {
    std::fprintf(stderr, "sampling on the GPU is not available: %s\n", backend.sampling_note().c_str());
    return 1;
  }
  const int32_t per_seq = (config.max_model_len + config.block_size - 1) / config.block_size;
  config.num_blocks = std::min(backend.profile_kv_blocks(config.block_size, utilization), config.max_num_seqs * per_seq);
  std::printf("%s on %s: KV pool %d blocks (%.1f GB)\n", model_dir.c_str(), backend.device_name().c_str(),
              config.num_blocks, double(config.num_blocks) * backend.kv_bytes_per_block(config.block_size) / 1e9);
  Engine engine(backend, config);

  const int32_t vocab = backend.config().vocab_size;
  std::unordered_map<uint64_t, double> first_token_ms, last_token_ms;
  std::vector<double> itl;  // each request's gaps between consecutive tokens (ms)
  const Clock::time_point start = Clock::now();
  for (int32_t i = 0; i < requests; ++i) {
    Request r;
    r.id = uint64_t(i) + 1;
    r.prompt.resize(prompt);
    for (int32_t& t : r.prompt) t = random_int(0, vocab - 1);
    r.params.temperature = 0.0f;
    r.params.max_tokens = output;
    r.params.ignore_eos = true;
    engine.submit(std::move(r));
  }
  int64_t output_tokens = 0, steps = 0;
  // Steps that carried prompt tokens (more tokens than sequences) and decode-only steps: how many
  // and their wall time, next to the floor's two parts.
  struct Phase {
    int64_t steps = 0;
    double seconds = 0.0;
  } prefill_steps, decode_steps;
  double last_ms = 0.0;
  while (engine.has_unfinished()) {
    const StepOutput out = engine.step();
    ++steps;
    const double at = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    Phase& phase = out.num_batched_tokens > out.num_batched_seqs ? prefill_steps : decode_steps;
    ++phase.steps;
    phase.seconds += (at - last_ms) / 1e3;
    last_ms = at;
    for (const TokenEvent& e : out.tokens) {
      ++output_tokens;
      first_token_ms.try_emplace(e.request_id, at);
      auto [last, first] = last_token_ms.try_emplace(e.request_id, at);
      if (!first) {
        itl.push_back(at - last->second);
        last->second = at;
      }
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft;
  for (const auto& [id, ms] : first_token_ms) ttft.push_back(ms);
  const double out_per_s = double(output_tokens) / seconds;
  const double total_per_s = double(output_tokens + int64_t(requests) * prompt) / seconds;

  double hf_seconds = 0.0, hf_tokens = 0.0;
  if (!hf_json.empty()) {
    std::ifstream in(hf_json);
    std::stringstream text;
    text << in.rdbuf();
    hf_seconds = json_number(text.str(), "seconds");
    hf_tokens = json_number(text.str(), "output_tokens");
  }
  const double hf_per_s = hf_seconds > 0.0 ? hf_tokens / hf_seconds : 0.0;

  // The floor (see the top): prefill's FLOPs at the sustained GEMM rate, then the decode steps.
  const ModelConfig& c = backend.config();
  const double hidden = c.hidden_size, heads = c.num_heads, head_dim = c.head_dim, layers = c.num_layers;
  const double layer_params = cuda::bench::layer_gemm_params(c);
  const double head_params = hidden * c.vocab_size;
  const double prefill_flops = 2.0 * requests * (double(prompt) * layer_params * layers + head_params) +
                               4.0 * requests * (double(prompt) * prompt / 2.0) * heads * head_dim * layers;
  const double floor_prefill_s = prefill_flops / gemm.sustained;
  const double kv_per_token = 2.0 * layers * c.num_kv_heads * head_dim * double(cuda::dtype_size(backend.dtype()));
  double floor_decode_s = 0.0;
  int64_t floor_steps = 0;
  for (int32_t first = 0; first < requests; first += config.max_num_seqs) {
    const double n = std::min(requests - first, config.max_num_seqs);
    for (int32_t s = 1; s < output; ++s, ++floor_steps) {
      const double context = double(prompt) + s;
      const double bytes = double(backend.decode_weight_bytes()) + n * context * kv_per_token;
      const double flops = 2.0 * n * (layer_params * layers + head_params) + 4.0 * n * context * heads * head_dim * layers;
      floor_decode_s += std::max(bytes / bandwidth, flops / gemm.sustained);
    }
  }
  const double floor_s = floor_prefill_s + floor_decode_s;

  if (!out_json.empty()) {
    std::ofstream out(out_json);
    out << "{\"benchmark\":\"cuda-e2e\",\"device\":\"" << backend.device_name() << "\",\"sampling\":\"" << sampling
        << "\",\"requests\":" << requests
        << ",\"prompt_tokens\":" << prompt << ",\"output_tokens\":" << output << ",\"seconds\":" << seconds
        << ",\"steps\":" << steps << ",\"output_tokens_per_s\":" << out_per_s << ",\"total_tokens_per_s\":" << total_per_s
        << ",\"ttft_ms\":{\"p50\":" << percentile(ttft, 0.5) << ",\"p99\":" << percentile(ttft, 0.99) << "}"
        << ",\"itl_ms\":{\"p50\":" << percentile(itl, 0.5) << ",\"p99\":" << percentile(itl, 0.99) << "}"
        << ",\"graph_steps\":" << backend.graph_steps() << ",\"eager_steps\":" << backend.eager_steps()
        << ",\"transformers\":{\"seconds\":" << hf_seconds << ",\"output_tokens_per_s\":" << hf_per_s << "}"
        << ",\"speedup\":" << (hf_per_s > 0.0 ? out_per_s / hf_per_s : 0.0)
        << ",\"copy_bandwidth_gb_s\":" << bandwidth / 1e9 << ",\"gemm_bf16_tflops\":" << gemm.peak / 1e12
        << ",\"gemm_bf16_sustained_tflops\":" << gemm.sustained / 1e12 << ",\"floor\":{\"seconds\":" << floor_s
        << ",\"prefill_s\":" << floor_prefill_s << ",\"decode_s\":" << floor_decode_s << ",\"decode_steps\":" << floor_steps
        << ",\"fraction\":" << floor_s / seconds << ",\"speedup_at_floor\":"
        << (hf_seconds > 0.0 && hf_tokens > 0.0 ? (double(output_tokens) / floor_s) / hf_per_s : 0.0) << "}"
        << ",\"steps_with_prompt_tokens\":{\"steps\":" << prefill_steps.steps << ",\"seconds\":" << prefill_steps.seconds
        << "},\"decode_only_steps\":{\"steps\":" << decode_steps.steps << ",\"seconds\":" << decode_steps.seconds
        << "}}\n";
  }
  std::printf("\n%d requests x (%d prompt + %d output tokens), bf16, sampling on the %s, on %s\n", requests, prompt,
              output, sampling == "gpu" ? "GPU" : "CPU", backend.device_name().c_str());
  std::printf(
      "strata:       %.1f s, %.0f output tok/s, %.0f total tok/s, TTFT p50 %.0f ms p99 %.0f ms, ITL p50 %.1f ms p99 %.1f "
      "ms, %lld steps\n",
      seconds, out_per_s, total_per_s, percentile(ttft, 0.5), percentile(ttft, 0.99), percentile(itl, 0.5),
      percentile(itl, 0.99), static_cast<long long>(steps));
  std::printf("floor:        %.2f s at this run's ceilings (prefill %.2f s at the sustained GEMM rate, then %lld "
              "decode steps %.2f s at the copy bandwidth or GEMM rate); strata at %.0f%% of it\n",
              floor_s, floor_prefill_s, static_cast<long long>(floor_steps), floor_decode_s, 100.0 * floor_s / seconds);
  std::printf("steps:        %lld with prompt tokens, %.2f s (%.1f ms each); %lld decode-only, %.2f s (%.1f ms each)\n",
              static_cast<long long>(prefill_steps.steps), prefill_steps.seconds,
              prefill_steps.steps > 0 ? 1e3 * prefill_steps.seconds / double(prefill_steps.steps) : 0.0,
              static_cast<long long>(decode_steps.steps), decode_steps.seconds,
              decode_steps.steps > 0 ? 1e3 * decode_steps.seconds / double(decode_steps.steps) : 0.0);
  if (hf_per_s > 0.0) {
    std::printf("transformers: %.1f s, %.0f output tok/s (generate, static batches)\n", hf_seconds, hf_per_s);
    std::printf("speedup: %.2fx (target >= 5x; %.2fx at the floor)\n", out_per_s / hf_per_s,
                (double(output_tokens) / floor_s) / hf_per_s);
  }
  return output_tokens == int64_t(requests) * output ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) { return main_reporting_errors(run, argc, argv); }
