#ifndef KVCPT_ARCH_H
#define KVCPT_ARCH_H
/* The model families kvcpt knows, one table entry each (as llama.cpp keeps
 * an architecture enum with a tensor-name table per family): how
 * Hugging Face's config.json ("model_type", "architectures") and GGUF's
 * "general.architecture" name the family, the class an export names, the
 * tensors' names in both formats, the config defaults that differ between
 * families, and, for a family kvcpt recognises but cannot run yet, why. */
#include <jansson.h>
#include <stdint.h>

typedef enum { ARCH_LLAMA = 0, ARCH_MISTRAL, ARCH_QWEN2, ARCH_COUNT } ArchId;

/* One tensor's name in Hugging Face's checkpoint and in llama.cpp's GGUF;
 * a layer's names follow "model.layers.N." and "blk.N.". */
typedef struct {
    const char *hf, *gguf;
} ArchTensorName;

/* In the order of model/params.h's layout. */
typedef struct {
    ArchTensorName embed, final_norm, lm_head;
    ArchTensorName layer[9]; /* attn norm, q, k, v, o, mlp norm, gate, up, down */
    ArchTensorName qkv_bias[3]; /* q, k, v biases: in the layout after v's weight when the family has them */
} ArchTensorNames;

typedef struct {
    ArchId id;
    const char *name;          /* the family: config.json's model_type */
    const char *hf_class;      /* config.json's architectures[0], written on export */
    const char *gguf_arch;     /* general.architecture, NULL when llama.cpp files it under another
                                * (its Mistral files say llama) */
    const ArchTensorNames *tensors;
    int qkv_bias;              /* the family's q, k and v projections carry biases (o's and the MLP's do not) */
    int gguf_rope_rows;        /* llama.cpp's converter interleaves q and k rows for ggml's RoPE (its llama
                                * files); 0 where the file keeps Hugging Face's order (qwen2: NEOX RoPE) */
    int tie_default;           /* tie_word_embeddings when config.json omits it */
    double norm_eps_default;   /* rms_norm_eps when omitted */
    int64_t max_pos_default;   /* max_position_embeddings when omitted */
    int sliding_window;        /* the config has a sliding_window field (only null is run) */
    const char *sliding_window_switch; /* a boolean field that turns sliding_window on (Qwen2's
                                        * use_sliding_window): only false is run, and sliding_window is
                                        * then unused */
    int64_t sliding_window_default; /* transformers' value when the field is absent */
    const char *refused;       /* NULL when kvcpt runs the family, else what it lacks */
} ModelArch;

const ModelArch *arch_get(ArchId id);
/* By config.json's model_type / architectures[] class / GGUF's
 * general.architecture; NULL when the table has no such entry. */
const ModelArch *arch_by_model_type(const char *model_type);
const ModelArch *arch_by_hf_class(const char *hf_class);
const ModelArch *arch_by_gguf(const char *gguf_arch);
/* "llama, mistral, qwen2": for messages. */
const char *arch_names(void);
/* The family of a config.json root object: model_type, else the class
 * architectures[0] names, else llama (kvcpt's presets and older exports
 * name neither). Dies naming the field for an unknown family, one the
 * two fields disagree on, a refused family (with why), and a field the
 * family has that kvcpt does not implement (a non-null sliding_window). */
const ModelArch *arch_from_hf_config(json_t *root, const char *origin);
#endif
