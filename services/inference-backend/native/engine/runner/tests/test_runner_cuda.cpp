// EngineRunner's CUDA path under the CPU emulation of the CUDA runtime: the backend choice, the
// KV pool from the profiling pass under the same rule as the CPU's, and a request served
// through the loop, on tinystories-656k and its GGUF file (STRATA_MODELS_DIR).
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "../../core/tests/test_util.h"
#include "../../grammar/tests/constrained_decoding.h"
#include "strata/coded_error.h"
#include "strata/engine_runner.h"
#include "strata/grammar.h"

using namespace strata;
using namespace std::chrono_literals;

namespace {

const char* models() { return std::getenv("STRATA_MODELS_DIR"); }

RunnerOptions cuda_tiny() {
  RunnerOptions o;
  o.backend = "cuda";
  o.model_dir = (std::filesystem::path(models()) / "tinystories-656k").string();
  o.dtype = "float32";
  o.cuda_graphs = false;
  o.engine.max_num_seqs = 4;
  o.engine.max_num_batched_tokens = 256;
  return o;
}

}  // namespace

TEST_CASE("cuda: sizes the pool from the profiling pass, capped at what max_num_seqs can use") {
  if (models() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  RunnerOptions o = cuda_tiny();
  auto runner = EngineRunner::load(o);
  CHECK_STR_EQ(runner->info().backend_name, "cuda");
  CHECK_STR_EQ(runner->info().dtype, "float32");
  CHECK_STR_EQ(runner->info().kv_cache_dtype, "float32");  // the KV pool is in the dtype
  CHECK(runner->info().kv_bytes_per_block > 0);
  // The emulated device has room for far more than 4 sequences of 512 tokens.
  CHECK_EQ(runner->engine().config().num_blocks, 4 * 32);
  o.engine.max_model_len = 64;  // 4 blocks a sequence
  CHECK_EQ(EngineRunner::load(o)->engine().config().num_blocks, 4 * 4);
  o.engine.num_blocks = 9;
  CHECK_EQ(EngineRunner::load(o)->engine().config().num_blocks, 9);
}

TEST_CASE("cuda: options it cannot honour are STRATA_INVALID_CONFIG") {
  if (models() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  const auto code_of = [](const RunnerOptions& o) {
    try {
      EngineRunner::load(o);
    } catch (const CodedError& e) {
      return e.code() + ": " + e.what();
    }
    return std::string();
  };
  RunnerOptions o = cuda_tiny();
  o.dtype = "int8";
  CHECK_STR_EQ(code_of(o), "STRATA_INVALID_CONFIG: dtype must be bfloat16, float16 or float32, got \"int8\"");
  o = cuda_tiny();
  o.kv_cache_dtype = "float16";  // dtype float32
  CHECK_STR_EQ(code_of(o), "STRATA_INVALID_CONFIG: the cuda backend keeps its KV cache in its dtype (float32): "
                           "kvCacheDtype must be auto or float32, got \"float16\"");
  o.kv_cache_dtype = "float32";
  CHECK_STR_EQ(EngineRunner::load(o)->info().kv_cache_dtype, "float32");
  o = cuda_tiny();
  o.gpu_memory_utilization = 1.5;
  CHECK(code_of(o).rfind("STRATA_INVALID_CONFIG: gpuMemoryUtilization must be in (0, 1]", 0) == 0);
  o = cuda_tiny();
  o.model_dir.clear();
  o.dummy_preset = "tinystories-656k";
  CHECK(code_of(o).rfind("STRATA_INVALID_CONFIG: the cuda backend loads a model directory", 0) == 0);
}

TEST_CASE("cuda: loads a GGUF file and says how it holds the weights") {
  if (models() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  RunnerOptions o = cuda_tiny();
  o.model_dir = (std::filesystem::path(models()) / "tinystories-656k-gguf").string();  // fp32 tensors
  auto f32 = EngineRunner::load(o);
  CHECK_STR_EQ(f32->info().weights, "float32");
  // fp32: every GEMM on cuBLAS (the GEMV kernels are bf16/fp16 only).
  CHECK_STR_EQ(f32->info().decode_kernels, "q/k/v cuBLAS + rope_write_kv, gate/up cuBLAS + silu_mul");
  o.dtype = "bfloat16";
  o.kv_cache_dtype = "auto";
  auto runner = EngineRunner::load(o);
  CHECK_STR_EQ(runner->info().weights, "bfloat16");
  CHECK_STR_EQ(runner->info().backend_name, "cuda");
  CHECK_STR_EQ(runner->info().decode_kernels, "q/k/v gemv_qkv_rope, gate/up gemv_swiglu");
}

TEST_CASE("cuda: the loop serves a request to its end") {
  if (models() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  auto runner = EngineRunner::load(cuda_tiny());
  std::atomic<int> notified{0};
  runner->start([&] {
    ++notified;
    return true;
  });
  Request r;
  r.id = 1;
  r.prompt = {1, 5, 9};
  r.params.ignore_eos = true;
  r.params.max_tokens = 4;
  runner->engine().submit(r);
  int tokens = 0;
  bool finished = false;
  for (int i = 0; i < 1000 && !finished; ++i) {
    for (const StepMessage& m : runner->steps()->take()) {
      CHECK(m.fatal.code.empty());
      for (const TokenEvent& e : m.output.tokens) {
        ++tokens;
        finished = finished || e.finish_reason == FinishReason::kLength;
      }
    }
    runner->steps()->resume();
    if (!finished) std::this_thread::sleep_for(10ms);
  }
  CHECK(finished);
  CHECK_EQ(tokens, 4);
  CHECK(notified.load() >= 1);
}

TEST_CASE("cuda: constrained requests are sampled on the device under their grammar's masks") {
  if (models() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  if (!grammar_available()) return strata_test::skip("built without llguidance (no cargo at build time)");
  auto runner = EngineRunner::load(cuda_tiny());
  CHECK_STR_EQ(runner->info().sampling, "gpu");
  std::ifstream in(std::filesystem::path(models()) / "tinystories-656k" / "tokenizer.json");
  std::stringstream json;
  json << in.rdbuf();
  auto grammar = Grammar::load({json.str(), runner->backend().config().vocab_size, runner->backend().config().eos_token_ids});
  const std::vector<std::pair<std::string, std::string>> grammars = {
      {"regex", "[0-9]{3}-[0-9]{2}"},
      {"lark", "start: \"yes\" | \"no\" | \"maybe\""},
      {"regex", "(cat|dog)s? (sat|ran)"},
  };
  Engine& engine = runner->engine();
  for (size_t i = 0; i < grammars.size(); ++i) {
    Request r;
    r.id = i + 1;
    r.prompt = {1, 5, 9};
    r.params.temperature = 1.0f;
    r.params.seed = 40 + i;
    r.params.max_tokens = 40;
    r.params.min_tokens = i == 1 ? 30 : 0;  // min_tokens cannot keep a complete choice going
    r.constraint = grammar->compile(grammars[i].first, grammars[i].second);
    engine.submit(std::move(r));
  }
  Request plain;  // an unconstrained row in the same steps
  plain.id = 9;
  plain.prompt = {1, 7};
  plain.params.ignore_eos = true;
  plain.params.max_tokens = 8;
  engine.submit(plain);
  strata_test::Decoded d = strata_test::step_until_done(engine, 200);
  auto& out = d.tokens;
  auto& finished = d.finished;
  for (size_t i = 0; i < grammars.size(); ++i) {
    const uint64_t id = i + 1;
    CHECK(finished[id] == FinishReason::kStop);
    bool stopped = false;
    CHECK(strata_test::replays(*grammar, grammars[i].first, grammars[i].second, out[id], stopped));
    CHECK(stopped);
  }
  CHECK(finished[9] == FinishReason::kLength);
  CHECK_EQ(out[9].size(), size_t{8});
  const EngineStats s = engine.stats();
  CHECK(s.constraint_masks > 0);
  CHECK_EQ(s.constraint_errors, int64_t{0});
}

TEST_MAIN()
