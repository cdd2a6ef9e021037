// The CUDA backend in fp32 against the CPU backend on real models: greedy tokens must be
// identical. Sequences join at different steps, so batches mix chunked prefills with decodes
// in an interleaved order, and every sequence's KV blocks are scattered through the pool.
// Then bf16 on the same schedule, whose prompt logits must be within bf16's reach of fp32's. In both dtypes a
// sequence run alone must give the tokens it got in the shared batches (batch invariance).
// Last, the engine end to end in fp32 with seeded sampling (temperature, top-k, top-p, min-p,
// penalties, min_tokens, logprobs): sampling on the GPU must give the tokens, logprobs and top
// lists that core's CPU Sampler gives on the same backend's logits.
//   check_cuda_backend <model dir>...   (e.g. tinystories-656k and a converted stories260K)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "check_util.h"
#include "strata/cpu_backend.h"
#include "strata/cuda_backend.h"
#include "strata/engine.h"

using namespace strata;
using namespace strata::cuda::checks;

namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kChunk = 24;  // prompt tokens per prefill step: prompts take several

struct Schedule {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> start_step;  // step at which each sequence joins
  int32_t new_tokens = 0;
};

struct Run {
  std::vector<std::vector<int32_t>> tokens;  // generated, per sequence
  std::vector<std::vector<float>> margins;   // top-1 minus top-2 logit at each generated token
  std::vector<std::vector<float>> first_logits;  // per sequence, the logits its prompt produced
};

int32_t argmax(const float* logits, int32_t vocab, float* margin) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  float second = -INFINITY;
  for (int32_t i = 0; i < vocab; ++i)
    if (i != best) second = std::max(second, logits[i]);
  *margin = logits[best] - second;
  return best;
}

Run greedy(ModelBackend& backend, const Schedule& s) {
  const int32_t n = int32_t(s.prompts.size()), vocab = backend.config().vocab_size;
  int32_t per_seq = 0;
  for (const auto& p : s.prompts) per_seq = std::max<int32_t>(per_seq, (int32_t(p.size()) + s.new_tokens + kBlockSize) / kBlockSize);
  // Blocks dealt out in a fixed shuffled order: the same tables for both backends, none contiguous.
  std::vector<int32_t> pool(size_t(n) * per_seq + 5);
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 deal(7);
  std::shuffle(pool.begin(), pool.end(), deal);
  backend.allocate_kv(int32_t(pool.size()), kBlockSize);

  std::vector<std::vector<int32_t>> seq_tokens = s.prompts, tables(n);
  for (int32_t i = 0; i < n; ++i) tables[i].assign(pool.begin() + size_t(i) * per_seq, pool.begin() + size_t(i + 1) * per_seq);
  std::vector<int32_t> done_prompt(n, 0);  // prompt tokens already run
  Run run;
  run.tokens.resize(n);
  run.margins.resize(n);
  run.first_logits.resize(n);
  std::vector<float> logits;
  for (int32_t step = 0;; ++step) {
    StepBatch batch;
    std::vector<int32_t> who;
    // Alternate the order sequences appear in, so prefill and decode slices interleave.
    for (int32_t k = 0; k < n; ++k) {
      const int32_t i = step % 2 == 0 ? k : n - 1 - k;
      if (step < s.start_step[i] || int32_t(run.tokens[i].size()) >= s.new_tokens) continue;
      SeqSlice slice;
      const int32_t prompt = int32_t(s.prompts[i].size());
      if (done_prompt[i] < prompt) {
        slice.start_pos = done_prompt[i];
        slice.n_tokens = std::min(kChunk, prompt - done_prompt[i]);
        slice.want_logits = done_prompt[i] + slice.n_tokens == prompt;
      } else {
        slice.start_pos = int32_t(seq_tokens[i].size()) - 1;
        slice.n_tokens = 1;
        slice.want_logits = true;
      }
      slice.tokens = seq_tokens[i].data() + slice.start_pos;
      slice.block_table = tables[i].data();
      slice.n_blocks = per_seq;
      batch.seqs.push_back(slice);
      who.push_back(i);
    }
    if (batch.seqs.empty()) {
      bool finished = true;
      for (int32_t i = 0; i < n; ++i) finished = finished && int32_t(run.tokens[i].size()) >= s.new_tokens;
      if (finished) break;
      continue;
    }
    int32_t wanted = 0;
    for (const SeqSlice& slice : batch.seqs) wanted += slice.want_logits;
    logits.assign(size_t(wanted) * vocab, 0.0f);
    backend.forward(batch, logits.data());
    int32_t row = 0;
    for (size_t j = 0; j < batch.seqs.size(); ++j) {
      const int32_t i = who[j];
      if (batch.seqs[j].n_tokens > 1 || done_prompt[i] < int32_t(s.prompts[i].size()))
        done_prompt[i] += batch.seqs[j].n_tokens;
      if (!batch.seqs[j].want_logits) continue;
      float margin = 0.0f;
      const float* row_logits = logits.data() + size_t(row++) * vocab;
      if (run.tokens[i].empty()) run.first_logits[i].assign(row_logits, row_logits + vocab);
      const int32_t next = argmax(row_logits, vocab, &margin);
      run.tokens[i].push_back(next);
      run.margins[i].push_back(margin);
      seq_tokens[i].push_back(next);
    }
  }
  return run;
}

