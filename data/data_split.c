#include "data_split.h"

#include <jansson.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_file.h"
#include "../common/util.h"
#include "prepare.h"
#include "shard.h"
#include "splits.h"

struct DataSplit {
    ShardFile *shards;
    int n_shards;
    int64_t *first_doc; /* [n_shards + 1]: global index of each shard's first document */
    int64_t n_tokens;
    AnswerRule answers;
};

const AnswerRule *data_split_answers(const DataSplit *s) { return &s->answers; }

static void check_manifest_format(const char *mpath, json_t *m) {
    const json_t *fmt = json_object_get(m, "format"), *ver = json_object_get(m, "version");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), MANIFEST_FORMAT) != 0)
        die("'%s': not a kvcpt prepare manifest (format is not \"%s\")", mpath, MANIFEST_FORMAT);
    if (!json_is_integer(ver) || json_integer_value(ver) != MANIFEST_VERSION)
        die("'%s': manifest version is not %d", mpath, MANIFEST_VERSION);
}

/* The split's entry; a split the manifest does not have (prepare --split
 * none writes train alone) is refused naming the ones it has. */
static const json_t *manifest_split(const char *mpath, json_t *m, const char *name) {
    const json_t *splits = json_object_get(m, "splits"), *sp = json_object_get(splits, name);
    if (!sp) {
        char have[64] = "";
        for (int i = 0; i < SPLIT_COUNT; i++)
            if (json_object_get(splits, split_names[i]))
                snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", have[0] ? ", " : "", split_names[i]);
        die("'%s' has no split '%s' (it has: %s; '%s' names every split at once); prepare chooses the splits "
            "(--split)",
            mpath, name, have[0] ? have : "none", SPLIT_ALL);
    }
    if (!json_is_object(sp) || !json_is_array(json_object_get(sp, "shards")))
        die("'%s': no splits.%s.shards array", mpath, name);
    return sp;
}

static void open_shard_checked(DataSplit *s, int i, const char *root, const char *mpath, const json_t *entry,
                               const char *tok_sha) {
    const json_t *file = json_object_get(entry, "file"), *docs = json_object_get(entry, "documents"),
                 *toks = json_object_get(entry, "tokens");
    if (!json_is_string(file) || !json_is_integer(docs) || !json_is_integer(toks) ||
        strstr(json_string_value(file), ".."))
        die("'%s': shard entry %d needs \"file\" (inside the directory), \"documents\" and \"tokens\"", mpath, i);
    char path[8192];
    path_fmt(path, sizeof path, "%s/%s", root, json_string_value(file));
    ShardFile *sh = &s->shards[i];
    shard_open(sh, path);
    if ((json_int_t)sh->h.n_docs != json_integer_value(docs) || (json_int_t)sh->h.n_tokens != json_integer_value(toks))
        die("'%s': holds %llu documents / %llu tokens, the manifest '%s' says %lld / %lld", path,
            (unsigned long long)sh->h.n_docs, (unsigned long long)sh->h.n_tokens, mpath,
            (long long)json_integer_value(docs), (long long)json_integer_value(toks));
    char prefix[17];
    for (int k = 0; k < 8; k++) snprintf(prefix + 2 * k, 3, "%02x", sh->h.tokenizer_sha256[k]);
    if (strncmp(prefix, tok_sha, 16) != 0)
        die("'%s': written with tokenizer %s..., the manifest '%s' names %.16s...", path, prefix, mpath, tok_sha);
}

