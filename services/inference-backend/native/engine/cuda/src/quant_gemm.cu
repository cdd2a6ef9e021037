// Weight-only quantized GEMM (cuda_quant.h): y = x · Wᵀ with W in GGUF's Q4_0 / Q4_1 / Q8_0
// blocks (repacked at load into the GPU layout documented in cuda_quant.h), x and y in bf16 or
// fp16, fp32 accumulation, dequantization in registers.
//
// Both kernels use the tensor cores the same way ("swapped" operands: weights are the 16-row A
// operand, tokens the 8-column B operand of mma.sync m16n8k16):
//   - lane (g, t) = (lane / 4, lane % 4) of a warp holds, for a 16-row tile and one block, the
//     values 8t..8t+7 of rows g and g + 8 (that is the layout's "lane t"), and the same eight
//     values of x for token g;
//   - a block is two mma steps: step h takes values 8t+4h..8t+4h+3 as the k-slots 2t, 2t+1,
//     2t+8, 2t+9 of A (weights) and B (x), so every k-slot pairs a weight with its own x;
//   - the weights enter the mma as integers (q - 8, q, or the int8 q), exact in bf16 and fp16,
//     so each block's 32 products are exact and summed in fp32; the block's fp16 scale d
//     multiplies that sum in fp32 (and Q4_1's min m multiplies the block's sum of x, which one
//     more mma with an all-ones A gives in the accumulator layout).
// A nibble or byte becomes a packed fp16/bf16 integer with the magic-number trick: OR-ing the
// integer into the mantissa of 1024.0 (fp16) or 128.0 (bf16), or of 2^23 for fp32 (Q8 in bf16,
// whose 8-bit mantissa cannot hold a byte), then one subtraction, all exact.
//
// Decode (quant_gemv_kernel, m <= 16): each warp streams TM 16-row tiles with 16-byte loads
// (512 contiguous bytes per warp instruction, not allocated in L1) and multiplies every chunk
// by all m tokens at once (x read from L1); the block's warps split k, then add their sums
// through shared memory. The next chunk's weights are loaded before the current one is
// multiplied. Its epilogue may do the next kernel's work (RoPE and the K/V cache write, or the
// SiLU: quant_gemm_qkv_rope, quant_gemm_swiglu), a block then taking the two tiles whose rows
// that work pairs.
// Prefill (quant_tiled_kernel): 8 warps, 128 weight rows x 64 tokens a block; x chunks
// (64 tokens x 128 values) double-buffered in shared memory with cp.async, weights loaded by
// each warp straight into registers (a warp pair shares them through L1). When that grid
// leaves SMs idle, k is split across blocks into an fp32 workspace and a second kernel adds the
// partial sums in a fixed order.
//
// The CPU emulation (emu.h) has no mma.sync, cp.async or PTX loads: under STRATA_CUDA_EMULATION
// those few primitives are replaced by C++ with the same effect (mma_primitives.cuh, and
// below); everything else is the code nvcc compiles.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "device_common.cuh"
#include "mma_primitives.cuh"
#include "strata/cuda_quant.h"
#include "strata/split_work.h"

namespace strata::cuda {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw CudaError(what);
}

constexpr int kBlockValues = 32;
constexpr int kChunkValues = kQuantChunkBlocks * kBlockValues;  // 128

// Bytes a lane owns of one row of one block: 8 values, 4 bits or 8 bits each.
__host__ __device__ constexpr int lane_bytes(QuantType q) { return q == QuantType::Q8_0 ? 8 : 4; }

// ---- primitives (PTX on the GPU; C++ of the same effect in the emulation) --------------------

// Bytes of {b, a} selected by the four nibbles of sel (__byte_perm without its sign modes).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef STRATA_CUDA_EMULATION
  const uint64_t bytes = uint64_t{b} << 32 | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t(bytes >> (8 * ((sel >> (4 * i)) & 7)) & 0xffu) << (8 * i);
  return r;
#else
  return __byte_perm(a, b, sel);
#endif
}

// (a & kMask) | kOr in one instruction (lop3; as two, nvcc keeps the mask and the OR apart).
template <uint32_t kMask, uint32_t kOr>
__device__ __forceinline__ uint32_t and_or(uint32_t a) {
#ifdef STRATA_CUDA_EMULATION
  return (a & kMask) | kOr;
#else
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(kMask), "n"(kOr));  // 0xEA: (a & b) | c
  return d;
#endif
}

// a * b + c on two packed fp16 or bf16 values, rounded to nearest (every use here is exact).
template <typename T>
__device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
#ifdef STRATA_CUDA_EMULATION
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const float v = half_bits_to_float<T>(a >> (16 * h) & 0xffffu) * half_bits_to_float<T>(b >> (16 * h) & 0xffffu) +
                    half_bits_to_float<T>(c >> (16 * h) & 0xffffu);
    r |= float_to_half_bits<T>(v) << (16 * h);
  }
  return r;
#else
  uint32_t d;
  if constexpr (std::is_same_v<T, __half>) {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  }
  return d;
#endif
}

// ---- dequantization -------------------------------------------------------------------------

template <typename T>
struct Magic;
template <>
struct Magic<__half> {
  static constexpr uint32_t kBase = 0x64006400u;  // 1024.0: a nibble ORed in is 1024 + q
  static constexpr uint32_t kOne = 0x3C003C00u;
  static constexpr uint32_t kMinus1032 = 0xE408E408u;  // Q4_0: 1024 + q - 1032 = q - 8
  static constexpr uint32_t kMinus1024 = 0xE400E400u;  // Q4_1: q
  static constexpr uint32_t kMinus1152 = 0xE480E480u;  // Q8_0: 1024 + (q ^ 0x80) - 1152 = q
};
template <>
struct Magic<__nv_bfloat16> {
  static constexpr uint32_t kBase = 0x43004300u;  // 128.0: a nibble ORed in is 128 + q
  static constexpr uint32_t kOne = 0x3F803F80u;
  static constexpr uint32_t kMinus136 = 0xC308C308u;  // Q4_0
  static constexpr uint32_t kMinus128 = 0xC300C300u;  // Q4_1
};

// A lane's 8 values of one row of one block (w0; Q8 also w1) as four packed pairs of the
// integers the mma takes: p[s] = values (2s, 2s + 1) of the lane's eight.
template <QuantType Q, typename T>
__device__ __forceinline__ void dequant_pairs(uint32_t w0, uint32_t w1, uint32_t (&p)[4]) {
  if constexpr (Q == QuantType::Q8_0) {
    const uint32_t u0 = w0 ^ 0x80808080u, u1 = w1 ^ 0x80808080u;  // q + 128, unsigned
    if constexpr (std::is_same_v<T, __half>) {
      p[0] = fma2<T>(prmt(u0, 0x64646464u, 0x4140), Magic<T>::kOne, Magic<T>::kMinus1152);
      p[1] = fma2<T>(prmt(u0, 0x64646464u, 0x4342), Magic<T>::kOne, Magic<T>::kMinus1152);
      p[2] = fma2<T>(prmt(u1, 0x64646464u, 0x4140), Magic<T>::kOne, Magic<T>::kMinus1152);
      p[3] = fma2<T>(prmt(u1, 0x64646464u, 0x4342), Magic<T>::kOne, Magic<T>::kMinus1152);
    } else {
      // 2^23 + (q + 128) as fp32, minus 2^23 + 128: q exactly; then two floats to bf16.
      float f[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        f[i] = __uint_as_float(prmt(u0, 0x4B000000u, 0x7440 | i)) - 8388736.0f;
        f[4 + i] = __uint_as_float(prmt(u1, 0x4B000000u, 0x7440 | i)) - 8388736.0f;
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) p[s] = pack2<__nv_bfloat16>(f[2 * s], f[2 * s + 1]);
    }
  } else {
    (void)w1;
    uint32_t bias;
    if constexpr (std::is_same_v<T, __half>) {
      bias = Q == QuantType::Q4_0 ? Magic<T>::kMinus1032 : Magic<T>::kMinus1024;
    } else {
      bias = Q == QuantType::Q4_0 ? Magic<T>::kMinus136 : Magic<T>::kMinus128;
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) p[s] = fma2<T>(and_or<0x000F000Fu, Magic<T>::kBase>(w0 >> (4 * s)), Magic<T>::kOne, bias);
  }
}

