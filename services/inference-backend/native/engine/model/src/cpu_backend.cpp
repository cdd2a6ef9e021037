#include "strata/cpu_backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cpu_kernels.h"
#include "kv_cache.h"
#include "paged_attention.h"
#include "quant_kernels.h"
#include "rope.h"
#include "strata/gguf.h"
#include "strata/int4_weights.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "strata/model_source.h"
#include "tensor_slots.h"
#include "thread_pool.h"

namespace strata {

namespace {

// Grows v to n elements, allocating exactly that (resize alone may double the capacity).
void grow_exact(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) >= n) return;
  v.reserve(static_cast<size_t>(n));
  v.resize(static_cast<size_t>(n));
}

// Loading makes many small allocations that are all freed when it ends (a GGUF's metadata alone
// is about 100k vocabulary and merge strings); glibc keeps their pages resident in the loading
// thread's arena, 9 MiB for SmolLM2. This hands the wholly free pages back to the system.
void return_freed_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// A weight matrix (n, k) as the step multiplies it: fp32 panels, or block-quantized rows
// (GGUF) repacked into the quantized GEMM's panels, the same bytes rearranged. A tied output
// projection's panels also serve the embedding gather, so the table is one copy.
struct Linear {
  PackedWeights f32;
  std::shared_ptr<const QuantPanels> quant;  // set: quantized
  // Set: the weight's columns follow this order of the input's features (a GPTQ act-order
  // checkpoint's, int4_weights.h): column c multiplies feature (*in_order)[c].
  std::shared_ptr<const std::vector<int32_t>> in_order;

  int64_t n() const { return quant ? quant->rows : f32.n; }
  int64_t k() const { return quant ? quant->cols : f32.k; }
};

// A decoder layer with its projections fused, so a step makes 4 GEMMs per layer, not 7.
struct CpuLayer {
  std::vector<float> input_norm;   // (hidden)
  Linear qkv;                      // (q_dim + 2 * kv_dim, hidden): q rows, then k, then v
  std::vector<float> qkv_bias;     // (q_dim + 2 * kv_dim) or empty
  Linear o_proj;                   // (hidden, q_dim)
  std::vector<float> o_bias;       // (hidden) or empty
  std::vector<float> post_norm;    // (hidden)
  Linear gate_up;                  // (2 * intermediate, hidden): gate rows, then up rows
  Linear down;                     // (hidden, intermediate)
};

// Concatenates the rows of the parts and frees them as it goes, so peak memory stays near one
// copy of the model.
std::vector<float> concat_rows(std::initializer_list<std::vector<float>*> parts) {
  std::vector<float> out;
  size_t total = 0;
  for (std::vector<float>* part : parts) total += part->size();
  out.reserve(total);
  for (std::vector<float>* part : parts) {
    out.insert(out.end(), part->begin(), part->end());
    std::vector<float>().swap(*part);
  }
  return out;
}

// The matrices a load packs, by Hugging Face name, where they lie: quantized blocks (a GGUF
// file's mapping, or a ModelWeights' own QuantMatrix) and floating-point rows (a safetensors or
// GGUF file's mapping, or a ModelWeights' fp32 vectors). The panels are packed from there with no
// copy first. Once a matrix is packed, a file's pages are released and `progress` counts its
// bytes, and a ModelWeights' own copy is freed.
struct WeightSources {
  using BlocksMap = std::unordered_map<std::string, GgufBlocks>;
  using DenseMap = std::unordered_map<std::string, DenseMatrixRef>;
  BlocksMap blocks;
  DenseMap dense;
  const GgufFile* gguf = nullptr;  // where `blocks` (and `dense`, if not in a safetensors file) lie, when in a file
  LoadProgress progress{};
  std::unordered_map<std::string, QuantMatrix>* owned_blocks = nullptr;
  std::unordered_map<std::string, std::vector<float>*> owned_dense;
  bool widen = false;  // bf16/fp16 matrices widened to fp32 panels (CpuWeightsDtype::kFloat32)
  bool bf16_pairs = false;  // bf16 panels in pairs of k, for the AMX set (CpuKernels::bf16_pairs)
  // The order of the input features the columns of `blocks` follow, by name, where it is not
  // their own (Int4Checkpoint::input_order).
  std::unordered_map<std::string, std::vector<int32_t>> input_orders;
  // Matrices converted into blocks only when they are packed (an AWQ/GPTQ checkpoint's), so a
  // load holds one weight's blocks at a time beside the panels; `converted` holds them until done.
  struct Pending {
    QuantType type;
    int64_t rows, cols;
    std::function<QuantMatrix()> convert;
  };
  std::unordered_map<std::string, Pending> pending;
  std::unordered_map<std::string, QuantMatrix> converted;

  // A pending matrix's blocks made now, into `blocks`.
  void materialize(const std::string& name) {
    const auto it = pending.find(name);
    if (it == pending.end()) return;
    QuantMatrix& m = converted[name] = it->second.convert();
    pending.erase(it);
    GgufBlocks b;
    b.type = m.type;
    b.rows = m.rows;
    b.cols = m.cols;
    b.data = m.data.data();
    blocks.emplace(name, std::move(b));
  }

