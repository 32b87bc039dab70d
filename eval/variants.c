#include "variants.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

static int registered(const char *name) {
    int count;
    const PolicyInfo *reg = policy_registry(&count);
    for (int i = 0; i < count; i++)
        if (strcmp(reg[i].name, name) == 0) return 1;
    return 0;
}

static int wanted(const char *list, const char *name) {
    if (strcmp(list, "all") == 0) return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

int eval_expand_variants(EvalVariant *v, int cap, const char *policies, const PolicyOptions *base, const int64_t *qc,
                         int nqc, const int64_t *fixed, int nfix) {
    char *copy = xstrdup(policies), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (strcmp(t, "all") != 0 && !registered(t)) {
            Policy dummy; /* policy_create dies listing the known policies */
            PolicyShape sh = {0};
            PolicyOptions o = policy_default_options(1);
            policy_create(&dummy, t, &sh, &o);
        }
    free(copy);
    int count, n = 0;
    const PolicyInfo *reg = policy_registry(&count);
    for (int i = 0; i < count; i++) {
        if (!wanted(policies, reg[i].name)) continue;
        PolicyOptions o = *base;
        int refresh = strcmp(reg[i].name, "refreshkv") == 0, variants = refresh ? nqc + nfix : 1;
        for (int j = 0; j < variants; j++) {
            KV_CHECK(n < cap, "too many policy variants (at most %d)", cap);
            if (refresh) {
                o.qc_stride = j < nqc ? qc[j] : 0;
                o.fixed_stride = j < nqc ? 0 : fixed[j - nqc];
            }
            v[n++] = (EvalVariant){reg[i].name, o};
        }
    }
    KV_CHECK(n > 0, "--policies '%s' selects nothing", policies);
    return n;
}
