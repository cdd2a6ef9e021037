#include "strata/int4_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "strata/float_convert.h"
#include "strata/model_error.h"
#include "strata/split_work.h"
#include "tensor_slots.h"

namespace strata {

namespace {

[[noreturn]] void fail(const std::string& message) { throw ModelError(model_error_code::kWeights, message); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string describe(const TensorInfo& t) { return "tensor \"" + t.name + "\" in " + t.file->path().string(); }

int32_t load_i32(const TensorInfo& t, int64_t index) {
  int32_t v;
  std::memcpy(&v, t.data + index * 4, 4);
  return v;
}
uint16_t load_u16(const TensorInfo& t, int64_t index) {
  uint16_t v;
  std::memcpy(&v, t.data + index * 2, 2);
  return v;
}

// Where AWQ puts output row 8c + o in word c: nibble kAwqNibble[o] (it packs rows 0, 2, 4, 6,
// 1, 3, 5, 7 into nibbles 0..7).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

}  // namespace

struct Int4Checkpoint::Weight {
  std::string name;  // the Hugging Face ".weight" name it stands for
  int64_t n = 0, k = 0, group = 0, groups = 0;
  const TensorInfo* qweight = nullptr;
  const TensorInfo* qzeros = nullptr;
  const TensorInfo* scales = nullptr;
  const TensorInfo* g_idx = nullptr;  // GPTQ, optional
  const TensorInfo* bias = nullptr;   // an all-zero bias the config has no place for: let go
  std::vector<int32_t> order;         // act-order: column c is feature order[c]; empty: none
};

namespace {

// The 4-bit zero point of output row j in group g, as the format means it (0..16: GPTQ v1
// stores z - 1, and its reference dequantization adds 1 without wrapping).
int32_t zero_point(const Int4Checkpoint::Weight& w, bool awq, bool minus_one, int64_t g, int64_t j) {
  const uint32_t word = static_cast<uint32_t>(load_i32(*w.qzeros, g * (w.n / 8) + j / 8));
  const int nibble = awq ? kAwqNibble[j % 8] : static_cast<int>(j % 8);
  return static_cast<int32_t>((word >> (4 * nibble)) & 15u) + (minus_one ? 1 : 0);
}

// The 4-bit values of output rows [j0, j0 + rows) into out (k, rows): feature f of row j at
// out[f * rows + j - j0], so each word's nibbles land side by side (AWQ) or on `rows`-strided
// lines that the next words continue (GPTQ), and a block's 32 features of one row are 32 bytes
// `rows` apart within a few KB.
void unpack_rows(const Int4Checkpoint::Weight& w, bool awq, int64_t j0, int64_t rows, uint8_t* out) {
  const int64_t n = w.n, k = w.k;
  if (awq) {  // qweight (k, n/8): a word holds 8 output rows of one feature
    for (int64_t f = 0; f < k; ++f) {
      uint8_t* to = out + f * rows;
      for (int64_t c = 0; c < rows / 8; ++c) {
        const uint32_t word = static_cast<uint32_t>(load_i32(*w.qweight, f * (n / 8) + j0 / 8 + c));
        for (int o = 0; o < 8; ++o) to[c * 8 + o] = static_cast<uint8_t>((word >> (4 * kAwqNibble[o])) & 15u);
      }
    }
    return;
  }
  for (int64_t r = 0; r < k / 8; ++r) {  // GPTQ qweight (k/8, n): a word holds 8 features of one row
    for (int64_t j = j0; j < j0 + rows; ++j) {
      const uint32_t word = static_cast<uint32_t>(load_i32(*w.qweight, r * n + j));
      for (int i = 0; i < 8; ++i) out[(8 * r + i) * rows + (j - j0)] = static_cast<uint8_t>((word >> (4 * i)) & 15u);
    }
  }
}

// Output rows a conversion task takes (a multiple of 8: AWQ's words span 8 rows; 128 rows are a
// 64-byte line of an AWQ qweight row, so each line read is used whole).
constexpr int64_t kRowsPerTask = 128;

}  // namespace

Int4Checkpoint::Int4Checkpoint(const SafetensorsArchive& archive, const ModelConfig& config, const LoadProgress& progress)
    : q_(config.quantization), progress_(progress) {
  if (q_.method != "awq" && q_.method != "gptq") fail("the model's config.json has no AWQ or GPTQ quantization_config");
  const bool awq = q_.method == "awq";
  type_ = !awq && q_.symmetric ? QuantType::Q4_0 : QuantType::Q4_1;
  ExternalTensors external;
  const auto expect = [&](const TensorInfo& t, const std::string& dtype, const std::vector<int64_t>& shape) {
    if (t.dtype != dtype) fail(describe(t) + " has dtype " + t.dtype + "; a " + q_.method + " checkpoint stores it as " + dtype);
    if (t.shape != shape) {
      fail(describe(t) + " has shape " + shape_string(t.shape) + ", expected " + shape_string(shape) + " for this config (" +
           q_.method + ", groups of " + std::to_string(q_.group_size) + ")");
    }
  };
  const std::vector<TensorSlot> slots = tensor_slots(config, nullptr);
  for (const TensorSlot& slot : slots) {
    if (slot.shape.size() != 2) continue;
    const std::string prefix = slot.name.substr(0, slot.name.size() - std::string(".weight").size());
    const TensorInfo* qweight = archive.find(prefix + ".qweight");
    if (qweight == nullptr) continue;  // a float ".weight" (map_model_weights checks it)
    auto w = std::make_unique<Weight>();
    w->name = slot.name;
    w->n = slot.shape[0];
    w->k = slot.shape[1];
    w->group = q_.group_size == -1 ? w->k : q_.group_size;
    if (w->n % 8 != 0 || w->k % kQuantBlock != 0 || w->k % w->group != 0) {
      fail(describe(*qweight) + ": a weight of " + std::to_string(w->n) + " rows and " + std::to_string(w->k) +
           " input features cannot be read as 4-bit groups of " + std::to_string(w->group) +
           " (rows must be a multiple of 8, features of 32 and of the group size)");
    }
    w->groups = w->k / w->group;
    w->qweight = qweight;
    expect(*qweight, "I32", awq ? std::vector<int64_t>{w->k, w->n / 8} : std::vector<int64_t>{w->k / 8, w->n});
    for (const char* part : {".qzeros", ".scales"}) {
      const TensorInfo* t = archive.find(prefix + part);
      if (t == nullptr) fail(archive.description() + ": missing tensor \"" + prefix + part + "\" (" + qweight->name + " has it)");
      if (std::string(part) == ".qzeros") {
        w->qzeros = t;
        expect(*t, "I32", {w->groups, w->n / 8});
      } else {
        w->scales = t;
        expect(*t, "F16", {w->groups, w->n});
      }
    }
    external.tensors.insert({qweight->name, w->qzeros->name, w->scales->name});
    if (const TensorInfo* g_idx = archive.find(prefix + ".g_idx"); g_idx != nullptr) {
      if (awq) fail(describe(*g_idx) + ": an AWQ checkpoint has no g_idx (is quant_method gptq?)");
      expect(*g_idx, "I32", {w->k});
      w->g_idx = g_idx;
      external.tensors.insert(g_idx->name);
      bool trivial = true;
      std::vector<int64_t> counts(static_cast<size_t>(w->groups), 0);
      for (int64_t f = 0; f < w->k; ++f) {
        const int32_t g = load_i32(*g_idx, f);
        if (g < 0 || g >= w->groups) {
          fail(describe(*g_idx) + ": feature " + std::to_string(f) + " is in group " + std::to_string(g) + ", outside 0.." +
               std::to_string(w->groups - 1));
        }
        trivial = trivial && g == f / w->group;
        ++counts[static_cast<size_t>(g)];
      }
      if (!trivial) {  // act-order: each group must still be group_size features, to be contiguous once sorted
        for (int64_t g = 0; g < w->groups; ++g) {
          if (counts[static_cast<size_t>(g)] != w->group) {
            fail(describe(*g_idx) + ": group " + std::to_string(g) + " has " + std::to_string(counts[static_cast<size_t>(g)]) +
                 " features; act-order is read with every group exactly group_size (" + std::to_string(w->group) + ")");
          }
        }
        w->order.resize(static_cast<size_t>(w->k));
        std::iota(w->order.begin(), w->order.end(), 0);
        std::stable_sort(w->order.begin(), w->order.end(),
                         [&](int32_t a, int32_t b) { return load_i32(*g_idx, a) < load_i32(*g_idx, b); });
        act_order_ = true;
      }
    }
    // The zero points and scales, checked once: symmetric means every zero is 8, and -z * s must
    // be a finite fp16 (Q4_1's m).
    for (int64_t g = 0; g < w->groups; ++g) {
      for (int64_t j = 0; j < w->n; ++j) {
        const int32_t z = zero_point(*w, awq, q_.zeros_minus_one, g, j);
        const float s = f16_to_f32(load_u16(*w->scales, g * w->n + j));
        const auto where = [&] { return " (row " + std::to_string(j) + ", group " + std::to_string(g) + ")"; };
        if (type_ == QuantType::Q4_0 && z != 8) {
          fail(describe(*w->qzeros) + ": zero point " + std::to_string(z) + where() +
               ", but quantization_config says sym: true (every zero point 8)");
        }
        if (!std::isfinite(s) || !std::isfinite(f16_to_f32(f32_to_f16(-static_cast<float>(z) * s)))) {
          fail(describe(*w->scales) + ": scale " + std::to_string(s) + where() + " with zero point " + std::to_string(z) +
               " is not a finite fp16 weight offset");
        }
      }
    }
    // A quantizer may save a bias for every linear; one the config has no place for must be 0.
    const bool config_bias = std::any_of(slots.begin(), slots.end(), [&](const TensorSlot& s) { return s.name == prefix + ".bias"; });
    if (const TensorInfo* bias = archive.find(prefix + ".bias"); bias != nullptr && !config_bias) {
      const size_t size = safetensors_dtype_size(bias->dtype);
      if (size == 0 || bias->nbytes % size != 0) fail(describe(*bias) + " has dtype " + bias->dtype);
      bool zero = bias->dtype == "F32" || bias->dtype == "F16" || bias->dtype == "BF16";
      for (size_t i = 0; zero && i < bias->nbytes / size; ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, bias->data + i * size, size);
        zero = (bits & ~(size == 4 ? 0x80000000u : 0x8000u)) == 0;  // +0 or -0
      }
      if (!zero) fail(describe(*bias) + " is not zero, and the model's config has no bias for " + slot.name);
      w->bias = bias;
      external.tensors.insert(bias->name);
    }
    external.slots.insert(slot.name);
    weights_.emplace(slot.name, std::move(w));
  }
  if (weights_.empty()) {
    fail(archive.description() + ": config.json's quantization_config says " + q_.method +
         ", but no linear weight has a \".qweight\" tensor");
  }
  mapped_ = map_model_weights(archive, config, progress, &external);
  for (const auto& [name, w] : weights_) {  // biases let go: counted now
    if (w->bias != nullptr) progress.add(static_cast<int64_t>(w->bias->nbytes));
  }
}

Int4Checkpoint::~Int4Checkpoint() = default;

std::vector<std::string> Int4Checkpoint::quantized_names() const {
  std::vector<std::string> names;
  for (const auto& [name, w] : weights_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

bool Int4Checkpoint::quantized(const std::string& name) const { return weights_.count(name) != 0; }

const Int4Checkpoint::Weight& Int4Checkpoint::weight(const std::string& name) const {
  const auto it = weights_.find(name);
  if (it == weights_.end()) fail("\"" + name + "\" is not a quantized weight of this checkpoint");
  return *it->second;
}

const std::vector<int32_t>& Int4Checkpoint::input_order(const std::string& name) const { return weight(name).order; }

namespace {

// The tensors' pages let go and their bytes counted: the weight has been read.
void read_out(const Int4Checkpoint::Weight& w, const LoadProgress& progress) {
  for (const TensorInfo* t : {w.qweight, w.qzeros, w.scales, w.g_idx}) {
    if (t == nullptr) continue;
    progress.add(static_cast<int64_t>(t->nbytes));
    t->file->release(t->data, t->nbytes);
  }
}

}  // namespace

QuantMatrix Int4Checkpoint::blocks(const std::string& name) const {
  const Weight& w = weight(name);
  const bool awq = q_.method == "awq";
  QuantMatrix out;
  out.type = type_;
  out.rows = w.n;
  out.cols = w.k;
  out.data.resize(static_cast<size_t>(out.rows * out.row_bytes()));
  const int64_t tasks = (w.n + kRowsPerTask - 1) / kRowsPerTask;
  split_work(tasks, threads_for(w.n * w.k, int64_t{1} << 22), [&](int64_t first, int64_t last) {
    std::vector<uint8_t> values(static_cast<size_t>(kRowsPerTask * w.k));
    for (int64_t task = first; task < last; ++task) {
      const int64_t j0 = task * kRowsPerTask, rows = std::min(kRowsPerTask, w.n - j0);
      unpack_rows(w, awq, j0, rows, values.data());
      for (int64_t b = 0; b < w.k / kQuantBlock; ++b) {
        const int64_t g = b * kQuantBlock / w.group;  // columns of a block share a group: group % 32 == 0
        // The block's 32 features (in input_order when act-order), each a `rows`-long line of values.
        const uint8_t* lines[kQuantBlock];
        for (int v = 0; v < kQuantBlock; ++v) {
          const int64_t c = b * kQuantBlock + v;
          lines[v] = values.data() + (w.order.empty() ? c : w.order[static_cast<size_t>(c)]) * rows;
        }
        for (int64_t j = j0; j < j0 + rows; ++j) {
          const int64_t jj = j - j0;
          const uint16_t d = load_u16(*w.scales, g * w.n + j);
          uint8_t qs[kQuantBlock / 2];
          for (int v = 0; v < kQuantBlock / 2; ++v) qs[v] = static_cast<uint8_t>(lines[v][jj] | (lines[v + 16][jj] << 4));
          uint8_t* at = out.data.data() + j * out.row_bytes() + b * quant_block_bytes(type_);
          if (type_ == QuantType::Q4_0) {
            BlockQ4_0 block{d, {}};
            std::memcpy(block.qs, qs, sizeof qs);
            std::memcpy(at, &block, sizeof block);
          } else {
            const int32_t z = zero_point(w, awq, q_.zeros_minus_one, g, j);
            BlockQ4_1 block{d, f32_to_f16(-static_cast<float>(z) * f16_to_f32(d)), {}};
            std::memcpy(block.qs, qs, sizeof qs);
            std::memcpy(at, &block, sizeof block);
          }
        }
      }
    }
  });
  read_out(w, progress_);
  return out;
}

std::vector<float> Int4Checkpoint::dequantize(const std::string& name) const {
  const Weight& w = weight(name);
  const bool awq = q_.method == "awq";
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  const int64_t tasks = (w.n + kRowsPerTask - 1) / kRowsPerTask;
  split_work(tasks, threads_for(w.n * w.k, int64_t{1} << 22), [&](int64_t first, int64_t last) {
    std::vector<uint8_t> values(static_cast<size_t>(kRowsPerTask * w.k));
    for (int64_t task = first; task < last; ++task) {
      const int64_t j0 = task * kRowsPerTask, rows = std::min(kRowsPerTask, w.n - j0);
      unpack_rows(w, awq, j0, rows, values.data());
      for (int64_t j = j0; j < j0 + rows; ++j) {
        for (int64_t f = 0; f < w.k; ++f) {
          const int64_t g = w.g_idx != nullptr ? load_i32(*w.g_idx, f) : f / w.group;
          const float s = f16_to_f32(load_u16(*w.scales, g * w.n + j));
          const int32_t z = zero_point(w, awq, q_.zeros_minus_one, g, j);
          out[static_cast<size_t>(j * w.k + f)] = static_cast<float>(values[static_cast<size_t>(f * rows + (j - j0))] - z) * s;
        }
      }
    }
  });
  read_out(w, progress_);
  return out;
}

std::string Int4Checkpoint::description() const {
  std::string out = q_.method + " int4";
  if (act_order_) out += ", act-order";
  if (q_.group_size == -1) return out + ", a group per row";
  return out + ", groups of " + std::to_string(q_.group_size);
}

}  // namespace strata