__device__ __forceinline__ float low_half_float(uint32_t w) { return __half2float(__ushort_as_half(w & 0xffffu)); }
__device__ __forceinline__ float high_half_float(uint32_t w) { return __half2float(__ushort_as_half(w >> 16)); }

// ---- kernels --------------------------------------------------------------------------------

template <typename T>
struct Params {
  const T* x;
  int64_t x_stride;
  const uint8_t* q;     // quants plane
  const uint32_t* d;    // scales plane, as pairs (row g, row g + 8)
  const uint32_t* mn;   // Q4_1 mins plane, or null
  T* y;
  int64_t y_stride;
  const T* bias;
  float* partial;       // tiled split-K: (splits, m, n) fp32 partial sums; null: no split
  int32_t m, n;
  int32_t nb;           // blocks per row (k / 32)
  int32_t chunks;       // chunks per row
  int32_t tiles;        // 16-row tiles
  int32_t chunks_per_split;
  bool accumulate;
};

// y[tok, row] = v (+ bias[row]) (+ y[tok, row]), rounded once.
template <typename T>
__device__ __forceinline__ void store_out(const Params<T>& p, int32_t tok, int32_t row, float v) {
  T* at = p.y + int64_t{tok} * p.y_stride + row;
  if (p.bias != nullptr) v += to_float(p.bias[row]);
  if (p.accumulate) v += to_float(*at);
  *at = from_float<T>(v);
}

// One chunk (up to 4 blocks) of one 16-row tile, as lane (g, t) holds it: rows g and g + 8.
template <QuantType Q>
struct Chunk {
  static constexpr int kWords = lane_bytes(Q) / 4;  // uint32 per (row, block)
  uint32_t q[2][kQuantChunkBlocks * kWords];
  uint32_t d[kQuantChunkBlocks];   // (row g, row g + 8) fp16 scales
  uint32_t mn[kQuantChunkBlocks];  // Q4_1 mins
};

// Where a 16-row tile starts in the planes: its quants, and its first scale (and Q4_1 min) word.
struct TilePlanes {
  const uint8_t* q;
  int64_t words;
};

template <QuantType Q, typename T>
__device__ __forceinline__ TilePlanes tile_planes(const Params<T>& p, int32_t tile) {
  return {p.q + int64_t{tile} * 64 * p.nb * lane_bytes(Q), int64_t{tile} * 8 * p.nb};
}

// Chunk c of the tile whose planes are `tp`. Full chunks take one (Q4) or two (Q8) 16-byte loads
// per row and one (Q4_1: two) for the scales; the last chunk of a row whose block count is not a
// multiple of 4 is read block by block.
template <QuantType Q, bool kStream, typename T>
__device__ __forceinline__ void load_chunk(const Params<T>& p, const TilePlanes& tp, int32_t c, int g, int t,
                                           Chunk<Q>& r) {
  constexpr int kLane = lane_bytes(Q), kWords = kLane / 4;
  const int cb = min(kQuantChunkBlocks, p.nb - kQuantChunkBlocks * c);
  const uint8_t* cq = tp.q + int64_t{c} * 256 * kLane;
  const int64_t dword = tp.words + int64_t{c} * 32;
  if (cb == kQuantChunkBlocks) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      if constexpr (kWords == 1) {
        const uint4 v = load_weights16<kStream>(cq + (row * 4 + t) * 16);
        r.q[h][0] = v.x, r.q[h][1] = v.y, r.q[h][2] = v.z, r.q[h][3] = v.w;
      } else {
#pragma unroll
        for (int hv = 0; hv < 2; ++hv) {
          const uint4 v = load_weights16<kStream>(cq + ((hv * 16 + row) * 4 + t) * 16);
          r.q[h][4 * hv] = v.x, r.q[h][4 * hv + 1] = v.y, r.q[h][4 * hv + 2] = v.z, r.q[h][4 * hv + 3] = v.w;
        }
      }
    }
    const uint4 dv = load_weights16<kStream>(p.d + dword + g * 4);
    r.d[0] = dv.x, r.d[1] = dv.y, r.d[2] = dv.z, r.d[3] = dv.w;
    if constexpr (Q == QuantType::Q4_1) {
      const uint4 mv = load_weights16<kStream>(p.mn + dword + g * 4);
      r.mn[0] = mv.x, r.mn[1] = mv.y, r.mn[2] = mv.z, r.mn[3] = mv.w;
    }
  } else {
#pragma unroll
    for (int bi = 0; bi < kQuantChunkBlocks; ++bi) {
      if (bi >= cb) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t* src = reinterpret_cast<const uint32_t*>(cq + (((g + 8 * h) * 4 + t) * cb + bi) * kLane);
#pragma unroll
        for (int w = 0; w < kWords; ++w) r.q[h][bi * kWords + w] = src[w];
      }
      r.d[bi] = p.d[dword + g * cb + bi];
      if constexpr (Q == QuantType::Q4_1) r.mn[bi] = p.mn[dword + g * cb + bi];
    }
  }
}

template <QuantType Q, bool kStream, typename T>
__device__ __forceinline__ void load_chunk(const Params<T>& p, int32_t tile, int32_t c, int g, int t, Chunk<Q>& r) {
  load_chunk<Q, kStream>(p, tile_planes<Q>(p, tile), c, g, t, r);
}

// The A fragments (two mma steps) of block bi of a chunk.
template <QuantType Q, typename T>
__device__ __forceinline__ void weight_fragments(const Chunk<Q>& r, int bi, uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  constexpr int kWords = Chunk<Q>::kWords;
  uint32_t lo[4], hi[4];  // rows g and g + 8
  dequant_pairs<Q, T>(r.q[0][bi * kWords], r.q[0][bi * kWords + kWords - 1], lo);
  dequant_pairs<Q, T>(r.q[1][bi * kWords], r.q[1][bi * kWords + kWords - 1], hi);
  a0[0] = lo[0], a0[1] = hi[0], a0[2] = lo[1], a0[3] = hi[1];
  a1[0] = lo[2], a1[1] = hi[2], a1[2] = lo[3], a1[3] = hi[3];
}

// acc += one block's contribution for one (row tile, token tile): the two mma steps from zero,
// then the fp32 scale (and Q4_1's min times the tokens' sums of x in xsum).
template <QuantType Q, typename T>
__device__ __forceinline__ void block_product(float (&acc)[4], const uint32_t (&a0)[4], const uint32_t (&a1)[4],
                                              const uint32_t (&b)[4], uint32_t d, uint32_t mn,
                                              const float (&xsum)[4]) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma16816<T>(s, a0, b[0], b[1], s);
  mma16816<T>(s, a1, b[2], b[3], s);
  const float d_lo = low_half_float(d), d_hi = high_half_float(d);
  acc[0] += d_lo * s[0];
  acc[1] += d_lo * s[1];
  acc[2] += d_hi * s[2];
  acc[3] += d_hi * s[3];
  if constexpr (Q == QuantType::Q4_1) {
    const float m_lo = low_half_float(mn), m_hi = high_half_float(mn);
    acc[0] += m_lo * xsum[0];
    acc[1] += m_lo * xsum[1];
    acc[2] += m_hi * xsum[2];
    acc[3] += m_hi * xsum[3];
  } else {
    (void)mn;
    (void)xsum;
  }
}

// The sums of one block's x for the token columns of the accumulator layout (Q4_1's min term):
// an all-ones A times the same B fragments.
template <typename T>
__device__ __forceinline__ void block_x_sums(const uint32_t (&b)[4], float (&xsum)[4]) {
  const uint32_t ones[4] = {Magic<T>::kOne, Magic<T>::kOne, Magic<T>::kOne, Magic<T>::kOne};
  const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma16816<T>(xsum, ones, b[0], b[1], zero);
  mma16816<T>(xsum, ones, b[2], b[3], xsum);
}

