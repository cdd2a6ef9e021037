// Checks quant_gemm (cuda_quant.h) against a float64 reference: random GGUF blocks of Q4_0, Q4_1
// and Q8_0 (built with strata/quant.h's block structs, every byte random, fp16 scales of both
// signs), repacked with quant_repack, times random bf16/fp16 activations. The reference is
// computed from the blocks dequantized as ggml does (fp16 scales widened, d * q (+ m) in fp32) and
// from the activations as rounded to the dtype, so the only differences left are the kernel's
// fp32 arithmetic and the rounding of y. Each case must pass two tests, both derived from those:
//   - per element: |y - ref| <= u * |ref| + eta + (1 + u) * g * S, where u is the unit roundoff
//     of y (bf16 2^-8, fp16 2^-11), eta half its smallest subnormal (fp16 2^-25, bf16 2^-134: a
//     subnormal y is rounded absolutely, not relatively), S = sum |x * w| (+ |bias| + |old y|)
//     and g = (k/32 + 64) * 2^-22
//     bounds the fp32 additions a product goes through (32 within its block on the tensor
//     cores, one per block after it, the warps' and splits' sums, bias, old y), with 2^-22
//     rather than 2^-24 for the tensor cores' truncating adds;
//   - relative L2 error <= u + 4 * sqrt(k/32 + 64) * 2^-24 * |S| / |ref|: the rounding of y, plus
//     the fp32 rounding as a random walk over those additions, at 4 sigma.
// Outputs start as NaN (or random values for y += ...), rows are strided with padding that must
// stay untouched, and every case says which kernel ran. Shapes: m = 1, 3, 8, 17, 64, 300 (and
// 12, 16 for the 16-token GEMV), k = 576, 1536, 4096 (and 32, 160, 608: chunks of 1 to 3
// blocks), n = 192, 1000 (and 8464: two tiles a warp); bias, accumulate, split-K and not, both
// kernels forced on the same shapes, a captured CUDA graph, and the arguments it must refuse.
// Under the CPU emulation a covering subset runs (each m, k and n for every type and dtype); on
// the GPU every combination of those m, k and n.
//   check_cuda_quant   (STRATA_CHECK_SEED=N replays a run, STRATA_CHECK_JSON=path writes the rows)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "check_util.h"
#include "rope_util.h"
#include "strata/cuda_quant.h"

using namespace strata;
using namespace strata::cuda;
using namespace strata::cuda::checks;

