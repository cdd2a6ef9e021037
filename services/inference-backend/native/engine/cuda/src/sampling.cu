// Batched sampling with the CPU Sampler's semantics (core/src/sampler.cpp), one thread-block
// cluster per sequence.
//
// Layout. Each of a row's C blocks (C <= 8, sampling_launch) copies a contiguous slice of the
// row into shared memory once, as order-preserving 32-bit keys, and every later pass reads the
// slice from there: the logits cross device memory once and are never written. Blocks combine
// partial results through distributed shared memory: each writes a mailbox, one cluster barrier,
// then every block reads all mailboxes in rank order, so each computes bit-identical sums and
// takes the same branches. Raw logprobs are taken from the slice first; penalties and the
// min_tokens mask then rewrite their tokens in the owner's slice, in the CPU's float operations.
//
// Order. A row's tokens are ranked by (value desc, id asc), the CPU's `better`. A prefix of that
// order is a Cut {key, id}: every key above `key`, and the tokens at `key` with ids <= `id`.
//  - top-k, top-n: radix select on the keys, four 8-bit digits, counts only (native 32-bit
//    shared-memory atomics), then the id among equal keys.
//  - A set of at most kGather tokens is gathered into rank 0, bitonic-sorted, and finished there
//    with double weights and a block-wide scan: top-p, min-p, the draw, processed top-n.
//  - Larger sets (top-p without a small top-k): the top kGather are tried first; only if top-p
//    keeps more, the top-p cut and the draw each narrow a key interval by passes that sum double
//    masses into 8 count-balanced intervals, until the interval fits kGather.
//  - No top-k and top_p == 1: the draw runs in id order, as the CPU's does, through per-warp
//    prefix sums over contiguous id ranges.
// Mass sums are deterministic (fixed reduction trees, no floating-point atomics), but not the
// CPU's sequential order: tokens can differ only where u * z lies within rounding of a boundary.
// min-p is taken as a prefix of the order, which holds while exp() is monotonic.
#include <cooperative_groups.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "device_common.cuh"
#include "strata/cuda_sampling.h"

namespace strata::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kGather = 2048;  // = 4 * kThreads: the rank-0 scan keeps 4 items per thread
constexpr int kBins = 256;
constexpr uint32_t kNoBin = kBins;  // count_bins(): a key it leaves out
constexpr int kParts = 8;      // intervals per mass-refinement pass
constexpr int kSlots = 8;      // scalars per mailbox
constexpr int kMaxCluster = 8;
constexpr int kTop = kSamplingMaxTop;
constexpr unsigned kFull = 0xffffffffu;
static_assert(kGather == 4 * kThreads && kParts <= kSlots && kWarps <= 32 && kMaxCluster * kSlots <= kThreads - kBins - 64);

// ---- keys -------------------------------------------------------------------------------------

