// The one error type of the model library: a stable code for programs (the N-API layer turns
// it into a JS error's `code`) and a message for people that names the file and the field.
#pragma once

#include "strata/coded_error.h"

namespace strata {

// Stable error codes; never renamed once published.
namespace model_error_code {
inline constexpr const char* kConfig = "STRATA_MODEL_CONFIG";                // config.json missing, malformed or invalid
inline constexpr const char* kUnknownArchitecture = "STRATA_UNKNOWN_ARCHITECTURE";
inline constexpr const char* kWeights = "STRATA_MODEL_WEIGHTS";              // safetensors missing, truncated, wrong shape or dtype
inline constexpr const char* kBackendInput = "STRATA_BACKEND_INPUT";         // a StepBatch the backend cannot run
inline constexpr const char* kOutOfMemory = "STRATA_OUT_OF_MEMORY";          // the KV pool could not be allocated
}  // namespace model_error_code

class ModelError : public CodedError {
 public:
  using CodedError::CodedError;
};

}  // namespace strata
