#include "gguf_tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../data/tokenizer.h"
#include "gguf_meta.h"

/* llama.cpp's token types (llama_token_type: undefined 0, normal 1,
 * unknown 2, control 3, user-defined 4, unused 5, byte 6). Hugging Face
 * lists control and user-defined tokens as added tokens: control tokens are
 * special, user-defined ones are not. */
enum { TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_TYPE_MAX = 6 };

/* Llama 3's pre-split, as Meta's tokenizer.json spells it, and Qwen2's
 * (the same but for single digits), as Qwen's does. */
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_t *byte_level(int add_prefix_space, int trim_offsets, int use_regex) {
    return json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", add_prefix_space, "trim_offsets",
                     trim_offsets, "use_regex", use_regex);
}

static json_t *split_then_byte_level(const char *pattern) {
    return json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},o]}", "type", "Sequence", "pretokenizers", "type", "Split",
                     "pattern", "Regex", pattern, "behavior", "Isolated", "invert", 0, byte_level(0, 1, 0));
}

/* llama.cpp's pre-tokenizer names (tokenizer.ggml.pre) that map onto a
 * tokenizers pipeline exactly; *normalizer: what goes before it (Qwen2's
 * NFC), or JSON null. */
static json_t *pre_tokenizer(const GgufFile *f, const char *pre, json_t **normalizer) {
    *normalizer = json_null();
    if (strcmp(pre, "smollm") == 0)
        return json_pack("{s:s,s:[{s:s,s:b},o]}", "type", "Sequence", "pretokenizers", "type", "Digits",
                         "individual_digits", 1, byte_level(0, 1, 1));
    if (strcmp(pre, "llama-bpe") == 0) return split_then_byte_level(LLAMA3_PATTERN);
    if (strcmp(pre, "qwen2") == 0) {
        *normalizer = json_pack("{s:s}", "type", "NFC");
        return split_then_byte_level(QWEN2_PATTERN);
    }
    const GgufKV *kv = gguf_meta(f, "tokenizer.ggml.pre");
    die("gguf '%s' at byte %lld: tokenizer.ggml.pre '%s' is not supported (supported: smollm, llama-bpe, qwen2)",
        f->map.path, (long long)kv->offset, pre);
}

/* The token string of id as a JSON string; dies unless valid UTF-8. */
static json_t *token_string(const GgufFile *f, const GgufKV *toks, int64_t id) {
    GgufStr s = toks->arr_str[id];
    json_t *j = json_stringn(s.p, s.len);
    if (!j)
        die("gguf '%s' at byte %lld: tokenizer.ggml.tokens[%lld] is not valid UTF-8", f->map.path,
            (long long)gguf_arr_offset(f, toks, id), (long long)id);
    return j;
}

static json_t *vocab_json(const GgufFile *f, const GgufKV *toks) {
    json_t *vocab = json_object();
    for (uint64_t id = 0; id < toks->arr_n; id++) {
        json_t *s = token_string(f, toks, (int64_t)id);
        const char *text = json_string_value(s);
        if (strlen(text) != toks->arr_str[id].len)
            die("gguf '%s': tokenizer.ggml.tokens[%llu] holds a NUL byte", f->map.path, (unsigned long long)id);
        json_t *prev = json_object_get(vocab, text);
        if (prev)
            die("gguf '%s': tokenizer.ggml.tokens[%llu] repeats token %lld ('%s'); a vocabulary maps each string once",
                f->map.path, (unsigned long long)id, (long long)json_integer_value(prev), text);
        json_object_set_new(vocab, text, json_integer((json_int_t)id));
        json_decref(s);
    }
    return vocab;
}

