#ifndef KVCPT_BLAS_CORE_H
#define KVCPT_BLAS_CORE_H
/* Which OpenBLAS core (kernel set) the program runs on. A DYNAMIC_ARCH
 * OpenBLAS (Debian's) picks its kernels from the CPU's model number when
 * the library loads; a model it does not know (a cloud VM reporting
 * "Intel(R) Xeon(R) Processor") falls back to the SSE3 kernels ("Prescott")
 * although the CPU has AVX2 or AVX-512: 4x slower, silently. The library
 * reads OPENBLAS_CORETYPE at load, before main, so the program corrects the
 * choice by running itself again with the variable set. A value the user
 * set is always kept. */
#include <jansson.h>

#include "../common/self_restart.h"

/* The widest vector instruction set the CPU and the OS support, by the
 * level OpenBLAS's kernels are written for. */
typedef enum { CPU_ISA_SSE = 0, CPU_ISA_AVX, CPU_ISA_AVX2, CPU_ISA_AVX512 } CpuIsa;

CpuIsa cpu_isa_detect(void);
const char *cpu_isa_name(CpuIsa isa); /* "sse", "avx", "avx2", "avx512" */

/* The instruction set an OpenBLAS core name's kernels use (an unknown name:
 * CPU_ISA_SSE, so that it is never taken for a wider one). */
CpuIsa blas_core_isa(const char *core);

/* The core to run on: NULL to keep the library's own choice (the user set
 * OPENBLAS_CORETYPE, or the library's core already uses what the CPU has);
 * else the core that matches the CPU: "SkylakeX" (AVX-512), "Haswell"
 * (AVX2 and FMA) or "Sandybridge" (AVX). */
const char *blas_core_choose(CpuIsa cpu, const char *library_core, const char *user_coretype);

/* The variables a restart sets (common/self_restart.h) so that OpenBLAS
 * runs blas_core_choose's core: OPENBLAS_CORETYPE and, beside it, the core
 * the library had picked (so the restarted program can say why it runs on
 * another). Returns how many it filled: 0 when the library's choice stands. */
int blas_core_restart_vars(RestartVar vars[2]);

/* The running core's name, as OpenBLAS reports it. */
const char *blas_core_name(void);

/* One line for people: the core, and who chose it ("OpenBLAS core
 * SkylakeX, chosen by kvcpt: OpenBLAS picked Prescott on a CPU with
 * avx512"). */
const char *blas_core_summary(void);

/* The same as fields: {"core", "chosen_by": "openblas" | "OPENBLAS_CORETYPE"
 * | "kvcpt", "cpu_isa", "cpu_model" (/proc/cpuinfo's model name),
 * "logical_cpus", "library_pick" (when kvcpt chose)}: what computed a run's
 * numbers, so that a summary describes the machine its runs recorded. */
json_t *blas_core_json(void);
/* blas_core_json as compact JSON text (malloc'd), for output that is
 * printed rather than built. */
char *blas_core_json_text(void);
#endif
