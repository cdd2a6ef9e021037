// The CUDA backend's kernels behind plain C++ launchers, so that callers need no CUDA header.
// Every pointer is device memory; every launch goes on `stream`; a failed launch or a shape a
// kernel does not support throws CudaError. Activations are row-major (tokens, features).
//
// KV cache, one layer: K and V each (num_blocks, num_kv_heads, block_size, head_dim) in the
// model's dtype, so one block of one head is a contiguous block_size * head_dim slab. A token's
// slot is block_id * block_size + offset in its block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/model_error.h"

struct CUstream_st;

namespace strata::cuda {

using Stream = CUstream_st*;

enum class DType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

inline constexpr const char* kCudaErrorCode = "STRATA_CUDA_ERROR";

class CudaError : public ModelError {
 public:
  explicit CudaError(const std::string& message) : ModelError(kCudaErrorCode, message) {}
};

// Throws CudaError "<what>: <CUDA's error string>" unless err is cudaSuccess (0).
void check(int err, const char* what);
// Throws CudaError naming `kernel` when its launch failed (cudaGetLastError).
void check_launch(const char* kernel);

// Programmatic dependent launch (sm_90+). While a ProgrammaticLaunch(true) lives on a thread,
// the decode step's own kernels launched from it (add_rms_norm, gemv, gemv_swiglu,
// gemv_qkv_rope, rope_write_kv, the tensor-core decode attention and its reduce) go out with
// programmatic stream serialization: such a kernel may be scheduled while the kernel before it
// in the stream finishes, prefetches what does not depend on that kernel (a GEMV its weights,
// into L2), and waits for it to complete (griddepcontrol.wait) before touching anything else.
// Each of them lets its successor be scheduled once all its blocks have passed that wait. The
// results are the same bytes; only the gaps between kernels change. Other kernels, and every
// kernel when none lives, launch as usual. Scopes nest; the innermost wins. `prefetch` false
// keeps the GEMVs from asking for their weights before the wait; `early_trigger` false leaves
// each kernel's successor to be scheduled as the kernel completes, not once its blocks have
// passed the wait: the two parts of the scheme, to be timed apart.
class ProgrammaticLaunch {
 public:
  explicit ProgrammaticLaunch(bool on, bool prefetch = true, bool early_trigger = true);
  ~ProgrammaticLaunch();
  ProgrammaticLaunch(const ProgrammaticLaunch&) = delete;
  ProgrammaticLaunch& operator=(const ProgrammaticLaunch&) = delete;

 private:
  bool previous_;
  uint32_t previous_flags_;
};
bool programmatic_launch();  // this thread's setting

// Head sizes the attention and RoPE kernels are compiled for.
bool supported_head_dim(int32_t head_dim);

// residual[t, :] = table[ids[t], :] as fp32. ids must be inside the table (the caller checks).
void embedding_gather(DType dtype, const void* table, const int32_t* ids, int32_t n_tokens, int32_t hidden,
                      float* residual, Stream stream);

// dst[i] = src[i] converted between dtypes (round to nearest even), i < n: checkpoint tensors
// into the model's dtype, logits to fp32.
void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n, Stream stream);

// y[i, j] += bias[j] for i < m, j < n; y's rows are y_stride elements apart.
void add_bias(DType dtype, void* y, int64_t y_stride, const void* bias, int32_t m, int32_t n, Stream stream);

// dst[i, :] = src[rows[i], :] (width elements each; src rows src_stride apart, dst contiguous).
void gather_rows(DType dtype, const void* src, int64_t src_stride, const int32_t* rows, int32_t n_rows, int32_t width,
                 void* dst, Stream stream);

// Pre-norm of a Llama block. When x is not null, residual += x first (x in dtype, residual
// fp32). Then out = dtype(residual / rms(residual)) * weight, rounded to dtype as
// transformers' LlamaRMSNorm does.
void add_rms_norm(DType dtype, float* residual, const void* x, const void* weight, void* out, int32_t n_tokens,
                  int32_t hidden, float eps, Stream stream);

