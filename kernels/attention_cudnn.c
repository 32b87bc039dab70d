/* attn_impl cudnn (kernels/attention_cudnn.h): the bf16 engine's attention
 * as cuDNN's fused SDPA, built on cuDNN's C graph (backend) API.
 *
 * Why the C API and not cudnn-frontend: the frontend is a C++17 header
 * library over this same API (plus nlohmann json, and heuristics, knob and
 * kernel-cache descriptors), while the engine's host code is C and the
 * emulator has to stand in for every cuDNN call the code makes
 * (tests/cuda_emu/cudnn_emu.c). Calling the backend directly keeps that
 * surface to four operations (matmul, pointwise, reduction, reshape) and
 * the graph, heuristics, plan and variant pack around them, which the
 * stand-in can execute and check strictly. The graphs below are the ones the
 * frontend's SDPA node lowers to (its matmul, pointwise, reduction and
 * reshape nodes; cudnn_frontend/node/scaled_dot_product_flash_attention.h),
 * so cuDNN's heuristics see the pattern its fused engines match.
 *
 * Tensors are declared 4-D as cuDNN's SDPA wants them, (batch, head,
 * sequence, head dim), over the engine's own layouts by strides: q, out,
 * dout (B, T, Hq, D) read as (B, Hq, rows, D) with strides (T Hq D, D, Hq D,
 * 1); lse (B, Hq, T) as (B, Hq, rows, 1). K^T and V^T are K and V with the
 * last two strides exchanged, as the frontend declares them.
 *
 * Plans (graph, engine configuration, execution plan) are cached per shape
 * and strides; the handle, plans and workspace live until
 * attention_cudnn_release(). The fixed-size buffers are carved from one
 * region laid out by attention_cudnn_scratch_layout (kernels/
 * attention_cudnn_size.h): the engine's, which its memory plan counts, or
 * the module's own for callers that bind none (the tests, the bench). */
#include "attention_cudnn.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "attention_cudnn_gather.h"
#include "attention_cudnn_size.h"
#include "cuda_device.h"
#include "refresh_mask.h"

static AttnCudnnBug planted = ATTN_CUDNN_OK;

void attention_cudnn_plant(AttnCudnnBug bug) { planted = bug; }

const char *attention_cudnn_unsupported(int64_t D, const RefreshMask *m) {
    if (!attention_cudnn_built())
        return "this kvcpt was built without cuDNN (no cudnn.h beside CUDA); use mma or cuda-core";
    if (D <= 0 || D > 128 || D % 8 != 0)
        return "cuDNN's fused attention takes head dims that are multiples of 8 up to 128; use mma or cuda-core";
    if (m && m->enabled && refresh_per_row(m))
        return "attn_impl cudnn runs the paper's RefreshKV rows only, not the per-row records of mask_evict or "
               "mask_restride; use mma or cuda-core";
    return NULL;
}

static void check_args(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                       const char *what) {
    const char *why = attention_cudnn_unsupported(D, m);
    if (why) die("%s: %s", what, why);
    KV_CHECK(B > 0 && T > 0 && Hq > 0 && Hkv > 0 && Hq % Hkv == 0, "%s: bad shape B %lld T %lld Hq %lld Hkv %lld", what,
             (long long)B, (long long)T, (long long)Hq, (long long)Hkv);
    KV_CHECK(B <= INT64_MAX / T / Hq / D, "%s: B T Hq D overflows", what);
    refresh_mask_validate(m, what);
}

#ifndef KVCPT_CUDNN
int attention_cudnn_built(void) { return 0; }
void attention_forward_cudnn_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                       const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                       const RefreshMask *m) {
    check_args(B, T, Hq, Hkv, D, m, "attention_forward_cudnn_bf16_cuda");
}
void attention_backward_cudnn_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                                        const bf16 *v, const bf16 *out, const float *lse, const int32_t *sel, int64_t B,
                                        int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    check_args(B, T, Hq, Hkv, D, m, "attention_backward_cudnn_bf16_cuda");
}
const char *attention_cudnn_probe(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    return attention_cudnn_unsupported(D, m);
}
void attention_cudnn_use_scratch(void *base, int64_t bytes) {}
int64_t attention_cudnn_workspace_bytes(void) { return 0; }
void attention_cudnn_release(void) {}
#else
#include <cudnn.h>
#ifndef KVCPT_CUDA_EMU
#include <dlfcn.h>
#endif

int attention_cudnn_built(void) { return 1; }

/* cuDNN's entry points. cuDNN is loaded on first use, not linked: kvcpt
 * then starts on a machine without it (every other path), and a GPU
 * machine's cuDNN (a CUDA install's, or the nvidia-cudnn wheel's that
 * torch brings) is found on LD_LIBRARY_PATH. Under the emulator the table
 * holds the stand-in's functions (tests/cuda_emu/cudnn_emu.c). */
typedef struct {
    int loaded;
    size_t (*version)(void);
    const char *(*error_string)(cudnnStatus_t);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                         const void *);
    cudnnStatus_t (*get)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                         int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} CudnnApi;
static CudnnApi api;

