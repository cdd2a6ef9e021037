// The one native error type: a stable code for programs (the catalogue's STRATA_* strings,
// which the N-API layer puts on the JS error's `code`) and a message for people. The core
// (EngineError) and the model library (ModelError) each name their own codes.
#pragma once

#include <stdexcept>
#include <string>

namespace strata {

class CodedError : public std::runtime_error {
 public:
  CodedError(std::string code, const std::string& message) : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const noexcept { return code_; }

 private:
  std::string code_;
};

}  // namespace strata
