#include "strata/model_source.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "strata/model_error.h"

namespace strata {

namespace {

[[noreturn]] void fail(const std::string& message) { throw ModelError(model_error_code::kConfig, message); }

bool has_gguf_magic(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

ModelSource resolve_model_source(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) fail("model path " + path.string() + " does not exist");
  if (std::filesystem::is_regular_file(status)) {
    if (!has_gguf_magic(path)) {
      fail("model path " + path.string() +
           " is a file but not a GGUF file (no \"GGUF\" magic); pass a .gguf file or a Hugging Face model directory");
    }
    return {ModelSource::Kind::kGguf, path};
  }
  if (!std::filesystem::is_directory(status)) fail("model path " + path.string() + " is neither a file nor a directory");
  if (std::filesystem::exists(path / "config.json")) return {ModelSource::Kind::kHuggingFace, path};
  std::vector<std::filesystem::path> ggufs;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") ggufs.push_back(entry.path());
  }
  std::sort(ggufs.begin(), ggufs.end());
  if (ggufs.size() == 1) return resolve_model_source(ggufs.front());
  if (ggufs.empty()) {
    fail("model directory " + path.string() + " has no config.json (Hugging Face) and no .gguf file");
  }
  std::string names;
  for (const auto& g : ggufs) names += (names.empty() ? "" : ", ") + g.filename().string();
  fail("model directory " + path.string() + " holds " + std::to_string(ggufs.size()) + " .gguf files (" + names +
       "); pass the one to serve");
}

}  // namespace strata
