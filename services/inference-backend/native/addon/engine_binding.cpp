#include "engine_binding.h"

#if defined(__linux__)
#include <pthread.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "js_errors.h"
#include "strata/coded_error.h"
#include "strata/cpu_backend.h"
#include "strata/model_config.h"
#include "strata/model_source.h"
#ifdef STRATA_WITH_CUDA
#include "strata/cuda_backend.h"
#endif

namespace strata::addon {
namespace {

Napi::FunctionReference* g_constructor = nullptr;

// What loadEngine() accepts; checked in TS first, re-checked here for direct callers.
struct LoadOptions {
  std::string backend = "cpu";
  std::string model_dir;    // a Hugging Face directory, or empty with a dummy preset
  std::string dummy_preset; // e.g. "llama-3-8b" with random weights
  uint64_t dummy_seed = 0;
  int32_t num_threads = 0;
  EngineConfig engine;
  int64_t kv_cache_bytes = 0;       // 0: a fraction of MemAvailable
  double kv_memory_fraction = 0.1;  // of MemAvailable, when kv_cache_bytes is 0
  std::string dtype = "bfloat16";   // CUDA: bfloat16, float16 or float32 (the CPU backend is float32)
  double gpu_memory_utilization = 0.9;  // CUDA: share of the device's memory for weights + activations + KV
  bool cuda_graphs = true;              // CUDA: replay captured graphs for decode steps
  bool gpu_sampling = true;             // CUDA: sample on the device
};

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

LoadOptions parse_load_options(const Napi::Object& o) {
  LoadOptions opts;
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
  opts.gpu_memory_utilization = get_double(o, "gpuMemoryUtilization", 0.9);
  if (o.Get("cudaGraphs").IsBoolean()) opts.cuda_graphs = o.Get("cudaGraphs").As<Napi::Boolean>().Value();
  if (o.Get("gpuSampling").IsBoolean()) opts.gpu_sampling = o.Get("gpuSampling").As<Napi::Boolean>().Value();
  return opts;
}

// Bytes the kernel says can be allocated without swapping (/proc/meminfo MemAvailable).
int64_t mem_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// The pool: what was asked for, else a memory budget, capped at what max_num_seqs full-length
// sequences could ever use.
int32_t size_kv_pool(const LoadOptions& opts, const ModelConfig& model, int64_t bytes_per_block) {
  if (opts.engine.num_blocks > 0) return opts.engine.num_blocks;
  const int32_t bs = opts.engine.block_size;
  const int64_t max_len = opts.engine.max_model_len > 0 ? opts.engine.max_model_len : model.max_position_embeddings;
  const int64_t useful = static_cast<int64_t>(opts.engine.max_num_seqs) * ((max_len + bs - 1) / bs);
  const double budget = opts.kv_cache_bytes > 0 ? static_cast<double>(opts.kv_cache_bytes)
                                                : static_cast<double>(mem_available_bytes()) * opts.kv_memory_fraction;
  const int64_t affordable = static_cast<int64_t>(budget / static_cast<double>(bytes_per_block));
  return static_cast<int32_t>(std::min<int64_t>({useful, affordable, std::numeric_limits<int32_t>::max()}));
}

class LoadWorker : public Napi::AsyncWorker {
 public:
  LoadWorker(Napi::Env env, LoadOptions opts, Napi::Function on_step)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), opts_(std::move(opts)) {
    on_step_.Reset(on_step, 1);
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      if (opts_.backend == "cuda") {
        loaded_ = load_cuda();
        return;
      }
      if (opts_.backend != "cpu") {
        throw CodedError("STRATA_INVALID_CONFIG", "backend must be \"cpu\" or \"cuda\", got \"" + opts_.backend + "\"");
      }
      auto started = std::chrono::steady_clock::now();
      auto loaded = std::make_unique<LoadedEngine>();
      CpuBackendOptions backend_options{opts_.num_threads};
      std::unique_ptr<CpuBackend> cpu =
          opts_.model_dir.empty()
              ? std::make_unique<CpuBackend>(preset_model_config(opts_.dummy_preset), opts_.dummy_seed, backend_options)
              : std::make_unique<CpuBackend>(opts_.model_dir, backend_options);
      loaded->backend_name = "cpu";
      loaded->kernel_isa = cpu->kernel_isa();
      loaded->weights = cpu->weights_format();
      loaded->num_threads = cpu->num_threads();
      loaded->kv_bytes_per_block = cpu->kv_bytes_per_block(opts_.engine.block_size);
      EngineConfig config = opts_.engine;
      config.num_blocks = size_kv_pool(opts_, cpu->config(), loaded->kv_bytes_per_block);
      loaded->backend = std::move(cpu);
      loaded->engine = std::make_unique<Engine>(*loaded->backend, config);
      loaded->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      loaded_ = std::move(loaded);
    } catch (...) {
      error_ = capture_current_error();
    }
  }

