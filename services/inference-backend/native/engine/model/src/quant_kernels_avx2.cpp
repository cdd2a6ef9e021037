// The AVX2 + FMA build of the quantized kernels; this file alone is compiled with -mavx2 -mfma
// and only runs where quant_kernels() has checked the CPU supports both.
#define STRATA_QUANT_KERNELS_FN avx2_quant_kernels
#define STRATA_QUANT_ISA "avx2+fma"
#include "quant_kernels_x86.h"
