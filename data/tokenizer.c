#include "tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json_file.h"
#include "../common/util.h"
#include "bpe_merge.h"
#include "bpe_tables.h"
#include "byte_level.h"
#include "piece_cache.h"
#include "pretokenize.h"
#include "sha256.h"

/* The split pattern we implement (pretokenize.c); a tokenizer.json with any
 * other pattern is refused rather than silently mis-tokenized. */
static const char llama3_split_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

struct Tokenizer {
    VocabMap vocab;    /* ordinary tokens, ids 0..n_base-1 */
    VocabMap specials; /* Llama 3.1 names, ids n_base.. (stored 0-based) */
    PairMap merges;
    int32_t byte_id[256];
    int32_t n_base;
    Pretokenizer *pre;
    char sha256[65];
};

struct TokEncoder {
    const Tokenizer *t;
    PretokenCursor *cursor;
    BpeScratch bpe;
    PieceCache cache;
    uint32_t *piece_ids;
    int64_t piece_cap;
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
    if (!v || json_typeof(v) != type) die("tokenizer '%s': %s.%s is missing or has the wrong JSON type", path, where, key);
    return v;
}

static void check_pre_tokenizer(const char *path, const json_t *root) {
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    const json_t *seq = pre ? json_object_get(pre, "pretokenizers") : NULL;
    const json_t *split = seq ? json_array_get(seq, 0) : NULL;
    const json_t *pat = split ? json_object_get(json_object_get(split, "pattern"), "Regex") : NULL;
    if (!json_is_string(pat) || strcmp(json_string_value(pat), llama3_split_pattern) != 0)
        die("tokenizer '%s': pre_tokenizer.pretokenizers[0].pattern.Regex is not the Llama 3 split pattern this "
            "implementation supports", path);
}

static void load_vocab(Tokenizer *t, const char *path, const json_t *vocab) {
    size_t n = json_object_size(vocab);
    KV_CHECK(n > 256 && n < (size_t)LLAMA3_FIRST_SPECIAL_ID + 1, "tokenizer '%s': model.vocab has %zu entries, expected %d",
             path, n, LLAMA3_FIRST_SPECIAL_ID);
    t->n_base = (int32_t)n;
    VocabMap *v = &t->vocab;
    v->n_ids = t->n_base;
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
        len[id] = byte_level_to_bytes(key, klen, bytes[id]);
        if (len[id] <= 0) die("tokenizer '%s': model.vocab[\"%s\"] is not in the byte-level alphabet", path, key);
    }
    v->offset = xmalloc((n + 1) * sizeof(int64_t));
    v->offset[0] = 0;
    for (size_t i = 0; i < n; i++) v->offset[i + 1] = v->offset[i] + len[i];
    v->blob = xmalloc((size_t)v->offset[n]);
    for (size_t i = 0; i < n; i++) {
        memcpy(v->blob + v->offset[i], bytes[i], (size_t)len[i]);
        free(bytes[i]);
    }
    free(bytes);
    free(len);
    vocab_map_index(v);
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        t->byte_id[b] = vocab_map_find(v, &byte, 1);
        if (t->byte_id[b] < 0) die("tokenizer '%s': model.vocab has no token for byte 0x%02x", path, b);
    }
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
    int64_t na = byte_level_to_bytes(a, strlen(a), ab);
    int64_t nb = na > 0 ? byte_level_to_bytes(b, strlen(b), ab + na) : -1;
    if (na <= 0 || nb <= 0) die("tokenizer '%s': model.merges[%zu] is not in the byte-level alphabet", path, rank);
    int32_t left = vocab_map_find(&t->vocab, ab, (size_t)na), right = vocab_map_find(&t->vocab, ab + na, (size_t)nb);
    int32_t merged = vocab_map_find(&t->vocab, ab, (size_t)(na + nb));
    if (left < 0 || right < 0 || merged < 0)
        die("tokenizer '%s': model.merges[%zu] (\"%s\" + \"%s\") names a token missing from model.vocab", path, rank, a, b);
    if (!pair_map_insert(&t->merges, left, right, (int32_t)rank, merged))
        die("tokenizer '%s': model.merges[%zu] repeats an earlier merge", path, rank);
}

