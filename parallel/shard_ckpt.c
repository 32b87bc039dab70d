#include "shard_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

Optimizer *shard_optimizer_create(OptimKind kind, const ShardPlan *p, int r) {
    ShardSegment *s;
    int n = shard_segments(p, r, &s);
    int64_t *off = xmalloc(sizeof(int64_t) * 3 * (size_t)(n + 1)), *numel = off + n + 1, *whole = numel + n + 1;
    for (int i = 0; i < n; i++) off[i] = s[i].local, numel[i] = s[i].numel, whole[i] = s[i].tensor_numel;
    Optimizer *o = optim_create_pieces(kind, off, numel, whole, n);
    free(off);
    free(s);
    return o;
}

static char *optim_bytes(const Optimizer *o, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) die("cannot open a memory stream for the optimizer state");
    optim_save(o, f, "<optimizer state>");
    fclose(f);
    return buf;
}

void shard_ckpt_add(CkptWriter *w, const ShardPlan *p, const float *master, const Optimizer *o) {
    int64_t *pieces = xmalloc(sizeof(int64_t) * 2 * (size_t)p->n_units);
    for (int u = 0; u < p->n_units; u++) {
        pieces[2 * u] = shard_cut(p, u, p->rank);
        pieces[2 * u + 1] = shard_cut(p, u, p->rank + 1);
    }
    size_t olen;
    char *ob = optim_bytes(o, &olen);
    ckpt_add_section(w, "pieces", pieces, (int64_t)sizeof(int64_t) * 2 * p->n_units);
    ckpt_add_section(w, "params", master, (int64_t)sizeof(float) * p->local_numel);
    ckpt_add_section(w, "optim", ob, (int64_t)olen);
    free(ob);
    free(pieces);
}

void shard_ckpt_commit(Comm *c, CkptWriter *w, uint64_t layout_hash, int keep_last) {
    char run_dir[4096];
    snprintf(run_dir, sizeof run_dir, "%s", w->dir);
    *strrchr(run_dir, '/') = '\0'; /* .../ckpt */
    *strrchr(run_dir, '/') = '\0';
    int64_t step = w->step;
    int W = comm_world(c);
    CkptFileInfo mine = ckpt_writer_finish(w);
    CkptFileInfo *all = xmalloc(sizeof *all * (size_t)W);
    int64_t *counts = xmalloc(sizeof(int64_t) * 2 * (size_t)W), *displs = counts + W;
    for (int r = 0; r < W; r++) counts[r] = (int64_t)sizeof mine, displs[r] = (int64_t)r * (int64_t)sizeof mine;
    comm_host_all_gather_v(c, COMM_U8, &mine, all, counts, displs);
    if (comm_rank(c) == 0) ckpt_write_manifest(run_dir, step, W, layout_hash, all, W, keep_last);
    comm_barrier(c); /* nobody goes on (or exits) before the checkpoint is complete */
    free(all);
    free(counts);
}

/* Copies the optimizer state of [lo, hi) (global offsets, inside one tensor)
 * from old segment os to new segment ns. */
static void copy_state(Optimizer *dst, const OptimSegment *ns, int64_t nglobal, const Optimizer *src,
                       const OptimSegment *os, int64_t oglobal, int64_t lo, int64_t hi) {
    KV_CHECK(ns->quantized == os->quantized, "checkpoint: a tensor piece is %s in the checkpoint but %s here",
             os->quantized ? "8-bit" : "fp32", ns->quantized ? "8-bit" : "fp32");
    int64_t dn = lo - nglobal, dold = lo - oglobal, n = hi - lo;
    if (ns->quantized) {
        memcpy(dst->m_code + ns->state_offset + dn, src->m_code + os->state_offset + dold, (size_t)n);
        memcpy(dst->v_code + ns->state_offset + dn, src->v_code + os->state_offset + dold, (size_t)n);
        int64_t nb = (n + OPTIM_BLOCK - 1) / OPTIM_BLOCK, bn = dn / OPTIM_BLOCK, bo = dold / OPTIM_BLOCK;
        KV_CHECK(dn % OPTIM_BLOCK == 0 && dold % OPTIM_BLOCK == 0,
                 "checkpoint: a piece boundary splits an 8-bit block (offsets %lld, %lld)", (long long)dn,
                 (long long)dold);
        memcpy(dst->m_absmax + ns->absmax_offset + bn, src->m_absmax + os->absmax_offset + bo,
               sizeof(float) * (size_t)nb);
        memcpy(dst->v_absmax + ns->absmax_offset + bn, src->v_absmax + os->absmax_offset + bo,
               sizeof(float) * (size_t)nb);
    } else {
        memcpy(dst->m32 + ns->state_offset + dn, src->m32 + os->state_offset + dold, sizeof(float) * (size_t)n);
        memcpy(dst->v32 + ns->state_offset + dn, src->v32 + os->state_offset + dold, sizeof(float) * (size_t)n);
    }
}

