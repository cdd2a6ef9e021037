// Block-quantized weights on the GPU: GGUF's Q4_0, Q4_1 and Q8_0 (strata/quant.h, 32 values per
// block), kept quantized in device memory and multiplied by bf16/fp16 activations with the
// dequantization inside the kernel. Plain C++ launchers, as cuda_kernels.h.
//
// The GPU layout ("repacked"). quant_repack() rearranges a matrix's GGUF blocks once, at load,
// into the order the kernels' 16-byte loads and tensor-core fragments want; every block keeps
// its bytes' worth (Q4_0 18, Q4_1 20, Q8_0 34), so the matrix takes the file's size, its row
// count rounded up to a multiple of 16 (the padding rows are zero blocks). In one allocation:
//
//   quants  tiles of 16 rows; a tile is k/128 chunks of 4 blocks (a last chunk of cb = 1..3
//           blocks when k/32 is not a multiple of 4). Lane t (0..3) of a row owns values
//           8t..8t+7 of every block: 4 bytes (Q4) or 8 bytes (Q8) per (row, block, lane).
//           Within a chunk of cb blocks, (row r, lane t, block bi) is at
//             Q4:            ((r * 4 + t) * cb + bi) * 4           (a lane's 4 blocks are 16 bytes)
//             Q8, cb == 4:   (((bi / 2) * 16 + r) * 4 + t) * 16 + (bi % 2) * 8
//             Q8, cb < 4:    ((r * 4 + t) * cb + bi) * 8
//           so one warp-wide 16-byte load is 512 contiguous bytes. The 8 nibbles of a Q4 lane
//           word are values (0, 2, 4, 6, 1, 3, 5, 7) from bit 0 up, so that each
//           (word >> 4s) & 0x000F000F holds a pair of values (2s', 2s'+1) ready for a packed
//           fp16/bf16 conversion; Q8 bytes stay in order. The tile is 16 * (k/2) (Q4) or
//           16 * k (Q8) bytes, chunk c at c * 1024 (Q4) or c * 2048 (Q8).
//   d       the fp16 scales, per tile k/32 * 16 halves: chunk c of a tile at 32 * c uint32
//           words, and in it the word (g * cb + bi) holds the scales of rows g and g + 8
//           (low, high half), g = 0..7.
//   m       Q4_1 only: the fp16 mins, laid out as d.
//
// The kernels compute y = x · Wᵀ with fp32 accumulation and every weight taken exactly: each
// block's 32 products x·q (small integers, exact in bf16/fp16) are summed on tensor cores
// (mma.sync m16n8k16, fp32 accumulators), then scaled by the block's d (and, for Q4_1, m times
// the block's sum of x) in fp32. Nothing is dequantized into memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "strata/cuda_kernels.h"
#include "strata/quant.h"

