// The CUDA backend in fp32 against the CPU backend on real models: greedy tokens must be
// identical. Sequences join at different steps, so batches mix chunked prefills with decodes
// in an interleaved order, and every sequence's KV blocks are scattered through the pool.
// Then bf16 on the same schedule, whose prompt logits must be within bf16's reach of fp32's. In both dtypes a
// sequence run alone must give the tokens it got in the shared batches (batch invariance).
// Last, the engine end to end in fp32 with seeded sampling (temperature, top-k, top-p, min-p,
// penalties, min_tokens, logprobs): sampling on the GPU must give the tokens, logprobs and top
// lists that core's CPU Sampler gives on the same backend's logits.
// A GGUF model of fp32 tensors (tinystories-656k-gguf) is also written out quantized, Q8_0, Q4_0,
// Q4_1 and a Q4_1/Q8_0 mix, and each copy run with its blocks kept on the device (bf16, the
// quantized GEMMs) against the same file in fp32 (blocks dequantized exactly) and the CPU backend;
// and in F16 and BF16 (check_float_copy).
//   check_cuda_backend <model dir or .gguf>...   (e.g. tinystories-656k and a converted stories260K)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "check_util.h"
#include "gguf_writer.h"
#include "int4_writer.h"
#include "strata/cpu_backend.h"
#include "strata/cuda_backend.h"
#include "strata/engine.h"
#include "strata/float_convert.h"
#include "strata/gguf.h"
#include "strata/model_source.h"
#include "strata/quant.h"

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
  std::vector<std::vector<float>> second_logits; // per sequence, those of its first decode step
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
  run.second_logits.resize(n);
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
      if (run.tokens[i].size() == 1) run.second_logits[i].assign(row_logits, row_logits + vocab);
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

// `seqs` prompts of BOS and 0..max_extra random tokens, joining `stagger` steps apart.
Schedule random_schedule(const ModelConfig& c, int32_t seqs, int32_t max_extra, int32_t stagger, int32_t new_tokens) {
  Schedule s;
  s.new_tokens = new_tokens;
  for (int32_t i = 0; i < seqs; ++i) {
    std::vector<int32_t> prompt(size_t(1 + random_int(0, max_extra)));
    prompt[0] = c.bos_token_id >= 0 ? c.bos_token_id : 1;
    for (size_t t = 1; t < prompt.size(); ++t) prompt[t] = random_int(3, c.vocab_size - 1);
    s.prompts.push_back(prompt);
    s.start_step.push_back(i * stagger);
  }
  return s;
}

// Every sequence's logits of one kind, one after another (double for a reference, float to check).
template <typename T>
std::vector<T> joined(const std::vector<std::vector<float>>& per_sequence) {
  std::vector<T> all;
  for (const auto& l : per_sequence) all.insert(all.end(), l.begin(), l.end());
  return all;
}
template <typename T>
std::vector<T> prompt_logits(const Run& r) {
  return joined<T>(r.first_logits);
}
template <typename T>
std::vector<T> decode_logits(const Run& r) {  // each sequence's first decode step
  return joined<T>(r.second_logits);
}

// Sequence i of `s` on its own, for `new_tokens` tokens.
Schedule alone(const Schedule& s, size_t i, int32_t new_tokens) {
  Schedule one;
  one.prompts = {s.prompts[i]};
  one.start_step = {0};
  one.new_tokens = new_tokens;
  return one;
}

// Each sequence alone gives the tokens it got sharing the batches of `got`; `where` names the
// first that does not.
bool batch_invariant(ModelBackend& backend, const Schedule& s, const Run& got, std::string* where) {
  for (size_t i = 0; i < s.prompts.size(); ++i) {
    if (greedy(backend, alone(s, i, s.new_tokens)).tokens[0] != got.tokens[i]) {
      *where = " (seq " + std::to_string(i) + " differs)";
      return false;
    }
  }
  return true;
}

