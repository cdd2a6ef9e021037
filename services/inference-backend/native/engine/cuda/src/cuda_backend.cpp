#include "strata/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "rope.h"
#include "strata/cuda_gemm.h"
#include "strata/cuda_quant.h"
#include "strata/cuda_sampling.h"
#include "strata/gguf.h"
#include "strata/int4_weights.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "strata/model_source.h"
#include "strata/model_weights.h"
#include "strata/safetensors.h"
#include "strata/split_work.h"
#include "tensor_slots.h"

namespace strata {

namespace {

using cuda::DType;

[[noreturn]] void bad_input(const std::string& message) { throw ModelError(model_error_code::kBackendInput, message); }

std::string mib(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

void check_gemv_rows(int32_t rows) {
  if (rows < 0 || rows > cuda::kGemvMaxRows) {
    throw ModelError(model_error_code::kConfig,
                     "gemv_max_rows must be 0.." + std::to_string(cuda::kGemvMaxRows) + ", got " + std::to_string(rows));
  }
}

// The fields of CudaBackendOptions that choose a step's kernels (what set_step_kernels takes),
// as one tuple of references: compared, or assigned field by field.
template <typename Options>
auto step_kernel_fields(Options& o) {
  return std::tie(o.gemv_max_rows, o.gemv_fuse_rope, o.quant_gemv_fuse, o.programmatic_launch, o.programmatic_prefetch,
                  o.programmatic_early_trigger);
}

// The stages of a step timed by time_stages, in step order, and their names.
enum class Stage : uint8_t {
  kInputs, kEmbedding, kAttentionNorm, kQkv, kAttention, kO, kMlpNorm, kGateUp, kDown, kHead, kSampling, kToHost,
  kCount  // the step's first event: it closes no stage
};
constexpr std::array<const char*, size_t(Stage::kCount)> kStageNames = {
    "step inputs to the device", "embedding gather", "attention norm (+ residual)", "q/k/v (+ RoPE, K/V write)",
    "attention", "o projection", "MLP norm (+ residual)", "gate/up (+ SiLU)", "down projection",
    "head (final norm, lm_head)", "sampling", "logits or tokens to the host"};

// CUDA events between the stages of a step (CudaBackend::time_stages): a pool grown as needed,
// and the stage each recorded event closes.
class StageTimer {
 public:
  StageTimer() = default;
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  // Starts a step's timeline with its first event.
  void begin(cudaStream_t stream) {
    active_ = true;
    used_ = 0;
    record(stream, Stage::kCount);
  }
  void mark(cudaStream_t stream, Stage stage) {
    if (active_) record(stream, stage);
  }
  // The step failed or ran from a graph: no timeline.
  void cancel() { active_ = false; }
  // Once the stream has reached the last event: the timeline into `out`.
  void finish(CudaStepTimes& out) {
    if (!active_) return;
    active_ = false;
    std::array<CudaStageTime, size_t(Stage::kCount)> sums{};
    for (size_t i = 1; i < used_; ++i) {
      CudaStageTime& t = sums[size_t(stages_[i])];
      ++t.calls;
      t.ms += elapsed(events_[i - 1], events_[i]);
    }
    out = CudaStepTimes{};
    for (size_t s = 0; s < sums.size(); ++s) {  // the enum's order is the step's
      if (sums[s].calls == 0) continue;
      sums[s].stage = kStageNames[s];
      out.stages.push_back(sums[s]);
    }
    if (used_ > 1) out.span_ms = elapsed(events_[0], events_[used_ - 1]);
  }

 private:
  void record(cudaStream_t stream, Stage stage) {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      cuda::check(cudaEventCreate(&e), "cudaEventCreate (timing a step's stages)");
      events_.push_back(e);
      stages_.push_back(stage);
    }
    stages_[used_] = stage;
    cuda::check(cudaEventRecord(events_[used_], stream), "cudaEventRecord (timing a step's stages)");
    ++used_;
  }
  static double elapsed(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0.0f;
    cuda::check(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime (timing a step's stages)");
    return ms;
  }

  std::vector<cudaEvent_t> events_;
  std::vector<Stage> stages_;  // per event, the stage it closes
  size_t used_ = 0;
  bool active_ = false;
};

// One cudaMalloc, freed on destruction; a failure names what it was for and what is free.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(size_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes == 0) return;
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      cudaGetLastError();  // the failed allocation's error must not surface at the next launch check
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      ptr_ = nullptr;
      throw ModelError(model_error_code::kOutOfMemory, "cannot allocate " + mib(int64_t(bytes)) + " on the GPU for " +
                                                           what + " (" + mib(int64_t(free_bytes)) + " free of " +
                                                           mib(int64_t(total)) + ")");
    }
  }
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceMemory() {
    if (ptr_) cudaFree(ptr_);
  }
  template <typename T = void>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory for the step's inputs and the logits, so the copies are asynchronous.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  explicit PinnedMemory(size_t bytes) { cuda::check(cudaMallocHost(&ptr_, std::max<size_t>(bytes, 1)), "cudaMallocHost"); }
  PinnedMemory(PinnedMemory&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  ~PinnedMemory() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  template <typename T = void>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

DType checkpoint_dtype(const TensorInfo& t) {
  if (t.dtype == "F32") return DType::kF32;
  if (t.dtype == "BF16") return DType::kBF16;
  if (t.dtype == "F16") return DType::kF16;
  throw ModelError(model_error_code::kWeights, "tensor \"" + t.name + "\" in " + t.file->path().string() + " is " +
                                                   t.dtype + "; the CUDA backend reads F32, BF16 and F16");
}

// A linear layer's weight (n, k) on the device: dense rows in the backend's dtype, or a GGUF
// file's Q4_0/Q4_1/Q8_0 blocks in quant_gemm's layout (cuda_quant.h).
struct Linear {
  void* dense = nullptr;
  cuda::QuantWeight quant;  // rows > 0: it holds the weight (its data is set once the allocation exists)
  bool quantized() const { return quant.rows > 0; }
};

// How each linear weight of a layer is kept: nullopt = dense in the dtype, else quantized.
struct LayerFormats {
  std::optional<QuantType> qkv, o_proj, gate_up, down;
};

struct CudaLayer {
  void* input_norm;
  Linear qkv;      // (q_dim + 2 kv_dim, hidden): q rows, k rows, v rows
  void* qkv_bias;  // (q_dim + 2 kv_dim) or null
  Linear o_proj;   // (hidden, q_dim)
  void* o_bias;    // (hidden) or null
  void* post_norm;
  Linear gate_up;  // (2 intermediate, hidden): gate rows, then up rows
  Linear down;     // (hidden, intermediate)
};

// Weights to the device through two pinned buffers in turn: while one chunk is copied and
// converted on the device, the next is read from the host. Chunks of one tensor or many; the
// source may be freed once a call returns (its bytes are in a staging buffer by then).
class WeightUploader {
 public:
  WeightUploader(cudaStream_t stream, DType dtype, CudaLoadStats& load) : stream_(stream), dtype_(dtype), load_(load) {
    for (cudaEvent_t& e : done_) cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;
  ~WeightUploader() {
    cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : done_) cudaEventDestroy(e);
  }

  // `elems` values of `src_dtype`, converted on the device into the backend's dtype at dst.
  void convert(const void* src, DType src_dtype, int64_t elems, void* dst) {
    const size_t size = cuda::dtype_size(src_dtype), esize = cuda::dtype_size(dtype_);
    const int64_t per_chunk = int64_t(kChunk / size);
    for (int64_t first = 0; first < elems; first += per_chunk) {
      const int64_t n = std::min(per_chunk, elems - first);
      const char* from = static_cast<const char*>(src) + first * int64_t(size);
      const int s = next_slot(size_t(n) * size, [&](char* to) { copy_split(to, from, n * int64_t(size)); });
      cuda::convert(src_dtype, raw_[s].as(), dtype_, static_cast<char*>(dst) + first * int64_t(esize), n, stream_);
      record(s);
    }
  }
  // A matrix converted on the device into the backend's dtype at dst, from where its rows lie:
  // in one piece, or (a GGUF file's q and k, whose rows the file permutes) gathered row by row
  // into the staging buffer in the Hugging Face order, by threads (4 MB or more each).
  void convert(const DenseMatrixRef& m, void* dst) {
    const DType src_dtype = m.dtype == DenseMatrixRef::Dtype::kF32    ? DType::kF32
                            : m.dtype == DenseMatrixRef::Dtype::kBF16 ? DType::kBF16
                                                                      : DType::kF16;
    if (m.file_rows.empty()) {
      convert(m.data, src_dtype, m.rows * m.cols, dst);
      return;
    }
    const int64_t row_bytes = m.row_bytes(), esize = int64_t(cuda::dtype_size(dtype_));
    if (row_bytes > int64_t(kChunk)) {
      throw cuda::CudaError("a weight of " + std::to_string(m.cols) + " columns has rows larger than the " +
                            std::to_string(kChunk >> 20) + " MiB staging buffer");
    }
    const int64_t per_chunk = int64_t(kChunk) / row_bytes;
    for (int64_t first = 0; first < m.rows; first += per_chunk) {
      const int64_t n = std::min(per_chunk, m.rows - first);
      const int s = next_slot(size_t(n * row_bytes), [&](char* to) {
        split_work(n, threads_for(n * row_bytes, int64_t{1} << 22),
                   [&](int64_t a, int64_t b) { m.copy_rows(first + a, first + b, reinterpret_cast<uint8_t*>(to) + a * row_bytes); });
      });
      cuda::convert(src_dtype, raw_[s].as(), dtype_, static_cast<char*>(dst) + first * m.cols * esize, n * m.cols,
                    stream_);
      record(s);
    }
  }
  // A quantized matrix from its blocks (`parts`, as quant_repack takes them: a fused weight's,
  // in a GGUF file's mapping) into `dst`'s GPU layout: runs of 16-row tiles are repacked by host
  // threads straight into a staging buffer, and each region's run copied to its place, while
  // the run before is still being copied. No copy of the blocks before, nor of the whole
  // repacked matrix after. The repacking's time (the mapping's page faults included) counts as
  // host work (load.host_seconds).
  void repack(const cuda::QuantWeight& dst, std::span<const cuda::QuantRows> parts) {
    const cuda::QuantLayout l = cuda::quant_layout(dst.type, dst.rows, dst.cols);
    if (l.tile_bytes() > int64_t(kChunk)) {
      throw cuda::CudaError("a quantized weight of " + std::to_string(dst.cols) +
                            " columns has 16-row tiles larger than the " + std::to_string(kChunk >> 20) +
                            " MiB staging buffer");
    }
    const int64_t per_run = int64_t(kChunk) / l.tile_bytes();
    char* to = static_cast<char*>(const_cast<void*>(dst.data));
    for (int64_t first = 0; first < l.tiles; first += per_run) {
      const int64_t n = std::min(per_run, l.tiles - first);
      const int s = take_slot();
      char* quants = staging_[s].as<char>();
      char* scales = quants + n * l.tile_quant_bytes;
      char* mins = scales + n * l.tile_scale_bytes;
      const auto started = std::chrono::steady_clock::now();
      cuda::quant_repack_tiles(dst.type, parts, dst.cols, first, first + n, quants, scales, l.mins_at > 0 ? mins : nullptr);
      load_.host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const auto region = [&](const char* from, int64_t at, int64_t tile_bytes) {
        cuda::check(cudaMemcpyAsync(to + at + first * tile_bytes, from, size_t(n * tile_bytes), cudaMemcpyHostToDevice, stream_),
                    "copying weights to the GPU");
        load_.bytes += n * tile_bytes;
      };
      region(quants, 0, l.tile_quant_bytes);
      region(scales, l.scales_at, l.tile_scale_bytes);
      if (l.mins_at > 0) region(mins, l.mins_at, l.tile_scale_bytes);
      record(s);
    }
  }
  void finish() { cuda::check(cudaStreamSynchronize(stream_), "loading weights"); }

 private:
  static constexpr size_t kChunk = size_t{64} << 20;
  // The next staging slot, once the copy from its last chunk is done.
  int take_slot() {
    const int s = slot_;
    slot_ ^= 1;
    if (in_flight_[s]) cuda::check(cudaEventSynchronize(done_[s]), "waiting for a weight chunk");
    return s;
  }
  // The next slot's staging buffer filled with `n` bytes by fill(buffer) and copied to the slot's
  // device buffer, for a conversion. Out of a mapped checkpoint, the fill's page faults and
  // copying share the CPUs (copy_split).
  template <class Fill>
  int next_slot(size_t n, const Fill& fill) {
    const int s = take_slot();
    fill(staging_[s].as<char>());
    cuda::check(cudaMemcpyAsync(raw_[s].as(), staging_[s].as(), n, cudaMemcpyHostToDevice, stream_),
                "copying weights to the GPU");
    load_.bytes += int64_t(n);
    return s;
  }
  void record(int s) {
    cuda::check(cudaEventRecord(done_[s], stream_), "cudaEventRecord");
    in_flight_[s] = true;
  }

  cudaStream_t stream_;
  DType dtype_;
  CudaLoadStats& load_;
  PinnedMemory staging_[2] = {PinnedMemory(kChunk), PinnedMemory(kChunk)};
  DeviceMemory raw_[2] = {DeviceMemory(kChunk, "weight staging"), DeviceMemory(kChunk, "weight staging")};
  cudaEvent_t done_[2] = {};
  bool in_flight_[2] = {false, false};
  int slot_ = 0;
};

}  // namespace

struct CudaBackend::Impl {
  ModelConfig config;
  CudaBackendOptions options;
  DType dtype;
  size_t esize;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::Gemm> gemm;
  CudaLoadStats load;
  std::string device;
  int32_t cc_major = 0;  // compute capability: programmatic launch needs 9 (sm_90)

