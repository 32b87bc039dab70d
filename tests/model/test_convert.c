/* HF <-> native conversion on a tiny random model: HF -> native -> HF keeps
 * tensor bytes identical, a 3-shard index checkpoint loads, tied embeddings
 * load with or without lm_head, fp32 -> bf16 export rounds to nearest even,
 * and wrong checkpoints fail with the tensor and file named. */
#include <sys/stat.h>

#include "../../checkpoints/model_export.h"
#include "../../checkpoints/model_file.h"
#include "../../cli/commands.h"
#include "../../common/rng.h"
#include "../../common/util.h"
#include "../ckpt_testutil.h"

#define ROOT "build/tests/tmp_convert"

static DecoderConfig cfg;
static ParamLayout pl;

static void write_config(const char *dir, const DecoderConfig *c) {
    make_dirs(dir);
    char *js = config_to_json(c);
    write_text_file_atomic(dir, "config.json", js);
    free(js);
}

/* Random bf16 values for every tensor of the layout, in layout order. */
static uint16_t *random_bf16(uint64_t seed) {
    uint16_t *v = malloc(sizeof(uint16_t) * (size_t)pl.total);
    Rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < pl.total; i++) v[i] = kv_f32_to_bf16(rng_normal(&r));
    return v;
}

static ExportTensor *exports_of(const ParamLayout *l, const void *base, KvDtype dt) {
    ExportTensor *t = calloc((size_t)l->n + 1, sizeof(ExportTensor));
    for (int i = 0; i < l->n; i++) {
        const ParamTensor *p = &l->t[i];
        t[i].out = (StTensorSpec){p->name, dt, p->ndim, {p->shape[0], p->shape[1]}};
        t[i].src = (const uint8_t *)base + p->offset * kv_dtype_size(dt);
        t[i].src_dtype = dt;
    }
    return t;
}

static int run_convert(const char *from, const char *to, const char *extra1, const char *extra2) {
    char *argv[] = {"convert", "--from", (char *)from, "--to", (char *)to, (char *)extra1, (char *)extra2, NULL};
    int argc = 5 + (extra1 != NULL) + (extra2 != NULL);
    return cmd_convert(argc, argv);
}

/* Same names, dtypes, shapes and bytes for every tensor of the layout. */
static int same_tensors(const char *a, const char *b, char *why, size_t n) {
    TensorSet x, y;
    tensor_set_open_or_die(&x, a);
    tensor_set_open_or_die(&y, b);
    int ok = 1;
    for (int k = 0; k < pl.n && ok; k++) {
        int i = tensor_set_find(&x, pl.t[k].name), j = tensor_set_find(&y, pl.t[k].name);
        ok = i >= 0 && j >= 0 && x.t[i].dtype == y.t[j].dtype && x.t[i].ndim == y.t[j].ndim &&
             x.t[i].bytes == y.t[j].bytes &&
             memcmp(x.t[i].shape, y.t[j].shape, sizeof(int64_t) * (size_t)x.t[i].ndim) == 0 &&
             memcmp(x.t[i].data, y.t[j].data, (size_t)x.t[i].bytes) == 0;
        if (!ok) snprintf(why, n, "tensor %s differs", pl.t[k].name);
    }
    tensor_set_close(&x);
    tensor_set_close(&y);
    return ok;
}

static int files_equal(const char *a, const char *b) {
    int64_t na, nb;
    char *x = read_text_file(a, &na), *y = read_text_file(b, &nb);
    int eq = na == nb && memcmp(x, y, (size_t)na) == 0;
    free(x), free(y);
    return eq;
}

