#include "synthetic.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rng.h"
#include "../common/util.h"
#include "answers.h"
#include "sha256.h"
#include "shard.h"
#include "splits.h"
#include "prepare.h"

#define SYNTH_FIRST_ID 3 /* ids below are BOS and the query marker (0 unused) */
#define SYNTH_MAX_VOCAB ((int64_t)1 << 24)

SyntheticTask synthetic_task_parse(const char *name) {
    if (strcmp(name, "recall") == 0) return SYNTH_TASK_RECALL;
    if (strcmp(name, "copy") == 0) return SYNTH_TASK_COPY;
    if (strcmp(name, "mqar") == 0) return SYNTH_TASK_MQAR;
    die("prepare --synthetic: the task must be 'recall', 'copy' or 'mqar' (got '%s')", name);
}

const char *synthetic_task_name(SyntheticTask t) {
    return t == SYNTH_TASK_COPY ? "copy" : t == SYNTH_TASK_MQAR ? "mqar" : "recall";
}

/* mqar: records in the body and the marker id range. */
static int64_t mqar_records(const SyntheticOptions *o) { return (o->doc_tokens - 1 - o->query_tail) / (1 + o->values); }
static int64_t mqar_markers(const SyntheticOptions *o) { return o->markers > 0 ? o->markers : mqar_records(o); }

static void mqar_validate(const SyntheticOptions *o) {
    KV_CHECK(o->values >= 1 && o->values <= 64, "prepare --synthetic mqar: --values must be in [1, 64] (got %lld)",
             (long long)o->values);
    int64_t body = o->doc_tokens - 1 - o->query_tail, rec = 1 + o->values;
    KV_CHECK(body >= rec && body % rec == 0,
             "prepare --synthetic mqar: the body (doc tokens - 1 - query tail = %lld) must be a positive multiple of "
             "the record length 1 + values = %lld",
             (long long)body, (long long)rec);
    KV_CHECK(o->query_tail >= 1, "prepare --synthetic mqar: --query-tail must be >= 1 (the repeated records)");
    int64_t records = mqar_records(o), markers = mqar_markers(o);
    KV_CHECK(markers >= records,
             "prepare --synthetic mqar: --markers (%lld) must be at least the records per document (%lld)",
             (long long)markers, (long long)records);
    KV_CHECK(o->vocab - SYNTH_FIRST_ID - markers >= 2,
             "prepare --synthetic mqar: need vocab >= %lld for %lld markers and at least 2 value ids (got %lld)",
             (long long)(SYNTH_FIRST_ID + markers + 2), (long long)markers, (long long)o->vocab);
}

void synthetic_validate(const SyntheticOptions *o) {
    /* Ids go into the shards' 32-bit token fields, and every document's
     * generator holds a table of up to vocab ids: a vocabulary past 2^24 (a
     * 64 MiB table, a hundred times a real tokenizer's) is a typo, and 2^32
     * would wrap the shard's vocab_size to 0 after gigabytes of allocation. */
    KV_CHECK(o->vocab >= 8 && o->vocab <= SYNTH_MAX_VOCAB,
             "prepare --synthetic: --vocab must be in [8, %lld] (got %lld): the ids are 32-bit shard tokens and each "
             "document is generated from a table of vocab ids",
             (long long)SYNTH_MAX_VOCAB, (long long)o->vocab);
    KV_CHECK(o->vocab >= 8 && o->doc_tokens >= 8 && o->query_tail >= 0 && o->docs >= 10,
             "prepare --synthetic: need vocab >= 8, doc tokens >= 8, query tail >= 0, docs >= 10");
    if (o->task == SYNTH_TASK_RECALL)
        KV_CHECK(o->query_tail < o->doc_tokens / 2, "prepare --synthetic recall: need query tail < doc tokens / 2");
    if (o->task == SYNTH_TASK_COPY) {
        int64_t body = o->doc_tokens - 1 - o->query_tail;
        KV_CHECK(o->copy_offset >= 0 && o->copy_offset <= body,
                 "prepare --synthetic copy: the copy offset (%lld) must be in [0, body = %lld]",
                 (long long)o->copy_offset, (long long)body);
        KV_CHECK(o->copy_offset > 0 || o->query_tail <= body,
                 "prepare --synthetic copy: the copied tail (%lld) cannot be longer than the body (%lld tokens)",
                 (long long)o->query_tail, (long long)body);
        KV_CHECK(o->vocab - SYNTH_FIRST_ID >= body,
                 "prepare --synthetic copy: the body (%lld tokens) must fit in distinct ids: need vocab >= %lld (got "
                 "%lld)",
                 (long long)body, (long long)(body + SYNTH_FIRST_ID), (long long)o->vocab);
    }
    if (o->task == SYNTH_TASK_MQAR) mqar_validate(o);
}

