// Test helpers that write model directories: config.json text and small safetensors files
// (single or sharded), so loading tests can build broken models byte by byte.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "strata/float_convert.h"

namespace strata_test {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("strata-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "I32", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

// fp32 values in a safetensors dtype (F32, F16 or BF16), little-endian.
inline std::string encode(const std::vector<float>& values, const std::string& dtype) {
  std::string out;
  for (float v : values) {
    char bytes[4];
    if (dtype == "F32") {
      std::memcpy(bytes, &v, 4);
      out.append(bytes, 4);
    } else {
      uint16_t h = dtype == "F16" ? strata::f32_to_f16(v) : strata::f32_to_bf16(v);
      std::memcpy(bytes, &h, 2);
      out.append(bytes, 2);
    }
  }
  return out;
}

// The safetensors layout: u64 header length, JSON header (space-padded to 8), data.
inline std::string safetensors_bytes(const std::vector<RawTensor>& tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  for (const RawTensor& t : tensors) {
    header += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i > 0) header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," + std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  uint64_t length = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  return out + header + data;
}

inline void write_safetensors(const std::filesystem::path& path, const std::vector<RawTensor>& tensors) {
  write_file(path, safetensors_bytes(tensors));
}

}  // namespace strata_test