static void test_roundtrip(void) {
    uint16_t *w = random_bf16(42);
    write_config(ROOT "/hf", &cfg);
    write_text_file_atomic(ROOT "/hf", "tokenizer.json", "{\"model\":{}}");
    ExportTensor *t = exports_of(&pl, w, KV_BF16);
    int shards = export_hf(ROOT "/hf", t, pl.n, 15000);
    tl_result(shards == 3, "tiny model exported as 3 shards + index", "got %d shards", shards);
    TensorSet s;
    char err[1024];
    int rc = tensor_set_open(&s, ROOT "/hf", err, sizeof err);
    tl_result(rc == 0 && s.n_shards == 3 && s.n == pl.n, "3-shard index checkpoint loads", "%s",
              rc ? err : "wrong counts");
    if (rc == 0) tensor_set_close(&s);

    char why[256] = "";
    rc = run_convert(ROOT "/hf", ROOT "/native", NULL, NULL);
    tl_result(rc == 0 && tensor_set_detect(ROOT "/native") == 1, "convert HF -> native", "rc %d", rc);
    tl_result(same_tensors(ROOT "/hf", ROOT "/native", why, sizeof why), "native keeps the HF bytes", "%s", why);
    rc = run_convert(ROOT "/native", ROOT "/hf2", "--shard-size", "20KB");
    tl_result(rc == 0 && same_tensors(ROOT "/hf", ROOT "/hf2", why, sizeof why),
              "HF -> native -> HF: tensor data byte-identical (different sharding)", "rc %d %s", rc, why);
    rc = run_convert(ROOT "/native", ROOT "/hf3", "--shard-size", "15000B");
    int eq = rc == 0;
    for (int i = 1; i <= 3 && eq; i++) {
        char a[256], b[256];
        snprintf(a, sizeof a, ROOT "/hf/model-%05d-of-00003.safetensors", i);
        snprintf(b, sizeof b, ROOT "/hf3/model-%05d-of-00003.safetensors", i);
        eq = files_equal(a, b);
    }
    eq = eq && files_equal(ROOT "/hf/" HF_INDEX_FILE, ROOT "/hf3/" HF_INDEX_FILE);
    tl_result(eq, "HF -> native -> HF with the same shard size: files byte-identical", "rc %d", rc);
    tl_result(file_size(ROOT "/hf2/tokenizer.json") > 0, "tokenizer.json copied along", "");

    float *a = malloc(sizeof(float) * (size_t)pl.total), *b = malloc(sizeof(float) * (size_t)pl.total);
    float *ref = malloc(sizeof(float) * (size_t)pl.total);
    for (int64_t i = 0; i < pl.total; i++) ref[i] = kv_bf16_to_f32(w[i]);
    model_file_load_fp32(ROOT "/hf", &cfg, &pl, a);
    tl_identical("load_fp32 from the 3-shard HF dir widens bf16 exactly", a, ref, pl.total);
    model_file_load_fp32(ROOT "/native", &cfg, &pl, b);
    tl_identical("load_fp32 from the native dir equals the HF load", b, ref, pl.total);

    rc = run_convert(ROOT "/hf", ROOT "/native_f32", "--to-dtype", "f32");
    model_file_load_fp32(ROOT "/native_f32", &cfg, &pl, b);
    tl_result(rc == 0, "convert --to-dtype f32", "rc %d", rc);
    tl_identical("bf16 -> f32 native -> load is exact", b, ref, pl.total);
    free(a), free(b), free(ref), free(t), free(w);
}

static void test_fp32_export(void) {
    float *p = malloc(sizeof(float) * (size_t)pl.total), *q = malloc(sizeof(float) * (size_t)pl.total);
    float *ref = malloc(sizeof(float) * (size_t)pl.total);
    Rng r;
    rng_seed(&r, 7);
    for (int64_t i = 0; i < pl.total; i++) p[i] = rng_normal(&r) * 0.02f;
    p[0] = kv_bits_f32(0x3f808000u); /* an exact tie: must round to even (down) */
    p[1] = kv_bits_f32(0x3f818000u); /* the other tie: must round up */
    for (int64_t i = 0; i < pl.total; i++) ref[i] = kv_bf16_to_f32(kv_f32_to_bf16(p[i]));
    model_file_save_hf(ROOT "/save_bf16", &cfg, &pl, p, KV_BF16, 1LL << 30);
    model_file_load_fp32(ROOT "/save_bf16", &cfg, &pl, q);
    tl_identical("save_hf bf16 then load = round-to-nearest-even of the fp32 params", q, ref, pl.total);
    tl_result(kv_f32_bits(q[0]) == 0x3f800000u && kv_f32_bits(q[1]) == 0x3f820000u, "bf16 export ties go to even",
              "got %08x %08x", kv_f32_bits(q[0]), kv_f32_bits(q[1]));
    model_file_save_hf(ROOT "/save_f32", &cfg, &pl, p, KV_F32, 1LL << 30);
    model_file_load_fp32(ROOT "/save_f32", &cfg, &pl, q);
    tl_identical("save_hf f32 then load is bit-identical", q, p, pl.total);
    model_file_save_native(ROOT "/save_native", &cfg, &pl, p, KV_F32);
    model_file_load_fp32(ROOT "/save_native", &cfg, &pl, q);
    tl_identical("save_native f32 then load is bit-identical", q, p, pl.total);
    free(p), free(q), free(ref);
}

