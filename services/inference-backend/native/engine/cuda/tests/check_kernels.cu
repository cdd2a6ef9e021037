// Checks every kernel of cuda_kernels.h alone against a float64 reference on fresh random
// inputs: odd sizes, sequences that end on and just past KV-block and decode-partition
// boundaries, scattered block tables, strided rows, chunked prefill over cached KV. Outputs are
// poisoned first, so an element a kernel never writes fails.
//   check_cuda_kernels        (STRATA_CHECK_SEED=N replays a run, STRATA_CHECK_JSON=path writes the rows)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "check_util.h"
#include "rope_util.h"

using namespace strata::cuda;
using namespace strata::cuda::checks;

namespace {

Report report;

// ---- embedding, norm, activation ------------------------------------------------------------

template <typename T>
void check_embedding(int32_t vocab, int32_t hidden, int32_t n_tokens) {
  const std::vector<T> table = convert<T>(random_floats(size_t(vocab) * hidden));
  std::vector<int32_t> ids(n_tokens);
  for (int32_t i = 0; i < n_tokens; ++i) ids[i] = i == 0 ? 0 : i == 1 ? vocab - 1 : random_int(0, vocab - 1);
  DeviceBuffer<T> d_table(table.size());
  DeviceBuffer<int32_t> d_ids(ids.size());
  DeviceBuffer<float> d_out(size_t(n_tokens) * hidden);
  d_table.upload(table);
  d_ids.upload(ids);
  d_out.poison();
  embedding_gather(dtype_of<T>(), d_table.ptr, d_ids.ptr, n_tokens, hidden, d_out.ptr, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  std::vector<double> ref(size_t(n_tokens) * hidden);
  for (int32_t t = 0; t < n_tokens; ++t)
    for (int32_t i = 0; i < hidden; ++i) ref[size_t(t) * hidden + i] = to_double(table[size_t(ids[t]) * hidden + i]);
  // A gather is exact.
  report.add("embedding_gather", dtype_name(dtype_of<T>()),
             shape_text({{"vocab", vocab}, {"hidden", hidden}, {"tokens", n_tokens}}), compare(ref, d_out.download()), 0.0);
}

template <typename T>
void check_add_rms_norm(int32_t hidden, int32_t n_tokens, bool with_x) {
  const float eps = 1e-5f;
  const std::vector<float> residual = random_floats(size_t(n_tokens) * hidden, 2.0f);
  const std::vector<T> x = convert<T>(random_floats(size_t(n_tokens) * hidden));
  const std::vector<T> weight = convert<T>(random_floats(hidden, 0.5f));
  DeviceBuffer<float> d_residual(residual.size());
  DeviceBuffer<T> d_x(x.size()), d_weight(weight.size()), d_out(x.size());
  d_residual.upload(residual);
  d_x.upload(x);
  d_weight.upload(weight);
  d_out.poison();
  add_rms_norm(dtype_of<T>(), d_residual.ptr, with_x ? d_x.ptr : nullptr, d_weight.ptr, d_out.ptr, n_tokens, hidden,
               eps, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  std::vector<double> ref_residual(residual.size()), ref_out(residual.size());
  for (int32_t t = 0; t < n_tokens; ++t) {
    double sum_sq = 0.0;
    for (int32_t i = 0; i < hidden; ++i) {
      const size_t at = size_t(t) * hidden + i;
      ref_residual[at] = double(residual[at]) + (with_x ? to_double(x[at]) : 0.0);
      sum_sq += ref_residual[at] * ref_residual[at];
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / hidden + eps);
    for (int32_t i = 0; i < hidden; ++i) {
      const size_t at = size_t(t) * hidden + i;
      ref_out[at] = ref_residual[at] * inv_rms * to_double(weight[i]);
    }
  }
  const std::string shape = shape_text({{"hidden", hidden}, {"tokens", n_tokens}}) + (with_x ? " +x" : "");
  report.add("add_rms_norm residual", dtype_name(dtype_of<T>()), shape, compare(ref_residual, d_residual.download()),
             1e-6);
  // Two roundings to the dtype (the normalised value, then the product), as transformers does.
  report.add("add_rms_norm out", dtype_name(dtype_of<T>()), shape, compare(ref_out, d_out.download()),
             std::is_same_v<T, float> ? 1e-5 : 2 * tolerance<T>());
}

template <typename T>
void check_silu_mul(int32_t intermediate, int32_t n_tokens) {
  const std::vector<T> gate_up = convert<T>(random_floats(size_t(n_tokens) * 2 * intermediate, 3.0f));
  DeviceBuffer<T> d_in(gate_up.size()), d_out(size_t(n_tokens) * intermediate);
  d_in.upload(gate_up);
  d_out.poison();
  silu_mul(dtype_of<T>(), d_in.ptr, d_out.ptr, n_tokens, intermediate, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  std::vector<double> ref(d_out.count);
  for (int32_t t = 0; t < n_tokens; ++t) {
    for (int32_t i = 0; i < intermediate; ++i) {
      const double g = to_double(gate_up[size_t(t) * 2 * intermediate + i]);
      const double u = to_double(gate_up[size_t(t) * 2 * intermediate + intermediate + i]);
      ref[size_t(t) * intermediate + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  report.add("silu_mul", dtype_name(dtype_of<T>()), shape_text({{"intermediate", intermediate}, {"tokens", n_tokens}}),
             compare(ref, d_out.download()), std::is_same_v<T, float> ? 1e-5 : 2 * tolerance<T>());
}

template <typename T>
void check_small_ops() {
  const std::string dt = dtype_name(dtype_of<T>());
  {  // fp32 -> dtype rounds to nearest even as the host's conversion does; dtype -> fp32 is exact
    const int64_t n = 100003;
    const std::vector<float> x = random_floats(n, 10.0f);
    DeviceBuffer<float> d_x(n), d_back(n);
    DeviceBuffer<T> d_t(n);
    d_x.upload(x);
    d_t.poison();
    d_back.poison();
    convert(DType::kF32, d_x.ptr, dtype_of<T>(), d_t.ptr, n, nullptr);
    convert(dtype_of<T>(), d_t.ptr, DType::kF32, d_back.ptr, n, nullptr);
    STRATA_CK(cudaDeviceSynchronize());
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = to_double(to_dtype<T>(x[i]));
    report.add("convert f32->" + dt + "->f32", dt, shape_text({{"n", n}}), compare(ref, d_back.download()), 0.0);
  }
  {
    const int32_t m = 5, n = 257, stride = 300;
    const std::vector<T> y = convert<T>(random_floats(size_t(m) * stride)), bias = convert<T>(random_floats(n));
    DeviceBuffer<T> d_y(y.size()), d_bias(n);
    d_y.upload(y);
    d_bias.upload(bias);
    add_bias(dtype_of<T>(), d_y.ptr, stride, d_bias.ptr, m, n, nullptr);
    STRATA_CK(cudaDeviceSynchronize());
    const std::vector<T> got = d_y.download();
    std::vector<double> ref(y.size());
    for (int32_t i = 0; i < m; ++i)
      for (int32_t j = 0; j < stride; ++j)
        ref[size_t(i) * stride + j] = to_double(y[size_t(i) * stride + j]) + (j < n ? to_double(bias[j]) : 0.0);
    report.add("add_bias", dt, shape_text({{"m", m}, {"n", n}, {"stride", stride}}), compare(ref, got),
               std::is_same_v<T, float> ? 1e-6 : tolerance<T>());
  }
  {
    const int32_t src_rows = 40, width = 130, stride = 136;
    const std::vector<T> src = convert<T>(random_floats(size_t(src_rows) * stride));
    const std::vector<int32_t> rows = {39, 0, 7, 7, 22};
    DeviceBuffer<T> d_src(src.size()), d_dst(rows.size() * width);
    DeviceBuffer<int32_t> d_rows(rows.size());
    d_src.upload(src);
    d_rows.upload(rows);
    d_dst.poison();
    gather_rows(dtype_of<T>(), d_src.ptr, stride, d_rows.ptr, int32_t(rows.size()), width, d_dst.ptr, nullptr);
    STRATA_CK(cudaDeviceSynchronize());
    std::vector<double> ref;
    for (int32_t r : rows)
      for (int32_t j = 0; j < width; ++j) ref.push_back(to_double(src[size_t(r) * stride + j]));
    report.add("gather_rows", dt, shape_text({{"rows", int64_t(rows.size())}, {"width", width}}),
               compare(ref, d_dst.download()), 0.0);
  }
}

// ---- paged KV --------------------------------------------------------------------------------

template <typename T>
void check_rope_kv(KvShape s, int32_t n_tokens, float scaling) {
  const int32_t q_width = s.num_heads * s.head_dim, kv_width = s.num_kv_heads * s.head_dim;
  const int64_t stride = q_width + 2 * kv_width;  // the fused QKV projection's row
  const std::vector<T> qkv = convert<T>(random_floats(size_t(n_tokens) * stride));
  std::vector<int32_t> positions, slots;
  rope_positions_slots(s, n_tokens, true, positions, slots);
  const std::vector<float> inv_freq = inv_freq_for(s.head_dim, 500000.0, scaling);
  const size_t cache_elems = size_t(s.num_blocks) * s.num_kv_heads * s.block_size * s.head_dim;
  DeviceBuffer<T> d_qkv(qkv.size()), d_k(cache_elems), d_v(cache_elems);
  DeviceBuffer<int32_t> d_pos(n_tokens), d_slots(n_tokens);
  DeviceBuffer<float> d_freq(inv_freq.size());
  d_qkv.upload(qkv);
  d_pos.upload(positions);
  d_slots.upload(slots);
  d_freq.upload(inv_freq);
  d_k.poison();
  d_v.poison();
  const RopeKvArgs a = qkv_rope_args<T>(s, d_qkv.ptr, stride, n_tokens, d_pos.ptr, d_slots.ptr, d_freq.ptr, d_k.ptr,
                                        d_v.ptr);
  rope_write_kv(a, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> got_qkv = d_qkv.download(), got_k = d_k.download(), got_v = d_v.download();

  const int32_t half = s.head_dim / 2;
  std::vector<double> ref_q, ref_k, ref_v;
  std::vector<T> out_q, out_k, out_v;
  auto rotate = [&](const T* x, int32_t position, int32_t i, bool hi) {
    const double angle = double(float(position) * inv_freq[i]);  // the float product, as the model does
    const double a = to_double(x[i]), b = to_double(x[i + half]);
    return hi ? b * std::cos(angle) + a * std::sin(angle) : a * std::cos(angle) - b * std::sin(angle);
  };
  size_t untouched_written = 0;
  for (int32_t t = 0; t < n_tokens; ++t) {
    const T* row = qkv.data() + size_t(t) * stride;
    for (int32_t h = 0; h < s.num_heads; ++h) {
      for (int32_t d = 0; d < s.head_dim; ++d) {
        ref_q.push_back(rotate(row + h * s.head_dim, positions[t], d % half, d >= half));
        out_q.push_back(got_qkv[size_t(t) * stride + h * s.head_dim + d]);
      }
    }
    if (slots[t] < 0) continue;
    const int32_t block = slots[t] / s.block_size, offset = slots[t] % s.block_size;
    for (int32_t h = 0; h < s.num_kv_heads; ++h) {
      for (int32_t d = 0; d < s.head_dim; ++d) {
        ref_k.push_back(rotate(row + q_width + h * s.head_dim, positions[t], d % half, d >= half));
        out_k.push_back(got_k[kv_index(s, block, h, offset, d)]);
        ref_v.push_back(to_double(row[q_width + kv_width + h * s.head_dim + d]));
        out_v.push_back(got_v[kv_index(s, block, h, offset, d)]);
      }
    }
  }
  // Every slot no token owns must still hold the poison.
  std::vector<bool> owned(size_t(s.num_blocks) * s.block_size, false);
  for (int32_t t = 0; t < n_tokens; ++t)
    if (slots[t] >= 0) owned[slots[t]] = true;
  for (size_t slot = 0; slot < owned.size(); ++slot) {
    if (owned[slot]) continue;
    const int64_t block = slot / s.block_size;
    const int32_t offset = slot % s.block_size;
    for (int32_t h = 0; h < s.num_kv_heads; ++h)
      for (int32_t d = 0; d < s.head_dim; ++d)
        untouched_written += !is_poison(got_k[kv_index(s, block, h, offset, d)]) ||
                             !is_poison(got_v[kv_index(s, block, h, offset, d)]);
  }
  const std::string shape = shape_text({{"heads", s.num_heads}, {"kv_heads", s.num_kv_heads}, {"head_dim", s.head_dim},
                                        {"block", s.block_size}, {"tokens", n_tokens}}) +
                            (scaling > 0 ? " llama3" : "");
  const double tol = std::is_same_v<T, float> ? 1e-5 : tolerance<T>();
  report.add("rope q", dtype_name(dtype_of<T>()), shape, compare(ref_q, out_q), tol);
  report.add("rope k -> cache", dtype_name(dtype_of<T>()), shape, compare(ref_k, out_k), tol);
  report.add("v -> cache", dtype_name(dtype_of<T>()), shape, compare(ref_v, out_v), 0.0);
  report.add_exact("kv slots not written", dtype_name(dtype_of<T>()), shape + " padding row", untouched_written == 0);

  // The same tokens with rows one element wider: no longer 16-byte aligned, so a thread takes one
  // pair or value instead of 16 bytes. The same bytes either way (q, both caches).
  const int64_t odd = stride + 1;
  std::vector<T> qkv_odd(size_t(n_tokens) * odd);
  for (int32_t t = 0; t < n_tokens; ++t)
    std::copy_n(qkv.begin() + size_t(t) * stride, stride, qkv_odd.begin() + size_t(t) * odd);
  DeviceBuffer<T> d_qkv_odd(qkv_odd.size()), d_k_odd(cache_elems), d_v_odd(cache_elems);
  d_qkv_odd.upload(qkv_odd);
  d_k_odd.poison();
  d_v_odd.poison();
  rope_write_kv(qkv_rope_args<T>(s, d_qkv_odd.ptr, odd, n_tokens, d_pos.ptr, d_slots.ptr, d_freq.ptr, d_k_odd.ptr,
                                 d_v_odd.ptr),
                nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> odd_qkv = d_qkv_odd.download(), odd_k = d_k_odd.download(), odd_v = d_v_odd.download();
  bool same = std::memcmp(odd_k.data(), got_k.data(), got_k.size() * sizeof(T)) == 0 &&
              std::memcmp(odd_v.data(), got_v.data(), got_v.size() * sizeof(T)) == 0;
  for (int32_t t = 0; t < n_tokens; ++t)
    same = same && std::memcmp(odd_qkv.data() + size_t(t) * odd, got_qkv.data() + size_t(t) * stride,
                               size_t(stride) * sizeof(T)) == 0;
  report.add_exact("rope_write_kv 16 bytes == 1 pair a thread", dtype_name(dtype_of<T>()), shape + " (q, caches)", same);
}

template <typename T>
void check_copy_blocks(KvShape s) {
  const size_t block_elems = size_t(s.num_kv_heads) * s.block_size * s.head_dim;
  const size_t cache_elems = block_elems * s.num_blocks;
  const std::vector<T> k = convert<T>(random_floats(cache_elems)), v = convert<T>(random_floats(cache_elems));
  std::vector<int32_t> order(s.num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng());
  const int32_t pairs = s.num_blocks / 2;
  std::vector<int32_t> src(order.begin(), order.begin() + pairs), dst(order.begin() + pairs, order.begin() + 2 * pairs);
  DeviceBuffer<T> d_k(cache_elems), d_v(cache_elems);
  DeviceBuffer<int32_t> d_src(pairs), d_dst(pairs);
  d_k.upload(k);
  d_v.upload(v);
  d_src.upload(src);
  d_dst.upload(dst);
  copy_blocks(dtype_of<T>(), d_k.ptr, d_v.ptr, d_src.ptr, d_dst.ptr, pairs, int64_t(block_elems), nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  std::vector<T> want_k = k, want_v = v;
  for (int32_t i = 0; i < pairs; ++i) {
    std::copy_n(k.begin() + size_t(src[i]) * block_elems, block_elems, want_k.begin() + size_t(dst[i]) * block_elems);
    std::copy_n(v.begin() + size_t(src[i]) * block_elems, block_elems, want_v.begin() + size_t(dst[i]) * block_elems);
  }
  const std::vector<T> got_k = d_k.download(), got_v = d_v.download();
  const bool same = std::memcmp(got_k.data(), want_k.data(), cache_elems * sizeof(T)) == 0 &&
                    std::memcmp(got_v.data(), want_v.data(), cache_elems * sizeof(T)) == 0;
  report.add_exact("copy_blocks", dtype_name(dtype_of<T>()),
                   shape_text({{"blocks", s.num_blocks}, {"pairs", pairs}, {"block_elems", int64_t(block_elems)}}),
                   same);
}

// A KV pool filled with random values and, per sequence, a scattered block table covering
// `tokens` positions.
template <typename T>
struct PagedKv {
  KvShape s;
  std::vector<T> k, v;
  std::vector<int32_t> tables;  // (n_seqs, table_stride)
  int32_t table_stride;
  PagedKv(KvShape shape, const std::vector<int32_t>& tokens) : s(shape) {
    int32_t max_blocks = 1;
    int64_t needed = 0;
    for (int32_t n : tokens) {
      max_blocks = std::max(max_blocks, (n + s.block_size - 1) / s.block_size);
      needed += (n + s.block_size - 1) / s.block_size;
    }
    s.num_blocks = int32_t(needed) + 3;  // spare blocks no table names
    table_stride = max_blocks + 1;       // one unused column: the stride is not the length
    const size_t elems = size_t(s.num_blocks) * s.num_kv_heads * s.block_size * s.head_dim;
    k = convert<T>(random_floats(elems));
    v = convert<T>(random_floats(elems));
    std::vector<int32_t> order(s.num_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng());
    tables.assign(tokens.size() * table_stride, -1);
    size_t next = 0;
    for (size_t i = 0; i < tokens.size(); ++i)
      for (int32_t b = 0; b < (tokens[i] + s.block_size - 1) / s.block_size; ++b) tables[i * table_stride + b] = order[next++];
  }
  double key(size_t seq, int32_t pos, int32_t head, int32_t d) const {
    return to_double(k[kv_index(s, tables[seq * table_stride + pos / s.block_size], head, pos % s.block_size, d)]);
  }
  double value(size_t seq, int32_t pos, int32_t head, int32_t d) const {
    return to_double(v[kv_index(s, tables[seq * table_stride + pos / s.block_size], head, pos % s.block_size, d)]);
  }
};

// A PagedKv uploaded, and the attention arguments it fills in: the cache, the block tables and
// the heads' shape, with the query and output rows given.
template <typename T>
struct DevicePagedKv {
  const PagedKv<T>& kv;
  DeviceBuffer<T> k, v;
  DeviceBuffer<int32_t> tables;
  explicit DevicePagedKv(const PagedKv<T>& host)
      : kv(host), k(host.k.size()), v(host.v.size()), tables(host.tables.size()) {
    k.upload(host.k);
    v.upload(host.v);
    tables.upload(host.tables);
  }
  void fill(PagedAttentionArgs& a, const T* q, int64_t q_stride, T* out, int64_t out_stride, double scale) const {
    a.dtype = dtype_of<T>();
    a.q = q;
    a.q_stride = q_stride;
    a.out = out;
    a.out_stride = out_stride;
    a.k_cache = k.ptr;
    a.v_cache = v.ptr;
    a.block_tables = tables.ptr;
    a.block_table_stride = kv.table_stride;
    a.num_heads = kv.s.num_heads;
    a.num_kv_heads = kv.s.num_kv_heads;
    a.head_dim = kv.s.head_dim;
    a.block_size = kv.s.block_size;
    a.scale = float(scale);
  }
};

// softmax(q . K[0..context) * scale) V for one query head, in float64.
template <typename T>
void reference_attention(const PagedKv<T>& kv, size_t seq, const T* q, int32_t head, int32_t context, double scale,
                         double* out) {
  const int32_t kv_head = head / (kv.s.num_heads / kv.s.num_kv_heads), D = kv.s.head_dim;
  std::vector<double> score(context);
  double m = -INFINITY;
  for (int32_t t = 0; t < context; ++t) {
    double dot = 0.0;
    for (int32_t d = 0; d < D; ++d) dot += to_double(q[d]) * kv.key(seq, t, kv_head, d);
    score[t] = dot * scale;
    m = std::max(m, score[t]);
  }
  double sum = 0.0;
  for (double& x : score) sum += (x = std::exp(x - m));
  for (int32_t d = 0; d < D; ++d) {
    double acc = 0.0;
    for (int32_t t = 0; t < context; ++t) acc += score[t] * kv.value(seq, t, kv_head, d);
    out[d] = context > 0 ? acc / sum : 0.0;
  }
}

// Decode attention over a PagedKv: the query rows, and decode_attention's output rows for a
// kernel and grid width (0: decode_attention's own choice).
template <typename T>
struct DecodeRun {
  KvShape s;
  std::vector<int32_t> contexts;
  int32_t n_seqs, width;
  PagedKv<T> kv;
  int64_t q_stride, out_stride;
  std::vector<T> q;
  int32_t max_context;  // a looser bound than the longest context, as a graph has
  double scale;
  DecodeRun(KvShape shape, std::vector<int32_t> ctx)
      : s(shape),
        contexts(std::move(ctx)),
        n_seqs(int32_t(contexts.size())),
        width(s.num_heads * s.head_dim),
        kv(s, contexts),
        q_stride(width + 2 * s.num_kv_heads * s.head_dim),
        out_stride(width + s.head_dim),
        q(convert<T>(random_floats(size_t(n_seqs) * q_stride))),
        max_context(*std::max_element(contexts.begin(), contexts.end()) + 100),
        scale(1.0 / std::sqrt(double(s.head_dim))) {}

  DecodeAttentionArgs args(DecodeKernel kernel, int32_t grid) const {
    DecodeAttentionArgs a;
    a.context_lens = nullptr;
    a.n_seqs = n_seqs;
    a.max_context = max_context;
    a.kernel = kernel;
    a.grid_partitions = grid;
    a.dtype = dtype_of<T>();
    a.head_dim = s.head_dim;
    return a;
  }
  // `counters_zero` given: with counters (the tensor-core kernel merges its own partitions), two
  // calls, the output poisoned before the second, whose output is returned; it says whether the
  // counters were 0 after each call.
  std::vector<T> run(DecodeKernel kernel, int32_t grid, bool* counters_zero = nullptr) const {
    const DevicePagedKv<T> d_kv(kv);
    DeviceBuffer<T> d_q(q.size()), d_out(size_t(n_seqs) * out_stride);
    DeviceBuffer<int32_t> d_ctx(n_seqs), d_counters(size_t(n_seqs) * s.num_kv_heads);
    DeviceBuffer<float> d_ws(decode_attention_workspace_floats(n_seqs, s.num_heads, s.head_dim, max_context));
    d_q.upload(q);
    d_ctx.upload(contexts);
    d_out.poison();
    d_ws.poison();
    DecodeAttentionArgs a = args(kernel, grid);
    d_kv.fill(a, d_q.ptr, q_stride, d_out.ptr, out_stride, scale);
    a.context_lens = d_ctx.ptr;
    a.workspace = d_ws.ptr;
    if (counters_zero != nullptr) {
      STRATA_CK(cudaMemset(d_counters.ptr, 0, d_counters.count * sizeof(int32_t)));
      a.counters = d_counters.ptr;
      a.merge = DecodeMerge::kInKernel;  // at every batch size, not only where kAuto would
      *counters_zero = true;
    }
    for (int call = 0; call < (counters_zero != nullptr ? 2 : 1); ++call) {
      if (call > 0) d_out.poison();
      decode_attention(a, nullptr);
      STRATA_CK(cudaDeviceSynchronize());
      if (counters_zero != nullptr) {
        const std::vector<int32_t> left = d_counters.download();
        *counters_zero = *counters_zero && std::all_of(left.begin(), left.end(), [](int32_t c) { return c == 0; });
      }
    }
    return d_out.download();
  }
  std::string what() const {
    std::string lens;
    for (int32_t c : contexts) lens += (lens.empty() ? "" : ",") + std::to_string(c);
    if (lens.size() > 24) lens = std::to_string(n_seqs) + " seqs to " + std::to_string(max_context - 100);
    return shape_text({{"h", s.num_heads}, {"kv", s.num_kv_heads}, {"d", s.head_dim}, {"bs", s.block_size}}) +
           " ctx " + lens;
  }
};

template <typename T>
void check_decode(KvShape s, std::vector<int32_t> contexts, DecodeKernel kernel = DecodeKernel::kAuto,
                  int32_t grid = 0) {
  const DecodeRun<T> r(s, std::move(contexts));
  const int32_t n_seqs = r.n_seqs;
  const int64_t q_stride = r.q_stride, out_stride = r.out_stride;
  const std::vector<T>& q = r.q;
  const double scale = r.scale;
  const std::vector<T> got = r.run(kernel, grid);
  const PagedKv<T>& kv = r.kv;

  std::vector<double> ref;
  std::vector<T> out;
  std::vector<double> row(s.head_dim);
  for (int32_t i = 0; i < n_seqs; ++i) {
    for (int32_t h = 0; h < s.num_heads; ++h) {
      reference_attention(kv, i, q.data() + size_t(i) * q_stride + h * s.head_dim, h, r.contexts[i], scale, row.data());
      for (int32_t d = 0; d < s.head_dim; ++d) {
        ref.push_back(row[d]);
        out.push_back(got[size_t(i) * out_stride + h * s.head_dim + d]);
      }
    }
  }
  const bool tensor_cores = std::string(decode_attention_kernel(r.args(kernel, grid))) == "tensor cores";
  const std::string what = r.what() + (grid > 0 ? " grid " + std::to_string(grid) : "");
  report.add(tensor_cores ? "decode_attention (tc)" : "decode_attention", dtype_name(dtype_of<T>()), what,
             compare(ref, out), std::is_same_v<T, float> ? 1e-5 : tolerance<T>());
  // The tensor-core kernel merging its own partitions (the backend's way): the reduce kernel's
  // bytes, checked above, in two calls on the same counters, which each call leaves at 0.
  if (tensor_cores) {
    bool zero = false;
    const std::vector<T> merged = r.run(kernel, grid, &zero);
    const bool same = std::memcmp(merged.data(), got.data(), got.size() * sizeof(T)) == 0;
    report.add_exact("decode merged in kernel (tc)", dtype_name(dtype_of<T>()),
                     what + (zero ? "" : " (counters left non-zero)") + (same ? "" : " (bytes differ)"), same && zero);
  }
}

// The tensor-core kernel's grid width along the context changes which block scores a
// partition, never the result: the output bytes at widths 1 and 3 equal those at
// decode_attention's own choice.
template <typename T>
void check_decode_grid(KvShape s, std::vector<int32_t> contexts) {
  const DecodeRun<T> r(s, std::move(contexts));
  const std::vector<T> chosen = r.run(DecodeKernel::kTensorCores, 0);
  for (const int32_t grid : {1, 3}) {
    const std::vector<T> got = r.run(DecodeKernel::kTensorCores, grid);
    const bool same = std::memcmp(got.data(), chosen.data(), got.size() * sizeof(T)) == 0;
    report.add_exact("decode grid-invariant (tc)", dtype_name(dtype_of<T>()), r.what() + " grid " + std::to_string(grid),
                     same);
  }
}

// Chunked prefill: slice i has start_pos[i] cached tokens and n[i] new queries.
template <typename T>
void check_prefill(KvShape s, std::vector<int32_t> start_pos, std::vector<int32_t> n) {
  const int32_t n_slices = int32_t(n.size()), width = s.num_heads * s.head_dim;
  std::vector<int32_t> totals(n_slices), query_start(n_slices + 1, 0);
  for (int32_t i = 0; i < n_slices; ++i) {
    totals[i] = start_pos[i] + n[i];
    query_start[i + 1] = query_start[i] + n[i];
  }
  PagedKv<T> kv(s, totals);
  const int32_t rows = query_start[n_slices];
  const int64_t q_stride = width + 2 * s.num_kv_heads * s.head_dim;
  const std::vector<T> q = convert<T>(random_floats(size_t(rows) * q_stride));
  const double scale = 1.0 / std::sqrt(double(s.head_dim));
  const DevicePagedKv<T> d_kv(kv);
  DeviceBuffer<T> d_q(q.size()), d_out(size_t(rows) * width);
  DeviceBuffer<int32_t> d_qs(query_start.size()), d_start(start_pos.size());
  d_q.upload(q);
  d_qs.upload(query_start);
  d_start.upload(start_pos);
  d_out.poison();
  PrefillAttentionArgs a;
  d_kv.fill(a, d_q.ptr, q_stride, d_out.ptr, width, scale);
  a.query_start = d_qs.ptr;
  a.start_pos = d_start.ptr;
  a.n_slices = n_slices;
  a.max_query_len = *std::max_element(n.begin(), n.end());
  prefill_attention(a, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> got = d_out.download();

  std::vector<double> ref;
  std::vector<T> out;
  std::vector<double> row(s.head_dim);
  for (int32_t i = 0; i < n_slices; ++i) {
    for (int32_t j = 0; j < n[i]; ++j) {
      const size_t r = size_t(query_start[i] + j);
      for (int32_t h = 0; h < s.num_heads; ++h) {
        reference_attention(kv, i, q.data() + r * q_stride + h * s.head_dim, h, start_pos[i] + j + 1, scale, row.data());
        for (int32_t d = 0; d < s.head_dim; ++d) {
          ref.push_back(row[d]);
          out.push_back(got[r * width + h * s.head_dim + d]);
        }
      }
    }
  }
  std::string what;
  for (int32_t i = 0; i < n_slices; ++i) what += (what.empty() ? "" : ",") + std::to_string(start_pos[i]) + "+" + std::to_string(n[i]);
  report.add("prefill_attention", dtype_name(dtype_of<T>()),
             shape_text({{"h", s.num_heads}, {"kv", s.num_kv_heads}, {"d", s.head_dim}, {"bs", s.block_size}}) + " " +
                 what,
             compare(ref, out), std::is_same_v<T, float> ? 1e-5 : tolerance<T>());
}

// ---- decode GEMV --------------------------------------------------------------------------

// Each of the m rows of x run alone (m = 1) through launch(its row, a poisoned output row): true
// when every one gives the bytes of its row of `got` (n outputs, y_stride apart).
template <typename T, typename Launch>
bool rows_alone_match(const DeviceBuffer<T>& d_x, int64_t x_stride, int32_t m, int32_t n, int64_t y_stride,
                      const std::vector<T>& got, Launch launch) {
  DeviceBuffer<T> d_row{size_t(y_stride)};
  for (int32_t t = 0; t < m; ++t) {
    d_row.poison();
    launch(d_x.ptr + size_t(t) * x_stride, d_row.ptr);
    STRATA_CK(cudaDeviceSynchronize());
    const std::vector<T> alone = d_row.download();
    if (std::memcmp(alone.data(), got.data() + size_t(t) * y_stride, sizeof(T) * size_t(n)) != 0) return false;
  }
  return true;
}

// y = x · wᵀ for m rows (strided x and y, poisoned padding that must stay), against float64;
// then every row again alone (m = 1), which must give the same bytes: a row's result may not
// depend on what is batched with it.
template <typename T>
void check_gemv(int32_t m, int32_t n, int32_t k) {
  const int64_t x_stride = k + 8, y_stride = n + 3;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * x_stride, 1.0f));
  const std::vector<T> w = convert<T>(random_floats(size_t(n) * k, 1.0f / std::sqrt(float(k))));
  DeviceBuffer<T> d_x(x.size()), d_w(w.size()), d_y(size_t(m) * y_stride);
  d_x.upload(x);
  d_w.upload(w);
  d_y.poison();
  gemv(dtype_of<T>(), d_x.ptr, x_stride, d_w.ptr, d_y.ptr, y_stride, m, n, k, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> got = d_y.download();
  std::vector<double> ref(got.size());
  std::vector<bool> inside(got.size(), false);
  for (int32_t t = 0; t < m; ++t) {
    for (int32_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int32_t i = 0; i < k; ++i) s += to_double(x[size_t(t) * x_stride + i]) * to_double(w[size_t(j) * k + i]);
      ref[size_t(t) * y_stride + j] = s;
      inside[size_t(t) * y_stride + j] = true;
    }
  }
  size_t padding_written = 0;
  for (size_t i = 0; i < got.size(); ++i) padding_written += !inside[i] && std::isfinite(to_double(got[i]));
  const std::string shape = shape_text({{"m", m}, {"n", n}, {"k", k}});
  report.add("gemv", dtype_name(dtype_of<T>()), shape, compare(ref, got, &inside), tolerance<T>());
  report.add_exact("gemv padding not written", dtype_name(dtype_of<T>()), shape, padding_written == 0);
  const bool same = rows_alone_match(d_x, x_stride, m, n, y_stride, got, [&](const T* row, T* out) {
    gemv(dtype_of<T>(), row, x_stride, d_w.ptr, out, y_stride, 1, n, k, nullptr);
  });
  report.add_exact("gemv row alone == batched", dtype_name(dtype_of<T>()), shape, same);
}

// The gated GEMV (gemv_swiglu) against gemv into a (m, 2n) gate/up buffer then silu_mul: the same
// bytes in every row; y's padding untouched; every row alone gives the batch's bytes.
template <typename T>
void check_gemv_swiglu(int32_t m, int32_t n, int32_t k) {
  const int64_t x_stride = k + 8, y_stride = n + 3;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * x_stride, 1.0f));
  const std::vector<T> w = convert<T>(random_floats(size_t(2 * n) * k, 2.0f / std::sqrt(float(k))));
  DeviceBuffer<T> d_x(x.size()), d_w(w.size()), d_gate_up(size_t(m) * 2 * n), d_ref(size_t(m) * n);
  DeviceBuffer<T> d_y(size_t(m) * y_stride);
  d_x.upload(x);
  d_w.upload(w);
  d_y.poison();
  gemv(dtype_of<T>(), d_x.ptr, x_stride, d_w.ptr, d_gate_up.ptr, 2 * n, m, 2 * n, k, nullptr);
  silu_mul(dtype_of<T>(), d_gate_up.ptr, d_ref.ptr, m, n, nullptr);
  gemv_swiglu(dtype_of<T>(), d_x.ptr, x_stride, d_w.ptr, d_y.ptr, y_stride, m, n, k, nullptr);
  STRATA_CK(cudaDeviceSynchronize());
  const std::vector<T> ref = d_ref.download(), got = d_y.download();
  bool same = true;
  size_t padding_written = 0;
  for (int32_t t = 0; t < m; ++t) {
    same = same && std::memcmp(got.data() + size_t(t) * y_stride, ref.data() + size_t(t) * n, sizeof(T) * size_t(n)) == 0;
    for (int64_t j = n; j < y_stride; ++j) padding_written += std::isfinite(to_double(got[size_t(t) * y_stride + j]));
  }
  const std::string shape = shape_text({{"m", m}, {"n", n}, {"k", k}});
  report.add_exact("gemv_swiglu == gemv + silu_mul", dtype_name(dtype_of<T>()), shape, same);
  report.add_exact("gemv_swiglu padding not written", dtype_name(dtype_of<T>()), shape, padding_written == 0);
  const bool alone_same = rows_alone_match(d_x, x_stride, m, n, y_stride, got, [&](const T* row, T* out) {
    gemv_swiglu(dtype_of<T>(), row, x_stride, d_w.ptr, out, y_stride, 1, n, k, nullptr);
  });
  report.add_exact("gemv_swiglu row alone == batched", dtype_name(dtype_of<T>()), shape, alone_same);
}

// The q/k/v GEMV fused with RoPE and the cache write (gemv_qkv_rope) against gemv into the
// q/k/v buffer followed by rope_write_kv: the same bytes in the buffer (its padding columns
// included) and in both caches (every slot no token owns still poisoned); token 1, when there
// is one, is a padding row (slot -1).
template <typename T>
void check_gemv_qkv_rope(KvShape s, int32_t m, int32_t k) {
  const int32_t n = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim;
  const int64_t x_stride = k + 8, y_stride = n + 5;
  const std::vector<T> x = convert<T>(random_floats(size_t(m) * x_stride, 1.0f));
  const std::vector<T> w = convert<T>(random_floats(size_t(n) * k, 1.0f / std::sqrt(float(k))));
  DeviceBuffer<T> d_x(x.size()), d_w(w.size());
  d_x.upload(x);
  d_w.upload(w);
  const QkvRopeComparison c = compare_qkv_rope<T>(s, m, y_stride, [&](const RopeKvArgs& a, bool fused) {
    if (fused) {
      gemv_qkv_rope(a, d_x.ptr, x_stride, d_w.ptr, k, nullptr);
    } else {
      gemv(dtype_of<T>(), d_x.ptr, x_stride, d_w.ptr, a.q, y_stride, m, n, k, nullptr);
      rope_write_kv(a, nullptr);
    }
  });
  const std::string shape = shape_text({{"h", s.num_heads}, {"kv", s.num_kv_heads}, {"d", s.head_dim}, {"m", m}, {"k", k}});
  report.add_exact("gemv_qkv_rope q/k/v == gemv + rope_write_kv", dtype_name(dtype_of<T>()), shape, c.buffer_same);
  report.add_exact("gemv_qkv_rope caches == gemv + rope_write_kv", dtype_name(dtype_of<T>()), shape, c.caches_same);
}

template <typename T>
void check_dtype() {
  const bool full = !std::is_same_v<T, __half>;  // fp16 gets the same kernels: a lighter sweep
  check_embedding<T>(2048, 128, 37);
#ifndef STRATA_CUDA_EMULATION  // 525M elements: minutes on the CPU for the same code path as above
  check_embedding<T>(128256, 4096, 5);
#endif
  for (bool with_x : {false, true}) {
    check_add_rms_norm<T>(4096, 7, with_x);
    check_add_rms_norm<T>(130, 3, with_x);
  }
  check_silu_mul<T>(14336, 3);
  check_silu_mul<T>(383, 5);
  check_small_ops<T>();

  if constexpr (!std::is_same_v<T, float>) {
    // Every m the kernel takes; k past and short of a whole 1,024-element round (its unrolled
    // loads), n not a multiple of a block's 8 rows. Then the shapes it refuses.
    for (int32_t m = 1; m <= kGemvMaxRows; ++m) check_gemv<T>(m, 37, 1032);
    check_gemv<T>(1, 4099, 4096);
    check_gemv<T>(3, 515, 264);
    check_gemv<T>(8, 1, 8);
    if (full) check_gemv<T>(2, 1000, 14336);
    for (int32_t m = 1; m <= kGemvMaxRows; ++m) check_gemv_swiglu<T>(m, 37, 1032);
    check_gemv_swiglu<T>(2, 384, 128);  // tinystories-656k's MLP: silu_mul's 16-byte path
    check_gemv_swiglu<T>(1, 5, 8);
    // Every m, at the test shapes' head layouts: Llama-3's, SmolLM2-135M's odd 9 and 3, a tiny one.
    for (int32_t m = 1; m <= kGemvMaxRows; ++m) check_gemv_qkv_rope<T>(KvShape{8, 4, 16, 16, 40}, m, 1032);
    check_gemv_qkv_rope<T>(KvShape{32, 8, 128, 16, 64}, 2, 264);
    check_gemv_qkv_rope<T>(KvShape{9, 3, 64, 16, 20}, 3, 576);
    if (full) check_gemv_qkv_rope<T>(KvShape{32, 8, 128, 16, 64}, 1, 4096);
    const bool refused = !gemv_refusal(dtype_of<T>(), nullptr, 12, nullptr, 1, 4, 12).empty() &&
                         !gemv_refusal(dtype_of<T>(), nullptr, 16, nullptr, kGemvMaxRows + 1, 4, 16).empty() &&
                         !gemv_refusal(DType::kF32, nullptr, 16, nullptr, 1, 4, 16).empty() &&
                         gemv_refusal(dtype_of<T>(), nullptr, 16, nullptr, 1, 4, 16).empty();
    report.add_exact("gemv refuses k % 8, m > max, fp32", dtype_name(dtype_of<T>()), "", refused);
  }

  const KvShape llama3{32, 8, 128, 16, 64};
  const KvShape tiny{8, 4, 16, 16, 40};
  check_rope_kv<T>(llama3, 19, 8.0f);
  check_rope_kv<T>(tiny, 33, 0.0f);
  check_rope_kv<T>(KvShape{8, 4, 8, 7, 20}, 17, 0.0f);
  check_copy_blocks<T>(KvShape{32, 8, 128, 16, 9});

  // Decode: ends on and around KV-block (16) and partition boundaries, a padding row (0). A
  // context's partitions are 64 tokens up to 1024, then 128, 256 and 512 (16 of them, from 8192
  // more than 16): 1025, 2049 and 4097 each leave one token in their last partition.
  check_decode<T>(llama3, {1, 15, 16, 17, 63, 64, 65, 511, 512, 513, 1024, 1500, 0});
  if (full) check_decode<T>(KvShape{64, 8, 128, 32, 0}, {2049, 5, 4096, 4097, 8193});
  // fp32 at head_dim 256 is 64 lanes of 16 bytes, over a warp: the decode kernel refuses it.
  if constexpr (!std::is_same_v<T, float>) check_decode<T>(KvShape{8, 1, 256, 16, 0}, {1, 700, 33});
  check_decode<T>(tiny, {1, 2, 16, 17, 100, 511, 512, 513, 0});
  check_decode<T>(KvShape{8, 4, 8, 7, 0}, {1, 6, 7, 8, 600});
  check_decode<T>(KvShape{4, 4, 64, 16, 0}, {64, 1025});
  // SmolLM2-135M's 9 heads of 64 over 3 KV heads, 3 sequences of up to 3 partitions: 81 floats
  // of maxima, so the partial outputs after them must be put on a 16-byte boundary for the
  // merge's 16-byte loads.
  check_decode<T>(KvShape{9, 3, 64, 16, 0}, {90, 5, 64});
  if constexpr (!std::is_same_v<T, float>) {
    // bf16/fp16 at head_dim 16..128 take the tensor-core kernel above; the CUDA-core kernel on
    // the same cases, and the tensor-core kernel one tile deep (contexts to 1024: 64-token
    // partitions), with a block size that cuts its 16-key tiles (7), and 8 query heads a KV head.
    check_decode<T>(llama3, {1, 15, 16, 17, 63, 64, 65, 511, 512, 513, 1024, 1500, 0}, DecodeKernel::kCudaCores);
    check_decode<T>(tiny, {1, 2, 16, 17, 100, 511, 512, 513, 0}, DecodeKernel::kCudaCores);
    check_decode<T>(llama3, {1, 17, 64, 300, 900, 0}, DecodeKernel::kTensorCores);
    check_decode<T>(KvShape{16, 2, 64, 7, 0}, {1, 63, 64, 65, 130, 1025, 2100}, DecodeKernel::kTensorCores);
    // Blocks looping over partitions (a grid narrower than the partitions), against float64
    // and byte for byte against the chosen grid.
    check_decode<T>(llama3, {1, 65, 1500}, DecodeKernel::kTensorCores, 3);
    check_decode_grid<T>(llama3, {1, 64, 65, 1024, 1500, 0});
  }
  {
    // Asking for the tensor cores where they do not apply is an error, not a silent fallback.
    bool refused = false;
    try {
      check_decode<T>(KvShape{8, 4, 8, 7, 0}, {5}, DecodeKernel::kTensorCores);  // head_dim 8
    } catch (const CudaError&) {
      refused = true;
    }
    report.add_exact("decode_attention refuses tc", dtype_name(dtype_of<T>()), "h8 kv4 d8 bs7", refused);
  }

  // Prefill: whole prompts, chunks after cached tokens, rows past one query tile (32).
  check_prefill<T>(llama3, {0, 0, 48}, {1, 77, 33});
  check_prefill<T>(tiny, {0, 100, 5}, {31, 64, 1});
  check_prefill<T>(KvShape{8, 4, 8, 7, 0}, {0, 13}, {50, 20});
  if (full) check_prefill<T>(KvShape{8, 1, 256, 16, 0}, {0, 600}, {40, 9});
  check_prefill<T>(KvShape{4, 4, 64, 16, 0}, {1000}, {129});
  // Block sizes that cut a 64-key tile unevenly, smaller than a thread's row step (8 rows at
  // head_dim 128, 16 at 64, 32 at 32).
  check_prefill<T>(KvShape{16, 2, 64, 7, 0}, {0, 70}, {100, 33});
  check_prefill<T>(KvShape{8, 2, 128, 5, 0}, {130, 0}, {70, 65});
  check_prefill<T>(KvShape{4, 2, 32, 3, 0}, {0, 50}, {90, 17});
  // The engine's prefill shapes: a whole 1,024-token prompt (16 query tiles) and a 300-token
  // chunk after 424 cached tokens (bf16 only: its float64 reference, and the emulation, take
  // about 30 s here).
  if constexpr (std::is_same_v<T, __nv_bfloat16>) check_prefill<T>(llama3, {0, 424}, {1024, 300});
}

}  // namespace

int main() {
  require_device();
  run_seed();
  check_dtype<float>();
  check_dtype<__nv_bfloat16>();
  check_dtype<__half>();
  return report.finish("check_cuda_kernels");
}
