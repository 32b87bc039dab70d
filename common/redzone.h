#ifndef KVCPT_REDZONE_H
#define KVCPT_REDZONE_H
/* Red zones between the sub-buffers that one allocation is carved into (a
 * layer's activations, the backward scratch, the decode rows, the prefill
 * workspace, the packed bf16 weights' alignment padding).
 *
 * They exist only in the CUDA emulator's sanitizer build (build/emu-asan,
 * which defines KVCPT_EMU_ASAN): there REDZONE_FLOATS floats follow every
 * carved sub-buffer and are poisoned for AddressSanitizer, so a kernel or a
 * host loop running off the end of one sub-buffer into the next is reported
 * where it happens instead of quietly writing its neighbour. In every other
 * build (a real GPU, the plain emulator, the CPU engine) there are no red
 * zones and the layout is the packed one. */
#include <stddef.h>
#include <stdint.h>

#ifdef KVCPT_EMU_ASAN
#ifdef __cplusplus
extern "C" {
#endif
/* tests/cuda_emu/emu_runtime.cc: marks [p, p + bytes) unaddressable, or
 * addressable again */
void emu_poison_redzone(const void *p, size_t bytes);
void emu_unpoison_redzone(const void *p, size_t bytes);
#ifdef __cplusplus
}
#endif
#define REDZONE_FLOATS 16 /* 64 bytes: sub-buffers stay 16-byte aligned */
#define REDZONE_POISON(p, bytes) emu_poison_redzone((p), (bytes))
#define REDZONE_CLEAR(p, bytes) emu_unpoison_redzone((p), (bytes))
#else
#define REDZONE_FLOATS 0
#define REDZONE_POISON(p, bytes) ((void)(p), (void)(bytes))
#define REDZONE_CLEAR(p, bytes) ((void)(p), (void)(bytes))
#endif
/* REDZONE_CLEAR: an allocation that was carved, now used whole (the model's
 * scratch holds the backward's carved buffers in one phase and a chunk of
 * logits from its start in another) gets its red zones lifted first. */

/* The n floats at *cursor, then a red zone; the cursor moves past both. An
 * allocation carved with k of these needs k * REDZONE_FLOATS floats more. */
static inline float *redzone_take(float **cursor, int64_t n) {
    float *p = *cursor;
    *cursor += n;
    REDZONE_POISON(*cursor, sizeof(float) * REDZONE_FLOATS);
    *cursor += REDZONE_FLOATS;
    return p;
}

#endif
