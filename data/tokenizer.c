#include "tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json_file.h"
#include "../common/util.h"
#include "added_tokens.h"
#include "bpe_merge.h"
#include "bpe_tables.h"
#include "byte_level.h"
#include "metaspace.h"
#include "normalizer.h"
#include "piece_cache.h"
#include "pretokenize.h"
#include "sha256.h"
#include "special_tokens.h"
#include "token_decoder.h"
#include "tokenizer_options.h"
#include "utf8.h"

struct Tokenizer {
    /* model.vocab, ids 0..n_model-1: byte-level files as raw bytes (entries
     * outside the byte-level alphabet: empty), text vocabularies
     * (SentencePiece style) as their UTF-8 strings */
    VocabMap vocab;
    /* every id 0..n_ids-1 (holes: empty): byte-level files, its bytes (added
     * tokens: their names); text vocabularies, the token string the decoder
     * steps start from */
    VocabMap decoded;
    PairMap merges;
    AddedSet added_raw;  /* added tokens with normalized = false: matched first, on the text itself */
    AddedSet added_norm; /* normalized = true: matched next, in what is left (no normalizer: the same text) */
    int32_t byte_id[256]; /* byte-level: -1 when the byte has no token (SmolLM2 lacks a few control bytes) */
    int32_t fallback_id[256]; /* text vocabularies with byte_fallback: the id of "<0xNN>", or -1 */
    int byte_level, byte_fallback;
    Normalizer normalizer;
    int has_metaspace;
    Metaspace metaspace;
    TokDecoder decoder;
    int32_t n_model, n_ids, bos_id;
    int32_t unk_id;       /* model.unk_token's id, or -1: bytes without a token are then dropped */
    int fuse_unk, missing_bytes;
    int ignore_merges, llama31_names;
    Pretokenizer *pre;
    char sha256[65];
};

struct TokEncoder {
    const Tokenizer *t;
    PretokenCursor *cursor;
    BpeScratch bpe;
    PieceCache cache;
    uint32_t *piece_ids;
    int32_t *symbols;
    int64_t piece_cap;
    NormScratch norm;
    MetaspaceScratch ms;
    TokenBuf *out; /* where the pre-tokenizer's pieces go */
    const char *text; /* of the running tok_encode, for error offsets */
    const char *norm_text; /* the normalized piece being pre-tokenized, or NULL when it is text itself */
    char err[400];
};

char *tokenizer_default_path(void) {
    const char *env = getenv("KVCPT_TOKENIZER");
    if (env && *env) return xstrdup(env);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            /* the binary sits in the repository root (./kvcpt) or below it (build/tests/...) */
            const char *ups[] = {"", "/..", "/../.."};
            for (int i = 0; i < 3; i++) {
                char cand[8192];
                path_fmt(cand, sizeof cand, "%s%s/%s", exe, ups[i], TOKENIZER_DEFAULT_REL_PATH);
                if (access(cand, R_OK) == 0) return xstrdup(cand);
            }
        }
    }
    return xstrdup(TOKENIZER_DEFAULT_REL_PATH);
}

static const json_t *member(const char *path, const json_t *obj, const char *key, json_type type, const char *where) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_typeof(v) != type)
        die("tokenizer '%s': %s.%s is missing or has the wrong JSON type", path, where, key);
    return v;
}

/* Is `key` the content of one of added_tokens? (A vocabulary entry outside
 * the byte-level alphabet is only acceptable as an added token's: the BPE
 * can never produce it, matching in the text does.) */
static int is_added_content(const json_t *added, const char *key) {
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *c = json_object_get(json_array_get(added, i), "content");
        if (json_is_string(c) && strcmp(json_string_value(c), key) == 0) return 1;
    }
    return 0;
}

