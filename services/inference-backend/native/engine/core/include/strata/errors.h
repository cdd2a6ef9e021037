// The engine's error catalogue. Every failure a caller can cause is an EngineError with a
// stable code; the N-API layer turns it into a JS Error whose `code` is that string.
#pragma once

#include "strata/coded_error.h"

namespace strata {

namespace errc {
inline constexpr const char* kInvalidParam = "STRATA_INVALID_PARAM";         // a request field out of range
inline constexpr const char* kPromptTooLong = "STRATA_PROMPT_TOO_LONG";      // prompt (+ max_tokens) over max_model_len
inline constexpr const char* kInvalidConfig = "STRATA_INVALID_CONFIG";       // an engine setting out of range
inline constexpr const char* kKvCapacity = "STRATA_KV_CAPACITY";             // max_model_len does not fit the KV pool
inline constexpr const char* kDuplicateRequest = "STRATA_DUPLICATE_REQUEST"; // request id already live
inline constexpr const char* kUnknownRequest = "STRATA_UNKNOWN_REQUEST";     // request id not live
}  // namespace errc

class EngineError : public CodedError {
 public:
  using CodedError::CodedError;
};

}  // namespace strata
