// The AVX-512 VNNI build of the quantized kernels (512-bit vectors: a panel's 16 rows in one
// register, vpdpbusd for the int8 dot products); compiled with -mavx2 -mfma -mf16c -mavx512f
// -mavx512bw -mavx512vl -mavx512vnni and only run where quant_kernels() has checked the CPU
// supports all of them.
#define STRATA_QUANT_KERNELS_FN avx512vnni_quant_kernels
#define STRATA_QUANT_ISA "avx512vnni"
#define STRATA_QUANT_AVX512 1
#include "quant_kernels_x86.h"