// Decode. Grid: one block per TM 16-row tiles; blockDim.x / 32 warps split the row's chunks
// (warp w takes chunks w, w + warps, ...). Token tile j covers tokens 8j..8j+7 (TN = 1: m <= 8;
// TN = 2: m <= 16). Dynamic shared memory: warps * TM * TN * 4 * 32 floats.
// At most 16 warps a block; 8 with two tiles a warp (chosen only when the grid already gives
// every SM two blocks), which leaves those variants up to 255 registers.
// A row's sum depends on k and the warp count only: each warp adds its chunks' blocks in chunk
// order, and the block adds the warps' sums in warp order, whatever the tiles, TM, TN or m.
constexpr int kGemvMaxWarps = 16;
constexpr int gemv_max_warps(int tm) { return tm == 2 ? 8 : kGemvMaxWarps; }

// What the decode kernel does with a row's sum (plus its bias), and which tiles a block takes.
//   kStore:   y = v (+ y), rounded once; a block's TM tiles are consecutive.
//   kSwiglu:  the weight is a fused (2n, k) gate/up; a block takes tile b of the gate rows and
//             tile b of the up rows (TM = 2) and writes silu(gate) * up into y (m, n), each
//             rounded to T first, as quant_gemm into a 2n-wide buffer and then silu_mul.
//   kQkvRope: the weight is q's heads, k's, then v's (head_dim rows each, head_dim a multiple of
//             32, or 16); a block takes a rotated pair of tiles of one q or k head (rows i and
//             i + head_dim / 2 of the head side by side) or two consecutive tiles of v, and
//             writes what quant_gemm into the q/k/v buffer followed by rope_write_kv leaves: q
//             rotated, k and v as projected, the rotated k and v in their cache slots. With
//             head_dim 16 a tile is a head, its pairs rows g and g + 8 of one lane's sums, and a
//             block takes two consecutive tiles.
enum class Epilogue { kStore, kSwiglu, kQkvRope };

// The tile of row tile i (< TM) of this block.
template <Epilogue E, int TM, typename T>
__device__ __forceinline__ int32_t block_tile(const Params<T>& p, const RopeCacheParams<T>& rope, int i) {
  if constexpr (E == Epilogue::kStore) {
    (void)rope;
    return int32_t(blockIdx.x) * TM + i;
  } else if constexpr (E == Epilogue::kSwiglu) {
    (void)rope;
    return int32_t(blockIdx.x) + i * (p.tiles / 2);
  } else {
    if (rope.head_dim == kQuantTileRows) return int32_t(blockIdx.x) * TM + i;  // pairs inside a tile
    const int32_t head_tiles = rope.head_dim / kQuantTileRows, half_tiles = head_tiles / 2;
    const int32_t rotated_blocks = (rope.num_heads + rope.num_kv_heads) * half_tiles;
    const int32_t b = int32_t(blockIdx.x);
    if (b < rotated_blocks) return (b / half_tiles) * head_tiles + b % half_tiles + i * half_tiles;
    return (rope.num_heads + rope.num_kv_heads) * head_tiles + 2 * (b - rotated_blocks) + i;
  }
}

template <typename T>
__device__ __forceinline__ float plus_bias(const Params<T>& p, int32_t row, float v) {
  return p.bias != nullptr ? v + to_float(p.bias[row]) : v;
}

// The paired epilogues for one (row r of the block's two tiles, token tok): sums v0 (first tile)
// and v1 (second tile).
template <Epilogue E, typename T>
__device__ __forceinline__ void store_pair(const Params<T>& p, const RopeCacheParams<T>& rope, int32_t row0,
                                           int32_t row1, int32_t tok, float v0, float v1) {
  const T a = from_float<T>(plus_bias(p, row0, v0)), b = from_float<T>(plus_bias(p, row1, v1));
  T* y = p.y + int64_t{tok} * p.y_stride;
  if constexpr (E == Epilogue::kSwiglu) {
    (void)rope;
    y[row0] = silu_times(a, b);  // row0 < n: a gate row, its output column
  } else {
    store_qkv_pair<T>(rope, y, rope.positions[tok], rope.slots[tok], row0, row1, a, b);
  }
}

template <QuantType Q, typename T, int TM, int TN, Epilogue E, int PF>
__global__ void __launch_bounds__(gemv_max_warps(TM) * 32) quant_gemv_kernel(const Params<T> p,
                                                                              const RopeCacheParams<T> rope) {
  static_assert(E == Epilogue::kStore || TM == 2, "the paired epilogues take two tiles a block");
  static_assert(PF >= 1 && PF <= kQuantGemvMaxPrefetch, "1 or 2 chunks in flight");
  extern __shared__ float4 gemv_smem[];
  float* red = reinterpret_cast<float*>(gemv_smem);
  constexpr int E4 = TM * TN * 4;  // a lane's sums
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int g = lane / 4, t = lane % 4;
  // Row tile i of the block, and whether it is inside the matrix (a warp-uniform test).
  const auto tile = [&](int i) { return block_tile<E, TM>(p, rope, i); };
  const auto live = [&](int i) { return tile(i) < p.tiles; };

  float acc[TM][TN][4];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const T* xrow[TN];  // this lane's token of each token tile (values 8t..8t+7 of a block), or null
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int32_t tok = 8 * j + g;
    xrow[j] = tok < p.m ? p.x + int64_t{tok} * p.x_stride + 8 * t : nullptr;
  }

  int32_t c = warp;
  if (c < p.chunks) {
    // ring[s]: this warp's chunk c + s * warps. ring[0] is multiplied while the next PF chunks'
    // weights are in flight; then each moves down one.
    Chunk<Q> ring[PF + 1][TM];
#pragma unroll
    for (int s = 0; s < PF; ++s) {
      if (c + s * warps >= p.chunks) break;
#pragma unroll
      for (int i = 0; i < TM; ++i)
        if (live(i)) load_chunk<Q, true>(p, tile(i), c + s * warps, g, t, ring[s][i]);
    }
    for (; c < p.chunks; c += warps) {
      const int32_t cn = c + PF * warps;
      if (cn < p.chunks) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
          if (live(i)) load_chunk<Q, true>(p, tile(i), cn, g, t, ring[PF][i]);
      }
      const Chunk<Q>(&cur)[TM] = ring[0];
      const int cb = min(kQuantChunkBlocks, p.nb - kQuantChunkBlocks * c);
#pragma unroll
      for (int bi = 0; bi < kQuantChunkBlocks; ++bi) {
        if (bi >= cb) break;
        const int64_t k0 = int64_t{kQuantChunkBlocks * c + bi} * kBlockValues;
        uint32_t b[TN][4];
        float xsum[TN][4];
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (xrow[j] != nullptr) v = *reinterpret_cast<const uint4*>(xrow[j] + k0);
          b[j][0] = v.x, b[j][1] = v.y, b[j][2] = v.z, b[j][3] = v.w;
          if constexpr (Q == QuantType::Q4_1) block_x_sums<T>(b[j], xsum[j]);
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          if (!live(i)) continue;  // the warp's whole tile is past the matrix
          uint32_t a0[4], a1[4];
          weight_fragments<Q, T>(cur[i], bi, a0, a1);
#pragma unroll
          for (int j = 0; j < TN; ++j)
            block_product<Q, T>(acc[i][j], a0, a1, b[j], cur[i].d[bi], cur[i].mn[bi], xsum[j]);
        }
      }
#pragma unroll
      for (int s = 0; s < PF; ++s)
