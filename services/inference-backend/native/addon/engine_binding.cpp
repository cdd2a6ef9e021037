#include "engine_binding.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>

#include "js_errors.h"
#include "strata/coded_error.h"

namespace strata::addon {
namespace {

// NativeEngine's constructor in `env` (Define() keeps one per environment).
Napi::Object new_engine_object(Napi::Env env) { return env.GetInstanceData<Napi::FunctionReference>()->New({}); }

// Runners that share() named, for attachEngine() on other threads. Weak: a runner lives as long
// as a NativeEngine of some thread holds it.
std::mutex g_shared_mu;
std::unordered_map<uint64_t, std::weak_ptr<SharedEngine>> g_shared;
uint64_t g_next_key = 1;

int32_t get_int(const Napi::Object& o, const char* key, int32_t fallback) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().Int32Value() : fallback;
}

double get_double(const Napi::Object& o, const char* key, double fallback) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
}

std::string get_string(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  return v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string();
}

// What loadEngine() accepts (native.ts NativeLoadOptions); checked in TS first, re-checked by
// the runner for direct callers.
RunnerOptions parse_load_options(const Napi::Object& o) {
  RunnerOptions opts;
  if (o.Get("backend").IsString()) opts.backend = get_string(o, "backend");
  opts.model_dir = get_string(o, "modelDir");
  opts.dummy_preset = get_string(o, "dummyPreset");
  opts.dummy_seed = static_cast<uint64_t>(get_double(o, "dummySeed", 0));
  opts.num_threads = get_int(o, "threads", 0);
  opts.engine.num_blocks = get_int(o, "numBlocks", 0);
  opts.engine.block_size = get_int(o, "blockSize", 16);
  opts.engine.max_num_batched_tokens = get_int(o, "maxNumBatchedTokens", 2048);
  opts.engine.max_num_seqs = get_int(o, "maxNumSeqs", 256);
  opts.engine.max_model_len = get_int(o, "maxModelLen", 0);
  opts.kv_cache_bytes = static_cast<int64_t>(get_double(o, "kvCacheBytes", 0));
  opts.kv_memory_fraction = get_double(o, "kvMemoryFraction", 0.1);
  if (o.Get("dtype").IsString()) opts.dtype = get_string(o, "dtype");
  if (o.Get("kvCacheDtype").IsString()) opts.kv_cache_dtype = get_string(o, "kvCacheDtype");
  if (o.Get("cpuWeightsDtype").IsString()) opts.cpu_weights_dtype = get_string(o, "cpuWeightsDtype");
  if (o.Get("cpuKernels").IsString()) opts.cpu_kernels = get_string(o, "cpuKernels");
  opts.gpu_memory_utilization = get_double(o, "gpuMemoryUtilization", 0.9);
  if (o.Get("cudaGraphs").IsBoolean()) opts.cuda_graphs = o.Get("cudaGraphs").As<Napi::Boolean>().Value();
  if (o.Get("gpuSampling").IsBoolean()) opts.gpu_sampling = o.Get("gpuSampling").As<Napi::Boolean>().Value();
  return opts;
}

// options.progress: a BigInt64Array of at least 2 elements the load writes its bytes done and
// in all into (LoadProgress) while JS reads them; null when absent. Its buffer is off the V8
// heap once its data pointer has been taken, so it stays where it is.
Napi::BigInt64Array progress_array(Napi::Env env, const Napi::Object& o) {
  Napi::Value v = o.Get("progress");
  if (v.IsUndefined() || v.IsNull()) return Napi::BigInt64Array();
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_bigint64_array ||
      v.As<Napi::BigInt64Array>().ElementLength() < 2) {
    throw_js_error(env, "STRATA_INVALID_CONFIG", "loadEngine: options.progress must be a BigInt64Array of 2 elements");
  }
  return v.As<Napi::BigInt64Array>();
}

