#include <functional>

#include "strata/model_config.h"
#include "strata/model_error.h"

namespace strata {

namespace {

struct Preset {
  const char* name;
  std::function<ModelConfig()> make;
};

ModelConfig llama(int32_t vocab, int32_t hidden, int32_t intermediate, int32_t layers, int32_t heads,
                  int32_t kv_heads, int32_t max_pos, float eps, float theta) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = eps;
  c.rope_theta = theta;
  return c;
}

// Shapes as published in each model's config.json.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"llama-3-8b",
       [] {
         ModelConfig c = llama(128256, 4096, 14336, 32, 32, 8, 8192, 1e-5f, 500000.0f);
         c.bos_token_id = 128000;
         c.eos_token_ids = {128001, 128009};
         return c;
       }},
      {"llama-3.2-1b",
       [] {
         ModelConfig c = llama(128256, 2048, 8192, 16, 32, 8, 131072, 1e-5f, 500000.0f);
         c.rope_scaling_factor = 32.0f;
         c.rope_low_freq_factor = 1.0f;
         c.rope_high_freq_factor = 4.0f;
         c.rope_original_max_position = 8192;
         c.tie_word_embeddings = true;
         c.bos_token_id = 128000;
         c.eos_token_ids = {128001, 128008, 128009};
         return c;
       }},
      {"llama-2-7b",
       [] {
         ModelConfig c = llama(32000, 4096, 11008, 32, 32, 32, 4096, 1e-5f, 10000.0f);
         c.bos_token_id = 1;
         c.eos_token_ids = {2};
         return c;
       }},
      {"mistral-7b",
       [] {
         ModelConfig c = llama(32768, 4096, 14336, 32, 32, 8, 32768, 1e-5f, 1000000.0f);
         c.architecture = "MistralForCausalLM";
         c.bos_token_id = 1;
         c.eos_token_ids = {2};
         return c;
       }},
      {"qwen2.5-0.5b",
       [] {
         ModelConfig c = llama(151936, 896, 4864, 24, 14, 2, 32768, 1e-6f, 1000000.0f);
         c.architecture = "Qwen2ForCausalLM";
         c.attention_bias = true;
         c.tie_word_embeddings = true;
         c.bos_token_id = 151643;
         c.eos_token_ids = {151643};
         return c;
       }},
      {"tinystories-656k",
       [] {
         ModelConfig c = llama(2048, 128, 384, 2, 8, 4, 512, 1e-6f, 10000.0f);
         c.tie_word_embeddings = true;
         c.bos_token_id = 1;
         c.eos_token_ids = {2};
         return c;
       }},
  };
  return all;
}

}  // namespace

std::vector<std::string> preset_model_names() {
  std::vector<std::string> names;
  for (const Preset& preset : presets()) names.emplace_back(preset.name);
  return names;
}

ModelConfig preset_model_config(std::string_view name) {
  for (const Preset& preset : presets()) {
    if (name == preset.name) {
      ModelConfig config = preset.make();
      validate_model_config(config, std::string("preset ") + preset.name);
      return config;
    }
  }
  std::string known;
  for (const std::string& n : preset_model_names()) known += (known.empty() ? "" : ", ") + n;
  throw ModelError(model_error_code::kConfig, "unknown model preset \"" + std::string(name) + "\" (known: " + known + ")");
}

}  // namespace strata
