// The CPU emulation's engine room (see emu.h): fibers for the threads of a block, block and
// warp barriers, and the part of the CUDA runtime API the backend and the checks call, with
// device memory as host memory and every stream synchronous.
#include "emu.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

// Saves the callee-saved registers on the current stack, stores its pointer in *save, switches
// to `next` and restores that stack's registers (x86-64 System V). A fresh fiber's stack is laid
// out to "return" into fiber_entry.
extern "C" void strata_emu_switch(void** save, void* next);
asm(R"(
.pushsection .text
.globl strata_emu_switch
.type strata_emu_switch,@function
strata_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size strata_emu_switch,.-strata_emu_switch
.popsection
)");

namespace strata::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;  // per fiber: kernels keep small arrays in "registers"
constexpr int kWarp = 32;
// The emulated device has an H100 SXM's SM count and shared memory, so launch heuristics that
// read them (the sampler's cluster size) take the paths they take there.
constexpr int kEmulatedSms = 132;
constexpr int kSharedOptin = 227 * 1024;
constexpr int kSharedPerSm = 228 * 1024;

struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
};

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;  // kStackBytes from stack_pool()
  uint3 idx{};
  int block = 0;   // its block's rank in the cluster
  int linear = 0;  // its index in that block
  bool done = false;
  // The barrier it waits at and the generation it waits to end; null when runnable.
  const Barrier* waiting_on = nullptr;
  uint64_t waiting_generation = 0;
};

struct BlockState {
  uint3 index{};
  std::vector<char> shared;
  int live = 0;
  Barrier barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<int> warp_live;
  // Two buffers per warp, alternating with the warp barrier's generation: a lane can write the
  // next exchange's value only after every lane has arrived there, so after every lane has read
  // this one's, and one barrier per exchange suffices.
  std::vector<std::array<std::array<uint64_t, kWarp>, 2>> warp_values;
};

// One cluster of blocks (one block when the launch has no cluster dimension), run together.
struct ClusterRun {
  dim3 grid, block;
  int threads = 0;  // per block
  std::vector<BlockState> blocks;
  std::vector<Fiber> fibers;  // block b's thread t is fibers[b * threads + t]
  void* scheduler_sp = nullptr;
  int current = 0;
  int live = 0;
  Barrier cluster_barrier;
  const std::function<void()>* body = nullptr;
};

ClusterRun* g_run = nullptr;

// An open stream capture collects the work submitted meanwhile; a graph is that list.
struct Graph {
  std::vector<std::function<void()>> work;
};
Graph* g_capture = nullptr;

// Fiber stacks live for the whole process: launches reuse them, uninitialised, at no cost.
char* pooled_stack(size_t index) {
  static std::vector<std::unique_ptr<char[]>> pool;
  while (pool.size() <= index) pool.push_back(std::unique_ptr<char[]>(new char[kStackBytes]));
  return pool[index].get();
}
cudaError_t g_last_error = cudaSuccess;

Fiber& self() { return g_run->fibers[g_run->current]; }
BlockState& own_block() { return g_run->blocks[self().block]; }

void yield() { strata_emu_switch(&self().sp, g_run->scheduler_sp); }