/* tokenizer.ggml.merges, each checked as Hugging Face checks it. */
static json_t *listed_merges(const GgufFile *f, const json_t *vocab) {
    /* a BPE without merges is a tokenizer neither kvcpt nor the
     * file's author meant: every text would stay single bytes */
    const GgufKV *mk = gguf_meta_array(f, "tokenizer.ggml.merges", 1, 1);
    if (mk->arr_n == 0)
        die("gguf '%s' at byte %lld: tokenizer.ggml.merges is empty; a BPE needs its merges", f->map.path,
            (long long)mk->offset);
    json_t *merges = json_array();
    for (uint64_t i = 0; i < mk->arr_n; i++) {
        GgufStr m = mk->arr_str[i];
        long long at = (long long)gguf_arr_offset(f, mk, i);
        const char *sp = memchr(m.p, ' ', m.len);
        json_t *s = json_stringn(m.p, m.len);
        if (!s || memchr(m.p, 0, m.len) || !sp || sp == m.p || sp == m.p + m.len - 1 ||
            memchr(sp + 1, ' ', m.len - (size_t)(sp + 1 - m.p)))
            die("gguf '%s' at byte %lld: tokenizer.ggml.merges[%llu] is not a UTF-8 pair \"A B\" of tokens",
                f->map.path, at, (unsigned long long)i);
        /* Hugging Face refuses a merge whose halves or result are not
         * tokens (MergeTokenOutOfVocabulary) */
        size_t left = (size_t)(sp - m.p), right = m.len - left - 1;
        char *joined = xmalloc(m.len);
        memcpy(joined, m.p, left);
        memcpy(joined + left, sp + 1, right);
        const struct {
            const char *what, *p;
            size_t n;
        } part[] = {
            {"its left token", m.p, left}, {"its right token", sp + 1, right}, {"the merged token", joined, m.len - 1}};
        for (int k = 0; k < 3; k++)
            if (!json_object_getn(vocab, part[k].p, part[k].n))
                die("gguf '%s' at byte %lld: tokenizer.ggml.merges[%llu] (\"%s\"): %s \"%.*s\" is not in "
                    "tokenizer.ggml.tokens",
                    f->map.path, at, (unsigned long long)i, json_string_value(s), part[k].what, (int)part[k].n,
                    part[k].p);
        free(joined);
        json_array_append_new(merges, s);
    }
    return merges;
}

/* One merge of a SentencePiece vocabulary: token `piece` split into two
 * tokens after `split` bytes. */
typedef struct {
    int64_t piece, left, right, split;
    float score, left_score, right_score;
} SpmMerge;

/* transformers' order (GGUFTokenizerSkeleton): by the merged piece's score,
 * highest first; a piece's own merges by their halves' scores, highest
 * first; ties in vocabulary order, as its stable sorts leave them. */
static int spm_merge_order(const void *pa, const void *pb) {
    const SpmMerge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->piece != b->piece) return a->piece < b->piece ? -1 : 1;
    if (a->left_score != b->left_score) return a->left_score > b->left_score ? -1 : 1;
    if (a->right_score != b->right_score) return a->right_score > b->right_score ? -1 : 1;
    return a->split < b->split ? -1 : a->split > b->split;
}

/* A SentencePiece BPE ("llama") carries scores instead of merges: the
 * merges are every split of a token into two tokens, ranked by the token's
 * score, as transformers' GGUF loader (and its SentencePiece converter)
 * builds them. Merging the highest-scored pair first is what SentencePiece
 * does. */
