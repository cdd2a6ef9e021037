// A llama-architecture GGUF as the engine's ModelConfig and ModelWeights.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "strata/float_convert.h"
#include "strata/gguf.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "strata/split_work.h"
#include "tensor_slots.h"

namespace strata {

namespace {

[[noreturn]] void fail_config(const GgufFile& file, const std::string& message) {
  throw ModelError(model_error_code::kConfig, file.path().string() + ": " + message);
}
[[noreturn]] void fail_weights(const std::string& message) { throw ModelError(model_error_code::kWeights, message); }

int32_t positive_int(const GgufFile& file, const std::string& key) {
  const int64_t v = file.get_int(key);
  if (v <= 0 || v > INT32_MAX) fail_config(file, "metadata \"" + key + "\" must be a positive 32-bit integer, is " + std::to_string(v));
  return static_cast<int32_t>(v);
}

// The GGUF tensor name of a Hugging Face name from tensor_slots(), or "" when it has none.
std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::pair<const char*, const char*> layer_names[] = {
      {"input_layernorm.weight", "attn_norm.weight"},     {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},       {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},  {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},        {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},        {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},           {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"}};
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return "";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [from, to] : layer_names) {
    if (rest == from) return "blk." + layer + "." + to;
  }
  return "";
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// llama.cpp's converter stores q/k rows of each head as (head_dim / 2, 2) interleaved pairs
// where Hugging Face has (2, head_dim / 2) halves: GGUF row h*d + 2i + j is HF row h*d + j*d/2 + i.
// Returns, for each HF row, the GGUF row it comes from.
std::vector<int64_t> unpermute_rows(int64_t rows, int64_t head_dim) {
  std::vector<int64_t> source(static_cast<size_t>(rows));
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, within = r % head_dim, j = within / half, i = within % half;
    source[r] = head * head_dim + 2 * i + j;
  }
  return source;
}

QuantType quant_type_of(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ4_0: return QuantType::Q4_0;
    case GgmlType::kQ4_1: return QuantType::Q4_1;
    default: return QuantType::Q8_0;
  }
}

DenseMatrixRef::Dtype dense_dtype(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF16: return DenseMatrixRef::Dtype::kF16;
    case GgmlType::kBF16: return DenseMatrixRef::Dtype::kBF16;
    default: return DenseMatrixRef::Dtype::kF32;
  }
}

bool is_quantized(uint32_t ggml_type) {
  const auto t = static_cast<GgmlType>(ggml_type);
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ8_0;
}