namespace {

Report report;

uint16_t fp16_bits(float v) {
  const __half h = __float2half_rn(v);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
float fp16_value(uint16_t bits) {
  __half h;
  std::memcpy(&h, &bits, 2);
  return __half2float(h);
}

// A (rows, cols) matrix of GGUF blocks with random contents, and its values dequantized.
struct HostQuant {
  QuantType type;
  int32_t rows, cols;
  std::vector<uint8_t> blocks;  // as the file holds them
  std::vector<float> values;    // (rows, cols), as ggml dequantizes
};

HostQuant random_quant(QuantType type, int32_t rows, int32_t cols) {
  HostQuant h{type, rows, cols, {}, std::vector<float>(size_t(rows) * cols)};
  const int64_t nb = cols / kQuantBlock, bytes = quant_block_size(type);
  h.blocks.resize(size_t(rows * nb * bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> scale(0.0f, 0.02f), minimum(0.0f, 0.1f);
  for (int64_t b = 0; b < rows * nb; ++b) {
    uint8_t* at = h.blocks.data() + b * bytes;
    float* v = h.values.data() + b * kQuantBlock;  // rows are nb consecutive blocks
    // Now and then a zero scale or an extreme one; otherwise small scales of both signs.
    const int kind = byte(rng());
    const float d_value = kind == 0 ? 0.0f : kind == 1 ? 0.25f : scale(rng());
    const uint16_t d = fp16_bits(d_value);
    const float d32 = fp16_value(d);
    if (type == QuantType::Q4_0) {
      BlockQ4_0 blk{};
      blk.d = d;
      for (uint8_t& q : blk.qs) q = uint8_t(byte(rng()));
      std::memcpy(at, &blk, sizeof blk);
      for (int j = 0; j < 16; ++j) {
        v[j] = float((blk.qs[j] & 0xF) - 8) * d32;
        v[j + 16] = float((blk.qs[j] >> 4) - 8) * d32;
      }
    } else if (type == QuantType::Q4_1) {
      BlockQ4_1 blk{};
      blk.d = d;
      blk.m = fp16_bits(minimum(rng()));
      const float m32 = fp16_value(blk.m);
      for (uint8_t& q : blk.qs) q = uint8_t(byte(rng()));
      std::memcpy(at, &blk, sizeof blk);
      for (int j = 0; j < 16; ++j) {
        v[j] = float(blk.qs[j] & 0xF) * d32 + m32;
        v[j + 16] = float(blk.qs[j] >> 4) * d32 + m32;
      }
    } else {
      BlockQ8_0 blk{};
      blk.d = d;
      for (int8_t& q : blk.qs) q = int8_t(byte(rng()) - 128);
      std::memcpy(at, &blk, sizeof blk);
      for (int j = 0; j < 32; ++j) v[j] = float(blk.qs[j]) * d32;
    }
  }
  return h;
}

// The weight repacked and uploaded.
struct DeviceQuant {
  DeviceBuffer<uint8_t> data;
  QuantWeight w;
  explicit DeviceQuant(const HostQuant& h) : data(size_t(quant_gpu_bytes(h.type, h.rows, h.cols))) {
    std::vector<uint8_t> packed(data.count);
    quant_repack(h.type, h.blocks.data(), h.rows, h.cols, packed.data());
    data.upload(packed);
    w = QuantWeight{h.type, h.rows, h.cols, data.ptr};
  }
};

// y = x · Wᵀ for m rows of x in T (bf16 or f16); everything else at its default.
template <typename T>
QuantGemmArgs gemm_args(const T* x, int64_t x_stride, const QuantWeight& w, void* y, int64_t y_stride, int32_t m) {
  QuantGemmArgs a;
  a.dtype = dtype_of<T>();
  a.x = x;
  a.x_stride = x_stride;
  a.w = w;
  a.y = y;
  a.y_stride = y_stride;
  a.m = m;
  return a;
}

// ref and S (see the top) for y[i, j], i < m, j < n, in float64 over all cores.
void reference(const HostQuant& w, const std::vector<double>& x, int64_t x_stride, int32_t m,
               const std::vector<double>* bias, const std::vector<double>* y_old, int64_t y_stride,
               std::vector<double>& ref, std::vector<double>& abs_sum) {
  const int32_t n = w.rows, k = w.cols;
  ref.assign(size_t(m) * n, 0.0);
  abs_sum.assign(size_t(m) * n, 0.0);
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned part = 0; part < threads; ++part) {
    pool.emplace_back([&, part] {
      for (int64_t idx = part; idx < int64_t{m} * n; idx += threads) {
        const int32_t i = int32_t(idx / n), j = int32_t(idx % n);
        const double* xr = x.data() + size_t(i) * x_stride;
        const float* wr = w.values.data() + size_t(j) * k;
        double sum = 0.0, mag = 0.0;
        for (int32_t c = 0; c < k; ++c) {
          const double p = xr[c] * double(wr[c]);
          sum += p;
          mag += std::fabs(p);
        }
        if (bias) sum += (*bias)[j], mag += std::fabs((*bias)[j]);
        if (y_old) sum += (*y_old)[size_t(i) * y_stride + j], mag += std::fabs((*y_old)[size_t(i) * y_stride + j]);
        ref[idx] = sum;
        abs_sum[idx] = mag;
      }
    });
  }
  for (std::thread& t : pool) t.join();
}

template <typename T>
double unit_roundoff() {
  return std::is_same_v<T, __nv_bfloat16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}
// Half the spacing of the subnormals: the absolute rounding error of a result that small.
template <typename T>
double underflow() {
  return std::is_same_v<T, __nv_bfloat16> ? std::ldexp(1.0, -134) : std::ldexp(1.0, -25);
}

struct Options {
  bool bias = false;
  bool accumulate = false;
  QuantKernel kernel = QuantKernel::kAuto;
  bool workspace = true;  // let the tiled kernel split k
  int32_t x_pad = 0;      // x_stride = k + x_pad (a multiple of 8)
  int32_t y_pad = 0;      // y_stride = n + y_pad
};

template <typename T>
void check_case(const HostQuant& hw, const DeviceQuant& dw, int32_t m, Options o) {
  const int32_t n = hw.rows, k = hw.cols;
  const int64_t x_stride = k + o.x_pad, y_stride = n + o.y_pad;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * x_stride));
  const std::vector<T> bias = convert<T>(random_floats(n));
  std::vector<T> y_old = convert<T>(random_floats(size_t(m) * y_stride));
  std::vector<double> xd(x.size()), bias_d(n), y_old_d(y_old.size());
  for (size_t i = 0; i < x.size(); ++i) xd[i] = to_double(x[i]);
  for (int32_t j = 0; j < n; ++j) bias_d[j] = to_double(bias[j]);
  // Without accumulate, y starts as NaN; with it, the padding columns are NaN all the same.
  T poison;
  std::memset(&poison, 0xFF, sizeof poison);
  for (int32_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < y_stride; ++j)
      if (!o.accumulate || j >= n) y_old[size_t(i) * y_stride + j] = poison;
  for (size_t i = 0; i < y_old.size(); ++i) y_old_d[i] = to_double(y_old[i]);

  DeviceBuffer<T> d_x(x.size()), d_bias(n), d_y(y_old.size());
  d_x.upload(x);
  d_bias.upload(bias);
  d_y.upload(y_old);
  const int64_t ws_floats = o.workspace ? quant_gemm_workspace_floats(m, n, k) : 0;
  DeviceBuffer<float> d_ws(size_t(std::max<int64_t>(ws_floats, 1)));
  d_ws.poison();

  QuantGemmArgs a = gemm_args(d_x.ptr, x_stride, dw.w, d_y.ptr, y_stride, m);
  a.bias = o.bias ? d_bias.ptr : nullptr;
  a.accumulate = o.accumulate;
  a.kernel = o.kernel;
  a.workspace = ws_floats > 0 ? d_ws.ptr : nullptr;
  a.workspace_floats = ws_floats;
  const std::string route = quant_gemm_describe(a);
  quant_gemm(a, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> got = d_y.download();

  std::vector<double> ref, abs_sum;
  reference(hw, xd, x_stride, m, o.bias ? &bias_d : nullptr, o.accumulate ? &y_old_d : nullptr, y_stride, ref,
            abs_sum);
  const double u = unit_roundoff<T>(), eta = underflow<T>(), additions = double(k / kQuantBlock + 64);
  const double g = additions * std::ldexp(1.0, -22);
  std::vector<T> out(size_t(m) * n);
  double s2 = 0.0, r2 = 0.0, worst = 0.0;
  size_t worst_at = 0;
  bool within = true, padding = true;
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < y_stride; ++j) {
      const T v = got[size_t(i) * y_stride + j];
      if (j >= n) {
        padding = padding && is_poison(v);
        continue;
      }
      const size_t at = size_t(i) * n + j;
      out[at] = v;
      const double bound = u * std::fabs(ref[at]) + eta + (1.0 + u) * g * abs_sum[at];
      const double err = std::fabs(to_double(v) - ref[at]);
      if (!(err <= bound)) within = false;  // NaN fails too
      const double ratio = bound > 0.0 ? err / bound : (err > 0.0 ? INFINITY : 0.0);
      if (!(ratio <= worst)) worst = ratio, worst_at = at;
      s2 += abs_sum[at] * abs_sum[at];
      r2 += ref[at] * ref[at];
    }
  }
  const double tol_l2 = u + 4.0 * std::sqrt(additions) * std::ldexp(1.0, -24) * (r2 > 0.0 ? std::sqrt(s2 / r2) : 1.0);
  std::string shape = std::string(quant_type_name(hw.type)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                      " k=" + std::to_string(k) + (o.bias ? " +bias" : "") + (o.accumulate ? " y+=" : "") +
                      (o.x_pad || o.y_pad ? " strided" : "");
  const std::string dt = dtype_name(dtype_of<T>());
  const std::string kernel = route.substr(route.find(' ', route.find(' ') + 1) + 1);  // drop "Q4_0 bf16 "
  report.add("quant_gemm", dt, shape, compare(ref, out), tol_l2);
  char note[160];
  std::snprintf(note, sizeof note, " | %s | worst err/bound %.2f%s", kernel.c_str(), worst,
                padding ? "" : " PADDING WRITTEN");
  report.add_exact("quant_gemm elementwise", dt, shape + note, within && padding);
  if (!within) {
    std::printf("     worst y[%zu, %zu] = %.9g, ref %.9g, sum |x w| %.9g, bound %.3g\n", worst_at / n, worst_at % n,
                to_double(out[worst_at]), ref[worst_at], abs_sum[worst_at],
                u * std::fabs(ref[worst_at]) + eta + (1.0 + u) * g * abs_sum[worst_at]);
  }
}

// The same product captured in a CUDA graph and replayed twice must equal the eager one bit for
// bit (the split-K route is two launches).
template <typename T>
void check_graph(const HostQuant& hw, const DeviceQuant& dw, int32_t m) {
  const int32_t n = hw.rows, k = hw.cols;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * k));
  DeviceBuffer<T> d_x(x.size()), d_eager(size_t(m) * n), d_graph(size_t(m) * n);
  d_x.upload(x);
  d_eager.poison();
  const int64_t ws = quant_gemm_workspace_floats(m, n, k);
  DeviceBuffer<float> d_ws(size_t(std::max<int64_t>(ws, 1)));
  QuantGemmArgs a = gemm_args(d_x.ptr, k, dw.w, d_eager.ptr, n, m);
  a.workspace = ws > 0 ? d_ws.ptr : nullptr;
  a.workspace_floats = ws;
  quant_gemm(a, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  STRATA_CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  a.y = d_graph.ptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  STRATA_CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  quant_gemm(a, stream);
  STRATA_CK(cudaStreamEndCapture(stream, &graph));
  STRATA_CK(cudaGraphInstantiate(&exec, graph, 0));
  bool same = true;
  for (int replay = 0; replay < 2; ++replay) {
    d_graph.poison();
    STRATA_CK(cudaGraphLaunch(exec, stream));
    STRATA_CK(cudaStreamSynchronize(stream));
    same = same && std::memcmp(d_graph.download().data(), d_eager.download().data(), sizeof(T) * m * n) == 0;
  }
  STRATA_CK(cudaGraphExecDestroy(exec));
  STRATA_CK(cudaGraphDestroy(graph));
  STRATA_CK(cudaStreamDestroy(stream));
  report.add_exact("quant_gemm graph replay", dtype_name(dtype_of<T>()),
                   std::string(quant_type_name(hw.type)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k) + " = eager, bit for bit",
                   same);
}

