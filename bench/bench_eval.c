/* `kvcpt bench eval --peer kvpress`: the wall time of `kvcpt eval` beside
 * NVIDIA kvpress + transformers on the CPU, for the same model, documents
 * and policies. kvcpt runs with the options that reproduce kvpress's choices
 * (docs/eval.md, "kvpress as the peer"; tests/kvpress_peer.py checks that
 * both then keep the same keys and compute the same NLLs), so both do the
 * same work: per document, a prefill, the compression, S - 1 decoded tokens.
 *
 * Both run as child processes (fork/exec, common/subprocess.h, never a
 * shell) with the same thread count. kvcpt's figure is its process's wall
 * time (model load and eval.json included: milliseconds for a small model);
 * kvpress's is its own compute time, without the Python start, the torch
 * import and the model load, which it reports separately; the process wall
 * time is printed too.
 *
 * Two more figures in the same run, on the same documents and threads: kvcpt
 * eval as a user runs it (its defaults, every variant: --policies all; off
 * with --shared-only), and one plain transformers forward (sdpa, logits of
 * the last position) of each document's L tokens, the yardstick of what a
 * prefill costs; with the ratios kvpress / kvcpt and kvcpt / forward. The
 * forward leaves out its model load, so kvcpt's figure is given without its
 * own too (the load and hash seconds its eval.json records) beside its
 * process wall time.
 *
 * --policies none runs the yardstick alone beside kvcpt's user run (no
 * kvpress policy, no kvcpt run with kvpress's choices); --repeat N runs
 * everything N times back to back, each kvcpt run beside the forward that
 * follows it (on a shared machine a pair sees the same load), and reports
 * the medians, each pair's ratio among them. */
#include <dirent.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/checked.h"
#include "../common/json_file.h"
#include "../common/options.h"
#include "../common/subprocess.h"
#include "../common/util.h"
#include "../eval/option_limits.h"
#include "../kernels/blas_core.h"
#include "../eval/policy.h"
#include "../model/config.h"
#include "bench.h"

typedef struct {
    const char *model, *data, *split, *budget, *policies, *peer, *python;
    int64_t context, last, max_docs, threads, window, kernel, sinks, repeat;
    int json, shared_only, user_run_only;
} BenchEval;

typedef struct {
    double seconds, load_seconds, forward, forward_cpu, wall; /* -1: did not run */
    char why[16384]; /* room for three paths */
} PeerTime;

/* kvcpt eval as a user runs it: its process wall time, its CPU time (user
 * and system, every thread), and the seconds its eval.json records for
 * hashing and loading the model (-1: did not run). */
typedef struct {
    double wall, cpu, load;
} UserRun;

