/* Runs kvcpt's 8-bit AdamW (OPTIM_ADAMW8BIT, CPU step) for a few steps over
 * three segments of one flat buffer and dumps everything bitsandbytes'
 * AdamW8bit needs to be stepped alongside it (tests/bnb_adamw_peer.py):
 *   seg 0: 5000 elements (19 blocks of 256 and a partial one of 136),
 *          8-bit; Gaussian gradients whose scale changes from block to
 *          block, block 3 always zero, every 97th element zero on even steps;
 *   seg 1: 1000 elements, under min_8bit_size 4096: fp32 states;
 *   seg 2: 4096 elements, 8-bit; log-uniform gradient magnitudes over four
 *          decades (so the second moment spans eight).
 * 8 untouched elements separate the segments. Files (little-endian):
 *   grads.f32   [steps][total]     the gradients of every step
 *   params.f32  [steps+1][total]   initial, then after each step
 *   m_code.u8, v_code.u8     [steps][n_code]   state codes after each step
 *   m_absmax.f32, v_absmax.f32 [steps][n_absmax]
 *   m32.f32, v32.f32         [steps][n_f32]    the fp32 states
 *   qmap_m.f32, qmap_v.f32   [256]             the signed and unsigned maps
 *   case.json                hyper-parameters and the segment table
 * usage: dump_adamw_steps OUTDIR [STEPS (default 20)] */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../optim/optimizer.h"

static FILE *open_out(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fopen_check(path, "wb");
}

static void put(FILE *f, const void *p, size_t bytes, const char *name) { fwrite_check(p, 1, bytes, f, name); }

static void close_out(FILE *f, const char *name) { fclose_check(f, name); }

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) die("usage: dump_adamw_steps OUTDIR [STEPS]");
    const char *dir = argv[1];
    int steps = argc > 2 ? atoi(argv[2]) : 20;
    KV_CHECK(steps >= 1 && steps <= 1000, "dump_adamw_steps: STEPS must be in [1, 1000], got '%s'", argv[2]);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) die("cannot create '%s': %s", dir, strerror(errno));

    enum { NSEG = 3, GAP = 8 };
    const int64_t numel[NSEG] = {5000, 1000, 4096};
    int64_t offset[NSEG], total = 0;
    for (int s = 0; s < NSEG; s++) {
        offset[s] = total;
        total += numel[s] + GAP;
    }
    AdamWHyper h = {.lr = 2e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1, .grad_scale = 1.0};
    Optimizer *o = optim_create(OPTIM_ADAMW8BIT, offset, numel, NSEG);

    float *p = xmalloc(sizeof(float) * (size_t)total);
    float *g = xmalloc(sizeof(float) * (size_t)total);
    Rng r;
    rng_seed(&r, 20240917);
    for (int64_t i = 0; i < total; i++) p[i] = 0.05f * rng_normal(&r);

    FILE *fg = open_out(dir, "grads.f32"), *fp = open_out(dir, "params.f32");
    FILE *fmc = open_out(dir, "m_code.u8"), *fvc = open_out(dir, "v_code.u8");
    FILE *fma = open_out(dir, "m_absmax.f32"), *fva = open_out(dir, "v_absmax.f32");
    FILE *fm32 = open_out(dir, "m32.f32"), *fv32 = open_out(dir, "v32.f32");
    put(fp, p, sizeof(float) * (size_t)total, "params.f32");
    for (int t = 1; t <= steps; t++) {
        for (int64_t i = 0; i < total; i++) g[i] = 1000.0f; /* the gaps: never read */
        for (int64_t i = 0; i < numel[0]; i++) {
            int64_t b = i / OPTIM_BLOCK;
            float scale = 0.01f * powf(10.0f, -(float)(b % 4));
            float x = scale * rng_normal(&r);
            if (b == 3 || (t % 2 == 0 && i % 97 == 0)) x = 0.0f;
            g[offset[0] + i] = x;
        }
        for (int64_t i = 0; i < numel[1]; i++) g[offset[1] + i] = 0.01f * rng_normal(&r);
        for (int64_t i = 0; i < numel[2]; i++) {
            float mag = 0.01f * powf(10.0f, -4.0f * rng_uniform(&r));
            g[offset[2] + i] = rng_uniform(&r) < 0.5f ? -mag : mag;
        }
        if (optim_step(o, p, g, &h, t) != 0) die("dump_adamw_steps: step %d rejected", t);
        put(fg, g, sizeof(float) * (size_t)total, "grads.f32");
        put(fp, p, sizeof(float) * (size_t)total, "params.f32");
        put(fmc, o->m_code, (size_t)o->n_code, "m_code.u8");
        put(fvc, o->v_code, (size_t)o->n_code, "v_code.u8");
        put(fma, o->m_absmax, sizeof(float) * (size_t)o->n_absmax, "m_absmax.f32");
        put(fva, o->v_absmax, sizeof(float) * (size_t)o->n_absmax, "v_absmax.f32");
        put(fm32, o->m32, sizeof(float) * (size_t)o->n_f32, "m32.f32");
        put(fv32, o->v32, sizeof(float) * (size_t)o->n_f32, "v32.f32");
    }
    close_out(fg, "grads.f32");
    close_out(fp, "params.f32");
    close_out(fmc, "m_code.u8");
    close_out(fvc, "v_code.u8");
    close_out(fma, "m_absmax.f32");
    close_out(fva, "v_absmax.f32");
    close_out(fm32, "m32.f32");
    close_out(fv32, "v32.f32");
    FILE *fq = open_out(dir, "qmap_m.f32");
    put(fq, o->map_m.code, sizeof o->map_m.code, "qmap_m.f32");
    close_out(fq, "qmap_m.f32");
    fq = open_out(dir, "qmap_v.f32");
    put(fq, o->map_v.code, sizeof o->map_v.code, "qmap_v.f32");
    close_out(fq, "qmap_v.f32");

    json_t *j = json_object();
    json_object_set_new(j, "steps", json_integer(steps));
    json_object_set_new(j, "total", json_integer(total));
    json_object_set_new(j, "block", json_integer(OPTIM_BLOCK));
    json_object_set_new(j, "min_8bit_size", json_integer(OPTIM_MIN_8BIT_NUMEL));
    json_object_set_new(j, "n_code", json_integer(o->n_code));
    json_object_set_new(j, "n_absmax", json_integer(o->n_absmax));
    json_object_set_new(j, "n_f32", json_integer(o->n_f32));
    json_object_set_new(j, "hyper",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "lr", h.lr, "beta1", h.beta1, "beta2", h.beta2, "eps",
                                  h.eps, "weight_decay", h.weight_decay, "grad_scale", h.grad_scale));
    json_t *segs = json_array();
    for (int s = 0; s < NSEG; s++) {
        const OptimSegment *sg = &o->seg[s];
        json_array_append_new(segs,
                              json_pack("{s:I,s:I,s:b,s:I,s:I}", "offset", (json_int_t)sg->offset, "numel",
                                        (json_int_t)sg->numel, "quantized", sg->quantized, "state_offset",
                                        (json_int_t)sg->state_offset, "absmax_offset", (json_int_t)sg->absmax_offset));
    }
    json_object_set_new(j, "segments", segs);
    char path[4096];
    path_fmt(path, sizeof path, "%s/case.json", dir);
    if (json_dump_file(j, path, JSON_INDENT(1)) != 0) die("cannot write '%s'", path);
    json_decref(j);
    free(p);
    free(g);
    optim_free(o);
    return 0;
}
