#include "strata/gguf.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "strata/model_error.h"

namespace strata {

namespace {

// Limits no real model comes near; they keep a corrupt count from allocating the machine away.
constexpr uint64_t kMaxKeyBytes = 1 << 16;
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxDims = 4;

struct TypeTraits {
  const char* name;
  int64_t block_values;  // 0: the engine cannot load it (named in the error)
  int64_t block_bytes;
};

// ggml's types by id. Only the ones with block_values > 0 load; the rest are named in errors.
TypeTraits type_traits(uint32_t type) {
  switch (type) {
    case 0: return {"F32", 1, 4};
    case 1: return {"F16", 1, 2};
    case 2: return {"Q4_0", 32, 18};
    case 3: return {"Q4_1", 32, 20};
    case 6: return {"Q5_0", 0, 0};
    case 7: return {"Q5_1", 0, 0};
    case 8: return {"Q8_0", 32, 34};
    case 9: return {"Q8_1", 0, 0};
    case 10: return {"Q2_K", 0, 0};
    case 11: return {"Q3_K", 0, 0};
    case 12: return {"Q4_K", 0, 0};
    case 13: return {"Q5_K", 0, 0};
    case 14: return {"Q6_K", 0, 0};
    case 15: return {"Q8_K", 0, 0};
    case 16: return {"IQ2_XXS", 0, 0};
    case 17: return {"IQ2_XS", 0, 0};
    case 18: return {"IQ3_XXS", 0, 0};
    case 19: return {"IQ1_S", 0, 0};
    case 20: return {"IQ4_NL", 0, 0};
    case 21: return {"IQ3_S", 0, 0};
    case 22: return {"IQ2_S", 0, 0};
    case 23: return {"IQ4_XS", 0, 0};
    case 24: return {"I8", 0, 0};
    case 25: return {"I16", 0, 0};
    case 26: return {"I32", 0, 0};
    case 27: return {"I64", 0, 0};
    case 28: return {"F64", 0, 0};
    case 29: return {"IQ1_M", 0, 0};
    case 30: return {"BF16", 1, 2};
    case 34: return {"TQ1_0", 0, 0};
    case 35: return {"TQ2_0", 0, 0};
    case 39: return {"MXFP4", 0, 0};
    default: return {nullptr, 0, 0};
  }
}

[[noreturn]] void fail_weights(const std::string& message) { throw ModelError(model_error_code::kWeights, message); }

// Reads the header fields in order, checking each read against the end of the file.
class Cursor {
 public:
  Cursor(const MappedFile& file) : file_(file) {}

