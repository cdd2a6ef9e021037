// The single list of a config's tensors, pairing each Hugging Face name and shape with the
// ModelWeights member it fills; loading, dummy weights and expected_tensors() all walk it.
#pragma once

#include <string>
#include <vector>

#include "strata/model_weights.h"

namespace strata {

inline constexpr const char* kEmbedName = "model.embed_tokens.weight";
inline constexpr const char* kLmHeadName = "lm_head.weight";

struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* target = nullptr;  // null when listing without weights
};

// `weights` may be null; otherwise its layers are sized to the config and targets point into it.
inline std::vector<TensorSlot> tensor_slots(const ModelConfig& c, ModelWeights* weights) {
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim,
                kv_dim = int64_t{c.num_kv_heads} * c.head_dim, inter = c.intermediate_size, vocab = c.vocab_size;
  if (weights != nullptr) weights->layers.resize(c.num_layers);
  std::vector<TensorSlot> slots;
  const auto add = [&](std::string name, std::vector<int64_t> shape, std::vector<float>* target) {
    slots.push_back({std::move(name), std::move(shape), weights != nullptr ? target : nullptr});
  };
  add(kEmbedName, {vocab, hidden}, weights ? &weights->embed_tokens : nullptr);
  for (int32_t i = 0; i < c.num_layers; ++i) {
    LayerWeights* l = weights ? &weights->layers[i] : nullptr;
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {hidden}, l ? &l->input_norm : nullptr);
    add(p + "self_attn.q_proj.weight", {q_dim, hidden}, l ? &l->q_proj : nullptr);
    add(p + "self_attn.k_proj.weight", {kv_dim, hidden}, l ? &l->k_proj : nullptr);
    add(p + "self_attn.v_proj.weight", {kv_dim, hidden}, l ? &l->v_proj : nullptr);
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {q_dim}, l ? &l->q_bias : nullptr);
      add(p + "self_attn.k_proj.bias", {kv_dim}, l ? &l->k_bias : nullptr);
      add(p + "self_attn.v_proj.bias", {kv_dim}, l ? &l->v_bias : nullptr);
    }
    add(p + "self_attn.o_proj.weight", {hidden, q_dim}, l ? &l->o_proj : nullptr);
    if (has_o_proj_bias(c)) add(p + "self_attn.o_proj.bias", {hidden}, l ? &l->o_bias : nullptr);
    add(p + "post_attention_layernorm.weight", {hidden}, l ? &l->post_attention_norm : nullptr);
    add(p + "mlp.gate_proj.weight", {inter, hidden}, l ? &l->gate_proj : nullptr);
    add(p + "mlp.up_proj.weight", {inter, hidden}, l ? &l->up_proj : nullptr);
    add(p + "mlp.down_proj.weight", {hidden, inter}, l ? &l->down_proj : nullptr);
  }
  add("model.norm.weight", {hidden}, weights ? &weights->final_norm : nullptr);
  add(kLmHeadName, {vocab, hidden}, weights ? &weights->lm_head : nullptr);
  return slots;
}

}  // namespace strata
