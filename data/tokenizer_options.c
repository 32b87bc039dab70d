#include "tokenizer_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "regex_translate.h"
#include "utf8.h"

/* ByteLevel's own split (use_regex true): GPT-2's pattern, as Hugging Face
 * writes it in its ByteLevel pre-tokenizer. */
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int is_null(const json_t *v) { return v == NULL || json_is_null(v); }

static const char *type_of(const char *file, const json_t *obj, const char *path) {
    const json_t *t = json_is_object(obj) ? json_object_get(obj, "type") : NULL;
    if (!json_is_string(t)) die("tokenizer '%s': %s.type is missing or not a string", file, path);
    return json_string_value(t);
}

/* A boolean field; absent means Hugging Face's default `dflt`. */
static int get_bool(const char *file, const json_t *obj, const char *path, const char *key, int dflt) {
    const json_t *v = json_object_get(obj, key);
    if (v == NULL) return dflt;
    if (!json_is_boolean(v)) die("tokenizer '%s': %s.%s is not true or false", file, path, key);
    return json_is_true(v);
}

static void want_bool(const char *file, const json_t *obj, const char *path, const char *key, int dflt, int want) {
    if (get_bool(file, obj, path, key, dflt) != want)
        die("tokenizer '%s': %s.%s is %s%s; only %s is supported", file, path, key, want ? "false" : "true",
            json_object_get(obj, key) ? "" : " (the default when absent)", want ? "true" : "false");
}

