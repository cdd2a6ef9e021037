// The contract between the engine core (scheduler, block manager, sampler) and a model backend
// (CPU now, CUDA later). The core decides WHAT runs in a step; a backend only executes it.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata {

// Llama-family decoder shape, parsed and validated once from config.json (or a dummy config).
struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;                 // hidden_size / num_heads unless config says otherwise
  int32_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Llama-3 rope scaling ("rope_type": "llama3"); factor 0 means no scaling.
  float rope_scaling_factor = 0.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int32_t rope_original_max_position = 8192;
  bool tie_word_embeddings = false;
  bool attention_bias = false;          // q/k/v projections carry a bias (Qwen2)
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  // A 4-bit AWQ or GPTQ checkpoint (config.json's quantization_config): its linear weights are
  // packed int32 tensors (qweight, qzeros, scales, g_idx) instead of ".weight".
  struct Int4Quantization {
    std::string method;         // "awq" or "gptq"; empty: the checkpoint is not quantized
    int32_t group_size = 0;     // input features per scale and zero point; -1: one group per row
    bool symmetric = false;     // GPTQ "sym": every zero point is 8
    bool zeros_minus_one = false;  // GPTQ's v1 format (checkpoint_format "gptq") stores zero - 1
  } quantization;
};

// One sequence's share of a step: the tokens to run now and where its KV lives.
struct SeqSlice {
  const int32_t* tokens = nullptr;      // (n_tokens) token ids to run in this step
  int32_t n_tokens = 0;                 // 1 for a decode, a chunk of the prompt for a prefill
  int32_t start_pos = 0;                // absolute position of tokens[0]; KV of [0, start_pos) is cached
  const int32_t* block_table = nullptr; // (n_blocks) physical block ids, covering [0, start_pos + n_tokens)
  int32_t n_blocks = 0;
  bool want_logits = false;             // logits of the last token of this slice are needed
};

struct StepBatch {
  std::vector<SeqSlice> seqs;
};

// ---- Sampling on the backend's device (optional; see ModelBackend::samples_on_device) ---------
// The core fills one SamplingRow per slice with want_logits, in batch order, and the backend
// returns what core's Sampler (core/src/sampler.cpp) would have: the same penalties, min_tokens
// masking, temperature, top-k -> top-p -> min-p and inverse-CDF draw with the row's uniform.

inline constexpr int32_t kMaxSampledTop = 20;  // top logprobs per row (core's kMaxLogprobs)

// One distinct token of a sequence's prompt + output: the repetition penalty applies once per
// entry, the frequency penalty output_count times, the presence penalty once if output_count > 0.
struct PenaltyEntry {
  int32_t token;
  int32_t output_count;
};

// One row's sampling inputs for this step (64 bytes; a device backend uploads them as they are).
struct SamplingRow {
  double uniform = 0.0;              // drawn from the sequence's Rng: one per sampled token
  float temperature = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t top_k = 0;                 // <= 0: off
  int32_t logprobs = -1;             // -1 none, 0 the sampled token's, n <= kMaxSampledTop also the top n
  int32_t processed_logprobs = 0;    // 0: of the raw logits; else of the distribution drawn from
  int32_t mask_stop_ids = 0;         // min_tokens not reached: stop_ids[stop_offset, +stop_count) -> -inf
  int32_t penalty_offset = 0;        // SamplingBatch::penalty_entries[penalty_offset, +penalty_count)
  int32_t penalty_count = 0;
  int32_t stop_offset = 0;           // the sequence's stop ids, plus eos unless ignore_eos
  int32_t stop_count = 0;
};
static_assert(sizeof(SamplingRow) == 64, "SamplingRow is uploaded as raw bytes");

struct SamplingBatch {
  std::vector<SamplingRow> rows;
  std::vector<PenaltyEntry> penalty_entries;  // the pool rows' penalty offsets index
  std::vector<int32_t> stop_ids;              // the pool rows' stop offsets index
  // Structured output: row i may only sample the tokens whose bits are set in
  // allowed[allowed_offset[i] ... + ceil(vocab / 32)), or any token when the offset is < 0.
  // Both empty when no row is constrained.
  std::vector<uint32_t> allowed;
  std::vector<int32_t> allowed_offset;
  // Set when constrained rows' masks are still being computed (beside the forward pass): the
  // backend calls it after it has queued the forward and before it reads the rows, which it
  // may change (the masks, and mask_stop_ids of a row whose mask allows only stop ids).
  std::function<void()> await_masks;
  void clear() {
    rows.clear();
    penalty_entries.clear();
    stop_ids.clear();
    allowed.clear();
    allowed_offset.clear();
    await_masks = nullptr;
  }
};

struct SampledRow {
  int32_t token = -1;
  float logprob = 0.0f;     // of token, when the row's logprobs >= 0
  int32_t top_count = 0;    // entries of the row's top list: n (raw), or min(n, kept tokens) (processed)
};

struct SampledBatch {
  std::vector<SampledRow> rows;
  std::vector<int32_t> top_ids;       // (rows, kMaxSampledTop): row i's list, most likely first
  std::vector<float> top_logprobs;    // (rows, kMaxSampledTop)
};

// The KV pool is owned by the backend, which picks its layout and dtype; the core only deals
// in block ids. One block holds block_size tokens' K and V for every layer and kv head (the CPU
// backend's layout is in model/src/kv_cache.h).
class ModelBackend {
 public:
  virtual ~ModelBackend() = default;
  virtual const ModelConfig& config() const = 0;
  // Bytes one KV block takes across all layers (K and V) — the unit the pool is sized in.
  virtual int64_t kv_bytes_per_block(int32_t block_size) const = 0;
  // Allocates the paged KV pool; called once before the first forward.
  virtual void allocate_kv(int32_t num_blocks, int32_t block_size) = 0;
  // Runs one step: writes K/V of every slice's tokens into its blocks, then writes the
  // last-token logits of each slice with want_logits, in batch order, to
  // logits (n_slices_wanting_logits, vocab_size) fp32 row-major.
  virtual void forward(const StepBatch& batch, float* logits) = 0;
  // Copy-on-write support: copies one physical block's K and V (all layers) to another.
  virtual void copy_block(int32_t src, int32_t dst) = 0;
  // True when the backend can hand a step's logits over in chunks (forward_chunked), so that the
  // core never holds every row's logits at once: (rows, vocab) fp32 is the largest buffer of a
  // wide decode step (256 rows of a 49k vocabulary: 50 MB).
  virtual bool chunks_logits() const { return false; }
  // forward(), with the logits of the rows wanting them passed, in batch order, to
  // consume(first_row, rows, logits), at most chunk_rows rows a call; `logits` (rows, vocab) is
  // the backend's buffer, which consume may overwrite (the sampler does) and which is reused
  // once consume returns.
  using LogitsConsumer = std::function<void(int32_t first_row, int32_t rows, float* logits)>;
  virtual void forward_chunked(const StepBatch&, int32_t /*chunk_rows*/, const LogitsConsumer&) {
    throw std::logic_error("this backend does not chunk its logits (chunks_logits() is false)");
  }
  // True when the backend samples where its logits are (forward_sample), so that they never
  // cross to the host: the core then uses forward_sample instead of forward.
  virtual bool samples_on_device() const { return false; }
  // forward(), then samples each wanted row as `sampling` says; out.rows gets one entry per
  // sampling row, out.top_* their top lists.
  virtual void forward_sample(const StepBatch&, const SamplingBatch&, SampledBatch&) {
    throw std::logic_error("this backend does not sample on its device (samples_on_device() is false)");
  }
};

}  // namespace strata
