// Decode attention alone (decode_attention: the partition kernel and the reduce), three ways side
// by side in one run: the CUDA-core kernel, the tensor-core kernel with the reduce kernel after
// it, and the tensor-core kernel merging its own partitions (counters, as the backend runs it),
// next to the memory ceiling measured in the same run (a 1 GiB
// device-to-device copy, bytes read plus written). Llama-3-8B's heads: 32 query heads, 8 KV
// heads, head_dim 128, bf16, KV blocks of 16 tokens; every sequence at the same context.
//
// Method (as bench_quant.cu): each (batch, context) rotates among enough KV caches (one layer's
// K and V each, random bf16, blocks in a shuffled order as a long-running cache's free list
// leaves them) that together they are over ten times the L2, so each launch reads DRAM, as the
// engine's 32 layers do; a timed sample is one replay of a CUDA graph of back-to-back launches
// (the engine replays decode as a graph), timed with events; the three ways alternate,
// `rounds` times, and each gets the median of its samples. GB/s counts the K and V bytes the
// contexts hold, once; "% copy" divides that by the copy's rate (a read-only stream can come
// out slightly above 100%).
//   bench_cuda_attention [out.json] [--batches 1,8,64,256] [--contexts 1024,4096] [--rounds 3]
//   (or STRATA_BENCH_JSON=out.json; STRATA_BENCH_SMOKE=1: tiny sizes, a smoke run of this code)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "check_util.h"
#include "strata/cuda_kernels.h"

using namespace strata;
using namespace strata::cuda;
using namespace strata::cuda::checks;
using namespace strata::cuda::bench;

namespace {

struct Settings {
  size_t copy_bytes = size_t{1} << 30;
  size_t rotate_bytes = size_t{512} << 20;  // H100 L2 is 50 MiB, H200's 60
  int samples = 15;
  double graph_target_us = 3000.0;
  int max_graph_iters = 128;
};
Settings settings;

constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16;

std::vector<int32_t> parse_list(const std::string& text) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > (1 << 20)) throw CudaError("bad list item '" + item + "' in '" + text + "'");
    out.push_back(int32_t(v));
    at = comma + 1;
  }
  return out;
}

// One (batch, context) case: `sets` KV caches with their block tables, the queries, outputs and
// workspace, and the arguments for set i.
struct Case {
  int32_t batch, context, sets;
  int64_t set_blocks;  // KV blocks per set
  DeviceBuffer<__nv_bfloat16> k, v, q, out;
  DeviceBuffer<int32_t> tables, contexts, counters;
  DeviceBuffer<float> ws;
  DecodeAttentionArgs base;

  static int64_t blocks_per_seq(int32_t context) { return (context + kBlockSize - 1) / kBlockSize; }
  static size_t set_bytes(int32_t batch, int32_t context) {
    return size_t(batch) * blocks_per_seq(context) * kKvHeads * kBlockSize * kHeadDim * 2 * sizeof(__nv_bfloat16);
  }

  Case(int32_t b, int32_t c)
      : batch(b),
        context(c),
        sets(int(std::clamp<size_t>((settings.rotate_bytes + set_bytes(b, c) - 1) / set_bytes(b, c), 2, 64))),
        set_blocks(int64_t{b} * blocks_per_seq(c)),
        k(size_t(sets) * set_blocks * kKvHeads * kBlockSize * kHeadDim),
        v(k.count),
        q(size_t(b) * kHeads * kHeadDim),
        out(q.count),
        tables(size_t(b) * blocks_per_seq(c)),
        contexts(size_t(b)),
        counters(size_t(b) * kKvHeads),
        ws(size_t(decode_attention_workspace_floats(b, kHeads, kHeadDim, c))) {
    STRATA_CK(cudaMemset(counters.ptr, 0, counters.count * sizeof(int32_t)));
    fill(k.ptr, k.count, 11);
    fill(v.ptr, v.count, 12);
    fill(q.ptr, q.count, 13);
    std::vector<int32_t> order(static_cast<size_t>(set_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(bench_seed())));
    tables.upload(order);  // sequence i's blocks: row i, blocks_per_seq(c) wide
    contexts.upload(std::vector<int32_t>(size_t(b), c));
    STRATA_CK(cudaDeviceSynchronize());
    base.dtype = DType::kBF16;
    base.q = q.ptr;
    base.q_stride = int64_t{kHeads} * kHeadDim;
    base.out = out.ptr;
    base.out_stride = base.q_stride;
    base.block_tables = tables.ptr;
    base.block_table_stride = int32_t(blocks_per_seq(c));
    base.num_heads = kHeads;
    base.num_kv_heads = kKvHeads;
    base.head_dim = kHeadDim;
    base.block_size = kBlockSize;
    base.scale = 1.0f / std::sqrt(float(kHeadDim));
    base.context_lens = contexts.ptr;
    base.n_seqs = b;
    base.max_context = c;
    base.workspace = ws.ptr;
  }
  DecodeAttentionArgs args(int i, DecodeKernel kernel, bool merged) const {
    DecodeAttentionArgs a = base;
    const size_t offset = size_t(i % sets) * set_blocks * kKvHeads * kBlockSize * kHeadDim;
    a.k_cache = k.ptr + offset;
    a.v_cache = v.ptr + offset;
    a.kernel = kernel;
    if (merged) {
      a.counters = counters.ptr;
      a.merge = DecodeMerge::kInKernel;  // both ways at every batch (the backend: kAuto)
    }
    return a;
  }
  double kv_bytes() const { return double(batch) * context * kKvHeads * kHeadDim * 2 * sizeof(__nv_bfloat16); }
};

