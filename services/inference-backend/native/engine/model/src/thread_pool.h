// A small persistent pool for the CPU backend's data-parallel loops. A step runs a dozen or so
// parallel regions of tens of microseconds each, so idle workers spin briefly before sleeping
// (waking a sleeping thread costs about as much as the work), and a region ends when its tasks
// are done, not when every worker has checked in: a worker the OS has descheduled (other
// processes on the machine) never holds up the caller, which then runs the tasks itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread; 0 means every CPU this process may run on.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for every i in [0, n) and returns when all are done; the caller takes part.
  // fn must not throw. Not reentrant: one parallel_for at a time per pool.
  template <class Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    run(n, [](void* context, int64_t i) { (*static_cast<std::remove_reference_t<Fn>*>(context))(i); }, &fn);
  }

  static int available_cpus();

 private:
  using Task = void (*)(void* context, int64_t index);
  void run(int64_t n, Task task, void* context);
  // Claims and runs tasks of the current region until none is left.
  void work();
  void worker_loop();

  std::vector<std::thread> workers_;
  // The current region's claim word: (tag:16 | count:24 | next:24). A worker claims task
  // `next` by compare-and-swap, so a claim is always for the region the word describes; the
  // tag keeps two regions of the same size apart.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> pending_{0};      // tasks of the current region not finished yet
  Task task_ = nullptr;                  // stable while any task of the region is unfinished
  void* context_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per region, to wake workers
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

// fn(first, last) over [0, n) in runs of `per_run` items (the last shorter), the runs shared
// among the pool's threads; with no pool, or a pool of one, the caller runs them in order.
template <class Fn>
void for_each_run(ThreadPool* pool, int64_t n, int64_t per_run, Fn&& fn) {
  per_run = per_run < 1 ? 1 : per_run;
  const int64_t runs = (n + per_run - 1) / per_run;
  auto run = [&](int64_t t) { fn(t * per_run, (t + 1) * per_run < n ? (t + 1) * per_run : n); };
  if (pool != nullptr && pool->size() > 1 && runs > 1) {
    pool->parallel_for(runs, run);
  } else {
    for (int64_t t = 0; t < runs; ++t) run(t);
  }
}

}  // namespace strata
