#include "recompute.h"

#include <string.h>

#include "../common/util.h"

const DecoderRecompute decoder_recompute_by_cost[DECODER_RECOMPUTE_COUNT] = {
    DECODER_RECOMPUTE_NONE, DECODER_RECOMPUTE_ATTN, DECODER_RECOMPUTE_FULL};

DecoderRecompute decoder_recompute_parse(const char *s, const char *what) {
    if (strcmp(s, "none") == 0 || strcmp(s, "0") == 0) return DECODER_RECOMPUTE_NONE;
    if (strcmp(s, "attn") == 0) return DECODER_RECOMPUTE_ATTN;
    if (strcmp(s, "full") == 0 || strcmp(s, "1") == 0) return DECODER_RECOMPUTE_FULL;
    die("%s: recompute must be none, attn or full (0 and 1 are none and full; got '%s')", what, s);
}

void decoder_recompute_check(DecoderRecompute r, const char *what) {
    KV_CHECK(r == DECODER_RECOMPUTE_NONE || r == DECODER_RECOMPUTE_ATTN || r == DECODER_RECOMPUTE_FULL,
             "%s: unknown recompute setting %d", what, (int)r);
}

const char *decoder_recompute_name(DecoderRecompute r) {
    decoder_recompute_check(r, "decoder_recompute_name");
    return r == DECODER_RECOMPUTE_NONE ? "none" : r == DECODER_RECOMPUTE_ATTN ? "attn" : "full";
}
