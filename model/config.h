#ifndef KVCPT_CONFIG_H
#define KVCPT_CONFIG_H
/* Model configuration with Hugging Face LlamaConfig field names, for every
 * family of model/arch.h (Llama-shaped ones).
 * Loaded from a config.json file, a directory holding one, or a preset name
 * (presets are embedded config.json texts parsed by the same code). */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../kernels/rope.h"
#include "arch.h"

#define KV_MAX_EOS 8

typedef struct {
    char name[64];               /* preset name or source path, for messages */
    ArchId arch;                 /* the family (model/arch.h); 0, llama, when none is named */
    int64_t vocab_size;
    int64_t hidden_size;         /* C */
    int64_t intermediate_size;   /* F */
    int64_t num_hidden_layers;
    int64_t num_attention_heads; /* Hq */
    int64_t num_key_value_heads; /* Hkv */
    int64_t head_dim;            /* D */
    double rms_norm_eps;
    double rope_theta;
    RopeScaling rope_scaling;    /* below: model/rope_scaling.c */
    int64_t max_position_embeddings;
    int tie_word_embeddings;
    double initializer_range;
    int64_t bos_token_id;
    int64_t eos_token_ids[KV_MAX_EOS];
    int n_eos;
} DecoderConfig;

/* spec: preset name (see config_preset_names), path to config.json, or a
 * directory containing config.json. Dies with the field name on bad input. */
void config_load(DecoderConfig *c, const char *spec);
/* Parses config.json text; origin names the input in error messages. */
void config_parse_json(DecoderConfig *c, const char *text, const char *origin);
/* Checks every shape constraint; dies naming the offending field. */
void config_validate(const DecoderConfig *c, const char *origin);
/* HF-compatible config.json text (heap string, caller frees). */
char *config_to_json(const DecoderConfig *c);
/* 1 when name is a built-in preset. */
int config_is_preset(const char *name);
/* Comma-separated list of built-in preset names. */
const char *config_preset_names(void);

/* RoPE scaling (model/rope_scaling.c), a part of the config: config.json's
 * "rope_scaling" (transformers 4, "rope_theta" beside it) or
 * "rope_parameters" (transformers 5, theta inside), rope_type default,
 * linear, dynamic, yarn or llama3, read with transformers' defaults; a type
 * or field kvcpt does not honour is refused, named. Also the context a
 * scaling lets the model cover, and the tables' parameters for a sequence
 * length. */
/* Reads c->rope_theta and c->rope_scaling from config.json's root object
 * (c->max_position_embeddings already read). */
void rope_scaling_parse(DecoderConfig *c, json_t *root, const char *origin);
/* Checks the scaling's values against the rest of c; dies naming the field. */
void rope_scaling_validate(const DecoderConfig *c, const char *origin);
/* config.json's "rope_scaling": null without scaling, else the block, so
 * that transformers computes the same RoPE from it (a new reference). */
json_t *rope_scaling_json(const DecoderConfig *c);
/* Replaces c's scaling with spec: TYPE:FACTOR (linear, dynamic or yarn; yarn
 * over original_max_position_embeddings = max_position_embeddings, as
 * transformers fills it in), "none" (or transformers' name, "default"), or
 * a JSON object read as config.json's rope_scaling. option names spec in
 * errors. */
void rope_scaling_override(DecoderConfig *c, const char *spec, const char *option);
/* "none", or "yarn factor 2". */
void rope_scaling_label(char *out, size_t n, const RopeScaling *s);
/* The context the model was trained to without its scaling: yarn's and
 * llama3's original_max_position_embeddings, else max_position_embeddings. */
int64_t rope_trained_context(const DecoderConfig *c);
/* The context its scaling extends that to: the trained context times the
 * factor (at least max_position_embeddings); without scaling, the trained one. */
int64_t rope_covered_context(const DecoderConfig *c);
/* The tables' parameters for sequences of seq_len tokens. Only dynamic
 * scaling's tables depend on seq_len (rope_tables_depend_on_length). */
RopeParams rope_params(const DecoderConfig *c, int64_t seq_len);
int rope_tables_depend_on_length(const DecoderConfig *c);
#endif
