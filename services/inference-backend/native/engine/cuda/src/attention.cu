// Paged attention: decode (one query per sequence, split-K over the context) and prefill
// (causal, a tile of queries per thread block, online softmax over key tiles). Both read K and V
// straight from the paged cache through the block table; scores and accumulators are fp32.
#include <mma.h>

#include <algorithm>
#include <string>

#include "device_common.cuh"
#include "mma_primitives.cuh"

namespace strata::cuda {

namespace {

constexpr int kMaxGroup = 8;  // query heads per KV head the kernels are built for (Llama-3-70B: 8)

void require(bool ok, const std::string& what) {
  if (!ok) throw CudaError(what);
}

// 16 bytes of T as floats, unpacked from the loaded words with bit operations (taking the
// address of the loaded vector would put it on the stack).
__device__ __forceinline__ float low_half(uint32_t w, __nv_bfloat16*) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float high_half(uint32_t w, __nv_bfloat16*) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float low_half(uint32_t w, __half*) { return __half2float(__ushort_as_half(w & 0xffffu)); }
__device__ __forceinline__ float high_half(uint32_t w, __half*) { return __half2float(__ushort_as_half(w >> 16)); }

// 16 bytes of T (kVec values) as floats.
template <typename T, int N>
__device__ __forceinline__ void unpack_vec(const uint4 raw, float (&dst)[N]) {
  static_assert(N * sizeof(T) == 16, "16-byte loads");
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      dst[i] = __uint_as_float(words[i]);
    } else {
      dst[2 * i] = low_half(words[i], static_cast<T*>(nullptr));
      dst[2 * i + 1] = high_half(words[i], static_cast<T*>(nullptr));
    }
  }
}

template <typename T, int N>
__device__ __forceinline__ void load_vec(const T* src, float (&dst)[N]) {
  unpack_vec<T>(*reinterpret_cast<const uint4*>(src), dst);
}

// ---------------------------------------------------------------------------------------------
// Decode. Grid (partitions, kv heads, sequences), kDecodeThreads threads. A thread group of
// kLanes = head_dim / kVec consecutive lanes holds one token's key or value row (16 bytes a
// lane), so the block works on kThreads / kLanes tokens at a time, kDecodeUnroll such rows in
// flight per thread; scores go to shared memory, then each group accumulates its tokens'
// values and the groups' partial sums are added.
//
// Flash-decoding's split: a sequence's context is cut into about kDecodeTargetPartitions
// partitions of 64 to kDecodePartition (512) tokens, a power of two chosen from that sequence's
// own context alone (so its result does not depend on the batch it is in). At batch 1 and 1k
// tokens that is 16 partitions per KV head, 128 blocks for Llama-3-8B's 8 KV heads, where
// 512-token partitions gave 16 blocks for 132 SMs.

constexpr int kDecodeThreads = 128;
constexpr int kDecodeUnroll = 4;  // key or value rows each thread has in flight
constexpr int32_t kDecodeMinPartition = 64;
constexpr int32_t kDecodeTargetPartitions = 16;

// The partition size of a sequence with `context` tokens.
__host__ __device__ inline int32_t decode_partition_size(int32_t context) {
  int32_t size = kDecodeMinPartition;
  while (size < kDecodePartition && size * kDecodeTargetPartitions < context) size *= 2;
  return size;
}

// The most partitions any context up to max_context is cut into: the grid's x and the
// workspace's stride. Under 16 * 512 tokens it is at most 16, past it ceil(context / 512).
__host__ __device__ inline int32_t decode_max_partitions(int32_t max_context) {
  const int32_t m = max_context > 1 ? max_context : 1;
  const int32_t small = (m + kDecodeMinPartition - 1) / kDecodeMinPartition;
  const int32_t large = (m + kDecodePartition - 1) / kDecodePartition;
  const int32_t capped = small < kDecodeTargetPartitions ? small : kDecodeTargetPartitions;
  return capped > large ? capped : large;
}

// PagedAttentionArgs, typed: what both attention kernels read.
template <typename T>
struct PagedParams {
  const T* q;
  int64_t q_stride;
  T* out;
  int64_t out_stride;
  const T* k_cache;
  const T* v_cache;
  const int32_t* block_tables;
  int32_t block_table_stride;
  int32_t num_heads, num_kv_heads, block_size;
  float scale;
};

template <typename T>
PagedParams<T> paged_params(const PagedAttentionArgs& a) {
  return {static_cast<const T*>(a.q),       a.q_stride,      static_cast<T*>(a.out), a.out_stride,
          static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache),      a.block_tables,
          a.block_table_stride,             a.num_heads,     a.num_kv_heads,         a.block_size,
          a.scale};
}

template <typename T>
struct DecodeParams : PagedParams<T> {
  const int32_t* context_lens;
  int32_t max_context;     // contexts are cut to this (a broken precondition) rather than overrun
  int32_t max_partitions;  // decode_max_partitions(max_context): the workspace's stride
  float* ws_max;  // (n_seqs, num_heads, max_partitions)
  float* ws_sum;  // same
  float* ws_out;  // (n_seqs, num_heads, max_partitions, head_dim), 16-byte aligned
  // (n_seqs, num_kv_heads) partitions scored so far, or null: the tensor-core kernel's last block
  // of a (sequence, KV head) then merges the partitions itself (and sets its count back to 0)
  // instead of decode_reduce_kernel.
  int32_t* counters;
};

// What a decode block scores, from blockIdx = (·, KV head, sequence): partition blockIdx.x of
// the sequence's context (the CUDA-core kernel), or partitions blockIdx.x, blockIdx.x +
// gridDim.x, ... (the tensor-core kernel, whose grid's width is decode_grid_partitions'
// choice), each keys [first, last). A partition's result does not depend on which block
// scores it.
struct DecodeBlock {
  int32_t seq, kv_head, context, size, group, num_partitions;
  int32_t partition = 0, first = 0, last = 0;  // the partition being scored (select)

  // False when the sequence has no context (a padding row: the reduce writes its zeros).
  template <typename T>
  __device__ bool init(const DecodeParams<T>& p) {
    seq = blockIdx.z;
    kv_head = blockIdx.y;
    context = min(p.context_lens[seq], p.max_context);
    if (context <= 0) return false;
    size = decode_partition_size(context);
    group = p.num_heads / p.num_kv_heads;
    num_partitions = (context + size - 1) / size;
    return true;
  }
  __device__ void select(int32_t part) {
    partition = part;
    first = part * size;
    last = min(context, first + size);
  }

  // Dim d of query head `head`: the output itself when the context is one partition, else the
  // partition's unnormalised sum and its statistics (max in natural-log units) for the reduce.
  template <typename T, int D>
  __device__ void write(const DecodeParams<T>& p, int32_t head, int d, float total, float max_stat, float sum_stat) const {
    if (num_partitions == 1) {
      p.out[int64_t{seq} * p.out_stride + int64_t{head} * D + d] = from_float<T>(total / sum_stat);
      return;
    }
    const int64_t at = (int64_t{seq} * p.num_heads + head) * p.max_partitions + partition;
    p.ws_out[at * D + d] = total;
    if (d == 0) {
      p.ws_max[at] = max_stat;
      p.ws_sum[at] = sum_stat;
    }
  }
};

