#include <string>

#include "check.h"
#include "strata/model_config.h"
#include "strata/model_error.h"

using namespace strata;

namespace {

const char* kTinyStories = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 128, "intermediate_size": 384, "max_position_embeddings": 512,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 8, "num_hidden_layers": 2,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "torch_dtype": "float32", "vocab_size": 2048})";

// Replaces the first occurrence of `from` in `text`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  if (at == std::string::npos) return "substitution not found: " + from;
  return text.replace(at, from.size(), to);
}

std::string tiny_with(const std::string& from, const std::string& to) { return replaced(kTinyStories, from, to); }

// The ModelError a parse throws: its code, then its message.
std::pair<std::string, std::string> parse_error(const std::string& text) {
  try {
    parse_model_config(text, "dir/config.json");
  } catch (const ModelError& e) {
    return {e.code(), e.what()};
  }
  return {"", "no error"};
}

bool contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  std::printf("  message \"%s\" lacks \"%s\"\n", text.c_str(), part.c_str());
  return false;
}

}  // namespace

TEST_CASE("config: tinystories-656k") {
  ModelConfig c = parse_model_config(kTinyStories, "config.json");
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK_EQ(c.vocab_size, 2048);
  CHECK_EQ(c.hidden_size, 128);
  CHECK_EQ(c.intermediate_size, 384);
  CHECK_EQ(c.num_layers, 2);
  CHECK_EQ(c.num_heads, 8);
  CHECK_EQ(c.num_kv_heads, 4);
  CHECK_EQ(c.head_dim, 16);
  CHECK_EQ(c.max_position_embeddings, 512);
  CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-12);
  CHECK_NEAR(c.rope_theta, 10000.0, 0);
  CHECK_NEAR(c.rope_scaling_factor, 0.0, 0);
  CHECK(c.tie_word_embeddings);
  CHECK(!c.attention_bias);
  CHECK_EQ(c.bos_token_id, 1);
  CHECK(c.eos_token_ids == std::vector<int32_t>{2});
}

TEST_CASE("config: defaults for num_key_value_heads and head_dim; explicit head_dim") {
  ModelConfig c = parse_model_config(tiny_with("\"num_key_value_heads\": 4,", ""), "config.json");
  CHECK_EQ(c.num_kv_heads, 8);
  CHECK_EQ(c.head_dim, 16);
  ModelConfig d = parse_model_config(tiny_with("\"num_key_value_heads\": 4,", "\"num_key_value_heads\": 2, \"head_dim\": 32,"), "config.json");
  CHECK_EQ(d.num_kv_heads, 2);
  CHECK_EQ(d.head_dim, 32);
}

TEST_CASE("config: Qwen2 has q/k/v bias, Mistral caps context at its sliding window") {
  ModelConfig q = parse_model_config(tiny_with("LlamaForCausalLM", "Qwen2ForCausalLM"), "config.json");
  CHECK(q.architecture == "Qwen2ForCausalLM");
  CHECK(q.attention_bias);
  ModelConfig m = parse_model_config(tiny_with("\"LlamaForCausalLM\"]", "\"MistralForCausalLM\"], \"sliding_window\": 256"), "c");
  CHECK(m.architecture == "MistralForCausalLM");
  CHECK(!m.attention_bias);
  CHECK_EQ(m.max_position_embeddings, 256);
  ModelConfig l = parse_model_config(tiny_with("\"attention_bias\": false", "\"attention_bias\": true"), "config.json");
  CHECK(l.attention_bias);
}

TEST_CASE("config: architecture from model_type when architectures is absent") {
  ModelConfig c = parse_model_config(tiny_with("\"architectures\": [\"LlamaForCausalLM\"],", ""), "config.json");
  CHECK(c.architecture == "LlamaForCausalLM");
}

TEST_CASE("config: llama3 rope scaling and eos lists") {
  std::string text = tiny_with("\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, "
                               "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}");
  ModelConfig c = parse_model_config(replaced(text, "\"eos_token_id\": 2", "\"eos_token_id\": [2, 3]"), "config.json");
  CHECK(c.eos_token_ids == (std::vector<int32_t>{2, 3}));
  CHECK_NEAR(c.rope_scaling_factor, 32.0, 0);
  CHECK_NEAR(c.rope_low_freq_factor, 1.0, 0);
  CHECK_NEAR(c.rope_high_freq_factor, 4.0, 0);
  CHECK_EQ(c.rope_original_max_position, 8192);
}

