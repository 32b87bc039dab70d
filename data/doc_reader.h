#ifndef KVCPT_DOC_READER_H
#define KVCPT_DOC_READER_H
/* Streams documents out of one input file:
 *   *.jsonl / *.json          one {"text": ...} object per line (RedPajama style)
 *   *.jsonl.zst / *.json.zst  the same, zstd-compressed, decompressed as it streams
 *   *.txt / *.txt.zst         the whole file is one document
 * Every problem (unreadable file, corrupt or truncated zstd, malformed JSON,
 * missing "text", invalid UTF-8) is fatal and names the file and the line or
 * byte offset. The raw file bytes are hashed (SHA-256) as they are read. */
#include <stddef.h>
#include <stdint.h>

typedef struct DocReader DocReader;

/* 1 when the name has one of the extensions above. */
int doc_reader_supports(const char *path);

DocReader *doc_reader_open(const char *path);
/* Returns 1 and the next document (valid until the next call), 0 at the end.
 * *line is the 1-based line the document came from (1 for text files). */
int doc_reader_next(DocReader *r, const char **text, size_t *len, int64_t *line);
/* Bytes of the file consumed so far (for progress). */
int64_t doc_reader_raw_bytes(const DocReader *r);
/* Closes; when sha256_hex is given the file must have been read to its end. */
void doc_reader_close(DocReader *r, char sha256_hex[65]);

#endif