// Order-preserving: a > b as floats iff key(a) > key(b); -0 and +0 share a key, as they compare
// equal. NaN maps to 0, below every other key (-inf is 0x007fffff).
__device__ __forceinline__ uint32_t key_of(float x) {
  if (x != x) return 0u;
  uint32_t b = __float_as_uint(x);
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float float_of(uint32_t k) {  // key 0 -> NaN
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Ascending order of the composite is the CPU's order: key descending, then id ascending.
__device__ __forceinline__ unsigned long long composite(uint32_t k, int32_t id) {
  return (static_cast<unsigned long long>(~k) << 32) | static_cast<uint32_t>(id);
}
__device__ __forceinline__ uint32_t comp_key(unsigned long long c) { return ~static_cast<uint32_t>(c >> 32); }
__device__ __forceinline__ int32_t comp_id(unsigned long long c) { return static_cast<int32_t>(c & 0xffffffffu); }

struct Cut {
  uint32_t key;
  int32_t id;
};
// Every candidate (processed keys are 0 for non-candidates; raw keys for NaN).
constexpr Cut kAll{0u, -1};

__device__ __forceinline__ bool in_cut(uint32_t k, int32_t id, Cut s) { return k > s.key || (k == s.key && id <= s.id); }

// ---- shared memory ----------------------------------------------------------------------------

struct Mail {
  uint32_t hist[kBins];
  double d[kSlots];
  uint32_t u[kSlots];
  unsigned long long q[2];
};

struct Shared {
  Mail mail[2];  // alternate, so one cluster barrier per exchange suffices
  // The last exchange combined in rank order: identical in every block of the cluster.
  uint32_t hist[kBins];
  double d[kSlots];
  uint32_t u[kSlots];
  unsigned long long q[2];
  double rank_d[kMaxCluster][kSlots];
  uint32_t rank_u[kMaxCluster][kSlots];
  // Block scratch.
  double warp_d[kWarps][kParts];
  uint32_t warp_u[kWarps][kParts];
  unsigned long long warp_q[kWarps][2];
  double walk_d[kWarps];
  double walk_x[kWarps];
  uint32_t walk_u[kWarps];
  unsigned long long walk_q[kWarps];
  uint32_t pivots[kParts];
  uint32_t bcast[4];
  int32_t first;
  // Rank 0: gathered tokens, sorted, and their cumulative masses.
  uint32_t gather_n;
  unsigned long long comp[kGather];
  double cum[kGather];
  // Rank 0: raw logprobs, computed before the penalties touch the slice.
  double raw_log_z;
  int32_t raw_n;
  int32_t raw_ids[kTop];
  uint32_t raw_keys[kTop];
};

constexpr size_t round16(size_t n) { return (n + 15) / 16 * 16; }
constexpr size_t kSliceOffset = round16(sizeof(Shared));
// The slice sits at the same offset in every block; +4 keys absorb the row's 16-byte phase.
constexpr size_t smem_bytes_for(int32_t slice) { return kSliceOffset + round16((static_cast<size_t>(slice) + 4) * 4); }

struct Ctx {
  Shared* sh;
  uint32_t* keys;  // this block's slice: keys[i] is token lo + i
  int32_t n, lo;
  uint32_t rank, size;
  int cur;         // mailbox written next
  int lane, warp;
  int wb, we;      // this warp's contiguous part of the slice, in id order
};

// Thread-block clusters need sm_90; built for an older GPU, a row runs in one block and these
// reduce to that block (sampling_launch then never asks for more).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
__device__ __forceinline__ void cluster_sync() { __syncthreads(); }
__device__ __forceinline__ uint32_t cluster_rank() { return 0; }
__device__ __forceinline__ uint32_t cluster_size() { return 1; }
template <typename T>
__device__ __forceinline__ T* peer(T* p, uint32_t) {
  return p;
}
#else
__device__ __forceinline__ void cluster_sync() { cg::this_cluster().sync(); }
__device__ __forceinline__ uint32_t cluster_rank() { return cg::this_cluster().block_rank(); }
__device__ __forceinline__ uint32_t cluster_size() { return cg::this_cluster().num_blocks(); }
template <typename T>
__device__ __forceinline__ T* peer(T* p, uint32_t rank) {
  return cg::this_cluster().map_shared_rank(p, static_cast<int>(rank));
}
#endif

// ---- reductions -------------------------------------------------------------------------------

// xor butterflies: every lane ends with the same bits, since a + b == b + a exactly.
__device__ __forceinline__ double warp_sum_d(double x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(kFull, x, off);
  return x;
}
__device__ __forceinline__ unsigned long long warp_max_q(unsigned long long x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = max(x, __shfl_xor_sync(kFull, x, off));
  return x;
}
__device__ __forceinline__ double warp_incl_scan_d(double x, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const double o = __shfl_up_sync(kFull, x, off);
    if (lane >= off) x += o;
  }
  return x;
}

// Block sums of ND doubles and NU counts, and maxima of NQ 64-bit values, into mail[cur].
template <int ND, int NU, int NQ>
__device__ __forceinline__ void post(Ctx& c, const double* d, const uint32_t* u, const unsigned long long* q) {
  Shared& sh = *c.sh;
#pragma unroll
  for (int j = 0; j < ND; ++j) {
    const double v = warp_sum_d(d[j]);
    if (c.lane == 0) sh.warp_d[c.warp][j] = v;
  }
#pragma unroll
  for (int j = 0; j < NU; ++j) {
    const uint32_t v = __reduce_add_sync(kFull, u[j]);
    if (c.lane == 0) sh.warp_u[c.warp][j] = v;
  }
#pragma unroll
  for (int j = 0; j < NQ; ++j) {
    const unsigned long long v = warp_max_q(q[j]);
    if (c.lane == 0) sh.warp_q[c.warp][j] = v;
  }
  __syncthreads();
  const int t = threadIdx.x;
  Mail& mb = sh.mail[c.cur];
  if constexpr (ND > 0) {
    if (t < ND) {
      double s = 0.0;
      for (int w = 0; w < kWarps; ++w) s += sh.warp_d[w][t];
      mb.d[t] = s;
    }
  }
  if constexpr (NU > 0) {
    if (t >= 32 && t < 32 + NU) {
      uint32_t s = 0;
      for (int w = 0; w < kWarps; ++w) s += sh.warp_u[w][t - 32];
      mb.u[t - 32] = s;
    }
  }
  if constexpr (NQ > 0) {
    if (t >= 64 && t < 64 + NQ) {
      unsigned long long s = 0;
      for (int w = 0; w < kWarps; ++w) s = max(s, sh.warp_q[w][t - 64]);
      mb.q[t - 64] = s;
    }
  }
  __syncthreads();
}

// Every block has written mail[cur]: one cluster barrier (release/acquire), then each block
// reads all mailboxes. The buffer written next was last read before this barrier by everyone.
__device__ void exchange(Ctx& c, bool with_hist) {
  cluster_sync();
  Shared& sh = *c.sh;
  Mail* mine = &sh.mail[c.cur];
  const int t = threadIdx.x;
  if (with_hist && t < kBins) {
    uint32_t s = 0;
    for (uint32_t r = 0; r < c.size; ++r) s += peer(mine, r)->hist[t];
    sh.hist[t] = s;
  }
  if (t >= kBins && t < kBins + kMaxCluster * kSlots) {
    const uint32_t r = static_cast<uint32_t>(t - kBins) / kSlots, j = static_cast<uint32_t>(t - kBins) % kSlots;
    if (r < c.size) {
      const Mail* pm = peer(mine, r);
      sh.rank_d[r][j] = pm->d[j];
      sh.rank_u[r][j] = pm->u[j];
    }
  }
  if (t >= kThreads - 2) {
    const int j = t - (kThreads - 2);
    unsigned long long s = 0;
    for (uint32_t r = 0; r < c.size; ++r) s = max(s, peer(mine, r)->q[j]);
    sh.q[j] = s;
  }
  __syncthreads();
  if (t < kSlots) {
    double sd = 0.0;
    uint32_t su = 0;
    for (uint32_t r = 0; r < c.size; ++r) {
      sd += sh.rank_d[r][t];
      su += sh.rank_u[r][t];
    }
    sh.d[t] = sd;
    sh.u[t] = su;
  }
  __syncthreads();
  c.cur ^= 1;
}

// ---- selection by count -----------------------------------------------------------------------

// Warp 0: the bin, scanning sh.hist from the top, that holds the rem-th key (1-based).
__device__ void pick_bin(Shared& sh, uint32_t rem, int lane) {
  const int top = kBins - 1 - 8 * lane;
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += sh.hist[top - j];
  uint32_t incl = sum;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t o = __shfl_up_sync(kFull, incl, off);
    if (lane >= off) incl += o;
  }
  const unsigned hit = __ballot_sync(kFull, incl >= rem);
  const int owner = hit ? __ffs(hit) - 1 : 31;
  if (lane == owner) {
    uint32_t above = incl - sum;
    int b = top;
    for (int j = 0; j < 7 && above + sh.hist[b] < rem; ++j) above += sh.hist[b--];
    sh.bcast[0] = static_cast<uint32_t>(b);
    sh.bcast[1] = above;
    sh.bcast[2] = sh.hist[b];
  }
}

// The id of the j-th (1-based, by id) member of s whose key is `key`.
__device__ int32_t find_tie_id(Ctx& c, Cut s, uint32_t key, uint32_t j) {
  Shared& sh = *c.sh;
  uint32_t cnt = 0;
  for (int base = c.wb; base < c.we; base += 32) {
    const int i = base + c.lane;
    const bool m = i < c.we && c.keys[i] == key && in_cut(key, c.lo + i, s);
    cnt += static_cast<uint32_t>(__popc(__ballot_sync(kFull, m)));
  }
  if (c.lane == 0) sh.walk_u[c.warp] = cnt;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
    for (int w = 0; w < kWarps; ++w) total += sh.walk_u[w];
    sh.mail[c.cur].u[0] = total;
  }
  exchange(c, false);
  uint32_t before = 0, owner = 0;
  for (uint32_t r = 0; r < c.size; ++r) {
    owner = r;
    if (before + sh.rank_u[r][0] >= j) break;
    before += sh.rank_u[r][0];
  }
  if (c.rank == owner) {
    uint32_t need = j - before;
    int w = 0;
    while (w < kWarps - 1 && sh.walk_u[w] < need) need -= sh.walk_u[w++];
    if (c.warp == w) {
      for (int base = c.wb; base < c.we; base += 32) {
        const int i = base + c.lane;
        const bool m = i < c.we && c.keys[i] == key && in_cut(key, c.lo + i, s);
        const unsigned bal = __ballot_sync(kFull, m);
        const uint32_t pop = static_cast<uint32_t>(__popc(bal));
        if (need <= pop) {
          if (m && static_cast<uint32_t>(__popc(bal & ((1u << c.lane) - 1u))) == need - 1) {
            sh.mail[c.cur].u[0] = static_cast<uint32_t>(c.lo + i);
          }
          break;
        }
        need -= pop;
      }
    }
  }
  exchange(c, false);
  return static_cast<int32_t>(sh.rank_u[owner][0]);
}

