// What a model path names: a Hugging Face directory (config.json + safetensors) or a GGUF file.
// The service, the CLI and every backend take one path and resolve it here, the same way.
#pragma once

#include <filesystem>

namespace strata {

struct ModelSource {
  enum class Kind { kHuggingFace, kGguf };
  Kind kind = Kind::kHuggingFace;
  std::filesystem::path path;  // the directory, or the .gguf file
};

// A file: a GGUF file (checked by its magic). A directory: Hugging Face when it holds
// config.json, else the one *.gguf file in it. Throws ModelError(STRATA_MODEL_CONFIG) saying
// what was found instead (nothing there, a file that is not GGUF, several .gguf files).
ModelSource resolve_model_source(const std::filesystem::path& path);

}  // namespace strata