namespace strata::cuda {

inline constexpr int32_t kQuantTileRows = 16;     // rows per tile of the GPU layout
inline constexpr int32_t kQuantChunkBlocks = 4;   // blocks per chunk (128 values of a row)
inline constexpr int32_t kQuantGemvMaxM = 16;     // largest m the decode (GEMV) kernel takes
inline constexpr int32_t kQuantGemvMaxWarps = 16; // most warps a GEMV block splits a row's k among
inline constexpr int32_t kQuantGemvMaxPrefetch = 2;  // most chunks a GEMV warp keeps in flight

// Bytes of one block (18, 20, 34), and of a (rows, cols) matrix in the GPU layout: rows rounded
// up to kQuantTileRows, cols / 32 blocks a row. cols must be a positive multiple of 32.
int64_t quant_block_size(QuantType type);
int64_t quant_gpu_bytes(QuantType type, int64_t rows, int64_t cols);

// Host only (no CUDA call): `blocks` holds the matrix as the GGUF file does (rows of cols / 32
// blocks, quant_block_size(type) bytes each); `out` receives quant_gpu_bytes(type, rows, cols)
// bytes in the GPU layout (every byte written), ready to copy to the device as they are. Tiles
// of 16 rows are shared among `threads` threads (0: one a CPU, at least 1 MB of blocks each);
// the bytes do not depend on the count. Throws CudaError on a bad shape.
void quant_repack(QuantType type, const void* blocks, int64_t rows, int64_t cols, void* out, int threads = 0);
// The same for a matrix whose rows lie in several places, in order (a fused weight's parts: q,
// k, v or gate, up): part i holds rows[i] rows of blocks. The bytes are those of its parts'
// blocks put together first and repacked, without that copy. A part with a row order takes its
// row r from row row_order[r] of its blocks (a GGUF file's q and k rows, which llama.cpp
// permutes), as if those rows had been put in order first.
struct QuantRows {
  const void* blocks = nullptr;
  int64_t rows = 0;
  const int64_t* row_order = nullptr;  // `rows` source row indices, or null: rows in order
};
void quant_repack(QuantType type, std::span<const QuantRows> parts, int64_t cols, void* out, int threads = 0);

// Where a matrix's tiles lie in the GPU layout (quant_gpu_bytes in all): tile t's quants at
// t * tile_quant_bytes, its scales at scales_at + t * tile_scale_bytes and, for Q4_1, its mins at
// mins_at + t * tile_scale_bytes (mins_at is 0 for the other types, which have none).
struct QuantLayout {
  int64_t tiles = 0, tile_quant_bytes = 0, tile_scale_bytes = 0, scales_at = 0, mins_at = 0, bytes = 0;
  // A tile's bytes in all its regions.
  int64_t tile_bytes() const { return tile_quant_bytes + tile_scale_bytes * (mins_at > 0 ? 2 : 1); }
};
QuantLayout quant_layout(QuantType type, int64_t rows, int64_t cols);

// Tiles [first, last) of the matrix alone, each region's bytes written where its pointer says
// (`quants`, `scales`, and `mins` for Q4_1, else null, each at tile `first`'s bytes of its
// region): the same bytes quant_repack puts at those tiles' offsets. A load streams a matrix to
// the device this way, a run of tiles at a time through a staging buffer.
void quant_repack_tiles(QuantType type, std::span<const QuantRows> parts, int64_t cols, int64_t first, int64_t last,
                        void* quants, void* scales, void* mins, int threads = 0);

// A matrix in the GPU layout, in device memory (16-byte aligned; cudaMalloc gives 256).
struct QuantWeight {
  QuantType type = QuantType::Q4_0;
  int32_t rows = 0;  // n: output features
  int32_t cols = 0;  // k: input features, a multiple of 32
  const void* data = nullptr;
};

enum class QuantKernel : int32_t {
  kAuto = 0,   // kGemv for m <= kQuantGemvMaxM, else kTiled
  kGemv = 1,   // decode: a warp streams 16 or 32 weight rows, k split across the block's warps
  kTiled = 2,  // prefill: 128 weight rows x 64 tokens a block, x staged in shared memory
};

struct QuantGemmArgs {
  DType dtype = DType::kBF16;  // x, y and bias: kBF16 or kF16 (kF32 is refused)
  const void* x = nullptr;     // (m, k), rows x_stride elements apart
  int64_t x_stride = 0;        // a multiple of 8 (16-byte rows); x itself 16-byte aligned
  QuantWeight w;
  void* y = nullptr;           // (m, n), rows y_stride >= n elements apart; y[i, j >= n] untouched
  int64_t y_stride = 0;
  const void* bias = nullptr;  // (n), or null
  bool accumulate = false;     // y = y + x·Wᵀ (+ bias), one rounding; otherwise y's old values are not read
  int32_t m = 0;               // rows of x; 0 does nothing
  QuantKernel kernel = QuantKernel::kAuto;
  // The tiled kernel splits k across thread blocks when its tiles alone would leave SMs idle
  // (m up to a few hundred on small n); the partial sums go here, fp32. Null: no split.
  float* workspace = nullptr;
  int64_t workspace_floats = 0;
  // The GEMV kernel's warps a block, which split each row's k (a row's sum depends on k and this
  // count only): 0 = chosen from the shape and the GPU (about 16 warps an SM); 1..16 asks for
  // that many, capped at the row's 128-value chunks and at 8 where a warp takes two tiles (large
  // n, and the fused epilogues below). For checks and benchmarks.
  int32_t gemv_warps = 0;
  // The chunks of weights each GEMV warp keeps in flight ahead of the one it multiplies: 0 =
  // chosen (2 with one 16-row tile a warp, 1 with two), 1 or 2 asks for that many; the fused
  // epilogues keep 1. Results do not depend on it. For checks and benchmarks.
  int32_t gemv_prefetch = 0;
};

// Launches the GEMM on `stream`: no allocation and no synchronisation, so it can be captured in a
// CUDA graph. Throws CudaError on a bad argument or a failed launch.
void quant_gemm(const QuantGemmArgs& args, Stream stream);

// The decode GEMV with the next kernel's work in its epilogue, for m = 1..kQuantGemvMaxM (kAuto
// or kGemv; no accumulate). Each gives the bytes of quant_gemm with the same gemv_warps (at most
// 8: a fused block takes two tiles) followed by that kernel, without writing and reading the
// GEMM's output in between or a second launch; with gemv_warps = 0 the warp count is chosen for
// the fused launch's grid (one block per pair of tiles, two tiles a warp), which may differ from
// quant_gemm's own choice and so round differently. Both throw CudaError for what quant_gemm
// refuses and for what the *_refusal functions name ("" when the call can run).
//
// Gated: a.w is a fused (2n, k) gate/up weight (gate rows, then up rows; n a multiple of 16),
// a.bias (2n) or null, a.y (m, n) with y_stride >= n: y[i, j] = silu(g) * u, g and u the
// GEMM's outputs j and n + j rounded to the dtype, as quant_gemm into (m, 2n) then silu_mul.
std::string quant_swiglu_refusal(const QuantGemmArgs& args);
void quant_gemm_swiglu(const QuantGemmArgs& args, Stream stream);
// The q/k/v projection with RoPE and the K/V cache write: a.w is the (q + 2 kv, k) weight of q's,
// k's and v's heads (head_dim 16 or a multiple of 32), a.bias (q + 2 kv) or null, and a.y,
// rope.q, k and v side by side in one buffer (a.y == rope.q, one row stride), rope.n_tokens ==
// a.m. The bytes of quant_gemm into that buffer followed by rope_write_kv(rope): q rotated in
// place, k and v as projected, the rotated k and v in their cache slots (none for a negative
// slot).
std::string quant_qkv_rope_refusal(const RopeKvArgs& rope, const QuantGemmArgs& args);
void quant_gemm_qkv_rope(const RopeKvArgs& rope, const QuantGemmArgs& args, Stream stream);

// The matrix's values, dense: `out` (w.rows, w.cols) row-major in dtype (kBF16 or kF16), each
// d·q (+ m) made in fp32 as the CPU backend's dequantize_row makes it and rounded once to the
// dtype; out and the weight 16-byte aligned. For GEMMs of many rows, where cuBLAS on the dense
// values outruns the tiled kernel (CudaBackendOptions::quant_dense_min_rows). Launches on
// `stream`, no allocation. Throws CudaError on a bad argument or a failed launch.
void quant_dequantize(const QuantWeight& w, DType dtype, void* out, Stream stream);
// Floats of workspace that lets quant_gemm split k as it would like for (m, n, k) on the current
// device (0 when it would not split).
int64_t quant_gemm_workspace_floats(int32_t m, int32_t n, int32_t k);
// The most quant_gemm_workspace_floats(m, n, k) is for any m in [1, max_m]: what a workspace
// serving every batch size up to max_m needs. One evaluation per block row of the tiled kernel
// (its split count is the same for every m of one), not one per m.
int64_t quant_gemm_workspace_floats_up_to(int32_t max_m, int32_t n, int32_t k);

// How quant_gemm(args) would launch, e.g. "gemv TM=1 TN=1 warps=9 grid=256" (for benchmarks and
// logs).
std::string quant_gemm_describe(const QuantGemmArgs& args);

}  // namespace strata::cuda
