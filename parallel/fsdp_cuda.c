#include "fsdp_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/bf16.h"
#include "../kernels/cuda_device.h"
#include "../kernels/shard_accumulate.h"
#include "../optim/norm_fixed.h"
#include "../optim/norm_fixed_math.h"
#include "../optim/optim_cuda.h"

struct FsdpCuda {
    Comm *comm;
    const ShardPlan *plan;   /* the host sharding's */
    const ShardSegment *segs;
    int nseg;
    DecoderCuda *g;
    float *master;           /* device (plan.local_numel): this rank's fp32 parameters */
    float *grad_sum;         /* device (plan.local_numel): sum over micro-batches of their gradients */
    float *exchange;         /* device (world, largest piece): the reduce-scatter's receive buffer */
    bf16 *stage;             /* device (plan.max_unit), bf16 engine: a gathered unit's bf16 values; NULL in fp32 */
    bf16 *send16;            /* device (this rank's largest piece), bf16 engine: its piece rounded to bf16 */
    double *blocks;          /* device (nblocks): the norm's block sums */
    int64_t nblocks;
    OptimCuda *opt;
    uint8_t *current;        /* per resident unit (embedding, tail): the engine holds this step's parameters */
    int slot_unit[DECODER_CUDA_SLOTS]; /* the layer unit each weight slot holds (or is receiving), or -1 */
    int in_flight;           /* unit whose gather runs in the background, or -1 */
    int64_t *counts, *displs, *scounts, *sdispls, *rcounts, *rdispls; /* world each */
    int64_t bytes;           /* device bytes held */
    void *pinned[7];         /* host buffers page-locked for checkpoints (the master shard, the states) */
    int npinned;
    int64_t gathers, gather_bytes, reduces, reduce_bytes;
};

static int64_t piece(const FsdpCuda *d, int u, int r) { return shard_piece_numel(d->plan, u, r); }

static int is_layer(const FsdpCuda *d, int u) { return u >= 1 && u <= d->plan->n_units - 2; }

/* A layer of a streamed engine lives in a slot while it runs; every other
 * unit (all of them with a whole engine) stays in place for the step. */
static int in_slot(const FsdpCuda *d, int u) { return d->g->streamed && is_layer(d, u); }

/* The engine holds unit u's current parameters: a resident unit gathered
 * this step, or a layer still in its slot. */
static int holds(const FsdpCuda *d, int u) {
    return in_slot(d, u) ? d->slot_unit[u % DECODER_CUDA_SLOTS] == u : d->current[u];
}

static void set_counts(FsdpCuda *d, int u, int64_t scale) {
    const ShardPlan *p = d->plan;
    for (int r = 0; r < p->world; r++) {
        d->counts[r] = scale * piece(d, u, r);
        d->displs[r] = scale * (shard_cut(p, u, r) - p->unit_begin[u]);
    }
}

/* A bf16 engine's unit with matrices: each fp32 tensor (the norms) gathered
 * where it lives, in fp32 and at once (a few thousand elements; before the
 * big gather, so that a blocking gather does not join a background one). */
static void gather_fp32_tensors(FsdpCuda *d, int u) {
    const ShardPlan *p = d->plan;
    const ParamLayout *L = &d->g->layout;
    int64_t b = p->unit_begin[u], e = p->unit_begin[u + 1];
    for (int i = param_layout_tensor_at(L, b); i < L->n && L->t[i].offset < e; i++) {
        if (decoder_cuda_tensor_is_bf16(d->g, i)) continue;
        int64_t t0 = L->t[i].offset, t1 = t0 + L->t[i].numel, mine_at = 0;
        for (int r = 0; r < p->world; r++) {
            int64_t lo = shard_cut(p, u, r) > t0 ? shard_cut(p, u, r) : t0;
            int64_t hi = shard_cut(p, u, r + 1) < t1 ? shard_cut(p, u, r + 1) : t1;
            d->counts[r] = hi > lo ? hi - lo : 0;
            d->displs[r] = hi > lo ? lo - t0 : 0;
            if (r == p->rank) mine_at = hi > lo ? lo - shard_cut(p, u, r) : 0;
        }
        float *dst = decoder_cuda_params_in_place(d->g, t0, t1);
        KV_CHECK(dst, "fsdp on the GPUs: tensor '%s' is not an fp32 tensor in place", L->t[i].name);
        comm_all_gather_v(d->comm, COMM_F32, d->master + p->local_offset[u] + mine_at, dst, d->counts, d->displs);
        d->gathers++;
        d->gather_bytes += (int64_t)sizeof(float) * (t1 - t0 - d->counts[p->rank]);
    }
}