/* CPU seconds (user + system) of this process's waited-for children so far. */
static double children_cpu_seconds(void) {
    struct rusage u;
    KV_CHECK(getrusage(RUSAGE_CHILDREN, &u) == 0, "bench eval: getrusage failed");
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

/* v in decimal into buf (an argv entry); returns buf. */
static const char *i64_arg(char *buf, size_t n, int64_t v) {
    snprintf(buf, n, "%lld", (long long)v);
    return buf;
}
#define I64(buf, v) i64_arg(buf, sizeof buf, (v))

/* One integer argument's text. */
typedef char NumArg[24];

/* The documents and the budget, as both kvcpt eval and the peer take them:
 * 16 entries written at argv, the numbers' text in L, S, k and docs. */
static int document_args(const char **argv, const BenchEval *b, int64_t K, NumArg L, NumArg S, NumArg k, NumArg docs) {
    const char *a[] = {"--model",    b->model,
                       "--data",     b->data,
                       "--split",    b->split,
                       "--context",  i64_arg(L, sizeof(NumArg), b->context),
                       "--last",     i64_arg(S, sizeof(NumArg), b->last),
                       "--budget",   i64_arg(k, sizeof(NumArg), K),
                       "--policies", b->policies,
                       "--max-docs", i64_arg(docs, sizeof(NumArg), b->max_docs)};
    memcpy(argv, a, sizeof a);
    return (int)(sizeof a / sizeof *a);
}

/* Appends the m entries of rest (the last NULL) to argv's n of cap. */
static void append_args(const char **argv, int *n, size_t cap, const char *const *rest, size_t m) {
    KV_CHECK((size_t)*n + m <= cap, "bench eval: %zu arguments past the %zu the command line holds", (size_t)*n + m,
             cap);
    memcpy(argv + *n, rest, m * sizeof *rest);
    *n += (int)m;
}

/* Seconds run.models[*].hash_seconds + load_seconds of eval.json at path. */
static double eval_json_load_seconds(const char *path) {
    json_error_t err;
    json_t *root = json_load_regular(path, 0, &err);
    KV_CHECK(root != NULL, "bench eval: cannot read %s: %s", path, err.text);
    json_t *models = json_object_get(json_object_get(root, "run"), "models"), *m;
    size_t i;
    double sum = 0;
    KV_CHECK(json_is_array(models), "bench eval: %s has no run.models", path);
    json_array_foreach(models, i, m) {
        json_t *h = json_object_get(m, "hash_seconds"), *l = json_object_get(m, "load_seconds");
        KV_CHECK(json_is_number(h) && json_is_number(l),
                 "bench eval: %s: run.models[%zu] lacks hash_seconds or "
                 "load_seconds",
                 path, i);
        sum += json_number_value(h) + json_number_value(l);
    }
    json_decref(root);
    return sum;
}

/* `kvcpt eval` with its defaults and every default variant (--policies
 * all): what a user runs. */
static UserRun run_kvcpt_all(const BenchEval *b, const char *dir) {
    char exe[4096], out[4200], log[4200], json[4300], L[24], S[24], docs[24];
    exe_self_path(exe, sizeof exe);
    path_fmt(out, sizeof out, "%s/eval", dir);
    path_fmt(log, sizeof log, "%s/kvcpt.log", dir);
    const char *argv[] = {exe,           "eval",
                          "--model",     b->model,
                          "--data",      b->data,
                          "--split",     b->split,
                          "--context",   I64(L, b->context),
                          "--last",      I64(S, b->last),
                          "--budget",    b->budget,
                          "--policies",  "all",
                          "--max-docs",  I64(docs, b->max_docs),
                          "--device",    "cpu",
                          "--bootstrap", "10",
                          "--out",       out,
                          "--quiet",     NULL};
    double t0 = now_seconds(), c0 = children_cpu_seconds();
    int rc = subprocess_run(argv, NULL, log, NULL, 0);
    double dt = now_seconds() - t0, cpu = children_cpu_seconds() - c0;
    KV_CHECK(rc == 0, "bench eval: kvcpt eval --policies all failed (status %d); its output is in %s", rc, log);
    path_fmt(json, sizeof json, "%s/eval.json", out);
    return (UserRun){dt, cpu, eval_json_load_seconds(json)};
}

/* `kvcpt eval` with kvpress's choices (the same list as kvpress_flags in
 * tests/kvpress_peer.py); returns its wall time. */
static double run_kvcpt(const BenchEval *b, int64_t K, const char *dir) {
    char exe[4096], out[4200], log[4200], L[24], S[24], k[24], docs[24], w[24], ker[24], sinks[24];
    exe_self_path(exe, sizeof exe);
    path_fmt(out, sizeof out, "%s/eval", dir);
    path_fmt(log, sizeof log, "%s/kvcpt.log", dir);
    const char *argv[48] = {exe, "eval"};
    int n = 2 + document_args(argv + 2, b, K, L, S, k, docs);
    const char *rest[] = {"--device",
                          "cpu",
                          "--bootstrap",
                          "10",
                          "--out",
                          out,
                          "--quiet",
                          "--sinks",
                          I64(sinks, b->sinks),
                          "--compress-once",
                          "--agg",
                          "mean",
                          "--pool",
                          "avg",
                          "--snapkv-kernel",
                          I64(ker, b->kernel),
                          "--snapkv-window",
                          I64(w, b->window),
                          "--snapkv-keep-window",
                          "on",
                          "--tova-keep-last",
                          "--tova-window",
                          "1",
                          "--head-sets",
                          "shared",
                          "--h2o-recent",
                          "0",
                          "--h2o-score",
                          "mean",
                          NULL};
    append_args(argv, &n, sizeof argv / sizeof *argv, rest, sizeof rest / sizeof *rest);

    double t0 = now_seconds();
    int rc = subprocess_run(argv, NULL, log, NULL, 0);
    double dt = now_seconds() - t0;
    KV_CHECK(rc == 0, "bench eval: kvcpt eval failed (status %d); its output is in %s", rc, log);
    return dt;
}

/* tests/kvpress_peer.py --bench over the same documents and policies. */
static void run_peer(const BenchEval *b, int64_t K, const char *dir, PeerTime *t) {
    char py[4200], script[4200], log[4200], line[2048];
    char L[24], S[24], k[24], docs[24], w[24], ker[24], sinks[24], th[24];
    exe_dir_path(py, sizeof py, "third_party/venv/bin/python");
    exe_dir_path(script, sizeof script, "tests/kvpress_peer.py");
    path_fmt(log, sizeof log, "%s/peer.log", dir);
    const char *interp = b->python ? b->python : py;
    t->seconds = t->load_seconds = t->forward = t->forward_cpu = t->wall = -1, t->why[0] = 0;
    if (access(interp, X_OK) != 0) {
        snprintf(t->why, sizeof t->why, "no Python interpreter at %s (run 'make setup', or give --python)", interp);
        return;
    }
    const char *argv[48] = {interp, script, "--bench"};
    int n = 3 + document_args(argv + 3, b, K, L, S, k, docs);
    const char *rest[] = {"--sinks",         I64(sinks, b->sinks), "--snapkv-window",
                          I64(w, b->window), "--snapkv-kernel",    I64(ker, b->kernel),
                          "--threads",       I64(th, b->threads),  NULL};
    append_args(argv, &n, sizeof argv / sizeof *argv, rest, sizeof rest / sizeof *rest);

    double t0 = now_seconds();
    int rc = subprocess_run(argv, NULL, log, line, sizeof line);
    t->wall = now_seconds() - t0;
    json_t *res = rc == 0 ? json_loads(line, 0, NULL) : NULL;
    if (res) {
        t->seconds = json_number_value(json_object_get(res, "seconds"));
        t->load_seconds = json_number_value(json_object_get(res, "load_seconds"));
        json_t *fw = json_object_get(res, "forward_seconds");
        t->forward = json_is_number(fw) ? json_number_value(fw) : -1;
        json_t *fc = json_object_get(res, "forward_cpu_seconds");
        t->forward_cpu = json_is_number(fc) ? json_number_value(fc) : -1;
        json_decref(res);
    }
    /* --policies none: the forward alone, no policy time to report */
    int forward_only = strcmp(b->policies, "none") == 0;
    if (forward_only ? t->forward <= 0 : t->seconds <= 0) {
        snprintf(t->why, sizeof t->why, "%s %s did not run (status %d; its stderr is kept in %s)", interp, script, rc,
                 log);
        t->seconds = t->forward = t->forward_cpu = -1;
    } else if (forward_only) {
        t->seconds = -1, t->why[0] = 0;
    }
}

/* Removes the run's directory: kvcpt eval's output folder (eval.json, the
 * plot and its files, whatever they are) and the two logs. */
static void remove_run(const char *dir) {
    char p[4200];
    path_fmt(p, sizeof p, "%s/eval", dir);
    DIR *d = opendir(p);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char f[4500];
        path_fmt(f, sizeof f, "%s/%s", p, e->d_name);
        unlink(f);
    }
    if (d) closedir(d);
    rmdir(p);
    path_fmt(p, sizeof p, "%s/kvcpt.log", dir);
    unlink(p);
    path_fmt(p, sizeof p, "%s/peer.log", dir);
    unlink(p);
    rmdir(dir);
}