static void load_vocab(Tokenizer *t, const char *path, const json_t *vocab, const json_t *added) {
    /* fewer than 256 is a vocabulary lacking some bytes: those are dropped
     * (or become model.unk_token), as in Hugging Face */
    size_t n = json_object_size(vocab);
    KV_CHECK(n >= 1 && n < (size_t)INT32_MAX / 2, "tokenizer '%s': model.vocab has %zu entries, expected 1 to 2^30",
             path, n);
    t->n_model = (int32_t)n;
    VocabMap *v = &t->vocab;
    v->n_ids = t->n_model;
    int64_t *len = xcalloc(n, sizeof(int64_t));
    uint8_t **bytes = xcalloc(n, sizeof(uint8_t *));
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= (json_int_t)n || bytes[id])
            die("tokenizer '%s': model.vocab[\"%s\"]: id must be a unique integer in [0, %zu)", path, key, n);
        size_t klen = strlen(key);
        bytes[id] = xmalloc(klen + 1);
        if (!t->byte_level) {
            memcpy(bytes[id], key, klen);
            len[id] = (int64_t)klen;
            continue;
        }
        len[id] = byte_level_to_bytes(key, klen, bytes[id]);
        if (len[id] <= 0) {
            if (!is_added_content(added, key))
                die("tokenizer '%s': model.vocab[\"%s\"] is not in the byte-level alphabet", path, key);
            len[id] = 0; /* not indexed; decodes as its added token */
        }
    }
    v->offset = xmalloc((n + 1) * sizeof(int64_t));
    v->offset[0] = 0;
    for (size_t i = 0; i < n; i++) v->offset[i + 1] = v->offset[i] + len[i];
    v->blob = xmalloc((size_t)v->offset[n] + 1);
    for (size_t i = 0; i < n; i++) {
        memcpy(v->blob + v->offset[i], bytes[i], (size_t)len[i]);
        free(bytes[i]);
    }
    free(bytes);
    free(len);
    vocab_map_index(v);
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b); /* Hugging Face's format!("<{:#04X}>") */
        t->byte_id[b] = t->byte_level ? vocab_map_find(v, &byte, 1) : -1;
        t->missing_bytes += t->byte_level && t->byte_id[b] < 0;
        t->fallback_id[b] = t->byte_fallback ? vocab_map_find(v, (const uint8_t *)hex, 6) : -1;
    }
}

/* model.unk_token: what a byte without a token becomes (fused into one per
 * run with fuse_unk); without one, Hugging Face drops such bytes. */
static void load_unk(Tokenizer *t, const char *path, const json_t *model, const json_t *vocab) {
    const json_t *unk = json_object_get(model, "unk_token");
    t->unk_id = -1;
    if (unk == NULL || json_is_null(unk)) return;
    const json_t *id = json_is_string(unk) ? json_object_get(vocab, json_string_value(unk)) : NULL;
    if (!json_is_integer(id)) die("tokenizer '%s': model.unk_token is not a token of model.vocab", path);
    t->unk_id = (int32_t)json_integer_value(id);
    const json_t *fuse = json_object_get(model, "fuse_unk");
    if (fuse && !json_is_boolean(fuse)) die("tokenizer '%s': model.fuse_unk is not true or false", path);
    t->fuse_unk = json_is_true(fuse);
}

/* One merge "A B" (or ["A", "B"] in newer files) -> ids of A, B and A+B. */
static void parse_merge(Tokenizer *t, const char *path, const json_t *m, size_t rank) {
    char a[1024], b[1024];
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ') || (size_t)(sp - s) >= sizeof a || strlen(sp + 1) >= sizeof b)
            die("tokenizer '%s': model.merges[%zu] is not \"LEFT RIGHT\"", path, rank);
        memcpy(a, s, (size_t)(sp - s));
        a[sp - s] = '\0';
        strcpy(b, sp + 1);
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1)) && strlen(json_string_value(json_array_get(m, 0))) < sizeof a &&
               strlen(json_string_value(json_array_get(m, 1))) < sizeof b) {
        strcpy(a, json_string_value(json_array_get(m, 0)));
        strcpy(b, json_string_value(json_array_get(m, 1)));
    } else {
        die("tokenizer '%s': model.merges[%zu] is neither \"LEFT RIGHT\" nor [LEFT, RIGHT]", path, rank);
    }
    uint8_t ab[2048];
    int64_t na, nb;
    if (t->byte_level) {
        na = byte_level_to_bytes(a, strlen(a), ab);
        nb = na > 0 ? byte_level_to_bytes(b, strlen(b), ab + na) : -1;
    } else {
        na = (int64_t)strlen(a);
        nb = (int64_t)strlen(b);
        memcpy(ab, a, (size_t)na);
        memcpy(ab + na, b, (size_t)nb);
    }
    if (t->byte_level && (na <= 0 || nb <= 0))
        die("tokenizer '%s': model.merges[%zu] is not in the byte-level alphabet", path, rank);
    int32_t left = vocab_map_find(&t->vocab, ab, (size_t)na), right = vocab_map_find(&t->vocab, ab + na, (size_t)nb);
    int32_t merged = vocab_map_find(&t->vocab, ab, (size_t)(na + nb));
    if (left < 0 || right < 0 || merged < 0)
        die("tokenizer '%s': model.merges[%zu] (\"%s\" + \"%s\") names a token missing from model.vocab", path, rank, a,
            b);
    if (!pair_map_insert(&t->merges, left, right, (int32_t)rank, merged))
        die("tokenizer '%s': model.merges[%zu] repeats an earlier merge", path, rank);
}

