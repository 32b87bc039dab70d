#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/commands.h"
#include "../common/options.h"
#include "../common/util.h"
#include "../optim/optimizer.h"
#include "shard_plan.h"

/* Optimizer bytes of one rank's segments: 8-bit codes for m and v plus two
 * fp32 absmax per 256-block, or fp32 m and v for small tensors (SPEC §5). */
static double optim_bytes(const ShardPlan *p, int r, int eight_bit) {
    ShardSegment *s;
    int n = shard_segments(p, r, &s);
    double b = 0;
    for (int i = 0; i < n; i++) {
        if (eight_bit && s[i].tensor_numel >= OPTIM_MIN_8BIT_NUMEL)
            b += 2.0 * (double)s[i].numel + 8.0 * (double)((s[i].numel + OPTIM_BLOCK - 1) / OPTIM_BLOCK);
        else b += 8.0 * (double)s[i].numel;
    }
    free(s);
    return b;
}

/* Saved per token per layer, as the model's backward needs them (model/llama.h LayerActs). */
static double layer_act_bytes(const LlamaConfig *c, const PlanInputs *in) {
    double C = (double)c->hidden_size, F = (double)c->intermediate_size, D = (double)c->head_dim;
    double QD = (double)c->num_attention_heads * D, KD = (double)c->num_key_value_heads * D;
    double bf = in->act_bytes;
    double per_token = bf * (C /* input */ + C /* xn1 */ + QD + 2 * KD /* q k v */ + QD /* att */ + 2 * C /* x2 xn2 */ +
                             3 * F /* gate up h */) +
                       4.0 * (2 + (double)c->num_attention_heads) /* rstd x2, lse */;
    return per_token;
}

PlanRow plan_rank_bytes(const LlamaConfig *c, const PlanInputs *in, int ranks) {
    ParamLayout pl;
    param_layout_build(&pl, c);
    PlanRow row = {ranks, 0, 0, 0, 0, 0, 0};
    int64_t max_local = 0;
    int64_t max_unit = 0;
    for (int r = 0; r < ranks; r++) {
        ShardPlan p;
        shard_plan_build(&p, &pl, ranks, r);
        double o = optim_bytes(&p, r, in->optim_8bit);
        if (p.local_numel > max_local) max_local = p.local_numel;
        if (o > row.optim) row.optim = o;
        max_unit = p.max_unit;
        shard_plan_free(&p);
    }
    row.params = (double)max_local * in->param_bytes;
    row.grads = (double)max_local * in->grad_bytes;
    /* one rank holds its shard only; more gather two units (current + prefetched) and one unit's gradients */
    if (ranks > 1) row.unit_buffers = (double)max_unit * (2.0 * in->param_bytes + in->grad_bytes);
    double BT = (double)(in->seq * in->micro_batch), C = (double)c->hidden_size, L = (double)c->num_hidden_layers;
    double per_layer = layer_act_bytes(c, in) * BT;
    double sel = in->K > 0 ? 4.0 * (double)in->K * (double)c->num_key_value_heads * (double)in->micro_batch : 0;
    double saved = in->recompute ? L * (BT * C * in->act_bytes + sel) + per_layer : L * (per_layer + sel);
    /* final norm input/output and the backward's working gradients of one layer */
    double head = BT * C * 2 * in->act_bytes + BT * 8.0;
    double work = BT * in->act_bytes * (3 * C + 2 * (double)c->num_attention_heads * c->head_dim +
                                         2 * (double)c->num_key_value_heads * c->head_dim + 3 * (double)c->intermediate_size);
    double logits = 2.0 * 256 * (double)c->vocab_size * 4; /* one fp32 chunk of 256 rows, and its gradient */
    row.activations = saved + head + work + logits;
    row.total = row.params + row.grads + row.optim + row.unit_buffers + row.activations;
    param_layout_free(&pl);
    return row;
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
            const double *v = &rows[i].params;
            printf("  %9.2f", v[k] / (1024.0 * 1024.0 * 1024.0));
        }
        printf("\n");
    }
}

static void print_json(const PlanRow *rows, int n) {
    printf("[");
    for (int i = 0; i < n; i++)
        printf("%s{\"ranks\":%d,\"params\":%.0f,\"grads\":%.0f,\"optim\":%.0f,\"unit_buffers\":%.0f,\"activations\":%.0f,"
               "\"total\":%.0f}",
               i ? "," : "", rows[i].ranks, rows[i].params, rows[i].grads, rows[i].optim, rows[i].unit_buffers,
               rows[i].activations, rows[i].total);
    printf("]\n");
}

int cmd_plan(int argc, char **argv) {
    const char *model = "llama3.1-8b", *ranks = "1,2,4,8", *pd = "bf16", *gd = "fp32", *ad = "bf16", *optim = "adamw8bit";
    int64_t seq = 8192, mb = 1, K = 0;
    int recompute = 0, json = 0;
    const Option opts[] = {
        {"preset", OPT_STRING, &model, "NAME|DIR", "model preset or config"},
        {"ranks", OPT_STRING, &ranks, "N,N,..", "rank counts"},
        {"seq", OPT_INT, &seq, "T", "tokens per sequence"},
        {"micro-batch", OPT_INT, &mb, "B", "sequences per forward"},
        {"K", OPT_INT, &K, "K", "RefreshKV kept keys (saved selection; 0 = no mask)"},
        {"params", OPT_STRING, &pd, "bf16|fp32", "parameter shard dtype"},
        {"grads", OPT_STRING, &gd, "bf16|fp32", "gradient shard dtype"},
        {"acts", OPT_STRING, &ad, "bf16|fp32", "saved activation dtype"},
        {"optim", OPT_STRING, &optim, "adamw8bit|adamw", "optimizer"},
        {"recompute", OPT_FLAG, &recompute, NULL, "activation checkpointing: keep only each layer's input"},
        {"json", OPT_FLAG, &json, NULL, "print JSON (bytes) instead of the table"},
        {0},
    };
    if (options_parse("plan", "Memory per rank of a sharded training step (ZeRO-3).", opts, argc, argv)) return 0;
    LlamaConfig c;
    config_load(&c, model);
    OptimKind kind;
    KV_CHECK(optim_kind_parse(optim, &kind) == 0, "kvcpt plan: --optim must be adamw8bit or adamw, got '%s'", optim);
    KV_CHECK(seq >= 1 && mb >= 1 && K >= 0 && K <= seq, "kvcpt plan: need --seq >= 1, --micro-batch >= 1, 0 <= --K <= --seq");
    PlanInputs in = {seq, mb, K, dtype_bytes(pd, "params"), dtype_bytes(gd, "grads"), dtype_bytes(ad, "acts"),
                     kind == OPTIM_ADAMW8BIT, recompute};
    PlanRow rows[64];
    int n = 0;
    for (const char *p = ranks; *p && n < 64;) {
        char *end;
        long v = strtol(p, &end, 10);
        KV_CHECK(end != p && v >= 1 && v <= 65536 && (*end == ',' || *end == '\0'),
                 "kvcpt plan: --ranks wants a comma list of counts in [1, 65536], got '%s'", ranks);
        rows[n++] = plan_rank_bytes(&c, &in, (int)v);
        p = *end ? end + 1 : end;
    }
    if (json) print_json(rows, n);
    else {
        printf("%s, seq %lld x micro-batch %lld, params %s, grads %s, acts %s%s, %s\n", model, (long long)seq,
               (long long)mb, pd, gd, ad, recompute ? " (recomputed)" : "", optim);
        print_table(rows, n);
    }
    return 0;
}
