// A per-sequence restriction of the next token: the state of a grammar (a JSON schema, a regex,
// a choice list) that the sequence's output must follow. The core only deals in this interface;
// the grammar module (../../grammar) implements it on llguidance.
//
// The engine asks for the allowed set before every sampled token of a constrained sequence, on
// its mask thread while the step's forward pass runs, and reports each sampled token after the
// step. The two never overlap for one sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Writes the allowed set of the next token: bit (t % 32) of words[t / 32] set means token t may
  // come next. n_words is ceil(vocab_size / 32). False on an internal error (error() says).
  virtual bool compute_mask(uint32_t* words, size_t n_words) = 0;
  // The token that was sampled; false when the constraint cannot take it (error() says).
  virtual bool commit(int32_t token) = 0;
  // True once the grammar is complete and nothing more may follow (an end token was taken, or
  // the grammar admits no longer output).
  virtual bool is_stopped() const = 0;
  virtual std::string error() const = 0;
};

inline bool mask_allows(const uint32_t* words, int32_t token) {
  return ((words[static_cast<uint32_t>(token) >> 5] >> (static_cast<uint32_t>(token) & 31u)) & 1u) != 0;
}

}  // namespace strata