#pragma unroll
        for (int i = 0; i < TM; ++i) ring[s][i] = ring[s + 1][i];
    }
  }

  // The warps' partial sums, added in warp order (deterministic), then the epilogue.
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[(warp * E4 + (i * TN + j) * 4 + e) * 32 + lane] = acc[i][j][e];
  __syncthreads();
  // Element e of lane L of a tile's accumulators: row L / 4 (+ 8 for e >= 2) of the tile, token
  // 8j + 2 (L % 4) + (e & 1) of token tile j.
  const auto row_in_tile = [](int L, int ce) { return L / 4 + (ce >= 2 ? 8 : 0); };
  const auto token = [](int L, int j, int ce) { return 8 * j + 2 * (L % 4) + (ce & 1); };
  if constexpr (E == Epilogue::kStore) {
    (void)rope;
    for (int idx = threadIdx.x; idx < E4 * 32; idx += blockDim.x) {
      const int e = idx / 32, L = idx % 32;
      float v = 0.0f;
      for (int w = 0; w < warps; ++w) v += red[(w * E4 + e) * 32 + L];
      const int i = e / (TN * 4), j = (e / 4) % TN, ce = e % 4;
      const int32_t row = tile(i) * kQuantTileRows + row_in_tile(L, ce);
      const int32_t tok = token(L, j, ce);
      if (row < p.n && tok < p.m) store_out(p, tok, row, v);
    }
  } else if (E == Epilogue::kQkvRope && rope.head_dim == kQuantTileRows) {
    // Each lane's sums e (row g) and e + 2 (row g + 8) of each tile are a rotated pair.
    for (int idx = threadIdx.x; idx < TM * TN * 2 * 32; idx += blockDim.x) {
      const int q = idx / 32, L = idx % 32;
      const int i = q / (TN * 2), j = (q / 2) % TN, ce = q % 2;
      const int e = (i * TN + j) * 4 + ce;
      float v0 = 0.0f, v1 = 0.0f;
      for (int w = 0; w < warps; ++w) {
        v0 += red[(w * E4 + e) * 32 + L];
        v1 += red[(w * E4 + e + 2) * 32 + L];
      }
      const int32_t tok = token(L, j, ce);
      if (!live(i) || tok >= p.m) continue;
      const int32_t row0 = tile(i) * kQuantTileRows + row_in_tile(L, ce);
      store_pair<E, T>(p, rope, row0, row0 + 8, tok, v0, v1);
    }
  } else {
    constexpr int H = TN * 4;  // a lane's sums of one tile
    for (int idx = threadIdx.x; idx < H * 32; idx += blockDim.x) {
      const int e = idx / 32, L = idx % 32;
      float v0 = 0.0f, v1 = 0.0f;
      for (int w = 0; w < warps; ++w) {
        v0 += red[(w * E4 + e) * 32 + L];
        v1 += red[(w * E4 + H + e) * 32 + L];
      }
      const int j = e / 4, ce = e % 4;
      const int32_t tok = token(L, j, ce);
      if (tok >= p.m) continue;
      const int r = row_in_tile(L, ce);
      store_pair<E, T>(p, rope, tile(0) * kQuantTileRows + r, tile(1) * kQuantTileRows + r, tok, v0, v1);
    }
  }
}

// Prefill. Grid (row blocks of 128, token blocks of 64, k splits); 8 warps, warp (wr, wt) =
// (warp % 4, warp / 4) owns row tiles 2 wr, 2 wr + 1 of the block and tokens 32 wt..32 wt+31.
constexpr int kTiledWarpRows = 4, kTiledWarpToks = 2;
constexpr int kTiledTM = 2, kTiledTN = 4;
constexpr int kTiledThreads = 32 * kTiledWarpRows * kTiledWarpToks;
constexpr int kTiledTiles = kTiledTM * kTiledWarpRows;                  // 16-row tiles per block (128 rows)
constexpr int kTiledToks = 8 * kTiledTN * kTiledWarpToks;               // 64 tokens per block
// x rows in shared memory: 128 values plus 32 of padding (320 bytes), so the 16-byte reads of a
// quarter warp (two tokens x 4 lanes) hit 32 different banks.
constexpr int kXsStride = kChunkValues + 32;
template <typename T>
constexpr size_t tiled_shared_bytes() {
  return 2 * size_t{kTiledToks} * kXsStride * sizeof(T);
}

// Q4_0's kernel fits 128 registers a thread, so two blocks (16 warps) an SM; the others need more.
template <QuantType Q>
constexpr int kTiledMinBlocks = Q == QuantType::Q4_0 ? 2 : 1;