static void load_merges(Tokenizer *t, const char *path, const json_t *merges) {
    size_t n = json_array_size(merges);
    KV_CHECK(n > 0 && n < (size_t)INT32_MAX, "tokenizer '%s': model.merges has %zu entries", path, n);
    pair_map_init(&t->merges, (int64_t)n);
    /* Hugging Face reads the list as all strings or all pairs, and refuses
     * a file that mixes the two */
    int strings = json_is_string(json_array_get(merges, 0));
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        if (i > 0 && json_is_string(m) != strings && (json_is_string(m) || json_is_array(m)))
            die("tokenizer '%s': model.merges[%zu] is %s but model.merges[0] is %s; the merges must all be one form",
                path, i, strings ? "a [LEFT, RIGHT] pair" : "a \"LEFT RIGHT\" string",
                strings ? "a \"LEFT RIGHT\" string" : "a [LEFT, RIGHT] pair");
        parse_merge(t, path, m, i);
    }
}

/* Llama 3's file: 128000 model tokens and 256 added ones right after. Its
 * added tokens carry Llama 3.0's names; 3.1's are used (special_tokens.h). */
static int is_llama3_layout(const Tokenizer *t, const int32_t *id, size_t n) {
    if (t->n_model != LLAMA3_FIRST_SPECIAL_ID || n != LLAMA3_NUM_SPECIAL) return 0;
    for (size_t i = 0; i < n; i++)
        if (id[i] != LLAMA3_FIRST_SPECIAL_ID + (int32_t)i) return 0;
    return 1;
}

/* Refuses the added-token options that change matching and are not
 * implemented (stripping whitespace around, whole words only). */
static void check_added_flags(const char *path, const json_t *a, size_t i) {
    static const char *const must_be_false[] = {"single_word", "lstrip", "rstrip"};
    for (size_t k = 0; k < sizeof must_be_false / sizeof must_be_false[0]; k++) {
        const json_t *v = json_object_get(a, must_be_false[k]);
        if (v && !json_is_false(v))
            die("tokenizer '%s': added_tokens[%zu].%s is not false; only false is supported", path, i,
                must_be_false[k]);
    }
}

/* The bytes Hugging Face's decode gives an added token: its ByteLevel
 * decoder maps the content through the byte-level alphabet when every
 * character is in it ("\u0120x" is " x"), and leaves it as it is otherwise.
 * A text vocabulary keeps the content, which the decoder steps then see.
 * out: capacity >= len. */
static size_t added_decoded(const Tokenizer *t, const char *content, size_t len, uint8_t *out) {
    int64_t n = t->byte_level ? byte_level_to_bytes(content, len, out) : -1;
    if (n >= 0) return (size_t)n;
    memcpy(out, content, len);
    return len;
}

/* added_tokens, inside model.vocab (SmolLM2's specials at 0..16) or after
 * it (Llama 3's 256), each at the id Hugging Face tokenizers gives it:
 * reading a file, it adds the whole list at once
 * (AddedVocabulary::add_tokens) and does not use the ids listed. A token
 * whose content is a key of model.vocab takes that key's id; every other one
 * takes the next id after the vocabulary, in list order. A listed id that
 * differs is warned about. */