// G: the most query heads per KV head this instance handles (4 or kMaxGroup), which sizes the
// per-thread query and accumulator arrays: Llama-3-8B's 4 need half the registers of 8.
template <typename T, int D, int G>
__global__ void __launch_bounds__(kDecodeThreads) decode_partition_kernel(DecodeParams<T> p) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kLanes = D / kVec;  // lanes per token row; a power of two <= 32
  constexpr int kGroups = kDecodeThreads / kLanes;
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "head_dim / vec must be 1..32, 2^n");

  __shared__ float scores[G][kDecodePartition];
  __shared__ float reduce_buf[kGroups * D];
  __shared__ float stat_max[G], stat_sum[G];

  DecodeBlock blk{};
  if (!blk.init(p) || int32_t(blockIdx.x) >= blk.num_partitions) return;  // the reduce reads only its own
  blk.select(blockIdx.x);  // one partition a block: the grid is as wide as max_context's partitions
  const int32_t seq = blk.seq, kv_head = blk.kv_head, first = blk.first, last = blk.last, group = blk.group;
  const int32_t n = last - first;

  const int tid = threadIdx.x, token_group = tid / kLanes, lane = tid % kLanes;
  const int32_t* table = p.block_tables + int64_t{seq} * p.block_table_stride;
  const int64_t head_stride = int64_t{p.block_size} * D;  // one head's slab inside a block
  const int64_t block_stride = head_stride * p.num_kv_heads;
  // 16 bytes of token t's key or value row for this lane, or zeros past the partition.
  const auto row = [&](const T* cache, int32_t t) {
    if (t >= last) return make_uint4(0, 0, 0, 0);
    const int64_t block = table[t / p.block_size];
    return *reinterpret_cast<const uint4*>(cache + block * block_stride + kv_head * head_stride +
                                           int64_t{t % p.block_size} * D + lane * kVec);
  };

  // This lane's slice of every query head of the group, pre-scaled.
  float q[G][kVec];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < group) {
      load_vec(p.q + int64_t{seq} * p.q_stride + int64_t{kv_head * group + g} * D + lane * kVec, q[g]);
#pragma unroll
      for (int i = 0; i < kVec; ++i) q[g][i] *= p.scale;
    }
  }

  // Scores, kDecodeUnroll key rows loaded before the first is used. Every lane of a warp runs
  // the same iterations (the shuffles need all 32).
  for (int32_t base = first; base < last; base += kGroups * kDecodeUnroll) {
    uint4 raw[kDecodeUnroll];
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) raw[u] = row(p.k_cache, base + u * kGroups + token_group);
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const int32_t t = base + u * kGroups + token_group;
      float k[kVec];
      unpack_vec<T>(raw[u], k);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g < group) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < kVec; ++i) dot += q[g][i] * k[i];
#pragma unroll
          for (int offset = kLanes / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
          if (t < last && lane == 0) scores[g][t - first] = dot;
        }
      }
    }
  }
  __syncthreads();

  // Softmax statistics of this partition, one warp per query head.
  const int warp = tid / 32, wlane = tid % 32;
  for (int g = warp; g < group; g += kDecodeThreads / 32) {
    float m = -INFINITY;
    for (int32_t i = wlane; i < n; i += 32) m = fmaxf(m, scores[g][i]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int32_t i = wlane; i < n; i += 32) {
      const float e = expf(scores[g][i] - m);
      scores[g][i] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    if (wlane == 0) {
      stat_max[g] = m;
      stat_sum[g] = sum;
    }
  }
  __syncthreads();

  // Weighted values: each group sums its tokens for its kVec dims of every query head, with
  // kDecodeUnroll value rows in flight.
  float acc[G][kVec] = {};
  for (int32_t base = first + token_group; base < last; base += kGroups * kDecodeUnroll) {
    uint4 raw[kDecodeUnroll];
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) raw[u] = row(p.v_cache, base + u * kGroups);
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const int32_t t = base + u * kGroups;
      if (t >= last) break;
      float v[kVec];
      unpack_vec<T>(raw[u], v);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g < group) {
          const float w = scores[g][t - first];
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[g][i] += w * v[i];
        }
      }
    }
  }

  // Add the groups' partial sums, one query head at a time, and write them out.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < group) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) reduce_buf[token_group * D + lane * kVec + i] = acc[g][i];
      __syncthreads();
      const int32_t head = kv_head * group + g;
      for (int d = tid; d < D; d += kDecodeThreads) {
        float total = 0.0f;
        for (int r = 0; r < kGroups; ++r) total += reduce_buf[r * D + d];
        blk.write<T, D>(p, head, d, total, stat_max[g], stat_sum[g]);
      }
      __syncthreads();  // reduce_buf is reused by the next head
    }
  }
}

// Merges a sequence's num_partitions partitions for query heads head0 .. head0 + count - 1:
// out = sum_p w_p o_p with w_p = e^(m_p - M) / sum_q e^(m_q - M) l_q, added in partition order.
// Every thread of the block calls it (it has barriers). A warp per head turns the partitions'
// maxima and sums into the weights (`weights`: count × num_partitions floats of shared memory),
// then the block's threads take the heads' outputs 4 columns at a time, reading 8 partitions'
// 16 bytes before adding any: the merge is a few L2 round trips, whether one block merges one
// head (decode_reduce_kernel) or a KV head's group (decode_mma_kernel's last block). The partials
// are read past L1: other blocks of the same kernel may have written them.
template <typename T, int D>
__device__ void merge_partitions(const DecodeParams<T>& p, int32_t seq, int32_t head0, int32_t count,
                                 int32_t num_partitions, float* weights) {
  static_assert(D % 4 == 0, "head_dim is a whole number of 16-byte vectors");
  constexpr int kVecs = D / 4;
  constexpr int kInFlight = 8;
  const int32_t lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int64_t head_base = (int64_t{seq} * p.num_heads + head0) * p.max_partitions;
  for (int32_t r = threadIdx.x / 32; r < count; r += warps) {
    const int64_t base = head_base + int64_t{r} * p.max_partitions;
    float* w = weights + r * num_partitions;
    float m = -INFINITY;
    for (int32_t i = lane; i < num_partitions; i += 32) m = fmaxf(m, load_cg(p.ws_max + base + i));
    m = warp_max(m);
    float l = 0.0f;
    for (int32_t i = lane; i < num_partitions; i += 32) {
      w[i] = expf(load_cg(p.ws_max + base + i) - m);
      l += w[i] * load_cg(p.ws_sum + base + i);
    }
    const float inv = 1.0f / warp_sum(l);
    for (int32_t i = lane; i < num_partitions; i += 32) w[i] *= inv;
  }
  __syncthreads();
  for (int32_t i = threadIdx.x; i < count * kVecs; i += blockDim.x) {
    const int32_t r = i / kVecs, v = i % kVecs;
    const float4* src = reinterpret_cast<const float4*>(p.ws_out + (head_base + int64_t{r} * p.max_partitions) * D) + v;
    const float* w = weights + r * num_partitions;
    float4 total = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const auto add = [&](float weight, float4 x) {
      total.x += weight * x.x;
      total.y += weight * x.y;
      total.z += weight * x.z;
      total.w += weight * x.w;
    };
    int32_t part = 0;
    for (; part + kInFlight <= num_partitions; part += kInFlight) {
      float4 x[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) x[k] = load_cg(src + int64_t{part + k} * kVecs);
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) add(w[part + k], x[k]);
    }
    for (; part < num_partitions; ++part) add(w[part], load_cg(src + int64_t{part} * kVecs));
    T* out = p.out + int64_t{seq} * p.out_stride + int64_t{head0 + r} * D + 4 * v;
    out[0] = from_float<T>(total.x);
    out[1] = from_float<T>(total.y);
    out[2] = from_float<T>(total.z);
    out[3] = from_float<T>(total.w);
  }
  __syncthreads();  // `weights` may be reused at once
}

// Zeros for query head `head` of a sequence with no context (a padding row).
template <typename T, int D>
__device__ void write_zeros(const DecodeParams<T>& p, int32_t seq, int32_t head) {
  T* out = p.out + int64_t{seq} * p.out_stride + int64_t{head} * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) out[d] = from_float<T>(0.0f);
}

// The partitions merged by a kernel of their own: grid (query heads, sequences).
template <typename T, int D>
__global__ void __launch_bounds__(kDecodeThreads) decode_reduce_kernel(DecodeParams<T> p, uint32_t pdl) {
  extern __shared__ float weights[];  // (max_partitions, rounded up to 4) the partitions' weights
  grid_dependency_sync(pdl);
  const int32_t seq = blockIdx.y, head = blockIdx.x;
  const int32_t context = min(p.context_lens[seq], p.max_context);
  if (context <= 0) {  // nothing to attend to: a padding row
    write_zeros<T, D>(p, seq, head);
    return;
  }
  const int32_t size = decode_partition_size(context);
  const int32_t num_partitions = (context + size - 1) / size;
  if (num_partitions == 1) return;  // the partition kernel wrote the output itself
  merge_partitions<T, D>(p, seq, head, 1, num_partitions, weights);
}

