/* The emulator's stand-in for cuDNN's graph (backend) API
 * (tests/cuda_emu/include/cudnn.h), as tests/cuda_emu/matmul_emu.c stands
 * in for cuBLASLt: cuDNN cannot run on the CPU, so under the emulator the
 * graphs kernels/attention_cudnn.c builds are executed here, densely, in
 * double, on device memory (host memory here). What it checks, so that a
 * wrong descriptor fails a test instead of passing by accident:
 *  - every attribute has the type its name takes, is set before finalize,
 *    and every descriptor an operation or graph names is finalized and of
 *    the right kind;
 *  - tensors: 4-D, positive dims and strides, a supported data type, a
 *    16-byte alignment, by-value tensors of one element;
 *  - operations: a matmul's (m, k) x (k, n) -> (m, n) with batch dims
 *    equal, 1, or grouped (C's heads a multiple of an operand's: GQA); a
 *    pointwise operand's dims equal to the output's, 1 or grouped; a
 *    reduction's output dims equal, 1 or grouped; a reshape keeps the
 *    element count and span; GEN_INDEX's axis; boolean comparisons and
 *    select conditions;
 *  - the graph: each tensor written by at most one operation, each virtual
 *    one written once and read, one descriptor per unique id, no cycle;
 *  - execution: the variant pack holds exactly the graph's non-virtual
 *    tensors, each device tensor inside one live cudaMalloc allocation
 *    (its whole strided span) and aligned, by-value tensors in host memory,
 *    a workspace of the plan's size.
 * Every plan reports a workspace of 1024 bytes, or of
 * KVCPT_EMU_CUDNN_WORKSPACE bytes when that variable is set (a test
 * checks the caller's cap against a graph that wants more).
 * Values: real tensors are read and written in their data type (bf16
 * rounded to nearest even), virtual ones are kept in double and rounded to
 * their declared type when written, so a bf16 P^T is rounded as cuDNN's
 * kernels round it. The fused engines' accumulation order is not modelled:
 * only a card shows cuDNN's own numbers (docs/cuda.md). */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "../../common/util.h"
#include "../../kernels/bf16.h"

#define MAGIC 0x63756e6eu /* "cunn" */
#define MAX_ATTRS 12
#define MAX_OPS 64
/* the workspace every plan asks for (see the header) */
static int64_t workspace_bytes(void) {
    const char *env = getenv("KVCPT_EMU_CUDNN_WORKSPACE");
    if (!env || !*env) return 1024;
    char *end;
    long long v = strtoll(env, &end, 10);
    if (*end || v < 0) die("KVCPT_EMU_CUDNN_WORKSPACE: a byte count >= 0 (got '%s')", env);
    return (int64_t)v;
}

typedef struct {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t count;
    unsigned char *data;
} Attr;

typedef struct Desc Desc;
struct Desc {
    uint32_t magic;
    cudnnBackendDescriptorType_t type;
    int finalized;
    Attr attrs[MAX_ATTRS];
    int n_attrs;
    /* tensor */
    int64_t uid, dim[4], str[4], align;
    cudnnDataType_t dt;
    bool is_virtual, by_value;
    /* pointwise / reduction / matmul descriptors */
    int64_t mode, axis;
    cudnnDataType_t prec;
    /* operations: inputs x, b, t (pointwise), a, b (matmul) and output y */
    Desc *op_desc, *x, *b, *t, *y;
    /* graph, engine config and plan */
    Desc *ops[MAX_OPS];
    int n_ops;
    Desc *graph;
    /* variant pack */
    int64_t n_pack, *uids;
    void **ptrs, *workspace;
};

struct cudnnContext {
    int live;
};

static cudnnStatus_t refuse(cudnnStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudnn stand-in: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return st;
}

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
        case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
        case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
        case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
        case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
        case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
        case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
        case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    }
    return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreate: NULL handle pointer");
    *h = calloc(1, sizeof **h);
    if (!*h) return CUDNN_STATUS_INTERNAL_ERROR;
    (*h)->live = 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    if (!h || !h->live) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a live handle");
    h->live = 0;
    free(h);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t st) {
    if (!h || !h->live) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a live handle");
    if (!emu_stream_valid(st)) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a live stream");
    return CUDNN_STATUS_SUCCESS;
}

