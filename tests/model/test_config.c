/* Config parsing: presets, HF config.json round trip, and impossible shapes
 * rejected with the field named (checked in a child process via kvcpt). */
#include <math.h>
#include <string.h>

#include "../../model/config.h"
#include "../../model/params.h"
#include "../testlib.h"

/* The parameter count of a configuration, from its shapes alone (the
 * oracle of the layout's total). */
static int64_t config_num_params(const DecoderConfig *c) {
    int64_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    int64_t Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, V = c->vocab_size;
    int64_t per_layer = 2 * C + C * Hq * D * 2 + C * Hkv * D * 2 + 3 * C * F;
    if (arch_get(c->arch)->qkv_bias) per_layer += (Hq + 2 * Hkv) * D;
    return V * C + c->num_hidden_layers * per_layer + C + (c->tie_word_embeddings ? 0 : V * C);
}

#define SHAPE                                                                                                          \
    "\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":1,"                           \
    "\"num_attention_heads\":4,\"max_position_embeddings\":8192,"

static void parse_text(void *text) {
    DecoderConfig c;
    config_parse_json(&c, (const char *)text, "bad.json");
}

static void override(void *spec) {
    DecoderConfig c;
    config_parse_json(&c, "{" SHAPE "\"rope_theta\":1e5}", "plain.json");
    rope_scaling_override(&c, (const char *)spec, "--rope-scaling");
}

/* transformers' rope_scaling types: read with its defaults, written back
 * the same, and a type or field kvcpt does not honour refused, named */
static void rope_scaling_types(void) {
    DecoderConfig a, b;
    config_parse_json(&a,
                      "{" SHAPE "\"rope_theta\":1e5,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":3.0,"
                      "\"beta_fast\":16.0,\"mscale\":0.8,\"mscale_all_dim\":1.3,\"truncate\":false}}",
                      "yarn.json");
    char *js = config_to_json(&a);
    config_parse_json(&b, js, "yarn round trip");
    free(js);
    const RopeScaling *x = &a.rope_scaling, *y = &b.rope_scaling;
    tl_result(x->type == ROPE_YARN && x->original_max_pos == 8192 && x->beta_fast == 16.0 && x->beta_slow == 0 &&
                  x->no_truncate && y->type == ROPE_YARN && y->factor == 3.0 && y->original_max_pos == 8192 &&
                  y->beta_fast == 16.0 && y->beta_slow == 0 && y->mscale == 0.8 && y->mscale_all_dim == 1.3 &&
                  y->no_truncate,
              "yarn: original_max_position_embeddings defaults to max_position_embeddings; every field round trips",
              "type %d original %lld beta_fast %g truncate %d", (int)y->type, (long long)y->original_max_pos,
              y->beta_fast, !y->no_truncate);
    config_parse_json(&a,
                      "{" SHAPE "\"rope_parameters\":{\"rope_theta\":1e5,\"rope_type\":\"yarn\",\"factor\":null,"
                      "\"original_max_position_embeddings\":2048}}",
                      "yarn5.json");
    tl_result(a.rope_scaling.factor == 4.0 && a.rope_theta == 1e5,
              "yarn factor null: max_position_embeddings / original_max_position_embeddings, as transformers",
              "factor %g", a.rope_scaling.factor);
    const char *kinds[][2] = {{"linear", "linear factor 2"}, {"dynamic", "dynamic factor 2"}};
    for (int i = 0; i < 2; i++) {
        char text[512], label[64];
        snprintf(text, sizeof text, "{" SHAPE "\"rope_scaling\":{\"type\":\"%s\",\"factor\":2.0}}", kinds[i][0]);
        config_parse_json(&a, text, "old.json");
        js = config_to_json(&a);
        config_parse_json(&b, js, "round trip");
        free(js);
        rope_scaling_label(label, sizeof label, &b.rope_scaling);
        tl_result(!strcmp(label, kinds[i][1]) && rope_trained_context(&b) == 8192 && rope_covered_context(&b) == 16384,
                  kinds[i][0], "label '%s', trained %lld, covered %lld", label, (long long)rope_trained_context(&b),
                  (long long)rope_covered_context(&b));
    }
    config_parse_json(&a, "{" SHAPE "\"rope_theta\":1e5}", "plain.json");
    rope_scaling_override(&a, "yarn:2", "--rope-scaling");
    tl_result(a.rope_scaling.type == ROPE_YARN && a.rope_scaling.factor == 2.0 &&
                  a.rope_scaling.original_max_pos == 8192 && rope_covered_context(&a) == 16384,
              "--rope-scaling yarn:2 over max_position_embeddings 8192 covers 16384", "covered %lld",
              (long long)rope_covered_context(&a));
    rope_scaling_override(&a, "{\"rope_type\":\"yarn\",\"factor\":2,\"beta_fast\":8}", "--rope-scaling");
    tl_result(a.rope_scaling.beta_fast == 8 && rope_attention_factor(&a.rope_scaling) == 0.1 * log(2.0) + 1.0,
              "--rope-scaling as a JSON block; yarn's attention factor 0.1 ln(factor) + 1", "beta_fast %g",
              a.rope_scaling.beta_fast);
    rope_scaling_override(&a, "none", "--rope-scaling");
    tl_result(a.rope_scaling.type == ROPE_DEFAULT && rope_covered_context(&a) == 8192, "--rope-scaling none", "type %d",
              (int)a.rope_scaling.type);

    tl_expect_death("an unhonoured field is refused, named", parse_text,
                    "{" SHAPE "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0,\"beta_fast\":4.0}}",
                    "'rope_scaling.beta_fast' is not one kvcpt honours for rope_type 'linear' (it reads factor)");
    tl_expect_death("longrope is refused", parse_text,
                    "{" SHAPE "\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2.0}}",
                    "'rope_scaling.rope_type' is 'longrope'");
    tl_expect_death("partial_rotary_factor other than 1 is refused", parse_text,
                    "{" SHAPE "\"rope_parameters\":{\"rope_type\":\"default\",\"partial_rotary_factor\":0.5}}",
                    "'rope_parameters.partial_rotary_factor' must be 1");
    tl_expect_death("factor missing", parse_text, "{" SHAPE "\"rope_scaling\":{\"rope_type\":\"dynamic\"}}",
                    "'rope_scaling.factor' is missing");
    tl_expect_death("a negative yarn field is refused", parse_text,
                    "{" SHAPE "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0,\"beta_slow\":-1.0}}",
                    "'rope_scaling.beta_slow' must be a finite number > 0");
    tl_expect_death("a top-level original_max_position_embeddings that disagrees is refused", parse_text,
                    "{" SHAPE "\"original_max_position_embeddings\":4096,\"rope_scaling\":{\"rope_type\":\"yarn\","
                    "\"factor\":2.0,\"original_max_position_embeddings\":2048}}",
                    "'original_max_position_embeddings' (4096) and 'rope_scaling.original_max_position_embeddings'");
    tl_expect_death("--rope-scaling llama3:2 asks for the JSON block", override, "llama3:2",
                    "TYPE:FACTOR takes linear, dynamic or yarn");
    tl_expect_death("--rope-scaling without a factor", override, "yarn", "expected TYPE:FACTOR");
    tl_expect_death("--rope-scaling yarn:0", override, "yarn:0", "'rope_scaling.factor' must be > 0");
}