template <typename F>
bool throws(F&& f) {
  try {
    f();
  } catch (const CudaError&) {
    return true;
  }
  return false;
}

void check_refusals() {
  const HostQuant hw = random_quant(QuantType::Q4_0, 32, 64);
  const DeviceQuant dw(hw);
  DeviceBuffer<float> x(64 * 20), y(32 * 20);
  QuantGemmArgs a;
  a.x = x.ptr;
  a.x_stride = 64;
  a.w = dw.w;
  a.y = y.ptr;
  a.y_stride = 32;
  a.m = 4;
  QuantGemmArgs f32 = a;
  f32.dtype = DType::kF32;
  QuantGemmArgs big = a;
  big.m = 17;
  big.kernel = QuantKernel::kGemv;
  QuantGemmArgs stride = a;
  stride.x_stride = 68;
  QuantGemmArgs cols = a;
  cols.w.cols = 48;
  report.add_exact("quant_gemm refuses", "-", "f32 activations", throws([&] { quant_gemm(f32, nullptr); }));
  report.add_exact("quant_gemm refuses", "-", "the GEMV kernel at m=17", throws([&] { quant_gemm(big, nullptr); }));
  report.add_exact("quant_gemm refuses", "-", "x_stride not a multiple of 8",
                   throws([&] { quant_gemm(stride, nullptr); }));
  report.add_exact("quant_gemm refuses", "-", "k not a multiple of 32", throws([&] { quant_gemm(cols, nullptr); }));
  QuantGemmArgs warps = a;
  warps.gemv_warps = kQuantGemvMaxWarps + 1;
  report.add_exact("quant_gemm refuses", "-", "gemv_warps 17", throws([&] { quant_gemm(warps, nullptr); }));
  QuantGemmArgs prefetch = a;
  prefetch.gemv_prefetch = kQuantGemvMaxPrefetch + 1;
  report.add_exact("quant_gemm refuses", "-", "gemv_prefetch 3", throws([&] { quant_gemm(prefetch, nullptr); }));
  // The fused epilogues: bf16 x and y (the buffers above are big enough for every case).
  a.dtype = DType::kBF16;
  QuantGemmArgs odd = a;
  odd.w.rows = 48;  // n = 24: the up rows would not start on a tile
  QuantGemmArgs many = a;
  many.m = 17;
  QuantGemmArgs acc = a;
  acc.accumulate = true;
  QuantGemmArgs tiled = a;
  tiled.kernel = QuantKernel::kTiled;
  const auto swiglu = [](const QuantGemmArgs& args) { return throws([&] { quant_gemm_swiglu(args, nullptr); }); };
  report.add_exact("quant_gemm_swiglu refuses", "-", "n = 24, not a multiple of 16", swiglu(odd));
  report.add_exact("quant_gemm_swiglu refuses", "-", "m = 17", swiglu(many));
  report.add_exact("quant_gemm_swiglu refuses", "-", "y +=", swiglu(acc));
  report.add_exact("quant_gemm_swiglu refuses", "-", "the tiled kernel", swiglu(tiled));
  report.add_exact("quant_gemm_swiglu takes", "-", "n = 16, m = 4", quant_swiglu_refusal(a).empty());
  // q/k/v of 1 q head and 1 KV head of 32 (96 rows; the weight's 32 rows stand in, unread).
  const KvShape kv{1, 1, 32, 16, 4};
  DeviceBuffer<int32_t> ints(8);
  RopeKvArgs rope = qkv_rope_args<__nv_bfloat16>(kv, static_cast<__nv_bfloat16*>(static_cast<void*>(y.ptr)), 96, 4,
                                                 ints.ptr, ints.ptr, x.ptr, nullptr, nullptr);
  QuantGemmArgs qkv = a;
  qkv.w.rows = 96;
  qkv.y_stride = 96;
  const auto fused_qkv = [&](const RopeKvArgs& r, const QuantGemmArgs& args) {
    return throws([&] { quant_gemm_qkv_rope(r, args, nullptr); });
  };
  report.add_exact("quant_gemm_qkv_rope takes", "-", "1/1 heads of 32, m = 4", quant_qkv_rope_refusal(rope, qkv).empty());
  RopeKvArgs d48 = rope;
  d48.head_dim = 48;
  QuantGemmArgs qkv48 = qkv;
  qkv48.w.rows = 144;
  qkv48.y_stride = 144;
  d48.q_stride = d48.k_stride = d48.v_stride = 144;
  d48.k = reinterpret_cast<char*>(y.ptr) + 48 * 2;
  d48.v = reinterpret_cast<char*>(y.ptr) + 96 * 2;
  report.add_exact("quant_gemm_qkv_rope refuses", "-", "head_dim 48 (for that reason)",
                   fused_qkv(d48, qkv48) && quant_qkv_rope_refusal(d48, qkv48).find("head_dim") != std::string::npos);
  QuantGemmArgs elsewhere = qkv;
  elsewhere.y = x.ptr;
  report.add_exact("quant_gemm_qkv_rope refuses", "-", "y apart from q", fused_qkv(rope, elsewhere));
  RopeKvArgs tokens = rope;
  tokens.n_tokens = 3;
  report.add_exact("quant_gemm_qkv_rope refuses", "-", "n_tokens != m", fused_qkv(tokens, qkv));
  QuantGemmArgs rows = qkv;
  rows.w.rows = 128;
  report.add_exact("quant_gemm_qkv_rope refuses", "-", "weight rows != q + 2 kv", fused_qkv(rope, rows));
  report.add_exact("quant_gpu_bytes", "-", "rows rounded up to 16, file bytes per block",
                   quant_gpu_bytes(QuantType::Q4_0, 1000, 4096) == 1008 * 128 * 18 &&
                       quant_gpu_bytes(QuantType::Q4_1, 16, 32) == 16 * 20 &&
                       quant_gpu_bytes(QuantType::Q8_0, 17, 64) == 32 * 2 * 34);
  // The repacking's bytes whatever the thread count: tiles shared among 1, 3 and 8 threads and
  // by default, into buffers poisoned first (every byte must be written), a last tile partial
  // (1,000 rows) and a last chunk short (k = 4,064: 127 blocks a row); the default with a
  // matrix big enough for several threads (2.3 to 4.3 MB).
  for (QuantType type : {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0}) {
    const HostQuant h = random_quant(type, 1000, 4064);
    const size_t bytes = size_t(quant_gpu_bytes(type, h.rows, h.cols));
    std::vector<uint8_t> one(bytes, 0xA5);
    quant_repack(type, h.blocks.data(), h.rows, h.cols, one.data(), 1);
    bool same = true;
    for (int threads : {3, 8, 0}) {
      std::vector<uint8_t> many(bytes, uint8_t(0x5A + threads));
      quant_repack(type, h.blocks.data(), h.rows, h.cols, many.data(), threads);
      same = same && many == one;
    }
    report.add_exact("quant_repack threads", quant_type_name(type), "1000x4064, 1 vs 3, 8 and default threads", same);
    // The same matrix from three parts where they lie (a fused weight's q, k, v), tiles of 16
    // rows straddling the parts (333 + 500 + 167 rows): the bytes of the whole.
    const int64_t row_bytes = h.cols / 32 * quant_block_size(type);
    const std::vector<QuantRows> parts{{h.blocks.data(), 333},
                                       {h.blocks.data() + 333 * row_bytes, 500},
                                       {h.blocks.data() + 833 * row_bytes, 167}};
    std::vector<uint8_t> from_parts(bytes, 0x3C);
    quant_repack(type, parts, h.cols, from_parts.data());
    report.add_exact("quant_repack parts", quant_type_name(type), "1000x4064 as 333 + 500 + 167 rows", from_parts == one);
    // Rows taken through a row order (a GGUF file's q and k): the bytes of the rows put in that
    // order first. Here each 40-row "head" of the matrix reversed, a part's order on its own.
    std::vector<int64_t> order(size_t(h.rows));
    for (int64_t r = 0; r < h.rows; ++r) order[size_t(r)] = r / 40 * 40 + 39 - r % 40;
    std::vector<uint8_t> in_order(h.blocks.size());
    for (int64_t r = 0; r < h.rows; ++r) {
      std::memcpy(in_order.data() + r * row_bytes, h.blocks.data() + order[size_t(r)] * row_bytes, size_t(row_bytes));
    }
    std::vector<uint8_t> reference(bytes, 0x66), ordered(bytes, 0x99);
    quant_repack(type, in_order.data(), h.rows, h.cols, reference.data());
    const std::vector<QuantRows> ordered_parts{{h.blocks.data(), 400, order.data()},
                                               {h.blocks.data(), 600, order.data() + 400}};
    quant_repack(type, ordered_parts, h.cols, ordered.data());
    report.add_exact("quant_repack row order", quant_type_name(type), "1000x4064, 40-row heads reversed, 2 parts",
                     ordered == reference && ordered != one);
    // Runs of tiles into three buffers of their own (how a load streams a matrix through its
    // staging buffers), put at the layout's offsets: the whole matrix's bytes. 63 tiles in runs
    // of 7 and of 10 (a last run of 3, its last tile partial), buffers poisoned first.
    const QuantLayout l = quant_layout(type, h.rows, h.cols);
    bool runs_same = l.bytes == int64_t(bytes) && l.tiles == 63 && (l.mins_at > 0) == (type == QuantType::Q4_1);
    for (int64_t run : {7, 10}) {
      std::vector<uint8_t> assembled(bytes, 0x77);
      for (int64_t first = 0; first < l.tiles; first += run) {
        const int64_t n = std::min(run, l.tiles - first);
        std::vector<uint8_t> quants(size_t(n * l.tile_quant_bytes), 0x11), scales(size_t(n * l.tile_scale_bytes), 0x22),
            mins(size_t(n * l.tile_scale_bytes), 0x33);
        quant_repack_tiles(type, parts, h.cols, first, first + n, quants.data(), scales.data(),
                           l.mins_at > 0 ? mins.data() : nullptr, int(run % 4));
        std::memcpy(assembled.data() + first * l.tile_quant_bytes, quants.data(), quants.size());
        std::memcpy(assembled.data() + l.scales_at + first * l.tile_scale_bytes, scales.data(), scales.size());
        if (l.mins_at > 0) std::memcpy(assembled.data() + l.mins_at + first * l.tile_scale_bytes, mins.data(), mins.size());
      }
      runs_same = runs_same && assembled == one;
    }
    report.add_exact("quant_repack_tiles runs", quant_type_name(type), "1000x4064, runs of 7 and 10 tiles", runs_same);
    std::vector<uint8_t> scratch(bytes);
    report.add_exact("quant_repack_tiles refuses", quant_type_name(type), "tiles past the last, a null region",
                     throws([&] {
                       quant_repack_tiles(type, parts, h.cols, 60, 64, scratch.data(), scratch.data(), scratch.data());
                     }) && throws([&] { quant_repack_tiles(type, parts, h.cols, 0, 1, scratch.data(), nullptr, scratch.data()); }));
  }
  // The workspace for every batch size up to max_m: the same as asking each m, Llama-3-8B's
  // shapes and small ones, max_m on and off a block row's end (64) and below the GEMV's range.
  for (const auto& [n, k] : std::vector<std::pair<int32_t, int32_t>>{{6144, 4096}, {4096, 4096}, {28672, 4096},
                                                                      {4096, 14336}, {256, 512}, {32, 64}}) {
    for (int32_t max_m : {8, 16, 17, 64, 100, 640, 2048}) {
      int64_t each = 0;
      for (int32_t m = 1; m <= max_m; ++m) each = std::max(each, quant_gemm_workspace_floats(m, n, k));
      report.add_exact("quant_gemm workspace up to m", "-",
                       std::to_string(n) + "x" + std::to_string(k) + " m<=" + std::to_string(max_m),
                       quant_gemm_workspace_floats_up_to(max_m, n, k) == each);
    }
  }
}

