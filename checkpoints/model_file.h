#ifndef KVCPT_MODEL_FILE_H
#define KVCPT_MODEL_FILE_H
/* Model weights in and out of the flat fp32 parameter buffer (model/params.h)
 * for the trainer and the evaluator. Loading accepts a native directory or a
 * Hugging Face one (auto-detected) and checks every tensor name and shape
 * against the layout before touching the buffer. */
#include <stdint.h>

#include "../model/config.h"
#include "../model/params.h"
#include "dtype.h"
#include "tensor_set.h"

/* Checks that s holds exactly the layout's tensors with the layout's shapes.
 * For tied embeddings an lm_head.weight in the file is tolerated (it is
 * ignored; *skip_lm_head is set when present). Returns 0 or -1 with err
 * naming the tensor, its file and offset. */
int model_match_layout(const TensorSet *s, const ParamLayout *pl, const DecoderConfig *cfg, int *skip_lm_head,
                       char *err, int errlen);

/* Fills params (pl->total floats) from dir, converting BF16/F16 to F32. */
void model_file_load_fp32(const char *dir, const DecoderConfig *cfg, const ParamLayout *pl, float *params);

/* Exports params as a Hugging Face directory: config.json plus safetensors
 * shards of at most shard_bytes (dtype KV_BF16 rounds to nearest even). */
void model_file_save_hf(const char *dir, const DecoderConfig *cfg, const ParamLayout *pl, const float *params,
                        KvDtype dtype, int64_t shard_bytes);
/* The weights alone (the caller writes config.json, last, as the mark of a
 * complete directory); returns the number of safetensors files. */
int model_file_save_hf_weights(const char *dir, const ParamLayout *pl, const float *params, KvDtype dtype,
                               int64_t shard_bytes);
/* Same into the native format (config.json + model.kvcpt). */
void model_file_save_native(const char *dir, const DecoderConfig *cfg, const ParamLayout *pl, const float *params,
                            KvDtype dtype);

/* config.json text with "torch_dtype" set to match dtype (heap string). */
char *config_json_with_dtype(const char *config_json, KvDtype dtype);

#endif