  void done(BlocksMap::iterator it) {
    if (gguf != nullptr && it->second.tensor != nullptr) {
      progress.add(static_cast<int64_t>(it->second.tensor->nbytes));
      gguf->release(*it->second.tensor);
    }
    if (owned_blocks != nullptr) owned_blocks->erase(it->first);
    converted.erase(it->first);
    blocks.erase(it);
  }
  void done(DenseMap::iterator it) {
    if (const TensorInfo* t = it->second.tensor; t != nullptr) {
      progress.add(static_cast<int64_t>(t->nbytes));
      t->file->release(t->data, t->nbytes);
    }
    if (const GgufTensor* t = it->second.gguf_tensor; t != nullptr && gguf != nullptr) {
      progress.add(static_cast<int64_t>(t->nbytes));
      gguf->release(*t);
    }
    if (auto o = owned_dense.find(it->first); o != owned_dense.end()) {
      std::vector<float>().swap(*o->second);
      owned_dense.erase(o);
    }
    dense.erase(it);
  }
};

// Adds the matrices `weights` holds itself (its quantized ones, its non-empty fp32 ones of the
// right size; a tied model's lm_head is not read) to `s`, where they lie in it.
void add_own_matrices(WeightSources& s, ModelWeights& weights, const ModelConfig& config) {
  s.owned_blocks = &weights.quantized;
  for (const auto& [name, m] : weights.quantized) {
    GgufBlocks b;
    b.type = m.type;
    b.rows = m.rows;
    b.cols = m.cols;
    b.data = m.data.data();
    s.blocks.emplace(name, std::move(b));
  }
  for (const TensorSlot& slot : tensor_slots(config, &weights)) {
    if (slot.shape.size() != 2 || slot.target->empty() || (slot.name == kLmHeadName && config.tie_word_embeddings)) continue;
    if (slot.target->size() != static_cast<size_t>(slot.shape[0] * slot.shape[1])) continue;  // check_weights says
    DenseMatrixRef m;
    m.rows = slot.shape[0];
    m.cols = slot.shape[1];
    m.data = reinterpret_cast<const uint8_t*>(slot.target->data());
    s.dense.emplace(slot.name, m);
    s.owned_dense.emplace(slot.name, slot.target);
  }
}

QuantRowsRef rows_ref(const GgufBlocks& b) { return {b.rows, b.data, b.file_rows.empty() ? nullptr : b.file_rows.data()}; }

std::vector<float> dequantize(const GgufBlocks& b) {
  std::vector<float> out(static_cast<size_t>(b.rows * b.cols));
  for (int64_t r = 0; r < b.rows; ++r) dequantize_row(b.type, b.row(r), b.cols, out.data() + r * b.cols);
  return out;
}

// The fused matrix of the tensors `names` (row blocks, in order), each of `k` columns, packed
// into panels straight from where their rows lie, by the pool's threads. Quantized parts of one
// block type stay quantized; floating-point parts are widened to fp32 as they are packed; a mix
// of types (some GGUF files quantize q, k and v differently) is widened to fp32.
Linear fuse(WeightSources& s, std::initializer_list<std::string> names, int64_t k, ThreadPool& pool) {
  for (const std::string& name : names) s.materialize(name);
  size_t quantized = 0;
  bool same_type = true, same_order = true;
  const GgufBlocks* first = nullptr;
  const auto order_of = [&](const std::string& name) -> const std::vector<int32_t>* {
    const auto it = s.input_orders.find(name);
    return it == s.input_orders.end() ? nullptr : &it->second;
  };
  for (const std::string& name : names) {
    auto it = s.blocks.find(name);
    if (it == s.blocks.end()) continue;
    ++quantized;
    if (first == nullptr) first = &it->second;
    same_type = same_type && it->second.type == first->type;
    const std::vector<int32_t>* a = order_of(name);
    const std::vector<int32_t>* b = order_of(*names.begin());
    same_order = same_order && (a == nullptr ? b == nullptr : b != nullptr && *a == *b);
  }
  Linear out;
  if (quantized == names.size() && same_type && same_order) {
    std::vector<QuantRowsRef> refs;
    for (const std::string& name : names) refs.push_back(rows_ref(s.blocks.at(name)));
    out.quant = std::make_shared<const QuantPanels>(pack_panels(first->type, k, refs, &pool));
    if (const std::vector<int32_t>* order = order_of(*names.begin())) {
      out.in_order = std::make_shared<const std::vector<int32_t>>(*order);
    }
    for (const std::string& name : names) s.done(s.blocks.find(name));
    return out;
  }
  std::vector<std::vector<float>> widened;  // quantized parts of a mixed matrix, dequantized
  widened.reserve(names.size());
  std::vector<DenseMatrixRef> refs;
  for (const std::string& name : names) {
    if (auto it = s.blocks.find(name); it != s.blocks.end()) {
      DenseMatrixRef m;
      m.rows = it->second.rows;
      m.cols = it->second.cols;
      widened.push_back(dequantize(it->second));
      if (const std::vector<int32_t>* order = order_of(name)) {  // columns back in the features' order
        std::vector<float>& values = widened.back();
        std::vector<float> row(static_cast<size_t>(m.cols));
        for (int64_t r = 0; r < m.rows; ++r) {
          float* at = values.data() + r * m.cols;
          for (int64_t c = 0; c < m.cols; ++c) row[static_cast<size_t>((*order)[static_cast<size_t>(c)])] = at[c];
          std::copy(row.begin(), row.end(), at);
        }
      }
      m.data = reinterpret_cast<const uint8_t*>(widened.back().data());
      refs.push_back(m);
      s.done(it);
    } else if (auto d = s.dense.find(name); d != s.dense.end()) {
      refs.push_back(d->second);
    } else {
      throw ModelError(model_error_code::kWeights, "weight \"" + name + "\" is missing");
    }
  }
  out.f32 = PackedWeights::pack(refs, k, &pool, s.widen, s.bf16_pairs);
  for (const std::string& name : names)
    if (auto d = s.dense.find(name); d != s.dense.end()) s.done(d);
  return out;
}

