#ifndef KVCPT_OPTIM_TESTUTIL_H
#define KVCPT_OPTIM_TESTUTIL_H
/* What the optimizer tests read of an Optimizer that the program never
 * reads: its moments, dequantized. */
#include "../common/util.h"
#include "../optim/optimizer.h"

/* Dequantized (or fp32) m and v of one segment, numel floats each. */
static inline void optim_read_state(const Optimizer *o, int seg, float *m, float *v) {
    KV_CHECK(seg >= 0 && seg < o->nseg, "optimizer: segment %d out of range [0, %d)", seg, o->nseg);
    const OptimSegment *s = &o->seg[seg];
    for (int64_t i = 0; i < s->numel; i++) {
        if (s->quantized) {
            int64_t qb = s->absmax_offset + i / OPTIM_BLOCK;
            m[i] = o->map_m.code[o->m_code[s->state_offset + i]] * o->m_absmax[qb];
            v[i] = o->map_v.code[o->v_code[s->state_offset + i]] * o->v_absmax[qb];
        } else {
            m[i] = o->m32[s->state_offset + i];
            v[i] = o->v32[s->state_offset + i];
        }
    }
}

/* The state alone in a file (the program writes it inside a checkpoint):
 * optim_save, then optim_load, which must read the whole file. */
static inline void optim_save_file(const Optimizer *o, const char *path) {
    FILE *f = fopen_check(path, "wb");
    optim_save(o, f, path);
    fclose_check(f, path);
}

static inline void optim_load_file(Optimizer *o, const char *path) {
    FILE *f = fopen_check(path, "rb");
    optim_load(o, f, path);
    KV_CHECK(fgetc(f) == EOF, "'%s': bytes after the optimizer state", path);
    fclose_check(f, path);
}

#endif