static void load_added(Tokenizer *t, const char *path, const json_t *vocab, const json_t *added) {
    size_t n = json_array_size(added);
    char **content = xcalloc(n + 1, sizeof(char *));
    size_t *len = xcalloc(n + 1, sizeof(size_t));
    int32_t *id = xcalloc(n + 1, sizeof(int32_t));
    uint8_t *special = xcalloc(n + 1, 1), *normalized = xcalloc(n + 1, 1);
    int32_t next = t->n_model;
    size_t moved = 0, first_moved = 0;
    json_int_t first_listed = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(added, i), *jid = json_object_get(a, "id"), *c = json_object_get(a, "content");
        if (!json_is_integer(jid) || json_integer_value(jid) < 0 || json_integer_value(jid) >= INT32_MAX / 2)
            die("tokenizer '%s': added_tokens[%zu].id is not a token id", path, i);
        if (!json_is_string(c) || json_string_length(c) == 0 || strlen(json_string_value(c)) != json_string_length(c))
            die("tokenizer '%s': added_tokens[%zu].content is not a non-empty string without NUL", path, i);
        check_added_flags(path, a, i);
        content[i] = xstrdup(json_string_value(c));
        len[i] = strlen(content[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(content[j], content[i]) == 0)
                die("tokenizer '%s': added_tokens[%zu] repeats the content of added_tokens[%zu]", path, i, j);
        const json_t *in_vocab = json_object_get(vocab, content[i]);
        if (in_vocab) id[i] = (int32_t)json_integer_value(in_vocab);
        else if (next == INT32_MAX / 2) die("tokenizer '%s': added_tokens[%zu]: too many tokens", path, i);
        else id[i] = next++;
        if (json_integer_value(jid) != id[i] && moved++ == 0) {
            first_moved = i;
            first_listed = json_integer_value(jid);
        }
        special[i] = json_is_true(json_object_get(a, "special"));
        /* Hugging Face's default: special tokens match the raw text, others
         * the normalized one */
        const json_t *norm = json_object_get(a, "normalized");
        normalized[i] = norm ? json_is_true(norm) : !special[i];
    }
    if (moved)
        warnf("tokenizer '%s': added_tokens[%zu] (\"%s\") lists id %lld but takes id %d, as in Hugging Face tokenizers "
              "(a token of model.vocab keeps that id, any other takes the next one after the vocabulary)%s",
              path, first_moved, content[first_moved], (long long)first_listed, id[first_moved],
              moved > 1 ? "; other added tokens move likewise" : "");
    t->n_ids = next;
    t->llama31_names = is_llama3_layout(t, id, n);
    for (size_t i = 0; t->llama31_names && i < n; i++) {
        char name[64];
        int k = llama31_special_name(id[i], name, sizeof name);
        KV_CHECK(k > 0, "special token name table is broken at %d", id[i]);
        free(content[i]);
        content[i] = xstrdup(name);
        len[i] = strlen(name);
    }
    /* split by normalized: two sets, each matched as Hugging Face does; the
     * normalized ones are looked for in normalized text, so they are
     * normalized too */
    NormScratch nw = {0};
    for (int pass = 0; pass < 2; pass++) {
        char **pc = xcalloc(n + 1, sizeof(char *));
        size_t *pl = xcalloc(n + 1, sizeof(size_t));
        int32_t *pid = xcalloc(n + 1, sizeof(int32_t));
        uint8_t *ps = xcalloc(n + 1, 1);
        int m = 0;
        for (size_t i = 0; i < n; i++) {
            if (normalized[i] != pass) continue;
            const char *c = pass ? normalize(&t->normalizer, &nw, content[i], len[i], &pl[m]) : content[i];
            if (!pass) pl[m] = len[i];
            for (int j = 0; j < m; j++)
                if (pl[j] == pl[m] && memcmp(pc[j], c, pl[m]) == 0)
                    die("tokenizer '%s': added_tokens[%zu] (\"%s\") is after the normalizer the same as another "
                        "added token",
                        path, i, content[i]);
            pc[m] = xmalloc(pl[m] + 1);
            memcpy(pc[m], c, pl[m]);
            pid[m] = id[i];
            ps[m++] = special[i];
        }
        added_set_build(pass ? &t->added_norm : &t->added_raw, (const char *const *)pc, pl, pid, ps, m);
        for (int j = 0; j < m; j++) free(pc[j]);
        free(pc);
        free(pl);
        free(pid);
        free(ps);
    }
    norm_scratch_free(&nw);
    /* decoding table: model tokens' bytes, overridden by added tokens' */
    VocabMap *d = &t->decoded;
    d->n_ids = t->n_ids;
    int32_t *added_of = xmalloc(sizeof(int32_t) * (size_t)t->n_ids);
    for (int32_t k = 0; k < t->n_ids; k++) added_of[k] = -1;
    for (size_t i = 0; i < n; i++) added_of[id[i]] = (int32_t)i;
    uint8_t **dec = xcalloc(n + 1, sizeof(uint8_t *));
    size_t *dec_len = xcalloc(n + 1, sizeof(size_t));
    for (size_t i = 0; i < n; i++) {
        dec[i] = xmalloc(len[i]);
        dec_len[i] = added_decoded(t, content[i], len[i], dec[i]);
    }
    d->offset = xmalloc(sizeof(int64_t) * ((size_t)t->n_ids + 1));
    d->offset[0] = 0;
    for (int32_t k = 0; k < t->n_ids; k++) {
        int64_t l = added_of[k] >= 0 ? (int64_t)dec_len[added_of[k]]
                    : k < t->n_model ? t->vocab.offset[k + 1] - t->vocab.offset[k]
                                     : 0;
        d->offset[k + 1] = d->offset[k] + l;
    }
    d->blob = xmalloc((size_t)d->offset[t->n_ids] + 1);
    for (int32_t k = 0; k < t->n_ids; k++) {
        size_t l = (size_t)(d->offset[k + 1] - d->offset[k]);
        if (added_of[k] >= 0) memcpy(d->blob + d->offset[k], dec[added_of[k]], l);
        else if (l > 0) memcpy(d->blob + d->offset[k], t->vocab.blob + t->vocab.offset[k], l); /* k < n_model */
    }
    for (size_t i = 0; i < n; i++) free(dec[i]);
    free(dec);
    free(dec_len);
    free(added_of);
    for (size_t i = 0; i < n; i++) free(content[i]);
    free(content);
    free(len);
    free(id);
    free(special);
    free(normalized);
}