/* Unit u's gather started: a layer takes the slot of its parity (the one a
 * prefetch fills is never the one the running layer reads). A unit whose
 * tensors are all fp32 on the engine is gathered in fp32 where it lives;
 * one with bf16 matrices travels as bf16, each rank rounding its own piece
 * (the same rounding the receiver would do), half the bytes. */
static void start_gather(FsdpCuda *d, int u, int background) {
    const ShardPlan *p = d->plan;
    if (in_slot(d, u)) {
        decoder_cuda_bind_layer(d->g, u - 1, u % DECODER_CUDA_SLOTS);
        d->slot_unit[u % DECODER_CUDA_SLOTS] = u;
    }
    int64_t b = p->unit_begin[u], e = p->unit_begin[u + 1];
    const float *mine = d->master + p->local_offset[u];
    float *in_place = decoder_cuda_params_in_place(d->g, b, e);
    CommType type = COMM_F32;
    const void *send = mine;
    void *recv = in_place;
    int64_t scale = 1, elem = (int64_t)sizeof(float);
    if (!in_place) {
        KV_CHECK(d->stage, "fsdp on the GPUs: unit %d has bf16 tensors but no staging buffer", u);
        gather_fp32_tensors(d, u);
        cast_bf16_cuda(d->send16, mine, piece(d, u, p->rank));
        type = COMM_U8, send = d->send16, recv = d->stage, scale = (int64_t)sizeof(bf16), elem = 1;
    }
    set_counts(d, u, scale);
    if (background) comm_all_gather_v_start(d->comm, type, send, recv, d->counts, d->displs);
    else comm_all_gather_v(d->comm, type, send, recv, d->counts, d->displs);
    d->gathers++;
    d->gather_bytes += elem * scale * (e - b - piece(d, u, p->rank));
}

/* The gathered unit into the engine's places: the bf16 matrices from the
 * staging buffer; an fp32 unit is in place already (a tied lm_head's bf16
 * copy is rounded from the embedding). */
static void place(FsdpCuda *d, int u) {
    int64_t b = d->plan->unit_begin[u], e = d->plan->unit_begin[u + 1];
    float *in_place = decoder_cuda_params_in_place(d->g, b, e);
    if (in_place) decoder_cuda_install_params(d->g, in_place, b, e);
    else decoder_cuda_install_bf16(d->g, d->stage, b, e);
    if (!in_slot(d, u)) d->current[u] = 1;
}

static void finish_in_flight(FsdpCuda *d) {
    if (d->in_flight < 0) return;
    comm_wait(d->comm);
    place(d, d->in_flight);
    d->in_flight = -1;
}

static void gather_now(FsdpCuda *d, int u) {
    finish_in_flight(d);
    if (holds(d, u)) return;
    start_gather(d, u, 0);
    place(d, u);
}

/* The unit in place now (a layer's gradient slot bound and zeroed for its
 * backward), and the next one of this pass on its way. */
static void on_params_needed(void *ctx, int unit, int backward) {
    FsdpCuda *d = ctx;
    if (d->in_flight == unit) finish_in_flight(d);
    else gather_now(d, unit);
    if (backward && in_slot(d, unit)) decoder_cuda_bind_layer_grads(d->g, unit - 1);
    int next = backward ? unit - 1 : unit + 1;
    int wanted = backward ? is_layer(d, next) : next < d->plan->n_units;
    if (wanted && !holds(d, next)) {
        finish_in_flight(d);
        start_gather(d, next, 1);
        d->in_flight = next;
    }
}

/* Every rank's piece of unit u's gradient to its owner, which adds the W
 * pieces in rank order. */