  // The CUDA backend: the KV pool is what the profiling pass leaves of gpu_memory_utilization
  // x the device's memory, capped like the CPU pool at max_num_seqs full-length sequences.
  std::unique_ptr<LoadedEngine> load_cuda() {
#ifdef STRATA_WITH_CUDA
    if (opts_.model_dir.empty()) {
      throw CodedError("STRATA_INVALID_CONFIG", "the cuda backend loads a model directory; dummy presets run on \"cpu\"");
    }
    if (resolve_model_source(opts_.model_dir).kind == ModelSource::Kind::kGguf) {
      throw CodedError("STRATA_INVALID_CONFIG",
                       "the cuda backend does not load GGUF files yet (its Q4_0/Q4_1/Q8_0 kernels exist, the loader "
                       "does not); serve " + opts_.model_dir + " with backend \"cpu\", or a Hugging Face directory on \"cuda\"");
    }
    CudaBackendOptions options;
    if (opts_.dtype == "bfloat16") options.dtype = cuda::DType::kBF16;
    else if (opts_.dtype == "float16") options.dtype = cuda::DType::kF16;
    else if (opts_.dtype == "float32") options.dtype = cuda::DType::kF32;
    else throw CodedError("STRATA_INVALID_CONFIG", "dtype must be bfloat16, float16 or float32, got \"" + opts_.dtype + "\"");
    if (!(opts_.gpu_memory_utilization > 0.0 && opts_.gpu_memory_utilization <= 1.0)) {
      throw CodedError("STRATA_INVALID_CONFIG", "gpuMemoryUtilization must be in (0, 1], got " +
                                                    std::to_string(opts_.gpu_memory_utilization));
    }
    options.max_batch_tokens = opts_.engine.max_num_batched_tokens;
    options.max_seqs = opts_.engine.max_num_seqs;
    options.max_model_len = opts_.engine.max_model_len;
    options.cuda_graphs = opts_.cuda_graphs;
    options.sample_on_device = opts_.gpu_sampling;
    auto started = std::chrono::steady_clock::now();
    auto loaded = std::make_unique<LoadedEngine>();
    auto gpu = std::make_unique<CudaBackend>(opts_.model_dir, options);
    loaded->backend_name = "cuda";
    loaded->kernel_isa = "cuda";
    loaded->device = gpu->device_name();
    loaded->dtype = opts_.dtype;
    loaded->weights = opts_.dtype;
    loaded->load_gb_per_s = gpu->load_stats().gb_per_s();
    loaded->sampling = gpu->samples_on_device() ? "gpu" : "cpu";
    loaded->sampling_note = gpu->sampling_note();
    loaded->kv_bytes_per_block = gpu->kv_bytes_per_block(opts_.engine.block_size);
    EngineConfig config = opts_.engine;
    if (config.num_blocks <= 0) {
      const int64_t max_len = config.max_model_len > 0 ? config.max_model_len : gpu->config().max_position_embeddings;
      const int64_t useful = int64_t{config.max_num_seqs} * ((max_len + config.block_size - 1) / config.block_size);
      config.num_blocks = static_cast<int32_t>(
          std::min<int64_t>(useful, gpu->profile_kv_blocks(config.block_size, opts_.gpu_memory_utilization)));
    }
    loaded->backend = std::move(gpu);
    loaded->engine = std::make_unique<Engine>(*loaded->backend, config);
    loaded->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return loaded;
#else
    throw CodedError("STRATA_INVALID_CONFIG",
                     "backend \"cuda\" is not in this build: build the addon with STRATA_CUDA_HOME set to a CUDA "
                     "toolkit; use backend \"cpu\"");
#endif
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (!error_.code.empty()) {
      deferred_.Reject(to_js_error(env, error_).Value());
      return;
    }
    Napi::Object engine = g_constructor->New({});
    EngineBinding::Unwrap(engine)->Adopt(std::move(loaded_), on_step_.Value());
    deferred_.Resolve(engine);
  }

