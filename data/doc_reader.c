#include "doc_reader.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "../common/util.h"
#include "sha256.h"
#include "tokenizer.h"
#include "utf8.h"

#define RAW_CHUNK (1 << 20)

typedef enum { KIND_JSONL, KIND_TEXT } DocKind;

struct DocReader {
    char *path;
    FILE *f;
    DocKind kind;
    ZSTD_DStream *zstd;    /* NULL for uncompressed files */
    int zstd_mid_frame;    /* the last decompress call expects more input */
    int zstd_out_full;     /* ... or may hold more output without new input */
    Sha256 *sha;
    uint8_t *raw;          /* raw file chunk, and where we are in it */
    size_t raw_n, raw_pos;
    int64_t raw_total;     /* file bytes read so far */
    int eof;
    ByteBuf text;          /* decompressed bytes not yet consumed */
    int64_t text_pos;
    int64_t line;
    json_t *doc;
    int done;
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int parse_kind(const char *path, DocKind *kind, int *zst) {
    char name[4096];
    snprintf(name, sizeof name, "%s", path);
    *zst = ends_with(name, ".zst");
    if (*zst) name[strlen(name) - 4] = '\0';
    if (ends_with(name, ".jsonl") || ends_with(name, ".json")) *kind = KIND_JSONL;
    else if (ends_with(name, ".txt")) *kind = KIND_TEXT;
    else return 0;
    return 1;
}

int doc_reader_supports(const char *path) {
    DocKind k;
    int z;
    return parse_kind(path, &k, &z);
}

DocReader *doc_reader_open(const char *path) {
    DocReader *r = xcalloc(1, sizeof *r);
    int zst;
    if (!parse_kind(path, &r->kind, &zst))
        die("'%s': unknown input type; expected .jsonl, .json, .txt, optionally with .zst", path);
    r->path = xstrdup(path);
    r->f = fopen_check(path, "rb");
    if (zst) {
        r->zstd = ZSTD_createDStream();
        if (!r->zstd || ZSTD_isError(ZSTD_initDStream(r->zstd))) die("'%s': cannot initialise zstd", path);
        r->zstd_mid_frame = 1; /* an empty .zst holds no frame at all */
    }
    r->sha = sha256_new();
    r->raw = xmalloc(RAW_CHUNK);
    return r;
}

static int read_raw(DocReader *r) {
    if (r->eof) return 0;
    r->raw_n = fread(r->raw, 1, RAW_CHUNK, r->f);
    r->raw_pos = 0;
    if (ferror(r->f)) die("'%s': read error at offset %lld: %s", r->path, (long long)r->raw_total, strerror(errno));
    if (r->raw_n == 0) {
        r->eof = 1;
        return 0;
    }
    sha256_update(r->sha, r->raw, r->raw_n);
    r->raw_total += (int64_t)r->raw_n;
    return 1;
}

/* Drops consumed text, then appends more decompressed (or raw) bytes.
 * Returns 0 at the end of the input. */
static int fill_text(DocReader *r) {
    if (r->text_pos > 0) {
        memmove(r->text.data, r->text.data + r->text_pos, (size_t)(r->text.n - r->text_pos));
        r->text.n -= r->text_pos;
        r->text_pos = 0;
    }
    int pending_output = r->zstd && r->zstd_out_full;
    if (r->raw_pos >= r->raw_n && !pending_output && !read_raw(r)) {
        if (r->zstd && r->zstd_mid_frame)
            die("'%s': truncated zstd stream: the file ends inside a frame at offset %lld", r->path,
                (long long)r->raw_total);
        return 0;
    }
    if (!r->zstd) {
        byte_buf_append(&r->text, r->raw + r->raw_pos, r->raw_n - r->raw_pos);
        r->raw_pos = r->raw_n;
        return 1;
    }
    size_t out_cap = ZSTD_DStreamOutSize();
    if (r->text.n + (int64_t)out_cap > r->text.cap) {
        r->text.cap = 2 * (r->text.n + (int64_t)out_cap);
        r->text.data = xrealloc(r->text.data, (size_t)r->text.cap);
    }
    ZSTD_inBuffer in = {r->raw, r->raw_n, r->raw_pos};
    ZSTD_outBuffer out = {r->text.data + r->text.n, out_cap, 0};
    size_t ret = ZSTD_decompressStream(r->zstd, &out, &in);
    if (ZSTD_isError(ret))
        die("'%s': corrupt zstd data near compressed offset %lld: %s", r->path,
            (long long)(r->raw_total - (int64_t)r->raw_n + (int64_t)in.pos), ZSTD_getErrorName(ret));
    r->zstd_mid_frame = ret != 0;
    r->zstd_out_full = out.pos == out_cap;
    r->raw_pos = in.pos;
    r->text.n += (int64_t)out.pos;
    return 1;
}

static int next_text_file(DocReader *r, const char **text, size_t *len, int64_t *line) {
    while (fill_text(r)) {}
    int64_t bad = utf8_first_invalid(r->text.data, (size_t)r->text.n);
    if (bad >= 0)
        die("'%s': invalid UTF-8 at byte offset %lld%s", r->path, (long long)bad, r->zstd ? " (decompressed)" : "");
    byte_buf_append(&r->text, "", 1); /* NUL for convenience; not part of the text */
    *text = (const char *)r->text.data;
    *len = (size_t)r->text.n - 1;
    *line = 1;
    r->done = 1;
    return 1;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r", s[i])) return 0;
    return 1;
}

/* The next complete line [start, start+n) of text, growing the buffer as needed. */
static int next_line(DocReader *r, const char **start, size_t *n) {
    int64_t scanned = r->text_pos;
    for (;;) {
        const char *base = (const char *)r->text.data;
        const char *nl = r->text.n > scanned ? memchr(base + scanned, '\n', (size_t)(r->text.n - scanned)) : NULL;
        if (nl) {
            *start = base + r->text_pos;
            *n = (size_t)(nl - *start);
            r->text_pos = (int64_t)(nl - base) + 1;
            return 1;
        }
        int64_t keep = r->text_pos;
        scanned = r->text.n;
        if (!fill_text(r)) break;
        scanned -= keep; /* fill_text moved the unconsumed bytes to the front */
    }
    if (r->text_pos >= r->text.n) return 0;
    *start = (const char *)r->text.data + r->text_pos; /* last line without '\n' */
    *n = (size_t)(r->text.n - r->text_pos);
    r->text_pos = r->text.n;
    return 1;
}

static int next_jsonl(DocReader *r, const char **text, size_t *len, int64_t *line) {
    const char *s;
    size_t n;
    for (;;) {
        if (!next_line(r, &s, &n)) return 0;
        r->line++;
        if (!is_blank(s, n)) break;
    }
    int64_t bad = utf8_first_invalid((const uint8_t *)s, n);
    if (bad >= 0)
        die("'%s' line %lld: invalid UTF-8 at byte %lld of the line", r->path, (long long)r->line, (long long)bad);
    json_error_t err;
    json_decref(r->doc);
    r->doc = json_loadb(s, n, JSON_ALLOW_NUL, &err);
    if (!r->doc) die("'%s' line %lld column %d: malformed JSON: %s", r->path, (long long)r->line, err.column, err.text);
    const json_t *t = json_is_object(r->doc) ? json_object_get(r->doc, "text") : NULL;
    if (!json_is_string(t))
        die("'%s' line %lld: expected an object with a string field \"text\"", r->path, (long long)r->line);
    *text = json_string_value(t);
    *len = json_string_length(t);
    *line = r->line;
    return 1;
}

int doc_reader_next(DocReader *r, const char **text, size_t *len, int64_t *line) {
    if (r->done) return 0;
    int got = r->kind == KIND_TEXT ? next_text_file(r, text, len, line) : next_jsonl(r, text, len, line);
    if (!got) r->done = 1;
    return got;
}

int64_t doc_reader_raw_bytes(const DocReader *r) { return r->raw_total; }

void doc_reader_close(DocReader *r, char sha256_hex[65]) {
    if (sha256_hex) {
        KV_CHECK(r->eof, "'%s': closed before its end was read", r->path);
        sha256_finish(r->sha, sha256_hex);
    } else {
        char ignored[65];
        sha256_finish(r->sha, ignored);
    }
    fclose(r->f);
    if (r->zstd) ZSTD_freeDStream(r->zstd);
    json_decref(r->doc);
    byte_buf_free(&r->text);
    free(r->raw);
    free(r->path);
    free(r);
}
