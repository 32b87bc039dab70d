#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/util.h"

/* Presets are HF config.json texts so that they exercise the same parser a
 * downloaded checkpoint does. The 8B/1B/3B ones copy the published shapes. */
typedef struct {
    const char *name;
    const char *json;
} Preset;

#define LLAMA3_ROPE                                                                                                    \
    "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"      \
    "\"original_max_position_embeddings\":8192}"

static const Preset presets[] = {
    {"llama3.1-8b",
     "{\"vocab_size\":128256,\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,"
     "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"head_dim\":128,\"rms_norm_eps\":1e-5,"
     "\"rope_theta\":500000.0," LLAMA3_ROPE ",\"max_position_embeddings\":131072,\"tie_word_embeddings\":false,"
     "\"bos_token_id\":128000,\"eos_token_id\":128001}"},
    {"llama3.2-3b",
     "{\"vocab_size\":128256,\"hidden_size\":3072,\"intermediate_size\":8192,\"num_hidden_layers\":28,"
     "\"num_attention_heads\":24,\"num_key_value_heads\":8,\"head_dim\":128,\"rms_norm_eps\":1e-5,"
     "\"rope_theta\":500000.0," LLAMA3_ROPE ",\"max_position_embeddings\":131072,\"tie_word_embeddings\":true,"
     "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009]}"},
    {"llama3.2-1b",
     "{\"vocab_size\":128256,\"hidden_size\":2048,\"intermediate_size\":8192,\"num_hidden_layers\":16,"
     "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"head_dim\":64,\"rms_norm_eps\":1e-5,"
     "\"rope_theta\":500000.0," LLAMA3_ROPE ",\"max_position_embeddings\":131072,\"tie_word_embeddings\":true,"
     "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009]}"},
    /* small: the CPU demo/bench model, Llama-3 shaped (GQA 4:1, llama3 RoPE) */
    {"small",
     "{\"vocab_size\":512,\"hidden_size\":256,\"intermediate_size\":768,\"num_hidden_layers\":4,"
     "\"num_attention_heads\":8,\"num_key_value_heads\":2,\"head_dim\":32,\"rms_norm_eps\":1e-5,"
     "\"rope_theta\":500000.0," LLAMA3_ROPE ",\"max_position_embeddings\":131072,\"tie_word_embeddings\":false,"
     "\"bos_token_id\":1,\"eos_token_id\":2}"},
    /* tiny: for tests; GQA 2:1. theta 1e4 with D = 8 gives wavelengths 6.3, 62.8,
     * 628, 6283 against llama3 band edges 16 and 64: all three rules are used */
    {"tiny", "{\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":2,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":8,\"rms_norm_eps\":1e-5,"
             "\"rope_theta\":10000.0,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
             "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64},\"max_position_embeddings\":4096,"
             "\"tie_word_embeddings\":false,\"bos_token_id\":1,\"eos_token_id\":2}"},
};

const char *config_preset_names(void) { return "llama3.1-8b, llama3.2-3b, llama3.2-1b, small, tiny"; }

static int64_t get_int(json_t *root, const char *key, int required, int64_t dflt, const char *origin) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) die("%s: config field '%s' is missing", origin, key);
        return dflt;
    }
    if (json_is_integer(v)) return (int64_t)json_integer_value(v);
    if (json_is_real(v) && json_real_value(v) == (double)(int64_t)json_real_value(v))
        return (int64_t)json_real_value(v);
    die("%s: config field '%s' must be an integer", origin, key);
}

static double get_num(json_t *root, const char *key, int required, double dflt, const char *origin) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) die("%s: config field '%s' is missing", origin, key);
        return dflt;
    }
    if (!json_is_number(v)) die("%s: config field '%s' must be a number", origin, key);
    return json_number_value(v);
}

static void parse_eos(DecoderConfig *c, json_t *root, const char *origin) {
    json_t *e = json_object_get(root, "eos_token_id");
    c->n_eos = 0;
    if (!e || json_is_null(e)) return;
    if (json_is_integer(e)) {
        c->eos_token_ids[c->n_eos++] = json_integer_value(e);
        return;
    }
    if (!json_is_array(e)) die("%s: config field 'eos_token_id' must be an integer or a list", origin);
    size_t n = json_array_size(e);
    if (n > KV_MAX_EOS)
        die("%s: config field 'eos_token_id' lists %zu ids; at most %d supported", origin, n, KV_MAX_EOS);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(e, i);
        if (!json_is_integer(x)) die("%s: config field 'eos_token_id[%zu]' must be an integer", origin, i);
        c->eos_token_ids[c->n_eos++] = json_integer_value(x);
    }
}

