// A native failure as plain data (code, message), so it can cross threads: the loop thread
// catches, the consumer (the N-API binding, on the JS thread) turns it into a JS error.
#pragma once

#include <string>

namespace strata {

struct CapturedError {
  std::string code;  // the catalogue's STRATA_* string; empty: no error
  std::string message;
};

// Call inside a catch block: a CodedError (EngineError, ModelError) keeps its code;
// std::bad_alloc is STRATA_OUT_OF_MEMORY; anything else STRATA_ENGINE_ERROR with its what().
CapturedError capture_current_error();

}  // namespace strata