template <QuantType Q, typename T>
__global__ void __launch_bounds__(kTiledThreads, kTiledMinBlocks<Q>) quant_tiled_kernel(const Params<T> p) {
  extern __shared__ float4 tiled_smem[];
  T* xs = reinterpret_cast<T*>(tiled_smem);  // [2 stages][64 tokens][kXsStride]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int wr = warp % kTiledWarpRows, wt = warp / kTiledWarpRows;
  const int32_t tile0 = blockIdx.x * kTiledTiles + wr * kTiledTM;
  const int32_t tok0 = blockIdx.y * kTiledToks;
  const int32_t c_begin = blockIdx.z * p.chunks_per_split;
  const int32_t c_end = min(p.chunks, c_begin + p.chunks_per_split);
  const bool active = tile0 < p.tiles;  // warp-uniform: some of the warp's rows exist

  // x[tok0 .. tok0 + 63, chunk c] into stage s: 16-byte pieces, zeros past the last token. Thread
  // i copies piece i % 16 of tokens i / 16, i / 16 + 16, ...: its source and destination are set
  // here once, and a chunk only moves the source on by 128 values.
  constexpr int kPieces = kChunkValues / 8;              // 16-byte pieces of a token's chunk
  constexpr int kPassRows = kTiledThreads / kPieces;     // tokens one pass of the block copies
  static_assert(kTiledThreads % kPieces == 0 && kTiledToks % kPassRows == 0);
  const int pc = threadIdx.x % kPieces, r0 = threadIdx.x / kPieces;
  const int64_t pass_stride = int64_t{kPassRows} * p.x_stride;
  const T* xsrc = p.x + int64_t{min(tok0 + r0, p.m - 1)} * p.x_stride + pc * 8;  // rows past m: not read
  T* const xdst = xs + r0 * kXsStride + pc * 8;
  auto stage_x = [&](int32_t c, int s) {
    const int cb = min(kQuantChunkBlocks, p.nb - kQuantChunkBlocks * c);
    if (pc < cb * 4) {  // the last chunk of a row may hold fewer than 4 blocks
      const T* src = xsrc + int64_t{c} * kChunkValues;
#pragma unroll
      for (int i = 0; i < kTiledToks / kPassRows; ++i) {
        const bool valid = tok0 + r0 + i * kPassRows < p.m;
        cp_async16(xdst + (s * kTiledToks + i * kPassRows) * kXsStride, valid ? src + i * pass_stride : src, valid);
      }
    }
    cp_async_commit();
  };

  float acc[kTiledTM][kTiledTN][4];
#pragma unroll
  for (int i = 0; i < kTiledTM; ++i)
#pragma unroll
    for (int j = 0; j < kTiledTN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  TilePlanes planes[kTiledTM];
#pragma unroll
  for (int i = 0; i < kTiledTM; ++i) planes[i] = tile_planes<Q>(p, min(tile0 + i, p.tiles - 1));
  const auto load = [&](int32_t c, Chunk<Q>(&r)[kTiledTM]) {
    if (!active) return;
#pragma unroll
    for (int i = 0; i < kTiledTM; ++i)
      if (tile0 + i < p.tiles) load_chunk<Q, false>(p, planes[i], c, g, t, r[i]);
  };

  Chunk<Q> cur[kTiledTM];
  if (c_begin < c_end) {
    stage_x(c_begin, 0);
    load(c_begin, cur);
  }
  for (int32_t c = c_begin; c < c_end; ++c) {
    const int s = (c - c_begin) & 1;
    if (c + 1 < c_end) {
      stage_x(c + 1, s ^ 1);  // stage s ^ 1 was last read before the previous iteration's barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // chunk c's x is in stage s, from every thread's copies
    Chunk<Q> next[kTiledTM];
    if (c + 1 < c_end) load(c + 1, next);
    if (active) {
      const int cb = min(kQuantChunkBlocks, p.nb - kQuantChunkBlocks * c);
      const T* xw = xs + (s * kTiledToks + wt * 8 * kTiledTN + g) * kXsStride + 8 * t;
#pragma unroll
      for (int bi = 0; bi < kQuantChunkBlocks; ++bi) {
        if (bi >= cb) break;
        uint32_t b[kTiledTN][4];
        float xsum[kTiledTN][4];
#pragma unroll
        for (int j = 0; j < kTiledTN; ++j) {
          const uint4 v = *reinterpret_cast<const uint4*>(xw + j * 8 * kXsStride + bi * kBlockValues);
          b[j][0] = v.x, b[j][1] = v.y, b[j][2] = v.z, b[j][3] = v.w;
          if constexpr (Q == QuantType::Q4_1) block_x_sums<T>(b[j], xsum[j]);
        }
#pragma unroll
        for (int i = 0; i < kTiledTM; ++i) {
          if (tile0 + i >= p.tiles) continue;
          uint32_t a0[4], a1[4];
          weight_fragments<Q, T>(cur[i], bi, a0, a1);
#pragma unroll
          for (int j = 0; j < kTiledTN; ++j)
            block_product<Q, T>(acc[i][j], a0, a1, b[j], cur[i].d[bi], cur[i].mn[bi], xsum[j]);
        }
      }
    }
    __syncthreads();  // stage s is free for chunk c + 2
#pragma unroll
    for (int i = 0; i < kTiledTM; ++i) cur[i] = next[i];
  }

  if (!active) return;
#pragma unroll
  for (int i = 0; i < kTiledTM; ++i) {
#pragma unroll
    for (int j = 0; j < kTiledTN; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int32_t row = (tile0 + i) * kQuantTileRows + g + (e >= 2 ? 8 : 0);
        const int32_t tok = tok0 + wt * 8 * kTiledTN + 8 * j + 2 * t + (e & 1);
        if (row >= p.n || tok >= p.m) continue;
        if (p.partial != nullptr) {
          p.partial[(int64_t{blockIdx.z} * p.m + tok) * p.n + row] = acc[i][j][e];
        } else {
          store_out(p, tok, row, acc[i][j][e]);
        }
      }
    }
  }
}

// The decode kernel with `prefetch` chunks a warp in flight (2 is built for kStore only).
template <QuantType Q, typename T, int TM, int TN, Epilogue E>
void launch_gemv(const Params<T>& p, const RopeCacheParams<T>& rope, int prefetch, dim3 grid, dim3 block,
                 size_t shared, Stream stream) {
  if constexpr (E == Epilogue::kStore) {
    if (prefetch == 2) {
      quant_gemv_kernel<Q, T, TM, TN, E, 2><<<grid, block, shared, stream>>>(p, rope);
      return;
    }
  }
  quant_gemv_kernel<Q, T, TM, TN, E, 1><<<grid, block, shared, stream>>>(p, rope);
}

// The dense values (quant_dequantize): one thread per (row, block), its 32 values d·q (+ m) in
// fp32 as the CPU backend's dequantize_row makes them, each rounded once to T, stored 16 bytes
// at a time. Rows past `rows` (a tile's padding) are not written.
template <QuantType Q, typename T>
__global__ void quant_dequantize_kernel(const Params<T> p, T* out, int32_t rows) {
  constexpr int kLane = lane_bytes(Q);
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{rows} * p.nb) return;
  const int32_t r = int32_t(i / p.nb), b = int32_t(i % p.nb);
  const int32_t tile = r / kQuantTileRows, rr = r % kQuantTileRows, g = rr % 8, high = rr / 8;
  const int32_t c = b / kQuantChunkBlocks, bi = b % kQuantChunkBlocks;
  const int32_t cb = min(kQuantChunkBlocks, p.nb - kQuantChunkBlocks * c);
  const int64_t word = int64_t{tile} * 8 * p.nb + int64_t{c} * 32 + g * cb + bi;  // (row g, row g + 8) scales
  const float d = high ? high_half_float(p.d[word]) : low_half_float(p.d[word]);
  float mn = 0.0f;
  if constexpr (Q == QuantType::Q4_1) mn = high ? high_half_float(p.mn[word]) : low_half_float(p.mn[word]);
  const uint8_t* chunk = p.q + int64_t{tile} * 64 * p.nb * kLane + int64_t{c} * 256 * kLane;
  T* dst = out + int64_t{r} * p.nb * kBlockValues + int64_t{b} * kBlockValues;
#pragma unroll
  for (int t = 0; t < 4; ++t) {  // lane t's values 8t .. 8t + 7 of the block
    float v[8];
    if constexpr (Q == QuantType::Q8_0) {
      const int64_t at = cb == kQuantChunkBlocks ? ((int64_t{bi / 2} * 16 + rr) * 4 + t) * 16 + (bi % 2) * 8
                                                 : ((int64_t{rr} * 4 + t) * cb + bi) * 8;
      const int8_t* qs = reinterpret_cast<const int8_t*>(chunk + at);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = d * float(qs[e]);
    } else {
      // Value e of the lane's eight is the nibble at position (e % 2) * 4 + e / 2.
      const uint32_t w = *reinterpret_cast<const uint32_t*>(chunk + ((int64_t{rr} * 4 + t) * cb + bi) * 4);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int q = int(w >> (4 * ((e % 2) * 4 + e / 2)) & 0xFu);
        v[e] = Q == QuantType::Q4_0 ? d * float(q - 8) : d * float(q) + mn;
      }
    }
    *reinterpret_cast<uint4*>(dst + 8 * t) =
        make_uint4(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]), pack2<T>(v[4], v[5]), pack2<T>(v[6], v[7]));
  }
}

// Split-K's second pass: y = the splits' partial sums, added in split order, + the epilogue.
template <typename T>
__global__ void quant_split_reduce_kernel(const Params<T> p, int32_t splits) {
  const int64_t total = int64_t{p.m} * p.n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    float v = 0.0f;
    for (int32_t z = 0; z < splits; ++z) v += p.partial[z * total + i];
    store_out(p, int32_t(i / p.n), int32_t(i % p.n), v);
  }
}

// ---- launch configuration -------------------------------------------------------------------

int device_sms() {
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "quant_gemm: cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "quant_gemm: SM count");
  return sms;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct GemvConfig {
  int tm, tn, warps, prefetch;
  int64_t grid;
};

// TN: 8 tokens a tile. TM: two tiles a warp once there are enough tiles to give every SM
// several blocks anyway (halves the L1 reads of x per weight byte), or always for a paired
// epilogue (`pairs`: the grid is then one block per pair of tiles). Warps: enough to have about
// 16 warps per SM in total, each with at least one chunk; `warps` > 0 asks for that many instead
// (capped at the kernel's most and at the row's chunks), the same split whatever the epilogue.
// Prefetch: the chunks a warp has in flight; 2 with one tile a warp (q/k/v, o and down at batch
// 1 streamed at 0.9-1.2 TB/s of an H100's 3.0 with one, latency-bound, while gate/up's two
// tiles a warp, twice the bytes in flight, reached 1.8), 1 with two; `prefetch` > 0 asks for
// that many. The paired epilogues keep 1. It changes no result: each warp adds the same chunks
// in the same order.
GemvConfig gemv_config(int32_t m, int32_t n, int32_t k, int sms, int32_t warps, int32_t prefetch,
                       bool pairs = false) {
  const int64_t tiles = ceil_div(n, kQuantTileRows);
  const int64_t chunks = ceil_div(k / kBlockValues, kQuantChunkBlocks);
  GemvConfig c{};
  c.tn = m <= 8 ? 1 : 2;
  c.tm = pairs || tiles >= 4 * int64_t{sms} ? 2 : 1;
  c.grid = ceil_div(tiles, c.tm);
  const int64_t want = warps > 0 ? warps : std::clamp<int64_t>(ceil_div(16 * int64_t{sms}, c.grid), 2, kGemvMaxWarps);
  c.warps = int(std::min<int64_t>({want, gemv_max_warps(c.tm), chunks}));
  c.prefetch = pairs ? 1 : prefetch > 0 ? prefetch : c.tm == 1 ? 2 : 1;
  return c;
}

struct TiledConfig {
  int64_t bx, by;
  int32_t splits, chunks_per_split;
};

// One block per 128 rows x 64 tokens; k split across blocks (at least 2 chunks each, at most
// 16 splits) when that grid is under one wave of the blocks an SM can hold, and the workspace
// allows it.
template <QuantType Q, typename T>
TiledConfig tiled_config(int32_t m, int32_t n, int32_t k, int sms, int64_t workspace_floats) {
  TiledConfig c{};
  c.bx = ceil_div(ceil_div(n, kQuantTileRows), kTiledTiles);
  c.by = ceil_div(m, kTiledToks);
  const int32_t chunks = int32_t(ceil_div(k / kBlockValues, kQuantChunkBlocks));
  static const int per_sm = [] {
    int blocks = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, quant_tiled_kernel<Q, T>, kTiledThreads,
                                                        tiled_shared_bytes<T>()),
          "quant_gemm: occupancy of the tiled kernel");
    return std::max(blocks, 1);
  }();
  const int64_t slots = int64_t{per_sm} * sms, blocks = c.bx * c.by;
  int64_t splits = 1;
  if (blocks < slots) splits = std::min<int64_t>({slots / blocks, chunks / 2, 16});
  if (int64_t{m} * n > 0) splits = std::min<int64_t>(splits, workspace_floats / (int64_t{m} * n));
  splits = std::max<int64_t>(splits, 1);
  c.chunks_per_split = int32_t(ceil_div(chunks, splits));
  c.splits = int32_t(ceil_div(chunks, c.chunks_per_split));
  return c;
}