void check_layers(const ModelConfig& config, const ModelWeights& weights) {
  if (weights.layers.size() != static_cast<size_t>(config.num_layers)) {
    throw ModelError(model_error_code::kWeights, "weights have " + std::to_string(weights.layers.size()) +
                                                     " layers, the config " + std::to_string(config.num_layers));
  }
}

void check_weights(const ModelConfig& config, ModelWeights& weights, const WeightSources& s) {
  for (const TensorSlot& slot : tensor_slots(config, &weights)) {
    if (slot.name == kLmHeadName && config.tie_word_embeddings) continue;  // embed_tokens serves
    size_t count = 1;
    for (int64_t dim : slot.shape) count *= static_cast<size_t>(dim);
    size_t have = slot.target->size();
    if (auto q = s.blocks.find(slot.name); q != s.blocks.end()) have = static_cast<size_t>(q->second.rows * q->second.cols);
    if (auto q = s.pending.find(slot.name); q != s.pending.end()) have = static_cast<size_t>(q->second.rows * q->second.cols);
    if (auto d = s.dense.find(slot.name); d != s.dense.end()) have = static_cast<size_t>(d->second.rows * d->second.cols);
    if (have != count) {
      throw ModelError(model_error_code::kWeights, "weight \"" + slot.name + "\" has " + std::to_string(have) +
                                                       " values, the config needs " + std::to_string(count));
    }
  }
}

// "float32", or the block type of the quantized matrices ("Q4_1"), naming a second type that
// some of them have ("Q4_1 + Q8_0"). A model without blocks is named again once packed, by
// its panels' element types.
std::string describe_weights(const WeightSources& s) {
  std::vector<std::string> types;
  const auto add = [&](QuantType t) {
    const std::string type = quant_type_name(t);
    if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
  };
  for (const auto& [name, matrix] : s.blocks) add(matrix.type);
  for (const auto& [name, matrix] : s.pending) add(matrix.type);
  if (types.empty()) return "float32";
  std::sort(types.begin(), types.end());
  std::string out;
  for (const std::string& t : types) out += (out.empty() ? "" : " + ") + t;
  return out;
}

[[noreturn]] void bad_input(const std::string& message) { throw ModelError(model_error_code::kBackendInput, message); }

}  // namespace

// Tokens per pass through the layers (see run_step()): the step buffers hold this many rows
// however many tokens a step has.
constexpr int64_t kRowsPerPass = 256;

struct CpuBackend::Impl {
  ModelConfig config;
  std::string weights_format;      // describe_weights()
  std::string kernel_isa;          // kernel_isa()
  std::vector<float> embed;        // (vocab, hidden) row-major, for an untied table's gather; or empty and
  std::vector<uint8_t, UninitializedAllocator<uint8_t>> embed_bytes;  // the table's bf16/f16 rows as they were,
  DenseMatrixRef embed_half;       // read through this (rows widened on gather); or empty and
  std::unique_ptr<const QuantMatrix> embed_quant;  // the table kept quantized (rows dequantized on gather)
  std::shared_ptr<const QuantPanels> embed_panels;  // or, tied, the lm_head's panels serve the gather
                                                    // (as lm_head.f32's do for a tied fp32 table)
  Linear lm_head;                  // (vocab, hidden): lm_head.weight, or the embedding when tied
  std::vector<float> final_norm;   // (hidden)
  std::vector<CpuLayer> layers;
  Rope rope;
  ThreadPool pool;
  const CpuKernels& kernels;
  const QuantKernels& qkernels;
  QuantScratch quant_scratch;
  KvCache cache;
  bool kv_f16 = false;  // the pool's elements (CpuBackendOptions::kv_dtype, resolved)
  std::string kv_cache_dtype;

  int64_t q_dim = 0, kv_dim = 0, qkv_dim = 0;