// Loads the runner off the JS thread.
class LoadWorker : public Napi::AsyncWorker {
 public:
  LoadWorker(Napi::Env env, RunnerOptions opts, Napi::Function on_steps, Napi::BigInt64Array progress)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), opts_(std::move(opts)) {
    on_steps_.Reset(on_steps, 1);
    if (!progress.IsEmpty()) {
      progress_.Reset(progress, 1);  // held until the worker is gone: the load writes into it
      opts_.progress = LoadProgress(progress.Data());
    }
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      runner_ = EngineRunner::load(opts_);
    } catch (...) {
      error_ = capture_current_error();
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (!error_.code.empty()) {
      deferred_.Reject(to_js_error(env, error_).Value());
      return;
    }
    Napi::Object engine = new_engine_object(env);
    EngineBinding::Unwrap(engine)->Adopt(std::move(runner_), on_steps_.Value());
    deferred_.Resolve(engine);
  }

 private:
  Napi::Promise::Deferred deferred_;
  Napi::FunctionReference on_steps_;
  Napi::Reference<Napi::BigInt64Array> progress_;
  RunnerOptions opts_;
  std::unique_ptr<EngineRunner> runner_;
  CapturedError error_;
};

// Joins the loop thread off the JS thread, so a loop blocked handing a step to JS can finish,
// then lets the JS object be collected.
class CloseWorker : public Napi::AsyncWorker {
 public:
  CloseWorker(Napi::Env env, EngineRunner* runner, std::function<void()> on_joined)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        runner_(runner),
        on_joined_(std::move(on_joined)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override { runner_->join(); }
  void OnOK() override {
    on_joined_();
    deferred_.Resolve(Env().Undefined());
  }

 private:
  Napi::Promise::Deferred deferred_;
  EngineRunner* runner_;  // alive: the JS object is Ref'd until on_joined
  std::function<void()> on_joined_;
};

// A compiled constraint on its way from compileConstraint() to submit(), which takes it.
struct ConstraintBox {
  std::unique_ptr<TokenConstraint> constraint;
};
// Structured output's vocabulary from loadGrammar(), until an engine's useGrammar() shares it.
struct GrammarBox {
  std::shared_ptr<Grammar> grammar;
  std::vector<int32_t> eos_token_ids;
};
// The externals' type tags: a handle of one kind passed where the other is expected is refused.
constexpr napi_type_tag kConstraintTag = {0x7f1c2a9e5b3d4c61ULL, 0x9a0e8b7d6c5f4e32ULL};
constexpr napi_type_tag kGrammarTag = {0x3e8d1f0a2b6c4d95ULL, 0xb1a2c3d4e5f60718ULL};

// The box an external of `tag` holds, or null for anything else.
template <class Box>
Box* tagged_box(const Napi::Value& v, const napi_type_tag& tag) {
  if (v.IsEmpty() || !v.IsExternal()) return nullptr;
  Napi::External<Box> e = v.As<Napi::External<Box>>();
  return e.CheckTypeTag(&tag) ? e.Data() : nullptr;
}

// A promise for work off the JS thread: Work() runs on libuv's pool, timed, and any exception
// becomes the JS error the promise rejects with; Result() builds what it resolves with.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  virtual void Work() = 0;
  virtual Napi::Value Result(Napi::Env env) = 0;
  double seconds() const { return seconds_; }

 private:
  void Execute() override {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      Work();
    } catch (...) {
      error_ = capture_current_error();
    }
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void OnOK() override {
    Napi::Env env = Env();
    if (!error_.code.empty()) {
      deferred_.Reject(to_js_error(env, error_).Value());
      return;
    }
    deferred_.Resolve(Result(env));
  }

  Napi::Promise::Deferred deferred_;
  CapturedError error_;
  double seconds_ = 0;
};

// Reads the vocabulary; holds a reference to the engine's JS object until it is done, so that
// on_loaded never reaches a collected binding.
// Reads structured output's vocabulary; resolves with {grammar, version, seconds}.
class GrammarLoadWorker : public PromiseWorker {
 public:
  GrammarLoadWorker(Napi::Env env, GrammarOptions options) : PromiseWorker(env), options_(std::move(options)) {}

