// Load-time loops split across plain threads: a matrix's rows or tiles, each range writing
// memory no other range writes, so the result does not depend on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace strata {

// Threads worth starting for `work` units when `grain` of them repay a thread's start: at least
// 1, at most one a CPU (and 64).
inline int64_t threads_for(int64_t work, int64_t grain) {
  const int64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  return std::min<int64_t>({cpus, 64, std::max<int64_t>(1, work / grain)});
}

// fn(first, last) over [0, n) cut into `threads` contiguous ranges (at most n), each on a
// thread of its own, or on the caller's when there is one range; returns when all are done.
template <class Fn>
void split_work(int64_t n, int64_t threads, const Fn& fn) {
  threads = std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1));
  if (threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back([&fn, n, t, threads] { fn(n * t / threads, n * (t + 1) / threads); });
  for (std::thread& thread : pool) thread.join();
}

// memcpy of `bytes` bytes, in ranges of at least 4 MB on threads of their own (threads_for):
// a load's copies out of a mapped file, whose page faults and copying then share the CPUs.
inline void copy_split(void* dst, const void* src, int64_t bytes) {
  split_work(bytes, threads_for(bytes, int64_t{1} << 22), [&](int64_t first, int64_t last) {
    std::memcpy(static_cast<char*>(dst) + first, static_cast<const char*>(src) + first, static_cast<size_t>(last - first));
  });
}

}  // namespace strata