/* null, absent or "" */
static void want_empty_string(const char *file, const json_t *obj, const char *path, const char *key) {
    const json_t *v = json_object_get(obj, key);
    if (!is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
        die("tokenizer '%s': %s.%s is set; only null or \"\" is supported", file, path, key);
}

static void add_stage(const char *file, TokenizerOptions *o, const char *onig, const char *path) {
    if (o->n_stages == PRETOKENIZE_MAX_STAGES)
        die("tokenizer '%s': %s: more than %d split steps", file, path, PRETOKENIZE_MAX_STAGES);
    char err[512];
    char *pcre = regex_translate(onig, err, sizeof err);
    if (!pcre) die("tokenizer '%s': %s: %s", file, path, err);
    o->stage_pattern[o->n_stages] = pcre;
    snprintf(o->stage_path[o->n_stages], sizeof o->stage_path[0], "%s", path);
    o->n_stages++;
}

/* One pre-tokenizer; `last` when nothing follows it in the Sequence.
 * Returns 1 for ByteLevel. */
static int parse_pre_one(const char *file, const json_t *pre, const char *path, int last, TokenizerOptions *o) {
    const char *type = type_of(file, pre, path);
    char sub[128];
    if (strcmp(type, "Split") == 0) {
        const json_t *pattern = json_object_get(pre, "pattern");
        const json_t *regex = json_is_object(pattern) ? json_object_get(pattern, "Regex") : NULL;
        if (!json_is_string(regex))
            die("tokenizer '%s': %s.pattern is not {\"Regex\": ...}; only regex split patterns are supported", file,
                path);
        const json_t *behavior = json_object_get(pre, "behavior");
        if (!json_is_string(behavior) || strcmp(json_string_value(behavior), "Isolated") != 0)
            die("tokenizer '%s': %s.behavior is %s; only \"Isolated\" is supported", file, path,
                json_is_string(behavior) ? json_string_value(behavior) : "missing");
        want_bool(file, pre, path, "invert", 0, 0);
        snprintf(sub, sizeof sub, "%s.pattern.Regex", path);
        add_stage(file, o, json_string_value(regex), sub);
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        /* Rust's char::is_numeric is \p{N}; individual digits are each a
         * piece, otherwise each run of them is */
        add_stage(file, o, get_bool(file, pre, path, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+", path);
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (!last)
            die("tokenizer '%s': %s: ByteLevel must be the last pre-tokenizer (a split after it would see the "
                "byte-level "
                "alphabet, which is not supported)",
                file, path);
        want_bool(file, pre, path, "add_prefix_space", 1, 0);
        if (get_bool(file, pre, path, "use_regex", 1)) add_stage(file, o, gpt2_pattern, path);
        return 1;
    }
    die("tokenizer '%s': %s.type is \"%s\"; supported: Sequence, Split, Digits, ByteLevel, and Metaspace as the whole "
        "pre_tokenizer",
        file, path, type);
}

/* A string field holding exactly one character (Hugging Face's `char`). */
static void get_char(const char *file, const json_t *obj, const char *path, const char *key, char out[5]) {
    const json_t *v = json_object_get(obj, key);
    const char *c = json_is_string(v) ? json_string_value(v) : "";
    size_t n = json_is_string(v) ? json_string_length(v) : 0;
    uint32_t cp;
    if (n == 0 || n > 4 || strlen(c) != n || utf8_decode_one((const uint8_t *)c, n, &cp) != (int)n)
        die("tokenizer '%s': %s.%s is not a string of one character", file, path, key);
    memcpy(out, c, n);
    out[n] = '\0';
}

/* Metaspace's fields, as Hugging Face reads them: prepend_scheme
 * (always, first, never; "always" when absent), or the older
 * add_prefix_space (true: always, false: never), which must then agree. */
static void parse_metaspace(const char *file, const json_t *m, const char *path, Metaspace *ms) {
    memset(ms, 0, sizeof *ms);
    get_char(file, m, path, "replacement", ms->rep);
    ms->rep_len = strlen(ms->rep);
    ms->split = get_bool(file, m, path, "split", 1);
    const json_t *scheme = json_object_get(m, "prepend_scheme"), *aps = json_object_get(m, "add_prefix_space");
    if (aps && !json_is_boolean(aps)) die("tokenizer '%s': %s.add_prefix_space is not true or false", file, path);
    if (is_null(scheme)) {
        ms->prepend = aps && json_is_false(aps) ? METASPACE_NEVER : METASPACE_ALWAYS;
        return;
    }
    const char *v = json_is_string(scheme) ? json_string_value(scheme) : "";
    if (strcmp(v, "always") == 0) ms->prepend = METASPACE_ALWAYS;
    else if (strcmp(v, "first") == 0) ms->prepend = METASPACE_FIRST;
    else if (strcmp(v, "never") == 0) ms->prepend = METASPACE_NEVER;
    else die("tokenizer '%s': %s.prepend_scheme is not \"always\", \"first\" or \"never\"", file, path);
    if (aps && json_is_false(aps) && ms->prepend != METASPACE_NEVER)
        die("tokenizer '%s': %s.add_prefix_space is false but prepend_scheme is \"%s\"; Hugging Face refuses the pair",
            file, path, v);
}

/* pre_tokenizer: byte-level (a ByteLevel step last, regex splits before it)
 * or, for a vocabulary stored as text, Metaspace alone or nothing. */
static void parse_pre_tokenizer(const char *file, const json_t *pre, TokenizerOptions *o) {
    if (is_null(pre)) return; /* each piece between added tokens is one word for the BPE */
    if (strcmp(type_of(file, pre, "pre_tokenizer"), "Metaspace") == 0) {
        o->has_metaspace = 1;
        parse_metaspace(file, pre, "pre_tokenizer", &o->metaspace);
        return;
    }
    int byte_level = 0;
    if (strcmp(type_of(file, pre, "pre_tokenizer"), "Sequence") == 0) {
        const json_t *list = json_object_get(pre, "pretokenizers");
        if (!json_is_array(list)) die("tokenizer '%s': pre_tokenizer.pretokenizers is not an array", file);
        size_t n = json_array_size(list);
        for (size_t i = 0; i < n; i++) {
            char path[64];
            snprintf(path, sizeof path, "pre_tokenizer.pretokenizers[%zu]", i);
            byte_level |= parse_pre_one(file, json_array_get(list, i), path, i + 1 == n, o);
        }
    } else {
        byte_level = parse_pre_one(file, pre, "pre_tokenizer", 1, o);
    }
    if (!byte_level)
        die("tokenizer '%s': pre_tokenizer has no ByteLevel step; supported are byte-level BPE (ByteLevel last) and "
            "SentencePiece-style BPE (pre_tokenizer Metaspace or null)",
            file);
    o->byte_level = 1;
}

static char *dup_string(const char *file, const json_t *obj, const char *path, const char *key) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        die("tokenizer '%s': %s.%s is not a string without NUL", file, path, key);
    return xstrdup(json_string_value(v));
}

/* Replace's {"String": ...} pattern (normalizer and decoder alike). */
static char *string_pattern(const char *file, const json_t *obj, const char *path) {
    const json_t *pattern = json_object_get(obj, "pattern");
    const json_t *str = json_is_object(pattern) ? json_object_get(pattern, "String") : NULL;
    char sub[160];
    snprintf(sub, sizeof sub, "%s.pattern", path);
    if (!json_is_string(str) || json_string_length(str) == 0)
        die("tokenizer '%s': %s is not {\"String\": \"...\"} with a non-empty string; only literal patterns are "
            "supported",
            file, sub);
    return dup_string(file, pattern, sub, "String");
}

typedef void (*StepParser)(const char *file, const json_t *step, const char *path, void *out);

/* A {"type": "Sequence", list_key: [...]} of steps, each parsed by fn
 * (nested Sequences flatten); returns 0 when v is not a Sequence. */
static int parse_sequence(const char *file, const json_t *v, const char *path, const char *list_key, StepParser fn,
                          void *out) {
    if (strcmp(type_of(file, v, path), "Sequence") != 0) return 0;
    const json_t *list = json_object_get(v, list_key);
    if (!json_is_array(list)) die("tokenizer '%s': %s.%s is not an array", file, path, list_key);
    for (size_t i = 0; i < json_array_size(list); i++) {
        char sub[160];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", path, list_key, i);
        fn(file, json_array_get(list, i), sub, out);
    }
    return 1;
}

static void parse_normalizer(const char *file, const json_t *nz, const char *path, void *out_) {
    Normalizer *out = out_;
    if (is_null(nz) || parse_sequence(file, nz, path, "normalizers", parse_normalizer, out)) return;
    const char *type = type_of(file, nz, path);
    if (out->n == NORMALIZER_MAX_STEPS)
        die("tokenizer '%s': %s: more than %d normalizer steps", file, path, NORMALIZER_MAX_STEPS);
    NormStep *st = &out->step[out->n];
    if (strcmp(type, "NFC") == 0) {
        st->kind = NORM_NFC;
    } else if (strcmp(type, "Prepend") == 0) {
        st->kind = NORM_PREPEND;
        st->text = dup_string(file, nz, path, "prepend");
    } else if (strcmp(type, "Replace") == 0) {
        st->kind = NORM_REPLACE;
        st->text = string_pattern(file, nz, path);
        st->replacement = dup_string(file, nz, path, "content");
    } else {
        die("tokenizer '%s': %s.type is \"%s\"; supported: NFC, Prepend, Replace (String pattern), Sequence of them",
            file, path, type);
    }
    out->n++;
}

/* The decoder of a vocabulary stored as text. */
static void parse_decoder(const char *file, const json_t *d, const char *path, void *out_) {
    TokDecoder *out = out_;
    if (parse_sequence(file, d, path, "decoders", parse_decoder, out)) return;
    const char *type = type_of(file, d, path);
    if (out->n == TOK_DECODER_MAX_STEPS)
        die("tokenizer '%s': %s: more than %d decoder steps", file, path, TOK_DECODER_MAX_STEPS);
    DecStep *st = &out->step[out->n];
    if (strcmp(type, "Replace") == 0) {
        st->kind = DEC_REPLACE;
        st->text = string_pattern(file, d, path);
        st->replacement = dup_string(file, d, path, "content");
    } else if (strcmp(type, "ByteFallback") == 0) {
        st->kind = DEC_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        st->kind = DEC_FUSE;
    } else if (strcmp(type, "Strip") == 0) {
        st->kind = DEC_STRIP;
        char c[5];
        get_char(file, d, path, "content", c);
        st->text = xstrdup(c);
        const json_t *start = json_object_get(d, "start"), *stop = json_object_get(d, "stop");
        if (!json_is_integer(start) || json_integer_value(start) < 0 || !json_is_integer(stop) ||
            json_integer_value(stop) < 0)
            die("tokenizer '%s': %s.start and .stop must be integers >= 0", file, path);
        st->start = json_integer_value(start);
        st->stop = json_integer_value(stop);
    } else if (strcmp(type, "Metaspace") == 0) {
        st->kind = DEC_METASPACE;
        Metaspace ms;
        parse_metaspace(file, d, path, &ms);
        st->text = xstrdup(ms.rep);
        st->keep_first = ms.prepend == METASPACE_NEVER;
    } else if (strcmp(type, "ByteLevel") == 0) {
        die("tokenizer '%s': %s.type is \"ByteLevel\" but pre_tokenizer has no ByteLevel step, so the vocabulary is "
            "read as text (SentencePiece style), which the byte-level alphabet does not decode",
            file, path);
    } else {
        die("tokenizer '%s': %s.type is \"%s\"; supported for a SentencePiece-style vocabulary: Replace (String "
            "pattern), ByteFallback, Fuse, Strip, Metaspace, Sequence of them",
            file, path, type);
    }
    out->n++;
}

static void parse_model(const char *file, const json_t *model, TokenizerOptions *o) {
    const char *type = type_of(file, model, "model");
    if (strcmp(type, "BPE") != 0) die("tokenizer '%s': model.type is \"%s\"; only \"BPE\" is supported", file, type);
    const json_t *dropout = json_object_get(model, "dropout");
    if (!is_null(dropout)) die("tokenizer '%s': model.dropout is set; BPE dropout is not supported", file);
    o->byte_fallback = get_bool(file, model, "model", "byte_fallback", 0);
    if (o->byte_fallback && o->byte_level)
        die("tokenizer '%s': model.byte_fallback is true with a ByteLevel pre-tokenizer; byte fallback is supported "
            "only for SentencePiece-style vocabularies (pre_tokenizer Metaspace or null)",
            file);
    want_empty_string(file, model, "model", "continuing_subword_prefix");
    want_empty_string(file, model, "model", "end_of_word_suffix");
    o->ignore_merges = get_bool(file, model, "model", "ignore_merges", 0);
}

/* TemplateProcessing: `single` may be [$A] or [SpecialToken, $A]; the
 * special token in front is the BOS. Anything appended after the sequence
 * (an EOS) is not implemented. */
static void parse_template(const char *file, const json_t *pp, const char *path, TokenizerOptions *o) {
    const json_t *single = json_object_get(pp, "single");
    if (!json_is_array(single)) die("tokenizer '%s': %s.single is not an array", file, path);
    size_t n = json_array_size(single);
    int seen_sequence = 0;
    const char *bos = NULL;
    for (size_t i = 0; i < n; i++) {
        const json_t *item = json_array_get(single, i);
        const json_t *special = json_object_get(item, "SpecialToken"), *seq = json_object_get(item, "Sequence");
        if (special && i == 0 && json_is_string(json_object_get(special, "id"))) {
            bos = json_string_value(json_object_get(special, "id"));
        } else if (seq && !seen_sequence && json_is_string(json_object_get(seq, "id")) &&
                   strcmp(json_string_value(json_object_get(seq, "id")), "A") == 0) {
            seen_sequence = 1;
        } else {
            die("tokenizer '%s': %s.single[%zu] is not supported (only a leading SpecialToken, the BOS, then "
                "Sequence A)",
                file, path, i);
        }
    }
    if (!seen_sequence) die("tokenizer '%s': %s.single has no Sequence A", file, path);
    if (!bos) return;
    if (o->bos_token) die("tokenizer '%s': %s: a second template that adds a BOS is not supported", file, path);
    const json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), bos), "ids");
    if (!json_is_array(ids) || json_array_size(ids) != 1 || !json_is_integer(json_array_get(ids, 0)) ||
        json_integer_value(json_array_get(ids, 0)) < 0)
        die("tokenizer '%s': %s.special_tokens[\"%s\"].ids is not one token id", file, path, bos);
    o->bos_token = xstrdup(bos);
    o->bos_id = json_integer_value(json_array_get(ids, 0));
}

