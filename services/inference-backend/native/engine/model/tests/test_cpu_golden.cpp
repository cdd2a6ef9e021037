// tinystories-656k on the CPU backend against Hugging Face transformers (golden file written by
// tools/make_golden.py): greedy tokens identical for 5 prompts x 100 tokens, last-prompt-position
// logits within 1e-4; then the same prompts chunked, batched and staggered (prefill chunks of
// some sequences in the same steps as decodes of others) must reproduce every logit bit for bit.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "check.h"
#include "strata/cpu_backend.h"
#include "strata/json.h"

using namespace strata;

namespace {

constexpr int32_t kBlockSize = 16;

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;     // the reference's greedy continuation
  std::vector<float> last_logits;  // (vocab) at the last prompt position
};

std::vector<GoldenCase> read_golden(const std::string& path, int* new_tokens) {
  std::ifstream in(path);
  if (!in) {
    std::printf("  cannot read %s (regenerate it with tools/make_golden.py)\n", path.c_str());
    return {};
  }
  std::stringstream text;
  text << in.rdbuf();
  JsonValue root = parse_json(text.str());
  *new_tokens = static_cast<int>(root.find("new_tokens")->as_int64());
  std::vector<GoldenCase> cases;
  for (const JsonValue& c : root.find("cases")->items()) {
    GoldenCase g;
    for (const JsonValue& v : c.find("prompt_ids")->items()) g.prompt.push_back(static_cast<int32_t>(v.as_int64()));
    for (const JsonValue& v : c.find("greedy_ids")->items()) g.greedy.push_back(static_cast<int32_t>(v.as_int64()));
    for (const JsonValue& v : c.find("last_logits")->items()) g.last_logits.push_back(static_cast<float>(v.as_number()));
    cases.push_back(std::move(g));
  }
  return cases;
}

int32_t argmax(const float* logits, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;  // first of equal maxima, like torch.argmax
  return best;
}

// One sequence's greedy run: every logits row it produced (prompt end first) and its tokens.
struct Run {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> generated;
};

// Greedy decoding of `prompts` together. Each step, a sequence still in its prompt runs its next
// chunk of at most `chunk` tokens, one past it runs its last token; sequence s joins at step
// s * stagger. Sequence s owns blocks [s * blocks_per_seq, (s + 1) * blocks_per_seq).
std::vector<Run> greedy(CpuBackend& backend, const std::vector<std::vector<int32_t>>& prompts, int new_tokens, int chunk,
                        int stagger, int32_t blocks_per_seq) {
  const int32_t vocab = backend.config().vocab_size;
  const size_t n = prompts.size();
  std::vector<Run> runs(n);
  std::vector<std::vector<int32_t>> tokens = prompts, tables(n);
  std::vector<int32_t> done(n, 0);  // tokens whose KV is cached
  for (size_t s = 0; s < n; ++s)
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s) * blocks_per_seq + b);
  for (int step = 0;; ++step) {
    StepBatch batch;
    std::vector<size_t> wants;
    for (size_t s = 0; s < n; ++s) {
      if (step < static_cast<int>(s) * stagger || static_cast<int>(runs[s].generated.size()) == new_tokens) continue;
      const int32_t available = static_cast<int32_t>(tokens[s].size()) - done[s];
      const int32_t count = std::min(available, chunk);
      const bool last = count == available;
      batch.seqs.push_back({tokens[s].data() + done[s], count, done[s], tables[s].data(), blocks_per_seq, last});
      if (last) wants.push_back(s);
      done[s] += count;
    }
    if (batch.seqs.empty()) {
      bool finished = true;
      for (const Run& r : runs) finished &= static_cast<int>(r.generated.size()) == new_tokens;
      if (finished) break;
      continue;
    }
    std::vector<float> logits(wants.size() * vocab);
    backend.forward(batch, logits.data());
    for (size_t i = 0; i < wants.size(); ++i) {
      const float* row = logits.data() + i * vocab;
      runs[wants[i]].logits.emplace_back(row, row + vocab);
      const int32_t next = argmax(row, vocab);
      runs[wants[i]].generated.push_back(next);
      tokens[wants[i]].push_back(next);
    }
  }
  return runs;
}

}  // namespace

TEST_CASE("golden: tinystories-656k matches transformers and is batch invariant") {
  const char* models = std::getenv("STRATA_MODELS_DIR");
  if (models == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  int new_tokens = 0;
  const std::vector<GoldenCase> cases = read_golden(std::string(STRATA_GOLDEN_DIR) + "/tinystories-656k.json", &new_tokens);
  CHECK_EQ(cases.size(), size_t{5});
  if (cases.empty()) return;
  CHECK_EQ(new_tokens, 100);

  CpuBackend backend(std::filesystem::path(models) / "tinystories-656k");
  const int32_t vocab = backend.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  size_t longest = 0;
  for (const GoldenCase& c : cases) {
    prompts.push_back(c.prompt);
    longest = std::max(longest, c.prompt.size());
  }
  const int32_t blocks_per_seq = static_cast<int32_t>((longest + new_tokens + kBlockSize - 1) / kBlockSize);
  backend.allocate_kv(blocks_per_seq * static_cast<int32_t>(cases.size()), kBlockSize);
  std::printf("  kernels: %s, threads: %d\n", backend.kernel_isa().c_str(), backend.num_threads());

  // Alone, whole prompt in one step: against the reference.
  std::vector<Run> alone;
  double worst = 0.0;
  for (size_t s = 0; s < cases.size(); ++s) {
    alone.push_back(greedy(backend, {prompts[s]}, new_tokens, 1 << 20, 0, blocks_per_seq)[0]);
    double max_diff = 0.0;
    for (int32_t i = 0; i < vocab; ++i)
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(alone[s].logits[0][i]) - cases[s].last_logits[i]));
    worst = std::max(worst, max_diff);
    int agree = 0;
    while (agree < new_tokens && alone[s].generated[agree] == cases[s].greedy[agree]) ++agree;
    std::printf("  prompt %zu (%zu tokens): max |logit - transformers| = %.3g, greedy agrees for %d/%d tokens\n", s,
                prompts[s].size(), max_diff, agree, new_tokens);
    CHECK(max_diff <= 1e-4);
    CHECK(alone[s].generated == cases[s].greedy);
  }
  std::printf("  worst max-abs logit difference: %.3g\n", worst);

  // Same sequences, other step shapes: every logit row identical to the bit.
  struct Variant {
    const char* name;
    int chunk, stagger;
    bool together;
  };
  for (const Variant& v : {Variant{"alone, prefill chunks of 7", 7, 0, false}, Variant{"all 5 in one forward per step", 1 << 20, 0, true},
                           Variant{"all 5, chunks of 7, staggered by 3 steps", 7, 3, true}}) {
    std::vector<Run> runs;
    if (v.together) {
      runs = greedy(backend, prompts, new_tokens, v.chunk, v.stagger, blocks_per_seq);
    } else {
      for (const auto& prompt : prompts) runs.push_back(greedy(backend, {prompt}, new_tokens, v.chunk, v.stagger, blocks_per_seq)[0]);
    }
    bool identical = true;
    for (size_t s = 0; s < runs.size(); ++s) identical &= runs[s].logits == alone[s].logits && runs[s].generated == alone[s].generated;
    std::printf("  %s: %s\n", v.name, identical ? "bit-identical" : "DIFFERENT");
    CHECK(identical);
  }
}

TEST_MAIN()