template <typename F>
void dispatch_quant(QuantType type, F&& f) {
  switch (type) {
    case QuantType::Q4_0: f.template operator()<QuantType::Q4_0>(); return;
    case QuantType::Q4_1: f.template operator()<QuantType::Q4_1>(); return;
    case QuantType::Q8_0: f.template operator()<QuantType::Q8_0>(); return;
  }
  throw CudaError("quant_gemm: unknown quant type " + std::to_string(static_cast<int>(type)));
}

// bf16 and fp16 only: the tensor cores take the weights as integers in the activation dtype.
template <typename F>
void dispatch_half(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); return;
    case DType::kF16: f.template operator()<__half>(); return;
    default: break;
  }
  throw CudaError(std::string("quant_gemm: activations must be bf16 or f16, not ") + dtype_name(dtype));
}

bool use_gemv(const QuantGemmArgs& a) {
  return a.kernel == QuantKernel::kGemv || (a.kernel == QuantKernel::kAuto && a.m <= kQuantGemvMaxM);
}

// y_width: the columns of y the call writes (n; a gated call's n is half the weight's rows).
void validate(const QuantGemmArgs& a, int64_t y_width) {
  const QuantWeight& w = a.w;
  require(w.rows > 0 && w.cols > 0 && w.cols % kBlockValues == 0,
          "quant_gemm: the weight needs rows > 0 and cols a positive multiple of 32 (got " + std::to_string(w.rows) +
              " x " + std::to_string(w.cols) + ")");
  require(a.m >= 0, "quant_gemm: m must be >= 0");
  require(a.x_stride >= w.cols && a.x_stride % 8 == 0,
          "quant_gemm: x_stride must be >= k and a multiple of 8 (16-byte rows)");
  require(a.y_stride >= y_width, "quant_gemm: y_stride must be >= n");
  require(a.m == 0 || (a.x != nullptr && a.y != nullptr && w.data != nullptr), "quant_gemm: null x, y or weight");
  require(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0,
          "quant_gemm: x and the weight must be 16-byte aligned");
  require(a.kernel != QuantKernel::kGemv || a.m <= kQuantGemvMaxM,
          "quant_gemm: the GEMV kernel takes m <= " + std::to_string(kQuantGemvMaxM));
  require(int64_t{a.m} <= int64_t{65535} * kTiledToks, "quant_gemm: m too large");
  require(a.gemv_warps >= 0 && a.gemv_warps <= kQuantGemvMaxWarps,
          "quant_gemm: gemv_warps must be 0 (chosen) or 1.." + std::to_string(kQuantGemvMaxWarps));
  require(a.gemv_prefetch >= 0 && a.gemv_prefetch <= kQuantGemvMaxPrefetch,
          "quant_gemm: gemv_prefetch must be 0 (chosen) or 1.." + std::to_string(kQuantGemvMaxPrefetch));
}

template <typename T>
Params<T> make_params(const QuantGemmArgs& a) {
  const QuantWeight& w = a.w;
  const int32_t nb = w.cols / kBlockValues;
  const int32_t tiles = int32_t(ceil_div(w.rows, kQuantTileRows));
  const int64_t quant_bytes = int64_t{tiles} * kQuantTileRows * nb * 4 * lane_bytes(w.type);
  const int64_t scale_words = int64_t{tiles} * 8 * nb;
  Params<T> p{};
  p.x = static_cast<const T*>(a.x);
  p.x_stride = a.x_stride;
  p.q = static_cast<const uint8_t*>(w.data);
  p.d = reinterpret_cast<const uint32_t*>(p.q + quant_bytes);
  p.mn = w.type == QuantType::Q4_1 ? p.d + scale_words : nullptr;
  p.y = static_cast<T*>(a.y);
  p.y_stride = a.y_stride;
  p.bias = static_cast<const T*>(a.bias);
  p.partial = nullptr;
  p.m = a.m;
  p.n = w.rows;
  p.nb = nb;
  p.chunks = int32_t(ceil_div(nb, kQuantChunkBlocks));
  p.tiles = tiles;
  p.chunks_per_split = p.chunks;
  p.accumulate = a.accumulate;
  return p;
}

}  // namespace

int64_t quant_block_size(QuantType type) {
  switch (type) {
    case QuantType::Q4_0: return 18;
    case QuantType::Q4_1: return 20;
    case QuantType::Q8_0: return 34;
  }
  throw CudaError("quant: unknown quant type " + std::to_string(static_cast<int>(type)));
}

int64_t quant_gpu_bytes(QuantType type, int64_t rows, int64_t cols) {
  require(rows > 0 && cols > 0 && cols % kBlockValues == 0, "quant: rows > 0 and cols a positive multiple of 32");
  return ceil_div(rows, kQuantTileRows) * kQuantTileRows * (cols / kBlockValues) * quant_block_size(type);
}

QuantLayout quant_layout(QuantType type, int64_t rows, int64_t cols) {
  QuantLayout l;
  l.bytes = quant_gpu_bytes(type, rows, cols);  // validates the shape
  const int64_t nb = cols / kBlockValues;
  l.tiles = ceil_div(rows, kQuantTileRows);
  l.tile_quant_bytes = int64_t{kQuantTileRows} * nb * 4 * lane_bytes(type);
  l.tile_scale_bytes = int64_t{kQuantTileRows} * nb * 2;
  l.scales_at = l.tiles * l.tile_quant_bytes;
  l.mins_at = type == QuantType::Q4_1 ? l.scales_at + l.tiles * l.tile_scale_bytes : 0;
  return l;
}

void quant_repack(QuantType type, const void* blocks, int64_t rows, int64_t cols, void* out, int threads_wanted) {
  const QuantRows whole{blocks, rows};
  quant_repack(type, std::span(&whole, 1), cols, out, threads_wanted);
}

void quant_repack(QuantType type, std::span<const QuantRows> parts, int64_t cols, void* out, int threads_wanted) {
  int64_t rows = 0;
  for (const QuantRows& part : parts) rows += part.rows;
  const QuantLayout l = quant_layout(type, std::max<int64_t>(rows, 1), cols);
  uint8_t* base = static_cast<uint8_t*>(out);
  quant_repack_tiles(type, parts, cols, 0, l.tiles, base, base + l.scales_at, l.mins_at > 0 ? base + l.mins_at : nullptr,
                     threads_wanted);
}

