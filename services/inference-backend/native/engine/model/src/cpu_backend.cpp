#include "strata/cpu_backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>

#include "cpu_kernels.h"
#include "kv_cache.h"
#include "paged_attention.h"
#include "rope.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "tensor_slots.h"
#include "thread_pool.h"

namespace strata {

namespace {

// A decoder layer with its projections fused, so a step makes 4 GEMMs per layer, not 7.
struct CpuLayer {
  std::vector<float> input_norm;   // (hidden)
  PackedWeights qkv;               // (q_dim + 2 * kv_dim, hidden): q rows, then k, then v
  std::vector<float> qkv_bias;     // (q_dim + 2 * kv_dim) or empty
  PackedWeights o_proj;            // (hidden, q_dim)
  std::vector<float> o_bias;       // (hidden) or empty
  std::vector<float> post_norm;    // (hidden)
  PackedWeights gate_up;           // (2 * intermediate, hidden): gate rows, then up rows
  PackedWeights down;              // (hidden, intermediate)
};

// Concatenates the rows of the parts and frees them as it goes, so peak memory stays near one
// copy of the model.
std::vector<float> concat_rows(std::initializer_list<std::vector<float>*> parts) {
  std::vector<float> out;
  size_t total = 0;
  for (std::vector<float>* part : parts) total += part->size();
  out.reserve(total);
  for (std::vector<float>* part : parts) {
    out.insert(out.end(), part->begin(), part->end());
    std::vector<float>().swap(*part);
  }
  return out;
}

PackedWeights pack_rows(std::vector<float> rows, int64_t k) {
  return PackedWeights::pack(rows.data(), static_cast<int64_t>(rows.size()) / k, k);
}

void check_weights(const ModelConfig& config, ModelWeights& weights) {
  if (weights.layers.size() != static_cast<size_t>(config.num_layers)) {
    throw ModelError(model_error_code::kWeights, "weights have " + std::to_string(weights.layers.size()) +
                                                     " layers, the config " + std::to_string(config.num_layers));
  }
  for (const TensorSlot& slot : tensor_slots(config, &weights)) {
    if (slot.name == kLmHeadName && config.tie_word_embeddings) continue;  // embed_tokens serves
    size_t count = 1;
    for (int64_t dim : slot.shape) count *= static_cast<size_t>(dim);
    if (slot.target->size() != count) {
      throw ModelError(model_error_code::kWeights, "weight \"" + slot.name + "\" has " + std::to_string(slot.target->size()) +
                                                       " values, the config needs " + std::to_string(count));
    }
  }
}

[[noreturn]] void bad_input(const std::string& message) { throw ModelError(model_error_code::kBackendInput, message); }

}  // namespace

struct CpuBackend::Impl {
  ModelConfig config;
  std::vector<float> embed;        // (vocab, hidden) row-major, for the token gather
  PackedWeights lm_head;           // (vocab, hidden): lm_head.weight, or embed when tied
  std::vector<float> final_norm;   // (hidden)
  std::vector<CpuLayer> layers;
  Rope rope;
  ThreadPool pool;
  const CpuKernels& kernels;
  KvCache cache;

  int64_t q_dim = 0, kv_dim = 0, qkv_dim = 0;

  // Per-step scratch, grown on demand; rows are the step's tokens in batch order.
  std::vector<float> x;          // (tokens, hidden) residual stream
  std::vector<float> normed;     // (tokens, hidden)
  std::vector<float> qkv;        // (tokens, qkv_dim)
  std::vector<float> attn;       // (tokens, q_dim)
  std::vector<float> gate_up;    // (tokens, 2 * intermediate)
  std::vector<float> act;        // (tokens, intermediate)
  std::vector<float> cos, sin;   // (tokens, head_dim / 2)
  std::vector<int32_t> positions;            // (tokens)
  std::vector<const int32_t*> token_tables;  // (tokens) the block table of each token's slice
  std::vector<AttentionSlice> slices;
  std::vector<int64_t> logit_rows;           // rows whose logits are wanted, in batch order

