/* kvcpt convert: Hugging Face safetensors directory <-> native model
 * directory, checked against the config's tensor names and shapes. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/byte_size.h"
#include "../common/options.h"
#include "../common/util.h"
#include "commands.h"
#include <sys/stat.h>

#include "../checkpoints/convert_dest.h"
#include "../checkpoints/gguf.h"
#include "../checkpoints/gguf_import.h"
#include "../checkpoints/model_export.h"
#include "../checkpoints/model_file.h"

/* Files next to the weights that inference stacks expect to find. */
static const char *const SIDE_FILES[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                         "generation_config.json", NULL};

static int64_t parse_size(const char *s) {
    int64_t bytes;
    if (byte_size_parse(s, &bytes) != 0)
        die("kvcpt convert: --shard-size expects a positive size such as 5GB, 500MB or 2GiB, got '%s'", s);
    return bytes;
}

static void copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char src[4096];
    path_fmt(src, sizeof src, "%s/%s", from_dir, name);
    if (file_size(src) < 0) return;
    int64_t n;
    char *bytes = read_text_file(src, &n);
    write_file_atomic(to_dir, name, bytes, n);
    free(bytes);
}

static int same_dir(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* A llama.cpp GGUF file: dequantized and written as a Hugging Face (default)
 * or native directory with its tokenizer. */
static int convert_gguf(const char *from, const char *to, const char *to_format, const char *to_dtype,
                        int64_t shard_bytes, const char *config, int overwrite) {
    if (config) die("kvcpt convert: --config does not apply to a GGUF source (its metadata is the config)");
    if (to_format && strcmp(to_format, "hf") != 0 && strcmp(to_format, "native") != 0)
        die("kvcpt convert: --to-format expects hf or native, got '%s'", to_format);
    int native = to_format && strcmp(to_format, "native") == 0;
    KvDtype dtype = KV_F32; /* keep: fp32, which holds every dequantized value exactly */
    if (strcmp(to_dtype, "keep") != 0 && kv_dtype_parse(to_dtype, &dtype) != 0)
        die("kvcpt convert: --to-dtype expects keep, F32, BF16 or F16, got '%s'", to_dtype);
    convert_dest_check(to, overwrite);
    const ConvertInput in = {from, "--from"};
    convert_dest_check_inputs(to, &in, 1);
    /* the export creates --to, after checking every value fits the dtype */
    double t0 = now_seconds();
    GgufImportStats st;
    gguf_import(from, to, native, dtype, shard_bytes, &st);
    double dt = now_seconds() - t0;
    printf("converted %d tensors (%.3f GB, %s) from %s (gguf) to %s (%s%s) in %.1f s\n", st.tensors,
           (double)st.bytes / 1e9, kv_dtype_name(dtype), from, to, native ? "native" : "hf",
           st.tokenizer ? ", with tokenizer.json" : ", no tokenizer in the file", dt);
    return 0;
}

/* Every file a directory conversion reads: the config, the weights (each
 * shard, and the index), the side files copied along; none may be in --to. */
static void check_inputs_outside(const char *to, const char *from, const char *config, int config_given,
                                 const TensorSet *s) {
    int n_side = 0;
    while (SIDE_FILES[n_side]) n_side++;
    /* the config, the native file, the shards, the index, the side files */
    ConvertInput *in = xcalloc((size_t)(3 + s->n_shards + n_side), sizeof(ConvertInput));
    char(*side)[4096] = xcalloc((size_t)n_side + 1, sizeof *side);
    int n = 0;
    in[n++] = (ConvertInput){config, config_given ? "--config" : "--from"};
    if (s->format == TS_NATIVE) in[n++] = (ConvertInput){s->native.map.path, "--from"};
    for (int i = 0; i < s->n_shards; i++) in[n++] = (ConvertInput){s->shards[i].map.path, "--from"};
    path_fmt(side[n_side], sizeof side[n_side], "%s/%s", from, HF_INDEX_FILE);
    in[n++] = (ConvertInput){side[n_side], "--from"};
    for (int i = 0; i < n_side; i++) {
        path_fmt(side[i], sizeof side[i], "%s/%s", from, SIDE_FILES[i]);
        in[n++] = (ConvertInput){side[i], "--from"};
    }
    convert_dest_check_inputs(to, in, n);
    free(side);
    free(in);
}

static ExportTensor *plan_exports(const TensorSet *s, const ParamLayout *pl, const char *to_dtype, int64_t *bytes) {
    ExportTensor *t = xcalloc((size_t)pl->n, sizeof(ExportTensor));
    *bytes = 0;
    for (int k = 0; k < pl->n; k++) {
        const TensorRef *r = &s->t[tensor_set_find(s, pl->t[k].name)];
        KvDtype out = r->dtype;
        if (strcmp(to_dtype, "keep") != 0 && kv_dtype_parse(to_dtype, &out) != 0)
            die("kvcpt convert: --to-dtype expects keep, F32, BF16 or F16, got '%s'", to_dtype);
        t[k].out = (StTensorSpec){pl->t[k].name, out, r->ndim, {0}};
        memcpy(t[k].out.shape, r->shape, sizeof(int64_t) * (size_t)r->ndim);
        t[k].src = r->data;
        t[k].src_dtype = r->dtype;
        *bytes += st_spec_bytes(&t[k].out);
    }
    return t;
}

int cmd_convert(int argc, char **argv) {
    const char *from = NULL, *to = NULL, *to_format = NULL, *to_dtype = "keep", *shard = "5GB", *config = NULL;
    int overwrite = 0;
    const Option opts[] = {
        {"from", OPT_STRING, &from, "DIR|FILE.gguf",
         "source: a model directory (HF safetensors or native) or a llama.cpp GGUF file; auto-detected"},
        {"to", OPT_STRING, &to, "DIR", "destination directory (created)"},
        {"to-format", OPT_STRING, &to_format, "hf|native", "output format; absent: the other one (hf for GGUF)"},
        {"to-dtype", OPT_STRING, &to_dtype, "keep|bf16|f32|f16",
         "output dtype (keep: bytes copied unchanged; f32 for GGUF)"},
        {"shard-size", OPT_STRING, &shard, "SIZE", "largest HF shard, e.g. 5GB, 500MB, 2GiB"},
        {"config", OPT_STRING, &config, "PATH", "config.json to check shapes against; absent: FROM/config.json"},
        {"overwrite", OPT_FLAG, &overwrite, NULL, "replace model files already in --to"},
        {0}};
    const char *summary = "Convert a Hugging Face Llama or Mistral checkpoint to kvcpt's native format or back\n"
                          "(model families: model/arch.c; qwen2 is recognised and refused).\n"
                          "Tensor names and shapes are checked against config.json; tokenizer and generation\n"
                          "files are copied along. bf16 output rounds to nearest even, as torch does; a finite\n"
                          "value the output dtype cannot hold (it would round to inf) is refused, inf and NaN are\n"
                          "copied. Without --overwrite, --to must hold none of the files a conversion writes or\n"
                          "removes (config.json, tokenizer and generation files, *.safetensors, model.kvcpt).\n"
                          "A llama.cpp GGUF file (llama architecture; tensors F32, F16, BF16, Q8_0, Q4_0, Q4_1)\n"
                          "is dequantized bit-exactly as llama.cpp's gguf package does, q/k rows un-permuted as\n"
                          "transformers does, and written with config.json, tokenizer.json and\n"
                          "tokenizer_config.json built from its metadata.";
    if (options_parse("convert", summary, opts, argc, argv)) return 0;
    if (!from || !to) die("kvcpt convert: --from and --to are required; see 'kvcpt convert --help'");
    int64_t shard_bytes = parse_size(shard);
    if (strcasecmp(to_dtype, "bf16") == 0) to_dtype = "BF16";
    else if (strcasecmp(to_dtype, "f32") == 0 || strcasecmp(to_dtype, "fp32") == 0) to_dtype = "F32";
    else if (strcasecmp(to_dtype, "f16") == 0 || strcasecmp(to_dtype, "fp16") == 0) to_dtype = "F16";
    /* a regular file can only be GGUF; one that is not gets the parser's bad-magic error */
    struct stat st;
    if (gguf_file_detect(from) || (stat(from, &st) == 0 && S_ISREG(st.st_mode)))
        return convert_gguf(from, to, to_format, to_dtype, shard_bytes, config, overwrite);
    int src_native = tensor_set_detect(from);
    if (src_native < 0)
        die("kvcpt convert: '%s' holds no %s, %s or %s", from, NATIVE_MODEL_FILE, HF_SINGLE_FILE, HF_INDEX_FILE);
    int out_native = to_format ? strcmp(to_format, "native") == 0 : !src_native;
    if (to_format && !out_native && strcmp(to_format, "hf") != 0)
        die("kvcpt convert: --to-format expects hf or native, got '%s'", to_format);
    if (same_dir(from, to)) die("kvcpt convert: --from and --to are the same directory '%s'", from);
    convert_dest_check(to, overwrite);

    char cfg_path[4096];
    path_fmt(cfg_path, sizeof cfg_path, "%s/config.json", from);
    if (!config) config = cfg_path;
    DecoderConfig cfg;
    config_load(&cfg, config);
    ParamLayout pl;
    param_layout_build(&pl, &cfg);
    double t0 = now_seconds();
    TensorSet s;
    tensor_set_open_or_die(&s, from);
    check_inputs_outside(to, from, config, config != cfg_path, &s);
    char err[1024];
    int skip_lm_head;
    if (model_match_layout(&s, &pl, &cfg, &skip_lm_head, err, sizeof err) != 0) die("%s: %s", from, err);
    if (skip_lm_head) warnf("%s: lm_head.weight dropped: tie_word_embeddings is true, so it is embed_tokens", from);
    int64_t bytes;
    ExportTensor *t = plan_exports(&s, &pl, to_dtype, &bytes);

    /* nothing is touched before the export has checked every value fits
     * the dtype; it creates --to, and an HF export removes a stale native
     * file that would shadow it */
    int shards = 1;
    if (out_native) {
        export_native(to, t, pl.n);
    } else {
        shards = export_hf(to, t, pl.n, shard_bytes);
    }
    char *cfg_text = read_text_file(config, NULL), *cfg_out = config_json_with_dtype(cfg_text, t[0].out.dtype);
    write_text_file_atomic(to, "config.json", cfg_out);
    for (int i = 0; SIDE_FILES[i]; i++) copy_file(from, to, SIDE_FILES[i]);
    double dt = now_seconds() - t0;
    printf("converted %d tensors (%.3f GB, %s) from %s (%s) to %s (%s, %d file%s) in %.1f s (%.0f MB/s)\n", pl.n,
           (double)bytes / 1e9, kv_dtype_name(t[0].out.dtype), from, src_native ? "native" : "hf", to,
           out_native ? "native" : "hf", shards, shards == 1 ? "" : "s", dt,
           (double)bytes / 1e6 / (dt > 0 ? dt : 1e-9));
    free(cfg_text), free(cfg_out), free(t);
    tensor_set_close(&s);
    param_layout_free(&pl);
    return 0;
}