 private:
  void Work() override { grammar_ = Grammar::load(options_); }
  Napi::Value Result(Napi::Env env) override {
    auto* box = new GrammarBox{std::move(grammar_), options_.eos_token_ids};
    auto handle = Napi::External<GrammarBox>::New(env, box, [](Napi::Env, GrammarBox* b) { delete b; });
    handle.TypeTag(&kGrammarTag);
    Napi::Object o = Napi::Object::New(env);
    o.Set("grammar", handle);
    o.Set("version", Grammar::version());
    o.Set("seconds", seconds());
    return o;
  }

  GrammarOptions options_;
  std::shared_ptr<Grammar> grammar_;
};

// Compiles one request's constraint; resolves with {handle, compileSeconds}.
class CompileWorker : public PromiseWorker {
 public:
  CompileWorker(Napi::Env env, std::shared_ptr<Grammar> grammar, std::string kind, std::string data)
      : PromiseWorker(env), grammar_(std::move(grammar)), kind_(std::move(kind)), data_(std::move(data)) {}

 private:
  void Work() override { constraint_ = grammar_->compile(kind_, data_); }
  Napi::Value Result(Napi::Env env) override {
    auto* box = new ConstraintBox{std::move(constraint_)};
    Napi::Object o = Napi::Object::New(env);
    auto handle = Napi::External<ConstraintBox>::New(env, box, [](Napi::Env, ConstraintBox* b) { delete b; });
    handle.TypeTag(&kConstraintTag);
    o.Set("handle", handle);
    o.Set("compileSeconds", seconds());
    return o;
  }

  std::shared_ptr<Grammar> grammar_;
  std::string kind_;
  std::string data_;
  std::unique_ptr<TokenConstraint> constraint_;
};

FinishReason parse_abort_reason(const Napi::Value& v) {
  if (v.IsString() && v.As<Napi::String>().Utf8Value() == "timeout") return FinishReason::kTimeout;
  return FinishReason::kAbort;
}

SamplingParams parse_params(const Napi::Object& p) {
  SamplingParams s;
  s.temperature = static_cast<float>(get_double(p, "temperature", s.temperature));
  s.top_k = get_int(p, "topK", s.top_k);
  s.top_p = static_cast<float>(get_double(p, "topP", s.top_p));
  s.min_p = static_cast<float>(get_double(p, "minP", s.min_p));
  s.repetition_penalty = static_cast<float>(get_double(p, "repetitionPenalty", s.repetition_penalty));
  s.frequency_penalty = static_cast<float>(get_double(p, "frequencyPenalty", s.frequency_penalty));
  s.presence_penalty = static_cast<float>(get_double(p, "presencePenalty", s.presence_penalty));
  if (p.Get("seed").IsNumber()) s.seed = static_cast<uint64_t>(p.Get("seed").As<Napi::Number>().Int64Value());
  Napi::Value stops = p.Get("stopTokenIds");
  if (stops.IsArray()) {
    Napi::Array a = stops.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) s.stop_token_ids.push_back(a.Get(i).As<Napi::Number>().Int32Value());
  }
  s.ignore_eos = p.Get("ignoreEos").ToBoolean();
  s.max_tokens = get_int(p, "maxTokens", s.max_tokens);
  s.min_tokens = get_int(p, "minTokens", s.min_tokens);
  s.logprobs = get_int(p, "logprobs", s.logprobs);
  s.processed_logprobs = p.Get("processedLogprobs").ToBoolean();
  return s;
}

