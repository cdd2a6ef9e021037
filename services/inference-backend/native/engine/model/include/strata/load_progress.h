// How far a model load has got, for another thread to read while it runs: two int64 slots the
// caller owns, the checkpoint's bytes handled so far and its bytes in all (0 until known),
// written with atomic operations. A LoadProgress without slots reports nothing. The service's
// slots are a BigInt64Array that its event loop reads every few seconds while the engine loads
// (loadEngine's options.progress; ModelHost logs it).
#pragma once

#include <atomic>
#include <cstdint>

namespace strata {

struct LoadProgress {
  LoadProgress() = default;
  explicit LoadProgress(int64_t* slots_) : slots(slots_) {}

  int64_t* slots = nullptr;  // [0] bytes done, [1] bytes in all; 8-byte aligned

  // The load is about to handle `bytes` in all; nothing is done yet.
  void start(int64_t bytes) const {
    if (slots == nullptr) return;
    std::atomic_ref<int64_t>(slots[0]).store(0, std::memory_order_relaxed);
    std::atomic_ref<int64_t>(slots[1]).store(bytes, std::memory_order_relaxed);
  }
  // Each tensor's bytes once it is handled: they add up to start()'s at the end of a load.
  void add(int64_t bytes) const {
    if (slots != nullptr) std::atomic_ref<int64_t>(slots[0]).fetch_add(bytes, std::memory_order_relaxed);
  }
};

}  // namespace strata
