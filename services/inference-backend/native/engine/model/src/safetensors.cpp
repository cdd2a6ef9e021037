#include "strata/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "read_file.h"
#include "strata/json.h"
#include "strata/model_error.h"

namespace strata {

namespace {

// Real headers are a few hundred KiB; a huge length means a corrupt or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

[[noreturn]] void fail(const std::string& message) { throw ModelError(model_error_code::kWeights, message); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail(path.string() + ": " + (errno == ENOENT ? std::string("file not found") : std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path.string() + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(path.string() + ": mmap failed: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(mapped);
  }
  ::close(fd);  // the mapping keeps the file alive
}

void MappedFile::release(const uint8_t* p, size_t n) const {
  if (data_ == nullptr || p < data_ || p + n > data_ + size_) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice only
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

size_t safetensors_dtype_size(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

void SafetensorsArchive::add_file(const std::filesystem::path& path) {
  files_.push_back(std::make_unique<MappedFile>(path));
  const MappedFile& file = *files_.back();
  const std::string where = path.string();
  if (file.size() < 8) fail(where + ": file too small for a safetensors header (" + std::to_string(file.size()) + " bytes)");

  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);  // little-endian u64, as are all supported hosts
  if (header_len > kMaxHeaderBytes) fail(where + ": header length " + std::to_string(header_len) + " is implausible (corrupt file?)");
  if (header_len > file.size() - 8) {
    fail(where + ": truncated: header needs " + std::to_string(header_len) + " bytes but the file has only " +
         std::to_string(file.size() - 8) + " after the length");
  }
  const uint8_t* data_start = file.data() + 8 + header_len;
  const uint64_t data_size = file.size() - 8 - header_len;

  JsonValue header;
  try {
    header = parse_json(std::string_view(reinterpret_cast<const char*>(file.data() + 8), header_len));
  } catch (const JsonError& e) {
    fail(where + ": malformed header: " + e.what());
  }
  if (!header.is_object()) fail(where + ": malformed header: not a JSON object");

  for (size_t i = 0; i < header.size(); ++i) {
    const std::string& name = header.key(i);
    if (name == "__metadata__") continue;
    const JsonValue& entry = header[i];
    const std::string tensor = "tensor \"" + name + "\" in " + where;
    const JsonValue* dtype = entry.find("dtype");
    const JsonValue* shape = entry.find("shape");
    const JsonValue* offsets = entry.find("data_offsets");
    if (dtype == nullptr || !dtype->is_string()) fail(tensor + ": header entry has no \"dtype\" string");
    if (shape == nullptr || !shape->is_array()) fail(tensor + ": header entry has no \"shape\" list");
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_integer() ||
        !(*offsets)[1].is_integer()) {
      fail(tensor + ": header entry has no \"data_offsets\" [begin, end]");
    }

    TensorInfo info;
    info.name = name;
    info.dtype = dtype->as_string();
    info.file = &file;
    uint64_t elements = 1;
    for (const JsonValue& dim : shape->items()) {
      if (!dim.is_integer() || dim.as_int64() < 0) fail(tensor + ": shape must hold non-negative integers");
      info.shape.push_back(dim.as_int64());
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim.as_int64()), &elements)) fail(tensor + ": shape overflows");
    }
    const int64_t begin = (*offsets)[0].as_int64();
    const int64_t end = (*offsets)[1].as_int64();
    if (begin < 0 || end < begin) fail(tensor + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") are invalid");
    if (static_cast<uint64_t>(end) > data_size) {
      fail(tensor + " is truncated: it needs bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") of the data section but the file holds only " + std::to_string(data_size) + " (file truncated?)");
    }
    const size_t element_size = safetensors_dtype_size(info.dtype);
    uint64_t expected_bytes = 0;
    if (element_size != 0 &&
        (__builtin_mul_overflow(elements, element_size, &expected_bytes) || expected_bytes != static_cast<uint64_t>(end - begin))) {
      fail(tensor + ": data_offsets span " + std::to_string(end - begin) + " bytes but shape " + shape_string(info.shape) +
           " of " + info.dtype + " needs " + std::to_string(elements * element_size));
    }
    info.data = data_start + begin;
    info.nbytes = static_cast<size_t>(end - begin);
    if (!index_.emplace(name, tensors_.size()).second) {
      fail(tensor + ": the same tensor name appears in more than one file");
    }
    tensors_.push_back(std::move(info));
  }
}

SafetensorsArchive SafetensorsArchive::open_file(const std::filesystem::path& path) {
  SafetensorsArchive archive;
  archive.description_ = path.string();
  archive.add_file(path);
  return archive;
}

SafetensorsArchive SafetensorsArchive::open_model_dir(const std::filesystem::path& model_dir) {
  const std::filesystem::path single = model_dir / "model.safetensors";
  const std::filesystem::path index_path = model_dir / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec)) return open_file(single);
  if (!std::filesystem::exists(index_path, ec)) {
    fail(model_dir.string() + ": no model.safetensors or model.safetensors.index.json (file not found)");
  }

  const std::string where = index_path.string();
  JsonValue index;
  try {
    index = parse_json(read_text_file(index_path, model_error_code::kWeights));
  } catch (const JsonError& e) {
    fail(where + ": malformed JSON: " + e.what());
  }
  const JsonValue* weight_map = index.find("weight_map");
  if (weight_map == nullptr || !weight_map->is_object()) fail(where + ": no \"weight_map\" object");

  SafetensorsArchive archive;
  archive.description_ = where;
  std::set<std::string> shards;
  for (size_t i = 0; i < weight_map->size(); ++i) {
    const JsonValue& shard = (*weight_map)[i];
    if (!shard.is_string()) fail(where + ": weight_map entry \"" + weight_map->key(i) + "\" is not a file name");
    // Shards live beside the index; a path would let the index point anywhere.
    if (shard.as_string().find('/') != std::string::npos || shard.as_string().find('\\') != std::string::npos ||
        shard.as_string() == ".." || shard.as_string().empty()) {
      fail(where + ": weight_map entry \"" + weight_map->key(i) + "\" names \"" + shard.as_string() + "\", not a file beside the index");
    }
    shards.insert(shard.as_string());
  }
  for (const std::string& shard : shards) archive.add_file(model_dir / shard);
  for (size_t i = 0; i < weight_map->size(); ++i) {
    const TensorInfo* info = archive.find(weight_map->key(i));
    if (info == nullptr || info->file->path().filename() != (*weight_map)[i].as_string()) {
      fail(where + ": tensor \"" + weight_map->key(i) + "\" is not in its shard " + (*weight_map)[i].as_string());
    }
  }
  return archive;
}

const TensorInfo* SafetensorsArchive::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace strata