// Decode GEMV (src/gemv.cu): y[i, j] = sum_k x[i, k] · w[j, k] for m <= kGemvMaxRows rows of x,
// bf16/fp16, fp32 accumulation; the layouts of Gemm::matmul (w (n, k) contiguous, x and y row
// strides), beta = 0. A row of y is computed in an order that depends on k only, so it has the
// same bits whatever m is. gemv_refusal() says why a call cannot take it ("" when it can): fp32,
// m outside 1..kGemvMaxRows, k or x_stride not a multiple of 8, x or w not 16-byte aligned.
inline constexpr int32_t kGemvMaxRows = 8;
std::string gemv_refusal(DType dtype, const void* x, int64_t x_stride, const void* w, int32_t m, int32_t n, int32_t k);
void gemv(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m, int32_t n,
          int32_t k, Stream stream);
// The gated form for a fused gate/up weight w (2n, k), gate rows then up rows: y[i, j] =
// silu(x_i · w_j) * (x_i · w_{n+j}), the same bytes as gemv into a (m, 2n) buffer followed by
// silu_mul, with neither the buffer nor silu_mul's launch. Refused as gemv (gemv_refusal with n).
void gemv_swiglu(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride, int32_t m,
               int32_t n, int32_t k, Stream stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, intermediate + i]: the fused gate/up projection's
// output (n_tokens, 2 * intermediate) to the down projection's input (n_tokens, intermediate).
void silu_mul(DType dtype, const void* gate_up, void* out, int32_t n_tokens, int32_t intermediate, Stream stream);

// RoPE (rotate-half pairs (i, i + head_dim/2), angle = float(position) * inv_freq[i]) applied
// in place to q, and to k on its way into the cache; v goes into the cache as it is.
struct RopeKvArgs {
  DType dtype = DType::kBF16;
  void* q = nullptr;              // (n_tokens, num_heads * head_dim), row stride q_stride elements
  int64_t q_stride = 0;
  const void* k = nullptr;        // (n_tokens, num_kv_heads * head_dim)
  int64_t k_stride = 0;
  const void* v = nullptr;
  int64_t v_stride = 0;
  const int32_t* positions = nullptr;  // (n_tokens)
  const int32_t* slots = nullptr;      // (n_tokens); a negative slot skips the token's K/V write
  const float* inv_freq = nullptr;     // (head_dim / 2)
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int32_t n_tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
};
void rope_write_kv(const RopeKvArgs& args, Stream stream);

// The q/k/v projection of m = args.n_tokens <= kGemvMaxRows rows of x on the GEMV kernel, fused
// with rope_write_kv: w is the (q + 2 kv, k) weight of q's, k's and v's rows; args.q, k and v
// must lie side by side in one buffer (the projection's output, row stride args.q_stride). The
// same bytes as gemv into that buffer followed by rope_write_kv (q rotated in place, k and v
// left as projected, the rotated k and v in their cache slots), in one launch that neither
// reads nor writes the buffer between. Refused (CudaError) as gemv refuses, or for a layout
// other than that.
void gemv_qkv_rope(const RopeKvArgs& args, const void* x, int64_t x_stride, const void* w, int32_t k, Stream stream);

// Copies whole blocks (K and V of one layer): for each i, block dst[i] = block src[i].
void copy_blocks(DType dtype, void* k_cache, void* v_cache, const int32_t* src, const int32_t* dst, int32_t n_pairs,
                 int64_t block_elems, Stream stream);

// One query token per sequence (decode) over its paged KV, split-K: each sequence's context is
// cut into about 16 partitions of 64 to kDecodePartition tokens (a power of two that depends
// on that context alone), each scored by its own thread block for every query head of one KV
// head (GQA), then a second kernel merges the partitions' softmax statistics. Two kernels score
// a partition: on tensor cores (bf16/fp16, head_dim a multiple of 16 up to 128: the group's
// query heads are the rows of an mma tile, K and V come through shared memory by cp.async) and
// on CUDA cores (everything else, fp32 included).
inline constexpr int32_t kDecodePartition = 512;  // the largest partition

