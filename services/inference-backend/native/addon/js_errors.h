// Native failures cross into JS as Error objects with a stable `code` (the catalogue's
// STRATA_* strings). Errors caught on a worker thread are captured as plain data first,
// because JS values may only be made on the JS thread.
#pragma once

#include <napi.h>

#include <string>

namespace strata::addon {

struct CapturedError {
  std::string code;  // empty: no error
  std::string message;
};

// Call inside a catch block: a CodedError (EngineError, ModelError) keeps its code; anything else
// becomes STRATA_ENGINE_ERROR with its what().
CapturedError capture_current_error();

Napi::Error to_js_error(Napi::Env env, const CapturedError& error);

[[noreturn]] void throw_js_error(Napi::Env env, const std::string& code, const std::string& message);

}  // namespace strata::addon