// ---- the fused epilogues ----------------------------------------------------------------------

bool same_bytes(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

// The GEMV with one and with two chunks a warp in flight (gemv_prefetch), the same warps: the
// same bytes, since each warp adds the same chunks in the same order (the shapes put 1 to 5
// chunks on a warp, so the second prefetch often runs past the row's last chunk).
template <typename T>
void check_prefetch(const HostQuant& hw, const DeviceQuant& dw, int32_t m, int32_t warps) {
  const int32_t n = hw.rows, k = hw.cols;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * k));
  DeviceBuffer<T> d_x(x.size()), d_one(size_t(m) * n), d_two(size_t(m) * n);
  d_x.upload(x);
  QuantGemmArgs a = gemm_args(d_x.ptr, k, dw.w, d_one.ptr, n, m);
  a.kernel = QuantKernel::kGemv;
  a.gemv_warps = warps;
  a.gemv_prefetch = 1;
  quant_gemm(a, nullptr);
  const std::string one = quant_gemm_describe(a);
  a.y = d_two.ptr;
  a.gemv_prefetch = 2;
  quant_gemm(a, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> got_one = d_one.download(), got_two = d_two.download();
  report.add_exact("gemv prefetch 2 == 1", dtype_name(a.dtype), one + " m=" + std::to_string(m) + " (and prefetch=2)",
                   same_bytes(got_one.data(), got_two.data(), got_one.size() * sizeof(T)));
}

