// GGUF (llama.cpp's single-file format): a memory-mapped, fully validated reader, the llama
// architecture's config from its metadata, and its weights as the engine's ModelWeights.
// Opening checks every length, count, tensor type and data range against the file, so a
// truncated or corrupt file fails here with a ModelError naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "strata/load_progress.h"
#include "strata/model_backend.h"
#include "strata/model_weights.h"
#include "strata/quant.h"
#include "strata/safetensors.h"

namespace strata {

// GGUF metadata value types, as the file numbers them.
enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);

// One metadata value. Scalars are widened into `number` (integers exactly up to 2^53; u64/i64
// also in `integer`), strings into `text`; an array keeps its element type and count, and its
// elements only when they are numbers or strings of reasonable total size (all are, in models).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  double number = 0;
  int64_t integer = 0;
  std::string text;
  GgufValueType element_type = GgufValueType::kU8;  // arrays
  uint64_t count = 0;                               // arrays
  std::vector<double> numbers;                      // arrays of numbers / bools
  std::vector<std::string> strings;                 // arrays of strings
};

// ggml's tensor type ids (the ones this reader names; others are reported by number).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (innermost) dimension
  uint32_t type = 0;          // a GgmlType value
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  int64_t elements() const;
};

class GgufFile {
 public:
  // Throws ModelError(STRATA_MODEL_WEIGHTS) for a file that is not valid GGUF or holds a tensor
  // type the engine cannot load (K-quants, IQ types, ...), naming the file and the tensor.
  static GgufFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  const GgufValue* find(std::string_view key) const;
  // Typed reads; a missing key or a value of another type is ModelError(STRATA_MODEL_CONFIG).
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;  // any integer type, checked to fit
  double get_float(std::string_view key) const;  // f32/f64 or an integer
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  const GgufTensor* tensor(std::string_view name) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // Drops the tensor's resident pages once it has been copied out (MappedFile::release).
  void release(const GgufTensor& t) const { file_->release(t.data, t.nbytes); }

 private:
  GgufFile() = default;
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// The name of a ggml type id ("Q4_K"), or "type N" for an id this reader does not know.
std::string ggml_type_name(uint32_t type);

// Whether the file starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);

// The decoder config from a llama-architecture GGUF's metadata (general.architecture "llama";
// others are ModelError(STRATA_UNKNOWN_ARCHITECTURE)). eos ids: eos, then eot and eom when the
// file names them. Validated like config.json.
ModelConfig gguf_model_config(const GgufFile& file);

// The weights under their Hugging Face names: F32/F16/BF16 tensors as fp32, Q4_0/Q4_1/Q8_0
// matrices as blocks in ModelWeights::quantized (copying loads: the tests' reference). llama.cpp's converter permutes the rows of
// attn_q and attn_k for its interleaved rope; they are put back in the Hugging Face order
// (rotate-half), which the backends' rope expects. Blocks are copied, so the file may be closed.
// `progress` counts the file's tensor bytes as they are read (load_progress.h).
ModelWeights load_gguf_weights(const GgufFile& file, const ModelConfig& config, const LoadProgress& progress = {});

// A quantized matrix where it lies in the file's mapping, in the Hugging Face row order: row r
// is the file's row file_rows[r] (empty: row r; llama.cpp permutes attn_q's and attn_k's rows).
struct GgufBlocks {
  QuantType type = QuantType::Q8_0;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;  // the tensor's rows * row_bytes() bytes, in the file's order
  std::vector<int64_t> file_rows;
  const GgufTensor* tensor = nullptr;  // for GgufFile::release once the blocks are copied out

  int64_t row_bytes() const { return cols / kQuantBlock * quant_block_bytes(type); }
  const uint8_t* row(int64_t r) const { return data + (file_rows.empty() ? r : file_rows[r]) * row_bytes(); }
};

// load_gguf_weights without copying the matrices: `dense` holds the 1-D tensors (norms, biases)
// in fp32, its matrix members empty; `matrices` the F32/F16/BF16 matrices and `blocks` the
// quantized ones where they lie in the file's mapping, in the Hugging Face row order, valid
// while the file is open. The backends pack or upload them from there.
struct GgufWeights {
  ModelWeights dense;
  std::unordered_map<std::string, DenseMatrixRef> matrices;
  std::unordered_map<std::string, GgufBlocks> blocks;
};
// `progress` counts the 1-D tensors' bytes as they are read (not the matrices': the caller counts
// those as it reads them out).
GgufWeights map_gguf_weights(const GgufFile& file, const ModelConfig& config, const LoadProgress& progress = {});

// The bytes of all the file's tensors: what a load's progress counts up to.
int64_t gguf_tensor_bytes(const GgufFile& file);

// The blocks copied out, in the Hugging Face row order (what load_gguf_weights keeps).
QuantMatrix copy_blocks(const GgufBlocks& blocks);

}  // namespace strata
