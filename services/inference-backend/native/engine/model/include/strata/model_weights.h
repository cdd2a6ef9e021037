// The weights of a Llama-family decoder in fp32, named after the Hugging Face tensors, from a
// safetensors directory or from the dummy (random) load format. Matrices are row-major
// (out_features, in_features), as nn.Linear stores them.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "strata/load_progress.h"
#include "strata/model_backend.h"
#include "strata/quant.h"
#include "strata/safetensors.h"

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

struct GgufTensor;

// A floating-point matrix where it lies (a safetensors or GGUF file's mapping, an fp32 vector):
// `rows` rows of `cols` values of `dtype`, little-endian, alignment not guaranteed. Row r is the
// stored row file_rows[r] (empty: row r; llama.cpp permutes attn_q's and attn_k's rows).
struct DenseMatrixRef {
  enum class Dtype { kF32, kF16, kBF16 };
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> file_rows;
  const TensorInfo* tensor = nullptr;       // in a safetensors file: for releasing its pages once read
  const GgufTensor* gguf_tensor = nullptr;  // in a GGUF file: idem (GgufFile::release)

  int64_t elem_bytes() const { return dtype == Dtype::kF32 ? 4 : 2; }
  int64_t row_bytes() const { return cols * elem_bytes(); }
  const uint8_t* row(int64_t r) const { return data + (file_rows.empty() ? r : file_rows[r]) * row_bytes(); }
  // out[0, n) = values [first, first + n) of row r, widened to fp32 (exactly).
  void to_f32(int64_t r, int64_t first, int64_t n, float* out) const;
  // Rows [first, last) widened into `matrix` (the whole matrix, row-major fp32) at their places.
  void rows_to_f32(int64_t first, int64_t last, float* matrix) const {
    for (int64_t r = first; r < last; ++r) to_f32(r, 0, cols, matrix + r * cols);
  }
  // Rows [first, last) as they are stored, one after another at `out`, in the row order.
  void copy_rows(int64_t first, int64_t last, uint8_t* out) const {
    for (int64_t r = first; r < last; ++r) std::memcpy(out + (r - first) * row_bytes(), row(r), static_cast<size_t>(row_bytes()));
  }
};

// load_model_weights without converting the matrices: `dense` holds the 1-D tensors (norms,
// biases) in fp32, its matrix members empty; `matrices` the 2-D tensors where they lie in the
// archive's mapping, by Hugging Face name (a tied checkpoint's one table as kEmbedName), valid
// while the archive is open. The same checks as load_model_weights.
struct MappedModelWeights {
  ModelWeights dense;
  std::unordered_map<std::string, DenseMatrixRef> matrices;
};
// Tensors another reader takes (an AWQ/GPTQ checkpoint's quantized linear weights, int4_weights.h):
// `slots` (Hugging Face names of the config's matrices) are not looked for, and the archive's
// `tensors` count as part of the model.
struct ExternalTensors {
  std::unordered_set<std::string> slots, tensors;
};
// `progress` is started at the archive's tensor bytes and counts every tensor's but the
// matrices' and the external ones' (the caller counts each as it reads it).
MappedModelWeights map_model_weights(const SafetensorsArchive& archive, const ModelConfig& config,
                                     const LoadProgress& progress = {}, const ExternalTensors* external = nullptr);

// The copying loads' last step (load_model_weights, load_gguf_weights): each of `matrices`
// widened into its fp32 member of `weights`, rows split among threads, then handed to `read`
// (to count its bytes and let its pages go).
void widen_matrices(const std::unordered_map<std::string, DenseMatrixRef>& matrices, const ModelConfig& config,
                    ModelWeights& weights, const std::function<void(const DenseMatrixRef&)>& read);

// Random weights for any config, for benchmarks: matrices and biases N(0, 0.02^2), norms 1.
// Deterministic in `seed` (own generator, per-chunk streams: independent of the thread count).
ModelWeights make_dummy_weights(const ModelConfig& config, uint64_t seed);

}  // namespace strata
