// The CUDA backend in bf16 against Hugging Face transformers on the same GPU and the same weights:
// the last-position logits of a batch of prompts, prefilled together in one step. The model and
// the references come from scripts/device/llama3_random.py (a Llama-3-8B shape, random weights):
// transformers' logits in bf16 (logits.bin) and in fp32 on the bf16 weights upcast
// (logits_fp32.bin, the reference).
//
// A fixed bound against transformers' bf16 logits could fail a correct backend: transformers
// keeps its residual stream in bf16, Strata in fp32, so the two differ by about transformers'
// own bf16 error. So each prompt is judged against fp32, with transformers' bf16 run as the
// yardstick:
//   - relative L2 error against fp32 <= 2 x transformers' bf16 error against fp32 (at least 1e-3);
//   - top-1: Strata's top token is fp32's, or a near-tie that bf16 rounding can flip: fp32's
//     logit for it is within transformers' bf16 max abs error of fp32's top logit.
// Also reports the safetensors load throughput.
//   check_cuda_hf_logits <dir written by llama3_random.py>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "check_util.h"
#include "strata/cuda_backend.h"

using namespace strata;
using namespace strata::cuda::checks;

namespace {

std::vector<std::vector<int32_t>> read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t count = 0;
  if (!in.read(reinterpret_cast<char*>(&count), 4) || count <= 0) {
    std::fprintf(stderr, "%s: no prompts\n", path.c_str());
    std::exit(2);
  }
  std::vector<std::vector<int32_t>> prompts(count);
  for (auto& p : prompts) {
    int32_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 4);
    p.resize(n > 0 ? n : 0);
    if (n <= 0 || !in.read(reinterpret_cast<char*>(p.data()), 4 * std::streamsize(n))) {
      std::fprintf(stderr, "%s: truncated\n", path.c_str());
      std::exit(2);
    }
  }
  return prompts;
}

std::vector<float> read_logits(const std::string& path, size_t count) {
  std::vector<float> out(count);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(out.data()), std::streamsize(count * 4))) {
    std::fprintf(stderr, "%s: expected %zu floats (written by scripts/device/llama3_random.py)\n", path.c_str(), count);
    std::exit(2);
  }
  return out;
}

template <typename T>
size_t argmax(const std::vector<T>& xs) {
  size_t best = 0;
  for (size_t i = 1; i < xs.size(); ++i) {
    if (std::isfinite(double(xs[i])) && !(double(xs[i]) <= double(xs[best]))) best = i;
  }
  return best;
}

// Strata's error may be this many times transformers' bf16 error, both against fp32.
constexpr double kErrorFactor = 2.0;
constexpr double kErrorFloor = 1e-3;

}  // namespace

int main(int argc, char** argv) {
  require_device();
  if (argc != 2) {
    std::fprintf(stderr, "usage: check_cuda_hf_logits <dir written by llama3_random.py>\n");
    return 2;
  }
  const std::string dir = argv[1];
  const auto prompts = read_prompts(dir + "/prompts.bin");
  int32_t total = 0, longest = 0;
  for (const auto& p : prompts) {
    total += int32_t(p.size());
    longest = std::max(longest, int32_t(p.size()));
  }

  CudaBackendOptions options;
  options.dtype = cuda::DType::kBF16;
  options.max_batch_tokens = total;
  options.max_seqs = int32_t(prompts.size());
  options.max_model_len = longest;
  options.cuda_graphs = false;  // one prefill step: nothing to replay
  CudaBackend backend(dir, options);
  const int32_t vocab = backend.config().vocab_size;
  std::printf("loaded %.2f GB of safetensors in %.2f s: %.2f GB/s to %s\n", backend.load_stats().bytes / 1e9,
              backend.load_stats().seconds, backend.load_stats().gb_per_s(), backend.device_name().c_str());

  const size_t n_logits = prompts.size() * size_t(vocab);
  const std::vector<float> hf_bf16 = read_logits(dir + "/logits.bin", n_logits);
  const std::vector<float> hf_fp32 = read_logits(dir + "/logits_fp32.bin", n_logits);

  constexpr int32_t kBlock = 16;
  const int32_t per_seq = (longest + kBlock - 1) / kBlock;
  backend.allocate_kv(int32_t(prompts.size()) * per_seq, kBlock);
  std::vector<std::vector<int32_t>> tables(prompts.size(), std::vector<int32_t>(per_seq));
  StepBatch batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::iota(tables[i].begin(), tables[i].end(), int32_t(i) * per_seq);
    SeqSlice s;
    s.tokens = prompts[i].data();
    s.n_tokens = int32_t(prompts[i].size());
    s.block_table = tables[i].data();
    s.n_blocks = per_seq;
    s.want_logits = true;
    batch.seqs.push_back(s);
  }
  std::vector<float> logits(n_logits);
  backend.forward(batch, logits.data());

  Report report;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto row = [&](const std::vector<float>& all) {
      return std::vector<float>(all.begin() + i * vocab, all.begin() + (i + 1) * vocab);
    };
    const std::vector<float> ours = row(logits), bf16 = row(hf_bf16), fp32f = row(hf_fp32);
    const std::vector<double> fp32(fp32f.begin(), fp32f.end()), bf16d(bf16.begin(), bf16.end());
    const Comparison hf = compare(fp32, bf16);           // transformers' own bf16 error: the yardstick
    const Comparison got = compare(fp32, ours);          // Strata's, judged
    const Comparison vs_hf_bf16 = compare(bf16d, ours);  // shown, not judged
    const std::string shape = "prompt of " + std::to_string(prompts[i].size()) + " tokens";
    const size_t top_fp32 = argmax(fp32f), top_ours = argmax(ours), top_hf = argmax(bf16);
    const double gap = double(fp32f[top_fp32]) - double(fp32f[top_ours]);
    std::printf("     %s: transformers bf16 vs fp32 rel_l2 %.3e max_abs %.3e top-1 %s; Strata vs transformers bf16 "
                "rel_l2 %.3e; top-1 fp32 %zu, Strata %zu (fp32 gap %.3e)\n",
                shape.c_str(), hf.rel_l2, hf.max_abs, top_hf == top_fp32 ? "agrees" : "differs", vs_hf_bf16.rel_l2,
                top_fp32, top_ours, gap);
    report.add("logits vs hf fp32", "bf16", shape, got, std::max(kErrorFactor * hf.rel_l2, kErrorFloor));
    report.add_exact("top-1 vs hf fp32", "bf16", shape, got.non_finite == 0 && gap <= hf.max_abs);
  }
  return report.finish("check_cuda_hf_logits");
}
