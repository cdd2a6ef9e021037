// Scheduler + block manager cost per step with a full batch of running sequences, and KV slot
// utilisation (tokens held / slots in used blocks). No model: each step's "forward" is free
// and every sequence that wants logits gets the token (last + 1) % vocab.
//   bench_scheduler [num_seqs=256] [steps=5000] [num_blocks=26000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <vector>

#include "strata/scheduler.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

// This thread's CPU time: unlike wall time, it leaves out time the OS ran something else.
static double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

int main(int argc, char** argv) {
  const int32_t num_seqs = argc > 1 ? std::atoi(argv[1]) : 256;
  const int32_t steps = argc > 2 ? std::atoi(argv[2]) : 5000;
  const int32_t num_blocks = argc > 3 ? std::atoi(argv[3]) : 26000;
  constexpr int32_t kBlockSize = 16, kVocab = 32000;

  BlockManager blocks(num_blocks, kBlockSize);
  Scheduler sched({.max_num_batched_tokens = 4096, .max_num_seqs = num_seqs, .max_model_len = 2048}, blocks);
  std::mt19937 rng(1);
  auto pick = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  std::vector<std::unique_ptr<Sequence>> live;
  uint64_t next_id = 0;
  auto make = [&] {  // prompt 128..1024 tokens, 64..512 outputs
    std::vector<int32_t> prompt(static_cast<size_t>(pick(128, 1024)));
    for (auto& t : prompt) t = pick(0, kVocab - 1);
    SamplingParams p;
    p.max_tokens = pick(64, 512);
    auto s = std::make_unique<Sequence>(++next_id, std::move(prompt), p);
    s->arrival = next_id;
    return s;
  };
  std::vector<std::unique_ptr<Sequence>> fresh;  // built outside the timed region
  for (int32_t i = 0; i < num_seqs; ++i) {
    live.push_back(make());
    sched.add(*live.back());
  }

  // Measure after 64 steps: the first prompts (~576 tokens each) take ~36 steps of 4096 to prefill.
  std::vector<double> times_us;
  double cpu_us = 0.0;
  double util_sum = 0.0, running_sum = 0.0, tokens_sum = 0.0;
  int64_t finished = 0;
  int64_t preempt_at_start = -1;
  for (int32_t step = 0, measured = 0; measured < steps; ++step) {
    while (static_cast<int32_t>(fresh.size()) < num_seqs / 8) fresh.push_back(make());
    const bool measuring = step >= 64;
    if (measuring && preempt_at_start < 0) preempt_at_start = sched.num_preemptions();

    const double c0 = thread_cpu_us();
    const auto t0 = Clock::now();
    const ScheduledStep& st = sched.schedule();
    sched.on_forward_done();
    int32_t new_seqs = 0;
    for (size_t i = 0; i < st.seqs.size(); ++i) {
      if (!st.batch.seqs[i].want_logits) continue;
      Sequence& s = *st.seqs[i];
      s.append_token((s.tokens.back() + 1) % kVocab);
      if (s.num_output_tokens() == s.params.max_tokens) {
        sched.finish(s, FinishReason::kLength);
        ++new_seqs;
      }
    }
    for (int32_t k = 0; k < new_seqs; ++k) {
      sched.add(*fresh.back());
      live.push_back(std::move(fresh.back()));
      fresh.pop_back();
    }
    const auto t1 = Clock::now();
    const double c1 = thread_cpu_us();

    if (!measuring) continue;
    ++measured;
    cpu_us += c1 - c0;
    finished += new_seqs;
    times_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    int64_t held = 0;
    for (const Sequence* s : sched.running()) held += s->num_computed_tokens;
    util_sum += static_cast<double>(held) / (static_cast<double>(blocks.num_used()) * kBlockSize);
    running_sum += sched.num_running();
    tokens_sum += st.num_tokens;
    // Finished sequences are no longer referenced by the scheduler: drop them.
    if (measured % 256 == 0) {
      std::erase_if(live, [](const auto& s) { return s->status == SeqStatus::kFinished; });
    }
  }

  std::vector<double> sorted = times_us;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0.0;
  for (double t : times_us) mean += t;
  mean /= static_cast<double>(times_us.size());
  const double n = static_cast<double>(times_us.size());
  std::printf("bench_scheduler: %d target running seqs, %d blocks x %d tokens, budget 4096 tokens/step\n",
              num_seqs, num_blocks, kBlockSize);
  std::printf("steps measured        %zu\n", times_us.size());
  std::printf("mean running seqs     %.1f\n", running_sum / n);
  std::printf("mean tokens per step  %.1f\n", tokens_sum / n);
  std::printf("sequences finished    %lld\n", static_cast<long long>(finished));
  std::printf("preemptions           %lld\n", static_cast<long long>(sched.num_preemptions() - preempt_at_start));
  std::printf("sched+BM us/step      wall: mean %.2f  p50 %.2f  p99 %.2f  max %.2f\n", mean,
              sorted[sorted.size() / 2], sorted[sorted.size() * 99 / 100], sorted.back());
  std::printf("                      thread CPU: mean %.2f\n", cpu_us / n);
  const auto slow = std::count_if(times_us.begin(), times_us.end(), [](double t) { return t > 1000.0; });
  std::printf("steps over 1 ms       %lld\n", static_cast<long long>(slow));
  std::printf("KV slot utilisation   %.4f (tokens held / slots of used blocks)\n", util_sum / n);
  const std::string err = blocks.check_invariants();
  if (!err.empty()) {
    std::printf("INVARIANT VIOLATED: %s\n", err.c_str());
    return 1;
  }
  return 0;
}