// The cluster's histogram of the keys of cut s: `bin` gives a key's bin, or kNoBin to leave it
// out. Each block counts its slice into its mailbox; after the exchange, sh.hist holds
// the sums.
template <class Bin>
__device__ void count_bins(Ctx& c, Cut s, Bin bin) {
  Mail& mb = c.sh->mail[c.cur];
  for (int b = threadIdx.x; b < kBins; b += kThreads) mb.hist[b] = 0;
  __syncthreads();
  for (int base = c.wb; base < c.we; base += 32) {
    const int i = base + c.lane;
    if (i < c.we) {
      const uint32_t key = c.keys[i];
      const uint32_t b = bin(key);
      if (b != kNoBin && in_cut(key, c.lo + i, s)) atomicAdd(&mb.hist[b], 1u);
    }
  }
  exchange(c, true);
}

// The cut holding the k best members of s (|s| = s_size, 1 <= k).
__device__ Cut count_select(Ctx& c, Cut s, uint32_t s_size, uint32_t k) {
  if (k >= s_size) return s;
  Shared& sh = *c.sh;
  uint32_t prefix = 0, mask = 0, rem = k, ties = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    count_bins(c, s, [&](uint32_t key) { return (key & mask) == prefix ? (key >> shift) & 0xffu : kNoBin; });
    if (c.warp == 0) pick_bin(sh, rem, c.lane);
    __syncthreads();
    prefix |= sh.bcast[0] << shift;
    mask |= 0xffu << shift;
    rem -= sh.bcast[1];
    ties = sh.bcast[2];
    __syncthreads();
  }
  if (rem >= ties) return {prefix, prefix == s.key ? s.id : INT_MAX};
  return {prefix, find_tie_id(c, s, prefix, rem)};
}

// ---- rank 0: gathered tokens ------------------------------------------------------------------