/* Qwen2: read from its config.json as Qwen2.5-0.5B's reads (sliding_window
 * set but switched off), its parameter count (494,032,768 on its model
 * card) with the q/k/v biases in the layout after v's weight, and written
 * back as Qwen2ForCausalLM. */
static void qwen2(void) {
    DecoderConfig c;
    config_parse_json(&c,
                      "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"vocab_size\":151936,"
                      "\"hidden_size\":896,\"intermediate_size\":4864,\"num_hidden_layers\":24,"
                      "\"num_attention_heads\":14,\"num_key_value_heads\":2,\"max_position_embeddings\":32768,"
                      "\"max_window_layers\":21,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
                      "\"sliding_window\":32768,\"use_sliding_window\":false,\"tie_word_embeddings\":true,"
                      "\"hidden_act\":\"silu\",\"bos_token_id\":151643,\"eos_token_id\":151643}",
                      "qwen2.5-0.5b/config.json");
    tl_result(c.arch == ARCH_QWEN2 && c.tie_word_embeddings && c.rope_theta == 1e6 && c.head_dim == 64 &&
                  config_num_params(&c) == 494032768LL,
              "Qwen2.5-0.5B's config reads as qwen2, 494,032,768 parameters", "arch %d, %lld parameters", (int)c.arch,
              (long long)config_num_params(&c));
    ParamLayout pl;
    param_layout_build(&pl, &c);
    int v = param_layout_find(&pl, "model.layers.3.self_attn.v_proj.weight");
    int bq = param_layout_find(&pl, "model.layers.3.self_attn.q_proj.bias");
    int bv = param_layout_find(&pl, "model.layers.3.self_attn.v_proj.bias");
    int o = param_layout_find(&pl, "model.layers.3.self_attn.o_proj.weight");
    tl_result(pl.total == config_num_params(&c) && pl.n == 1 + 12 * 24 + 1 && bq == v + 1 && bv == bq + 2 &&
                  o == bv + 1 && pl.t[bq].ndim == 1 && pl.t[bq].numel == 896 && pl.t[bv].numel == 128 &&
                  pl.t[bv].offset == pl.t[bq].offset + 896 + 128,
              "qwen2 layout: q, k, v biases after v's weight, consecutive, (Hq D), (Hkv D), (Hkv D)",
              "total %lld n %d, v %d bq %d bv %d o %d", (long long)pl.total, pl.n, v, bq, bv, o);
    param_layout_free(&pl);
    char *js = config_to_json(&c);
    DecoderConfig c2;
    config_parse_json(&c2, js, "qwen2 round trip");
    tl_result(c2.arch == ARCH_QWEN2 && strstr(js, "\"Qwen2ForCausalLM\"") && strstr(js, "\"model_type\": \"qwen2\"") &&
                  strstr(js, "\"use_sliding_window\": false") && !strstr(js, "attention_bias") &&
                  c2.rope_theta == 1e6 && c2.tie_word_embeddings,
              "a Qwen2 config.json is written as Qwen2ForCausalLM, model_type qwen2, use_sliding_window false", "%s",
              js);
    free(js);
    DecoderConfig l;
    config_parse_json(&l, "{" SHAPE "\"model_type\":\"llama\"}", "l.json");
    param_layout_build(&pl, &l);
    tl_result(param_layout_find(&pl, "model.layers.0.self_attn.q_proj.bias") < 0 && pl.n == 2 + 9 + 1,
              "llama's layout has no biases", "n %d", pl.n);
    param_layout_free(&pl);
}