/* The first refusal while loading cuDNN or building a plan. Once it is set
 * the builders below do nothing more; plan_for then dies with it, or
 * attention_cudnn_probe returns it (a bench or a trainer asks before it
 * runs, so a card whose cuDNN takes no engine for these graphs says so
 * instead of stopping halfway). */
static char refusal[512];

static void refuse(const char *fmt, ...) KV_PRINTF(1, 2);
static void refuse(const char *fmt, ...) {
    if (refusal[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(refusal, sizeof refusal, fmt, ap);
    va_end(ap);
}

#ifdef KVCPT_CUDA_EMU
static void load_cudnn(void) {
    api = (CudnnApi){1,
                     cudnnGetVersion,
                     cudnnGetErrorString,
                     cudnnCreate,
                     cudnnDestroy,
                     cudnnBackendCreateDescriptor,
                     cudnnBackendDestroyDescriptor,
                     cudnnBackendFinalize,
                     cudnnBackendSetAttribute,
                     cudnnBackendGetAttribute,
                     cudnnBackendExecute};
}
#else
static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) refuse("libcudnn lacks %s (%s)", name, dlerror());
    return f;
}

static void load_cudnn(void) {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        refuse("cannot load cuDNN 9 (%s); put its lib directory on LD_LIBRARY_PATH (a CUDA install's lib64, or "
               "site-packages/nvidia/cudnn/lib), or use attn_impl mma or cuda-core",
               dlerror());
        return;
    }
    /* POSIX casts: dlsym's void * to function pointers */
    *(void **)&api.version = sym(lib, "cudnnGetVersion");
    *(void **)&api.error_string = sym(lib, "cudnnGetErrorString");
    *(void **)&api.create = sym(lib, "cudnnCreate");
    *(void **)&api.destroy = sym(lib, "cudnnDestroy");
    *(void **)&api.create_desc = sym(lib, "cudnnBackendCreateDescriptor");
    *(void **)&api.destroy_desc = sym(lib, "cudnnBackendDestroyDescriptor");
    *(void **)&api.finalize = sym(lib, "cudnnBackendFinalize");
    *(void **)&api.set = sym(lib, "cudnnBackendSetAttribute");
    *(void **)&api.get = sym(lib, "cudnnBackendGetAttribute");
    *(void **)&api.execute = sym(lib, "cudnnBackendExecute");
    if (refusal[0]) return;
    const size_t v = api.version();
    if (v / 10000 != CUDNN_MAJOR) {
        refuse("the cuDNN loaded is version %zu, kvcpt was built against %d.%d (cudnn.h); load cuDNN %d", v,
               CUDNN_MAJOR, CUDNN_MINOR, CUDNN_MAJOR);
        return;
    }
    api.loaded = 1;
}
#endif

#define CUDNN_CHECK(call)                                                                                              \
    do {                                                                                                               \
        cudnnStatus_t st_ = (call);                                                                                    \
        if (st_ != CUDNN_STATUS_SUCCESS) die("cuDNN error %d (%s) in %s", (int)st_, api.error_string(st_), #call);     \
    } while (0)

/* The tensors' unique ids in the variant pack; virtual tensors count up
 * from UID_VIRTUAL. */
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_SCALE,
    UID_NEG_INF,
    UID_SEQ_Q,
    UID_SEQ_KV,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_SOFTMAX_SUM,
    UID_DQ_ACCUM,
    UID_VIRTUAL = 100,
};

/* One graph: its shape, strides and mask; compared whole with memcmp, so
 * always zeroed before it is filled. */
typedef struct {
    int backward, bottom_right;
    int64_t b, hq, hkv, sq, skv, d;
    int64_t q_str[4], kv_str[4], stats_str[4]; /* q, o, do, dq; k, v, dk, dv; stats */
    float scale;
} SdpaShape;

#define MAX_DESCS 96
typedef struct {
    SdpaShape shape;
    cudnnBackendDescriptor_t descs[MAX_DESCS]; /* everything the plan was built from, destroyed with it */
    int n_descs;
    cudnnBackendDescriptor_t ops[32];
    int n_ops;
    int64_t next_uid;
    cudnnBackendDescriptor_t plan;
    int64_t workspace;
} Plan;

#define MAX_PLANS 16
static cudnnHandle_t handle;
static Plan *plans[MAX_PLANS];
static int n_plans;

/* Device scratch, grown on demand and kept: cuDNN's workspace (at most
 * ATTN_CUDNN_WORKSPACE_CAP), and the fixed-size buffers' region when no
 * caller binds one. */
typedef struct {
    void *p;
    size_t bytes;
} Scratch;
static Scratch ws_buf, own_region;
/* the caller's region (attention_cudnn_use_scratch), or NULL */
static void *bound;
static int64_t bound_bytes;

static void *scratch(Scratch *s, int64_t n, size_t es) {
    KV_CHECK(n >= 0 && (uint64_t)n <= SIZE_MAX / es, "attention_cudnn: scratch of %lld elements overflows",
             (long long)n);
    const size_t bytes = (size_t)n * es;
    if (s->bytes < bytes || !s->p) {
        if (s->p) cuda_free(s->p);
        s->p = cuda_malloc(bytes > 0 ? bytes : 16);
        s->bytes = bytes;
    }
    return s->p;
}