// One step's output as typed arrays: one JS call per step, not one object per token.
Napi::Object step_to_js(Napi::Env env, const StepOutput& out) {
  const size_t n = out.tokens.size();
  auto ids = Napi::Float64Array::New(env, n);
  auto tokens = Napi::Int32Array::New(env, n);
  auto finish = Napi::Uint8Array::New(env, n);
  auto logprobs = Napi::Float32Array::New(env, n);
  auto top_offsets = Napi::Int32Array::New(env, n);
  auto top_counts = Napi::Int32Array::New(env, n);
  for (size_t i = 0; i < n; ++i) {
    const TokenEvent& e = out.tokens[i];
    ids[i] = static_cast<double>(e.request_id);
    tokens[i] = e.token;
    finish[i] = static_cast<uint8_t>(e.finish_reason);
    logprobs[i] = e.has_logprob ? e.logprob : std::numeric_limits<float>::quiet_NaN();
    top_offsets[i] = e.top_offset;
    top_counts[i] = e.top_count;
  }
  auto top_ids = Napi::Int32Array::New(env, out.top_logprobs.size());
  auto top_values = Napi::Float32Array::New(env, out.top_logprobs.size());
  for (size_t i = 0; i < out.top_logprobs.size(); ++i) {
    top_ids[i] = out.top_logprobs[i].token;
    top_values[i] = out.top_logprobs[i].logprob;
  }
  auto aborted_ids = Napi::Float64Array::New(env, out.aborted.size());
  auto aborted_reasons = Napi::Uint8Array::New(env, out.aborted.size());
  for (size_t i = 0; i < out.aborted.size(); ++i) {
    aborted_ids[i] = static_cast<double>(out.aborted[i].request_id);
    aborted_reasons[i] = static_cast<uint8_t>(out.aborted[i].reason);
  }
  auto scheduled_ids = Napi::Float64Array::New(env, out.scheduled.size());
  for (size_t i = 0; i < out.scheduled.size(); ++i) scheduled_ids[i] = static_cast<double>(out.scheduled[i]);
  // Ages on this (JS) thread, so JS places the moments on its own clock: performance.now() - age.
  const auto now = std::chrono::steady_clock::now();
  const auto age_ms = [&](std::chrono::steady_clock::time_point at) {
    return std::chrono::duration<double, std::milli>(now - at).count();
  };
  const double scheduled_age_ms = out.scheduled.empty() ? 0.0 : age_ms(out.scheduled_at);
  const double output_age_ms = out.tokens.empty() ? 0.0 : age_ms(out.output_at);
  Napi::Object o = Napi::Object::New(env);
  o.Set("ids", ids);
  o.Set("tokens", tokens);
  o.Set("finish", finish);
  o.Set("logprobs", logprobs);
  o.Set("topOffsets", top_offsets);
  o.Set("topCounts", top_counts);
  o.Set("topIds", top_ids);
  o.Set("topLogprobs", top_values);
  o.Set("abortedIds", aborted_ids);
  o.Set("abortedReasons", aborted_reasons);
  o.Set("scheduledIds", scheduled_ids);
  o.Set("scheduledAgeMs", Napi::Number::New(env, scheduled_age_ms));
  o.Set("outputAgeMs", Napi::Number::New(env, output_age_ms));
  o.Set("batchedTokens", Napi::Number::New(env, out.num_batched_tokens));
  o.Set("batchedSeqs", Napi::Number::New(env, out.num_batched_seqs));
  return o;
}

// Runs on the JS thread: hands every step that accumulated to onSteps in one call. The queue
// stays "told" until JS calls resumeSteps() from a later event-loop turn.
void DeliverSteps(Napi::Env env, Napi::Function fn, std::shared_ptr<StepQueue>* ref) {
  std::unique_ptr<std::shared_ptr<StepQueue>> owned(ref);
  std::vector<StepMessage> steps = (*owned)->take();
  if (env == nullptr || steps.empty()) return;  // released while this call waited
  Napi::Array batch = Napi::Array::New(env, steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    Napi::Object step = step_to_js(env, steps[i].output);
    if (!steps[i].fatal.code.empty()) step.Set("fatal", to_js_error(env, steps[i].fatal).Value());
    batch[i] = step;
  }
  fn.Call({batch});
}

}  // namespace

