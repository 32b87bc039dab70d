/* The shard plan (parallel/shard_plan.h): for the 8B shape and the tiny one at
 * 1..8 ranks, pieces partition every unit, every cut lies on a 256-element
 * block boundary of its tensor, pieces are near-even, and the segments and
 * norm blocks of all ranks add up to the whole layout's. */
#include <stdlib.h>

#include "../../parallel/shard_plan.h"
#include "../../model/config.h"
#include "../testlib.h"

/* Gradient-norm blocks of rank r: the sum of its pieces' blocks. */
static int64_t shard_norm_blocks(const ShardPlan *p, int r) {
    int64_t blocks = 0;
    for (int u = 0; u < p->n_units; u++) blocks += shard_piece_blocks(p, u, r);
    return blocks;
}

static int check_plan(const ParamLayout *pl, int W, char *why, size_t n) {
    int64_t blocks_all = 0, blocks = 0, numel = 0;
    for (int i = 0; i < pl->n; i++) blocks_all += (pl->t[i].numel + SHARD_ALIGN - 1) / SHARD_ALIGN;
    for (int r = 0; r < W; r++) {
        ShardPlan p;
        shard_plan_build(&p, pl, W, r);
        for (int u = 0; u < p.n_units; u++) {
            if (shard_cut(&p, u, 0) != p.unit_begin[u] || shard_cut(&p, u, W) != p.unit_begin[u + 1])
                return snprintf(why, n, "W=%d unit %d: pieces do not span the unit", W, u), 0;
            int64_t unit = p.unit_begin[u + 1] - p.unit_begin[u];
            for (int k = 0; k < W; k++) {
                int64_t c = shard_cut(&p, u, k);
                int t = 0;
                while (t + 1 < pl->n && pl->t[t + 1].offset <= c) t++;
                if (shard_piece_numel(&p, u, k) < 0 || (c < p.unit_begin[u + 1] && (c - pl->t[t].offset) % SHARD_ALIGN))
                    return snprintf(why, n, "W=%d unit %d cut %d at %lld is not block aligned", W, u, k, (long long)c),
                           0;
                /* near-even: a piece is at most one block (per tensor boundary crossed) off */
                if (unit >= (int64_t)W * 4 * SHARD_ALIGN &&
                    llabs(shard_piece_numel(&p, u, k) - unit / W) > 2 * SHARD_ALIGN)
                    return snprintf(why, n, "W=%d unit %d piece %d has %lld of %lld", W, u, k,
                                    (long long)shard_piece_numel(&p, u, k), (long long)unit),
                           0;
            }
        }
        ShardSegment *s;
        int ns = shard_segments(&p, r, &s);
        int64_t local = 0;
        for (int i = 0; i < ns; i++) {
            if (s[i].local != local) return snprintf(why, n, "W=%d rank %d segment %d not contiguous", W, r, i), 0;
            local += s[i].numel;
        }
        free(s);
        if (local != p.local_numel)
            return snprintf(why, n, "W=%d rank %d: segments hold %lld, plan %lld", W, r, (long long)local,
                            (long long)p.local_numel),
                   0;
        numel += p.local_numel;
        blocks += shard_norm_blocks(&p, r);
        shard_plan_free(&p);
    }
    if (numel != pl->total)
        return snprintf(why, n, "W=%d: ranks own %lld of %lld", W, (long long)numel, (long long)pl->total), 0;
    if (blocks != blocks_all)
        return snprintf(why, n, "W=%d: %lld norm blocks, tensors have %lld", W, (long long)blocks,
                        (long long)blocks_all),
               0;
    return 1;
}

int main(void) {
    const char *presets[] = {"llama3.1-8b", "tiny"};
    for (int i = 0; i < 2; i++) {
        DecoderConfig c;
        config_load(&c, presets[i]);
        ParamLayout pl;
        param_layout_build(&pl, &c);
        for (int W = 1; W <= 8; W++) {
            char why[256] = "";
            char name[96];
            snprintf(name, sizeof name, "shard plan %s, %d ranks: partition, 256-aligned cuts, even pieces", presets[i],
                     W);
            tl_result(check_plan(&pl, W, why, sizeof why), name, "%s", why);
        }
        param_layout_free(&pl);
    }
    return tl_finish();
}
