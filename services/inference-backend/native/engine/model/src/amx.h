// What the AMX kernels and bench_cpu_peak share: the tile configuration they load (every tile
// 16 rows of 64 bytes) and whether this process may use AMX's bf16 tiles.
#pragma once

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace strata {

// LDTILECFG's 64-byte operand, palette 1: tiles 0-7 each 16 rows of 64 bytes.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// AMX-BF16 and AMX-TILE (CPUID leaf 7: EDX bits 22 and 24), and the kernel's permission for this
// process to use the tile data (ARCH_REQ_XCOMP_PERM for XTILEDATA; Linux 5.16 and later).
inline bool amx_bf16_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  if ((edx & (1u << 22)) == 0 || (edx & (1u << 24)) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace strata
