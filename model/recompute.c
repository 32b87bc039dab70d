#include "recompute.h"

#include <string.h>

#include "../common/util.h"

const LlamaRecompute llama_recompute_by_cost[LLAMA_RECOMPUTE_COUNT] = {LLAMA_RECOMPUTE_NONE, LLAMA_RECOMPUTE_ATTN,
                                                                       LLAMA_RECOMPUTE_FULL};

LlamaRecompute llama_recompute_parse(const char *s, const char *what) {
    if (strcmp(s, "none") == 0 || strcmp(s, "0") == 0) return LLAMA_RECOMPUTE_NONE;
    if (strcmp(s, "attn") == 0) return LLAMA_RECOMPUTE_ATTN;
    if (strcmp(s, "full") == 0 || strcmp(s, "1") == 0) return LLAMA_RECOMPUTE_FULL;
    die("%s: recompute must be none, attn or full (0 and 1 are none and full; got '%s')", what, s);
}

void llama_recompute_check(LlamaRecompute r, const char *what) {
    KV_CHECK(r == LLAMA_RECOMPUTE_NONE || r == LLAMA_RECOMPUTE_ATTN || r == LLAMA_RECOMPUTE_FULL,
             "%s: unknown recompute setting %d", what, (int)r);
}

const char *llama_recompute_name(LlamaRecompute r) {
    llama_recompute_check(r, "llama_recompute_name");
    return r == LLAMA_RECOMPUTE_NONE ? "none" : r == LLAMA_RECOMPUTE_ATTN ? "attn" : "full";
}