/* Both evaluators run each document's context then its last tokens: L + S
 * positions, which must be positions the model has and must not wrap,
 * checked here rather than left to two children that report it apart. */
static void check_positions(const BenchEval *b) {
    DecoderConfig c;
    config_load(&c, b->model);
    int64_t max_pos = c.max_position_embeddings, need;
    if (b->context > max_pos - 1)
        die("bench eval: %s %lld is out of range: it must be in [1, %lld] ('%s' has max_position_embeddings %lld, "
            "and %s needs at least one position)",
            options_spelled("L"), (long long)b->context, (long long)(max_pos - 1), b->model, (long long)max_pos,
            options_spelled("S"));
    if (i64_add(b->context, b->last, &need) != 0 || need > max_pos)
        die("bench eval: %s %lld is out of range: with %s %lld it must be in [1, %lld] ('%s' has "
            "max_position_embeddings %lld; a document uses L + S positions)",
            options_spelled("S"), (long long)b->last, options_spelled("L"), (long long)b->context,
            (long long)(max_pos - b->context), b->model, (long long)max_pos);
}

static int cmp_seconds(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) over the entries that ran (>= 0; -1: did not run),
 * the mean of the middle two for an even count; -1 when none ran. */
static double median_of(const double *v, int64_t n) {
    double *s = xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i] >= 0) s[k++] = v[i];
    qsort(s, (size_t)k, sizeof(double), cmp_seconds);
    double m = k == 0 ? -1 : k % 2 ? s[k / 2] : 0.5 * (s[k / 2 - 1] + s[k / 2]);
    free(s);
    return m;
}

