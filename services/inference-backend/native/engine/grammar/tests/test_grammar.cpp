// The grammar module on llguidance with a real tokenizer (tinystories-656k's tokenizer.json from
// STRATA_MODELS_DIR), and the engine decoding under constraints on the CPU backend: every token
// it samples is one the grammar allowed, and a request ends when its grammar is complete.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "../../core/tests/test_util.h"  // TEST_CASE, CHECK
#include "constrained_decoding.h"
#include "strata/coded_error.h"
#include "strata/engine_runner.h"
#include "strata/grammar.h"

using namespace strata;

namespace {

constexpr int32_t kVocab = 2048;  // tinystories-656k
constexpr int32_t kEos = 2;       // <|end_story|>

std::string tokenizer_json() {
  const char* models = std::getenv("STRATA_MODELS_DIR");
  if (models == nullptr) return "";
  std::ifstream in(std::filesystem::path(models) / "tinystories-656k" / "tokenizer.json");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::shared_ptr<Grammar> load_grammar() {
  if (!grammar_available()) {
    const char* require = std::getenv("STRATA_REQUIRE_GRAMMAR");
    if (require != nullptr && std::string(require) == "1") {
      std::printf("  built without llguidance, and STRATA_REQUIRE_GRAMMAR=1 makes that a failure\n");
      ++strata_test::failures();
    } else {
      strata_test::skip("built without llguidance (no cargo at build time)");
    }
    return nullptr;
  }
  const std::string json = tokenizer_json();
  if (json.empty()) {
    strata_test::skip("tinystories-656k/tokenizer.json not found (STRATA_MODELS_DIR)");
    return nullptr;
  }
  return Grammar::load({json, kVocab, {kEos}});
}

// The code and message compile() throws, or "" when it compiles.
std::string compile_error(const Grammar& g, const std::string& kind, const std::string& data) {
  try {
    g.compile(kind, data);
  } catch (const CodedError& e) {
    return e.code() + ": " + e.what();
  }
  return "";
}

int32_t allowed_count(const std::vector<uint32_t>& words) {
  int32_t n = 0;
  for (int32_t t = 0; t < kVocab; ++t) n += mask_allows(words.data(), t);
  return n;
}

}  // namespace

TEST_CASE("a regex admits only its tokens, and ends the output when complete") {
  auto g = load_grammar();
  if (!g) return;
  CHECK(!Grammar::version().empty());
  auto c = g->compile("regex", "[0-9]{3}");
  std::vector<uint32_t> mask(g->mask_words());
  CHECK(c->compute_mask(mask.data(), mask.size()));
  // The vocabulary has the single digits (ids 11-20) and merged pieces; only pieces of digits
  // can start a 3-digit number, and never the end token.
  CHECK(mask_allows(mask.data(), 11));
  CHECK(mask_allows(mask.data(), 20));
  CHECK(!mask_allows(mask.data(), kEos));
  CHECK(!mask_allows(mask.data(), 26));  // 'A'
  int32_t steps = 0;
  while (!c->is_stopped() && steps < 10) {
    CHECK(c->compute_mask(mask.data(), mask.size()));
    CHECK(allowed_count(mask) > 0);
    int32_t pick = -1;
    for (int32_t t = 0; t < kVocab && pick < 0; ++t) {
      if (mask_allows(mask.data(), t)) pick = t;
    }
    CHECK(c->commit(pick));
    ++steps;
  }
  CHECK(c->is_stopped());
  CHECK(steps <= 4);  // three digits (or fewer merged pieces), then the end token
}

TEST_CASE("a token the mask forbids is refused by commit") {
  auto g = load_grammar();
  if (!g) return;
  auto c = g->compile("regex", "[0-9]+");
  CHECK(!c->commit(26));  // 'A'
  CHECK(!c->error().empty());
}

TEST_CASE("bad constraints are refused with STRATA_INVALID_GRAMMAR naming the problem") {
  auto g = load_grammar();
  if (!g) return;
  const std::string kind = compile_error(*g, "xml", "<a/>");
  CHECK(kind.find("STRATA_INVALID_GRAMMAR") == 0);
  CHECK(kind.find("unknown constraint kind 'xml'") != std::string::npos);
  const std::string regex = compile_error(*g, "regex", "([0-9]");
  CHECK(regex.find("STRATA_INVALID_GRAMMAR") == 0);
  const std::string json = compile_error(*g, "json_schema", "{\"type\": \"object\",");
  CHECK(json.find("STRATA_INVALID_GRAMMAR") == 0);
  const std::string keyword = compile_error(*g, "json_schema", R"({"type": "array", "uniqueItems": true})");
  std::printf("  unsupported keyword: %s\n", keyword.c_str());
  CHECK(keyword.find("STRATA_INVALID_GRAMMAR") == 0);
  CHECK(keyword.find("uniqueItems") != std::string::npos);
  const std::string empty = compile_error(*g, "json_schema", R"({"type": "integer", "minimum": 5, "maximum": 1})");
  std::printf("  unsatisfiable: %s\n", empty.c_str());
  CHECK(empty.find("STRATA_INVALID_GRAMMAR: Unsatisfiable schema") == 0);
  const std::string lark = compile_error(*g, "lark", "start: foo");
  CHECK(lark.find("STRATA_INVALID_GRAMMAR") == 0);
  // tinystories-656k's vocabulary has no '{' (nor byte pieces): no JSON can start.
  const std::string no_brace = compile_error(*g, "json_object", "");
  CHECK(no_brace.find("STRATA_INVALID_GRAMMAR: the constraint admits no output with this model") == 0);
  CHECK(no_brace.find('\n') == std::string::npos);
  CHECK(compile_error(*g, "lark", "start: \"yes\" | \"no\"").empty());
}

TEST_CASE("the engine samples only allowed tokens and stops when each grammar is complete") {
  auto g = load_grammar();
  if (!g) return;
  RunnerOptions o;
  o.dummy_preset = "tinystories-656k";  // random weights: any token is likely unconstrained
  o.dummy_seed = 11;
  o.num_threads = 1;
  auto runner = EngineRunner::load(o);
  Engine& engine = runner->engine();
  const std::vector<std::pair<std::string, std::string>> grammars = {
      {"regex", "[0-9]{3}-[0-9]{2}"},
      {"regex", "(cat|dog)s? (sat|ran)"},
      {"lark", "start: \"yes\" | \"no\" | \"maybe\""},
      {"lark", "start: item (\", \" item)*\nitem: /[a-z]+/"},
  };
  for (size_t i = 0; i < grammars.size(); ++i) {
    Request r;
    r.id = i + 1;
    r.prompt = {1, 5, 9};
    r.params.temperature = 1.0f;
    r.params.seed = 100 + i;
    r.params.max_tokens = 200;
    r.params.min_tokens = i == 2 ? 50 : 0;  // min_tokens cannot keep a complete choice going
    r.constraint = g->compile(grammars[i].first, grammars[i].second);
    engine.submit(std::move(r));
  }
  strata_test::Decoded d = strata_test::step_until_done(engine, 400);
  auto& out = d.tokens;
  auto& finished = d.finished;
  for (size_t i = 0; i < grammars.size(); ++i) {
    const uint64_t id = i + 1;
    std::printf("  %s: %zu tokens, finish %s\n", grammars[i].first.c_str(), out[id].size(), to_string(finished[id]));
    CHECK(finished.contains(id));
    bool stopped = false;
    CHECK(strata_test::replays(*g, grammars[i].first, grammars[i].second, out[id], stopped));
    if (finished[id] == FinishReason::kStop) CHECK(stopped);
  }
  CHECK(finished[1] == FinishReason::kStop);
  CHECK(finished[3] == FinishReason::kStop);
  CHECK(out[3].size() <= 4);  // a choice's pieces, then the end token
  const EngineStats s = engine.stats();
  CHECK(s.constraint_masks > 0);
  CHECK_EQ(s.constraint_errors, int64_t{0});
  CHECK(s.constraint_mask_seconds > 0.0);
}

TEST_MAIN()