static int known_type(cudnnBackendDescriptorType_t t) {
    switch (t) {
        case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
        case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
        case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return 1;
    }
    return 0;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out) {
    if (!out) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnBackendCreateDescriptor: NULL out");
    if (!known_type(type))
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d is not stood in for", (int)type);
    Desc *d = calloc(1, sizeof *d);
    if (!d) return CUDNN_STATUS_INTERNAL_ERROR;
    d->magic = MAGIC, d->type = type, d->axis = -1;
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

static Desc *as_desc(const void *p) {
    Desc *d = (Desc *)p;
    return d && d->magic == MAGIC ? d : NULL;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t p) {
    Desc *d = as_desc(p);
    if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendDestroyDescriptor: not a descriptor");
    for (int i = 0; i < d->n_attrs; i++) free(d->attrs[i].data);
    free(d->uids), free(d->ptrs);
    d->magic = 0;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

static size_t elem_size(cudnnBackendAttributeType_t t) {
    switch (t) {
        case CUDNN_TYPE_HANDLE:
        case CUDNN_TYPE_VOID_PTR:
        case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void *);
        case CUDNN_TYPE_INT64: return sizeof(int64_t);
        case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
        case CUDNN_TYPE_FLOAT:
        case CUDNN_TYPE_INT32: return 4;
        case CUDNN_TYPE_DATA_TYPE:
        case CUDNN_TYPE_HEUR_MODE:
        case CUDNN_TYPE_POINTWISE_MODE:
        case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(int);
    }
    return 0;
}

/* Which descriptor kind takes which attribute, of which type, how many. */
typedef struct {
    cudnnBackendDescriptorType_t desc;
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t max_count;
} AttrRule;

static const AttrRule rules[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 8},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 8},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_OPS},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 64},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 64},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1},
};

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void *v) {
    Desc *d = as_desc(p);
    if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "set attribute %d: not a descriptor", (int)name);
    if (d->finalized) return refuse(CUDNN_STATUS_BAD_PARAM, "set attribute %d after finalize", (int)name);
    const AttrRule *r = NULL;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].desc == d->type && rules[i].name == name) r = &rules[i];
    if (!r)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d takes no attribute %d", (int)d->type, (int)name);
    if (r->type != type)
        return refuse(CUDNN_STATUS_BAD_PARAM, "attribute %d takes type %d, not %d", (int)name, (int)r->type, (int)type);
    if (count < 1 || count > r->max_count || !v)
        return refuse(CUDNN_STATUS_BAD_PARAM, "attribute %d: %lld elements (1 to %lld)", (int)name, (long long)count,
                      (long long)r->max_count);
    Attr *a = NULL;
    for (int i = 0; i < d->n_attrs; i++)
        if (d->attrs[i].name == name) a = &d->attrs[i];
    if (!a) {
        if (d->n_attrs == MAX_ATTRS) return CUDNN_STATUS_INTERNAL_ERROR;
        a = &d->attrs[d->n_attrs++];
    }
    free(a->data);
    const size_t bytes = elem_size(type) * (size_t)count;
    a->name = name, a->type = type, a->count = count, a->data = malloc(bytes);
    if (!a->data) return CUDNN_STATUS_INTERNAL_ERROR;
    memcpy(a->data, v, bytes);
    return CUDNN_STATUS_SUCCESS;
}

static const Attr *attr(const Desc *d, cudnnBackendAttributeName_t name) {
    for (int i = 0; i < d->n_attrs; i++)
        if (d->attrs[i].name == name) return &d->attrs[i];
    return NULL;
}

static int64_t attr_i64(const Desc *d, cudnnBackendAttributeName_t name, int64_t dflt) {
    const Attr *a = attr(d, name);
    if (!a) return dflt;
    if (a->type == CUDNN_TYPE_INT64) return *(const int64_t *)a->data;
    if (a->type == CUDNN_TYPE_BOOLEAN) return *(const bool *)a->data;
    return *(const int *)a->data;
}

/* The finalized descriptor of kind `want` in attribute name (NULL when it
 * is not set: *st says whether that is an error). */
static Desc *attr_desc(const Desc *d, cudnnBackendAttributeName_t name, cudnnBackendDescriptorType_t want, int required,
                       cudnnStatus_t *st) {
    const Attr *a = attr(d, name);
    if (!a) {
        if (required)
            *st =
                refuse(CUDNN_STATUS_BAD_PARAM, "descriptor type %d: attribute %d is required", (int)d->type, (int)name);
        return NULL;
    }
    Desc *x = as_desc(*(void *const *)a->data);
    if (!x || x->type != want) {
        *st = refuse(CUDNN_STATUS_BAD_PARAM, "attribute %d: not a descriptor of type %d", (int)name, (int)want);
        return NULL;
    }
    if (!x->finalized) {
        *st = refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "attribute %d names a descriptor not finalized", (int)name);
        return NULL;
    }
    return x;
}