// Waits until `count` arrivals (the live threads of the scope) have reached `b`.
void wait_at(Barrier& b, const int& count) {
  const uint64_t generation = b.generation;
  if (++b.arrived >= count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  self().waiting_on = &b;
  self().waiting_generation = generation;
  yield();  // the scheduler resumes it only once the generation has moved on
  self().waiting_on = nullptr;
}

bool runnable(const Fiber& f) {
  return !f.done && (f.waiting_on == nullptr || f.waiting_on->generation != f.waiting_generation);
}

// A finished thread no longer counts: a barrier its peers wait at may now be complete.
void release_if_complete(Barrier& b, int count) {
  if (b.arrived > 0 && b.arrived >= count) {
    b.arrived = 0;
    ++b.generation;
  }
}

[[noreturn]] void fiber_entry() {
  (*g_run->body)();
  Fiber& f = self();
  BlockState& b = own_block();
  f.done = true;
  --g_run->live;
  --b.live;
  const int warp = f.linear / kWarp;
  --b.warp_live[warp];
  release_if_complete(g_run->cluster_barrier, g_run->live);
  release_if_complete(b.barrier, b.live);
  release_if_complete(b.warp_barriers[warp], b.warp_live[warp]);
  void* unused = nullptr;
  strata_emu_switch(&unused, g_run->scheduler_sp);
  std::abort();  // a finished fiber is never resumed
}

void start_fiber(Fiber& f) {
  auto top = reinterpret_cast<uintptr_t>(f.stack + kStackBytes) & ~uintptr_t{15};
  auto* slots = reinterpret_cast<void**>(top);
  slots[-1] = nullptr;                                  // fiber_entry's own "return address"
  slots[-2] = reinterpret_cast<void*>(&fiber_entry);    // where the switch's ret lands
  for (int i = 3; i <= 8; ++i) slots[-i] = nullptr;     // rbp rbx r12 r13 r14 r15
  f.sp = &slots[-8];
  f.done = false;
}

}  // namespace

void submit(std::function<void()> work) {
  if (g_capture != nullptr) {
    g_capture->work.push_back(std::move(work));
  } else {
    work();
  }
}

bool capturing() { return g_capture != nullptr; }

uint3 thread_idx() { return self().idx; }
int lane_id() { return self().linear % kWarp; }
uint3 block_idx() { return own_block().index; }
dim3 block_dim() { return g_run->block; }
dim3 grid_dim() { return g_run->grid; }
void* dynamic_shared() { return own_block().shared.data(); }

void sync_threads() {
  BlockState& b = own_block();
  wait_at(b.barrier, b.live);
}

void sync_warp() {
  BlockState& b = own_block();
  const int warp = self().linear / kWarp;
  wait_at(b.warp_barriers[warp], b.warp_live[warp]);
}

void sync_cluster() { wait_at(g_run->cluster_barrier, g_run->live); }
unsigned cluster_rank() { return unsigned(self().block); }
unsigned cluster_size() { return unsigned(g_run->blocks.size()); }

void* peer_shared(const void* own, unsigned rank) {
  const std::vector<char>& mine = own_block().shared;
  const auto offset = static_cast<const char*>(own) - mine.data();
  if (offset < 0 || size_t(offset) >= mine.size() || rank >= g_run->blocks.size()) {
    std::fprintf(stderr, "map_shared_rank: not an address in dynamic shared memory, or no block of rank %u "
                         "(the emulation keeps static __shared__ per kernel, not per block)\n", rank);
    std::abort();
  }
  return g_run->blocks[rank].shared.data() + offset;
}

// Publishes the calling lane's value for this exchange, waits for the warp; returns the buffer.
const std::array<uint64_t, kWarp>& publish(uint64_t bits) {
  BlockState& b = own_block();
  const int lane = self().linear % kWarp, warp = self().linear / kWarp;
  auto& buffer = b.warp_values[warp][b.warp_barriers[warp].generation & 1];
  buffer[lane] = bits;
  sync_warp();
  return buffer;
}

uint64_t exchange(uint64_t bits, int src_lane) { return publish(bits)[src_lane & (kWarp - 1)]; }

uint32_t gather(uint64_t bits, uint64_t out[32]) {
  const auto& values = publish(bits);
  const Fiber& me = self();
  const int warp = me.linear / kWarp;
  uint32_t took_part = 0;
  const Fiber* first = &g_run->fibers[size_t(me.block) * g_run->threads + size_t(warp) * kWarp];
  for (int i = 0; i < kWarp; ++i) {
    const bool in_block = warp * kWarp + i < g_run->threads;
    out[i] = in_block ? values[i] : 0;
    if (in_block && !first[i].done) took_part |= 1u << i;
  }
  return took_part;
}

