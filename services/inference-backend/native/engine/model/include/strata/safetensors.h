// Memory-mapped safetensors: one model.safetensors, or model.safetensors.index.json and its
// shards. Opening checks every header entry (dtype, shape, byte range inside the file), so a
// truncated or corrupt file fails here, naming the tensor and the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata {

// A read-only mapping of a whole file, unmapped on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // throws ModelError(STRATA_MODEL_WEIGHTS)
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Drops the resident pages wholly inside [p, p + n) once their bytes have been copied out, so
  // loading does not hold the file and its copy at once; a later read maps them in again.
  void release(const uint8_t* p, size_t n) const;

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct TensorInfo {
  std::string name;
  std::string dtype;           // as written in the header: "F32", "BF16", "I32", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping; no alignment guaranteed
  size_t nbytes = 0;
  const MappedFile* file = nullptr;
};

// Bytes per element of a safetensors dtype; 0 if unknown.
size_t safetensors_dtype_size(std::string_view dtype);

class SafetensorsArchive {
 public:
  // Opens DIR/model.safetensors, else DIR/model.safetensors.index.json and its shards.
  static SafetensorsArchive open_model_dir(const std::filesystem::path& model_dir);
  // Opens one .safetensors file.
  static SafetensorsArchive open_file(const std::filesystem::path& path);

  const TensorInfo* find(std::string_view name) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Names the archive in messages: the file, or the index for a sharded model.
  const std::string& description() const { return description_; }

 private:
  void add_file(const std::filesystem::path& path);

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::string description_;
};

}  // namespace strata