/* The tokenizer of a parsed tokenizer.json (path: for messages), less its
 * fingerprint. */
static Tokenizer *tokenizer_build(const char *path, json_t *root) {
    TokenizerOptions opt;
    tokenizer_options_parse(path, root, &opt);
    Tokenizer *t = xcalloc(1, sizeof *t);
    const json_t *model = member(path, root, "model", JSON_OBJECT, "");
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) die("tokenizer '%s': added_tokens is not an array", path);
    json_t *none = added ? NULL : json_array(); /* absent: no added tokens */
    if (!added) added = none;
    t->byte_level = opt.byte_level;
    t->byte_fallback = opt.byte_fallback;
    /* the tokenizer takes these over from the options */
    t->normalizer = opt.normalizer;
    t->has_metaspace = opt.has_metaspace;
    t->metaspace = opt.metaspace;
    t->decoder = opt.decoder;
    memset(&opt.normalizer, 0, sizeof opt.normalizer);
    memset(&opt.decoder, 0, sizeof opt.decoder);
    load_vocab(t, path, member(path, model, "vocab", JSON_OBJECT, "model"), added);
    load_merges(t, path, member(path, model, "merges", JSON_ARRAY, "model"));
    load_unk(t, path, model, json_object_get(model, "vocab"));
    load_added(t, path, json_object_get(model, "vocab"), added);
    t->ignore_merges = opt.ignore_merges;
    t->bos_id = -1;
    if (opt.bos_token) {
        if (opt.bos_id >= t->n_ids || t->decoded.offset[opt.bos_id + 1] == t->decoded.offset[opt.bos_id])
            die("tokenizer '%s': post_processor adds \"%s\" as id %lld, which is not a token (vocabulary of %d)", path,
                opt.bos_token, (long long)opt.bos_id, t->n_ids);
        t->bos_id = (int32_t)opt.bos_id;
    }
    t->pre = pretokenizer_new();
    for (int i = 0; i < opt.n_stages; i++) {
        char msg[1024];
        if (!pretokenizer_add_stage(t->pre, opt.stage_pattern[i], msg, sizeof msg))
            die("tokenizer '%s': %s: %s", path, opt.stage_path[i], msg);
    }
    tokenizer_options_free(&opt);
    json_decref(none);
    json_decref(root);
    return t;
}

