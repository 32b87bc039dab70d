/* `kvcpt eval`: the options of the evaluation eval/eval_run.h runs (the
 * perplexity of the last S tokens of every test document, for every KV-cache
 * policy, at one or more context lengths, for one model or two). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/options.h"
#include "../common/util.h"
#include "../data/utf8.h"
#include "../eval/doc_pick.h"
#include "../eval/eval_run.h"
#include "../eval/option_limits.h"
#include "../kernels/refresh_select.h"
#include "commands.h"

/* Documents decoded together by default: the fastest measured on the 2-core
 * CPU for the demo model and the small preset (docs/eval.md, "Batching"). */
#define EVAL_DEFAULT_BATCH 8

/* The options that name a value: an enum, or a list, parsed after the table. */
typedef struct {
    StringList models;
    const char *contexts, *policies, *refresh_qc, *refresh_fixed, *agg, *pool, *snapkv_keep_window, *head_sets;
    const char *h2o_score, *refresh_query, *restkv_shift, *pick;
} EvalNames;

/* The policies a user can name, with what each keeps, from the registry
 * itself, so the help cannot miss one. */
static void policy_help(char *out, size_t size) {
    int n_reg = 0, at = snprintf(out, size,
                                 "Perplexity of the last S tokens per KV-cache policy (docs/eval.md).\n\n"
                                 "policies (--policies NAME,NAME or all), each with the options that tune it:");
    const PolicyInfo *reg = policy_registry(&n_reg);
    for (int i = 0; i < n_reg && at > 0 && at < (int)size; i++)
        at += snprintf(out + at, size - (size_t)at, "\n  %-10s %s\n  %-10s   options: %s", reg[i].name, reg[i].summary,
                       "", reg[i].options[0] ? reg[i].options : "none");
    if (at > 0 && at < (int)size)
        at += snprintf(out + at, size - (size_t)at, "\n--compress-once applies to any of them.");
    KV_CHECK(at > 0 && at < (int)size, "eval: help text longer than %zu bytes", size);
}