static int64_t numel(const Desc *t) { return t->dim[0] * t->dim[1] * t->dim[2] * t->dim[3]; }
static int64_t span(const Desc *t) {
    int64_t s = 1;
    for (int i = 0; i < 4; i++) s += (t->dim[i] - 1) * t->str[i];
    return s;
}
static size_t dt_size(cudnnDataType_t dt) {
    return dt == CUDNN_DATA_BFLOAT16 ? 2 : dt == CUDNN_DATA_BOOLEAN ? 1 : dt == CUDNN_DATA_INT64 ? 8 : 4;
}

static cudnnStatus_t finalize_tensor(Desc *d) {
    const Attr *dims = attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS), *strs = attr(d, CUDNN_ATTR_TENSOR_STRIDES);
    if (!dims || !strs || !attr(d, CUDNN_ATTR_TENSOR_DATA_TYPE) || !attr(d, CUDNN_ATTR_TENSOR_UNIQUE_ID) ||
        !attr(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT))
        return refuse(CUDNN_STATUS_BAD_PARAM, "tensor: data type, dims, strides, unique id and alignment are required");
    if (dims->count != 4 || strs->count != 4)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor: %lld dims and %lld strides; the stand-in takes 4-D tensors",
                      (long long)dims->count, (long long)strs->count);
    memcpy(d->dim, dims->data, sizeof d->dim);
    memcpy(d->str, strs->data, sizeof d->str);
    d->dt = (cudnnDataType_t)attr_i64(d, CUDNN_ATTR_TENSOR_DATA_TYPE, 0);
    d->uid = attr_i64(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
    d->align = attr_i64(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 0);
    d->is_virtual = attr_i64(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, 0);
    d->by_value = attr_i64(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, 0);
    for (int i = 0; i < 4; i++)
        if (d->dim[i] <= 0 || d->str[i] <= 0)
            return refuse(CUDNN_STATUS_BAD_PARAM, "tensor %lld: dim %d is %lld, stride %lld", (long long)d->uid, i,
                          (long long)d->dim[i], (long long)d->str[i]);
    if (d->dt != CUDNN_DATA_FLOAT && d->dt != CUDNN_DATA_BFLOAT16 && d->dt != CUDNN_DATA_INT32 &&
        d->dt != CUDNN_DATA_BOOLEAN)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor %lld: data type %d", (long long)d->uid, (int)d->dt);
    if (d->align != 16)
        return refuse(CUDNN_STATUS_BAD_PARAM, "tensor %lld: alignment %lld, not 16", (long long)d->uid,
                      (long long)d->align);
    /* no two elements at one place: sorted by stride, each stride reaches
     * past the elements of the smaller ones */
    int order[4] = {0, 1, 2, 3};
    for (int i = 1; i < 4; i++)
        for (int j = i; j > 0 && d->str[order[j]] < d->str[order[j - 1]]; j--) {
            const int tmp = order[j];
            order[j] = order[j - 1], order[j - 1] = tmp;
        }
    int64_t reach = 1;
    for (int i = 0; i < 4; i++) {
        if (d->dim[order[i]] == 1) continue;
        if (d->str[order[i]] < reach)
            return refuse(CUDNN_STATUS_BAD_PARAM,
                          "tensor %lld: strides %lld %lld %lld %lld over dims %lld %lld %lld %lld "
                          "put two elements at one place",
                          (long long)d->uid, (long long)d->str[0], (long long)d->str[1], (long long)d->str[2],
                          (long long)d->str[3], (long long)d->dim[0], (long long)d->dim[1], (long long)d->dim[2],
                          (long long)d->dim[3]);
        reach = d->str[order[i]] * d->dim[order[i]];
    }
    if (d->by_value && (d->is_virtual || numel(d) != 1))
        return refuse(CUDNN_STATUS_BAD_PARAM, "tensor %lld: a by-value tensor is one non-virtual element",
                      (long long)d->uid);
    return CUDNN_STATUS_SUCCESS;
}

/* An operand's dim against the output's: equal, 1 (broadcast) or a divisor
 * (grouped: output index i reads i / (out / in)). */
static int fits(int64_t in, int64_t out) { return in == out || in == 1 || (in < out && out % in == 0); }

static int is_binary(int64_t mode) {
    return mode == CUDNN_POINTWISE_ADD || mode == CUDNN_POINTWISE_MUL || mode == CUDNN_POINTWISE_DIV ||
           mode == CUDNN_POINTWISE_SUB || mode == CUDNN_POINTWISE_CMP_GE || mode == CUDNN_POINTWISE_BINARY_SELECT;
}

