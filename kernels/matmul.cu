/* Linear layers on cuBLASLt. Row-major (N, IC) activations and (OC, IC)
 * weights are read as their column-major transposes, so
 *   out^T (OC x N)    = W^T' * inp^T   : op(A)=T, A = weight, op(B)=N, B = inp
 *   dinp^T (IC x N)   = W^T  * dout^T  : A = weight (IC x OC), B = dout (OC x N)
 *   dweight^T (IC x OC) += inp^T * dout : A = inp (IC x N), op(B)=T, B = dout
 * Compute is always CUBLAS_COMPUTE_32F: strict fp32 for fp32 data (no TF32),
 * fp32 accumulation for bf16 data. When the Lt heuristic offers no algorithm
 * (odd leading dimensions or misaligned views), cublasGemmEx does the work. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <string.h>

#include "cuda_common.cuh"
#include "matmul.h"

static cublasLtHandle_t lt_handle;
static cublasHandle_t blas_handle;
static void *lt_workspace;
static const size_t kWorkspaceBytes = (size_t)MATMUL_CUDA_WORKSPACE_BYTES;

static void matmul_cuda_init(void) {
    if (lt_handle) return;
    CUBLAS_CHECK(cublasLtCreate(&lt_handle));
    CUBLAS_CHECK(cublasCreate(&blas_handle));
    CUDA_CHECK(cudaMalloc(&lt_workspace, kWorkspaceBytes));
}

/* Device bf16 copies of fp32 operands for the bf16w/bf16r launchers: one
 * slot per operand of a call, each grown to the largest request and kept,
 * so steady-state steps allocate nothing. */
enum { CAST_A, CAST_B, CAST_W, CAST_SLOTS };
static bf16 *cast_buf[CAST_SLOTS];
static int64_t cast_cap[CAST_SLOTS];

static void cast_release(void) {
    for (int i = 0; i < CAST_SLOTS; i++) {
        if (cast_buf[i]) CUDA_CHECK(cudaFree(cast_buf[i]));
        cast_buf[i] = NULL;
        cast_cap[i] = 0;
    }
}

/* in (n floats) rounded into slot's workspace; returns the bf16 copy. */
static const bf16 *cast_to_bf16(int slot, const float *in, int64_t n) {
    if (n > cast_cap[slot]) {
        if (cast_buf[slot]) CUDA_CHECK(cudaFree(cast_buf[slot]));
        CUDA_CHECK(cudaMalloc(&cast_buf[slot], sizeof(bf16) * (size_t)n));
        cast_cap[slot] = n;
    }
    cast_bf16_cuda(cast_buf[slot], in, n);
    return cast_buf[slot];
}

static void plans_release(void);

extern "C" void matmul_cuda_release(void) {
    cast_release();
    if (!lt_handle) return;
    plans_release();
    CUBLAS_CHECK(cublasLtDestroy(lt_handle));
    CUBLAS_CHECK(cublasDestroy(blas_handle));
    CUDA_CHECK(cudaFree(lt_workspace));
    lt_handle = NULL;
    blas_handle = NULL;
    lt_workspace = NULL;
}

/* Largest power of two (<= 256) dividing the address: what the heuristic may assume. */
static uint32_t pointer_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && (a % align) != 0) align >>= 1;
    return align;
}

typedef struct {
    cublasOperation_t op;
    const void *ptr;
    cudaDataType type;
    int64_t ld;
} GemmOperand;

