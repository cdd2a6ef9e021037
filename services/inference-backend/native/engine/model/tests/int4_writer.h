// Test helpers that write 4-bit AWQ and GPTQ checkpoints (int4_weights.h) of a real model:
// its linear weights quantized here (round to nearest per group, or by act-order groups) and
// packed as AutoAWQ and AutoGPTQ lay them out, written from the formats' definitions and
// independently of the loader's reading. Used by the model library's test_int4 and by the CUDA
// backend's check against the CPU backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model_files.h"
#include "strata/float_convert.h"
#include "strata/model_config.h"
#include "strata/model_weights.h"
#include "strata/quant.h"
#include "strata/safetensors.h"
#include "tensor_slots.h"

namespace strata_test {

using strata::f16_to_f32;
using strata::f32_to_f16;
using strata::kQuantBlock;
using strata::ModelConfig;
using strata::ModelWeights;
using strata::QuantMatrix;
using strata::QuantType;
using strata::TensorSlot;

// AutoAWQ packs output rows 8c + kAwqOrder[i] into nibble i of word c.
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// One weight, quantized: what the checkpoint means.
struct Int4 {
  int64_t n = 0, k = 0, group = 0, groups = 0;
  std::vector<int32_t> group_of;  // (k) each input feature's group
  std::vector<uint8_t> q;         // (n, k)
  std::vector<int32_t> z;         // (groups, n): 0..15, 8 when symmetric
  std::vector<uint16_t> s;        // (groups, n): fp16
  bool act_order = false;

  float value(int64_t j, int64_t f) const {
    const int64_t g = group_of[f];
    return static_cast<float>(q[j * k + f] - z[g * n + j]) * f16_to_f32(s[g * n + j]);
  }
};

// Round to nearest per (row, group); `perm` (GPTQ act-order) puts features perm[i] in group i / G.
inline Int4 quantize(const std::vector<float>& w, int64_t n, int64_t k, int64_t group, bool symmetric, const std::vector<int32_t>& perm) {
  Int4 out;
  out.n = n;
  out.k = k;
  out.group = group;
  out.groups = k / group;
  out.act_order = !perm.empty();
  out.group_of.resize(k);
  for (int64_t i = 0; i < k; ++i) out.group_of[perm.empty() ? i : perm[i]] = static_cast<int32_t>(i / group);
  out.q.resize(n * k);
  out.z.resize(out.groups * n);
  out.s.resize(out.groups * n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < out.groups; ++g) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t f = 0; f < k; ++f) {
        if (out.group_of[f] != g) continue;
        lo = std::min(lo, w[j * k + f]);
        hi = std::max(hi, w[j * k + f]);
      }
      const float step = symmetric ? std::max(-lo, hi) / 7.0f : (hi - lo) / 15.0f;
      const uint16_t s16 = f32_to_f16(std::max(step, 1e-4f));
      const float s = f16_to_f32(s16);
      const int32_t z = symmetric ? 8 : std::clamp(static_cast<int32_t>(std::lround(-lo / s)), 0, 15);
      out.s[g * n + j] = s16;
      out.z[g * n + j] = z;
      for (int64_t f = 0; f < k; ++f) {
        if (out.group_of[f] != g) continue;
        out.q[j * k + f] = static_cast<uint8_t>(std::clamp(static_cast<int32_t>(std::lround(w[j * k + f] / s)) + z, 0, 15));
      }
    }
  }
  return out;
}

inline std::string i32_bytes(const std::vector<uint32_t>& words) {
  return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 4);
}
inline std::string u16_bytes(const std::vector<uint16_t>& halves) {
  return std::string(reinterpret_cast<const char*>(halves.data()), halves.size() * 2);
}

// AutoAWQ's GEMM layout: qweight (k, n/8), qzeros (groups, n/8), scales (groups, n).
inline std::vector<RawTensor> pack_awq(const std::string& prefix, const Int4& w) {
  std::vector<uint32_t> qweight(w.k * (w.n / 8), 0), qzeros(w.groups * (w.n / 8), 0);
  for (int64_t f = 0; f < w.k; ++f)
    for (int64_t c = 0; c < w.n / 8; ++c)
      for (int i = 0; i < 8; ++i) qweight[f * (w.n / 8) + c] |= uint32_t{w.q[(8 * c + kAwqOrder[i]) * w.k + f]} << (4 * i);
  for (int64_t g = 0; g < w.groups; ++g)
    for (int64_t c = 0; c < w.n / 8; ++c)
      for (int i = 0; i < 8; ++i) qzeros[g * (w.n / 8) + c] |= static_cast<uint32_t>(w.z[g * w.n + 8 * c + kAwqOrder[i]]) << (4 * i);
  return {{prefix + ".qweight", "I32", {w.k, w.n / 8}, i32_bytes(qweight)},
          {prefix + ".qzeros", "I32", {w.groups, w.n / 8}, i32_bytes(qzeros)},
          {prefix + ".scales", "F16", {w.groups, w.n}, u16_bytes(w.s)}};
}

