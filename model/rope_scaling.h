#ifndef KVCPT_ROPE_SCALING_H
#define KVCPT_ROPE_SCALING_H
/* A model's RoPE scaling as config.json writes it: transformers 4's
 * "rope_scaling" (with "rope_theta" beside it) or transformers 5's
 * "rope_parameters" (theta inside), rope_type default, linear, dynamic, yarn
 * or llama3, read with transformers' defaults; a type or field kvcpt does
 * not honour is refused, named. Also the context a scaling lets the model
 * cover, and the tables' parameters for a sequence length. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../kernels/rope.h"
#include "config.h"

/* Reads c->rope_theta and c->rope_scaling from config.json's root object
 * (c->max_position_embeddings already read). */
void rope_scaling_parse(LlamaConfig *c, json_t *root, const char *origin);
/* Checks the scaling's values against the rest of c; dies naming the field. */
void rope_scaling_validate(const LlamaConfig *c, const char *origin);
/* config.json's "rope_scaling": null without scaling, else the block, so
 * that transformers computes the same RoPE from it (a new reference). */
json_t *rope_scaling_json(const LlamaConfig *c);
/* Replaces c's scaling with spec: TYPE:FACTOR (linear, dynamic or yarn; yarn
 * over original_max_position_embeddings = max_position_embeddings, as
 * transformers fills it in), "none" (or transformers' name, "default"), or
 * a JSON object read as config.json's rope_scaling. option names spec in
 * errors. */
void rope_scaling_override(LlamaConfig *c, const char *spec, const char *option);
/* "none", or "yarn factor 2". */
void rope_scaling_label(char *out, size_t n, const RopeScaling *s);
/* The context the model was trained to without its scaling: yarn's and
 * llama3's original_max_position_embeddings, else max_position_embeddings. */
int64_t rope_trained_context(const LlamaConfig *c);
/* The context its scaling extends that to: the trained context times the
 * factor (at least max_position_embeddings); without scaling, the trained one. */
int64_t rope_covered_context(const LlamaConfig *c);
/* The tables' parameters for sequences of seq_len tokens. Only dynamic
 * scaling's tables depend on seq_len (rope_tables_depend_on_length). */
RopeParams rope_params(const LlamaConfig *c, int64_t seq_len);
int rope_tables_depend_on_length(const LlamaConfig *c);
#endif