Napi::Function EngineBinding::Define(Napi::Env env) {
  Napi::Function cls = DefineClass(env, "NativeEngine",
                                   {
                                       InstanceMethod<&EngineBinding::Submit>("submit"),
                                       InstanceMethod<&EngineBinding::Abort>("abort"),
                                       InstanceMethod<&EngineBinding::Stats>("stats"),
                                       InstanceMethod<&EngineBinding::Info>("info"),
                                       InstanceMethod<&EngineBinding::Close>("close"),
                                       InstanceMethod<&EngineBinding::ResumeSteps>("resumeSteps"),
                                       InstanceMethod<&EngineBinding::Share>("share"),
                                       InstanceMethod<&EngineBinding::UseGrammar>("useGrammar"),
                                       InstanceMethod<&EngineBinding::CompileConstraint>("compileConstraint"),
                                   });
  env.SetInstanceData(new Napi::FunctionReference(Napi::Persistent(cls)));
  return cls;
}

Napi::Value EngineBinding::Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || !info[1].IsFunction()) {
    throw_js_error(env, "STRATA_INVALID_CONFIG", "loadEngine(options, onSteps): options object and function required");
  }
  const Napi::Object options = info[0].As<Napi::Object>();
  auto* worker = new LoadWorker(env, parse_load_options(options), info[1].As<Napi::Function>(),
                                progress_array(env, options));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

bool ConsumerState::notify() {
  std::lock_guard lock(mu);
  if (!open || !queue) return false;
  auto* ref = new std::shared_ptr<StepQueue>(queue);
  if (tsfn.NonBlockingCall(ref, DeliverSteps) != napi_ok) {
    delete ref;  // closing: nothing will read the queue again
    return false;
  }
  return true;
}

bool ConsumerState::shut() {
  std::lock_guard lock(mu);
  const bool was = open;
  open = false;
  return was;
}

Napi::Value EngineBinding::AttachShared(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || !info[1].IsFunction()) {
    throw_js_error(env, "STRATA_INVALID_CONFIG", "attachEngine(key, onSteps): a key from share() and a function required");
  }
  const double key = info[0].As<Napi::Number>().DoubleValue();
  std::shared_ptr<SharedEngine> shared;
  {
    std::lock_guard lock(g_shared_mu);
    auto it = key >= 1 ? g_shared.find(static_cast<uint64_t>(key)) : g_shared.end();
    if (it != g_shared.end()) shared = it->second.lock();
  }
  if (!shared || shared->runner->stopping()) {
    throw_js_error(env, "STRATA_ENGINE_CLOSED", "no engine is shared under key " + std::to_string(key) + " (closed?)");
  }
  Napi::Object engine = new_engine_object(env);
  try {
    EngineBinding::Unwrap(engine)->Attach(std::move(shared), info[1].As<Napi::Function>());
  } catch (const Napi::Error&) {
    throw;
  } catch (...) {
    throw to_js_error(env, capture_current_error());  // every consumer index taken, or closed meanwhile
  }
  return engine;
}

