#ifndef KVCPT_TRAIN_CONFIG_H
#define KVCPT_TRAIN_CONFIG_H
/* `kvcpt train` configuration: one flat JSON object (files in launch/configs)
 * plus `--set key=value` overrides. One table lists every key with its type,
 * default and help, so unknown keys are errors and docs cannot drift. */
#include <stdint.h>

#include "../kernels/attention.h"

typedef struct {
    char model[4096];     /* preset, config.json, HF (or native) model directory, or GGUF file */
    char init[32];        /* "random" | "pretrained" */
    char data[4096];      /* prepared shard directory (with train/ and dev/) */
    char out[4096];       /* run directory */
    char model_shard_size[32]; /* largest safetensors file of out/model, e.g. "5GB" (common/byte_size.h) */
    char optim[32];       /* "adamw8bit" | "adamw" */
    char schedule[32];    /* "linear" | "cosine" | "constant" */
    char group_agg[16];   /* "max" | "mean" | "first" */
    char device[16];      /* "auto" | "cpu" | "cuda" */
    char loss_on[16];     /* "all" | "answers" (data/answers.h) */
    char precision[8];    /* CUDA engine: "fp32" | "bf16" | "bf16sr" (see train_config.c) */
    int64_t L, S, K, pool_kernel, mask;
    int64_t mask_evict, mask_restride; /* RefreshMask evict, restride (kernels/attention.h) */
    int64_t global_batch, micro_batch, steps, epochs, warmup_steps;
    int64_t eval_interval, eval_batches, ckpt_interval, keep_last, log_interval, seed;
    int64_t reshard_after_forward, optim_device, share_device;
    int64_t recompute;    /* a DecoderRecompute (model/recompute.h): the key takes none | attn | full, or 0 | 1 */
    int64_t attn_impl;    /* a DecoderAttnImpl (model/attn_impl.h): auto | mma | cuda-core | cudnn */
    double lr, min_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    double comm_timeout; /* seconds; 0: wait forever */
} TrainConfig;

void train_config_defaults(TrainConfig *c);
/* Applies a JSON object's keys (dies naming an unknown key or a wrong type). */
void train_config_apply_json(TrainConfig *c, const char *json_text, const char *origin);
/* The same from a JSON file (train --config, plan --config). */
void train_config_apply_file(TrainConfig *c, const char *path);
/* Applies one "key=value" override. */
void train_config_apply_set(TrainConfig *c, const char *kv);
/* The training mask the config asks for (refresh_mask_off() when 'mask'
 * is 0; its refresh positions are 'S'): what the trainer's model and the
 * CUDA memory plans are given. */
RefreshMask train_config_mask(const TrainConfig *c);
/* Cross-field checks (batch divisibility, K <= L, ...) naming the fields. */
void train_config_validate(const TrainConfig *c, int world_size);
/* The effective configuration as JSON (heap string) for the run directory. */
char *train_config_to_json(const TrainConfig *c);
/* Help text listing every key with its default. */
void train_config_print_keys(void);
#endif