void run_grid(dim3 grid, dim3 block, size_t shared_bytes, unsigned cluster, const std::function<void()>& body) {
  const size_t threads = size_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535 || shared_bytes > size_t(kSharedOptin) || cluster == 0 || cluster > 8 || grid.x % cluster != 0) {
    g_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  ClusterRun run;
  run.grid = grid;
  run.block = block;
  run.threads = int(threads);
  run.body = &body;
  run.blocks.resize(cluster);
  run.fibers.resize(threads * cluster);
  const int warps = int((threads + kWarp - 1) / kWarp);
  for (BlockState& b : run.blocks) {
    b.warp_barriers.resize(warps);
    b.warp_values.resize(warps);
  }
  ClusterRun* outer = g_run;
  g_run = &run;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx0 = 0; bx0 < grid.x; bx0 += cluster) {
        run.live = int(threads * cluster);
        run.cluster_barrier = {};
        for (unsigned r = 0; r < cluster; ++r) {
          BlockState& b = run.blocks[r];
          b.index = {bx0 + r, by, bz};
          // Shared memory starts as garbage on a GPU: a kernel that reads before it writes
          // sees this pattern, not zeros.
          b.shared.assign(std::max<size_t>(shared_bytes, 16), char(0xa5));
          b.live = int(threads);
          b.warp_live.assign(warps, 0);
          b.barrier = {};
          for (Barrier& w : b.warp_barriers) w = {};
          for (size_t t = 0; t < threads; ++t) {
            const size_t i = r * threads + t;
            Fiber& f = run.fibers[i];
            f.block = int(r);
            f.linear = int(t);
            f.stack = pooled_stack(i);
            f.idx = {unsigned(t % block.x), unsigned(t / block.x % block.y), unsigned(t / (size_t(block.x) * block.y))};
            f.waiting_on = nullptr;
            ++b.warp_live[t / kWarp];
            start_fiber(f);
          }
        }
        // One warp at a time, as far as it can go (to a barrier or its end), warps in forward
        // order in even blocks and reverse order in odd ones: a read that a missing barrier
        // leaves unordered then sees stale data in one of the two orders.
        while (run.live > 0) {
          bool any = false;
          // Blocks of a cluster in reverse order in every other cluster, for the same reason.
          const bool reverse_blocks = (bx0 / cluster + by + bz) % 2 == 1;
          for (unsigned k = 0; k < cluster; ++k) {
            const unsigned r = reverse_blocks ? cluster - 1 - k : k;
            const bool reverse = (bx0 + r + by + bz) % 2 == 1;
            for (int i = 0; i < warps; ++i) {
              const int w = reverse ? warps - 1 - i : i;
              const size_t first = r * threads + size_t(w) * kWarp, last = r * threads + std::min(threads, size_t(w + 1) * kWarp);
              for (bool ran = true; ran;) {
                ran = false;
                for (size_t t = first; t < last; ++t) {
                  if (!runnable(run.fibers[t])) continue;
                  run.current = int(t);
                  strata_emu_switch(&run.scheduler_sp, run.fibers[t].sp);
                  ran = any = true;
                }
              }
            }
          }
          if (!any) {
            std::fprintf(stderr, "emulated kernel deadlocked: threads wait at a barrier that not all live threads reach "
                                 "(block %u,%u,%u, cluster of %u)\n", bx0, by, bz, cluster);
            std::abort();
          }
        }
      }
    }
  }
  g_run = outer;
}

}  // namespace strata::emu

using strata::emu::kEmulatedSms;
using strata::emu::kSharedOptin;
using strata::emu::kSharedPerSm;

// ---- the CUDA runtime API, as far as the backend and the checks use it -------------------------

extern "C" {

cudaError_t cudaGetLastError() {
  const cudaError_t e = strata::emu::g_last_error;
  strata::emu::g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return strata::emu::g_last_error; }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulated launch)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    default: return "error (emulated)";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "CPU emulation of CUDA (strata emu)");
  prop->major = 9;
  prop->multiProcessorCount = kEmulatedSms;
  prop->totalGlobalMem = size_t{8} << 30;
  prop->sharedMemPerBlockOptin = kSharedOptin;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = kEmulatedSms; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSharedOptin; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = kSharedPerSm; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; return cudaSuccess;
    case cudaDevAttrClockRate: *value = 1980000; return cudaSuccess;       // kHz, as an H100 SXM
    case cudaDevAttrMemoryClockRate: *value = 2619000; return cudaSuccess;  // kHz
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; return cudaSuccess;
    case cudaDevAttrL2CacheSize: *value = 50 << 20; return cudaSuccess;
    default: return cudaErrorInvalidValue;
  }
}

