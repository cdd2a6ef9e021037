#include "js_errors.h"

#include <exception>
#include <new>

#include "strata/coded_error.h"

namespace strata::addon {

CapturedError capture_current_error() {
  try {
    throw;
  } catch (const CodedError& e) {
    return {e.code(), e.what()};
  } catch (const std::bad_alloc&) {
    return {"STRATA_OUT_OF_MEMORY", "the engine ran out of host memory"};
  } catch (const std::exception& e) {
    return {"STRATA_ENGINE_ERROR", e.what()};
  } catch (...) {
    return {"STRATA_ENGINE_ERROR", "unknown native exception"};
  }
}

Napi::Error to_js_error(Napi::Env env, const CapturedError& error) {
  Napi::Error err = Napi::Error::New(env, error.message);
  err.Set("code", Napi::String::New(env, error.code));
  return err;
}

void throw_js_error(Napi::Env env, const std::string& code, const std::string& message) {
  throw to_js_error(env, {code, message});
}

}  // namespace strata::addon
