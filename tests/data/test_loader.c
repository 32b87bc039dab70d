/* Shard reader + loader: synthetic shards (token = f(doc, position)) with a
 * hand-written manifest, so these checks need no tokenizer. Covers: document
 * reads across shards, fixed-length samples, determinism given (seed, epoch,
 * rank, world size), disjoint equal shares across ranks, resume from a saved
 * position, and rejection of truncated / lying shards and manifests. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/util.h"
#include "../../data/data_split.h"
#include "../../data/loader.h"
#include "../../data/shard.h"
#include "../testlib.h"

#define N_DOCS 103
#define SAMPLE 40
static const char SHA[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
static char root[256];

static int64_t doc_len(int64_t d) { return 1 + (d * 37) % 90; } /* 1..90 tokens; some shorter than SAMPLE */
static uint32_t token_at(int64_t d, int64_t i) { return (uint32_t)((d * 131 + i * 7) % 1000); }

/* 103 documents in shards of at most 1500 tokens, listed in manifest.json. */
static void write_fixture(void) {
    snprintf(root, sizeof root, "/tmp/kvcpt_test_loader_%d", (int)getpid());
    char path[512];
    snprintf(path, sizeof path, "%s/train", root);
    make_dirs(path);
    char shards_json[8192] = "";
    int n_shards = 0;
    int64_t total = 0;
    ShardWriter w;
    int open = 0;
    uint32_t buf[128];
    for (int64_t d = 0; d <= N_DOCS; d++) {
        if (open && (d == N_DOCS || w.h.n_tokens + (uint64_t)doc_len(d) > 1500)) {
            char entry[256];
            snprintf(entry, sizeof entry,
                     "%s{\"file\": \"train/shard_%06d.bin\", \"documents\": %llu, \"tokens\": %llu}",
                     n_shards ? ", " : "", n_shards, (unsigned long long)w.h.n_docs, (unsigned long long)w.h.n_tokens);
            strcat(shards_json, entry);
            shard_writer_finish(&w);
            n_shards++;
            open = 0;
        }
        if (d == N_DOCS) break;
        if (!open) {
            snprintf(path, sizeof path, "%s/train/shard_%06d.bin", root, n_shards);
            shard_writer_open(&w, path, 1000, SHARD_FLAG_BOS, SHA);
            open = 1;
        }
        for (int64_t i = 0; i < doc_len(d); i++) buf[i] = token_at(d, i);
        shard_writer_add_doc(&w, buf, doc_len(d));
        total += doc_len(d);
    }
    snprintf(path, sizeof path, "%s/manifest.json", root);
    FILE *f = fopen_check(path, "w");
    fprintf(f,
            "{\"format\": \"kvcpt-prepared\", \"version\": 1, \"tokenizer\": {\"sha256\": \"%s\"}, \"splits\": {"
            "\"train\": {\"documents\": %d, \"tokens\": %lld, \"shards\": [%s]}}}\n",
            SHA, N_DOCS, (long long)total, shards_json);
    fclose_check(f, path);
}

static void check_reads(const DataSplit *s) {
    int ok = data_split_num_docs(s) == N_DOCS;
    uint32_t buf[128];
    for (int64_t d = 0; ok && d < N_DOCS; d++) {
        ok &= data_split_doc_len(s, d) == doc_len(d);
        data_split_read(s, d, 0, doc_len(d), buf);
        for (int64_t i = 0; i < doc_len(d); i++) ok &= buf[i] == token_at(d, i);
    }
    tl_result(ok, "every document reads back whole across shard boundaries", "");
}

typedef struct {
    int64_t docs[N_DOCS];
    int64_t n;
} Taken;

static void take_epoch(const DataSplit *s, uint64_t seed, int rank, int world, Taken *t, int *samples_ok) {
    Loader *l = loader_open(s, SAMPLE, seed, rank, world);
    uint32_t buf[SAMPLE];
    t->n = loader_samples_per_epoch(l);
    for (int64_t k = 0; k < t->n; k++) {
        int64_t d = loader_next(l, buf);
        t->docs[k] = d;
        *samples_ok &= doc_len(d) >= SAMPLE;
        for (int i = 0; i < SAMPLE; i++) *samples_ok &= buf[i] == token_at(d, i);
    }
    loader_close(l);
}

static void check_sampler(const DataSplit *s) {
    int64_t eligible = 0;
    for (int64_t d = 0; d < N_DOCS; d++) eligible += doc_len(d) >= SAMPLE;
    int samples_ok = 1, disjoint = 1, equal_counts = 1;
    for (int world = 1; world <= 4; world++) {
        int seen[N_DOCS] = {0};
        for (int r = 0; r < world; r++) {
            Taken t;
            take_epoch(s, 7, r, world, &t, &samples_ok);
            equal_counts &= t.n == eligible / world;
            for (int64_t k = 0; k < t.n; k++) disjoint &= seen[t.docs[k]]++ == 0;
        }
    }
    tl_result(samples_ok, "samples are the first L+S+1 tokens of documents long enough for them", "");
    tl_result(disjoint, "ranks take disjoint documents within an epoch (world sizes 1-4)", "");
    tl_result(equal_counts, "every rank gets floor(eligible / world) samples per epoch", "eligible %lld",
              (long long)eligible);

    Taken a, b, c;
    take_epoch(s, 7, 1, 3, &a, &samples_ok);
    take_epoch(s, 7, 1, 3, &b, &samples_ok);
    take_epoch(s, 8, 1, 3, &c, &samples_ok);
    tl_result(memcmp(a.docs, b.docs, sizeof(int64_t) * (size_t)a.n) == 0,
              "same (seed, epoch, rank, world) gives the same order", "");
    tl_result(memcmp(a.docs, c.docs, sizeof(int64_t) * (size_t)a.n) != 0, "another seed gives another order", "");
}

