#include "strata/model_weights.h"

#include <cstring>
#include <unordered_set>

#include "cpu_kernels.h"
#include "strata/float_convert.h"
#include "strata/model_error.h"
#include "strata/safetensors.h"
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

std::string describe(const TensorInfo& info) { return "tensor \"" + info.name + "\" in " + info.file->path().string(); }

DenseMatrixRef::Dtype dense_dtype(const TensorInfo& info) {
  if (info.dtype == "F32") return DenseMatrixRef::Dtype::kF32;
  if (info.dtype == "F16") return DenseMatrixRef::Dtype::kF16;
  if (info.dtype == "BF16") return DenseMatrixRef::Dtype::kBF16;
  fail(describe(info) + " has dtype " + info.dtype + "; supported dtypes are F32, F16, BF16");
}

DenseMatrixRef ref_of(const TensorInfo& info) {
  DenseMatrixRef m;
  m.dtype = dense_dtype(info);
  m.cols = info.shape.empty() ? 1 : info.shape.back();
  m.rows = info.shape.size() == 2 ? info.shape[0] : 1;
  m.data = info.data;
  m.tensor = &info;
  return m;
}

// Tensors a checkpoint may carry that the forward pass does not read.
bool is_ignorable(const std::string& name) {
  if (name.find("rotary_emb.") != std::string::npos) return true;  // cached inv_freq / cos / sin
  // Outside the decoder (e.g. a value head); the decoder's own tensors are all under these.
  return name.rfind("model.", 0) != 0 && name.rfind("lm_head.", 0) != 0;
}

}  // namespace

bool has_o_proj_bias(const ModelConfig& config) {
  return config.attention_bias && config.architecture == "LlamaForCausalLM";
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config) {
  std::vector<ExpectedTensor> out;
  for (TensorSlot& slot : tensor_slots(config, nullptr)) out.push_back({std::move(slot.name), std::move(slot.shape)});
  return out;
}

void DenseMatrixRef::to_f32(int64_t r, int64_t first, int64_t n, float* out) const {
  const uint8_t* src = row(r) + first * elem_bytes();
  if (dtype == Dtype::kF32) {
    std::memcpy(out, src, static_cast<size_t>(n) * 4);
    return;
  }
  if (dtype == Dtype::kBF16) {  // a loop of its own per dtype: the compiler vectorises the shift
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
    return;
  }
  if (reinterpret_cast<uintptr_t>(src) % 2 == 0) {  // halves at their alignment: F16C where the CPU has it
    cpu_kernels().from_half(reinterpret_cast<const uint16_t*>(src), out, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = f16_to_f32(h);
  }
}

MappedModelWeights map_model_weights(const SafetensorsArchive& archive, const ModelConfig& config,
                                     const LoadProgress& progress, const ExternalTensors* external) {
  int64_t bytes = 0;
  for (const TensorInfo& info : archive.tensors()) bytes += static_cast<int64_t>(info.nbytes);
  progress.start(bytes);
  MappedModelWeights mapped;
  std::vector<TensorSlot> slots = tensor_slots(config, &mapped.dense);

  // Tied checkpoints store one of the two tables; tinystories-656k stores only lm_head.
  const bool has_embed = archive.find(kEmbedName) != nullptr;
  const bool has_head = archive.find(kLmHeadName) != nullptr;
  std::unordered_set<std::string> used;
  for (TensorSlot& slot : slots) {
    if (external != nullptr && external->slots.count(slot.name) != 0) continue;
    std::string source_name = slot.name;
    if (config.tie_word_embeddings && slot.name == kLmHeadName) continue;  // lm_head stays empty: tied
    if (config.tie_word_embeddings && slot.name == kEmbedName && !has_embed && has_head) source_name = kLmHeadName;
    const TensorInfo* info = archive.find(source_name);
    if (info == nullptr) {
      fail(archive.description() + ": missing tensor \"" + slot.name + "\" (expected shape " + shape_string(slot.shape) + ")");
    }
    if (info->shape != slot.shape) {
      fail(describe(*info) + " has shape " + shape_string(info->shape) + ", expected " + shape_string(slot.shape) +
           " for this config");
    }
    const DenseMatrixRef ref = ref_of(*info);  // checks the dtype
    if (slot.shape.size() == 2) {
      mapped.matrices.emplace(slot.name, ref);
    } else {
      slot.target->resize(static_cast<size_t>(ref.rows * ref.cols));
      ref.rows_to_f32(0, ref.rows, slot.target->data());
      progress.add(static_cast<int64_t>(info->nbytes));
    }
    used.insert(source_name);
  }
  const bool tied_copy = config.tie_word_embeddings && has_embed && has_head;  // lm_head's: not read
  if (tied_copy) used.insert(kLmHeadName);

  // A decoder tensor the config does not declare (a bias, an extra layer) means the config
  // and the weights disagree; running without it would silently give wrong outputs.
  for (const TensorInfo& info : archive.tensors()) {
    if (external != nullptr && external->tensors.count(info.name) != 0) continue;  // its reader counts it
    if (used.count(info.name) == 0 && !is_ignorable(info.name)) {
      fail(describe(info) + " is not part of the model config.json describes (layers, biases or sizes differ?)");
    }
    // What is not read (the tied copy, ignorable tensors) is done with too.
    if (used.count(info.name) == 0 || (tied_copy && info.name == kLmHeadName)) progress.add(static_cast<int64_t>(info.nbytes));
  }
  return mapped;
}

ModelWeights load_model_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                const LoadProgress& progress) {
  const SafetensorsArchive archive = SafetensorsArchive::open_model_dir(model_dir);
  MappedModelWeights mapped = map_model_weights(archive, config, progress);
  widen_matrices(mapped.matrices, config, mapped.dense,
                 [&](const DenseMatrixRef& m) { progress.add(static_cast<int64_t>(m.tensor->nbytes)); });
  return std::move(mapped.dense);
}

void widen_matrices(const std::unordered_map<std::string, DenseMatrixRef>& matrices, const ModelConfig& config,
                    ModelWeights& weights, const std::function<void(const DenseMatrixRef&)>& read) {
  for (TensorSlot& slot : tensor_slots(config, &weights)) {
    const auto it = matrices.find(slot.name);
    if (it == matrices.end()) continue;
    const DenseMatrixRef& m = it->second;
    slot.target->resize(static_cast<size_t>(m.rows * m.cols));
    split_work(m.rows, threads_for(m.rows * m.row_bytes(), int64_t{1} << 22),
               [&](int64_t first, int64_t last) { m.rows_to_f32(first, last, slot.target->data()); });
    read(m);
  }
}

}  // namespace strata
