#include "answers.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

AnswerRule answer_rule_from_json(const json_t *answers, const char *mpath) {
    AnswerRule r = {0};
    if (!answers) return r;
    const json_t *lo = json_object_get(answers, "marker_lo"), *hi = json_object_get(answers, "marker_hi"),
                 *v = json_object_get(answers, "values");
    if (!json_is_integer(lo) || !json_is_integer(hi) || !json_is_integer(v))
        die("'%s': \"answers\" needs integer marker_lo, marker_hi and values", mpath);
    json_int_t a = json_integer_value(lo), b = json_integer_value(hi), n = json_integer_value(v);
    if (a < 1 || b <= a || b > (json_int_t)UINT32_MAX || n < 1 || n > (1 << 20))
        die("'%s': \"answers\" needs 1 <= marker_lo < marker_hi <= 2^32-1 and 1 <= values <= 2^20 (got %lld, %lld, "
            "%lld)",
            mpath, (long long)a, (long long)b, (long long)n);
    r.present = 1, r.marker_lo = (uint32_t)a, r.marker_hi = (uint32_t)b, r.values = (int64_t)n;
    return r;
}

json_t *answer_rule_to_json(const AnswerRule *r) {
    return json_pack("{s:I,s:I,s:I}", "marker_lo", (json_int_t)r->marker_lo, "marker_hi", (json_int_t)r->marker_hi,
                     "values", (json_int_t)r->values);
}

void answer_classify(const AnswerRule *r, const uint32_t *tok, int64_t n, uint8_t *cls) {
    KV_CHECK(r->present, "internal error: answer_classify without an answer rule");
    uint32_t span = r->marker_hi - r->marker_lo;
    uint8_t *seen = xcalloc(span, 1);
    int64_t last_marker = -1; /* position of the most recent marker */
    int repeated = 0;         /* that marker had been seen before it */
    for (int64_t t = 0; t < n; t++) {
        uint32_t id = tok[t];
        cls[t] = ANSWER_NONE;
        if (id >= r->marker_lo && id < r->marker_hi) {
            repeated = seen[id - r->marker_lo];
            seen[id - r->marker_lo] = 1;
            last_marker = t;
        } else if (last_marker >= 0 && repeated && t - last_marker <= r->values) {
            cls[t] = t - last_marker == 1 ? ANSWER_FIRST : ANSWER_REST;
        }
    }
    free(seen);
}

void answer_targets(const AnswerRule *r, const uint32_t *sample, int64_t T, uint8_t *cls, int32_t *targets) {
    answer_classify(r, sample, T + 1, cls);
    for (int64_t i = 0; i < T; i++) targets[i] = cls[i + 1] == ANSWER_NONE ? -1 : (int32_t)sample[i + 1];
}

const char *answer_class_name(AnswerClass c) {
    return c == ANSWER_FIRST ? "first" : c == ANSWER_REST ? "rest" : "none";
}