// quant_gemm_swiglu against quant_gemm (same warps) into a (m, 2n) gate/up buffer then silu_mul:
// the same bytes in every row, y's padding untouched.
template <typename T>
void check_swiglu(const HostQuant& hw, const DeviceQuant& dw, int32_t m, int32_t warps, bool bias) {
  const int32_t n = hw.rows / 2, k = hw.cols;
  const int64_t x_stride = k + 8, y_stride = n + 3;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * x_stride));
  const std::vector<T> b = convert<T>(random_floats(size_t(2) * n));
  DeviceBuffer<T> d_x(x.size()), d_b(b.size()), d_gate_up(size_t(m) * 2 * n), d_ref(size_t(m) * n),
      d_y(size_t(m) * y_stride);
  d_x.upload(x);
  d_b.upload(b);
  d_y.poison();
  QuantGemmArgs a = gemm_args(d_x.ptr, x_stride, dw.w, d_gate_up.ptr, 2 * n, m);
  a.bias = bias ? d_b.ptr : nullptr;
  a.gemv_warps = warps;
  quant_gemm(a, nullptr);
  silu_mul(a.dtype, d_gate_up.ptr, d_ref.ptr, m, n, nullptr);
  a.y = d_y.ptr;
  a.y_stride = y_stride;
  quant_gemm_swiglu(a, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> ref = d_ref.download(), got = d_y.download();
  bool same = true, padding = true;
  for (int32_t t = 0; t < m; ++t) {
    same = same && same_bytes(got.data() + size_t(t) * y_stride, ref.data() + size_t(t) * n, sizeof(T) * size_t(n));
    for (int64_t j = n; j < y_stride; ++j) padding = padding && is_poison(got[size_t(t) * y_stride + j]);
  }
  report.add_exact("quant_gemm_swiglu == quant_gemm + silu_mul", dtype_name(a.dtype),
                   std::string(quant_type_name(hw.type)) + " " +
                       shape_text({{"m", m}, {"n", n}, {"k", k}, {"warps", warps}}) + (bias ? " +bias" : "") +
                       (padding ? "" : " PADDING WRITTEN"),
                   same && padding);
}