static void gemm_fallback(GemmOperand a, GemmOperand b, void *c, cudaDataType ctype, int64_t ldc, int64_t m, int64_t n,
                          int64_t k, float beta) {
    const int64_t dims[] = {m, n, k, a.ld, b.ld, ldc};
    for (int i = 0; i < 6; i++)
        if (dims[i] > INT_MAX) {
            fprintf(stderr,
                    "kvcpt: matmul: no cuBLASLt algorithm and dimension %lld exceeds cublasGemmEx's int range\n",
                    (long long)dims[i]);
            exit(1);
        }
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(blas_handle, a.op, b.op, (int)m, (int)n, (int)k, &alpha, a.ptr, a.type, (int)a.ld, b.ptr,
                              b.type, (int)b.ld, &beta, c, ctype, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* One problem's cuBLASLt descriptors and the algorithm the heuristic chose,
 * kept for the process: a training step calls the same few shapes hundreds
 * of times, and building descriptors and asking the heuristic each time
 * costs host time on every call. The key is everything the heuristic's
 * answer depends on (beta is not: it is passed at each call). */
typedef struct {
    int64_t m, n, k, lda, ldb, ldc;
    cublasOperation_t opa, opb;
    cudaDataType ta, tb, tc;
    uint32_t align_a, align_b, align_c, align_d;
    int use_lt; /* 0: the heuristic offered nothing usable, cublasGemmEx does it */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t heur;
} GemmPlan;

enum { kMaxPlans = 256 }; /* an 8B step uses about 20 shapes */
static GemmPlan plans[kMaxPlans];
static int n_plans;

static void plan_destroy(GemmPlan *p) {
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
}

static void plans_release(void) {
    for (int i = 0; i < n_plans; i++) plan_destroy(&plans[i]);
    n_plans = 0;
}

static int plan_matches(const GemmPlan *p, const GemmPlan *key) {
    return p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda && p->ldb == key->ldb &&
           p->ldc == key->ldc && p->opa == key->opa && p->opb == key->opb && p->ta == key->ta && p->tb == key->tb &&
           p->tc == key->tc && p->align_a == key->align_a && p->align_b == key->align_b && p->align_c == key->align_c &&
           p->align_d == key->align_d;
}

/* Fills key's descriptors and asks the heuristic for one algorithm. */
static void plan_build(GemmPlan *p) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &p->opa, sizeof p->opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &p->opb, sizeof p->opb));
    const int ta = p->opa == CUBLAS_OP_T, tb = p->opb == CUBLAS_OP_T;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, p->ta, ta ? p->k : p->m, ta ? p->m : p->k, p->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, p->tb, tb ? p->n : p->k, tb ? p->k : p->n, p->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, p->tc, p->m, p->n, p->ldc));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* split-K may reduce its partial sums only in the fp32 compute type: the
     * in-place and output-type schemes round each partial sum to C's type */
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                      sizeof reductions));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->align_a, 4));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->align_b, 4));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->align_c, 4));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->align_d, 4));
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt_handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &p->heur, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    /* a returned result whose own state is not a success is no algorithm */
    p->use_lt = st == CUBLAS_STATUS_SUCCESS && found > 0 && p->heur.state == CUBLAS_STATUS_SUCCESS;
}

/* D = C with C's layout (m x n, column-major, ldc), for the paths that
 * update in place. */
static void copy_c_to_d(void *d, const void *c, cudaDataType ctype, int64_t ldc, int64_t m, int64_t n) {
    if (c == d) return;
    const size_t es = ctype == CUDA_R_32F ? 4 : 2;
    CUDA_CHECK(
        cudaMemcpy2D(d, (size_t)ldc * es, c, (size_t)ldc * es, (size_t)m * es, (size_t)n, cudaMemcpyDeviceToDevice));
}

/* D (m x n, column-major, ldc) = op(A) op(B) + beta * C, with k the shared
 * dimension; C and D have the same layout, and c may be d (beta 0: c unread). */
