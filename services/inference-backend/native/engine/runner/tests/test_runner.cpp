// EngineRunner on the real CPU backend (tinystories-656k's config, random weights): one KV pool
// rule, load errors, and the loop thread handing steps over through its StepQueue.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "../../core/tests/test_util.h"
#include "strata/coded_error.h"
#include "strata/engine_runner.h"

using namespace strata;
using namespace std::chrono_literals;

namespace {

RunnerOptions tiny(int32_t max_num_seqs = 8) {
  RunnerOptions o;
  o.dummy_preset = "tinystories-656k";  // max_position_embeddings 512
  o.dummy_seed = 7;
  o.num_threads = 1;
  o.engine.max_num_seqs = max_num_seqs;
  return o;
}

std::string load_error(const RunnerOptions& o) {
  try {
    EngineRunner::load(o);
  } catch (const CodedError& e) {
    return e.code() + ": " + e.what();
  }
  return "";
}

Request request(uint64_t id, int32_t max_tokens) {
  Request r;
  r.id = id;
  r.prompt = {1, 5, 9};
  r.params.temperature = 0.0f;
  r.params.ignore_eos = true;
  r.params.max_tokens = max_tokens;
  return r;
}

// The consumer's side as the binding has it: a notification wakes it, it takes everything,
// then resumes (delivering again at once when steps arrived meanwhile).
struct Consumer {
  std::mutex mu;
  std::condition_variable cv;
  int notified = 0;
  bool notify() {
    std::lock_guard lock(mu);
    ++notified;
    cv.notify_all();
    return true;
  }
  bool wait_notified(int at_least) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, [&] { return notified >= at_least; });
  }
};

bool has_thread_named(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string got;
    std::getline(comm, got);
    if (got == name) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("one KV pool rule: the configured size, else the budget capped at what max_num_seqs can use") {
  EngineConfig c;
  c.block_size = 16;
  c.max_num_seqs = 4;
  CHECK_EQ(useful_kv_blocks(c, 512), int64_t{4 * 32});
  c.max_model_len = 100;  // ceil(100 / 16) = 7 blocks a sequence
  CHECK_EQ(useful_kv_blocks(c, 512), int64_t{4 * 7});
  CHECK_EQ(kv_pool_blocks(c, 512, 10), 10);
  CHECK_EQ(kv_pool_blocks(c, 512, 1000), 28);
  CHECK_EQ(kv_pool_blocks(c, 512, -5), 0);
  c.num_blocks = 3;
  CHECK_EQ(kv_pool_blocks(c, 512, 1000), 3);
  c.num_blocks = 0;
  c.max_num_seqs = std::numeric_limits<int32_t>::max();
  c.max_model_len = 0;
  CHECK_EQ(kv_pool_blocks(c, std::numeric_limits<int32_t>::max(), std::numeric_limits<int64_t>::max()),
           std::numeric_limits<int32_t>::max());
}

TEST_CASE("tenants get distinct prefix-cache salts; no tenant is salt 0") {
  CHECK_EQ(tenant_salt(""), uint64_t{0});
  CHECK(tenant_salt("acme") != 0);
  CHECK(tenant_salt("acme") == tenant_salt("acme"));
  CHECK(tenant_salt("acme") != tenant_salt("acmf"));
  CHECK(tenant_salt("ab") != tenant_salt("ba"));
}

TEST_CASE("MemAvailable comes from meminfo; an unreadable file gives 0") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata-runner-meminfo";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "meminfo") << "MemTotal:       24000000 kB\nMemFree:         1000 kB\n"
                                    "MemAvailable:   12345678 kB\nBuffers:          42 kB\n";
  CHECK_EQ(mem_available_bytes((dir / "meminfo").string()), int64_t{12345678} * 1024);
  CHECK_EQ(mem_available_bytes((dir / "missing").string()), int64_t{0});
  CHECK(mem_available_bytes() > 0);  // this machine's
  std::filesystem::remove_all(dir);
}