  // Per-pass scratch, grown on demand; rows are the pass's tokens in batch order (at most
  // kRowsPerPass of them).
  std::vector<float> x;          // (rows, hidden) residual stream
  std::vector<float> normed;     // (rows, hidden)
  std::vector<float> qkv;        // (rows, qkv_dim)
  std::vector<float> attn;       // (rows, q_dim)
  std::vector<float> gate_up;    // (rows, 2 * intermediate)
  std::vector<float> act;        // (rows, intermediate)
  std::vector<float> cos, sin;   // (rows, head_dim / 2)
  std::vector<float> head_in;    // (wanted, hidden) the step's final-normed rows whose logits are wanted
  std::vector<float> logits_chunk;  // (chunk_rows, vocab): forward_chunked's lm_head output
  std::vector<float> ordered;    // (rows, k) a GEMM's input in its weight's column order (act-order)
  std::vector<int32_t> positions;            // (rows)
  std::vector<const int32_t*> token_tables;  // (rows) the block table of each token's slice
  std::vector<AttentionSlice> slices;
  std::vector<int64_t> logit_rows;           // rows whose logits are wanted, in batch order
  StepBatch pass;                            // the step's slices cut to one pass's rows

  // The matrices are `weights`' own, and those `from_file` says lie in a file.
  Impl(ModelConfig cfg, ModelWeights weights, CpuBackendOptions options, WeightSources* from_file = nullptr)
      : config(std::move(cfg)),
        rope(config),
        pool(options.num_threads),
        kernels(options.kernels.empty() ? cpu_kernels() : cpu_kernels(options.kernels)),
        qkernels(options.kernels.empty() ? quant_kernels() : quant_kernels(options.kernels)) {
    check_layers(config, weights);
    WeightSources s = from_file != nullptr ? std::move(*from_file) : WeightSources{};
    add_own_matrices(s, weights, config);
    s.widen = options.weights_dtype == CpuWeightsDtype::kFloat32;
    s.bf16_pairs = kernels.bf16_pairs;
    check_weights(config, weights, s);
    weights_format = describe_weights(s);
    kv_f16 = options.kv_dtype == CpuKvDtype::kFloat16 || (options.kv_dtype == CpuKvDtype::kAuto && (!s.blocks.empty() || !s.pending.empty()));
    kv_cache_dtype = kv_f16 ? "float16" : "float32";
    q_dim = int64_t{config.num_heads} * config.head_dim;
    kv_dim = int64_t{config.num_kv_heads} * config.head_dim;
    qkv_dim = q_dim + 2 * kv_dim;
    const int64_t hidden = config.hidden_size;
    // The load packs on every CPU the process may run on, as the KV pool is zeroed: the steps'
    // `num_threads` may leave CPUs to others (the service's event loop), which are idle until
    // the model is loaded.
    std::unique_ptr<ThreadPool> wider;
    if (pool.size() < ThreadPool::available_cpus()) wider = std::make_unique<ThreadPool>(0);
    ThreadPool& loader = wider ? *wider : pool;
    s.materialize(kEmbedName);
    if (auto it = s.blocks.find(kEmbedName); it != s.blocks.end()) {
      if (config.tie_word_embeddings) {
        embed_panels = std::make_shared<const QuantPanels>(pack_panels(it->second.type, it->second.cols, {rows_ref(it->second)}, &loader));
        lm_head.quant = embed_panels;
      } else {
        embed_quant = std::make_unique<const QuantMatrix>(copy_blocks(it->second));
      }
      s.done(it);
    } else if (auto d = s.dense.find(kEmbedName); d != s.dense.end()) {
      const DenseMatrixRef& m = d->second;
      if (config.tie_word_embeddings) {
        lm_head.f32 = PackedWeights::pack({m}, hidden, &loader, s.widen, s.bf16_pairs);  // the token gather reads its rows too
      } else if (auto own = s.owned_dense.find(kEmbedName); own != s.owned_dense.end()) {
        embed = std::move(*own->second);
      } else if (m.dtype != DenseMatrixRef::Dtype::kF32 && !s.widen) {  // kept in its dtype, as the GEMMs' panels are
        const int64_t row_bytes = m.row_bytes();
        embed_bytes.resize(static_cast<size_t>(m.rows * row_bytes));
        for_each_run(&loader, m.rows, 1024,
                     [&](int64_t first, int64_t last) { m.copy_rows(first, last, embed_bytes.data() + first * row_bytes); });
        embed_half.rows = m.rows;
        embed_half.cols = m.cols;
        embed_half.data = embed_bytes.data();
        embed_half.dtype = m.dtype;
      } else {
        embed.resize(static_cast<size_t>(m.rows * m.cols));
        for_each_run(&loader, m.rows, 256, [&](int64_t first, int64_t last) { m.rows_to_f32(first, last, embed.data()); });
      }
      s.done(d);
    }
    if (!config.tie_word_embeddings) lm_head = fuse(s, {kLmHeadName}, hidden, loader);
    final_norm = std::move(weights.final_norm);
    for (int32_t l = 0; l < config.num_layers; ++l) {
      LayerWeights& w = weights.layers[l];
      const std::string p = "model.layers." + std::to_string(l) + ".";
      CpuLayer layer;
      layer.input_norm = std::move(w.input_norm);
      layer.qkv = fuse(s, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
                       hidden, loader);
      if (config.attention_bias) layer.qkv_bias = concat_rows({&w.q_bias, &w.k_bias, &w.v_bias});
      layer.o_proj = fuse(s, {p + "self_attn.o_proj.weight"}, q_dim, loader);
      layer.o_bias = std::move(w.o_bias);
      layer.post_norm = std::move(w.post_attention_norm);
      layer.gate_up = fuse(s, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, hidden, loader);
      layer.down = fuse(s, {p + "mlp.down_proj.weight"}, config.intermediate_size, loader);
      layers.push_back(std::move(layer));
    }
    if (!s.blocks.empty() || !s.pending.empty()) {
      const std::string name = s.blocks.empty() ? s.pending.begin()->first : s.blocks.begin()->first;
      throw ModelError(model_error_code::kWeights, "quantized tensor \"" + name + "\" is not a matrix this backend multiplies");
    }
    std::vector<const Linear*> linears = {&lm_head};
    for (const CpuLayer& layer : layers) linears.insert(linears.end(), {&layer.qkv, &layer.o_proj, &layer.gate_up, &layer.down});
    bool quantized = false;
    std::vector<std::string> elems;  // the dense matrices' element types, for weights_format
    for (const Linear* w : linears) {
      quantized = quantized || w->quant != nullptr;
      if (w->quant != nullptr) continue;
      const std::string elem = elem_name(w->f32.elem);
      if (std::find(elems.begin(), elems.end(), elem) == elems.end()) elems.push_back(elem);
    }
    if (!quantized && !elems.empty()) {  // "bfloat16", or the types a mix of dtypes left ("bfloat16 + float32")
      std::sort(elems.begin(), elems.end());
      weights_format.clear();
      for (const std::string& e : elems) weights_format += (weights_format.empty() ? "" : " + ") + e;
    }
    kernel_isa = kernels.isa;
    if (quantized) kernel_isa += std::string(", quantized: ") + qkernels.isa;
  }