// Decode on tensor cores (bf16/fp16, head_dim 16 to 128 in whole 16-wide mma steps): the same
// partitions and workspace as decode_partition_kernel, and the same reduce after it; its grid
// may be narrower than the partitions (decode_grid_partitions), a block then looping over them.
// The group's query heads are rows 0..group-1 of a 16-row mma tile (the rest are zeros), so a
// 16-key step costs 2 × D/16 mma.sync for the scores and D/8 for P·V, where the CUDA-core
// kernel spends about 2 × group × D FMAs per key and lane-group shuffles per score. Each of the
// 4 warps takes every 4th 16-key tile of the partition (so a 64-token partition is one tile a
// warp) and streams its tiles' K and V rows into its own shared memory by cp.async, one or two
// tiles deep, with an online softmax in registers as in prefill_fa_kernel (scores as
// accumulators, probabilities re-used as A fragments, P rounded to the dtype before P·V). The 4
// warps' partial results are merged through shared memory at the end. Nothing depends on the
// batch: a sequence's partitions, tiles and merge order come from its own context.
constexpr int kDmWarps = 4;
constexpr int kDmKeys = 16;  // keys per warp tile: one 16-key step of P·V

// Shared memory of one block: every warp's staged K and V tiles, `stages` deep (1 or 2). The
// merge at the end reuses it (4 warps × 8 rows × D floats and their statistics fit in one stage).
template <typename T, int D>
constexpr size_t decode_mma_shared_bytes(int stages) {
  return size_t(kDmWarps) * stages * 2 * kDmKeys * (D + 8) * sizeof(T);
}

template <typename T, int D>
__global__ void __launch_bounds__(kDmWarps * 32) decode_mma_kernel(DecodeParams<T> p, int stages, uint32_t pdl) {
  static_assert(D % 16 == 0 && D <= 128, "head_dim 16..128, whole 16-wide mma steps");
  constexpr int kStride = D + 8;  // a staged row, padded by 16 bytes against bank conflicts
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kRowChunks = D / kVec;
  constexpr int kTileElems = kDmKeys * kStride;
  extern __shared__ float4 dm_smem4[];
  grid_dependency_sync(pdl);

  DecodeBlock blk{};
  if (!blk.init(p)) {  // a padding row: with no reduce kernel after this one, its zeros are written here
    if (p.counters != nullptr && blockIdx.x == 0) {
      const int32_t group = p.num_heads / p.num_kv_heads;
      for (int32_t r = 0; r < group; ++r) write_zeros<T, D>(p, blockIdx.z, blockIdx.y * group + r);
    }
    return;
  }
  const int32_t seq = blk.seq, kv_head = blk.kv_head, group = blk.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int32_t* table = p.block_tables + int64_t{seq} * p.block_table_stride;
  const int64_t head_stride = int64_t{p.block_size} * D;
  const int64_t block_stride = head_stride * p.num_kv_heads;
  T* const staged = reinterpret_cast<T*>(dm_smem4) + warp * stages * 2 * kTileElems;  // this warp's own
  const float scale_log2 = p.scale * 1.4426950408889634f;  // softmax through exp2

  // Row g of the A fragments is query head kv_head * group + g; rows past the group and rows
  // 8..15 are zeros (their scores are never used).
  uint32_t qa[D / 16][2];  // a[0] and a[2] of each k-step; a[1] = a[3] = 0
  {
    const T* q = p.q + int64_t{seq} * p.q_stride + int64_t{kv_head * group + g} * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = g < group ? *reinterpret_cast<const uint32_t*>(q + kk * 16 + 2 * t) : 0u;
      qa[kk][1] = g < group ? *reinterpret_cast<const uint32_t*>(q + kk * 16 + 2 * t + 8) : 0u;
    }
  }

  // This warp's tiles of a partition: w, w + 4, ... of its ceil(n / 16); keys past its last are
  // zeros (a zero V row keeps 0 · V finite) and masked out of the scores.
  // Tiles start at multiples of 16 from the partition's start (a multiple of 64): with a block
  // size that is a multiple of 16 a tile lies in one KV block, found once a tile.
  const bool tile_in_block = p.block_size % kDmKeys == 0;
  const auto stage = [&](int s, int32_t key0) {
    T* ks = staged + 2 * s * kTileElems;
    T* vs = ks + kTileElems;
    const int64_t tile_at = tile_in_block ? int64_t{table[key0 / p.block_size]} * block_stride + kv_head * head_stride +
                                                int64_t{key0 % p.block_size} * D
                                          : 0;
    // Not unrolled: the copies are asynchronous, a loop issues them all the same, and an
    // unrolled one holds every address in registers (160 of them at head_dim 128).
#pragma unroll 1
    for (int i = lane; i < kDmKeys * kRowChunks; i += 32) {
      const int j = i / kRowChunks, c = (i % kRowChunks) * kVec;
      const int32_t key = key0 + j;
      const bool valid = key < blk.last;
      int64_t at = 0;
      if (valid) {
        at = tile_in_block ? tile_at + int64_t{j} * D + c
                           : int64_t{table[key / p.block_size]} * block_stride + kv_head * head_stride +
                                 int64_t{key % p.block_size} * D + c;
      }
      cp_async16(ks + j * kStride + c, p.k_cache + at, valid);
      cp_async16(vs + j * kStride + c, p.v_cache + at, valid);
    }
    cp_async_commit();
  };

