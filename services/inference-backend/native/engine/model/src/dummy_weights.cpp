// The dummy load format: weights of the right shapes for benchmarks, without a checkpoint.
#include <algorithm>
#include <cmath>
#include <thread>

#include "strata/model_weights.h"
#include "tensor_slots.h"

namespace strata {

namespace {

constexpr float kStddev = 0.02f;     // the usual initializer_range of Llama configs
constexpr size_t kChunk = 1u << 20;  // elements drawn from one seeded stream

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Box-Muller on our own generator, so values do not depend on the standard library.
void fill_normal(float* out, size_t count, uint64_t stream_seed) {
  uint64_t state = stream_seed;
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < count; i += 2) {
    const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;          // [0, 1)
    const double radius = std::sqrt(-2.0 * std::log(u1)) * kStddev;
    out[i] = static_cast<float>(radius * std::cos(kTwoPi * u2));
    if (i + 1 < count) out[i + 1] = static_cast<float>(radius * std::sin(kTwoPi * u2));
  }
}

}  // namespace

ModelWeights make_dummy_weights(const ModelConfig& config, uint64_t seed) {
  ModelWeights weights;
  struct Job {
    float* out;
    size_t count;
    uint64_t stream_seed;
  };
  std::vector<Job> jobs;
  uint64_t tensor_index = 0;
  for (TensorSlot& slot : tensor_slots(config, &weights)) {
    ++tensor_index;
    if (config.tie_word_embeddings && slot.name == kLmHeadName) continue;
    size_t count = 1;
    for (int64_t dim : slot.shape) count *= static_cast<size_t>(dim);
    slot.target->assign(count, 1.0f);
    if (slot.name.ends_with("norm.weight")) continue;  // RMSNorm gains start at 1
    // Each chunk has its own stream, so the values do not depend on the thread count.
    for (size_t begin = 0; begin < count; begin += kChunk) {
      uint64_t mix = seed ^ (tensor_index << 40) ^ (begin / kChunk);
      jobs.push_back({slot.target->data() + begin, std::min(kChunk, count - begin), splitmix64(mix)});
    }
  }
  const size_t threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 64));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&jobs, t, threads] {
      for (size_t j = t; j < jobs.size(); j += threads) fill_normal(jobs[j].out, jobs[j].count, jobs[j].stream_seed);
    });
  }
  for (std::thread& thread : pool) thread.join();
  return weights;
}

}  // namespace strata
