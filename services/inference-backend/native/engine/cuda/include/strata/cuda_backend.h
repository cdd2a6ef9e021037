// The CUDA model backend: a Llama-family forward pass on one GPU behind strata::ModelBackend,
// so the same scheduler and block manager drive it as the CPU backend. Weights, activations and
// the paged KV pool are in one dtype (bf16 by default; fp32 for the token-for-token checks
// against the CPU backend); norms, softmax and accumulations run in fp32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "strata/cuda_kernels.h"
#include "strata/load_progress.h"
#include "strata/model_backend.h"

namespace strata {

struct CudaBackendOptions {
  cuda::DType dtype = cuda::DType::kBF16;
  LoadProgress progress{};  // the checkpoint's bytes on their way to the device, for another thread
  int32_t device = 0;
  // Tokens and sequences one forward may carry: the activation buffers are sized for them at
  // load time, so a step never allocates (the engine's max_num_batched_tokens / max_num_seqs).
  int32_t max_batch_tokens = 8192;
  int32_t max_seqs = 256;
  // Longest sequence a forward may attend over; 0 = the model's max_position_embeddings.
  int32_t max_model_len = 0;
  // Decode steps of up to max_graph_batch sequences replay CUDA graphs captured for batch sizes
  // 1, 2, 4, ... and the largest batch itself when the KV pool is allocated; prefill steps
  // and larger batches run eagerly.
  bool cuda_graphs = true;
  int32_t max_graph_batch = 256;
  // Sample on the GPU (strata/cuda_sampling.h), so that only the tokens cross to the host; false
  // hands the logits to the core's CPU Sampler, as the CPU backend does. A vocabulary the GPU
  // sampler cannot hold (over ~55k entries before sm_90) samples on the CPU: sampling_note().
  bool sample_on_device = true;
  // GEMMs of up to this many rows (decode steps of up to this many sequences) in bf16/fp16 run
  // on the GEMV kernel (cuda::gemv, and cuda::gemv_swiglu for the gate/up projection with the
  // SiLU, so silu_mul does not run) instead of cuBLAS; 0 = always cuBLAS; at most
  // cuda::kGemvMaxRows. 2 by default: Llama-3-8B's decode steps took, with the GEMV against
  // cuBLAS alone (alternating in one process), on an H100 5.87-5.90 ms against 6.43-6.45 at 1
  // sequence, 6.11 against 6.49 at 2, 6.62 against 6.71 at 4 and 8.20 against 6.95 at 8; on an
  // H200 (before the fused RoPE) 4.53 against 4.85 at 1 but 5.36 against 5.00 at 4
  // (docs/cuda-notes.md). A sequence's bf16 logits then also depend on whether its step
  // had at most this many rows (the two kernels round differently, as cuBLAS's own kernels for
  // different row counts may), so greedy tokens alone and batched can part; 0 keeps every GEMM
  // on cuBLAS.
  int32_t gemv_max_rows = 2;
  // Where the GEMV serves the q/k/v projection and it has no bias, the same launch applies RoPE
  // and writes K and V into the cache (cuda::gemv_qkv_rope: the bytes of the GEMV followed by
  // rope_write_kv), one kernel a layer fewer; false keeps the two kernels. On an H100 the
  // batch-1 Llama-3-8B step took 5.884 ms with it against 5.989 without (alternating).
  bool gemv_fuse_rope = true;
  // Launch the step's own kernels with programmatic dependent launch on sm_90+ GPUs
  // (cuda::ProgrammaticLaunch): each may be scheduled, and a GEMV prefetch its weights, while
  // the kernel before it finishes; the same bytes either way. Off: on an H100 it made the
  // batch-1 and batch-2 steps slower (6.04 against 5.87 ms, 6.50 against 6.10), batch 8 1.6%
  // faster and batch 64 no different (docs/cuda-notes.md).
  bool programmatic_launch = false;
  // Its two parts, for timing them apart (cuda::ProgrammaticLaunch): the GEMVs' L2 prefetch of
  // their first weights before they wait, and each kernel letting its successor be scheduled as
  // soon as its blocks have waited (false: as it completes).
  bool programmatic_prefetch = true;
  bool programmatic_early_trigger = true;
  // A GEMM of at least this many rows on a quantized weight (a GGUF file's blocks kept on the
  // device, bf16/fp16) dequantizes the weight into a scratch matrix (cuda::quant_dequantize)
  // and multiplies that with cuBLAS, as llama.cpp does for large batches, instead of running
  // quant_gemm's tiled kernel, which on an H100 took a Llama-3-8B-shaped Q4_0 prefill at 23% of
  // cuBLAS's bf16 rate. The scratch holds the largest quantized weight but the output
  // projection (235 MB for Llama-3-8B's fused gate/up in bf16) and is allocated only when the
  // model has such weights and max_batch_tokens reaches this count; 0 = never. 512 is an
  // estimate (docs/cuda-notes.md), not yet a GPU measurement.
  int32_t quant_dense_min_rows = 512;
  // A quantized weight's GEMM on quant_gemm's GEMV kernel (decode steps of up to
  // cuda::kQuantGemvMaxM sequences) does the next kernel's work in its epilogue: the q/k/v
  // projection RoPE and the K/V cache write (cuda::quant_gemm_qkv_rope; head_dim 16 or a
  // multiple of 32), the gate/up projection the SiLU (cuda::quant_gemm_swiglu; intermediate
  // size a multiple of 16), so that rope_write_kv and silu_mul do not run. The bytes are those of the two kernels
  // with the same k split; the fused launch's grid may choose another split, so the values can
  // round differently from false's. On an H100 the two kernels took 6.3 and 3.5 us a layer of a
  // Llama-3-8B Q4_0 step at batch 1 (docs/cuda-notes.md); the fused step is not yet timed.
  bool quant_gemv_fuse = true;
};

struct CudaLoadStats {
  int64_t bytes = 0;         // read from the checkpoint
  double seconds = 0.0;      // from opening the checkpoint to the last weight converted on the device
  // Of `seconds`, for a GGUF file: mapping it and reading its norms and biases (map_gguf_weights),
  // and the host's own work (repacking the quantized matrices from the file's mapping into the
  // staging buffers, its page faults included; dequantizing where blocks do not stay blocks);
  // the rest is staging the float matrices, copying and converting on the device, and waiting
  // for it.
  double read_seconds = 0.0;
  double host_seconds = 0.0;
  double gb_per_s() const { return seconds > 0.0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }
};

// One stage of a step timed with CUDA events (CudaBackend::time_stages): the GPU time from the
// event recorded before it to the one after it, summed over its calls (most run once a layer).
// Time the GPU spent waiting for the host to queue the stage's kernels counts in it.
struct CudaStageTime {
  std::string stage;
  int32_t calls = 0;
  double ms = 0.0;
};

struct CudaStepTimes {
  double span_ms = 0.0;               // the step's first event to its last: its whole time on the GPU
  std::vector<CudaStageTime> stages;  // in step order; stages the step did not run are absent
};

class CudaBackend final : public ModelBackend {
 public:
  // A Hugging Face directory (config.json and safetensors in f32, bf16 or f16): every tensor is
  // copied through pinned staging buffers to the device and converted there to options.dtype.
  // Or a GGUF file (or a directory holding one, resolve_model_source): its Q4_0/Q4_1/Q8_0
  // matrices stay quantized on the device for bf16/f16 (quant_gemm; the embedding table for the
  // gather is dequantized), float tensors are converted; in fp32 the blocks are dequantized.
  // Throws ModelError (STRATA_MODEL_CONFIG / STRATA_MODEL_WEIGHTS), cuda::CudaError, or
  // ModelError(STRATA_OUT_OF_MEMORY) when the weights and buffers do not fit on the device.
  CudaBackend(const std::filesystem::path& model_dir, CudaBackendOptions options = {});
  ~CudaBackend() override;