EngineBinding::EngineBinding(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineBinding>(info) {}

// Only reached after close() (the object is Ref'd while it is open) or at environment teardown:
// an attached engine detaches (its live requests are aborted; its threadsafe function goes with
// the environment); the loading one's runner, once no other thread holds it, stops and joins a
// loop that still runs.
EngineBinding::~EngineBinding() {
  if (!closed_ && shared_ && !primary()) {
    state_->shut();
    runner().detach(consumer_);
  }
}

void EngineBinding::Connect(Napi::Function on_steps, std::shared_ptr<StepQueue> queue) {
  std::shared_ptr<ConsumerState> state = state_;
  Napi::ThreadSafeFunction tsfn = Napi::ThreadSafeFunction::New(Env(), on_steps, "strata-engine-step", /*max queue*/ 0, 1,
                                                                [state](Napi::Env) { state->shut(); });
  std::lock_guard lock(state_->mu);
  state_->tsfn = tsfn;
  state_->queue = std::move(queue);
}

void EngineBinding::Adopt(std::unique_ptr<EngineRunner> runner, Napi::Function on_steps) {
  shared_ = std::make_shared<SharedEngine>();
  shared_->runner = std::move(runner);
  Connect(on_steps, shared_->runner->steps());
  Ref();
  std::shared_ptr<ConsumerState> state = state_;
  shared_->runner->start([state] { return state->notify(); });
}

void EngineBinding::Attach(std::shared_ptr<SharedEngine> shared, Napi::Function on_steps) {
  // No step can come for this consumer before its first submit, so it attaches before its
  // threadsafe function exists.
  std::shared_ptr<ConsumerState> state = state_;
  consumer_ = shared->runner->attach([state] { return state->notify(); });
  shared_ = std::move(shared);
  Connect(on_steps, runner().steps_of(consumer_));
  Ref();
}

Napi::Value EngineBinding::Share(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_ || !shared_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  std::lock_guard lock(g_shared_mu);
  if (shared_->key == 0) {
    shared_->key = g_next_key++;
    g_shared[shared_->key] = shared_;
  }
  for (auto it = g_shared.begin(); it != g_shared.end();) it = it->second.expired() ? g_shared.erase(it) : std::next(it);
  return Napi::Number::New(env, static_cast<double>(shared_->key));
}

Napi::Value EngineBinding::ResumeSteps(const Napi::CallbackInfo& info) {
  if (!closed_ && shared_ && state_->queue->resume()) state_->notify();
  return info.Env().Undefined();
}

Napi::Value EngineBinding::Submit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_ || !shared_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  if (!info[0].IsObject()) throw_js_error(env, "STRATA_INVALID_PARAM", "submit(request): request object required");
  Napi::Object r = info[0].As<Napi::Object>();
  Request req;
  const double id = get_double(r, "id", -1);
  if (!(id >= 0 && id <= double(StepRouter::kMaxLocalId)) || id != static_cast<double>(static_cast<uint64_t>(id))) {
    throw_js_error(env, "STRATA_INVALID_PARAM",
                   "request id must be a whole number in [0, " + std::to_string(StepRouter::kMaxLocalId) + "]");
  }
  req.id = static_cast<uint64_t>(id);
  Napi::Value prompt = r.Get("prompt");
  if (!prompt.IsTypedArray() || prompt.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw_js_error(env, "STRATA_INVALID_PARAM", "prompt must be an Int32Array of token ids");
  }
  Napi::Int32Array ids = prompt.As<Napi::Int32Array>();
  req.prompt.assign(ids.Data(), ids.Data() + ids.ElementLength());
  req.priority = get_int(r, "priority", 0);
  req.tenant_salt = tenant_salt(get_string(r, "tenant"));  // strata::tenant_salt
  Napi::Value params = r.Get("params");
  if (params.IsObject()) req.params = parse_params(params.As<Napi::Object>());
  Napi::Value constraint = r.Get("constraint");
  if (!constraint.IsUndefined() && !constraint.IsNull()) {
    Napi::Value handle = constraint.IsObject() ? constraint.As<Napi::Object>().Get("handle") : Napi::Value();
    ConstraintBox* box = tagged_box<ConstraintBox>(handle, kConstraintTag);
    if (box == nullptr) throw_js_error(env, "STRATA_INVALID_PARAM", "constraint must come from compileConstraint()");
    if (!box->constraint) throw_js_error(env, "STRATA_INVALID_PARAM", "this constraint was already submitted");
    req.constraint = std::move(box->constraint);
  }
  try {
    runner().submit(consumer_, std::move(req));
  } catch (...) {
    throw to_js_error(env, capture_current_error());  // a refused request's constraint is dropped with it
  }
  return env.Undefined();
}