// Which decode kernel scores the partitions: kAuto takes the tensor cores where they apply;
// the other two force one (a benchmark's comparison, a check of both). kTensorCores throws
// where it does not apply.
enum class DecodeKernel { kAuto, kCudaCores, kTensorCores };
// Who merges the tensor-core decode kernel's partitions when it is given counters.
enum class DecodeMerge { kAuto, kInKernel, kReduce };

// What both attention kernels read: the query and output rows, the paged KV cache and the
// heads' shape.
struct PagedAttentionArgs {
  DType dtype = DType::kBF16;
  const void* q = nullptr;               // (rows, num_heads * head_dim), row stride q_stride
  int64_t q_stride = 0;
  void* out = nullptr;                   // (rows, num_heads * head_dim), row stride out_stride
  int64_t out_stride = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_tables = nullptr; // (sequences, block_table_stride) block ids
  int32_t block_table_stride = 0;
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;
};

// One query row per sequence (rows = n_seqs).
struct DecodeAttentionArgs : PagedAttentionArgs {
  const int32_t* context_lens = nullptr; // (n_seqs) keys each query attends to, itself included; 0: out = 0
  int32_t n_seqs = 0;
  int32_t max_context = 0;               // >= every context_lens[i]; sizes the grid (fixed under a CUDA graph)
  float* workspace = nullptr;            // decode_attention_workspace_floats(...) floats, 16-byte aligned
  DecodeKernel kernel = DecodeKernel::kAuto;
  // The tensor-core kernel's thread blocks per (KV head, sequence) along the context, each
  // scoring every grid_partitions-th partition: 0 = chosen from the batch and the GPU (every
  // partition of max_context its own block until the batch fills the GPU, never under 16);
  // capped at max_context's partitions. The result does not depend on it. The CUDA-core kernel
  // always has a block per partition of max_context.
  int32_t grid_partitions = 0;
  // (n_seqs, num_kv_heads) int32, all 0 before the first call; every call leaves them 0. Given,
  // the tensor-core kernel's last block to finish a (sequence, KV head) may merge its partitions
  // itself (a grid-wide count of finished partitions), so that no reduce kernel runs after it
  // (`merge`). Null, or the CUDA-core kernel: a reduce kernel merges them. The same bits either way.
  int32_t* counters = nullptr;
  // With counters: kInKernel always merges in the kernel, kReduce never; kAuto only while the
  // batch's (sequence, KV head) pairs, at about 16 partitions each, are at most 2 blocks an SM
  // of this GPU. On an H200 the in-kernel merge saved 0.6-0.8 us a layer at 1 sequence, while
  // from 8 sequences at 1k tokens the merging blocks' tails cost 1.6-54 us more than the reduce
  // kernel (bench_cuda_attention, docs/cuda-notes.md).
  DecodeMerge merge = DecodeMerge::kAuto;
};
int64_t decode_attention_workspace_floats(int32_t n_seqs, int32_t num_heads, int32_t head_dim, int32_t max_context);
void decode_attention(const DecodeAttentionArgs& args, Stream stream);
// The kernel decode_attention would run for these arguments: "tensor cores" or "CUDA cores".
const char* decode_attention_kernel(const DecodeAttentionArgs& args);

// Causal attention for prompt chunks over paged KV (their own K/V already written by
// rope_write_kv): query j of a slice sits at position start_pos + j and attends to keys
// [0, start_pos + j]. Slices' query rows are concatenated in q and out.
// rows = every slice's query rows; block_tables has one row per slice.
struct PrefillAttentionArgs : PagedAttentionArgs {
  const int32_t* query_start = nullptr;  // (n_slices + 1) first row of each slice; the last is the total
  const int32_t* start_pos = nullptr;    // (n_slices) position of each slice's first query
  int32_t n_slices = 0;
  int32_t max_query_len = 0;             // >= every slice's row count; sizes the grid
};
void prefill_attention(const PrefillAttentionArgs& args, Stream stream);

}  // namespace strata::cuda