/* Hugging Face's LlamaConfig can ask for biases on all four attention
 * projections (o's too) or the MLP. kvcpt's Llama has no such tensors, so
 * a model that needs them would load without them and run silently wrong,
 * and a conversion would copy the flag beside weights lacking the biases:
 * refused here, for every command that reads a config (convert, eval,
 * train). A family whose q, k and v always carry biases (Qwen2) has no
 * such switch: its class ignores the fields. */
static void refuse_bias_flags(json_t *root, const ModelArch *a, const char *origin) {
    if (a->qkv_bias) return;
    static const char *const flags[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        json_t *v = json_object_get(root, flags[i]);
        if (!v || json_is_null(v) || json_is_false(v)) continue;
        if (!json_is_boolean(v)) die("%s: config field '%s' must be true or false", origin, flags[i]);
        die("%s: config field '%s' is true, but kvcpt's %s has no %s bias tensors: the model cannot be run or "
            "converted without them",
            origin, flags[i], a->name, i == 0 ? "attention" : "MLP");
    }
}

void config_parse_json(DecoderConfig *c, const char *text, const char *origin) {
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    if (!root) die("%s: invalid JSON at line %d column %d: %s", origin, err.line, err.column, err.text);
    if (!json_is_object(root)) die("%s: config.json must hold a JSON object", origin);
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", origin);
    const ModelArch *a = arch_from_hf_config(root, origin);
    c->arch = a->id;
    c->vocab_size = get_int(root, "vocab_size", 1, 0, origin);
    c->hidden_size = get_int(root, "hidden_size", 1, 0, origin);
    c->intermediate_size = get_int(root, "intermediate_size", 1, 0, origin);
    c->num_hidden_layers = get_int(root, "num_hidden_layers", 1, 0, origin);
    c->num_attention_heads = get_int(root, "num_attention_heads", 1, 0, origin);
    c->num_key_value_heads = get_int(root, "num_key_value_heads", 0, c->num_attention_heads, origin);
    int64_t dflt_hd = c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
    c->head_dim = get_int(root, "head_dim", 0, dflt_hd, origin);
    c->rms_norm_eps = get_num(root, "rms_norm_eps", 0, a->norm_eps_default, origin);
    c->max_position_embeddings = get_int(root, "max_position_embeddings", 0, a->max_pos_default, origin);
    c->initializer_range = get_num(root, "initializer_range", 0, 0.02, origin);
    c->bos_token_id = get_int(root, "bos_token_id", 0, -1, origin); /* -1: none given */
    KV_CHECK(!json_is_integer(json_object_get(root, "bos_token_id")) || c->bos_token_id >= 0,
             "%s: config field 'bos_token_id' must be >= 0 (got %lld)", origin, (long long)c->bos_token_id);
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie)) die("%s: config field 'tie_word_embeddings' must be true or false", origin);
    c->tie_word_embeddings = tie ? json_is_true(tie) : a->tie_default;
    json_t *hact = json_object_get(root, "hidden_act");
    if (hact && (!json_is_string(hact) || strcmp(json_string_value(hact), "silu") != 0))
        die("%s: config field 'hidden_act' must be \"silu\"", origin);
    refuse_bias_flags(root, a, origin);
    rope_scaling_parse(c, root, origin);
    parse_eos(c, root, origin);
    json_decref(root);
    config_validate(c, origin);
}