namespace {

static_assert(std::endian::native == std::endian::little, "the repack writes little-endian words");

// The low nibbles of bytes 0, 2, 4, 6 of v (each byte's high nibble clear) as 16 bits, byte 0's
// lowest.
inline uint32_t even_nibbles(uint64_t v) {
  v &= 0x000F000F000F000FULL;
  v |= v >> 12;
  v &= 0x000000FF000000FFULL;
  v |= v >> 24;
  return uint32_t(v & 0xFFFFu);
}

// A Q4 lane word from 8 bytes of a block's qs: their low (or high) nibbles are values i = 0..7 of
// the lane, and value i goes to nibble (i % 2) * 4 + i / 2 of the word.
inline uint32_t q4_lane_word(const uint8_t* qs8, bool high) {
  uint64_t x;
  std::memcpy(&x, qs8, 8);
  const uint64_t values = (high ? x >> 4 : x) & 0x0F0F0F0F0F0F0F0FULL;
  return even_nibbles(values) | even_nibbles(values >> 8) << 16;
}

}  // namespace

void quant_repack_tiles(QuantType type, std::span<const QuantRows> parts, int64_t cols, int64_t first, int64_t last,
                        void* quants, void* scales, void* mins, int threads_wanted) {
  int64_t rows = 0;
  for (const QuantRows& part : parts) {
    require(part.rows > 0 && part.blocks != nullptr, "quant_repack: every part needs rows > 0 and blocks");
    rows += part.rows;
  }
  const QuantLayout layout = quant_layout(type, rows, cols);  // validates the shape
  require(0 <= first && first <= last && last <= layout.tiles,
          "quant_repack: tiles [" + std::to_string(first) + ", " + std::to_string(last) + ") outside the matrix's " +
              std::to_string(layout.tiles));
  require(quants != nullptr && scales != nullptr && (type != QuantType::Q4_1 || mins != nullptr),
          "quant_repack: null output region");
  const int64_t nb = cols / kBlockValues;
  const int64_t block_bytes = quant_block_size(type);
  // Row r's blocks: in the part that holds it (parts are few: a walk per row is nothing beside
  // the row's repacking).
  const auto source_row = [&](int64_t r) {
    for (const QuantRows& part : parts) {
      if (r < part.rows) {
        const int64_t at = part.row_order != nullptr ? part.row_order[r] : r;
        return static_cast<const uint8_t*>(part.blocks) + at * nb * block_bytes;
      }
      r -= part.rows;
    }
    return static_cast<const uint8_t*>(nullptr);  // r < rows: not reached
  };
  const int lane = lane_bytes(type);
  // A tile of 16 rows writes its own bytes of each region (quants, scales, mins) and nothing
  // else, so tiles go to threads. A whole tile writes every one of its bytes; a last tile with
  // padding rows is zeroed first.
  const auto repack_tile = [&](int64_t tile) {
    uint8_t* tile_q = static_cast<uint8_t*>(quants) + (tile - first) * layout.tile_quant_bytes;
    uint8_t* tile_d = static_cast<uint8_t*>(scales) + (tile - first) * layout.tile_scale_bytes;
    uint8_t* tile_m = type == QuantType::Q4_1 ? static_cast<uint8_t*>(mins) + (tile - first) * layout.tile_scale_bytes
                                              : nullptr;
    const int64_t end_row = std::min(rows, (tile + 1) * kQuantTileRows);
    if (end_row - tile * kQuantTileRows < kQuantTileRows) {
      std::memset(tile_q, 0, size_t(layout.tile_quant_bytes));
      std::memset(tile_d, 0, size_t(layout.tile_scale_bytes));
      if (tile_m != nullptr) std::memset(tile_m, 0, size_t(layout.tile_scale_bytes));
    }
    for (int64_t r = tile * kQuantTileRows; r < end_row; ++r) {
      const int rr = int(r % kQuantTileRows), g = rr % 8, high = rr / 8;
      const uint8_t* row_blocks = source_row(r);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row_blocks + b * block_bytes;
        const int64_t c = b / kQuantChunkBlocks;
        const int bi = int(b % kQuantChunkBlocks);
        const int cb = int(std::min<int64_t>(kQuantChunkBlocks, nb - kQuantChunkBlocks * c));
        const int64_t word = c * 32 + g * cb + bi;  // the (row g, row g + 8) scale pair
        std::memcpy(tile_d + (2 * word + high) * 2, blk, 2);
        if (tile_m != nullptr) std::memcpy(tile_m + (2 * word + high) * 2, blk + 2, 2);
        const uint8_t* qs = blk + (type == QuantType::Q4_1 ? 4 : 2);
        uint8_t* chunk = tile_q + c * 256 * lane;
        if (type == QuantType::Q8_0) {
          for (int t = 0; t < 4; ++t) {
            const int64_t at = cb == kQuantChunkBlocks ? ((int64_t{bi / 2} * 16 + rr) * 4 + t) * 16 + (bi % 2) * 8
                                                       : ((int64_t{rr} * 4 + t) * cb + bi) * 8;
            std::memcpy(chunk + at, qs + 8 * t, 8);
          }
        } else {
          // Lane t holds values 8t..8t+7: the low nibbles of qs[0..7] and qs[8..15], then their
          // high nibbles.
          for (int t = 0; t < 4; ++t) {
            const uint32_t w = q4_lane_word(qs + 8 * (t % 2), t >= 2);
            std::memcpy(chunk + ((int64_t{rr} * 4 + t) * cb + bi) * 4, &w, 4);
          }
        }
      }
    }
  };
  // By default at least 1 MB of blocks a thread (a small matrix is not worth a thread's start),
  // and at most one thread a CPU.
  const int64_t tiles = last - first;
  const int64_t threads =
      threads_wanted > 0 ? threads_wanted : threads_for(tiles * kQuantTileRows * nb * block_bytes, int64_t{1} << 20);
  split_work(tiles, threads, [&](int64_t from, int64_t to) {
    for (int64_t tile = first + from; tile < first + to; ++tile) repack_tile(tile);
  });
}

void quant_dequantize(const QuantWeight& w, DType dtype, void* out, Stream stream) {
  require(w.rows > 0 && w.cols > 0 && w.cols % kBlockValues == 0 && w.data != nullptr,
          "quant_dequantize: the weight needs rows > 0, cols a positive multiple of 32 and data");
  require(dtype != DType::kF32, "quant_dequantize: bf16 or fp16 output (fp32 weights are dequantized at load)");
  require(out != nullptr && reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0,
          "quant_dequantize: out and the weight must be 16-byte aligned");
  dispatch_quant(w.type, [&]<QuantType Q>() {
    dispatch_half(dtype, [&]<typename T>() {
      QuantGemmArgs a;
      a.dtype = dtype;
      a.w = w;
      const Params<T> p = make_params<T>(a);
      const int64_t threads = int64_t{w.rows} * (w.cols / kBlockValues);
      quant_dequantize_kernel<Q, T><<<unsigned(ceil_div(threads, 256)), 256, 0, stream>>>(p, static_cast<T*>(out), w.rows);
      check_launch("quant_dequantize");
    });
  });
}

int64_t quant_gemm_workspace_floats(int32_t m, int32_t n, int32_t k) {
  if (m <= kQuantGemvMaxM || m <= 0 || n <= 0 || k <= 0 || k % kBlockValues != 0) return 0;
  // The split count depends on the type and dtype through the kernel's occupancy (registers):
  // the largest over all of them.
  const int sms = device_sms();
  int64_t most = 0;
  for (QuantType type : {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0}) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      dispatch_quant(type, [&]<QuantType Q>() {
        dispatch_half(dt, [&]<typename T>() {
          const TiledConfig c = tiled_config<Q, T>(m, n, k, sms, INT64_MAX);
          if (c.splits > 1) most = std::max(most, int64_t{c.splits} * m * n);
        });
      });
    }
  }
  return most;
}

int64_t quant_gemm_workspace_floats_up_to(int32_t max_m, int32_t n, int32_t k) {
  // The tiled kernel's split count depends on m only through its block rows (ceil(m / 64)),
  // so within one block row splits * m * n is largest at its last m; and splits only shrink as
  // block rows are added, so once no split is asked for, none is for any larger m.
  int64_t most = 0;
  for (int64_t rows_end = kTiledToks; rows_end - kTiledToks < max_m; rows_end += kTiledToks) {
    const int32_t m = int32_t(std::min<int64_t>(rows_end, max_m));
    if (m <= kQuantGemvMaxM) continue;
    const int64_t floats = quant_gemm_workspace_floats(m, n, k);
    if (floats == 0) break;
    most = std::max(most, floats);
  }
  return most;
}