#pragma unroll 1
  for (int32_t part = blockIdx.x; part < blk.num_partitions; part += gridDim.x) {
    blk.select(part);
    const int32_t first = blk.first, last = blk.last;
    const int32_t n_tiles = (last - first + kDmKeys - 1) / kDmKeys;
    const int32_t my_tiles = warp < n_tiles ? (n_tiles - warp + kDmWarps - 1) / kDmWarps : 0;

    // Row g's running max (log2 units, the same in its 4 lanes), this lane's part of its sum, and
    // its output columns dn * 8 + 2t, 2t + 1.
    float row_max = -INFINITY, row_sum = 0.0f;
    float o[D / 8][2] = {};
    if (my_tiles > 0) stage(0, first + warp * kDmKeys);
    for (int32_t it = 0; it < my_tiles; ++it) {
      const int32_t key0 = first + (warp + it * kDmWarps) * kDmKeys;
      const int32_t next = key0 + kDmWarps * kDmKeys;
      if (stages > 1 && it + 1 < my_tiles) {
        stage((it + 1) % 2, next);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncwarp();  // every lane's copies of this tile are in shared memory
      const T* ks = staged + 2 * (stages > 1 ? it % 2 : 0) * kTileElems;
      const T* vs = ks + kTileElems;

      // Scores: (16, 16) = Q (16, D) · Kᵀ, two 8-key tiles. B[k][n] = K[key n][dim k].
      float sc[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const T* krow = ks + (nt * 8 + g) * kStride + kk * 16 + 2 * t;
          mma16816<T>(sc[nt], a, *reinterpret_cast<const uint32_t*>(krow), *reinterpret_cast<const uint32_t*>(krow + 8),
                      sc[nt]);
        }
      }
      // Keys past the partition masked, scaled; the tile's max for row g across its 4 lanes (the
      // tile's first key is always inside, so the max is finite).
      float tile_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int32_t key = key0 + nt * 8 + 2 * t + e;
          sc[nt][e] = key < last ? sc[nt][e] * scale_log2 : -INFINITY;
          tile_max = fmaxf(tile_max, sc[nt][e]);
        }
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(row_max, tile_max);
      const float rescale = exp2f(row_max - new_max);  // 0 on the first tile (row_max = -inf)
      row_max = new_max;
      const float p00 = exp2f(sc[0][0] - new_max), p01 = exp2f(sc[0][1] - new_max);
      const float p10 = exp2f(sc[1][0] - new_max), p11 = exp2f(sc[1][1] - new_max);
      row_sum = row_sum * rescale + (p00 + p01 + p10 + p11);
      // P as the A fragment of one 16-key step: keys 2t, 2t + 1 (8-key tile 0) and 8 + 2t, 9 + 2t
      // (tile 1) of row g; rows 8..15 zero.
      const uint32_t pa[4] = {pack2<T>(p00, p01), 0u, pack2<T>(p10, p11), 0u};
      // Output: (16, D) += P (16, 16) · V (16, D). B[k][n] = V[key k][dim n], transposed by ldmatrix.
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        uint32_t b0, b1;
        ldmatrix_x2_trans(b0, b1, vs + (lane % 16) * kStride + dn * 8);
        float acc[4] = {o[dn][0] * rescale, o[dn][1] * rescale, 0.0f, 0.0f};
        mma16816<T>(acc, pa, b0, b1, acc);
        o[dn][0] = acc[0];
        o[dn][1] = acc[1];
      }
      __syncwarp();  // every lane is done with this stage before it is refilled
      if (stages == 1 && it + 1 < my_tiles) stage(0, next);
    }

    // Merge the 4 warps: each writes row g's max, sum and output to shared memory (over the
    // staged tiles, once every warp is done with them), then the block adds them up per row.
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
    float* const mo = reinterpret_cast<float*>(dm_smem4);  // (warps, 8 rows, D)
    float* const mm = mo + kDmWarps * 8 * D;                // (warps, 8)
    float* const ml = mm + kDmWarps * 8;                    // (warps, 8)
    __syncthreads();
    if (g < group) {
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        mo[(warp * 8 + g) * D + dn * 8 + 2 * t] = o[dn][0];
        mo[(warp * 8 + g) * D + dn * 8 + 2 * t + 1] = o[dn][1];
      }
      if (t == 0) {
        mm[warp * 8 + g] = row_max;
        ml[warp * 8 + g] = row_sum;
      }
    }
    __syncthreads();
    for (int i = tid; i < group * D; i += kDmWarps * 32) {
      const int r = i / D, d = i % D;
      float m = -INFINITY;
#pragma unroll
      for (int w = 0; w < kDmWarps; ++w) m = fmaxf(m, mm[w * 8 + r]);  // warp 0 always saw a key
      float total = 0.0f, sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kDmWarps; ++w) {
        const float weight = exp2f(mm[w * 8 + r] - m);  // 0 for a warp without tiles (max -inf)
        total += weight * mo[(w * 8 + r) * D + d];
        sum += weight * ml[w * 8 + r];
      }
      blk.write<T, D>(p, kv_head * group + r, d, total, m * 0.6931471805599453f /* log2 to natural-log units */, sum);
    }
    __syncthreads();  // the next partition's copies reuse the merge's shared memory
  }

  // With counters, the last block of this (sequence, KV head) to finish merges the partitions
  // for the group's query heads: each block's partials are made visible device-wide before it
  // counts them, and the one whose count completes the partitions reads them all.
  if (p.counters == nullptr || blk.num_partitions == 1 || int32_t(blockIdx.x) >= blk.num_partitions) return;
  __shared__ bool merges;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const int32_t mine = (blk.num_partitions - int32_t(blockIdx.x) + int32_t(gridDim.x) - 1) / int32_t(gridDim.x);
    int32_t* counter = p.counters + int64_t{seq} * p.num_kv_heads + kv_head;
    merges = atomicAdd(counter, mine) + mine == blk.num_partitions;
    if (merges) *counter = 0;  // every other block of the pair has counted: ready for the next call
  }
  __syncthreads();
  if (!merges) return;
  __threadfence();
  // The group's weights live in the staged tiles' shared memory, no longer read.
  merge_partitions<T, D>(p, seq, kv_head * group, group, blk.num_partitions, reinterpret_cast<float*>(dm_smem4));
}

// ---------------------------------------------------------------------------------------------
// Prefill. Grid (query tiles, query heads, slices), 128 threads = 4 warps of 8 query rows each.
// Per key tile: K and V rows go to shared memory (K padded against bank conflicts), lane j
// scores key j for the warp's rows, an online softmax rescales, then lanes own head dims of the
// output rows. fp32 on CUDA cores: correct first; the tensor-core version comes with the GPU.

constexpr int kPrefillThreads = 128;
constexpr int kPrefillQueries = 32;  // query rows per block
constexpr int kPrefillKeys = 32;     // keys per tile: one per lane
constexpr int kRowsPerWarp = kPrefillQueries / (kPrefillThreads / 32);

template <typename T>
struct PrefillParams : PagedParams<T> {
  const int32_t* query_start;
  const int32_t* start_pos;
};

// The slice, query tile and KV head a prefill block works on, and where a key of its KV head
// lives in the paged cache.
struct PrefillTile {
  int32_t row0, first, rows, start, kv_head, block_size, head_dim;
  const int32_t* table;
  int64_t head_stride, block_stride;

  // False when the tile starts past its slice's rows (the grid is sized for the longest slice).
  template <typename T>
  __device__ bool init(const PrefillParams<T>& p, int32_t queries, int32_t d) {
    const int32_t slice = blockIdx.z;
    row0 = p.query_start[slice];
    const int32_t n = p.query_start[slice + 1] - row0;
    first = blockIdx.x * queries;
    if (first >= n) return false;
    rows = min(queries, n - first);
    start = p.start_pos[slice];
    kv_head = blockIdx.y / (p.num_heads / p.num_kv_heads);
    block_size = p.block_size;
    head_dim = d;
    table = p.block_tables + int64_t{slice} * p.block_table_stride;
    head_stride = int64_t{p.block_size} * d;
    block_stride = head_stride * p.num_kv_heads;
    return true;
  }
  // Element offset of key (or value) t's row in one layer's cache.
  __device__ int64_t key(int32_t t) const {
    return int64_t{table[t / block_size]} * block_stride + kv_head * head_stride + int64_t{t % block_size} * head_dim;
  }
};

template <int D>
constexpr size_t prefill_shared_bytes() {
  return sizeof(float) * (kPrefillQueries * D + kPrefillKeys * (D + 1) + kPrefillKeys * D +
                          kPrefillQueries * kPrefillKeys);
}

template <typename T, int D>
__global__ void __launch_bounds__(kPrefillThreads) prefill_kernel(PrefillParams<T> p) {
  extern __shared__ float smem[];
  float* qs = smem;                               // (queries, D), pre-scaled
  float* ks = qs + kPrefillQueries * D;           // (keys, D + 1)
  float* vs = ks + kPrefillKeys * (D + 1);        // (keys, D)
  float* ps = vs + kPrefillKeys * D;              // (queries, keys) probabilities of this tile

  const int32_t head = blockIdx.y;
  PrefillTile tile{};
  if (!tile.init(p, kPrefillQueries, D)) return;
  const int32_t row0 = tile.row0, tile_first = tile.first, tile_rows = tile.rows, start = tile.start;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  for (int i = tid; i < kPrefillQueries * D; i += kPrefillThreads) {
    const int r = i / D, d = i % D;
    qs[i] = r < tile_rows
                ? to_float(p.q[int64_t{row0 + tile_first + r} * p.q_stride + int64_t{head} * D + d]) * p.scale
                : 0.0f;
  }

  constexpr int kDimsPerLane = D >= 32 ? D / 32 : 1;
  float acc[kRowsPerWarp][kDimsPerLane] = {};
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }

  // Keys up to the tile's last query position, inclusive.
  const int32_t kv_end = start + tile_first + tile_rows;
  for (int32_t kv_first = 0; kv_first < kv_end; kv_first += kPrefillKeys) {
    __syncthreads();  // the previous tile's ks/vs are no longer read (and qs is written)
    for (int i = tid; i < kPrefillKeys * D; i += kPrefillThreads) {
      const int j = i / D, d = i % D;
      const int32_t t = kv_first + j;
      float kval = 0.0f, vval = 0.0f;
      if (t < kv_end) {
        const int64_t at = tile.key(t) + d;
        kval = to_float(p.k_cache[at]);
        vval = to_float(p.v_cache[at]);
      }
      ks[j * (D + 1) + d] = kval;
      vs[j * D + d] = vval;
    }
    __syncthreads();

    const int32_t key = kv_first + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      // Query `row` sits at position start + tile_first + row; rows past the slice see nothing.
      const int32_t position = row < tile_rows ? start + tile_first + row : -1;
      float s = -INFINITY;
      if (key <= position) {
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; ++d) dot += qs[row * D + d] * ks[lane * (D + 1) + d];
        s = dot;
      }
      const float tile_max = warp_max(s);
      const float new_max = fmaxf(row_max[r], tile_max);
      // No key seen yet for this row (only rows past the slice): keep everything at zero.
      const float shift = new_max == -INFINITY ? 0.0f : new_max;
      const float prob = expf(s - shift);  // exp(-inf) = 0 for masked keys
      const float rescale = expf(row_max[r] - shift);
      row_sum[r] = row_sum[r] * rescale + warp_sum(prob);
      row_max[r] = new_max;
      ps[row * kPrefillKeys + lane] = prob;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) acc[r][i] *= rescale;
    }
    __syncwarp();  // the warp's ps rows are complete

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < D) {
          float total = 0.0f;
#pragma unroll 8
          for (int j = 0; j < kPrefillKeys; ++j) total += ps[row * kPrefillKeys + j] * vs[j * D + d];
          acc[r][i] += total;
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    if (row >= tile_rows) continue;
    T* o = p.out + int64_t{row0 + tile_first + row} * p.out_stride + int64_t{head} * D;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) o[d] = from_float<T>(acc[r][i] / row_sum[r]);
    }
  }
}

