#include "params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

static void add(ParamLayout *pl, int *cap, ParamKind kind, int layer, const char *name, int ndim, int64_t d0,
                int64_t d1) {
    if (pl->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        pl->t = xrealloc(pl->t, sizeof(ParamTensor) * (size_t)*cap);
    }
    ParamTensor *t = &pl->t[pl->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 1;
    t->numel = d0 * (ndim == 2 ? d1 : 1);
    t->offset = pl->total;
    pl->total += t->numel;
}

void param_layout_build(ParamLayout *pl, const DecoderConfig *c) {
    memset(pl, 0, sizeof *pl);
    int cap = 0;
    int64_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    int64_t q = c->num_attention_heads * D, kv = c->num_key_value_heads * D;
    const ModelArch *a = arch_get(c->arch);
    const ArchTensorNames *tn = a->tensors;
    add(pl, &cap, PT_EMBED, -1, tn->embed.hf, 2, c->vocab_size, C);
    pl->layer_begin0 = pl->total;
    /* a layer's tensors in the names table's order, with their shapes */
    const struct {
        ParamKind kind;
        int ndim;
        int64_t d0, d1;
    } blk[9] = {{PT_ATTN_NORM, 1, C, 1}, {PT_WQ, 2, q, C},    {PT_WK, 2, kv, C}, {PT_WV, 2, kv, C},  {PT_WO, 2, C, q},
                {PT_MLP_NORM, 1, C, 1},  {PT_WGATE, 2, F, C}, {PT_WUP, 2, F, C}, {PT_WDOWN, 2, C, F}};
    const struct {
        ParamKind kind;
        int64_t d0;
    } bias[3] = {{PT_BQ, q}, {PT_BK, kv}, {PT_BV, kv}};
    for (int l = 0; l < (int)c->num_hidden_layers; l++) {
        char n[96];
        for (int i = 0; i < 9; i++) {
            snprintf(n, sizeof n, "model.layers.%d.%s", l, tn->layer[i].hf);
            add(pl, &cap, blk[i].kind, l, n, blk[i].ndim, blk[i].d0, blk[i].d1);
            if (blk[i].kind != PT_WV || !a->qkv_bias) continue;
            for (int j = 0; j < 3; j++) {
                snprintf(n, sizeof n, "model.layers.%d.%s", l, tn->qkv_bias[j].hf);
                add(pl, &cap, bias[j].kind, l, n, 1, bias[j].d0, 1);
            }
        }
        if (l == 0) pl->layer_numel = pl->total - pl->layer_begin0;
    }
    add(pl, &cap, PT_FINAL_NORM, -1, tn->final_norm.hf, 1, C, 1);
    if (!c->tie_word_embeddings) add(pl, &cap, PT_LM_HEAD, -1, tn->lm_head.hf, 2, c->vocab_size, C);
}

void param_layout_free(ParamLayout *pl) {
    free(pl->t);
    memset(pl, 0, sizeof *pl);
}

int param_layout_find(const ParamLayout *pl, const char *name) {
    for (int i = 0; i < pl->n; i++)
        if (strcmp(pl->t[i].name, name) == 0) return i;
    return -1;
}

int param_layout_tensor_at(const ParamLayout *pl, int64_t x) {
    int lo = 0, hi = pl->n - 1; /* tensors are contiguous, in offset order */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (pl->t[mid].offset <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
