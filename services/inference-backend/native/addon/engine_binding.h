// NativeEngine: the JS face of one strata::EngineRunner (the engine, its model backend and its
// loop thread). It converts values between JS and the runner's types and schedules step
// deliveries on the JS thread; the engine policy lives in the runner (native/engine/runner).
#pragma once

#include <napi.h>

#include <memory>

#include "strata/engine_runner.h"
#include "strata/grammar.h"

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
  // loadGrammar(tokenizerJson, eosTokenIds) -> Promise<{version, seconds}>: structured output's
  // vocabulary, read once (off the JS thread); eos ids join the model's own.
  Napi::Value LoadGrammar(const Napi::CallbackInfo& info);
  // compileConstraint(kind, data) -> Promise<constraint> (off the JS thread): one request's
  // grammar state, handed to submit({constraint}) once. Rejects with STRATA_INVALID_GRAMMAR.
  Napi::Value CompileConstraint(const Napi::CallbackInfo& info);

  // Queues one delivery of the runner's steps on the JS thread; false when closing.
  bool ScheduleDelivery();

  std::unique_ptr<EngineRunner> runner_;
  std::shared_ptr<Grammar> grammar_;
  Napi::ThreadSafeFunction on_steps_;
  bool closed_ = false;
};

}  // namespace strata::addon
