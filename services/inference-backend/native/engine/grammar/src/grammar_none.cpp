// The grammar module of an engine built without llguidance (cargo was not found at build time):
// every structured-output request is refused with a code that says why.
#include "strata/errors.h"
#include "strata/grammar.h"

namespace strata {

struct Grammar::Tokenizer {};

Grammar::Grammar(std::unique_ptr<Tokenizer> tokenizer, int32_t vocab_size)
    : tokenizer_(std::move(tokenizer)), vocab_size_(vocab_size) {}
Grammar::~Grammar() = default;

std::shared_ptr<Grammar> Grammar::load(const GrammarOptions&) {
  throw EngineError(errc::kGrammarUnavailable,
                    "this engine was built without llguidance (cargo was not found when it was compiled), "
                    "so it cannot constrain output; rebuild it with Rust's cargo on the PATH");
}

std::unique_ptr<TokenConstraint> Grammar::compile(const std::string&, const std::string&) const {
  throw EngineError(errc::kGrammarUnavailable, "this engine was built without llguidance");
}

std::string Grammar::version() { return ""; }

bool grammar_available() { return false; }

}  // namespace strata