// How many tokens of `got` equal `ref`'s before each sequence's first difference, and of how many.
std::pair<size_t, size_t> agreeing_tokens(const Run& ref, const Run& got) {
  size_t agree = 0, total = 0;
  for (size_t i = 0; i < ref.tokens.size(); ++i) {
    total += ref.tokens[i].size();
    for (size_t t = 0; t < ref.tokens[i].size() && got.tokens[i][t] == ref.tokens[i][t]; ++t) ++agree;
  }
  return {agree, total};
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

// ---- Quantized GGUF copies ---------------------------------------------------------------------
// ggml's reference quantizers (quantize_row_*_ref), for 32-value blocks of one row.
void quantize_block(QuantType type, const float* x, uint8_t* out) {
  if (type == QuantType::Q8_0) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b{};
    b.d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(std::lround(x[j] * id));
    std::memcpy(out, &b, sizeof b);
  } else if (type == QuantType::Q4_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b{};
    b.d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, int(x[j] * id + 8.5f)), hi = std::min(15, int(x[j + 16] * id + 8.5f));
      b.qs[j] = uint8_t(lo | (hi << 4));
    }
    std::memcpy(out, &b, sizeof b);
  } else {
    float lo_v = x[0], hi_v = x[0];
    for (int j = 1; j < 32; ++j) lo_v = std::min(lo_v, x[j]), hi_v = std::max(hi_v, x[j]);
    const float d = (hi_v - lo_v) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b{};
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(lo_v);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, int((x[j] - lo_v) * id + 0.5f));
      const int hi = std::min(15, int((x[j + 16] - lo_v) * id + 0.5f));
      b.qs[j] = uint8_t(lo | (hi << 4));
    }
    std::memcpy(out, &b, sizeof b);
  }
}

uint32_t ggml_type_of(QuantType type) {
  return type == QuantType::Q4_0 ? 2u : type == QuantType::Q4_1 ? 3u : 8u;
}

// A writer holding `source`'s model metadata (the keys a llama GGUF's config reads).
strata_test::GgufWriter with_metadata(const GgufFile& source) {
  strata_test::GgufWriter w;
  w.str("general.architecture", source.get_string("general.architecture"));
  for (const char* key : {"llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.attention.head_count_kv", "llama.context_length",
                          "llama.attention.key_length", "llama.vocab_size", "tokenizer.ggml.bos_token_id",
                          "tokenizer.ggml.eos_token_id"})
    if (source.has(key)) w.u32(key, uint32_t(source.get_int(key)));
  for (const char* key : {"llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base"})
    if (source.has(key)) w.f32(key, float(source.get_float(key)));
  return w;
}

// `source` (fp32 tensors) written to `out` with every matrix quantized: `type`, or `mixed` for
// the v projections and the down projections (a fused q/k/v of two types, a down of its own).
// `untie`: the tied embedding also written as output.weight (the output projection's own blocks,
// so the embedding table's are uploaded apart for the gather's dequantization).
void write_quantized(const GgufFile& source, QuantType type, std::optional<QuantType> mixed,
                     const std::filesystem::path& out, bool untie = false) {
  strata_test::GgufWriter w = with_metadata(source);
  for (const GgufTensor& t : source.tensors()) {
    if (t.type != 0) throw std::runtime_error(t.name + " is not F32: quantized copies start from fp32 tensors");
    strata_test::GgufWriter::Tensor q{t.name, std::vector<uint64_t>(t.dims.begin(), t.dims.end()), 0u, {}};
    const int64_t cols = int64_t(t.dims[0]), rows = t.dims.size() == 2 ? int64_t(t.dims[1]) : 1;
    const auto* x = reinterpret_cast<const float*>(t.data);
    if (t.dims.size() != 2 || cols % 32 != 0) {
      q.bytes.assign(reinterpret_cast<const char*>(t.data), t.nbytes);
    } else {
      const bool other =
          mixed && (t.name.find("attn_v") != std::string::npos || t.name.find("ffn_down") != std::string::npos);
      const QuantType qt = other ? *mixed : type;
      q.type = ggml_type_of(qt);
      const int64_t block = quant_block_bytes(qt);
      q.bytes.resize(size_t(rows * cols / 32 * block));
      auto* blocks = reinterpret_cast<uint8_t*>(q.bytes.data());
      for (int64_t i = 0; i < rows * cols / 32; ++i) quantize_block(qt, x + i * 32, blocks + i * block);
    }
    if (untie && t.name == "token_embd.weight" && source.tensor("output.weight") == nullptr) {
      strata_test::GgufWriter::Tensor head = q;
      head.name = "output.weight";
      w.tensor(std::move(head));
    }
    w.tensor(std::move(q));
  }
  std::ofstream(out, std::ios::binary) << w.build();
}