static json_t *spm_merges(const GgufFile *f, const GgufKV *toks, const GgufKV *scores, const json_t *vocab) {
    SpmMerge *m = NULL;
    size_t n = 0, cap = 0;
    for (uint64_t id = 0; id < toks->arr_n; id++) {
        GgufStr s = toks->arr_str[id];
        for (uint64_t k = 1; k < s.len; k++) {
            if (((unsigned char)s.p[k] & 0xC0) == 0x80) continue; /* inside a character */
            const json_t *l = json_object_getn(vocab, s.p, k), *r = json_object_getn(vocab, s.p + k, s.len - k);
            if (!l || !r) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                m = xrealloc(m, cap * sizeof *m);
            }
            int64_t li = json_integer_value(l), ri = json_integer_value(r);
            m[n++] = (SpmMerge){(int64_t)id,
                                li,
                                ri,
                                (int64_t)k,
                                gguf_arr_f32(scores, id),
                                gguf_arr_f32(scores, (uint64_t)li),
                                gguf_arr_f32(scores, (uint64_t)ri)};
        }
    }
    if (n == 0)
        die("gguf '%s': no token of tokenizer.ggml.tokens is two others joined; a BPE without merges keeps every text "
            "in single characters",
            f->map.path);
    qsort(m, n, sizeof *m, spm_merge_order);
    json_t *merges = json_array();
    for (size_t i = 0; i < n; i++) {
        GgufStr s = toks->arr_str[m[i].piece];
        json_array_append_new(merges, json_pack("[s%,s%]", s.p, (size_t)m[i].split, s.p + m[i].split,
                                                (size_t)(s.len - (uint64_t)m[i].split)));
    }
    free(m);
    return merges;
}

/* The BPE model: byte-level (gpt2) or SentencePiece's, with "<0xNN>" byte
 * fallback and fused unknown tokens (scores given, unk: its token or -1). */
static json_t *model_json(const GgufFile *f, const GgufKV *toks, int ignore_merges, const GgufKV *scores, int64_t unk) {
    json_t *vocab = vocab_json(f, toks);
    int spm = scores != NULL;
    /* checked even when the file lists merges: a score that cannot be
     * ranked is a broken file */
    if (spm && scores->arr_n != toks->arr_n)
        die("gguf '%s' at byte %lld: tokenizer.ggml.scores has %llu entries but tokenizer.ggml.tokens %llu",
            f->map.path, (long long)scores->offset, (unsigned long long)scores->arr_n, (unsigned long long)toks->arr_n);
    for (uint64_t id = 0; spm && id < scores->arr_n; id++)
        if (!isfinite(gguf_arr_f32(scores, id)))
            die("gguf '%s' at byte %lld: tokenizer.ggml.scores[%llu] is not finite", f->map.path,
                (long long)gguf_arr_offset(f, scores, id), (unsigned long long)id);
    json_t *merges =
        spm && !gguf_meta(f, "tokenizer.ggml.merges") ? spm_merges(f, toks, scores, vocab) : listed_merges(f, vocab);
    json_t *unk_token = spm && unk >= 0 ? token_string(f, toks, unk) : json_null();
    return json_pack("{s:s,s:n,s:o,s:n,s:n,s:b,s:b,s:b,s:o,s:o}", "type", "BPE", "dropout", "unk_token", unk_token,
                     "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", spm, "byte_fallback", spm,
                     "ignore_merges", ignore_merges, "vocab", vocab, "merges", merges);
}

/* Every token id named by a tokenizer.ggml.*_token_id key must exist. */
static int64_t special_id(const GgufFile *f, const char *key, int64_t n_tokens) {
    int64_t id = gguf_meta_int(f, key, 0, -1);
    if (id != -1 && (id < 0 || id >= n_tokens))
        die("gguf '%s' at byte %lld: %s = %lld is not a token id (0..%lld)", f->map.path,
            (long long)gguf_meta(f, key)->offset, key, (long long)id, (long long)n_tokens - 1);
    return id;
}