  Impl(ModelConfig cfg, ModelWeights weights, CpuBackendOptions options)
      : config(std::move(cfg)), rope(config), pool(options.num_threads), kernels(cpu_kernels()) {
    check_weights(config, weights);
    q_dim = int64_t{config.num_heads} * config.head_dim;
    kv_dim = int64_t{config.num_kv_heads} * config.head_dim;
    qkv_dim = q_dim + 2 * kv_dim;
    const int64_t hidden = config.hidden_size;
    embed = std::move(weights.embed_tokens);
    const std::vector<float>& head = config.tie_word_embeddings ? embed : weights.lm_head;
    lm_head = PackedWeights::pack(head.data(), config.vocab_size, hidden);
    std::vector<float>().swap(weights.lm_head);
    final_norm = std::move(weights.final_norm);
    for (LayerWeights& w : weights.layers) {
      CpuLayer layer;
      layer.input_norm = std::move(w.input_norm);
      layer.qkv = pack_rows(concat_rows({&w.q_proj, &w.k_proj, &w.v_proj}), hidden);
      if (config.attention_bias) layer.qkv_bias = concat_rows({&w.q_bias, &w.k_bias, &w.v_bias});
      layer.o_proj = pack_rows(std::move(w.o_proj), q_dim);
      layer.o_bias = std::move(w.o_bias);
      layer.post_norm = std::move(w.post_attention_norm);
      layer.gate_up = pack_rows(concat_rows({&w.gate_proj, &w.up_proj}), hidden);
      layer.down = pack_rows(std::move(w.down_proj), config.intermediate_size);
      layers.push_back(std::move(layer));
    }
  }

  // Splits rows over the pool when there are enough to pay for it; fn(begin, end).
  template <class Fn>
  void for_rows(int64_t rows, int64_t floats_per_row, Fn&& fn) {
    const int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(floats_per_row, 1));
    const int64_t tasks = std::min<int64_t>(pool.size() * 2, (rows + min_rows - 1) / min_rows);
    if (tasks <= 1) {
      fn(int64_t{0}, rows);
      return;
    }
    const int64_t per_task = (rows + tasks - 1) / tasks;
    pool.parallel_for(tasks, [&](int64_t t) { fn(t * per_task, std::min(rows, (t + 1) * per_task)); });
  }

  // out = weight * (x * rsqrt(mean(x^2) + eps)), row by row, as transformers' LlamaRMSNorm.
  void rms_norm(const float* in, const std::vector<float>& weight, float* out) const {
    const int64_t n = config.hidden_size;
    double sum_squares = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(in[i]) * in[i];
    const float variance = static_cast<float>(sum_squares / static_cast<double>(n));
    const float inv_rms = 1.0f / std::sqrt(variance + config.rms_norm_eps);
    for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (in[i] * inv_rms);
  }

  void gemm(const float* a, int64_t m, const PackedWeights& w, float* c, const std::vector<float>& bias, bool accumulate) {
    GemmArgs args;
    args.m = m;
    args.a = a;
    args.lda = w.k;
    args.w = &w;
    args.c = c;
    args.ldc = w.n;
    args.bias = bias.empty() ? nullptr : bias.data();
    args.accumulate = accumulate;
    parallel_gemm(pool, kernels, args);
  }

