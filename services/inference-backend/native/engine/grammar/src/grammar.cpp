#include "strata/grammar.h"

#include <cstring>
#include <string>
#include <vector>

#include "llguidance.h"
#include "strata/errors.h"

namespace strata {

struct Grammar::Tokenizer {
  LlgTokenizer* tok = nullptr;
  ~Tokenizer() { llg_free_tokenizer(tok); }
};

namespace {

[[noreturn]] void invalid(const std::string& message) { throw EngineError(errc::kInvalidGrammar, message); }

// One llguidance matcher: the grammar's state for one sequence.
class LlgConstraint final : public TokenConstraint {
 public:
  LlgConstraint(LlgMatcher* m, size_t mask_bytes) : m_(m), mask_bytes_(mask_bytes) {}
  ~LlgConstraint() override { llg_free_matcher(m_); }

  bool compute_mask(uint32_t* words, size_t n_words) override {
    // llguidance's mask is ceil(tokenizer vocab / 32) words, and the tokenizer was given the
    // model's vocab size, so the two agree; tokens past it stay disallowed.
    if (n_words * 4 < mask_bytes_) return false;
    if (n_words * 4 > mask_bytes_) std::memset(words, 0, n_words * 4);
    return llg_matcher_compute_mask_into(m_, words, mask_bytes_) == 0;
  }
  bool commit(int32_t token) override {
    return token >= 0 && llg_matcher_consume_token(m_, static_cast<uint32_t>(token)) == 0;
  }
  bool is_stopped() const override { return llg_matcher_is_stopped(m_); }
  // llguidance's first line: the rest is a dump of the parser's state, for its developers.
  std::string error() const override {
    const char* e = llg_matcher_get_error(m_);
    if (e == nullptr) return "";
    const std::string text(e);
    return text.substr(0, text.find('\n'));
  }

 private:
  LlgMatcher* m_;
  size_t mask_bytes_;
};

}  // namespace

Grammar::Grammar(std::unique_ptr<Tokenizer> tokenizer, int32_t vocab_size)
    : tokenizer_(std::move(tokenizer)), vocab_size_(vocab_size) {}

Grammar::~Grammar() = default;

std::shared_ptr<Grammar> Grammar::load(const GrammarOptions& o) {
  if (o.vocab_size < 1) throw EngineError(errc::kInvalidConfig, "grammar: vocab_size must be >= 1");
  if (o.eos_token_ids.empty()) {
    throw EngineError(errc::kInvalidConfig, "grammar: the model names no end-of-sequence token");
  }
  for (int32_t t : o.eos_token_ids) {
    if (t < 0 || t >= o.vocab_size) {
      throw EngineError(errc::kInvalidConfig, "grammar: eos token " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  LlgTokenizerInitV2 init{};
  init.struct_size = sizeof(init);
  init.vocab_size = static_cast<uint32_t>(o.vocab_size);
  init.tok_eos = static_cast<LlgToken>(o.eos_token_ids[0]);
  std::vector<LlgToken> extra(o.eos_token_ids.begin() + 1, o.eos_token_ids.end());
  init.tok_eos_extra = extra.empty() ? nullptr : extra.data();
  init.tok_eos_extra_count = static_cast<uint32_t>(extra.size());
  init.tokenizer_json = o.tokenizer_json.c_str();
  // llguidance only tokenizes the grammar's own literals, to find forced tokens; the engine takes
  // one sampled token at a time and checks each against the mask, so a greedy approximation
  // there affects no output's validity.
  init.use_approximate_greedy_tokenize_fn = true;
  char err[1024] = {0};
  auto t = std::make_unique<Tokenizer>();
  t->tok = llg_new_tokenizer_v2(&init, err, sizeof(err));
  if (t->tok == nullptr) throw EngineError(errc::kInvalidConfig, std::string("grammar: tokenizer: ") + err);
  return std::shared_ptr<Grammar>(new Grammar(std::move(t), o.vocab_size));
}

std::unique_ptr<TokenConstraint> Grammar::compile(const std::string& kind, const std::string& data) const {
  if (kind != "json_schema" && kind != "json_object" && kind != "regex" && kind != "lark") {
    invalid("unknown constraint kind '" + kind + "' (json_schema, json_object, regex or lark)");
  }
  LlgConstraintInit init;
  llg_constraint_init_set_defaults(&init, tokenizer_->tok);
  init.log_stderr_level = 0;  // errors come back as messages, not as lines on the service's stderr
  init.log_buffer_level = 0;
  const std::string payload = kind == "json_object" ? std::string("{}") : data;
  LlgMatcher* m = llg_new_matcher(&init, kind.c_str(), payload.c_str());
  const size_t mask_bytes = llg_matcher_get_mask_byte_size(m);
  auto c = std::make_unique<LlgConstraint>(m, mask_bytes);
  if (llg_matcher_is_error(m)) invalid(c->error());
  // A grammar whose language is empty leaves no token allowed at the start: refuse it here
  // rather than have the sampler face an empty set.
  std::vector<uint32_t> words(mask_words(), 0);
  const bool ok = c->compute_mask(words.data(), words.size());
  bool any = false;
  for (uint32_t w : words) any = any || w != 0;
  if (!ok || !any) {
    const std::string why = c->error();
    invalid("the constraint admits no output with this model: no token of its vocabulary can start it" +
            (why.empty() || why == "NoExtensionBias" ? std::string() : " (" + why + ")"));
  }
  return c;
}

std::string Grammar::version() { return llg_get_version(); }

bool grammar_available() { return true; }

}  // namespace strata
