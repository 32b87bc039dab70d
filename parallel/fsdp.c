#include "fsdp.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/shard_accumulate.h"

static void set_counts(Fsdp *f, int u) {
    int64_t base = f->plan.unit_begin[u];
    for (int r = 0; r < f->plan.world; r++) {
        f->counts[r] = shard_piece_numel(&f->plan, u, r);
        f->displs[r] = shard_cut(&f->plan, u, r) - base;
    }
}

static void finish_prefetch(Fsdp *f) {
    if (f->prefetched < 0) return;
    comm_wait(f->comm);
    f->prefetched = -1;
}

static void start_prefetch(Fsdp *f, int u) {
    finish_prefetch(f);
    set_counts(f, u);
    comm_all_gather_v_start(f->comm, COMM_F32, f->master + f->plan.local_offset[u],
                            f->work_params + f->plan.unit_begin[u], f->counts, f->displs);
    f->prefetched = u;
    f->gathers++;
}

/* The unit in place now, and the one after it (in this pass's order) on its way. */
static void on_params_needed(void *ctx, int unit, int backward) {
    Fsdp *f = ctx;
    int last_layer = f->plan.n_units - 2;
    if (!backward || f->reshard_after_forward) {
        if (f->prefetched == unit) finish_prefetch(f);
        else fsdp_gather_unit(f, unit);
    }
    int next = backward ? (unit == last_layer + 1 ? last_layer : unit - 1) : unit + 1;
    int wanted =
        backward ? f->reshard_after_forward && next >= 1 && unit >= 1 : next <= last_layer + 1 && unit <= last_layer;
    if (wanted) start_prefetch(f, next);
}

static void on_grads_ready(void *ctx, int unit) { fsdp_reduce_unit(ctx, unit); }

void fsdp_init(Fsdp *f, Comm *comm, Decoder *m, int reshard_after_forward) {
    memset(f, 0, sizeof *f);
    f->comm = comm;
    f->reshard_after_forward = reshard_after_forward;
    f->prefetched = -1;
    int W = comm_world(comm), R = comm_rank(comm);
    shard_plan_build(&f->plan, &m->layout, W, R);
    KV_CHECK(f->plan.n_units == (int)m->cfg.num_hidden_layers + 2,
             "fsdp: the layout has %d units, expected embedding + %lld layers + tail", f->plan.n_units,
             (long long)m->cfg.num_hidden_layers);
    f->work_params = m->params, f->work_grads = m->grads;
    int64_t n = f->plan.local_numel, piece = shard_max_piece(&f->plan, -1);
    f->master = xcalloc((size_t)n + 1, sizeof(float));
    f->grad_sum = xcalloc((size_t)n + 1, sizeof(float));
    f->exchange = xmalloc(sizeof(float) * (size_t)(W * piece + 1));
    f->counts = xmalloc(sizeof(int64_t) * 6 * (size_t)W);
    f->displs = f->counts + W, f->scounts = f->displs + W, f->sdispls = f->scounts + W;
    f->rcounts = f->sdispls + W, f->rdispls = f->rcounts + W;
    for (int u = 0; u < f->plan.n_units; u++)
        memcpy(f->master + f->plan.local_offset[u], m->params + shard_cut(&f->plan, u, R),
               sizeof(float) * (size_t)shard_piece_numel(&f->plan, u, R));
    f->nseg = shard_segments(&f->plan, R, &f->segs);
    m->pass.hooks = (DecoderUnitHooks){f, on_params_needed, on_grads_ready};
}

void fsdp_free(Fsdp *f, Decoder *m) {
    finish_prefetch(f);
    if (m) m->pass.hooks = (DecoderUnitHooks){0};
    shard_plan_free(&f->plan);
    free(f->master), free(f->grad_sum), free(f->exchange), free(f->counts), free(f->segs);
}

