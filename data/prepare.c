#include "prepare.h"

#include <errno.h>
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "dataset_dir.h"
#include "doc_reader.h"
#include "input_list.h"
#include "shard.h"
#include "splits.h"
#include "tokenizer.h"
#include "utf8.h"

#define BATCH_BYTES (16 << 20)
#define BATCH_DOCS 4096

typedef struct {
    char *text;
    size_t len;
    int64_t line;
    int split;
    TokenBuf ids;
    char *err; /* the tokenizer's complaint, when it failed */
} Doc;

typedef struct {
    ShardWriter w;
    int open;
    int n_shards;
    int64_t docs, tokens;
    json_t *shards;
    char dir[4096];
} SplitOut;

typedef struct {
    const PrepareOptions *o;
    const Tokenizer *tok;
    TokEncoder **enc;
    int threads;
    SplitOut split[SPLIT_COUNT];
    int64_t docs_read, docs_dropped, text_bytes, raw_bytes_done, raw_bytes_total;
    double t0;
    Progress progress;
    const char *build_dir; /* where the dataset is written before it replaces the one in --out */
    SplitShares shares;
} Prepare;

static void open_shard(Prepare *p, SplitOut *s) {
    char path[4200];
    /* the final name: the whole build directory is the temporary */
    path_fmt(path, sizeof path, "%s/shard_%06d.bin", s->dir, s->n_shards);
    shard_writer_open(&s->w, path, (uint32_t)tokenizer_vocab_size(p->tok),
                      tokenizer_bos_id(p->tok) >= 0 ? SHARD_FLAG_BOS : 0, tokenizer_sha256(p->tok));
    s->open = 1;
}

static void close_shard(SplitOut *s, int split) {
    char name[64];
    path_fmt(name, sizeof name, "%s/shard_%06d.bin", split_names[split], s->n_shards);
    if (json_array_append_new(s->shards, json_pack("{s:s, s:I, s:I}", "file", name, "documents",
                                                   (json_int_t)s->w.h.n_docs, "tokens", (json_int_t)s->w.h.n_tokens)) !=
        0)
        die("prepare: cannot record shard '%s' in the manifest", name);
    shard_writer_finish(&s->w);
    s->open = 0;
    s->n_shards++;
}

static void write_doc(Prepare *p, const Doc *d) {
    SplitOut *s = &p->split[d->split];
    /* a split of 0 percent has no directory: nothing may be written there */
    KV_CHECK(p->shares.percent[d->split] > 0,
             "prepare: internal error: a document went to the %s split, whose share is 0", split_names[d->split]);
    if (s->open && s->w.h.n_docs > 0 && (int64_t)s->w.h.n_tokens + d->ids.n > p->o->shard_tokens)
        close_shard(s, d->split);
    if (!s->open) open_shard(p, s);
    shard_writer_add_doc(&s->w, d->ids.ids, d->ids.n);
    s->docs++;
    s->tokens += d->ids.n;
}