// Prefill on tensor cores (bf16/fp16, head_dim a multiple of 16): the same online softmax, with
// Q·Kᵀ and P·V as WMMA 16×16×16 products accumulated in fp32. Grid (query tiles of 64,
// query heads, slices), 4 warps of 16 query rows each. Per key tile the block stages K and V
// in shared memory; each warp scores its rows into shared memory, rescales its fp32 output
// rows there (the accumulator's register layout is opaque) and adds P·V. P is rounded to the
// dtype before the second product, as flash attention does.
constexpr int kMmaWarps = 4;
constexpr int kMmaQueries = 16 * kMmaWarps;
constexpr int kMmaKeys = 32;

template <typename T, int D>
constexpr size_t prefill_mma_shared_bytes() {
  return sizeof(T) * (kMmaQueries * D + 2 * kMmaKeys * D + kMmaQueries * kMmaKeys) +
         sizeof(float) * (kMmaQueries * kMmaKeys + kMmaQueries * D + 2 * kMmaQueries);
}

template <typename T, int D>
__global__ void __launch_bounds__(kMmaWarps * 32) prefill_mma_kernel(PrefillParams<T> p) {
  namespace wmma = nvcuda::wmma;
  static_assert(D % 16 == 0, "WMMA tiles are 16 wide");
  extern __shared__ float4 smem4[];
  // Every region starts on a multiple of 32 bytes, as WMMA loads and stores need.
  T* qs = reinterpret_cast<T*>(smem4);            // (64 queries, D)
  T* ks = qs + kMmaQueries * D;                   // (32 keys, D)
  T* vs = ks + kMmaKeys * D;                      // (32 keys, D)
  T* ps = vs + kMmaKeys * D;                      // (64 queries, 32 keys) probabilities
  float* ss = reinterpret_cast<float*>(ps + kMmaQueries * kMmaKeys);  // (64, 32) scores
  float* os = ss + kMmaQueries * kMmaKeys;        // (64, D) unnormalised output
  float* row_max = os + kMmaQueries * D;          // (64)
  float* row_sum = row_max + kMmaQueries;         // (64)

  const int32_t head = blockIdx.y;
  PrefillTile tile{};
  if (!tile.init(p, kMmaQueries, D)) return;
  const int32_t row0 = tile.row0, tile_first = tile.first, tile_rows = tile.rows, start = tile.start;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // Rows go to shared memory 16 bytes (kVec values) a thread at a time: head_dim, the cache's
  // rows and q_stride are multiples of 16 bytes (prefill_attention checks q_stride).
  constexpr int kVec = 16 / sizeof(T), kRowVecs = D / kVec;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int i = tid; i < kMmaQueries * kRowVecs; i += blockDim.x) {
    const int r = i / kRowVecs, c = i % kRowVecs;
    reinterpret_cast<uint4*>(qs)[i] =
        r < tile_rows ? *reinterpret_cast<const uint4*>(p.q + int64_t{row0 + tile_first + r} * p.q_stride +
                                                        int64_t{head} * D + c * kVec)
                      : zero;
  }
  for (int i = tid; i < kMmaQueries * D; i += blockDim.x) os[i] = 0.0f;
  for (int r = tid; r < kMmaQueries; r += blockDim.x) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }

  // This warp's rows; the keys any of them may see end at its last row's position.
  const int32_t warp_first = warp * 16;
  const int32_t warp_last_position = start + tile_first + min(warp_first + 15, tile_rows - 1);
  T* pw = ps + warp_first * kMmaKeys;
  float* sw = ss + warp_first * kMmaKeys;
  float* ow = os + warp_first * D;

  const int32_t kv_end = start + tile_first + tile_rows;  // keys up to the tile's last query, inclusive
  for (int32_t kv_first = 0; kv_first < kv_end; kv_first += kMmaKeys) {
    __syncthreads();  // the previous tile's ks/vs are read by every warp (and qs/os written)
    for (int i = tid; i < kMmaKeys * kRowVecs; i += blockDim.x) {
      const int j = i / kRowVecs, c = i % kRowVecs;
      const int32_t t = kv_first + j;
      uint4 k = zero, v = zero;
      if (t < kv_end) {
        const int64_t at = tile.key(t) + c * kVec;
        k = *reinterpret_cast<const uint4*>(p.k_cache + at);
        v = *reinterpret_cast<const uint4*>(p.v_cache + at);
      }
      reinterpret_cast<uint4*>(ks)[i] = k;
      reinterpret_cast<uint4*>(vs)[i] = v;
    }
    __syncthreads();
    // A warp whose rows are all past the slice, or all before this key tile, has nothing to add.
    if (warp_first >= tile_rows || kv_first > warp_last_position) continue;

    // Scores: (16, 32) = Q_w (16, D) · Kᵀ (D, 32).
    for (int n0 = 0; n0 < kMmaKeys; n0 += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < D; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
        wmma::load_matrix_sync(a, qs + warp_first * D + k0, D);
        wmma::load_matrix_sync(b, ks + n0 * D + k0, D);  // column j of Kᵀ is key j's row
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(sw + n0, acc, kMmaKeys, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per row, 16 keys each; the pair combines with one shuffle.
    {
      const int r = lane / 2, half = lane % 2;
      const int32_t row = warp_first + r;
      const int32_t position = row < tile_rows ? start + tile_first + row : -1;
      float s[16];
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        const int32_t key = kv_first + half * 16 + c;
        s[c] = key <= position ? sw[r * kMmaKeys + half * 16 + c] * p.scale : -INFINITY;
        tile_max = fmaxf(tile_max, s[c]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float old_max = row_max[row];
      const float new_max = fmaxf(old_max, tile_max);
      const float shift = new_max == -INFINITY ? 0.0f : new_max;
      const float rescale = expf(old_max - shift);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        const float e = expf(s[c] - shift);
        sum += e;
        pw[r * kMmaKeys + half * 16 + c] = from_float<T>(e);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d) ow[r * D + d] *= rescale;
      __syncwarp();  // both lanes of the row have read row_max before it changes
      if (half == 0) {
        row_max[row] = new_max;
        row_sum[row] = row_sum[row] * rescale + sum;
      }
    }
    __syncwarp();

    // Output: (16, D) += P_w (16, 32) · V (32, D), through the fp32 rows in shared memory.
    for (int n0 = 0; n0 < D; n0 += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, ow + n0, D, wmma::mem_row_major);
      for (int k0 = 0; k0 < kMmaKeys; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, pw + k0, kMmaKeys);
        wmma::load_matrix_sync(b, vs + k0 * D + n0, D);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(ow + n0, acc, D, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads();

  for (int i = tid; i < tile_rows * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    p.out[int64_t{row0 + tile_first + r} * p.out_stride + int64_t{head} * D + d] = from_float<T>(os[i] / row_sum[r]);
  }
}

// Flash-attention-2 style prefill on mma.sync m16n8k16 (bf16/fp16, head_dim 16 to 128): grid
// (query tiles of 64, query heads, slices), 4 warps of 16 query rows each. Unlike the WMMA
// kernel above, nothing of a warp's rows leaves its registers between key tiles: the queries
// are A fragments, the scores of a 64-key tile are mma accumulators, their online softmax is
// done in place (each row's max and sum across the 4 lanes that hold it), the probabilities
// become the next mma's A fragments as they are (the C layout of two 8-key tiles is the A
// layout of one 16-key step), and the output stays in fp32 accumulators to the end. K and V
// tiles come through shared memory with cp.async, two tiles deep, rows padded by 16 bytes (so
// ldmatrix's 8 rows hit distinct banks), and into fragments by ldmatrix, two n8 tiles' a load
// (V transposed). Only the tiles that reach past a warp's first row are masked. P is rounded
// to the dtype before the P·V product, as flash attention does; the row sums are of the fp32
// probabilities.
constexpr int kFaWarps = 4;
constexpr int kFaQueries = 16 * kFaWarps;
constexpr int kFaKeys = 64;
// Blocks an SM keeps. On sm_90 three of head_dim 128's 70 KB of staged tiles fit its shared
// memory, and 168 registers a thread (ptxas takes 171 unbounded, which allows two) let their 12
// warps in. sm_80's shared memory holds two, sm_89's one: there ptxas keeps its own choice
// (bounded to 168 it spills 24 bytes there, for no more blocks).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int kFaMinBlocks = 3;
#else
constexpr int kFaMinBlocks = 1;
#endif

template <typename T, int D>
constexpr size_t prefill_fa_shared_bytes() {
  return size_t{2} * 2 * kFaKeys * (D + 8) * sizeof(T);  // two stages of K and V tiles
}

template <typename T, int D>
__global__ void __launch_bounds__(kFaWarps * 32, kFaMinBlocks) prefill_fa_kernel(PrefillParams<T> p) {
  static_assert(D % 16 == 0 && D <= 128, "head_dim 16..128, whole 16-wide mma steps");
  constexpr int kStride = D + 8;                  // a staged row, padded
  constexpr int kVec = 16 / sizeof(T);            // values per 16-byte copy
  constexpr int kRowChunks = D / kVec;
  constexpr int kTileElems = kFaKeys * kStride;
  extern __shared__ float4 fa_smem4[];
  T* const staged = reinterpret_cast<T*>(fa_smem4);  // stage s: K at 2s tiles, V at 2s + 1

  const int32_t head = blockIdx.y;
  PrefillTile tile{};
  if (!tile.init(p, kFaQueries, D)) return;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int32_t base = tile.start + tile.first;  // position of the tile's first query row
  const int32_t warp_first = warp * 16;
  const bool warp_active = warp_first < tile.rows;
  const int32_t warp_last = base + min(warp_first + 15, tile.rows - 1);
  // This lane's two rows, g and g + 8 of the warp's 16: their positions, or -1 past the slice.
  const int32_t row_lo = warp_first + g, row_hi = row_lo + 8;
  const int32_t pos_lo = row_lo < tile.rows ? base + row_lo : -1;
  const int32_t pos_hi = row_hi < tile.rows ? base + row_hi : -1;
  const float scale_log2 = p.scale * 1.4426950408889634f;  // softmax through exp2

  // The queries as A fragments, straight from global memory (read once).
  uint32_t qa[D / 16][4];
  {
    const T* q_lo = p.q + int64_t{tile.row0 + tile.first + row_lo} * p.q_stride + int64_t{head} * D;
    const T* q_hi = p.q + int64_t{tile.row0 + tile.first + row_hi} * p.q_stride + int64_t{head} * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c = kk * 16 + 2 * t;
      qa[kk][0] = pos_lo >= 0 ? *reinterpret_cast<const uint32_t*>(q_lo + c) : 0u;
      qa[kk][1] = pos_hi >= 0 ? *reinterpret_cast<const uint32_t*>(q_hi + c) : 0u;
      qa[kk][2] = pos_lo >= 0 ? *reinterpret_cast<const uint32_t*>(q_lo + c + 8) : 0u;
      qa[kk][3] = pos_hi >= 0 ? *reinterpret_cast<const uint32_t*>(q_hi + c + 8) : 0u;
    }
  }

  // Keys up to the tile's last query row, inclusive; a tile's keys past them are zeros.
  const int32_t kv_end = base + tile.rows;
  const int32_t n_tiles = (kv_end + kFaKeys - 1) / kFaKeys;
  // Each thread stages one 16-byte column of every kStep-th row of a tile, from row stage_row:
  // its column and rows are the same in every tile, and each next row's cache block and offset
  // follow from the last one's without a division.
  constexpr int kStep = kFaWarps * 32 / kRowChunks;
  static_assert(kFaWarps * 32 % kRowChunks == 0 && kFaKeys % kStep == 0, "a tile's rows split evenly");
  const int stage_row = tid / kRowChunks, stage_col = (tid % kRowChunks) * kVec;
  const int64_t head_col = int64_t{tile.kv_head} * tile.head_stride + stage_col;
  const auto stage = [&](int s, int32_t kv_first) {
    T* ks = staged + 2 * s * kTileElems + stage_row * kStride + stage_col;
    T* vs = ks + kTileElems;
    int32_t key = kv_first + stage_row;
    int32_t block = key / tile.block_size, offset = key - block * tile.block_size;
#pragma unroll
    for (int r = 0; r < kFaKeys / kStep; ++r) {
      const bool valid = key < kv_end;
      const int64_t at = valid ? int64_t{tile.table[block]} * tile.block_stride + head_col + int64_t{offset} * D : 0;
      cp_async16(ks + r * kStep * kStride, p.k_cache + at, valid);
      cp_async16(vs + r * kStep * kStride, p.v_cache + at, valid);
      key += kStep;
      for (offset += kStep; offset >= tile.block_size; offset -= tile.block_size) ++block;
    }
    cp_async_commit();
  };
  // This lane's row addresses for ldmatrix: key rows of K tiles (two 8-key tiles, each k = 0..7
  // and 8..15) and key rows of V tiles (16 keys, two 8-dim column groups).
  const int k_lane = ((lane / 16) * 8 + lane % 8) * kStride + (lane / 8 % 2) * 8;
  const int v_lane = (lane % 16) * kStride + (lane / 16) * 8;

  float o[D / 8][4] = {};
  float max_lo = -INFINITY, max_hi = -INFINITY, sum_lo = 0.0f, sum_hi = 0.0f;  // sums: this lane's part
  stage(0, 0);
  for (int32_t it = 0; it < n_tiles; ++it) {
    const int32_t kv_first = it * kFaKeys;
    if (it + 1 < n_tiles) {
      stage((it + 1) % 2, kv_first + kFaKeys);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this tile is in shared memory for every warp
    const T* ks = staged + 2 * (it % 2) * kTileElems;
    const T* vs = ks + kTileElems;
    // A warp whose rows are all past the slice, or all before this key tile, has nothing to add.
    if (warp_active && kv_first <= warp_last) {
      // Scores: (16, 64) = Q (16, D) · Kᵀ, eight 8-key tiles. B[k][n] = K[key n][dim k]: one
      // ldmatrix gives two 8-key tiles' fragments.
      float sc[kFaKeys / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < kFaKeys / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4<false>(b, ks + np * 16 * kStride + kk * 16 + k_lane);
          mma16816<T>(sc[2 * np], qa[kk], b[0], b[1], sc[2 * np]);
          mma16816<T>(sc[2 * np + 1], qa[kk], b[2], b[3], sc[2 * np + 1]);
        }
      }
      // The causal mask, only on a tile with keys past the warp's first row (a row past the
      // slice is never stored, whatever its scores); each row's max over the tile, across its
      // 4 lanes. The scores stay unscaled: the scale is applied to the tile's max, and to each
      // score inside its exponential's fma.
      if (kv_first + kFaKeys - 1 > base + warp_first) {
#pragma unroll
        for (int nt = 0; nt < kFaKeys / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int32_t key = kv_first + nt * 8 + 2 * t + e;
            if (key > pos_lo) sc[nt][e] = -INFINITY;
            if (key > pos_hi) sc[nt][2 + e] = -INFINITY;
          }
        }
      }
      float tile_lo = -INFINITY, tile_hi = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kFaKeys / 8; ++nt) {
        tile_lo = fmaxf(tile_lo, fmaxf(sc[nt][0], sc[nt][1]));
        tile_hi = fmaxf(tile_hi, fmaxf(sc[nt][2], sc[nt][3]));
      }
#pragma unroll
      for (int offset = 1; offset < 4; offset <<= 1) {
        tile_lo = fmaxf(tile_lo, __shfl_xor_sync(0xffffffffu, tile_lo, offset));
        tile_hi = fmaxf(tile_hi, __shfl_xor_sync(0xffffffffu, tile_hi, offset));
      }
      const float new_lo = fmaxf(max_lo, tile_lo * scale_log2), new_hi = fmaxf(max_hi, tile_hi * scale_log2);
      const float shift_lo = new_lo == -INFINITY ? 0.0f : new_lo, shift_hi = new_hi == -INFINITY ? 0.0f : new_hi;
      const float rescale_lo = exp2_ftz(max_lo - shift_lo), rescale_hi = exp2_ftz(max_hi - shift_hi);
      max_lo = new_lo;
      max_hi = new_hi;
      // Probabilities, as the A fragments of P · V: 16-key step j is 8-key tiles 2j and 2j + 1.
      uint32_t pa[kFaKeys / 16][4];
      float part_lo = 0.0f, part_hi = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kFaKeys / 8; ++nt) {
        const float p0 = exp2_ftz(fmaf(sc[nt][0], scale_log2, -shift_lo));
        const float p1 = exp2_ftz(fmaf(sc[nt][1], scale_log2, -shift_lo));
        const float p2 = exp2_ftz(fmaf(sc[nt][2], scale_log2, -shift_hi));
        const float p3 = exp2_ftz(fmaf(sc[nt][3], scale_log2, -shift_hi));
        part_lo += p0 + p1;
        part_hi += p2 + p3;
        pa[nt / 2][(nt % 2) * 2] = pack2<T>(p0, p1);
        pa[nt / 2][(nt % 2) * 2 + 1] = pack2<T>(p2, p3);
      }
      sum_lo = sum_lo * rescale_lo + part_lo;
      sum_hi = sum_hi * rescale_hi + part_hi;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        o[dn][0] *= rescale_lo;
        o[dn][1] *= rescale_lo;
        o[dn][2] *= rescale_hi;
        o[dn][3] *= rescale_hi;
      }
      // Output: (16, D) += P (16, 64) · V (64, D). B[k][n] = V[key k][dim n], transposed by
      // ldmatrix, two 8-dim tiles' fragments a load.
#pragma unroll
      for (int kk = 0; kk < kFaKeys / 16; ++kk) {
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4<true>(b, vs + kk * 16 * kStride + dp * 16 + v_lane);
          mma16816<T>(o[2 * dp], pa[kk], b[0], b[1], o[2 * dp]);
          mma16816<T>(o[2 * dp + 1], pa[kk], b[2], b[3], o[2 * dp + 1]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }

  // Each row's sum across its 4 lanes, then the normalised rows, two values a store.
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, offset);
    sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, offset);
  }
  T* out_lo = p.out + int64_t{tile.row0 + tile.first + row_lo} * p.out_stride + int64_t{head} * D + 2 * t;
  T* out_hi = p.out + int64_t{tile.row0 + tile.first + row_hi} * p.out_stride + int64_t{head} * D + 2 * t;
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    if (pos_lo >= 0) *reinterpret_cast<uint32_t*>(out_lo + dn * 8) = pack2<T>(o[dn][0] / sum_lo, o[dn][1] / sum_lo);
    if (pos_hi >= 0) *reinterpret_cast<uint32_t*>(out_hi + dn * 8) = pack2<T>(o[dn][2] / sum_hi, o[dn][3] / sum_hi);
  }
}