TEST_CASE("loads the CPU backend and sizes the pool from the KV budget") {
  RunnerOptions o = tiny();
  auto probe = EngineRunner::load(o);
  const int64_t per_block = probe->info().kv_bytes_per_block;
  CHECK(per_block > 0);
  CHECK_STR_EQ(probe->info().backend_name, "cpu");
  CHECK_STR_EQ(probe->info().weights, "float32");
  CHECK_STR_EQ(probe->info().kv_cache_dtype, "float32");  // fp32 weights: auto is an fp32 cache
  CHECK_EQ(probe->info().num_threads, 1);
  // The default budget, a tenth of MemAvailable, affords far more than 8 full sequences use.
  CHECK_EQ(probe->engine().config().num_blocks, 8 * 32);
  {
    RunnerOptions f16 = o;  // an f16 cache: half the bytes a block
    f16.kv_cache_dtype = "float16";
    const auto half = EngineRunner::load(f16);
    CHECK_STR_EQ(half->info().kv_cache_dtype, "float16");
    CHECK_EQ(half->info().kv_bytes_per_block * 2, per_block);
  }
  o.engine.max_model_len = 64;  // 4 blocks a sequence, so a pool of 10 holds one
  CHECK_EQ(EngineRunner::load(o)->engine().config().num_blocks, 8 * 4);
  o.kv_cache_bytes = 10 * per_block + per_block / 2;
  CHECK_EQ(EngineRunner::load(o)->engine().config().num_blocks, 10);
  o.engine.num_blocks = 5;
  CHECK_EQ(EngineRunner::load(o)->engine().config().num_blocks, 5);
}

TEST_CASE("options it cannot honour are STRATA_INVALID_CONFIG, saying what to use") {
  RunnerOptions o = tiny();
  o.backend = "tpu";
  CHECK_STR_EQ(load_error(o), "STRATA_INVALID_CONFIG: backend must be \"cpu\" or \"cuda\", got \"tpu\"");
  o.backend = "cuda";  // without CUDA in the build, or with a dummy preset: both say so
  const std::string cuda = load_error(o);
  CHECK(cuda.rfind("STRATA_INVALID_CONFIG: ", 0) == 0);
  CHECK(cuda.find("cpu") != std::string::npos);
  o.backend = "cpu";
  o.kv_cache_dtype = "bfloat16";
  CHECK_STR_EQ(load_error(o), "STRATA_INVALID_CONFIG: kvCacheDtype must be auto, float32 or float16 on the cpu backend, "
                              "got \"bfloat16\"");
  o.kv_cache_dtype = "auto";
  o.dummy_preset = "gpt-5";
  CHECK(!load_error(o).empty());
}

TEST_CASE("the loop runs on its own named thread and hands over every token, once per delivery") {
  auto runner = EngineRunner::load(tiny());
  Consumer consumer;
  runner->start([&] { return consumer.notify(); });
  CHECK(has_thread_named("strata-engine"));
  runner->engine().submit(request(1, 5));
  runner->engine().submit(request(2, 3));
  std::map<uint64_t, int> tokens;
  std::map<uint64_t, FinishReason> finish;
  for (int delivery = 1; finish.size() < 2; ++delivery) {
    if (!consumer.wait_notified(delivery)) break;
    do {
      for (const StepMessage& m : runner->steps()->take()) {
        CHECK(m.fatal.code.empty());
        for (const TokenEvent& e : m.output.tokens) {
          ++tokens[e.request_id];
          if (e.finish_reason != FinishReason::kNone) finish[e.request_id] = e.finish_reason;
        }
      }
    } while (runner->steps()->resume());
  }
  CHECK_EQ(tokens[1], 5);
  CHECK_EQ(tokens[2], 3);
  CHECK(finish[1] == FinishReason::kLength);
  CHECK(finish[2] == FinishReason::kLength);
  runner->stop();
  runner->join();
  CHECK(!has_thread_named("strata-engine"));
}

TEST_CASE("a consumer that stops taking holds the loop at 64 steps; stop() still ends it") {
  auto runner = EngineRunner::load(tiny());
  Consumer consumer;
  runner->start([&] { return consumer.notify(); });
  runner->engine().submit(request(1, 400));
  CHECK(consumer.wait_notified(1));
  int64_t steps = -1;
  for (int i = 0; i < 200 && steps != runner->engine().stats().num_steps; ++i) {
    steps = runner->engine().stats().num_steps;
    std::this_thread::sleep_for(20ms);
  }
  // 64 waiting in the queue, the 65th computed and waiting for room.
  CHECK_EQ(steps, int64_t{65});
  CHECK_EQ(consumer.notified, 1);
  const auto asked = std::chrono::steady_clock::now();
  runner->stop();
  runner->join();
  CHECK(std::chrono::steady_clock::now() - asked < 2s);
  CHECK_EQ(runner->steps()->take().size(), size_t{64});
}