Tokenizer *tokenizer_load(const char *path) {
    if (access(path, R_OK) != 0)
        die("tokenizer '%s' is not readable; hint: pass --tokenizer PATH (the tokenizer.json of your Hugging Face "
            "checkpoint), or run 'make setup' (installs the Llama 3.1 one into third_party/tokenizers)",
            path);
    json_error_t err;
    json_t *root = json_load_regular(path, 0, &err);
    if (!root) die("tokenizer '%s': line %d column %d: %s", path, err.line, err.column, err.text);
    Tokenizer *t = tokenizer_build(path, root);
    sha256_file(path, t->sha256);
    return t;
}

Tokenizer *tokenizer_load_text(const char *origin, const char *text) {
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    if (!root) die("tokenizer '%s': line %d column %d: %s", origin, err.line, err.column, err.text);
    Tokenizer *t = tokenizer_build(origin, root);
    Sha256 *h = sha256_new();
    sha256_update(h, text, strlen(text));
    sha256_finish(h, t->sha256);
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    vocab_map_free(&t->vocab);
    vocab_map_free(&t->decoded);
    pair_map_free(&t->merges);
    added_set_free(&t->added_raw);
    added_set_free(&t->added_norm);
    pretokenizer_free(t->pre);
    normalizer_free(&t->normalizer);
    tok_decoder_free(&t->decoder);
    free(t);
}

int32_t tokenizer_vocab_size(const Tokenizer *t) { return t->n_ids; }
const char *tokenizer_sha256(const Tokenizer *t) { return t->sha256; }
int32_t tokenizer_bos_id(const Tokenizer *t) { return t->bos_id; }
int tokenizer_split_stages(const Tokenizer *t) { return pretokenizer_stages(t->pre); }
const char *tokenizer_special_names(const Tokenizer *t) { return t->llama31_names ? "llama-3.1" : "added_tokens"; }

int32_t tokenizer_special_id(const Tokenizer *t, const char *name, size_t len) {
    int k = added_set_lookup(&t->added_raw, name, len);
    if (k >= 0) return t->added_raw.id[k];
    k = added_set_lookup(&t->added_norm, name, len);
    return k >= 0 ? t->added_norm.id[k] : -1;
}

TokEncoder *tok_encoder_new(const Tokenizer *t) {
    TokEncoder *e = xcalloc(1, sizeof *e);
    e->t = t;
    e->cursor = pretoken_cursor_new(t->pre);
    piece_cache_init(&e->cache);
    return e;
}

void tok_encoder_free(TokEncoder *e) {
    if (!e) return;
    pretoken_cursor_free(e->cursor);
    norm_scratch_free(&e->norm);
    metaspace_scratch_free(&e->ms);
    bpe_scratch_free(&e->bpe);
    piece_cache_free(&e->cache);
    free(e->piece_ids);
    free(e->symbols);
    free(e);
}

static void reserve_piece(TokEncoder *e, size_t n) {
    if ((int64_t)n <= e->piece_cap) return;
    e->piece_cap = (int64_t)n;
    e->piece_ids = xrealloc(e->piece_ids, n * sizeof(uint32_t));
    e->symbols = xrealloc(e->symbols, n * sizeof(int32_t));
}

/* A piece holding bytes without a token: as Hugging Face's BPE, such a byte
 * becomes the unknown token (one per run with fuse_unk) or is dropped, and
 * the merges then run over what is left. Rare, so not memoized. */
