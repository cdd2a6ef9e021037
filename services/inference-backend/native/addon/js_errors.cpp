#include "js_errors.h"

namespace strata::addon {

Napi::Error to_js_error(Napi::Env env, const CapturedError& error) {
  Napi::Error err = Napi::Error::New(env, error.message);
  err.Set("code", Napi::String::New(env, error.code));
  return err;
}

void throw_js_error(Napi::Env env, const std::string& code, const std::string& message) {
  throw to_js_error(env, {code, message});
}

}  // namespace strata::addon
