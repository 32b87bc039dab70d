/* Writes a tiny-model case for the PyTorch oracle (tests/torch_ref.py):
 * config, mask, parameters, tokens and kvcpt's own logits, loss, gradients
 * and selections, as raw little-endian arrays plus case.json.
 * usage: dump_model_case OUTDIR SEED TIED AGG(max|mean|first) [DEVICE [K [MODEL_DIR [EVICT RESTRIDE
 *                        [TOKENS L S]]]]]
 * DEVICE cuda takes kvcpt's numbers from the CUDA engine (model/decoder_cuda.h)
 * instead of the CPU reference; K (default 5) = L (24) keeps every key,
 * which is plain causal attention (what transformers runs). MODEL_DIR (a
 * native or Hugging Face model directory) supplies the config and the
 * parameters instead of the tiny preset with random weights (TIED is then
 * the config's; "-" for none); SEED still draws the tokens. EVICT (0|1) and
 * RESTRIDE (>= 0) set the mask's evict and restride fields (either device):
 * sel then holds the per-row key records (kernels/attention.h). TOKENS (a
 * file of 2 (L + S) little-endian int32 ids, e.g. real text from prepared
 * shards) with L and S replaces the random tokens and the default sizes
 * (L 24, S 8), so a real model is checked on the text it was trained for. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../checkpoints/model_file.h"
#include "../../model/decoder.h"
#include "../../model/decoder_cuda.h"
#ifdef KVCPT_CUDA
#include "../../kernels/cuda_device.h"
#endif

static void write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen_check(path, "wb");
    fwrite_check(p, 1, bytes, f, path);
    fclose_check(f, path);
}

/* The same pass on the CUDA engine: its logits, selections and gradients
 * (into m->grads, where the CPU path leaves them). */