/* The architecture table: model_type / architectures resolve to a family,
 * Mistral round trips as itself, and what is recognised but not run is
 * refused naming the field and the family. */
static void architectures(void) {
    DecoderConfig c;
    config_parse_json(&c, "{" SHAPE "\"model_type\":\"mistral\",\"sliding_window\":null}", "m.json");
    tl_result(c.arch == ARCH_MISTRAL && c.max_position_embeddings == 8192, "model_type mistral reads as Mistral",
              "arch %d", (int)c.arch);
    config_parse_json(&c, "{" SHAPE "\"architectures\":[\"MistralForCausalLM\"],\"sliding_window\":null}", "m.json");
    tl_result(c.arch == ARCH_MISTRAL, "architectures MistralForCausalLM alone reads as Mistral", "arch %d",
              (int)c.arch);
    char *js = config_to_json(&c);
    DecoderConfig c2;
    config_parse_json(&c2, js, "mistral round trip");
    tl_result(c2.arch == ARCH_MISTRAL && strstr(js, "\"MistralForCausalLM\"") &&
                  strstr(js, "\"model_type\": \"mistral\"") && strstr(js, "\"sliding_window\": null"),
              "a Mistral config.json is written as MistralForCausalLM, model_type mistral, sliding_window null", "%s",
              js);
    free(js);
    config_parse_json(&c, "{" SHAPE "\"model_type\":\"llama\",\"architectures\":[\"LlamaModel\"]}", "l.json");
    js = config_to_json(&c);
    tl_result(c.arch == ARCH_LLAMA && strstr(js, "\"LlamaForCausalLM\"") && !strstr(js, "sliding_window"),
              "llama stays llama, exported as LlamaForCausalLM", "%s", js);
    free(js);
    tl_expect_death("a non-null sliding_window is refused, named", parse_text,
                    "{" SHAPE "\"model_type\":\"mistral\",\"sliding_window\":4096}",
                    "bad.json: config field 'sliding_window' is 4096: sliding-window attention is not implemented");
    tl_expect_death("an absent sliding_window (transformers' 4096) is refused, named", parse_text,
                    "{" SHAPE "\"model_type\":\"mistral\"}",
                    "config field 'sliding_window' is absent, which transformers' MistralForCausalLM reads as 4096");
    tl_expect_death("qwen2 with use_sliding_window true is refused, named", parse_text,
                    "{" SHAPE "\"model_type\":\"qwen2\",\"use_sliding_window\":true,\"sliding_window\":4096}",
                    "config field 'use_sliding_window' is true: sliding-window attention is not implemented yet for "
                    "qwen2");
    tl_expect_death("qwen2 with a sliding layer type is refused, named", parse_text,
                    "{" SHAPE "\"model_type\":\"qwen2\",\"layer_types\":[\"sliding_attention\"]}",
                    "config field 'layer_types[0]' must be \"full_attention\"");
    qwen2();
    tl_expect_death("an unknown model_type is refused, named", parse_text, "{" SHAPE "\"model_type\":\"gemma\"}",
                    "config field 'model_type' is 'gemma', an architecture kvcpt does not know");
    tl_expect_death("an unknown class alone is refused, named", parse_text,
                    "{" SHAPE "\"architectures\":[\"GemmaForCausalLM\"]}",
                    "config field 'architectures' names 'GemmaForCausalLM', an architecture kvcpt does not know");
    tl_expect_death("model_type and architectures disagreeing is refused", parse_text,
                    "{" SHAPE "\"model_type\":\"llama\",\"architectures\":[\"MistralForCausalLM\"]}",
                    "config field 'architectures' names 'MistralForCausalLM' but 'model_type' is 'llama'");
}

