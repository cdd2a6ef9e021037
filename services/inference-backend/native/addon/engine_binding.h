// NativeEngine: the JS face of one strata::EngineRunner (the engine, its model backend and its
// loop thread). It converts values between JS and the runner's types and schedules step
// deliveries on the JS thread; the engine policy lives in the runner (native/engine/runner).
#pragma once

#include <napi.h>

#include <memory>

#include "strata/engine_runner.h"

namespace strata::addon {

class EngineBinding : public Napi::ObjectWrap<EngineBinding> {
 public:
  static Napi::Function Define(Napi::Env env);
  // loadEngine(options, onSteps) -> Promise<NativeEngine>
  static Napi::Value Load(const Napi::CallbackInfo& info);

  explicit EngineBinding(const Napi::CallbackInfo& info);
  ~EngineBinding() override;
  // Takes over a loaded runner and starts its loop; the JS object stays alive (Ref) until
  // close() has joined the loop.
  void Adopt(std::unique_ptr<EngineRunner> runner, Napi::Function on_steps);

 private:
  Napi::Value Submit(const Napi::CallbackInfo& info);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value ResumeSteps(const Napi::CallbackInfo& info);

  // Queues one delivery of the runner's steps on the JS thread; false when closing.
  bool ScheduleDelivery();

  std::unique_ptr<EngineRunner> runner_;
  Napi::ThreadSafeFunction on_steps_;
  bool closed_ = false;
};

}  // namespace strata::addon
