#ifndef KVCPT_CONFIG_H
#define KVCPT_CONFIG_H
/* Llama model configuration with Hugging Face LlamaConfig field names.
 * Loaded from a config.json file, a directory holding one, or a preset name
 * (presets are embedded config.json texts parsed by the same code). */
#include <stdint.h>

#include "../kernels/rope.h"

#define KV_MAX_EOS 8

typedef struct {
    char name[64];               /* preset name or source path, for messages */
    int64_t vocab_size;
    int64_t hidden_size;         /* C */
    int64_t intermediate_size;   /* F */
    int64_t num_hidden_layers;
    int64_t num_attention_heads; /* Hq */
    int64_t num_key_value_heads; /* Hkv */
    int64_t head_dim;            /* D */
    double rms_norm_eps;
    double rope_theta;
    RopeScaling rope_scaling;    /* model/rope_scaling.h */
    int64_t max_position_embeddings;
    int tie_word_embeddings;
    double initializer_range;
    int64_t bos_token_id;
    int64_t eos_token_ids[KV_MAX_EOS];
    int n_eos;
} LlamaConfig;

/* spec: preset name (see config_preset_names), path to config.json, or a
 * directory containing config.json. Dies with the field name on bad input. */
void config_load(LlamaConfig *c, const char *spec);
/* Parses config.json text; origin names the input in error messages. */
void config_parse_json(LlamaConfig *c, const char *text, const char *origin);
/* Checks every shape constraint; dies naming the offending field. */
void config_validate(const LlamaConfig *c, const char *origin);
/* HF-compatible config.json text (heap string, caller frees). */
char *config_to_json(const LlamaConfig *c);
/* 1 when name is a built-in preset. */
int config_is_preset(const char *name);
/* Comma-separated list of built-in preset names. */
const char *config_preset_names(void);
int64_t config_num_params(const LlamaConfig *c);

#endif
