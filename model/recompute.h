#ifndef KVCPT_RECOMPUTE_H
#define KVCPT_RECOMPUTE_H
/* Activation checkpointing of the CUDA training engine: which of a layer's
 * activations the forward keeps for the backward, and which the backward
 * rebuilds by running part of the layer's forward again. Parsed and named
 * here only, so the config key, `kvcpt plan`, the engine and its memory
 * plan agree on one set of settings. The numbers are what the older 0/1
 * setting meant (0 keep all, 1 rerun the layer), so a config or a caller
 * written before "attn" existed keeps its meaning. */
typedef enum {
    /* every layer keeps every activation: no extra forward work */
    DECODER_RECOMPUTE_NONE = 0,
    /* the layers share one activation set; the backward reruns each layer's
     * forward (up to the down projection's input) from its input */
    DECODER_RECOMPUTE_FULL = 1,
    /* every layer keeps its attention half's products (q, k, v after RoPE,
     * the attention output and its lse) and the residual stream after
     * attention; the rest is one set the layers share, rebuilt before each
     * layer's backward: the two RMSNorms (elementwise, from the layer's
     * input and that stream), the gate|up product and swiglu. No attention
     * and no q|k|v or output projection runs twice. */
    DECODER_RECOMPUTE_ATTN = 2,
} DecoderRecompute;

/* The settings in the order of growing recompute (and shrinking memory):
 * what `kvcpt plan` tries, least recompute first. */
#define DECODER_RECOMPUTE_COUNT 3
extern const DecoderRecompute decoder_recompute_by_cost[DECODER_RECOMPUTE_COUNT];

/* "none" | "attn" | "full", and "0" | "1" as none and full; dies naming
 * what (a flag or config key) otherwise. */
DecoderRecompute decoder_recompute_parse(const char *s, const char *what);
/* "none", "attn" or "full". */
const char *decoder_recompute_name(DecoderRecompute r);
/* Dies unless r is one of the settings (a value from an int). */
void decoder_recompute_check(DecoderRecompute r, const char *what);
#endif