TEST_CASE("a consumer that is gone (notify false) ends the loop") {
  auto runner = EngineRunner::load(tiny());
  std::atomic<int> calls{0};
  runner->start([&] {
    ++calls;
    return false;
  });
  runner->engine().submit(request(1, 50));
  runner->join();  // returns without stop(): the loop ended by itself
  CHECK_EQ(calls.load(), 1);
  CHECK(runner->engine().stats().num_steps < 50);
}

// Everything one consumer was handed, by its own ids.
struct Received {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, FinishReason> finish;
  std::string fatal;
  void take(StepQueue& q) {
    do {
      for (const StepMessage& m : q.take()) {
        if (!m.fatal.code.empty()) fatal = m.fatal.code;
        for (const TokenEvent& e : m.output.tokens) {
          tokens[e.request_id].push_back(e.token);
          if (e.finish_reason != FinishReason::kNone) finish[e.request_id] = e.finish_reason;
        }
        for (const FinishedRequest& a : m.output.aborted) finish[a.request_id] = a.reason;
      }
    } while (q.resume());
  }
};

TEST_CASE("two consumers: each gets its own requests under its own ids, and a detach aborts the rest") {
  auto runner = EngineRunner::load(tiny());
  Consumer first, second;
  runner->start([&] { return first.notify(); });
  const int k = runner->attach([&] { return second.notify(); });
  CHECK_EQ(k, 1);
  // The same id in both: no clash, and greedy decoding gives both the same tokens.
  runner->submit(0, request(1, 6));
  runner->submit(k, request(1, 6));
  runner->submit(k, request(2, 4));
  Received a, b;
  for (int i = 0; i < 500 && (a.finish.size() < 1 || b.finish.size() < 2); ++i) {
    a.take(*runner->steps());
    b.take(*runner->steps_of(k));
    std::this_thread::sleep_for(2ms);
  }
  CHECK_EQ(a.tokens.size(), size_t{1});
  CHECK_EQ(a.tokens[1].size(), size_t{6});
  CHECK(b.tokens[1] == a.tokens[1]);
  CHECK_EQ(b.tokens[2].size(), size_t{4});
  CHECK(b.finish[2] == FinishReason::kLength);
  CHECK(second.notified >= 1);
  // An id beyond the consumer's range, a duplicate of its own, and an abort of another's id.
  CHECK_THROWS(runner->submit(k, request(StepRouter::kMaxLocalId + 1, 1)));
  runner->submit(k, request(3, 400));
  CHECK_THROWS(runner->submit(k, request(3, 1)));
  CHECK(!runner->abort(0, 3, FinishReason::kAbort));  // consumer 0 has no request 3
  runner->detach(k);                                   // request 3 is aborted for it
  // Consumer 0 gets every step (the forward's counts): it must keep taking for the loop to go on.
  for (int i = 0; i < 500 && runner->engine().stats().finished_abort < 1; ++i) {
    a.take(*runner->steps());
    std::this_thread::sleep_for(2ms);
  }
  CHECK_EQ(runner->engine().stats().finished_abort, int64_t{1});
  CHECK(runner->steps_of(k) == nullptr);
  try {
    runner->submit(k, request(4, 1));
    CHECK(false);
  } catch (const CodedError& e) {
    CHECK_STR_EQ(e.code(), "STRATA_ENGINE_CLOSED");
  }
  runner->stop();
  runner->join();
}

TEST_CASE("stop(): an attached consumer's last step fails with STRATA_ENGINE_CLOSED") {
  auto runner = EngineRunner::load(tiny());
  Consumer first, second;
  runner->start([&] { return first.notify(); });
  const int k = runner->attach([&] { return second.notify(); });
  std::shared_ptr<StepQueue> queue = runner->steps_of(k);
  runner->submit(k, request(1, 400));
  CHECK(second.wait_notified(1));
  runner->stop();
  runner->join();
  Received b;
  b.take(*queue);
  CHECK_STR_EQ(b.fatal, "STRATA_ENGINE_CLOSED");
  CHECK(b.finish.empty());
  try {
    runner->attach([] { return true; });
    CHECK(false);
  } catch (const CodedError& e) {
    CHECK_STR_EQ(e.code(), "STRATA_ENGINE_CLOSED");
  }
}

TEST_MAIN()