/* Everything old rank k of old_plan holds that overlaps p's pieces. */
static void restore_from_rank(const char *step_dir, int k, const ShardPlan *old, const ShardPlan *p, float *master,
                              Optimizer *o, uint64_t layout_hash) {
    CkptReader rd;
    ckpt_reader_open(&rd, step_dir, k, old->world, layout_hash);
    int64_t *pieces = xmalloc(sizeof(int64_t) * 2 * (size_t)old->n_units);
    ckpt_read_section(&rd, "pieces", pieces, (int64_t)sizeof(int64_t) * 2 * old->n_units);
    for (int u = 0; u < old->n_units; u++)
        KV_CHECK(pieces[2 * u] == shard_cut(old, u, k) && pieces[2 * u + 1] == shard_cut(old, u, k + 1),
                 "%s: rank %d's piece of unit %d is [%lld, %lld), the shard plan for %d ranks gives [%lld, %lld)",
                 step_dir, k, u, (long long)pieces[2 * u], (long long)pieces[2 * u + 1], old->world,
                 (long long)shard_cut(old, u, k), (long long)shard_cut(old, u, k + 1));
    free(pieces);
    int64_t pbytes;
    const float *params = ckpt_get_section(&rd, "params", &pbytes);
    KV_CHECK(params && pbytes == (int64_t)sizeof(float) * shard_rank_numel(old, k),
             "%s: rank %d's 'params' section must hold %lld floats", step_dir, k, (long long)shard_rank_numel(old, k));
    Optimizer *oo = shard_optimizer_create(o->kind, old, k);
    int64_t olen;
    const void *ob = ckpt_get_section(&rd, "optim", &olen);
    KV_CHECK(ob, "%s: rank %d's checkpoint has no 'optim' section", step_dir, k);
    FILE *f = fmemopen((void *)ob, (size_t)olen, "rb");
    if (!f) die("%s: cannot read rank %d's optimizer section", step_dir, k);
    optim_load(oo, f, step_dir);
    fclose(f);
    ShardSegment *ns, *os;
    int nn = shard_segments(p, p->rank, &ns), no = shard_segments(old, k, &os);
    for (int i = 0; i < nn; i++)
        for (int j = 0; j < no; j++) {
            if (ns[i].tensor != os[j].tensor) continue;
            int64_t lo = ns[i].global > os[j].global ? ns[i].global : os[j].global;
            int64_t a = ns[i].global + ns[i].numel, b = os[j].global + os[j].numel, hi = a < b ? a : b;
            if (hi <= lo) continue;
            memcpy(master + ns[i].local + (lo - ns[i].global), params + os[j].local + (lo - os[j].global),
                   sizeof(float) * (size_t)(hi - lo));
            copy_state(o, &o->seg[i], ns[i].global, oo, &oo->seg[j], os[j].global, lo, hi);
        }
    free(ns), free(os);
    optim_free(oo);
    ckpt_reader_close(&rd);
}

void shard_ckpt_restore(const char *step_dir, const ShardPlan *p, float *master, Optimizer *o, uint64_t layout_hash) {
    int old_world = ckpt_manifest_world(step_dir);
    for (int k = 0; k < old_world; k++) {
        ShardPlan old;
        shard_plan_build(&old, p->layout, old_world, k);
        int overlaps = 0;
        for (int u = 0; u < p->n_units && !overlaps; u++)
            overlaps = shard_cut(&old, u, k) < shard_cut(p, u, p->rank + 1) &&
                       shard_cut(p, u, p->rank) < shard_cut(&old, u, k + 1);
        if (overlaps) restore_from_rank(step_dir, k, &old, p, master, o, layout_hash);
        shard_plan_free(&old);
    }
}
