#ifndef KVCPT_SHARD_H
#define KVCPT_SHARD_H
/* Token shard file (one per ~shard-tokens of a split), little-endian:
 *
 *   offset 0   ShardHeader (64 bytes)
 *   64         uint32 tokens[n_tokens]           documents back to back
 *   ...        zero padding to a multiple of 8
 *   index_off  uint64 doc_offsets[n_docs + 1]    document d is
 *                                                tokens[doc_offsets[d] .. doc_offsets[d+1])
 *
 * The index follows the tokens so that a writer can stream tokens and write
 * the header last. A reader checks the magic, version, header size, that
 * index_off == align8(64 + 4 n_tokens), that the file size is exactly
 * index_off + 8 (n_docs + 1), and that the offsets run from 0 to n_tokens
 * without going backwards, before it trusts any of it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SHARD_MAGIC "KVTOKSHD"
#define SHARD_VERSION 1u
#define SHARD_HEADER_BYTES 64u
#define SHARD_FLAG_BOS 1u /* every document starts with the tokenizer's BOS (manifest: tokenizer.bos_id) */

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t n_docs;
    uint64_t n_tokens;
    uint64_t index_offset;
    uint32_t vocab_size;        /* every token id is below this */
    uint32_t flags;             /* SHARD_FLAG_* */
    uint8_t tokenizer_sha256[8]; /* first 8 bytes of the tokenizer.json SHA-256 */
    uint64_t reserved;          /* zero */
} ShardHeader;

/* --- writing (prepare) --- */
typedef struct {
    char *tmp_path;
    FILE *f;
    ShardHeader h;
    uint64_t *offsets;
    int64_t offsets_cap;
} ShardWriter;

/* Opens tmp_path for writing (the caller renames it once everything succeeded). */
void shard_writer_open(ShardWriter *w, const char *tmp_path, uint32_t vocab_size, uint32_t flags,
                       const char *tokenizer_sha256_hex);
void shard_writer_add_doc(ShardWriter *w, const uint32_t *tokens, int64_t n);
/* Writes padding, index and header; closes the file. */
void shard_writer_finish(ShardWriter *w);

/* --- reading (loader, evaluator) --- */
typedef struct {
    char *path;
    ShardHeader h;
    const uint8_t *map;      /* whole file, read-only mmap */
    size_t map_bytes;
    const uint32_t *tokens;
    uint64_t *doc_offsets;   /* copied out of the map (it is only 8-aligned by construction) */
} ShardFile;

/* Maps and validates; dies naming the file, the offset and what was expected. */
void shard_open(ShardFile *s, const char *path);
void shard_close(ShardFile *s);
/* Copies n tokens of document d starting at token `start`, checking each id
 * against the vocabulary (dies naming the file and the token offset). */
void shard_read(const ShardFile *s, int64_t d, int64_t start, int64_t n, uint32_t *out);
int64_t shard_doc_len(const ShardFile *s, int64_t d);

#endif