static void parse_post_processor(const char *file, const json_t *pp, const char *path, TokenizerOptions *o) {
    if (is_null(pp)) return;
    const char *type = type_of(file, pp, path);
    if (strcmp(type, "ByteLevel") == 0) return; /* it only moves offsets */
    if (strcmp(type, "TemplateProcessing") == 0) {
        parse_template(file, pp, path, o);
        return;
    }
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(pp, "processors");
        if (!json_is_array(list)) die("tokenizer '%s': %s.processors is not an array", file, path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", path, i);
            parse_post_processor(file, json_array_get(list, i), sub, o);
        }
        return;
    }
    die("tokenizer '%s': %s.type is \"%s\"; supported: ByteLevel, TemplateProcessing, Sequence of them", file, path,
        type);
}

void tokenizer_options_parse(const char *file, const json_t *root, TokenizerOptions *o) {
    memset(o, 0, sizeof *o);
    o->bos_id = -1;
    static const char *const must_be_null[] = {"truncation", "padding"};
    for (size_t i = 0; i < sizeof must_be_null / sizeof must_be_null[0]; i++)
        if (!is_null(json_object_get(root, must_be_null[i])))
            die("tokenizer '%s': %s is set; only null is supported", file, must_be_null[i]);
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) die("tokenizer '%s': model is missing or not an object", file);
    parse_normalizer(file, json_object_get(root, "normalizer"), "normalizer", &o->normalizer);
    parse_pre_tokenizer(file, json_object_get(root, "pre_tokenizer"), o);
    parse_model(file, model, o);
    const json_t *decoder = json_object_get(root, "decoder");
    if (o->byte_level) {
        if (!is_null(decoder) && strcmp(type_of(file, decoder, "decoder"), "ByteLevel") != 0)
            die("tokenizer '%s': decoder.type is \"%s\"; with a ByteLevel pre-tokenizer only ByteLevel (or null) is "
                "supported",
                file, type_of(file, decoder, "decoder"));
    } else if (!is_null(decoder)) {
        o->decoder.present = 1;
        parse_decoder(file, decoder, "decoder", &o->decoder);
    }
    parse_post_processor(file, json_object_get(root, "post_processor"), "post_processor", o);
}

void tokenizer_options_free(TokenizerOptions *o) {
    for (int i = 0; i < o->n_stages; i++) free(o->stage_pattern[i]);
    free(o->bos_token);
    normalizer_free(&o->normalizer);
    tok_decoder_free(&o->decoder);
    memset(o, 0, sizeof *o);
}
