#include "shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/util.h"

_Static_assert(sizeof(ShardHeader) == SHARD_HEADER_BYTES, "shard header must be 64 bytes");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards are little-endian; add byte swapping for this host");

static uint64_t align8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

void shard_writer_open(ShardWriter *w, const char *tmp_path, uint32_t vocab_size, uint32_t flags, const char *sha_hex) {
    memset(w, 0, sizeof *w);
    w->tmp_path = xstrdup(tmp_path);
    w->f = fopen_check(tmp_path, "wb");
    memcpy(w->h.magic, SHARD_MAGIC, 8);
    w->h.version = SHARD_VERSION;
    w->h.header_bytes = SHARD_HEADER_BYTES;
    w->h.vocab_size = vocab_size;
    w->h.flags = flags;
    for (int i = 0; i < 8; i++) {
        unsigned byte;
        if (sscanf(sha_hex + 2 * i, "%2x", &byte) != 1) die("bad tokenizer hash '%s'", sha_hex);
        w->h.tokenizer_sha256[i] = (uint8_t)byte;
    }
    ShardHeader placeholder = {0}; /* zero magic: an interrupted file never validates */
    fwrite_check(&placeholder, sizeof placeholder, 1, w->f, tmp_path);
    w->offsets_cap = 1024;
    w->offsets = xmalloc((size_t)w->offsets_cap * sizeof(uint64_t));
    w->offsets[0] = 0;
}

void shard_writer_add_doc(ShardWriter *w, const uint32_t *tokens, int64_t n) {
    fwrite_check(tokens, sizeof(uint32_t), (size_t)n, w->f, w->tmp_path);
    w->h.n_tokens += (uint64_t)n;
    w->h.n_docs++;
    if ((int64_t)w->h.n_docs + 1 > w->offsets_cap) {
        w->offsets_cap *= 2;
        w->offsets = xrealloc(w->offsets, (size_t)w->offsets_cap * sizeof(uint64_t));
    }
    w->offsets[w->h.n_docs] = w->h.n_tokens;
}

void shard_writer_finish(ShardWriter *w) {
    uint64_t end = SHARD_HEADER_BYTES + 4 * w->h.n_tokens;
    static const uint8_t zeros[8];
    fwrite_check(zeros, 1, (size_t)(align8(end) - end), w->f, w->tmp_path);
    w->h.index_offset = align8(end);
    fwrite_check(w->offsets, sizeof(uint64_t), (size_t)w->h.n_docs + 1, w->f, w->tmp_path);
    if (fseek(w->f, 0, SEEK_SET) != 0) die("'%s': seek failed: %s", w->tmp_path, strerror(errno));
    fwrite_check(&w->h, sizeof w->h, 1, w->f, w->tmp_path);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) die("'%s': flush failed: %s", w->tmp_path, strerror(errno));
    fclose_check(w->f, w->tmp_path);
    free(w->offsets);
    free(w->tmp_path);
    memset(w, 0, sizeof *w);
}

static void validate_header(const ShardFile *s, uint64_t size) {
    const ShardHeader *h = &s->h;
    const char *p = s->path;
    if (memcmp(h->magic, SHARD_MAGIC, 8) != 0)
        die("'%s': offset 0: not a kvcpt token shard (magic is not %s)", p, SHARD_MAGIC);
    if (h->version != SHARD_VERSION)
        die("'%s': offset 8: shard version %u, this build reads %u", p, h->version, SHARD_VERSION);
    if (h->header_bytes != SHARD_HEADER_BYTES)
        die("'%s': offset 12: header size %u, expected %u", p, h->header_bytes, SHARD_HEADER_BYTES);
    if (h->vocab_size == 0) die("'%s': offset 40: vocab_size is 0", p);
    if (h->n_tokens > (size - SHARD_HEADER_BYTES) / 4 || h->n_docs > size / 8)
        die("'%s': header claims %llu tokens and %llu documents, more than a %llu-byte file holds", p,
            (unsigned long long)h->n_tokens, (unsigned long long)h->n_docs, (unsigned long long)size);
    uint64_t want_index = align8(SHARD_HEADER_BYTES + 4 * h->n_tokens);
    if (h->index_offset != want_index)
        die("'%s': offset 32: index_offset %llu, expected %llu for %llu tokens", p, (unsigned long long)h->index_offset,
            (unsigned long long)want_index, (unsigned long long)h->n_tokens);
    uint64_t want_size = want_index + 8 * (h->n_docs + 1);
    if (size != want_size)
        die("'%s': file is %llu bytes, the header (%llu tokens, %llu documents) implies %llu; truncated or lying "
            "header",
            p, (unsigned long long)size, (unsigned long long)h->n_tokens, (unsigned long long)h->n_docs,
            (unsigned long long)want_size);
}

