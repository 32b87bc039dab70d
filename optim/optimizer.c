#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/bf16.h"

AdamWHyper adamw_hyper_default(void) {
    AdamWHyper h = {.lr = 5e-6, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0, .grad_scale = 1.0};
    return h;
}

const char *optim_kind_name(OptimKind k) { return k == OPTIM_ADAMW8BIT ? "adamw8bit" : "adamw"; }

int optim_kind_parse(const char *s, OptimKind *out) {
    if (strcmp(s, "adamw") == 0) *out = OPTIM_ADAMW;
    else if (strcmp(s, "adamw8bit") == 0) *out = OPTIM_ADAMW8BIT;
    else return -1;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const OptimSegment *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static void check_segments(const int64_t *off, const int64_t *numel, int nseg) {
    KV_CHECK(nseg >= 0, "optimizer: negative segment count %d", nseg);
    OptimSegment *sorted = xcalloc((size_t)nseg + 1, sizeof *sorted);
    for (int i = 0; i < nseg; i++) {
        KV_CHECK(off[i] >= 0 && numel[i] > 0, "optimizer: segment %d has offset %lld, numel %lld (need >= 0, > 0)", i,
                 (long long)off[i], (long long)numel[i]);
        sorted[i].offset = off[i];
        sorted[i].numel = numel[i];
    }
    qsort(sorted, (size_t)nseg, sizeof *sorted, cmp_by_offset);
    for (int i = 1; i < nseg; i++)
        KV_CHECK(sorted[i - 1].offset + sorted[i - 1].numel <= sorted[i].offset,
                 "optimizer: segments [%lld, +%lld) and [%lld, +%lld) overlap", (long long)sorted[i - 1].offset,
                 (long long)sorted[i - 1].numel, (long long)sorted[i].offset, (long long)sorted[i].numel);
    free(sorted);
}

Optimizer *optim_create(OptimKind kind, const int64_t *seg_offset, const int64_t *seg_numel, int nseg) {
    return optim_create_pieces(kind, seg_offset, seg_numel, NULL, nseg);
}

int optim_segment_quantized(OptimKind kind, int64_t tensor_numel) {
    return kind == OPTIM_ADAMW8BIT && tensor_numel >= OPTIM_MIN_8BIT_NUMEL;
}

OptimStateCounts optim_state_counts(OptimKind kind, const int64_t *seg_numel, const int64_t *seg_tensor_numel,
                                    int nseg) {
    OptimStateCounts n = {0, 0, 0};
    for (int i = 0; i < nseg; i++) {
        if (optim_segment_quantized(kind, seg_tensor_numel ? seg_tensor_numel[i] : seg_numel[i])) {
            n.n_code += seg_numel[i];
            n.n_absmax += (seg_numel[i] + OPTIM_BLOCK - 1) / OPTIM_BLOCK;
        } else n.n_f32 += seg_numel[i];
    }
    return n;
}

/* m and v codes (a byte each), their absmax and the fp32 states (one spare
 * element each, so that no buffer is empty), the segment table, the two
 * quantization maps with their midpoints, and the bad-gradient word. */
int64_t optim_device_bytes(const OptimStateCounts *n, int nseg) {
    return 2 * (n->n_code + 1) + 8 * (n->n_absmax + 1) + 8 * (n->n_f32 + 1) +
           (int64_t)OPTIM_DEV_SEGMENT_BYTES * (nseg + 1) + (int64_t)sizeof(float) * (256 * 2 + 255 * 2) + 8;
}

Optimizer *optim_create_pieces(OptimKind kind, const int64_t *seg_offset, const int64_t *seg_numel,
                               const int64_t *seg_tensor_numel, int nseg) {
    KV_CHECK(kind == OPTIM_ADAMW || kind == OPTIM_ADAMW8BIT, "optimizer: unknown kind %d", (int)kind);
    check_segments(seg_offset, seg_numel, nseg);
    Optimizer *o = xcalloc(1, sizeof *o);
    o->kind = kind;
    o->nseg = nseg;
    o->seg = xcalloc((size_t)nseg + 1, sizeof *o->seg);
    for (int i = 0; i < nseg; i++) {
        OptimSegment *s = &o->seg[i];
        int64_t blocks = (seg_numel[i] + OPTIM_BLOCK - 1) / OPTIM_BLOCK;
        s->offset = seg_offset[i];
        s->numel = seg_numel[i];
        int64_t whole = seg_tensor_numel ? seg_tensor_numel[i] : s->numel;
        KV_CHECK(whole >= s->numel, "optimizer: segment %d has %lld elements, more than its tensor's %lld", i,
                 (long long)s->numel, (long long)whole);
        s->quantized = optim_segment_quantized(kind, whole);
        s->first_block = o->nblocks;
        o->nblocks += blocks;
        if (s->quantized) {
            s->state_offset = o->n_code;
            s->absmax_offset = o->n_absmax;
            o->n_code += s->numel;
            o->n_absmax += blocks;
        } else {
            s->state_offset = o->n_f32;
            o->n_f32 += s->numel;
        }
    }
    /* calloc: zero codes with zero absmax mean zero states, and the pages of
     * a large state are only committed when first written */
    o->m_code = xcalloc((size_t)o->n_code + 1, 1);
    o->v_code = xcalloc((size_t)o->n_code + 1, 1);
    o->m_absmax = xcalloc((size_t)o->n_absmax + 1, sizeof(float));
    o->v_absmax = xcalloc((size_t)o->n_absmax + 1, sizeof(float));
    o->m32 = xcalloc((size_t)o->n_f32 + 1, sizeof(float));
    o->v32 = xcalloc((size_t)o->n_f32 + 1, sizeof(float));
    qmap_build(&o->map_m, 1);
    qmap_build(&o->map_v, 0);
    return o;
}

void optim_free(Optimizer *o) {
    if (!o) return;
    free(o->seg);
    free(o->m_code);
    free(o->v_code);
    free(o->m_absmax);
    free(o->v_absmax);
    free(o->m32);
    free(o->v32);
    free(o);
}

double optim_step_bytes(const Optimizer *o, int param_bytes, int grad_bytes) {
    double elems = (double)(o->n_code + o->n_f32);
    return elems * (2.0 * grad_bytes + 2.0 * param_bytes) + 4.0 * (double)o->n_code + 16.0 * (double)o->n_absmax +
           16.0 * (double)o->n_f32;
}

AdamWScalars adamw_scalars(const AdamWHyper *h, int64_t step) {
    KV_CHECK(step >= 1, "optimizer: step must be >= 1 (1-based for bias correction), got %lld", (long long)step);
    KV_CHECK(isfinite(h->lr) && h->lr >= 0, "optimizer: lr must be finite and >= 0, got %g", h->lr);
    KV_CHECK(h->beta1 >= 0 && h->beta1 < 1, "optimizer: beta1 must be in [0, 1), got %g", h->beta1);
    KV_CHECK(h->beta2 >= 0 && h->beta2 < 1, "optimizer: beta2 must be in [0, 1), got %g", h->beta2);
    KV_CHECK(isfinite(h->eps) && h->eps > 0, "optimizer: eps must be finite and > 0, got %g", h->eps);
    KV_CHECK(isfinite(h->weight_decay) && h->weight_decay >= 0, "optimizer: weight decay must be >= 0, got %g",
             h->weight_decay);
    KV_CHECK(isfinite(h->grad_scale) && h->grad_scale >= 0, "optimizer: grad scale must be finite and >= 0, got %g",
             h->grad_scale);
    double c1 = 1.0 - pow(h->beta1, (double)step);
    double c2 = sqrt(1.0 - pow(h->beta2, (double)step));
    AdamWScalars s = {
        .beta1 = (float)h->beta1,
        .beta2 = (float)h->beta2,
        .one_minus_beta1 = (float)(1.0 - h->beta1),
        .one_minus_beta2 = (float)(1.0 - h->beta2),
        .step_size = (float)(-h->lr * c2 / c1),
        .eps_hat = (float)(h->eps * c2),
        .decay = (float)(1.0 - h->lr * h->weight_decay),
        .grad_scale = (float)h->grad_scale,
    };
    return s;
}

int optim_block_segment(const Optimizer *o, int64_t b) {
    int lo = 0, hi = o->nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (o->seg[mid].first_block <= b) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void step_block_f32(const Optimizer *o, const OptimSegment *s, int64_t j0, int n, float *p, const float *g,
                           const AdamWScalars *sc) {
    float *m = o->m32 + s->state_offset + j0, *v = o->v32 + s->state_offset + j0;
    for (int i = 0; i < n; i++) {
        adamw_moments(sc, g[i], &m[i], &v[i]);
        p[i] = adamw_param(sc, p[i], m[i], v[i]);
    }
}

/* Dequantize, update in fp32, step the parameters with the fp32 moments,
 * then re-quantize against the block's new absmax (bitsandbytes' order). */
static void step_block_8bit(const Optimizer *o, const OptimSegment *s, int64_t j0, int n, float *p, const float *g,
                            const AdamWScalars *sc) {
    int64_t qb = s->absmax_offset + j0 / OPTIM_BLOCK;
    uint8_t *mc = o->m_code + s->state_offset + j0, *vc = o->v_code + s->state_offset + j0;
    float m[OPTIM_BLOCK], v[OPTIM_BLOCK];
    float am = o->m_absmax[qb], av = o->v_absmax[qb], new_am = 0.0f, new_av = 0.0f;
    for (int i = 0; i < n; i++) {
        m[i] = o->map_m.code[mc[i]] * am;
        v[i] = o->map_v.code[vc[i]] * av;
        adamw_moments(sc, g[i], &m[i], &v[i]);
        new_am = fmaxf(new_am, fabsf(m[i]));
        new_av = fmaxf(new_av, fabsf(v[i]));
    }
    for (int i = 0; i < n; i++) p[i] = adamw_param(sc, p[i], m[i], v[i]);
    for (int i = 0; i < n; i++) {
        mc[i] = new_am > 0.0f ? adamw_quantize(o->map_m.mid, m[i] / new_am) : o->map_m.zero_index;
        vc[i] = new_av > 0.0f ? adamw_quantize(o->map_v.mid, v[i] / new_av) : o->map_v.zero_index;
    }
    o->m_absmax[qb] = new_am;
    o->v_absmax[qb] = new_av;
}

/* First unusable gradient in (segment, index) order, or 0 if none. The
 * minimum over blocks is the same whatever the thread count. */
static int find_bad_grad(Optimizer *o, const float *grads, const AdamWScalars *sc) {
    int64_t first = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : first)
    for (int64_t b = 0; b < o->nblocks; b++) {
        const OptimSegment *s = &o->seg[optim_block_segment(o, b)];
        int64_t j0 = (b - s->first_block) * OPTIM_BLOCK;
        int64_t n = s->numel - j0 < OPTIM_BLOCK ? s->numel - j0 : OPTIM_BLOCK;
        const float *g = grads + s->offset + j0;
        for (int64_t i = 0; i < n; i++)
            if (!adamw_grad_ok(sc, g[i])) {
                if (b * OPTIM_BLOCK + i < first) first = b * OPTIM_BLOCK + i;
                break;
            }
    }
    if (first == INT64_MAX) return 0;
    int si = optim_block_segment(o, first / OPTIM_BLOCK);
    const OptimSegment *s = &o->seg[si];
    o->bad.segment = si;
    o->bad.index = first - s->first_block * OPTIM_BLOCK;
    o->bad.value = grads[s->offset + o->bad.index];
    return 1;
}

int optim_check_grads(Optimizer *o, const float *grads, const AdamWHyper *h, int64_t step) {
    AdamWScalars sc = adamw_scalars(h, step);
    return find_bad_grad(o, grads, &sc);
}

int optim_step(Optimizer *o, float *params, const float *grads, const AdamWHyper *h, int64_t step) {
    AdamWScalars sc = adamw_scalars(h, step);
    if (find_bad_grad(o, grads, &sc)) {
        warnf("optimizer step %lld skipped: unusable gradient %g (x grad scale %g) at segment %d element %lld "
              "(buffer offset %lld); parameters and optimizer states are unchanged",
              (long long)step, o->bad.value, h->grad_scale, o->bad.segment, (long long)o->bad.index,
              (long long)(o->seg[o->bad.segment].offset + o->bad.index));
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < o->nblocks; b++) {
        const OptimSegment *s = &o->seg[optim_block_segment(o, b)];
        int64_t j0 = (b - s->first_block) * OPTIM_BLOCK;
        int n = (int)(s->numel - j0 < OPTIM_BLOCK ? s->numel - j0 : OPTIM_BLOCK);
        float *p = params + s->offset + j0;
        const float *g = grads + s->offset + j0;
        if (s->quantized) step_block_8bit(o, s, j0, n, p, g, &sc);
        else step_block_f32(o, s, j0, n, p, g, &sc);
    }
    return 0;
}

int optim_step_rounded(Optimizer *o, float *params, const float *grads, const AdamWHyper *h, int64_t step,
                       const uint8_t *round, uint64_t seed) {
    if (optim_step(o, params, grads, h, step)) return 1;
    for (int si = 0; si < o->nseg; si++) {
        const OptimSegment *s = &o->seg[si];
        float *p = params + s->offset;
        KV_CHECK(round[si] <= OPTIM_ROUND_STOCHASTIC, "optimizer: unknown rounding %d for segment %d", round[si], si);
        if (round[si] == OPTIM_ROUND_NEAREST) {
#pragma omp parallel for schedule(static)
            for (int64_t j = 0; j < s->numel; j++) p[j] = float_from_bf16_bits(bf16_bits_from_float(p[j]));
        } else if (round[si] == OPTIM_ROUND_STOCHASTIC) {
#pragma omp parallel for schedule(static)
            for (int64_t j = 0; j < s->numel; j++)
                p[j] = adamw_round_bf16_sr(p[j], adamw_sr_bits(seed, step, s->offset + j));
        }
    }
    return 0;
}
