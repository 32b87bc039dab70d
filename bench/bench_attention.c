/* `kvcpt bench attention`: time of kvcpt's CUDA attention kernels (the
 * RefreshKV selection, forward, backward) at one layer's shape, by default
 * Llama-3.1-8B's at the CPT length, beside PyTorch's
 * scaled_dot_product_attention on the same shape in one run
 * (scripts/bench_attention_torch.py, plain causal: SDPA has no RefreshKV
 * mask that keeps its fused kernels). Figures only; nothing is asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/backend.h"
#include "../common/options.h"
#include "../common/rng.h"
#include "../common/subprocess.h"
#include "../common/util.h"
#include "../kernels/attention.h"
#include "bench.h"

typedef struct {
    int64_t batch, seq, heads, kv_heads, head_dim, L, K, pool, evict, restride, reps;
    int json, no_peers;
    const char *python;
} BenchAttn;

#ifdef KVCPT_CUDA
#include "../kernels/attention_mma.h"
#include "../kernels/cuda_device.h"

typedef void (*AttnForward)(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                            int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
typedef void (*AttnBackward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                             int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);

/* The kernel families timed, each with its forward and backward. */
typedef struct {
    const char *name; /* JSON key */
    const char *what; /* how it computes */
    AttnForward forward;
    AttnBackward backward;
} AttnKernels;

static const AttnKernels kernel_families[] = {
    {"fp32", "fp32 FMA on CUDA cores", attention_forward_cuda, attention_backward_cuda},
    {"mma", "bf16 mma.sync on tensor cores, fp32 sums", attention_forward_mma_cuda, attention_backward_mma_cuda},
};
#define N_FAMILIES (int)(sizeof kernel_families / sizeof kernel_families[0])

/* (query, key) pairs the mask visits per (batch row, query head): the
 * causal rows see 1..L keys, the suffix rows min(K, L) selected plus the
 * local ones. */
/* The mask the options describe (L = 0: causal). */
static RefreshMask bench_mask(const BenchAttn *a) {
    return (RefreshMask){.enabled = a->L > 0, .L = a->L, .K = a->K, .pool_kernel = a->pool, .agg = GROUP_AGG_MAX,
                         .evict = (int)a->evict, .restride = a->restride};
}

/* (query, key) pairs the mask lets one (batch row, query head) visit. */
static double visited_pairs(const BenchAttn *a) {
    RefreshMask m = bench_mask(a);
    double pairs = 0;
    for (int64_t p = 0; p < a->seq; p++) pairs += (double)(refresh_active(&m, a->seq) ? refresh_row_count(&m, p) : p + 1);
    return pairs;
}

/* Forward FLOPs: Q K^T and P V, 2 D multiply-adds per visited pair. */
static double forward_flops(const BenchAttn *a, double pairs) {
    return 4.0 * (double)a->head_dim * (double)(a->batch * a->heads) * pairs;
}

/* Runs the SDPA peer on the same shape (bf16, causal); fills *fwd_ms and
 * *bwd_ms, or why it has none. */
static int run_peer(const BenchAttn *a, double *fwd_ms, double *bwd_ms, char *torch_version, size_t vcap, char *why,
                    size_t why_cap) {
    char script[4200], log_path[] = "/tmp/kvcpt_bench_attention_log_XXXXXX";
    exe_dir_path(script, sizeof script, "scripts/bench_attention_torch.py");
    int log_fd = mkstemp(log_path);
    KV_CHECK(log_fd >= 0, "bench attention: cannot create a temporary file %s", log_path);
    close(log_fd);
    char sb[24], st[24], sh[24], skv[24], sd[24], sr[24];
    snprintf(sb, sizeof sb, "%lld", (long long)a->batch);
    snprintf(st, sizeof st, "%lld", (long long)a->seq);
    snprintf(sh, sizeof sh, "%lld", (long long)a->heads);
    snprintf(skv, sizeof skv, "%lld", (long long)a->kv_heads);
    snprintf(sd, sizeof sd, "%lld", (long long)a->head_dim);
    snprintf(sr, sizeof sr, "%lld", (long long)a->reps);
    const char *argv[] = {a->python, script,       "--seq",   st,   "--batch", sb,       "--heads",
                          sh,        "--kv-heads", skv,       "--head-dim",      sd,       "--dtype",
                          "bf16",    "--reps",     sr,        "--json",          NULL};
    fprintf(stderr, "bench attention: running the PyTorch peer (%s %s)\n", a->python, script);
    char line[4096], err[512];
    int rc = subprocess_run(argv, NULL, log_path, line, sizeof line);
    subprocess_last_line(log_path, err, sizeof err);
    unlink(log_path);
    if (rc != 0) {
        if (rc < 0 && !subprocess_found(a->python))
            snprintf(why, why_cap, "%s not found (run 'make setup', or pass --python)", a->python);
        else snprintf(why, why_cap, "%s %s failed%s%s", a->python, script, err[0] ? ": " : "", err);
        return 0;
    }
    json_t *res = json_loads(line, 0, NULL);
    json_t *f = res ? json_object_get(res, "forward_ms") : NULL, *b = res ? json_object_get(res, "backward_ms") : NULL;
    if (!json_is_number(f) || !json_is_number(b)) {
        snprintf(why, why_cap, "%s printed no forward_ms/backward_ms", script);
        json_decref(res);
        return 0;
    }
    *fwd_ms = json_number_value(f);
    *bwd_ms = json_number_value(b);
    const char *v = json_string_value(json_object_get(res, "torch"));
    snprintf(torch_version, vcap, "%s", v ? v : "?");
    json_decref(res);
    return 1;
}