static void gemm_cd(GemmOperand a, GemmOperand b, const void *c, void *d, cudaDataType ctype, int64_t ldc, int64_t m,
                    int64_t n, int64_t k, float beta) {
    if (m <= 0 || n <= 0) return;
    matmul_cuda_init();
    if (k <= 0) { /* empty sum: D = beta * C; only beta 0 or 1 occur here */
        if (beta == 0.0f)
            CUDA_CHECK(cudaMemset2D(d, (size_t)ldc * (ctype == CUDA_R_32F ? 4 : 2), 0,
                                    (size_t)m * (ctype == CUDA_R_32F ? 4 : 2), (size_t)n));
        else copy_c_to_d(d, c, ctype, ldc, m, n);
        return;
    }
    GemmPlan key;
    memset(&key, 0, sizeof key);
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = a.ld;
    key.ldb = b.ld;
    key.ldc = ldc;
    key.opa = a.op;
    key.opb = b.op;
    key.ta = a.type;
    key.tb = b.type;
    key.tc = ctype;
    key.align_a = pointer_alignment(a.ptr);
    key.align_b = pointer_alignment(b.ptr);
    key.align_c = pointer_alignment(beta == 0.0f ? d : c);
    key.align_d = pointer_alignment(d);
    GemmPlan *p = NULL;
    for (int i = 0; i < n_plans && !p; i++)
        if (plan_matches(&plans[i], &key)) p = &plans[i];
    int cached = 1;
    if (!p) {
        cached = n_plans < kMaxPlans;
        p = cached ? &plans[n_plans++] : &key;
        *p = key;
        plan_build(p);
    }
    const float alpha = 1.0f;
    if (p->use_lt)
        CUBLAS_CHECK(cublasLtMatmul(lt_handle, p->desc, &alpha, a.ptr, p->la, b.ptr, p->lb, &beta, beta == 0.0f ? d : c,
                                    p->lc, d, p->lc, &p->heur.algo, lt_workspace, kWorkspaceBytes, 0));
    const int use_lt = p->use_lt;
    if (!cached) plan_destroy(p);
    /* any refusal by the heuristic: cublasGemmEx reports a real problem
     * itself; it updates in place, so C goes to D first (the same sum: C
     * added to the fp32 accumulator before the store) */
    if (!use_lt) {
        if (beta != 0.0f) copy_c_to_d(d, c, ctype, ldc, m, n);
        gemm_fallback(a, b, d, ctype, ldc, m, n, k, beta);
    }
}

/* C = op(A) op(B) + beta * C. */
static void gemm(GemmOperand a, GemmOperand b, void *c, cudaDataType ctype, int64_t ldc, int64_t m, int64_t n,
                 int64_t k, float beta) {
    gemm_cd(a, b, c, c, ctype, ldc, m, n, k, beta);
}

static GemmOperand operand(cublasOperation_t op, const void *ptr, cudaDataType type, int64_t ld) {
    GemmOperand o = {op, ptr, type, ld};
    return o;
}

static void linear_forward(void *out, cudaDataType otype, const void *inp, const void *weight, cudaDataType itype,
                           int64_t N, int64_t IC, int64_t OC) {
    gemm(operand(CUBLAS_OP_T, weight, itype, IC), operand(CUBLAS_OP_N, inp, itype, IC), out, otype, OC, OC, N, IC,
         0.0f);
}

static void linear_backward(void *dinp, cudaDataType dinp_type, float *dweight, const void *dout, const void *inp,
                            const void *weight, cudaDataType itype, int64_t N, int64_t IC, int64_t OC) {
    if (dinp)
        gemm(operand(CUBLAS_OP_N, weight, itype, IC), operand(CUBLAS_OP_N, dout, itype, OC), dinp, dinp_type, IC, IC, N,
             OC, 0.0f);
    if (dweight)
        gemm(operand(CUBLAS_OP_N, inp, itype, IC), operand(CUBLAS_OP_T, dout, itype, OC), dweight, CUDA_R_32F, IC, IC,
             OC, N, 1.0f);
}

extern "C" void matmul_forward_cuda(float *out, const float *inp, const float *weight, int64_t N, int64_t IC,
                                    int64_t OC) {
    linear_forward(out, CUDA_R_32F, inp, weight, CUDA_R_32F, N, IC, OC);
}

extern "C" void matmul_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp,
                                     const float *weight, int64_t N, int64_t IC, int64_t OC) {
    linear_backward(dinp, CUDA_R_32F, dweight, dout, inp, weight, CUDA_R_32F, N, IC, OC);
}