/* copy: BOS, body of distinct ids (a partial Fisher-Yates shuffle of the
 * id range), then body[s .. s+tail-1] with s in the first half of the body. */
static void copy_document(const SyntheticOptions *o, Rng *r, uint32_t *out) {
    int64_t n_ids = o->vocab - SYNTH_FIRST_ID, tail = o->query_tail, body = o->doc_tokens - 1 - tail;
    uint32_t *ids = xmalloc(sizeof(uint32_t) * (size_t)n_ids);
    for (int64_t j = 0; j < n_ids; j++) ids[j] = (uint32_t)(SYNTH_FIRST_ID + j);
    for (int64_t j = 0; j < body; j++) {
        int64_t pick = j + (int64_t)(rng_u64(r) % (uint64_t)(n_ids - j));
        uint32_t t = ids[j];
        ids[j] = ids[pick], ids[pick] = t;
    }
    out[0] = SYNTH_BOS;
    memcpy(out + 1, ids, sizeof(uint32_t) * (size_t)body);
    if (o->copy_offset > 0) {
        for (int64_t t = 1 + body; t < o->doc_tokens; t++) out[t] = out[t - o->copy_offset];
    } else {
        int64_t last_start = body - tail < body / 2 ? body - tail : body / 2; /* 0-based in the body */
        int64_t s = 1 + (int64_t)(rng_u64(r) % (uint64_t)(last_start > 0 ? last_start + 1 : 1));
        memcpy(out + 1 + body, out + s, sizeof(uint32_t) * (size_t)tail);
    }
    free(ids);
}

/* mqar: BOS, records with markers drawn without replacement from the marker
 * range, then whole records of the body repeated (the last one cut at the
 * document's end). */
static void mqar_document(const SyntheticOptions *o, Rng *r, uint32_t *out) {
    int64_t rec = 1 + o->values, records = mqar_records(o), n_markers = mqar_markers(o);
    int64_t n_values = o->vocab - SYNTH_FIRST_ID - n_markers;
    uint32_t *markers = xmalloc(sizeof(uint32_t) * (size_t)n_markers);
    for (int64_t j = 0; j < n_markers; j++) markers[j] = (uint32_t)(SYNTH_FIRST_ID + j);
    int64_t t = 0;
    out[t++] = SYNTH_BOS;
    for (int64_t j = 0; j < records; j++) {
        int64_t pick = j + (int64_t)(rng_u64(r) % (uint64_t)(n_markers - j));
        uint32_t m = markers[pick];
        markers[pick] = markers[j], markers[j] = m;
        out[t++] = m;
        for (int64_t v = 0; v < o->values; v++)
            out[t++] = (uint32_t)(SYNTH_FIRST_ID + n_markers + (int64_t)(rng_u64(r) % (uint64_t)n_values));
    }
    while (t < o->doc_tokens) {
        int64_t src = 1 + (int64_t)(rng_u64(r) % (uint64_t)records) * rec;
        for (int64_t j = 0; j < rec && t < o->doc_tokens; j++) out[t++] = out[src + j];
    }
    free(markers);
}

/* recall: keys take the lower half of the ids above the specials, values the upper. */
void synthetic_document(const SyntheticOptions *o, int64_t i, uint32_t *out) {
    Rng r;
    rng_seed(&r, hash_u64(o->seed) ^ hash_u64((uint64_t)i + 1));
    if (o->task == SYNTH_TASK_COPY) {
        copy_document(o, &r, out);
        return;
    }
    if (o->task == SYNTH_TASK_MQAR) {
        mqar_document(o, &r, out);
        return;
    }
    int64_t first = 3, nk = (o->vocab - first) / 2, nv = o->vocab - first - nk;
    uint32_t *val = xmalloc(sizeof(uint32_t) * (size_t)nk);
    for (int64_t k = 0; k < nk; k++) val[k] = (uint32_t)(first + nk + (int64_t)(rng_u64(&r) % (uint64_t)nv));
    int64_t n = o->doc_tokens, tail = o->query_tail, body_end = n - tail, t = 0;
    out[t++] = SYNTH_BOS;
    /* the body: (key value) pairs; remember where each key was bound */
    int64_t *seen = xmalloc(sizeof(int64_t) * (size_t)(n / 2 + 1)), n_seen = 0; /* one per body pair */
    while (t + 1 < body_end) {
        int64_t k = (int64_t)(rng_u64(&r) % (uint64_t)nk);
        out[t++] = (uint32_t)(first + k);
        out[t++] = val[k];
        seen[n_seen++] = k;
    }
    while (t < body_end) out[t++] = SYNTH_QUERY; /* odd body length: pad */
    /* the tail: marker, a key from the first half of the body, its value */
    while (t < n) {
        int64_t k = seen[(int64_t)(rng_u64(&r) % (uint64_t)(n_seen / 2 > 0 ? n_seen / 2 : 1))];
        uint32_t triple[3] = {SYNTH_QUERY, (uint32_t)(first + k), val[k]};
        for (int j = 0; j < 3 && t < n; j++) out[t++] = triple[j];
    }
    free(val);
    free(seen);
}

