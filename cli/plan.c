#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../checkpoints/model_source.h"
#include "../common/options.h"
#include "../common/util.h"
#include "../optim/optimizer.h"
#include "../train/cuda_mem_plan.h"
#include "../train/train_config.h"
#include "../train/train_mode.h"
#include "../train/zero3_plan.h"
#include "commands.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The plans multiply tokens (seq x micro-batch) by the model's widths, the
 * layers and a few bytes each, and the attention's per-row records by seq
 * again, in int64. Instead of checking every product, one overflow-checked
 * bound above all of them: tokens x the widest dimension (seq included) x
 * the layers x 64 bytes. Inputs past it are refused; a wrapped product would
 * print small, plausible totals. */
static void check_plan_size(const DecoderConfig *c, int64_t seq, int64_t mb) {
    int64_t widest = max64(max64(seq, c->vocab_size), max64(c->hidden_size, c->intermediate_size));
    widest = max64(widest, max64(c->num_attention_heads * c->head_dim, c->num_key_value_heads * c->head_dim));
    int64_t bt, bound;
    int wraps = __builtin_mul_overflow(seq, mb, &bt) || __builtin_mul_overflow(bt, widest, &bound) ||
                __builtin_mul_overflow(bound, (int64_t)c->num_hidden_layers + 2, &bound) ||
                __builtin_mul_overflow(bound, (int64_t)64, &bound);
    KV_CHECK(!wraps,
             "kvcpt plan: --seq %lld x --micro-batch %lld is too large for this model: its byte counts would "
             "overflow 64 bits (tokens x widest dimension %lld x %lld layers)",
             (long long)seq, (long long)mb, (long long)widest, (long long)c->num_hidden_layers);
}

static int dtype_bytes(const char *s, const char *opt) {
    if (strcmp(s, "bf16") == 0) return 2;
    if (strcmp(s, "fp32") == 0) return 4;
    die("kvcpt plan: --%s must be bf16 or fp32, got '%s'", opt, s);
}

static void print_table(const PlanRow *rows, int n) {
    const char *names[] = {"parameters", "gradients", "optimizer", "gathered units", "activations", "total"};
    printf("%-16s", "GiB per rank");
    for (int i = 0; i < n; i++) printf("  N=%-7d", rows[i].ranks);
    printf("\n");
    for (int k = 0; k < 6; k++) {
        printf("%-16s", names[k]);
        for (int i = 0; i < n; i++) {
            const int64_t v[] = {rows[i].params,       rows[i].grads,       rows[i].optim,
                                 rows[i].unit_buffers, rows[i].activations, rows[i].total};
            printf("  %9.2f", (double)v[k] / (1024.0 * 1024.0 * 1024.0));
        }
        printf("\n");
    }
}

static void print_json(const PlanRow *rows, int n) {
    printf("[");
    for (int i = 0; i < n; i++)
        printf("%s{\"ranks\":%d,\"recompute\":\"%s\",\"params\":%lld,\"grads\":%lld,\"optim\":%lld,\"unit_buffers\":%"
               "lld,\"activations\":%lld,"
               "\"total\":%lld}",
               i ? "," : "", rows[i].ranks, decoder_recompute_name(rows[i].recompute), (long long)rows[i].params,
               (long long)rows[i].grads, (long long)rows[i].optim, (long long)rows[i].unit_buffers,
               (long long)rows[i].activations, (long long)rows[i].total);
    printf("]\n");
}

/* "80G", "512M", "1048576": bytes, K/M/G in powers of 1024. */
static int64_t parse_bytes(const char *s, const char *opt) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int shift = 0;
    if (*end == 'K') shift = 10, end++;
    else if (*end == 'M') shift = 20, end++;
    else if (*end == 'G') shift = 30, end++;
    KV_CHECK(end != s && !errno && !*end && v > 0 && v <= (INT64_MAX >> shift),
             "kvcpt plan: --%s wants a positive byte count with an optional K, M or G suffix, got '%s'", opt, s);
    return (int64_t)v << shift;
}

