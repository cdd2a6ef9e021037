// The CUDA backend's forward pass next to the GPU's own limits, measured in one run:
//   - the device-to-device copy bandwidth and cuBLAS's bf16 GEMM rate (8192³), the two ceilings
//     (the GEMM's also sustained: 200 calls back to back, as long as a prefill step or longer);
//   - prefill of P sequences × C tokens in one step, as a fraction of that GEMM rate;
//   - decode steps at each batch size with C-token contexts (CUDA graphs), next to the roofline:
//     the bytes a step must read (weights, plus every sequence's K and V) over the measured copy
//     bandwidth. Two ways: as the engine runs them, greedy sampling on the GPU with only tokens
//     coming back (forward_sample), and with every row's fp32 logits copied to the host (forward).
//     Batches of up to gemv_max_rows sequences (the GEMV kernel's: --gemv-rows, default the
//     backend's) also run with it off, cuBLAS for every GEMM, and with it on but RoPE in its own
//     kernel (gemv_fuse_rope off); a quantized model's batches of up to 16 also with RoPE and
//     the SiLU apart from its GEMV (quant_gemv_fuse off); alternating twice. With --programmatic
//     0|1 (the main column's setting; otherwise the backend's default, and no comparison) every
//     batch also runs with programmatic launch the other way round, and on without the GEMVs' L2
//     prefetch and on with each kernel's successor scheduled only as it completes (its two parts
//     apart). Each batch's kernels (CudaBackend::decode_kernels) are printed under the table.
//   - one more prefill step and one more decode step of each batch, run eagerly with a CUDA event
//     between their stages (CudaBackend::time_stages): each stage's GPU time summed over the
//     layers at the clocks the step runs at, the step's GPU span and its wall time, beside the
//     untimed step (a table after the decode table; "stage_times" in the JSON).
//   bench_cuda_forward <model dir> [out.json] [--context C] [--batches 1,4,8,32,64,128,256] [--prefill-seqs P]
//                      [--copy-mib 2048] [--gemm-n 8192]   (smaller ceilings: a smoke run, e.g. emulated)
//                      [--profile prefill|decode:B] [--gemv-rows N] [--quant-dense-rows N] [--programmatic 0|1]
//                      [--graphs 0|1]
// --quant-dense-rows: CudaBackendOptions::quant_dense_min_rows (0: a GGUF file's GEMMs always on
// quant_gemm; default the backend's).
// --graphs 0: decode steps run eagerly, not from CUDA graphs (CudaBackendOptions::cuda_graphs; the
// kernels are the same), e.g. for a profiler that replays each kernel many times.
// --profile: for a profiler started with profiling off (ncu --profile-from-start off): only one
// step is between cudaProfilerStart and cudaProfilerStop, a prefill step of P x C tokens or one
// sampled decode step of batch B; nothing is timed or written.
// The model is any Hugging Face Llama directory (scripts/device/llama3_random.py writes a
// Llama-3-8B-shaped one with random weights) or GGUF file (llama3_gguf.py writes that model
// quantized; the roofline then counts its blocks' bytes). Prints a table last.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "check_util.h"
#include "strata/cuda_backend.h"
#include "strata/cuda_gemm.h"
#include "strata/cuda_quant.h"

// cudart's profiler switches, declared here: the toolkit's cuda_profiler_api.h is not in every
// CUDA install (NVIDIA's PyPI wheels lack it), the functions are in every cudart.
extern "C" cudaError_t cudaProfilerStart();
extern "C" cudaError_t cudaProfilerStop();

using namespace strata;
using namespace strata::cuda::checks;
using strata::cuda::bench::GemmRates;

namespace {

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs.empty() ? 0.0 : xs[xs.size() / 2];
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Brackets one step for a profiler started with profiling off; a no-op unless `on`.
struct ProfiledStep {
  explicit ProfiledStep(bool on) : on(on) {
    if (on) STRATA_CK(cudaProfilerStart());
  }
  ~ProfiledStep() {
    if (on) cudaProfilerStop();
  }
  bool on;
};

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
};

// One step timed by stages (CudaBackend::time_stages), beside the same step untimed.
struct StageColumn {
  std::string label;
  double step_ms;  // the same step untimed, as the benchmark's table gives it (decode: from its graph)
  double wall_ms;  // the timed step, forward call to return
  CudaStepTimes times;
};