std::string quant_gemm_describe(const QuantGemmArgs& a) {
  validate(a, a.w.rows);
  const int sms = device_sms();
  std::string text;
  dispatch_quant(a.w.type, [&]<QuantType Q>() {
    dispatch_half(a.dtype, [&]<typename T>() {
      if (use_gemv(a)) {
        const GemvConfig c = gemv_config(std::max(a.m, 1), a.w.rows, a.w.cols, sms, a.gemv_warps, a.gemv_prefetch);
        text = "gemv TM=" + std::to_string(c.tm) + " TN=" + std::to_string(c.tn) + " warps=" + std::to_string(c.warps) +
               " prefetch=" + std::to_string(c.prefetch) + " grid=" + std::to_string(c.grid);
      } else {
        const TiledConfig c = tiled_config<Q, T>(std::max(a.m, 1), a.w.rows, a.w.cols, sms,
                                                 a.workspace != nullptr ? a.workspace_floats : 0);
        text = "tiled 128x64 grid=" + std::to_string(c.bx) + "x" + std::to_string(c.by) + "x" +
               std::to_string(c.splits) +
               (c.splits > 1 ? " split-k " + std::to_string(c.chunks_per_split) + " chunks" : "");
      }
    });
  });
  return std::string(quant_type_name(a.w.type)) + " " + dtype_name(a.dtype) + " " + text;
}

namespace {

// The decode kernel for `a` with epilogue E (its config from gemv_config).
template <QuantType Q, typename T, Epilogue E>
void launch_gemv_for(const QuantGemmArgs& a, const Params<T>& p, const RopeCacheParams<T>& rope, int sms,
                     Stream stream) {
  const GemvConfig c =
      gemv_config(a.m, a.w.rows, a.w.cols, sms, a.gemv_warps, a.gemv_prefetch, E != Epilogue::kStore);
  const size_t shared = static_cast<size_t>(c.warps * c.tm * c.tn * 4 * 32) * sizeof(float);
  const dim3 grid(unsigned(c.grid)), block(unsigned(32 * c.warps));
  if constexpr (E == Epilogue::kStore) {
    if (c.tm == 1 && c.tn == 1) return launch_gemv<Q, T, 1, 1, E>(p, rope, c.prefetch, grid, block, shared, stream);
    if (c.tm == 1) return launch_gemv<Q, T, 1, 2, E>(p, rope, c.prefetch, grid, block, shared, stream);
  }
  if (c.tn == 1) launch_gemv<Q, T, 2, 1, E>(p, rope, c.prefetch, grid, block, shared, stream);
  else launch_gemv<Q, T, 2, 2, E>(p, rope, c.prefetch, grid, block, shared, stream);
}

// What both paired epilogues need besides validate(): the GEMV, no accumulate.
std::string paired_refusal(const QuantGemmArgs& a) {
  if (a.kernel == QuantKernel::kTiled) return "the tiled kernel has no fused epilogue";
  if (a.m < 1 || a.m > kQuantGemvMaxM)
    return "m = " + std::to_string(a.m) + " outside 1.." + std::to_string(kQuantGemvMaxM);
  if (a.accumulate) return "y += is not fused";
  return "";
}

}  // namespace

void quant_gemm(const QuantGemmArgs& a, Stream stream) {
  validate(a, a.w.rows);
  if (a.m == 0) return;
  const int sms = device_sms();
  dispatch_quant(a.w.type, [&]<QuantType Q>() {
    dispatch_half(a.dtype, [&]<typename T>() {
      Params<T> p = make_params<T>(a);
      if (use_gemv(a)) {
        launch_gemv_for<Q, T, Epilogue::kStore>(a, p, RopeCacheParams<T>{}, sms, stream);
        check_launch("quant_gemm (gemv)");
        return;
      }
      const TiledConfig c = tiled_config<Q, T>(a.m, a.w.rows, a.w.cols, sms,
                                               a.workspace != nullptr ? a.workspace_floats : 0);
      p.chunks_per_split = c.chunks_per_split;
      if (c.splits > 1) p.partial = a.workspace;
      quant_tiled_kernel<Q, T><<<dim3(unsigned(c.bx), unsigned(c.by), unsigned(c.splits)), kTiledThreads,
                                 tiled_shared_bytes<T>(), stream>>>(p);
      check_launch("quant_gemm (tiled)");
      if (c.splits > 1) {
        const int64_t total = int64_t{a.m} * a.w.rows;
        const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(total, 256), 4 * int64_t{sms}));
        quant_split_reduce_kernel<T><<<blocks, 256, 0, stream>>>(p, c.splits);
        check_launch("quant_gemm (split-k reduce)");
      }
    });
  });
}

std::string quant_swiglu_refusal(const QuantGemmArgs& a) {
  std::string why = paired_refusal(a);
  if (why.empty() && (a.w.rows % (2 * kQuantTileRows) != 0))
    why = "the gate/up weight's rows (" + std::to_string(a.w.rows) + ") are not 2n with n a multiple of 16";
  return why;
}

void quant_gemm_swiglu(const QuantGemmArgs& a, Stream stream) {
  validate(a, a.w.rows / 2);
  const std::string why = quant_swiglu_refusal(a);
  if (!why.empty()) throw CudaError("quant_gemm_swiglu: " + why);
  const int sms = device_sms();
  dispatch_quant(a.w.type, [&]<QuantType Q>() {
    dispatch_half(a.dtype, [&]<typename T>() {
      launch_gemv_for<Q, T, Epilogue::kSwiglu>(a, make_params<T>(a), RopeCacheParams<T>{}, sms, stream);
      check_launch("quant_gemm_swiglu");
    });
  });
}

std::string quant_qkv_rope_refusal(const RopeKvArgs& rope, const QuantGemmArgs& a) {
  std::string why = paired_refusal(a);
  if (!why.empty()) return why;
  if (rope.dtype != a.dtype) return "rope's dtype is not the GEMM's";
  if (rope.n_tokens != a.m) return "rope's n_tokens is not m";
  if (rope.head_dim <= 0 || (rope.head_dim % (2 * kQuantTileRows) != 0 && rope.head_dim != kQuantTileRows))
    return "head_dim " + std::to_string(rope.head_dim) + " is neither 16 nor a multiple of 32";
  if (rope.num_heads <= 0 || rope.num_kv_heads <= 0) return "no heads";
  const int64_t q_width = int64_t{rope.num_heads} * rope.head_dim;
  const int64_t kv_width = int64_t{rope.num_kv_heads} * rope.head_dim;
  if (a.w.rows != q_width + 2 * kv_width) return "the weight's rows are not q's, k's and v's";
  const size_t esize = dtype_size(rope.dtype);
  const char* q = static_cast<const char*>(rope.q);
  if (a.y != rope.q || a.y_stride != rope.q_stride || rope.k != q + size_t(q_width) * esize ||
      rope.v != q + size_t(q_width + kv_width) * esize || rope.k_stride != rope.q_stride ||
      rope.v_stride != rope.q_stride)
    return "y, q, k and v must lie side by side in one (n_tokens, q + 2 kv) buffer";
  return "";
}

void quant_gemm_qkv_rope(const RopeKvArgs& rope, const QuantGemmArgs& a, Stream stream) {
  validate(a, a.w.rows);
  const std::string why = quant_qkv_rope_refusal(rope, a);
  if (!why.empty()) throw CudaError("quant_gemm_qkv_rope: " + why);
  const int sms = device_sms();
  dispatch_quant(a.w.type, [&]<QuantType Q>() {
    dispatch_half(a.dtype, [&]<typename T>() {
      launch_gemv_for<Q, T, Epilogue::kQkvRope>(a, make_params<T>(a), rope_cache_params<T>(rope, "quant_gemm_qkv_rope"),
                                                sms, stream);
      check_launch("quant_gemm_qkv_rope");
    });
  });
}

}  // namespace strata::cuda