__device__ void sort_gathered(Shared& sh, uint32_t count) {
  uint32_t n2 = 1;
  while (n2 < count) n2 <<= 1;
  for (uint32_t i = count + threadIdx.x; i < n2; i += kThreads) sh.comp[i] = ~0ull;
  __syncthreads();
  for (uint32_t k = 2; k <= n2; k <<= 1) {
    for (uint32_t j = k >> 1; j > 0; j >>= 1) {
      for (uint32_t i = threadIdx.x; i < n2; i += kThreads) {
        const uint32_t ixj = i ^ j;
        if (ixj > i) {
          const unsigned long long a = sh.comp[i], b = sh.comp[ixj];
          if ((i & k) == 0 ? a > b : a < b) {
            sh.comp[i] = b;
            sh.comp[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// The `count` members of the set `pred` names, into rank 0's comp[], sorted. Every block calls.
template <typename Pred>
__device__ void gather_sorted(Ctx& c, uint32_t count, Pred pred) {
  Shared& sh = *c.sh;
  if (c.rank == 0 && threadIdx.x == 0) sh.gather_n = 0;
  cluster_sync();
  uint32_t* counter = peer(&sh.gather_n, 0);
  unsigned long long* dst = peer(sh.comp, 0);
  for (int base = c.wb; base < c.we; base += 32) {
    const int i = base + c.lane;
    const uint32_t key = i < c.we ? c.keys[i] : 0u;
    const bool m = i < c.we && pred(key, c.lo + i);
    const unsigned bal = __ballot_sync(kFull, m);
    if (bal == 0) continue;
    const int leader = __ffs(bal) - 1;
    uint32_t at = 0;
    if (c.lane == leader) at = atomicAdd(counter, static_cast<uint32_t>(__popc(bal)));
    at = __shfl_sync(kFull, at, leader);
    if (m) {
      const uint32_t pos = at + static_cast<uint32_t>(__popc(bal & ((1u << c.lane) - 1u)));
      if (pos < kGather) dst[pos] = composite(key, c.lo + i);
    }
  }
  cluster_sync();
  if (c.rank == 0) sort_gathered(sh, count);
}

// Exclusive block-wide scan, in a fixed order.
__device__ double block_exclusive_scan_d(Shared& sh, double v, int lane, int warp) {
  const double incl = warp_incl_scan_d(v, lane);
  if (lane == 31) sh.walk_d[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const double x = warp_incl_scan_d(lane < kWarps ? sh.walk_d[lane] : 0.0, lane);
    const double ex = __shfl_up_sync(kFull, x, 1);
    if (lane < kWarps) sh.walk_x[lane] = lane == 0 ? 0.0 : ex;
  }
  __syncthreads();
  const double in_warp = __shfl_up_sync(kFull, incl, 1);
  return sh.walk_x[warp] + (lane == 0 ? 0.0 : in_warp);
}

__device__ __forceinline__ double weight(uint32_t key, double m) { return exp(static_cast<double>(float_of(key)) - m); }

// A slice entry's weight in an unsorted draw: 0, and keep false, for a non-candidate (key 0)
// or a token min-p drops.
__device__ __forceinline__ double kept_weight(uint32_t key, double m, bool floor_on, double floor_w, bool& keep) {
  keep = false;
  if (key == 0) return 0.0;
  const double w = weight(key, m);
  keep = !floor_on || w >= floor_w;
  return keep ? w : 0.0;
}

// Rank 0: cum[i] = w_0 + ... + w_i over comp[0, count), w = exp(y - m).
__device__ void scan_gathered(Shared& sh, uint32_t count, double m, int lane, int warp) {
  const uint32_t b = 4u * threadIdx.x;
  double part[4];
  double run = 0.0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (b + q < count) run += weight(comp_key(sh.comp[b + q]), m);
    part[q] = run;
  }
  const double ex = block_exclusive_scan_d(sh, run, lane, warp);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (b + q < count) sh.cum[b + q] = ex + part[q];
  }
  __syncthreads();
}

// Rank 0: the smallest i < count with f(i), or count.
template <typename F>
__device__ uint32_t first_index(Shared& sh, uint32_t count, F f) {
  if (threadIdx.x == 0) sh.first = static_cast<int32_t>(count);
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
    if (f(i)) {
      atomicMin(&sh.first, static_cast<int32_t>(i));
      break;
    }
  }
  __syncthreads();
  const uint32_t r = static_cast<uint32_t>(sh.first);
  __syncthreads();
  return r;
}

struct Outcome {
  int32_t token = 0;
  bool scored = false;  // y_tok and log_z hold the processed logprob
  float y_tok = 0.0f;
  double log_z = 0.0;
  uint32_t top_n = 0;   // processed top entries in rank 0's comp[0, top_n)
};

// Rank 0, comp[0, count) sorted with cum[] filled: top-p against z_k (when top_p < 1), min-p,
// then the draw, as the CPU runs them on its sorted candidates.
__device__ Outcome finish_gathered(Shared& sh, uint32_t count, double z_k, const SeqSamplingParams& p, double m) {
  uint32_t keep = count;
  if (p.top_p < 1.0f) {  // keep a token while the mass before it is < top_p * z
    const double limit = __dmul_rn(static_cast<double>(p.top_p), z_k);
    const uint32_t i = first_index(sh, count, [&](uint32_t j) { return sh.cum[j] >= limit; });
    keep = i < count ? i + 1 : count;
  }
  if (p.min_p > 0.0f) {  // weights fall along the order, so min-p keeps a prefix
    const double floor_w = static_cast<double>(p.min_p);
    keep = first_index(sh, keep, [&](uint32_t j) { return weight(comp_key(sh.comp[j]), m) < floor_w; });
  }
  keep = max(keep, 1u);  // the top token has weight 1 >= min_p
  const double z = sh.cum[keep - 1];
  const double target = __dmul_rn(p.uniform, z);
  const uint32_t i = first_index(sh, keep, [&](uint32_t j) { return sh.cum[j] > target; });
  const uint32_t pos = i < keep ? i : keep - 1;
  Outcome o;
  o.token = comp_id(sh.comp[pos]);
  o.scored = true;
  o.y_tok = float_of(comp_key(sh.comp[pos]));
  o.log_z = m + log(z);
  o.top_n = p.logprobs > 0 ? min(static_cast<uint32_t>(p.logprobs), keep) : 0u;
  return o;
}

// ---- passes over the slice --------------------------------------------------------------------

struct Mass {
  Cut cut;
  double mass;
  uint32_t count;
};

// Mass and size of the set s.
__device__ Mass mass_of(Ctx& c, Cut s, double m) {
  double acc = 0.0;
  uint32_t cnt = 0;
  for (int base = c.wb; base < c.we; base += 32) {
    const int i = base + c.lane;
    if (i < c.we) {
      const uint32_t key = c.keys[i];
      if (in_cut(key, c.lo + i, s)) {
        acc += weight(key, m);
        ++cnt;
      }
    }
  }
  post<1, 1, 0>(c, &acc, &cnt, nullptr);
  exchange(c, false);
  return {s, c.sh->d[0], c.sh->u[0]};
}

// min-p over the set s: the tokens with weight >= min_p, a prefix since weights fall along the order.
__device__ Mass min_p_cut(Ctx& c, Cut s, uint32_t s_size, double m, float min_p) {
  const double floor_w = static_cast<double>(min_p);
  double acc = 0.0;
  uint32_t cnt = 0;
  unsigned long long low = 0;  // max of ~key: the lowest key kept
  for (int base = c.wb; base < c.we; base += 32) {
    const int i = base + c.lane;
    if (i < c.we) {
      const uint32_t key = c.keys[i];
      if (in_cut(key, c.lo + i, s)) {
        const double w = weight(key, m);
        if (w >= floor_w) {
          acc += w;
          ++cnt;
          low = max(low, static_cast<unsigned long long>(~key));
        }
      }
    }
  }
  post<1, 1, 1>(c, &acc, &cnt, &low);
  exchange(c, false);
  Shared& sh = *c.sh;
  Mass r{s, sh.d[0], sh.u[0]};
  if (r.count < s_size) {
    const uint32_t kmin = ~static_cast<uint32_t>(sh.q[0]);
    r.cut = {kmin, kmin == s.key ? s.id : INT_MAX};
  }
  return r;
}

// The first member of s (|s| = s_size), in order, whose inclusive cumulative mass passes `target`
// (>= when inclusive, else >), or the last member; with the mass and count up to it.
__device__ Mass select_mass(Ctx& c, Cut s, uint32_t s_size, double target, bool inclusive, double m) {
  Shared& sh = *c.sh;
  uint32_t lo = s.key, hi = 0xffffffffu;
  double above = 0.0;  // mass of the members above hi
  uint32_t above_n = 0, in_n = s_size;
  for (;;) {
    if (in_n <= static_cast<uint32_t>(kGather)) {
      const uint32_t wlo = lo, whi = hi;
      gather_sorted(c, in_n, [=](uint32_t k, int32_t id) { return k >= wlo && k <= whi && in_cut(k, id, s); });
      if (c.rank == 0) {
        scan_gathered(sh, in_n, m, c.lane, c.warp);
        const uint32_t i = first_index(sh, in_n, [&](uint32_t j) {
          const double cj = above + sh.cum[j];
          return inclusive ? cj >= target : cj > target;
        });
        const uint32_t pos = i < in_n ? i : in_n - 1;
        if (threadIdx.x == 0) {
          Mail& mb = sh.mail[c.cur];
          mb.u[0] = comp_key(sh.comp[pos]);
          mb.u[1] = static_cast<uint32_t>(comp_id(sh.comp[pos]));
          mb.u[2] = above_n + pos + 1;
          mb.d[0] = above + sh.cum[pos];
        }
      }
      exchange(c, false);
      return {{sh.rank_u[0][0], static_cast<int32_t>(sh.rank_u[0][1])}, sh.rank_d[0][0], sh.rank_u[0][2]};
    }
    if (lo == hi) {  // more than kGather tokens share one key, hence one weight
      const double w = weight(lo, m);
      uint32_t i = in_n - 1;
      if (w > 0.0) {
        const double need = (target - above) / w;
        const double f = inclusive ? ceil(need) - 1.0 : floor(need);
        i = f <= 0.0 ? 0u : f >= static_cast<double>(in_n - 1) ? in_n - 1 : static_cast<uint32_t>(f);
      }
      const int32_t id = find_tie_id(c, s, lo, i + 1);
      return {{lo, id}, above + __dmul_rn(static_cast<double>(i + 1), w), above_n + i + 1};
    }
    // Count histogram of the next 8 bits below the interval's common prefix.
    const int topbit = 31 - __clz(lo ^ hi);
    const int shift = topbit > 7 ? topbit - 7 : 0;
    const uint32_t base = lo >> shift;
    const int top_bin = static_cast<int>((hi >> shift) - base);
    count_bins(c, s, [&](uint32_t key) { return key >= lo && key <= hi ? (key >> shift) - base : kNoBin; });
    // Up to kParts intervals on bin edges, from the top: runs of about in_n / kParts tokens, and a
    // bin that alone holds that many gets an interval of its own. Every round then either splits
    // the tokens into at least two non-empty intervals or (one non-empty bin) narrows the key
    // span by 8 bits, so the loop ends.
    if (threadIdx.x == 0) {
      const uint32_t quota = (in_n + kParts - 1) / kParts;
      uint32_t parts = 0, acc = 0, nonempty = 0, only = 0, highest = 0;
      auto edge = [&](int b) { return (base + static_cast<uint32_t>(b)) << shift; };
      for (int b = top_bin; b >= 0; --b) {
        const uint32_t h = sh.hist[b];
        if (h == 0) continue;
        if (nonempty++ == 0) highest = static_cast<uint32_t>(b);
        only = static_cast<uint32_t>(b);
        if (h >= quota && acc > 0 && parts < kParts - 1) {
          sh.pivots[parts++] = edge(b + 1);
          acc = 0;
        }
        acc += h;
        if (acc >= quota && b > 0 && parts < kParts - 1) {
          sh.pivots[parts++] = edge(b);
          acc = 0;
        }
      }
      if (parts == 0 && nonempty > 1) sh.pivots[parts++] = edge(static_cast<int>(highest));
      sh.bcast[0] = parts + 1;
      sh.bcast[1] = nonempty;
      sh.bcast[2] = only;
    }
    __syncthreads();
    const uint32_t nint = sh.bcast[0];
    if (sh.bcast[1] == 1) {  // one bin holds them all: narrow to it, 8 bits at a time
      const uint32_t b = sh.bcast[2];
      lo = max(lo, (base + b) << shift);
      hi = min(hi, static_cast<uint32_t>(((static_cast<unsigned long long>(base + b) + 1) << shift) - 1));
      __syncthreads();
      continue;
    }
    // Interval j holds keys in [piv[j], piv[j-1]); piv[-1] = hi + 1, and the last reaches down to lo.
    uint32_t piv[kParts - 1];
#pragma unroll
    for (int q = 0; q < kParts - 1; ++q) piv[q] = static_cast<uint32_t>(q) + 1 < nint ? sh.pivots[q] : 0u;
    double acc[kParts];
    uint32_t cnt[kParts];
#pragma unroll
    for (int q = 0; q < kParts; ++q) {
      acc[q] = 0.0;
      cnt[q] = 0;
    }
    for (int b0 = c.wb; b0 < c.we; b0 += 32) {
      const int i = b0 + c.lane;
      if (i < c.we) {
        const uint32_t key = c.keys[i];
        if (key >= lo && key <= hi && in_cut(key, c.lo + i, s)) {
          const double w = weight(key, m);
          int j = 0;
#pragma unroll
          for (int q = 0; q < kParts - 1; ++q) j += key < piv[q] ? 1 : 0;
#pragma unroll
          for (int q = 0; q < kParts; ++q) {
            if (j == q) {
              acc[q] += w;
              ++cnt[q];
            }
          }
        }
      }
    }
    post<kParts, kParts, 0>(c, acc, cnt, nullptr);
    exchange(c, false);
    // Every block walks the same combined masses.
    int chosen = -1, last = -1;
    double run = above, last_run = above;
    uint32_t run_n = above_n, last_run_n = above_n;
    for (int j = 0; j < static_cast<int>(nint); ++j) {
      if (sh.u[j] != 0) {
        const double cj = run + sh.d[j];
        if (inclusive ? cj >= target : cj > target) {
          chosen = j;
          break;
        }
        last = j;
        last_run = run;
        last_run_n = run_n;
      }
      run += sh.d[j];
      run_n += sh.u[j];
    }
    if (chosen < 0) {  // rounding put the target past the total: the last member
      chosen = last;
      run = last_run;
      run_n = last_run_n;
    }
    above = run;
    above_n = run_n;
    in_n = sh.u[chosen];
    const uint32_t new_hi = chosen == 0 ? hi : sh.pivots[chosen - 1] - 1;
    const uint32_t new_lo = chosen == static_cast<int>(nint) - 1 ? lo : sh.pivots[chosen];
    lo = new_lo;
    hi = new_hi;
    __syncthreads();  // sh.u/d and pivots are rewritten next round
  }
}

// ---- the three ways to a token ----------------------------------------------------------------

// Top n (n >= 1) of the candidates, sorted into rank 0's comp[].
__device__ uint32_t gather_top(Ctx& c, uint32_t ncand, uint32_t n) {
  const Cut cut = count_select(c, kAll, ncand, n);
  gather_sorted(c, n, [=](uint32_t k, int32_t id) { return in_cut(k, id, cut); });
  return n;
}

// No top-k and top_p == 1 (or greedy with processed logprobs): min-p by weight, then the draw in
// id order, as the CPU draws from its unsorted candidates.
__device__ Outcome draw_unsorted(Ctx& c, const SeqSamplingParams& p, bool greedy, uint32_t ncand, double m, float m_f,
                                 int32_t argmax) {
  Shared& sh = *c.sh;
  const bool floor_on = !greedy && p.min_p > 0.0f;
  const double floor_w = static_cast<double>(p.min_p);
  double run = 0.0;
  uint32_t kept = 0;
  unsigned long long last = 0;  // (id + 1) << 32 | key of the last kept token
  for (int base = c.wb; base < c.we; base += 32) {
    const int i = base + c.lane;
    const uint32_t key = i < c.we ? c.keys[i] : 0u;
    bool keep;
    const double w = kept_weight(key, m, floor_on, floor_w, keep);
    run += __shfl_sync(kFull, warp_incl_scan_d(w, c.lane), 31);
    const unsigned bal = __ballot_sync(kFull, keep);
    kept += static_cast<uint32_t>(__popc(bal));
    if (keep && c.lane == 31 - __clz(bal)) last = (static_cast<unsigned long long>(c.lo + i + 1) << 32) | key;
  }
  last = warp_max_q(last);
  if (c.lane == 0) {
    sh.walk_d[c.warp] = run;
    sh.walk_u[c.warp] = kept;
    sh.walk_q[c.warp] = last;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    uint32_t n = 0;
    unsigned long long l = 0;
    for (int w = 0; w < kWarps; ++w) {
      s += sh.walk_d[w];
      n += sh.walk_u[w];
      l = max(l, sh.walk_q[w]);
    }
    Mail& mb = sh.mail[c.cur];
    mb.d[0] = s;
    mb.u[0] = n;
    mb.q[0] = l;
  }
  exchange(c, false);
  const double z = sh.d[0];
  const uint32_t nkept = sh.u[0];
  Outcome o;
  o.scored = true;
  o.log_z = m + log(z);
  o.token = argmax;
  o.y_tok = m_f;
  if (!greedy) {
    const double target = __dmul_rn(p.uniform, z);
    double before = 0.0;
    int owner = -1;
    for (uint32_t r = 0; r < c.size; ++r) {
      if (sh.rank_u[r][0] != 0 && before + sh.rank_d[r][0] > target) {
        owner = static_cast<int>(r);
        break;
      }
      before += sh.rank_d[r][0];
    }
    if (owner < 0) {  // u * z rounded up to z: the last candidate, as the CPU's fallback
      o.token = static_cast<int32_t>(sh.q[0] >> 32) - 1;
      o.y_tok = float_of(static_cast<uint32_t>(sh.q[0]));
    } else {
      if (c.rank == static_cast<uint32_t>(owner)) {
        double start = before;
        int w = 0, last_w = 0;
        double last_start = before;
        for (; w < kWarps; ++w) {
          if (sh.walk_u[w] != 0) {
            if (start + sh.walk_d[w] > target) break;
            last_w = w;
            last_start = start;
          }
          start += sh.walk_d[w];
        }
        if (w == kWarps) {  // the block's sum and the warps' running sum rounded apart
          w = last_w;
          start = last_start;
        }
        if (c.warp == w) {
          int32_t tok = -1;
          uint32_t tkey = 0, lkey = 0;
          int32_t ltok = -1;
          for (int base = c.wb; base < c.we; base += 32) {
            const int i = base + c.lane;
            const uint32_t key = i < c.we ? c.keys[i] : 0u;
            bool keep;
            const double wt = kept_weight(key, m, floor_on, floor_w, keep);
            const double incl = warp_incl_scan_d(wt, c.lane);
            const unsigned hit = __ballot_sync(kFull, keep && start + incl > target);
            if (hit) {
              const int src = __ffs(hit) - 1;
              tok = __shfl_sync(kFull, c.lo + i, src);
              tkey = __shfl_sync(kFull, key, src);
              break;
            }
            const unsigned bal = __ballot_sync(kFull, keep);
            if (bal) {
              const int src = 31 - __clz(bal);
              ltok = __shfl_sync(kFull, c.lo + i, src);
              lkey = __shfl_sync(kFull, key, src);
            }
            start += __shfl_sync(kFull, incl, 31);
          }
          if (tok < 0) {
            tok = ltok;
            tkey = lkey;
          }
          if (c.lane == 0) {
            sh.mail[c.cur].u[0] = static_cast<uint32_t>(tok);
            sh.mail[c.cur].u[1] = tkey;
          }
        }
      }
      exchange(c, false);
      o.token = static_cast<int32_t>(sh.rank_u[owner][0]);
      o.y_tok = float_of(sh.rank_u[owner][1]);
    }
  }
  if (p.logprobs > 0 && p.processed_logprobs != 0) {
    o.top_n = gather_top(c, ncand, min(static_cast<uint32_t>(p.logprobs), nkept));
  }
  return o;
}

// top_k > 0 or top_p < 1: the draw runs over the candidates in the CPU's sorted order.
__device__ Outcome draw_sorted(Ctx& c, const SeqSamplingParams& p, uint32_t ncand, double m) {
  Shared& sh = *c.sh;
  const uint32_t k = p.top_k > 0 ? min(static_cast<uint32_t>(p.top_k), ncand) : ncand;
  const Cut cut_k = count_select(c, kAll, ncand, k);
  Outcome o;
  if (k <= static_cast<uint32_t>(kGather)) {
    gather_sorted(c, k, [=](uint32_t key, int32_t id) { return in_cut(key, id, cut_k); });
    if (c.rank == 0) {
      scan_gathered(sh, k, m, c.lane, c.warp);
      o = finish_gathered(sh, k, sh.cum[k - 1], p, m);
    }
    return o;
  }
  const Mass top_k = mass_of(c, cut_k, m);
  Mass kept{cut_k, top_k.mass, k};
  if (p.top_p < 1.0f) {
    const double limit = __dmul_rn(static_cast<double>(p.top_p), top_k.mass);
    // Usually top-p keeps few tokens: try the best kGather before narrowing by mass.
    const Cut cut_g = count_select(c, cut_k, k, kGather);
    gather_sorted(c, kGather, [=](uint32_t key, int32_t id) { return in_cut(key, id, cut_g); });
    if (c.rank == 0) {
      scan_gathered(sh, kGather, m, c.lane, c.warp);
      if (threadIdx.x == 0) sh.mail[c.cur].u[0] = sh.cum[kGather - 1] >= limit ? 1u : 0u;
    }
    exchange(c, false);
    if (sh.rank_u[0][0] != 0) {
      if (c.rank == 0) o = finish_gathered(sh, kGather, top_k.mass, p, m);
      return o;
    }
    kept = select_mass(c, cut_k, k, limit, true, m);
  }
  if (p.min_p > 0.0f) kept = min_p_cut(c, kept.cut, kept.count, m, p.min_p);
  const Mass at = select_mass(c, kept.cut, kept.count, __dmul_rn(p.uniform, kept.mass), false, m);
  o.token = at.cut.id;
  o.scored = true;
  o.y_tok = float_of(at.cut.key);
  o.log_z = m + log(kept.mass);
  if (p.logprobs > 0 && p.processed_logprobs != 0) {
    o.top_n = gather_top(c, ncand, min(static_cast<uint32_t>(p.logprobs), kept.count));
  }
  return o;
}

// ---- the kernel -------------------------------------------------------------------------------

struct KernelArgs {
  SamplingArgs a;
  int32_t slice;
};

__device__ void load_slice(Ctx& c, const float* src, int phase, uint32_t& max_key) {
  const int t = threadIdx.x;
  const int head = min(c.n, (4 - phase) & 3);
  const int n4 = (c.n - head) >> 2;
  uint32_t mx = 0;
  if (t < head) {
    const uint32_t k = key_of(src[t]);
    c.keys[t] = k;
    mx = max(mx, k);
  }
  const float4* s4 = reinterpret_cast<const float4*>(src + head);
  uint4* k4 = reinterpret_cast<uint4*>(c.keys + head);
  for (int j0 = t; j0 < n4; j0 += 4 * kThreads) {
    float4 v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = j0 + q * kThreads;
      v[q] = j < n4 ? __ldcs(s4 + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = j0 + q * kThreads;
      if (j < n4) {
        const uint4 k = make_uint4(key_of(v[q].x), key_of(v[q].y), key_of(v[q].z), key_of(v[q].w));
        k4[j] = k;
        mx = max(mx, max(max(k.x, k.y), max(k.z, k.w)));
      }
    }
  }
  for (int i = head + 4 * n4 + t; i < c.n; i += kThreads) {
    const uint32_t k = key_of(src[i]);
    c.keys[i] = k;
    mx = max(mx, k);
  }
  max_key = mx;
}

// Raw logprobs, before anything touches the slice: log Z of the raw logits and their top n.
__device__ void raw_logprobs(Ctx& c, const SeqSamplingParams& p, uint32_t max_key) {
  Shared& sh = *c.sh;
  {
    const unsigned long long q = max_key;
    post<0, 0, 1>(c, nullptr, nullptr, &q);
  }
  exchange(c, false);
  const float m_f = float_of(static_cast<uint32_t>(c.sh->q[0]));
  const double m = m_f;
  double z = 0.0;
  uint32_t valid = 0;
  for (int base = c.wb; base < c.we; base += 32) {
    const int i = base + c.lane;
    if (i < c.we && c.keys[i] != 0) {
      z += weight(c.keys[i], m);
      ++valid;
    }
  }
  post<1, 1, 0>(c, &z, &valid, nullptr);
  exchange(c, false);
  const double z_all = sh.d[0];
  const uint32_t n_valid = sh.u[0];
  const uint32_t n = p.logprobs > 0 ? min(static_cast<uint32_t>(p.logprobs), n_valid) : 0u;
  if (n > 0) {
    gather_top(c, n_valid, n);
    if (c.rank == 0 && threadIdx.x < n) {
      sh.raw_ids[threadIdx.x] = comp_id(sh.comp[threadIdx.x]);
      sh.raw_keys[threadIdx.x] = comp_key(sh.comp[threadIdx.x]);
    }
  }
  if (c.rank == 0 && threadIdx.x == 0) {
    sh.raw_log_z = m + log(z_all);
    sh.raw_n = static_cast<int32_t>(n);
  }
}

// HF repetition penalty, then OpenAI frequency/presence, in the CPU's float operations; each
// entry's token is rewritten in its owner's slice through distributed shared memory.
__device__ void apply_penalties(const Ctx& c, const SamplingArgs& a, const SeqSamplingParams& p, int32_t slice) {
  const bool rep = p.repetition_penalty != 1.0f;
  const bool freq = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  const int stride = static_cast<int>(c.size) * kThreads;
  for (int e = static_cast<int>(c.rank) * kThreads + threadIdx.x; e < p.penalty_count; e += stride) {
    const PenaltyEntry pe = a.penalty_entries[p.penalty_offset + e];
    if (pe.token < 0 || pe.token >= a.vocab) continue;
    const uint32_t owner = static_cast<uint32_t>(pe.token / slice);
    uint32_t* k = peer(c.keys, owner) + (pe.token - static_cast<int32_t>(owner) * slice);
    float x = float_of(*k);
    if (rep) x = x > 0.0f ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
    if (freq && pe.output_count > 0) {  // the CPU's order: -f, -p at the first occurrence, -f for each later one
      x = __fsub_rn(x, p.frequency_penalty);
      x = __fsub_rn(x, p.presence_penalty);
      for (int32_t n = 1; n < pe.output_count; ++n) x = __fsub_rn(x, p.frequency_penalty);
    }
    *k = key_of(x);
  }
}

__device__ void mask_stops(const Ctx& c, const SamplingArgs& a, const SeqSamplingParams& p, int32_t slice) {
  const int stride = static_cast<int>(c.size) * kThreads;
  for (int e = static_cast<int>(c.rank) * kThreads + threadIdx.x; e < p.stop_count; e += stride) {
    const int32_t t = a.stop_ids[p.stop_offset + e];
    if (t < 0 || t >= a.vocab) continue;
    const uint32_t owner = static_cast<uint32_t>(t / slice);
    peer(c.keys, owner)[t - static_cast<int32_t>(owner) * slice] = key_of(-INFINITY);
  }
}

// A constraint's mask on the block's own slice: disallowed tokens -> -inf.
__device__ void mask_disallowed(const Ctx& c, const uint32_t* allowed) {
  for (int i = threadIdx.x; i < c.n; i += kThreads) {
    const uint32_t t = static_cast<uint32_t>(c.lo + i);
    if (((allowed[t >> 5] >> (t & 31u)) & 1u) == 0) c.keys[i] = key_of(-INFINITY);
  }
}

__device__ void write_outputs(const SamplingArgs& a, const Shared& sh, int row, const SeqSamplingParams& p,
                              const Outcome& o) {
  const int t = threadIdx.x;
  const bool want = p.logprobs >= 0;
  const bool raw = want && p.processed_logprobs == 0;
  const uint32_t n = !want ? 0u : raw ? static_cast<uint32_t>(sh.raw_n) : o.top_n;
  if (t == 0) {
    a.tokens[row] = o.token;
    float lp = 0.0f;
    if (raw) {
      lp = static_cast<float>(static_cast<double>(a.logits[static_cast<size_t>(row) * a.vocab + o.token]) - sh.raw_log_z);
    } else if (want && o.scored) {
      lp = static_cast<float>(static_cast<double>(o.y_tok) - o.log_z);
    }
    a.logprobs[row] = lp;
    if (a.top_counts != nullptr) a.top_counts[row] = static_cast<int32_t>(n);
  }
  if (a.top_ids != nullptr && a.top_logprobs != nullptr && t < kTop) {
    int32_t id = -1;
    float lp = -INFINITY;
    if (static_cast<uint32_t>(t) < n) {
      if (raw) {
        id = sh.raw_ids[t];
        lp = static_cast<float>(static_cast<double>(float_of(sh.raw_keys[t])) - sh.raw_log_z);
      } else {
        id = comp_id(sh.comp[t]);
        lp = static_cast<float>(static_cast<double>(float_of(comp_key(sh.comp[t]))) - o.log_z);
      }
    }
    a.top_ids[static_cast<size_t>(row) * kTop + t] = id;
    a.top_logprobs[static_cast<size_t>(row) * kTop + t] = lp;
  }
}

__global__ void __launch_bounds__(kThreads, 1) sample_kernel(const __grid_constant__ KernelArgs ka) {
  extern __shared__ __align__(16) unsigned char smem[];
  const SamplingArgs& a = ka.a;
  const int row = static_cast<int>(blockIdx.y);
  const SeqSamplingParams p = a.params[row];

  Ctx c;
  c.sh = reinterpret_cast<Shared*>(smem);
  c.rank = cluster_rank();
  c.size = cluster_size();
  c.lo = static_cast<int32_t>(c.rank) * ka.slice;
  c.n = max(0, min(a.vocab, c.lo + ka.slice) - c.lo);
  c.cur = 0;
  c.lane = static_cast<int>(threadIdx.x & 31);
  c.warp = static_cast<int>(threadIdx.x >> 5);
  c.wb = static_cast<int>(static_cast<long long>(c.n) * c.warp / kWarps);
  c.we = static_cast<int>(static_cast<long long>(c.n) * (c.warp + 1) / kWarps);
  const float* row_ptr = a.logits + static_cast<size_t>(row) * a.vocab;
  // slice is a multiple of 4, so every block of the row shares the row's 16-byte phase.
  const int phase = static_cast<int>((reinterpret_cast<uintptr_t>(row_ptr) >> 2) & 3);
  c.keys = reinterpret_cast<uint32_t*>(smem + kSliceOffset) + phase;

  uint32_t raw_max = 0;
  load_slice(c, row_ptr + c.lo, phase, raw_max);
  __syncthreads();

  const bool want_lp = p.logprobs >= 0;
  const bool processed = want_lp && p.processed_logprobs != 0;
  if (want_lp && !processed) raw_logprobs(c, p, raw_max);

  const bool pen = p.penalty_count > 0 && a.penalty_entries != nullptr &&
                   (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
  const bool msk = p.mask_stop_ids != 0 && p.stop_count > 0 && a.stop_ids != nullptr;
  const int32_t allowed_at = a.allowed_offset != nullptr ? a.allowed_offset[row] : -1;
  const bool gram = allowed_at >= 0 && a.allowed != nullptr;
  if (pen || msk || gram) cluster_sync();  // every block is done reading its raw slice
  if (pen) apply_penalties(c, a, p, ka.slice);
  if (pen && (msk || gram)) cluster_sync();  // the masks' -inf lands after every penalty
  // Both masks only write -inf, so they need no order between them.
  if (gram) mask_disallowed(c, a.allowed + allowed_at);
  if (msk) mask_stops(c, a, p, ka.slice);
  if (pen || msk || gram) cluster_sync();

  // Temperature; non-candidates (-inf, NaN) become key 0. Greedy keeps the values (x * 1).
  const bool greedy = p.temperature < kSamplingGreedyTemperature;
  const float inv_t = greedy ? 1.0f : __fdiv_rn(1.0f, p.temperature);
  {
    uint32_t ncand = 0;
    unsigned long long best = 0;  // key << 32 | ~id: the max key, lowest id on ties
    for (int base = c.wb; base < c.we; base += 32) {
      const int i = base + c.lane;
      if (i < c.we) {
        const float x = float_of(c.keys[i]);
        uint32_t k = 0;
        if (x > -INFINITY) {
          k = key_of(greedy ? x : __fmul_rn(x, inv_t));
          ++ncand;
          best = max(best, (static_cast<unsigned long long>(k) << 32) | ~static_cast<uint32_t>(c.lo + i));
        }
        c.keys[i] = k;
      }
    }
    post<0, 1, 1>(c, nullptr, &ncand, &best);
  }
  exchange(c, false);
  const uint32_t ncand = c.sh->u[0];
  const unsigned long long best = c.sh->q[0];
  const int32_t argmax = static_cast<int32_t>(~static_cast<uint32_t>(best));
  const float m_f = float_of(static_cast<uint32_t>(best >> 32));
  const double m = m_f;

  Outcome o;  // every token masked (only stop ids under min_tokens): token 0, as the CPU
  if (ncand != 0) {
    if (greedy && !processed) {
      o.token = argmax;
    } else if (greedy || (p.top_k <= 0 && !(p.top_p < 1.0f))) {
      o = draw_unsorted(c, p, greedy, ncand, m, m_f, argmax);
    } else {
      o = draw_sorted(c, p, ncand, m);
    }
  }
  if (c.rank == 0) write_outputs(a, *c.sh, row, p, o);
  cluster_sync();  // no block leaves while a peer may still read its shared memory
}

// ---- host ---------------------------------------------------------------------------------------

void require(bool ok, const std::string& what) {
  if (!ok) throw CudaError(what);
}

int32_t slice_for(int32_t vocab, int cluster) {
  return static_cast<int32_t>((((int64_t{vocab} + cluster - 1) / cluster) + 3) / 4 * 4);
}

// What a (device, vocab) allows: cluster sizes whose blocks fit the shared memory and can be
// co-scheduled, and the one that fits two blocks per SM, when registers allow that.
struct Fit {
  int dev = 0;
  int32_t vocab = 0;
  int sms = 0;
  int smallest = 0;  // smallest usable cluster
  int paired = 0;    // smallest usable cluster with two blocks per SM; 0 if none
  int largest = 0;   // largest usable cluster
};

Fit measure(int dev, int32_t vocab) {
  Fit f;
  f.dev = dev;
  f.vocab = vocab;
  int optin = 0, major = 0;
  check(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev), "sample: SM count");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "sample: shared memory limit");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "sample: compute capability");
  check(cudaFuncSetAttribute(reinterpret_cast<const void*>(&sample_kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
        "sample: raising the shared memory limit");
  for (int cl = 1; cl <= (major >= 9 ? kMaxCluster : 1); ++cl) {
    const size_t bytes = smem_bytes_for(slice_for(vocab, cl));
    if (bytes > static_cast<size_t>(optin)) continue;
    int per_sm = 0, clusters = 1;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sample_kernel, kThreads, bytes), "sample: occupancy");
    if (cl > 1) {  // the blocks of a cluster must be resident at once
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(static_cast<unsigned>(cl), 1, 1);
      cfg.blockDim = dim3(kThreads, 1, 1);
      cfg.dynamicSmemBytes = bytes;
      cudaLaunchAttribute attr[1] = {};
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = static_cast<unsigned>(cl);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      check(cudaOccupancyMaxActiveClusters(&clusters, sample_kernel, &cfg), "sample: cluster occupancy");
    }
    if (per_sm < 1 || clusters < 1) continue;
    if (f.smallest == 0) f.smallest = cl;
    if (f.paired == 0 && per_sm >= 2) f.paired = cl;
    f.largest = cl;
  }
  require(f.smallest != 0, "sample: vocab " + std::to_string(vocab) +
                              (major >= 9 ? " does not fit 8 blocks' shared memory"
                                          : " does not fit one block's shared memory (larger needs sm_90 clusters)"));
  return f;
}

}  // namespace

SamplingLaunch sampling_launch(int32_t n_seqs, int32_t vocab) {
  require(n_seqs >= 1 && n_seqs <= 65535, "sample: n_seqs must be in [1, 65535], got " + std::to_string(n_seqs));
  require(vocab >= 1, "sample: vocab must be >= 1, got " + std::to_string(vocab));
  // Cached, so that nothing is queried while a graph is being captured.
  static std::mutex mu;
  static std::vector<Fit> fits;
  int dev = 0;
  check(cudaGetDevice(&dev), "sample: cudaGetDevice");
  Fit f;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = std::find_if(fits.begin(), fits.end(), [&](const Fit& x) { return x.dev == dev && x.vocab == vocab; });
    if (it == fits.end()) it = fits.insert(fits.end(), measure(dev, vocab));
    f = *it;
  }
  // Two blocks per SM hide one cluster's barriers behind another's work; small batches spread a
  // row over more SMs.
  const int spread = static_cast<int>(std::min<int64_t>(kMaxCluster, (int64_t{f.sms} + n_seqs - 1) / n_seqs));
  SamplingLaunch l;
  l.cluster = std::min(std::max(f.paired != 0 ? f.paired : f.smallest, spread), f.largest);
  l.threads = kThreads;
  l.slice = slice_for(vocab, l.cluster);
  l.smem_bytes = smem_bytes_for(l.slice);
  return l;
}

void sample(const SamplingArgs& args, Stream stream) {
  if (args.n_seqs == 0) return;
  require(args.logits != nullptr && args.params != nullptr && args.tokens != nullptr && args.logprobs != nullptr,
          "sample: logits, params, tokens and logprobs must be set");
  const SamplingLaunch l = sampling_launch(args.n_seqs, args.vocab);
  KernelArgs ka{args, l.slice};
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(l.cluster), static_cast<unsigned>(args.n_seqs), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = l.smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(l.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = l.cluster > 1 ? 1 : 0;  // one block: a plain launch, which pre-sm_90 GPUs take too
  check(cudaLaunchKernelEx(&cfg, sample_kernel, ka), "launching sample");
  check_launch("sample");
}

}  // namespace strata::cuda
