// The CPU backend: a Llama-family forward pass over a paged fp32 or f16 KV cache, spread over all
// cores, with fp32 weights or GGUF block-quantized ones (Q4_0, Q4_1, Q8_0). The step's tokens go through each weight matrix together, so every weight is
// read once per step whatever the batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "strata/load_progress.h"
#include "strata/model_backend.h"
#include "strata/model_weights.h"

namespace strata {

// The KV pool's element type. kAuto: IEEE half for a model with quantized (GGUF) matrices, as
// llama.cpp's default cache (half the bytes attention reads, twice the blocks in the same
// memory); fp32 for an fp32/f16/bf16 checkpoint, whose logits are checked against fp32 references.
enum class CpuKvDtype { kAuto, kFloat32, kFloat16 };

// How a checkpoint's bf16/fp16 matrices are kept: as they are (kAuto; the GEMM widens them
// exactly as it loads them: half the memory, faster decode at one or two sequences, 11-25%
// slower at 8 and up to 11% at 32 on a Zen 4 class CPU, the same prefill), or widened to fp32
// at load (kFloat32). The logits are the same bits either way. fp32 and quantized matrices are
// not affected.
enum class CpuWeightsDtype { kAuto, kFloat32 };

struct CpuBackendOptions {
  int32_t num_threads = 0;  // threads computing a step, the caller's included; 0: every available CPU
                            // (the load itself packs the weights on every available CPU)
  CpuKvDtype kv_dtype = CpuKvDtype::kAuto;
  LoadProgress progress{};  // the checkpoint's bytes read so far, for another thread (load_progress.h)
  CpuWeightsDtype weights_dtype = CpuWeightsDtype::kAuto;
  // The kernel set: "auto" (the best exact set the CPU runs), "amx" (AMX tile multiplies for
  // bf16 matrices, with bf16-rounded activations, where the CPU has AMX; else auto), "avx2" or
  // "portable"; empty: what STRATA_CPU_KERNELS names (cpu_kernels()).
  std::string kernels{};
};

class CpuBackend final : public ModelBackend {
 public:
  // A Hugging Face directory (config.json, generation_config.json, safetensors) or a GGUF file
  // (or a directory holding one): see resolve_model_source(). GGUF matrices in Q4_0, Q4_1 or
  // Q8_0 stay in their blocks; bf16/fp16 matrices keep their dtype (options.weights_dtype); the
  // other tensors are widened to fp32.
  explicit CpuBackend(const std::filesystem::path& model_path, CpuBackendOptions options = {});
  // The dummy load format: random weights (see make_dummy_weights) for `config`.
  CpuBackend(const ModelConfig& config, uint64_t dummy_seed, CpuBackendOptions options = {});
  // Weights already in memory; their sizes are checked against `config`.
  CpuBackend(const ModelConfig& config, ModelWeights weights, CpuBackendOptions options = {});
  ~CpuBackend() override;

  const ModelConfig& config() const override;
  int64_t kv_bytes_per_block(int32_t block_size) const override;
  void allocate_kv(int32_t num_blocks, int32_t block_size) override;
  // Throws ModelError(STRATA_BACKEND_INPUT) for a batch it cannot run (token id outside the
  // vocabulary, block table too short, block id outside the pool, KV not allocated).
  void forward(const StepBatch& batch, float* logits) override;
  void copy_block(int32_t src, int32_t dst) override;
  bool chunks_logits() const override { return true; }
  // The same logits as forward(), bit for bit, lm_head run chunk_rows rows at a time.
  void forward_chunked(const StepBatch& batch, int32_t chunk_rows, const LogitsConsumer& consume) override;

  int32_t num_threads() const;
  // The kernels it runs: the fp32 set ("avx512f", "avx2+fma" or "portable"), and for a model with
  // quantized matrices the quantized set too ("avx2+fma, quantized: avx512vnni").
  const std::string& kernel_isa() const;
  // The weights' numeric format: the dense matrices' element type ("float32"; "bfloat16" or
  // "float16" for a checkpoint in that dtype, whose values the GEMM widens as it loads them),
  // or the block types of the quantized matrices ("Q4_1 + Q8_0").
  const std::string& weights_format() const;
  // The KV pool's element type: "float32" or "float16".
  const std::string& kv_cache_dtype() const;
  // Bytes of step buffers held now (activations of one pass, the wanted rows' final hidden
  // states, a chunk of logits): bounded by the rows of one pass, whatever a step's token count.
  int64_t step_buffer_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