TEST_CASE("config: transformers 5's rope_parameters carry rope_theta and the llama3 scaling") {
  std::string text = replaced(tiny_with("\"rope_scaling\": null", "\"rope_parameters\": {\"rope_type\": \"llama3\", "
                              "\"rope_theta\": 500000.0, \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                              "\"original_max_position_embeddings\": 8192}"), "\"rope_theta\": 10000.0,", "");
  ModelConfig c = parse_model_config(text, "config.json");
  CHECK_NEAR(c.rope_theta, 500000.0, 0);
  CHECK_NEAR(c.rope_scaling_factor, 8.0, 0);
  CHECK_EQ(c.rope_original_max_position, 8192);
  // Its "default" type carries only rope_theta.
  c = parse_model_config(replaced(tiny_with("\"rope_scaling\": null", "\"rope_parameters\": {\"rope_type\": \"default\", "
                                            "\"rope_theta\": 20000.0}"), "\"rope_theta\": 10000.0,", ""),
                         "config.json");
  CHECK_NEAR(c.rope_theta, 20000.0, 0);
  CHECK_NEAR(c.rope_scaling_factor, 0.0, 0);
}

TEST_CASE("config: generation_config.json adds eos ids") {
  ModelConfig c = parse_model_config(kTinyStories, "config.json");
  merge_generation_config(c, R"({"bos_token_id": 1, "eos_token_id": [2, 7]})", "generation_config.json");
  CHECK(c.eos_token_ids == (std::vector<int32_t>{2, 7}));
  CHECK_EQ(c.bos_token_id, 1);
}

TEST_CASE("config: errors name the file, the field and the problem") {
  auto [code, message] = parse_error(tiny_with("LlamaForCausalLM", "GPT2LMHeadModel"));
  CHECK(code == "STRATA_UNKNOWN_ARCHITECTURE");
  CHECK(contains(message, "GPT2LMHeadModel"));
  CHECK(contains(message, "dir/config.json"));

  std::tie(code, message) = parse_error(tiny_with("\"hidden_size\": 128,", ""));
  CHECK(code == "STRATA_MODEL_CONFIG");
  CHECK(contains(message, "\"hidden_size\" is missing"));

  std::tie(code, message) = parse_error(tiny_with("\"hidden_size\": 128", "\"hidden_size\": \"128\""));
  CHECK(contains(message, "\"hidden_size\" must be a positive integer, found \"128\""));

  std::tie(code, message) = parse_error(tiny_with("\"num_hidden_layers\": 2", "\"num_hidden_layers\": -2"));
  CHECK(contains(message, "num_hidden_layers"));

  std::tie(code, message) = parse_error(tiny_with("\"vocab_size\": 2048", "\"vocab_size\": 20.5"));
  CHECK(contains(message, "vocab_size"));

  std::tie(code, message) = parse_error(tiny_with("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 3"));
  CHECK(contains(message, "num_key_value_heads"));

  std::tie(code, message) = parse_error(tiny_with("\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}"));
  CHECK(contains(message, "yarn"));

  std::tie(code, message) = parse_error(tiny_with("\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 4}"));
  CHECK(contains(message, "rope_scaling.low_freq_factor\" is missing"));

  std::tie(code, message) = parse_error(tiny_with("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\""));
  CHECK(contains(message, "hidden_act"));

  std::tie(code, message) = parse_error(tiny_with("\"eos_token_id\": 2", "\"eos_token_id\": 4096"));
  CHECK(contains(message, "eos_token_id"));

  std::tie(code, message) = parse_error(tiny_with("\"vocab_size\": 2048}", "\"vocab_size\": 2048,}"));
  CHECK(code == "STRATA_MODEL_CONFIG");
  CHECK(contains(message, "malformed JSON"));
  CHECK(contains(message, "at byte"));

  std::tie(code, message) = parse_error("[1, 2]");
  CHECK(contains(message, "JSON object"));
}

TEST_CASE("config: presets") {
  ModelConfig c = preset_model_config("llama-3-8b");
  CHECK_EQ(c.vocab_size, 128256);
  CHECK_EQ(c.hidden_size, 4096);
  CHECK_EQ(c.intermediate_size, 14336);
  CHECK_EQ(c.num_layers, 32);
  CHECK_EQ(c.num_heads, 32);
  CHECK_EQ(c.num_kv_heads, 8);
  CHECK_EQ(c.head_dim, 128);
  CHECK_NEAR(c.rope_theta, 500000.0, 0);
  for (const std::string& name : preset_model_names()) preset_model_config(name);  // all valid
  try {
    preset_model_config("gpt-5");
    CHECK(false);
  } catch (const ModelError& e) {
    CHECK(contains(e.what(), "gpt-5"));
    CHECK(contains(e.what(), "llama-3-8b"));
  }
}

TEST_MAIN()
