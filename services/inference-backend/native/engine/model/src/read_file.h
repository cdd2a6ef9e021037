// Whole-file reads for small text files (config.json, index.json), failing as ModelError.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "strata/model_error.h"

namespace strata {

inline std::string read_text_file(const std::filesystem::path& path, const char* error_code) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw ModelError(error_code, path.string() + ": file not found");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(error_code, path.string() + ": cannot open file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ModelError(error_code, path.string() + ": read error");
  return text.str();
}

}  // namespace strata