extern "C" void matmul_forward_bf16_cuda(bf16 *out, const bf16 *inp, const bf16 *weight, int64_t N, int64_t IC,
                                         int64_t OC) {
    linear_forward(out, CUDA_R_16BF, inp, weight, CUDA_R_16BF, N, IC, OC);
}

extern "C" void matmul_backward_bf16_cuda(bf16 *dinp, float *dweight, const bf16 *dout, const bf16 *inp,
                                          const bf16 *weight, int64_t N, int64_t IC, int64_t OC) {
    linear_backward(dinp, CUDA_R_16BF, dweight, dout, inp, weight, CUDA_R_16BF, N, IC, OC);
}

extern "C" void matmul_forward_bf16_f32out_cuda(float *out, const bf16 *inp, const bf16 *weight, int64_t N, int64_t IC,
                                                int64_t OC) {
    linear_forward(out, CUDA_R_32F, inp, weight, CUDA_R_16BF, N, IC, OC);
}

extern "C" void matmul_forward_bf16_f32out_add_cuda(float *out, const float *add, const bf16 *inp, const bf16 *weight,
                                                    int64_t N, int64_t IC, int64_t OC) {
    gemm_cd(operand(CUBLAS_OP_T, weight, CUDA_R_16BF, IC), operand(CUBLAS_OP_N, inp, CUDA_R_16BF, IC), add, out,
            CUDA_R_32F, OC, OC, N, IC, 1.0f);
}

extern "C" void matmul_backward_bf16_f32dinp_cuda(float *dinp, float *dweight, const bf16 *dout, const bf16 *inp,
                                                  const bf16 *weight, int64_t N, int64_t IC, int64_t OC) {
    linear_backward(dinp, CUDA_R_32F, dweight, dout, inp, weight, CUDA_R_16BF, N, IC, OC);
}

extern "C" void matmul_backward_f32dout_cuda(bf16 *dinp, float *dweight, const float *dout, const bf16 *inp,
                                             const bf16 *weight, int64_t N, int64_t IC, int64_t OC) {
    linear_backward(dinp, CUDA_R_16BF, dweight, cast_to_bf16(CAST_A, dout, N * OC), inp, weight, CUDA_R_16BF, N, IC,
                    OC);
}

/* bf16 operands from fp32 activations (rounded into a workspace), fp32 output. */
extern "C" void matmul_forward_bf16w_cuda(float *out, const float *inp, const bf16 *weight, int64_t N, int64_t IC,
                                          int64_t OC) {
    const bf16 *bi = cast_to_bf16(CAST_A, inp, N * IC);
    linear_forward(out, CUDA_R_32F, bi, weight, CUDA_R_16BF, N, IC, OC);
}

extern "C" void matmul_backward_bf16w_cuda(float *dinp, float *dweight, const float *dout, const float *inp,
                                           const bf16 *weight, int64_t N, int64_t IC, int64_t OC) {
    const bf16 *bd = cast_to_bf16(CAST_A, dout, N * OC);
    const bf16 *bi = dweight ? cast_to_bf16(CAST_B, inp, N * IC) : NULL;
    linear_backward(dinp, CUDA_R_32F, dweight, bd, bi, weight, CUDA_R_16BF, N, IC, OC);
}

extern "C" void matmul_forward_bf16r_cuda(float *out, const float *inp, const float *weight, int64_t N, int64_t IC,
                                          int64_t OC) {
    matmul_forward_bf16w_cuda(out, inp, cast_to_bf16(CAST_W, weight, OC * IC), N, IC, OC);
}

extern "C" void matmul_backward_bf16r_cuda(float *dinp, float *dweight, const float *dout, const float *inp,
                                           const float *weight, int64_t N, int64_t IC, int64_t OC) {
    const bf16 *bw = dinp ? cast_to_bf16(CAST_W, weight, OC * IC) : NULL;
    matmul_backward_bf16w_cuda(dinp, dweight, dout, inp, bw, N, IC, OC);
}
