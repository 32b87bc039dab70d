/* Every project kernel once at Llama-3.1-8B's shapes (C 4096, Hq 32, Hkv 8,
 * D 128, F 14336, V 128256, T 32768, one sequence; the training attention
 * as 4 sequences of 8192), for bounds and integer
 * overflow, not for values: built in the CUDA emulator's sanitizer variant
 * (build/emu-asan/kernels_8b) and run with KVCPT_EMU_BLOCKS=sample, so each
 * grid runs only its corner blocks and a few seeded random ones, under
 * AddressSanitizer and UBSan (tests/sanitize_emu.sh). An int32 index that
 * overflows at these sizes is a UBSan "signed integer overflow" or an
 * out-of-bounds access in the blocks at the far end of the grid, which
 * stops the program; a clean run prints one ok line per kernel.
 *
 * Inputs are zeros (device memory starts zeroed in sample mode), except the
 * integer arrays the kernels index with, which are set to their largest
 * valid values. A reduction over more than
 * 2^31 elements (the gradient norm) gets a buffer of 2^31 + 4096 floats:
 * 8 GiB of address space, of which the sampled blocks touch a little.
 *
 *   kernels_8b [NAME...]   only the named steps (default: all) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/util.h"
#include "../../kernels/attention.h"
#include "../../kernels/attention_decode.h"
#include "../../kernels/attention_mma.h"
#include "../../kernels/bf16.h"
#include "../../kernels/crossentropy.h"
#include "../../kernels/cuda_device.h"
#include "../../kernels/embedding.h"
#include "../../kernels/residual.h"
#include "../../kernels/rmsnorm.h"
#include "../../kernels/rope.h"
#include "../../kernels/swiglu.h"
#include "../../model/decoder.h"
#include "../../model/decoder_cuda_size.h"
#include "../../optim/clip.h"

static const int64_t C = 4096, Hq = 32, Hkv = 8, D = 128, F = 14336, V = 128256, T = 32768;

static void *dev(int64_t bytes) { return cuda_malloc((size_t)bytes); }

/* n int32 values, each v, on the device */
static int32_t *dev_ints(int64_t n, int32_t v) {
    int32_t *h = xmalloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = v;
    int32_t *d = dev((int64_t)sizeof(int32_t) * n);
    cuda_memcpy_h2d(d, h, sizeof(int32_t) * (size_t)n);
    free(h);
    return d;
}

static int selected(int argc, char **argv, const char *name) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return 1;
    return 0;
}

static void done(const char *name, const char *shape) {
    cuda_synchronize();
    printf("ok - %s at 8B shapes (%s): no out-of-bounds access or overflow in the sampled blocks\n", name, shape);
    fflush(stdout);
}

static void embedding(void) {
    const int64_t N = T;
    float *wte = dev(4 * V * C), *out = dev(4 * N * C);
    int32_t *tok = dev_ints(N, (int32_t)(V - 1));
    embedding_forward_cuda(out, tok, wte, N, C);
    done("embedding_forward_cuda", "N 32768, V 128256, C 4096, every token V-1");
    embedding_backward_cuda(wte, out, tok, N, C);
    done("embedding_backward_cuda", "N 32768, V 128256, C 4096");
    cuda_free(wte), cuda_free(out), cuda_free(tok);
}

static void rmsnorm(void) {
    float *x = dev(4 * T * C), *y = dev(4 * T * C), *w = dev(4 * C), *rstd = dev(4 * T), *dw = dev(4 * C);
    rmsnorm_forward_cuda(y, rstd, x, w, T, C, 1e-5f);
    done("rmsnorm_forward_cuda", "N 32768, C 4096");
    rmsnorm_backward_cuda(x, dw, y, x, w, rstd, T, C);
    done("rmsnorm_backward_cuda", "N 32768, C 4096");
    rmsnorm_forward_bf16_cuda((bf16 *)y, rstd, x, w, T, C, 1e-5f);
    done("rmsnorm_forward_bf16_cuda", "N 32768, C 4096");
    cuda_free(x), cuda_free(y), cuda_free(w), cuda_free(rstd), cuda_free(dw);
}