static void check_epochs_and_resume(const DataSplit *s) {
    Loader *l = loader_open(s, SAMPLE, 11, 0, 2);
    int64_t per = loader_samples_per_epoch(l), total = 3 * per + 5;
    int64_t *docs = xmalloc(sizeof(int64_t) * (size_t)total);
    LoaderPosition *pos = xmalloc(sizeof(LoaderPosition) * (size_t)total);
    uint32_t buf[SAMPLE];
    for (int64_t k = 0; k < total; k++) {
        pos[k] = loader_position(l);
        docs[k] = loader_next(l, buf);
    }
    loader_close(l);
    tl_result(memcmp(docs, docs + per, sizeof(int64_t) * (size_t)per) != 0, "each epoch reshuffles", "");
    LoaderPosition end = loader_position(l = loader_open(s, SAMPLE, 11, 0, 2));
    loader_close(l);
    int ok = end.epoch == 0 && end.index == 0;
    int64_t cuts[] = {1, per - 1, per, 2 * per + 3};
    for (int c = 0; c < 4; c++) {
        l = loader_open(s, SAMPLE, 11, 0, 2);
        loader_seek(l, pos[cuts[c]]);
        for (int64_t k = cuts[c]; k < total; k++) ok &= loader_next(l, buf) == docs[k];
        loader_close(l);
    }
    tl_result(ok, "resuming from a saved (epoch, index) continues identically, across epoch ends", "");
    free(docs);
    free(pos);
}

/* Runs fn in a child; the child must exit non-zero with `expect` in stderr. */
static void expect_death(const char *name, void (*fn)(void), const char *expect) {
    char log[300];
    snprintf(log, sizeof log, "%s/death.log", root);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log, "w", stderr)) _exit(99);
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char *msg = read_text_file(log, NULL);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 99 && strstr(msg, expect);
    tl_result(ok, name, "exit status %d, stderr: %s", WIFEXITED(status) ? WEXITSTATUS(status) : -1, msg);
    free(msg);
}

static char shard0[300];
static void open_split(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/train", root);
    data_split_close(data_split_open(dir));
}
static void open_split_and_read(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/train", root);
    DataSplit *s = data_split_open(dir);
    uint32_t buf[128];
    data_split_read(s, 0, 0, data_split_doc_len(s, 0), buf);
}
static void open_shard0(void) {
    ShardFile s;
    shard_open(&s, shard0);
}

static void rewrite(const char *path, long off, const void *bytes, size_t n, long truncate_to) {
    FILE *f = fopen_check(path, "r+b");
    if (n) {
        fseek(f, off, SEEK_SET);
        fwrite_check(bytes, 1, n, f, path);
    }
    fclose_check(f, path);
    if (truncate_to >= 0 && truncate(path, truncate_to) != 0) die("truncate %s", path);
}

static void check_corruption(void) {
    snprintf(shard0, sizeof shard0, "%s/train/shard_000000.bin", root);
    int64_t size = file_size(shard0);
    char *orig = read_text_file(shard0, NULL);
    rewrite(shard0, 0, NULL, 0, size - 4);
    expect_death("truncated shard is refused (size vs header)", open_shard0, "truncated or lying header");
    rewrite(shard0, 0, orig, (size_t)size, -1);
    uint64_t lie = 999999;
    rewrite(shard0, 24, &lie, 8, -1);
    expect_death("header with a lying token count is refused", open_shard0, "shard_000000.bin");
    rewrite(shard0, 0, orig, (size_t)size, -1);
    rewrite(shard0, 0, "NOTASHRD", 8, -1);
    expect_death("wrong magic is refused", open_shard0, "magic");
    rewrite(shard0, 0, orig, (size_t)size, -1);
    ShardHeader h;
    memcpy(&h, orig, sizeof h);
    uint64_t backwards = 0;
    rewrite(shard0, (long)(h.index_offset + 16), &backwards, 8, -1); /* doc 2 ends before doc 1 does */
    expect_death("document index going backwards is refused", open_shard0, "document 1 ends");
    rewrite(shard0, 0, orig, (size_t)size, -1);
    uint32_t big = 5000;
    rewrite(shard0, 64, &big, 4, -1);
    expect_death("token id outside the vocabulary is refused on read", open_split_and_read, "outside the vocabulary");
    rewrite(shard0, 0, orig, (size_t)size, -1);
    char mpath[300];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", root);
    char *manifest = read_text_file(mpath, NULL);
    unlink(mpath);
    expect_death("a split without manifest.json (unfinished prepare) is refused", open_split, "manifest.json");
    FILE *f = fopen_check(mpath, "w");
    fputs(manifest, f);
    fclose_check(f, mpath);
    free(manifest);
    free(orig);
}

int main(void) {
    write_fixture();
    char dir[300];
    snprintf(dir, sizeof dir, "%s/train", root);
    DataSplit *s = data_split_open(dir);
    check_reads(s);
    check_sampler(s);
    check_epochs_and_resume(s);
    data_split_close(s);
    check_corruption();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) warnf("could not remove %s", root);
    return tl_finish();
}
