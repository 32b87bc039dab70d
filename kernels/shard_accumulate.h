#ifndef KVCPT_SHARD_ACCUMULATE_H
#define KVCPT_SHARD_ACCUMULATE_H
/* The owner's half of a sharded gradient reduction: every rank sent this
 * rank its piece of a unit's gradient, world pieces of n floats laid end
 * to end in rank order (parts[r * n + i]), and the owner adds them into
 * its accumulated gradient:
 *     acc[i] += parts[0 * n + i]; acc[i] += parts[1 * n + i]; ...
 * one fp32 add per rank, always in rank order. That fixed order is what
 * makes a sharded run's gradients the same bits for every rank count (the
 * host-staged path, parallel/fsdp.c, adds exactly so). */
#include <stdint.h>

void shard_accumulate_cpu(float *acc, const float *parts, int64_t n, int world);

#ifdef __cplusplus
extern "C" {
#endif
/* CUDA twin, DEVICE pointers, default stream: one thread per element adds
 * the world pieces in rank order in a register and stores once. Only adds
 * (no multiply for the compiler to contract into an FMA), so the result
 * equals the CPU's bit for bit. */
void shard_accumulate_cuda(float *acc, const float *parts, int64_t n, int world);
#ifdef __cplusplus
}
#endif
#endif