Napi::Value EngineBinding::LoadGrammar(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage = "loadGrammar(tokenizerJson, vocabSize, eosTokenIds): a string, a positive integer and an array of ids";
  if (!info[0].IsString() || !info[1].IsNumber() || !info[2].IsArray()) throw_js_error(env, "STRATA_INVALID_CONFIG", usage);
  const double vocab = info[1].As<Napi::Number>().DoubleValue();
  if (!(vocab >= 1 && vocab <= INT32_MAX) || vocab != static_cast<double>(static_cast<int32_t>(vocab))) {
    throw_js_error(env, "STRATA_INVALID_CONFIG", usage);
  }
  GrammarOptions o;
  o.tokenizer_json = info[0].As<Napi::String>().Utf8Value();
  o.vocab_size = static_cast<int32_t>(vocab);
  Napi::Array a = info[2].As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    const Napi::Value v = a.Get(i);
    const double id = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
    if (!(id >= 0 && id < vocab) || id != static_cast<double>(static_cast<int32_t>(id))) {
      throw_js_error(env, "STRATA_INVALID_CONFIG", "loadGrammar(): eos token ids must be integers in [0, vocabSize)");
    }
    const int32_t t = static_cast<int32_t>(id);
    if (std::find(o.eos_token_ids.begin(), o.eos_token_ids.end(), t) == o.eos_token_ids.end()) o.eos_token_ids.push_back(t);
  }
  auto* worker = new GrammarLoadWorker(env, std::move(o));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value EngineBinding::UseGrammar(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_ || !shared_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  const GrammarBox* box = tagged_box<GrammarBox>(info[0], kGrammarTag);
  if (box == nullptr) throw_js_error(env, "STRATA_INVALID_CONFIG", "useGrammar(grammar): the grammar loadGrammar() resolved with");
  const ModelConfig& m = runner().backend().config();
  if (box->grammar->vocab_size() != m.vocab_size) {
    throw_js_error(env, "STRATA_INVALID_CONFIG",
                   "this grammar was read for a vocabulary of " + std::to_string(box->grammar->vocab_size()) +
                       " tokens; the model's has " + std::to_string(m.vocab_size));
  }
  for (int32_t id : m.eos_token_ids) {  // every end of the model's must end a constrained output too
    if (std::find(box->eos_token_ids.begin(), box->eos_token_ids.end(), id) == box->eos_token_ids.end()) {
      throw_js_error(env, "STRATA_INVALID_CONFIG",
                     "this grammar was read without the model's end-of-sequence token " + std::to_string(id));
    }
  }
  // The vocabulary is the runner's: every thread's engine compiles against it.
  std::lock_guard lock(shared_->mu);
  shared_->grammar = box->grammar;
  return env.Undefined();
}

Napi::Value EngineBinding::CompileConstraint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<Grammar> grammar;
  if (shared_) {
    std::lock_guard lock(shared_->mu);
    grammar = shared_->grammar;
  }
  if (!grammar) {
    throw_js_error(env, grammar_available() ? "STRATA_INVALID_CONFIG" : errc::kGrammarUnavailable,
                   grammar_available() ? "compileConstraint() before useGrammar()"
                                       : "this engine was built without llguidance (no cargo at build time)");
  }
  if (!info[0].IsString() || !info[1].IsString()) {
    throw_js_error(env, "STRATA_INVALID_PARAM", "compileConstraint(kind, data): two strings");
  }
  auto* worker = new CompileWorker(env, std::move(grammar), info[0].As<Napi::String>().Utf8Value(),
                                   info[1].As<Napi::String>().Utf8Value());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value EngineBinding::Abort(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_ || !shared_) return Napi::Boolean::New(env, false);
  const double id = info[0].ToNumber().DoubleValue();
  if (!(id >= 0)) return Napi::Boolean::New(env, false);
  return Napi::Boolean::New(env, runner().abort(consumer_, static_cast<uint64_t>(id), parse_abort_reason(info[1])));
}