int cmd_eval(int argc, char **argv) {
    /* every default written once: here, or the policies' in eval/policy.c; the budget is set per context */
    PolicyOptions po = policy_default_options(0);
    /* the defaults and the option table keep one line per group and per option: they read as tables */
    // clang-format off
    EvalSettings s = {.split = "test", .last = 50, .budget = "L/8", .pick = DOC_PICK_FIRST, .max_copy = 1.0,
                      .batch = EVAL_DEFAULT_BATCH, .boot = 1000, .out = "runs/eval", .argc = argc, .argv = argv,
                      .t0 = now_seconds()};
    EvalNames a = {.contexts = "8192", .policies = "all", .refresh_qc = "", .refresh_fixed = "10,25,50",
                   .agg = policy_agg_name(po.agg), .pool = policy_pool_names[po.pool],
                   .snapkv_keep_window = policy_on_off_names[po.snapkv_keep_window],
                   .head_sets = policy_head_sets_names[po.head_sets], .h2o_score = policy_h2o_score_names[po.h2o_score],
                   .refresh_query = policy_query_rope_names[po.refresh_query],
                   .restkv_shift = policy_restkv_shift_names[po.restkv_shift], .pick = doc_pick_names[s.pick]};
    const Option opts[] = {
        {"model", OPT_STRINGS, &a.models, "DIR|FILE.gguf", "model directory (Hugging Face, or native) or llama.cpp GGUF file; give two for before -> after"},
        {"data", OPT_STRING, &s.data, "DIR", "prepared data directory (kvcpt prepare --out)"},
        {"split", OPT_STRING, &s.split, "NAME", "train | dev | test | all (every split the data has)"},
        {"L", OPT_STRING, &a.contexts, "L1,L2", "prefill lengths"},
        {"context", OPT_ALIAS, NULL, "L", NULL},
        {"S", OPT_POSITIVE, &s.last, "S", "scored tokens at the end of each document"},
        {"last", OPT_ALIAS, NULL, "S", NULL},
        {"K", OPT_STRING, &s.budget, "K|L/N", "cached keys per KV head"},
        {"budget", OPT_ALIAS, NULL, "K", NULL},
        {"policies", OPT_STRING, &a.policies, "LIST", "comma list of the policies named above, or all"},
        {"refresh-qc", OPT_STRING, &a.refresh_qc, "N,..", "refreshkv dynamic variants, QC strides (e.g. 5,10)"},
        {"refresh-fixed", OPT_STRING, &a.refresh_fixed, "N,..", "refreshkv fixed-stride variants"},
        {"threshold", OPT_FLOAT, &po.threshold, "S", "refreshkv cosine threshold"},
        {"refresh-query", OPT_STRING, &a.refresh_query, "post|pre", "refreshkv compares queries after RoPE (the paper) or before"},
        {"agg", OPT_STRING, &a.agg, "max|mean|first", "GQA aggregation of scores"},
        {"snapkv-window", OPT_INT, &po.window, "W", "SnapKV observation window"},
        {"snapkv-keep-window", OPT_STRING, &a.snapkv_keep_window, "on|off", "snapkv keeps its window, scores the rest (SnapKV's code, kvpress)"},
        {"snapkv-grow", OPT_FLAG, &po.snapkv_grow, NULL, "SnapKV keeps every new token"},
        {"sinks", OPT_COUNT, &po.sinks, "N", "StreamingLLM sink tokens"},
        {"snapkv-kernel", OPT_INT, &po.pool_kernel, "K", "pooling kernel of snapkv, refreshkv, kvec"},
        {"pool", OPT_STRING, &a.pool, "max|avg", "that pooling: max, or kvpress's zero-padded avg"},
        {"tova-window", OPT_INT, &po.tova_window, "N", "prefill queries TOVA replays (1: the prompt reduced once, TOVA's code)"},
        {"head-sets", OPT_STRING, &a.head_sets, "group|shared", "tova: per-KV-head sets by --agg, or one per layer by the mean of all heads (TOVA's code)"},
        {"tova-keep-last", OPT_FLAG, &po.tova_keep_last, NULL, "tova never evicts the newest position (kvpress)"},
        {"restkv-grow", OPT_FLAG, &po.restkv_grow, NULL, "restkv keeps every new token (cache K + S - 1) instead of staying at K"},
        {"restkv-shift", OPT_STRING, &a.restkv_shift, "printed|signed", "restkv Eq. 12 window shift as printed (>= 0) or signed by the drift"},
        {"kvec-window", OPT_INT, &po.kvec_window, "O", "K-VEC observation window O (below O' = 32)"},
        {"h2o-recent", OPT_FLOAT, &po.h2o_recent, "F", "h2o recent share of the budget (kvpress: 0)"},
        {"h2o-score", OPT_STRING, &a.h2o_score, "sum|mean", "h2o attention summed, or per query (kvpress)"},
        {"compress-once", OPT_FLAG, &po.once, NULL, "policies choose at the first decode step only, then keep every new token (kvpress)"},
        {"dump", OPT_STRING, &s.dump, "FILE", "JSON lines: per document and variant the keys kept after prefill and the S NLLs"},
        {"max-docs", OPT_COUNT, &s.max_docs, "N", "evaluate at most N documents; 0: all"},
        {"pick", OPT_STRING, &a.pick, "first|interleave", "documents in the split's order, or round robin over the inputs prepare recorded"},
        {"max-copy-share", OPT_FLOAT, &s.max_copy, "F", "pass over a document when more than F of its scored tokens copy an earlier 8-gram of the window"},
        {"batch", OPT_POSITIVE, &s.batch, "N", "documents decoded together (same results for any N)"},
        {"bootstrap", OPT_POSITIVE, &s.boot, "N", "bootstrap resamples for the 95% interval"},
        {"out", OPT_STRING, &s.out, "DIR", "writes eval.json and eval.png there"},
        {"rope-scaling", OPT_STRING, &s.rope_scaling, "TYPE:F|JSON", "RoPE scaling in place of the model's, as transformers reads rope_scaling: yarn:2, linear:2, dynamic:2, none, or a JSON block"},
        {"allow-beyond-context", OPT_FLAG, &s.allow_beyond, NULL, "run a context past what the model's RoPE covers (labelled BEYOND) instead of refusing it"},
        {"device", OPT_STRING, &s.device, "cpu|cuda", "backend; absent: cuda when a GPU is visible"},
        {"quiet", OPT_FLAG, &s.quiet, NULL, "no progress on stderr (document, variant, tokens/s, elapsed, ETA)"},
        {0},
    };
    // clang-format on
    char summary[4096];
    policy_help(summary, sizeof summary);
    if (options_parse("eval", summary, opts, argc, argv)) return 0;
    KV_CHECK(a.models.count == 1 || a.models.count == 2, "eval: give one --model, or two for before -> after");
    KV_CHECK(s.data, "eval: --data is required");
    /* the values the policies read, before anything is loaded: each is refused
     * naming the option instead of running clamped, or past a buffer, under a
     * label that shows the asked value */
    KV_CHECK(s.max_copy >= 0 && s.max_copy <= 1, "eval: --max-copy-share %g is not a share in [0, 1]", s.max_copy);
    eval_check_shared_policy_options("eval", po.pool_kernel, po.window, po.sinks);
    eval_check_window("eval", "--tova-window", po.tova_window);
    eval_check_window("eval", "--kvec-window", po.kvec_window);
    /* eval.json records each model's path as a JSON string, which must be UTF-8 */
    for (int i = 0; i < a.models.count; i++) {
        const char *m = a.models.items[i];
        int64_t bad = utf8_first_invalid((const uint8_t *)m, strlen(m));
        KV_CHECK(bad < 0,
                 "eval: --model '%s' is not valid UTF-8 (byte 0x%02x at offset %lld); eval.json could not "
                 "record it",
                 m, (unsigned)(uint8_t)m[bad], (long long)bad);
    }
    int64_t ctx[EVAL_MAX_CONTEXTS], qc[8], fixed[8];
    s.n_contexts = options_int_list(a.contexts, ctx, EVAL_MAX_CONTEXTS, "L");
    int nqc = options_int_list(a.refresh_qc, qc, 8, "refresh-qc");
    int nfix = options_int_list(a.refresh_fixed, fixed, 8, "refresh-fixed");
    eval_check_strides("eval", "--refresh-qc", qc, nqc);
    eval_check_strides("eval", "--refresh-fixed", fixed, nfix);
    po.agg = group_agg_parse(a.agg, "--agg");
    po.snapkv_keep_window = policy_enum_parse("--snapkv-keep-window", a.snapkv_keep_window, policy_on_off_names, 2);
    po.refresh_query = policy_enum_parse("--refresh-query", a.refresh_query, policy_query_rope_names, 2);
    po.restkv_shift = policy_enum_parse("--restkv-shift", a.restkv_shift, policy_restkv_shift_names, 2);
    po.pool = policy_enum_parse("--pool", a.pool, policy_pool_names, 2);
    po.head_sets = policy_enum_parse("--head-sets", a.head_sets, policy_head_sets_names, 2);
    po.h2o_score = policy_enum_parse("--h2o-score", a.h2o_score, policy_h2o_score_names, 2);
    s.pick = policy_enum_parse("--pick", a.pick, doc_pick_names, 2);
    EvalVariant var[EVAL_MAX_VARIANTS];
    s.n_variants = eval_expand_variants(var, EVAL_MAX_VARIANTS, a.policies, &po, qc, nqc, fixed, nfix);
    s.variants = var, s.contexts = ctx, s.models = a.models.items, s.n_models = a.models.count;
    eval_run(&s);
    free((void *)a.models.items);
    return 0;
}