  int64_t hidden = 0, q_dim = 0, kv_dim = 0, qkv_dim = 0, inter = 0, vocab = 0;
  int32_t max_len = 0, max_blocks_per_seq = 0;

  DeviceMemory weight_memory;  // every weight, one allocation
  void* embed = nullptr;       // (vocab, hidden) dense, for the token gather
  void* final_norm = nullptr;
  Linear lm_head;              // embed when tied (a quantized embedding: its blocks, besides the dense table)
  std::vector<CudaLayer> layers;
  std::string weights_format;  // describe_formats()
  int64_t decode_weight_bytes = 0;  // every weight but a gather-only embedding table
  // quant_gemm's split-k partials for the quantized weights (their largest need over every
  // row count a step can have), one GEMM at a time.
  DeviceMemory quant_workspace;
  int64_t quant_workspace_floats = 0;
  // A quantized weight's values for a GEMM of at least options.quant_dense_min_rows rows:
  // room for the largest but the output projection's, or none.
  DeviceMemory dense_scratch;
  int64_t dense_scratch_elems = 0;
  DeviceMemory inv_freq;       // (head_dim / 2) fp32

  // Activations, one row per batched token (T = max_batch_tokens, S = max_seqs), in the weight
  // dtype unless noted; sized once in allocate_activations.
  DeviceMemory residual;     // (T, hidden) fp32: the residual stream stays fp32 across layers
  DeviceMemory normed;       // (T, hidden) RMSNorm output, the input of the next GEMM
  DeviceMemory qkv;          // (T, q_dim + 2 kv_dim): q, k, v side by side; rope applied in place
  DeviceMemory attn;         // (T, q_dim) attention output
  DeviceMemory gate_up;      // (T, 2 intermediate): gate, then up
  DeviceMemory act;          // (T, intermediate) silu(gate) * up
  DeviceMemory proj;         // (T, hidden) o_proj / down output, added to the residual
  DeviceMemory logits_rows;  // (S, hidden) normed rows of the tokens that need logits
  DeviceMemory logits_out;   // (S, vocab) lm_head output
  DeviceMemory logits_f32;   // (S, vocab) fp32 logits, what the sampler reads
  DeviceMemory workspace;    // fp32 split-K partials of decode attention (decode_attention_workspace_floats)
  DeviceMemory decode_counters;  // (S, kv heads) int32 for decode attention's in-kernel merge, kept 0 between steps
  // Sampling on the device (forward_sample): the rows' inputs, their pools (grown on demand),
  // and the outputs, sections of max_seqs rows: tokens, logprobs, top counts, then the top
  // ids and logprobs (kMaxSampledTop per row).
  DeviceMemory sample_rows;       // (S) SamplingRow
  DeviceMemory sample_penalties;  // (penalty entries of the step) PenaltyEntry, grown on demand
  DeviceMemory sample_stops;      // (stop ids of the step) int32, grown on demand
  DeviceMemory sample_allowed;    // (constrained rows' masks) uint32 words, grown on demand
  DeviceMemory sample_allowed_at; // (S) int32: each row's mask offset in sample_allowed, or -1
  DeviceMemory sample_out;        // sample_out_bytes(): the sections above
  PinnedMemory sample_rows_host, sample_host;  // host mirrors of sample_rows and sample_out
  // The step's integer inputs, one block uploaded with one copy (layout in step_ints_needed).
  DeviceMemory step_ints;
  PinnedMemory step_host;         // its host mirror
  PinnedMemory logits_host;       // (S, vocab) fp32, for forward() without device sampling
  size_t step_ints_capacity = 0;  // int32 elements

  DeviceMemory kv_memory;
  int32_t num_blocks = 0, block_size = 0;
  int64_t block_elems = 0;     // one block of one layer, K or V: kv heads x block_size x head_dim

  ~Impl() {
    destroy_graphs();
    if (stream) cudaStreamDestroy(stream);
  }

  void* k_cache(int32_t layer) const {
    return kv_memory.as<char>() + (int64_t{layer} * 2) * num_blocks * block_elems * int64_t(esize);
  }
  void* v_cache(int32_t layer) const {
    return kv_memory.as<char>() + (int64_t{layer} * 2 + 1) * num_blocks * block_elems * int64_t(esize);
  }
  void* row(void* base, int64_t r, int64_t width) const {
    return static_cast<char*>(base) + r * width * int64_t(esize);
  }

  Impl(const std::filesystem::path& model_dir, CudaBackendOptions opts) : options(opts), dtype(opts.dtype) {
    const ModelSource source = resolve_model_source(model_dir);
    std::optional<GgufFile> gguf;
    if (source.kind == ModelSource::Kind::kGguf) {
      gguf.emplace(GgufFile::open(source.path));
      config = gguf_model_config(*gguf);
    } else {
      config = load_model_config(model_dir);
    }
    esize = cuda::dtype_size(dtype);
    hidden = config.hidden_size;
    q_dim = int64_t{config.num_heads} * config.head_dim;
    kv_dim = int64_t{config.num_kv_heads} * config.head_dim;
    qkv_dim = q_dim + 2 * kv_dim;
    inter = config.intermediate_size;
    vocab = config.vocab_size;
    max_len = options.max_model_len > 0 ? options.max_model_len : config.max_position_embeddings;
    if (!cuda::supported_head_dim(config.head_dim)) {
      throw ModelError(model_error_code::kConfig, "head_dim " + std::to_string(config.head_dim) +
                                                      " is not one the CUDA kernels are built for (8, 16, 32, 64, 128, 256)");
    }
    if (options.max_batch_tokens <= 0 || options.max_seqs <= 0 || max_len <= 0) {
      throw ModelError(model_error_code::kConfig, "the CUDA backend needs max_batch_tokens, max_seqs and max_model_len > 0");
    }
    check_gemv_rows(options.gemv_max_rows);
    if (options.quant_dense_min_rows < 0) {
      throw ModelError(model_error_code::kConfig, "quant_dense_min_rows must be >= 0 (0: never), got " +
                                                      std::to_string(options.quant_dense_min_rows));
    }

    int count = 0;
    const cudaError_t found = cudaGetDeviceCount(&count);
    if (found != cudaSuccess || count == 0) {
      cudaGetLastError();
      throw cuda::CudaError(std::string("no CUDA device: ") +
                            (found != cudaSuccess ? cudaGetErrorString(found) : "the driver reports 0 devices"));
    }
    if (options.device < 0 || options.device >= count) {
      throw cuda::CudaError("CUDA device " + std::to_string(options.device) + " does not exist (" +
                            std::to_string(count) + " devices)");
    }
    cuda::check(cudaSetDevice(options.device), "cudaSetDevice");
    cudaDeviceProp prop{};
    cuda::check(cudaGetDeviceProperties(&prop, options.device), "cudaGetDeviceProperties");
    device = prop.name;
    cc_major = prop.major;
    cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    gemm = std::make_unique<cuda::Gemm>();

    const auto started = std::chrono::steady_clock::now();
    if (gguf) load_gguf(*gguf);
    else if (!config.quantization.method.empty()) load_int4(model_dir);
    else load_weights(model_dir);
    load.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    Rope rope(config);  // inv_freq exactly as the CPU backend computes it
    inv_freq = DeviceMemory(sizeof(float) * rope.inv_freq().size(), "RoPE frequencies");
    cuda::check(cudaMemcpy(inv_freq.as(), rope.inv_freq().data(), inv_freq.bytes(), cudaMemcpyHostToDevice),
                "copying RoPE frequencies");
    allocate_activations();
    // The sampler keeps a row in its blocks' shared memory: one block's on GPUs before sm_90,
    // which holds about 55k entries. A larger vocabulary there samples on the CPU.
    sample_on_device = options.sample_on_device;
    if (sample_on_device) {
      try {
        cuda::sampling_launch(1, int32_t(vocab));
      } catch (const cuda::CudaError& e) {
        sample_on_device = false;
        sampling_note = e.what();
      }
    }
  }