// quant_gemm_qkv_rope against quant_gemm (same warps) into the q/k/v buffer followed by
// rope_write_kv: the same bytes in the buffer (its padding columns included) and in both caches
// (every slot no token owns still poisoned); token 1, when there is one, is a padding row.
// hw: the (q + 2 kv, k) weight of s's heads.
template <typename T>
void check_qkv_rope(const HostQuant& hw, const DeviceQuant& dw, KvShape s, int32_t m, int32_t warps, bool bias) {
  const int32_t n = hw.rows, k = hw.cols;
  const int64_t x_stride = k + 8, y_stride = n + 5;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * x_stride));
  const std::vector<T> b = convert<T>(random_floats(size_t(n)));
  DeviceBuffer<T> d_x(x.size()), d_b(b.size());
  d_x.upload(x);
  d_b.upload(b);
  const QkvRopeComparison c = compare_qkv_rope<T>(s, m, y_stride, [&](const RopeKvArgs& rope, bool fused) {
    QuantGemmArgs a = gemm_args(d_x.ptr, x_stride, dw.w, rope.q, y_stride, m);
    a.bias = bias ? d_b.ptr : nullptr;
    a.gemv_warps = warps;
    if (fused) {
      quant_gemm_qkv_rope(rope, a, nullptr);
    } else {
      quant_gemm(a, nullptr);
      rope_write_kv(rope, nullptr);
    }
  });
  const std::string shape = std::string(quant_type_name(hw.type)) + " " +
                            shape_text({{"h", s.num_heads}, {"kv", s.num_kv_heads}, {"d", s.head_dim}, {"m", m},
                                        {"k", k}, {"warps", warps}}) +
                            (bias ? " +bias" : "");
  const std::string dt = dtype_name(dtype_of<T>());
  report.add_exact("quant_gemm_qkv_rope q/k/v == quant_gemm + rope_write_kv", dt, shape, c.buffer_same);
  report.add_exact("quant_gemm_qkv_rope caches == quant_gemm + rope_write_kv", dt, shape, c.caches_same);
}

