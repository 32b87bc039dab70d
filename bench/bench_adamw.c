/* `kvcpt bench adamw`: one optimizer step over a flat buffer split into
 * tensor-sized segments; prints bytes moved per second (and, on CUDA, the
 * fraction of the device's HBM bandwidth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/backend.h"
#include "../common/options.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../optim/optimizer.h"
#include "bench.h"
#include "bench_backend.h"

typedef struct {
    const char *device, *optim, *param_dtype;
    int64_t numel, seg_numel, steps;
    int json;
} BenchArgs;

static void make_segments(int64_t total, int64_t seg_numel, int64_t **off, int64_t **num, int *n) {
    *n = (int)((total + seg_numel - 1) / seg_numel);
    *off = xmalloc((size_t)*n * sizeof(int64_t));
    *num = xmalloc((size_t)*n * sizeof(int64_t));
    for (int i = 0; i < *n; i++) {
        (*off)[i] = i * seg_numel;
        (*num)[i] = total - i * seg_numel < seg_numel ? total - i * seg_numel : seg_numel;
    }
}

static void fill(float *x, int64_t n, float sd, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) x[i] = sd * rng_normal(&r);
}

/* seconds per step, best of the timed steps after one warm-up step */
static double time_cpu(Optimizer *o, float *p, const float *g, const AdamWHyper *h, int64_t steps) {
    optim_step(o, p, g, h, 1);
    double best = 1e30;
    for (int64_t t = 2; t <= steps + 1; t++) {
        double t0 = now_seconds();
        optim_step(o, p, g, h, t);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

int bench_adamw(int argc, char **argv) {
    BenchArgs a = {.device = NULL,
                   .optim = "adamw8bit",
                   .param_dtype = "f32",
                   .numel = 0,
                   .seg_numel = 16777216,
                   .steps = 5,
                   .json = 0};
    const Option opts[] = {
        {"device", OPT_STRING, &a.device, "cpu|cuda", "backend; absent: cuda when a GPU is visible"},
        {"optim", OPT_STRING, &a.optim, "adamw8bit|adamw", "optimizer"},
        {"numel", OPT_INT, &a.numel, "N", "parameters stepped; 0: 64M on cpu, 1G on cuda"},
        {"segment", OPT_INT, &a.seg_numel, "N", "elements per tensor segment (16M = 4096x4096)"},
        {"param-dtype", OPT_STRING, &a.param_dtype, "f32|bf16", "parameter dtype on cuda"},
        {"steps", OPT_INT, &a.steps, "N", "timed steps, best reported"},
        {"json", OPT_FLAG, &a.json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench adamw", "bytes moved per second by one AdamW step", opts, argc, argv)) return 0;
    const Backend *be = backend_resolve(a.device);
    OptimKind kind;
    KV_CHECK(optim_kind_parse(a.optim, &kind) == 0, "--optim must be adamw8bit or adamw, got '%s'", a.optim);
    int bf16 = strcmp(a.param_dtype, "bf16") == 0;
    KV_CHECK(bf16 || strcmp(a.param_dtype, "f32") == 0, "--param-dtype must be f32 or bf16, got '%s'", a.param_dtype);
    KV_CHECK(!bf16 || be->kind == BACKEND_ACCEL, "--param-dtype bf16 needs --device cuda (the CPU step is fp32)");
    if (a.numel == 0) a.numel = be->kind == BACKEND_ACCEL ? (1LL << 30) : (1LL << 26);
    KV_CHECK(a.numel > 0 && a.seg_numel > 0 && a.steps > 0, "--numel, --segment and --steps must be > 0");

    int64_t *off, *num;
    int nseg;
    make_segments(a.numel, a.seg_numel, &off, &num, &nseg);
    Optimizer *o = optim_create(kind, off, num, nseg);
    float *p = xmalloc((size_t)a.numel * 4), *g = xmalloc((size_t)a.numel * 4);
    fill(p, a.numel, 0.1f, 1);
    fill(g, a.numel, 0.01f, 2);
    AdamWHyper h = adamw_hyper_default();
    double sec = 0, peak = 0;
    char desc[256] = "cpu";
    if (be->kind == BACKEND_HOST) {
        sec = time_cpu(o, p, g, &h, a.steps);
    } else {
        const BenchAdamwDevice *cu = bench_hooks(be, "bench adamw")->adamw;
        sec = cu->time_step(o, p, g, bf16 ? OPTIM_BF16 : OPTIM_F32, &h, a.numel, a.steps);
        peak = cu->hbm_gbps();
        cu->describe(desc, sizeof desc);
    }
    double bytes = optim_step_bytes(o, bf16 ? 2 : 4, 4), gbps = bytes / sec / 1e9;
    if (a.json) {
        printf("{\"target\":\"adamw\",\"device\":\"%s\",\"device_name\":\"%s\",\"optim\":\"%s\",\"param_dtype\":\"%s\","
               "\"numel\":%lld,\"segments\":%d,\"seconds_per_step\":%.6g,\"bytes_per_step\":%.6g,\"gb_per_s\":%.4g",
               be->name, desc, a.optim, bf16 ? "bf16" : "f32", (long long)a.numel, nseg, sec, bytes, gbps);
        if (peak > 0) printf(",\"hbm_gb_per_s\":%.4g,\"fraction_of_hbm\":%.4f", peak, gbps / peak);
        printf("}\n");
    } else {
        printf("adamw bench: %s on %s, %lld params in %d segments, %s params\n", a.optim, desc, (long long)a.numel,
               nseg, bf16 ? "bf16" : "f32");
        printf("  %.3f ms/step, %.3f GB moved/step, %.2f GB/s", sec * 1e3, bytes / 1e9, gbps);
        if (peak > 0) printf(" = %.1f%% of %.0f GB/s HBM", 100 * gbps / peak, peak);
        printf("\n");
    }
    optim_free(o);
    free(p), free(g), free(off), free(num);
    return 0;
}