// A table of the timed steps' stages: a row per stage (in step order, every stage any step ran),
// a column per step, then each step's GPU span, wall time and untimed time.
void print_stage_times(const std::vector<StageColumn>& columns) {
  if (columns.empty()) return;
  // Each column's stages are in step order; a stage new to the rows goes after its predecessor there.
  std::vector<std::string> stages;
  for (const StageColumn& col : columns) {
    auto at = stages.begin();
    for (const CudaStageTime& t : col.times.stages) {
      const auto found = std::find(stages.begin(), stages.end(), t.stage);
      at = found != stages.end() ? found + 1 : stages.insert(at, t.stage) + 1;
    }
  }
  std::printf("\nwhere each step's GPU time goes: one more step of each kind, run eagerly with a CUDA event between "
              "its stages (ms, summed over the layers; the GPU's waits for the host count in the stage it waited in)\n");
  std::printf("%-32s", "stage");
  for (const StageColumn& col : columns) std::printf(" %11s", col.label.c_str());
  std::printf("\n");
  for (const std::string& stage : stages) {
    std::printf("%-32s", stage.c_str());
    for (const StageColumn& col : columns) {
      const auto t = std::find_if(col.times.stages.begin(), col.times.stages.end(),
                                  [&](const CudaStageTime& x) { return x.stage == stage; });
      if (t == col.times.stages.end()) std::printf(" %11s", "-");
      else std::printf(" %11.3f", t->ms);
    }
    std::printf("\n");
  }
  const auto line = [&](const char* label, auto value) {
    std::printf("%-32s", label);
    for (const StageColumn& col : columns) std::printf(" %11.3f", value(col));
    std::printf("\n");
  };
  line("GPU span (first event to last)", [](const StageColumn& c) { return c.times.span_ms; });
  line("wall (call to return)", [](const StageColumn& c) { return c.wall_ms; });
  line("untimed step (table above)", [](const StageColumn& c) { return c.step_ms; });
}

