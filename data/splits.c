#include "splits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rng.h"
#include "../common/util.h"

const char *const split_names[SPLIT_COUNT] = {"train", "dev", "test"};

SplitShares split_shares_default(void) { return (SplitShares){{80, 10, 10}}; }

SplitShares split_shares_parse(const char *spec, const char *opt) {
    if (strcmp(spec, "none") == 0) return (SplitShares){{100, 0, 0}};
    SplitShares s = {{0}};
    const char *p = spec;
    int sum = 0;
    for (int i = 0; i < SPLIT_COUNT; i++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        int sep_ok = i < SPLIT_COUNT - 1 ? *end == ',' : *end == '\0';
        KV_CHECK(!errno && end != p && *p != '+' && *p != ' ' && sep_ok && v >= 0 && v <= 100,
                 "%s '%s': expected three whole percents TRAIN,DEV,TEST summing to 100 (e.g. 80,10,10 or 90,10,0), or "
                 "none (every document in train)",
                 opt, spec);
        s.percent[i] = (int)v;
        sum += (int)v;
        p = end + 1;
    }
    KV_CHECK(sum == 100, "%s '%s': the percents sum to %d, not 100", opt, spec, sum);
    KV_CHECK(s.percent[SPLIT_TRAIN] > 0, "%s '%s': the train split needs a share above 0", opt, spec);
    return s;
}

void split_shares_rule(const SplitShares *s, const char *hash_text, char *out, size_t n) {
    SplitShares d = split_shares_default();
    if (memcmp(s, &d, sizeof d) == 0) { /* the words of earlier manifests */
        snprintf(out, n, "%s %% 10: 0-7 train, 8 dev, 9 test", hash_text);
        return;
    }
    int at = snprintf(out, n, "b = %s %% 100, key = (b %% 10) * 10 + b / 10:", hash_text), lo = 0;
    for (int i = 0; i < SPLIT_COUNT && at > 0 && (size_t)at < n; i++) {
        if (s->percent[i] == 0) continue;
        at += snprintf(out + at, n - (size_t)at, "%s %d-%d %s", lo ? "," : "", lo, lo + s->percent[i] - 1,
                       split_names[i]);
        lo += s->percent[i];
    }
}

int split_of_hash(uint64_t h, const SplitShares *s) {
    uint64_t b = h % 100;
    int key = (int)((b % 10) * 10 + b / 10);
    if (key < s->percent[SPLIT_TRAIN]) return SPLIT_TRAIN;
    return key < s->percent[SPLIT_TRAIN] + s->percent[SPLIT_DEV] ? SPLIT_DEV : SPLIT_TEST;
}

int split_of_text(const char *text, size_t len, uint64_t seed, const SplitShares *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)text[i]) * 0x100000001b3ull;
    return split_of_hash(hash_u64(h ^ seed), s);
}
