#include "thread_pool.h"

#include <chrono>

#if defined(__linux__)
#include <sched.h>
#endif

namespace strata {

namespace {

// How long an idle worker polls for the next region before sleeping on the condition variable.
constexpr auto kSpin = std::chrono::microseconds(200);
constexpr int kFieldBits = 24;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
// Regions larger than this run in chunks (never reached by the backend's task counts).
constexpr int64_t kMaxTasks = int64_t{1} << kFieldBits;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

int ThreadPool::available_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = available_cpus();
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::work() {
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t next = word & kFieldMask, count = (word >> kFieldBits) & kFieldMask;
    if (next >= count) return;
    if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // Task `next` is ours and unfinished, so the region (and task_, context_) is still current.
    task_(context_, static_cast<int64_t>(next));
    pending_.fetch_sub(1, std::memory_order_acq_rel);
    word = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run(int64_t n, Task task, void* context) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) task(context, i);
    return;
  }
  for (int64_t begin = 0; begin < n; begin += kMaxTasks) {
    if (n > kMaxTasks) {
      // Huge regions: re-enter with a shifted index in chunks the claim word can count.
      struct Shifted {
        Task task;
        void* context;
        int64_t begin;
      } shifted{task, context, begin};
      const int64_t count = std::min(kMaxTasks, n - begin);
      run(count, [](void* c, int64_t i) { auto* s = static_cast<Shifted*>(c); s->task(s->context, s->begin + i); }, &shifted);
      continue;
    }
    task_ = task;
    context_ = context;
    pending_.store(n, std::memory_order_relaxed);
    const uint64_t tag = ((claim_.load(std::memory_order_relaxed) >> (2 * kFieldBits)) + 1) & 0xFFFF;
    claim_.store((tag << (2 * kFieldBits)) | (static_cast<uint64_t>(n) << kFieldBits), std::memory_order_release);
    // seq_cst pairs with the workers' sleeping_workers_ increment: either they see the new
    // generation before sleeping, or we see them asleep and wake them.
    generation_.fetch_add(1);
    if (sleeping_workers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    work();
    for (int polls = 0; pending_.load(std::memory_order_acquire) != 0; ++polls) {
      // A task is running on a worker; if that worker lost its CPU, let it have ours.
      if (polls < 4096) cpu_relax();
      else std::this_thread::yield();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;  // the constructor's generation: a region may start before this thread does
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    int polls = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      cpu_relax();
      if (++polls % 64 == 0 && std::chrono::steady_clock::now() > spin_until) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleeping_workers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleeping_workers_.fetch_sub(1);
        break;
      }
    }
    if (stopping_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    work();
  }
}

}  // namespace strata