  // Splits rows over the pool when there are enough to pay for it; fn(begin, end).
  template <class Fn>
  void for_rows(int64_t rows, int64_t floats_per_row, Fn&& fn) {
    const int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(floats_per_row, 1));
    const int64_t tasks = std::min<int64_t>(pool.size() * 2, (rows + min_rows - 1) / min_rows);
    if (tasks <= 1) {
      fn(int64_t{0}, rows);
      return;
    }
    const int64_t per_task = (rows + tasks - 1) / tasks;
    pool.parallel_for(tasks, [&](int64_t t) { fn(t * per_task, std::min(rows, (t + 1) * per_task)); });
  }

  // out = weight * (x * rsqrt(mean(x^2) + eps)), row by row, as transformers' LlamaRMSNorm.
  void rms_norm(const float* in, const std::vector<float>& weight, float* out) const {
    const int64_t n = config.hidden_size;
    double sum_squares = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(in[i]) * in[i];
    const float variance = static_cast<float>(sum_squares / static_cast<double>(n));
    const float inv_rms = 1.0f / std::sqrt(variance + config.rms_norm_eps);
    for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (in[i] * inv_rms);
  }

  void gemm(const float* a, int64_t m, const Linear& w, float* c, const std::vector<float>& bias, bool accumulate) {
    if (w.in_order) {  // the input's features gathered into the order of the weight's columns
      const int64_t k = w.k();
      grow_exact(ordered, m * k);
      const int32_t* order = w.in_order->data();
      for_rows(m, k, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const float* from = a + t * k;
          float* to = ordered.data() + t * k;
          for (int64_t i = 0; i < k; ++i) to[i] = from[order[i]];
        }
      });
      a = ordered.data();
    }
    if (w.quant) {
      QuantGemmArgs args;
      args.m = m;
      args.a = a;
      args.lda = w.k();
      args.w = w.quant.get();
      args.c = c;
      args.ldc = w.n();
      args.bias = bias.empty() ? nullptr : bias.data();
      args.accumulate = accumulate;
      parallel_quant_gemm(pool, qkernels, args, quant_scratch);
      return;
    }
    GemmArgs args;
    args.m = m;
    args.a = a;
    args.lda = w.f32.k;
    args.w = &w.f32;
    args.c = c;
    args.ldc = w.f32.n;
    args.bias = bias.empty() ? nullptr : bias.data();
    args.accumulate = accumulate;
    parallel_gemm(pool, kernels, args);
  }

  // Checks the batch and lays out its tokens; returns the number of tokens.
  int64_t plan(const StepBatch& batch, const float* logits, bool logits_elsewhere = false) {
    if (!cache.allocated()) bad_input("forward called before allocate_kv");
    positions.clear();
    token_tables.clear();
    slices.clear();
    logit_rows.clear();
    const int32_t block_size = cache.block_size();
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const SeqSlice& seq = batch.seqs[s];
      const std::string where = "batch slice " + std::to_string(s);
      if (seq.n_tokens <= 0 || seq.tokens == nullptr) bad_input(where + ": no tokens");
      const int64_t end = int64_t{seq.start_pos} + seq.n_tokens;
      if (seq.start_pos < 0 || end > INT32_MAX) bad_input(where + ": positions out of range");
      const int64_t blocks_needed = (end + block_size - 1) / block_size;
      if (seq.block_table == nullptr || seq.n_blocks < blocks_needed) {
        bad_input(where + ": block table has " + std::to_string(seq.n_blocks) + " blocks, positions [0, " +
                  std::to_string(end) + ") need " + std::to_string(blocks_needed));
      }
      for (int64_t b = 0; b < blocks_needed; ++b) {
        if (seq.block_table[b] < 0 || seq.block_table[b] >= cache.num_blocks()) {
          bad_input(where + ": block id " + std::to_string(seq.block_table[b]) + " is outside the KV pool (" +
                    std::to_string(cache.num_blocks()) + " blocks)");
        }
      }
      slices.push_back({static_cast<int64_t>(positions.size()), seq.n_tokens, seq.start_pos, seq.block_table});
      for (int32_t t = 0; t < seq.n_tokens; ++t) {
        if (seq.tokens[t] < 0 || seq.tokens[t] >= config.vocab_size) {
          bad_input(where + ": token id " + std::to_string(seq.tokens[t]) + " is outside the vocabulary (" +
                    std::to_string(config.vocab_size) + ")");
        }
        positions.push_back(seq.start_pos + t);
        token_tables.push_back(seq.block_table);
      }
      if (seq.want_logits) logit_rows.push_back(static_cast<int64_t>(positions.size()) - 1);
    }
    if (!logit_rows.empty() && logits == nullptr && !logits_elsewhere) {
      bad_input("logits are wanted but the output pointer is null");
    }
    return static_cast<int64_t>(positions.size());
  }

  void reserve(int64_t tokens) {
    const auto grow = [](std::vector<float>& v, int64_t rows, int64_t per_row) { grow_exact(v, rows * per_row); };
    grow(x, tokens, config.hidden_size);
    grow(normed, tokens, config.hidden_size);
    grow(qkv, tokens, qkv_dim);
    grow(attn, tokens, q_dim);
    grow(gate_up, tokens, 2 * int64_t{config.intermediate_size});
    grow(act, tokens, config.intermediate_size);
    grow(cos, tokens, rope.half_dim());
    grow(sin, tokens, rope.half_dim());
  }

  void forward(const StepBatch& batch, float* logits) {
    const int64_t wanted = run_step(batch, logits);
    if (wanted > 0) gemm(head_in.data(), wanted, lm_head, logits, {}, false);
  }

  // The lm_head over chunk_rows rows at a time, into one reused (chunk_rows, vocab) buffer; each
  // row's logits are the same as forward()'s (a GEMM row does not depend on the others).
  void forward_chunked(const StepBatch& batch, int32_t chunk_rows, const ModelBackend::LogitsConsumer& consume) {
    if (chunk_rows < 1) bad_input("forward_chunked: chunk_rows must be >= 1");
    const int64_t wanted = run_step(batch, nullptr, /*logits_elsewhere=*/true);
    if (wanted == 0) return;
    const int64_t hidden = config.hidden_size, vocab = config.vocab_size;
    const int64_t chunk = std::min<int64_t>(chunk_rows, wanted);
    grow_exact(logits_chunk, chunk * vocab);
    for (int64_t first = 0; first < wanted; first += chunk) {
      const int64_t rows = std::min(chunk, wanted - first);
      gemm(head_in.data() + first * hidden, rows, lm_head, logits_chunk.data(), {}, false);
      consume(static_cast<int32_t>(first), static_cast<int32_t>(rows), logits_chunk.data());
    }
  }

  // Every layer of the step, in passes of at most kRowsPerPass tokens: a long prefill is cut into
  // pieces that run one after the other through all the layers, each piece attending to the KV
  // the earlier ones wrote, so the step buffers stay kRowsPerPass rows long (a 2048-token step
  // held about 40 MB of them) while each row computes what it would in one pass. The weights are
  // read once per pass, which a pass of 256 rows pays for many times over in arithmetic. The
  // final-normed hidden state of each row whose logits are wanted goes to head_in, in batch
  // order; returns their count (0: nothing to run or no logits wanted).
  int64_t run_step(const StepBatch& batch, const float* logits, bool logits_elsewhere = false) {
    const int64_t tokens = plan(batch, logits, logits_elsewhere);  // checks the whole step first
    if (tokens == 0) return 0;
    const int64_t hidden = config.hidden_size;
    grow_exact(head_in, static_cast<int64_t>(logit_rows.size()) * hidden);
    int64_t wanted = 0;
    const auto finish_pass = [&]() {
      const int64_t rows = static_cast<int64_t>(logit_rows.size());
      for (int64_t i = 0; i < rows; ++i) {
        rms_norm(x.data() + logit_rows[i] * hidden, final_norm, head_in.data() + (wanted + i) * hidden);
      }
      wanted += rows;
    };
    if (tokens <= kRowsPerPass) {
      run_layers(batch, tokens);
      finish_pass();
      return wanted;
    }
    size_t s = 0;
    int32_t done = 0;  // tokens of batch.seqs[s] already run
    while (s < batch.seqs.size()) {
      pass.seqs.clear();
      int64_t rows = 0;
      while (s < batch.seqs.size() && rows < kRowsPerPass) {
        const SeqSlice& seq = batch.seqs[s];
        const int32_t n = static_cast<int32_t>(std::min<int64_t>(seq.n_tokens - done, kRowsPerPass - rows));
        SeqSlice piece = seq;
        piece.tokens = seq.tokens + done;
        piece.n_tokens = n;
        piece.start_pos = seq.start_pos + done;
        done += n;
        piece.want_logits = seq.want_logits && done == seq.n_tokens;
        pass.seqs.push_back(piece);
        rows += n;
        if (done == seq.n_tokens) {
          ++s;
          done = 0;
        }
      }
      run_layers(pass, plan(pass, nullptr, /*logits_elsewhere=*/true));
      finish_pass();
    }
    return wanted;
  }

  // Embedding and every layer for the batch's tokens, as plan() laid them out (one pass); the
  // last hidden states stay in x.
  void run_layers(const StepBatch& batch, int64_t tokens) {
    reserve(tokens);
    const int64_t hidden = config.hidden_size, inter = config.intermediate_size, half = rope.half_dim();

    int64_t row = 0;
    for (const SeqSlice& seq : batch.seqs) {
      for (int32_t i = 0; i < seq.n_tokens; ++i, ++row) {
        float* dst = x.data() + row * hidden;
        if (embed_panels) {
          dequantize_panel_row(*embed_panels, seq.tokens[i], dst);
        } else if (embed_quant) {
          dequantize_row(embed_quant->type, embed_quant->row(seq.tokens[i]), hidden, dst);
        } else if (!embed.empty()) {
          const float* src = embed.data() + int64_t{seq.tokens[i]} * hidden;
          std::copy(src, src + hidden, dst);
        } else if (embed_half.data != nullptr) {
          embed_half.to_f32(seq.tokens[i], 0, hidden, dst);
        } else {
          lm_head.f32.row(seq.tokens[i], dst);  // tied: the output projection's panels
        }
      }
    }
    rope.tables(positions.data(), tokens, cos.data(), sin.data());
    const AttentionShape shape{config.num_heads, config.num_kv_heads, config.head_dim,
                               static_cast<float>(1.0 / std::sqrt(static_cast<double>(config.head_dim)))};

    for (int32_t l = 0; l < config.num_layers; ++l) {
      const CpuLayer& layer = layers[l];
      for_rows(tokens, hidden, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) rms_norm(x.data() + t * hidden, layer.input_norm, normed.data() + t * hidden);
      });
      gemm(normed.data(), tokens, layer.qkv, qkv.data(), layer.qkv_bias, false);
      for_rows(tokens, qkv_dim, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float* q = qkv.data() + t * qkv_dim;
          float* k = q + q_dim;
          rope.apply(q, config.num_heads, cos.data() + t * half, sin.data() + t * half);
          rope.apply(k, config.num_kv_heads, cos.data() + t * half, sin.data() + t * half);
          const int32_t pos = positions[t];
          cache.write(l, token_tables[t][pos / cache.block_size()], pos % cache.block_size(), k, k + kv_dim,
                      kernels.to_half);
        }
      });
      paged_attention(pool, kernels, cache, l, slices, shape, qkv.data(), qkv_dim, attn.data(), q_dim);
      gemm(attn.data(), tokens, layer.o_proj, x.data(), layer.o_bias, true);

      for_rows(tokens, hidden, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) rms_norm(x.data() + t * hidden, layer.post_norm, normed.data() + t * hidden);
      });
      gemm(normed.data(), tokens, layer.gate_up, gate_up.data(), {}, false);
      for_rows(tokens, 2 * inter, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const float* g = gate_up.data() + t * 2 * inter;
          kernels.silu_mul(g, g + inter, act.data() + t * inter, inter);
        }
      });
      gemm(act.data(), tokens, layer.down, x.data(), {}, true);
    }
  }
};

