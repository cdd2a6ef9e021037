#include "strata/model_weights.h"

#include <cstring>
#include <unordered_set>

#include "strata/float_convert.h"
#include "strata/model_error.h"
#include "strata/safetensors.h"
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

void convert_to_f32(const TensorInfo& info, std::vector<float>& out) {
  size_t count = 1;
  for (int64_t dim : info.shape) count *= static_cast<size_t>(dim);
  out.resize(count);
  const uint8_t* src = info.data;  // unaligned: read element bytes with memcpy
  if (info.dtype == "F32") {
    std::memcpy(out.data(), src, count * 4);
  } else if (info.dtype == "F16" || info.dtype == "BF16") {
    const bool is_bf16 = info.dtype == "BF16";
    for (size_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = is_bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  } else {
    fail(describe(info) + " has dtype " + info.dtype + "; supported dtypes are F32, F16, BF16");
  }
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

ModelWeights load_model_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                const LoadProgress& progress) {
  SafetensorsArchive archive = SafetensorsArchive::open_model_dir(model_dir);
  int64_t bytes = 0;
  for (const TensorInfo& info : archive.tensors()) bytes += static_cast<int64_t>(info.nbytes);
  progress.start(bytes);
  ModelWeights weights;
  std::vector<TensorSlot> slots = tensor_slots(config, &weights);

  // Tied checkpoints store one of the two tables; tinystories-656k stores only lm_head.
  const bool has_embed = archive.find(kEmbedName) != nullptr;
  const bool has_head = archive.find(kLmHeadName) != nullptr;
  std::unordered_set<std::string> used;
  for (TensorSlot& slot : slots) {
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
    convert_to_f32(*info, *slot.target);
    progress.add(static_cast<int64_t>(info->nbytes));
    used.insert(source_name);
  }
  const bool tied_copy = config.tie_word_embeddings && has_embed && has_head;  // lm_head's: not read
  if (tied_copy) used.insert(kLmHeadName);

  // A decoder tensor the config does not declare (a bias, an extra layer) means the config
  // and the weights disagree; running without it would silently give wrong outputs.
  for (const TensorInfo& info : archive.tensors()) {
    if (used.count(info.name) == 0 && !is_ignorable(info.name)) {
      fail(describe(info) + " is not part of the model config.json describes (layers, biases or sizes differ?)");
    }
    // What is not read (the tied copy, ignorable tensors) is done with too.
    if (used.count(info.name) == 0 || (tied_copy && info.name == kLmHeadName)) progress.add(static_cast<int64_t>(info.nbytes));
  }
  return weights;
}

}  // namespace strata