Napi::Value EngineBinding::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!shared_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  EngineStats s = runner().engine().stats();
  Napi::Object o = Napi::Object::New(env);
  o.Set("numWaiting", s.num_waiting);
  o.Set("numRunning", s.num_running);
  o.Set("kvBlocksTotal", s.kv_blocks_total);
  o.Set("kvBlocksFree", s.kv_blocks_free);
  o.Set("kvBlocksUsed", s.kv_blocks_used);
  o.Set("kvBlocksCached", s.kv_blocks_cached);
  o.Set("kvUsage", s.kv_usage);
  o.Set("numPreemptions", static_cast<double>(s.num_preemptions));
  o.Set("prefixCacheQueries", static_cast<double>(s.prefix_cache_queries));
  o.Set("prefixCacheHits", static_cast<double>(s.prefix_cache_hits));
  o.Set("numSteps", static_cast<double>(s.num_steps));
  o.Set("finishedStop", static_cast<double>(s.finished_stop));
  o.Set("finishedLength", static_cast<double>(s.finished_length));
  o.Set("finishedAbort", static_cast<double>(s.finished_abort));
  o.Set("finishedTimeout", static_cast<double>(s.finished_timeout));
  o.Set("constraintMasks", static_cast<double>(s.constraint_masks));
  o.Set("constraintMaskSeconds", s.constraint_mask_seconds);
  o.Set("constraintWaitSeconds", s.constraint_wait_seconds);
  o.Set("constraintErrors", static_cast<double>(s.constraint_errors));
  return o;
}

Napi::Value EngineBinding::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!shared_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  const ModelConfig& m = runner().backend().config();
  const EngineConfig& c = runner().engine().config();
  const RunnerInfo& loaded = runner().info();
  Napi::Object model = Napi::Object::New(env);
  model.Set("architecture", m.architecture);
  model.Set("vocabSize", m.vocab_size);
  model.Set("hiddenSize", m.hidden_size);
  model.Set("numLayers", m.num_layers);
  model.Set("numHeads", m.num_heads);
  model.Set("numKvHeads", m.num_kv_heads);
  model.Set("headDim", m.head_dim);
  model.Set("maxPositionEmbeddings", m.max_position_embeddings);
  model.Set("bosTokenId", m.bos_token_id);
  Napi::Array eos = Napi::Array::New(env, m.eos_token_ids.size());
  for (size_t i = 0; i < m.eos_token_ids.size(); ++i) eos[i] = m.eos_token_ids[i];
  model.Set("eosTokenIds", eos);
  Napi::Object engine = Napi::Object::New(env);
  engine.Set("numBlocks", c.num_blocks);
  engine.Set("blockSize", c.block_size);
  engine.Set("maxNumBatchedTokens", c.max_num_batched_tokens);
  engine.Set("maxNumSeqs", c.max_num_seqs);
  engine.Set("maxModelLen", c.max_model_len);
  engine.Set("kvBytesPerBlock", static_cast<double>(loaded.kv_bytes_per_block));
  Napi::Object o = Napi::Object::New(env);
  o.Set("model", model);
  o.Set("engine", engine);
  o.Set("backend", loaded.backend_name);
  o.Set("kernelIsa", loaded.kernel_isa);
  o.Set("threads", loaded.num_threads);
  o.Set("dtype", loaded.dtype);
  o.Set("weights", loaded.weights);
  o.Set("kvCacheDtype", loaded.kv_cache_dtype);
  o.Set("device", loaded.device);
  o.Set("loadSeconds", loaded.load_seconds);
  o.Set("loadGBPerSecond", loaded.load_gb_per_s);
  o.Set("sampling", loaded.sampling);
  if (!loaded.sampling_note.empty()) o.Set("samplingNote", loaded.sampling_note);
  if (!loaded.decode_kernels.empty()) o.Set("decodeKernels", loaded.decode_kernels);
  return o;
}

Napi::Value EngineBinding::Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_) {
    auto done = Napi::Promise::Deferred::New(env);
    done.Resolve(env.Undefined());
    return done.Promise();
  }
  closed_ = true;
  if (state_->shut()) state_->tsfn.Release();
  if (!primary()) {
    // Another thread's engine: only this consumer ends; its live requests are aborted.
    runner().detach(consumer_);
    Unref();
    auto done = Napi::Promise::Deferred::New(env);
    done.Resolve(env.Undefined());
    return done.Promise();
  }
  runner().stop();
  auto* worker = new CloseWorker(env, &runner(), [this] { Unref(); });
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace strata::addon