/* Why the least recompute that fits is that one: each setting's total,
 * least recompute first, against gpu_mem. */
static void print_least_recompute(const CudaMemPlan all[DECODER_RECOMPUTE_COUNT], const DecoderRecompute *least,
                                  int64_t gpu_mem) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    printf("recompute by memory (less recompute needs more):");
    for (int i = 0; i < DECODER_RECOMPUTE_COUNT; i++) {
        DecoderRecompute r = decoder_recompute_by_cost[i];
        printf("%s %s %.2f GiB", i ? "," : "", decoder_recompute_name(r), (double)all[r].total / gib);
    }
    if (!least) {
        printf("; none of them fits %.2f GiB per GPU\n", (double)gpu_mem / gib);
        return;
    }
    printf("; the least that fits %.2f GiB per GPU: recompute=%s", (double)gpu_mem / gib,
           decoder_recompute_name(*least));
    if (*least != DECODER_RECOMPUTE_NONE) {
        DecoderRecompute less = *least == DECODER_RECOMPUTE_FULL ? DECODER_RECOMPUTE_ATTN : DECODER_RECOMPUTE_NONE;
        printf(" (%s is %.2f GiB over)", decoder_recompute_name(less), (double)(all[less].total - gpu_mem) / gib);
    }
    printf("\n");
}

/* ", mask on (L 8192, K 2048, evict, restride 4)" or ", mask off". */
static void print_mask(const RefreshMask *m) {
    printf(", mask %s", m->enabled ? "on" : "off");
    if (!m->enabled) return;
    printf(" (L %lld, K %lld%s", (long long)m->L, (long long)m->K, m->evict ? ", evict" : "");
    if (m->restride) printf(", restride %lld", (long long)m->restride);
    printf(")");
}

/* The CUDA engine's bytes per GPU for one rank count: the whole working
 * model, activations and this rank's shards; the fit against gpu_mem. */
static void print_cuda_engine(const char *model, const CudaMemInputs *in, const CudaMemPlan *p, int64_t gpu_mem,
                              const CudaMemPlan all[DECODER_RECOMPUTE_COUNT], const DecoderRecompute *least) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (in->ranks > 0)
        printf("\nCUDA engine, %d rank%s (one GPU each; master, gradient sum and optimizer sharded on the GPUs), per "
               "GPU:\n",
               in->ranks, in->ranks > 1 ? "s" : "");
    else printf("\nCUDA engine, one rank (the optimizer steps the engine's own parameters), per GPU:\n");
    printf("%s, T %lld x micro-batch %lld, precision %s, recompute %s, optimizer %s", model, (long long)in->T,
           (long long)in->micro_batch, decoder_cuda_precision_name(in->precision),
           decoder_recompute_name(in->recompute), in->optim_device ? "on the engine's parameters" : "on the shards");
    print_mask(&in->mask);
    if (p->attn > 0) printf(", attn cudnn");
    printf("\n");
    cuda_mem_plan_print(stdout, p, "  ");
    print_least_recompute(all, least, gpu_mem);
    if (p->total <= gpu_mem)
        printf("fits %.2f GiB per GPU: headroom %.2f GiB (%lld bytes)\n", (double)gpu_mem / gib,
               (double)(gpu_mem - p->total) / gib, (long long)(gpu_mem - p->total));
    else
        printf(
            "does NOT fit %.2f GiB per GPU: %.2f GiB (%lld bytes) over; lower it with more recompute, precision bf16, "
            "a smaller micro-batch or more ranks\n",
            (double)gpu_mem / gib, (double)(p->total - gpu_mem) / gib, (long long)(p->total - gpu_mem));
}

