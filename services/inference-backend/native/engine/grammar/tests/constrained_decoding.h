// What the grammar and runner tests share about decoding under constraints: stepping an engine
// until its requests are done, and replaying an output through a fresh constraint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "strata/engine.h"
#include "strata/grammar.h"

namespace strata_test {

struct Decoded {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, strata::FinishReason> finished;
};

// Steps `engine` (no loop thread) until nothing is left, at most max_steps times.
inline Decoded step_until_done(strata::Engine& engine, int max_steps) {
  Decoded d;
  for (int step = 0; step < max_steps && engine.has_unfinished(); ++step) {
    for (const strata::TokenEvent& ev : engine.step().tokens) {
      d.tokens[ev.request_id].push_back(ev.token);
      if (ev.finish_reason != strata::FinishReason::kNone) d.finished[ev.request_id] = ev.finish_reason;
    }
  }
  return d;
}

// Replays `tokens` through a fresh constraint: each must be allowed by the mask before it and
// taken by commit. Returns false at the first that is not; `stopped` says whether the grammar was
// complete after the last.
inline bool replays(const strata::Grammar& g, const std::string& kind, const std::string& data,
                    const std::vector<int32_t>& tokens, bool& stopped) {
  auto c = g.compile(kind, data);
  std::vector<uint32_t> mask(g.mask_words());
  for (int32_t t : tokens) {
    if (!c->compute_mask(mask.data(), mask.size()) || !strata::mask_allows(mask.data(), t) || !c->commit(t)) {
      return false;
    }
  }
  stopped = c->is_stopped();
  return true;
}

}  // namespace strata_test
