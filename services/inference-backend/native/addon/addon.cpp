// Module init of strata_native.node. Each JS-facing object gets its own C++ file as the
// engine binding grows; this file only registers them.
#include <napi.h>

#include "cuda_probe.h"
#include "engine_binding.h"

namespace {

Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("napiVersion", NAPI_VERSION);
#ifdef STRATA_WITH_CUDA
  out.Set("cuda", true);
  out.Set("cudaArchs", STRATA_CUDA_ARCHS);
  out.Set("nvcc", STRATA_NVCC_RELEASE);
#else
  out.Set("cuda", false);
#endif
  out.Set("compiler", __VERSION__);
  out.Set("grammar", strata::grammar_available());
  if (strata::grammar_available()) out.Set("llguidance", strata::Grammar::version());
  return out;
}

Napi::Value CudaInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  strata::CudaProbe probe = strata::probe_cuda();
  Napi::Object out = Napi::Object::New(env);
  out.Set("compiled", probe.compiled);
  out.Set("available", !probe.devices.empty());
  if (!probe.unavailable_reason.empty()) out.Set("reason", probe.unavailable_reason);
  Napi::Array devices = Napi::Array::New(env, probe.devices.size());
  for (size_t i = 0; i < probe.devices.size(); ++i) {
    const auto& d = probe.devices[i];
    Napi::Object dev = Napi::Object::New(env);
    dev.Set("index", d.index);
    dev.Set("name", d.name);
    dev.Set("computeCapability", std::to_string(d.sm_major) + "." + std::to_string(d.sm_minor));
    dev.Set("totalMemoryBytes", static_cast<double>(d.total_memory_bytes));
    devices[i] = dev;
  }
  out.Set("devices", devices);
  out.Set("smokeKernelOk", probe.smoke_kernel_ok);
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("buildInfo", Napi::Function::New(env, BuildInfo, "buildInfo"));
  exports.Set("cudaInfo", Napi::Function::New(env, CudaInfo, "cudaInfo"));
  exports.Set("NativeEngine", strata::addon::EngineBinding::Define(env));
  exports.Set("loadEngine", Napi::Function::New(env, strata::addon::EngineBinding::Load, "loadEngine"));
  exports.Set("attachEngine", Napi::Function::New(env, strata::addon::EngineBinding::AttachShared, "attachEngine"));
  exports.Set("loadGrammar", Napi::Function::New(env, strata::addon::EngineBinding::LoadGrammar, "loadGrammar"));
  return exports;
}

}  // namespace

NODE_API_MODULE(strata_native, Init)
