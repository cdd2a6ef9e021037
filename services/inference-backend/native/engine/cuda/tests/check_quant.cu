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
#include <vector>

#include "check_util.h"
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

  QuantGemmArgs a;
  a.dtype = dtype_of<T>();
  a.x = d_x.ptr;
  a.x_stride = x_stride;
  a.w = dw.w;
  a.y = d_y.ptr;
  a.y_stride = y_stride;
  a.bias = o.bias ? d_bias.ptr : nullptr;
  a.accumulate = o.accumulate;
  a.m = m;
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
  QuantGemmArgs a;
  a.dtype = dtype_of<T>();
  a.x = d_x.ptr;
  a.x_stride = k;
  a.w = dw.w;
  a.y = d_eager.ptr;
  a.y_stride = n;
  a.m = m;
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
  }
  return report.finish("check_cuda_quant");
}