static cudnnStatus_t finalize_op(Desc *d) {
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    const cudnnBackendDescriptorType_t T = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
    switch (d->type) {
        case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
            if (!attr(d, CUDNN_ATTR_POINTWISE_MODE) || !attr(d, CUDNN_ATTR_POINTWISE_MATH_PREC))
                return refuse(CUDNN_STATUS_BAD_PARAM, "pointwise: mode and math precision are required");
            d->mode = attr_i64(d, CUDNN_ATTR_POINTWISE_MODE, -1);
            d->prec = (cudnnDataType_t)attr_i64(d, CUDNN_ATTR_POINTWISE_MATH_PREC, -1);
            d->axis = attr_i64(d, CUDNN_ATTR_POINTWISE_AXIS, -1);
            if ((d->mode == CUDNN_POINTWISE_GEN_INDEX) != (d->axis >= 0 && d->axis < 4))
                return refuse(CUDNN_STATUS_BAD_PARAM, "pointwise mode %lld: axis %lld", (long long)d->mode,
                              (long long)d->axis);
            return st;
        case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
        case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: {
            const int mm = d->type == CUDNN_BACKEND_MATMUL_DESCRIPTOR;
            d->prec =
                (cudnnDataType_t)attr_i64(d, mm ? CUDNN_ATTR_MATMUL_COMP_TYPE : CUDNN_ATTR_REDUCTION_COMP_TYPE, -1);
            if (d->prec != CUDNN_DATA_FLOAT)
                return refuse(CUDNN_STATUS_NOT_SUPPORTED, "compute type %d, not float", (int)d->prec);
            d->mode = mm ? 0 : attr_i64(d, CUDNN_ATTR_REDUCTION_OPERATOR, -1);
            if (!mm && d->mode != CUDNN_REDUCE_TENSOR_ADD && d->mode != CUDNN_REDUCE_TENSOR_MAX)
                return refuse(CUDNN_STATUS_NOT_SUPPORTED, "reduction operator %lld", (long long)d->mode);
            return st;
        }
        case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
            d->op_desc =
                attr_desc(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, 1, &st);
            d->x = attr_desc(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, T, 1, &st);
            d->b = attr_desc(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, T, 0, &st);
            d->t = attr_desc(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, T, 0, &st);
            d->y = attr_desc(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, T, 1, &st);
            if (st != CUDNN_STATUS_SUCCESS || !d->op_desc || !d->x || !d->y) return st ? st : CUDNN_STATUS_BAD_PARAM;
            const int64_t mode = d->op_desc->mode;
            if (is_binary(mode) != (d->b != NULL) || (mode == CUDNN_POINTWISE_BINARY_SELECT) != (d->t != NULL))
                return refuse(CUDNN_STATUS_BAD_PARAM, "pointwise mode %lld: wrong operands", (long long)mode);
            const Desc *in[3] = {d->x, d->b, d->t};
            for (int j = 0; j < 3; j++)
                for (int i = 0; in[j] && i < 4; i++)
                    if (!fits(in[j]->dim[i], d->y->dim[i]) ||
                        (mode == CUDNN_POINTWISE_GEN_INDEX && in[j]->dim[i] != d->y->dim[i]))
                        return refuse(CUDNN_STATUS_BAD_PARAM,
                                      "pointwise mode %lld: operand %lld dim %d is %lld, output %lld's %lld",
                                      (long long)mode, (long long)in[j]->uid, i, (long long)in[j]->dim[i],
                                      (long long)d->y->uid, (long long)d->y->dim[i]);
            if ((mode == CUDNN_POINTWISE_CMP_GE) != (d->y->dt == CUDNN_DATA_BOOLEAN) ||
                (d->t && d->t->dt != CUDNN_DATA_BOOLEAN))
                return refuse(CUDNN_STATUS_BAD_PARAM, "pointwise mode %lld: boolean output or condition",
                              (long long)mode);
            if (mode == CUDNN_POINTWISE_GEN_INDEX && d->y->dt != CUDNN_DATA_INT32)
                return refuse(CUDNN_STATUS_BAD_PARAM, "GEN_INDEX writes int32");
            return st;
        }
        case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
            d->x = attr_desc(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC, T, 1, &st);
            d->b = attr_desc(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC, T, 1, &st);
            d->y = attr_desc(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC, T, 1, &st);
            d->op_desc = attr_desc(d, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_BACKEND_MATMUL_DESCRIPTOR, 1, &st);
            if (st != CUDNN_STATUS_SUCCESS || !d->x || !d->b || !d->y || !d->op_desc)
                return st ? st : CUDNN_STATUS_BAD_PARAM;
            const Desc *a = d->x, *b = d->b, *c = d->y;
            if (a->dim[3] != b->dim[2] || a->dim[2] != c->dim[2] || b->dim[3] != c->dim[3])
                return refuse(
                    CUDNN_STATUS_BAD_PARAM, "matmul %lld x %lld -> %lld: (%lld, %lld) x (%lld, %lld) -> (%lld, %lld)",
                    (long long)a->uid, (long long)b->uid, (long long)c->uid, (long long)a->dim[2], (long long)a->dim[3],
                    (long long)b->dim[2], (long long)b->dim[3], (long long)c->dim[2], (long long)c->dim[3]);
            for (int i = 0; i < 2; i++)
                if (!fits(a->dim[i], c->dim[i]) || !fits(b->dim[i], c->dim[i]))
                    return refuse(CUDNN_STATUS_BAD_PARAM,
                                  "matmul %lld x %lld -> %lld: batch dim %d is %lld, %lld -> %lld", (long long)a->uid,
                                  (long long)b->uid, (long long)c->uid, i, (long long)a->dim[i], (long long)b->dim[i],
                                  (long long)c->dim[i]);
            return st;
        }
        case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
            d->x = attr_desc(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, T, 1, &st);
            d->y = attr_desc(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, T, 1, &st);
            d->op_desc = attr_desc(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, 1, &st);
            if (st != CUDNN_STATUS_SUCCESS || !d->x || !d->y || !d->op_desc) return st ? st : CUDNN_STATUS_BAD_PARAM;
            for (int i = 0; i < 4; i++)
                if (!fits(d->y->dim[i], d->x->dim[i]))
                    return refuse(CUDNN_STATUS_BAD_PARAM, "reduction %lld -> %lld: dim %d from %lld to %lld",
                                  (long long)d->x->uid, (long long)d->y->uid, i, (long long)d->x->dim[i],
                                  (long long)d->y->dim[i]);
            return st;
        }
        case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
            d->x = attr_desc(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, T, 1, &st);
            d->y = attr_desc(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, T, 1, &st);
            if (st != CUDNN_STATUS_SUCCESS || !d->x || !d->y) return st ? st : CUDNN_STATUS_BAD_PARAM;
            if (numel(d->x) != numel(d->y) || span(d->x) != span(d->y))
                return refuse(CUDNN_STATUS_BAD_PARAM, "reshape %lld -> %lld: %lld elements over %lld, %lld over %lld",
                              (long long)d->x->uid, (long long)d->y->uid, (long long)numel(d->x), (long long)span(d->x),
                              (long long)numel(d->y), (long long)span(d->y));
            return st;
        default: return CUDNN_STATUS_INTERNAL_ERROR;
    }
}

