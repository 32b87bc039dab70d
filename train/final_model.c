#include "final_model.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../checkpoints/gguf_import.h"
#include "../checkpoints/model_export.h"
#include "../checkpoints/model_file.h"
#include "../checkpoints/model_source.h"
#include "../common/byte_size.h"
#include "../common/json_file.h"
#include "../common/util.h"
#include "../data/sha256.h"

/* What transformers reads to build a tokenizer; a stale one from an earlier
 * export must not stay beside a model that now has another or none. */
static const char *const TOKENIZER_FILES[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
#define N_TOKENIZER_FILES (int)(sizeof TOKENIZER_FILES / sizeof TOKENIZER_FILES[0])

typedef struct {
    char *bytes; /* NULL: not written */
    int64_t n;
} FileBytes;

struct FinalModel {
    char dir[4200];
    int64_t shard_bytes;
    char *config;                         /* config.json text */
    FileBytes generation;                 /* generation_config.json */
    FileBytes tok[N_TOKENIZER_FILES];     /* in TOKENIZER_FILES order */
    char *tokenizer_from;                 /* where tok came from, or NULL */
};

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode); /* a link to a model directory counts */
}

static FileBytes read_bytes(const char *path) {
    FileBytes f = {0};
    f.bytes = read_text_file(path, &f.n);
    return f;
}

/* The bytes write_text_file_atomic would write for text: it and a line break. */
static FileBytes text_bytes(const char *text) {
    size_t n = strlen(text);
    FileBytes f = {xmalloc(n + 2), (int64_t)n + 1};
    memcpy(f.bytes, text, n);
    f.bytes[n] = '\n', f.bytes[n + 1] = '\0';
    return f;
}

/* j (consumed) as the indented text of the file named `name`. */
static FileBytes json_bytes(json_t *j, const char *name) {
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    KV_CHECK(s != NULL, "cannot serialise %s", name);
    FileBytes f = text_bytes(s);
    free(s);
    json_decref(j);
    return f;
}

static int bytes_have_sha(const FileBytes *f, const char *want) {
    Sha256 *h = sha256_new();
    sha256_update(h, f->bytes, (size_t)f->n);
    char hex[65];
    sha256_finish(h, hex);
    return strcmp(hex, want) == 0;
}

/* tokenizer.json at path, when it holds exactly the data's bytes, with its
 * companions when it is named tokenizer.json (they belong to it). */
static int take_tokenizer_file(FinalModel *fm, const char *path, const char *sha) {
    if (file_size(path) < 0) return 0;
    FileBytes t = read_bytes(path);
    if (!bytes_have_sha(&t, sha)) {
        free(t.bytes);
        return 0;
    }
    fm->tok[0] = t;
    fm->tokenizer_from = xstrdup(path);
    const char *slash = strrchr(path, '/');
    if (strcmp(slash ? slash + 1 : path, "tokenizer.json") != 0) return 1;
    char src[4300];
    for (int i = 1; i < N_TOKENIZER_FILES; i++) {
        path_fmt(src, sizeof src, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, TOKENIZER_FILES[i]);
        if (file_size(src) >= 0) fm->tok[i] = read_bytes(src);
    }
    return 1;
}

/* A GGUF model's tokenizer files as gguf_import writes them. */
static int take_gguf_tokenizer(FinalModel *fm, const char *model, const char *sha) {
    char *json = NULL, *cfg = NULL;
    int found = 0;
    if (gguf_read_tokenizer(model, &json, &cfg) == 0) {
        FileBytes t = text_bytes(json);
        if ((found = bytes_have_sha(&t, sha))) {
            fm->tok[0] = t, fm->tok[1] = text_bytes(cfg);
            fm->tokenizer_from = xstrdup(model);
        } else {
            free(t.bytes);
        }
    }
    free(json), free(cfg);
    return found;
}

/* transformers' fallback without a tokenizer_config.json is the class that
 * config.json's model_type implies (a Llama one, with its own BOS rules):
 * this names the fast tokenizer that reads tokenizer.json as it is. */
static FileBytes plain_tokenizer_config(const DecoderConfig *cfg) {
    json_t *j = json_pack("{s:s,s:b,s:I}", "tokenizer_class", "PreTrainedTokenizerFast", "clean_up_tokenization_spaces",
                          0, "model_max_length", (json_int_t)cfg->max_position_embeddings);
    return json_bytes(j, "tokenizer_config.json");
}

/* The tokenizer whose ids the model is trained on: the data's manifest
 * gives the SHA-256 of the tokenizer.json prepare used, and the first file
 * with exactly those bytes is taken: the model directory's, the GGUF
 * model's own, or the one at the path prepare recorded. */