static void rope(void) {
    float *x = dev(4 * T * Hq * D), *cs = dev(4 * T * D / 2), *sn = dev(4 * T * D / 2);
    rope_forward_cuda(x, cs, sn, 1, T, Hq, D);
    done("rope_forward_cuda", "B 1, T 32768, H 32, D 128");
    rope_backward_cuda(x, cs, sn, 1, T, Hq, D);
    done("rope_backward_cuda", "B 1, T 32768, H 32, D 128");
    const int64_t W = (Hq + 2 * Hkv) * D;
    bf16 *qkv = dev(2 * T * W), *q = dev(2 * T * Hq * D), *k = dev(2 * T * Hkv * D), *v = dev(2 * T * Hkv * D);
    float *dk = dev(4 * T * Hkv * D), *dv = dev(4 * T * Hkv * D);
    rope_split_forward_bf16_cuda(q, k, v, qkv, cs, sn, 1, T, Hq, Hkv, D);
    done("rope_split_forward_bf16_cuda", "B 1, T 32768, Hq 32, Hkv 8, D 128");
    rope_join_backward_bf16_cuda(qkv, x, dk, dv, cs, sn, 1, T, Hq, Hkv, D);
    done("rope_join_backward_bf16_cuda", "B 1, T 32768, Hq 32, Hkv 8, D 128");
    cuda_free(x), cuda_free(cs), cuda_free(sn), cuda_free(qkv), cuda_free(q), cuda_free(k), cuda_free(v), cuda_free(dk),
        cuda_free(dv);
}

static void swiglu(void) {
    const int64_t n = T * F;
    float *g = dev(4 * n), *u = dev(4 * n), *h = dev(4 * n);
    swiglu_fused_forward_bf16_cuda((bf16 *)h, (const bf16 *)g, T, F); /* g holds the (T, 2F) bf16 rows */
    done("swiglu_fused_forward_bf16_cuda", "N 32768, F 14336");
    swiglu_fused_backward_bf16_cuda((bf16 *)g, (const bf16 *)h, (const bf16 *)u, T, F);
    done("swiglu_fused_backward_bf16_cuda", "N 32768, F 14336");
    cuda_free(g), cuda_free(u), cuda_free(h);
}

static void residual_cast(void) {
    float *y = dev(4 * T * C), *x = dev(4 * T * C);
    residual_add_cuda(y, x, T * C);
    done("residual_add_cuda", "n = T * C");
    cuda_free(y), cuda_free(x);
    float *w = dev(4 * V * C);
    bf16 *o = dev(2 * V * C);
    cast_bf16_cuda(o, w, V * C);
    done("cast_bf16_cuda", "n = V * C = 525336576");
    cuda_free(w), cuda_free(o);
}

static void crossentropy(void) {
    const int64_t rows = DECODER_CUDA_CE_CHUNK_ROWS;
    float *logits = dev(4 * rows * V), *losses = dev(4 * rows), *lse = dev(4 * rows);
    int32_t *tgt = dev_ints(rows, (int32_t)(V - 1));
    crossentropy_forward_cuda(losses, lse, logits, tgt, rows, V);
    done("crossentropy_forward_cuda", "rows 2048 (the CUDA engine's chunk), V 128256");
    crossentropy_backward_cuda(logits, lse, tgt, rows, V, 1.0f / (float)T);
    done("crossentropy_backward_cuda", "rows 2048, V 128256");
    crossentropy_forward_backward_cuda(losses, lse, logits, tgt, rows, V, 1.0f / (float)T);
    done("crossentropy_forward_backward_cuda", "rows 2048, V 128256");
    cuda_free(logits), cuda_free(losses), cuda_free(lse), cuda_free(tgt);
}

/* The training attention at 4 sequences of 8192 (the same 32768 rows, so the
 * same largest offsets, B * T * Hq * D = 2^27): a sampled block walks up to
 * T keys (the dK/dV blocks: every query tile of 4 heads), and at T = 32768
 * the backward's sampled blocks ran past 15 minutes under the sanitizers
 * (the select and forward passes at T = 32768 ran clean in about 9). */
