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

/* The tokenizer whose ids the model was trained on: the data's manifest
 * gives the SHA-256 of the tokenizer.json prepare used, and a file (or a
 * GGUF model's generated tokenizer) with exactly those bytes is taken. */
typedef enum { TOK_FOUND, TOK_SYNTHETIC, TOK_UNNAMED, TOK_NOT_FOUND } TokenizerFind;

typedef struct {
    TokenizerFind find;
    char path[4200];            /* a tokenizer.json with the data's bytes, or "" */
    char *gguf_json, *gguf_cfg; /* or the GGUF model's own, as gguf_import writes them */
    char *recorded, sha[65];    /* TOK_NOT_FOUND: what the manifest names */
} TokenizerSource;

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode); /* a link to a model directory counts */
}

static int file_has_sha(const char *path, const char *want) {
    if (file_size(path) < 0) return 0;
    char hex[65];
    sha256_file(path, hex);
    return strcmp(hex, want) == 0;
}

/* The bytes write_text_file_atomic writes for text: it and a line break. */
static int text_has_sha(const char *text, const char *want) {
    Sha256 *h = sha256_new();
    sha256_update(h, text, strlen(text));
    sha256_update(h, "\n", 1);
    char hex[65];
    sha256_finish(h, hex);
    return strcmp(hex, want) == 0;
}

static void find_in_gguf(TokenizerSource *ts, const char *model, const char *sha) {
    char *json = NULL, *cfg = NULL;
    if (gguf_read_tokenizer(model, &json, &cfg) == 0 && text_has_sha(json, sha)) {
        ts->gguf_json = json, ts->gguf_cfg = cfg;
        return;
    }
    free(json), free(cfg);
}

static void find_tokenizer(TokenizerSource *ts, const TrainConfig *c) {
    memset(ts, 0, sizeof *ts);
    char mpath[4200];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", c->data);
    json_error_t err;
    json_t *m = json_load_regular(mpath, 0, &err);
    KV_CHECK(m != NULL, "'%s': %s (line %d)", mpath, err.text, err.line);
    const json_t *tok = json_object_get(m, "tokenizer");
    const char *sha = json_string_value(json_object_get(tok, "sha256"));
    const char *recorded = json_string_value(json_object_get(tok, "path"));
    ts->find = json_object_get(m, "synthetic") ? TOK_SYNTHETIC : !sha ? TOK_UNNAMED : TOK_NOT_FOUND;
    if (ts->find == TOK_NOT_FOUND) {
        if (model_source_is_gguf(c->model)) {
            find_in_gguf(ts, c->model, sha);
        } else if (is_dir(c->model)) {
            path_fmt(ts->path, sizeof ts->path, "%s/tokenizer.json", c->model);
            if (!file_has_sha(ts->path, sha)) ts->path[0] = '\0';
        }
        if (!ts->gguf_json && !ts->path[0] && recorded && strlen(recorded) < sizeof ts->path &&
            file_has_sha(recorded, sha))
            snprintf(ts->path, sizeof ts->path, "%s", recorded);
        if (ts->gguf_json || ts->path[0]) ts->find = TOK_FOUND;
        ts->recorded = xstrdup(recorded ? recorded : "?");
        snprintf(ts->sha, sizeof ts->sha, "%.64s", sha);
    }
    json_decref(m);
}

static void remove_if_present(const char *dir, const char *name) {
    char p[4200];
    path_fmt(p, sizeof p, "%s/%s", dir, name);
    if (unlink(p) != 0 && errno != ENOENT) die("cannot remove '%s': %s", p, strerror(errno));
}

/* transformers' fallback without a tokenizer_config.json is the class that
 * config.json's model_type implies (a Llama one, with its own BOS rules):
 * this names the fast tokenizer that reads tokenizer.json as it is. */
static void write_plain_tokenizer_config(const char *dir, const LlamaConfig *cfg) {
    json_t *j = json_pack("{s:s,s:b,s:I}", "tokenizer_class", "PreTrainedTokenizerFast",
                          "clean_up_tokenization_spaces", 0, "model_max_length",
                          (json_int_t)cfg->max_position_embeddings);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    KV_CHECK(s != NULL, "cannot serialise tokenizer_config.json");
    write_text_file_atomic(dir, "tokenizer_config.json", s);
    free(s);
    json_decref(j);
}

/* The tokenizer files; their companions (tokenizer_config.json,
 * special_tokens_map.json) come from beside a file named tokenizer.json. */
