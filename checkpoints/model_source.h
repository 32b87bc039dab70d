#ifndef KVCPT_MODEL_SOURCE_H
#define KVCPT_MODEL_SOURCE_H
/* What a model option names (eval's --model, train's model key, plan's
 * --model, prepare's --model): a preset, a config.json, a model directory
 * (Hugging Face safetensors, or an older native one) or a llama.cpp GGUF
 * file, which is read in place: dequantized into memory, nothing written.
 * A value that names none of them and reads like a Hugging Face hub id
 * (org/name) is answered with what to do instead: kvcpt never downloads.
 * `what` names the option as the user gave it, e.g. "eval: --model" or
 * "config: 'model'". */
#include <stddef.h>

#include "../model/config.h"
#include "../model/params.h"

/* 1 when spec is a GGUF file. */
int model_source_is_gguf(const char *spec);
/* The model's config; dies naming `what` on a value that names nothing. */
void model_source_config(DecoderConfig *c, const char *spec, const char *what);
/* The model's weights as fp32 into params (pl->total floats), pl built from
 * the config model_source_config gave for the same spec. */
void model_source_load_fp32(const char *spec, const DecoderConfig *cfg, const ParamLayout *pl, float *params);
/* The tokenizer.json of a model directory into path (n bytes); dies saying
 * why spec has none (a preset, a GGUF file, a directory without one). */
void model_source_tokenizer_path(const char *spec, const char *what, char *path, size_t n);

#endif