/* Appends the shards of split `name` to s, checking the split's totals. */
static void add_split(DataSplit *s, const char *root, const char *mpath, json_t *m, const char *name,
                      const char *tok_sha) {
    const json_t *sp = manifest_split(mpath, m, name);
    const json_t *list = json_object_get(sp, "shards");
    int first = s->n_shards, n = (int)json_array_size(list);
    int64_t docs0 = s->first_doc[first], toks0 = s->n_tokens;
    s->n_shards += n;
    s->shards = xrealloc(s->shards, sizeof(ShardFile) * (size_t)(s->n_shards + 1));
    s->first_doc = xrealloc(s->first_doc, sizeof(int64_t) * (size_t)(s->n_shards + 1));
    for (int i = 0; i < n; i++) {
        open_shard_checked(s, first + i, root, mpath, json_array_get(list, (size_t)i), tok_sha);
        s->first_doc[first + i + 1] = s->first_doc[first + i] + (int64_t)s->shards[first + i].h.n_docs;
        s->n_tokens += (int64_t)s->shards[first + i].h.n_tokens;
    }
    const json_t *docs = json_object_get(sp, "documents"), *toks = json_object_get(sp, "tokens");
    int64_t nd = s->first_doc[s->n_shards] - docs0, nt = s->n_tokens - toks0;
    if (!json_is_integer(docs) || json_integer_value(docs) != nd || !json_is_integer(toks) ||
        json_integer_value(toks) != nt)
        die("'%s': splits.%s totals disagree with its shards (%lld documents, %lld tokens)", mpath, name, (long long)nd,
            (long long)nt);
}

DataSplit *data_split_open(const char *split_dir) {
    char *dir_copy = xstrdup(split_dir), *base_copy = xstrdup(split_dir);
    size_t n = strlen(dir_copy);
    while (n > 1 && dir_copy[n - 1] == '/') dir_copy[--n] = '\0', base_copy[n] = '\0';
    const char *root = dirname(dir_copy), *name = basename(base_copy);
    char mpath[8192];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", root);
    json_error_t err;
    json_t *m = json_load_regular(mpath, 0, &err);
    /* jansson gives no line for a file it could not open (line 0 or -1) */
    if (!m && err.line <= 0)
        die("data directory '%s' has no readable manifest.json (%s: %s); give the directory `kvcpt prepare --out` "
            "wrote (a dataset is complete only once prepare has written its manifest)",
            root, mpath, err.text);
    if (!m)
        die("'%s': %s (line %d column %d); hint: a split directory is only complete once prepare wrote its manifest",
            mpath, err.text, err.line, err.column);
    check_manifest_format(mpath, m);
    const json_t *tok_sha = json_object_get(json_object_get(m, "tokenizer"), "sha256");
    if (!json_is_string(tok_sha) || strlen(json_string_value(tok_sha)) != 64)
        die("'%s': tokenizer.sha256 missing", mpath);
    DataSplit *s = xcalloc(1, sizeof *s);
    s->first_doc = xcalloc(1, sizeof(int64_t));
    if (strcmp(name, SPLIT_ALL) == 0) {
        /* every split the manifest has, in the order train, dev, test: a
         * corpus too small to hold documents back is scored whole */
        for (int i = 0; i < SPLIT_COUNT; i++)
            if (json_object_get(json_object_get(m, "splits"), split_names[i]))
                add_split(s, root, mpath, m, split_names[i], json_string_value(tok_sha));
    } else {
        add_split(s, root, mpath, m, name, json_string_value(tok_sha));
    }
    s->answers = answer_rule_from_json(json_object_get(m, "answers"), mpath);
    json_decref(m);
    free(dir_copy);
    free(base_copy);
    return s;
}

void data_split_close(DataSplit *s) {
    if (!s) return;
    for (int i = 0; i < s->n_shards; i++) shard_close(&s->shards[i]);
    free(s->shards);
    free(s->first_doc);
    free(s);
}

int64_t data_split_num_docs(const DataSplit *s) { return s->first_doc[s->n_shards]; }

/* shard holding global document doc (binary search over first_doc) */
static int shard_of(const DataSplit *s, int64_t doc, int64_t *local) {
    KV_CHECK(doc >= 0 && doc < data_split_num_docs(s), "document %lld is out of range [0, %lld)", (long long)doc,
             (long long)data_split_num_docs(s));
    int lo = 0, hi = s->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->first_doc[mid] <= doc) lo = mid;
        else hi = mid - 1;
    }
    *local = doc - s->first_doc[lo];
    return lo;
}

int64_t data_split_doc_len(const DataSplit *s, int64_t doc) {
    int64_t local;
    int i = shard_of(s, doc, &local);
    return shard_doc_len(&s->shards[i], local);
}

void data_split_read(const DataSplit *s, int64_t doc, int64_t start, int64_t n, uint32_t *out) {
    int64_t local;
    int i = shard_of(s, doc, &local);
    shard_read(&s->shards[i], local, start, n, out);
}