void fsdp_gather_unit(Fsdp *f, int u) {
    finish_prefetch(f);
    int64_t base = f->plan.unit_begin[u];
    set_counts(f, u);
    /* host buffers whatever the backend: under NCCL (the GPU engine) this
     * gathers the host's master for the final model */
    comm_host_all_gather_v(f->comm, COMM_F32, f->master + f->plan.local_offset[u], f->work_params + base, f->counts,
                           f->displs);
    f->gathers++;
}

void fsdp_gather_all(Fsdp *f) {
    for (int u = 0; u < f->plan.n_units; u++) fsdp_gather_unit(f, u);
}

void fsdp_zero_grad_sum(Fsdp *f) { memset(f->grad_sum, 0, sizeof(float) * (size_t)f->plan.local_numel); }

void fsdp_reduce_unit(Fsdp *f, int u) {
    int W = f->plan.world, R = f->plan.rank;
    int64_t base = f->plan.unit_begin[u], mine = shard_piece_numel(&f->plan, u, R);
    for (int r = 0; r < W; r++) {
        f->scounts[r] = shard_piece_numel(&f->plan, u, r);
        f->sdispls[r] = shard_cut(&f->plan, u, r) - base;
        f->rcounts[r] = mine;
        f->rdispls[r] = (int64_t)r * mine;
    }
    comm_all_to_all_v(f->comm, COMM_F32, f->work_grads + base, f->scounts, f->sdispls, f->exchange, f->rcounts,
                      f->rdispls);
    shard_accumulate_cpu(f->grad_sum + f->plan.local_offset[u], f->exchange, mine, W);
    f->reduces++;
}

void fsdp_gather_f64(Fsdp *f, const double *mine, int64_t n_mine, double *out) {
    int W = f->plan.world;
    for (int r = 0; r < W; r++) f->counts[r] = n_mine, f->displs[r] = (int64_t)r * n_mine;
    comm_host_all_gather_v(f->comm, COMM_F64, mine, out, f->counts, f->displs);
}

double fsdp_grad_sum_squares(Fsdp *f) {
    int W = f->plan.world, R = f->plan.rank;
    int64_t mine = 0, total = 0;
    for (int s = 0; s < f->nseg; s++) mine += (f->segs[s].numel + SHARD_ALIGN - 1) / SHARD_ALIGN;
    double *part = xmalloc(sizeof(double) * (size_t)(mine + 1));
    int64_t k = 0;
    for (int s = 0; s < f->nseg; s++) {
        const float *g = f->grad_sum + f->segs[s].local;
        int64_t nb = (f->segs[s].numel + SHARD_ALIGN - 1) / SHARD_ALIGN;
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            int64_t end = (b + 1) * SHARD_ALIGN < f->segs[s].numel ? (b + 1) * SHARD_ALIGN : f->segs[s].numel;
            double acc = 0;
            for (int64_t i = b * SHARD_ALIGN; i < end; i++) acc += (double)g[i] * (double)g[i];
            part[k + b] = acc;
        }
        k += nb;
    }
    /* every rank's block sums, then added in global order: unit by unit, rank by rank */
    int U = f->plan.n_units;
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)(W + (int64_t)U * W)), *blocks = pos + W;
    for (int r = 0; r < W; r++) {
        f->counts[r] = 0;
        for (int u = 0; u < U; u++) f->counts[r] += blocks[(int64_t)u * W + r] = shard_piece_blocks(&f->plan, u, r);
        f->displs[r] = pos[r] = total;
        total += f->counts[r];
    }
    KV_CHECK(f->counts[R] == mine, "fsdp: rank %d has %lld norm blocks, the plan says %lld", R, (long long)mine,
             (long long)f->counts[R]);
    double *all = xmalloc(sizeof(double) * (size_t)(total + 1));
    comm_host_all_gather_v(f->comm, COMM_F64, part, all, f->counts, f->displs);
    double sum = 0;
    for (int u = 0; u < U; u++)
        for (int r = 0; r < W; r++)
            for (int64_t b = blocks[(int64_t)u * W + r]; b > 0; b--) sum += all[pos[r]++];
    free(part), free(all), free(pos);
    return sum;
}
