/* `kvcpt bench tokenizer`: encoding throughput (MB of UTF-8 text per second)
 * on one thread and on all cores, beside the JS oracle (llama3-tokenizer-js
 * under node) on the same documents. One run each; figures only. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/options.h"
#include "../common/util.h"
#include "../train/bench.h"
#include "doc_reader.h"
#include "input_list.h"
#include "tokenizer.h"

typedef struct {
    char **text;
    size_t *len;
    int64_t n, bytes;
} Docs;

static void load_docs(Docs *d, const InputList *in) {
    for (int i = 0; i < in->count; i++) {
        DocReader *r = doc_reader_open(in->paths[i]);
        const char *t;
        size_t len;
        int64_t line;
        while (doc_reader_next(r, &t, &len, &line)) {
            d->text = xrealloc(d->text, sizeof(char *) * (size_t)(d->n + 1));
            d->len = xrealloc(d->len, sizeof(size_t) * (size_t)(d->n + 1));
            d->text[d->n] = xmalloc(len + 1);
            memcpy(d->text[d->n], t, len + 1);
            d->len[d->n++] = len;
            d->bytes += (int64_t)len;
        }
        doc_reader_close(r, NULL);
    }
}

/* Returns seconds; *tokens gets the total count. */
static double encode_all(const Tokenizer *t, const Docs *d, int threads, int64_t *tokens) {
    int64_t count = 0;
    double t0 = now_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : count)
    {
        TokEncoder *e = tok_encoder_new(t);
        TokenBuf ids = {0};
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < d->n; i++) {
            ids.n = 0;
            tok_encode(e, d->text[i], d->len[i], 0, &ids);
            count += ids.n;
        }
        token_buf_free(&ids);
        tok_encoder_free(e);
    }
    *tokens = count;
    return now_seconds() - t0;
}

/* Runs the node oracle on the same documents; returns MB/s or -1 (with why). */
static double oracle_mb_per_s(const Docs *d, char *why, size_t why_cap) {
    char script[4096];
    ssize_t n = readlink("/proc/self/exe", script, sizeof script - 64);
    if (n <= 0) return snprintf(why, why_cap, "cannot locate the executable"), -1;
    script[n] = '\0';
    *strrchr(script, '/') = '\0';
    strcat(script, "/data/oracle/llama3_oracle.mjs");
    if (access(script, R_OK) != 0) return snprintf(why, why_cap, "%s missing", script), -1;
    char jsonl[] = "/tmp/kvcpt_bench_tok_XXXXXX";
    int fd = mkstemp(jsonl);
    if (fd < 0) return snprintf(why, why_cap, "cannot create a temporary file"), -1;
    FILE *f = fdopen(fd, "w");
    for (int64_t i = 0; i < d->n; i++) {
        json_t *o = json_pack("{s:s%}", "text", d->text[i], d->len[i]);
        json_dumpf(o, f, JSON_COMPACT);
        fputc('\n', f);
        json_decref(o);
    }
    fclose_check(f, jsonl);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "node '%s' --bench < '%s' 2>/dev/null", script, jsonl);
    FILE *p = popen(cmd, "r");
    char line[1024] = "";
    if (!p || !fgets(line, sizeof line, p)) line[0] = '\0';
    if (p) pclose(p);
    unlink(jsonl);
    json_t *res = json_loads(line, 0, NULL);
    double mbps = res ? json_number_value(json_object_get(res, "oracle_mb_per_s")) : 0;
    json_decref(res);
    if (mbps <= 0) return snprintf(why, why_cap, "node oracle did not run (node or llama3-tokenizer-js missing?)"), -1;
    return mbps;
}

int bench_tokenizer(int argc, char **argv) {
    StringList inputs = {0};
    const char *tok_path = NULL;
    int json = 0, no_oracle = 0;
    int64_t threads = 0;
    const Option opts[] = {
        {"input", OPT_STRINGS, &inputs, "FILE_OR_DIR", "text to encode (default: ../shared/corpus or $KVCPT_CORPUS)"},
        {"tokenizer", OPT_STRING, &tok_path, "PATH", "tokenizer.json"},
        {"threads", OPT_INT, &threads, "N", "threads of the all-core run (default: all cores)"},
        {"no-oracle", OPT_FLAG, &no_oracle, NULL, "skip the node oracle"},
        {"json", OPT_FLAG, &json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench tokenizer", "Tokenizer throughput, one thread and all cores, beside the JS oracle.", opts, argc, argv))
        return 0;
    InputList in = {0};
    if (inputs.count == 0) {
        const char *c = getenv("KVCPT_CORPUS");
        input_list_add(&in, c ? c : "../shared/corpus");
    }
    for (int i = 0; i < inputs.count; i++) input_list_add(&in, inputs.items[i]);
    Docs d = {0};
    load_docs(&d, &in);
    char *path = tok_path ? xstrdup(tok_path) : tokenizer_default_path();
    Tokenizer *t = tokenizer_load(path);
    int nt = threads > 0 ? (int)threads : omp_get_max_threads();
    int64_t tok1, tokn;
    double s1 = encode_all(t, &d, 1, &tok1), sn = encode_all(t, &d, nt, &tokn);
    KV_CHECK(tok1 == tokn, "token counts differ between 1 and %d threads (%lld vs %lld)", nt, (long long)tok1, (long long)tokn);
    char why[512] = "";
    double oracle = no_oracle ? -1 : oracle_mb_per_s(&d, why, sizeof why);
    double mb = (double)d.bytes / 1e6;
    if (json) {
        printf("{\"bench\": \"tokenizer\", \"documents\": %lld, \"mb\": %.3f, \"tokens\": %lld, \"mb_per_s_1_thread\": %.2f, "
               "\"threads\": %d, \"mb_per_s_all_threads\": %.2f, \"tokens_per_s_1_thread\": %.0f, \"oracle_mb_per_s\": ",
               (long long)d.n, mb, (long long)tok1, mb / s1, nt, mb / sn, tok1 / s1);
        if (oracle > 0) printf("%.2f}\n", oracle);
        else printf("null}\n");
    } else {
        printf("tokenizer: %lld documents, %.1f MB, %lld tokens\n", (long long)d.n, mb, (long long)tok1);
        printf("  kvcpt, 1 thread:   %8.2f MB/s  (%.0f tokens/s)\n", mb / s1, tok1 / s1);
        printf("  kvcpt, %2d threads: %8.2f MB/s\n", nt, mb / sn);
        if (oracle > 0) printf("  llama3-tokenizer-js (node, 1 thread): %.2f MB/s\n", oracle);
        else if (!no_oracle) printf("  oracle: %s\n", why);
    }
    tokenizer_free(t);
    free(path);
    input_list_free(&in);
    for (int64_t i = 0; i < d.n; i++) free(d.text[i]);
    free(d.text);
    free(d.len);
    free((void *)inputs.items);
    return 0;
}