static void load_merges(Tokenizer *t, const char *path, const json_t *merges) {
    size_t n = json_array_size(merges);
    KV_CHECK(n > 0 && n < (size_t)INT32_MAX, "tokenizer '%s': model.merges has %zu entries", path, n);
    pair_map_init(&t->merges, (int64_t)n);
    for (size_t i = 0; i < n; i++) parse_merge(t, path, json_array_get(merges, i), i);
}

/* added_tokens must be exactly the 256 special ids after the base vocabulary;
 * their names come from the Llama 3.1 table, not from the file. */
static void load_specials(Tokenizer *t, const char *path, const json_t *added) {
    KV_CHECK(t->n_base == LLAMA3_FIRST_SPECIAL_ID, "tokenizer '%s': base vocabulary has %d tokens, Llama 3 has %d", path,
             t->n_base, LLAMA3_FIRST_SPECIAL_ID);
    size_t n = json_array_size(added);
    KV_CHECK(n == LLAMA3_NUM_SPECIAL, "tokenizer '%s': added_tokens has %zu entries, expected %d", path, n,
             LLAMA3_NUM_SPECIAL);
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) != LLAMA3_FIRST_SPECIAL_ID + (json_int_t)i ||
            !json_is_true(json_object_get(a, "special")))
            die("tokenizer '%s': added_tokens[%zu] should be special token id %d", path, i, LLAMA3_FIRST_SPECIAL_ID + (int)i);
    }
    VocabMap *s = &t->specials;
    s->n_ids = LLAMA3_NUM_SPECIAL;
    s->offset = xmalloc((LLAMA3_NUM_SPECIAL + 1) * sizeof(int64_t));
    s->blob = xmalloc(LLAMA3_NUM_SPECIAL * 64);
    s->offset[0] = 0;
    for (int i = 0; i < LLAMA3_NUM_SPECIAL; i++) {
        int len = llama31_special_name(LLAMA3_FIRST_SPECIAL_ID + i, (char *)s->blob + s->offset[i], 64);
        KV_CHECK(len > 0, "special token name table is broken at %d", i);
        s->offset[i + 1] = s->offset[i] + len;
    }
    vocab_map_index(s);
}

Tokenizer *tokenizer_load(const char *path) {
    if (access(path, R_OK) != 0)
        die("tokenizer '%s' is not readable; hint: pass --tokenizer PATH (the tokenizer.json of your Hugging Face "
            "checkpoint), or run 'make setup' (installs the Llama 3.1 one into third_party/tokenizers)", path);
    json_error_t err;
    json_t *root = json_load_regular(path, 0, &err);
    if (!root) die("tokenizer '%s': line %d column %d: %s", path, err.line, err.column, err.text);
    Tokenizer *t = xcalloc(1, sizeof *t);
    const json_t *model = member(path, root, "model", JSON_OBJECT, "");
    const char *type = json_string_value(member(path, model, "type", JSON_STRING, "model"));
    if (strcmp(type, "BPE") != 0) die("tokenizer '%s': model.type is '%s', expected 'BPE'", path, type);
    check_pre_tokenizer(path, root);
    load_vocab(t, path, member(path, model, "vocab", JSON_OBJECT, "model"));
    load_merges(t, path, member(path, model, "merges", JSON_ARRAY, "model"));
    load_specials(t, path, member(path, root, "added_tokens", JSON_ARRAY, ""));
    json_decref(root);
    t->pre = pretokenizer_new();
    sha256_file(path, t->sha256);
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    vocab_map_free(&t->vocab);
    vocab_map_free(&t->specials);
    pair_map_free(&t->merges);
    pretokenizer_free(t->pre);
    free(t);
}

int32_t tokenizer_vocab_size(const Tokenizer *t) { return t->n_base + t->specials.n_ids; }
const char *tokenizer_sha256(const Tokenizer *t) { return t->sha256; }

int32_t tokenizer_special_id(const Tokenizer *t, const char *name, size_t len) {
    int32_t k = vocab_map_find(&t->specials, (const uint8_t *)name, len);
    return k < 0 ? -1 : t->n_base + k;
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
    bpe_scratch_free(&e->bpe);
    piece_cache_free(&e->cache);
    free(e->piece_ids);
    free(e);
}