static void encode_with_missing_bytes(TokEncoder *e, const uint8_t *s, size_t n, TokenBuf *out) {
    const Tokenizer *t = e->t;
    reserve_piece(e, n);
    int64_t m = 0;
    int prev_unk = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id < 0 && t->unk_id >= 0 && !(t->fuse_unk && prev_unk)) e->symbols[m++] = t->unk_id;
        if (id >= 0) e->symbols[m++] = id;
        prev_unk = id < 0 && t->unk_id >= 0;
    }
    int64_t k = bpe_merge_symbols(&e->bpe, &t->merges, e->symbols, m, e->piece_ids);
    for (int64_t i = 0; i < k; i++) token_buf_push(out, e->piece_ids[i]);
}

static int has_missing_byte(const Tokenizer *t, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[s[i]] < 0) return 1;
    return 0;
}

/* The starting symbols of a word of a text vocabulary (SentencePiece
 * style), as Hugging Face's BPE makes them: one per character that is a
 * token; a character that is not becomes its "<0xNN>" byte tokens
 * (byte_fallback, when all of them exist) or else the unknown token, one per
 * run with fuse_unk. A pending unknown token goes in only before the next
 * character that is a token, or at the end: byte tokens after it come first,
 * as in Hugging Face. At most one symbol per byte. */
static int64_t text_symbols(TokEncoder *e, const uint8_t *s, size_t n) {
    const Tokenizer *t = e->t;
    reserve_piece(e, n);
    int64_t m = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = utf8_decode_one(s + i, n - i, &cp);
        if (k <= 0) k = 1; /* the text was validated; never taken */
        int32_t id = vocab_map_find(&t->vocab, s + i, (size_t)k);
        if (id >= 0) {
            if (unk_pending) e->symbols[m++] = t->unk_id;
            unk_pending = 0;
            e->symbols[m++] = id;
        } else {
            int all = t->byte_fallback;
            for (int j = 0; all && j < k; j++) all = t->fallback_id[s[i + (size_t)j]] >= 0;
            if (all) {
                for (int j = 0; j < k; j++) e->symbols[m++] = t->fallback_id[s[i + (size_t)j]];
            } else if (t->unk_id >= 0) {
                if (unk_pending && !t->fuse_unk) e->symbols[m++] = t->unk_id;
                unk_pending = 1;
            }
        }
        i += (size_t)k;
    }
    if (unk_pending) e->symbols[m++] = t->unk_id;
    return m;
}

/* One pre-token: whole-vocabulary hit first when tokenizer.json sets
 * ignore_merges, then the memo, then BPE. */
static void encode_piece(TokEncoder *e, const uint8_t *s, size_t n, TokenBuf *out) {
    const Tokenizer *t = e->t;
    if (t->ignore_merges) {
        int32_t id = vocab_map_find(&t->vocab, s, n);
        if (id >= 0) {
            token_buf_push(out, (uint32_t)id);
            return;
        }
    }
    if (t->missing_bytes && has_missing_byte(t, s, n)) {
        encode_with_missing_bytes(e, s, n, out);
        return;
    }
    if (n == 1 && t->byte_level) { /* no merge applies to one byte */
        token_buf_push(out, (uint32_t)t->byte_id[s[0]]);
        return;
    }
    uint64_t h = bytes_hash(s, n);
    int64_t k;
    const uint32_t *ids = piece_cache_find(&e->cache, h, s, n, &k);
    if (!ids) {
        reserve_piece(e, n);
        if (t->byte_level) k = bpe_merge(&e->bpe, &t->merges, t->byte_id, s, n, e->piece_ids);
        else k = bpe_merge_symbols(&e->bpe, &t->merges, e->symbols, text_symbols(e, s, n), e->piece_ids);
        piece_cache_put(&e->cache, h, s, n, e->piece_ids, k);
        ids = e->piece_ids;
    }
    for (int64_t i = 0; i < k; i++) token_buf_push(out, ids[i]);
}

