// Batched next-token sampling on the GPU, with the CPU strata::Sampler's semantics (core/src/sampler.cpp):
// repetition penalty (HF, distinct prompt + output tokens), frequency/presence penalties (OpenAI,
// output tokens), a structured-output constraint's allowed-token mask, min_tokens masking of
// eos/stop ids, temperature (greedy below
// kSamplingGreedyTemperature), top-k -> top-p -> min-p, then one inverse-CDF draw with the
// sequence's own uniform value, and logprobs (raw, or of the distribution drawn from).
//
// Everything a step varies lives in device arrays that the caller refills between steps, so a
// step can be captured in a CUDA graph once per batch size. The logits are read, never written:
// penalties and masks are applied to a copy in shared memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "strata/cuda_kernels.h"
#include "strata/model_backend.h"

namespace strata::cuda {

// The rows' inputs are the backend contract's (strata/model_backend.h), uploaded as they are.
inline constexpr int32_t kSamplingMaxTop = kMaxSampledTop;
inline constexpr float kSamplingGreedyTemperature = 1e-5f;  // strata::kGreedyTemperature (core)
using PenaltyEntry = ::strata::PenaltyEntry;
using SeqSamplingParams = ::strata::SamplingRow;

struct SamplingArgs {
  const float* logits = nullptr;              // (n_seqs, vocab) fp32, any 4-byte alignment
  int32_t n_seqs = 0;
  int32_t vocab = 0;
  const SeqSamplingParams* params = nullptr;  // (n_seqs)
  const PenaltyEntry* penalty_entries = nullptr;  // pool the params' offsets index; null if no row has entries
  const int32_t* stop_ids = nullptr;          // pool the params' offsets index; null if no row has stop ids
  // Structured output: row i's allowed tokens are the bits of allowed[allowed_offset[i] ...]
  // (bit t % 32 of word t / 32), or every token when allowed_offset[i] < 0. Both null when no
  // row is constrained.
  const uint32_t* allowed = nullptr;
  const int32_t* allowed_offset = nullptr;    // (n_seqs)
  int32_t* tokens = nullptr;                  // (n_seqs) the sampled token
  float* logprobs = nullptr;                  // (n_seqs) its logprob; 0 where logprobs == -1
  // (n_seqs, kSamplingMaxTop), most likely first; entries past top_counts[i] are -1 / -inf.
  // All three may be null when no row asks for logprobs > 0.
  int32_t* top_ids = nullptr;
  float* top_logprobs = nullptr;
  int32_t* top_counts = nullptr;              // n (raw: min(n, vocab)), or min(n, kept tokens) (processed)
};

// One cluster of `cluster` thread blocks per sequence; each block keeps a slice of the row in
// shared memory, so the row is read from device memory once.
struct SamplingLaunch {
  int32_t cluster = 0;
  int32_t threads = 0;
  int32_t slice = 0;       // vocab entries per block
  size_t smem_bytes = 0;   // dynamic shared memory per block
};
SamplingLaunch sampling_launch(int32_t n_seqs, int32_t vocab);

// Throws CudaError on a failed launch or a vocab too large for 8 blocks' shared memory (~450k).
void sample(const SamplingArgs& args, Stream stream);

}  // namespace strata::cuda
