/* `kvcpt tokenize`: text on stdin -> ids on stdout, or the reverse. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/options.h"
#include "../common/util.h"
#include "../data/tokenizer.h"
#include "../data/utf8.h"
#include "commands.h"

typedef struct {
    const char *tokenizer;
    int decode, json, jsonl, allow_special, bos;
    int32_t bos_id; /* the tokenizer's, when --bos */
} TokenizeArgs;

static char *read_stdin(size_t *len) {
    ByteBuf b = {0};
    char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0) byte_buf_append(&b, chunk, n);
    if (ferror(stdin)) die("stdin: read error after %lld bytes: %s", (long long)b.n, strerror(errno));
    byte_buf_append(&b, "", 1);
    *len = (size_t)b.n - 1;
    return (char *)b.data;
}

static void print_ids(const TokenBuf *ids, int json) {
    fputs(json ? "{\"ids\": [" : "", stdout);
    for (int64_t i = 0; i < ids->n; i++) printf(i ? (json ? ", %u" : " %u") : "%u", ids->ids[i]);
    if (json) printf("], \"count\": %lld}\n", (long long)ids->n);
    else putchar('\n');
}

static void encode_text(TokEncoder *enc, const char *text, size_t len, const TokenizeArgs *a, const char *where,
                        TokenBuf *ids) {
    int64_t bad = utf8_first_invalid((const uint8_t *)text, len);
    if (bad >= 0) die("%s: invalid UTF-8 at byte offset %lld", where, (long long)bad);
    ids->n = 0;
    if (a->bos) token_buf_push(ids, (uint32_t)a->bos_id);
    if (!tok_encode(enc, text, len, a->allow_special, ids)) die("%s: %s", where, tok_encoder_error(enc));
}

/* --jsonl: one {"text": ...} per input line -> one line of ids per document. */
static void encode_jsonl(TokEncoder *enc, char *buf, size_t len, const TokenizeArgs *a) {
    TokenBuf ids = {0};
    int64_t line = 0;
    for (char *p = buf, *end = buf + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        line++;
        json_error_t err;
        json_t *doc = n ? json_loadb(p, n, JSON_ALLOW_NUL, &err) : NULL;
        if (n && !doc) die("stdin line %lld column %d: malformed JSON: %s", (long long)line, err.column, err.text);
        if (doc) {
            const json_t *text = json_object_get(doc, "text");
            if (!json_is_string(text)) die("stdin line %lld: no string field \"text\"", (long long)line);
            char where[64];
            snprintf(where, sizeof where, "stdin line %lld", (long long)line);
            encode_text(enc, json_string_value(text), json_string_length(text), a, where, &ids);
            print_ids(&ids, a->json);
            json_decref(doc);
        }
        p += n + 1;
    }
    token_buf_free(&ids);
}

/* Ids separated by white space or commas, optionally inside [ ], up to
 * the end of buf or (one_line) of its first line; returns where it stopped. */
static char *parse_ids(char *buf, const char *where, char *base, int one_line, TokenBuf *ids) {
    char *p = buf;
    while (*p && !(one_line && *p == '\n')) {
        if (strchr(" \t\r\n,[]", *p)) {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || errno || v > UINT32_MAX)
            die("%s: expected a token id at byte offset %lld, found '%.10s'", where, (long long)(p - base), p);
        token_buf_push(ids, (uint32_t)v);
        p = end;
    }
    return p;
}