int gguf_tokenizer_json(const GgufFile *f, int64_t context_length, char **tokenizer_json, char **config_json) {
    *tokenizer_json = *config_json = NULL;
    char *model = gguf_meta_str(f, "tokenizer.ggml.model", 0);
    if (!model) return -1;
    int spm = strcmp(model, "llama") == 0;
    if (!spm && strcmp(model, "gpt2") != 0)
        die("gguf '%s' at byte %lld: tokenizer.ggml.model '%s' is not supported (supported: gpt2, byte-level BPE; "
            "llama, SentencePiece BPE)",
            f->map.path, (long long)gguf_meta(f, "tokenizer.ggml.model")->offset, model);
    /* llama.cpp's SentencePiece tokenizer does not read tokenizer.ggml.pre */
    char *pre = spm ? NULL : gguf_meta_str(f, "tokenizer.ggml.pre", 1);
    const GgufKV *toks = gguf_meta_array(f, "tokenizer.ggml.tokens", 1, 1);
    const GgufKV *types = gguf_meta_array(f, "tokenizer.ggml.token_type", 0, 0);
    if (types && types->arr_n != toks->arr_n)
        die("gguf '%s' at byte %lld: tokenizer.ggml.token_type has %llu entries but tokenizer.ggml.tokens %llu",
            f->map.path, (long long)types->offset, (unsigned long long)types->arr_n, (unsigned long long)toks->arr_n);
    for (uint64_t id = 0; types && id < types->arr_n; id++) {
        int64_t t = gguf_arr_int(types, id);
        if (t < 0 || t > TOKEN_TYPE_MAX)
            die("gguf '%s' at byte %lld: tokenizer.ggml.token_type[%llu] = %lld is not one of llama.cpp's token types "
                "(0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)",
                f->map.path, (long long)gguf_arr_offset(f, types, id), (unsigned long long)id, (long long)t);
    }
    int64_t n = (int64_t)toks->arr_n;
    int64_t bos = special_id(f, "tokenizer.ggml.bos_token_id", n),
            eos = special_id(f, "tokenizer.ggml.eos_token_id", n);
    int64_t unk = special_id(f, "tokenizer.ggml.unknown_token_id", n);
    int64_t pad = special_id(f, "tokenizer.ggml.padding_token_id", n);
    int add_bos = gguf_meta_bool(f, "tokenizer.ggml.add_bos_token", 0);
    if (add_bos && bos < 0)
        die("gguf '%s': tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing", f->map.path);

    json_t *normalizer, *pre_tok, *decoder;
    const GgufKV *scores = spm ? gguf_meta_f32_array(f, "tokenizer.ggml.scores", 1) : NULL;
    if (spm) {
        /* as Hugging Face's Llama 2 tokenizer.json (transformers' legacy
         * layout): "▁" in front of each piece of text between added tokens
         * unless tokenizer.ggml.add_space_prefix is false, spaces as "▁",
         * no pre-tokenizer; decoding undoes both */
        int prefix = gguf_meta_bool(f, "tokenizer.ggml.add_space_prefix", 1);
        json_t *replace =
            json_pack("{s:s,s:{s:s},s:s}", "type", "Replace", "pattern", "String", " ", "content", "\u2581");
        normalizer = prefix ? json_pack("{s:s,s:[{s:s,s:s},o]}", "type", "Sequence", "normalizers", "type", "Prepend",
                                        "prepend", "\u2581", replace)
                            : json_pack("{s:s,s:[o]}", "type", "Sequence", "normalizers", replace);
        pre_tok = json_null();
        decoder =
            json_pack("{s:s,s:[{s:s,s:{s:s},s:s},{s:s},{s:s}]}", "type", "Sequence", "decoders", "type", "Replace",
                      "pattern", "String", "\u2581", "content", " ", "type", "ByteFallback", "type", "Fuse");
        if (prefix)
            json_array_append_new(
                json_object_get(decoder, "decoders"),
                json_pack("{s:s,s:s,s:i,s:i}", "type", "Strip", "content", " ", "start", 1, "stop", 0));
    } else {
        pre_tok = pre_tokenizer(f, pre, &normalizer);
        decoder = byte_level(1, 1, 1);
    }
    json_t *added = json_array();
    for (int64_t id = 0; types && id < n; id++) {
        int64_t t = gguf_arr_int(types, (uint64_t)id);
        if (t != TOKEN_CONTROL && t != TOKEN_USER_DEFINED) continue;
        json_array_append_new(added, json_pack("{s:I,s:o,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)id, "content",
                                               token_string(f, toks, id), "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", t == TOKEN_CONTROL));
    }
    json_t *post;
    if (add_bos) {
        /* as Llama 3.1's tokenizer.json: byte-level offsets, then BOS first */
        json_t *b = token_string(f, toks, bos);
        const char *bs = json_string_value(b);
        json_t *tp = json_pack(
            "{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}],s:[{s:{s:s,s:i}},{s:{s:s,s:i}},{s:{s:s,s:i}},{s:{s:s,s:i}}],"
            "s:{s:{s:s,s:[I],s:[s]}}}",
            "type", "TemplateProcessing", "single", "SpecialToken", "id", bs, "type_id", 0, "Sequence", "id", "A",
            "type_id", 0, "pair", "SpecialToken", "id", bs, "type_id", 0, "Sequence", "id", "A", "type_id", 0,
            "SpecialToken", "id", bs, "type_id", 1, "Sequence", "id", "B", "type_id", 1, "special_tokens", bs, "id", bs,
            "ids", (json_int_t)bos, "tokens", bs);
        post = spm ? tp : json_pack("{s:s,s:[o,o]}", "type", "Sequence", "processors", byte_level(1, 0, 1), tp);
        json_decref(b);
    } else {
        post = spm ? json_null() : byte_level(1, 0, 1);
    }
    json_t *root =
        json_pack("{s:s,s:n,s:n,s:o,s:o,s:o,s:o,s:o,s:o}", "version", "1.0", "truncation", "padding", "added_tokens",
                  added, "normalizer", normalizer, "pre_tokenizer", pre_tok, "post_processor", post, "decoder", decoder,
                  "model", model_json(f, toks, pre && strcmp(pre, "llama-bpe") == 0, scores, unk));
    KV_CHECK(root, "gguf '%s': cannot build tokenizer.json", f->map.path);
    *tokenizer_json = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);

    /* transformers' view: which strings are the special tokens, how long the
     * model's context is, and the chat template when the file has one */
    json_t *cfg = json_pack("{s:b,s:b}", "add_bos_token", add_bos, "add_eos_token", 0);
    json_t *added_dec = json_object();
    for (int64_t id = 0; types && id < n; id++) {
        int64_t t = gguf_arr_int(types, (uint64_t)id);
        if (t != TOKEN_CONTROL && t != TOKEN_USER_DEFINED) continue;
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)id);
        json_object_set_new(added_dec, key,
                            json_pack("{s:o,s:b,s:b,s:b,s:b,s:b}", "content", token_string(f, toks, id), "lstrip", 0,
                                      "normalized", 0, "rstrip", 0, "single_word", 0, "special", t == TOKEN_CONTROL));
    }
    json_object_set_new(cfg, "added_tokens_decoder", added_dec);
    const struct {
        const char *name;
        int64_t id;
    } sp[] = {{"bos_token", bos}, {"eos_token", eos}, {"unk_token", unk}, {"pad_token", pad}};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
        json_object_set_new(cfg, sp[i].name, sp[i].id >= 0 ? token_string(f, toks, sp[i].id) : json_null());
    char *tmpl = gguf_meta_str(f, "tokenizer.chat_template", 0);
    if (tmpl) {
        json_t *t = json_string(tmpl);
        if (!t)
            die("gguf '%s' at byte %lld: tokenizer.chat_template is not valid UTF-8", f->map.path,
                (long long)gguf_meta(f, "tokenizer.chat_template")->offset);
        json_object_set_new(cfg, "chat_template", t);
    }
    json_object_set_new(cfg, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(cfg, "model_max_length", json_integer((json_int_t)context_length));
    json_object_set_new(cfg, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
    *config_json = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(cfg);
    KV_CHECK(*tokenizer_json && *config_json, "gguf '%s': cannot serialise the tokenizer files", f->map.path);
    /* what is written must load in kvcpt, whose checks include every one
     * by which Hugging Face tokenizers refuses such a file; a failure here
     * names the tokenizer.json field, before anything is written */
    char origin[4200];
    snprintf(origin, sizeof origin, "tokenizer.json built from gguf '%s'", f->map.path);
    tokenizer_free(tokenizer_load_text(origin, *tokenizer_json));
    free(model);
    free(pre);
    free(tmpl);
    return 0;
}