static void test_tied(void) {
    DecoderConfig tc = cfg;
    tc.tie_word_embeddings = 1;
    ParamLayout tl;
    param_layout_build(&tl, &tc);
    float *p = calloc((size_t)tl.total, sizeof(float)), *q = calloc((size_t)tl.total, sizeof(float));
    for (int64_t i = 0; i < tl.total; i++) p[i] = (float)(i % 97) * 0.25f;
    model_file_save_hf(ROOT "/tied", &tc, &tl, p, KV_F32, 1LL << 30);
    model_file_load_fp32(ROOT "/tied", &tc, &tl, q);
    tl_identical("tied model without lm_head.weight loads", q, p, tl.total);
    /* some tied checkpoints also carry lm_head.weight (a copy of embed_tokens) */
    ExportTensor *t = calloc((size_t)tl.n + 1, sizeof(ExportTensor));
    ExportTensor *base = exports_of(&tl, p, KV_F32);
    memcpy(t, base, sizeof(ExportTensor) * (size_t)tl.n);
    t[tl.n] = t[0];
    t[tl.n].out.name = "lm_head.weight";
    write_config(ROOT "/tied_lm", &tc);
    export_hf(ROOT "/tied_lm", t, tl.n + 1, 1LL << 30);
    memset(q, 0, sizeof(float) * (size_t)tl.total);
    model_file_load_fp32(ROOT "/tied_lm", &tc, &tl, q);
    tl_identical("tied model with a redundant lm_head.weight loads", q, p, tl.total);
    int rc = run_convert(ROOT "/tied_lm", ROOT "/tied_native", NULL, NULL);
    TensorSet s;
    tensor_set_open_or_die(&s, ROOT "/tied_native");
    tl_result(rc == 0 && s.n == tl.n && tensor_set_find(&s, "lm_head.weight") < 0,
              "convert drops the tied lm_head.weight", "rc %d n %d", rc, s.n);
    tensor_set_close(&s);
    free(t), free(base), free(p), free(q);
    param_layout_free(&tl);
}

/* ---- error cases, each in a child process ---- */

static void load_dir(void *dir) {
    float *p = malloc(sizeof(float) * (size_t)pl.total);
    model_file_load_fp32(dir, &cfg, &pl, p);
}

/* An HF dir built from the layout with one tensor altered by `edit`. */
static void write_variant(const char *dir, int drop, int reshape, const char *extra) {
    uint16_t *w = random_bf16(1);
    ExportTensor *t = exports_of(&pl, w, KV_BF16);
    int n = pl.n;
    if (drop >= 0) memmove(&t[drop], &t[drop + 1], sizeof(ExportTensor) * (size_t)(n - drop - 1)), n--;
    if (reshape >= 0) t[reshape].out.shape[0] -= 1;
    if (extra) t[n] = t[n - 1], t[n].out.name = extra, n++;
    write_config(dir, &cfg);
    export_hf(dir, t, n, 1LL << 30);
    free(t), free(w);
}

static void convert_child(void *argv) { exit(cmd_convert(7, argv)); }

