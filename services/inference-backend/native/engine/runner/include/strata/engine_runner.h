// The engine as the service runs it: loads a model backend (CPU or CUDA), sizes the KV pool,
// builds the Engine, and runs its loop on a thread of its own, handing every step to a
// StepQueue. Everything here is engine policy and is tested in C++ (tests/test_runner.cpp); the
// N-API binding only converts values between JS and these types.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <atomic>

#include "strata/engine.h"
#include "strata/load_progress.h"
#include "strata/model_backend.h"
#include "strata/step_queue.h"
#include "strata/step_router.h"

namespace strata {

struct RunnerOptions {
  std::string backend = "cpu";    // "cpu" or "cuda"
  std::string model_dir;          // a Hugging Face directory or a .gguf file; empty with a dummy preset
  std::string dummy_preset;       // e.g. "llama-3-8b": its config with random weights (CPU only)
  uint64_t dummy_seed = 0;
  int32_t num_threads = 0;        // CPU: compute threads; 0 = the backend's default
  EngineConfig engine;            // num_blocks 0: sized here (kv_pool_blocks)
  int64_t kv_cache_bytes = 0;       // CPU: the KV budget; 0 = kv_memory_fraction of MemAvailable
  double kv_memory_fraction = 0.1;  // CPU: of MemAvailable, when kv_cache_bytes is 0
  std::string dtype = "bfloat16";   // CUDA: bfloat16, float16 or float32 (the CPU backend is float32)
  // The KV pool's elements: "auto", "float32" or "float16". CPU: auto = float16 for a GGUF
  // model's quantized weights (as llama.cpp), float32 otherwise. CUDA: its dtype (auto or that name).
  std::string kv_cache_dtype = "auto";
  // CPU: a checkpoint's bf16/fp16 matrices kept as they are ("auto") or widened to "float32" at
  // load (CpuWeightsDtype: twice the memory, faster at 8 to 32 sequences, the same logits).
  std::string cpu_weights_dtype = "auto";
  // CPU: the kernel set, "auto", "amx", "avx2" or "portable" (CpuBackendOptions::kernels); empty:
  // STRATA_CPU_KERNELS.
  std::string cpu_kernels;
  double gpu_memory_utilization = 0.9;  // CUDA: share of the device's memory for weights + activations + KV
  bool cuda_graphs = true;              // CUDA: replay captured graphs for decode steps
  bool gpu_sampling = true;             // CUDA: sample on the device
  LoadProgress progress{};              // the checkpoint's bytes loaded so far (load_progress.h)
};

// What was loaded, for logs and the service's /v1/models and metrics.
struct RunnerInfo {
  std::string backend_name;          // "cpu" or "cuda"
  std::string kernel_isa;            // CPU kernels: e.g. "avx2+fma, quantized: avx512vnni"; CUDA: "cuda"
  std::string device = "cpu";        // CUDA: the GPU's name
  std::string dtype = "float32";     // activations (and weights, unless quantized)
  std::string kv_cache_dtype = "float32";  // the KV pool's elements
  std::string weights = "float32";   // the weights' format: a dtype, or block types such as "Q4_1 + Q8_0"
  double load_gb_per_s = 0;          // checkpoint bytes read per second (CUDA: to the device)
  std::string sampling = "cpu";      // where tokens are sampled: "cpu" or "gpu"
  std::string sampling_note;         // why not on the GPU although configured; empty otherwise
  std::string decode_kernels;        // CUDA: how a one-sequence decode step runs its projections; CPU: empty
  int32_t num_threads = 0;
  double load_seconds = 0;
  int64_t kv_bytes_per_block = 0;
};

// KV blocks that any sequence mix can ever use: max_num_seqs sequences of the full context.
int64_t useful_kv_blocks(const EngineConfig& engine, int32_t model_max_len);
// The pool: engine.num_blocks when set, else what the budget affords (`affordable` blocks),
// capped at useful_kv_blocks and at int32. One rule for both backends; only the budget differs
// (CPU: a share of host memory; CUDA: what the profiling pass leaves on the device).
int32_t kv_pool_blocks(const EngineConfig& engine, int32_t model_max_len, int64_t affordable);
// Bytes the kernel says can be allocated without swapping: MemAvailable of `meminfo`
// (/proc/meminfo's format); 0 when it cannot be read.
int64_t mem_available_bytes(const std::string& meminfo = "/proc/meminfo");

// The prefix-cache salt of a tenant (FNV-1a of its name; 0 for none): requests share cached
// KV blocks only within one tenant, so one tenant cannot probe another's prompts by timing.
uint64_t tenant_salt(const std::string& tenant);

class EngineRunner {
 public:
  // Loads the backend and builds the engine (no thread yet). Throws CodedError:
  // STRATA_INVALID_CONFIG for options it cannot honour, the backends' own codes for the model.
  static std::unique_ptr<EngineRunner> load(const RunnerOptions& options);
  // Stops the loop and joins it.
  ~EngineRunner();
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  Engine& engine() { return *engine_; }
  const ModelBackend& backend() const { return *backend_; }
  const RunnerInfo& info() const { return info_; }
  // Consumer 0's steps (start()'s consumer).
  std::shared_ptr<StepQueue> steps() const { return router_.queue(0); }

  // Requests of consumer k, by its own ids (StepRouter): submit throws STRATA_INVALID_PARAM for
  // an id over StepRouter::kMaxLocalId, STRATA_ENGINE_CLOSED once the loop is stopping or when k
  // is not attached, and the engine's own errors. abort: false when the id is not live.
  void submit(int consumer, Request request);
  bool abort(int consumer, uint64_t id, FinishReason reason);
  // Another consumer of the steps (another event loop): its index, for submit/abort/steps_of.
  int attach(StepRouter::Notify notify);
  // Consumer k is gone: it gets nothing more, and its live requests are aborted.
  void detach(int consumer);
  // Consumer k's steps; nullptr when k is not attached.
  std::shared_ptr<StepQueue> steps_of(int consumer) const { return router_.queue(consumer); }
  bool stopping() const { return stopping_.load(); }

  // Starts the loop thread ("strata-engine"). Every step that ran a forward pass, aborted
  // requests or failed goes to steps(), and each attached consumer's share to its own queue
  // (StepRouter); `notify` is called on the loop thread when consumer 0 should take them
  // (StepQueue::Pushed::kNotify), and returning false (the consumer is gone) ends the loop. A
  // step that throws is handed over with `fatal` set and ends the loop.
  void start(std::function<bool()> notify);
  // Any thread: asks the loop to end and closes the queues (attached consumers get a last step
  // failing with STRATA_ENGINE_CLOSED); returns at once.
  void stop();
  // Waits for the loop thread (after stop(), or after a fatal step).
  void join();

 private:
  EngineRunner() = default;
  void loop();

  std::unique_ptr<ModelBackend> backend_;
  std::unique_ptr<Engine> engine_;
  RunnerInfo info_;
  StepRouter router_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
};

}  // namespace strata