static void write_tokenizer(const char *dir, const TokenizerSource *ts, const LlamaConfig *cfg) {
    for (int i = 0; i < N_TOKENIZER_FILES; i++) remove_if_present(dir, TOKENIZER_FILES[i]);
    if (ts->gguf_json) {
        write_text_file_atomic(dir, "tokenizer.json", ts->gguf_json);
        write_text_file_atomic(dir, "tokenizer_config.json", ts->gguf_cfg);
        return;
    }
    if (!ts->path[0]) return;
    copy_file_atomic(ts->path, dir, "tokenizer.json");
    const char *slash = strrchr(ts->path, '/');
    int has_config = 0;
    if (strcmp(slash ? slash + 1 : ts->path, "tokenizer.json") == 0) {
        char src_dir[4200], src[4300];
        snprintf(src_dir, sizeof src_dir, "%.*s", slash ? (int)(slash - ts->path) : 1, slash ? ts->path : ".");
        for (int i = 1; i < N_TOKENIZER_FILES; i++) {
            path_fmt(src, sizeof src, "%s/%s", src_dir, TOKENIZER_FILES[i]);
            if (file_size(src) < 0) continue;
            copy_file_atomic(src, dir, TOKENIZER_FILES[i]);
            has_config |= i == 1;
        }
    }
    if (!has_config) write_plain_tokenizer_config(dir, cfg);
}

/* The source model's generation settings when it has them; else what
 * transformers derives from a config (its BOS and EOS ids). */
static void write_generation_config(const char *dir, const char *model, const LlamaConfig *cfg) {
    char src[4200];
    if (is_dir(model)) {
        path_fmt(src, sizeof src, "%s/generation_config.json", model);
        if (file_size(src) >= 0) {
            copy_file_atomic(src, dir, "generation_config.json");
            return;
        }
    }
    json_t *g = json_pack("{s:b}", "_from_model_config", 1);
    if (cfg->bos_token_id >= 0) json_object_set_new(g, "bos_token_id", json_integer(cfg->bos_token_id));
    if (cfg->n_eos == 1) json_object_set_new(g, "eos_token_id", json_integer(cfg->eos_token_ids[0]));
    if (cfg->n_eos > 1) {
        json_t *a = json_array();
        for (int i = 0; i < cfg->n_eos; i++) json_array_append_new(a, json_integer(cfg->eos_token_ids[i]));
        json_object_set_new(g, "eos_token_id", a);
    }
    char *s = json_dumps(g, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    KV_CHECK(s != NULL, "cannot serialise generation_config.json");
    write_text_file_atomic(dir, "generation_config.json", s);
    free(s);
    json_decref(g);
}

/* The source's own config.json (every field it carries kept) when the model
 * came from one; a preset's or a GGUF file's as kvcpt writes it. */
static char *config_text(const char *model, const LlamaConfig *cfg) {
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

void final_model_write(const TrainConfig *c, const LlamaConfig *cfg, const ParamLayout *pl, const float *params) {
    char dir[4200];
    path_fmt(dir, sizeof dir, "%s/model", c->out);
    int64_t shard_bytes;
    KV_CHECK(byte_size_parse(c->model_shard_size, &shard_bytes) == 0, "config: 'model_shard_size' '%s' is not a size",
             c->model_shard_size);
    TokenizerSource ts;
    find_tokenizer(&ts, c);
    char *config = config_text(c->model, cfg);
    double t0 = now_seconds();
    make_dirs(dir);
    remove_if_present(dir, "config.json"); /* the mark of a complete directory goes first, comes back last */
    int shards = model_file_save_hf_weights(dir, pl, params, KV_F32, shard_bytes);
    write_generation_config(dir, c->model, cfg);
    write_tokenizer(dir, &ts, cfg);
    write_text_file_atomic(dir, "config.json", config);
    fprintf(stderr, "kvcpt train: final model written to %s in %.1f s (Hugging Face, fp32 safetensors, %d file%s, "
            "%.1f MB); ", dir, now_seconds() - t0, shards, shards == 1 ? "" : "s", (double)pl->total * 4.0 / 1e6);
    if (ts.find == TOK_FOUND) fprintf(stderr, "tokenizer from %s\n", ts.gguf_json ? c->model : ts.path);
    else if (ts.find == TOK_SYNTHETIC)
        fprintf(stderr, "no tokenizer: the data '%s' is synthetic (kvcpt prepare --synthetic), its ids are no "
                "tokenizer's\n", c->data);
    else if (ts.find == TOK_UNNAMED) fprintf(stderr, "no tokenizer: the data's manifest names none\n");
    else
        fprintf(stderr, "NO tokenizer: the data '%s' was prepared with the tokenizer '%s' (sha256 %.16s...), and "
                "neither that file nor the model's own tokenizer has those bytes now; copy the tokenizer.json the data "
                "was prepared with (and its tokenizer_config.json) into %s\n", c->data, ts.recorded, ts.sha, dir);
    free(config), free(ts.gguf_json), free(ts.gguf_cfg), free(ts.recorded);
}