int main(void) {
    DecoderConfig c;
    config_load(&c, "llama3.1-8b");
    tl_result(c.hidden_size == 4096 && c.num_key_value_heads == 8 && c.rope_scaling.type == ROPE_LLAMA3 &&
                  !c.tie_word_embeddings,
              "preset llama3.1-8b shapes", "unexpected fields");
    /* Llama-3.1-8B has 8,030,261,248 parameters (HF model card / safetensors index) */
    tl_result(config_num_params(&c) == 8030261248LL, "llama3.1-8b parameter count", "got %lld",
              (long long)config_num_params(&c));
    ParamLayout pl;
    param_layout_build(&pl, &c);
    tl_result(pl.total == config_num_params(&c) && pl.n == 2 + 9 * 32 + 1, "8b param layout total and tensor count",
              "total %lld n %d", (long long)pl.total, pl.n);
    int iq = param_layout_find(&pl, "model.layers.31.self_attn.k_proj.weight");
    tl_result(iq >= 0 && pl.t[iq].shape[0] == 1024 && pl.t[iq].shape[1] == 4096, "k_proj shape is (Hkv*D, C)", "");
    param_layout_free(&pl);

    config_load(&c, "llama3.2-1b");
    /* Llama-3.2-1B: 1,235,814,400 parameters with tied embeddings */
    tl_result(c.tie_word_embeddings && config_num_params(&c) == 1235814400LL, "llama3.2-1b tied, param count",
              "got %lld", (long long)config_num_params(&c));

    char *js = config_to_json(&c);
    DecoderConfig c2;
    config_parse_json(&c2, js, "roundtrip");
    free(js);
    tl_result(c2.hidden_size == c.hidden_size && c2.rope_scaling.type == ROPE_LLAMA3 && c2.rope_scaling.factor == 8.0 &&
                  c2.n_eos == 3 && c2.tie_word_embeddings,
              "config.json round trip", "fields differ");

    /* transformers 5 writes "rope_parameters" (theta inside) instead of
     * "rope_theta" + "rope_scaling": both layouts give the same model */
    const char *v4 = "{\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":1,"
                     "\"num_attention_heads\":4,\"rope_theta\":12345.0,\"rope_scaling\":{\"rope_type\":\"llama3\","
                     "\"factor\":4.0,\"low_freq_factor\":1.0,\"high_freq_factor\":2.0,"
                     "\"original_max_position_embeddings\":32}}";
    const char *v5 = "{\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":1,"
                     "\"num_attention_heads\":4,\"rope_parameters\":{\"rope_theta\":12345.0,\"rope_type\":\"llama3\","
                     "\"factor\":4.0,\"low_freq_factor\":1.0,\"high_freq_factor\":2.0,"
                     "\"original_max_position_embeddings\":32}}";
    DecoderConfig a, b;
    config_parse_json(&a, v4, "v4");
    config_parse_json(&b, v5, "v5");
    tl_result(a.rope_scaling.type == ROPE_LLAMA3 && b.rope_scaling.type == ROPE_LLAMA3 && a.rope_theta == 12345.0 &&
                  b.rope_theta == 12345.0 && a.rope_scaling.factor == b.rope_scaling.factor &&
                  a.rope_scaling.low_freq_factor == b.rope_scaling.low_freq_factor &&
                  a.rope_scaling.high_freq_factor == b.rope_scaling.high_freq_factor &&
                  a.rope_scaling.original_max_pos == b.rope_scaling.original_max_pos,
              "rope_parameters (transformers 5) and rope_theta + rope_scaling (4) give the same RoPE",
              "v4 theta %g type %d, v5 theta %g type %d", a.rope_theta, (int)a.rope_scaling.type, b.rope_theta,
              (int)b.rope_scaling.type);
    rope_scaling_types();
    architectures();
    return tl_finish();
}