static int cmp_longest_first(const void *a, const void *b) {
    size_t x = (*(Doc *const *)a)->len, y = (*(Doc *const *)b)->len;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void tokenize_batch(Prepare *p, const char *path, Doc *docs, int n) {
    Doc **order = xmalloc(sizeof(Doc *) * (size_t)n);
    for (int i = 0; i < n; i++) order[i] = &docs[i];
    qsort(order, (size_t)n, sizeof(Doc *), cmp_longest_first); /* big documents start first: better balance */
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (int i = 0; i < n; i++) {
        Doc *d = order[i];
        d->ids.n = 0;
        /* the BOS that Hugging Face's encode(text) adds, if the tokenizer has one */
        if (tokenizer_bos_id(p->tok) >= 0) token_buf_push(&d->ids, (uint32_t)tokenizer_bos_id(p->tok));
        TokEncoder *enc = p->enc[omp_get_thread_num()];
        if (!tok_encode(enc, d->text, d->len, p->o->allow_special, &d->ids)) d->err = xstrdup(tok_encoder_error(enc));
        d->split = split_of_text(d->text, d->len, p->o->split_seed, &p->shares);
    }
    free(order);
    /* reported outside the threads, and for the first such document in input order */
    for (int i = 0; i < n; i++)
        if (docs[i].err) die("'%s' line %lld: %s", path, (long long)docs[i].line, docs[i].err);
}

static void show_progress(Prepare *p, int final) {
    double dt = now_seconds() - p->t0;
    int64_t tokens = p->split[0].tokens + p->split[1].tokens + p->split[2].tokens;
    char extra[160];
    snprintf(extra, sizeof extra, "| text %.1f MB/s | %.0f tok/s | %lld docs", dt > 0 ? p->text_bytes / 1e6 / dt : 0.0,
             dt > 0 ? tokens / dt : 0.0, (long long)p->docs_read);
    if (final) progress_end(&p->progress, p->raw_bytes_done >> 20, extra);
    else progress_update(&p->progress, p->raw_bytes_done >> 20, extra);
}

/* Reads, tokenizes and writes one input file; returns its manifest entry. */
static json_t *process_input(Prepare *p, const char *path) {
    DocReader *r = doc_reader_open(path);
    Doc *docs = xcalloc(BATCH_DOCS, sizeof(Doc));
    int64_t read = 0, kept = 0, base_raw = p->raw_bytes_done, kept_split[SPLIT_COUNT] = {0};
    for (;;) {
        int n = 0;
        size_t bytes = 0;
        const char *text;
        size_t len;
        int64_t line;
        while (n < BATCH_DOCS && bytes < BATCH_BYTES && doc_reader_next(r, &text, &len, &line)) {
            docs[n].text = xrealloc(docs[n].text, len + 1);
            memcpy(docs[n].text, text, len);
            docs[n].len = len;
            docs[n].line = line;
            bytes += len;
            n++;
        }
        if (n == 0) break;
        tokenize_batch(p, path, docs, n);
        for (int i = 0; i < n; i++) {
            if (docs[i].ids.n < p->o->min_tokens) continue;
            write_doc(p, &docs[i]);
            kept++, kept_split[docs[i].split]++;
        }
        read += n;
        p->docs_read += n;
        p->text_bytes += (int64_t)bytes;
        p->raw_bytes_done = base_raw + doc_reader_raw_bytes(r);
        show_progress(p, 0);
    }
    for (int i = 0; i < BATCH_DOCS; i++) {
        free(docs[i].text);
        token_buf_free(&docs[i].ids);
    }
    free(docs);
    char sha[65];
    int64_t raw = doc_reader_raw_bytes(r);
    doc_reader_close(r, sha);
    p->docs_dropped += read - kept;
    /* a split's documents are written in input order, so these counts give
     * each document of a split its input: where eval draws from every source */
    json_t *entry =
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:{s:I, s:I, s:I}}", "path", path, "sha256", sha, "bytes", (json_int_t)raw,
                  "documents", (json_int_t)read, "documents_kept", (json_int_t)kept, "kept_per_split",
                  split_names[SPLIT_TRAIN], (json_int_t)kept_split[SPLIT_TRAIN], split_names[SPLIT_DEV],
                  (json_int_t)kept_split[SPLIT_DEV], split_names[SPLIT_TEST], (json_int_t)kept_split[SPLIT_TEST]);
    if (!entry) die("prepare: cannot build the manifest entry of input '%s'", path);
    return entry;
}

/* manifest.json is UTF-8 JSON, and jansson turns a string that is not UTF-8
 * into NULL, which json_pack and json_array_append_new then drop without a
 * word: a path that cannot be recorded is refused before any work. */
static void require_utf8_path(const char *what, const char *path) {
    int64_t bad = utf8_first_invalid((const uint8_t *)path, strlen(path));
    KV_CHECK(bad < 0,
             "prepare: %s '%s' is not valid UTF-8 (byte 0x%02x at offset %lld of the path); manifest.json "
             "cannot record it: rename it",
             what, path, (unsigned)(uint8_t)path[bad], (long long)bad);
}

static void write_manifest(Prepare *p, json_t *inputs) {
    const PrepareOptions *o = p->o;
    json_t *splits = json_object();
    for (int s = 0; s < SPLIT_COUNT; s++)
        if (p->shares.percent[s] > 0 &&
            json_object_set_new(splits, split_names[s],
                                json_pack("{s:I, s:I, s:O}", "documents", (json_int_t)p->split[s].docs, "tokens",
                                          (json_int_t)p->split[s].tokens, "shards", p->split[s].shards)) != 0)
            die("internal error: cannot build the manifest's %s split", split_names[s]);
    int32_t bos = tokenizer_bos_id(p->tok);
    char rule[256];
    split_shares_rule(&p->shares, "hash_u64(fnv1a64(text) ^ split_seed)", rule, sizeof rule);
    json_t *m = json_pack("{s:s, s:i, s:{s:s, s:s, s:i, s:o, s:s}, s:b, s:b, s:I, s:I, s:s, s:I, s:I, s:o, s:o}",
                          "format", MANIFEST_FORMAT, "version", MANIFEST_VERSION, "tokenizer", "path",
                          o->tokenizer_path, "sha256", tokenizer_sha256(p->tok), "vocab_size",
                          tokenizer_vocab_size(p->tok), "bos_id", bos >= 0 ? json_integer(bos) : json_null(),
                          "special_token_names", tokenizer_special_names(p->tok), "bos_prepended", bos >= 0,
                          "allow_special", o->allow_special, "min_tokens", (json_int_t)o->min_tokens, "split_seed",
                          (json_int_t)o->split_seed, "split_rule", rule, "documents_read", (json_int_t)p->docs_read,
                          "documents_dropped_short", (json_int_t)p->docs_dropped, "inputs", inputs, "splits", splits);
    if (!m) die("internal error: cannot build manifest JSON");
    char path[4200];
    path_fmt(path, sizeof path, "%s/manifest.json", p->build_dir);
    FILE *mf = fopen_check(path, "w");
    if (json_dumpf(m, mf, JSON_INDENT(2)) != 0) die("cannot write '%s': %s", path, strerror(errno));
    fclose_check(mf, path);
    json_decref(m);
}

