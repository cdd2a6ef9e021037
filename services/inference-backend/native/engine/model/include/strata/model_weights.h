// The weights of a Llama-family decoder in fp32, named after the Hugging Face tensors, from a
// safetensors directory or from the dummy (random) load format. Matrices are row-major
// (out_features, in_features), as nn.Linear stores them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/load_progress.h"
#include "strata/model_backend.h"
#include "strata/quant.h"

namespace strata {

struct LayerWeights {
  std::vector<float> input_norm;     // (hidden)
  std::vector<float> q_proj;         // (num_heads * head_dim, hidden)
  std::vector<float> k_proj;         // (num_kv_heads * head_dim, hidden)
  std::vector<float> v_proj;         // (num_kv_heads * head_dim, hidden)
  std::vector<float> q_bias;         // (num_heads * head_dim), empty without attention_bias
  std::vector<float> k_bias;         // (num_kv_heads * head_dim), idem
  std::vector<float> v_bias;         // (num_kv_heads * head_dim), idem
  std::vector<float> o_proj;         // (hidden, num_heads * head_dim)
  std::vector<float> o_bias;         // (hidden), only Llama with attention_bias
  std::vector<float> post_attention_norm;  // (hidden)
  std::vector<float> gate_proj;      // (intermediate, hidden)
  std::vector<float> up_proj;        // (intermediate, hidden)
  std::vector<float> down_proj;      // (hidden, intermediate)
};

struct ModelWeights {
  std::vector<float> embed_tokens;   // (vocab, hidden)
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;     // (hidden)
  std::vector<float> lm_head;        // (vocab, hidden); empty when tied: use embed_tokens
  // Matrices kept in their block-quantized form (GGUF), keyed by the Hugging Face tensor name
  // ("model.layers.3.self_attn.q_proj.weight", "model.embed_tokens.weight", ...), rows in the
  // Hugging Face order. A matrix here leaves its fp32 member above empty.
  std::unordered_map<std::string, QuantMatrix> quantized;

  const std::vector<float>& output_projection() const { return lm_head.empty() ? embed_tokens : lm_head; }
};

// One tensor a checkpoint of this config must (or may) hold.
struct ExpectedTensor {
  std::string name;               // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
};

// Every tensor the config implies, in a fixed order. Embedding and lm_head are both listed;
// with tie_word_embeddings one of the two may be absent from a checkpoint.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Whether o_proj has a bias: HF Llama's attention_bias covers o_proj, Qwen2's bias does not.
bool has_o_proj_bias(const ModelConfig& config);

// Loads and converts (f16/bf16 -> f32) the weights of DIR's safetensors, checking every
// tensor's presence, shape and dtype. Throws ModelError(STRATA_MODEL_WEIGHTS).
// `progress` counts the checkpoint's tensor bytes as they are read (load_progress.h).
ModelWeights load_model_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                const LoadProgress& progress = {});

// Random weights for any config, for benchmarks: matrices and biases N(0, 0.02^2), norms 1.
// Deterministic in `seed` (own generator, per-chunk streams: independent of the thread count).
ModelWeights make_dummy_weights(const ModelConfig& config, uint64_t seed);

}  // namespace strata
