#include "strata/engine_runner.h"

#if defined(__linux__)
#include <pthread.h>
#endif

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>

#include "strata/coded_error.h"
#include "strata/cpu_backend.h"
#include "strata/errors.h"
#include "strata/model_config.h"
#ifdef STRATA_WITH_CUDA
#include "strata/cuda_backend.h"
#endif

namespace strata {

int64_t useful_kv_blocks(const EngineConfig& engine, int32_t model_max_len) {
  const int64_t max_len = engine.max_model_len > 0 ? engine.max_model_len : model_max_len;
  const int64_t bs = engine.block_size;
  return int64_t{engine.max_num_seqs} * ((max_len + bs - 1) / bs);
}

int32_t kv_pool_blocks(const EngineConfig& engine, int32_t model_max_len, int64_t affordable) {
  if (engine.num_blocks > 0) return engine.num_blocks;
  return static_cast<int32_t>(std::min<int64_t>(
      {useful_kv_blocks(engine, model_max_len), std::max<int64_t>(affordable, 0), std::numeric_limits<int32_t>::max()}));
}

int64_t mem_available_bytes(const std::string& meminfo) {
  std::ifstream in(meminfo);
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

uint64_t tenant_salt(const std::string& tenant) {
  if (tenant.empty()) return 0;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : tenant) h = (h ^ c) * 1099511628211ull;
  return h;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point started) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

std::unique_ptr<ModelBackend> load_cpu(const RunnerOptions& o, RunnerInfo& info, int64_t& affordable) {
  CpuBackendOptions backend_options{o.num_threads};
  backend_options.progress = o.progress;
  if (o.kv_cache_dtype == "auto") backend_options.kv_dtype = CpuKvDtype::kAuto;
  else if (o.kv_cache_dtype == "float32") backend_options.kv_dtype = CpuKvDtype::kFloat32;
  else if (o.kv_cache_dtype == "float16") backend_options.kv_dtype = CpuKvDtype::kFloat16;
  else {
    throw CodedError("STRATA_INVALID_CONFIG",
                     "kvCacheDtype must be auto, float32 or float16 on the cpu backend, got \"" + o.kv_cache_dtype + "\"");
  }
  if (o.cpu_weights_dtype == "float32") backend_options.weights_dtype = CpuWeightsDtype::kFloat32;
  else if (o.cpu_weights_dtype != "auto") {
    throw CodedError("STRATA_INVALID_CONFIG",
                     "cpuWeightsDtype must be auto or float32, got \"" + o.cpu_weights_dtype + "\"");
  }
  if (!o.cpu_kernels.empty() && o.cpu_kernels != "auto" && o.cpu_kernels != "amx" && o.cpu_kernels != "avx2" &&
      o.cpu_kernels != "portable") {
    throw CodedError("STRATA_INVALID_CONFIG", "cpuKernels must be auto, amx, avx2 or portable, got \"" + o.cpu_kernels + "\"");
  }
  backend_options.kernels = o.cpu_kernels;
  std::unique_ptr<CpuBackend> cpu =
      o.model_dir.empty()
          ? std::make_unique<CpuBackend>(preset_model_config(o.dummy_preset), o.dummy_seed, backend_options)
          : std::make_unique<CpuBackend>(o.model_dir, backend_options);
  info.backend_name = "cpu";
  info.kernel_isa = cpu->kernel_isa();
  info.weights = cpu->weights_format();
  info.kv_cache_dtype = cpu->kv_cache_dtype();
  info.num_threads = cpu->num_threads();
  info.kv_bytes_per_block = cpu->kv_bytes_per_block(o.engine.block_size);
  if (o.engine.num_blocks <= 0) {
    const double budget = o.kv_cache_bytes > 0 ? static_cast<double>(o.kv_cache_bytes)
                                               : static_cast<double>(mem_available_bytes()) * o.kv_memory_fraction;
    affordable = static_cast<int64_t>(budget / static_cast<double>(info.kv_bytes_per_block));
  }
  return cpu;
}

// The CUDA backend: the budget is what the profiling pass leaves of gpu_memory_utilization x
// the device's memory.
std::unique_ptr<ModelBackend> load_cuda(const RunnerOptions& o, RunnerInfo& info, int64_t& affordable) {
#ifdef STRATA_WITH_CUDA
  if (o.model_dir.empty()) {
    throw CodedError("STRATA_INVALID_CONFIG", "the cuda backend loads a model directory; dummy presets run on \"cpu\"");
  }
  CudaBackendOptions options;
  if (o.dtype == "bfloat16") options.dtype = cuda::DType::kBF16;
  else if (o.dtype == "float16") options.dtype = cuda::DType::kF16;
  else if (o.dtype == "float32") options.dtype = cuda::DType::kF32;
  else throw CodedError("STRATA_INVALID_CONFIG", "dtype must be bfloat16, float16 or float32, got \"" + o.dtype + "\"");
  if (o.kv_cache_dtype != "auto" && o.kv_cache_dtype != o.dtype) {
    throw CodedError("STRATA_INVALID_CONFIG", "the cuda backend keeps its KV cache in its dtype (" + o.dtype +
                                                  "): kvCacheDtype must be auto or " + o.dtype + ", got \"" +
                                                  o.kv_cache_dtype + "\"");
  }
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0)) {
    throw CodedError("STRATA_INVALID_CONFIG",
                     "gpuMemoryUtilization must be in (0, 1], got " + std::to_string(o.gpu_memory_utilization));
  }
  options.max_batch_tokens = o.engine.max_num_batched_tokens;
  options.max_seqs = o.engine.max_num_seqs;
  options.max_model_len = o.engine.max_model_len;
  options.cuda_graphs = o.cuda_graphs;
  options.sample_on_device = o.gpu_sampling;
  options.progress = o.progress;
  auto gpu = std::make_unique<CudaBackend>(o.model_dir, options);
  info.backend_name = "cuda";
  info.kernel_isa = "cuda";
  info.device = gpu->device_name();
  info.dtype = o.dtype;
  info.weights = gpu->weights_format();
  info.kv_cache_dtype = o.dtype;
  info.load_gb_per_s = gpu->load_stats().gb_per_s();
  info.sampling = gpu->samples_on_device() ? "gpu" : "cpu";
  info.sampling_note = gpu->sampling_note();
  info.decode_kernels = gpu->decode_kernels(1);
  info.kv_bytes_per_block = gpu->kv_bytes_per_block(o.engine.block_size);
  if (o.engine.num_blocks <= 0) affordable = gpu->profile_kv_blocks(o.engine.block_size, o.gpu_memory_utilization);
  return gpu;