// AutoGPTQ's layout: qweight (k/8, n), qzeros (groups, n/8) storing z - 1 in v1, scales
// (groups, n), g_idx (k).
inline std::vector<RawTensor> pack_gptq(const std::string& prefix, const Int4& w, bool v1) {
  std::vector<uint32_t> qweight((w.k / 8) * w.n, 0), qzeros(w.groups * (w.n / 8), 0), g_idx(w.k);
  for (int64_t r = 0; r < w.k / 8; ++r)
    for (int64_t j = 0; j < w.n; ++j)
      for (int i = 0; i < 8; ++i) qweight[r * w.n + j] |= uint32_t{w.q[j * w.k + 8 * r + i]} << (4 * i);
  for (int64_t g = 0; g < w.groups; ++g)
    for (int64_t c = 0; c < w.n / 8; ++c)
      for (int i = 0; i < 8; ++i) {
        const uint32_t stored = static_cast<uint32_t>(w.z[g * w.n + 8 * c + i] - (v1 ? 1 : 0)) & 15u;
        qzeros[g * (w.n / 8) + c] |= stored << (4 * i);
      }
  for (int64_t f = 0; f < w.k; ++f) g_idx[f] = static_cast<uint32_t>(w.group_of[f]);
  return {{prefix + ".qweight", "I32", {w.k / 8, w.n}, i32_bytes(qweight)},
          {prefix + ".qzeros", "I32", {w.groups, w.n / 8}, i32_bytes(qzeros)},
          {prefix + ".scales", "F16", {w.groups, w.n}, u16_bytes(w.s)},
          {prefix + ".g_idx", "I32", {w.k}, i32_bytes(g_idx)}};
}

// The blocks the format's definition gives (int4_weights.h): Q4_0 d = s; Q4_1 d = s, m = -z s.
inline QuantMatrix blocks_of(const Int4& w, QuantType type) {
  QuantMatrix m;
  m.type = type;
  m.rows = w.n;
  m.cols = w.k;
  m.data.resize(m.rows * m.row_bytes());
  for (int64_t j = 0; j < w.n; ++j) {
    for (int64_t b = 0; b < w.k / kQuantBlock; ++b) {
      const int64_t g = b * kQuantBlock / w.group;
      const uint16_t d = w.s[g * w.n + j];
      uint8_t qs[16];
      for (int v = 0; v < 16; ++v) qs[v] = static_cast<uint8_t>(w.q[j * w.k + b * 32 + v] | (w.q[j * w.k + b * 32 + v + 16] << 4));
      uint8_t* at = m.data.data() + j * m.row_bytes() + b * strata::quant_block_bytes(type);
      if (type == QuantType::Q4_0) {
        strata::BlockQ4_0 block{d, {}};
        std::memcpy(block.qs, qs, 16);
        std::memcpy(at, &block, sizeof block);
      } else {
        strata::BlockQ4_1 block{d, f32_to_f16(-static_cast<float>(w.z[g * w.n + j]) * f16_to_f32(d)), {}};
        std::memcpy(block.qs, qs, 16);
        std::memcpy(at, &block, sizeof block);
      }
    }
  }
  return m;
}

struct Spec {
  std::string method = "awq";  // or "gptq"
  int64_t group = 128;
  bool symmetric = false;
  bool v1 = true;        // GPTQ zero points stored minus one
  bool act_order = false;
  // Act-order: q/k/v share one order of their input features, gate/up another, as GPTQ's do
  // (each from the same activations' Hessian); false gives every weight its own.
  bool shared_order = true;
};

// tinystories-656k quantized by `spec`: its checkpoint's tensors and config.json, and the
// integers each linear weight holds.
struct Checkpoint {
  std::string config_json;
  std::vector<RawTensor> tensors;
  std::map<std::string, Int4> weights;  // by Hugging Face ".weight" name (kept when asked for)
  ModelConfig config;                   // the source's