static void on_grads_ready(void *ctx, int u) {
    FsdpCuda *d = ctx;
    const ShardPlan *p = d->plan;
    int W = p->world;
    int64_t base = p->unit_begin[u], mine = piece(d, u, p->rank);
    for (int r = 0; r < W; r++) {
        d->scounts[r] = piece(d, u, r);
        d->sdispls[r] = shard_cut(p, u, r) - base;
        d->rcounts[r] = mine;
        d->rdispls[r] = (int64_t)r * mine;
    }
    comm_all_to_all_v(d->comm, COMM_F32, decoder_cuda_grads_of(d->g, base, p->unit_begin[u + 1]), d->scounts,
                      d->sdispls, d->exchange, d->rcounts, d->rdispls);
    shard_accumulate_cuda(d->grad_sum + p->local_offset[u], d->exchange, mine, W);
    d->reduces++;
    d->reduce_bytes += (int64_t)sizeof(float) * (p->unit_begin[u + 1] - base - mine);
}

FsdpCuda *fsdp_cuda_create(Fsdp *f, DecoderCuda *g, const Optimizer *host_opt) {
    KV_CHECK(comm_backend(f->comm) == COMM_NCCL || comm_backend(f->comm) == COMM_DEVICE,
             "fsdp on the GPUs: the communicator must move device buffers (nccl, or device for one rank; it uses %s)",
             comm_backend_name(comm_backend(f->comm)));
    FsdpCuda *d = xcalloc(1, sizeof *d);
    d->comm = f->comm, d->plan = &f->plan, d->segs = f->segs, d->nseg = f->nseg, d->g = g;
    const ShardPlan *p = d->plan;
    int W = p->world;
    FsdpCudaBytes b = fsdp_cuda_bytes(p, g->precision == DECODER_CUDA_BF16_WEIGHTS, host_opt->kind);
    d->master = cuda_malloc_counted(&d->bytes, b.master);
    d->grad_sum = cuda_malloc_counted(&d->bytes, b.grad_sum);
    d->exchange = cuda_malloc_counted(&d->bytes, b.exchange);
    if (b.stage) {
        d->stage = cuda_malloc_counted(&d->bytes, (int64_t)sizeof(bf16) * p->max_unit);
        d->send16 = cuda_malloc_counted(&d->bytes, (int64_t)sizeof(bf16) * shard_max_piece(p, p->rank));
    }
    d->nblocks = shard_norm_block_count(d->segs, d->nseg);
    d->blocks = cuda_malloc_counted(&d->bytes, b.blocks);
    d->opt = optim_cuda_create(host_opt);
    d->bytes += optim_cuda_bytes(d->opt);
    /* the memory plan adds up fsdp_cuda_bytes: what is held must be that */
    KV_CHECK(d->bytes == b.total, "fsdp on the GPUs: holds %lld device bytes but fsdp_cuda_bytes says %lld",
             (long long)d->bytes, (long long)b.total);
    d->current = xcalloc((size_t)p->n_units, 1);
    for (int s = 0; s < DECODER_CUDA_SLOTS; s++) d->slot_unit[s] = -1;
    d->in_flight = -1;
    d->counts = xmalloc(sizeof(int64_t) * 6 * (size_t)W);
    d->displs = d->counts + W, d->scounts = d->displs + W, d->sdispls = d->scounts + W;
    d->rcounts = d->sdispls + W, d->rdispls = d->rcounts + W;
    cuda_memset_zero(d->grad_sum, (size_t)b.grad_sum);
    /* a checkpoint copies the shard and its states to these host buffers:
     * page-locked, they move at the bus's speed instead of through the
     * driver's bounce buffers */
    void *host[7] = {f->master,          host_opt->m_code, host_opt->v_code, host_opt->m_absmax,
                     host_opt->v_absmax, host_opt->m32,    host_opt->v32};
    size_t size[7] = {sizeof(float) * (size_t)p->local_numel,
                      (size_t)host_opt->n_code,
                      (size_t)host_opt->n_code,
                      sizeof(float) * (size_t)host_opt->n_absmax,
                      sizeof(float) * (size_t)host_opt->n_absmax,
                      sizeof(float) * (size_t)host_opt->n_f32,
                      sizeof(float) * (size_t)host_opt->n_f32};
    for (int i = 0; i < 7; i++)
        if (host[i] && size[i]) {
            cuda_host_pin(host[i], size[i]);
            d->pinned[d->npinned++] = host[i];
        }
    g->pass.hooks = (DecoderUnitHooks){d, on_params_needed, on_grads_ready};
    return d;
}