// `source` (fp32 tensors) written to `out` with every matrix in F16 (`bf16` false) or BF16,
// rounded to nearest even; the norms stay F32, as converters write them.
void write_float(const GgufFile& source, bool bf16, const std::filesystem::path& out) {
  strata_test::GgufWriter w = with_metadata(source);
  for (const GgufTensor& t : source.tensors()) {
    if (t.type != 0) throw std::runtime_error(t.name + " is not F32: float copies start from fp32 tensors");
    strata_test::GgufWriter::Tensor c{t.name, std::vector<uint64_t>(t.dims.begin(), t.dims.end()), 0u, {}};
    if (t.dims.size() != 2) {
      c.bytes.assign(reinterpret_cast<const char*>(t.data), t.nbytes);
    } else {
      c.type = bf16 ? 30u : 1u;
      const auto* x = reinterpret_cast<const float*>(t.data);
      for (int64_t i = 0; i < t.elements(); ++i) {
        const uint16_t h = bf16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
        c.bytes.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    w.tensor(std::move(c));
  }
  std::ofstream(out, std::ios::binary) << w.build();
}

// A float copy of `source` (F16 or BF16 matrices, q and k in the file's permuted row order), its
// matrices staged from the file's mapping and converted on the device: in its own dtype it must
// give the source file's run in that dtype bit for bit (the device rounds the fp32 values to the
// same halves the copy holds), and in fp32 the CPU backend's greedy tokens on the same copy (its
// halves widened exactly on both). The load's progress counts the copy's tensor bytes.
void check_float_copy(Report& report, const std::filesystem::path& source, const std::filesystem::path& copy,
                      const std::string& name, bool bf16) {
  CpuBackend cpu(copy);
  const Schedule s = random_schedule(cpu.config(), 4, 40, 2, 16);
  CudaBackendOptions options;
  options.max_batch_tokens = 256;
  options.max_seqs = 8;
  options.dtype = bf16 ? cuda::DType::kBF16 : cuda::DType::kF16;
  Run from_source;
  {
    CudaBackend from(source, options);
    from_source = greedy(from, s);
  }
  int64_t progress[2] = {-1, -1};
  options.progress = LoadProgress(progress);
  CudaBackend half(copy, options);
  const Run got = greedy(half, s);
  const int64_t bytes = gguf_tensor_bytes(GgufFile::open(copy));
  const char* label = bf16 ? "bf16" : "f16";
  report.add_exact("float gguf load progress", label, name + " (" + std::to_string(bytes) + " tensor bytes)",
                   progress[0] == bytes && progress[1] == bytes);
  report.add_exact("float gguf == fp32 gguf", label, name + " (tokens, margins, logits, bit for bit)",
                   got.tokens == from_source.tokens && got.margins == from_source.margins &&
                       got.first_logits == from_source.first_logits && got.second_logits == from_source.second_logits);
  options.dtype = cuda::DType::kF32;
  options.progress = {};
  CudaBackend exact(copy, options);
  const Run ref = greedy(cpu, s), on_gpu = greedy(exact, s);
  std::string note;
  const bool same = same_tokens(ref, on_gpu, &note);
  report.add_exact("float gguf greedy == cpu", "f32", name + (note.empty() ? "" : " (" + note + ")"), same);
  report.add("float gguf prompt logits vs cpu", "f32", name, compare(prompt_logits<double>(ref), prompt_logits<float>(on_gpu)),
             1e-4);
}

// One quantized copy: bf16 with the blocks on the device against the same file in fp32 (blocks
// dequantized: the exact weights), both on the interleaved schedule; fp32 against the CPU
// backend (whose activations are quantized to 8 bits, as llama.cpp's: close, not equal).
// The bytes of a checkpoint's tensors: what a load's progress counts up to.
int64_t checkpoint_bytes(const std::filesystem::path& path) {
  const ModelSource source = resolve_model_source(path);
  if (source.kind == ModelSource::Kind::kGguf) return gguf_tensor_bytes(GgufFile::open(source.path));
  int64_t bytes = 0;
  for (const TensorInfo& t : SafetensorsArchive::open_model_dir(source.path).tensors()) bytes += int64_t(t.nbytes);
  return bytes;
}

// `blocks_on_device` false: a checkpoint whose bf16 load keeps no blocks (GPTQ act-order), so
// the checks of the quantized kernels' paths (fused epilogues apart, the dense prefill) do not apply.
void check_quantized(Report& report, const std::filesystem::path& file, const std::string& name,
                     const std::string& bf16_format, const std::string& f32_format, const std::string& kernels,
                     bool blocks_on_device = true) {
  CpuBackend cpu(file);
  Schedule s = random_schedule(cpu.config(), 4, 60, 2, 24);
  // One prompt of 24 tokens or more, so that a step of 16+ rows always runs (the dense prefill's
  // check below needs one; with 4 random prompts of 1-61 tokens some runs had none).
  while (s.prompts[0].size() < 24) s.prompts[0].push_back(random_int(3, cpu.config().vocab_size - 1));
  CudaBackendOptions options;
  options.max_batch_tokens = 256;
  options.max_seqs = 8;
  options.dtype = cuda::DType::kF32;
  // The weights' format, checked against `expected` (printed only when empty: a file of unknown make).
  const auto format = [&](const CudaBackend& b, const char* dtype, const std::string& expected) {
    std::printf("%s: %s weights \"%s\"\n", name.c_str(), dtype, b.weights_format().c_str());
    if (!expected.empty())
      report.add_exact("gguf weights format", dtype, name + " (\"" + b.weights_format() + "\")",
                       b.weights_format() == expected);
  };
  // The load's progress (LoadProgress): every tensor's bytes counted once, in both loads (fp32
  // dequantizes every matrix; bf16 keeps blocks, repacked on their way).
  int64_t progress_f32[2] = {-1, -1}, progress_bf16[2] = {-1, -1};
  options.progress = LoadProgress(progress_f32);
  CudaBackend exact(file, options);
  format(exact, "f32", f32_format);
  const Run ref = greedy(exact, s);
  options.dtype = cuda::DType::kBF16;
  options.progress = LoadProgress(progress_bf16);
  CudaBackend gpu(file, options);
  format(gpu, "bf16", bf16_format);
  const int64_t bytes = checkpoint_bytes(file);
  report.add_exact("gguf load progress", "f32, bf16", name + " (" + std::to_string(bytes) + " tensor bytes)",
                   progress_f32[0] == bytes && progress_f32[1] == bytes && progress_bf16[0] == bytes &&
                       progress_bf16[1] == bytes);
  const Run got = greedy(gpu, s);
  report.add_exact("gguf decode replays graphs", "bf16", name, gpu.graph_steps() > 0);
  const auto [agree, total] = agreeing_tokens(ref, got);
  report.add("gguf blocks vs dequantized f32", "bf16",
             name + " (" + std::to_string(agree) + "/" + std::to_string(total) + " greedy tokens agree)",
             compare(prompt_logits<double>(ref), prompt_logits<float>(got)), 3e-2);
  std::string where;
  const bool invariant = batch_invariant(gpu, s, got, &where);
  report.add_exact("gguf batch invariant", "bf16", name + where, invariant);
  // Decode steps of up to 16 rows run quant_gemm's GEMV with RoPE and the SiLU in it (`kernels`
  // at batch 1, unless empty); with quant_gemv_fuse off, the GEMV and rope_write_kv / silu_mul apart. A hidden
  // size of 128 or less is one 128-value chunk a row, one warp's sum either way: the same bits.
  std::printf("%s: bf16 decode kernels at batch 1: %s\n", name.c_str(), gpu.decode_kernels(1).c_str());
  if (!kernels.empty())  // empty: a file of unknown make
    report.add_exact("gguf decode kernels", "bf16", name + ": " + gpu.decode_kernels(1), gpu.decode_kernels(1) == kernels);
  bool refused = false;
  try {
    gpu.decode_kernels(0);
  } catch (const ModelError&) {
    refused = true;
  }
  report.add_exact("decode_kernels refuses", "bf16", name + ": batch 0", refused);
  if (!blocks_on_device) {
    const Run on_cpu = greedy(cpu, s);
    report.add("gguf dequantized f32 vs cpu", "f32", name + " (cpu: 8-bit activations)",
               compare(prompt_logits<double>(on_cpu), prompt_logits<float>(ref)), 3e-2);
    return;
  }
  options.quant_gemv_fuse = false;
  CudaBackend apart(file, options);
  const Run on_apart = greedy(apart, s);
  const std::string apart_kernels = apart.decode_kernels(1);
  const bool one_chunk = gpu.config().hidden_size <= 128;
  report.add_exact("gguf decode kernels apart", "bf16", name + ": " + apart_kernels,
                   apart_kernels.find("quant_gemm_qkv_rope") == std::string::npos &&
                       apart_kernels.find("quant_gemm_swiglu") == std::string::npos);
  if (one_chunk) {
    report.add_exact("gguf fused epilogues == apart", "bf16", name + " (tokens and decode logits, bit for bit)",
                     on_apart.tokens == got.tokens && on_apart.second_logits == got.second_logits);
  } else {
    report.add("gguf fused epilogues vs apart", "bf16", name + " (decode logits)",
               compare(decode_logits<double>(on_apart), decode_logits<float>(got)), 3e-2);
  }
  options.quant_gemv_fuse = true;
  // Steps of 16 rows or more (the prompts') on cuBLAS over the weights dequantized to bf16
  // (quant_dense_min_rows), against the exact weights; their logits must also differ from the
  // tiled kernel's (the weights rounded to bf16 there), or the path did not run.
  options.quant_dense_min_rows = 16;
  CudaBackend dense(file, options);
  const Run on_dense = greedy(dense, s);
  report.add("gguf dense prefill vs dequantized f32", "bf16", name + " (steps of 16+ rows on cuBLAS)",
             compare(prompt_logits<double>(ref), prompt_logits<float>(on_dense)), 3e-2);
  report.add_exact("gguf dense prefill ran", "bf16", name + " (its logits differ from the tiled kernel's)",
                   prompt_logits<float>(on_dense) != prompt_logits<float>(got));
  const Run on_cpu = greedy(cpu, s);
  report.add("gguf dequantized f32 vs cpu", "f32", name + " (cpu: 8-bit activations)",
             compare(prompt_logits<double>(on_cpu), prompt_logits<float>(ref)), 3e-2);
}

// time_stages: the GEMV run's schedule again with a CUDA event between each step's stages. Events
// change nothing computed (tokens, margins and logits are the GEMV run's, bit for bit); every timed
// step runs eagerly; the last one's stages are a forward pass's, in step order, the per-layer ones
// once a layer, and they add up to its span. A sampled step adds the sampler. Off again, decode
// steps replay their graphs.
void check_stage_timing(Report& report, const std::string& dir, const std::string& name, const Schedule& s,
                        const CudaBackendOptions& options, const std::optional<Run>& gemv_run) {
  CudaBackend gpu(dir, options);
  gpu.time_stages(true);
  const Run timed = greedy(gpu, s);
  report.add_exact("stage timing changes nothing", "bf16 gemv", name + " (tokens, margins, logits)",
                   gemv_run && gemv_run->tokens == timed.tokens && gemv_run->margins == timed.margins &&
                       gemv_run->first_logits == timed.first_logits && gemv_run->second_logits == timed.second_logits);
  report.add_exact("stage-timed steps run eagerly", "bf16 gemv",
                   name + " (" + std::to_string(gpu.graph_steps()) + " graph / " + std::to_string(gpu.eager_steps()) +
                       " eager steps)",
                   gpu.graph_steps() == 0 && gpu.eager_steps() > 0);
  const int32_t layers = gpu.config().num_layers;
  // The stages a step runs, in order, and how often (0: once a layer).
  const auto stages_are = [&](const CudaStepTimes& t, const std::vector<std::pair<std::string, int32_t>>& want,
                              std::string* why) {
    double sum = 0.0;
    bool ok = t.stages.size() == want.size() && t.span_ms > 0.0;
    for (size_t i = 0; ok && i < want.size(); ++i) {
      const int32_t calls = want[i].second == 0 ? layers : want[i].second;
      ok = t.stages[i].stage == want[i].first && t.stages[i].calls == calls && t.stages[i].ms >= 0.0;
      sum += t.stages[i].ms;
    }
    ok = ok && std::abs(sum - t.span_ms) <= 1e-3 * t.span_ms + 1e-2;
    *why = std::to_string(t.stages.size()) + " stages, " + std::to_string(sum) + " of a " + std::to_string(t.span_ms) +
           " ms span";
    return ok;
  };
  const std::vector<std::pair<std::string, int32_t>> layer = {
      {"attention norm (+ residual)", 0}, {"q/k/v (+ RoPE, K/V write)", 0}, {"attention", 0}, {"o projection", 0},
      {"MLP norm (+ residual)", 0},       {"gate/up (+ SiLU)", 0},          {"down projection", 0}};
  std::vector<std::pair<std::string, int32_t>> forward = {{"step inputs to the device", 1}, {"embedding gather", 1}};
  forward.insert(forward.end(), layer.begin(), layer.end());
  forward.push_back({"head (final norm, lm_head)", 1});
  std::vector<std::pair<std::string, int32_t>> sampled = forward;
  forward.push_back({"logits or tokens to the host", 1});
  sampled.push_back({"sampling", 1});
  sampled.push_back({"logits or tokens to the host", 1});
  std::string why;
  const bool forward_ok = stages_are(gpu.stage_times(), forward, &why);
  report.add_exact("stage times of a forward step", "bf16 gemv", name + " (" + why + ")", forward_ok);

  // One decode row of the first prompt's first token, untimed with its logits, then sampled greedily and timed.
  const int32_t vocab = gpu.config().vocab_size;
  std::vector<int32_t> table((options.max_batch_tokens + kBlockSize - 1) / kBlockSize);
  std::iota(table.begin(), table.end(), 0);
  StepBatch batch;
  SeqSlice slice;
  slice.tokens = s.prompts[0].data();
  slice.n_tokens = 1;
  slice.start_pos = 0;
  slice.block_table = table.data();
  slice.n_blocks = int32_t(table.size());
  slice.want_logits = true;
  batch.seqs.push_back(slice);
  gpu.allocate_kv(int32_t(table.size()), kBlockSize);
  std::vector<float> logits(static_cast<size_t>(vocab));
  gpu.time_stages(false);
  gpu.forward(batch, logits.data());
  float margin = 0.0f;
  const int32_t best = argmax(logits.data(), vocab, &margin);
  SamplingBatch sampling;
  sampling.rows.assign(1, SamplingRow{});
  sampling.rows[0].temperature = 0.0f;
  SampledBatch out;
  gpu.time_stages(true);
  gpu.forward_sample(batch, sampling, out);
  gpu.time_stages(false);
  const bool sampled_ok = stages_are(gpu.stage_times(), sampled, &why);
  report.add_exact("stage times of a sampled step", "bf16 gemv",
                   name + " (" + why + "; token " + std::to_string(out.rows.at(0).token) + ", argmax " +
                       std::to_string(best) + ")",
                   sampled_ok && out.rows.at(0).token == best);

  const int64_t graph_before = gpu.graph_steps();
  greedy(gpu, s);
  if (options.cuda_graphs) {
    report.add_exact("graphs again once stage timing is off", "bf16 gemv",
                     name + " (" + std::to_string(gpu.graph_steps() - graph_before) + " graph steps)",
                     gpu.graph_steps() > graph_before);
  }
}

}  // namespace

int main(int argc, char** argv) {
  require_device();
  if (argc < 2) {
    std::fprintf(stderr, "usage: check_cuda_backend <model dir or .gguf>...\n");
    return 2;
  }
  Report report;
  for (int a = 1; a < argc; ++a) {
    const std::string dir = argv[a];
    const std::string name = dir.substr(dir.find_last_of('/') + 1);
    // A quantized GGUF file (SmolLM2's Q4_1, say): the CPU backend's 8-bit activations part its
    // logits from exact fp32, so it takes the quantized checks, not the fp32 equality below.
    const ModelSource source = resolve_model_source(dir);
    std::optional<GgufFile> gguf;
    if (source.kind == ModelSource::Kind::kGguf) {
      gguf.emplace(GgufFile::open(source.path));
      const auto is_float = [](const GgufTensor& t) { return t.type == 0 || t.type == 1 || t.type == 30; };
      if (!std::all_of(gguf->tensors().begin(), gguf->tensors().end(), is_float)) {
        check_quantized(report, source.path, name, "", "", "");
        continue;
      }
    }
    CpuBackend cpu(dir);
    const Schedule s = random_schedule(cpu.config(), 6, 70, 3, 40);
    const Run ref = greedy(cpu, s);
    // The backend's options for one run of this model. STRATA_CUDA_GRAPHS=0 runs every step
    // eagerly, to tell a graph problem from a kernel one.
    const auto options_for = [](cuda::DType dtype, int32_t gemv_rows) {
      CudaBackendOptions options;
      options.dtype = dtype;
      options.gemv_max_rows = gemv_rows;
      options.max_batch_tokens = 512;
      options.max_seqs = 16;
      const char* graphs_env = std::getenv("STRATA_CUDA_GRAPHS");
      options.cuda_graphs = graphs_env == nullptr || std::string(graphs_env) != "0";
      return options;
    };
    // bf16 twice: with cuBLAS for every GEMM, then with the GEMV kernel for steps of up to 8
    // rows (gemv, gemv_swiglu for gate/up, gemv_qkv_rope for q/k/v), whose tokens alone and
    // batched may part (the two kernels round differently), so that run skips the invariance
    // check. Programmatic launch is checked against the GEMV run after the loop.
    struct Config {
      cuda::DType dtype;
      int32_t gemv_rows;
    };
    std::optional<Run> gemv_run;
    for (const Config config : {Config{cuda::DType::kF32, 0}, Config{cuda::DType::kBF16, 0},
                                Config{cuda::DType::kBF16, cuda::kGemvMaxRows}}) {
      const cuda::DType dtype = config.dtype;
      const std::string label = std::string(cuda::dtype_name(dtype)) + (config.gemv_rows > 0 ? " gemv" : "");
      CudaBackendOptions options = options_for(dtype, config.gemv_rows);
      int64_t progress[2] = {-1, -1};
      options.progress = LoadProgress(progress);
      CudaBackend gpu(dir, options);
      std::printf("%s %s: loaded %.1f MB in %.3f s (%.2f GB/s) on %s\n", name.c_str(), label.c_str(),
                  gpu.load_stats().bytes / 1e6, gpu.load_stats().seconds, gpu.load_stats().gb_per_s(),
                  gpu.device_name().c_str());
      // The load's progress: the checkpoint's tensor bytes, all counted once the load is done.
      report.add_exact("load progress", label, name, progress[0] == gpu.load_stats().bytes &&
                                                         progress[1] == gpu.load_stats().bytes && progress[1] > 0);
      const Run got = greedy(gpu, s);
      const std::string steps = std::to_string(gpu.graph_steps()) + " graph / " + std::to_string(gpu.eager_steps()) +
                                " eager steps";
      // The schedule has decode-only steps: with graphs on, they must have replayed one.
      if (options.cuda_graphs) report.add_exact("decode replays graphs", label, name + " (" + steps + ")",
                                                gpu.graph_steps() > 0);
      if (config.gemv_rows > 0) gemv_run = got;
      // Batch invariance: each sequence alone gives the tokens it got sharing the batches.
      if (config.gemv_rows == 0) {
        std::string where;
        const bool invariant = batch_invariant(gpu, s, got, &where);
        report.add_exact("batch invariant", label, name + where, invariant);
      } else {
        // Each sequence alone decodes one row a step, on the GEMV kernels: its first decode
        // step's logits against the CPU backend's (where their first tokens agree, so both
        // steps see the same input).
        std::vector<double> cpu_logits;
        std::vector<float> gemv_logits;
        int32_t seqs = 0;
        for (size_t i = 0; i < s.prompts.size(); ++i) {
          const Run one = greedy(gpu, alone(s, i, 2));
          if (one.tokens[0][0] != ref.tokens[i][0]) continue;
          ++seqs;
          cpu_logits.insert(cpu_logits.end(), ref.second_logits[i].begin(), ref.second_logits[i].end());
          gemv_logits.insert(gemv_logits.end(), one.second_logits[0].begin(), one.second_logits[0].end());
        }
        if (seqs == 0) report.add_exact("decode on the gemv kernels vs cpu", label, name + " (no first token agreed)", false);
        else report.add("decode on the gemv kernels vs cpu", label, name + " (" + std::to_string(seqs) + " seqs, 1 row a step)",
                        compare(cpu_logits, gemv_logits), 3e-2);
      }
      std::string note;
      if (dtype == cuda::DType::kF32) {
        report.add("prompt logits vs cpu", "f32", name, compare(prompt_logits<double>(ref), prompt_logits<float>(got)), 1e-4);
        const bool same = same_tokens(ref, got, &note);
        report.add_exact("greedy == cpu", "f32", name + " 6 seqs x 40" + (note.empty() ? "" : " (" + note + ")"), same);
      } else {
        // bf16 rounds every activation, so greedy paths part sooner or later: how far they agree is logged.
        const auto [agree, total] = agreeing_tokens(ref, got);
        std::printf("%s %s: %zu of %zu tokens agree with the fp32 CPU backend before each sequence's first difference\n",
                    label.c_str(), name.c_str(), agree, total);
        // The prompts' logits next to the fp32 CPU backend's: bf16 activations through every
        // layer, and bf16 logits (their own rounding is 2^-9 of their size), land near 1e-2.
        report.add("prompt logits vs cpu", label, name + " (" + std::to_string(agree) + "/" + std::to_string(total) +
                   " greedy tokens agree)", compare(prompt_logits<double>(ref), prompt_logits<float>(got)), 3e-2);
      }
    }
    // The GEMV run again with programmatic launch, as a whole and without each of its parts (the
    // GEMVs' prefetch, the early trigger): launch order changes nothing computed, so every token,
    // margin and logit must be the GEMV run's. A backend that throws fails the check with its
    // message (the other checks have run).
    for (const auto& [prefetch, early] : {std::pair{true, true}, std::pair{false, true}, std::pair{true, false}}) {
      CudaBackendOptions options = options_for(cuda::DType::kBF16, cuda::kGemvMaxRows);
      options.programmatic_launch = true;
      options.programmatic_prefetch = prefetch;
      options.programmatic_early_trigger = early;
      std::string why;
      bool same = false;
      try {
        CudaBackend gpu(dir, options);
        const Run got = greedy(gpu, s);
        same = gemv_run && (!options.cuda_graphs || gpu.graph_steps() > 0) && gemv_run->tokens == got.tokens &&
               gemv_run->margins == got.margins && gemv_run->first_logits == got.first_logits &&
               gemv_run->second_logits == got.second_logits;
        why = std::to_string(gpu.graph_steps()) + " graph / " + std::to_string(gpu.eager_steps()) + " eager steps";
      } catch (const std::exception& e) {
        why = std::string("threw: ") + e.what();
      }
      const std::string parts = prefetch && early ? "" : prefetch ? ", late trigger" : ", no prefetch";
      report.add_exact("programmatic launch == plain launch", "bf16 gemv programmatic",
                       name + parts + " (tokens, margins, logits; " + why + ")", same);
    }
    check_stage_timing(report, dir, name, s, options_for(cuda::DType::kBF16, cuda::kGemvMaxRows), gemv_run);
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

    // A safetensors checkpoint: its 4-bit AWQ and GPTQ copies (int4_writer.h: quantized and
    // packed as AutoAWQ and AutoGPTQ do), on the quantized checks. Their blocks are Q4_1 (AWQ,
    // asymmetric GPTQ) or Q4_0 (symmetric GPTQ); act-order is dequantized on the device.
    if (!gguf) {
      const std::filesystem::path tmp =
          std::filesystem::temp_directory_path() / ("strata-check-int4-" + std::to_string(random_int(0, 1 << 30)));
      struct Int4Variant {
        const char* label;
        strata_test::Spec spec;
        const char* bf16_format;
        const char* f32_format;
        const char* kernels;
        bool blocks_on_device;
      };
      const std::string fused = "q/k/v quant_gemm_qkv_rope, gate/up quant_gemm_swiglu";
      for (const Int4Variant& v :
           {Int4Variant{"AWQ", {"awq", 128, false, true, false}, "awq int4, groups of 128: Q4_1 + bfloat16",
                        "awq int4, groups of 128: float32 (Q4_1 dequantized)", fused.c_str(), true},
            Int4Variant{"GPTQ sym", {"gptq", 64, true, true, false}, "gptq int4, groups of 64: Q4_0 + bfloat16",
                        "gptq int4, groups of 64: float32 (Q4_0 dequantized)", fused.c_str(), true},
            Int4Variant{"GPTQ act-order", {"gptq", 32, false, true, true},
                        "gptq int4, act-order, groups of 32: bfloat16 (Q4_1 dequantized)",
                        "gptq int4, act-order, groups of 32: float32 (Q4_1 dequantized)",
                        "q/k/v gemv_qkv_rope, gate/up gemv_swiglu", false}}) {
        const std::filesystem::path out = tmp / v.label;
        std::filesystem::create_directories(out);
        strata_test::make_checkpoint(dir, v.spec).write(out);
        check_quantized(report, out, name + " " + v.label, v.bf16_format, v.f32_format, v.kernels, v.blocks_on_device);
      }
      std::filesystem::remove_all(tmp);
    }

    // A GGUF file of fp32 tensors: its quantized copies.
    if (!gguf || !std::all_of(gguf->tensors().begin(), gguf->tensors().end(), [](const GgufTensor& t) { return t.type == 0; }))
      continue;
    const GgufFile& file = *gguf;
    const std::filesystem::path tmp =
        std::filesystem::temp_directory_path() / ("strata-check-gguf-" + std::to_string(random_int(0, 1 << 30)));
    std::filesystem::create_directories(tmp);
    struct Variant {
      const char* label;
      QuantType type;
      std::optional<QuantType> mixed;
      const char* bf16_format;
      const char* f32_format;
      bool untie = false;
    };
    const std::string fused = "q/k/v quant_gemm_qkv_rope, gate/up quant_gemm_swiglu";
    for (const Variant& v :
         {Variant{"Q8_0", QuantType::Q8_0, std::nullopt, "Q8_0 + bfloat16", "float32 (Q8_0 dequantized)"},
          Variant{"Q4_0", QuantType::Q4_0, std::nullopt, "Q4_0 + bfloat16", "float32 (Q4_0 dequantized)"},
          Variant{"Q4_1", QuantType::Q4_1, std::nullopt, "Q4_1 + bfloat16", "float32 (Q4_1 dequantized)"},
          // q/k Q4_1 with v Q8_0: the fused q/k/v is dequantized; down stays Q8_0.
          Variant{"Q4_1+Q8_0", QuantType::Q4_1, QuantType::Q8_0, "Q4_1 + Q8_0 + bfloat16",
                  "float32 (Q4_1, Q8_0 dequantized)"},
          // An output projection of its own: the embedding table's blocks go to the device apart.
          Variant{"Q4_0 untied", QuantType::Q4_0, std::nullopt, "Q4_0 + bfloat16", "float32 (Q4_0 dequantized)", true}}) {
      const std::filesystem::path out = tmp / (std::string(v.label) + ".gguf");
      write_quantized(file, v.type, v.mixed, out, v.untie);
      // The mixed file's q/k/v is dense: the dense GEMV's fused RoPE at batch 1.
      check_quantized(report, out, name + " " + v.label, v.bf16_format, v.f32_format,
                      v.mixed ? "q/k/v gemv_qkv_rope, gate/up quant_gemm_swiglu" : fused);
    }
    // And its F16 and BF16 copies.
    for (const bool bf16 : {false, true}) {
      const std::filesystem::path out = tmp / (bf16 ? "BF16.gguf" : "F16.gguf");
      write_float(file, bf16, out);
      check_float_copy(report, source.path, out, name + (bf16 ? " BF16" : " F16"), bf16);
    }
    std::filesystem::remove_all(tmp);
  }
  return report.finish("check_cuda_backend");
}