void token_buf_push(TokenBuf *b, uint32_t id) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 1024;
        b->ids = xrealloc(b->ids, (size_t)b->cap * sizeof(uint32_t));
    }
    b->ids[b->n++] = id;
}

void token_buf_free(TokenBuf *b) {
    free(b->ids);
    memset(b, 0, sizeof *b);
}

void byte_buf_append(ByteBuf *b, const void *p, size_t n) {
    if (b->n + (int64_t)n > b->cap) {
        b->cap = 2 * (b->n + (int64_t)n) + 256;
        b->data = xrealloc(b->data, (size_t)b->cap);
    }
    memcpy(b->data + b->n, p, n);
    b->n += (int64_t)n;
}

void byte_buf_free(ByteBuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* One pre-token: whole-vocabulary hit first (tokenizer.json sets
 * ignore_merges), then the memo, then BPE. */
static void encode_piece(TokEncoder *e, const uint8_t *s, size_t n, TokenBuf *out) {
    const Tokenizer *t = e->t;
    int32_t id = vocab_map_find(&t->vocab, s, n);
    if (id >= 0) {
        token_buf_push(out, (uint32_t)id);
        return;
    }
    uint64_t h = bytes_hash(s, n);
    int64_t k;
    const uint32_t *ids = piece_cache_find(&e->cache, h, s, n, &k);
    if (!ids) {
        if ((int64_t)n > e->piece_cap) {
            e->piece_cap = (int64_t)n;
            e->piece_ids = xrealloc(e->piece_ids, n * sizeof(uint32_t));
        }
        k = bpe_merge(&e->bpe, &t->merges, t->byte_id, s, n, e->piece_ids);
        piece_cache_put(&e->cache, h, s, n, e->piece_ids, k);
        ids = e->piece_ids;
    }
    for (int64_t i = 0; i < k; i++) token_buf_push(out, ids[i]);
}

static void encode_ordinary(TokEncoder *e, const char *text, size_t len, TokenBuf *out) {
    size_t pos = 0, start, end;
    while (pretoken_next(e->cursor, text, len, &pos, &start, &end))
        encode_piece(e, (const uint8_t *)text + start, end - start, out);
}

/* Next spelled-out special token at or after from: returns its id and span, or -1. */
static int32_t find_special(const Tokenizer *t, const char *text, size_t len, size_t from, size_t *at, size_t *end) {
    while (from + 1 < len) {
        const char *open = memmem(text + from, len - from, "<|", 2);
        if (!open) return -1;
        size_t o = (size_t)(open - text);
        const char *close = memmem(text + o + 2, len - o - 2, "|>", 2);
        if (!close) return -1;
        size_t e = (size_t)(close - text) + 2;
        int32_t id = tokenizer_special_id(t, text + o, e - o);
        if (id >= 0) {
            *at = o;
            *end = e;
            return id;
        }
        from = o + 1;
    }
    return -1;
}

void tok_encode(TokEncoder *e, const char *text, size_t len, int allow_special, TokenBuf *out) {
    if (!allow_special) {
        encode_ordinary(e, text, len, out);
        return;
    }
    size_t pos = 0, at, end;
    int32_t id;
    while ((id = find_special(e->t, text, len, pos, &at, &end)) >= 0) {
        encode_ordinary(e, text + pos, at - pos, out);
        token_buf_push(out, (uint32_t)id);
        pos = end;
    }
    encode_ordinary(e, text + pos, len - pos, out);
}

int64_t tok_decode(const Tokenizer *t, const uint32_t *ids, int64_t n, ByteBuf *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        const VocabMap *v = id < (uint32_t)t->n_base ? &t->vocab : &t->specials;
        uint32_t k = id < (uint32_t)t->n_base ? id : id - (uint32_t)t->n_base;
        if (id >= (uint32_t)tokenizer_vocab_size(t)) return i;
        byte_buf_append(out, v->blob + v->offset[k], (size_t)(v->offset[k + 1] - v->offset[k]));
    }
    return -1;
}