static void validate_offsets(const ShardFile *s) {
    const uint64_t *o = s->doc_offsets;
    if (o[0] != 0)
        die("'%s': offset %llu: first document offset is %llu, expected 0", s->path,
            (unsigned long long)s->h.index_offset, (unsigned long long)o[0]);
    for (uint64_t d = 0; d < s->h.n_docs; d++)
        if (o[d + 1] < o[d] || o[d + 1] > s->h.n_tokens)
            die("'%s': offset %llu: document %llu ends at token %llu, outside [%llu, %llu]", s->path,
                (unsigned long long)(s->h.index_offset + 8 * (d + 1)), (unsigned long long)d,
                (unsigned long long)o[d + 1], (unsigned long long)o[d], (unsigned long long)s->h.n_tokens);
    if (o[s->h.n_docs] != s->h.n_tokens)
        die("'%s': the last document ends at token %llu, but the header says %llu tokens", s->path,
            (unsigned long long)o[s->h.n_docs], (unsigned long long)s->h.n_tokens);
}

void shard_open(ShardFile *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = xstrdup(path);
    int fd = open_regular_file(path);
    if (fd < 0) die("cannot open shard '%s': %s", path, open_regular_strerror(errno));
    int64_t size = file_size(path);
    if (size < (int64_t)SHARD_HEADER_BYTES)
        die("'%s': %lld bytes, shorter than the %u-byte shard header", path, (long long)size, SHARD_HEADER_BYTES);
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) die("cannot map shard '%s': %s", path, strerror(errno));
    s->map = map;
    s->map_bytes = (size_t)size;
    memcpy(&s->h, s->map, sizeof s->h);
    validate_header(s, (uint64_t)size);
    s->tokens = (const uint32_t *)(s->map + SHARD_HEADER_BYTES);
    s->doc_offsets = xmalloc((size_t)(s->h.n_docs + 1) * sizeof(uint64_t));
    memcpy(s->doc_offsets, s->map + s->h.index_offset, (size_t)(s->h.n_docs + 1) * sizeof(uint64_t));
    validate_offsets(s);
}

void shard_close(ShardFile *s) {
    if (s->map) munmap((void *)s->map, s->map_bytes);
    free(s->doc_offsets);
    free(s->path);
    memset(s, 0, sizeof *s);
}

int64_t shard_doc_len(const ShardFile *s, int64_t d) { return (int64_t)(s->doc_offsets[d + 1] - s->doc_offsets[d]); }

void shard_read(const ShardFile *s, int64_t d, int64_t start, int64_t n, uint32_t *out) {
    KV_CHECK(d >= 0 && (uint64_t)d < s->h.n_docs && start >= 0 && n >= 0 && start + n <= shard_doc_len(s, d),
             "'%s': read of tokens [%lld, %lld) of document %lld (length %lld) is out of range", s->path,
             (long long)start, (long long)(start + n), (long long)d,
             (long long)(d >= 0 && (uint64_t)d < s->h.n_docs ? shard_doc_len(s, d) : -1));
    const uint32_t *src = s->tokens + s->doc_offsets[d] + (uint64_t)start;
    for (int64_t i = 0; i < n; i++) {
        if (src[i] >= s->h.vocab_size)
            die("'%s': byte offset %llu: token id %u is outside the vocabulary of %u", s->path,
                (unsigned long long)(SHARD_HEADER_BYTES + 4 * (uint64_t)(src + i - s->tokens)), src[i],
                s->h.vocab_size);
        out[i] = src[i];
    }
}