static float gpu_pass(Decoder *m, const int32_t *tok, const int32_t *tgt, int64_t B, int64_t T, float *logits,
                      int32_t *sel) {
#ifdef KVCPT_CUDA
    DecoderCuda g;
    decoder_cuda_create(&g, &m->cfg, 0, DECODER_CUDA_FP32);
    decoder_cuda_upload_params(&g, m->params);
    decoder_cuda_set_mask(&g, &m->mask);
    float loss = decoder_cuda_forward(&g, tok, tgt, B, T);
    decoder_cuda_zero_grad(&g);
    decoder_cuda_backward(&g);
    decoder_cuda_download_grads(&g, m->grads);
    decoder_cuda_logits(&g, logits, 0, B * T);
    int64_t n = B * m->cfg.num_key_value_heads * refresh_sel_len(&m->mask, T);
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
        cuda_memcpy_d2h(sel + l * n, g.state.sel[l], sizeof(int32_t) * (size_t)n);
    decoder_cuda_free(&g);
    return loss;
#else
    (void)m, (void)tok, (void)tgt, (void)B, (void)T, (void)logits, (void)sel;
    die("dump_model_case: this build has no CUDA engine");
#endif
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 13 || argc == 9 || argc == 11 || argc == 12)
        die("usage: dump_model_case OUTDIR SEED TIED AGG [cpu|cuda [K [MODEL_DIR|- [EVICT RESTRIDE [TOKENS L S]]]]]");
    const char *tokens_path = argc > 10 ? argv[10] : NULL;
    const char *model_dir = argc > 7 && strcmp(argv[7], "-") != 0 ? argv[7] : NULL;
    int evict = argc > 8 ? atoi(argv[8]) : 0;
    int64_t restride = argc > 9 ? atoll(argv[9]) : 0;
    int on_gpu = argc > 5 && strcmp(argv[5], "cuda") == 0;
    const char *dir = argv[1];
    uint64_t seed = strtoull(argv[2], NULL, 10);
    make_dirs(dir);
    DecoderConfig c;
    config_load(&c, model_dir ? model_dir : "tiny");
    if (!model_dir) {
        c.tie_word_embeddings = atoi(argv[3]);
        c.initializer_range = 0.25;
    }
    const int64_t B = 2, L = tokens_path ? atoll(argv[11]) : 24, S = tokens_path ? atoll(argv[12]) : 8;
    const int64_t K = argc > 6 ? atoll(argv[6]) : 5, T = L + S;
    KV_CHECK(L >= 1 && S >= 1 && L <= 65536 && S <= 65536, "dump_model_case: L and S must be in [1, 65536]");
    KV_CHECK(K >= 1 && K <= L, "dump_model_case: K must be in [1, %lld] (got %lld)", (long long)L, (long long)K);
    Decoder m;
    decoder_create(&m, &c);
    if (model_dir) model_file_load_fp32(model_dir, &c, &m.layout, m.params);
    else decoder_init_random(&m, seed);
    RefreshMask mask = {.enabled = 1,
                        .L = L,
                        .K = K,
                        .pool_kernel = 7,
                        .agg = group_agg_parse(argv[4], "agg"),
                        .evict = evict,
                        .restride = restride,
                        .S = S};
    decoder_set_mask(&m, &mask);
    const int64_t nsel = B * c.num_key_value_heads * refresh_sel_len(&mask, T); /* per layer */
    const size_t tok_bytes = sizeof(int32_t) * (size_t)(B * T);
    int32_t *tok = xmalloc(tok_bytes), *tgt = xmalloc(tok_bytes);
    if (tokens_path) {
        FILE *f = fopen_check(tokens_path, "rb");
        fread_check(tok, sizeof(int32_t), (size_t)(B * T), f, tokens_path);
        KV_CHECK(fgetc(f) == EOF, "%s: more than 2 x %lld ids", tokens_path, (long long)T);
        fclose_check(f, tokens_path);
        for (int64_t i = 0; i < B * T; i++)
            KV_CHECK(tok[i] >= 0 && tok[i] < c.vocab_size, "%s: token %d outside the vocabulary", tokens_path, tok[i]);
    } else {
        Rng r;
        rng_seed(&r, seed + 1);
        for (int64_t i = 0; i < B * T; i++) tok[i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
    }
    for (int64_t i = 0; i < B * T; i++) tgt[i] = (i % T) + 1 < T ? tok[i + 1] : -1;
    tgt[3] = -1; /* an ignored target inside the sequence too */
    float *logits = xmalloc(sizeof(float) * (size_t)(B * T * c.vocab_size));
    int32_t *sel = xmalloc(sizeof(int32_t) * (size_t)(c.num_hidden_layers * nsel));
    float loss = on_gpu ? gpu_pass(&m, tok, tgt, B, T, logits, sel) : NAN;
    if (!on_gpu) {
        loss = decoder_forward(&m, tok, tgt, B, T);
        decoder_zero_grad(&m);
        decoder_backward(&m);
        decoder_logits(&m, logits, 0, B * T);
        for (int64_t l = 0; l < c.num_hidden_layers; l++)
            memcpy(sel + l * nsel, m.state.sel[l], sizeof(int32_t) * (size_t)nsel);
    }

    write_raw(dir, "params.f32", m.params, sizeof(float) * (size_t)m.layout.total);
    write_raw(dir, "grads.f32", m.grads, sizeof(float) * (size_t)m.layout.total);
    write_raw(dir, "logits.f32", logits, sizeof(float) * (size_t)(B * T * c.vocab_size));
    write_raw(dir, "tokens.i32", tok, tok_bytes);
    write_raw(dir, "targets.i32", tgt, tok_bytes);
    for (int64_t l = 0; l < c.num_hidden_layers; l++) {
        char name[64];
        snprintf(name, sizeof name, "sel%lld.i32", (long long)l);
        write_raw(dir, name, sel + l * nsel, sizeof(int32_t) * (size_t)nsel);
    }
    json_t *j = json_object();
    char *cfg = config_to_json(&c);
    json_object_set_new(j, "config", json_loads(cfg, 0, NULL));
    free(cfg);
    json_object_set_new(j, "mask",
                        json_pack("{s:I,s:I,s:I,s:I,s:s,s:i,s:I,s:I}", "L", (json_int_t)L, "S", (json_int_t)S, "K",
                                  (json_int_t)K, "pool_kernel", (json_int_t)7, "agg", argv[4], "evict", evict,
                                  "restride", (json_int_t)restride, "width",
                                  (json_int_t)(refresh_per_row(&mask) ? refresh_row_width(&mask, T) : 0)));
    json_object_set_new(j, "device", json_string(on_gpu ? "cuda" : "cpu"));
    json_object_set_new(j, "B", json_integer(B));
    json_object_set_new(j, "T", json_integer(T));
    json_object_set_new(j, "loss", json_real(loss));
    json_t *tensors = json_array();
    for (int i = 0; i < m.layout.n; i++) {
        const ParamTensor *t = &m.layout.t[i];
        json_array_append_new(tensors,
                              json_pack("{s:s,s:I,s:[I,I],s:i}", "name", t->name, "offset", (json_int_t)t->offset,
                                        "shape", (json_int_t)t->shape[0], (json_int_t)t->shape[1], "ndim", t->ndim));
    }
    json_object_set_new(j, "tensors", tensors);
    char path[4096];
    path_fmt(path, sizeof path, "%s/case.json", dir);
    if (json_dump_file(j, path, JSON_INDENT(1)) != 0) die("cannot write '%s'", path);
    json_decref(j);
    free(logits);
    free(sel);
    free(tok);
    free(tgt);
    decoder_free(&m);
    return 0;
}
