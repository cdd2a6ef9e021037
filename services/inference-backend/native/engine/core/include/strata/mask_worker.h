// Computes the allowed-token masks of a step's constrained sequences on a thread of its own, so
// that the grammar's work overlaps the step's forward pass instead of adding to it: the engine
// start()s the masks, runs the forward, then wait()s (usually not at all) before sampling.
// The thread starts with the first constrained step; an engine that never sees one has none.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "strata/sequence.h"

namespace strata {

class MaskWorker {
 public:
  MaskWorker() = default;
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // Starts filling seq->allowed (n_words words) and seq->mask_ok of each of `seqs` (each has a
  // constraint); mask_ok is false when the computation failed or allowed no token at all.
  // The sequences must stay alive and their constraints untouched until wait().
  void start(const std::vector<Sequence*>& seqs, size_t n_words);
  // Blocks until start()'s masks are done; returns the nanoseconds it blocked.
  int64_t wait();
  // Nanoseconds spent computing masks, and masks computed, since construction.
  int64_t compute_ns() const { return compute_ns_; }
  int64_t masks() const { return masks_; }

 private:
  void run();

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Sequence*> jobs_;
  size_t n_words_ = 0;
  bool pending_ = false;  // a start() not yet finished
  bool stop_ = false;
  int64_t compute_ns_ = 0;  // written by the worker, read after wait()
  int64_t masks_ = 0;
};

}  // namespace strata
