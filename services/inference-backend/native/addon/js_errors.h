// Native failures cross into JS as Error objects with a stable `code` (the catalogue's
// STRATA_* strings). Errors caught on a worker thread are captured as plain data first
// (strata::CapturedError), because JS values may only be made on the JS thread.
#pragma once

#include <napi.h>

#include <string>

#include "strata/captured_error.h"

namespace strata::addon {

using strata::CapturedError;
using strata::capture_current_error;

Napi::Error to_js_error(Napi::Env env, const CapturedError& error);

[[noreturn]] void throw_js_error(Napi::Env env, const std::string& code, const std::string& message);

}  // namespace strata::addon