  bool sample_on_device = false;
  std::string sampling_note;  // why sampling runs on the CPU although options asked for the GPU

  // Lays every weight out in one device allocation (q/k/v and gate/up fused by rows), checks
  // each checkpoint tensor against the config, then streams them to the device.
  void load_weights(const std::filesystem::path& model_dir) {
    SafetensorsArchive archive = SafetensorsArchive::open_model_dir(model_dir);
    lay_out_weights(std::vector<LayerFormats>(size_t(config.num_layers)), std::nullopt);
    weights_format = describe_formats();
    const std::vector<WeightTarget> targets = weight_targets();
    stream_weights(targets, checked_sources(archive, targets));
  }

  // Where a load's quantized matrices come from: a GGUF file's mapping (blocks where they lie)
  // or an AWQ/GPTQ checkpoint (blocks converted when asked for, int4_weights.h).
  struct BlockSource {
    std::unordered_map<std::string, QuantType> types;  // every quantized matrix, by name
    std::function<bool(const std::string&)> keepable;  // its blocks can go to the device as they are
    // The blocks of `name` (in `holder` when converted), valid until done(name).
    std::function<GgufBlocks(const std::string&, QuantMatrix& holder)> blocks;
    std::function<std::vector<float>(const std::string&)> dequantized;  // fp32, the features' own order
    std::function<void(const std::string&)> done;  // read: pages let go, bytes counted
    std::function<void(const GgufTensor&)> release_float;  // idem, a GGUF file's float matrix
  };

  // A GGUF file: its tensors through the CPU loader's mapping (names, shapes and the q/k row
  // order of llama.cpp undone, map_gguf_weights): the norms and biases read, the matrices taken
  // from the file's mapping on their way to the device.
  void load_gguf(const GgufFile& file) {
    const auto read_started = std::chrono::steady_clock::now();
    options.progress.start(gguf_tensor_bytes(file));
    GgufWeights mapped = map_gguf_weights(file, config, options.progress);  // the matrices stay in the file
    load.read_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - read_started).count();
    BlockSource src;
    for (const auto& [name, b] : mapped.blocks) src.types.emplace(name, b.type);
    src.keepable = [](const std::string&) { return true; };
    src.blocks = [&](const std::string& name, QuantMatrix&) { return mapped.blocks.at(name); };
    src.dequantized = [&](const std::string& name) { return dequantize(copy_blocks(mapped.blocks.at(name))); };
    src.done = [&](const std::string& name) {
      const GgufTensor& t = *mapped.blocks.at(name).tensor;
      options.progress.add(int64_t(t.nbytes));
      file.release(t);
    };
    src.release_float = [&](const GgufTensor& t) {
      options.progress.add(int64_t(t.nbytes));
      file.release(t);
    };
    load_quantized(mapped.dense, mapped.matrices, src);
    load.bytes = 0;  // the file's bytes, not the bytes staged (blocks dequantized to fp32)
    for (const GgufTensor& t : file.tensors()) load.bytes += int64_t(t.nbytes);
  }

  // A 4-bit AWQ or GPTQ checkpoint: each quantized weight converted to blocks on the host on
  // its way to the device (so the host holds one weight's blocks at a time), the float matrices
  // (embedding, lm_head, modules left out) converted from the mapping. An act-order weight
  // (GPTQ desc_act) is dequantized into the dtype instead: the device GEMMs have no input
  // gather yet.
  void load_int4(const std::filesystem::path& model_dir) {
    const auto read_started = std::chrono::steady_clock::now();
    const SafetensorsArchive archive = SafetensorsArchive::open_model_dir(model_dir);
    Int4Checkpoint checkpoint(archive, config, options.progress);
    load.read_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - read_started).count();
    BlockSource src;
    for (const std::string& name : checkpoint.quantized_names()) src.types.emplace(name, checkpoint.block_type());
    src.keepable = [&](const std::string& name) { return checkpoint.input_order(name).empty(); };
    src.blocks = [&](const std::string& name, QuantMatrix& holder) {
      holder = checkpoint.blocks(name);
      GgufBlocks b;
      b.type = holder.type;
      b.rows = holder.rows;
      b.cols = holder.cols;
      b.data = holder.data.data();
      return b;
    };
    src.dequantized = [&](const std::string& name) { return checkpoint.dequantize(name); };
    src.done = [](const std::string&) {};  // blocks() and dequantize() let the pages go
    load_quantized(checkpoint.mapped().dense, checkpoint.mapped().matrices, src);
    weights_format = checkpoint.description() + ": " + weights_format;
    load.bytes = 0;
    for (const TensorInfo& t : archive.tensors()) load.bytes += int64_t(t.nbytes);
  }