void synthetic_write(const SyntheticOptions *o) {
    synthetic_validate(o);
    char desc[256], sha[65], path[4200], tmp[4300];
    snprintf(desc, sizeof desc, "synthetic-%s vocab=%lld", synthetic_task_name(o->task), (long long)o->vocab);
    Sha256 *h = sha256_new();
    sha256_update(h, desc, strlen(desc));
    sha256_finish(h, sha);
    uint32_t *doc = xmalloc(sizeof(uint32_t) * (size_t)o->doc_tokens);
    json_t *splits = json_object();
    SplitShares shares = o->shares ? *o->shares : split_shares_default();
    for (int s = 0; s < SPLIT_COUNT; s++) {
        if (shares.percent[s] == 0) continue; /* not written at all */
        path_fmt(path, sizeof path, "%s/%s", o->out_dir, split_names[s]);
        make_dirs(path);
        path_fmt(tmp, sizeof tmp, "%s/%s/shard_000000.bin.tmp", o->out_dir, split_names[s]);
        ShardWriter w;
        shard_writer_open(&w, tmp, (uint32_t)o->vocab, SHARD_FLAG_BOS, sha);
        int64_t docs = 0;
        for (int64_t i = 0; i < o->docs; i++) {
            if (split_of_hash(hash_u64(o->seed * 1000003u + (uint64_t)i), &shares) != s) continue;
            synthetic_document(o, i, doc);
            shard_writer_add_doc(&w, doc, o->doc_tokens);
            docs++;
        }
        shard_writer_finish(&w);
        path_fmt(path, sizeof path, "%s/%s/shard_000000.bin", o->out_dir, split_names[s]);
        rename_check(tmp, path);
        path_fmt(path, sizeof path, "%s/shard_000000.bin", split_names[s]);
        json_object_set_new(splits, split_names[s],
                            json_pack("{s:I,s:I,s:[{s:s,s:I,s:I}]}", "documents", (json_int_t)docs, "tokens",
                                      (json_int_t)(docs * o->doc_tokens), "shards", "file", path, "documents",
                                      (json_int_t)docs, "tokens", (json_int_t)(docs * o->doc_tokens)));
    }
    json_t *m = json_pack(
        "{s:s,s:i,s:{s:s,s:s,s:I},s:{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I},s:o}", "format", MANIFEST_FORMAT, "version",
        MANIFEST_VERSION, "tokenizer", "path", desc, "sha256", sha, "vocab_size", (json_int_t)o->vocab, "synthetic",
        "task", synthetic_task_name(o->task), "vocab", (json_int_t)o->vocab, "doc_tokens", (json_int_t)o->doc_tokens,
        "query_tail", (json_int_t)o->query_tail, "copy_offset", (json_int_t)o->copy_offset, "values",
        (json_int_t)o->values, "markers", (json_int_t)(o->task == SYNTH_TASK_MQAR ? mqar_markers(o) : 0), "seed",
        (json_int_t)o->seed, "splits", splits);
    if (o->task == SYNTH_TASK_MQAR) {
        AnswerRule rule = {1, SYNTH_FIRST_ID, (uint32_t)(SYNTH_FIRST_ID + mqar_markers(o)), o->values};
        json_object_set_new(m, "answers", answer_rule_to_json(&rule));
    }
    path_fmt(tmp, sizeof tmp, "%s/manifest.json.tmp", o->out_dir);
    path_fmt(path, sizeof path, "%s/manifest.json", o->out_dir);
    FILE *mf = fopen_check(tmp, "w");
    if (json_dumpf(m, mf, JSON_INDENT(2)) != 0) die("cannot write '%s'", tmp);
    fclose_check(mf, tmp);
    rename_check(tmp, path); /* the manifest last: the directory is complete only now */
    json_decref(m);
    free(doc);
}