  // Checks the batch and lays out its tokens; returns the number of tokens.
  int64_t plan(const StepBatch& batch, const float* logits) {
    if (!cache.allocated()) bad_input("forward called before allocate_kv");
    positions.clear();
    token_tables.clear();
    slices.clear();
    logit_rows.clear();
    const int32_t block_size = cache.block_size();
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const SeqSlice& seq = batch.seqs[s];
      const std::string where = "batch slice " + std::to_string(s);
      if (seq.n_tokens <= 0 || seq.tokens == nullptr) bad_input(where + ": no tokens");
      const int64_t end = int64_t{seq.start_pos} + seq.n_tokens;
      if (seq.start_pos < 0 || end > INT32_MAX) bad_input(where + ": positions out of range");
      const int64_t blocks_needed = (end + block_size - 1) / block_size;
      if (seq.block_table == nullptr || seq.n_blocks < blocks_needed) {
        bad_input(where + ": block table has " + std::to_string(seq.n_blocks) + " blocks, positions [0, " +
                  std::to_string(end) + ") need " + std::to_string(blocks_needed));
      }
      for (int64_t b = 0; b < blocks_needed; ++b) {
        if (seq.block_table[b] < 0 || seq.block_table[b] >= cache.num_blocks()) {
          bad_input(where + ": block id " + std::to_string(seq.block_table[b]) + " is outside the KV pool (" +
                    std::to_string(cache.num_blocks()) + " blocks)");
        }
      }
      slices.push_back({static_cast<int64_t>(positions.size()), seq.n_tokens, seq.start_pos, seq.block_table});
      for (int32_t t = 0; t < seq.n_tokens; ++t) {
        if (seq.tokens[t] < 0 || seq.tokens[t] >= config.vocab_size) {
          bad_input(where + ": token id " + std::to_string(seq.tokens[t]) + " is outside the vocabulary (" +
                    std::to_string(config.vocab_size) + ")");
        }
        positions.push_back(seq.start_pos + t);
        token_tables.push_back(seq.block_table);
      }
      if (seq.want_logits) logit_rows.push_back(static_cast<int64_t>(positions.size()) - 1);
    }
    if (!logit_rows.empty() && logits == nullptr) bad_input("logits are wanted but the output pointer is null");
    return static_cast<int64_t>(positions.size());
  }

  void reserve(int64_t tokens) {
    const auto grow = [tokens](std::vector<float>& v, int64_t per_token) {
      if (static_cast<int64_t>(v.size()) < tokens * per_token) v.resize(static_cast<size_t>(tokens * per_token));
    };
    grow(x, config.hidden_size);
    grow(normed, config.hidden_size);
    grow(qkv, qkv_dim);
    grow(attn, q_dim);
    grow(gate_up, 2 * int64_t{config.intermediate_size});
    grow(act, config.intermediate_size);
    grow(cos, rope.half_dim());
    grow(sin, rope.half_dim());
  }

  void forward(const StepBatch& batch, float* logits) {
    const int64_t tokens = plan(batch, logits);
    if (tokens == 0) return;
    reserve(tokens);
    const int64_t hidden = config.hidden_size, inter = config.intermediate_size, half = rope.half_dim();

    int64_t row = 0;
    for (const SeqSlice& seq : batch.seqs) {
      for (int32_t i = 0; i < seq.n_tokens; ++i, ++row) {
        const float* src = embed.data() + int64_t{seq.tokens[i]} * hidden;
        std::copy(src, src + hidden, x.data() + row * hidden);
      }
    }
    rope.tables(positions.data(), tokens, cos.data(), sin.data());
    const AttentionShape shape{config.num_heads, config.num_kv_heads, config.head_dim,
                               static_cast<float>(1.0 / std::sqrt(static_cast<double>(config.head_dim)))};

    for (int32_t l = 0; l < config.num_layers; ++l) {
      const CpuLayer& layer = layers[l];
      for_rows(tokens, hidden, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) rms_norm(x.data() + t * hidden, layer.input_norm, normed.data() + t * hidden);
      });
      gemm(normed.data(), tokens, layer.qkv, qkv.data(), layer.qkv_bias, false);
      for_rows(tokens, qkv_dim, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float* q = qkv.data() + t * qkv_dim;
          float* k = q + q_dim;
          rope.apply(q, config.num_heads, cos.data() + t * half, sin.data() + t * half);
          rope.apply(k, config.num_kv_heads, cos.data() + t * half, sin.data() + t * half);
          const int32_t pos = positions[t];
          cache.write(l, token_tables[t][pos / cache.block_size()], pos % cache.block_size(), k, k + kv_dim);
        }
      });
      paged_attention(pool, kernels, cache, l, slices, shape, qkv.data(), qkv_dim, attn.data(), q_dim);
      gemm(attn.data(), tokens, layer.o_proj, x.data(), layer.o_bias, true);

      for_rows(tokens, hidden, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) rms_norm(x.data() + t * hidden, layer.post_norm, normed.data() + t * hidden);
      });
      gemm(normed.data(), tokens, layer.gate_up, gate_up.data(), {}, false);
      for_rows(tokens, 2 * inter, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const float* g = gate_up.data() + t * 2 * inter;
          kernels.silu_mul(g, g + inter, act.data() + t * inter, inter);
        }
      });
      gemm(act.data(), tokens, layer.down, x.data(), {}, true);
    }

    if (logit_rows.empty()) return;
    const int64_t wanted = static_cast<int64_t>(logit_rows.size());
    for (int64_t i = 0; i < wanted; ++i) rms_norm(x.data() + logit_rows[i] * hidden, final_norm, normed.data() + i * hidden);
    gemm(normed.data(), wanted, lm_head, logits, {}, false);
  }
};