void config_validate(const DecoderConfig *c, const char *origin) {
    KV_CHECK(c->vocab_size > 0, "%s: config field 'vocab_size' must be > 0 (got %lld)", origin,
             (long long)c->vocab_size);
    KV_CHECK(c->vocab_size < ((int64_t)1 << 31), "%s: config field 'vocab_size' = %lld does not fit token ids in int32",
             origin, (long long)c->vocab_size);
    KV_CHECK(c->hidden_size > 0, "%s: config field 'hidden_size' must be > 0", origin);
    KV_CHECK(c->intermediate_size > 0, "%s: config field 'intermediate_size' must be > 0", origin);
    KV_CHECK(c->num_hidden_layers > 0, "%s: config field 'num_hidden_layers' must be > 0", origin);
    KV_CHECK(c->num_attention_heads > 0, "%s: config field 'num_attention_heads' must be > 0", origin);
    KV_CHECK(c->num_key_value_heads > 0, "%s: config field 'num_key_value_heads' must be > 0", origin);
    KV_CHECK(c->num_attention_heads % c->num_key_value_heads == 0,
             "%s: config field 'num_key_value_heads' (%lld) must divide 'num_attention_heads' (%lld)", origin,
             (long long)c->num_key_value_heads, (long long)c->num_attention_heads);
    KV_CHECK(c->head_dim > 0 && c->head_dim % 2 == 0,
             "%s: config field 'head_dim' must be positive and even (got %lld)", origin, (long long)c->head_dim);
    KV_CHECK(c->rms_norm_eps > 0, "%s: config field 'rms_norm_eps' must be > 0", origin);
    KV_CHECK(c->max_position_embeddings > 0, "%s: config field 'max_position_embeddings' must be > 0", origin);
    /* Upper bounds far above any Llama (8B: C 4096, F 14336, 32 layers, 32
     * heads, D 128; 405B: C 16384, F 53248, 126 layers, 128 heads), so that
     * every size the model multiplies stays far inside int64 (the parameter
     * count is at most about 2^56) and head counts fit an int. */
    const struct {
        const char *field;
        int64_t v, max;
    } bounds[] = {
        {"hidden_size", c->hidden_size, (int64_t)1 << 20},
        {"intermediate_size", c->intermediate_size, (int64_t)1 << 22},
        {"num_hidden_layers", c->num_hidden_layers, 4096},
        {"num_attention_heads", c->num_attention_heads, 4096},
        {"num_key_value_heads", c->num_key_value_heads, 4096},
        {"head_dim", c->head_dim, 4096},
        {"max_position_embeddings", c->max_position_embeddings, (int64_t)1 << 31},
    };
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
        KV_CHECK(bounds[i].v <= bounds[i].max, "%s: config field '%s' = %lld is above the supported %lld", origin,
                 bounds[i].field, (long long)bounds[i].v, (long long)bounds[i].max);
    KV_CHECK(c->num_attention_heads * c->head_dim <= ((int64_t)1 << 20),
             "%s: config fields 'num_attention_heads' x 'head_dim' = %lld is above the supported %lld", origin,
             (long long)(c->num_attention_heads * c->head_dim), (long long)1 << 20);
    KV_CHECK(c->bos_token_id == -1 || (c->bos_token_id >= 0 && c->bos_token_id < c->vocab_size),
             "%s: config field 'bos_token_id' (%lld) must be in [0, vocab_size = %lld)", origin,
             (long long)c->bos_token_id, (long long)c->vocab_size);
    for (int i = 0; i < c->n_eos; i++)
        KV_CHECK(c->eos_token_ids[i] >= 0 && c->eos_token_ids[i] < c->vocab_size,
                 "%s: config field 'eos_token_id' (%lld) must be in [0, vocab_size = %lld)", origin,
                 (long long)c->eos_token_ids[i], (long long)c->vocab_size);
    rope_scaling_validate(c, origin);
}

int config_is_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(name, presets[i].name) == 0) return 1;
    return 0;
}

void config_load(DecoderConfig *c, const char *spec) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(spec, presets[i].name) == 0) {
            config_parse_json(c, presets[i].json, presets[i].name);
            return;
        }
    }
    char path[4096];
    struct stat st;
    if (stat(spec, &st) != 0)
        die("'%s' is neither a preset (%s) nor an existing config.json or model directory", spec,
            config_preset_names());
    snprintf(path, sizeof path, S_ISDIR(st.st_mode) ? "%s/config.json" : "%s", spec);
    char *text = read_text_file(path, NULL);
    config_parse_json(c, text, path);
    free(text);
}

char *config_to_json(const DecoderConfig *c) {
    const ModelArch *a = arch_get(c->arch);
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", a->hf_class));
    json_object_set_new(o, "model_type", json_string(a->name));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->num_hidden_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->num_attention_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->num_key_value_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "rope_scaling", rope_scaling_json(c));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position_embeddings));
    if (a->sliding_window) json_object_set_new(o, "sliding_window", json_null()); /* full attention, as run */
    if (a->sliding_window_switch) json_object_set_new(o, a->sliding_window_switch, json_false());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "initializer_range", json_real(c->initializer_range));
    if (!a->qkv_bias) { /* LlamaConfig's switches; a family with biases has them by definition */
        json_object_set_new(o, "attention_bias", json_false());
        json_object_set_new(o, "mlp_bias", json_false());
    }
    json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
    if (c->bos_token_id >= 0) json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    if (c->n_eos == 1) json_object_set_new(o, "eos_token_id", json_integer(c->eos_token_ids[0]));
    else if (c->n_eos > 1) {
        json_t *a = json_array();
        for (int i = 0; i < c->n_eos; i++) json_array_append_new(a, json_integer(c->eos_token_ids[i]));
        json_object_set_new(o, "eos_token_id", a);
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s) die("cannot serialise config to JSON");
    return s;
}
