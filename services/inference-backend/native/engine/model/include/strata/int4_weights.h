// 4-bit AWQ and GPTQ checkpoints (safetensors with config.json's quantization_config): their
// linear weights read into the GGUF block formats the backends already run (quant.h), so both
// backends serve them on their quantized kernels.
//
// Both formats store, per linear weight (n output rows, k input features), 4-bit integers q,
// and per group of `group_size` input features and output row an fp16 scale s and a 4-bit zero
// point z; the weight is (q - z) * s.
// - AWQ (AutoAWQ's GEMM layout): qweight int32 (k, n/8), eight output rows a word in the order
//   0, 2, 4, 6, 1, 3, 5, 7 (nibble i holds row 8c + order[i]); qzeros int32 (k/G, n/8), packed the
//   same way; scales fp16 (k/G, n).
// - GPTQ (AutoGPTQ, GPTQModel): qweight int32 (k/8, n), eight input features a word (nibble i
//   holds feature 8r + i); qzeros int32 (k/G, n/8), nibble i the zero of row 8c + i, stored as
//   z - 1 in the v1 format (ModelConfig::Int4Quantization::zeros_minus_one); scales fp16
//   (k/G, n); g_idx int32 (k), each feature's group. With act-order (desc_act) g_idx is not
//   feature / G: the features are then sorted by group (stably) so each group is contiguous
//   again, and the matrix multiplies the input gathered in that order (input_order()).
//
// As blocks of 32 values: Q4_0 when every zero point is 8 (symmetric GPTQ: d = s, the same
// values exactly), else Q4_1 with d = s and m = -z * s rounded once to fp16 (the value d*q + m is
// then within 2^-11 |z*s|, under 0.8% of one step s, of (q - z) * s).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/load_progress.h"
#include "strata/model_weights.h"
#include "strata/quant.h"
#include "strata/safetensors.h"

namespace strata {

class Int4Checkpoint {
 public:
  // Checks every tensor the config implies: each linear weight either quantized (qweight, qzeros,
  // scales, and for GPTQ optionally g_idx: dtypes, shapes, group sizes, zero points of a
  // symmetric checkpoint) or a float ".weight" (modules the quantizer left out, the embedding,
  // lm_head), and nothing the model does not use (an all-zero bias on a quantized linear without
  // one in the config is let go). Reads the norms and biases; the float matrices stay where they
  // lie (mapped().matrices). `progress` is started at the archive's tensor bytes (as
  // map_model_weights); blocks() and dequantize() count each quantized weight's bytes.
  // Throws ModelError(STRATA_MODEL_WEIGHTS) naming the tensor.
  Int4Checkpoint(const SafetensorsArchive& archive, const ModelConfig& config, const LoadProgress& progress = {});
  ~Int4Checkpoint();
  Int4Checkpoint(const Int4Checkpoint&) = delete;
  Int4Checkpoint& operator=(const Int4Checkpoint&) = delete;

  // The 1-D tensors (dense) and the float matrices where they lie (matrices), as map_model_weights.
  MappedModelWeights& mapped() { return mapped_; }

  // The quantized linear weights' Hugging Face names ("model.layers.0.self_attn.q_proj.weight").
  std::vector<std::string> quantized_names() const;
  bool quantized(const std::string& name) const;
  // Q4_0 (symmetric GPTQ) or Q4_1: the type blocks() returns for every weight.
  QuantType block_type() const { return type_; }
  // The order of `name`'s input features its blocks' columns follow (act-order): column c of
  // blocks() is feature input_order[c]. Empty: the features' own order.
  const std::vector<int32_t>& input_order(const std::string& name) const;

  // `name` as (n, k) blocks of block_type(), columns in input_order(name); its tensors' pages
  // are let go and their bytes counted in the progress. Rows are converted by threads.
  QuantMatrix blocks(const std::string& name) const;
  // `name` dequantized to fp32, (n, k) in the features' own order: (q - z) * s, in fp32 (exact:
  // a 5-bit integer times an fp16). Pages and progress as blocks().
  std::vector<float> dequantize(const std::string& name) const;

  // "awq int4, groups of 128" / "gptq int4, act-order, groups of 128" (naming the format in
  // weights_format()).
  std::string description() const;

  struct Weight;  // one quantized linear's tensors (int4_weights.cpp)

 private:
  const Weight& weight(const std::string& name) const;

  ModelConfig::Int4Quantization q_;
  QuantType type_ = QuantType::Q4_1;
  bool act_order_ = false;
  MappedModelWeights mapped_;
  std::unordered_map<std::string, std::unique_ptr<Weight>> weights_;
  LoadProgress progress_;
};

}  // namespace strata
