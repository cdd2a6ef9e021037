// Grammars for structured output: compiles a JSON schema, a regex or a Lark grammar into a
// TokenConstraint (core/include/strata/constraint.h) over one model's vocabulary, with
// llguidance (https://github.com/guidance-ai/llguidance, linked through its C API).
//
// A Grammar is built once per model from its tokenizer.json (llguidance reads each token's
// bytes from it: byte-level BPE and SentencePiece alike). compile() runs on any thread; every
// failure a request can cause is an EngineError with code STRATA_INVALID_GRAMMAR whose message
// names the problem (an unsupported schema keyword, a regex syntax error, a grammar that admits
// no output at all).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/constraint.h"

namespace strata {

namespace errc {
inline constexpr const char* kInvalidGrammar = "STRATA_INVALID_GRAMMAR";  // a constraint that cannot be used
inline constexpr const char* kGrammarUnavailable = "STRATA_GRAMMAR_UNAVAILABLE";  // built without llguidance
}  // namespace errc

// The kinds compile() accepts, as llguidance names them.
//   "json_schema": data is a JSON schema (a JSON text)
//   "json_object": any JSON object (data ignored)
//   "regex":       data is a regular expression (Rust regex syntax), matched in full
//   "lark":        data is a Lark-style grammar (llguidance's dialect; choice lists become one)
struct GrammarOptions {
  std::string tokenizer_json;      // the model's tokenizer.json text
  int32_t vocab_size = 0;          // the model's logits width (>= the tokenizer's ids)
  std::vector<int32_t> eos_token_ids;  // each ends a complete output; the first is the main one
};

class Grammar {
 public:
  // Throws EngineError(STRATA_INVALID_CONFIG) when llguidance cannot read the tokenizer.
  static std::shared_ptr<Grammar> load(const GrammarOptions& options);
  ~Grammar();
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

  // A fresh constraint at the start of the output. Throws EngineError(STRATA_INVALID_GRAMMAR).
  std::unique_ptr<TokenConstraint> compile(const std::string& kind, const std::string& data) const;
  int32_t vocab_size() const { return vocab_size_; }
  size_t mask_words() const { return (static_cast<size_t>(vocab_size_) + 31) / 32; }
  // llguidance's version line, for logs and /v1/models.
  static std::string version();

 private:
  struct Tokenizer;
  Grammar(std::unique_ptr<Tokenizer> tokenizer, int32_t vocab_size);
  std::unique_ptr<Tokenizer> tokenizer_;
  int32_t vocab_size_;
};

// False when the engine was built without llguidance (no cargo at build time): Grammar::load
// then throws STRATA_GRAMMAR_UNAVAILABLE.
bool grammar_available();

}  // namespace strata
