// Reading a Hugging Face config.json (+ generation_config.json) into strata::ModelConfig, and
// named shape presets for the dummy load format. Everything is checked here, once, so the
// loaders and backends can trust a ModelConfig.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model_backend.h"

namespace strata {

// Reads DIR/config.json and, when present, DIR/generation_config.json (its eos ids are added
// to config.json's, its bos used if config.json has none). Throws ModelError.
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// Parses config.json text; `source` names the file in error messages. Throws ModelError.
ModelConfig parse_model_config(std::string_view config_json, const std::string& source);

// Merges generation_config.json text into `config` (eos ids, bos). Throws ModelError.
void merge_generation_config(ModelConfig& config, std::string_view generation_config_json,
                             const std::string& source);

// Checks the invariants the backends rely on (positive sizes, heads divisible by kv heads,
// even head_dim, ...). Throws ModelError(STRATA_MODEL_CONFIG) naming `source` and the field.
void validate_model_config(const ModelConfig& config, const std::string& source);

// Shapes of well-known models for dummy weights: "llama-3-8b", "llama-3.2-1b", "llama-2-7b",
// "mistral-7b", "qwen2.5-0.5b", "tinystories-656k". Throws ModelError for an unknown name.
ModelConfig preset_model_config(std::string_view name);
std::vector<std::string> preset_model_names();

}  // namespace strata
