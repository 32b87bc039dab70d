/* Synthetic long-range tasks: structure of recall and copy documents,
 * determinism in (seed, index), and the limits the options must respect. */
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../data/synthetic.h"
#include "testlib.h"

static SyntheticOptions copy_options(void) {
    return (SyntheticOptions){.out_dir = NULL, .task = SYNTH_TASK_COPY, .vocab = 300, .doc_tokens = 257,
                              .query_tail = 64, .docs = 100, .seed = 5};
}

static void copy_structure(void) {
    SyntheticOptions o = copy_options();
    int64_t n = o.doc_tokens, tail = o.query_tail, body = n - 1 - tail;
    uint32_t *doc = xmalloc(sizeof(uint32_t) * (size_t)n), *again = xmalloc(sizeof(uint32_t) * (size_t)n);
    int distinct = 1, in_range = 1, copied = 1, far = 1, first_half = 1, deterministic = 1, varies = 0;
    int64_t first_src = -1;
    for (int64_t i = 0; i < 50; i++) {
        synthetic_document(&o, i, doc);
        synthetic_document(&o, i, again);
        deterministic &= memcmp(doc, again, sizeof(uint32_t) * (size_t)n) == 0 && doc[0] == SYNTH_BOS;
        char *seen = calloc((size_t)o.vocab, 1);
        for (int64_t j = 1; j <= body; j++) {
            in_range &= doc[j] >= 3 && doc[j] < (uint32_t)o.vocab;
            if (doc[j] < (uint32_t)o.vocab) distinct &= !seen[doc[j]], seen[doc[j]] = 1;
        }
        free(seen);
        int64_t src = -1; /* where the tail's span starts in the body */
        for (int64_t j = 1; j <= body; j++)
            if (doc[j] == doc[body + 1]) src = j;
        copied &= src >= 1 && src + tail <= body + 1 &&
                  memcmp(doc + src, doc + body + 1, sizeof(uint32_t) * (size_t)tail) == 0;
        far &= body + 1 - src >= tail;        /* every tail token is at least `tail` after its source */
        first_half &= src - 1 <= body / 2;    /* the span starts in the first half of the body */
        if (i == 0) first_src = src;
        else varies |= src != first_src;
    }
    tl_result(deterministic, "copy: a document depends only on (seed, index)", "");
    tl_result(in_range && distinct, "copy: body ids are distinct and above the specials", "");
    tl_result(copied, "copy: the tail repeats a span of the body verbatim", "");
    tl_result(far && first_half, "copy: the span starts in the first half of the body, far from the tail", "");
    tl_result(varies, "copy: the span's start varies between documents", "");
    free(doc), free(again);
}

static void copy_fixed_offset(void) {
    SyntheticOptions o = copy_options();
    o.doc_tokens = 300, o.query_tail = 150, o.copy_offset = 100; /* body 149; the tail repeats itself too */
    uint32_t doc[300];
    int ok = 1;
    for (int64_t i = 0; i < 10; i++) {
        synthetic_document(&o, i, doc);
        for (int64_t t = 300 - 150; t < 300; t++) ok &= doc[t] == doc[t - 100];
        ok &= doc[300 - 151] != doc[300 - 151 - 100]; /* the body itself does not repeat */
    }
    tl_result(ok, "copy with a fixed offset: every tail token repeats the one `offset` back", "");
}

static void recall_structure(void) {
    SyntheticOptions o = {.task = SYNTH_TASK_RECALL, .vocab = 64, .doc_tokens = 101, .query_tail = 30, .docs = 10,
                          .seed = 3};
    uint32_t doc[101];
    synthetic_document(&o, 4, doc);
    int ok = doc[0] == SYNTH_BOS;
    for (int64_t t = 101 - 30; t < 101; t += 3) ok &= doc[t] == SYNTH_QUERY;
    /* each queried key's value equals the value after its binding in the body */
    for (int64_t t = 101 - 30; t + 2 < 101; t += 3)
        for (int64_t j = 1; j + 1 < 101 - 30; j++)
            if (doc[j] == doc[t + 1]) ok &= doc[j + 1] == doc[t + 2];
    tl_result(ok, "recall: query triples match the body's bindings", "");
}

static void copy_body_too_large(void *arg) {
    (void)arg;
    SyntheticOptions o = copy_options();
    o.vocab = 100; /* body of 192 tokens cannot be distinct in 97 ids */
    synthetic_validate(&o);
}

static void copy_offset_too_large(void *arg) {
    (void)arg;
    SyntheticOptions o = copy_options();
    o.copy_offset = 193; /* the body has 192 tokens */
    synthetic_validate(&o);
}

static void unknown_task(void *arg) {
    (void)arg;
    synthetic_task_parse("sort");
}

int main(void) {
    copy_structure();
    copy_fixed_offset();
    recall_structure();
    tl_expect_death("copy: an offset reaching before the body is refused", copy_offset_too_large, NULL,
                    "must be in [0, body = 192]");
    tl_expect_death("copy: a body larger than the id range is refused", copy_body_too_large, NULL, "need vocab >= 195");
    tl_expect_death("an unknown task is refused", unknown_task, NULL, "'recall' or 'copy'");
    tl_result(strcmp(synthetic_task_name(synthetic_task_parse("copy")), "copy") == 0, "task names round-trip", "");
    return tl_finish();
}