static cudnnBackendDescriptor_t create(Plan *p, cudnnBackendDescriptorType_t type) {
    if (refusal[0]) return NULL;
    KV_CHECK(p->n_descs < MAX_DESCS, "attention_cudnn: more than %d descriptors in one graph", MAX_DESCS);
    cudnnBackendDescriptor_t d;
    cudnnStatus_t st = api.create_desc(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        refuse("cuDNN error %d (%s) creating a descriptor of type %d", (int)st, api.error_string(st), (int)type);
        return NULL;
    }
    p->descs[p->n_descs++] = d;
    return d;
}

static void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                int64_t count, const void *v) {
    if (refusal[0]) return;
    cudnnStatus_t st = api.set(d, name, type, count, v);
    if (st != CUDNN_STATUS_SUCCESS)
        refuse("cuDNN error %d (%s) setting attribute %d", (int)st, api.error_string(st), (int)name);
}

static void finalize(cudnnBackendDescriptor_t d, const char *what) {
    if (refusal[0]) return;
    cudnnStatus_t st = api.finalize(d);
    if (st != CUDNN_STATUS_SUCCESS) refuse("cuDNN error %d (%s) finalizing %s", (int)st, api.error_string(st), what);
}

static cudnnBackendDescriptor_t tensor(Plan *p, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                                       const int64_t str[4], bool is_virtual, bool by_value) {
    cudnnBackendDescriptor_t t = create(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(t, "a tensor");
    return t;
}

static cudnnBackendDescriptor_t virt(Plan *p, cudnnDataType_t dt, const int64_t dim[4], const int64_t str[4]) {
    return tensor(p, p->next_uid++, dt, dim, str, true, false);
}

static void add_op(Plan *p, cudnnBackendDescriptor_t op, const char *what) {
    finalize(op, what);
    if (refusal[0]) return;
    KV_CHECK(p->n_ops < (int)(sizeof p->ops / sizeof p->ops[0]), "attention_cudnn: too many operations");
    p->ops[p->n_ops++] = op;
}

/* y = mode(x[, b][, t]); axis for GEN_INDEX, else -1. */
static void pointwise(Plan *p, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                      cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t pw = create(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "a pointwise descriptor");
    cudnnBackendDescriptor_t op = create(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(p, op, "a pointwise operation");
}

static void matmul(Plan *p, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = create(p, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    finalize(mm, "a matmul descriptor");
    cudnnBackendDescriptor_t op = create(p, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    add_op(p, op, "a matmul operation");
}

static void reduction(Plan *p, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = create(p, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    finalize(r, "a reduction descriptor");
    cudnnBackendDescriptor_t op = create(p, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
    add_op(p, op, "a reduction operation");
}

/* y: x's elements under new dims and strides (a transpose when the strides
 * are exchanged). */
static void reshape(Plan *p, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = create(p, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(p, op, "a reshape operation");
}

static void dims4(int64_t *v, int64_t a, int64_t b, int64_t c, int64_t d) { v[0] = a, v[1] = b, v[2] = c, v[3] = d; }

/* The scores' geometry: (b, hq, sq, skv) dense, and (b, hq, sq, 1) rows. */
typedef struct {
    int64_t sdim[4], sstr[4], rdim[4], rstr[4], one[4];
    cudnnBackendDescriptor_t scale, neg_inf, seq_q, seq_kv; /* by value; the lengths for the bottom-right diagonal */
} Common;

static Common common(Plan *p) {
    const SdpaShape *s = &p->shape;
    Common c;
    dims4(c.sdim, s->b, s->hq, s->sq, s->skv);
    dims4(c.sstr, s->hq * s->sq * s->skv, s->sq * s->skv, s->skv, 1);
    dims4(c.rdim, s->b, s->hq, s->sq, 1);
    dims4(c.rstr, s->hq * s->sq, s->sq, 1, 1);
    dims4(c.one, 1, 1, 1, 1);
    c.scale = tensor(p, UID_SCALE, CUDNN_DATA_FLOAT, c.one, c.one, false, true);
    c.neg_inf = tensor(p, UID_NEG_INF, CUDNN_DATA_FLOAT, c.one, c.one, false, true);
    c.seq_q = s->bottom_right ? tensor(p, UID_SEQ_Q, CUDNN_DATA_INT32, c.one, c.one, false, true) : NULL;
    c.seq_kv = s->bottom_right ? tensor(p, UID_SEQ_KV, CUDNN_DATA_INT32, c.one, c.one, false, true) : NULL;
    return c;
}

/* The causal mask as the frontend's diagonal band lowers it: keep (row,
 * col) when row >= col for the top-left diagonal, row + skv - sq >= col for
 * the bottom-right one (the last row sees every key). */
static cudnnBackendDescriptor_t causal(Plan *p, const Common *c, cudnnBackendDescriptor_t x) {
    cudnnBackendDescriptor_t row = virt(p, CUDNN_DATA_INT32, c->sdim, c->sstr);
    pointwise(p, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, x, NULL, NULL, row);
    if (c->seq_kv) {
        cudnnBackendDescriptor_t plus = virt(p, CUDNN_DATA_INT32, c->sdim, c->sstr);
        pointwise(p, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, -1, row, c->seq_kv, NULL, plus);
        row = virt(p, CUDNN_DATA_INT32, c->sdim, c->sstr);
        pointwise(p, CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, -1, plus, c->seq_q, NULL, row);
    }
    cudnnBackendDescriptor_t col = virt(p, CUDNN_DATA_INT32, c->sdim, c->sstr);
    pointwise(p, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, x, NULL, NULL, col);
    cudnnBackendDescriptor_t keep = virt(p, CUDNN_DATA_BOOLEAN, c->sdim, c->sstr);
    pointwise(p, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep);
    cudnnBackendDescriptor_t y = virt(p, CUDNN_DATA_FLOAT, c->sdim, c->sstr);
    pointwise(p, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, x, c->neg_inf, keep, y);
    return y;
}

/* Q, K^T, V, V^T, O-like and stats tensors of the shape. */
typedef struct {
    int64_t qdim[4], ktdim[4], ktstr[4], vdim[4], sdim[4];
} Io;

static Io io(const SdpaShape *s) {
    Io t;
    dims4(t.qdim, s->b, s->hq, s->sq, s->d);
    dims4(t.ktdim, s->b, s->hkv, s->d, s->skv);
    dims4(t.ktstr, s->kv_str[0], s->kv_str[1], s->kv_str[3], s->kv_str[2]);
    dims4(t.vdim, s->b, s->hkv, s->skv, s->d);
    dims4(t.sdim, s->b, s->hq, s->sq, 1);
    return t;
}

static void build_forward(Plan *p) {
    const SdpaShape *s = &p->shape;
    const Common c = common(p);
    const Io t = io(s);
    cudnnBackendDescriptor_t q = tensor(p, UID_Q, CUDNN_DATA_BFLOAT16, t.qdim, s->q_str, false, false);
    cudnnBackendDescriptor_t kt = tensor(p, UID_K, CUDNN_DATA_BFLOAT16, t.ktdim, t.ktstr, false, false);
    cudnnBackendDescriptor_t v = tensor(p, UID_V, CUDNN_DATA_BFLOAT16, t.vdim, s->kv_str, false, false);
    cudnnBackendDescriptor_t o = tensor(p, UID_O, CUDNN_DATA_BFLOAT16, t.qdim, s->q_str, false, false);
    cudnnBackendDescriptor_t stats = tensor(p, UID_STATS, CUDNN_DATA_FLOAT, t.sdim, s->stats_str, false, false);

    cudnnBackendDescriptor_t s1 = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    matmul(p, q, kt, s1);
    cudnnBackendDescriptor_t s2 = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, s1, c.scale, NULL, s2);
    cudnnBackendDescriptor_t s3 = causal(p, &c, s2);
    /* softmax with its statistics: max, exp(s - max), sum, stats = max + log(sum), P = exp / sum */
    cudnnBackendDescriptor_t mx = virt(p, CUDNN_DATA_FLOAT, c.rdim, c.rstr);
    reduction(p, CUDNN_REDUCE_TENSOR_MAX, s3, mx);
    cudnnBackendDescriptor_t sub = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, s3, mx, NULL, sub);
    cudnnBackendDescriptor_t e = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, -1, sub, NULL, NULL, e);
    cudnnBackendDescriptor_t sum = virt(p, CUDNN_DATA_FLOAT, c.rdim, c.rstr);
    reduction(p, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cudnnBackendDescriptor_t lg = virt(p, CUDNN_DATA_FLOAT, c.rdim, c.rstr);
    pointwise(p, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, -1, sum, NULL, NULL, lg);
    pointwise(p, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, -1, mx, lg, NULL, stats);
    cudnnBackendDescriptor_t prob = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, -1, e, sum, NULL, prob);
    matmul(p, prob, v, o);
}

/* dK or dV (b, hkv, skv, d) = lhs (b, hq, skv, sq) x rhs (b, hq, sq, d),
 * summed over each KV head's query heads when hq > hkv. */
static void grad_kv(Plan *p, cudnnBackendDescriptor_t lhs, cudnnBackendDescriptor_t rhs, int64_t uid) {
    const SdpaShape *s = &p->shape;
    const Io t = io(s);
    cudnnBackendDescriptor_t out = tensor(p, uid, CUDNN_DATA_BFLOAT16, t.vdim, s->kv_str, false, false);
    if (s->hq == s->hkv) {
        matmul(p, lhs, rhs, out);
        return;
    }
    int64_t fdim[4], fstr[4];
    dims4(fdim, s->b, s->hq, s->skv, s->d);
    dims4(fstr, s->hq * s->skv * s->d, s->skv * s->d, s->d, 1);
    cudnnBackendDescriptor_t full = virt(p, CUDNN_DATA_BFLOAT16, fdim, fstr);
    matmul(p, lhs, rhs, full);
    reduction(p, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static void build_backward(Plan *p) {
    const SdpaShape *s = &p->shape;
    const Common c = common(p);
    const Io t = io(s);
    int64_t tdim[4], tstr[4], acc_str[4];
    dims4(tdim, s->b, s->hq, s->skv, s->sq);
    dims4(tstr, s->hq * s->sq * s->skv, s->sq * s->skv, 1, s->skv);
    dims4(acc_str, s->hq * s->sq * s->d, s->sq * s->d, s->d, 1);
    cudnnBackendDescriptor_t q = tensor(p, UID_Q, CUDNN_DATA_BFLOAT16, t.qdim, s->q_str, false, false);
    cudnnBackendDescriptor_t kt = tensor(p, UID_K, CUDNN_DATA_BFLOAT16, t.ktdim, t.ktstr, false, false);
    cudnnBackendDescriptor_t vt = tensor(p, UID_V, CUDNN_DATA_BFLOAT16, t.ktdim, t.ktstr, false, false);
    cudnnBackendDescriptor_t o = tensor(p, UID_O, CUDNN_DATA_BFLOAT16, t.qdim, s->q_str, false, false);
    cudnnBackendDescriptor_t dO = tensor(p, UID_DO, CUDNN_DATA_BFLOAT16, t.qdim, s->q_str, false, false);
    cudnnBackendDescriptor_t stats = tensor(p, UID_STATS, CUDNN_DATA_FLOAT, t.sdim, s->stats_str, false, false);
    cudnnBackendDescriptor_t dq = tensor(p, UID_DQ, CUDNN_DATA_BFLOAT16, t.qdim, s->q_str, false, false);
    cudnnBackendDescriptor_t ssum = tensor(p, UID_SOFTMAX_SUM, CUDNN_DATA_FLOAT, c.rdim, c.rstr, false, false);
    cudnnBackendDescriptor_t acc = tensor(p, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, t.qdim, acc_str, false, false);

    /* softmax_sum = rowsum(dO * O) */
    cudnnBackendDescriptor_t doo = virt(p, CUDNN_DATA_FLOAT, t.qdim, acc_str);
    pointwise(p, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, dO, o, NULL, doo);
    reduction(p, CUDNN_REDUCE_TENSOR_ADD, doo, ssum);
    /* P = exp(mask(scale Q K^T) - stats) */
    cudnnBackendDescriptor_t s1 = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    matmul(p, q, kt, s1);
    cudnnBackendDescriptor_t s2 = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, s1, c.scale, NULL, s2);
    cudnnBackendDescriptor_t s3 = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, s2, stats, NULL, s3);
    cudnnBackendDescriptor_t s4 = causal(p, &c, s3);
    cudnnBackendDescriptor_t prob = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, -1, s4, NULL, NULL, prob);
    /* dV = P^T dO */
    cudnnBackendDescriptor_t pt = virt(p, CUDNN_DATA_BFLOAT16, tdim, tstr);
    reshape(p, prob, pt);
    grad_kv(p, pt, dO, UID_DV);
    /* dS = scale P (dO V^T - softmax_sum) */
    cudnnBackendDescriptor_t dp = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    matmul(p, dO, vt, dp);
    cudnnBackendDescriptor_t dp2 = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, dp, ssum, NULL, dp2);
    cudnnBackendDescriptor_t ds1 = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, dp2, prob, NULL, ds1);
    cudnnBackendDescriptor_t ds = virt(p, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
    pointwise(p, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, ds1, c.scale, NULL, ds);
    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = virt(p, CUDNN_DATA_BFLOAT16, tdim, tstr);
    reshape(p, ds, dst);
    grad_kv(p, dst, q, UID_DK);
    /* dQ = dS K, accumulated in fp32, then stored */
    cudnnBackendDescriptor_t kk = virt(p, CUDNN_DATA_BFLOAT16, t.vdim, s->kv_str);
    reshape(p, kt, kk);
    matmul(p, ds, kk, acc);
    pointwise(p, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, -1, acc, NULL, NULL, dq);
}

/* The graph to an execution plan: cuDNN's heuristics (mode A) rank the
 * engine configurations; the first that finalizes is kept. */
static void make_plan(Plan *p) {
    cudnnBackendDescriptor_t graph = create(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, p->n_ops, p->ops);
    finalize(graph, "the SDPA operation graph");
    cudnnBackendDescriptor_t heur = create(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(heur, "the engine heuristics");
    if (refusal[0]) return;
    const SdpaShape *s = &p->shape;
    const char *dir = s->backward ? "backward" : "forward";
    int64_t n = 0;
    cudnnStatus_t st = api.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (st != CUDNN_STATUS_SUCCESS || n <= 0 || n > 64) {
        refuse("cuDNN offers %lld engine configurations for the SDPA %s graph (b %lld, hq %lld, hkv %lld, sq %lld, "
               "skv %lld, d %lld; %s)",
               (long long)n, dir, (long long)s->b, (long long)s->hq, (long long)s->hkv, (long long)s->sq,
               (long long)s->skv, (long long)s->d, api.error_string(st));
        return;
    }
    cudnnBackendDescriptor_t cfgs[64];
    for (int64_t i = 0; i < n; i++) cfgs[i] = create(p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (refusal[0]) return;
    st = api.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfgs);
    cudnnStatus_t last = st == CUDNN_STATUS_SUCCESS ? CUDNN_STATUS_NOT_SUPPORTED : st;
    /* the least workspace among the finalized plans over the cap, for the refusal */
    int64_t over = -1;
    for (int64_t i = 0; st == CUDNN_STATUS_SUCCESS && i < got && !p->plan; i++) {
        cudnnBackendDescriptor_t plan;
        if (api.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) break;
        last = api.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        if (last == CUDNN_STATUS_SUCCESS)
            last = api.set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (last == CUDNN_STATUS_SUCCESS) last = api.finalize(plan);
        int64_t ws = 0, cnt = 0;
        if (last == CUDNN_STATUS_SUCCESS)
            last = api.get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws);
        /* the memory plan counts the cap, not more: a plan wanting more is passed over */
        if (last == CUDNN_STATUS_SUCCESS && (ws < 0 || ws > ATTN_CUDNN_WORKSPACE_CAP)) {
            if (over < 0 || ws < over) over = ws;
            last = CUDNN_STATUS_NOT_SUPPORTED;
        }
        if (last == CUDNN_STATUS_SUCCESS) p->plan = plan, p->workspace = ws;
        else CUDNN_CHECK(api.destroy_desc(plan));
    }
    if (!p->plan && over >= 0) {
        refuse("cuDNN's engine configurations for the SDPA %s graph (b %lld, hq %lld, hkv %lld, sq %lld, skv %lld, "
               "d %lld) want a workspace of %lld bytes or more, over the %lld-byte cap the memory plan counts "
               "(ATTN_CUDNN_WORKSPACE_CAP, kernels/attention_cudnn_size.h)",
               dir, (long long)s->b, (long long)s->hq, (long long)s->hkv, (long long)s->sq, (long long)s->skv,
               (long long)s->d, (long long)over, (long long)ATTN_CUDNN_WORKSPACE_CAP);
        return;
    }
    if (!p->plan)
        refuse("cuDNN finalized none of its %lld engine configurations for the SDPA %s graph (last: %s)",
               (long long)got, dir, api.error_string(last));
}

static void plan_free(Plan *p) {
    if (p->plan) CUDNN_CHECK(api.destroy_desc(p->plan));
    for (int i = p->n_descs - 1; i >= 0; i--) CUDNN_CHECK(api.destroy_desc(p->descs[i]));
    free(p);
}

/* The cached plan of shape s, or a new one; on a refusal (refusal[])
 * NULL when soft, else the program stops with it. */
static Plan *plan_for(const SdpaShape *s, int soft) {
    for (int i = 0; i < n_plans; i++)
        if (memcmp(&plans[i]->shape, s, sizeof *s) == 0) return plans[i];
    refusal[0] = '\0';
    if (!api.loaded) load_cudnn();
    if (!refusal[0] && !handle) {
        cudnnStatus_t st = api.create(&handle);
        if (st != CUDNN_STATUS_SUCCESS) refuse("cudnnCreate: cuDNN error %d (%s)", (int)st, api.error_string(st));
    }
    Plan *p = NULL;
    if (!refusal[0]) {
        if (n_plans == MAX_PLANS) { /* the oldest goes */
            plan_free(plans[0]);
            memmove(plans, plans + 1, sizeof plans[0] * (MAX_PLANS - 1));
            n_plans--;
        }
        p = xcalloc(1, sizeof *p);
        p->shape = *s;
        p->next_uid = UID_VIRTUAL;
        if (s->backward) build_backward(p);
        else build_forward(p);
        make_plan(p);
    }
    if (refusal[0]) {
        if (p) plan_free(p);
        if (!soft) die("attn_impl cudnn: %s; attn_impl mma or cuda-core runs this shape", refusal);
        return NULL;
    }
    plans[n_plans++] = p;
    return p;
}

static void execute(const SdpaShape *s, const int64_t *uids, void **ptrs, int64_t n) {
    Plan *p = plan_for(s, 0);
    void *ws = scratch(&ws_buf, p->workspace, 1);
    cudnnBackendDescriptor_t pack;
    CUDNN_CHECK(api.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CUDNN_CHECK(api.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    CUDNN_CHECK(api.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    CUDNN_CHECK(api.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CUDNN_CHECK(api.finalize(pack));
    CUDNN_CHECK(api.execute(handle, p->plan, pack));
    CUDNN_CHECK(api.destroy_desc(pack));
}

/* The shape of one SDPA call over the engine's layouts: sq query rows of q
 * (B, T, Hq, D) against skv keys of a KV tensor with strides kv_str (the
 * engine's (B, T, Hkv, D), or a gathered (B, Hkv, n, D) list), statistics
 * in rows of stats_len (the engine's lse, T, or the suffix's dense copy). */
static SdpaShape shape(int backward, int bottom_right, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                       int64_t sq, int64_t skv, const int64_t kv_str[4], int64_t stats_len) {
    SdpaShape s;
    memset(&s, 0, sizeof s);
    s.backward = backward, s.bottom_right = bottom_right;
    s.b = B, s.hq = Hq, s.hkv = Hkv, s.sq = sq, s.skv = skv, s.d = D;
    dims4(s.q_str, T * Hq * D, D, Hq * D, 1);
    memcpy(s.kv_str, kv_str, sizeof s.kv_str);
    dims4(s.stats_str, Hq * stats_len, stats_len, 1, 1);
    s.scale = planted == ATTN_CUDNN_BUG_SCALE ? 1.0f / (float)D : 1.0f / sqrtf((float)D);
    return s;
}

static void engine_kv_str(int64_t *str, int64_t T, int64_t Hkv, int64_t D) {
    if (planted == ATTN_CUDNN_BUG_K_STRIDE) dims4(str, T * Hkv * D, Hkv * D, D, 1);
    else dims4(str, T * Hkv * D, D, Hkv * D, 1);
}

static void list_kv_str(int64_t *str, int64_t n, int64_t Hkv, int64_t D) { dims4(str, Hkv * n * D, n * D, D, 1); }

static void sdpa_forward(const SdpaShape *s, bf16 *o, float *stats, const bf16 *q, const bf16 *k, const bf16 *v) {
    float scale = s->scale, neg_inf = -INFINITY;
    int32_t sq = (int32_t)s->sq, skv = (int32_t)s->skv;
    int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_SEQ_Q, UID_SEQ_KV};
    void *ptrs[] = {(void *)q, (void *)k, (void *)v, o, stats, &scale, &neg_inf, &sq, &skv};
    execute(s, uids, ptrs, s->bottom_right ? 9 : 7);
}

/* ssum (b, hq, sq) and acc (b, hq, sq, d): the region's softmax sums and dQ accumulator */
static void sdpa_backward(const SdpaShape *s, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
                          const bf16 *k, const bf16 *v, const bf16 *o, const float *stats, float *ssum, float *acc) {
    float scale = s->scale, neg_inf = -INFINITY;
    int32_t sq = (int32_t)s->sq, skv = (int32_t)s->skv;
    /* the frontend zeroes its dQ accumulator before each run: cuDNN adds into it */
    cuda_memset_zero(acc, sizeof(float) * (size_t)(s->b * s->hq * s->sq * s->d));
    int64_t uids[] = {UID_Q,  UID_K,           UID_V,        UID_O,     UID_DO,      UID_STATS, UID_DQ,    UID_DK,
                      UID_DV, UID_SOFTMAX_SUM, UID_DQ_ACCUM, UID_SCALE, UID_NEG_INF, UID_SEQ_Q, UID_SEQ_KV};
    void *ptrs[] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dout, (void *)stats, dq,  dk,
                    dv,        ssum,      acc,       &scale,    &neg_inf,     &sq,           &skv};
    execute(s, uids, ptrs, s->bottom_right ? 15 : 13);
}

/* The mask's split: rows [0, L) causal, the S = T - L suffix rows over the
 * gathered list (nsel selected keys, then the S local ones). */
typedef struct {
    int active;
    int64_t L, S, nsel, n;
} Split;

static Split split(const RefreshMask *m, int64_t T) {
    Split sp = {0, T, 0, 0, 0};
    if (m && refresh_active(m, T)) {
        sp.active = 1, sp.L = m->L, sp.S = T - m->L, sp.nsel = refresh_num_selected(m);
        sp.n = sp.nsel + sp.S;
    }
    return sp;
}

/* The causal rows' call and the suffix rows' call of the split. */
static SdpaShape prefix_shape(int backward, const Split *sp, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    int64_t kv_str[4];
    engine_kv_str(kv_str, T, Hkv, D);
    return shape(backward, 0, B, T, Hq, Hkv, D, sp->L, sp->L, kv_str, T);
}
static SdpaShape suffix_shape(int backward, const Split *sp, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    int64_t kv_str[4];
    list_kv_str(kv_str, sp->n, Hkv, D);
    return shape(backward, planted != ATTN_CUDNN_BUG_TOP_LEFT, B, T, Hq, Hkv, D, sp->S, sp->n, kv_str, sp->S);
}

void attention_cudnn_use_scratch(void *base, int64_t bytes) {
    bound = base;
    bound_bytes = base ? bytes : 0;
}

int64_t attention_cudnn_workspace_bytes(void) { return ws_buf.p ? (int64_t)ws_buf.bytes : 0; }

/* The call's fixed-size buffers, carved as the memory plan lays them out:
 * from the bound region, which must hold them, else from the module's own. */
typedef struct {
    bf16 *gq, *gk, *gv, *kg, *vg, *dkg, *dvg;
    float *ssum, *dqacc, *lse;
} Bufs;

static Bufs carve(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, const char *what) {
    const AttnCudnnScratch l = attention_cudnn_scratch_layout(m, B, T, Hq, Hkv, D);
    char *base;
    if (bound) {
        KV_CHECK(l.bytes <= bound_bytes,
                 "%s: the scratch bound by attention_cudnn_use_scratch holds %lld bytes, B %lld T %lld Hq %lld Hkv "
                 "%lld D %lld need %lld",
                 what, (long long)bound_bytes, (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)D,
                 (long long)l.bytes);
        base = bound;
    } else {
        base = scratch(&own_region, l.bytes, 1);
    }
    return (Bufs){(bf16 *)(base + l.gq),     (bf16 *)(base + l.gk),  (bf16 *)(base + l.gv),  (bf16 *)(base + l.kg),
                  (bf16 *)(base + l.vg),     (bf16 *)(base + l.dkg), (bf16 *)(base + l.dvg), (float *)(base + l.ssum),
                  (float *)(base + l.dqacc), (float *)(base + l.lse)};
}

const char *attention_cudnn_probe(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    const char *why = attention_cudnn_unsupported(D, m);
    if (why) return why;
    const Split sp = split(m, T);
    for (int backward = 0; backward < 2; backward++) {
        SdpaShape s = prefix_shape(backward, &sp, B, T, Hq, Hkv, D);
        if (!plan_for(&s, 1)) return refusal;
        if (!sp.active) continue;
        s = suffix_shape(backward, &sp, B, T, Hq, Hkv, D);
        if (!plan_for(&s, 1)) return refusal;
    }
    return NULL;
}

void attention_forward_cudnn_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                       const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                       const RefreshMask *m) {
    check_args(B, T, Hq, Hkv, D, m, "attention_forward_cudnn_bf16_cuda");
    const Split sp = split(m, T);
    SdpaShape s = prefix_shape(0, &sp, B, T, Hq, Hkv, D);
    sdpa_forward(&s, out, lse, q, k, v);
    if (!sp.active) return;
    KV_CHECK(sel, "attention_forward_cudnn_bf16_cuda: the mask is active but sel is NULL");
    const Bufs b = carve(B, T, Hq, Hkv, D, m, "attention_forward_cudnn_bf16_cuda");
    attention_cudnn_gather_kv_cuda(b.kg, b.vg, k, v, sel, B, T, Hkv, D, sp.L, sp.nsel);
    s = suffix_shape(0, &sp, B, T, Hq, Hkv, D);
    const int64_t off = sp.L * Hq * D;
    sdpa_forward(&s, out + off, b.lse, q + off, b.kg, b.vg);
    attention_cudnn_copy_rows_cuda(lse + sp.L, T, b.lse, sp.S, B * Hq, sp.S);
}

void attention_backward_cudnn_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                                        const bf16 *v, const bf16 *out, const float *lse, const int32_t *sel, int64_t B,
                                        int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    check_args(B, T, Hq, Hkv, D, m, "attention_backward_cudnn_bf16_cuda");
    const Split sp = split(m, T);
    const int64_t nq = B * T * Hq * D, nkv = B * T * Hkv * D;
    const Bufs b = carve(B, T, Hq, Hkv, D, m, "attention_backward_cudnn_bf16_cuda");
    bf16 *gq = b.gq, *gk = b.gk, *gv = b.gv;
    /* keys from L on get their gradient from the suffix rows alone */
    if (sp.active) {
        cuda_memset_zero(gk, sizeof(bf16) * (size_t)nkv);
        cuda_memset_zero(gv, sizeof(bf16) * (size_t)nkv);
    }
    SdpaShape s = prefix_shape(1, &sp, B, T, Hq, Hkv, D);
    sdpa_backward(&s, gq, gk, gv, dout, q, k, v, out, lse, b.ssum, b.dqacc);
    if (sp.active) {
        KV_CHECK(sel, "attention_backward_cudnn_bf16_cuda: the mask is active but sel is NULL");
        attention_cudnn_gather_kv_cuda(b.kg, b.vg, k, v, sel, B, T, Hkv, D, sp.L, sp.nsel);
        s = suffix_shape(1, &sp, B, T, Hq, Hkv, D);
        const int64_t off = sp.L * Hq * D;
        attention_cudnn_copy_rows_cuda(b.lse, sp.S, lse + sp.L, T, B * Hq, sp.S);
        sdpa_backward(&s, gq + off, b.dkg, b.dvg, dout + off, q + off, b.kg, b.vg, out + off, b.lse, b.ssum, b.dqacc);
    }
    attention_cudnn_widen_cuda(dq, gq, nq);
    attention_cudnn_widen_cuda(dk, gk, nkv);
    attention_cudnn_widen_cuda(dv, gv, nkv);
    if (sp.active)
        attention_cudnn_scatter_add_cuda(dk, dv, b.dkg, b.dvg, sel, B, T, Hkv, D, sp.L, sp.nsel,
                                         planted == ATTN_CUDNN_BUG_SCATTER);
}

void attention_cudnn_release(void) {
    for (int i = 0; i < n_plans; i++) plan_free(plans[i]);
    n_plans = 0;
    Scratch *all[] = {&ws_buf, &own_region};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (all[i]->p) cuda_free(all[i]->p);
        all[i]->p = NULL, all[i]->bytes = 0;
    }
    if (handle) CUDNN_CHECK(api.destroy(handle));
    handle = NULL;
}
#endif