static void find_tokenizer(FinalModel *fm, const TrainConfig *c, const DecoderConfig *cfg) {
    char mpath[4200];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", c->data);
    json_error_t err;
    json_t *m = json_load_regular(mpath, 0, &err);
    KV_CHECK(m != NULL, "'%s': %s (line %d)", mpath, err.text, err.line);
    const json_t *tok = json_object_get(m, "tokenizer");
    const char *sha = json_string_value(json_object_get(tok, "sha256"));
    const char *recorded = json_string_value(json_object_get(tok, "path"));
    char cand[4200];
    if (json_object_get(m, "synthetic")) {
        fprintf(stderr,
                "kvcpt train: the final model will have no tokenizer: the data '%s' is synthetic (kvcpt "
                "prepare --synthetic), its ids are no tokenizer's\n",
                c->data);
    } else if (!sha) {
        fprintf(stderr, "kvcpt train: the final model will have no tokenizer: the data's manifest '%s' names none\n",
                mpath);
    } else {
        int found = 0;
        if (model_source_is_gguf(c->model)) found = take_gguf_tokenizer(fm, c->model, sha);
        else if (is_dir(c->model)) {
            path_fmt(cand, sizeof cand, "%s/tokenizer.json", c->model);
            found = take_tokenizer_file(fm, cand, sha);
        }
        if (!found && recorded) found = take_tokenizer_file(fm, recorded, sha);
        if (found && !fm->tok[1].bytes) fm->tok[1] = plain_tokenizer_config(cfg);
        if (found)
            fprintf(stderr, "kvcpt train: the final model's tokenizer: %s (the data's, sha256 %.16s...)\n",
                    fm->tokenizer_from, sha);
        else
            warnf("the final model will have NO tokenizer: the data '%s' was prepared with the tokenizer '%s' "
                  "(sha256 %.16s...), and neither that file nor the model's own tokenizer has those bytes now; copy "
                  "the tokenizer.json the data was prepared with (and its tokenizer_config.json) into %s after the "
                  "run, or put it back and start again",
                  c->data, recorded ? recorded : "?", sha, fm->dir);
    }
    json_decref(m);
}

/* The source model's generation settings when it has them; else what
 * transformers derives from a config (its BOS and EOS ids). */
static FileBytes generation_config(const char *model, const DecoderConfig *cfg) {
    char src[4200];
    if (is_dir(model)) {
        path_fmt(src, sizeof src, "%s/generation_config.json", model);
        if (file_size(src) >= 0) return read_bytes(src);
    }
    json_t *g = json_pack("{s:b}", "_from_model_config", 1);
    if (cfg->bos_token_id >= 0) json_object_set_new(g, "bos_token_id", json_integer(cfg->bos_token_id));
    if (cfg->n_eos == 1) json_object_set_new(g, "eos_token_id", json_integer(cfg->eos_token_ids[0]));
    if (cfg->n_eos > 1) {
        json_t *a = json_array();
        for (int i = 0; i < cfg->n_eos; i++) json_array_append_new(a, json_integer(cfg->eos_token_ids[i]));
        json_object_set_new(g, "eos_token_id", a);
    }
    return json_bytes(g, "generation_config.json");
}

/* The source's own config.json (every field it carries kept) when the model
 * came from one; a preset's or a GGUF file's as kvcpt writes it. */
static char *config_text(const char *model, const DecoderConfig *cfg) {
    char *base;
    if (model_source_is_gguf(model) || config_is_preset(model)) {
        base = config_to_json(cfg);
    } else {
        char path[4200];
        if (is_dir(model)) path_fmt(path, sizeof path, "%s/config.json", model);
        else path_fmt(path, sizeof path, "%s", model);
        base = read_text_file(path, NULL);
    }
    char *out = config_json_with_dtype(base, KV_F32);
    free(base);
    return out;
}

FinalModel *final_model_prepare(const TrainConfig *c, const DecoderConfig *cfg) {
    FinalModel *fm = xcalloc(1, sizeof *fm);
    path_fmt(fm->dir, sizeof fm->dir, "%s/model", c->out);
    KV_CHECK(byte_size_parse(c->model_shard_size, &fm->shard_bytes) == 0,
             "config: 'model_shard_size' '%s' is not a size", c->model_shard_size);
    fm->config = config_text(c->model, cfg);
    fm->generation = generation_config(c->model, cfg);
    find_tokenizer(fm, c, cfg);
    return fm;
}

static void remove_if_present(const char *dir, const char *name) {
    char p[4300];
    path_fmt(p, sizeof p, "%s/%s", dir, name);
    if (unlink(p) != 0 && errno != ENOENT) die("cannot remove '%s': %s", p, strerror(errno));
}

void final_model_write(const FinalModel *fm, const ParamLayout *pl, const float *params) {
    double t0 = now_seconds();
    make_dirs(fm->dir);
    remove_if_present(fm->dir, "config.json"); /* the mark of a complete directory goes first, comes back last */
    int shards = model_file_save_hf_weights(fm->dir, pl, params, KV_F32, fm->shard_bytes);
    write_file_atomic(fm->dir, "generation_config.json", fm->generation.bytes, fm->generation.n);
    for (int i = 0; i < N_TOKENIZER_FILES; i++) {
        remove_if_present(fm->dir, TOKENIZER_FILES[i]);
        if (fm->tok[i].bytes) write_file_atomic(fm->dir, TOKENIZER_FILES[i], fm->tok[i].bytes, fm->tok[i].n);
    }
    write_text_file_atomic(fm->dir, "config.json", fm->config);
    fprintf(stderr,
            "kvcpt train: final model written to %s in %.1f s (Hugging Face, fp32 safetensors, %d file%s, "
            "%.1f MB, %s)\n",
            fm->dir, now_seconds() - t0, shards, shards == 1 ? "" : "s", (double)pl->total * 4.0 / 1e6,
            fm->tokenizer_from ? "with the data's tokenizer" : "no tokenizer");
}

void final_model_free(FinalModel *fm) {
    if (!fm) return;
    free(fm->config), free(fm->generation.bytes), free(fm->tokenizer_from);
    for (int i = 0; i < N_TOKENIZER_FILES; i++) free(fm->tok[i].bytes);
    free(fm);
}