 private:
  Napi::Promise::Deferred deferred_;
  Napi::FunctionReference on_step_;
  LoadOptions opts_;
  std::unique_ptr<LoadedEngine> loaded_;
  CapturedError error_;
};

// Joins the loop thread off the JS thread, so a loop blocked handing a step to JS can finish,
// then lets the JS object be collected.
class CloseWorker : public Napi::AsyncWorker {
 public:
  CloseWorker(Napi::Env env, std::thread loop, std::function<void()> on_joined)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        loop_(std::move(loop)),
        on_joined_(std::move(on_joined)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    if (loop_.joinable()) loop_.join();
  }
  void OnOK() override {
    on_joined_();
    deferred_.Resolve(Env().Undefined());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::thread loop_;
  std::function<void()> on_joined_;
};

FinishReason parse_abort_reason(const Napi::Value& v) {
  if (v.IsString() && v.As<Napi::String>().Utf8Value() == "timeout") return FinishReason::kTimeout;
  return FinishReason::kAbort;
}

// FNV-1a over the tenant name: requests share prefix-cache blocks only within one tenant.
uint64_t tenant_salt(const std::string& tenant) {
  if (tenant.empty()) return 0;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : tenant) h = (h ^ c) * 1099511628211ull;
  return h;
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

// Undelivered steps the loop may run ahead of JS; past this it waits, so a stalled event loop
// slows the engine and never loses tokens.
constexpr size_t kMaxUndeliveredSteps = 64;

// Runs on the JS thread: hands every step that accumulated to onSteps in one call. The mailbox
// stays marked scheduled until JS calls resumeSteps().
void DeliverSteps(Napi::Env env, Napi::Function fn, std::shared_ptr<StepMailbox>* ref) {
  std::unique_ptr<std::shared_ptr<StepMailbox>> owned(ref);
  StepMailbox& box = **owned;
  std::vector<StepMessage> steps;
  {
    std::lock_guard lock(box.mu);
    steps.swap(box.steps);
  }
  box.space.notify_all();
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
                                   });
  g_constructor = new Napi::FunctionReference(Napi::Persistent(cls));
  return cls;
}

Napi::Value EngineBinding::Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || !info[1].IsFunction()) {
    throw_js_error(env, "STRATA_INVALID_CONFIG", "loadEngine(options, onSteps): options object and function required");
  }
  auto* worker = new LoadWorker(env, parse_load_options(info[0].As<Napi::Object>()), info[1].As<Napi::Function>());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