static int is_op(const Desc *d) {
    return d->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ||
           d->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR ||
           d->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ||
           d->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR;
}

/* The tensors an operation reads (up to 3). */
static int op_inputs(const Desc *op, const Desc **in) {
    int n = 0;
    if (op->x) in[n++] = op->x;
    if (op->b) in[n++] = op->b;
    if (op->t) in[n++] = op->t;
    return n;
}

/* The graph's distinct tensors, at most cap of them. */
static int graph_tensors(const Desc *g, const Desc **out, int cap) {
    int n = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const Desc *ts[4];
        int k = op_inputs(g->ops[i], ts);
        ts[k++] = g->ops[i]->y;
        for (int j = 0; j < k; j++) {
            int seen = 0;
            for (int m = 0; m < n; m++) seen |= out[m] == ts[j];
            if (!seen && n < cap) out[n++] = ts[j];
        }
    }
    return n;
}

static cudnnStatus_t finalize_graph(Desc *g) {
    const Attr *ops = attr(g, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!ops || !attr(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE))
        return refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: operations and handle are required");
    g->n_ops = (int)ops->count;
    for (int i = 0; i < g->n_ops; i++) {
        Desc *op = as_desc(((void **)ops->data)[i]);
        if (!op || !is_op(op) || !op->finalized)
            return refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: entry %d is not a finalized operation", i);
        g->ops[i] = op;
    }
    const Desc *ts[256];
    const int n = graph_tensors(g, ts, 256);
    for (int i = 0; i < n; i++) {
        int writers = 0, readers = 0;
        for (int j = 0; j < g->n_ops; j++) {
            const Desc *in[3];
            int k = op_inputs(g->ops[j], in);
            writers += g->ops[j]->y == ts[i];
            for (int m = 0; m < k; m++) readers += in[m] == ts[i];
        }
        for (int j = 0; j < i; j++)
            if (ts[j]->uid == ts[i]->uid)
                return refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: two tensors with unique id %lld",
                              (long long)ts[i]->uid);
        if (writers > 1 || (ts[i]->is_virtual && (writers != 1 || readers == 0)) || (ts[i]->by_value && writers))
            return refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: tensor %lld is written %d times and read %d times",
                          (long long)ts[i]->uid, writers, readers);
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t p) {
    Desc *d = as_desc(p);
    if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "finalize: not a descriptor");
    if (d->finalized) return refuse(CUDNN_STATUS_BAD_PARAM, "finalize: already finalized");
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    switch (d->type) {
        case CUDNN_BACKEND_TENSOR_DESCRIPTOR: st = finalize_tensor(d); break;
        case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: st = finalize_graph(d); break;
        case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
            d->graph =
                attr_desc(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 1, &st);
            if (st == CUDNN_STATUS_SUCCESS && !attr(d, CUDNN_ATTR_ENGINEHEUR_MODE))
                st = refuse(CUDNN_STATUS_BAD_PARAM, "heuristics: mode is required");
            break;
        case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
            st = refuse(CUDNN_STATUS_NOT_SUPPORTED, "engine configurations come from the heuristics here");
            break;
        case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
            Desc *cfg =
                attr_desc(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 1, &st);
            if (st == CUDNN_STATUS_SUCCESS && !attr(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE))
                st = refuse(CUDNN_STATUS_BAD_PARAM, "execution plan: handle is required");
            if (st == CUDNN_STATUS_SUCCESS) d->graph = cfg->graph;
            break;
        }
        case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
            const Attr *u = attr(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
                       *ptr = attr(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
            if (!u || !ptr || u->count != ptr->count || !attr(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE))
                return refuse(CUDNN_STATUS_BAD_PARAM, "variant pack: as many unique ids as pointers, and a workspace");
            d->n_pack = u->count;
            d->uids = malloc(sizeof(int64_t) * (size_t)u->count);
            d->ptrs = malloc(sizeof(void *) * (size_t)u->count);
            if (!d->uids || !d->ptrs) return CUDNN_STATUS_INTERNAL_ERROR;
            memcpy(d->uids, u->data, sizeof(int64_t) * (size_t)u->count);
            memcpy(d->ptrs, ptr->data, sizeof(void *) * (size_t)u->count);
            d->workspace = *(void **)attr(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)->data;
            break;
        }
        default: st = finalize_op(d);
    }
    if (st == CUDNN_STATUS_SUCCESS) d->finalized = 1;
    return st;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t *count,
                                       void *elements) {
    Desc *d = as_desc(p);
    if (!d || !d->finalized)
        return refuse(CUDNN_STATUS_BAD_PARAM, "get attribute %d: not a finalized descriptor", (int)name);
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        /* one engine: this file */
        if (count) *count = 1;
        if (requested > 0) {
            Desc *cfg = as_desc(*(void **)elements);
            if (!cfg || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
                return refuse(CUDNN_STATUS_BAD_PARAM, "heuristics results: not an engine configuration descriptor");
            cfg->graph = d->graph, cfg->finalized = 1;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE &&
        type == CUDNN_TYPE_INT64 && requested >= 1 && elements) {
        *(int64_t *)elements = workspace_bytes();
        if (count) *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "get attribute %d of descriptor type %d", (int)name, (int)d->type);
}

/* ---- execution ---- */

typedef struct {
    const Desc *t;
    unsigned char *mem; /* real tensors: device or by-value host memory */
    double *val;        /* virtual tensors: span values */
    int written;
} Slot;

static int64_t offset(const Desc *t, const int64_t *idx) {
    return idx[0] * t->str[0] + idx[1] * t->str[1] + idx[2] * t->str[2] + idx[3] * t->str[3];
}

static double load(const Slot *s, int64_t off) {
    if (s->val) return s->val[off];
    const unsigned char *p = s->mem + (size_t)off * dt_size(s->t->dt);
    switch (s->t->dt) {
        case CUDNN_DATA_BFLOAT16: return float_from_bf16_bits(*(const uint16_t *)p);
        case CUDNN_DATA_FLOAT: return *(const float *)p;
        case CUDNN_DATA_INT32: return *(const int32_t *)p;
        case CUDNN_DATA_BOOLEAN: return *p != 0;
        default: return NAN;
    }
}

static void store(Slot *s, int64_t off, double v) {
    switch (s->t->dt) {
        case CUDNN_DATA_BFLOAT16: {
            const uint16_t b = bf16_bits_from_float((float)v);
            if (s->val) s->val[off] = float_from_bf16_bits(b);
            else *(uint16_t *)(s->mem + (size_t)off * 2) = b;
            return;
        }
        case CUDNN_DATA_FLOAT:
            if (s->val) s->val[off] = (float)v;
            else *(float *)(s->mem + (size_t)off * 4) = (float)v;
            return;
        case CUDNN_DATA_INT32:
            if (s->val) s->val[off] = (int32_t)v;
            else *(int32_t *)(s->mem + (size_t)off * 4) = (int32_t)v;
            return;
        default:
            if (s->val) s->val[off] = v != 0;
            else s->mem[off] = v != 0;
    }
}

/* in's index for output index idx in the first n dims (equal, broadcast or
 * grouped). */
static void map_dims(const Desc *in, const Desc *out, const int64_t *idx, int64_t *r, int n) {
    for (int i = 0; i < n; i++)
        r[i] = in->dim[i] == out->dim[i] ? idx[i] : in->dim[i] == 1 ? 0 : idx[i] / (out->dim[i] / in->dim[i]);
}
static void map_index(const Desc *in, const Desc *out, const int64_t *idx, int64_t *r) { map_dims(in, out, idx, r, 4); }

#define FOR_INDEX(t, idx)                                                                                              \
    for (idx[0] = 0; idx[0] < (t)->dim[0]; idx[0]++)                                                                   \
        for (idx[1] = 0; idx[1] < (t)->dim[1]; idx[1]++)                                                               \
            for (idx[2] = 0; idx[2] < (t)->dim[2]; idx[2]++)                                                           \
                for (idx[3] = 0; idx[3] < (t)->dim[3]; idx[3]++)

static double pointwise_value(int64_t mode, int64_t axis, const int64_t *idx, double x, double b, double t) {
    switch (mode) {
        case CUDNN_POINTWISE_ADD: return x + b;
        case CUDNN_POINTWISE_MUL: return x * b;
        case CUDNN_POINTWISE_DIV: return x / b;
        case CUDNN_POINTWISE_SUB: return x - b;
        case CUDNN_POINTWISE_EXP: return exp(x);
        case CUDNN_POINTWISE_LOG: return log(x);
        case CUDNN_POINTWISE_IDENTITY: return x;
        case CUDNN_POINTWISE_CMP_GE: return x >= b;
        case CUDNN_POINTWISE_GEN_INDEX: return (double)idx[axis];
        case CUDNN_POINTWISE_BINARY_SELECT: return t != 0 ? x : b;
    }
    return NAN;
}

static void run_op(const Desc *op, Slot *x, Slot *b, Slot *t, Slot *y) {
    int64_t idx[4], r[4];
    const Desc *Y = op->y;
    switch (op->type) {
        case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
            const int64_t mode = op->op_desc->mode, axis = op->op_desc->axis;
            FOR_INDEX(Y, idx) {
                double xv = 0, bv = 0, tv = 0;
                if (mode != CUDNN_POINTWISE_GEN_INDEX) map_index(x->t, Y, idx, r), xv = load(x, offset(x->t, r));
                if (b) map_index(b->t, Y, idx, r), bv = load(b, offset(b->t, r));
                if (t) map_index(t->t, Y, idx, r), tv = load(t, offset(t->t, r));
                store(y, offset(Y, idx), pointwise_value(mode, axis, idx, xv, bv, tv));
            }
            break;
        }
        case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
            const Desc *A = x->t, *B = b->t;
            int64_t ia[4], ib[4];
            FOR_INDEX(Y, idx) {
                map_dims(A, Y, idx, ia, 2), map_dims(B, Y, idx, ib, 2); /* the batch dims */
                double s = 0;
                for (int64_t k = 0; k < A->dim[3]; k++) {
                    ia[2] = idx[2], ia[3] = k, ib[2] = k, ib[3] = idx[3];
                    s += load(x, offset(A, ia)) * load(b, offset(B, ib));
                }
                store(y, offset(Y, idx), s);
            }
            break;
        }
        case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
            const Desc *X = x->t;
            const int max = op->op_desc->mode == CUDNN_REDUCE_TENSOR_MAX;
            const int64_t ny = numel(Y);
            double *acc = xmalloc(sizeof(double) * (size_t)ny);
            for (int64_t i = 0; i < ny; i++) acc[i] = max ? -INFINITY : 0;
            FOR_INDEX(X, idx) {
                map_index(Y, X, idx, r);
                const int64_t j = ((r[0] * Y->dim[1] + r[1]) * Y->dim[2] + r[2]) * Y->dim[3] + r[3];
                const double v = load(x, offset(X, idx));
                acc[j] = max ? fmax(acc[j], v) : acc[j] + v;
            }
            FOR_INDEX(Y, idx)
            store(y, offset(Y, idx), acc[((idx[0] * Y->dim[1] + idx[1]) * Y->dim[2] + idx[2]) * Y->dim[3] + idx[3]]);
            free(acc);
            break;
        }
        case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
        /* the same storage read under Y's dims and strides */
            FOR_INDEX(Y, idx) store(y, offset(Y, idx), load(x, offset(Y, idx)));
            break;
        default: break;
    }
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan_p, cudnnBackendDescriptor_t pack_p) {
    Desc *plan = as_desc(plan_p), *pack = as_desc(pack_p);
    if (!h || !h->live) return refuse(CUDNN_STATUS_BAD_PARAM, "execute: not a live handle");
    if (!plan || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !plan->finalized || !pack ||
        pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || !pack->finalized)
        return refuse(CUDNN_STATUS_BAD_PARAM, "execute: a finalized plan and variant pack are required");
    size_t ws_bytes = 0;
    const int64_t ws_want = workspace_bytes();
    if (!emu_device_extent(pack->workspace, &ws_bytes, NULL) || (int64_t)ws_bytes < ws_want)
        return refuse(CUDNN_STATUS_BAD_PARAM, "execute: the workspace is not %lld bytes of device memory",
                      (long long)ws_want);
    const Desc *g = plan->graph, *ts[256];
    const int n = graph_tensors(g, ts, 256);
    Slot slots[256];
    memset(slots, 0, sizeof slots);
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    int real = 0;
    for (int i = 0; i < n && st == CUDNN_STATUS_SUCCESS; i++) {
        const Desc *t = ts[i];
        slots[i].t = t;
        if (t->is_virtual) {
            slots[i].val = xmalloc(sizeof(double) * (size_t)span(t));
            for (int64_t j = 0; j < span(t); j++) slots[i].val[j] = NAN;
            continue;
        }
        real++;
        int found = -1;
        for (int64_t j = 0; j < pack->n_pack; j++)
            if (pack->uids[j] == t->uid) found = found < 0 ? (int)j : -2;
        if (found < 0) {
            st = refuse(CUDNN_STATUS_BAD_PARAM, "execute: tensor %lld is %s in the variant pack", (long long)t->uid,
                        found == -1 ? "missing" : "twice");
            break;
        }
        unsigned char *mem = pack->ptrs[found];
        size_t after = 0;
        const int on_device = emu_device_extent(mem, &after, NULL);
        const size_t need = (size_t)span(t) * dt_size(t->dt);
        if (!mem) st = refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "execute: tensor %lld is NULL", (long long)t->uid);
        else if (t->by_value && on_device)
            st = refuse(CUDNN_STATUS_BAD_PARAM, "execute: by-value tensor %lld points at device memory",
                        (long long)t->uid);
        else if (!t->by_value && (!on_device || after < need))
            st = refuse(CUDNN_STATUS_BAD_PARAM,
                        "execute: tensor %lld spans %zu bytes (dims %lld %lld %lld %lld, strides %lld %lld %lld %lld), "
                        "%zu left in its device allocation",
                        (long long)t->uid, need, (long long)t->dim[0], (long long)t->dim[1], (long long)t->dim[2],
                        (long long)t->dim[3], (long long)t->str[0], (long long)t->str[1], (long long)t->str[2],
                        (long long)t->str[3], on_device ? after : 0);
        else if (!t->by_value && (uintptr_t)mem % (uintptr_t)t->align)
            st = refuse(CUDNN_STATUS_BAD_PARAM, "execute: tensor %lld is not %lld-byte aligned", (long long)t->uid,
                        (long long)t->align);
        slots[i].mem = mem;
        slots[i].written = 1; /* inputs are there; outputs are written once (finalize_graph) */
    }
    if (st == CUDNN_STATUS_SUCCESS && real != pack->n_pack)
        st = refuse(CUDNN_STATUS_BAD_PARAM, "execute: the variant pack holds %lld tensors, the graph %d",
                    (long long)pack->n_pack, real);
    /* run each operation once its virtual inputs are written */
    int done[MAX_OPS] = {0}, left = g->n_ops;
    while (st == CUDNN_STATUS_SUCCESS && left > 0) {
        int progress = 0;
        for (int i = 0; i < g->n_ops; i++) {
            if (done[i]) continue;
            const Desc *op = g->ops[i], *in[3];
            const int k = op_inputs(op, in);
            Slot *s[3] = {NULL, NULL, NULL}, *out = NULL;
            int ready = 1;
            for (int j = 0; j < n; j++) {
                for (int m = 0; m < k; m++)
                    if (ts[j] == in[m]) s[m] = &slots[j], ready &= slots[j].written;
                if (ts[j] == op->y) out = &slots[j];
            }
            if (!ready) continue;
            if (op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
                Slot *xs = s[0], *bs = op->b ? s[1] : NULL, *tsl = op->t ? s[2] : NULL;
                run_op(op, xs, bs, tsl, out);
            } else run_op(op, s[0], k > 1 ? s[1] : NULL, NULL, out);
            out->written = 1, done[i] = 1, left--, progress = 1;
        }
        if (!progress) st = refuse(CUDNN_STATUS_BAD_PARAM, "execute: the graph has a cycle or an unwritten input");
    }
    for (int i = 0; i < n; i++) free(slots[i].val);
    return st;
}