int run(int argc, char** argv) {
  require_device();
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_cuda_forward <model dir> [out.json] [--context C] [--batches 1,8,...] "
                         "[--prefill-seqs P]\n");
    return 2;
  }
  std::string model_dir = argv[1], out_json, profile;
  int32_t context = 1024, prefill_seqs = 8, gemm_n = 8192, gemv_rows = CudaBackendOptions{}.gemv_max_rows;
  int32_t quant_dense_rows = CudaBackendOptions{}.quant_dense_min_rows;
  bool programmatic = CudaBackendOptions{}.programmatic_launch, compare_launch_given = false;
  bool graphs = CudaBackendOptions{}.cuda_graphs;
  size_t copy_mib = 2048;
  std::vector<int32_t> batches = {1, 4, 8, 32, 64, 128, 256};
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--context" && i + 1 < argc) context = std::atoi(argv[++i]);
    else if (a == "--prefill-seqs" && i + 1 < argc) prefill_seqs = std::atoi(argv[++i]);
    else if (a == "--gemm-n" && i + 1 < argc) gemm_n = std::atoi(argv[++i]);
    else if (a == "--copy-mib" && i + 1 < argc) copy_mib = size_t(std::atoll(argv[++i]));
    else if (a == "--profile" && i + 1 < argc) profile = argv[++i];
    else if (a == "--gemv-rows" && i + 1 < argc) gemv_rows = std::atoi(argv[++i]);
    else if (a == "--quant-dense-rows" && i + 1 < argc) quant_dense_rows = std::atoi(argv[++i]);
    else if (a == "--graphs" && i + 1 < argc) graphs = std::string(argv[++i]) != "0";
    else if (a == "--programmatic" && i + 1 < argc) {
      programmatic = std::string(argv[++i]) != "0";
      compare_launch_given = true;
    }
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
  // --profile decode:B decodes batch B only; --profile prefill decodes nothing.
  const bool profile_prefill = profile == "prefill";
  int32_t profile_batch = 0;
  if (profile.rfind("decode:", 0) == 0) profile_batch = std::atoi(profile.c_str() + 7);
  if (!profile.empty() && !profile_prefill && profile_batch < 1) {
    std::fprintf(stderr, "--profile wants prefill or decode:B (B >= 1), not %s\n", profile.c_str());
    return 2;
  }
  if (profile_prefill) batches = {1};
  if (profile_batch > 0) batches = {profile_batch};
  const int32_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int32_t steps = 40, warm = 8, block = 16;

  // The copy: median of 10 after 3 warm-up copies. 200 back-to-back 8192³ GEMMs: about 0.3 s on
  // an H100, longer than a prefill step.
  const double bandwidth = cuda::bench::measure_copy(nullptr, copy_mib << 20, 10).gbps * 1e9;
  const GemmRates gemm = cuda::bench::measure_gemm(gemm_n, 200);
  const double peak = gemm.peak;
  std::printf("copy bandwidth %.0f GB/s (read + written), cuBLAS bf16 %d^3 %.1f TFLOP/s (%.1f sustained: the last "
              "50 of 200 calls back to back)\n",
              bandwidth / 1e9, gemm_n, peak / 1e12, gemm.sustained / 1e12);

  CudaBackendOptions options;
  options.dtype = cuda::DType::kBF16;
  options.max_seqs = std::max(max_batch, prefill_seqs);
  options.max_batch_tokens = std::max(prefill_seqs * context, max_batch);
  options.max_model_len = context + steps + warm + 1;
  options.gemv_max_rows = gemv_rows;  // the backend refuses a count outside 0..kGemvMaxRows
  options.quant_dense_min_rows = quant_dense_rows;  // a GGUF file's GEMMs of this many rows: cuBLAS on dequantized weights
  options.programmatic_launch = programmatic;
  options.cuda_graphs = graphs;
  CudaBackend backend(model_dir, options);
  const ModelConfig& c = backend.config();
  std::printf("%s: %d layers, hidden %d, vocab %d, weights %s (%.2f GB a decode step reads); loaded %.2f GB in %.2f s "
              "(%.2f GB/s) on %s\n",
              model_dir.c_str(), c.num_layers, c.hidden_size, c.vocab_size, backend.weights_format().c_str(),
              double(backend.decode_weight_bytes()) / 1e9, backend.load_stats().bytes / 1e9, backend.load_stats().seconds,
              backend.load_stats().gb_per_s(), backend.device_name().c_str());
  if (backend.load_stats().read_seconds > 0.0) {
    std::printf("load: %.2f s reading the file's tensors, %.2f s of host work on them (dequantizing, repacking), "
                "%.2f s the rest (copies and conversions on the device)\n",
                backend.load_stats().read_seconds, backend.load_stats().host_seconds,
                backend.load_stats().seconds - backend.load_stats().read_seconds - backend.load_stats().host_seconds);
  }

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
  // context cached; the full steps but the first are timed (and the second is profiled).
  std::vector<double> prefill_ms;
  const int32_t profiled_prefill = n_seqs >= 2 * prefill_seqs ? prefill_seqs : 0;
  // The prompts of sequences first .. first + prefill_seqs - 1, whole.
  const auto prefill_batch = [&](int32_t first) {
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
    return batch;
  };
  for (int32_t first = 0; first < n_seqs; first += prefill_seqs) {
    const StepBatch batch = prefill_batch(first);
    const ProfiledStep profiled(profile_prefill && first == profiled_prefill);
    const double t0 = now_ms();
    backend.forward(batch, logits.data());
    if (int32_t(batch.seqs.size()) == prefill_seqs) prefill_ms.push_back(now_ms() - t0);
  }
  if (profile_prefill) return 0;
  if (prefill_ms.size() > 1) prefill_ms.erase(prefill_ms.begin());  // the first step loads kernels
  const double layer_params = cuda::bench::layer_gemm_params(c);
  const double prefill_tokens = double(prefill_seqs) * context;
  const double prefill_flops = 2.0 * prefill_tokens * layer_params * c.num_layers +
                               2.0 * prefill_seqs * 2.0 * c.hidden_size * c.vocab_size +
                               4.0 * prefill_seqs * (double(context) * context / 2) * c.num_heads * c.head_dim * c.num_layers;
  const double prefill_median = median(prefill_ms);
  const double prefill_rate = prefill_flops / (prefill_median / 1e3);

  // One more step of each kind, eager, with CUDA events between its stages (time_stages): where
  // its GPU time goes at the clocks it runs at, and how much of its wall time the GPU is busy.
  std::vector<StageColumn> stage_columns;
  const auto time_step = [&](const std::string& label, double step_ms, auto step) {
    backend.time_stages(true);
    const double t0 = now_ms();
    step();
    const double wall = now_ms() - t0;
    backend.time_stages(false);
    stage_columns.push_back({label, step_ms, wall, backend.stage_times()});
  };
  time_step("prefill", prefill_median, [&] { backend.forward(prefill_batch(0), logits.data()); });

  // Decode: each batch size runs `steps` timed steps after `warm`, every sequence one token on.
  // What the backend holds (a GGUF file's blocks at their size), less the gather-only embedding table.
  const double weight_bytes = double(backend.decode_weight_bytes());
  const double kv_bytes_per_token = 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * 2.0;
  // Each step runs twice at the same position, interleaved: sampled on the GPU (greedy; only the
  // tokens come back) as the engine runs it, then with the logits copied to the host.
  const bool sampled = backend.samples_on_device();
  // The step's kernels as the main column runs them (the options the backend was made with), and
  // the comparisons: each the main setting with one choice changed, run on the batches it concerns.
  const CudaBackendOptions main_kernels = backend.options();
  struct Variant {
    const char* key;    // its JSON field
    const char* label;  // its column
    CudaBackendOptions step;
    int32_t max_batch;  // runs on batches of up to this many sequences
  };
  const auto changed = [&](auto change) {
    CudaBackendOptions o = main_kernels;
    change(o);
    return o;
  };
  // A quantized model whose GEMV steps carry RoPE and the SiLU (quant_gemv_fuse): up to
  // kQuantGemvMaxM sequences also run with them apart.
  const bool quant_fusable = backend.decode_kernels(1).find("quant_gemm_") != std::string::npos;
  std::vector<Variant> variants;
  if (compare_launch_given) {
    variants.push_back({programmatic ? "plain_launch_ms" : "programmatic_ms",
                        programmatic ? "plain launch" : "programmatic",
                        changed([](CudaBackendOptions& o) { o.programmatic_launch = !o.programmatic_launch; }),
                        INT32_MAX});
    // Programmatic launch's two parts apart: without the GEMVs' prefetch, without the early trigger.
    variants.push_back({"programmatic_no_prefetch_ms", "PDL, no prefetch", changed([](CudaBackendOptions& o) {
                          o.programmatic_launch = true;
                          o.programmatic_prefetch = false;
                        }),
                        INT32_MAX});
    variants.push_back({"programmatic_late_trigger_ms", "PDL, late trigger", changed([](CudaBackendOptions& o) {
                          o.programmatic_launch = true;
                          o.programmatic_early_trigger = false;
                        }),
                        INT32_MAX});
  }
  variants.push_back({"rope_apart_ms", "RoPE apart", changed([](CudaBackendOptions& o) { o.gemv_fuse_rope = false; }),
                      gemv_rows});
  variants.push_back({"cublas_ms", "cuBLAS only", changed([](CudaBackendOptions& o) { o.gemv_max_rows = 0; }),
                      gemv_rows});
  if (quant_fusable)
    variants.push_back({"quant_epilogues_apart_ms", "q epi apart",
                        changed([](CudaBackendOptions& o) { o.quant_gemv_fuse = false; }), cuda::kQuantGemvMaxM});
  struct Row {
    int32_t batch;
    double ms, host_logits_ms, roofline_ms;
    std::vector<double> variant_ms;  // per variant: the same step that way, or 0 where it did not run
    std::string kernels;             // CudaBackend::decode_kernels(batch) of the main column
  };
  // warm + steps decode steps of batch b from position context; each step's time into ms
  // (sampled) and host_ms (logits to the host).
  // Decode step `step` of sequences 0 .. b - 1 (their tokens into next), at position context + step.
  const auto decode_batch = [&](int32_t b, int32_t step, std::vector<int32_t>& next) {
    next.resize(size_t(b));
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
    return batch;
  };
  SamplingBatch greedy;  // greedy.rows[0 .. b - 1] for a batch of b
  greedy.rows.assign(size_t(max_batch), SamplingRow{});
  for (SamplingRow& r : greedy.rows) r.temperature = 0.0f;
  auto decode_steps = [&](int32_t b, std::vector<double>& ms, std::vector<double>& host_ms) {
    std::vector<int32_t> next;
    SamplingBatch sampling;
    sampling.rows.assign(greedy.rows.begin(), greedy.rows.begin() + b);
    SampledBatch tokens;
    for (int32_t step = 0; step < warm + steps; ++step) {
      const StepBatch batch = decode_batch(b, step, next);
      if (sampled) {
        const ProfiledStep profiled(profile_batch > 0 && step == warm);
        const double t0 = now_ms();
        backend.forward_sample(batch, sampling, tokens);
        if (step >= warm) ms.push_back(now_ms() - t0);
      }
      if (profile_batch > 0) continue;
      const double t0 = now_ms();
      backend.forward(batch, logits.data());
      if (step >= warm) host_ms.push_back(now_ms() - t0);
    }
  };
  // Each batch alternates twice between the main setting and every variant that concerns it
  // (main, variant 1, variant 2, ..., main, ...; each switch captures the graphs again).
  std::vector<Row> rows;
  for (int32_t b : batches) {
    std::vector<double> ms, host_ms;
    std::vector<std::vector<double>> v_ms(variants.size()), v_host_ms(variants.size());
    std::vector<bool> runs(variants.size(), false);
    bool any = false;
    for (size_t v = 0; v < variants.size(); ++v) {
      runs[v] = profile_batch == 0 && b <= variants[v].max_batch;
      any = any || runs[v];
    }
    for (int round = 0; round < (any ? 2 : 1); ++round) {
      backend.set_step_kernels(main_kernels);
      decode_steps(b, ms, host_ms);
      for (size_t v = 0; v < variants.size(); ++v) {
        if (!runs[v]) continue;
        backend.set_step_kernels(variants[v].step);
        decode_steps(b, v_ms[v], v_host_ms[v]);
      }
    }
    backend.set_step_kernels(main_kernels);
    const double bytes = weight_bytes + double(b) * (context + warm + steps / 2) * kv_bytes_per_token;
    Row row{b, sampled ? median(ms) : median(host_ms), median(host_ms), bytes / bandwidth * 1e3, {}, backend.decode_kernels(b)};
    for (size_t v = 0; v < variants.size(); ++v)
      row.variant_ms.push_back(runs[v] ? median(sampled ? v_ms[v] : v_host_ms[v]) : 0.0);
    rows.push_back(row);
    if (profile_batch > 0) continue;
    // The step as the engine runs it (sampled where the backend samples), timed by stages.
    time_step("decode " + std::to_string(b), row.ms, [&] {
      std::vector<int32_t> next;
      const StepBatch batch = decode_batch(b, 0, next);
      SamplingBatch sampling;
      sampling.rows.assign(greedy.rows.begin(), greedy.rows.begin() + b);
      SampledBatch tokens;
      if (sampled) backend.forward_sample(batch, sampling, tokens);
      else backend.forward(batch, logits.data());
    });
  }
  if (profile_batch > 0) return 0;

  if (!out_json.empty()) {
    std::ofstream out(out_json);
    out << "{\"benchmark\":\"cuda-forward\",\"device\":\"" << backend.device_name() << "\",\"model\":\"" << model_dir
        << "\",\"dtype\":\"bf16\",\"weights\":\"" << backend.weights_format()
        << "\",\"decode_weight_bytes\":" << backend.decode_weight_bytes() << ",\"context\":" << context << ",\"copy_bandwidth_gb_s\":" << bandwidth / 1e9
        << ",\"gemm_bf16_tflops\":" << peak / 1e12 << ",\"gemm_bf16_sustained_tflops\":" << gemm.sustained / 1e12 << ",\"load_gb_s\":" << backend.load_stats().gb_per_s() << ",\"load_s\":" << backend.load_stats().seconds
        << ",\"quant_dense_min_rows\":" << quant_dense_rows
        << ",\"load_read_s\":" << backend.load_stats().read_seconds << ",\"load_host_s\":" << backend.load_stats().host_seconds
        << ",\"prefill\":{\"seqs\":" << prefill_seqs << ",\"tokens\":" << prefill_tokens << ",\"ms\":" << prefill_median
        << ",\"tflops\":" << prefill_rate / 1e12 << ",\"fraction_of_gemm\":" << prefill_rate / peak
        << ",\"fraction_of_sustained_gemm\":" << prefill_rate / gemm.sustained << "},\"decode\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << (i ? "," : "") << "{\"batch\":" << rows[i].batch << ",\"ms\":" << rows[i].ms
          << ",\"host_logits_ms\":" << rows[i].host_logits_ms
          << ",\"roofline_ms\":" << rows[i].roofline_ms << ",\"fraction_of_roofline\":" << rows[i].roofline_ms / rows[i].ms
          << ",\"tokens_per_s\":" << rows[i].batch / (rows[i].ms / 1e3);
      for (size_t v = 0; v < variants.size(); ++v)
        if (rows[i].variant_ms[v] > 0) out << ",\"" << variants[v].key << "\":" << rows[i].variant_ms[v];
      out << ",\"kernels\":\"" << rows[i].kernels << "\"}";
    }
    out << "],\"gemv_max_rows\":" << gemv_rows << ",\"programmatic_launch\":" << (programmatic ? "true" : "false") << ",\"decode_sampled_on_gpu\":" << (sampled ? "true" : "false")
        << ",\"graph_steps\":" << backend.graph_steps() << ",\"eager_steps\":" << backend.eager_steps()
        << ",\"stage_times\":[";
    for (size_t i = 0; i < stage_columns.size(); ++i) {
      const StageColumn& col = stage_columns[i];
      out << (i ? "," : "") << "{\"step\":\"" << col.label << "\",\"step_ms\":" << col.step_ms
          << ",\"wall_ms\":" << col.wall_ms << ",\"gpu_span_ms\":" << col.times.span_ms << ",\"stages\":[";
      for (size_t j = 0; j < col.times.stages.size(); ++j) {
        const CudaStageTime& t = col.times.stages[j];
        out << (j ? "," : "") << "{\"stage\":\"" << t.stage << "\",\"calls\":" << t.calls << ",\"ms\":" << t.ms << "}";
      }
      out << "]}";
    }
    out << "]}\n";
  }

  std::printf("\n%s, bf16, context %d\n", backend.device_name().c_str(), context);
  std::printf("prefill %d x %d: %.1f ms, %.0f TFLOP/s = %.0f%% of the GEMM rate (target >= 60%%), %.0f%% of its "
              "sustained rate\n",
              prefill_seqs, context, prefill_median, prefill_rate / 1e12, 100.0 * prefill_rate / peak,
              100.0 * prefill_rate / gemm.sustained);
  std::printf("decode: %s; \"+ host logits\": the same step with every row's fp32 logits copied to the host\n",
              sampled ? "greedy sampling on the GPU, as the engine runs it" : "logits to the host (no GPU sampler)");
  std::printf("%6s %10s %12s %10s %10s %16s", "batch", "step ms", "roofline ms", "fraction", "tok/s",
              "+ host logits ms");
  for (const Variant& v : variants) std::printf(" %18s", (std::string(v.label) + " ms").c_str());
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%6d %10.3f %12.3f %9.0f%% %10.0f %16.3f", r.batch, r.ms, r.roofline_ms, 100.0 * r.roofline_ms / r.ms,
                r.batch / (r.ms / 1e3), r.host_logits_ms);
    // A variant's step time and its fraction of the roofline, or "-" where it did not run.
    for (const double ms : r.variant_ms) {
      if (ms > 0) std::printf(" %13.3f %3.0f%%", ms, 100.0 * r.roofline_ms / ms);
      else std::printf(" %18s", "-");
    }
    std::printf("\n");
  }
  for (const Row& r : rows) std::printf("batch %d: %s\n", r.batch, r.kernels.c_str());
  print_stage_times(stage_columns);
  if (quant_fusable)
    std::printf("(\"q epi apart\": quant_gemv_fuse off, rope_write_kv and silu_mul after the quantized GEMV; "
                "alternating)\n");
  if (gemv_rows > 0)
    std::printf("(GEMMs of up to %d rows on the GEMV kernel, RoPE inside the q/k/v one; \"cuBLAS only\": the same steps "
                "with it off; \"RoPE apart\": with rope_write_kv after the GEMV; alternating)\n",
                gemv_rows);
  else
    std::printf("(every dense GEMM on cuBLAS: the GEMV kernel is off, --gemv-rows N compares it)\n");
  if (compare_launch_given)
    std::printf("(programmatic launch %s in the main column, %s in \"%s\"; \"PDL, no prefetch\": on without the "
                "GEMVs' L2 prefetch; \"PDL, late trigger\": on, each kernel's successor scheduled as it completes)\n",
                programmatic ? "on" : "off", programmatic ? "off" : "on", programmatic ? "plain launch ms" : "programmatic ms");
  else
    std::printf("(programmatic launch %s; --programmatic 0|1 compares it)\n", programmatic ? "on" : "off");
  std::printf("(targets: >= 85%% of the roofline at batch 1, >= 70%% at batch 64; %lld graph / %lld eager steps)\n",
              static_cast<long long>(backend.graph_steps()), static_cast<long long>(backend.eager_steps()));
  return 0;
}
}  // namespace

int main(int argc, char** argv) { return main_reporting_errors(run, argc, argv); }