// Occupancy from threads and shared memory alone (registers are not modelled).
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*, int block_size, size_t shared_bytes) {
  if (block_size <= 0 || block_size > 1024) return cudaErrorInvalidValue;
  const int by_threads = 2048 / block_size;
  const int by_shared = shared_bytes == 0 ? 32 : int(kSharedPerSm / (shared_bytes + 1024));  // 1 KiB reserved per block
  *blocks = std::max(0, std::min({by_threads, by_shared, 32}));
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func, int block_size,
                                                                   size_t shared_bytes, unsigned) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, func, block_size, shared_bytes);
}

cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void* func, const cudaLaunchConfig_t* config) {
  unsigned size = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) size = config->attrs[i].val.clusterDim.x;
  if (size == 0 || size > 8) return cudaErrorInvalidValue;
  int per_sm = 0;
  const int threads = int(config->blockDim.x * config->blockDim.y * config->blockDim.z);
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, threads, config->dynamicSmemBytes);
  if (e != cudaSuccess) return e;
  *clusters = per_sm * kEmulatedSms / int(size);
  return cudaSuccess;
}

// "Device" memory is host memory: the budget is what the kernel says can be allocated.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  size_t kib = 0, available = 0, all = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024;
    if (key == "MemTotal:") all = kib * 1024;
  }
  *free_bytes = available;
  *total = all;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaMalloc(ptr, bytes); }
cudaError_t cudaFreeHost(void* ptr) { return cudaFree(ptr); }

// Synchronous calls are refused while a capture is open, as CUDA refuses them.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (strata::emu::capturing()) return cudaErrorStreamCaptureUnsupported;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  strata::emu::submit([=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (strata::emu::capturing()) return cudaErrorStreamCaptureUnsupported;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  strata::emu::submit([=] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  return strata::emu::capturing() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return strata::emu::capturing() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  if (strata::emu::capturing()) return cudaErrorIllegalState;
  strata::emu::g_capture = new strata::emu::Graph;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
  if (!strata::emu::capturing()) return cudaErrorIllegalState;
  *graph = reinterpret_cast<cudaGraph_t>(strata::emu::g_capture);
  strata::emu::g_capture = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = reinterpret_cast<cudaGraphExec_t>(new strata::emu::Graph(*reinterpret_cast<strata::emu::Graph*>(graph)));
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
  const auto* graph = reinterpret_cast<const strata::emu::Graph*>(exec);
  strata::emu::submit([graph] {
    for (const auto& work : graph->work) work();
  });
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<strata::emu::Graph*>(exec);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<strata::emu::Graph*>(graph);
  return cudaSuccess;
}

// An event is the host time at which the stream reached it (work runs when submitted).
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = reinterpret_cast<cudaEvent_t>(new std::chrono::steady_clock::time_point());
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
// No profiler attaches to the emulation: starting and stopping it does nothing, as in cudart
// when no profiler is attached.
extern "C" cudaError_t cudaProfilerStart() { return cudaSuccess; }
extern "C" cudaError_t cudaProfilerStop() { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  auto* at = reinterpret_cast<std::chrono::steady_clock::time_point*>(event);
  strata::emu::submit([at] { *at = std::chrono::steady_clock::now(); });
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto& a = *reinterpret_cast<std::chrono::steady_clock::time_point*>(start);
  const auto& b = *reinterpret_cast<std::chrono::steady_clock::time_point*>(end);
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return strata::emu::capturing() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<std::chrono::steady_clock::time_point*>(event);
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int value) {
  return value <= kSharedOptin ? cudaSuccess : cudaErrorInvalidValue;
}

}  // extern "C"
