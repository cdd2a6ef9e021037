#include "strata/model_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "read_file.h"
#include "strata/json.h"
#include "strata/model_error.h"

namespace strata {

namespace {

constexpr std::array<std::string_view, 3> kArchitectures = {"LlamaForCausalLM", "MistralForCausalLM",
                                                            "Qwen2ForCausalLM"};

std::string supported_architectures() {
  std::string out;
  for (auto name : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

// Typed, checked access to the fields of one config file; every failure names file and field.
class FieldReader {
 public:
  FieldReader(const JsonValue& root, const std::string& source) : root_(root), source_(source) {}

  [[noreturn]] void fail(std::string_view field, const std::string& problem) const {
    throw ModelError(model_error_code::kConfig, source_ + ": field \"" + std::string(field) + "\" " + problem);
  }
  [[noreturn]] void fail_value(std::string_view field, const JsonValue& value, const std::string& expected) const {
    fail(field, "must be " + expected + ", found " + describe(value) + " (byte " + std::to_string(value.offset()) + ")");
  }

  // Absent and explicit null read alike: "not given".
  const JsonValue* get(std::string_view field) const {
    const JsonValue* value = root_.find(field);
    return (value == nullptr || value->is_null()) ? nullptr : value;
  }

  int32_t positive_int(std::string_view field) const {
    const JsonValue* value = get(field);
    if (value == nullptr) fail(field, "is missing");
    return positive_int(field, *value);
  }
  int32_t positive_int(std::string_view field, int32_t fallback) const {
    const JsonValue* value = get(field);
    return value == nullptr ? fallback : positive_int(field, *value);
  }
  int32_t positive_int(std::string_view field, const JsonValue& value) const {
    if (!value.is_integer() || value.as_int64() <= 0 || value.as_int64() > std::numeric_limits<int32_t>::max()) {
      fail_value(field, value, "a positive integer");
    }
    return static_cast<int32_t>(value.as_int64());
  }
  int32_t token_id(std::string_view field, const JsonValue& value) const {
    if (!value.is_integer() || value.as_int64() < 0 || value.as_int64() > std::numeric_limits<int32_t>::max()) {
      fail_value(field, value, "a token id (a non-negative integer)");
    }
    return static_cast<int32_t>(value.as_int64());
  }

  float positive_float(std::string_view field, float fallback) const {
    const JsonValue* value = get(field);
    return value == nullptr ? fallback : positive_float(field, *value);
  }
  float positive_float(std::string_view field, const JsonValue& value) const {
    if (!value.is_number() || !(value.as_number() > 0.0) || !std::isfinite(value.as_number())) {
      fail_value(field, value, "a positive number");
    }
    return static_cast<float>(value.as_number());
  }

  bool boolean(std::string_view field, bool fallback) const {
    const JsonValue* value = get(field);
    if (value == nullptr) return fallback;
    if (!value->is_bool()) fail_value(field, *value, "true or false");
    return value->as_bool();
  }

  const std::string* string(std::string_view field) const {
    const JsonValue* value = get(field);
    if (value == nullptr) return nullptr;
    if (!value->is_string()) fail_value(field, *value, "a string");
    return &value->as_string();
  }

  // An id or a list of ids ("eos_token_id": 2 or [128001, 128009]).
  std::vector<int32_t> token_ids(std::string_view field) const {
    const JsonValue* value = get(field);
    std::vector<int32_t> ids;
    if (value == nullptr) return ids;
    if (value->is_array()) {
      for (const JsonValue& item : value->items()) ids.push_back(token_id(field, item));
    } else {
      ids.push_back(token_id(field, *value));
    }
    return ids;
  }

  const std::string& source() const { return source_; }

 private:
  static std::string describe(const JsonValue& value) {
    if (value.is_string()) return "\"" + value.as_string() + "\"";
    if (value.is_number()) return value.is_integer() ? std::to_string(value.as_int64()) : std::to_string(value.as_number());
    return JsonValue::kind_name(value.kind());
  }

  const JsonValue& root_;
  const std::string& source_;
};

JsonValue parse_config_json(std::string_view text, const std::string& source) {
  try {
    JsonValue root = parse_json(text);
    if (!root.is_object()) throw ModelError(model_error_code::kConfig, source + ": expected a JSON object at the top level");
    return root;
  } catch (const JsonError& e) {
    throw ModelError(model_error_code::kConfig, source + ": malformed JSON: " + e.what());
  }
}

std::string read_architecture(const FieldReader& fields) {
  const JsonValue* architectures = fields.get("architectures");
  std::string name;
  if (architectures != nullptr) {
    if (!architectures->is_array() || architectures->size() == 0 || !(*architectures)[0].is_string()) {
      fields.fail_value("architectures", *architectures, "a non-empty list of strings");
    }
    name = (*architectures)[0].as_string();
  } else if (const std::string* model_type = fields.string("model_type")) {
    // Older configs name only the family.
    if (*model_type == "llama") name = "LlamaForCausalLM";
    else if (*model_type == "mistral") name = "MistralForCausalLM";
    else if (*model_type == "qwen2") name = "Qwen2ForCausalLM";
    else name = "model_type " + *model_type;
  } else {
    fields.fail("architectures", "is missing (and no \"model_type\" either)");
  }
  if (std::find(kArchitectures.begin(), kArchitectures.end(), name) == kArchitectures.end()) {
    throw ModelError(model_error_code::kUnknownArchitecture,
                     fields.source() + ": architecture \"" + name + "\" is not supported (supported: " +
                         supported_architectures() + ")");
  }
  return name;
}

// RoPE scaling from `key`: "rope_scaling" (transformers 4), or "rope_parameters"
// (transformers 5, which moved rope_theta into the same object).
void read_rope_scaling(const FieldReader& fields, ModelConfig& config, const std::string& key) {
  const JsonValue* scaling = fields.get(key);
  if (scaling == nullptr) return;
  if (!scaling->is_object()) fields.fail_value(key, *scaling, "an object or null");
  FieldReader inner(*scaling, fields.source());
  if (const JsonValue* theta = inner.get("rope_theta")) config.rope_theta = inner.positive_float(key + ".rope_theta", *theta);
  const std::string* type = inner.string("rope_type");
  if (type == nullptr) type = inner.string("type");
  if (type == nullptr) fields.fail(key, "has no \"rope_type\"");
  if (*type == "default") return;
  if (*type != "llama3") fields.fail(key, "has rope_type \"" + *type + "\", which is not supported (supported: llama3)");
  const auto required = [&](std::string_view field) -> const JsonValue& {
    const JsonValue* value = inner.get(field);
    if (value == nullptr) fields.fail(key + "." + std::string(field), "is missing");
    return *value;
  };
  config.rope_scaling_factor = inner.positive_float(key + ".factor", required("factor"));
  config.rope_low_freq_factor = inner.positive_float(key + ".low_freq_factor", required("low_freq_factor"));
  config.rope_high_freq_factor = inner.positive_float(key + ".high_freq_factor", required("high_freq_factor"));
  config.rope_original_max_position =
      inner.positive_int(key + ".original_max_position_embeddings", required("original_max_position_embeddings"));
}

// config.json's "quantization_config": 4-bit AWQ ("version": "gemm", with zero points) and
// GPTQ (v1 or v2 zero points, any group size that is a multiple of 32, act-order or not). Other
// methods, bit widths and layouts are refused here, naming the field, before any weight is read.
// `q` is the quantization object (config.json's "quantization_config", or the whole of an
// AutoGPTQ quantize_config.json / AutoAWQ quant_config.json, whose method `default_method`
// names when they do not); `key` prefixes its fields in messages.
void read_quantization_object(const FieldReader& fields, const JsonValue& q, const std::string& key,
                              const char* default_method, ModelConfig& config) {
  FieldReader inner(q, fields.source());
  const auto field = [&](std::string_view name) { return key.empty() ? std::string(name) : key + "." + std::string(name); };
  const std::string default_name = default_method != nullptr ? default_method : "";
  const std::string* method = inner.string("quant_method");
  if (method == nullptr && default_method != nullptr) method = &default_name;
  if (method == nullptr) fields.fail(field("quant_method"), "is missing");
  if (*method != "awq" && *method != "gptq") {
    fields.fail(field("quant_method"), "is \"" + *method + "\"; supported: awq (4-bit, GEMM layout) and gptq (4-bit)");
  }
  ModelConfig::Int4Quantization& out = config.quantization;
  out.method = *method;
  const JsonValue* bits = inner.get("bits");
  if (bits == nullptr) bits = inner.get("w_bit");  // AutoAWQ's own quant_config.json names
  if (bits == nullptr) fields.fail(field("bits"), "is missing");
  if (!bits->is_integer() || bits->as_int64() != 4) {
    inner.fail_value(field("bits"), *bits, "4 (only 4-bit AWQ and GPTQ checkpoints are supported)");
  }
  const JsonValue* group = inner.get("group_size");
  if (group == nullptr) group = inner.get("q_group_size");
  if (group == nullptr) fields.fail(field("group_size"), "is missing");
  if (!group->is_integer() || (group->as_int64() != -1 && (group->as_int64() <= 0 || group->as_int64() % 32 != 0 ||
                                                           group->as_int64() > std::numeric_limits<int32_t>::max()))) {
    inner.fail_value(field("group_size"), *group, "a positive multiple of 32, or -1 (one group per row)");
  }
  out.group_size = static_cast<int32_t>(group->as_int64());
  if (out.method == "awq") {
    const std::string* version = inner.string("version");
    if (version != nullptr && *version != "gemm" && *version != "GEMM") {
      fields.fail(field("version"), "is \"" + *version + "\"; only AWQ's GEMM layout (\"gemm\") is supported");
    }
    if (!inner.boolean("zero_point", true)) fields.fail(field("zero_point"), "is false; only AWQ with zero points is supported");
    return;
  }
  out.symmetric = inner.boolean("sym", true);
  const std::string* format = inner.string("checkpoint_format");
  if (format != nullptr && *format != "gptq" && *format != "gptq_v2") {
    fields.fail(field("checkpoint_format"), "is \"" + *format + "\"; supported: gptq, gptq_v2");
  }
  out.zeros_minus_one = format == nullptr || *format == "gptq";
}

void read_quantization(const FieldReader& fields, ModelConfig& config) {
  const std::string key = "quantization_config";
  const JsonValue* q = fields.get(key);
  if (q == nullptr) return;
  if (!q->is_object()) fields.fail_value(key, *q, "an object or null");
  read_quantization_object(fields, *q, key, nullptr, config);
}

void fail_invalid(const std::string& source, const std::string& field, const std::string& problem) {
  throw ModelError(model_error_code::kConfig, source + ": field \"" + field + "\" " + problem);
}

}  // namespace

ModelConfig parse_model_config(std::string_view config_json, const std::string& source) {
  JsonValue root = parse_config_json(config_json, source);
  FieldReader fields(root, source);
  ModelConfig config;
  config.architecture = read_architecture(fields);
  const bool is_llama = config.architecture == "LlamaForCausalLM";
  const bool is_qwen2 = config.architecture == "Qwen2ForCausalLM";

  config.vocab_size = fields.positive_int("vocab_size");
  config.hidden_size = fields.positive_int("hidden_size");
  config.intermediate_size = fields.positive_int("intermediate_size");
  config.num_layers = fields.positive_int("num_hidden_layers");
  config.num_heads = fields.positive_int("num_attention_heads");
  config.num_kv_heads = fields.positive_int("num_key_value_heads", config.num_heads);
  if (fields.get("head_dim") == nullptr && config.hidden_size % config.num_heads != 0) {
    fields.fail("hidden_size", "must be divisible by num_attention_heads when \"head_dim\" is not given");
  }
  config.head_dim = fields.positive_int("head_dim", config.hidden_size / config.num_heads);
  config.max_position_embeddings = fields.positive_int("max_position_embeddings");
  config.rms_norm_eps = fields.positive_float("rms_norm_eps", 1e-6f);
  config.rope_theta = fields.positive_float("rope_theta", 10000.0f);
  read_rope_scaling(fields, config, "rope_scaling");
  read_rope_scaling(fields, config, "rope_parameters");
  config.tie_word_embeddings = fields.boolean("tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases; Mistral never; Llama when asked (then o_proj has one too).
  config.attention_bias = is_qwen2 || (is_llama && fields.boolean("attention_bias", false));

  if (const std::string* act = fields.string("hidden_act"); act != nullptr && *act != "silu") {
    fields.fail("hidden_act", "is \"" + *act + "\"; only \"silu\" is supported");
  }
  if (fields.boolean("mlp_bias", false)) fields.fail("mlp_bias", "is true; MLP biases are not supported");

  // Sliding-window attention equals full attention while the context fits in the window, so
  // the context is capped at the window instead of implementing the window.
  bool windowed = !is_llama && (!is_qwen2 || fields.boolean("use_sliding_window", false));
  if (windowed) {
    int32_t window = fields.positive_int("sliding_window", config.max_position_embeddings);
    config.max_position_embeddings = std::min(config.max_position_embeddings, window);
  }

  if (const JsonValue* bos = fields.get("bos_token_id")) config.bos_token_id = fields.token_id("bos_token_id", *bos);
  config.eos_token_ids = fields.token_ids("eos_token_id");
  read_quantization(fields, config);
  validate_model_config(config, source);
  return config;
}

void merge_generation_config(ModelConfig& config, std::string_view generation_config_json, const std::string& source) {
  JsonValue root = parse_config_json(generation_config_json, source);
  FieldReader fields(root, source);
  for (int32_t id : fields.token_ids("eos_token_id")) {
    if (std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) == config.eos_token_ids.end()) {
      config.eos_token_ids.push_back(id);
    }
  }
  if (const JsonValue* bos = fields.get("bos_token_id"); bos != nullptr && config.bos_token_id < 0) {
    config.bos_token_id = fields.token_id("bos_token_id", *bos);
  }
  validate_model_config(config, source);
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path config_path = model_dir / "config.json";
  ModelConfig config = parse_model_config(read_text_file(config_path, model_error_code::kConfig), config_path.string());
  const std::filesystem::path generation_path = model_dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(generation_path, ec)) {
    merge_generation_config(config, read_text_file(generation_path, model_error_code::kConfig), generation_path.string());
  }
  // Checkpoints written before transformers carried quantization_config keep it in a file of
  // its own: AutoGPTQ's quantize_config.json, AutoAWQ's quant_config.json (as vLLM reads them).
  if (config.quantization.method.empty()) {
    for (const auto& [name, method] : {std::pair{"quantize_config.json", "gptq"}, std::pair{"quant_config.json", "awq"}}) {
      const std::filesystem::path path = model_dir / name;
      if (!std::filesystem::exists(path, ec)) continue;
      const std::string source = path.string();
      const JsonValue root = parse_config_json(read_text_file(path, model_error_code::kConfig), source);
      read_quantization_object(FieldReader(root, source), root, "", method, config);
      break;
    }
  }
  return config;
}

void validate_model_config(const ModelConfig& c, const std::string& source) {
  if (std::find(kArchitectures.begin(), kArchitectures.end(), c.architecture) == kArchitectures.end()) {
    throw ModelError(model_error_code::kUnknownArchitecture, source + ": architecture \"" + c.architecture +
                                                                 "\" is not supported (supported: " + supported_architectures() + ")");
  }
  const std::pair<const char*, int32_t> positive[] = {
      {"vocab_size", c.vocab_size},           {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},   {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},               {"max_position_embeddings", c.max_position_embeddings}};
  for (const auto& [field, value] : positive) {
    if (value <= 0) fail_invalid(source, field, "must be positive, is " + std::to_string(value));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    fail_invalid(source, "num_key_value_heads", "is " + std::to_string(c.num_kv_heads) + ", which does not divide num_attention_heads " +
                                                    std::to_string(c.num_heads));
  }
  if (c.head_dim % 2 != 0) fail_invalid(source, "head_dim", "must be even for rotary embeddings, is " + std::to_string(c.head_dim));
  if (!(c.rms_norm_eps > 0.0f)) fail_invalid(source, "rms_norm_eps", "must be positive");
  if (!(c.rope_theta > 1.0f)) fail_invalid(source, "rope_theta", "must be greater than 1");
  if (c.rope_scaling_factor < 0.0f) fail_invalid(source, "rope_scaling.factor", "must not be negative");
  if (c.rope_scaling_factor > 0.0f) {
    if (!(c.rope_low_freq_factor > 0.0f) || !(c.rope_high_freq_factor > c.rope_low_freq_factor)) {
      fail_invalid(source, "rope_scaling", "needs 0 < low_freq_factor < high_freq_factor");
    }
    if (c.rope_original_max_position <= 0) fail_invalid(source, "rope_scaling.original_max_position_embeddings", "must be positive");
  }
  if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size) {
    fail_invalid(source, "bos_token_id", std::to_string(c.bos_token_id) + " is outside the vocabulary (" + std::to_string(c.vocab_size) + ")");
  }
  for (int32_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      fail_invalid(source, "eos_token_id", std::to_string(id) + " is outside the vocabulary (" + std::to_string(c.vocab_size) + ")");
    }
  }
}

}  // namespace strata