  // The weights from a mapping with quantized matrices: F32/F16/BF16 ones staged as they are
  // (q and k gathered into the Hugging Face row order) and converted on the device, quantized
  // ones repacked. A fused weight (q/k/v, gate/up) whose parts are all blocks of one type stays
  // quantized, as does o_proj, down and the output projection (the tied embedding's blocks too);
  // the embedding table for the gather is dense. In fp32, and for a fused weight whose parts
  // differ, the blocks are dequantized exactly on the host and converted to the dtype.
  void load_quantized(ModelWeights& w, const std::unordered_map<std::string, DenseMatrixRef>& matrices, const BlockSource& src) {
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const bool keep_blocks = dtype != DType::kF32;
    const auto format = [&](std::initializer_list<std::string> names) -> std::optional<QuantType> {
      std::optional<QuantType> type;
      for (const std::string& name : names) {
        const auto it = src.types.find(name);
        if (!keep_blocks || it == src.types.end() || !src.keepable(name) || (type && *type != it->second)) return std::nullopt;
        type = it->second;
      }
      return type;
    };
    std::vector<LayerFormats> formats(size_t(config.num_layers));
    for (int32_t i = 0; i < config.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      formats[i].qkv = format({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
      formats[i].o_proj = format({p + "self_attn.o_proj.weight"});
      formats[i].gate_up = format({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
      formats[i].down = format({p + "mlp.down_proj.weight"});
    }
    const std::string head_name = config.tie_word_embeddings ? kEmbedName : kLmHeadName;
    lay_out_weights(formats, format({head_name}));
    weights_format = describe_formats();
    std::vector<std::string> widened;  // types the file has that no weight keeps on the device
    for (const auto& [name, type] : src.types) {
      (void)name;
      const std::string t = quant_type_name(type);
      if (weights_format.find(t) == std::string::npos && std::find(widened.begin(), widened.end(), t) == widened.end())
        widened.push_back(t);
    }
    std::sort(widened.begin(), widened.end());
    for (size_t i = 0; i < widened.size(); ++i)
      weights_format += (i == 0 ? " (" : ", ") + widened[i] + (i + 1 == widened.size() ? " dequantized)" : "");

    WeightUploader up(stream, dtype, load);
    const auto floats = [&](const std::vector<float>& v, void* dst) {
      if (!v.empty()) up.convert(v.data(), DType::kF32, int64_t(v.size()), dst);
    };
    // fn() timed as host work (load.host_seconds).
    const auto on_host = [&](auto&& fn) {
      const auto started = Clock::now();
      auto result = fn();
      load.host_seconds += seconds_since(started);
      return result;
    };
    // A float matrix has been converted: counted in the load's progress, its pages let go.
    const auto dense_done = [&](const DenseMatrixRef& m) {
      if (const TensorInfo* t = m.tensor; t != nullptr) {
        options.progress.add(int64_t(t->nbytes));
        t->file->release(t->data, t->nbytes);
      }
      if (const GgufTensor* t = m.gguf_tensor; t != nullptr) src.release_float(*t);
    };
    // Quantized blocks in the GPU layout at `dst`: the row blocks of `names`, in order (a fused
    // weight's parts), repacked on their way to the device; the source lets them go after.
    const auto blocks_to = [&](const cuda::QuantWeight& dst, const std::vector<std::string>& names) {
      std::vector<QuantMatrix> holders(names.size());
      std::vector<GgufBlocks> blocks;
      std::vector<cuda::QuantRows> parts;
      for (size_t i = 0; i < names.size(); ++i) blocks.push_back(on_host([&] { return src.blocks(names[i], holders[i]); }));
      for (const GgufBlocks& b : blocks) parts.push_back({b.data, b.rows, b.file_rows.empty() ? nullptr : b.file_rows.data()});
      up.repack(dst, parts);
      for (const std::string& name : names) src.done(name);
    };
    // The matrix `name` dense in the dtype at `dst`: a float matrix converted on the device from
    // where it lies, blocks dequantized on the host. Returns the bytes written.
    const auto dense_to = [&](const std::string& name, void* dst) -> int64_t {
      if (const auto it = matrices.find(name); it != matrices.end()) {
        up.convert(it->second, dst);
        dense_done(it->second);
        return it->second.rows * it->second.cols * int64_t(esize);
      }
      const std::vector<float> values = on_host([&] { return src.dequantized(name); });
      up.convert(values.data(), DType::kF32, int64_t(values.size()), dst);
      src.done(name);
      return int64_t(values.size()) * int64_t(esize);
    };
    // A linear weight from its parts (row blocks in order): their blocks repacked, or their
    // values one after another.
    const auto linear = [&](const Linear& dst, const std::vector<std::string>& names) {
      if (dst.quantized()) {
        blocks_to(dst.quant, names);
        return;
      }
      char* at = static_cast<char*>(dst.dense);
      for (const std::string& name : names) at += dense_to(name, at);
    };
    // The embedding table for the gather, dense in the dtype. Its blocks, when the file has it
    // quantized and the dtype keeps blocks, go to the device as they are and are dequantized
    // there (the same values: d·q (+ m) in fp32 rounded once, as dequantize then convert); a
    // tied output projection kept quantized already holds them. Else, blocks (fp32) are
    // dequantized on the host, a float table converted on the device.
    DeviceMemory embed_blocks;  // until up.finish(): the dequantizing kernel reads it
    if (lm_head.quantized() || lm_head.dense != embed) linear(lm_head, {head_name});
    if (const auto it = src.types.find(kEmbedName); keep_blocks && it != src.types.end() && src.keepable(kEmbedName)) {
      cuda::QuantWeight table{it->second, int32_t(vocab), int32_t(hidden), nullptr};
      if (lm_head.quantized() && head_name == kEmbedName) {
        table.data = lm_head.quant.data;
      } else {
        embed_blocks = DeviceMemory(size_t(cuda::quant_gpu_bytes(table.type, table.rows, table.cols)),
                                    "the embedding table's blocks");
        table.data = embed_blocks.as();
        blocks_to(table, {kEmbedName});
      }
      cuda::quant_dequantize(table, dtype, embed, stream);
    } else {
      dense_to(kEmbedName, embed);
    }
    floats(w.final_norm, final_norm);
    for (int32_t i = 0; i < config.num_layers; ++i) {
      const CudaLayer& l = layers[i];
      LayerWeights& lw = w.layers[i];
      const std::string p = "model.layers." + std::to_string(i) + ".";
      floats(lw.input_norm, l.input_norm);
      linear(l.qkv, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
      if (l.qkv_bias) {
        floats(lw.q_bias, l.qkv_bias);
        floats(lw.k_bias, row(l.qkv_bias, q_dim, 1));
        floats(lw.v_bias, row(l.qkv_bias, q_dim + kv_dim, 1));
      }
      linear(l.o_proj, {p + "self_attn.o_proj.weight"});
      if (l.o_bias) floats(lw.o_bias, l.o_bias);
      floats(lw.post_attention_norm, l.post_norm);
      linear(l.gate_up, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
      linear(l.down, {p + "mlp.down_proj.weight"});
      lw = LayerWeights();  // the layer's norms and biases
    }
    up.finish();
  }

  // The quantized types kept on the device and the dtype of the rest (named as the engine's
  // dtype setting names it), e.g. "Q4_1 + bfloat16".
  std::string describe_formats() const {
    std::vector<std::string> types;
    for (const Linear* l : linears(true)) {
      if (!l->quantized()) continue;
      const std::string t = quant_type_name(l->quant.type);
      if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    }
    std::sort(types.begin(), types.end());
    std::string out;
    for (const std::string& t : types) out += t + " + ";
    return out + (dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32");
  }

  // Every layer's linear weights, then the output projection when `head`.
  std::vector<const Linear*> linears(bool head) const {
    std::vector<const Linear*> all;
    for (const CudaLayer& l : layers) all.insert(all.end(), {&l.qkv, &l.o_proj, &l.gate_up, &l.down});
    if (head) all.push_back(&lm_head);
    return all;
  }

  // A checkpoint tensor's place on the device: a whole weight, or a row range of a fused one.
  struct WeightTarget {
    std::string name;
    void* dst;
  };

  // Every weight in one device allocation, each 256-byte aligned; `formats` says which linear
  // weights are quantized (GGUF), `head` the output projection's (tied: besides the embedding).
  void lay_out_weights(const std::vector<LayerFormats>& formats, std::optional<QuantType> head) {
    const bool own_head = !config.tie_word_embeddings || head.has_value();
    const int64_t norm = hidden, bias_q = config.attention_bias ? qkv_dim : 0;
    const int64_t bias_o = has_o_proj_bias(config) ? hidden : 0;
    char* base = nullptr;
    size_t at = 0;
    const auto take_bytes = [&](int64_t bytes) -> void* {
      void* p = base == nullptr ? nullptr : base + at;
      at += (size_t(bytes) + 255) / 256 * 256;
      return p;
    };
    const auto take = [&](int64_t elems) { return take_bytes(elems * int64_t(esize)); };
    const auto linear = [&](std::optional<QuantType> type, int64_t rows, int64_t cols) {
      Linear l;
      if (type) l.quant = {*type, int32_t(rows), int32_t(cols), take_bytes(cuda::quant_gpu_bytes(*type, rows, cols))};
      else l.dense = take(rows * cols);
      return l;
    };
    // Twice: sizes first (base null), then the addresses in the allocation.
    for (int pass = 0; pass < 2; ++pass) {
      at = 0;
      embed = take(vocab * hidden);
      lm_head = own_head ? linear(head, vocab, hidden) : Linear{embed, {}};
      final_norm = take(norm);
      layers.assign(size_t(config.num_layers), CudaLayer{});
      for (int32_t i = 0; i < config.num_layers; ++i) {
        CudaLayer& l = layers[i];
        const LayerFormats& f = formats[i];
        l.input_norm = take(norm);
        l.qkv = linear(f.qkv, qkv_dim, hidden);
        l.qkv_bias = bias_q ? take(bias_q) : nullptr;
        l.o_proj = linear(f.o_proj, hidden, q_dim);
        l.o_bias = bias_o ? take(bias_o) : nullptr;
        l.post_norm = take(norm);
        l.gate_up = linear(f.gate_up, 2 * inter, hidden);
        l.down = linear(f.down, hidden, inter);
      }
      if (pass == 0) {
        weight_memory = DeviceMemory(at, "the model's weights (" + describe_formats() + ")");
        base = weight_memory.as<char>();
      }
    }
    decode_weight_bytes = int64_t(at) - (own_head ? (vocab * hidden * int64_t(esize) + 255) / 256 * 256 : 0);
    size_quant_workspace();
  }

  // quant_gemm's split-k workspace: the most any quantized weight asks for at any row count.
  void size_quant_workspace() {
    std::vector<std::pair<int32_t, int32_t>> shapes;
    for (const Linear* l : linears(true)) {
      const std::pair shape(l->quant.rows, l->quant.cols);
      if (l->quantized() && std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    }
    int64_t most = 0;
    for (const auto& [n, k] : shapes)
      most = std::max(most, cuda::quant_gemm_workspace_floats_up_to(options.max_batch_tokens, n, k));
    quant_workspace_floats = most;
    quant_workspace = DeviceMemory(size_t(most) * sizeof(float), "the quantized GEMMs' split-k workspace");
    if (options.quant_dense_min_rows > 0 && options.max_batch_tokens >= options.quant_dense_min_rows) {
      int64_t largest = 0;
      for (const Linear* w : linears(false))
        if (w->quantized()) largest = std::max(largest, int64_t{w->quant.rows} * w->quant.cols);
      if (largest > 0) {
        dense_scratch = DeviceMemory(size_t(largest) * esize, "the dequantized weight of a large GEMM");
        dense_scratch_elems = largest;
      }
    }
  }

  std::vector<WeightTarget> weight_targets() const {
    std::vector<WeightTarget> targets;
    targets.push_back(WeightTarget{kEmbedName, embed});
    if (!config.tie_word_embeddings) targets.push_back(WeightTarget{kLmHeadName, lm_head.dense});
    targets.push_back(WeightTarget{"model.norm.weight", final_norm});
    for (int32_t i = 0; i < config.num_layers; ++i) {
      const CudaLayer& l = layers[i];
      const std::string p = "model.layers." + std::to_string(i) + ".";
      targets.push_back(WeightTarget{p + "input_layernorm.weight", l.input_norm});
      targets.push_back(WeightTarget{p + "self_attn.q_proj.weight", l.qkv.dense});
      targets.push_back(WeightTarget{p + "self_attn.k_proj.weight", row(l.qkv.dense, q_dim, hidden)});
      targets.push_back(WeightTarget{p + "self_attn.v_proj.weight", row(l.qkv.dense, q_dim + kv_dim, hidden)});
      if (l.qkv_bias) {
        targets.push_back(WeightTarget{p + "self_attn.q_proj.bias", l.qkv_bias});
        targets.push_back(WeightTarget{p + "self_attn.k_proj.bias", row(l.qkv_bias, q_dim, 1)});
        targets.push_back(WeightTarget{p + "self_attn.v_proj.bias", row(l.qkv_bias, q_dim + kv_dim, 1)});
      }
      targets.push_back(WeightTarget{p + "self_attn.o_proj.weight", l.o_proj.dense});
      if (l.o_bias) targets.push_back(WeightTarget{p + "self_attn.o_proj.bias", l.o_bias});
      targets.push_back(WeightTarget{p + "post_attention_layernorm.weight", l.post_norm});
      targets.push_back(WeightTarget{p + "mlp.gate_proj.weight", l.gate_up.dense});
      targets.push_back(WeightTarget{p + "mlp.up_proj.weight", row(l.gate_up.dense, inter, hidden)});
      targets.push_back(WeightTarget{p + "mlp.down_proj.weight", l.down.dense});
    }
    return targets;
  }

  // The archive's tensor for each target, its shape and dtype checked against the config.
  std::vector<const TensorInfo*> checked_sources(const SafetensorsArchive& archive,
                                                 const std::vector<WeightTarget>& targets) const {
    const bool has_embed = archive.find(kEmbedName) != nullptr, has_head = archive.find(kLmHeadName) != nullptr;
    // Shapes from the one list of a config's tensors (tensor_slots), so they match the CPU loader's.
    std::vector<const TensorInfo*> sources;
    const std::vector<TensorSlot> slots = tensor_slots(config, nullptr);
    for (const WeightTarget& target : targets) {
      const std::string& name = target.name;
      std::string source = name;
      if (name == kEmbedName && config.tie_word_embeddings && !has_embed && has_head) source = kLmHeadName;
      const TensorInfo* t = archive.find(source);
      if (t == nullptr) {
        throw ModelError(model_error_code::kWeights, "tensor \"" + source + "\" is missing from " + archive.description());
      }
      const auto slot = std::find_if(slots.begin(), slots.end(), [&](const TensorSlot& s) { return s.name == name; });
      if (slot == slots.end() || t->shape != slot->shape) {
        std::string want, got;
        if (slot != slots.end())
          for (int64_t d : slot->shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
        for (int64_t d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
        throw ModelError(model_error_code::kWeights, "tensor \"" + source + "\" has shape [" + got + "], the config needs [" +
                                                         want + "]");
      }
      checkpoint_dtype(*t);  // throws for a dtype it cannot convert
      sources.push_back(t);
    }
    return sources;
  }

  void stream_weights(const std::vector<WeightTarget>& targets, const std::vector<const TensorInfo*>& sources) {
    WeightUploader up(stream, dtype, load);
    int64_t bytes = 0;
    for (const TensorInfo* t : sources) bytes += int64_t(t->nbytes);
    options.progress.start(bytes);
    for (size_t i = 0; i < sources.size(); ++i) {
      const TensorInfo& t = *sources[i];
      int64_t elems = 1;
      for (int64_t d : t.shape) elems *= d;
      up.convert(t.data, checkpoint_dtype(t), elems, targets[i].dst);
      options.progress.add(int64_t(t.nbytes));
    }
    up.finish();
  }

  void allocate_activations() {
    const int64_t T = options.max_batch_tokens, S = options.max_seqs;
    const auto buf = [&](int64_t elems, const char* what) { return DeviceMemory(size_t(elems) * esize, what); };
    residual = DeviceMemory(size_t(T * hidden) * sizeof(float), "the residual stream");
    normed = buf(T * hidden, "normed activations");
    qkv = buf(T * qkv_dim, "q/k/v activations");
    attn = buf(T * q_dim, "attention output");
    gate_up = buf(T * 2 * inter, "gate/up activations");
    act = buf(T * inter, "MLP activations");
    proj = buf(T * hidden, "projection output");
    logits_rows = buf(S * hidden, "normed rows for the logits");
    logits_out = buf(S * vocab, "logits");
    logits_f32 = DeviceMemory(size_t(S * vocab) * sizeof(float), "fp32 logits");
    logits_host = PinnedMemory(size_t(S * vocab) * sizeof(float));
    sample_rows = DeviceMemory(size_t(S) * sizeof(SamplingRow), "the sampling rows");
    sample_out = DeviceMemory(sample_out_bytes(), "the sampled tokens");
    sample_host = PinnedMemory(sample_out_bytes());
    sample_rows_host = PinnedMemory(size_t(S) * sizeof(SamplingRow));
    workspace = DeviceMemory(
        size_t(cuda::decode_attention_workspace_floats(int32_t(S), config.num_heads, config.head_dim, max_len)) *
            sizeof(float),
        "the decode attention workspace");
    decode_counters = DeviceMemory(size_t(S) * config.num_kv_heads * sizeof(int32_t), "decode attention's counters");
    cuda::check(cudaMemset(decode_counters.as(), 0, decode_counters.bytes()), "zeroing decode attention's counters");
    max_blocks_per_seq = max_len;  // block_size is at least 1: sized again in allocate_kv
    reserve_step_ints(1);
  }

  size_t sample_out_bytes() const { return size_t(options.max_seqs) * (3 + 2 * kMaxSampledTop) * 4; }
  // The sampler's outputs laid out in sample_out (device) and sample_host (pinned) alike.
  struct SampleSections {
    int32_t* tokens;
    float* logprobs;
    int32_t* counts;
    int32_t* top_ids;
    float* top_logprobs;
  };
  SampleSections sample_sections(void* base) const {
    const size_t S = size_t(options.max_seqs);
    auto* tokens = static_cast<int32_t*>(base);
    auto* logprobs = reinterpret_cast<float*>(tokens + S);
    auto* counts = reinterpret_cast<int32_t*>(logprobs + S);
    auto* top_ids = counts + S;
    return {tokens, logprobs, counts, top_ids, reinterpret_cast<float*>(top_ids + S * kMaxSampledTop)};
  }

  // Step inputs: tokens, positions, slots (T each), logit rows (S), decode context lengths (S),
  // prefill query starts (S + 1) and start positions (S), then the block tables (S x stride).
  size_t step_ints_needed(int64_t table_elems) const {
    const int64_t T = options.max_batch_tokens, S = options.max_seqs;
    return size_t(3 * T + 4 * S + 1 + table_elems);
  }
  void reserve_step_ints(int64_t table_elems) {
    const size_t need = step_ints_needed(table_elems);
    if (need <= step_ints_capacity) return;
    step_ints = DeviceMemory(need * sizeof(int32_t), "the step's inputs");
    step_host = PinnedMemory(need * sizeof(int32_t));
    step_ints_capacity = need;
  }

  void allocate(int32_t blocks, int32_t size) {
    cuda::check(cudaSetDevice(options.device), "cudaSetDevice");  // the current device is per thread
    if (blocks <= 0 || size <= 0) {
      bad_input("allocate_kv needs positive num_blocks and block_size, got " + std::to_string(blocks) + " and " +
                std::to_string(size));
    }
    destroy_graphs();  // they point into the old pool
    kv_memory = DeviceMemory();
    block_elems = kv_dim * size;
    const int64_t bytes = int64_t{2} * config.num_layers * blocks * block_elems * int64_t(esize);
    kv_memory = DeviceMemory(size_t(bytes), "a KV pool of " + std::to_string(blocks) + " blocks");
    num_blocks = blocks;
    block_size = size;
    max_blocks_per_seq = (max_len + size - 1) / size;
    reserve_step_ints(int64_t{options.max_seqs} * max_blocks_per_seq);
    capture_graphs();
  }

  // Whether a dense GEMM of m rows runs on the GEMV kernel (options.gemv_max_rows) rather than cuBLAS.
  bool on_gemv(const void* x, int64_t x_stride, const Linear& w, int64_t m, int64_t n, int64_t k) const {
    return !w.quantized() && dtype != cuda::DType::kF32 && m <= options.gemv_max_rows &&
           cuda::gemv_refusal(dtype, x, x_stride, w.dense, int32_t(m), int32_t(n), int32_t(k)).empty();
  }

  // How a step of `tokens` rows runs a projection and the kernel after it: in one launch on the
  // dense GEMV (gemv_qkv_rope, gemv_swiglu), in one on quant_gemm's GEMV (quant_gemm_qkv_rope,
  // quant_gemm_swiglu), or apart (the GEMM, then rope_write_kv or silu_mul).
  enum class FusedPath { kGemv, kQuant, kApart };

  // RoPE and the K/V cache write of layer l for a step of `tokens` rows (device step integers).
  cuda::RopeKvArgs rope_args(int32_t l, int32_t tokens, const int32_t* positions, const int32_t* slots) {
    cuda::RopeKvArgs rope;
    rope.dtype = dtype;
    rope.q = qkv.as();
    rope.q_stride = qkv_dim;
    rope.k = static_cast<char*>(qkv.as()) + q_dim * int64_t(esize);
    rope.k_stride = qkv_dim;
    rope.v = static_cast<char*>(qkv.as()) + (q_dim + kv_dim) * int64_t(esize);
    rope.v_stride = qkv_dim;
    rope.positions = positions;
    rope.slots = slots;
    rope.inv_freq = inv_freq.as<float>();
    rope.k_cache = k_cache(l);
    rope.v_cache = v_cache(l);
    rope.n_tokens = tokens;
    rope.num_heads = config.num_heads;
    rope.num_kv_heads = config.num_kv_heads;
    rope.head_dim = config.head_dim;
    rope.block_size = block_size;
    return rope;
  }

  cuda::QuantGemmArgs qkv_args(const CudaLayer& w, int32_t tokens) {
    return quant_args(normed.as(), hidden, w.qkv, qkv.as(), qkv_dim, tokens, w.qkv_bias);
  }

  // The dense GEMV with no bias (options.gemv_fuse_rope), or quant_gemm's GEMV with or without.
  FusedPath qkv_path(const CudaLayer& w, int32_t tokens, const cuda::RopeKvArgs& rope) {
    if (options.gemv_fuse_rope && !w.qkv_bias && on_gemv(normed.as(), hidden, w.qkv, tokens, qkv_dim, hidden))
      return FusedPath::kGemv;
    if (quant_fused(w.qkv, tokens) && cuda::quant_qkv_rope_refusal(rope, qkv_args(w, tokens)).empty())
      return FusedPath::kQuant;
    return FusedPath::kApart;
  }

  cuda::QuantGemmArgs gate_up_args(const Linear& gate_up_w, int32_t tokens) {
    return quant_args(normed.as(), hidden, gate_up_w, act.as(), inter, tokens, nullptr);
  }

  FusedPath gate_up_path(const Linear& gate_up_w, int32_t tokens) {
    if (on_gemv(normed.as(), hidden, gate_up_w, tokens, inter, hidden)) return FusedPath::kGemv;
    if (quant_fused(gate_up_w, tokens) && cuda::quant_swiglu_refusal(gate_up_args(gate_up_w, tokens)).empty())
      return FusedPath::kQuant;
    return FusedPath::kApart;
  }

  // act = silu(x · gateᵀ) * (x · upᵀ).
  void gate_up_act(const Linear& gate_up_w, int32_t tokens) {
    switch (gate_up_path(gate_up_w, tokens)) {
      case FusedPath::kGemv:
        cuda::gemv_swiglu(dtype, normed.as(), hidden, gate_up_w.dense, act.as(), inter, tokens, int32_t(inter),
                          int32_t(hidden), stream);
        return;
      case FusedPath::kQuant:
        cuda::quant_gemm_swiglu(gate_up_args(gate_up_w, tokens), stream);
        return;
      case FusedPath::kApart:
        gemm_rows(normed.as(), hidden, gate_up_w, gate_up.as(), 2 * inter, tokens, 2 * inter, hidden, nullptr);
        cuda::silu_mul(dtype, gate_up.as(), act.as(), tokens, int32_t(inter), stream);
        return;
    }
  }

  // Whether a GEMM of m rows on w runs on quant_gemm's GEMV kernel with the next kernel's work in
  // it (options.quant_gemv_fuse): a quantized weight that gemm_rows would run on quant_gemm.
  bool quant_fused(const Linear& w, int64_t m) const {
    return w.quantized() && !dequantized(w, m) && options.quant_gemv_fuse && m <= cuda::kQuantGemvMaxM;
  }

  // A quantized weight of a large GEMM: its values into the scratch, then cuBLAS as for a dense one.
  bool dequantized(const Linear& w, int64_t m) const {
    return w.quantized() && options.quant_dense_min_rows > 0 && m >= options.quant_dense_min_rows &&
           int64_t{w.quant.rows} * w.quant.cols <= dense_scratch_elems;
  }

  // The kernel gemm_rows runs for m rows of x on w.
  enum class GemmKernel { kQuant, kDequantized, kGemv, kCublas };
  GemmKernel gemm_kernel(const void* x, int64_t x_stride, const Linear& w, int64_t m, int64_t n, int64_t k) const {
    if (w.quantized()) return dequantized(w, m) ? GemmKernel::kDequantized : GemmKernel::kQuant;
    return on_gemv(x, x_stride, w, m, n, k) ? GemmKernel::kGemv : GemmKernel::kCublas;
  }

  cuda::QuantGemmArgs quant_args(const void* x, int64_t x_stride, const Linear& w, void* y, int64_t y_stride, int64_t m,
                                 const void* bias) const {
    cuda::QuantGemmArgs a;
    a.dtype = dtype;
    a.x = x;
    a.x_stride = x_stride;
    a.w = w.quant;
    a.y = y;
    a.y_stride = y_stride;
    a.bias = bias;
    a.m = int32_t(m);
    a.workspace = quant_workspace.as<float>();
    a.workspace_floats = quant_workspace_floats;
    return a;
  }

  void gemm_rows(const void* x, int64_t x_stride, const Linear& w, void* y, int64_t y_stride, int64_t m, int64_t n,
                 int64_t k, const void* bias) {
    switch (gemm_kernel(x, x_stride, w, m, n, k)) {
      case GemmKernel::kQuant:
        cuda::quant_gemm(quant_args(x, x_stride, w, y, y_stride, m, bias), stream);
        return;  // the bias in the epilogue
      case GemmKernel::kDequantized:
        cuda::quant_dequantize(w.quant, dtype, dense_scratch.as(), stream);
        gemm->matmul(dtype, x, x_stride, dense_scratch.as(), y, y_stride, int32_t(m), int32_t(n), int32_t(k), stream);
        break;
      case GemmKernel::kGemv:
        cuda::gemv(dtype, x, x_stride, w.dense, y, y_stride, int32_t(m), int32_t(n), int32_t(k), stream);
        break;
      case GemmKernel::kCublas:
        gemm->matmul(dtype, x, x_stride, w.dense, y, y_stride, int32_t(m), int32_t(n), int32_t(k), stream);
        break;
    }
    if (bias) cuda::add_bias(dtype, y, y_stride, bias, int32_t(m), int32_t(n), stream);
  }

  // What one step launches: the sizes every kernel of enqueue() is given.
  struct StepShape {
    int32_t tokens = 0, n_decode = 0, n_prefill = 0, table_stride = 1;
    int32_t max_decode_context = 0, max_query = 0, n_logits = 0;
    size_t ints = 0;  // step integers to upload (the layout of step_ints_needed)
  };

  // Pointers into the step's integers, host or device (layout of step_ints_needed).
  struct StepInts {
    int32_t *tokens, *positions, *slots, *logit_rows, *context_lens, *query_start, *start_pos, *tables;
  };
  StepInts ints_at(int32_t* base) const {
    const int64_t T = options.max_batch_tokens, S = options.max_seqs;
    StepInts v;
    v.tokens = base;
    v.positions = base + T;
    v.slots = base + 2 * T;
    v.logit_rows = base + 3 * T;
    v.context_lens = v.logit_rows + S;
    v.query_start = v.context_lens + S;
    v.start_pos = v.query_start + S + 1;
    v.tables = v.start_pos + S;
    return v;
  }
  size_t ints_for(int32_t table_rows, int32_t table_stride) const {
    return step_ints_needed(int64_t{table_rows} * table_stride);
  }

  // Checks the batch and writes its integers into the pinned step buffer, decode slices first
  // (decode attention reads contiguous rows; every other kernel works row by row, so the order
  // is free). fixed_stride > 0 lays the block tables out at that stride (a CUDA graph's).
  StepShape plan(const StepBatch& batch, bool has_output, int32_t fixed_stride, std::vector<int32_t>& row_of_logit) {
    if (num_blocks == 0) bad_input("forward called before allocate_kv");
    const int64_t n_slices = int64_t(batch.seqs.size());
    if (n_slices > options.max_seqs) {
      bad_input("batch has " + std::to_string(n_slices) + " sequences; the CUDA backend was sized for " +
                std::to_string(options.max_seqs));
    }
    StepShape shape;
    std::vector<int32_t> order;
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t s = 0; s < n_slices; ++s)
        if ((batch.seqs[s].n_tokens == 1) == (pass == 0)) order.push_back(int32_t(s));
      if (pass == 0) shape.n_decode = int32_t(order.size());
    }
    int64_t tokens = 0;
    for (int64_t s = 0; s < n_slices; ++s) {
      const SeqSlice& seq = batch.seqs[s];
      const std::string where = "batch slice " + std::to_string(s);
      if (seq.n_tokens <= 0 || seq.tokens == nullptr) bad_input(where + ": no tokens");
      const int64_t end = int64_t{seq.start_pos} + seq.n_tokens;
      if (seq.start_pos < 0 || end > max_len) {
        bad_input(where + ": positions [" + std::to_string(seq.start_pos) + ", " + std::to_string(end) +
                  ") are outside the backend's max_model_len " + std::to_string(max_len));
      }
      const int64_t blocks_needed = (end + block_size - 1) / block_size;
      if (seq.block_table == nullptr || seq.n_blocks < blocks_needed) {
        bad_input(where + ": block table has " + std::to_string(seq.n_blocks) + " blocks, positions [0, " +
                  std::to_string(end) + ") need " + std::to_string(blocks_needed));
      }
      for (int64_t b = 0; b < blocks_needed; ++b) {
        if (seq.block_table[b] < 0 || seq.block_table[b] >= num_blocks) {
          bad_input(where + ": block id " + std::to_string(seq.block_table[b]) + " is outside the KV pool (" +
                    std::to_string(num_blocks) + " blocks)");
        }
      }
      for (int32_t t = 0; t < seq.n_tokens; ++t) {
        if (seq.tokens[t] < 0 || seq.tokens[t] >= vocab) {
          bad_input(where + ": token id " + std::to_string(seq.tokens[t]) + " is outside the vocabulary (" +
                    std::to_string(vocab) + ")");
        }
      }
      tokens += seq.n_tokens;
      shape.table_stride = std::max<int32_t>(shape.table_stride, int32_t(blocks_needed));
      if (seq.n_tokens == 1) shape.max_decode_context = std::max<int32_t>(shape.max_decode_context, int32_t(end));
      else shape.max_query = std::max(shape.max_query, seq.n_tokens);
    }
    if (tokens > options.max_batch_tokens) {
      bad_input("batch has " + std::to_string(tokens) + " tokens; the CUDA backend was sized for " +
                std::to_string(options.max_batch_tokens));
    }
    if (fixed_stride > 0) shape.table_stride = fixed_stride;
    shape.tokens = int32_t(tokens);

    const StepInts h = ints_at(step_host.as<int32_t>());
    std::vector<int32_t> row_of_slice(n_slices);  // device row of each slice's last token
    int32_t r = 0;
    h.query_start[0] = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const SeqSlice& seq = batch.seqs[order[i]];
      const size_t blocks = size_t((seq.start_pos + seq.n_tokens + block_size - 1) / block_size);
      std::memcpy(h.tables + int64_t(i) * shape.table_stride, seq.block_table, sizeof(int32_t) * blocks);
      for (int32_t t = 0; t < seq.n_tokens; ++t, ++r) {
        const int32_t pos = seq.start_pos + t;
        h.tokens[r] = seq.tokens[t];
        h.positions[r] = pos;
        h.slots[r] = seq.block_table[pos / block_size] * block_size + pos % block_size;
      }
      row_of_slice[order[i]] = r - 1;
      if (int32_t(i) < shape.n_decode) {
        h.context_lens[i] = seq.start_pos + 1;
      } else {
        h.start_pos[shape.n_prefill] = seq.start_pos;
        h.query_start[shape.n_prefill + 1] = h.query_start[shape.n_prefill] + seq.n_tokens;
        ++shape.n_prefill;
      }
    }
    row_of_logit.clear();
    for (int64_t s = 0; s < n_slices; ++s) {
      if (!batch.seqs[s].want_logits) continue;
      h.logit_rows[shape.n_logits++] = row_of_slice[s];
      row_of_logit.push_back(row_of_slice[s]);
    }
    if (shape.n_logits > 0 && !has_output) bad_input("logits are wanted but the output pointer is null");
    shape.ints = ints_for(int32_t(order.size()), shape.table_stride);
    return shape;
  }

  // Every device operation of one step, in stream order: upload the step's integers, run the
  // layers, leave the wanted rows' fp32 logits in device_logits(). Nothing here allocates or
  // synchronises, so the same call records a CUDA graph under capture.
  void enqueue(const StepShape& shape) {
    const cuda::ProgrammaticLaunch programmatic(options.programmatic_launch && cc_major >= 9,
                                                options.programmatic_prefetch, options.programmatic_early_trigger);
    int32_t* d = step_ints.as<int32_t>();
    cuda::check(cudaMemcpyAsync(d, step_host.as(), shape.ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
                "copying the step's inputs");
    timer.mark(stream, Stage::kInputs);
    const StepInts dv = ints_at(d);
    const int32_t* prefill_tables = dv.tables + int64_t(shape.n_decode) * shape.table_stride;
    const int32_t tokens = shape.tokens, n_decode = shape.n_decode;

    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config.head_dim)));
    float* res = residual.as<float>();
    cuda::embedding_gather(dtype, embed, dv.tokens, tokens, int32_t(hidden), res, stream);
    timer.mark(stream, Stage::kEmbedding);
    for (int32_t l = 0; l < config.num_layers; ++l) {
      const CudaLayer& w = layers[l];
      // The previous layer's MLP output joins the residual stream here, fused with this norm.
      cuda::add_rms_norm(dtype, res, l == 0 ? nullptr : proj.as(), w.input_norm, normed.as(), tokens, int32_t(hidden),
                         config.rms_norm_eps, stream);
      timer.mark(stream, Stage::kAttentionNorm);
      const cuda::RopeKvArgs rope = rope_args(l, tokens, dv.positions, dv.slots);
      switch (qkv_path(w, tokens, rope)) {
        case FusedPath::kGemv:
          cuda::gemv_qkv_rope(rope, normed.as(), hidden, w.qkv.dense, int32_t(hidden), stream);
          break;
        case FusedPath::kQuant:
          cuda::quant_gemm_qkv_rope(rope, qkv_args(w, tokens), stream);
          break;
        case FusedPath::kApart:
          gemm_rows(normed.as(), hidden, w.qkv, qkv.as(), qkv_dim, tokens, qkv_dim, hidden, w.qkv_bias);
          cuda::rope_write_kv(rope, stream);
          break;
      }
      timer.mark(stream, Stage::kQkv);

      // Decode rows come first, then the prefill slices' rows, each with its own block tables.
      cuda::PagedAttentionArgs paged;
      paged.dtype = dtype;
      paged.q = qkv.as();
      paged.q_stride = qkv_dim;
      paged.out = attn.as();
      paged.out_stride = q_dim;
      paged.k_cache = k_cache(l);
      paged.v_cache = v_cache(l);
      paged.block_tables = dv.tables;
      paged.block_table_stride = shape.table_stride;
      paged.num_heads = config.num_heads;
      paged.num_kv_heads = config.num_kv_heads;
      paged.head_dim = config.head_dim;
      paged.block_size = block_size;
      paged.scale = scale;
      if (n_decode > 0) {
        cuda::DecodeAttentionArgs a;
        static_cast<cuda::PagedAttentionArgs&>(a) = paged;
        a.context_lens = dv.context_lens;
        a.n_seqs = n_decode;
        a.max_context = shape.max_decode_context;
        a.workspace = workspace.as<float>();
        // The tensor-core kernel merges its own partitions while the batch is small enough
        // (DecodeMerge::kAuto, decode_attention's policy).
        a.counters = decode_counters.as<int32_t>();
        cuda::decode_attention(a, stream);
      }
      if (shape.n_prefill > 0) {
        cuda::PrefillAttentionArgs a;
        static_cast<cuda::PagedAttentionArgs&>(a) = paged;
        a.q = row(qkv.as(), n_decode, qkv_dim);
        a.out = row(attn.as(), n_decode, q_dim);
        a.block_tables = prefill_tables;
        a.query_start = dv.query_start;
        a.start_pos = dv.start_pos;
        a.n_slices = shape.n_prefill;
        a.max_query_len = shape.max_query;
        cuda::prefill_attention(a, stream);
      }
      timer.mark(stream, Stage::kAttention);
      gemm_rows(attn.as(), q_dim, w.o_proj, proj.as(), hidden, tokens, hidden, q_dim, w.o_bias);
      timer.mark(stream, Stage::kO);
      cuda::add_rms_norm(dtype, res, proj.as(), w.post_norm, normed.as(), tokens, int32_t(hidden), config.rms_norm_eps,
                         stream);
      timer.mark(stream, Stage::kMlpNorm);
      gate_up_act(w.gate_up, tokens);
      timer.mark(stream, Stage::kGateUp);
      gemm_rows(act.as(), inter, w.down, proj.as(), hidden, tokens, hidden, inter, nullptr);
      timer.mark(stream, Stage::kDown);
    }

    if (shape.n_logits == 0) return;
    cuda::add_rms_norm(dtype, res, proj.as(), final_norm, normed.as(), tokens, int32_t(hidden), config.rms_norm_eps,
                       stream);
    cuda::gather_rows(dtype, normed.as(), hidden, dv.logit_rows, shape.n_logits, int32_t(hidden), logits_rows.as(),
                      stream);
    gemm_rows(logits_rows.as(), hidden, lm_head, logits_out.as(), vocab, shape.n_logits, vocab, hidden, nullptr);
    if (dtype != DType::kF32) {
      cuda::convert(dtype, logits_out.as(), DType::kF32, logits_f32.as(), int64_t{shape.n_logits} * vocab, stream);
    }
    timer.mark(stream, Stage::kHead);
  }

  const float* device_logits() const { return (dtype == DType::kF32 ? logits_out : logits_f32).as<float>(); }

  // ---- CUDA graphs for decode ------------------------------------------------------------
  // One graph per batch size in graph_sizes, captured once the KV pool exists. A decode-only
  // step of n <= the largest size replays the smallest graph that holds it: the rows past n
  // are padding (slot -1 writes no KV, context 0 attends to nothing), the block tables sit at
  // the fixed stride max_blocks_per_seq, and decode attention's grid covers max_model_len.
  std::vector<int32_t> graph_sizes;
  std::vector<cudaGraphExec_t> graphs;
  std::vector<int32_t> row_of_logit;  // per wanted slice, its device row (logits_host row order)

  void destroy_graphs() {
    for (cudaGraphExec_t g : graphs)
      if (g) cudaGraphExecDestroy(g);
    graphs.clear();
    graph_sizes.clear();
  }

  // Padding for rows [from, rows) of a graph step: nothing reaches the cache or attends.
  void pad_decode_rows(int32_t from, int32_t rows, int32_t n_logits) {
    const StepInts h = ints_at(step_host.as<int32_t>());
    for (int32_t r = from; r < rows; ++r) {
      h.tokens[r] = 0;
      h.positions[r] = 0;
      h.slots[r] = -1;
      h.context_lens[r] = 0;
    }
    for (int32_t i = n_logits; i < rows; ++i) h.logit_rows[i] = i;
  }

  StepShape graph_shape(int32_t rows) const {
    StepShape shape;
    shape.tokens = shape.n_decode = shape.n_logits = rows;
    shape.table_stride = max_blocks_per_seq;
    shape.max_decode_context = max_len;
    shape.ints = ints_for(rows, max_blocks_per_seq);
    return shape;
  }

  void capture_graphs() {
    destroy_graphs();
    timer.cancel();  // no stage events inside a capture
    if (!options.cuda_graphs) return;
    const int32_t largest = std::min({options.max_graph_batch, options.max_seqs, options.max_batch_tokens});
    for (int32_t rows = 1; rows <= largest; rows *= 2) graph_sizes.push_back(rows);
    if (graph_sizes.back() != largest) graph_sizes.push_back(largest);  // a full batch needs no padding
    for (int32_t rows : graph_sizes) {
      pad_decode_rows(0, rows, 0);
      const StepShape shape = graph_shape(rows);
      enqueue(shape);  // once eagerly: cuBLAS picks its algorithms and loads its kernels outside the capture
      cuda::check(cudaStreamSynchronize(stream), "warming a decode graph's shapes");
      cudaGraph_t graph = nullptr;
      cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      try {
        enqueue(shape);
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      cuda::check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
      cudaGraphExec_t exec = nullptr;
      const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      cuda::check(made, "cudaGraphInstantiate");
      graphs.push_back(exec);
    }
  }

  // Plans the step and queues its forward pass (a graph replay or eager launches) without
  // waiting for it. Returns the shape; shape.n_logits rows of device_logits() will hold the
  // wanted rows' logits, in batch order.
  StepShape launch_forward(const StepBatch& batch, bool has_output) {
    // The engine loop's thread is not the one that loaded the model; the device is per thread.
    cuda::check(cudaSetDevice(options.device), "cudaSetDevice");
    timer.cancel();  // a step that failed before its end left its timeline unfinished
    // A decode-only step that a graph holds replays it (unless its stages are timed); anything
    // else runs eagerly.
    int32_t graph = -1;
    if (!graphs.empty() && !batch.seqs.empty() && !time_steps) {
      bool decode_only = true;
      for (const SeqSlice& seq : batch.seqs) decode_only = decode_only && seq.n_tokens == 1;
      for (size_t g = 0; decode_only && g < graph_sizes.size() && graph < 0; ++g)
        if (graph_sizes[g] >= int32_t(batch.seqs.size())) graph = int32_t(g);
    }
    const StepShape shape = plan(batch, has_output, graph >= 0 ? max_blocks_per_seq : 0, row_of_logit);
    if (shape.tokens == 0) return shape;
    if (graph >= 0) {
      pad_decode_rows(shape.tokens, graph_sizes[graph], shape.n_logits);
      cuda::check(cudaGraphLaunch(graphs[graph], stream), "cudaGraphLaunch");
      ++graph_steps;
    } else {
      if (time_steps) timer.begin(stream);
      enqueue(shape);
      ++eager_steps;
    }
    return shape;
  }

  void forward(const StepBatch& batch, float* logits) {
    const StepShape shape = launch_forward(batch, logits != nullptr);
    const size_t bytes = size_t(shape.n_logits) * vocab * sizeof(float);
    if (bytes > 0) {
      cuda::check(cudaMemcpyAsync(logits_host.as(), device_logits(), bytes, cudaMemcpyDeviceToHost, stream),
                  "copying logits to the host");
      timer.mark(stream, Stage::kToHost);
    }
    cuda::check(cudaStreamSynchronize(stream), "running the forward pass");
    timer.finish(step_times);
    if (bytes > 0) std::memcpy(logits, logits_host.as(), bytes);
  }

  // Grows a device pool to hold `bytes` (doubling, so a step rarely allocates).
  static void reserve(DeviceMemory& pool, size_t bytes, const char* what) {
    if (pool.bytes() >= bytes) return;
    pool = DeviceMemory(std::max(bytes, pool.bytes() * 2), what);
  }

  // The sampling rows and their pools (penalty entries, stop ids, constraint masks) to the device,
  // queued on the stream.
  void upload_sampling_inputs(const SamplingBatch& sampling, int32_t n) {
    const auto n_pen = int64_t(sampling.penalty_entries.size()), n_stop = int64_t(sampling.stop_ids.size());
    const size_t words = (size_t(vocab) + 31) / 32;
    if (!sampling.allowed_offset.empty()) {
      if (int64_t(sampling.allowed_offset.size()) != n) {
        bad_input("forward_sample: " + std::to_string(sampling.allowed_offset.size()) + " mask offsets for " +
                  std::to_string(n) + " rows");
      }
      for (int32_t at : sampling.allowed_offset) {
        if (at >= 0 && size_t(at) + words > sampling.allowed.size()) {
          bad_input("forward_sample: a row's constraint mask lies outside its pool");
        }
      }
    }
    cuda::check(cudaSetDevice(options.device), "cudaSetDevice");
    std::memcpy(sample_rows_host.as(), sampling.rows.data(), size_t(n) * sizeof(SamplingRow));
    cuda::check(cudaMemcpyAsync(sample_rows.as(), sample_rows_host.as(), size_t(n) * sizeof(SamplingRow),
                                cudaMemcpyHostToDevice, stream),
                "copying the sampling rows");
    if (n_pen > 0) {
      reserve(sample_penalties, size_t(n_pen) * sizeof(PenaltyEntry), "penalty entries");
      cuda::check(cudaMemcpyAsync(sample_penalties.as(), sampling.penalty_entries.data(),
                                  size_t(n_pen) * sizeof(PenaltyEntry), cudaMemcpyHostToDevice, stream),
                  "copying penalty entries");
    }
    if (n_stop > 0) {
      reserve(sample_stops, size_t(n_stop) * sizeof(int32_t), "stop ids");
      cuda::check(cudaMemcpyAsync(sample_stops.as(), sampling.stop_ids.data(), size_t(n_stop) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream),
                  "copying stop ids");
    }
    if (!sampling.allowed_offset.empty()) {
      reserve(sample_allowed, std::max<size_t>(sampling.allowed.size(), 1) * sizeof(uint32_t), "constraint masks");
      reserve(sample_allowed_at, size_t(n) * sizeof(int32_t), "constraint mask offsets");
      // Pageable sources: the copies are staged, so the vectors may change once these return.
      if (!sampling.allowed.empty()) {
        cuda::check(cudaMemcpyAsync(sample_allowed.as(), sampling.allowed.data(), sampling.allowed.size() * 4,
                                    cudaMemcpyHostToDevice, stream),
                    "copying constraint masks");
      }
      cuda::check(cudaMemcpyAsync(sample_allowed_at.as(), sampling.allowed_offset.data(), size_t(n) * 4,
                                  cudaMemcpyHostToDevice, stream),
                  "copying constraint mask offsets");
    }
  }

  void forward_sample(const StepBatch& batch, const SamplingBatch& sampling, SampledBatch& out) {
    // The sampling inputs do not depend on the forward: checked and (unless masks are awaited)
    // queued first, so their copies run ahead of it rather than behind it.
    int32_t n = 0;
    for (const SeqSlice& slice : batch.seqs) n += slice.want_logits ? 1 : 0;
    if (int32_t(sampling.rows.size()) != n) {
      bad_input("forward_sample: " + std::to_string(sampling.rows.size()) + " sampling rows for " +
                std::to_string(n) + " slices wanting logits");
    }
    if (n > options.max_seqs) {
      bad_input("forward_sample: " + std::to_string(n) + " rows; the CUDA backend was sized for " +
                std::to_string(options.max_seqs) + " sequences");
    }
    const auto n_pen = int64_t(sampling.penalty_entries.size()), n_stop = int64_t(sampling.stop_ids.size());
    bool top = false;
    for (const SamplingRow& r : sampling.rows) {
      if (r.penalty_offset < 0 || r.penalty_count < 0 || int64_t{r.penalty_offset} + r.penalty_count > n_pen ||
          r.stop_offset < 0 || r.stop_count < 0 || int64_t{r.stop_offset} + r.stop_count > n_stop) {
        bad_input("forward_sample: a sampling row's penalty or stop range lies outside its pool");
      }
      top = top || r.logprobs > 0;
    }
    // The inputs go ahead of the forward on the stream, unless constrained rows' masks are still
    // being computed: then the forward is queued first and runs while await_masks() waits.
    const bool deferred = static_cast<bool>(sampling.await_masks);
    if (n > 0 && !deferred) upload_sampling_inputs(sampling, n);
    launch_forward(batch, true);
    if (n > 0 && deferred) {
      sampling.await_masks();
      upload_sampling_inputs(sampling, n);
    }
    out.rows.assign(size_t(n), SampledRow{});
    out.top_ids.assign(size_t(n) * kMaxSampledTop, -1);
    out.top_logprobs.assign(size_t(n) * kMaxSampledTop, 0.0f);
    if (n == 0) {
      cuda::check(cudaStreamSynchronize(stream), "running the forward pass");
      timer.finish(step_times);
      return;
    }
    const SampleSections dev = sample_sections(sample_out.as()), host = sample_sections(sample_host.as());
    cuda::SamplingArgs a;
    a.logits = device_logits();
    a.n_seqs = n;
    a.vocab = int32_t(vocab);
    a.params = sample_rows.as<SamplingRow>();
    a.penalty_entries = n_pen > 0 ? sample_penalties.as<PenaltyEntry>() : nullptr;
    a.stop_ids = n_stop > 0 ? sample_stops.as<int32_t>() : nullptr;
    if (!sampling.allowed_offset.empty()) {
      a.allowed = sample_allowed.as<uint32_t>();
      a.allowed_offset = sample_allowed_at.as<int32_t>();
    }
    a.tokens = dev.tokens;
    a.logprobs = dev.logprobs;
    if (top) {
      a.top_ids = dev.top_ids;
      a.top_logprobs = dev.top_logprobs;
      a.top_counts = dev.counts;
    }
    cuda::sample(a, stream);
    timer.mark(stream, Stage::kSampling);
    // The sections' first n rows, into the same layout in pinned memory.
    const auto fetch = [&](void* dst, const void* src, size_t bytes) {
      cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "copying sampled tokens");
    };
    fetch(host.tokens, dev.tokens, size_t(n) * 4);
    fetch(host.logprobs, dev.logprobs, size_t(n) * 4);
    if (top) {
      fetch(host.counts, dev.counts, size_t(n) * 4);
      fetch(host.top_ids, dev.top_ids, size_t(n) * kMaxSampledTop * 4);
      fetch(host.top_logprobs, dev.top_logprobs, size_t(n) * kMaxSampledTop * 4);
    }
    timer.mark(stream, Stage::kToHost);
    cuda::check(cudaStreamSynchronize(stream), "running the forward pass and sampling");
    timer.finish(step_times);
    for (int32_t i = 0; i < n; ++i) {
      SampledRow& r = out.rows[size_t(i)];
      r.token = host.tokens[i];
      r.logprob = host.logprobs[i];
      r.top_count = top && sampling.rows[size_t(i)].logprobs > 0 ? host.counts[i] : 0;
    }
    if (top) {
      std::memcpy(out.top_ids.data(), host.top_ids, size_t(n) * kMaxSampledTop * 4);
      std::memcpy(out.top_logprobs.data(), host.top_logprobs, size_t(n) * kMaxSampledTop * 4);
    }
  }

  int64_t graph_steps = 0, eager_steps = 0;
  // time_stages: events between the stages of every step while on, and the last step's times.
  bool time_steps = false;
  StageTimer timer;
  CudaStepTimes step_times;
};

CudaBackend::CudaBackend(const std::filesystem::path& model_dir, CudaBackendOptions options)
    : impl_(std::make_unique<Impl>(model_dir, options)) {}

CudaBackend::~CudaBackend() = default;

const ModelConfig& CudaBackend::config() const { return impl_->config; }

int64_t CudaBackend::kv_bytes_per_block(int32_t block_size) const {
  return int64_t{2} * impl_->config.num_layers * impl_->kv_dim * block_size * int64_t(impl_->esize);
}

void CudaBackend::allocate_kv(int32_t num_blocks, int32_t block_size) { impl_->allocate(num_blocks, block_size); }

void CudaBackend::forward(const StepBatch& batch, float* logits) { impl_->forward(batch, logits); }

bool CudaBackend::samples_on_device() const { return impl_->sample_on_device; }

const std::string& CudaBackend::sampling_note() const { return impl_->sampling_note; }

void CudaBackend::forward_sample(const StepBatch& batch, const SamplingBatch& sampling, SampledBatch& out) {
  impl_->forward_sample(batch, sampling, out);
}

void CudaBackend::copy_block(int32_t src, int32_t dst) {
  Impl& m = *impl_;
  if (m.num_blocks == 0) bad_input("copy_block called before allocate_kv");
  if (src < 0 || src >= m.num_blocks || dst < 0 || dst >= m.num_blocks) {
    bad_input("copy_block(" + std::to_string(src) + ", " + std::to_string(dst) + "): block id outside the KV pool (" +
              std::to_string(m.num_blocks) + " blocks)");
  }
  cuda::check(cudaSetDevice(m.options.device), "cudaSetDevice");
  int32_t* d = m.step_ints.as<int32_t>();
  const int32_t pair[2] = {src, dst};
  cuda::check(cudaMemcpyAsync(d, pair, sizeof(pair), cudaMemcpyHostToDevice, m.stream), "copying block ids");
  for (int32_t l = 0; l < m.config.num_layers; ++l)
    cuda::copy_blocks(m.dtype, m.k_cache(l), m.v_cache(l), d, d + 1, 1, m.block_elems, m.stream);
  cuda::check(cudaStreamSynchronize(m.stream), "copying a KV block");
}

int32_t CudaBackend::profile_kv_blocks(int32_t block_size, double utilization) {
  Impl& m = *impl_;
  if (block_size <= 0 || !(utilization > 0.0 && utilization <= 1.0)) {
    throw ModelError(model_error_code::kConfig, "profile_kv_blocks needs block_size > 0 and utilization in (0, 1]");
  }
  // The largest GEMMs of a step, so cuBLAS has picked its algorithms and made its allocations.
  const int64_t T = m.options.max_batch_tokens;
  const CudaLayer& w = m.layers.front();
  m.gemm_rows(m.normed.as(), m.hidden, w.qkv, m.qkv.as(), m.qkv_dim, T, m.qkv_dim, m.hidden, nullptr);
  m.gemm_rows(m.attn.as(), m.q_dim, w.o_proj, m.proj.as(), m.hidden, T, m.hidden, m.q_dim, nullptr);
  m.gemm_rows(m.normed.as(), m.hidden, w.gate_up, m.gate_up.as(), 2 * m.inter, T, 2 * m.inter, m.hidden, nullptr);
  m.gemm_rows(m.act.as(), m.inter, w.down, m.proj.as(), m.hidden, T, m.hidden, m.inter, nullptr);
  m.gemm_rows(m.logits_rows.as(), m.hidden, m.lm_head, m.logits_out.as(), m.vocab, m.options.max_seqs, m.vocab,
              m.hidden, nullptr);
  cuda::check(cudaStreamSynchronize(m.stream), "profiling the largest GEMMs");
  size_t free_bytes = 0, total = 0;
  cuda::check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  const int64_t used = int64_t(total - free_bytes) - int64_t(m.kv_memory.bytes());
  const int64_t budget = int64_t(double(total) * utilization) - used;
  const int64_t per_block = kv_bytes_per_block(block_size);
  if (budget < per_block) {
    throw ModelError(model_error_code::kOutOfMemory,
                     "no GPU memory left for the KV cache: weights " + mib(int64_t(m.weight_memory.bytes())) +
                         ", activations and cuBLAS " + mib(used - int64_t(m.weight_memory.bytes())) + " of " +
                         mib(int64_t(total)) + " at utilization " + std::to_string(utilization) +
                         " (lower max_batch_tokens or max_seqs, or raise the utilization)");
  }
  return int32_t(std::min<int64_t>(budget / per_block, INT32_MAX));
}

const CudaLoadStats& CudaBackend::load_stats() const { return impl_->load; }

const std::string& CudaBackend::weights_format() const { return impl_->weights_format; }

int64_t CudaBackend::decode_weight_bytes() const { return impl_->decode_weight_bytes; }

int64_t CudaBackend::graph_steps() const { return impl_->graph_steps; }

int64_t CudaBackend::eager_steps() const { return impl_->eager_steps; }

std::string CudaBackend::device_name() const { return impl_->device; }

cuda::DType CudaBackend::dtype() const { return impl_->dtype; }

std::string CudaBackend::decode_kernels(int32_t batch) {
  Impl& m = *impl_;
  if (batch < 1 || batch > m.options.max_batch_tokens) {
    bad_input("decode_kernels: batch " + std::to_string(batch) + " outside 1.." +
              std::to_string(m.options.max_batch_tokens));
  }
  const CudaLayer& w = m.layers[0];
  const auto gemm = [&](const Linear& lin, int64_t n, int64_t k) -> std::string {
    switch (m.gemm_kernel(m.normed.as(), k, lin, batch, n, k)) {
      case Impl::GemmKernel::kQuant: return "quant_gemm";
      case Impl::GemmKernel::kDequantized: return "cuBLAS on dequantized";
      case Impl::GemmKernel::kGemv: return "gemv";
      case Impl::GemmKernel::kCublas: break;
    }
    return "cuBLAS";
  };
  const auto name = [](Impl::FusedPath path, const char* gemv, const char* quant, const std::string& apart) {
    return path == Impl::FusedPath::kGemv ? std::string(gemv) : path == Impl::FusedPath::kQuant ? quant : apart;
  };
  const cuda::RopeKvArgs rope = m.rope_args(0, batch, nullptr, nullptr);
  return "q/k/v " + name(m.qkv_path(w, batch, rope), "gemv_qkv_rope", "quant_gemm_qkv_rope",
                         gemm(w.qkv, m.qkv_dim, m.hidden) + " + rope_write_kv") +
         ", gate/up " + name(m.gate_up_path(w.gate_up, batch), "gemv_swiglu", "quant_gemm_swiglu",
                             gemm(w.gate_up, 2 * m.inter, m.hidden) + " + silu_mul");
}

const CudaBackendOptions& CudaBackend::options() const { return impl_->options; }

void CudaBackend::time_stages(bool on) { impl_->time_steps = on; }

const CudaStepTimes& CudaBackend::stage_times() const { return impl_->step_times; }

void CudaBackend::set_step_kernels(const CudaBackendOptions& step) {
  Impl& m = *impl_;
  check_gemv_rows(step.gemv_max_rows);
  if (step_kernel_fields(m.options) == step_kernel_fields(step)) return;  // the captured graphs are these kernels'
  cuda::check(cudaSetDevice(m.options.device), "cudaSetDevice");
  step_kernel_fields(m.options) = step_kernel_fields(step);
  if (m.num_blocks > 0) {
    m.destroy_graphs();
    m.capture_graphs();
  }
}

}  // namespace strata