/* The counts per split written; a split that was asked for but got no
 * document (a small corpus: 4 documents rarely fill 10 percent) is said
 * with what it means downstream, here rather than in train's refusal. */
static void print_summary(const Prepare *p) {
    char line[512];
    int at = snprintf(line, sizeof line, "prepare: %lld documents read, %lld dropped (< %lld tokens);",
                      (long long)p->docs_read, (long long)p->docs_dropped, (long long)p->o->min_tokens);
    for (int s = 0, first = 1; s < SPLIT_COUNT && at > 0 && (size_t)at < sizeof line; s++) {
        if (p->shares.percent[s] == 0) continue;
        at += snprintf(line + at, sizeof line - (size_t)at, "%s %s %lld docs / %lld tokens", first ? "" : ",",
                       split_names[s], (long long)p->split[s].docs, (long long)p->split[s].tokens);
        first = 0;
    }
    fprintf(stderr, "%s\n", line);
    for (int s = SPLIT_DEV; s < SPLIT_COUNT; s++)
        if (p->shares.percent[s] > 0 && p->split[s].docs == 0)
            fprintf(stderr,
                    "prepare: note: the %s split holds no document (its share is %d percent of %lld); "
                    "%s. For a small corpus: --split 90,10,0, or --split none (train only)\n",
                    split_names[s], p->shares.percent[s],
                    (long long)(p->split[0].docs + p->split[1].docs + p->split[2].docs),
                    s == SPLIT_DEV ? "train then runs no dev evaluation"
                                   : "eval then needs another --split, or --split all");
}

void prepare_run(const PrepareOptions *o) {
    KV_CHECK(o->n_inputs > 0, "kvcpt prepare: no --input given");
    KV_CHECK(o->out_dir && *o->out_dir, "kvcpt prepare: --out DIR is required");
    KV_CHECK(o->min_tokens >= 1 && o->shard_tokens >= 1, "kvcpt prepare: --min-tokens and --shard-tokens must be >= 1");
    DatasetDir out;
    dataset_dir_begin(&out, o->out_dir);
    InputList inputs = {0};
    /* an input directory may hold --out: its manifest and shards are no input */
    input_list_skip(&inputs, out.out);
    input_list_skip(&inputs, out.tmp);
    for (int i = 0; i < o->n_inputs; i++) input_list_add(&inputs, o->inputs[i]);
    KV_CHECK(inputs.count > 0, "kvcpt prepare: the inputs hold no .jsonl/.json/.txt(.zst) file");
    for (int i = 0; i < inputs.count; i++) require_utf8_path("input", inputs.paths[i]);
    require_utf8_path("--tokenizer", o->tokenizer_path);

    Prepare p = {.o = o,
                 .tok = tokenizer_load(o->tokenizer_path),
                 .build_dir = out.tmp,
                 .shares = o->shares ? *o->shares : split_shares_default()};
    p.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    p.enc = xcalloc((size_t)p.threads, sizeof(TokEncoder *));
    for (int t = 0; t < p.threads; t++) p.enc[t] = tok_encoder_new(p.tok);
    for (int s = 0; s < SPLIT_COUNT; s++) {
        p.split[s].shards = json_array();
        if (p.shares.percent[s] == 0) continue; /* no document goes there */
        path_fmt(p.split[s].dir, sizeof p.split[s].dir, "%s/%s", out.tmp, split_names[s]);
        make_dirs(p.split[s].dir);
    }
    for (int i = 0; i < inputs.count; i++) p.raw_bytes_total += file_size(inputs.paths[i]);
    p.t0 = now_seconds();
    progress_begin(&p.progress, "prepare", p.raw_bytes_total >> 20, "MB");

    json_t *manifest_inputs = json_array();
    for (int i = 0; i < inputs.count; i++)
        if (json_array_append_new(manifest_inputs, process_input(&p, inputs.paths[i])) != 0)
            die("prepare: cannot record input '%s' in the manifest", inputs.paths[i]);
    for (int s = 0; s < SPLIT_COUNT; s++)
        if (p.split[s].open) close_shard(&p.split[s], s);
    int64_t kept = 0;
    for (int s = 0; s < SPLIT_COUNT; s++) kept += p.split[s].docs;
    /* before the manifest: an empty dataset is not published by accident */
    KV_CHECK(kept > 0 || o->allow_empty,
             "prepare: no document kept (%lld read, %lld shorter than --min-tokens %lld); nothing to train on. "
             "Pass --allow-empty to write the empty dataset anyway",
             (long long)p.docs_read, (long long)p.docs_dropped, (long long)o->min_tokens);
    write_manifest(&p, manifest_inputs);
    dataset_dir_publish(&out); /* only now does the previous dataset go */
    show_progress(&p, 1);
    print_summary(&p);
    for (int s = 0; s < SPLIT_COUNT; s++) json_decref(p.split[s].shards);
    for (int t = 0; t < p.threads; t++) tok_encoder_free(p.enc[t]);
    free(p.enc);
    tokenizer_free((Tokenizer *)p.tok);
    input_list_free(&inputs);
    dataset_dir_free(&out);
}