// Tokens equal up to the end, or up to a near-tie (margin under 1e-3 on the reference) after
// which the two runs may legitimately part.
bool same_tokens(const Run& ref, const Run& got, std::string* note) {
  for (size_t i = 0; i < ref.tokens.size(); ++i) {
    for (size_t t = 0; t < ref.tokens[i].size(); ++t) {
      if (t >= got.tokens[i].size() || ref.tokens[i][t] != got.tokens[i][t]) {
        *note = "seq " + std::to_string(i) + " token " + std::to_string(t) + ": " + std::to_string(ref.tokens[i][t]) +
                " vs " + std::to_string(t < got.tokens[i].size() ? got.tokens[i][t] : -1) + ", reference margin " +
                std::to_string(ref.margins[i][t]);
        return ref.margins[i][t] < 1e-3f;
      }
    }
  }
  return true;
}

// Every token event of a run, per request, in order.
struct EngineRun {
  std::vector<std::vector<TokenEvent>> events;
  std::vector<std::vector<std::vector<TokenLogprob>>> tops;
  int64_t steps = 0;
};

// Requests whose sampling settings cover every path of the sampler, seeded.
std::vector<Request> sampled_requests(const ModelConfig& config) {
  std::vector<Request> requests;
  for (uint64_t i = 0; i < 12; ++i) {
    Request r;
    r.id = i + 1;
    r.prompt.assign(size_t(2 + random_int(0, 50)), 0);
    r.prompt[0] = config.bos_token_id >= 0 ? config.bos_token_id : 1;
    for (size_t t = 1; t < r.prompt.size(); ++t) r.prompt[t] = random_int(3, config.vocab_size - 1);
    SamplingParams& p = r.params;
    p.seed = 1000 + i;
    p.max_tokens = 24;
    p.temperature = i % 6 == 0 ? 0.0f : 0.6f + 0.1f * float(i % 5);
    if (i % 3 == 1) p.top_k = int32_t(5 + i);
    if (i % 4 == 2) p.top_p = 0.85f;
    if (i % 5 == 3) p.min_p = 0.05f;
    if (i % 4 == 1) p.repetition_penalty = 1.3f;
    if (i % 3 == 2) {
      p.frequency_penalty = 0.5f;
      p.presence_penalty = -0.3f;
    }
    if (i % 4 == 3) {
      p.min_tokens = 8;
      p.stop_token_ids = {random_int(3, config.vocab_size - 1)};
    }
    p.logprobs = int32_t(i % 4) - 1;  // none, 0, 1 and 2
    if (i % 8 >= 4) p.logprobs = 5;
    p.processed_logprobs = i % 2 == 1;
    requests.push_back(r);
  }
  return requests;
}

EngineRun run_engine(ModelBackend& backend, const std::vector<Request>& requests) {
  EngineConfig config;
  config.num_blocks = 128;
  config.block_size = kBlockSize;
  config.max_num_batched_tokens = 48;  // prompts are chunked and join decodes
  config.max_num_seqs = 8;             // a queue: sequences finish and others take their place
  config.max_model_len = 256;
  Engine engine(backend, config);
  for (const Request& r : requests) engine.submit(r);
  EngineRun run;
  run.events.resize(requests.size());
  run.tops.resize(requests.size());
  while (engine.has_unfinished()) {
    const StepOutput out = engine.step();
    ++run.steps;
    for (const TokenEvent& ev : out.tokens) {
      run.events[ev.request_id - 1].push_back(ev);
      run.tops[ev.request_id - 1].emplace_back(out.top_logprobs.begin() + ev.top_offset,
                                               out.top_logprobs.begin() + ev.top_offset + ev.top_count);
    }
  }
  return run;
}

