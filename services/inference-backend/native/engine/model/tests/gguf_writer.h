// Builds GGUF files byte by byte for the loader's tests: a small valid llama model to start
// from, which a test then breaks in one place.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace strata_test {

class GgufWriter {
 public:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;  // ggml order: dims[0] innermost
    uint32_t type;
    std::string bytes;
  };

  void u32(const std::string& key, uint32_t v) { kv(key, 4, raw(v)); }
  void f32(const std::string& key, float v) { kv(key, 6, raw(v)); }
  void str(const std::string& key, const std::string& v) { kv(key, 8, string(v)); }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    std::string body = raw(uint32_t{8}) + raw(uint64_t{v.size()});
    for (const std::string& s : v) body += string(s);
    kv(key, 9, body);
  }
  void tensor(Tensor t) { tensors_.push_back(std::move(t)); }
  std::vector<Tensor>& tensors() { return tensors_; }

  // The whole file; `version` and `magic` may be changed to break it.
  std::string build(uint32_t version = 3, const char* magic = "GGUF") const {
    std::string out(magic, 4);
    out += raw(version) + raw(uint64_t{tensors_.size()}) + raw(uint64_t{kv_count_}) + kvs_;
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      out += string(t.name) + raw(uint32_t(t.dims.size()));
      for (uint64_t d : t.dims) out += raw(d);
      out += raw(t.type) + raw(offset);
      offset += (t.bytes.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, '\0');
    for (const Tensor& t : tensors_) {
      out += t.bytes;
      out.resize((out.size() + 31) / 32 * 32, '\0');
    }
    return out;
  }
  // Byte offset where the tensor infos start (after the metadata), for truncation tests.
  size_t metadata_end() const { return 24 + kvs_.size(); }

  template <class T>
  static std::string raw(T v) {
    std::string s(sizeof v, '\0');
    std::memcpy(s.data(), &v, sizeof v);
    return s;
  }
  static std::string string(const std::string& s) { return raw(uint64_t{s.size()}) + s; }

 private:
  void kv(const std::string& key, uint32_t type, const std::string& value) {
    kvs_ += string(key) + raw(type) + value;
    ++kv_count_;
  }
  std::string kvs_;
  size_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace strata_test