static void print_cuda_json(int ranks, DecoderRecompute r, const CudaMemPlan *p, int64_t gpu_mem,
                            const DecoderRecompute *least) {
    printf("{\"ranks\":%d,\"recompute\":\"%s\",\"params\":%lld,\"wbf16\":%lld,\"grads\":%lld,\"rope\":%lld,\"acts\":%"
           "lld,\"optim\":%lld,"
           "\"shards\":%lld,\"attn_scratch\":%lld,\"counted\":%lld,\"workspace\":%lld,\"cudnn_workspace\":%lld,"
           "\"total\":%lld,"
           "\"gpu_mem\":%lld,\"fits\":%s",
           ranks, decoder_recompute_name(r), (long long)p->params, (long long)p->wbf16, (long long)p->grads,
           (long long)p->rope, (long long)p->acts, (long long)p->optim, (long long)p->shards, (long long)p->attn,
           (long long)p->counted, (long long)p->workspace, (long long)p->cudnn_workspace, (long long)p->total,
           (long long)gpu_mem, p->total <= gpu_mem ? "true" : "false");
    if (!least) printf(",\"least_recompute\":null}");
    else printf(",\"least_recompute\":\"%s\"}", decoder_recompute_name(*least));
}

/* The ZeRO-3 row for ranks with the least recompute whose total fits
 * gpu_mem (full when none does). */
static PlanRow zero3_least_recompute(const DecoderConfig *c, const PlanInputs *in, int ranks, int64_t gpu_mem) {
    PlanInputs t = *in;
    PlanRow row = {0};
    for (int i = 0; i < DECODER_RECOMPUTE_COUNT; i++) {
        t.recompute = decoder_recompute_by_cost[i];
        row = plan_rank_bytes(c, &t, ranks);
        if (row.total <= gpu_mem) break;
    }
    return row;
}

/* The CUDA engine's plan for every recompute setting (all, indexed by the
 * setting) and the least recompute that fits gpu_mem (*least); returns 0
 * when none does. */
