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

/* cfg/pl/params: the trained model; c->model and c->data say where its
 * config text, generation settings and tokenizer come from. Prints one line
 * saying what was written, or why there is no tokenizer. */
void final_model_write(const TrainConfig *c, const LlamaConfig *cfg, const ParamLayout *pl, const float *params);

#endif