CpuBackend::CpuBackend(const std::filesystem::path& model_path, CpuBackendOptions options) {
  const ModelSource source = resolve_model_source(model_path);
  if (source.kind == ModelSource::Kind::kGguf) {
    // The norms and biases are read out; the matrices are packed into panels straight from the
    // file's mapping (as a safetensors checkpoint's are), unmapped once they are.
    const GgufFile file = GgufFile::open(source.path);
    ModelConfig config = gguf_model_config(file);
    options.progress.start(gguf_tensor_bytes(file));
    GgufWeights mapped = map_gguf_weights(file, config, options.progress);
    WeightSources s;
    s.blocks = std::move(mapped.blocks);
    s.dense = std::move(mapped.matrices);
    s.gguf = &file;
    s.progress = options.progress;
    impl_ = std::make_unique<Impl>(std::move(config), std::move(mapped.dense), options, &s);
    return_freed_heap();
    return;
  }
  ModelConfig config = load_model_config(source.path);
  const SafetensorsArchive archive = SafetensorsArchive::open_model_dir(source.path);
  if (!config.quantization.method.empty()) {
    // AWQ / GPTQ: each quantized weight read into blocks when it is packed into panels, and its
    // blocks freed then (the load holds one weight's blocks beside the panels), act-order
    // weights with their input order; an act-order embedding (its rows gathered as they are)
    // dequantized instead.
    Int4Checkpoint checkpoint(archive, config, options.progress);
    MappedModelWeights& mapped = checkpoint.mapped();
    WeightSources s;
    s.dense = std::move(mapped.matrices);
    s.progress = options.progress;
    const std::vector<TensorSlot> slots = tensor_slots(config, nullptr);
    for (const std::string& name : checkpoint.quantized_names()) {
      const std::vector<int32_t>& order = checkpoint.input_order(name);
      if (name == kEmbedName && !order.empty()) {
        mapped.dense.embed_tokens = checkpoint.dequantize(name);
        continue;
      }
      const auto slot = std::find_if(slots.begin(), slots.end(), [&](const TensorSlot& t) { return t.name == name; });
      s.pending.emplace(name, WeightSources::Pending{checkpoint.block_type(), slot->shape[0], slot->shape[1],
                                                    [&checkpoint, name] { return checkpoint.blocks(name); }});
      if (!order.empty()) s.input_orders.emplace(name, order);
    }
    impl_ = std::make_unique<Impl>(std::move(config), std::move(mapped.dense), options, &s);
    impl_->weights_format = checkpoint.description() + ": " + impl_->weights_format;
    return_freed_heap();
    return;
  }
  // The norms and biases are read out; the matrices are widened to fp32 as they are packed into
  // panels, straight from the safetensors mapping, which is unmapped once they are.
  MappedModelWeights mapped = map_model_weights(archive, config, options.progress);
  WeightSources s;
  s.dense = std::move(mapped.matrices);
  s.progress = options.progress;
  impl_ = std::make_unique<Impl>(std::move(config), std::move(mapped.dense), options, &s);
  return_freed_heap();
}