  uint64_t pos() const { return pos_; }
  void need(uint64_t bytes, const char* what) const {
    if (bytes > file_.size() - pos_) {
      fail_weights(file_.path().string() + " is truncated: " + what + " at byte " + std::to_string(pos_) + " needs " +
                   std::to_string(bytes) + " bytes, the file has " + std::to_string(file_.size() - pos_) + " left");
    }
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, file_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string read_string(const char* what, uint64_t max_bytes) {
    const uint64_t length = read<uint64_t>(what);
    if (length > max_bytes) {
      fail_weights(file_.path().string() + ": " + what + " at byte " + std::to_string(pos_ - 8) + " claims " +
                   std::to_string(length) + " bytes (corrupt file?)");
    }
    need(length, what);
    std::string out(reinterpret_cast<const char*>(file_.data() + pos_), length);
    pos_ += length;
    return out;
  }

 private:
  const MappedFile& file_;
  uint64_t pos_ = 0;
};

bool is_number_type(GgufValueType t) {
  return t != GgufValueType::kString && t != GgufValueType::kArray && static_cast<uint32_t>(t) <= 12;
}

double read_number(Cursor& in, GgufValueType type, int64_t* integer) {
  const char* what = "a metadata value";
  int64_t i = 0;
  switch (type) {
    case GgufValueType::kU8: i = in.read<uint8_t>(what); break;
    case GgufValueType::kI8: i = in.read<int8_t>(what); break;
    case GgufValueType::kU16: i = in.read<uint16_t>(what); break;
    case GgufValueType::kI16: i = in.read<int16_t>(what); break;
    case GgufValueType::kU32: i = in.read<uint32_t>(what); break;
    case GgufValueType::kI32: i = in.read<int32_t>(what); break;
    case GgufValueType::kBool: i = in.read<uint8_t>(what) != 0; break;
    case GgufValueType::kF32: return in.read<float>(what);
    case GgufValueType::kF64: return in.read<double>(what);
    case GgufValueType::kU64: {
      const uint64_t u = in.read<uint64_t>(what);
      i = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                         : static_cast<int64_t>(u);
      break;
    }
    case GgufValueType::kI64: i = in.read<int64_t>(what); break;
    default: break;
  }
  if (integer) *integer = i;
  return static_cast<double>(i);
}

GgufValue read_value(Cursor& in, GgufValueType type, const std::string& key, const std::string& file) {
  GgufValue value;
  value.type = type;
  if (type == GgufValueType::kString) {
    value.text = in.read_string("a metadata string", kMaxStringBytes);
  } else if (type == GgufValueType::kArray) {
    const uint32_t element = in.read<uint32_t>("an array's element type");
    value.element_type = static_cast<GgufValueType>(element);
    value.count = in.read<uint64_t>("an array's length");
    if (element == static_cast<uint32_t>(GgufValueType::kString)) {
      if (value.count > (uint64_t{1} << 26)) fail_weights(file + ": metadata \"" + key + "\" claims " + std::to_string(value.count) + " strings");
      in.need(value.count * 8, "an array's strings");  // 8 length bytes each at least: bounds the reserve
      value.strings.reserve(value.count);
      for (uint64_t i = 0; i < value.count; ++i) value.strings.push_back(in.read_string("a metadata string", kMaxStringBytes));
    } else if (is_number_type(value.element_type)) {
      in.need(value.count, "an array's elements");  // at least one byte each: bounds the reserve
      value.numbers.reserve(value.count);
      for (uint64_t i = 0; i < value.count; ++i) value.numbers.push_back(read_number(in, value.element_type, nullptr));
    } else {
      fail_weights(file + ": metadata \"" + key + "\" is an array of " +
                   (element == static_cast<uint32_t>(GgufValueType::kArray) ? std::string("arrays")
                                                                            : "unknown value type " + std::to_string(element)) +
                   ", which the engine does not read");
    }
  } else if (is_number_type(type)) {
    value.number = read_number(in, type, &value.integer);
    if (type == GgufValueType::kF32 || type == GgufValueType::kF64) value.integer = static_cast<int64_t>(value.number);
  } else {
    fail_weights(file + ": metadata \"" + key + "\" has unknown value type " + std::to_string(static_cast<uint32_t>(type)) +
                 " (corrupt file?)");
  }
  return value;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  const uint32_t i = static_cast<uint32_t>(type);
  return i < 13 ? names[i] : "unknown";
}

std::string ggml_type_name(uint32_t type) {
  const char* name = type_traits(type).name;
  return name ? name : "type " + std::to_string(type);
}

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

bool is_gguf_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile out;
  out.file_ = std::make_shared<MappedFile>(path);
  const MappedFile& file = *out.file_;
  const std::string where = path.string();
  Cursor in(file);
  in.need(4, "the magic");
  if (std::memcmp(file.data(), "GGUF", 4) != 0) fail_weights(where + " is not a GGUF file (its first bytes are not \"GGUF\")");
  in.read<uint32_t>("the magic");
  out.version_ = in.read<uint32_t>("the version");
  if (out.version_ != 2 && out.version_ != 3) {
    fail_weights(where + " is GGUF version " + std::to_string(out.version_) + "; the engine reads versions 2 and 3");
  }
  const uint64_t n_tensors = in.read<uint64_t>("the tensor count");
  const uint64_t n_kv = in.read<uint64_t>("the metadata count");
  // Each entry takes at least 8 + 4 bytes (an empty key and a type): a count past that is corrupt.
  if (n_kv > file.size() / 12 || n_tensors > file.size() / 24) {
    fail_weights(where + " is truncated or corrupt: its header claims " + std::to_string(n_kv) + " metadata entries and " + std::to_string(n_tensors) +
                 " tensors, more than a file of " + std::to_string(file.size()) + " bytes can hold");
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = in.read_string("a metadata key", kMaxKeyBytes);
    const auto type = static_cast<GgufValueType>(in.read<uint32_t>("a metadata value type"));
    GgufValue value = read_value(in, type, key, where);
    if (!out.metadata_index_.emplace(key, out.metadata_.size()).second) fail_weights(where + ": metadata key \"" + key + "\" appears twice");
    out.metadata_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = out.find("general.alignment")) {
    if (!is_number_type(a->type) || a->integer <= 0 || (a->integer & (a->integer - 1)) != 0) {
      fail_weights(where + ": general.alignment must be a power of two, got " + std::to_string(a->integer));
    }
    out.alignment_ = static_cast<uint64_t>(a->integer);
  }