template <typename T>
void check_fused(QuantType type) {
  // SwiGLU: n = 96 (12 tiles of gate, 12 of up), chunks of 4 and 3 blocks (k = 608); every m of
  // both token tiles; warps 1 (every chunk one warp's), 3 and 8; a bias.
  const HostQuant gate_up = random_quant(type, 2 * 96, 608);
  const DeviceQuant d_gate_up(gate_up);
  for (int32_t m : {1, 2, 5, 8, 9, 16}) check_swiglu<T>(gate_up, d_gate_up, m, m % 2 ? 3 : 8, false);
  check_swiglu<T>(gate_up, d_gate_up, 3, 1, true);
  // RoPE: Llama-3's heads (32/8 x 128), SmolLM2-135M's (9/3 x 64) and small ones; short k (the
  // epilogue is what differs), one with a bias (Qwen2's q/k/v). (m, warps, bias) per shape.
  struct RopeCase {
    KvShape s;
    int32_t k;
    std::vector<std::tuple<int32_t, int32_t, bool>> runs;
  };
  const std::vector<RopeCase> rope_cases = {
      {KvShape{32, 8, 128, 16, 64}, 160, {{2, 3, false}}},
      {KvShape{9, 3, 64, 16, 20}, 576, {{3, 8, false}}},
      {KvShape{4, 2, 32, 16, 24}, 608, {{1, 4, false}, {9, 1, true}, {16, 4, false}}},
      // head_dim 16 (tinystories-656k's): a pair inside a tile; 8/4 heads, and 3/1 (an odd tile count).
      {KvShape{8, 4, 16, 16, 24}, 128, {{1, 4, false}, {5, 2, false}, {12, 4, true}}},
      {KvShape{3, 1, 16, 16, 24}, 160, {{2, 3, false}}},
#ifndef STRATA_CUDA_EMULATION
      {KvShape{32, 8, 128, 16, 64}, 4096, {{1, 8, false}, {4, 8, false}, {8, 6, false}, {12, 8, false}, {16, 8, true}}},
#endif
  };
  for (const RopeCase& c : rope_cases) {
    const HostQuant hw = random_quant(type, (c.s.num_heads + 2 * c.s.num_kv_heads) * c.s.head_dim, c.k);
    const DeviceQuant dw(hw);
    for (const auto& [m, warps, bias] : c.runs) check_qkv_rope<T>(hw, dw, c.s, m, warps, bias);
  }
#ifndef STRATA_CUDA_EMULATION
  const HostQuant llama = random_quant(type, 2 * 14336, 4096);
  const DeviceQuant d_llama(llama);
  for (int32_t m : {1, 8, 16}) check_swiglu<T>(llama, d_llama, m, 3, false);
#endif
}

