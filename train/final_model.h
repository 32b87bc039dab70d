#ifndef KVCPT_FINAL_MODEL_H
#define KVCPT_FINAL_MODEL_H
/* The run's final model, out/model, as a Hugging Face directory that
 * transformers (AutoTokenizer, AutoModelForCausalLM), vLLM and kvcpt itself
 * open as it is: model.safetensors in fp32 (shards and
 * model.safetensors.index.json above 'model_shard_size'),
 * generation_config.json, the tokenizer the data was prepared with, and
 * config.json, written last: a directory holding it is complete. */
#include "../model/config.h"
#include "../model/params.h"
#include "train_config.h"

typedef struct FinalModel FinalModel;

/* At setup, before the first step: decides and reads into memory everything
 * besides the weights (the config text, the generation settings, the
 * tokenizer files), so that the end of a run neither fails on a file that
 * moved nor changes its mind, and prints where the tokenizer comes from or
 * why there is none. c->model and c->data say where they come from. */
FinalModel *final_model_prepare(const TrainConfig *c, const DecoderConfig *cfg);
/* Writes out/model from the trained parameters; one line says what. */
void final_model_write(const FinalModel *fm, const ParamLayout *pl, const float *params);
void final_model_free(FinalModel *fm);

#endif
