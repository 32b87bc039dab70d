/* Synthetic long-range tasks: structure of recall, copy and mqar documents,
 * determinism in (seed, index), the limits the options must respect, and
 * which targets of an mqar sequence are answers. */
#include <stdlib.h>
#include <string.h>

#include "../../common/util.h"
#include "../../data/answers.h"
#include "../../data/synthetic.h"
#include "../testlib.h"

static SyntheticOptions copy_options(void) {
    return (SyntheticOptions){.out_dir = NULL,
                              .task = SYNTH_TASK_COPY,
                              .vocab = 300,
                              .doc_tokens = 257,
                              .query_tail = 64,
                              .docs = 100,
                              .seed = 5};
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
    SyntheticOptions o = {
        .task = SYNTH_TASK_RECALL, .vocab = 64, .doc_tokens = 101, .query_tail = 30, .docs = 10, .seed = 3};
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

static SyntheticOptions mqar_options(void) {
    /* body 1 + 16 * 8 .. : 16 records of marker + 7 values, then 3.x repeated records */
    return (SyntheticOptions){.task = SYNTH_TASK_MQAR,
                              .vocab = 200,
                              .doc_tokens = 1 + 128 + 30,
                              .query_tail = 30,
                              .values = 7,
                              .markers = 40,
                              .docs = 10,
                              .seed = 9};
}

static void mqar_structure(void) {
    SyntheticOptions o = mqar_options();
    enum { N = 159, REC = 8, RECORDS = 16 };
    uint32_t doc[N], again[N];
    int ok_markers = 1, ok_values = 1, ok_tail = 1, deterministic = 1, values_repeat = 0;
    for (int64_t i = 0; i < 10; i++) {
        synthetic_document(&o, i, doc);
        synthetic_document(&o, i, again);
        deterministic &= memcmp(doc, again, sizeof doc) == 0 && doc[0] == SYNTH_BOS;
        char seen[200] = {0}, value_seen[200] = {0};
        for (int64_t r = 0; r < RECORDS; r++) {
            uint32_t m = doc[1 + r * REC];
            ok_markers &= m >= 3 && m < 3 + 40 && !seen[m];
            seen[m < 200 ? m : 0] = 1;
            for (int64_t v = 1; v < REC; v++) {
                uint32_t x = doc[1 + r * REC + v];
                ok_values &= x >= 3 + 40 && x < 200;
                values_repeat |= value_seen[x < 200 ? x : 0]; /* drawn with replacement */
                value_seen[x < 200 ? x : 0] = 1;
            }
        }
        /* the tail: whole records of the body, the last one cut at the end */
        for (int64_t t = 1 + RECORDS * REC; t < N; t += REC) {
            int64_t src = -1;
            for (int64_t r = 0; r < RECORDS; r++)
                if (doc[1 + r * REC] == doc[t]) src = 1 + r * REC;
            int64_t len = N - t < REC ? N - t : REC;
            ok_tail &= src >= 0 && memcmp(doc + src, doc + t, sizeof(uint32_t) * (size_t)len) == 0;
        }
    }
    tl_result(deterministic, "mqar: a document depends only on (seed, index)", "");
    tl_result(ok_markers, "mqar: markers are distinct within a document and inside the marker range", "");
    tl_result(ok_values && values_repeat, "mqar: values lie above the markers and are drawn with replacement", "");
    tl_result(ok_tail, "mqar: the tail repeats whole records of the body", "");
}

/* Hand-built: markers [3, 6), 2 values per record. */
static void answer_classes(void) {
    AnswerRule r = {1, 3, 6, 2};
    const uint32_t tok[] = {1, 3, 10, 11, 4, 12, 13, 3, 10, 11, 5, 14, 4, 12, 13, 10, 3, 10};
    const uint8_t want[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 1, 2, 0, 0, 1};
    enum { N = sizeof tok / sizeof tok[0] };
    uint8_t cls[N];
    answer_classify(&r, tok, N, cls);
    char got[N + 1];
    for (int i = 0; i < N; i++) got[i] = (char)('0' + cls[i]);
    got[N] = 0;
    tl_result(memcmp(cls, want, N) == 0, "answers: first value after a repeated marker, the next ones, nothing else",
              "%s", got);
    int32_t targets[N - 1];
    answer_targets(&r, tok, N - 1, cls, targets);
    int ok = 1;
    for (int i = 0; i < N - 1; i++) ok &= targets[i] == (want[i + 1] ? (int32_t)tok[i + 1] : -1);
    tl_result(ok, "answers: targets keep the answers' ids and mark the rest -1", "");
    /* a sample that starts inside the list: its first marker is a first occurrence */
    answer_classify(&r, tok + 7, N - 7, cls);
    tl_result(cls[1] == 0 && cls[6] == 0 && cls[10] == 1,
              "answers: a marker first seen inside the sample is not a repeat", "");
}

static void mqar_body_not_records(void *arg) {
    (void)arg;
    SyntheticOptions o = mqar_options();
    o.query_tail = 31; /* body of 127 tokens: not whole records of 8 */
    synthetic_validate(&o);
}

static void mqar_too_few_markers(void *arg) {
    (void)arg;
    SyntheticOptions o = mqar_options();
    o.markers = 15;
    synthetic_validate(&o);
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
    mqar_structure();
    answer_classes();
    tl_expect_death("mqar: a body that is not whole records is refused", mqar_body_not_records, NULL,
                    "must be a positive multiple of the record length");
    tl_expect_death("mqar: fewer markers than records are refused", mqar_too_few_markers, NULL,
                    "must be at least the records per document (16)");
    tl_expect_death("copy: an offset reaching before the body is refused", copy_offset_too_large, NULL,
                    "must be in [0, body = 192]");
    tl_expect_death("copy: a body larger than the id range is refused", copy_body_too_large, NULL, "need vocab >= 195");
    tl_expect_death("an unknown task is refused", unknown_task, NULL, "'recall', 'copy' or 'mqar'");
    tl_result(strcmp(synthetic_task_name(synthetic_task_parse("copy")), "copy") == 0 &&
                  strcmp(synthetic_task_name(synthetic_task_parse("mqar")), "mqar") == 0,
              "task names round-trip", "");
    return tl_finish();
}
