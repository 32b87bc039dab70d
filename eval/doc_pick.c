#include "doc_pick.h"

#include <jansson.h>
#include <string.h>

#include "../common/checked.h"
#include "../common/json_file.h"
#include "../common/util.h"
#include "../data/splits.h"

const char *const doc_pick_names[2] = {"first", "interleave"};

int doc_sources_load(DocSources *s, const char *data_dir, const char *split, int64_t split_docs) {
    memset(s, 0, sizeof *s);
    char mpath[4200];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", data_dir);
    json_error_t err;
    json_t *m = json_load_regular(mpath, 0, &err);
    if (!m) die("'%s': %s (line %d)", mpath, err.text, err.line);
    const json_t *inputs = json_object_get(m, "inputs");
    size_t n = json_is_array(inputs) ? json_array_size(inputs) : 0;
    /* every input must record its counts, or the mapping is unknown */
    for (size_t i = 0; i < n; i++)
        if (!json_object_get(json_array_get(inputs, i), "kept_per_split")) n = 0;
    if (n == 0) {
        json_decref(m);
        return 0;
    }
    KV_CHECK(n <= (size_t)INT32_MAX, "'%s': %zu inputs", mpath, n);
    /* the split's parts, in the order data_split_open reads them: the split
     * itself, or for "all" every split the manifest has, train, dev, test */
    const char *parts[SPLIT_COUNT];
    int np = 0;
    if (strcmp(split, SPLIT_ALL) == 0) {
        for (int k = 0; k < SPLIT_COUNT; k++)
            if (json_object_get(json_object_get(m, "splits"), split_names[k])) parts[np++] = split_names[k];
    } else {
        parts[np++] = split;
    }
    s->n = (int)n, s->n_parts = np;
    s->path = xcalloc(n, sizeof(char *));
    s->first = xcalloc(n * (size_t)(np > 0 ? np : 1), sizeof(int64_t));
    s->count = xcalloc(n * (size_t)(np > 0 ? np : 1), sizeof(int64_t));
    int64_t at = 0;
    for (int k = 0; k < np; k++)
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(inputs, i), *p = json_object_get(e, "path");
            const json_t *c = json_object_get(json_object_get(e, "kept_per_split"), parts[k]);
            KV_CHECK(json_is_string(p) && json_is_integer(c) && json_integer_value(c) >= 0,
                     "'%s': inputs[%zu] needs a \"path\" and a count kept_per_split.%s >= 0", mpath, i, parts[k]);
            if (!s->path[i]) s->path[i] = xstrdup(json_string_value(p));
            size_t j = i * (size_t)np + (size_t)k;
            s->first[j] = at, s->count[j] = (int64_t)json_integer_value(c);
            KV_CHECK(i64_add(at, s->count[j], &at) == 0 && at <= split_docs,
                     "'%s': the inputs' kept_per_split.%s counts exceed the split's %lld documents (at inputs[%zu], "
                     "'%s')",
                     mpath, parts[k], (long long)split_docs, i, s->path[i]);
        }
    KV_CHECK(at == split_docs,
             "'%s': the inputs' kept_per_split.%s counts add up to %lld, the split holds %lld documents", mpath, split,
             (long long)at, (long long)split_docs);
    json_decref(m);
    return 1;
}

void doc_sources_free(DocSources *s) {
    for (int i = 0; i < s->n; i++) free(s->path[i]);
    free(s->path), free(s->first), free(s->count);
    memset(s, 0, sizeof *s);
}

int doc_source_of(const DocSources *s, int64_t d) {
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->n_parts; k++) {
            size_t j = (size_t)i * (size_t)s->n_parts + (size_t)k;
            if (d >= s->first[j] && d < s->first[j] + s->count[j]) return i;
        }
    return -1;
}

/* The next candidate of stream i (the split for "first"; input i, part by
 * part, for "interleave"), or -1 when it has none left. */
static int64_t next_candidate(const DocSources *s, int how, int64_t nd, int i, int *part, int64_t *next) {
    if (how == DOC_PICK_FIRST) return next[0] < nd ? next[0]++ : -1;
    for (; part[i] < s->n_parts; part[i]++) {
        size_t j = (size_t)i * (size_t)s->n_parts + (size_t)part[i];
        if (next[i] < s->first[j]) next[i] = s->first[j];
        if (next[i] < s->first[j] + s->count[j]) return next[i]++;
    }
    return -1;
}

static uint64_t ngram_hash(const uint32_t *t) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < DOC_COPY_NGRAM; i++) h = (h ^ t[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

double doc_copy_share(const uint32_t *tok, int64_t start, int64_t end) {
    const int64_t n = DOC_COPY_NGRAM;
    if (end <= start) return 0.0;
    /* open addressing over the start positions of the n-grams seen so far,
     * at most half full; a hash match is confirmed on the tokens */
    int64_t cap = 16;
    while (cap < 2 * end) cap *= 2;
    int64_t *slot = xmalloc(sizeof(int64_t) * (size_t)cap);
    for (int64_t i = 0; i < cap; i++) slot[i] = -1;
    int64_t copied = 0;
    for (int64_t t = n - 1; t < end; t++) {
        const uint32_t *g = tok + t - n + 1;
        int64_t h = (int64_t)(ngram_hash(g) & (uint64_t)(cap - 1)), found = 0;
        for (; slot[h] >= 0; h = (h + 1) & (cap - 1))
            if (memcmp(tok + slot[h], g, sizeof(uint32_t) * (size_t)n) == 0) {
                found = 1;
                break;
            }
        if (t >= start) copied += found;
        if (!found) slot[h] = t - n + 1; /* h is the free slot the probe ended on */
    }
    free(slot);
    return (double)copied / (double)(end - start);
}

void doc_pick(DocPick *out, const DataSplit *split, const DocSources *s, int how, int64_t L, int64_t S, int64_t want,
              double max_copy) {
    KV_CHECK(how == DOC_PICK_FIRST || s->n > 0, "eval --pick interleave: the manifest records no input's documents per "
                                                "split (kept_per_split); prepare the data again with this kvcpt");
    int64_t nd = data_split_num_docs(split), window = L + S;
    memset(out, 0, sizeof *out);
    out->doc = xmalloc(sizeof(int64_t) * (size_t)(want > 0 ? want : 1));
    out->copy_share = xmalloc(sizeof(double) * (size_t)(want > 0 ? want : 1));
    uint32_t *buf = xmalloc(sizeof(uint32_t) * (size_t)window);
    /* the candidates in pick order: the split's order, or round robin over the inputs */
    int streams = how == DOC_PICK_FIRST ? 1 : s->n, *part = xcalloc((size_t)streams, sizeof(int));
    int64_t *next = xcalloc((size_t)streams, sizeof(int64_t)), left = nd;
    for (int i = 0; out->n < want && left > 0; i = (i + 1) % streams) {
        int64_t d;
        while (out->n < want && (d = next_candidate(s, how, nd, i, part, next)) >= 0) {
            left--;
            if (data_split_doc_len(split, d) < window + 1) {
                out->skipped_short++;
                continue;
            }
            data_split_read(split, d, 0, window, buf);
            double c = doc_copy_share(buf, L, window);
            if (c > max_copy) {
                out->skipped_copy++;
                continue;
            }
            out->doc[out->n] = d, out->copy_share[out->n] = c, out->n++;
            if (how == DOC_PICK_INTERLEAVE) break; /* the next input's turn */
        }
    }
    free(next), free(part), free(buf);
}

void doc_pick_free(DocPick *p) {
    free(p->doc), free(p->copy_share);
    memset(p, 0, sizeof *p);
}