CpuBackend::CpuBackend(const std::filesystem::path& model_dir, CpuBackendOptions options) {
  ModelConfig config = load_model_config(model_dir);
  ModelWeights weights = load_model_weights(model_dir, config);
  impl_ = std::make_unique<Impl>(std::move(config), std::move(weights), options);
}

CpuBackend::CpuBackend(const ModelConfig& config, uint64_t dummy_seed, CpuBackendOptions options) {
  validate_model_config(config, "dummy model config");
  impl_ = std::make_unique<Impl>(config, make_dummy_weights(config, dummy_seed), options);
}

CpuBackend::CpuBackend(const ModelConfig& config, ModelWeights weights, CpuBackendOptions options) {
  validate_model_config(config, "model config");
  impl_ = std::make_unique<Impl>(config, std::move(weights), options);
}

CpuBackend::~CpuBackend() = default;

const ModelConfig& CpuBackend::config() const { return impl_->config; }

int64_t CpuBackend::kv_bytes_per_block(int32_t block_size) const {
  const ModelConfig& c = impl_->config;
  return KvCache::bytes_per_block(c.num_layers, block_size, c.num_kv_heads, c.head_dim);
}

void CpuBackend::allocate_kv(int32_t num_blocks, int32_t block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    bad_input("allocate_kv needs positive num_blocks and block_size, got " + std::to_string(num_blocks) + " and " +
              std::to_string(block_size));
  }
  const ModelConfig& c = impl_->config;
  try {
    impl_->cache.allocate(c.num_layers, num_blocks, block_size, c.num_kv_heads, c.head_dim);
  } catch (const std::exception&) {  // bad_alloc, or length_error past vector's max_size
    throw ModelError(model_error_code::kOutOfMemory, "cannot allocate " + std::to_string(kv_bytes_per_block(block_size) * num_blocks) +
                                                         " bytes for a KV pool of " + std::to_string(num_blocks) + " blocks");
  }
}

void CpuBackend::forward(const StepBatch& batch, float* logits) { impl_->forward(batch, logits); }

void CpuBackend::copy_block(int32_t src, int32_t dst) {
  KvCache& cache = impl_->cache;
  if (!cache.allocated()) bad_input("copy_block called before allocate_kv");
  if (src < 0 || src >= cache.num_blocks() || dst < 0 || dst >= cache.num_blocks()) {
    bad_input("copy_block(" + std::to_string(src) + ", " + std::to_string(dst) + "): block id outside the KV pool (" +
              std::to_string(cache.num_blocks()) + " blocks)");
  }
  cache.copy_block(src, dst);
}

int32_t CpuBackend::num_threads() const { return impl_->pool.size(); }

const char* CpuBackend::kernel_isa() const { return impl_->kernels.isa; }

}  // namespace strata