  const ModelConfig& config() const override;
  int64_t kv_bytes_per_block(int32_t block_size) const override;
  void allocate_kv(int32_t num_blocks, int32_t block_size) override;
  // Throws ModelError(STRATA_BACKEND_INPUT) for a batch it cannot run (as the CPU backend, plus
  // more tokens or sequences than the options allow).
  void forward(const StepBatch& batch, float* logits) override;
  bool samples_on_device() const override;
  // Empty, or why sampling runs on the CPU although the options asked for the GPU.
  const std::string& sampling_note() const;
  // forward(), then sampling on the GPU; the logits stay there.
  void forward_sample(const StepBatch& batch, const SamplingBatch& sampling, SampledBatch& out) override;
  void copy_block(int32_t src, int32_t dst) override;

  // KV blocks that fit in `utilization` of the device's memory once the weights, the
  // activation buffers and cuBLAS's workspace are in place (a profiling pass runs the largest
  // GEMMs first so cuBLAS has made its own allocations). Throws ModelError(STRATA_OUT_OF_MEMORY)
  // saying what takes the memory when not one block fits.
  int32_t profile_kv_blocks(int32_t block_size, double utilization);

  const CudaLoadStats& load_stats() const;
  // How the weights are held: "bfloat16", or e.g. "Q4_1 + bfloat16" for a GGUF file's blocks
  // kept quantized ("(Q8_0 dequantized)" appended for types no weight keeps).
  const std::string& weights_format() const;
  // Bytes of weights one decode step reads: every weight on the device but the embedding table
  // the token gather reads a few rows of (when the output projection is a copy of its own, or
  // its blocks); a decode roofline's weight term.
  int64_t decode_weight_bytes() const;
  // Forward passes so far that replayed a CUDA graph, and that ran eagerly.
  int64_t graph_steps() const;
  int64_t eager_steps() const;
  std::string device_name() const;
  cuda::DType dtype() const;
  // How a decode step of `batch` sequences runs the q/k/v and gate/up projections and the kernels
  // after them, e.g. "q/k/v quant_gemm_qkv_rope, gate/up quant_gemm_swiglu" or "q/k/v cuBLAS +
  // rope_write_kv, gate/up cuBLAS + silu_mul" (for benchmarks, logs and checks). Throws
  // ModelError (backend input) for a batch outside 1..max_batch_tokens.
  std::string decode_kernels(int32_t batch);
  // The options the backend runs with (those it was given, as set_step_kernels left them).
  const CudaBackendOptions& options() const;
  // Takes the step's kernel choices from `step` after load (gemv_max_rows, 0..cuda::kGemvMaxRows;
  // gemv_fuse_rope; quant_gemv_fuse; programmatic_launch and its prefetch and early trigger) and
  // captures the decode graphs again; its other fields are not read. For benchmarks that
  // compare the kernels of a step several ways in one process. The same choices again: nothing.
  void set_step_kernels(const CudaBackendOptions& step);
  // While on, every step runs eagerly (not from a CUDA graph) with a CUDA event before and after
  // each of its stages (the step's input copy, the embedding gather, each layer's norms,
  // projections and attention, the head, the logits' or sampled tokens' copy to the host), and
  // stage_times() then holds the last step's. For benchmarks, not serving: the events cost a few
  // microseconds a step and each one ends what programmatic launch would overlap across it.
  void time_stages(bool on);
  // The last step timed while time_stages was on (span 0 and no stages before the first).
  const CudaStepTimes& stage_times() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
