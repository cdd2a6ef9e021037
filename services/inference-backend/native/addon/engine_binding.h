// NativeEngine: the JS object that owns one engine, its model backend and its loop thread.
#pragma once

#include <napi.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "js_errors.h"
#include "strata/engine.h"
#include "strata/model_backend.h"

namespace strata::addon {

// Everything the loader builds off the JS thread, handed to the JS object when ready.
struct LoadedEngine {
  std::unique_ptr<ModelBackend> backend;
  std::unique_ptr<Engine> engine;
  std::string backend_name;  // "cpu" or "cuda"
  std::string kernel_isa;    // CPU kernels: e.g. "avx2+fma"; CUDA: "cuda"
  std::string device = "cpu";  // CUDA: the GPU's name
  std::string dtype = "float32";  // activations and KV (and weights, unless quantized)
  std::string weights = "float32";  // the weights' format: a dtype, or block types such as "Q4_1 + Q8_0"
  double load_gb_per_s = 0;  // checkpoint bytes read per second (CUDA: to the device)
  std::string sampling = "cpu";  // where tokens are sampled: "cpu" or "gpu"
  std::string sampling_note;     // why not on the GPU although configured; empty otherwise
  int32_t num_threads = 0;
  double load_seconds = 0;
  int64_t kv_bytes_per_block = 0;
};

// What the loop hands to JS: a step's output, or the error that stopped the loop.
struct StepMessage {
  StepOutput output;
  CapturedError fatal;
};

// Steps on their way from the loop thread to JS. The loop appends; one delivery at a time is
// scheduled on the JS thread and takes everything that accumulated, so a busy event loop gets
// several steps in one call (one socket write per stream instead of one per token) instead of
// falling further behind. The next delivery is scheduled only when JS asks for it
// (resumeSteps(), from a later event-loop turn): deliveries queued back to back would run in one
// uv callback and starve timers and incoming I/O. Shared with queued deliveries, which may
// outlive the JS object.
struct StepMailbox {
  std::mutex mu;
  std::condition_variable space;  // signalled when a delivery took the steps
  std::vector<StepMessage> steps;
  // A delivery is queued or JS has not yet asked for the next one: Post() only appends.
  bool delivery_scheduled = false;
};

class EngineBinding : public Napi::ObjectWrap<EngineBinding> {
 public:
  static Napi::Function Define(Napi::Env env);
  // loadEngine(options, onSteps) -> Promise<NativeEngine>
  static Napi::Value Load(const Napi::CallbackInfo& info);

  explicit EngineBinding(const Napi::CallbackInfo& info);
  ~EngineBinding() override;
  // Takes over a loaded engine and starts its loop thread; the JS object stays alive (Ref)
  // until close() has joined the loop.
  void Adopt(std::unique_ptr<LoadedEngine> loaded, Napi::Function on_step);

 private:
  Napi::Value Submit(const Napi::CallbackInfo& info);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value ResumeSteps(const Napi::CallbackInfo& info);

  void Loop();
  void StopLoop();

  // Queues a step for JS; false when the loop is stopping.
  bool Post(StepMessage message);
  // Queues a delivery of the mailbox on the JS thread; false when the function is closing.
  bool ScheduleDelivery();

  std::unique_ptr<LoadedEngine> loaded_;
  Napi::ThreadSafeFunction on_step_;
  std::shared_ptr<StepMailbox> mailbox_ = std::make_shared<StepMailbox>();
  std::thread loop_;
  std::atomic<bool> stopping_{false};
  bool closed_ = false;
};

}  // namespace strata::addon