/* Device buffer of n standard normal floats. */
static float *normal_device(int64_t n, Rng *r) {
    float *h = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = rng_normal(r);
    float *d = cuda_malloc(sizeof(float) * (size_t)n);
    cuda_memcpy_h2d(d, h, sizeof(float) * (size_t)n);
    free(h);
    return d;
}

/* Mean milliseconds of `reps` calls after one warm-up call. */
#define TIME_MS(reps, ms, call)                                                                                     \
    do {                                                                                                            \
        call;                                                                                                       \
        cuda_synchronize();                                                                                         \
        double t0_ = now_seconds();                                                                                 \
        for (int64_t rep_ = 0; rep_ < (reps); rep_++) call;                                                         \
        cuda_synchronize();                                                                                         \
        (ms) = 1e3 * (now_seconds() - t0_) / (double)(reps);                                                        \
    } while (0)

static void bench_kernels(const BenchAttn *a) {
    const int64_t B = a->batch, T = a->seq, Hq = a->heads, Hkv = a->kv_heads, D = a->head_dim;
    RefreshMask m = bench_mask(a);
    refresh_mask_validate(&m, "bench attention");
    const int active = refresh_active(&m, T);
    const int64_t nq = B * T * Hq * D, nkv = B * T * Hkv * D;
    Rng r;
    rng_seed(&r, 1);
    float *q = normal_device(nq, &r), *k = normal_device(nkv, &r), *v = normal_device(nkv, &r);
    float *dout = normal_device(nq, &r);
    float *out = cuda_malloc(sizeof(float) * (size_t)nq), *lse = cuda_malloc(sizeof(float) * (size_t)(B * Hq * T));
    float *dq = cuda_malloc(sizeof(float) * (size_t)nq), *dk = cuda_malloc(sizeof(float) * (size_t)nkv);
    float *dv = cuda_malloc(sizeof(float) * (size_t)nkv);
    int32_t *sel = active ? cuda_malloc(sizeof(int32_t) * (size_t)(B * Hkv * refresh_sel_len(&m, T))) : NULL;
    double select_ms = 0;
    if (active) TIME_MS(a->reps, select_ms, attention_refresh_select_cuda(sel, q, k, B, T, Hq, Hkv, D, &m));
    const double pairs = visited_pairs(a), ff = forward_flops(a, pairs);
    char dev[256];
    cuda_device_describe(dev, sizeof dev);
    if (a->json)
        printf("{\"bench\":\"attention\",\"device\":\"%s\",\"batch\":%lld,\"seq\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
               "\"head_dim\":%lld,\"mask_L\":%lld,\"mask_K\":%lld,\"mask_evict\":%d,\"mask_restride\":%lld,"
               "\"reps\":%lld,\"forward_flops\":%.6e,\"select_ms\":%.4f",
               dev, (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)D,
               (long long)(active ? a->L : 0), (long long)(active ? a->K : 0), active ? m.evict : 0,
               (long long)(active ? m.restride : 0), (long long)a->reps, ff, select_ms);
    else {
        printf("bench attention: %s; B %lld, T %lld, %lld query heads over %lld KV heads, head dim %lld, %s\n", dev,
               (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)D,
               active ? "RefreshKV mask" : "causal");
        printf("  forward %.4g GFLOP, backward 2.5x (FlashAttention convention)%s", ff / 1e9, active ? "" : "\n");
        if (active)
            printf("; selection (L %lld, K %lld, evict %d, restride %lld) %.3f ms\n", (long long)a->L, (long long)a->K,
                   m.evict, (long long)m.restride, select_ms);
    }
    for (int f = 0; f < N_FAMILIES; f++) {
        const AttnKernels *kf = &kernel_families[f];
        if (kf->forward == attention_forward_mma_cuda && !attention_tensor_core_head_dim(D)) continue;
        double fwd_ms, bwd_ms;
        TIME_MS(a->reps, fwd_ms, kf->forward(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, &m));
        TIME_MS(a->reps, bwd_ms, kf->backward(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, &m));
        const double ft = ff / fwd_ms / 1e9, bt = 2.5 * ff / bwd_ms / 1e9;
        if (a->json)
            printf(",\"%s_forward_ms\":%.4f,\"%s_backward_ms\":%.4f,\"%s_forward_tflops\":%.2f,\"%s_backward_tflops\":%.2f",
                   kf->name, fwd_ms, kf->name, bwd_ms, kf->name, ft, kf->name, bt);
        else
            printf("  %-6s (%s): forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n", kf->name, kf->what,
                   fwd_ms, ft, bwd_ms, bt);
    }
    float *bufs[] = {q, k, v, dout, out, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cuda_free(bufs[i]);
    if (sel) cuda_free(sel);
}
#endif

int bench_attention(int argc, char **argv) {
    BenchAttn a = {.batch = 1, .seq = 8242, .heads = 32, .kv_heads = 8, .head_dim = 128, .L = 8192, .K = 2048,
                   .pool = 7, .evict = 0, .restride = 0, .reps = 3, .json = 0, .no_peers = 0, .python = NULL};
    const char *python = NULL;
    const Option opts[] = {
        {"batch", OPT_INT, &a.batch, "B", "sequences"},
        {"seq", OPT_INT, &a.seq, "T", "tokens per sequence"},
        {"heads", OPT_INT, &a.heads, "N", "query heads"},
        {"kv-heads", OPT_INT, &a.kv_heads, "N", "key/value heads"},
        {"head-dim", OPT_INT, &a.head_dim, "D", "head dimension"},
        {"L", OPT_INT, &a.L, "N", "RefreshKV prefill length; 0 = plain causal"},
        {"K", OPT_INT, &a.K, "N", "selected keys per KV head"},
        {"pool", OPT_INT, &a.pool, "N", "selection max-pool kernel"},
        {"evict", OPT_INT, &a.evict, "0|1", "1: rows >= L keep kept + local keys <= K, as the eval's cache"},
        {"restride", OPT_INT, &a.restride, "R", "R > 0: full rows every R steps that re-select (the eval's --refresh-fixed R)"},
        {"reps", OPT_INT, &a.reps, "N", "timed calls per kernel, after one warm-up"},
        {"no-peers", OPT_FLAG, &a.no_peers, NULL, "skip the PyTorch SDPA peer"},
        {"python", OPT_STRING, &python, "PATH", "the peer's interpreter; absent: $KVCPT_PYTHON, else third_party/venv/bin/python"},
        {"json", OPT_FLAG, &a.json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench attention",
                      "Time of the CUDA attention kernels at one layer's shape (default Llama-3.1-8B at T = 8242 with "
                      "the CPT mask), beside PyTorch SDPA (bf16, causal) on the same shape.",
                      opts, argc, argv))
        return 0;
    KV_CHECK(a.batch >= 1 && a.seq >= 1 && a.heads >= 1 && a.kv_heads >= 1 && a.head_dim >= 1 && a.reps >= 1 &&
                 a.L >= 0 && a.K >= 1,
             "bench attention: --batch, --seq, --heads, --kv-heads, --head-dim, --reps, --K must be positive and --L >= 0");
    char default_python[4200];
    if (!python) python = getenv("KVCPT_PYTHON");
    if (!python) {
        exe_dir_path(default_python, sizeof default_python, "third_party/venv/bin/python");
        python = default_python;
    }
    a.python = python;
#ifdef KVCPT_CUDA
    if (backend_cuda_device_count() == 0) die("bench attention: no CUDA device is visible");
    bench_kernels(&a);
    if (!a.no_peers) {
        double pf = 0, pb = 0;
        char version[64] = "", why[9000] = "";
        const double pt = 4.0 * (double)a.head_dim * (double)(a.batch * a.heads) * (double)a.seq * (double)(a.seq + 1) / 2.0;
        int have = run_peer(&a, &pf, &pb, version, sizeof version, why, sizeof why);
        if (a.json) {
            if (have)
                printf(",\"torch_version\":\"%s\",\"torch_attn\":\"sdpa bf16 causal\",\"torch_forward_ms\":%.4f,"
                       "\"torch_backward_ms\":%.4f,\"torch_forward_tflops\":%.2f,\"torch_backward_tflops\":%.2f",
                       version, pf, pb, pt / pf / 1e9, 2.5 * pt / pb / 1e9);
            else {
                json_t *w = json_string(why);
                char *ws = json_dumps(w, JSON_ENCODE_ANY);
                printf(",\"torch_forward_ms\":null,\"torch_why\":%s", ws);
                free(ws);
                json_decref(w);
            }
        } else if (have)
            printf("  PyTorch %s SDPA (bf16, causal, same shape): forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
                   "(%.1f TFLOP/s)\n",
                   version, pf, pt / pf / 1e9, pb, 2.5 * pt / pb / 1e9);
        else printf("  PyTorch SDPA peer: %s; kvcpt's figures alone\n", why);
    }
    if (a.json) printf("}\n");
    return 0;
#else
    die("bench attention: this binary was built without the CUDA backend; hint: install nvcc and run 'make'");
#endif
}