// Calls f.template operator()<D>() for a supported head_dim.
template <typename F>
void dispatch_head_dim(int32_t head_dim, F&& f) {
  switch (head_dim) {
    case 8: f.template operator()<8>(); return;
    case 16: f.template operator()<16>(); return;
    case 32: f.template operator()<32>(); return;
    case 64: f.template operator()<64>(); return;
    case 128: f.template operator()<128>(); return;
    case 256: f.template operator()<256>(); return;
  }
  throw CudaError("attention: head_dim " + std::to_string(head_dim) + " is not supported (8, 16, 32, 64, 128, 256)");
}

void check_heads(const char* kernel, int32_t num_heads, int32_t num_kv_heads, int32_t block_size) {
  require(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0 && block_size > 0,
          std::string(kernel) + ": num_heads must be a positive multiple of num_kv_heads, block_size > 0");
  require(num_heads / num_kv_heads <= kMaxGroup, std::string(kernel) + ": at most " + std::to_string(kMaxGroup) +
                                                     " query heads per KV head (got " +
                                                     std::to_string(num_heads / num_kv_heads) + ")");
}

// Raises Kernel's dynamic shared-memory limit to `bytes`, once per kernel, on its first launch
// (which runs eagerly, before any graph capture): over 48 KB needs the opt-in.
template <auto Kernel>
void allow_shared_once(size_t bytes, const char* what) {
  static const bool opted_in = [&] {
    check(cudaFuncSetAttribute(reinterpret_cast<const void*>(Kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          (std::string(what) + ": raising the shared-memory limit").c_str());
    return true;
  }();
  (void)opted_in;
}

// Launches a prefill kernel over (query tiles, query heads, slices), its shared-memory limit
// raised to what it uses (head_dim 128: 49.5 KB to 68 KB).
template <auto Kernel, typename T>
void launch_prefill(size_t shared, int threads, int queries, const PrefillAttentionArgs& a, const PrefillParams<T>& p,
                    Stream stream, const char* what) {
  allow_shared_once<Kernel>(shared, what);
  const unsigned tiles = blocks_for(a.max_query_len, queries);
  (*Kernel)<<<dim3(tiles, a.num_heads, a.n_slices), threads, shared, stream>>>(p);
  check_launch(what);
}

}  // namespace

bool supported_head_dim(int32_t head_dim) {
  switch (head_dim) {
    case 8: case 16: case 32: case 64: case 128: case 256: return true;
    default: return false;
  }
}

namespace {
// The workspace holds the partitions' maxima and sums (head_floats each), then their outputs
// from the next 16-byte boundary: the merge reads those 16 bytes at a time.
int64_t decode_ws_out_offset(int64_t head_floats) { return (2 * head_floats + 3) / 4 * 4; }
}  // namespace

int64_t decode_attention_workspace_floats(int32_t n_seqs, int32_t num_heads, int32_t head_dim, int32_t max_context) {
  const int64_t head_floats = int64_t{n_seqs} * num_heads * decode_max_partitions(max_context);
  return decode_ws_out_offset(head_floats) + head_floats * head_dim;
}

namespace {

// Whether decode_attention runs decode_mma_kernel for these arguments: bf16/fp16, head_dim a
// multiple of 16 up to 128 (q rows are then read 4 bytes at a time: q_stride is a multiple of 8
// values already), unless the CUDA cores are asked for. Throws when the tensor cores are asked
// for and do not apply.
bool decode_uses_tensor_cores(const DecodeAttentionArgs& a) {
  const bool fits = a.dtype != DType::kF32 && a.head_dim % 16 == 0 && a.head_dim <= 128;
  if (a.kernel == DecodeKernel::kTensorCores && !fits) {
    throw CudaError("decode_attention: the tensor-core kernel needs bf16 or fp16 and head_dim a multiple of 16 up to "
                    "128 (got " + std::string(dtype_name(a.dtype)) + ", head_dim " + std::to_string(a.head_dim) + ")");
  }
  return fits && a.kernel != DecodeKernel::kCudaCores;
}

// The decode grid's width along the context. Under a CUDA graph max_context is max_model_len,
// whose partitions (256 at 131,072 tokens) would be as many blocks per KV head and sequence,
// nearly all exiting at once at ordinary contexts; at a large batch that is hundreds of
// thousands of empty blocks a layer. So: every partition its own block while the batch leaves
// the GPU short of about 16 blocks per SM, fewer (each block looping over its partitions)
// beyond, and never under kDecodeTargetPartitions, so that contexts up to 8,192 tokens keep a
// block per partition.
// The GPU's SMs, asked once, on the first call (which runs eagerly, before any graph capture),
// so that no capture makes the query; a process's GPUs are taken to be of one kind.
int decode_sms() {
  static const int sms = [] {
    int device = 0, count = 0;
    check(cudaGetDevice(&device), "decode_attention: cudaGetDevice");
    check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "decode_attention: SM count");
    return count;
  }();
  return sms;
}

int32_t decode_grid_partitions(const DecodeAttentionArgs& a, int32_t max_partitions) {
  if (a.grid_partitions > 0) return std::min(a.grid_partitions, max_partitions);
  const int64_t pairs = std::max<int64_t>(int64_t{a.n_seqs} * a.num_kv_heads, 1);
  const int64_t wanted = (int64_t{decode_sms()} * 16 + pairs - 1) / pairs;
  return int32_t(std::clamp<int64_t>(wanted, std::min(kDecodeTargetPartitions, max_partitions), max_partitions));
}

// DecodeAttentionArgs::merge: whether the tensor-core kernel merges its own partitions (given
// counters). kAuto: while the batch's (sequence, KV head) pairs, at kDecodeTargetPartitions
// partitions each (a context up to 8k tokens), are at most 2 blocks an SM: past that the
// merging blocks' tails outlast one reduce kernel.
bool merges_in_kernel(const DecodeAttentionArgs& a) {
  if (a.counters == nullptr || a.merge == DecodeMerge::kReduce) return false;
  if (a.merge == DecodeMerge::kInKernel) return true;
  return int64_t{a.n_seqs} * a.num_kv_heads * kDecodeTargetPartitions <= 2 * int64_t{decode_sms()};
}

}  // namespace