static void attention(void) {
    const int64_t B = 4, Ta = 8192;
    const RefreshMask m = {.enabled = 1, .L = Ta / 2, .K = 2048, .pool_kernel = 7, .agg = GROUP_AGG_MAX};
    const int64_t nq = B * Ta * Hq * D, nk = B * Ta * Hkv * D;
    float *q = dev(4 * nq), *k = dev(4 * nk), *v = dev(4 * nk), *out = dev(4 * nq), *lse = dev(4 * B * Ta * Hq);
    int32_t *sel = dev_ints(B * Ta * Hkv, 0);
    attention_refresh_select_cuda(sel, q, k, B, Ta, Hq, Hkv, D, &m);
    done("attention_refresh_select_cuda", "B 4, T 8192, L 4096, K 2048, pool 7");
    attention_forward_cuda(out, lse, q, k, v, sel, B, Ta, Hq, Hkv, D, &m);
    done("attention_forward_cuda", "B 4, T 8192, Hq 32, Hkv 8, D 128, RefreshKV mask");
    float *dq = dev(4 * nq), *dk = dev(4 * nk), *dv = dev(4 * nk);
    attention_backward_cuda(dq, dk, dv, out, q, k, v, out, lse, sel, B, Ta, Hq, Hkv, D, &m);
    done("attention_backward_cuda", "B 4, T 8192, Hq 32, Hkv 8, D 128, RefreshKV mask");
    /* the bf16 engine's: bf16 activations in the first halves of the same buffers */
    const bf16 *bq = (const bf16 *)q, *bk = (const bf16 *)k, *bv = (const bf16 *)v;
    attention_refresh_select_bf16_cuda(sel, bq, bk, B, Ta, Hq, Hkv, D, &m);
    done("attention_refresh_select_bf16_cuda", "B 4, T 8192, L 4096, K 2048, pool 7");
    attention_forward_mma_bf16_cuda((bf16 *)out, lse, bq, bk, bv, sel, B, Ta, Hq, Hkv, D, &m);
    done("attention_forward_mma_bf16_cuda", "B 4, T 8192, Hq 32, Hkv 8, D 128, RefreshKV mask");
    attention_backward_mma_bf16_cuda(dq, dk, dv, (const bf16 *)out, bq, bk, bv, (const bf16 *)out, lse, sel, B, Ta, Hq,
                                     Hkv, D, &m);
    done("attention_backward_mma_bf16_cuda", "B 4, T 8192, Hq 32, Hkv 8, D 128, RefreshKV mask");
    cuda_free(q), cuda_free(k), cuda_free(v), cuda_free(out), cuda_free(lse), cuda_free(sel);
    cuda_free(dq), cuda_free(dk), cuda_free(dv);
}

static void decode(void) {
    const int64_t W = 256;
    float *q = dev(4 * T * Hq * D), *k = dev(4 * T * Hkv * D);
    float *colsum = dev(4 * Hq * T), *last = dev(4 * Hq * W * T);
    attention_prefill_stats_cuda(colsum, last, q, k, T, Hq, Hkv, D, W);
    done("attention_prefill_stats_cuda", "T 32768, Hq 32, Hkv 8, D 128, W 256");
    float *vc = dev(4 * T * Hkv * D), *out = dev(4 * Hq * D), *probs = dev(4 * Hq * T);
    int64_t off[ATTENTION_DECODE_MAX_KV_HEADS], n[ATTENTION_DECODE_MAX_KV_HEADS];
    int32_t *keys = dev_ints(Hkv * T, (int32_t)(T - 1));
    for (int g = 0; g < Hkv; g++) off[g] = g * T, n[g] = T; /* listed keys, the last position each */
    attention_decode_cuda(out, probs, q, k, vc, keys, off, n, T, Hq, Hkv, D);
    done("attention_decode_cuda", "cache 32768, listed keys, max_n 32768, probs");
    for (int g = 0; g < Hkv; g++) off[g] = -1; /* a full step */
    attention_decode_cuda(out, probs, q, k, vc, NULL, off, n, T, Hq, Hkv, D);
    done("attention_decode_cuda", "cache 32768, full step, probs");
    cuda_free(q), cuda_free(k), cuda_free(colsum), cuda_free(last), cuda_free(vc), cuda_free(out), cuda_free(probs);
    cuda_free(keys);
}

static void grad_norm(void) {
    const int64_t n = ((int64_t)1 << 31) + 4096;
    float *g = dev(4 * n);
    (void)grad_sum_squares_cuda(g, n);
    done("grad_sum_squares_cuda", "n = 2^31 + 4096 (the 8B model has 8.03e9 parameters)");
    cuda_free(g);
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        void (*run)(void);
    } steps[] = {
        {"embedding", embedding},         {"rmsnorm", rmsnorm},           {"rope", rope},           {"swiglu", swiglu},
        {"residual_cast", residual_cast}, {"crossentropy", crossentropy}, {"attention", attention}, {"decode", decode},
        {"grad_norm", grad_norm}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (selected(argc, argv, steps[i].name)) steps[i].run();
    return 0;
}