// Tokens and finish reasons equal; logprobs of the token and of the top lists close.
bool same_samples(const EngineRun& ref, const EngineRun& got, std::vector<double>& ref_lp, std::vector<float>& got_lp,
                  std::string* note) {
  for (size_t i = 0; i < ref.events.size(); ++i) {
    if (ref.events[i].size() != got.events[i].size()) {
      *note = "request " + std::to_string(i + 1) + ": " + std::to_string(ref.events[i].size()) + " vs " +
              std::to_string(got.events[i].size()) + " tokens";
      return false;
    }
    for (size_t t = 0; t < ref.events[i].size(); ++t) {
      const TokenEvent &a = ref.events[i][t], &b = got.events[i][t];
      const auto &ta = ref.tops[i][t], &tb = got.tops[i][t];
      if (a.token != b.token || a.finish_reason != b.finish_reason || a.has_logprob != b.has_logprob ||
          ta.size() != tb.size()) {
        *note = "request " + std::to_string(i + 1) + " token " + std::to_string(t) + ": " + std::to_string(a.token) +
                " vs " + std::to_string(b.token);
        return false;
      }
      if (a.has_logprob) {
        ref_lp.push_back(a.logprob);
        got_lp.push_back(b.logprob);
      }
      for (size_t j = 0; j < ta.size(); ++j) {
        if (ta[j].token != tb[j].token) {
          *note = "request " + std::to_string(i + 1) + " token " + std::to_string(t) + ": top " + std::to_string(j) +
                  " differs";
          return false;
        }
        ref_lp.push_back(ta[j].logprob);
        got_lp.push_back(tb[j].logprob);
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  require_device();
  if (argc < 2) {
    std::fprintf(stderr, "usage: check_cuda_backend <model dir>...\n");
    return 2;
  }
  Report report;
  for (int a = 1; a < argc; ++a) {
    const std::string dir = argv[a];
    const std::string name = dir.substr(dir.find_last_of('/') + 1);
    CpuBackend cpu(dir);
    const int32_t vocab = cpu.config().vocab_size;
    Schedule s;
    s.new_tokens = 40;
    for (int32_t i = 0; i < 6; ++i) {
      std::vector<int32_t> prompt(size_t(1 + random_int(0, 70)));
      prompt[0] = cpu.config().bos_token_id >= 0 ? cpu.config().bos_token_id : 1;
      for (size_t t = 1; t < prompt.size(); ++t) prompt[t] = random_int(3, vocab - 1);
      s.prompts.push_back(prompt);
      s.start_step.push_back(i * 3);
    }
    const Run ref = greedy(cpu, s);
    for (cuda::DType dtype : {cuda::DType::kF32, cuda::DType::kBF16}) {
      CudaBackendOptions options;
      options.dtype = dtype;
      options.max_batch_tokens = 512;
      options.max_seqs = 16;
      // STRATA_CUDA_GRAPHS=0 runs every step eagerly, to tell a graph problem from a kernel one.
      const char* graphs_env = std::getenv("STRATA_CUDA_GRAPHS");
      options.cuda_graphs = graphs_env == nullptr || std::string(graphs_env) != "0";
      CudaBackend gpu(dir, options);
      std::printf("%s %s: loaded %.1f MB in %.3f s (%.2f GB/s) on %s\n", name.c_str(), cuda::dtype_name(dtype),
                  gpu.load_stats().bytes / 1e6, gpu.load_stats().seconds, gpu.load_stats().gb_per_s(),
                  gpu.device_name().c_str());
      const Run got = greedy(gpu, s);
      const std::string steps = std::to_string(gpu.graph_steps()) + " graph / " + std::to_string(gpu.eager_steps()) +
                                " eager steps";
      // The schedule has decode-only steps: with graphs on, they must have replayed one.
      if (options.cuda_graphs) report.add_exact("decode replays graphs", cuda::dtype_name(dtype), name + " (" + steps + ")",
                                                gpu.graph_steps() > 0);
      // Batch invariance: each sequence alone gives the tokens it got sharing the batches.
      bool invariant = true;
      std::string where;
      for (size_t i = 0; i < s.prompts.size() && invariant; ++i) {
        Schedule alone;
        alone.prompts = {s.prompts[i]};
        alone.start_step = {0};
        alone.new_tokens = s.new_tokens;
        invariant = greedy(gpu, alone).tokens[0] == got.tokens[i];
        if (!invariant) where = " (seq " + std::to_string(i) + " differs)";
      }
      report.add_exact("batch invariant", cuda::dtype_name(dtype), name + where, invariant);
      std::string note;
      if (dtype == cuda::DType::kF32) {
        std::vector<double> ref_logits;
        std::vector<float> got_logits;
        for (size_t i = 0; i < ref.first_logits.size(); ++i) {
          ref_logits.insert(ref_logits.end(), ref.first_logits[i].begin(), ref.first_logits[i].end());
          got_logits.insert(got_logits.end(), got.first_logits[i].begin(), got.first_logits[i].end());
        }
        report.add("prompt logits vs cpu", "f32", name, compare(ref_logits, got_logits), 1e-4);
        const bool same = same_tokens(ref, got, &note);
        report.add_exact("greedy == cpu", "f32", name + " 6 seqs x 40" + (note.empty() ? "" : " (" + note + ")"), same);
      } else {
        // bf16 rounds every activation, so greedy paths part sooner or later: how far they agree is logged.
        size_t agree = 0, total = 0;
        for (size_t i = 0; i < ref.tokens.size(); ++i) {
          total += ref.tokens[i].size();
          for (size_t t = 0; t < ref.tokens[i].size() && got.tokens[i][t] == ref.tokens[i][t]; ++t) ++agree;
        }
        std::printf("bf16 %s: %zu of %zu tokens agree with the fp32 CPU backend before each sequence's first difference\n",
                    name.c_str(), agree, total);
        // The prompts' logits next to the fp32 CPU backend's: bf16 activations through every
        // layer, and bf16 logits (their own rounding is 2^-9 of their size), land near 1e-2.
        std::vector<double> ref_logits;
        std::vector<float> got_logits;
        for (size_t i = 0; i < ref.first_logits.size(); ++i) {
          ref_logits.insert(ref_logits.end(), ref.first_logits[i].begin(), ref.first_logits[i].end());
          got_logits.insert(got_logits.end(), got.first_logits[i].begin(), got.first_logits[i].end());
        }
        report.add("prompt logits vs cpu", "bf16", name + " (" + std::to_string(agree) + "/" + std::to_string(total) +
                   " greedy tokens agree)", compare(ref_logits, got_logits), 3e-2);
      }
    }
    // The engine, sampling on the GPU and on the CPU from the same fp32 backend's logits.
    const std::vector<Request> requests = sampled_requests(cpu.config());
    EngineRun on_cpu, on_gpu;
    for (bool device : {false, true}) {
      CudaBackendOptions options;
      options.dtype = cuda::DType::kF32;
      options.max_batch_tokens = 64;
      options.max_seqs = 8;
      options.sample_on_device = device;
      CudaBackend gpu(dir, options);
      EngineRun& run = device ? on_gpu : on_cpu;
      run = run_engine(gpu, requests);
      // One forward pass per engine step: a second one (the same KV written twice) would give the
      // same tokens at twice the cost, so only this count shows it.
      const int64_t forwards = gpu.graph_steps() + gpu.eager_steps();
      report.add_exact("engine: one forward per step", device ? "gpu sampling" : "cpu sampling",
                       name + " (" + std::to_string(forwards) + " forwards, " + std::to_string(run.steps) + " steps)",
                       forwards == run.steps);
    }
    std::vector<double> ref_lp;
    std::vector<float> got_lp;
    std::string note;
    size_t tokens = 0;
    for (const auto& e : on_cpu.events) tokens += e.size();
    const bool same = same_samples(on_cpu, on_gpu, ref_lp, got_lp, &note);
    report.add_exact("engine: gpu sampling == cpu sampler", "f32",
                     name + " 12 requests, " + std::to_string(tokens) + " tokens, " + std::to_string(on_gpu.steps) +
                         " steps" + (note.empty() ? "" : " (" + note + ")"),
                     same);
    if (same) report.add("engine: sampled logprobs", "f32", name, compare(ref_lp, got_lp), 1e-5);
  }
  return report.finish("check_cuda_backend");
}