const char* decode_attention_kernel(const DecodeAttentionArgs& a) {
  return decode_uses_tensor_cores(a) ? "tensor cores" : "CUDA cores";
}

void decode_attention(const DecodeAttentionArgs& a, Stream stream) {
  check_heads("decode_attention", a.num_heads, a.num_kv_heads, a.block_size);
  require(a.n_seqs >= 0 && a.max_context >= 0 && a.n_seqs <= 65535 && a.grid_partitions >= 0,
          "decode_attention: n_seqs in 0..65535, max_context >= 0 and grid_partitions >= 0");
  if (a.n_seqs == 0) return;
  const int32_t max_partitions = decode_max_partitions(a.max_context);
  require(max_partitions == 1 || a.workspace != nullptr, "decode_attention: a context over one partition needs a workspace");
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(a.dtype));
  require(a.q_stride % vec == 0 && a.head_dim % vec == 0,
          "decode_attention: q_stride and head_dim must be multiples of 16 bytes (16-byte loads)");
  dispatch_dtype(a.dtype, [&]<typename T>() {
    const int64_t head_floats = int64_t{a.n_seqs} * a.num_heads * max_partitions;
    DecodeParams<T> p{paged_params<T>(a),
                      a.context_lens,
                      std::max(a.max_context, 0),
                      max_partitions,
                      a.workspace,
                      a.workspace ? a.workspace + head_floats : nullptr,
                      a.workspace ? a.workspace + decode_ws_out_offset(head_floats) : nullptr,
                      nullptr};
    dispatch_head_dim(a.head_dim, [&]<int D>() {
      constexpr int lanes = D / static_cast<int>(16 / sizeof(T));
      if constexpr (lanes >= 1 && lanes <= 32) {
        const dim3 grid(max_partitions, a.num_kv_heads, a.n_seqs);
        if (decode_uses_tensor_cores(a)) {
          if constexpr (!std::is_same_v<T, float> && D % 16 == 0 && D <= 128) {
            // Two tiles deep where a warp has two or more (partitions over 64 tokens), else one:
            // 35 KB a block at head_dim 128 (6 blocks an SM), 70 KB (the limit raised for two) at two.
            const int stages = decode_partition_size(std::max(a.max_context, 1)) > kDmWarps * kDmKeys ? 2 : 1;
            allow_shared_once<&decode_mma_kernel<T, D>>(decode_mma_shared_bytes<T, D>(2),
                                                        "decode_attention (tensor cores)");
            const dim3 mma_grid(decode_grid_partitions(a, max_partitions), a.num_kv_heads, a.n_seqs);
            // The merge's weights, a group's worth (rounded up to 16 bytes, as the reduce
            // kernel's), live in the staged tiles' shared memory: at group 4 up to 384 partitions
            // (196k tokens) at head_dim 16 and 2,176 at 128; past that the reduce kernel merges.
            const size_t weights_bytes =
                sizeof(float) * ((size_t(max_partitions) * (a.num_heads / a.num_kv_heads) + 3) / 4 * 4);
            if (merges_in_kernel(a) && weights_bytes <= decode_mma_shared_bytes<T, D>(stages)) p.counters = a.counters;
            launch_programmatic("decode_attention (tensor cores)", decode_mma_kernel<T, D>, mma_grid,
                                dim3(kDmWarps * 32), decode_mma_shared_bytes<T, D>(stages), stream, p, stages);
            if (p.counters != nullptr) return;  // the last block of each (sequence, KV head) merged
          }
        } else if (a.num_heads / a.num_kv_heads <= 4) {
          decode_partition_kernel<T, D, 4><<<grid, kDecodeThreads, 0, stream>>>(p);
          check_launch("decode_attention (partitions)");
        } else {
          decode_partition_kernel<T, D, kMaxGroup><<<grid, kDecodeThreads, 0, stream>>>(p);
          check_launch("decode_attention (partitions)");
        }
        // Rounded up to whole 16-byte words: ptxas reads the tail of `weights` with one LDS.128
        // (seen in the sm_90 SASS), past the last partition. The GPU does not fault on that, but
        // compute-sanitizer's memcheck reports it as an out-of-bounds shared read.
        const size_t weights_bytes = sizeof(float) * ((size_t(max_partitions) + 3) / 4 * 4);
        launch_programmatic("decode_attention (reduce)", decode_reduce_kernel<T, D>, dim3(a.num_heads, a.n_seqs),
                            dim3(kDecodeThreads), weights_bytes, stream, p);
      } else {
        throw CudaError("decode_attention: head_dim " + std::to_string(D) + " in " + dtype_name(a.dtype) +
                        " is not 1 to 32 16-byte vectors");
      }
    });
  });
}