static void test_errors(void) {
    write_variant(ROOT "/missing", 3, -1, NULL);
    expect_error("missing tensor named", load_dir, ROOT "/missing",
                 "'model.layers.0.self_attn.k_proj.weight' (shape 16 x 32) is missing");
    write_variant(ROOT "/reshaped", -1, 2, NULL);
    expect_error("wrong shape named with file and offset", load_dir, ROOT "/reshaped",
                 "has shape [31, 32], expected [32, 32]");
    write_variant(ROOT "/extra", -1, -1, "model.layers.9.mlp.up_proj.weight");
    expect_error("extra tensor named", load_dir, ROOT "/extra",
                 "'model.layers.9.mlp.up_proj.weight' is not part of the model");
    expect_error("directory without a model", load_dir, ROOT, "expected a model directory");

    const char *idx_bad[][2] = {
        {"{\"weight_map\":{\"model.embed_tokens.weight\":\"../x.safetensors\"}}", "plain shard file name"},
        {"{\"weight_map\":{\"model.embed_tokens.weight\":\"model-00009-of-00009.safetensors\"}}", "cannot open"},
        {"{\"weight_map\":[]}", "expected a \"weight_map\" object"},
        {"{\"weight_map\":{\"a\":\"x\"", "invalid JSON"},
    };
    for (int i = 0; i < 4; i++) {
        char dir[128], name[96];
        snprintf(dir, sizeof dir, ROOT "/badidx%d", i);
        make_dirs(dir);
        write_text_file_atomic(dir, HF_INDEX_FILE, idx_bad[i][0]);
        snprintf(name, sizeof name, "bad index rejected (%s)", idx_bad[i][1]);
        expect_error(name, load_dir, dir, idx_bad[i][1]);
    }
    /* a shard that holds a tensor the index attributes elsewhere */
    system("rm -rf " ROOT "/moved && cp -r " ROOT "/hf " ROOT "/moved && sed -i "
           "'s/\"model.norm.weight\": \"model-00003/\"model.norm.weight\": \"model-00001/' " ROOT
           "/moved/" HF_INDEX_FILE);
    expect_error(
        "index disagreeing with a shard", load_dir, ROOT "/moved",
        "'model.norm.weight' is in shard model-00003-of-00003.safetensors but the index maps it to model-00001");

    int64_t n;
    char *img = read_text_file(ROOT "/native/" NATIVE_MODEL_FILE, &n);
    make_dirs(ROOT "/trunc");
    write_bytes(ROOT "/trunc/" NATIVE_MODEL_FILE, img, n - 100);
    expect_error("truncated native file", load_dir, ROOT "/trunc", "(truncated?)");
    NmFile f;
    char err[512];
    int64_t acc = 0, rej = 0;
    int64_t head = 1024 < n ? 1024 : n;
    static const uint8_t subst[] = {0x00, 0xff, 0x7f, 0x40};
    for (int64_t pos = 0; pos < head; pos++)
        for (size_t s = 0; s < sizeof subst; s++) {
            uint8_t old = (uint8_t)img[pos];
            img[pos] = (char)subst[s];
            if (nm_parse(&f, (uint8_t *)img, n, "mutant", err, sizeof err) == 0) acc++, nm_close(&f);
            else rej++;
            img[pos] = (char)old;
        }
    tl_result(rej > 0, "native header mutation sweep runs without crashing", "acc %lld rej %lld", (long long)acc,
              (long long)rej);
    free(img);

    char *a1[] = {"convert", "--from", ROOT "/hf", "--to", ROOT "/x", "--to-dtype", "int8", NULL};
    expect_error("convert rejects an unknown --to-dtype", convert_child, a1, "--to-dtype expects");
    char *a2[] = {"convert", "--from", ROOT "/hf", "--to", ROOT "/native", "--shard-size", "5GB", NULL};
    expect_error("convert refuses to overwrite without --overwrite", convert_child, a2, "already holds");
    char *a3[] = {"convert", "--from", ROOT "/hf", "--to", ROOT "/y", "--shard-size", "lots", NULL};
    expect_error("convert rejects a bad --shard-size", convert_child, a3, "--shard-size expects");
}

int main(void) {
    system("rm -rf " ROOT);
    config_load(&cfg, "tiny");
    param_layout_build(&pl, &cfg);
    test_roundtrip();
    test_fp32_export();
    test_tied();
    test_errors();
    param_layout_free(&pl);
    int rc = tl_finish();
    if (rc == 0) system("rm -rf " ROOT);
    return rc;
}