  void write(const std::filesystem::path& dir) const {
    strata_test::write_file(dir / "config.json", config_json);
    strata_test::write_safetensors(dir / "model.safetensors", tensors);
  }
  RawTensor* find(const std::string& name) {
    for (RawTensor& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

inline std::string quantization_json(const Spec& spec) {
  if (spec.method == "awq") {
    return R"({"quant_method": "awq", "bits": 4, "group_size": )" + std::to_string(spec.group) +
           R"(, "version": "gemm", "zero_point": true})";
  }
  return R"({"quant_method": "gptq", "bits": 4, "group_size": )" + std::to_string(spec.group) +
         R"(, "desc_act": )" + (spec.act_order ? "true" : "false") + R"(, "sym": )" + (spec.symmetric ? "true" : "false") +
         (spec.v1 ? "" : R"(, "checkpoint_format": "gptq_v2")") + "}";
}

inline std::string with_quantization(const std::string& config_json, const std::string& quantization) {
  const size_t end = config_json.rfind('}');
  return config_json.substr(0, end) + ", \"quantization_config\": " + quantization + "}\n";
}

// The checkpoint of the model at `source` (a float safetensors directory) quantized by `spec`:
// its decoder layers' linear weights quantized and packed, every other tensor (norms, biases,
// the embedding, lm_head) as it is, in its dtype. `keep` keeps each weight's integers in
// Checkpoint::weights (the tests' reference); a tool writing a large model need not. on_weight(name)
// follows each quantized weight (a tool's progress).
inline Checkpoint make_checkpoint(const std::filesystem::path& source, const Spec& spec, bool keep = true,
                                  const std::function<void(const std::string&)>& on_weight = {}) {
  Checkpoint out;
  std::ifstream in(source / "config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  out.config_json = with_quantization(text, quantization_json(spec));
  out.config = strata::load_model_config(source);
  const strata::SafetensorsArchive archive = strata::SafetensorsArchive::open_model_dir(source);
  std::map<std::string, std::vector<int64_t>> linears;  // the decoder's matrices, by name
  for (const TensorSlot& slot : strata::tensor_slots(out.config, nullptr)) {
    if (slot.shape.size() == 2 && slot.name != strata::kEmbedName && slot.name != strata::kLmHeadName)
      linears.emplace(slot.name, slot.shape);
  }
  std::mt19937 rng(1234);
  std::map<std::string, std::vector<int32_t>> orders;  // act-order, by the input they order
  for (const strata::TensorInfo& info : archive.tensors()) {
    const auto linear = linears.find(info.name);
    if (linear == linears.end()) {
      out.tensors.push_back({info.name, info.dtype, info.shape, std::string(reinterpret_cast<const char*>(info.data), info.nbytes)});
      continue;
    }
    const int64_t n = linear->second[0], k = linear->second[1];
    strata::DenseMatrixRef m;
    m.rows = n;
    m.cols = k;
    m.data = info.data;
    m.dtype = info.dtype == "F32"    ? strata::DenseMatrixRef::Dtype::kF32
              : info.dtype == "F16" ? strata::DenseMatrixRef::Dtype::kF16
                                    : strata::DenseMatrixRef::Dtype::kBF16;
    std::vector<float> values(static_cast<size_t>(n * k));
    m.rows_to_f32(0, n, values.data());
    std::vector<int32_t> perm;
    if (spec.act_order) {  // a shuffle of the features, as a Hessian's diagonal would order them
      std::string input = info.name;  // the weights that share this one's input share its order
      for (const char* part : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}) {
        if (const size_t at = input.find(part); spec.shared_order && at != std::string::npos)
          input.replace(at, std::strlen(part), part[0] == 'g' || part[0] == 'u' ? "gate_up" : "qkv");
      }
      std::vector<int32_t>& order = orders[input];
      if (order.empty()) {
        order.resize(static_cast<size_t>(k));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
      }
      perm = order;
    }
    Int4 w = quantize(values, n, k, spec.group, spec.symmetric, perm);
    const std::string prefix = info.name.substr(0, info.name.size() - 7);
    for (RawTensor& t : spec.method == "awq" ? pack_awq(prefix, w) : pack_gptq(prefix, w, spec.v1)) out.tensors.push_back(t);
    if (keep) out.weights.emplace(info.name, std::move(w));
    if (on_weight) on_weight(info.name);
  }
  return out;
}

}  // namespace strata_test