void fsdp_cuda_free(FsdpCuda *d, DecoderCuda *g) {
    if (!d) return;
    finish_in_flight(d);
    if (g) g->pass.hooks = (DecoderUnitHooks){0};
    optim_cuda_free(d->opt);
    for (int i = 0; i < d->npinned; i++) cuda_host_unpin(d->pinned[i]);
    cuda_free(d->master);
    cuda_free(d->grad_sum);
    cuda_free(d->exchange);
    if (d->stage) cuda_free(d->stage);
    if (d->send16) cuda_free(d->send16);
    cuda_free(d->blocks);
    free(d->current);
    free(d->counts);
    free(d);
}

/* The parameters changed: every unit is gathered again on its next use. */
static void forget_units(FsdpCuda *d) {
    memset(d->current, 0, (size_t)d->plan->n_units);
    for (int s = 0; s < DECODER_CUDA_SLOTS; s++) d->slot_unit[s] = -1;
}

void fsdp_cuda_push(FsdpCuda *d, const float *master, const Optimizer *host_opt) {
    finish_in_flight(d);
    cuda_memcpy_h2d(d->master, master, sizeof(float) * (size_t)d->plan->local_numel);
    optim_cuda_upload(d->opt, host_opt);
    forget_units(d);
}

void fsdp_cuda_pull(const FsdpCuda *d, float *master, Optimizer *host_opt) {
    cuda_memcpy_d2h(master, d->master, sizeof(float) * (size_t)d->plan->local_numel);
    optim_cuda_download(d->opt, host_opt);
}

void fsdp_cuda_zero_grad_sum(FsdpCuda *d) {
    cuda_memset_zero(d->grad_sum, sizeof(float) * (size_t)d->plan->local_numel);
}

/* Block sums on each device; the ranks agree on the largest (one int64: the
 * max key, the double's bits without the sign, ordered as the doubles are
 * and NaN above +inf, optim/norm_fixed_math.h), then each adds
 * its blocks as integers on that common scale and the 16-byte partial sums
 * are added on the host. Integer addition does not care how blocks are
 * spread over ranks, so the result is the same for any rank count. */
double fsdp_cuda_grad_sum_squares(FsdpCuda *d) {
    finish_in_flight(d);
    double mine = shard_block_sums_cuda(d->blocks, d->grad_sum, d->segs, d->nseg);
    /* a max key has its sign bit clear, so the int64 max is the key's max */
    double max = nf_key_value((uint64_t)comm_max_i64(d->comm, (int64_t)nf_max_key(mine)));
    if (!(max > 0) || !isfinite(max)) return max; /* 0, or a non-finite block: the step is skipped */
    int E = norm_fixed_exponent(max);
    Fixed128 part = shard_fixed_sum_cuda(d->blocks, d->nblocks, E);
    int W = d->plan->world;
    Fixed128 *all = xmalloc(sizeof(Fixed128) * (size_t)W);
    for (int r = 0; r < W; r++) {
        d->counts[r] = (int64_t)sizeof(Fixed128);
        d->displs[r] = (int64_t)sizeof(Fixed128) * r;
    }
    comm_host_all_gather_v(d->comm, COMM_U8, &part, all, d->counts, d->displs);
    Fixed128 sum = {0};
    for (int r = 0; r < W; r++) sum = fixed128_add(sum, all[r]);
    free(all);
    return fixed128_to_double(sum, E);
}

int fsdp_cuda_step(FsdpCuda *d, const AdamWHyper *h, int64_t step) {
    finish_in_flight(d);
    int bad = optim_cuda_check(d->opt, d->grad_sum, OPTIM_F32, h, step);
    if (comm_max_i64(d->comm, bad)) return 1;
    KV_CHECK(optim_cuda_step(d->opt, d->master, OPTIM_F32, d->grad_sum, OPTIM_F32, h, step) == 0,
             "step %lld: the device optimizer rejected gradients its check accepted", (long long)step);
    forget_units(d);
    return 0;
}

int64_t fsdp_cuda_device_bytes(const FsdpCuda *d) { return d->bytes; }

void fsdp_cuda_traffic(const FsdpCuda *d, int64_t *gathers, int64_t *gather_bytes, int64_t *reduces,
                       int64_t *reduce_bytes) {
    *gathers = d->gathers, *gather_bytes = d->gather_bytes, *reduces = d->reduces, *reduce_bytes = d->reduce_bytes;
}
