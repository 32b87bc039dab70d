#include "arch.h"

#include <string.h>

#include "../common/util.h"

/* Hugging Face's names and llama.cpp's (its tensor_mapping.py): Llama's,
 * which Mistral and Qwen2 share, as their checkpoints and GGUF files show
 * (the biases only Qwen2's have). */
static const ArchTensorNames llama_tensors = {
    .embed = {"model.embed_tokens.weight", "token_embd.weight"},
    .final_norm = {"model.norm.weight", "output_norm.weight"},
    .lm_head = {"lm_head.weight", "output.weight"},
    .layer = {{"input_layernorm.weight", "attn_norm.weight"},
              {"self_attn.q_proj.weight", "attn_q.weight"},
              {"self_attn.k_proj.weight", "attn_k.weight"},
              {"self_attn.v_proj.weight", "attn_v.weight"},
              {"self_attn.o_proj.weight", "attn_output.weight"},
              {"post_attention_layernorm.weight", "ffn_norm.weight"},
              {"mlp.gate_proj.weight", "ffn_gate.weight"},
              {"mlp.up_proj.weight", "ffn_up.weight"},
              {"mlp.down_proj.weight", "ffn_down.weight"}},
    .qkv_bias = {{"self_attn.q_proj.bias", "attn_q.bias"},
                 {"self_attn.k_proj.bias", "attn_k.bias"},
                 {"self_attn.v_proj.bias", "attn_v.bias"}},
};

/* Defaults are transformers' (LlamaConfig, MistralConfig, Qwen2Config). */
static const ModelArch arches[ARCH_COUNT] = {
    [ARCH_LLAMA] = {.id = ARCH_LLAMA,
                    .name = "llama",
                    .hf_class = "LlamaForCausalLM",
                    .gguf_arch = "llama",
                    .tensors = &llama_tensors,
                    .gguf_rope_rows = 1,
                    .norm_eps_default = 1e-6,
                    .max_pos_default = 2048},
    [ARCH_MISTRAL] = {.id = ARCH_MISTRAL,
                      .name = "mistral",
                      .hf_class = "MistralForCausalLM",
                      .tensors = &llama_tensors,
                      .gguf_rope_rows = 1,
                      .norm_eps_default = 1e-6,
                      .max_pos_default = 4096 * 32,
                      .sliding_window = 1,
                      .sliding_window_default = 4096},
    [ARCH_QWEN2] = {.id = ARCH_QWEN2,
                    .name = "qwen2",
                    .hf_class = "Qwen2ForCausalLM",
                    .gguf_arch = "qwen2",
                    .tensors = &llama_tensors,
                    .qkv_bias = 1,
                    .norm_eps_default = 1e-6,
                    .max_pos_default = 32768,
                    .sliding_window_switch = "use_sliding_window"},
};

const ModelArch *arch_get(ArchId id) {
    KV_CHECK(id >= 0 && id < ARCH_COUNT, "model architecture id %d is out of range", (int)id);
    return &arches[id];
}

const ModelArch *arch_by_model_type(const char *s) {
    for (int i = 0; i < ARCH_COUNT; i++)
        if (strcmp(arches[i].name, s) == 0) return &arches[i];
    return NULL;
}

const ModelArch *arch_by_hf_class(const char *s) {
    for (int i = 0; i < ARCH_COUNT; i++)
        if (strcmp(arches[i].hf_class, s) == 0) return &arches[i];
    return NULL;
}

const ModelArch *arch_by_gguf(const char *s) {
    for (int i = 0; i < ARCH_COUNT; i++)
        if (arches[i].gguf_arch && strcmp(arches[i].gguf_arch, s) == 0) return &arches[i];
    return NULL;
}

const char *arch_names(void) { return "llama, mistral, qwen2"; }

static void check_sliding_window(const ModelArch *a, json_t *root, const char *origin) {
    if (a->sliding_window_switch) {
        /* transformers reads sliding_window only when the switch is on */
        json_t *on = json_object_get(root, a->sliding_window_switch);
        if (on && !json_is_null(on) && !json_is_boolean(on))
            die("%s: config field '%s' must be true or false", origin, a->sliding_window_switch);
        if (on && json_is_true(on))
            die("%s: config field '%s' is true: sliding-window attention is not implemented yet for %s (only false)",
                origin, a->sliding_window_switch, a->name);
        json_t *lt = json_object_get(root, "layer_types");
        if (lt && !json_is_null(lt)) {
            if (!json_is_array(lt)) die("%s: config field 'layer_types' must be a list of strings", origin);
            size_t i;
            json_t *v;
            json_array_foreach(lt, i, v) {
                if (!json_is_string(v) || strcmp(json_string_value(v), "full_attention") != 0)
                    die("%s: config field 'layer_types[%zu]' must be \"full_attention\" (other attention types "
                        "are not implemented)",
                        origin, i);
            }
        }
    }
    if (!a->sliding_window) return;
    json_t *v = json_object_get(root, "sliding_window");
    if (v && json_is_null(v)) return;
    if (!v)
        die("%s: config field 'sliding_window' is absent, which transformers' %s reads as %lld: sliding-window "
            "attention is not implemented yet (only \"sliding_window\": null)",
            origin, a->hf_class, (long long)a->sliding_window_default);
    if (!json_is_integer(v)) die("%s: config field 'sliding_window' must be an integer or null", origin);
    die("%s: config field 'sliding_window' is %lld: sliding-window attention is not implemented yet for %s (only "
        "null)",
        origin, (long long)json_integer_value(v), a->name);
}

const ModelArch *arch_from_hf_config(json_t *root, const char *origin) {
    const ModelArch *by_type = NULL, *by_class = NULL;
    json_t *mt = json_object_get(root, "model_type");
    if (mt && !json_is_null(mt)) {
        if (!json_is_string(mt)) die("%s: config field 'model_type' must be a string", origin);
        by_type = arch_by_model_type(json_string_value(mt));
        if (!by_type)
            die("%s: config field 'model_type' is '%s', an architecture kvcpt does not know (known: %s)", origin,
                json_string_value(mt), arch_names());
    }
    json_t *ar = json_object_get(root, "architectures");
    const char *cls = NULL;
    if (ar && !json_is_null(ar)) {
        if (!json_is_array(ar)) die("%s: config field 'architectures' must be a list of class names", origin);
        json_t *first = json_array_get(ar, 0);
        if (first && !json_is_string(first)) die("%s: config field 'architectures[0]' must be a string", origin);
        cls = first ? json_string_value(first) : NULL;
        by_class = cls ? arch_by_hf_class(cls) : NULL;
    }
    /* a class the table lacks beside a known model_type (LlamaModel, say)
     * does not change the family; alone it names one kvcpt does not know */
    if (!by_type && cls && !by_class)
        die("%s: config field 'architectures' names '%s', an architecture kvcpt does not know (known: %s)", origin, cls,
            arch_names());
    if (by_type && by_class && by_type != by_class)
        die("%s: config field 'architectures' names '%s' but 'model_type' is '%s' (%s's class is %s)", origin, cls,
            by_type->name, by_type->name, by_type->hf_class);
    const ModelArch *a = by_type ? by_type : by_class ? by_class : &arches[ARCH_LLAMA];
    if (a->refused)
        die("%s: architecture '%s' (%s) is recognised but not supported: %s", origin, a->name, a->hf_class, a->refused);
    check_sliding_window(a, root, origin);
    return a;
}