EngineBinding::EngineBinding(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineBinding>(info) {}

// Only reached after close() (the object is Ref'd while its loop runs) or at environment
// teardown; joining here keeps a running loop from outliving the object either way.
EngineBinding::~EngineBinding() {
  StopLoop();
  if (loop_.joinable()) loop_.join();
}

void EngineBinding::Adopt(std::unique_ptr<LoadedEngine> loaded, Napi::Function on_step) {
  loaded_ = std::move(loaded);
  on_step_ = Napi::ThreadSafeFunction::New(Env(), on_step, "strata-engine-step", /*max queue*/ 0, 1);
  Ref();
  loop_ = std::thread([this] { Loop(); });
#if defined(__linux__)
  // Named before load() resolves, so top -H and /proc/<pid>/task show it from the start.
  pthread_setname_np(loop_.native_handle(), "strata-engine");
#endif
}

void EngineBinding::Loop() {
  Engine& engine = *loaded_->engine;
  while (!stopping_.load()) {
    if (!engine.wait_for_work(std::chrono::milliseconds(100))) continue;
    StepMessage msg;
    try {
      msg.output = engine.step();
    } catch (...) {
      msg.fatal = capture_current_error();
    }
    const bool fatal = !msg.fatal.code.empty();
    const StepOutput& out = msg.output;
    // Steps that ran a forward go to JS even without output (a prefill chunk), for the metrics.
    if (fatal || out.num_batched_tokens > 0 || !out.aborted.empty()) {
      if (!Post(std::move(msg))) break;
    }
    if (fatal) break;
  }
}

bool EngineBinding::Post(StepMessage message) {
  StepMailbox& box = *mailbox_;
  std::unique_lock lock(box.mu);
  box.space.wait(lock, [&] { return box.steps.size() < kMaxUndeliveredSteps || stopping_.load(); });
  if (stopping_.load()) return false;
  box.steps.push_back(std::move(message));
  if (box.delivery_scheduled) return true;  // the scheduled or next delivery takes this step too
  box.delivery_scheduled = true;
  lock.unlock();
  return ScheduleDelivery();
}

bool EngineBinding::ScheduleDelivery() {
  auto* ref = new std::shared_ptr<StepMailbox>(mailbox_);
  if (on_step_.NonBlockingCall(ref, DeliverSteps) != napi_ok) {
    delete ref;  // closing: nothing will read the mailbox again
    return false;
  }
  return true;
}

Napi::Value EngineBinding::ResumeSteps(const Napi::CallbackInfo& info) {
  if (closed_) return info.Env().Undefined();
  {
    std::lock_guard lock(mailbox_->mu);
    if (mailbox_->steps.empty()) {
      mailbox_->delivery_scheduled = false;  // the loop's next Post() schedules
      return info.Env().Undefined();
    }
  }
  ScheduleDelivery();
  return info.Env().Undefined();
}

void EngineBinding::StopLoop() {
  stopping_.store(true);
  if (loaded_) loaded_->engine->wake();
  {
    std::lock_guard lock(mailbox_->mu);  // a Post() waiting for space sees stopping_
  }
  mailbox_->space.notify_all();
}

Napi::Value EngineBinding::Submit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_ || !loaded_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  if (!info[0].IsObject()) throw_js_error(env, "STRATA_INVALID_PARAM", "submit(request): request object required");
  Napi::Object r = info[0].As<Napi::Object>();
  Request req;
  req.id = static_cast<uint64_t>(get_double(r, "id", 0));
  Napi::Value prompt = r.Get("prompt");
  if (!prompt.IsTypedArray() || prompt.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw_js_error(env, "STRATA_INVALID_PARAM", "prompt must be an Int32Array of token ids");
  }
  Napi::Int32Array ids = prompt.As<Napi::Int32Array>();
  req.prompt.assign(ids.Data(), ids.Data() + ids.ElementLength());
  req.priority = get_int(r, "priority", 0);
  req.tenant_salt = tenant_salt(get_string(r, "tenant"));
  Napi::Value params = r.Get("params");
  if (params.IsObject()) req.params = parse_params(params.As<Napi::Object>());
  try {
    loaded_->engine->submit(std::move(req));
  } catch (...) {
    throw to_js_error(env, capture_current_error());
  }
  return env.Undefined();
}

Napi::Value EngineBinding::Abort(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_ || !loaded_) return Napi::Boolean::New(env, false);
  uint64_t id = static_cast<uint64_t>(info[0].ToNumber().DoubleValue());
  return Napi::Boolean::New(env, loaded_->engine->abort(id, parse_abort_reason(info[1])));
}

Napi::Value EngineBinding::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!loaded_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  EngineStats s = loaded_->engine->stats();
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
  return o;
}

Napi::Value EngineBinding::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!loaded_) throw_js_error(env, "STRATA_ENGINE_CLOSED", "the engine is closed");
  const ModelConfig& m = loaded_->backend->config();
  const EngineConfig& c = loaded_->engine->config();
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
  engine.Set("kvBytesPerBlock", static_cast<double>(loaded_->kv_bytes_per_block));
  Napi::Object o = Napi::Object::New(env);
  o.Set("model", model);
  o.Set("engine", engine);
  o.Set("backend", loaded_->backend_name);
  o.Set("kernelIsa", loaded_->kernel_isa);
  o.Set("threads", loaded_->num_threads);
  o.Set("dtype", loaded_->dtype);
  o.Set("weights", loaded_->weights);
  o.Set("device", loaded_->device);
  o.Set("loadSeconds", loaded_->load_seconds);
  o.Set("loadGBPerSecond", loaded_->load_gb_per_s);
  o.Set("sampling", loaded_->sampling);
  if (!loaded_->sampling_note.empty()) o.Set("samplingNote", loaded_->sampling_note);
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
  StopLoop();
  auto* worker = new CloseWorker(env, std::move(loop_), [this] { Unref(); });
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  on_step_.Release();
  return promise;
}

}  // namespace strata::addon