void prefill_attention(const PrefillAttentionArgs& a, Stream stream) {
  check_heads("prefill_attention", a.num_heads, a.num_kv_heads, a.block_size);
  require(a.n_slices >= 0 && a.max_query_len >= 0 && a.n_slices <= 65535 && a.num_heads <= 65535,
          "prefill_attention: n_slices and num_heads in 0..65535, max_query_len >= 0");
  if (a.n_slices == 0 || a.max_query_len == 0) return;
  dispatch_dtype(a.dtype, [&]<typename T>() {
    PrefillParams<T> p{paged_params<T>(a), a.query_start, a.start_pos};
    dispatch_head_dim(a.head_dim, [&]<int D>() {
      // The tensor-core kernels read query rows 4 (FA) or 16 (WMMA) bytes at a time, and the
      // output 4: the strides must allow it.
      const bool aligned = a.q_stride % int64_t(16 / sizeof(T)) == 0 && a.out_stride % 2 == 0;
      if constexpr (!std::is_same_v<T, float> && D % 16 == 0) {
        if constexpr (D <= 128) {
          if (aligned) {
            launch_prefill<&prefill_fa_kernel<T, D>>(prefill_fa_shared_bytes<T, D>(), kFaWarps * 32, kFaQueries, a, p,
                                                     stream, "prefill_attention (flash attention)");
            return;
          }
        }
        if (aligned) {
          launch_prefill<&prefill_mma_kernel<T, D>>(prefill_mma_shared_bytes<T, D>(), kMmaWarps * 32, kMmaQueries, a,
                                                    p, stream, "prefill_attention (tensor cores)");
          return;
        }
      }
      launch_prefill<&prefill_kernel<T, D>>(prefill_shared_bytes<D>(), kPrefillThreads, kPrefillQueries, a, p, stream,
                                            "prefill_attention");
    });
  });
}

}  // namespace strata::cuda