// One row of `t` (row = dims[0] values) widened to fp32.
void row_to_f32(const GgufTensor& t, int64_t row, float* out) {
  const int64_t cols = t.dims[0];
  const auto type = static_cast<GgmlType>(t.type);
  if (is_quantized(t.type)) {
    const QuantType q = quant_type_of(t.type);
    dequantize_row(q, t.data + row * (cols / kQuantBlock) * quant_block_bytes(q), cols, out);
  } else if (type == GgmlType::kF32) {
    std::memcpy(out, t.data + row * cols * 4, static_cast<size_t>(cols) * 4);
  } else {
    const uint8_t* src = t.data + row * cols * 2;
    for (int64_t i = 0; i < cols; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = type == GgmlType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture");
  if (arch != "llama") {
    throw ModelError(model_error_code::kUnknownArchitecture,
                     file.path().string() + ": architecture \"" + arch + "\" is not supported in GGUF files (supported: llama)");
  }
  const std::string p = "llama.";
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.num_layers = positive_int(file, p + "block_count");
  c.hidden_size = positive_int(file, p + "embedding_length");
  c.intermediate_size = positive_int(file, p + "feed_forward_length");
  c.num_heads = positive_int(file, p + "attention.head_count");
  c.num_kv_heads = file.has(p + "attention.head_count_kv") ? positive_int(file, p + "attention.head_count_kv") : c.num_heads;
  c.max_position_embeddings = positive_int(file, p + "context_length");
  c.rms_norm_eps = static_cast<float>(file.get_float(p + "attention.layer_norm_rms_epsilon"));
  c.rope_theta = file.has(p + "rope.freq_base") ? static_cast<float>(file.get_float(p + "rope.freq_base")) : 10000.0f;
  if (c.hidden_size % c.num_heads != 0 && !file.has(p + "attention.key_length")) {
    fail_config(file, "embedding_length " + std::to_string(c.hidden_size) + " is not a multiple of head_count " + std::to_string(c.num_heads));
  }
  c.head_dim = file.has(p + "attention.key_length") ? positive_int(file, p + "attention.key_length") : c.hidden_size / c.num_heads;
  if (file.has(p + "attention.value_length") && positive_int(file, p + "attention.value_length") != c.head_dim) {
    fail_config(file, "attention.value_length differs from the key length; the engine needs them equal");
  }
  if (file.has(p + "rope.dimension_count") && positive_int(file, p + "rope.dimension_count") != c.head_dim) {
    fail_config(file, "rope.dimension_count " + std::to_string(file.get_int(p + "rope.dimension_count")) +
                          " is not the head size " + std::to_string(c.head_dim) + "; partial rotary embeddings are not supported");
  }
  if (file.has(p + "rope.scaling.type")) {
    const std::string type = file.get_string(p + "rope.scaling.type");
    if (type != "none") fail_config(file, "rope.scaling.type \"" + type + "\" is not supported in GGUF files yet");
  }
  if (file.tensor("rope_freqs.weight") != nullptr) {
    fail_config(file, "has a rope_freqs tensor (Llama 3.1-style rope scaling), which the GGUF loader does not support yet");
  }
  const GgufTensor* embed = file.tensor("token_embd.weight");
  if (embed == nullptr) fail_weights(file.path().string() + ": missing tensor \"token_embd.weight\"");
  if (file.has(p + "vocab_size")) c.vocab_size = positive_int(file, p + "vocab_size");
  else if (embed->dims.size() == 2) c.vocab_size = static_cast<int32_t>(embed->dims[1]);
  c.tie_word_embeddings = file.tensor("output.weight") == nullptr;
  c.attention_bias = file.tensor("blk.0.attn_q.bias") != nullptr;
  if (file.has("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int32_t>(file.get_int("tokenizer.ggml.bos_token_id"));
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (!file.has(key)) continue;
    const auto id = static_cast<int32_t>(file.get_int(key));
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) c.eos_token_ids.push_back(id);
  }
  validate_model_config(c, file.path().string());
  return c;
}

int64_t gguf_tensor_bytes(const GgufFile& file) {
  int64_t bytes = 0;
  for (const GgufTensor& t : file.tensors()) bytes += static_cast<int64_t>(t.nbytes);
  return bytes;
}

GgufWeights map_gguf_weights(const GgufFile& file, const ModelConfig& config, const LoadProgress& progress) {
  GgufWeights mapped;
  ModelWeights& weights = mapped.dense;
  std::vector<TensorSlot> slots = tensor_slots(config, &weights);
  std::unordered_set<std::string> used;
  const std::string where = file.path().string();
  for (TensorSlot& slot : slots) {
    if (config.tie_word_embeddings && slot.name == kLmHeadName) continue;  // tied: token_embd serves
    const std::string name = gguf_name(slot.name);
    const GgufTensor* t = file.tensor(name);
    if (t == nullptr) fail_weights(where + ": missing tensor \"" + name + "\" (expected shape " + shape_string(slot.shape) + ")");
    // GGUF lists dimensions innermost first: the reverse of the Hugging Face shape.
    const std::vector<int64_t> shape(t->dims.rbegin(), t->dims.rend());
    if (shape != slot.shape) {
      fail_weights("tensor \"" + name + "\" in " + where + " has shape " + shape_string(shape) + ", expected " +
                   shape_string(slot.shape) + " for this model's metadata");
    }
    used.insert(name);
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    const bool permuted = slot.name.find("self_attn.q_proj.") != std::string::npos || slot.name.find("self_attn.k_proj.") != std::string::npos;
    std::vector<int64_t> source_row;
    // Rows of a matrix, or values of a bias, in the permuted order.
    if (permuted) source_row = unpermute_rows(shape.size() == 2 ? rows : cols, config.head_dim);
    if (shape.size() == 2 && is_quantized(t->type)) {
      GgufBlocks b;
      b.type = quant_type_of(t->type);
      b.rows = rows;
      b.cols = cols;
      b.data = t->data;
      b.file_rows = std::move(source_row);
      b.tensor = t;
      mapped.blocks.emplace(slot.name, std::move(b));
      continue;
    }
    if (shape.size() == 2) {
      DenseMatrixRef m;
      m.rows = rows;
      m.cols = cols;
      m.data = t->data;
      m.dtype = dense_dtype(t->type);
      m.file_rows = std::move(source_row);
      m.gguf_tensor = t;
      mapped.matrices.emplace(slot.name, std::move(m));
      continue;
    }
    // A bias or norm, in fp32 (a permuted bias is permuted value by value).
    std::vector<float>& out = *slot.target;
    out.resize(static_cast<size_t>(cols));
    row_to_f32(*t, 0, out.data());
    if (permuted) {
      const std::vector<float> original = out;
      for (int64_t u = 0; u < cols; ++u) out[u] = original[source_row[u]];
    }
    progress.add(static_cast<int64_t>(t->nbytes));
    file.release(*t);
  }
  for (const GgufTensor& t : file.tensors()) {
    if (used.count(t.name) == 0 && t.name != "rope_freqs.weight") {
      fail_weights("tensor \"" + t.name + "\" in " + where + " (" + ggml_type_name(t.type) + ", " + shape_string(t.dims) +
                   ") is not part of the model its metadata describes (layers, biases or sizes differ?)");
    }
  }
  return mapped;
}

QuantMatrix copy_blocks(const GgufBlocks& b) {
  QuantMatrix m;
  m.type = b.type;
  m.rows = b.rows;
  m.cols = b.cols;
  const int64_t row_bytes = m.row_bytes();
  m.data.resize(static_cast<size_t>(b.rows * row_bytes));
  if (b.file_rows.empty()) {
    copy_split(m.data.data(), b.data, b.rows * row_bytes);
  } else {
    split_work(b.rows, threads_for(b.rows * row_bytes, int64_t{1} << 22), [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) std::memcpy(m.data.data() + r * row_bytes, b.row(r), static_cast<size_t>(row_bytes));
    });
  }
  return m;
}

ModelWeights load_gguf_weights(const GgufFile& file, const ModelConfig& config, const LoadProgress& progress) {
  progress.start(gguf_tensor_bytes(file));
  GgufWeights mapped = map_gguf_weights(file, config, progress);
  widen_matrices(mapped.matrices, config, mapped.dense, [&](const DenseMatrixRef& m) {
    progress.add(static_cast<int64_t>(m.gguf_tensor->nbytes));
    file.release(*m.gguf_tensor);
  });
  for (auto& [name, blocks] : mapped.blocks) {
    mapped.dense.quantized.emplace(name, copy_blocks(blocks));
    progress.add(static_cast<int64_t>(blocks.tensor->nbytes));
    file.release(*blocks.tensor);
  }
  return std::move(mapped.dense);
}

}  // namespace strata