// quant_dequantize against the host's values (dequantize_row's, as random_quant makes them)
// rounded to T, element by element exactly; a last tile partial and a last chunk short (37 x
// 4,064), and a Llama-shaped 256 x 4,096.
template <typename T>
void check_dequantize(QuantType type) {
  for (const auto& [rows, cols] : {std::pair{37, 4064}, std::pair{256, 4096}}) {
    const HostQuant h = random_quant(type, rows, cols);
    const DeviceQuant dw(h);
    DeviceBuffer<T> out(size_t(rows) * cols);
    quant_dequantize(dw.w, dtype_of<T>(), out.ptr, nullptr);
    STRATA_CK(cudaDeviceSynchronize());
    const std::vector<T> got = out.download();
    size_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += to_double(got[i]) == to_double(to_dtype<T>(h.values[i])) ? 0 : 1;
    report.add_exact("quant_dequantize", dtype_name(dtype_of<T>()),
                     std::string(quant_type_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                         (wrong ? " (" + std::to_string(wrong) + " values differ)" : ""),
                     wrong == 0);
  }
}

template <typename T>
void check_type(QuantType type) {
  struct Weight {
    HostQuant h;
    std::unique_ptr<DeviceQuant> d;
  };
  std::deque<Weight> weights;  // one random matrix per (n, k), shared by the cases of this type and dtype
  auto get = [&](int32_t n, int32_t k) -> const Weight& {
    for (const Weight& w : weights)
      if (w.h.rows == n && w.h.cols == k) return w;
    weights.push_back({random_quant(type, n, k), nullptr});
    weights.back().d = std::make_unique<DeviceQuant>(weights.back().h);
    return weights.back();
  };
  auto run = [&](int32_t m, int32_t n, int32_t k, Options o = {}) {
    const Weight& w = get(n, k);
    check_case<T>(w.h, *w.d, m, o);
  };
  Options bias, acc, strided, tiled, gemv, no_ws;
  bias.bias = true;
  acc.accumulate = true;
  acc.bias = true;
  strided.x_pad = 8;
  strided.y_pad = 5;
  strided.accumulate = true;
  tiled.kernel = QuantKernel::kTiled;
  gemv.kernel = QuantKernel::kGemv;
  no_ws.workspace = false;
  no_ws.bias = true;

#ifdef STRATA_CUDA_EMULATION
  // Every m, k and n of the GPU sweep at least once, each kernel path, in about a second a type.
  run(1, 1000, 4096);
  run(3, 192, 576, bias);
  run(8, 1000, 1536, strided);
  run(12, 8464, 160);  // 16 tokens, two tiles a warp, an odd tile count, chunks of 4 and 1 blocks
  run(17, 1000, 576);  // tiled, k split in two
  run(64, 192, 4096, acc);
  run(300, 192, 576, no_ws);
  run(16, 192, 608);  // chunks of 4 and 3 blocks
  run(16, 192, 608, tiled);
  run(3, 1000, 32, tiled);  // one block a row
  run(3, 1000, 32, gemv);
  if (type == QuantType::Q4_0) check_graph<T>(get(1000, 576).h, *get(1000, 576).d, 17);
  if (type == QuantType::Q8_0) check_graph<T>(get(192, 608).h, *get(192, 608).d, 3);
  // Chunks of 4 and 3 blocks, 5 a row: 5, 3, 2 and 2 a warp; one and two token tiles; two tiles
  // a warp (8464 rows), 2 chunks a row.
  for (int32_t warps : {1, 2, 3, 4}) check_prefetch<T>(get(1000, 608).h, *get(1000, 608).d, warps % 2 ? 1 : 9, warps);
  check_prefetch<T>(get(8464, 160).h, *get(8464, 160).d, 1, 1);
#else
  for (int32_t k : {576, 1536, 4096})
    for (int32_t n : {192, 1000})
      for (int32_t m : {1, 3, 8, 17, 64, 300}) run(m, n, k);
  for (int32_t m : {1, 3, 8, 12, 16}) {
    run(m, 1000, 1536, tiled);  // the tiled kernel on decode shapes, against the same reference
    run(m, 8464, 160);
  }
  run(3, 192, 576, bias);
  run(8, 1000, 1536, strided);
  run(17, 1000, 576, no_ws);
  run(64, 192, 4096, acc);
  run(300, 1000, 4096, acc);
  run(300, 1000, 576, no_ws);
  run(16, 192, 608);
  run(16, 192, 608, tiled);
  run(3, 1000, 32, tiled);
  run(3, 1000, 32, gemv);
  for (int32_t m : {1, 8, 16, 64}) run(m, 14336, 4096);  // Llama-3-8B gate/up: two tiles a warp
  run(1, 4096, 14336);                                      // down
  check_graph<T>(get(1000, 576).h, *get(1000, 576).d, 17);
  check_graph<T>(get(1000, 1536).h, *get(1000, 1536).d, 8);
  for (int32_t warps : {1, 2, 3, 4}) check_prefetch<T>(get(1000, 608).h, *get(1000, 608).d, warps % 2 ? 1 : 9, warps);
  check_prefetch<T>(get(8464, 160).h, *get(8464, 160).d, 1, 1);
  check_prefetch<T>(get(14336, 4096).h, *get(14336, 4096).d, 1, 0);  // Llama-3-8B gate/up
  check_prefetch<T>(get(4096, 14336).h, *get(4096, 14336).d, 1, 0);  // down
#endif
}

}  // namespace

int main() {
  require_device();
  run_seed();
  check_refusals();
  for (QuantType type : {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0}) {
    check_type<__nv_bfloat16>(type);
    check_type<__half>(type);
    check_dequantize<__nv_bfloat16>(type);
    check_dequantize<__half>(type);
    check_fused<__nv_bfloat16>(type);
    check_fused<__half>(type);
  }
  return report.finish("check_cuda_quant");
}
