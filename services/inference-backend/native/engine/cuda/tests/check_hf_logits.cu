// The CUDA backend in bf16 against Hugging Face transformers in bf16 on the same GPU: the
// last-position logits of a batch of prompts, prefilled together in one step, must be within
// bf16's reach of transformers' (relative L2 error <= 1e-2 per prompt). The model and the
// reference come from scripts/device/llama3_random.py (a Llama-3-8B shape, random weights).
// Also reports the safetensors load throughput.
//   check_cuda_hf_logits <dir written by llama3_random.py>
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

  std::vector<float> reference(size_t(prompts.size()) * vocab);
  std::ifstream ref(dir + "/logits.bin", std::ios::binary);
  if (!ref.read(reinterpret_cast<char*>(reference.data()), std::streamsize(reference.size() * 4))) {
    std::fprintf(stderr, "%s/logits.bin: expected %zu floats\n", dir.c_str(), reference.size());
    return 2;
  }

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
  std::vector<float> logits(reference.size());
  backend.forward(batch, logits.data());

  Report report;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<double> want(reference.begin() + i * vocab, reference.begin() + (i + 1) * vocab);
    const std::vector<float> got(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
    report.add("logits vs transformers", "bf16", "prompt of " + std::to_string(prompts[i].size()) + " tokens",
               compare(want, got), 1e-2);
  }
  return report.finish("check_cuda_hf_logits");
}