int bench_eval(int argc, char **argv) {
    BenchEval b = {.split = "test",
                   .budget = "L/8",
                   .policies = "streaming,snapkv,tova,h2o",
                   .peer = "kvpress",
                   .context = 512,
                   .last = 32,
                   .max_docs = 4,
                   .threads = 1,
                   .window = 8,
                   .kernel = 5,
                   .sinks = 4,
                   .repeat = 1};
    const Option opts[] = {
        {"model", OPT_STRING, &b.model, "DIR", "model directory, HF (both read it) or native (kvcpt only)"},
        {"data", OPT_STRING, &b.data, "DIR", "prepared data directory (kvcpt prepare --out)"},
        {"split", OPT_STRING, &b.split, "NAME", "split to score"},
        {"L", OPT_INT, &b.context, "L", "prefill length"},
        {"context", OPT_ALIAS, NULL, "L", NULL},
        {"S", OPT_INT, &b.last, "S", "scored tokens per document"},
        {"last", OPT_ALIAS, NULL, "S", NULL},
        {"K", OPT_STRING, &b.budget, "K|L/N", "keys kept per KV head"},
        {"budget", OPT_ALIAS, NULL, "K", NULL},
        {"policies", OPT_STRING, &b.policies, "LIST",
         "of full, streaming, snapkv, tova, h2o; none: only the sdpa forward"},
        {"max-docs", OPT_INT, &b.max_docs, "N", "documents"},
        {"threads", OPT_INT, &b.threads, "N", "threads of both"},
        {"snapkv-window", OPT_INT, &b.window, "W", "SnapKV window of both"},
        {"snapkv-kernel", OPT_INT, &b.kernel, "K", "SnapKV pooling kernel of both"},
        {"sinks", OPT_INT, &b.sinks, "N", "StreamingLLM sinks of both"},
        {"peer", OPT_STRING, &b.peer, "NAME", "the peer (kvpress, the only one)"},
        {"python", OPT_STRING, &b.python, "PATH", "its interpreter"},
        {"shared-only", OPT_FLAG, &b.shared_only, NULL,
         "skip kvcpt eval as a user runs it (every variant, --policies all)"},
        {"user-run-only", OPT_FLAG, &b.user_run_only, NULL,
         "skip kvcpt eval with kvpress's choices (long contexts: one run less)"},
        {"repeat", OPT_INT, &b.repeat, "N", "runs of everything, back to back; medians reported"},
        {"json", OPT_FLAG, &b.json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench eval",
                      "Wall time of kvcpt eval beside kvpress + transformers (CPU, same documents and "
                      "policies, kvpress's choices).",
                      opts, argc, argv))
        return 0;
    KV_CHECK(b.model && b.data, "bench eval: --model and --data are required");
    KV_CHECK(strcmp(b.peer, "kvpress") == 0, "bench eval: --peer must be kvpress (got '%s')", b.peer);
    const struct {
        const char *name;
        int64_t v;
    } counts[] = {
        {"threads", b.threads}, {"L", b.context}, {"S", b.last}, {"max-docs", b.max_docs}, {"repeat", b.repeat}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        KV_CHECK(counts[i].v >= 1, "bench eval: %s must be >= 1 (got %lld)", options_spelled(counts[i].name),
                 (long long)counts[i].v);
    KV_CHECK(b.repeat <= 1000, "bench eval: --repeat must be <= 1000 (got %lld)", (long long)b.repeat);
    check_positions(&b);
    /* the ranges kvcpt eval checks, here before either side runs */
    eval_check_shared_policy_options("bench eval", b.kernel, b.window, b.sinks);
    int64_t K = policy_budget(b.budget, b.context);
    char th[24];
    /* both children inherit these: OpenMP and OpenBLAS (kvcpt), torch's intra-op pool reads --threads */
    KV_CHECK(setenv("OMP_NUM_THREADS", I64(th, b.threads), 1) == 0 && setenv("OPENBLAS_NUM_THREADS", th, 1) == 0,
             "bench eval: setenv");
    /* the wait policy kvcpt eval picks for itself (cli/kvcpt.c), for torch's
     * OpenMP too, unless the user set one: both run in the same environment */
    KV_CHECK(getenv("OMP_WAIT_POLICY") || setenv("OMP_WAIT_POLICY", "passive", 1) == 0, "bench eval: setenv");
    KV_CHECK(!(b.shared_only && b.user_run_only), "bench eval: --shared-only and --user-run-only exclude each other");
    /* none: the yardstick forward alone; kvcpt has no kvpress choices to run */
    if (strcmp(b.policies, "none") == 0) b.user_run_only = 1;
    int64_t n = b.repeat;
    double *all = xmalloc(sizeof(double) * 9 * (size_t)n), *all_load = all + n, *ours = all + 2 * n;
    double *kvp = all + 3 * n, *kvp_load = all + 4 * n, *kvp_wall = all + 5 * n, *fwd = all + 6 * n;
    double *all_cpu = all + 7 * n, *fwd_cpu = all + 8 * n;
    double *ratio = xmalloc(sizeof(double) * 3 * (size_t)n), *ratio_compute = ratio + n, *ratio_cpu = ratio + 2 * n;
    PeerTime peer;
    for (int64_t i = 0; i < n; i++) {
        char dir[] = "/tmp/kvcpt_bench_eval_XXXXXX";
        KV_CHECK(mkdtemp(dir) != NULL, "bench eval: cannot create a temporary directory");
        UserRun u = b.shared_only ? (UserRun){-1, -1, -1} : run_kvcpt_all(&b, dir);
        all[i] = u.wall, all_cpu[i] = u.cpu, all_load[i] = u.load;
        ours[i] = b.user_run_only ? -1 : run_kvcpt(&b, K, dir);
        run_peer(&b, K, dir, &peer);
        if (!peer.why[0] || peer.wall < 0) remove_run(dir); /* a failed peer's log stays */
        kvp[i] = peer.seconds, kvp_load[i] = peer.load_seconds, kvp_wall[i] = peer.wall, fwd[i] = peer.forward;
        fwd_cpu[i] = peer.forward_cpu;
        ratio[i] = all[i] > 0 && fwd[i] > 0 ? all[i] / fwd[i] : -1;
        ratio_compute[i] = all[i] > 0 && fwd[i] > 0 ? (all[i] - all_load[i]) / fwd[i] : -1;
        ratio_cpu[i] = all_cpu[i] > 0 && fwd_cpu[i] > 0 ? all_cpu[i] / fwd_cpu[i] : -1;
        if (n > 1) /* stderr: progress beside --json's one object on stdout */
            fprintf(stderr,
                    "bench eval: run %lld/%lld: kvcpt every variant %.3f s (load %.3f s), forward %.3f s, "
                    "ratio %.3fx; CPU %.1f s over %.1f s: %.3fx\n",
                    (long long)(i + 1), (long long)n, all[i], all_load[i], fwd[i], ratio[i], all_cpu[i], fwd_cpu[i],
                    ratio_cpu[i]);
        if (peer.why[0]) break; /* the peer failed: said once below */
    }
    /* each figure's median over the runs (the ratios are each pair's) */
    double m_all = median_of(all, n), m_load = median_of(all_load, n), m_ours = median_of(ours, n);
    double m_kvp = median_of(kvp, n), m_kvp_load = median_of(kvp_load, n), m_kvp_wall = median_of(kvp_wall, n);
    double m_fwd = median_of(fwd, n), m_ratio = median_of(ratio, n), m_ratio_c = median_of(ratio_compute, n);
    double m_all_cpu = median_of(all_cpu, n), m_fwd_cpu = median_of(fwd_cpu, n), m_ratio_cpu = median_of(ratio_cpu, n);
    if (b.json) {
        printf("{\"bench\": \"eval\", \"peer\": \"kvpress\", \"context\": %lld, \"last\": %lld, \"budget\": %lld, "
               "\"policies\": \"%s\", \"max_docs\": %lld, \"threads\": %lld, \"repeat\": %lld",
               (long long)b.context, (long long)b.last, (long long)K, b.policies, (long long)b.max_docs,
               (long long)b.threads, (long long)n);
        if (m_ours > 0) printf(", \"kvcpt_seconds\": %.4f", m_ours);
        if (m_all > 0)
            printf(", \"kvcpt_all_variants_seconds\": %.4f, \"kvcpt_all_variants_load_seconds\": %.4f", m_all, m_load);
        if (m_kvp > 0) {
            printf(", \"kvpress_seconds\": %.4f, \"kvpress_load_seconds\": %.4f, \"kvpress_process_seconds\": %.4f",
                   m_kvp, m_kvp_load, m_kvp_wall);
            if (m_ours > 0) printf(", \"kvpress_over_kvcpt\": %.3f", m_kvp / m_ours);
            if (m_all > 0) printf(", \"kvpress_over_kvcpt_all_variants\": %.3f", m_kvp / m_all);
        } else {
            printf(", \"kvpress_seconds\": null");
        }
        if (m_fwd > 0) {
            printf(", \"transformers_forward_seconds\": %.4f", m_fwd);
            if (m_ratio > 0)
                printf(", \"kvcpt_all_variants_over_forward\": %.3f, \"kvcpt_all_variants_without_load_over_forward\": "
                       "%.3f",
                       m_ratio, m_ratio_c);
            if (m_ratio_cpu > 0)
                printf(", \"kvcpt_all_variants_cpu_seconds\": %.4f, \"transformers_forward_cpu_seconds\": %.4f, "
                       "\"kvcpt_all_variants_cpu_over_forward_cpu\": %.3f",
                       m_all_cpu, m_fwd_cpu, m_ratio_cpu);
            if (m_ratio > 0 && n > 1) {
                printf(", \"pairs\": [");
                for (int64_t i = 0; i < n; i++)
                    printf("%s{\"kvcpt_all_variants_seconds\": %.4f, \"kvcpt_all_variants_load_seconds\": %.4f, "
                           "\"transformers_forward_seconds\": %.4f, \"kvcpt_all_variants_over_forward\": %.3f, "
                           "\"kvcpt_all_variants_cpu_seconds\": %.4f, \"transformers_forward_cpu_seconds\": %.4f}",
                           i ? ", " : "", all[i], all_load[i], fwd[i], ratio[i], all_cpu[i], fwd_cpu[i]);
                printf("]");
            }
        }
        char *blas = blas_core_json_text();
        printf(", \"blas\": %s}\n", blas);
        free(blas), free(all), free(ratio);
        return 0;
    }
    printf("bench eval: context %lld, last %lld, budget %lld, policies %s, up to %lld documents, %lld thread(s)%s\n",
           (long long)b.context, (long long)b.last, (long long)K, b.policies, (long long)b.max_docs,
           (long long)b.threads, n > 1 ? ", medians of the runs" : "");
    printf("  BLAS: %s\n", blas_core_summary());
    if (m_all > 0)
        printf("  kvcpt eval, every default variant, process wall: %8.3f s  (of which %.2f s model hash and load)\n",
               m_all, m_load);
    if (m_ours > 0) printf("  kvcpt eval (%s, kvpress's choices), process wall: %8.3f s\n", b.policies, m_ours);
    if (m_kvp > 0) {
        printf("  kvpress + transformers (%s), compute: %8.3f s  (+ %.2f s model load; process %.2f s)\n", b.policies,
               m_kvp, m_kvp_load, m_kvp_wall);
        if (m_ours > 0) printf("  ratio kvpress / kvcpt (same policies):          %8.2fx\n", m_kvp / m_ours);
        if (m_all > 0) printf("  ratio kvpress / kvcpt (every default variant): %8.2fx\n", m_kvp / m_all);
    } else if (peer.why[0]) {
        printf("  kvpress: %s\n", peer.why);
    }
    if (m_fwd > 0) {
        printf("  transformers (sdpa), one forward of the L tokens per document: %8.3f s  (model load not counted)\n",
               m_fwd);
        if (m_ratio > 0) {
            printf("  ratio kvcpt (every default variant) / forward: %8.2fx\n", m_ratio);
            printf("  the same without kvcpt's model hash and load:  %8.2fx\n", m_ratio_c);
        }
        if (m_ratio_cpu > 0)
            printf("  CPU time (every thread), kvcpt %.2f s / forward %.2f s:   %8.2fx\n", m_all_cpu, m_fwd_cpu,
                   m_ratio_cpu);
    }
    free(all), free(ratio);
    return 0;
}
