/* `kvcpt bench tokenizer`: encoding throughput (MB of UTF-8 text per second)
 * on one thread and on all cores, beside the reference implementations on
 * the same documents, one thread each: Hugging Face tokenizers (same
 * tokenizer.json) and, for Llama 3's tokenizer only, tiktoken (Meta's
 * Llama 3 ranks), run by
 * tests/tokenizer_oracle.py in the `make setup` virtual environment. One run
 * each; figures only. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/options.h"
#include "../common/subprocess.h"
#include "../common/util.h"
#include "../data/doc_reader.h"
#include "../data/input_list.h"
#include "../data/tokenizer.h"
#include "bench.h"

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
            if (!tok_encode(e, d->text[i], d->len[i], 0, &ids))
                die("bench tokenizer: document %lld: %s", (long long)i + 1, tok_encoder_error(e));
            count += ids.n;
        }
        token_buf_free(&ids);
        tok_encoder_free(e);
    }
    *tokens = count;
    return now_seconds() - t0;
}

typedef struct {
    const char *engine; /* tokenizer_oracle.py --engine */
    const char *label;
    double mb_per_s;    /* -1: did not run (why says so) */
    char why[256];
} Peer;

/* Runs one reference implementation on the documents in jsonl (one
 * {"text": ...} per line) and fills p->mb_per_s. */
static void run_peer(Peer *p, const char *jsonl, const char *tok_path) {
    char py[4200], script[4200], line[1024];
    exe_dir_path(py, sizeof py, "third_party/venv/bin/python");
    exe_dir_path(script, sizeof script, "tests/tokenizer_oracle.py");
    const char *env = getenv("KVCPT_PYTHON");
    const char *argv[] = {env ? env : py, script, "--engine", p->engine, "--tokenizer", tok_path, "--bench", NULL};
    p->mb_per_s = -1;
    if (subprocess_run(argv, jsonl, NULL, line, sizeof line) != 0) {
        snprintf(p->why, sizeof p->why, "%s did not run (run 'make setup', or set KVCPT_PYTHON)", argv[0]);
        return;
    }
    json_t *res = json_loads(line, 0, NULL);
    p->mb_per_s = res ? json_number_value(json_object_get(res, "mb_per_s")) : 0;
    json_decref(res);
    if (p->mb_per_s <= 0) {
        snprintf(p->why, sizeof p->why, "no rate in its output");
        p->mb_per_s = -1;
    }
}

/* The documents as JSONL in a temporary file (removed by the caller). */
static void write_jsonl(const Docs *d, char *path) {
    int fd = mkstemp(path);
    KV_CHECK(fd >= 0, "bench tokenizer: cannot create a temporary file %s", path);
    FILE *f = fdopen(fd, "w");
    KV_CHECK(f != NULL, "bench tokenizer: fdopen %s", path);
    for (int64_t i = 0; i < d->n; i++) {
        json_t *o = json_pack("{s:s%}", "text", d->text[i], d->len[i]);
        KV_CHECK(o != NULL, "bench tokenizer: document %lld is not valid UTF-8", (long long)i + 1);
        KV_CHECK(json_dumpf(o, f, JSON_COMPACT) == 0 && fputc('\n', f) != EOF, "bench tokenizer: writing %s", path);
        json_decref(o);
    }
    fclose_check(f, path);
}

int bench_tokenizer(int argc, char **argv) {
    StringList inputs = {0};
    const char *tok_path = NULL;
    int json = 0, no_oracle = 0;
    int64_t threads = 0;
    const Option opts[] = {
        {"input", OPT_STRINGS, &inputs, "FILE_OR_DIR", "text to encode; absent: ../shared/corpus or $KVCPT_CORPUS"},
        {"tokenizer", OPT_STRING, &tok_path, "PATH", "tokenizer.json"},
        {"threads", OPT_INT, &threads, "N", "threads of the all-core run; 0: all cores"},
        {"no-peers", OPT_FLAG, &no_oracle, NULL, "skip HF tokenizers and tiktoken"},
        {"json", OPT_FLAG, &json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench tokenizer",
                      "Tokenizer throughput, one thread and all cores, beside HF tokenizers and tiktoken.", opts, argc,
                      argv))
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
    KV_CHECK(tok1 == tokn, "token counts differ between 1 and %d threads (%lld vs %lld)", nt, (long long)tok1,
             (long long)tokn);
    Peer peers[] = {{"hf", "HF tokenizers", -1, ""}, {"tiktoken", "tiktoken (Meta's ranks)", -1, ""}};
    /* tiktoken holds Meta's Llama 3 ranks: no peer for another tokenizer */
    int llama3 = strcmp(tokenizer_special_names(t), "llama-3.1") == 0;
    const int npeers = no_oracle ? 0 : llama3 ? 2 : 1;
    if (npeers > 0) {
        char jsonl[] = "/tmp/kvcpt_bench_tok_XXXXXX";
        write_jsonl(&d, jsonl);
        for (int i = 0; i < npeers; i++) run_peer(&peers[i], jsonl, path);
        unlink(jsonl);
    }
    double mb = (double)d.bytes / 1e6;
    if (json) {
        printf("{\"bench\": \"tokenizer\", \"documents\": %lld, \"mb\": %.3f, \"tokens\": %lld, \"mb_per_s_1_thread\": "
               "%.2f, "
               "\"threads\": %d, \"mb_per_s_all_threads\": %.2f, \"tokens_per_s_1_thread\": %.0f",
               (long long)d.n, mb, (long long)tok1, mb / s1, nt, mb / sn, tok1 / s1);
        for (int i = 0; i < npeers; i++) {
            if (peers[i].mb_per_s > 0)
                printf(", \"%s_mb_per_s_1_thread\": %.2f, \"kvcpt_over_%s\": %.3f", peers[i].engine, peers[i].mb_per_s,
                       peers[i].engine, mb / s1 / peers[i].mb_per_s);
            else printf(", \"%s_mb_per_s_1_thread\": null", peers[i].engine);
        }
        printf("}\n");
    } else {
        printf("tokenizer: %lld documents, %.1f MB, %lld tokens\n", (long long)d.n, mb, (long long)tok1);
        printf("  kvcpt, 1 thread:   %8.2f MB/s  (%.0f tokens/s)\n", mb / s1, tok1 / s1);
        printf("  kvcpt, %2d threads: %8.2f MB/s\n", nt, mb / sn);
        for (int i = 0; i < npeers; i++) {
            if (peers[i].mb_per_s > 0)
                printf("  %-24s %8.2f MB/s, 1 thread  (kvcpt 1 thread is %.2fx)\n", peers[i].label, peers[i].mb_per_s,
                       mb / s1 / peers[i].mb_per_s);
            else printf("  %-24s %s\n", peers[i].label, peers[i].why);
        }
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
