// NativeEngine: the JS face of one strata::EngineRunner (the engine, its model backend and its
// loop thread). It converts values between JS and the runner's types and schedules step
// deliveries on the JS thread; the engine policy lives in the runner (native/engine/runner).
//
// One runner can serve several JS threads (the service's HTTP worker threads): the thread that
// loaded it holds consumer 0, share() names it, and attachEngine(key, onSteps) on another thread
// gives that thread a NativeEngine of its own, a consumer of the runner's StepRouter: its own
// request ids, its own steps, delivered on its own event loop. close() on an attached engine
// detaches it (aborting its live requests); close() on the loading one stops the runner, and
// every attached engine's requests fail with STRATA_ENGINE_CLOSED.
#pragma once

#include <napi.h>

#include <memory>
#include <mutex>

#include "strata/engine_runner.h"
#include "strata/grammar.h"

namespace strata::addon {

// A runner with what its JS threads share: the structured-output vocabulary, and the key
// attachEngine() finds it by.
struct SharedEngine {
  std::unique_ptr<EngineRunner> runner;
  std::mutex mu;
  std::shared_ptr<Grammar> grammar;  // under mu
  uint64_t key = 0;                  // under the registry's lock; 0 until share()
};

// One JS thread's end of the step hand-over: its queue and the threadsafe function that
// delivers it. notify() (the loop thread) and shut() (the JS thread) take the same lock, so no
// call reaches the function after it is released.
struct ConsumerState {
  std::mutex mu;
  bool open = true;
  Napi::ThreadSafeFunction tsfn;
  std::shared_ptr<StepQueue> queue;
  // Queues one delivery of the queue's steps; false when shut (the consumer is gone).
  bool notify();
  // No delivery after this; true when it was open (the caller releases tsfn).
  bool shut();
};

class EngineBinding : public Napi::ObjectWrap<EngineBinding> {
 public:
  // The class, kept per environment (each worker thread loads the addon anew).
  static Napi::Function Define(Napi::Env env);
  // loadEngine(options, onSteps) -> Promise<NativeEngine>
  static Napi::Value Load(const Napi::CallbackInfo& info);
  // attachEngine(key, onSteps) -> NativeEngine: another thread's consumer of a shared runner.
  static Napi::Value AttachShared(const Napi::CallbackInfo& info);
  // loadGrammar(tokenizerJson, vocabSize, eosTokenIds) -> Promise<{grammar, version, seconds}>:
  // structured output's vocabulary, read off the JS thread, before or while the engine loads.
  static Napi::Value LoadGrammar(const Napi::CallbackInfo& info);

  explicit EngineBinding(const Napi::CallbackInfo& info);
  ~EngineBinding() override;
  // Takes over a loaded runner and starts its loop; the JS object stays alive (Ref) until
  // close() has joined the loop.
  void Adopt(std::unique_ptr<EngineRunner> runner, Napi::Function on_steps);
  // Becomes a consumer of a runner another thread loaded; alive (Ref) until close().
  void Attach(std::shared_ptr<SharedEngine> shared, Napi::Function on_steps);

 private:
  Napi::Value Submit(const Napi::CallbackInfo& info);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value ResumeSteps(const Napi::CallbackInfo& info);
  // share() -> number: the key another thread's attachEngine() takes.
  Napi::Value Share(const Napi::CallbackInfo& info);
  // useGrammar(grammar): the vocabulary loadGrammar() read, for this engine and every thread's
  // attached to its runner; refused when it was read for another vocabulary size or without
  // one of the model's end-of-sequence ids.
  Napi::Value UseGrammar(const Napi::CallbackInfo& info);
  // compileConstraint(kind, data) -> Promise<constraint> (off the JS thread): one request's
  // grammar state, handed to submit({constraint}) once. Rejects with STRATA_INVALID_GRAMMAR.
  Napi::Value CompileConstraint(const Napi::CallbackInfo& info);

  // The threadsafe function delivering `queue` to on_steps on this thread; the finalizer also
  // runs at environment teardown (a worker thread ended without close()).
  void Connect(Napi::Function on_steps, std::shared_ptr<StepQueue> queue);
  EngineRunner& runner() { return *shared_->runner; }
  bool primary() const { return consumer_ == 0; }

  std::shared_ptr<SharedEngine> shared_;
  std::shared_ptr<ConsumerState> state_ = std::make_shared<ConsumerState>();
  int consumer_ = 0;  // the runner's StepRouter consumer: 0 for the engine that loaded it
  bool closed_ = false;
};

}  // namespace strata::addon