CpuBackend::CpuBackend(const ModelConfig& config, uint64_t dummy_seed, CpuBackendOptions options) {
  validate_model_config(config, "dummy model config");
  impl_ = std::make_unique<Impl>(config, make_dummy_weights(config, dummy_seed), options);
}

CpuBackend::CpuBackend(const ModelConfig& config, ModelWeights weights, CpuBackendOptions options) {
  validate_model_config(config, "model config");
  impl_ = std::make_unique<Impl>(config, std::move(weights), options);
}

CpuBackend::~CpuBackend() = default;

const ModelConfig& CpuBackend::config() const { return impl_->config; }

int64_t CpuBackend::kv_bytes_per_block(int32_t block_size) const {
  const ModelConfig& c = impl_->config;
  return KvCache::bytes_per_block(c.num_layers, block_size, c.num_kv_heads, c.head_dim, impl_->kv_f16);
}

void CpuBackend::allocate_kv(int32_t num_blocks, int32_t block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    bad_input("allocate_kv needs positive num_blocks and block_size, got " + std::to_string(num_blocks) + " and " +
              std::to_string(block_size));
  }
  const ModelConfig& c = impl_->config;
  try {
    impl_->cache.allocate(c.num_layers, num_blocks, block_size, c.num_kv_heads, c.head_dim, impl_->kv_f16);
  } catch (const std::exception&) {  // bad_alloc, or length_error past vector's max_size
    throw ModelError(model_error_code::kOutOfMemory, "cannot allocate " + std::to_string(kv_bytes_per_block(block_size) * num_blocks) +
                                                         " bytes for a KV pool of " + std::to_string(num_blocks) + " blocks");
  }
}