// A CUDA graph of `iters` launches, rotating over the sets.
struct Graph {
  cudaGraphExec_t exec = nullptr;
  int iters = 0;
  Graph(const std::function<void(int)>& launch, int n, cudaStream_t stream)
      : exec(capture_graph(launch, n, stream)), iters(n) {}
  ~Graph() { cudaGraphExecDestroy(exec); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  double sample_us(cudaStream_t stream) const {  // one replay, µs per launch
    Events ev;
    STRATA_CK(cudaEventRecord(ev.start, stream));
    STRATA_CK(cudaGraphLaunch(exec, stream));
    STRATA_CK(cudaEventRecord(ev.stop, stream));
    return 1e3 * ev.ms() / iters;
  }
};

struct Row {
  int32_t batch = 0, context = 0;
  std::string kernel;
  int iters = 0;
  double us = 0, min_us = 0, max_us = 0, gbps = 0, frac_copy = 0, kv_bytes = 0;
};

int run(int argc, char** argv) {
  require_device();
  cudaDeviceProp prop{};
  STRATA_CK(cudaGetDeviceProperties(&prop, 0));
  const char* json_path = std::getenv("STRATA_BENCH_JSON");
  std::vector<int32_t> batches = {1, 8, 64, 256}, contexts = {1024, 4096};
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--batches" || arg == "--contexts" || arg == "--rounds") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--batches") batches = parse_list(value);
      else if (arg == "--contexts") contexts = parse_list(value);
      else rounds = parse_list(value).front();
    } else if (arg.rfind("--", 0) != 0 && json_path == nullptr) {
      json_path = argv[i];
    } else {
      throw CudaError("unknown or incomplete argument '" + arg +
                      "' (bench_cuda_attention [out.json] [--batches 1,8,64,256] [--contexts 1024,4096] [--rounds 3])");
    }
  }
  const char* smoke_env = std::getenv("STRATA_BENCH_SMOKE");
  const bool smoke = smoke_env != nullptr && std::string(smoke_env) == "1";
  if (smoke) {
    settings = Settings{size_t{4} << 20, size_t{1} << 20, 2, 50.0, 2};
    batches = {1, 3};
    contexts = {40, 130};
    rounds = 1;
  }
  std::printf("bench seed %llu%s\n", static_cast<unsigned long long>(bench_seed()), smoke ? " (smoke)" : "");
  cudaStream_t stream = nullptr;
  STRATA_CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy_gbps = measure_copy(stream, settings.copy_bytes, settings.samples).gbps;
  std::printf("copy: %.1f GB/s (read + written)\n", copy_gbps);

  struct Way {
    DecodeKernel kernel;
    bool merged;
    const char* name;
  };
  const Way ways[] = {{DecodeKernel::kCudaCores, false, "CUDA cores"},
                      {DecodeKernel::kTensorCores, false, "tensor cores"},
                      {DecodeKernel::kTensorCores, true, "tc, merged"}};
  std::vector<Row> rows;
  for (const int32_t context : contexts) {
    for (const int32_t batch : batches) {
      const Case c(batch, context);
      // Warm-up and the launch count: one pass over the sets per kernel.
      double estimate_us = 1.0;
      for (const Way& way : ways) {
        Events ev;
        STRATA_CK(cudaEventRecord(ev.start, stream));
        for (int s = 0; s < c.sets; ++s) decode_attention(c.args(s, way.kernel, way.merged), stream);
        STRATA_CK(cudaEventRecord(ev.stop, stream));
        estimate_us = std::max(estimate_us, 1e3 * ev.ms() / c.sets);
      }
      const int iters =
          int(std::clamp(std::ceil(settings.graph_target_us / estimate_us), 1.0, double(settings.max_graph_iters)));
      std::vector<std::unique_ptr<Graph>> graphs;
      for (const Way& way : ways) {
        graphs.push_back(std::make_unique<Graph>(
            [&](int i) { decode_attention(c.args(i, way.kernel, way.merged), stream); }, iters, stream));
        STRATA_CK(cudaGraphLaunch(graphs.back()->exec, stream));  // warm
      }
      std::vector<std::vector<double>> samples(graphs.size());
      for (int r = 0; r < rounds; ++r) {
        for (size_t k = 0; k < graphs.size(); ++k) {
          for (int s = 0; s < settings.samples; ++s) samples[k].push_back(graphs[k]->sample_us(stream));
        }
      }
      for (size_t k = 0; k < graphs.size(); ++k) {
        Row row;
        row.batch = batch;
        row.context = context;
        row.kernel = ways[k].name;
        row.iters = iters;
        row.us = median(samples[k]);
        row.min_us = *std::min_element(samples[k].begin(), samples[k].end());
        row.max_us = *std::max_element(samples[k].begin(), samples[k].end());
        row.kv_bytes = c.kv_bytes();
        row.gbps = row.kv_bytes / (row.us * 1e-6) / 1e9;
        row.frac_copy = row.gbps / copy_gbps;
        std::printf("  ctx %-5d batch %-4d %-12s %9.2f us (%.2f-%.2f)  %7.1f GB/s  %5.1f%% copy  (%d sets, %d a graph)\n",
                    context, batch, row.kernel.c_str(), row.us, row.min_us, row.max_us, row.gbps,
                    100.0 * row.frac_copy, c.sets, iters);
        rows.push_back(row);
      }
    }
  }
  STRATA_CK(cudaStreamDestroy(stream));

  if (json_path != nullptr) {
    std::ofstream out(json_path);
    out << "{\"program\":\"bench_cuda_attention\",\"device\":\"" << json_escape(prop.name)
        << "\",\"sms\":" << prop.multiProcessorCount << ",\"seed\":" << bench_seed() << ",\"copy_gbps\":" << copy_gbps
        << ",\"heads\":" << kHeads << ",\"kv_heads\":" << kKvHeads << ",\"head_dim\":" << kHeadDim
        << ",\"block_size\":" << kBlockSize << ",\"rounds\":" << rounds << ",\"rows\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << (i ? "," : "") << "{\"context\":" << r.context << ",\"batch\":" << r.batch << ",\"kernel\":\""
          << r.kernel << "\",\"us\":" << r.us << ",\"min_us\":" << r.min_us << ",\"max_us\":" << r.max_us
          << ",\"graph_iters\":" << r.iters << ",\"kv_bytes\":" << r.kv_bytes << ",\"gbps\":" << r.gbps
          << ",\"frac_copy\":" << r.frac_copy << "}";
    }
    out << "]}\n";
    std::printf("wrote %s\n", json_path);
  }

  // Last, short enough for a log tail: per context and batch, the three ways, the tensor cores'
  // speedup over the CUDA cores, and what merging in the kernel saves over the reduce kernel.
  std::printf("\n%s, %d SMs: copy %.0f GB/s; decode attention, 32 heads / 8 KV heads x 128, bf16\n", prop.name,
              prop.multiProcessorCount, copy_gbps);
  std::printf("%-6s %-6s %22s %22s %22s %8s %8s\n", "ctx", "batch", "CUDA cores", "tensor cores", "tc, merged",
              "tc/cc", "merged");
  for (size_t i = 0; i + 2 < rows.size(); i += 3) {
    const Row &a = rows[i], &b = rows[i + 1], &m = rows[i + 2];
    std::printf("%-6d %-6d %9.1fus %5.0f%% copy %9.1fus %5.0f%% copy %9.1fus %5.0f%% copy %7.2fx %+6.1fus\n", a.context,
                a.batch, a.us, 100.0 * a.frac_copy, b.us, 100.0 * b.frac_copy, m.us, 100.0 * m.frac_copy, a.us / b.us,
                m.us - b.us);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return main_reporting_errors(run, argc, argv); }