static void decode_ids(const Tokenizer *t, const TokenBuf *ids, const char *where, int json) {
    ByteBuf out = {0};
    int64_t bad = tok_decode(t, ids->ids, ids->n, &out);
    if (bad >= 0)
        die("%s: id #%lld (%u) is outside the vocabulary of %d", where, (long long)bad, ids->ids[bad],
            tokenizer_vocab_size(t));
    /* no ids decode to no bytes, and out.data is still NULL then: jansson
     * takes a NULL string as an error, but "" is valid UTF-8 (Hugging Face's
     * decode([]) is "") */
    const char *text = out.n > 0 ? (const char *)out.data : "";
    if (json) {
        json_t *o = json_pack("{s:s%}", "text", text, (size_t)out.n);
        if (!o)
            die("%s: decoded bytes are not valid UTF-8 (a token sequence cut inside a character); drop --json for raw "
                "bytes",
                where);
        if (json_dumpf(o, stdout, JSON_ENSURE_ASCII) != 0) die("stdout: write failed: %s", strerror(errno));
        putchar('\n');
        json_decref(o);
    } else {
        fwrite_check(text, 1, (size_t)out.n, stdout, "stdout");
    }
    byte_buf_free(&out);
}

/* All of stdin is one sequence of ids; with --jsonl each line is one, and
 * each gives one {"text": ...} line. */
static void decode_stdin(const Tokenizer *t, char *buf, const TokenizeArgs *a) {
    TokenBuf ids = {0};
    if (!a->jsonl) {
        parse_ids(buf, "stdin", buf, 0, &ids);
        decode_ids(t, &ids, "stdin", a->json);
        token_buf_free(&ids);
        return;
    }
    int64_t line = 0;
    for (char *p = buf; *p;) {
        char where[64];
        snprintf(where, sizeof where, "stdin line %lld", (long long)++line);
        ids.n = 0;
        p = parse_ids(p, where, p, 1, &ids);
        decode_ids(t, &ids, where, 1);
        if (*p == '\n') p++;
    }
    token_buf_free(&ids);
}

int cmd_tokenize(int argc, char **argv) {
    TokenizeArgs a = {0};
    const Option opts[] = {
        {"tokenizer", OPT_STRING, &a.tokenizer, "PATH", "tokenizer.json; absent: the one `make setup` installs"},
        {"decode", OPT_FLAG, &a.decode, NULL, "read ids (space/comma separated or a JSON array), write the text"},
        {"json", OPT_FLAG, &a.json, NULL, "JSON output: {\"ids\": [...], \"count\": N} or {\"text\": ...}"},
        {"jsonl", OPT_FLAG, &a.jsonl, NULL,
         "input is JSON Lines {\"text\": ...}; one line of ids per document (with --decode: each line of ids -> one "
         "{\"text\": ...} line)"},
        {"allow-special", OPT_FLAG, &a.allow_special, NULL, "spelled-out special tokens (<|eot_id|>) become their ids"},
        {"bos", OPT_FLAG, &a.bos, NULL,
         "prepend the tokenizer's BOS (Llama 3: <|begin_of_text|>); refused when it has none"},
        {0},
    };
    if (options_parse("tokenize",
                      "BPE tokenizer (tokenizer.json, byte-level or SentencePiece-style): UTF-8 text on stdin -> token "
                      "ids on stdout.",
                      opts, argc, argv))
        return 0;
    char *path = a.tokenizer ? xstrdup(a.tokenizer) : tokenizer_default_path();
    Tokenizer *t = tokenizer_load(path);
    a.bos_id = tokenizer_bos_id(t);
    if (a.bos && !a.decode && a.bos_id < 0)
        die("tokenize --bos: tokenizer '%s' adds no BOS (its post_processor prepends no special token)", path);
    size_t len;
    char *input = read_stdin(&len);
    if (a.decode) {
        decode_stdin(t, input, &a);
    } else {
        TokEncoder *enc = tok_encoder_new(t);
        if (a.jsonl) {
            encode_jsonl(enc, input, len, &a);
        } else {
            TokenBuf ids = {0};
            encode_text(enc, input, len, &a, "stdin", &ids);
            print_ids(&ids, a.json);
            token_buf_free(&ids);
        }
        tok_encoder_free(enc);
    }
    if (fflush(stdout) != 0) die("stdout: write failed: %s", strerror(errno));
    free(input);
    free(path);
    tokenizer_free(t);
    return 0;
}