static int cuda_least_recompute(const DecoderConfig *c, CudaMemInputs in, int64_t gpu_mem,
                                CudaMemPlan all[DECODER_RECOMPUTE_COUNT], DecoderRecompute *least) {
    int found = 0;
    for (int i = 0; i < DECODER_RECOMPUTE_COUNT; i++) {
        DecoderRecompute r = decoder_recompute_by_cost[i];
        in.recompute = r;
        all[r] = cuda_mem_plan(c, &in);
        if (!found && all[r].total <= gpu_mem) {
            *least = r;
            found = 1;
        }
    }
    return found;
}

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *ranks = "1,2,4,8", *pd = "bf16", *gd = "fp32", *ad = "bf16", *optim = "adamw8bit";
    const char *config = NULL, *precision = "fp32", *gpu_mem_s = "80G", *engine = "all";
    int64_t seq = 8192, mb = 1, K = 0, Lp = 0, restride = 0;
    const char *recompute_s = NULL, *attn_s = NULL;
    int json = 0, optim_device = 0, evict = 0;
    const Option opts[] = {
        {"preset", OPT_STRING, &model, "NAME|DIR", "model preset or config (default llama3.1-8b, or --config's model)"},
        {"ranks", OPT_STRING, &ranks, "N,N,..", "rank counts"},
        {"seq", OPT_INT, &seq, "T", "tokens per sequence"},
        {"micro-batch", OPT_INT, &mb, "B", "sequences per forward"},
        {"K", OPT_INT, &K, "K", "RefreshKV kept keys (the mask on, its selections saved; 0 = no mask)"},
        {"params", OPT_STRING, &pd, "bf16|fp32", "parameter shard dtype"},
        {"grads", OPT_STRING, &gd, "bf16|fp32", "gradient shard dtype"},
        {"acts", OPT_STRING, &ad, "bf16|fp32", "saved activation dtype"},
        {"optim", OPT_STRING, &optim, "adamw8bit|adamw", "optimizer"},
        {"recompute", OPT_STRING, &recompute_s, "none|attn|full|auto",
         "activation checkpointing: none keeps every activation, attn each layer's attention half (the MLP's rerun "
         "in backward), full each layer's input (the layer rerun); auto: for each rank count the least that fits "
         "--gpu-mem; absent: the --config file's setting, else none"},
        {"json", OPT_FLAG, &json, NULL,
         "print JSON (bytes) instead of the tables: the ZeRO-3 rows, or with --engine cuda the CUDA engine's"},
        {"engine", OPT_STRING, &engine, "all|zero3|cuda", "what to print: both, the ZeRO-3 budget, or the CUDA engine"},
        {"precision", OPT_STRING, &precision, "fp32|bf16|bf16sr",
         "CUDA engine: weight precision (bf16sr: optimizer on the GPU)"},
        {"optim-device", OPT_FLAG, &optim_device, NULL,
         "CUDA engine: the optimizer steps the engine's own parameters (one rank)"},
        {"attn", OPT_STRING, &attn_s, "auto|mma|cuda-core|cudnn",
         "CUDA engine: the attention (config attn_impl; absent: the --config file's, else KVCPT_ATTN, else auto); "
         "cudnn (bf16) adds its scratch region and cuDNN's workspace at its cap"},
        {"L", OPT_INT, &Lp, "L", "the mask's prefill length (with --K; 0 means --seq)"},
        {"mask-evict", OPT_FLAG, &evict, NULL,
         "the mask evicts as the eval cache does (config mask_evict=1; with --K)"},
        {"mask-restride", OPT_INT, &restride, "R",
         "the mask's rows L-1 + R*m attend to every key and re-select (config mask_restride; with --K)"},
        {"gpu-mem", OPT_STRING, &gpu_mem_s, "BYTES", "device memory per GPU, K/M/G suffixes (80G: an H100)"},
        {"config", OPT_STRING, &config, "FILE",
         "a training config (launch/configs/*.json): model, L + S, micro_batch, mask, precision, recompute, "
         "optim_device and optim from it, over the options above"},
        {0},
    };
    if (options_parse("plan",
                      "Device memory per rank: the budget of a fully sharded step (ZeRO-3), and the CUDA training "
                      "engine (whole working weights, sharded master and optimizer) with its fit in --gpu-mem.",
                      opts, argc, argv))
        return 0;
    KV_CHECK(strcmp(engine, "all") == 0 || strcmp(engine, "zero3") == 0 || strcmp(engine, "cuda") == 0,
             "kvcpt plan: --engine must be all, zero3 or cuda, got '%s'", engine);
    int64_t gpu_mem = parse_bytes(gpu_mem_s, "gpu-mem");
    TrainConfig tc;
    train_config_defaults(&tc);
    if (config) {
        train_config_apply_file(&tc, config);
        if (!model) model = tc.model; /* --preset names the shape where the config's directory is elsewhere */
        optim = tc.optim, mb = tc.micro_batch;
        KV_CHECK(!__builtin_add_overflow(tc.L, tc.S, &seq), "kvcpt plan: the config's L + S overflows 64 bits");
        K = tc.mask ? tc.K : 0;
    } else {
        /* the options as a training config, so that the mode is resolved as the trainer does */
        snprintf(tc.precision, sizeof tc.precision, "%s", precision);
        snprintf(tc.optim, sizeof tc.optim, "%s", optim);
        tc.optim_device = optim_device, tc.micro_batch = mb;
        KV_CHECK(K > 0 || (!evict && restride == 0),
                 "kvcpt plan: --mask-evict and --mask-restride shape the mask: they need --K");
        KV_CHECK(restride >= 0, "kvcpt plan: --mask-restride must be >= 0 (0: off), got %lld", (long long)restride);
        tc.mask = K > 0, tc.K = K, tc.L = Lp > 0 ? Lp : seq, tc.S = seq - tc.L;
        tc.mask_evict = evict, tc.mask_restride = restride;
        KV_CHECK(tc.S >= 0, "kvcpt plan: --L %lld is longer than --seq %lld", (long long)Lp, (long long)seq);
        KV_CHECK(strcmp(precision, "fp32") == 0 || strcmp(precision, "bf16") == 0 || strcmp(precision, "bf16sr") == 0,
                 "kvcpt plan: --precision must be fp32, bf16 or bf16sr, got '%s'", precision);
    }
    /* --recompute over the config's; auto is resolved per rank count below */
    int pick = recompute_s && strcmp(recompute_s, "auto") == 0;
    if (recompute_s && !pick) tc.recompute = decoder_recompute_parse(recompute_s, "kvcpt plan --recompute");
    if (attn_s) tc.attn_impl = decoder_attn_impl_parse(attn_s, "kvcpt plan --attn");
    if (!model) model = "llama3.1-8b";
    DecoderConfig c;
    model_source_config(&c, model, "kvcpt plan: --preset");
    OptimKind kind;
    KV_CHECK(optim_kind_parse(optim, &kind) == 0, "kvcpt plan: --optim must be adamw8bit or adamw, got '%s'", optim);
    KV_CHECK(seq >= 1 && mb >= 1 && K >= 0 && K <= seq,
             "kvcpt plan: need --seq >= 1, --micro-batch >= 1, 0 <= --K <= --seq");
    check_plan_size(&c, seq, mb);
    /* one mask for both engines, checked as the trainer checks it */
    RefreshMask mask = train_config_mask(&tc);
    refresh_mask_validate(&mask, config ? "kvcpt plan --config" : "kvcpt plan --K/--L/--mask-evict/--mask-restride");
    PlanInputs in = {seq,
                     mb,
                     mask,
                     dtype_bytes(pd, "params"),
                     dtype_bytes(gd, "grads"),
                     dtype_bytes(ad, "acts"),
                     kind,
                     (DecoderRecompute)tc.recompute};
    PlanRow rows[64];
    int n = 0;
    for (const char *p = ranks; *p && n < 64;) {
        char *end;
        long v = strtol(p, &end, 10);
        KV_CHECK(end != p && v >= 1 && v <= 65536 && (*end == ',' || *end == '\0'),
                 "kvcpt plan: --ranks wants a comma list of counts in [1, 65536], got '%s'", ranks);
        rows[n++] = pick ? zero3_least_recompute(&c, &in, (int)v, gpu_mem) : plan_rank_bytes(&c, &in, (int)v);
        p = *end ? end + 1 : end;
    }
    if (json && strcmp(engine, "cuda") != 0) {
        print_json(rows, n);
        return 0;
    }
    if (!json && strcmp(engine, "cuda") != 0) {
        printf("ZeRO-3 budget (every buffer sharded, units gathered one at a time; the CUDA engine below keeps its "
               "working weights whole): %s, seq %lld x micro-batch %lld, params %s, grads %s, acts %s, %s, recompute ",
               model, (long long)seq, (long long)mb, pd, gd, ad, optim);
        for (int i = 0; i < (pick ? n : 1); i++)
            printf("%s%s", i ? "," : "", decoder_recompute_name(rows[i].recompute));
        printf("%s", pick ? " (auto: the least that fits --gpu-mem for each rank count)" : "");
        print_mask(&in.mask);
        printf("\n");
        print_table(rows, n);
    }
    if (strcmp(engine, "zero3") == 0) return 0;
    /* the CUDA engine for each rank count, its mode resolved as the trainer
     * does (a one-rank mode is shown once: it does not shard) */
    TrainMode mode = train_mode_for_kind(BACKEND_ACCEL, &tc, 0, 1);
    if (json) printf("[");
    for (int i = 0; i < n; i++) {
        CudaMemInputs cin = cuda_mem_inputs_from_train(&tc, mode, rows[i].ranks);
        CudaMemPlan all[DECODER_RECOMPUTE_COUNT];
        DecoderRecompute least_setting = DECODER_RECOMPUTE_FULL; /* nothing fits: the smallest */
        const DecoderRecompute *least =
            cuda_least_recompute(&c, cin, gpu_mem, all, &least_setting) ? &least_setting : NULL;
        if (pick) cin.recompute = least_setting;
        CudaMemPlan cp = cuda_mem_plan(&c, &cin);
        if (json) {
            printf("%s", i ? "," : "");
            print_cuda_json(rows[i].ranks, cin.recompute, &cp, gpu_mem, least);
        } else {
            print_cuda_engine(model, &cin, &cp, gpu_mem, all, least);
        }
        if (train_mode_whole_on_device(mode)) break;
    }
    if (json) printf("]\n");
    return 0;
}
