#ifndef KVCPT_EVAL_ROPE_CONTEXT_H
#define KVCPT_EVAL_ROPE_CONTEXT_H
/* What one eval context asks of a model's RoPE: a window of L + S tokens
 * within the context the model was trained to, within the one its RoPE
 * scaling (the model's config.json, or --rope-scaling) extends that to, or
 * beyond both. Beyond is refused unless asked for, then labelled. */
#include <stddef.h>
#include <stdint.h>

#include "../model/config.h"

typedef struct {
    char scaling[64];         /* "none", "yarn factor 2" (model/config.h) */
    char scaling_json[512];   /* the rope_scaling block transformers would read ("null": none) */
    int from_option;          /* the scaling is --rope-scaling's, not config.json's */
    int64_t tokens;           /* L + S */
    int64_t trained, covered; /* rope_trained_context, rope_covered_context */
    int extended;             /* trained < tokens <= covered: the scaling carries the window */
    int beyond;               /* tokens > covered */
} RopeContext;

/* The model's config (a directory, config.json or preset) with its scaling
 * replaced by rope_spec (--rope-scaling; NULL: the config's). */
void eval_model_config(DecoderConfig *c, const char *model, const char *rope_spec);
void rope_context_describe(RopeContext *rc, const DecoderConfig *c, int64_t tokens, int from_option);
/* Dies when a window of L + S tokens (each context of ctx) is beyond what
 * the RoPE of c (model's config from eval_model_config; its scaling from
 * --rope-scaling when from_option) covers, unless allow_beyond
 * (--allow-beyond-context). */
void eval_check_rope_contexts(const DecoderConfig *c, const char *model, int from_option, const int64_t *ctx, int n_ctx,
                              int64_t S, int allow_beyond);
/* A short tag for a table header: "" (within the trained context),
 * "yarn x2" (extended), "BEYOND" (beyond). */
void rope_context_tag(char *out, size_t n, const RopeContext *rc);
/* One line saying what RoPE a context ran with, or nothing when it is within
 * the trained context under the config's own RoPE. */
void rope_context_print_note(const RopeContext *rc, int64_t L, const char *model);
#endif