static void on_piece(void *ctx, const char *piece, size_t len) {
    TokEncoder *e = ctx;
    encode_piece(e, (const uint8_t *)piece, len, e->out);
}

/* at_start: text begins where the whole text does (Metaspace's "first"). */
static int encode_ordinary(TokEncoder *e, const char *text, size_t len, int at_start, TokenBuf *out) {
    e->out = out;
    if (e->t->has_metaspace) {
        metaspace_pretokenize(&e->t->metaspace, &e->ms, text, len, at_start, on_piece, e);
        return 1;
    }
    if (pretokenize(e->cursor, text, len, on_piece, e)) return 1;
    int stage;
    const char *at;
    const char *msg = pretoken_cursor_error(e->cursor, &stage, &at);
    snprintf(e->err, sizeof e->err,
             "pre-tokenizer regex (stage %d) failed searching from byte offset %lld of the %s: %s", stage,
             (long long)(at - (e->norm_text ? e->norm_text : e->text)),
             e->norm_text ? "normalized piece of text" : "text", msg);
    return 0;
}

/* Stage `pass` of Hugging Face's added-vocabulary split: 0 matches the
 * added tokens with normalized = false, 1 normalizes each piece stage 0
 * left and matches those with normalized = true in it, 2 is the
 * pre-tokenizer and BPE. A special token found while !allow_special stays
 * text (Hugging Face's encode_special_tokens): the search goes on after it
 * without splitting there. at_start: text begins the whole text. */
static int encode_pass(TokEncoder *e, int pass, const char *text, size_t len, int at_start, int allow_special,
                       TokenBuf *out) {
    if (pass == 1 && e->t->normalizer.n > 0) {
        size_t n;
        const char *norm = normalize(&e->t->normalizer, &e->norm, text, len, &n);
        e->norm_text = norm == text ? NULL : norm;
        text = norm;
        len = n;
    }
    const AddedSet *set = pass == 0 ? &e->t->added_raw : &e->t->added_norm;
    if (pass == 2 || set->n == 0 || (!allow_special && set->n == set->n_special)) {
        if (pass == 2) return encode_ordinary(e, text, len, at_start, out);
        return encode_pass(e, pass + 1, text, len, at_start, allow_special, out);
    }
    size_t pos = 0, from = 0, at;
    int k;
    while ((k = added_set_find(set, text, len, from, &at)) >= 0) {
        size_t end = at + added_set_len(set, k);
        from = end;
        if (!allow_special && set->special[k]) continue;
        if (!encode_pass(e, pass + 1, text + pos, at - pos, at_start && pos == 0, allow_special, out)) return 0;
        token_buf_push(out, (uint32_t)set->id[k]);
        pos = end;
    }
    return encode_pass(e, pass + 1, text + pos, len - pos, at_start && pos == 0, allow_special, out);
}

int tok_encode(TokEncoder *e, const char *text, size_t len, int allow_special, TokenBuf *out) {
    e->text = text;
    e->norm_text = NULL;
    e->err[0] = '\0';
    return encode_pass(e, 0, text, len, 1, allow_special, out);
}

const char *tok_encoder_error(const TokEncoder *e) { return e->err; }

int64_t tok_decode(const Tokenizer *t, const uint32_t *ids, int64_t n, ByteBuf *out) {
    const VocabMap *d = &t->decoded;
    for (int64_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= (uint32_t)t->n_ids || d->offset[id + 1] == d->offset[id]) return i;
        if (t->byte_level) byte_buf_append(out, d->blob + d->offset[id], (size_t)(d->offset[id + 1] - d->offset[id]));
    }
    if (t->byte_level || n == 0) return -1;
    /* a text vocabulary: the token strings through the decoder's steps */
    const char **tok = xmalloc((size_t)n * sizeof(char *));
    size_t *len = xmalloc((size_t)n * sizeof(size_t));
    for (int64_t i = 0; i < n; i++) {
        tok[i] = (const char *)d->blob + d->offset[ids[i]];
        len[i] = (size_t)(d->offset[ids[i] + 1] - d->offset[ids[i]]);
    }
    tok_decoder_run(&t->decoder, tok, len, n, out);
    free(tok);
    free(len);
    return -1;
}