  struct Pending {
    uint64_t offset;
  };
  std::vector<Pending> offsets;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = in.read_string("a tensor name", kMaxKeyBytes);
    const uint32_t n_dims = in.read<uint32_t>("a tensor's dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail_weights(where + ": tensor \"" + t.name + "\" has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = in.read<uint64_t>("a tensor dimension");
      if (dim == 0 || dim > (uint64_t{1} << 40) || elements > (int64_t{1} << 42) / static_cast<int64_t>(dim)) {
        fail_weights(where + ": tensor \"" + t.name + "\" has an impossible dimension " + std::to_string(dim));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
      elements *= static_cast<int64_t>(dim);
    }
    t.type = in.read<uint32_t>("a tensor type");
    const uint64_t offset = in.read<uint64_t>("a tensor offset");
    const TypeTraits traits = type_traits(t.type);
    if (traits.name == nullptr) {
      fail_weights("tensor \"" + t.name + "\" in " + where + " has unknown ggml type id " + std::to_string(t.type) +
                   " (a newer llama.cpp format, or a corrupt file)");
    }
    if (traits.block_values == 0) {
      fail_weights("tensor \"" + t.name + "\" in " + where + " has type " + traits.name +
                   "; Strata loads F32, F16, BF16, Q8_0, Q4_0 and Q4_1 (K-quants such as Q4_K, and the IQ types, are "
                   "not supported yet: use a Q4_0, Q4_1 or Q8_0 file)");
    }
    if (t.dims[0] % traits.block_values != 0) {
      fail_weights(where + ": tensor \"" + t.name + "\" of type " + traits.name + " has rows of " + std::to_string(t.dims[0]) +
                   " values, not a multiple of its block size " + std::to_string(traits.block_values));
    }
    if (offset % out.alignment_ != 0) {
      fail_weights(where + ": tensor \"" + t.name + "\" starts at offset " + std::to_string(offset) + ", not aligned to " +
                   std::to_string(out.alignment_));
    }
    t.nbytes = static_cast<size_t>(elements / traits.block_values * traits.block_bytes);
    if (!out.tensor_index_.emplace(t.name, out.tensors_.size()).second) fail_weights(where + ": tensor \"" + t.name + "\" appears twice");
    out.tensors_.push_back(std::move(t));
    offsets.push_back({offset});
  }
  const uint64_t data_start = (in.pos() + out.alignment_ - 1) / out.alignment_ * out.alignment_;
  for (size_t i = 0; i < out.tensors_.size(); ++i) {
    GgufTensor& t = out.tensors_[i];
    const uint64_t begin = data_start + offsets[i].offset;
    if (offsets[i].offset > file.size() || begin > file.size() || t.nbytes > file.size() - begin) {
      fail_weights(where + " is truncated: tensor \"" + t.name + "\" needs bytes [" + std::to_string(begin) + ", " +
                   std::to_string(begin + t.nbytes) + "), the file has " + std::to_string(file.size()));
    }
    t.data = file.data() + begin;
  }
  return out;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {
[[noreturn]] void fail_config(const std::string& message) { throw ModelError(model_error_code::kConfig, message); }
}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_config(path().string() + ": metadata \"" + std::string(key) + "\" is missing");
  if (v->type != GgufValueType::kString) {
    fail_config(path().string() + ": metadata \"" + std::string(key) + "\" is a " + gguf_value_type_name(v->type) + ", expected a string");
  }
  return v->text;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_config(path().string() + ": metadata \"" + std::string(key) + "\" is missing");
  if (!is_number_type(v->type) || v->type == GgufValueType::kF32 || v->type == GgufValueType::kF64 || v->type == GgufValueType::kBool) {
    fail_config(path().string() + ": metadata \"" + std::string(key) + "\" is a " + gguf_value_type_name(v->type) + ", expected an integer");
  }
  return v->integer;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_config(path().string() + ": metadata \"" + std::string(key) + "\" is missing");
  if (!is_number_type(v->type) || v->type == GgufValueType::kBool) {
    fail_config(path().string() + ": metadata \"" + std::string(key) + "\" is a " + gguf_value_type_name(v->type) + ", expected a number");
  }
  return v->number;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace strata
