// NativeEngine: the JS object that owns one engine, its model backend and its loop thread.
#pragma once

#include <napi.h>

#include <atomic>
#include <string>
#include <memory>
#include <thread>

#include "strata/engine.h"
#include "strata/model_backend.h"

namespace strata::addon {

// Everything the loader builds off the JS thread, handed to the JS object when ready.
struct LoadedEngine {
  std::unique_ptr<ModelBackend> backend;
  std::unique_ptr<Engine> engine;
  std::string backend_name;  // "cpu"
  std::string kernel_isa;    // e.g. "avx2+fma"
  int32_t num_threads = 0;
  double load_seconds = 0;
  int64_t kv_bytes_per_block = 0;
};

class EngineBinding : public Napi::ObjectWrap<EngineBinding> {
 public:
  static Napi::Function Define(Napi::Env env);
  // loadEngine(options, onStep) -> Promise<NativeEngine>
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

  void Loop();
  void StopLoop();

  std::unique_ptr<LoadedEngine> loaded_;
  Napi::ThreadSafeFunction on_step_;
  std::thread loop_;
  std::atomic<bool> stopping_{false};
  bool closed_ = false;
};

}  // namespace strata::addon