void CpuBackend::forward(const StepBatch& batch, float* logits) { impl_->forward(batch, logits); }

void CpuBackend::forward_chunked(const StepBatch& batch, int32_t chunk_rows, const LogitsConsumer& consume) {
  impl_->forward_chunked(batch, chunk_rows, consume);
}

void CpuBackend::copy_block(int32_t src, int32_t dst) {
  KvCache& cache = impl_->cache;
  if (!cache.allocated()) bad_input("copy_block called before allocate_kv");
  if (src < 0 || src >= cache.num_blocks() || dst < 0 || dst >= cache.num_blocks()) {
    bad_input("copy_block(" + std::to_string(src) + ", " + std::to_string(dst) + "): block id outside the KV pool (" +
              std::to_string(cache.num_blocks()) + " blocks)");
  }
  cache.copy_block(src, dst);
}

int32_t CpuBackend::num_threads() const { return impl_->pool.size(); }

const std::string& CpuBackend::kernel_isa() const { return impl_->kernel_isa; }

const std::string& CpuBackend::weights_format() const { return impl_->weights_format; }

const std::string& CpuBackend::kv_cache_dtype() const { return impl_->kv_cache_dtype; }

int64_t CpuBackend::step_buffer_bytes() const {
  const Impl& m = *impl_;
  int64_t floats = 0;
  for (const std::vector<float>* v : {&m.x, &m.normed, &m.qkv, &m.attn, &m.gate_up, &m.act, &m.cos, &m.sin, &m.head_in,
                                      &m.logits_chunk, &m.ordered}) {
    floats += static_cast<int64_t>(v->capacity());
  }
  return floats * static_cast<int64_t>(sizeof(float)) + m.quant_scratch.bytes();
}

}  // namespace strata