#else
  (void)o, (void)info, (void)affordable;
  throw CodedError("STRATA_INVALID_CONFIG",
                   "backend \"cuda\" is not in this build: build the addon with STRATA_CUDA_HOME set to a CUDA "
                   "toolkit; use backend \"cpu\"");
#endif
}

}  // namespace

std::unique_ptr<EngineRunner> EngineRunner::load(const RunnerOptions& options) {
  if (options.backend != "cpu" && options.backend != "cuda") {
    throw CodedError("STRATA_INVALID_CONFIG", "backend must be \"cpu\" or \"cuda\", got \"" + options.backend + "\"");
  }
  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<EngineRunner> runner(new EngineRunner());
  int64_t affordable = 0;
  runner->backend_ = options.backend == "cuda" ? load_cuda(options, runner->info_, affordable)
                                               : load_cpu(options, runner->info_, affordable);
  EngineConfig config = options.engine;
  config.num_blocks = kv_pool_blocks(config, runner->backend_->config().max_position_embeddings, affordable);
  runner->engine_ = std::make_unique<Engine>(*runner->backend_, config);
  runner->info_.load_seconds = seconds_since(started);
  return runner;
}

EngineRunner::~EngineRunner() {
  stop();
  join();
}

void EngineRunner::start(std::function<bool()> notify) {
  if (thread_.joinable()) throw CodedError("STRATA_ENGINE_ERROR", "the engine loop is already running");
  router_.set_primary(std::move(notify));
  thread_ = std::thread([this] { loop(); });
#if defined(__linux__)
  // Named at once, so top -H and /proc/<pid>/task show it from the start.
  pthread_setname_np(thread_.native_handle(), "strata-engine");
#endif
}

void EngineRunner::loop() {
  Engine& engine = *engine_;
  while (!stopping_.load()) {
    if (!engine.wait_for_work(std::chrono::milliseconds(100))) continue;
    StepMessage message;
    try {
      message.output = engine.step();
    } catch (...) {
      message.fatal = capture_current_error();
    }
    const bool fatal = !message.fatal.code.empty();
    const StepOutput& out = message.output;
    // A step that ran a forward goes to the consumer even without output (a prefill chunk),
    // for its metrics.
    if (fatal || out.num_batched_tokens > 0 || !out.aborted.empty()) {
      std::vector<uint64_t> orphans;  // live requests of consumers found gone
      const bool go_on = router_.route(std::move(message), orphans);
      for (uint64_t id : orphans) engine.abort(id, FinishReason::kAbort);
      if (!go_on) break;
    }
    if (fatal) break;
  }
}

void EngineRunner::stop() {
  stopping_.store(true);
  if (engine_) engine_->wake();
  router_.close({"STRATA_ENGINE_CLOSED", "the engine was closed while the request ran"});  // a push waiting for room returns
}

void EngineRunner::submit(int consumer, Request request) {
  if (request.id > StepRouter::kMaxLocalId) {
    throw EngineError(errc::kInvalidParam, "request id must be at most " + std::to_string(StepRouter::kMaxLocalId) +
                                               ", got " + std::to_string(request.id));
  }
  if (stopping()) throw CodedError("STRATA_ENGINE_CLOSED", "the engine is closed");
  request.id = StepRouter::engine_id(consumer, request.id);
  const uint64_t id = request.id;
  switch (router_.claim(id)) {
    case StepRouter::Claim::kClaimed: break;
    case StepRouter::Claim::kDetached:
      throw CodedError("STRATA_ENGINE_CLOSED", "this event loop is detached from the engine");
    case StepRouter::Claim::kDuplicate:
      throw EngineError(errc::kDuplicateRequest,
                        "request id " + std::to_string(StepRouter::local_id(id)) + " is already running");
  }
  try {
    engine_->submit(std::move(request));
  } catch (...) {
    router_.unclaim(id);
    throw;
  }
}

bool EngineRunner::abort(int consumer, uint64_t id, FinishReason reason) {
  if (id > StepRouter::kMaxLocalId) return false;
  return engine_->abort(StepRouter::engine_id(consumer, id), reason);
}

int EngineRunner::attach(StepRouter::Notify notify) {
  if (stopping()) throw CodedError("STRATA_ENGINE_CLOSED", "the engine is closed");
  return router_.attach(std::move(notify));
}

void EngineRunner::detach(int consumer) {
  for (uint64_t id : router_.detach(consumer)) engine_->abort(id, FinishReason::kAbort);
}

void EngineRunner::join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

}  // namespace strata
