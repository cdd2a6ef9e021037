// Forward-pass throughput of the CPU backend alone (no scheduler): decode tokens/s at several
// batch sizes and prefill tokens/s, with contiguous block tables. Prints a table; --json adds
// one JSON object on the last line for scripts.
//
//   bench_cpu_forward [--model DIR | --dummy PRESET] [--threads N] [--steps N] [--batches 1,8,32,128]
//                     [--no-prefill] [--prefill-repeats N] [--json]
//   DIR defaults to $STRATA_MODELS_DIR/tinystories-656k.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "strata/cpu_backend.h"
#include "strata/model_config.h"
#include "strata/model_error.h"

using namespace strata;

namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kDecodePrompt = 32;  // tokens of context before the timed decode steps

struct Result {
  std::string phase;
  int32_t batch;
  int64_t tokens_per_step;
  double seconds_per_step;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int32_t> some_tokens(int32_t n, int32_t vocab, uint32_t seed) {
  std::vector<int32_t> out(n);
  for (int32_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    out[i] = static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab - 3)) + 3;
  }
  return out;
}

// `batch` sequences of `prompt_len` tokens prefilled in one step, then `steps` decode steps of
// all of them; only the decode steps are timed.
Result bench_decode(CpuBackend& backend, int32_t batch, int32_t steps) {
  const int32_t vocab = backend.config().vocab_size;
  const int32_t blocks_per_seq = (kDecodePrompt + steps + 4 + kBlockSize - 1) / kBlockSize;
  std::vector<std::vector<int32_t>> tables(batch), prompts(batch);
  for (int32_t s = 0; s < batch; ++s) {
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    prompts[s] = some_tokens(kDecodePrompt, vocab, 17 + s);
  }
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  StepBatch prefill;
  for (int32_t s = 0; s < batch; ++s) prefill.seqs.push_back({prompts[s].data(), kDecodePrompt, 0, tables[s].data(), blocks_per_seq, true});
  backend.forward(prefill, logits.data());

  std::vector<int32_t> next(batch, 5);
  const auto step = [&](int32_t position) {
    StepBatch decode;
    for (int32_t s = 0; s < batch; ++s) decode.seqs.push_back({&next[s], 1, position, tables[s].data(), blocks_per_seq, true});
    backend.forward(decode, logits.data());
    for (int32_t s = 0; s < batch; ++s) {
      const float* row = logits.data() + static_cast<size_t>(s) * vocab;
      next[s] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
  };
  for (int32_t i = 0; i < 4; ++i) step(kDecodePrompt + i);  // warm-up
  const double start = now_seconds();
  for (int32_t i = 0; i < steps; ++i) step(kDecodePrompt + 4 + i);
  return {"decode", batch, batch, (now_seconds() - start) / steps};
}

// `batch` prompts of `prompt_len` tokens in one step, logits of each last token; repeated.
Result bench_prefill(CpuBackend& backend, int32_t batch, int32_t prompt_len, int32_t repeats) {
  const int32_t vocab = backend.config().vocab_size;
  const int32_t blocks_per_seq = (prompt_len + kBlockSize - 1) / kBlockSize;
  std::vector<std::vector<int32_t>> tables(batch), prompts(batch);
  StepBatch step;
  for (int32_t s = 0; s < batch; ++s) {
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    prompts[s] = some_tokens(prompt_len, vocab, 99 + s);
    step.seqs.push_back({prompts[s].data(), prompt_len, 0, tables[s].data(), blocks_per_seq, true});
  }
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  backend.forward(step, logits.data());  // warm-up
  const double start = now_seconds();
  for (int32_t i = 0; i < repeats; ++i) backend.forward(step, logits.data());
  return {"prefill", batch, int64_t{batch} * prompt_len, (now_seconds() - start) / repeats};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, dummy;
  int32_t threads = 0, steps = 64, prefill_repeats = 0;  // 0: 20 of 1 x 128, 5 of the others
  bool json = false, prefill = true;
  std::vector<int32_t> batches = {1, 8, 32, 128};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--model" && has_value) model_dir = argv[++i];
    else if (arg == "--dummy" && has_value) dummy = argv[++i];
    else if (arg == "--threads" && has_value) threads = std::atoi(argv[++i]);
    else if (arg == "--steps" && has_value) steps = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--batches" && has_value) {
      batches.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long b = std::strtol(p, &end, 10);
        if (end == p || b < 1 || b > 128) {
          std::fprintf(stderr, "--batches: a comma-separated list of batch sizes from 1 to 128\n");
          return 2;
        }
        batches.push_back(static_cast<int32_t>(b));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (arg == "--prefill-repeats" && has_value) prefill_repeats = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--no-prefill") prefill = false;
    else if (arg == "--json") json = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--model DIR | --dummy PRESET] [--threads N] [--steps N] [--batches 1,8,32,128] [--no-prefill] "
                   "[--prefill-repeats N] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  if (model_dir.empty() && dummy.empty()) {
    const char* models = std::getenv("STRATA_MODELS_DIR");
    if (models == nullptr) {
      std::fprintf(stderr, "set STRATA_MODELS_DIR to the folder holding tinystories-656k/, or pass --model DIR\n");
      return 2;
    }
    model_dir = std::string(models) + "/tinystories-656k";
  }

  try {
    std::unique_ptr<CpuBackend> backend =
        dummy.empty() ? std::make_unique<CpuBackend>(model_dir, CpuBackendOptions{threads})
                      : std::make_unique<CpuBackend>(preset_model_config(dummy), 1, CpuBackendOptions{threads});
    const int32_t blocks_per_seq = (kDecodePrompt + steps + 4 + kBlockSize - 1) / kBlockSize;
    backend->allocate_kv(std::max(128 * blocks_per_seq, 8 * (512 / kBlockSize)), kBlockSize);

    std::vector<Result> results;
    for (int32_t batch : batches) results.push_back(bench_decode(*backend, batch, steps));
    if (prefill) {
      const auto repeats = [&](int32_t by_default) { return prefill_repeats > 0 ? prefill_repeats : by_default; };
      results.push_back(bench_prefill(*backend, 1, 128, repeats(20)));
      results.push_back(bench_prefill(*backend, 1, 512, repeats(5)));
      results.push_back(bench_prefill(*backend, 8, 128, repeats(5)));
    }

    const std::string name = dummy.empty() ? model_dir : "dummy " + dummy;
    std::printf("CPU backend forward, %s, %d threads, %s kernels, block size %d, decode context %d..%d\n", name.c_str(),
                backend->num_threads(), backend->kernel_isa().c_str(), kBlockSize, kDecodePrompt, kDecodePrompt + 4 + steps);
    std::printf("| phase   | batch | tokens/step | ms/step  | tokens/s   |\n");
    std::printf("|---------|------:|------------:|---------:|-----------:|\n");
    for (const Result& r : results) {
      std::printf("| %-7s | %5d | %11lld | %8.3f | %10.0f |\n", r.phase.c_str(), r.batch, static_cast<long long>(r.tokens_per_step),
                  r.seconds_per_step * 1e3, r.tokens_per_step / r.seconds_per_step);
    }
    if (json) {
      std::printf("{\"model\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"results\": [", name.c_str(), backend->num_threads(),
                  backend->kernel_isa().c_str());
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        std::printf("%s{\"phase\": \"%s\", \"batch\": %d, \"tokens_per_step\": %lld, \"ms_per_step\": %.4f, \"tokens_per_s\": %.1f}",
                    i ? ", " : "", r.phase.c_str(), r.batch, static_cast<long long>(r.tokens_per_step), r.seconds_per_step * 1e3,
                    r.tokens_per_step / r.seconds_per_step);
      }
      std::printf("]}\n");
    }
  } catch (const ModelError& e) {
    std::fprintf(stderr, "%s: %s\n", e.code().c_str(), e.what());
    return 1;
  }
  return 0;
}
